//! The thread-safe indexed store (client-go `tools/cache/thread_safe_store.go`).

use std::{
    collections::{HashMap, HashSet, hash_map::Entry},
    fmt,
    marker::PhantomData,
    ops::{Deref, DerefMut},
    sync::Arc,
};

use kube::{Resource, core::Selector};

use crate::reflector::decode::{ItemBytes, ListedMeta};
use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use serde::{Serialize, de::DeserializeOwned};

use super::{
    IndexError, IndexFn, Indexers, KeyError, NAMESPACE_INDEX, ObjectKey,
    index::{Index, Values, values_of},
    key_of, namespace_index_fn,
    storage::{
        CacheStats, CacheStorage, Packed, PackedBody, SlotMap, Snapshot, Storage, StorageError,
        UnreadableSink, decoded::Decoded,
    },
};

/// One object of [`Indexer::replace_streaming`]'s list.
pub(crate) enum Listed<K> {
    /// This object.
    Object(Arc<K>),
    /// The object the store holds under the key (a relist of an unchanged object): kept as it
    /// is stored, with its index values, never decoded. Left out if the store holds none.
    Cached,
    /// The object as the FIFO held it packed: stored as it is, decoded only if an index needs
    /// it (see [`Indexer::replace_streaming`]).
    Packed(PackedBody),
}

/// What [`Indexer::replace_streaming`] did, for the handlers' notifications: the keys stored,
/// in list order, and the store's previous contents, taken out one key at a time as each is
/// notified. So neither the objects stored nor those replaced are held as a second set of
/// snapshots beside the two stores, and the previous store shrinks as the notifications go out.
///
/// What the store holds now is read as each key is taken, so this assumes the caller is the
/// store's only writer until it is done (the informer, which applies the relist and notifies
/// under `block_deltas`); a key written meanwhile by someone else is told of as it is then.
pub(crate) trait Replaced<K> {
    /// The keys stored, in list order (a key listed twice once, where it first came).
    fn take_keys(&mut self) -> Vec<ObjectKey>;
    /// The previous objects whose keys the list lacks, taken out, sorted by key.
    fn take_gone(&mut self) -> Vec<(ObjectKey, Snapshot<K>)>;
    /// The listed objects left out because they did not decode when an index needed them.
    fn take_undecodable(&mut self) -> Vec<(ObjectKey, StorageError)>;
    /// `(old, new)`: a snapshot of what the store held under `key` before (taken out of the
    /// previous contents, so handed out once) and of what it holds now.
    fn take(&mut self, key: &ObjectKey) -> (Option<Snapshot<K>>, Option<Snapshot<K>>);
}

/// [`Replaced`] over a [`Core`]: the previous contents' items (their indices are dropped at
/// once), dropped (with no lock held) with it.
struct Replacement<'a, K, S: Storage<K>> {
    core: &'a Core<K, S>,
    keys: Vec<ObjectKey>,
    previous: Items<S::Slot>,
    undecodable: Vec<(ObjectKey, StorageError)>,
}

impl<K, S: Storage<K>> Replaced<K> for Replacement<'_, K, S> {
    fn take_keys(&mut self) -> Vec<ObjectKey> {
        std::mem::take(&mut self.keys)
    }

    fn take_undecodable(&mut self) -> Vec<(ObjectKey, StorageError)> {
        std::mem::take(&mut self.undecodable)
    }

    fn take_gone(&mut self) -> Vec<(ObjectKey, Snapshot<K>)> {
        let mut gone: Vec<ObjectKey> = {
            let now = self.core.read();
            self.previous
                .0
                .keys()
                .filter(|key| !now.items.0.contains_key(*key))
                .cloned()
                .collect()
        };
        gone.sort_unstable();
        gone.into_iter()
            .filter_map(|key| {
                let item = self.previous.0.remove(&key)?;
                let snapshot = self.core.storage.snapshot(&key, &item.slot);
                Some((key, snapshot))
            })
            .collect()
    }

    fn take(&mut self, key: &ObjectKey) -> (Option<Snapshot<K>>, Option<Snapshot<K>>) {
        let old = self
            .previous
            .0
            .remove(key)
            .map(|item| self.core.storage.snapshot(key, &item.slot));
        let new = self
            .core
            .read()
            .items
            .0
            .get(key)
            .map(|item| self.core.storage.snapshot(key, &item.slot));
        (old, new)
    }
}

/// A thread-safe store of objects keyed by [`ObjectKey`], with named indices
/// (client-go's `cache.Indexer` over a `ThreadSafeStore`).
///
/// Client-go's `Resync` is not here: on a store it does nothing (the informer's resync goes
/// through its FIFO).
///
/// Cloning is cheap: clones share the same store. Reads return `Arc<K>`. In the default
/// [`CacheStorage::Decoded`] mode that is the very `Arc` the informer stored, never a copy; in
/// `CacheStorage::Compact` mode (feature `compact`) it is the object someone already holds, or
/// one decoded for this read ([`Indexer::with_storage`]).
///
/// ```
/// use std::sync::Arc;
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kube::api::ObjectMeta;
/// use kube_informer::{Indexer, NAMESPACE_INDEX};
///
/// let store = Indexer::<ConfigMap>::new();
/// let cm = ConfigMap {
///     metadata: ObjectMeta { name: Some("a".into()), namespace: Some("ns".into()), ..Default::default() },
///     ..Default::default()
/// };
/// store.add(Arc::new(cm)).unwrap();
/// assert!(store.get_by_key("ns/a").is_some());
/// assert_eq!(store.by_index(NAMESPACE_INDEX, "ns").unwrap().len(), 1);
/// ```
pub struct Indexer<K> {
    core: Arc<dyn Backend<K>>,
}

/// What one op of [`Indexer::transaction_snapshots`] replaced (or removed) and stored.
pub(crate) struct Written<K> {
    /// The object the op replaced or removed, if any.
    pub(crate) old: Option<Snapshot<K>>,
    /// The object a put stored (`None` for a removal).
    pub(crate) new: Option<Snapshot<K>>,
}

/// One change of a [`Indexer::transaction`].
#[derive(Debug)]
pub enum StoreOp<K> {
    /// Store the object under the key (add or update).
    Put(ObjectKey, Arc<K>),
    /// Remove the key.
    Remove(ObjectKey),
}

impl<K> Clone for Indexer<K> {
    fn clone(&self) -> Self {
        Self {
            core: Arc::clone(&self.core),
        }
    }
}

impl<K> fmt::Debug for Indexer<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Indexer")
            .field("storage", &self.core.storage_name())
            .field("len", &self.core.len())
            .field("indexers", &self.core.indexers())
            .finish()
    }
}

impl<K: Resource + Send + Sync + 'static> Default for Indexer<K> {
    fn default() -> Self {
        Self::new()
    }
}

/// The store's operations, independent of how objects are held: [`Indexer`] is a handle on one
/// of these, a [`Core`] over some [`Storage`].
trait Backend<K>: Send + Sync {
    fn storage_name(&self) -> &'static str;
    fn len(&self) -> usize;
    fn get(&self, key: &str) -> Result<Option<Arc<K>>, StorageError>;
    fn resource_version(&self, key: &str) -> Option<String>;
    fn list(&self, selector: Option<&Selector>) -> Vec<Arc<K>>;
    fn list_keys(&self) -> Vec<ObjectKey>;
    fn replace(&self, objs: Vec<(ObjectKey, Arc<K>)>, resource_version: Option<&str>);
    fn replace_streaming<'a>(
        &'a self,
        objs: &mut dyn Iterator<Item = (ObjectKey, Listed<K>)>,
        resource_version: &str,
    ) -> Box<dyn Replaced<K> + 'a>;
    fn snapshots(&self) -> Vec<Snapshot<K>>;
    fn put(&self, key: ObjectKey, obj: Arc<K>, want_old: bool) -> Option<Arc<K>>;
    fn take(&self, key: &ObjectKey, want_old: bool) -> Option<Arc<K>>;
    fn transaction(
        &self,
        ops: Vec<StoreOp<K>>,
        resource_version: Option<&str>,
    ) -> Vec<Option<Arc<K>>>;
    fn transaction_snapshots(
        &self,
        ops: Vec<StoreOp<K>>,
        resource_version: Option<&str>,
    ) -> Vec<Written<K>>;
    fn index(&self, name: &str, obj: &K) -> Result<Vec<Arc<K>>, IndexError>;
    fn by_index(
        &self,
        name: &str,
        value: &str,
        selector: Option<&Selector>,
    ) -> Result<Vec<Arc<K>>, IndexError>;
    fn index_keys(&self, name: &str, value: &str) -> Result<Vec<ObjectKey>, IndexError>;
    fn list_index_func_values(&self, name: &str) -> Vec<String>;
    fn indexers(&self) -> Vec<String>;
    fn add_indexers(&self, indexers: Indexers<K>) -> Result<(), IndexError>;
    fn for_each(&self, f: &mut dyn FnMut(&ObjectKey, &Arc<K>));
    fn last_resource_version(&self) -> String;
    fn bookmark(&self, resource_version: &str);
    fn set_resource_version_metric(&self, metric: Arc<dyn crate::workqueue::SettableGaugeMetric>);
    fn stats(&self) -> CacheStats;
    #[cfg(test)]
    fn sweep_len(&self) -> usize;
    fn report_unreadable(&self, sink: UnreadableSink);
    fn packs(&self) -> bool;
    fn pack(&self, key: &ObjectKey, obj: &K) -> Option<Packed>;
    fn pack_bytes(
        &self,
        key: &ObjectKey,
        bytes: ItemBytes<'_>,
        meta: &ListedMeta,
    ) -> Option<Packed>;
    fn decode_bytes(&self, key: &ObjectKey, bytes: ItemBytes<'_>) -> Result<Arc<K>, StorageError>;
    fn unpack(&self, packed: Packed) -> Result<Arc<K>, StorageError>;
    fn peek(&self, packed: &Packed) -> Result<Arc<K>, StorageError>;
}

/// A store over one kind of [`Storage`].
struct Core<K, S: Storage<K>> {
    storage: S,
    /// Taken only through [`Core::read`] and [`Core::write`].
    inner: RwLock<Inner<K, S::Slot>>,
}

/// A guard of [`Core::inner`] that, once it has released the lock, lets the storage free what it
/// let go of under it ([`Storage::release`]): readers and writers never wait for those frees.
/// Fields drop in declaration order: the guard first (keep it first, and give `Locked` no
/// `Drop` of its own).
struct Locked<'a, G, K, S: Storage<K>> {
    guard: G,
    _release: ReleaseOnDrop<'a, K, S>,
}

/// The storage, and whether the lock is the write lock.
struct ReleaseOnDrop<'a, K, S: Storage<K>>(&'a S, bool, PhantomData<fn() -> K>);

impl<K, S: Storage<K>> Drop for ReleaseOnDrop<'_, K, S> {
    fn drop(&mut self) {
        self.0.release(self.1);
    }
}

impl<G: Deref, K, S: Storage<K>> Deref for Locked<'_, G, K, S> {
    type Target = G::Target;

    fn deref(&self) -> &G::Target {
        &self.guard
    }
}

impl<G: DerefMut, K, S: Storage<K>> DerefMut for Locked<'_, G, K, S> {
    fn deref_mut(&mut self) -> &mut G::Target {
        &mut self.guard
    }
}

struct NamedIndex<K> {
    name: String,
    func: IndexFn<K>,
    /// The built-in [`NAMESPACE_INDEX`], whose value is the key's namespace: computed from the
    /// key when the object is not at hand (a packed object of a relist).
    from_key: bool,
    index: Index,
}

/// The [`NAMESPACE_INDEX`] values of the object under `key` (client-go's
/// `MetaNamespaceIndexFunc`: cluster-scoped objects under `""`).
fn namespace_values(key: &ObjectKey) -> Values {
    values_of(vec![key.namespace().unwrap_or_default().to_owned()])
}

/// What a write replaced or removed, kept until the write lock is released.
enum Previous<K, S> {
    /// Nothing was there.
    None,
    /// The very object stored again (a resync): nothing was replaced.
    Same(Arc<K>),
    /// The slot taken out of the store, with its key.
    Slot(ObjectKey, S),
}

/// One stored object: its slot and, per index (in `Inner::indices` order), its values.
struct Item<S> {
    slot: S,
    values: Box<[Values]>,
}

struct Items<S>(HashMap<ObjectKey, Item<S>>);

impl<S> SlotMap<S> for Items<S> {
    fn slot(&self, key: &ObjectKey) -> Option<&S> {
        self.0.get(key).map(|i| &i.slot)
    }

    fn slot_mut(&mut self, key: &ObjectKey) -> Option<&mut S> {
        self.0.get_mut(key).map(|i| &mut i.slot)
    }
}

struct Inner<K, S> {
    items: Items<S>,
    /// Few indices per store, so a `Vec` scanned by name beats hashing the name.
    indices: Vec<NamedIndex<K>>,
    /// The resourceVersion of the last change applied in order (client-go
    /// `LastStoreSyncResourceVersion`); empty until an in-order informer applies one.
    resource_version: String,
    /// Reports every change of `resource_version` (client-go `informer_store_resource_version`).
    rv_metric: Option<Arc<dyn crate::workqueue::SettableGaugeMetric>>,
}

impl<K, S> Inner<K, S> {
    fn set_resource_version(&mut self, rv: &str) {
        rv.clone_into(&mut self.resource_version);
        if let (Some(m), Some(v)) = (
            &self.rv_metric,
            crate::informer::resource_version_metric_value(rv),
        ) {
            m.set(v);
        }
    }

    fn index(&self, name: &str) -> Result<&NamedIndex<K>, IndexError> {
        self.indices
            .iter()
            .find(|i| i.name == name)
            .ok_or_else(|| IndexError::NoSuchIndex(name.to_owned()))
    }

    /// The values of `obj` in every index, in index order.
    fn values_of(&self, key: &ObjectKey, obj: &K) -> Box<[Values]> {
        self.indices
            .iter()
            .map(|idx| values_of(index_values(&idx.name, &idx.func, key, obj)))
            .collect()
    }
}

/// The index values of `obj`. An index function that panics is caught, logged, and taken
/// to give no values: the object stays in the store (and reaches the handlers), just not
/// under this index, and the store's indices stay consistent, since the values are kept beside
/// the object and removed as they were added.
fn index_values<K>(name: &str, func: &IndexFn<K>, key: &ObjectKey, obj: &K) -> Vec<String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| func(obj))).unwrap_or_else(|panic| {
        tracing::error!(
            index = name,
            key = %key,
            panic = %crate::panic_message(&*panic),
            "index function panicked; the object is left out of this index"
        );
        Vec::new()
    })
}

/// Notes a stored object that did not decode. The storage has logged it already, at error
/// level the first time for that version and at debug level after (see [`StorageError`]), so
/// a controller that reads it at every sync does not flood its log.
fn report(e: &StorageError) {
    tracing::debug!(error = %e, "cached object unreadable; left out of this read");
}

/// How [`Core::put_from`] makes an object's slot.
enum Source<'a, Slot> {
    /// A single write: stored through the storage's hot set.
    Written,
    /// One object of a list applied whole: stored cold ([`Storage::store_listed`]).
    Listed,
    /// This very object as a slot of the store being replaced holds it: the new slot shares its
    /// stored form, which is not encoded again.
    Kept(&'a Slot),
}

impl<K, S: Storage<K>> Core<K, S> {
    fn new(storage: S) -> Self {
        Self {
            storage,
            inner: RwLock::new(Inner {
                items: Items(HashMap::new()),
                indices: Vec::new(),
                resource_version: String::new(),
                rv_metric: None,
            }),
        }
    }

    /// The store's read lock, with [`Storage::release`] once it is released.
    fn read(&self) -> Locked<'_, RwLockReadGuard<'_, Inner<K, S::Slot>>, K, S> {
        Locked {
            guard: self.inner.read(),
            _release: ReleaseOnDrop(&self.storage, false, PhantomData),
        }
    }

    /// The store's write lock, with [`Storage::release`] once it is released.
    fn write(&self) -> Locked<'_, RwLockWriteGuard<'_, Inner<K, S::Slot>>, K, S> {
        Locked {
            guard: self.inner.write(),
            _release: ReleaseOnDrop(&self.storage, true, PhantomData),
        }
    }

    fn load(&self, key: &ObjectKey, slot: &S::Slot) -> Option<Arc<K>> {
        self.storage.load(key, slot).map_err(|e| report(&e)).ok()
    }

    /// The objects under `keys` that `selector` (if any) selects: labels are checked before
    /// loading, so a compact store decodes only what it returns.
    fn objects<'a>(
        &self,
        inner: &Inner<K, S::Slot>,
        keys: impl Iterator<Item = &'a ObjectKey>,
        selector: Option<&Selector>,
    ) -> Vec<Arc<K>> {
        let out = keys
            .filter_map(|k| inner.items.0.get_key_value(k))
            .filter(|(_, item)| selector.is_none_or(|s| self.storage.labels_match(&item.slot, s)))
            .filter_map(|(k, item)| self.load(k, &item.slot))
            .collect();
        self.storage.tidy(&inner.items);
        out
    }

    /// Stores `obj` under `key` and maintains every index: one hash lookup for the item.
    /// Returns what it replaced, to be read (if wanted) once the write lock is released.
    fn put(
        &self,
        inner: &mut Inner<K, S::Slot>,
        key: ObjectKey,
        obj: Arc<K>,
    ) -> Previous<K, S::Slot> {
        self.put_from(inner, key, obj, Source::Written)
    }

    /// [`put`](Self::put), with the new slot made as `source` says.
    fn put_from(
        &self,
        inner: &mut Inner<K, S::Slot>,
        key: ObjectKey,
        obj: Arc<K>,
        source: Source<'_, S::Slot>,
    ) -> Previous<K, S::Slot> {
        let store = |key: &ObjectKey| match source {
            Source::Kept(slot) => self.storage.restore(key, slot, &obj),
            Source::Listed => self.storage.store_listed(key, &obj),
            Source::Written => self.storage.store(key, &obj),
        };
        let values = match inner.items.0.get(&key) {
            // The same `Arc` again (a resync re-storing the cached object) cannot have moved.
            Some(item) if self.storage.holds(&item.slot, &obj) => None,
            _ => Some(inner.values_of(&key, &obj)),
        };
        match inner.items.0.entry(key) {
            Entry::Occupied(mut entry) => {
                let Some(values) = values else {
                    return Previous::Same(obj);
                };
                let slot = store(entry.key());
                let key = entry.key().clone();
                let item = entry.get_mut();
                for ((idx, old_values), new_values) in
                    inner.indices.iter_mut().zip(&item.values).zip(&values)
                {
                    idx.index.update(&key, old_values, new_values);
                }
                let old = std::mem::replace(item, Item { slot, values });
                self.storage.drop_slot(&old.slot);
                Previous::Slot(key, old.slot)
            }
            Entry::Vacant(entry) => {
                let values = values.unwrap_or_default();
                for (idx, values) in inner.indices.iter_mut().zip(&values) {
                    idx.index.add(entry.key(), values);
                }
                let slot = store(entry.key());
                entry.insert(Item { slot, values });
                Previous::None
            }
        }
    }

    fn take(&self, inner: &mut Inner<K, S::Slot>, key: &ObjectKey) -> Previous<K, S::Slot> {
        let Some((key, item)) = inner.items.0.remove_entry(key) else {
            return Previous::None;
        };
        for (idx, values) in inner.indices.iter_mut().zip(&item.values) {
            idx.index.remove(&key, values);
        }
        self.storage.drop_slot(&item.slot);
        Previous::Slot(key, item.slot)
    }

    /// The object a write replaced, read outside the store's lock: a compact store may have to
    /// decode it, and readers need not wait for that.
    fn previous(&self, previous: Previous<K, S::Slot>) -> Option<Arc<K>> {
        match previous {
            Previous::None => None,
            Previous::Same(obj) => Some(obj),
            Previous::Slot(key, slot) => self
                .storage
                .load_detached(&key, &slot)
                .map_err(|e| report(&e))
                .ok(),
        }
    }

    /// After a write: the storage's upkeep.
    fn after_write(&self, inner: &mut Inner<K, S::Slot>) {
        self.storage.maintain(&mut inner.items);
    }
}

impl<K, S> Backend<K> for Core<K, S>
where
    K: Send + Sync + 'static,
    S: Storage<K>,
{
    fn storage_name(&self) -> &'static str {
        self.storage.name()
    }

    fn len(&self) -> usize {
        self.read().items.0.len()
    }

    fn get(&self, key: &str) -> Result<Option<Arc<K>>, StorageError> {
        let inner = self.read();
        let Some((key, item)) = inner.items.0.get_key_value(key) else {
            return Ok(None);
        };
        let obj = self.storage.load(key, &item.slot);
        self.storage.tidy(&inner.items);
        obj.map(Some)
    }

    fn resource_version(&self, key: &str) -> Option<String> {
        let inner = self.read();
        self.storage.resource_version(&inner.items.0.get(key)?.slot)
    }

    fn list(&self, selector: Option<&Selector>) -> Vec<Arc<K>> {
        let inner = self.read();
        self.objects(&inner, inner.items.0.keys(), selector)
    }

    fn list_keys(&self) -> Vec<ObjectKey> {
        self.read().items.0.keys().cloned().collect()
    }

    fn replace(&self, objs: Vec<(ObjectKey, Arc<K>)>, resource_version: Option<&str>) {
        let mut objs = objs.into_iter().map(|(k, o)| (k, Listed::Object(o)));
        let fresh = self.fresh(&mut objs, |_| {}, &mut Vec::new());
        let old = self.swap(fresh, resource_version);
        self.settle_all();
        // Freeing the old objects can take a while; readers need not wait for it.
        drop(old);
    }

    fn replace_streaming<'a>(
        &'a self,
        objs: &mut dyn Iterator<Item = (ObjectKey, Listed<K>)>,
        resource_version: &str,
    ) -> Box<dyn Replaced<K> + 'a> {
        let mut keys = Vec::new();
        let mut seen = HashSet::new();
        let mut undecodable = Vec::new();
        // A key listed twice (a server's fault) is told of once, where it first came.
        let fresh = self.fresh(
            objs,
            |key| {
                if seen.insert(key.clone()) {
                    keys.push(key.clone());
                }
            },
            &mut undecodable,
        );
        drop(seen);
        let Inner {
            items: previous, ..
        } = self.swap(fresh, Some(resource_version));
        self.settle_all();
        Box::new(Replacement {
            core: self,
            keys,
            previous,
            undecodable,
        })
    }

    fn snapshots(&self) -> Vec<Snapshot<K>> {
        let inner = self.read();
        inner
            .items
            .0
            .iter()
            .map(|(key, item)| self.storage.snapshot(key, &item.slot))
            .collect()
    }

    fn put(&self, key: ObjectKey, obj: Arc<K>, want_old: bool) -> Option<Arc<K>> {
        let mut inner = self.write();
        let old = Core::put(self, &mut inner, key, obj);
        self.after_write(&mut inner);
        drop(inner);
        // Unwanted, the old object is still dropped here, outside the lock.
        want_old.then(|| self.previous(old)).flatten()
    }

    fn take(&self, key: &ObjectKey, want_old: bool) -> Option<Arc<K>> {
        let mut inner = self.write();
        let old = Core::take(self, &mut inner, key);
        self.after_write(&mut inner);
        drop(inner);
        want_old.then(|| self.previous(old)).flatten()
    }

    fn transaction(
        &self,
        ops: Vec<StoreOp<K>>,
        resource_version: Option<&str>,
    ) -> Vec<Option<Arc<K>>> {
        let mut inner = self.write();
        let previous: Vec<_> = ops
            .into_iter()
            .map(|op| match op {
                StoreOp::Put(key, obj) => Core::put(self, &mut inner, key, obj),
                StoreOp::Remove(key) => Core::take(self, &mut inner, &key),
            })
            .collect();
        if let Some(rv) = resource_version.filter(|rv| !rv.is_empty()) {
            inner.set_resource_version(rv);
        }
        self.after_write(&mut inner);
        drop(inner);
        previous.into_iter().map(|p| self.previous(p)).collect()
    }

    fn transaction_snapshots(
        &self,
        ops: Vec<StoreOp<K>>,
        resource_version: Option<&str>,
    ) -> Vec<Written<K>> {
        let mut inner = self.write();
        let written: Vec<_> = ops
            .into_iter()
            .map(|op| match op {
                StoreOp::Put(key, obj) => {
                    let previous = Core::put(self, &mut inner, key.clone(), obj);
                    // Unshared: the writer is about to drop the object.
                    let new = inner
                        .items
                        .0
                        .get(&key)
                        .map(|item| self.storage.snapshot_unshared(&key, &item.slot));
                    (previous, new)
                }
                StoreOp::Remove(key) => (Core::take(self, &mut inner, &key), None),
            })
            .collect();
        if let Some(rv) = resource_version.filter(|rv| !rv.is_empty()) {
            inner.set_resource_version(rv);
        }
        self.after_write(&mut inner);
        drop(inner);
        // The replaced slots' snapshots are taken outside the lock; nothing is decoded.
        written
            .into_iter()
            .map(|(previous, new)| {
                let old = match previous {
                    Previous::None => None,
                    // The very object stored again: its slot's snapshot, for both.
                    Previous::Same(_) => new.clone(),
                    Previous::Slot(key, slot) => Some(self.storage.snapshot(&key, &slot)),
                };
                Written { old, new }
            })
            .collect()
    }

    fn index(&self, name: &str, obj: &K) -> Result<Vec<Arc<K>>, IndexError> {
        let inner = self.read();
        let named = inner.index(name)?;
        // The user's function, on an object of theirs: a panic is theirs to hear of, not to
        // unwind through the store's read lock into their thread.
        let values = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (named.func)(obj)))
            .map_err(|panic| {
            tracing::error!(
                index = name,
                panic = %crate::panic_message(&*panic),
                "index function panicked on the object of a query"
            );
            IndexError::Panicked(name.to_owned())
        })?;
        if let [value] = values.as_slice() {
            return Ok(named
                .index
                .keys(value)
                .map(|keys| self.objects(&inner, keys.iter(), None))
                .unwrap_or_default());
        }
        let mut keys: HashSet<&ObjectKey> = HashSet::new();
        for value in &values {
            keys.extend(named.index.keys(value).into_iter().flatten());
        }
        Ok(self.objects(&inner, keys.into_iter(), None))
    }

    fn by_index(
        &self,
        name: &str,
        value: &str,
        selector: Option<&Selector>,
    ) -> Result<Vec<Arc<K>>, IndexError> {
        let inner = self.read();
        let named = inner.index(name)?;
        Ok(named
            .index
            .keys(value)
            .map(|keys| self.objects(&inner, keys.iter(), selector))
            .unwrap_or_default())
    }

    fn index_keys(&self, name: &str, value: &str) -> Result<Vec<ObjectKey>, IndexError> {
        let inner = self.read();
        let named = inner.index(name)?;
        Ok(named
            .index
            .keys(value)
            .map(|keys| keys.iter().cloned().collect())
            .unwrap_or_default())
    }

    fn list_index_func_values(&self, name: &str) -> Vec<String> {
        let inner = self.read();
        inner
            .index(name)
            .map(|named| named.index.values().cloned().collect())
            .unwrap_or_default()
    }

    fn indexers(&self) -> Vec<String> {
        self.read().indices.iter().map(|i| i.name.clone()).collect()
    }

    fn add_indexers(&self, indexers: Indexers<K>) -> Result<(), IndexError> {
        let mut inner = self.write();
        if let Some(name) = indexers
            .keys()
            .find(|n| inner.indices.iter().any(|i| &i.name == *n))
        {
            return Err(IndexError::DuplicateIndex(name.clone()));
        }
        self.push_indices(&mut inner, indexers.into_iter().collect());
        self.after_write(&mut inner);
        Ok(())
    }

    fn for_each(&self, f: &mut dyn FnMut(&ObjectKey, &Arc<K>)) {
        let inner = self.read();
        for (key, item) in &inner.items.0 {
            if let Some(obj) = self.load(key, &item.slot) {
                f(key, &obj);
            }
        }
        self.storage.tidy(&inner.items);
    }

    fn last_resource_version(&self) -> String {
        self.read().resource_version.clone()
    }

    fn bookmark(&self, resource_version: &str) {
        if !resource_version.is_empty() {
            self.write().set_resource_version(resource_version);
        }
    }

    fn set_resource_version_metric(&self, metric: Arc<dyn crate::workqueue::SettableGaugeMetric>) {
        self.write().rv_metric = Some(metric);
    }

    fn stats(&self) -> CacheStats {
        self.storage.stats()
    }

    #[cfg(test)]
    fn sweep_len(&self) -> usize {
        self.storage.sweep_len()
    }

    fn report_unreadable(&self, sink: UnreadableSink) {
        self.storage.report_unreadable(sink);
    }

    fn packs(&self) -> bool {
        self.storage.packs()
    }

    fn pack(&self, key: &ObjectKey, obj: &K) -> Option<Packed> {
        let body = self.storage.pack(key, obj)?;
        Some(Packed {
            key: key.clone(),
            body,
        })
    }

    fn decode_bytes(&self, key: &ObjectKey, bytes: ItemBytes<'_>) -> Result<Arc<K>, StorageError> {
        self.storage.decode_bytes(key, bytes)
    }

    fn pack_bytes(
        &self,
        key: &ObjectKey,
        bytes: ItemBytes<'_>,
        meta: &ListedMeta,
    ) -> Option<Packed> {
        let body = self.storage.pack_bytes(key, bytes, meta)?;
        Some(Packed {
            key: key.clone(),
            body,
        })
    }

    fn unpack(&self, packed: Packed) -> Result<Arc<K>, StorageError> {
        let Packed { key, body } = packed;
        match body {
            PackedBody::Cached => self.get(key.as_str())?.ok_or(StorageError::Gone { key }),
            // Without the `compact` feature a cached reference is all a `Packed` can be.
            #[cfg_attr(not(feature = "compact"), allow(unreachable_patterns))]
            body => self.storage.unpack(&key, body),
        }
    }

    fn peek(&self, packed: &Packed) -> Result<Arc<K>, StorageError> {
        match &packed.body {
            PackedBody::Cached => {
                self.get(packed.key.as_str())?
                    .ok_or_else(|| StorageError::Gone {
                        key: packed.key.clone(),
                    })
            }
            #[cfg_attr(not(feature = "compact"), allow(unreachable_patterns))]
            body => self.storage.peek(&packed.key, body),
        }
    }
}

impl<K, S: Storage<K>> Core<K, S> {
    /// The contents of a store replacing this one, built from `objs` with no lock held but this
    /// store's read lock while each object is stored (to find the slot of an unchanged one);
    /// `each` is told of every key stored. Filled in list order, as `add` would: walking a built map in
    /// hash order instead touches every object at random and measured four times slower at 100k
    /// objects.
    fn fresh(
        &self,
        objs: &mut dyn Iterator<Item = (ObjectKey, Listed<K>)>,
        mut each: impl FnMut(&ObjectKey),
        undecodable: &mut Vec<(ObjectKey, StorageError)>,
    ) -> Inner<K, S::Slot> {
        let mut fresh = Inner {
            items: Items(HashMap::with_capacity({
                let (low, high) = objs.size_hint();
                high.unwrap_or(low)
            })),
            indices: self.empty_indices(),
            resource_version: String::new(),
            rv_metric: None,
        };
        // `next` may read this store (a relist's reference to a cached object): not under its
        // lock.
        for (key, listed) in &mut *objs {
            let obj = match listed {
                Listed::Object(obj) => obj,
                Listed::Cached => {
                    let current = self.read();
                    let Some(item) = current.items.0.get(&key) else {
                        // The FIFO's consumer is the store's only writer, so it cannot happen.
                        tracing::warn!(key = %key, "relist: the cached object it refers to is gone; left out");
                        continue;
                    };
                    each(&key);
                    let slot = self.storage.copy(&key, &item.slot);
                    // Indexers added since `fresh` was made get their values in `swap`.
                    let values: Box<[Values]> = item
                        .values
                        .iter()
                        .take(fresh.indices.len())
                        .cloned()
                        .collect();
                    drop(current);
                    self.insert_fresh(&mut fresh, key, slot, values);
                    continue;
                }
                Listed::Packed(body) => {
                    let stored = self.storage.store_packed(&key, body).map(Ok);
                    // Bytes that may not fit the type, when no index needs the object: checked
                    // at less than a decode's cost, if the storage can, and kept as they are.
                    let stored = match stored {
                        Err(body) if fresh.indices.iter().all(|idx| idx.from_key) => {
                            self.storage.store_checked(&key, body)
                        }
                        stored => stored,
                    };
                    match stored {
                        Ok(Ok(slot)) => match self.values_of_packed(&fresh, &key, &slot) {
                            Ok(values) => {
                                each(&key);
                                self.insert_fresh(&mut fresh, key, slot, values);
                            }
                            Err(e) => {
                                self.storage.discard_packed(&slot);
                                undecodable.push((key, e));
                            }
                        },
                        Ok(Err(e)) => undecodable.push((key, e)),
                        // A storage that cannot hold it as it is: decoded and stored as any
                        // object.
                        Err(body) => match self.storage.unpack(&key, body) {
                            Ok(obj) => {
                                self.put_listed(&mut fresh, key, obj, &mut each);
                            }
                            Err(e) => undecodable.push((key, e)),
                        },
                    }
                    continue;
                }
            };
            self.put_listed(&mut fresh, key, obj, &mut each);
        }
        fresh
    }

    /// Stores a listed object, decoded, under `key` in a store being built (see [`fresh`]).
    ///
    /// [`fresh`]: Self::fresh
    fn put_listed(
        &self,
        fresh: &mut Inner<K, S::Slot>,
        key: ObjectKey,
        obj: Arc<K>,
        each: &mut impl FnMut(&ObjectKey),
    ) {
        each(&key);
        let current = self.read();
        // An unchanged object keeps its stored form (a compact cache does not encode it again).
        let source = current
            .items
            .0
            .get(&key)
            .map(|item| &item.slot)
            .filter(|slot| self.storage.holds(slot, &obj))
            .map_or(Source::Listed, Source::Kept);
        Core::put_from(self, fresh, key.clone(), obj, source);
        drop(current);
        // A compact store's slot keeps a `Weak` of what it stored, which pins the object's
        // allocation once it is dropped (as it was just now, unless someone holds it) until
        // swept: settled at once, so a relist of N objects does not pin N of them.
        if let Some(item) = fresh.items.0.get(&key) {
            self.storage.settle(&key, &item.slot);
        }
    }

    /// Stores `slot` under `key` in a store being built, indexed under `values`.
    fn insert_fresh(
        &self,
        fresh: &mut Inner<K, S::Slot>,
        key: ObjectKey,
        slot: S::Slot,
        values: Box<[Values]>,
    ) {
        // A key listed twice: the later one wins, as for `put`.
        drop(Core::take(self, fresh, &key));
        for (idx, values) in fresh.indices.iter_mut().zip(&values) {
            idx.index.add(&key, values);
        }
        fresh.items.0.insert(key, Item { slot, values });
    }

    /// The index values of a packed object stored under `key` in a store being built: the
    /// namespace index's from the key; the others' from the object, decoded once (and dropped)
    /// only if there are any.
    ///
    /// # Errors
    ///
    /// The object does not decode and an index needs it.
    fn values_of_packed(
        &self,
        fresh: &Inner<K, S::Slot>,
        key: &ObjectKey,
        slot: &S::Slot,
    ) -> Result<Box<[Values]>, StorageError> {
        let mut obj = None;
        let mut values = Vec::with_capacity(fresh.indices.len());
        for idx in &fresh.indices {
            if idx.from_key {
                values.push(namespace_values(key));
                continue;
            }
            let obj = match &obj {
                Some(obj) => obj,
                None => obj.insert(self.storage.load_detached(key, slot)?),
            };
            values.push(values_of(index_values(&idx.name, &idx.func, key, obj)));
        }
        Ok(values.into_boxed_slice())
    }

    /// After a swap: every slot settled again, since readers' sweeps of the old store may have
    /// taken keys the new one had queued.
    fn settle_all(&self) {
        let inner = self.read();
        for (key, item) in &inner.items.0 {
            self.storage.settle(key, &item.slot);
        }
    }

    /// Puts `fresh` in place of the store's contents, with any indexers added meanwhile, and the
    /// store's resourceVersion (kept when `None`); hands back the old contents, to be dropped
    /// with no lock held.
    fn swap(
        &self,
        mut fresh: Inner<K, S::Slot>,
        resource_version: Option<&str>,
    ) -> Inner<K, S::Slot> {
        let mut inner = self.write();
        // Indexers are only ever appended, so any added meanwhile are the ones past ours.
        let added: Vec<_> = inner
            .indices
            .iter()
            .skip(fresh.indices.len())
            .map(|named| (named.name.clone(), Arc::clone(&named.func)))
            .collect();
        self.push_indices(&mut fresh, added);
        fresh.rv_metric = inner.rv_metric.take();
        match resource_version {
            Some(rv) => fresh.set_resource_version(rv),
            None => fresh.resource_version = std::mem::take(&mut inner.resource_version),
        }
        let old = std::mem::replace(&mut *inner, fresh);
        for item in old.items.0.values() {
            self.storage.drop_slot(&item.slot);
        }
        self.after_write(&mut inner);
        old
    }

    fn empty_indices(&self) -> Vec<NamedIndex<K>> {
        self.read()
            .indices
            .iter()
            .map(|i| NamedIndex {
                name: i.name.clone(),
                func: Arc::clone(&i.func),
                from_key: i.from_key,
                index: Index::default(),
            })
            .collect()
    }

    /// Appends indices and indexes every stored object under them (loading each once).
    fn push_indices(&self, inner: &mut Inner<K, S::Slot>, added: Vec<(String, IndexFn<K>)>) {
        if added.is_empty() {
            return;
        }
        let mut built: Vec<NamedIndex<K>> = added
            .into_iter()
            .map(|(name, func)| NamedIndex {
                name,
                func,
                from_key: false,
                index: Index::default(),
            })
            .collect();
        for (key, item) in &mut inner.items.0 {
            // An object that does not load is logged, and indexed under nothing here.
            let obj = self.load(key, &item.slot);
            let mut values = std::mem::take(&mut item.values).into_vec();
            for named in &mut built {
                let v = obj.as_deref().map_or_else(Values::default, |obj| {
                    values_of(index_values(&named.name, &named.func, key, obj))
                });
                named.index.add(key, &v);
                values.push(v);
            }
            item.values = values.into_boxed_slice();
            // As for a listed object: the decode left a `Weak` in a compact slot, which would
            // pin the object's allocation, now dropped, until swept.
            drop(obj);
            self.storage.settle(key, &item.slot);
        }
        inner.indices.extend(built);
    }
}

impl<K: Resource + Send + Sync + 'static> Indexer<K> {
    /// An empty store with the built-in [`NAMESPACE_INDEX`] (which listers rely on), holding
    /// objects decoded ([`CacheStorage::Decoded`]).
    pub fn new() -> Self {
        Self::over(Decoded)
    }

    fn over<S: Storage<K>>(storage: S) -> Self {
        let core = Core::new(storage);
        // Nothing is stored yet, so there is nothing to release.
        core.inner.write().indices.push(NamedIndex {
            name: NAMESPACE_INDEX.to_owned(),
            func: namespace_index_fn(),
            from_key: true,
            index: Index::default(),
        });
        Self {
            core: Arc::new(core),
        }
    }

    /// A read-only handle on this store, sharing its content: hand it to code that must read
    /// the cache but never change it (what [`SharedIndexInformer::indexer`](crate::SharedIndexInformer::indexer)
    /// gives out).
    pub fn reader(&self) -> super::Cache<K> {
        super::Cache::from(self)
    }

    /// Reports the store's resourceVersion to `metric` from now on.
    pub(crate) fn set_resource_version_metric(
        &self,
        metric: Arc<dyn crate::workqueue::SettableGaugeMetric>,
    ) {
        self.core.set_resource_version_metric(metric);
    }

    /// An empty store with the built-in [`NAMESPACE_INDEX`] and `indexers`
    /// (the same as [`Indexer::new`] followed by [`Indexer::add_indexers`]).
    ///
    /// # Errors
    ///
    /// [`IndexError::DuplicateIndex`] if `indexers` names [`NAMESPACE_INDEX`]: the built-in one
    /// is always there.
    pub fn with_indexers(indexers: Indexers<K>) -> Result<Self, IndexError> {
        let store = Self::new();
        store.add_indexers(indexers)?;
        Ok(store)
    }

    /// Stores `obj` under its key, replacing any object with the same key.
    ///
    /// # Errors
    ///
    /// [`KeyError`] if the object has no valid key; the store is unchanged.
    pub fn add(&self, obj: Arc<K>) -> Result<(), KeyError> {
        let key = key_of(&*obj)?;
        self.core.put(key, obj, false);
        Ok(())
    }

    /// An alias of [`add`](Self::add), for client-go users looking for `Update`: a store keyed
    /// by object has no difference between the two (client-go's `threadSafeMap.Update` is its
    /// `Add` as well).
    ///
    /// # Errors
    ///
    /// [`KeyError`] if the object has no valid key; the store is unchanged.
    pub fn update(&self, obj: Arc<K>) -> Result<(), KeyError> {
        self.add(obj)
    }

    /// Removes the object with `obj`'s key, if any.
    ///
    /// # Errors
    ///
    /// [`KeyError`] if the object has no valid key.
    pub fn delete(&self, obj: &K) -> Result<(), KeyError> {
        let key = key_of(obj)?;
        self.core.take(&key, false);
        Ok(())
    }

    /// The stored object with `obj`'s key.
    ///
    /// # Errors
    ///
    /// [`KeyError`] if the object has no valid key.
    pub fn get(&self, obj: &K) -> Result<Option<Arc<K>>, KeyError> {
        let key = key_of(obj)?;
        Ok(self.get_by_key(key.as_str()))
    }

    /// The stored object with this key (`namespace/name` or `name`).
    ///
    /// A stored object that cannot be read back (see [`StorageError`] for when; only possible in
    /// compact mode) is logged, counted in
    /// [`CacheStats::decode_errors`] and answered as absent; [`try_get_by_key`](Self::try_get_by_key)
    /// returns the error instead.
    pub fn get_by_key(&self, key: &str) -> Option<Arc<K>> {
        self.core.get(key).unwrap_or_else(|e| {
            report(&e);
            None
        })
    }

    /// [`get_by_key`](Self::get_by_key) that returns a stored object that cannot be read back
    /// as an error.
    ///
    /// # Errors
    ///
    /// [`StorageError`] if the stored object does not decode (never in
    /// [`CacheStorage::Decoded`] mode).
    pub fn try_get_by_key(&self, key: &str) -> Result<Option<Arc<K>>, StorageError> {
        self.core.get(key)
    }

    /// The `resourceVersion` of the stored object with this key, read without decoding it in
    /// any mode: for a staleness check ("has my cache seen my write?").
    pub fn resource_version_of(&self, key: &str) -> Option<String> {
        self.core.resource_version(key)
    }

    /// Every stored object, in no particular order.
    pub fn list(&self) -> Vec<Arc<K>> {
        self.core.list(None)
    }

    /// Every stored object whose labels `selector` selects, in no particular order. Labels are
    /// kept beside each object, so in compact mode only the selected objects are decoded.
    pub fn list_selected(&self, selector: &Selector) -> Vec<Arc<K>> {
        self.core.list(Some(selector))
    }

    /// Every stored key, in no particular order.
    pub fn list_keys(&self) -> Vec<ObjectKey> {
        self.core.list_keys()
    }

    /// The number of stored objects.
    pub fn len(&self) -> usize {
        self.core.len()
    }

    /// Whether the store holds no object.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The storage's counters: decodes, objects shared without decoding, bytes held.
    pub fn stats(&self) -> CacheStats {
        self.core.stats()
    }

    /// Keys a compact store has queued to check for a dropped decoded object.
    #[cfg(test)]
    pub(crate) fn sweep_len(&self) -> usize {
        self.core.sweep_len()
    }

    /// Where to report an object of this store's snapshots that does not decode when read for
    /// handlers ([`Storage::report_unreadable`]); the informer sends it to its error handler.
    pub(crate) fn report_unreadable(&self, sink: UnreadableSink) {
        self.core.report_unreadable(sink);
    }

    /// Whether this store keeps objects in a form of its own (`CacheStorage::Compact`), so that
    /// a FIFO feeding it should hold listed objects [`Packed`] rather than decoded.
    pub(crate) fn packs(&self) -> bool {
        self.core.packs()
    }

    /// `obj`, listed under `key`, packed for the FIFO; `None` when this store keeps objects
    /// decoded, or `obj` cannot be packed (the FIFO then holds it decoded).
    pub(crate) fn pack(&self, key: &ObjectKey, obj: &K) -> Option<Packed> {
        self.core.pack(key, obj)
    }

    /// A listed object packed from its bytes as the server sent them, with `meta` read from
    /// them, never decoded here; `None` as [`pack`](Self::pack).
    pub(crate) fn pack_bytes(
        &self,
        key: &ObjectKey,
        bytes: ItemBytes<'_>,
        meta: &ListedMeta,
    ) -> Option<Packed> {
        self.core.pack_bytes(key, bytes, meta)
    }

    /// A listed object's bytes decoded (for bytes [`pack_bytes`](Self::pack_bytes) could not
    /// pack).
    pub(crate) fn decode_bytes(
        &self,
        key: &ObjectKey,
        bytes: ItemBytes<'_>,
    ) -> Result<Arc<K>, StorageError> {
        self.core.decode_bytes(key, bytes)
    }

    /// A packed object decoded as the FIFO hands it out; storing this very object next keeps
    /// the packed bytes. A [`Packed::cached`] one is read from the store.
    pub(crate) fn unpack(&self, packed: Packed) -> Result<Arc<K>, StorageError> {
        self.core.unpack(packed)
    }

    /// A packed object decoded while it stays queued (a tombstone's last known state, a copy
    /// of the queue).
    pub(crate) fn peek(&self, packed: &Packed) -> Result<Arc<K>, StorageError> {
        self.core.peek(packed)
    }

    /// Replaces the whole content with `objs` and rebuilds every index (client-go `Replace`).
    /// When two objects share a key, the later one wins.
    ///
    /// The new content and its indices are built before the write lock is taken, so readers are
    /// blocked only for the swap.
    ///
    /// # Errors
    ///
    /// [`KeyError`] if any object has no valid key; the store is then unchanged.
    pub fn replace(&self, objs: Vec<Arc<K>>) -> Result<(), KeyError> {
        self.replace_inner(objs, None)
    }

    fn replace_inner(
        &self,
        objs: Vec<Arc<K>>,
        resource_version: Option<&str>,
    ) -> Result<(), KeyError> {
        let keyed = objs
            .into_iter()
            .map(|obj| Ok((key_of(&obj)?, obj)))
            .collect::<Result<Vec<_>, KeyError>>()?;
        self.core.replace(keyed, resource_version);
        Ok(())
    }

    /// [`replace`](Self::replace) that also sets the store's resourceVersion to that of the list,
    /// in the same swap (client-go `threadSafeMap.Replace`): what an in-order informer does with
    /// a relist.
    ///
    /// # Errors
    ///
    /// As [`replace`](Self::replace).
    pub fn replace_at(&self, objs: Vec<Arc<K>>, resource_version: &str) -> Result<(), KeyError> {
        self.replace_inner(objs, Some(resource_version))
    }

    /// [`replace_at`](Self::replace_at) with objects that `objs` makes (decodes) one at a time
    /// as they are stored, so a compact store never holds them all decoded; keys are the
    /// caller's. Returns what the handlers' notifications need: the keys stored, in list order,
    /// and the previous contents, handed out as snapshots one key at a time.
    pub(crate) fn replace_streaming<'a>(
        &'a self,
        objs: &mut dyn Iterator<Item = (ObjectKey, Listed<K>)>,
        resource_version: &str,
    ) -> Box<dyn Replaced<K> + 'a> {
        self.core.replace_streaming(objs, resource_version)
    }

    /// A snapshot of every stored object (in no particular order).
    pub(crate) fn snapshots(&self) -> Vec<Snapshot<K>> {
        self.core.snapshots()
    }

    /// Applies `ops` in order under one write lock, so readers see all of them or none, and sets
    /// the store's resourceVersion to `resource_version` when given (client-go
    /// `threadSafeMap.Transaction`, used by in-order informers to apply a batch). Returns, for
    /// each op, the object it replaced or removed.
    pub fn transaction(
        &self,
        ops: Vec<StoreOp<K>>,
        resource_version: Option<&str>,
    ) -> Vec<Option<Arc<K>>> {
        self.core.transaction(ops, resource_version)
    }

    /// [`transaction`](Self::transaction), handing back snapshots instead of objects: of what
    /// each op replaced or removed, and of what each put stored. Nothing is decoded, so a
    /// compact cache's notifications can wait in a slow handler's buffer compressed.
    pub(crate) fn transaction_snapshots(
        &self,
        ops: Vec<StoreOp<K>>,
        resource_version: Option<&str>,
    ) -> Vec<Written<K>> {
        self.core.transaction_snapshots(ops, resource_version)
    }

    /// The resourceVersion of the last change applied to the store in order: every event,
    /// relist and bookmark an in-order informer applies (client-go 1.36
    /// `LastStoreSyncResourceVersion`, KEP-5647). Empty before the first, and always empty under
    /// a DeltaFIFO informer, whose per-key merging means no single version describes the store
    /// (client-go likewise returns `""` without `AtomicFIFO`).
    ///
    /// For staleness checks: a controller that wrote an object at resourceVersion `n` knows its
    /// cache has seen that write once this is at least `n` (compare as integers, which
    /// kube-apiserver's versions are, though clients are told to treat them as opaque).
    pub fn last_store_sync_resource_version(&self) -> String {
        self.core.last_resource_version()
    }

    /// Sets the store's resourceVersion without changing its objects (client-go
    /// `threadSafeMap.Bookmark`).
    pub fn bookmark(&self, resource_version: &str) {
        self.core.bookmark(resource_version);
    }

    /// Stores `obj` under `key` (which the caller has computed with [`key_of`]) and returns the
    /// object it replaced: the informer's hot path, one lock and one hash lookup.
    pub fn insert(&self, key: ObjectKey, obj: Arc<K>) -> Option<Arc<K>> {
        self.core.put(key, obj, true)
    }

    /// Removes the object under `key` and returns it.
    pub fn remove(&self, key: &ObjectKey) -> Option<Arc<K>> {
        self.core.take(key, true)
    }

    /// Removes the object under `key` without reading it back (a compact store does not decode
    /// it).
    pub(crate) fn discard(&self, key: &ObjectKey) {
        self.core.take(key, false);
    }

    /// The objects sharing at least one value of index `index_name` with `obj`
    /// (client-go `Index`), each once.
    ///
    /// # Errors
    ///
    /// [`IndexError::NoSuchIndex`] if no such index is registered;
    /// [`IndexError::Panicked`] if its function panicked on `obj`.
    pub fn index(&self, index_name: &str, obj: &K) -> Result<Vec<Arc<K>>, IndexError> {
        self.core.index(index_name, obj)
    }

    /// The keys of the objects indexed under `value` in index `index_name` (client-go `IndexKeys`).
    ///
    /// # Errors
    ///
    /// [`IndexError::NoSuchIndex`] if no such index is registered.
    pub fn index_keys(&self, index_name: &str, value: &str) -> Result<Vec<ObjectKey>, IndexError> {
        self.core.index_keys(index_name, value)
    }

    /// Every value index `index_name` currently holds objects under; empty for an unknown index,
    /// as in client-go `ListIndexFuncValues`.
    pub fn list_index_func_values(&self, index_name: &str) -> Vec<String> {
        self.core.list_index_func_values(index_name)
    }

    /// The objects indexed under `value` in index `index_name` (client-go `ByIndex`).
    ///
    /// # Errors
    ///
    /// [`IndexError::NoSuchIndex`] if no such index is registered.
    pub fn by_index(&self, index_name: &str, value: &str) -> Result<Vec<Arc<K>>, IndexError> {
        self.core.by_index(index_name, value, None)
    }

    /// [`by_index`](Self::by_index) keeping only the objects whose labels `selector` selects,
    /// checked before any object is decoded.
    ///
    /// # Errors
    ///
    /// [`IndexError::NoSuchIndex`] if no such index is registered.
    pub fn by_index_selected(
        &self,
        index_name: &str,
        value: &str,
        selector: &Selector,
    ) -> Result<Vec<Arc<K>>, IndexError> {
        self.core.by_index(index_name, value, Some(selector))
    }

    /// The names of the registered indices.
    pub fn indexers(&self) -> Vec<String> {
        self.core.indexers()
    }

    /// Registers more indices and indexes the objects already stored under them, so it works
    /// before and after an informer starts (client-go `AddIndexers` since v0.30). A compact
    /// store decodes each stored object once for this.
    ///
    /// # Errors
    ///
    /// [`IndexError::DuplicateIndex`] if a name is already registered; nothing is added then.
    pub fn add_indexers(&self, indexers: Indexers<K>) -> Result<(), IndexError> {
        self.core.add_indexers(indexers)
    }
    /// Registers one index named `name` whose values come from `values` (an
    /// [`index_fn`](super::index_fn)), indexing the objects already stored: the
    /// one-index form of [`add_indexers`](Self::add_indexers), without building the map.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use kube::api::ObjectMeta;
    /// use kube_informer::Indexer;
    ///
    /// let store = Indexer::<ConfigMap>::new();
    /// // ConfigMaps by each of their data keys.
    /// store.index_by("data-key", |cm: &ConfigMap| cm.data.iter().flatten().map(|(k, _)| k.clone()).collect::<Vec<_>>()).unwrap();
    /// store.add(Arc::new(ConfigMap {
    ///     metadata: ObjectMeta { name: Some("a".into()), ..Default::default() },
    ///     data: Some([("port".to_owned(), "80".to_owned())].into()),
    ///     ..Default::default()
    /// })).unwrap();
    /// assert_eq!(store.by_index("data-key", "port").unwrap().len(), 1);
    /// ```
    ///
    /// # Errors
    ///
    /// [`IndexError::DuplicateIndex`] if `name` is already registered.
    pub fn index_by<I>(
        &self,
        name: impl Into<String>,
        values: impl Fn(&K) -> I + Send + Sync + 'static,
    ) -> Result<(), IndexError>
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        self.add_indexers(Indexers::from([(name.into(), super::index_fn(values))]))
    }

    /// Calls `f` with every stored key and object under one read lock; `f` must not call back
    /// into this store with a write. A compact store decodes the objects nobody holds.
    pub(crate) fn for_each(&self, mut f: impl FnMut(&ObjectKey, &Arc<K>)) {
        self.core.for_each(&mut f);
    }
}

impl<K> Indexer<K>
where
    K: Resource + Serialize + DeserializeOwned + Send + Sync + 'static,
{
    /// An empty store with the built-in [`NAMESPACE_INDEX`], holding objects as `storage` says.
    /// The read API is the same in every mode.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use kube::api::ObjectMeta;
    /// use kube_informer::{CacheStorage, Indexer};
    ///
    /// let store = Indexer::<ConfigMap>::with_storage(CacheStorage::default());
    /// store.add(Arc::new(ConfigMap {
    ///     metadata: ObjectMeta { name: Some("a".into()), ..Default::default() },
    ///     ..Default::default()
    /// })).unwrap();
    /// assert!(store.get_by_key("a").is_some());
    /// ```
    pub fn with_storage(storage: CacheStorage) -> Self {
        match storage {
            CacheStorage::Decoded => Self::new(),
            #[cfg(feature = "compact")]
            CacheStorage::Compact(config) => {
                Self::over(super::storage::compact::Compact::new(config))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
    use kube::api::ObjectMeta;
    use std::collections::BTreeMap;

    fn cm(ns: &str, name: &str, labels: &[&str]) -> Arc<ConfigMap> {
        Arc::new(ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|l| ((*l).to_owned(), String::new()))
                        .collect::<BTreeMap<_, _>>(),
                ),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    /// A panicking index function: a query with it is an error, logged, not a panic through
    /// the caller; a write leaves the object out of that index.
    #[test]
    fn an_index_function_that_panics_on_a_query_is_an_error() {
        let store = Indexer::<ConfigMap>::new();
        store
            .index_by("boom", |c: &ConfigMap| -> Vec<String> {
                assert!(c.metadata.labels.iter().flatten().count() == 0, "boom");
                vec!["x".to_owned()]
            })
            .unwrap();
        store.add(cm("ns", "a", &[])).unwrap();
        store.add(cm("ns", "b", &["l"])).unwrap();
        assert_eq!(store.by_index("boom", "x").unwrap().len(), 1);
        assert_eq!(store.index("boom", &cm("ns", "p", &[])).unwrap().len(), 1);
        assert!(matches!(
            store.index("boom", &cm("ns", "p", &["l"])),
            Err(IndexError::Panicked(name)) if name == "boom"
        ));
    }

    /// The namespace `""` is every namespace, as client-go's `ListAllByNamespace` has it.
    #[test]
    fn a_namespace_lister_of_the_empty_namespace_lists_every_namespace() {
        let store = Indexer::<ConfigMap>::new();
        store.add(cm("a", "x", &["l"])).unwrap();
        store.add(cm("b", "y", &[])).unwrap();
        let lister = crate::Lister::new(store.reader());
        let all = kube::core::Selector::default();
        assert_eq!(lister.namespaced("").list(&all).len(), 2);
        assert_eq!(lister.namespaced("a").list(&all).len(), 1);
        let labelled: kube::core::Selector = kube::core::Expression::Exists("l".to_owned()).into();
        assert_eq!(lister.namespaced("").list(&labelled).len(), 1);
        assert_eq!(lister.namespaced("b").list(&labelled).len(), 0);
    }

    /// Indexes a configmap under each of its label names.
    fn label_indexers() -> Indexers<ConfigMap> {
        let f: IndexFn<ConfigMap> = Arc::new(|c: &ConfigMap| {
            c.metadata
                .labels
                .iter()
                .flatten()
                .map(|(k, _)| k.clone())
                .collect()
        });
        HashMap::from([("label".to_owned(), f)])
    }

    fn sorted(mut v: Vec<ObjectKey>) -> Vec<String> {
        v.sort();
        v.into_iter().map(|k| k.to_string()).collect()
    }

    fn sorted_values(mut v: Vec<String>) -> Vec<String> {
        v.sort();
        v
    }

    #[test]
    fn add_then_get_returns_the_same_arc() {
        let store = Indexer::new();
        let a = cm("ns", "a", &[]);
        store.add(Arc::clone(&a)).unwrap();
        assert!(Arc::ptr_eq(&store.get(&a).unwrap().unwrap(), &a));
        assert!(Arc::ptr_eq(&store.get_by_key("ns/a").unwrap(), &a));
        assert_eq!(store.len(), 1);
        assert_eq!(sorted(store.list_keys()), ["ns/a"]);
        assert_eq!(store.list().len(), 1);
    }

    #[test]
    fn cluster_scoped_object_is_keyed_by_name_and_indexed_under_empty_namespace() {
        let store = Indexer::<Namespace>::new();
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some("kube-system".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        store.add(Arc::new(ns)).unwrap();
        assert!(store.get_by_key("kube-system").is_some());
        assert_eq!(
            sorted(store.index_keys(NAMESPACE_INDEX, "").unwrap()),
            ["kube-system"]
        );
    }

    #[test]
    fn object_without_name_is_a_typed_error() {
        let store = Indexer::<ConfigMap>::new();
        let nameless = Arc::new(ConfigMap::default());
        assert_eq!(store.add(Arc::clone(&nameless)), Err(KeyError::MissingName));
        assert_eq!(
            store.update(Arc::clone(&nameless)),
            Err(KeyError::MissingName)
        );
        assert_eq!(store.delete(&nameless), Err(KeyError::MissingName));
        assert_eq!(store.get(&nameless), Err(KeyError::MissingName));
        assert!(store.is_empty());
    }

    #[test]
    fn update_moves_the_key_between_index_values() {
        let store = Indexer::with_indexers(label_indexers()).unwrap();
        store.add(cm("ns", "a", &["x", "y"])).unwrap();
        store.update(cm("ns", "a", &["y", "z"])).unwrap();
        assert!(store.index_keys("label", "x").unwrap().is_empty());
        assert_eq!(sorted(store.index_keys("label", "y").unwrap()), ["ns/a"]);
        assert_eq!(sorted(store.index_keys("label", "z").unwrap()), ["ns/a"]);
        assert_eq!(
            sorted_values(store.list_index_func_values("label")),
            ["y", "z"]
        );
    }

    #[test]
    fn update_touches_only_changed_index_values_even_with_many_values() {
        let store = Indexer::with_indexers(label_indexers()).unwrap();
        let many: Vec<String> = (0..20).map(|i| format!("l{i}")).collect();
        let refs: Vec<&str> = many.iter().map(String::as_str).collect();
        store.add(cm("ns", "a", &refs)).unwrap();
        store.add(cm("ns", "b", &["l0"])).unwrap();
        // Drop l0, keep l1..l19, add "new".
        let mut next: Vec<&str> = refs[1..].to_vec();
        next.push("new");
        store.update(cm("ns", "a", &next)).unwrap();
        assert_eq!(sorted(store.index_keys("label", "l0").unwrap()), ["ns/b"]);
        for v in &refs[1..] {
            assert_eq!(
                sorted(store.index_keys("label", v).unwrap()),
                ["ns/a"],
                "{v}"
            );
        }
        assert_eq!(sorted(store.index_keys("label", "new").unwrap()), ["ns/a"]);
        assert_eq!(store.list_index_func_values("label").len(), 21);
    }

    #[test]
    fn delete_removes_the_object_and_empty_index_values() {
        let store = Indexer::with_indexers(label_indexers()).unwrap();
        let a = cm("ns", "a", &["x"]);
        store.add(Arc::clone(&a)).unwrap();
        store.delete(&a).unwrap();
        assert!(store.is_empty());
        assert!(store.list_index_func_values("label").is_empty());
        assert!(store.list_index_func_values(NAMESPACE_INDEX).is_empty());
        // Deleting what is not there is fine.
        store.delete(&a).unwrap();
    }

    #[test]
    fn replace_rebuilds_indices() {
        let store = Indexer::with_indexers(label_indexers()).unwrap();
        store.add(cm("old", "a", &["x"])).unwrap();
        store
            .replace(vec![cm("new", "b", &["y"]), cm("new", "c", &["y"])])
            .unwrap();
        assert_eq!(sorted(store.list_keys()), ["new/b", "new/c"]);
        assert!(store.by_index(NAMESPACE_INDEX, "old").unwrap().is_empty());
        assert_eq!(store.by_index(NAMESPACE_INDEX, "new").unwrap().len(), 2);
        assert_eq!(sorted_values(store.list_index_func_values("label")), ["y"]);
    }

    #[test]
    fn replace_with_a_nameless_object_leaves_the_store_unchanged() {
        let store = Indexer::new();
        store.add(cm("ns", "a", &[])).unwrap();
        let err = store.replace(vec![cm("ns", "b", &[]), Arc::new(ConfigMap::default())]);
        assert_eq!(err, Err(KeyError::MissingName));
        assert_eq!(sorted(store.list_keys()), ["ns/a"]);
    }

    #[test]
    fn index_returns_objects_sharing_any_value_once() {
        let store = Indexer::with_indexers(label_indexers()).unwrap();
        store.add(cm("ns", "a", &["x", "y"])).unwrap();
        store.add(cm("ns", "b", &["y"])).unwrap();
        store.add(cm("ns", "c", &["z"])).unwrap();
        let probe = cm("ns", "probe", &["x", "y"]);
        let mut names: Vec<String> = store
            .index("label", &probe)
            .unwrap()
            .iter()
            .map(|o| o.metadata.name.clone().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(
            store.index("label", &cm("ns", "p", &["z"])).unwrap().len(),
            1
        );
    }

    #[test]
    fn unknown_index_is_an_error() {
        let store = Indexer::<ConfigMap>::new();
        let a = cm("ns", "a", &[]);
        assert_eq!(
            store.by_index("nope", "x").unwrap_err(),
            IndexError::NoSuchIndex("nope".into())
        );
        assert!(matches!(
            store.index_keys("nope", "x"),
            Err(IndexError::NoSuchIndex(_))
        ));
        assert!(matches!(
            store.index("nope", &a),
            Err(IndexError::NoSuchIndex(_))
        ));
        assert!(store.list_index_func_values("nope").is_empty());
    }

    #[test]
    fn add_indexers_indexes_objects_already_stored() {
        let store = Indexer::new();
        store.add(cm("ns", "a", &["x"])).unwrap();
        store.add_indexers(label_indexers()).unwrap();
        assert_eq!(sorted(store.index_keys("label", "x").unwrap()), ["ns/a"]);
        let mut names = store.indexers();
        names.sort();
        assert_eq!(names, ["label", NAMESPACE_INDEX]);
    }

    #[test]
    fn index_by_takes_any_iterable_of_values_and_indexes_what_is_stored() {
        let store = Indexer::new();
        store.add(cm("ns", "a", &["x", "y"])).unwrap();
        store.add(cm("ns", "b", &[])).unwrap();
        // One value or none: an `Option`.
        store
            .index_by("first-label", |c: &ConfigMap| {
                c.metadata.labels.as_ref()?.keys().next().cloned()
            })
            .unwrap();
        // Many values: an iterator of `&str`-convertible items.
        store
            .index_by("labels", |c: &ConfigMap| {
                c.metadata
                    .labels
                    .clone()
                    .unwrap_or_default()
                    .into_keys()
                    .collect::<Vec<_>>()
            })
            .unwrap();
        assert_eq!(
            sorted(store.index_keys("first-label", "x").unwrap()),
            ["ns/a"]
        );
        assert_eq!(sorted(store.index_keys("labels", "y").unwrap()), ["ns/a"]);
        assert_eq!(store.list_index_func_values("first-label"), ["x"]);
        store.add(cm("ns", "b", &["y"])).unwrap();
        assert_eq!(
            sorted(store.index_keys("labels", "y").unwrap()),
            ["ns/a", "ns/b"]
        );
        assert_eq!(
            store.index_by("labels", |_: &ConfigMap| None::<String>),
            Err(IndexError::DuplicateIndex("labels".into()))
        );
    }

    #[test]
    fn add_indexers_with_a_duplicate_name_is_an_error() {
        let store = Indexer::with_indexers(label_indexers()).unwrap();
        assert_eq!(
            store.add_indexers(label_indexers()),
            Err(IndexError::DuplicateIndex("label".into()))
        );
        let ns: Indexers<ConfigMap> =
            HashMap::from([(NAMESPACE_INDEX.to_owned(), namespace_index_fn())]);
        assert!(matches!(
            Indexer::with_indexers(ns),
            Err(IndexError::DuplicateIndex(_))
        ));
    }

    #[test]
    fn insert_and_remove_return_the_previous_value() {
        let store = Indexer::new();
        let a1 = cm("ns", "a", &[]);
        let a2 = cm("ns", "a", &[]);
        let key = key_of(&*a1).unwrap();
        assert!(store.insert(key.clone(), Arc::clone(&a1)).is_none());
        assert!(Arc::ptr_eq(&store.insert(key.clone(), a2).unwrap(), &a1));
        assert!(store.remove(&key).is_some());
        assert!(store.remove(&key).is_none());
        assert!(store.by_index(NAMESPACE_INDEX, "ns").unwrap().is_empty());
    }

    #[test]
    fn update_is_add() {
        let store = Indexer::new();
        store.add(cm("ns", "a", &["x"])).unwrap();
        store.update(cm("ns", "a", &["y"])).unwrap();
        assert_eq!(store.len(), 1);
        store.update(cm("ns", "b", &[])).unwrap();
        assert_eq!(sorted(store.list_keys()), ["ns/a", "ns/b"]);
        assert_eq!(
            store
                .get_by_key("ns/a")
                .unwrap()
                .metadata
                .labels
                .as_ref()
                .unwrap()
                .keys()
                .collect::<Vec<_>>(),
            ["y"]
        );
    }

    #[test]
    fn clones_share_the_store_and_are_send_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Indexer<ConfigMap>>();
        let store = Indexer::new();
        let clone = store.clone();
        clone.add(cm("ns", "a", &[])).unwrap();
        assert_eq!(store.len(), 1);
    }
}

#[cfg(test)]
mod transaction_tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    fn cm(name: &str, rv: &str) -> Arc<ConfigMap> {
        Arc::new(ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    fn key(name: &str) -> ObjectKey {
        ObjectKey::new(Some("ns"), name).unwrap()
    }

    #[test]
    fn a_transaction_applies_in_order_returns_what_it_replaced_and_sets_the_version() {
        let store = Indexer::new();
        assert_eq!(store.last_store_sync_resource_version(), "");
        let prev = store.transaction(
            vec![
                StoreOp::Put(key("a"), cm("a", "1")),
                StoreOp::Put(key("a"), cm("a", "2")),
                StoreOp::Put(key("b"), cm("b", "3")),
                StoreOp::Remove(key("b")),
                StoreOp::Remove(key("never")),
            ],
            Some("3"),
        );
        let rvs: Vec<Option<String>> = prev
            .iter()
            .map(|p| p.as_ref().and_then(|o| o.metadata.resource_version.clone()))
            .collect();
        assert_eq!(rvs, [None, Some("1".into()), None, Some("3".into()), None]);
        assert_eq!(store.list_keys(), [key("a")]);
        assert_eq!(store.by_index(NAMESPACE_INDEX, "ns").unwrap().len(), 1);
        assert_eq!(store.last_store_sync_resource_version(), "3");
        store.bookmark("9");
        assert_eq!(store.last_store_sync_resource_version(), "9");
        store.replace_at(vec![cm("c", "10")], "11").unwrap();
        assert_eq!(store.list_keys(), [key("c")]);
        assert_eq!(store.last_store_sync_resource_version(), "11");
        // A plain replace keeps the version.
        store.replace(vec![cm("d", "12")]).unwrap();
        assert_eq!(store.last_store_sync_resource_version(), "11");
    }
}
