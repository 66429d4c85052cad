//! The DeltaFIFO queue itself (client-go `tools/cache/delta_fifo.go` `DeltaFIFO`).

use std::{
    collections::{HashMap, HashSet, VecDeque, hash_map::Entry},
    fmt,
    pin::pin,
    sync::Arc,
};

use kube::Resource;
use parking_lot::Mutex;
use tokio::sync::{Notify, watch};

use super::{
    delta::{
        DeletedFinalStateUnknown, Delta, DeltaObject, DeltaType, Deltas, Held, ListItem,
        dedup_trailing_deletes,
    },
    packing::{FromBytes, UnreadableReport, from_bytes, list_item, report_undecodable},
};
use crate::{
    panic_message,
    reflector::ReflectorStore,
    reflector::decode::{ItemBytes, ListedMeta, WatchedBytes},
    store::{Indexer, KeyError, ObjectKey, Packed, StorageError, key_of},
};

/// The objects the consumer of a [`DeltaFifo`] already knows (client-go's `KeyListerGetter`):
/// normally the informer's [`Indexer`]. The FIFO consults it to infer deletions on
/// [`DeltaFifo::replace`], to decide whether a delete is news, and to [`DeltaFifo::resync`].
///
/// The FIFO calls these methods while holding its own lock, so they must not call into the FIFO.
pub trait KnownObjects<K>: Send + Sync {
    /// Every known key.
    fn list_keys(&self) -> Vec<ObjectKey>;

    /// The known object with this key.
    fn get_by_key(&self, key: &ObjectKey) -> Option<Arc<K>>;

    /// Calls `f` with every known key and object. The default goes through
    /// [`list_keys`](Self::list_keys) and [`get_by_key`](Self::get_by_key), skipping keys that
    /// vanish in between; implementations can do it in one pass under one lock.
    fn for_each_known(&self, f: &mut dyn FnMut(&ObjectKey, &Arc<K>)) {
        for key in self.list_keys() {
            if let Some(obj) = self.get_by_key(&key) {
                f(&key, &obj);
            }
        }
    }
}

impl<K: Resource + Send + Sync + 'static> KnownObjects<K> for Indexer<K> {
    fn list_keys(&self) -> Vec<ObjectKey> {
        Indexer::list_keys(self)
    }

    fn get_by_key(&self, key: &ObjectKey) -> Option<Arc<K>> {
        Indexer::get_by_key(self, key.as_str())
    }

    fn for_each_known(&self, f: &mut dyn FnMut(&ObjectKey, &Arc<K>)) {
        self.for_each(f);
    }
}

/// A function applied to every object as it is enqueued, e.g. to strip `managedFields`
/// (client-go's `TransformFunc`). It should be cheap and must not change the object's name or
/// namespace: the key is computed before it runs, as in client-go.
///
/// A transform that panics is caught: the object is treated like one that does not decode
/// ([`FifoError::Transform`] goes to the watch-error handler, and a cached version of the object
/// is removed with a `DeletedFinalStateUnknown` tombstone), so the informer keeps running and
/// its cache holds only objects that went through the transform.
pub type TransformFn<K> = Arc<dyn Fn(K) -> K + Send + Sync>;

/// Applies `transform` (if any) to `obj`, catching a panic as [`FifoError::Transform`].
pub(super) fn transform_object<K: Resource>(
    transform: Option<&TransformFn<K>>,
    key: &ObjectKey,
    obj: K,
) -> Result<Arc<K>, FifoError> {
    let Some(t) = transform else {
        return Ok(Arc::new(obj));
    };
    // The object moves into the transform, so on a panic only what was read before is left.
    let resource_version = obj.meta().resource_version.clone().unwrap_or_default();
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| t(obj)))
        .map(Arc::new)
        .map_err(|panic| FifoError::Transform {
            key: key.clone(),
            resource_version,
            panic: panic_message(&*panic),
        })
}

/// A listed object made ready to queue, for a FIFO that holds objects decoded: the known
/// object when it has the listed resourceVersion (a relist then costs the cache plus what
/// changed, and handlers see the very same object on the resync), else `obj` transformed.
pub(super) fn ready_list_item<K: Resource>(
    known: Option<&Arc<dyn KnownObjects<K>>>,
    transform: Option<&TransformFn<K>>,
    key: &ObjectKey,
    obj: K,
) -> Result<Arc<K>, FifoError> {
    if let Some(rv) = obj
        .meta()
        .resource_version
        .as_deref()
        .filter(|rv| !rv.is_empty())
        && let Some(cached) = known.and_then(|k| k.get_by_key(key))
        && cached.meta().resource_version.as_deref() == Some(rv)
    {
        return Ok(cached);
    }
    transform_object(transform, key, obj)
}

/// Why a [`DeltaFifo`] operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FifoError {
    /// The FIFO is closed and has nothing left to pop (client-go's `ErrFIFOClosed`).
    #[error("DeltaFIFO: manipulating with closed queue")]
    Closed,
    /// An object has no valid key; the FIFO is unchanged.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// A listed object handed over as bytes does not decode (it could not be packed, so the
    /// FIFO decoded it); it was left out, like an undecodable item of a decoded list.
    #[error("listed object {key} does not decode: {error}")]
    Undecodable {
        /// The object's key.
        key: ObjectKey,
        /// What went wrong, redacted (a [`DecodeError`](crate::reflector::decode::DecodeError)'s
        /// message).
        error: String,
    },
    /// A [`ListItem::Packed`] (made by a [`DeltaFifo`] that packs listed objects for its cache)
    /// was handed to a FIFO that does not hold packed objects; nothing was queued.
    #[error("list item {key} is packed for another FIFO's cache")]
    Packed {
        /// The object's key.
        key: ObjectKey,
    },
    /// The transform panicked on the object with this key; the object was left out (and a
    /// cached version of it tombstoned).
    #[error("transform panicked on {key} (resourceVersion {resource_version}): {panic}")]
    Transform {
        /// The object's key.
        key: ObjectKey,
        /// The object's resourceVersion.
        resource_version: String,
        /// The panic's message.
        panic: String,
    },
}

/// A held delta, taken out of the queue or looked at.
enum HeldRef<'a, K> {
    Owned(Held<K>),
    Borrowed(&'a Held<K>),
}

/// The queue between a reflector (producer) and an informer (consumer), with client-go's
/// DeltaFIFO rules: per key a list of [`Delta`]s, each key queued once, in order of first change.
///
/// Share it through an `Arc`; every method takes `&self`.
///
/// ```
/// # tokio_test_shim::run(async {
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kube::api::ObjectMeta;
/// use kube_informer::{DeltaFifo, DeltaType};
///
/// let fifo = DeltaFifo::<ConfigMap>::new(None);
/// let cm = ConfigMap { metadata: ObjectMeta { name: Some("a".into()), ..Default::default() }, ..Default::default() };
/// fifo.add(cm.clone()).unwrap();
/// fifo.update(cm).unwrap();
/// let kinds = fifo.pop(|deltas, _| deltas.iter().map(|d| d.kind).collect::<Vec<_>>()).await.unwrap();
/// assert_eq!(kinds, [DeltaType::Added, DeltaType::Updated]);
/// # });
/// # mod tokio_test_shim { pub fn run(f: impl std::future::Future<Output = ()>) {
/// #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f) } }
/// ```
pub struct DeltaFifo<K> {
    state: Mutex<State<K>>,
    /// Wakes a waiting `pop` when a key is queued, every one when the FIFO closes.
    wake: Notify,
    /// Turns `true`, once, when [`has_synced`](DeltaFifo::has_synced) does: waiters wait on
    /// this instead of polling.
    synced: watch::Sender<bool>,
    known: Option<Arc<dyn KnownObjects<K>>>,
    transform: Option<TransformFn<K>>,
    /// The cache that packs listed and resynced objects while they are queued
    /// ([`with_packing`](DeltaFifo::with_packing)).
    packer: Option<Indexer<K>>,
    /// Told of each packed object that does not decode when popped
    /// ([`with_unreadable_report`](DeltaFifo::with_unreadable_report)).
    unreadable: Option<UnreadableReport>,
}

struct State<K> {
    /// Invariant: a key is in `items` (with at least one delta) iff it is in `queue`.
    items: HashMap<ObjectKey, Vec<Held<K>>>,
    queue: VecDeque<ObjectKey>,
    /// Set by the first add/update/delete/replace (client-go `populated`).
    populated: bool,
    /// Items of the first replace not yet popped (client-go `initialPopulationCount`).
    initial_population_count: usize,
    closed: bool,
    last_sync_resource_version: String,
}

impl<K> State<K> {
    fn has_synced(&self) -> bool {
        self.populated && self.initial_population_count == 0
    }

    /// Appends a delta to `key`'s list (client-go `queueActionInternalLocked`), queueing the key
    /// if it had none. Returns whether the key was newly queued.
    fn queue_action(&mut self, key: ObjectKey, kind: DeltaType, object: DeltaObject<K>) -> bool {
        self.queue_held(key, Held::Delta(Delta { kind, object }))
    }

    /// [`queue_action`](Self::queue_action) for a delta as held.
    fn queue_held(&mut self, key: ObjectKey, delta: Held<K>) -> bool {
        match self.items.entry(key) {
            Entry::Occupied(mut entry) => {
                let deltas = entry.get_mut();
                deltas.push(delta);
                dedup_trailing_deletes(deltas);
                false
            }
            Entry::Vacant(entry) => {
                self.queue.push_back(entry.key().clone());
                entry.insert(vec![delta]);
                true
            }
        }
    }
}

impl<K> fmt::Debug for DeltaFifo<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state.lock();
        f.debug_struct("DeltaFifo")
            .field("len", &state.queue.len())
            .field("populated", &state.populated)
            .field("initial_population_count", &state.initial_population_count)
            .field("closed", &state.closed)
            .field("has_known_objects", &self.known.is_some())
            .field("has_transform", &self.transform.is_some())
            .finish()
    }
}

impl<K: Resource + Send + Sync + 'static> DeltaFifo<K> {
    /// An empty FIFO. `known` is the consumer's store (normally the informer's [`Indexer`]);
    /// without it, relists cannot infer deletions of objects no longer queued and resync does
    /// nothing, as in client-go.
    pub fn new(known: Option<Arc<dyn KnownObjects<K>>>) -> Self {
        Self {
            state: Mutex::new(State {
                items: HashMap::new(),
                queue: VecDeque::new(),
                populated: false,
                initial_population_count: 0,
                closed: false,
                last_sync_resource_version: String::new(),
            }),
            wake: Notify::new(),
            synced: watch::channel(false).0,
            known,
            transform: None,
            packer: None,
            unreadable: None,
        }
    }

    /// Reports each packed object that does not decode when popped (it is left out, and its
    /// cached version tombstoned) through `report`, called once `pop` has released the FIFO's
    /// lock, so that it may call back into the informer (`has_synced`): the informer passes it
    /// to its watch-error handler, as the reflector does with an undecodable item of a decoded
    /// list.
    #[must_use]
    pub(crate) fn with_unreadable_report(mut self, report: UnreadableReport) -> Self {
        self.unreadable = Some(report);
        self
    }

    /// Holds listed objects (after the transform) and resync deltas packed by `cache` while they
    /// are queued, and decodes each as it is popped: in `CacheStorage::Compact` mode a cold
    /// list of N objects is then N compressed objects, not N decoded ones, and the cache keeps
    /// the bytes packed here. `cache` must be the store the popped deltas are applied to (the
    /// informer's); a store that keeps objects decoded packs nothing, and the FIFO works as
    /// without this.
    #[must_use]
    pub(crate) fn with_packing(mut self, cache: Indexer<K>) -> Self {
        self.packer = cache.packs().then_some(cache);
        self
    }

    /// The object a held delta carries, decoded if packed (and left queued); `None`, logged, if
    /// it does not decode.
    fn held_object(&self, held: &Held<K>) -> Option<Arc<K>> {
        match held {
            Held::Delta(d) => Some(Arc::clone(d.object.object())),
            Held::Packed(_, packed) => self.peek(packed),
        }
    }

    fn peek(&self, packed: &Packed) -> Option<Arc<K>> {
        let cache = self.packer.as_ref()?;
        cache
            .peek(packed)
            .map_err(|e| tracing::error!(error = %e, "queued object unreadable"))
            .ok()
    }

    /// Held deltas as handed out: packed ones decoded (and their bytes passed to the cache, for
    /// `take`), or copies (for a look at the queue). A packed object taken out that does not
    /// decode (the server's bytes do not fit `K`) becomes a tombstone of its key, and its error
    /// goes to `unreadable`, to be reported with the lock released; one looked at is logged and
    /// left out.
    fn deltas_of<'a>(
        &self,
        held: impl IntoIterator<Item = HeldRef<'a, K>>,
        unreadable: &mut Vec<(ObjectKey, StorageError)>,
    ) -> Deltas<K>
    where
        K: 'a,
    {
        // The newest object handed out so far, for the tombstone of one that does not decode.
        let mut newest: Option<Arc<K>> = None;
        let mut deltas = Vec::new();
        for h in held {
            let delta = match h {
                HeldRef::Owned(Held::Delta(d)) => Some(d),
                HeldRef::Borrowed(Held::Delta(d)) => Some(d.clone()),
                HeldRef::Owned(Held::Packed(kind, packed)) => {
                    self.unpacked(kind, packed, newest.as_ref(), unreadable)
                }
                HeldRef::Borrowed(Held::Packed(kind, packed)) => {
                    self.peek(packed).map(|obj| Delta {
                        kind: *kind,
                        object: DeltaObject::Object(obj),
                    })
                }
            };
            if let Some(d) = delta {
                newest = Some(Arc::clone(d.object.object()));
                deltas.push(d);
            }
        }
        deltas
    }

    /// A packed delta taken out of the queue, decoded (and its bytes passed to the cache).
    fn unpacked(
        &self,
        kind: DeltaType,
        packed: Packed,
        newest: Option<&Arc<K>>,
        unreadable: &mut Vec<(ObjectKey, StorageError)>,
    ) -> Option<Delta<K>> {
        let cache = self.packer.as_ref()?;
        let key = packed.key().clone();
        let e = match cache.unpack(packed) {
            Ok(obj) => {
                return Some(Delta {
                    kind,
                    object: DeltaObject::Object(obj),
                });
            }
            Err(e) => e,
        };
        // An object packed from the bytes the server sent (listed or watched) that does not
        // decode (it does not fit `K`): as for an undecodable item of a decoded list or watch, the
        // key goes, as a deletion whose final state is unknown, with the newest object of the key
        // handed out before it, else the cached one (client-go `DeltaFIFO.Replace` and the
        // reflector's tombstones take the newest queued object too).
        unreadable.push((key.clone(), e));
        let from_server = matches!(
            kind,
            DeltaType::Added | DeltaType::Updated | DeltaType::Replaced
        );
        let obj =
            from_server.then(|| newest.cloned().or_else(|| cache.get_by_key(key.as_str())))??;
        Some(Delta {
            kind: DeltaType::Deleted,
            object: DeltaObject::DeletedFinalStateUnknown(DeletedFinalStateUnknown { key, obj }),
        })
    }

    /// Publishes `has_synced` once it turns true; call with the state lock held, after a change.
    fn note_synced(&self, state: &State<K>) {
        if state.has_synced() && !*self.synced.borrow() {
            self.synced.send_replace(true);
        }
    }

    /// Waits until [`has_synced`](Self::has_synced).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn wait_synced(&self) {
        let mut rx = self.synced.subscribe();
        // The sender lives in `self`, so `wait_for` cannot fail while we borrow it.
        let _ = rx.wait_for(|s| *s).await;
    }

    /// Sets the transform applied to every object added, updated, deleted or replaced; not to
    /// resync deltas or tombstones, whose objects come from the store and were transformed
    /// already (client-go `queueActionInternalLocked`).
    #[must_use]
    pub fn with_transform(mut self, transform: TransformFn<K>) -> Self {
        self.transform = Some(transform);
        self
    }

    /// Keys `obj` (before the transform, as client-go does) and transforms it; runs outside the
    /// lock because a transform may be costly and needs no shared state. A transform that
    /// panics leaves the object out and tombstones its cached version (see [`TransformFn`]).
    fn prepare(&self, obj: K) -> Result<(ObjectKey, Arc<K>), FifoError> {
        let key = key_of(&obj)?;
        match self.transformed(&key, obj) {
            Ok(obj) => Ok((key, obj)),
            Err(e) => {
                self.delete_final_state_unknown(&key);
                Err(e)
            }
        }
    }

    fn transformed(&self, key: &ObjectKey, obj: K) -> Result<Arc<K>, FifoError> {
        transform_object(self.transform.as_ref(), key, obj)
    }

    fn enqueue(&self, kind: DeltaType, obj: K) -> Result<(), FifoError> {
        let (key, obj) = self.prepare(obj)?;
        self.enqueue_held(
            key,
            Held::Delta(Delta {
                kind,
                object: DeltaObject::Object(obj),
            }),
        );
        Ok(())
    }

    fn enqueue_held(&self, key: ObjectKey, held: Held<K>) {
        let queued = {
            let mut state = self.state.lock();
            state.populated = true;
            let queued = state.queue_held(key, held);
            self.note_synced(&state);
            queued
        };
        if queued {
            self.wake.notify_one();
        }
    }

    /// [`enqueue`](Self::enqueue) for a watched object handed over as its bytes: packed from
    /// them, never decoded here (see [`ReflectorStore::add_bytes`]).
    fn enqueue_bytes(&self, kind: DeltaType, object: &WatchedBytes) -> Result<(), FifoError> {
        let key = object.meta().key()?;
        let held = match from_bytes(
            self.packer.as_ref(),
            self.transform.as_ref(),
            key.clone(),
            object.meta(),
            object.bytes(),
        ) {
            Ok(FromBytes::Packed(packed)) => Held::Packed(kind, packed),
            Ok(FromBytes::Decoded(obj)) => Held::Delta(Delta {
                kind,
                object: DeltaObject::Object(obj),
            }),
            Err(e) => {
                // Unpacked and undecodable: as for a decoded watch event whose object does not
                // decode, the cached version goes.
                if matches!(e, FifoError::Undecodable { .. }) {
                    self.delete_final_state_unknown(&key);
                }
                return Err(e);
            }
        };
        self.enqueue_held(key, held);
        Ok(())
    }

    /// Queues an [`DeltaType::Added`] delta.
    ///
    /// # Errors
    ///
    /// [`FifoError::Key`] if the object has no valid key; the FIFO is unchanged.
    /// [`FifoError::Transform`] if the transform panics: the object is left out and the key's
    /// known version is queued as a [`DeletedFinalStateUnknown`] tombstone (see [`TransformFn`]).
    pub fn add(&self, obj: K) -> Result<(), FifoError> {
        self.enqueue(DeltaType::Added, obj)
    }

    /// Queues an [`DeltaType::Updated`] delta.
    ///
    /// # Errors
    ///
    /// [`FifoError::Key`] if the object has no valid key; the FIFO is unchanged.
    /// [`FifoError::Transform`] if the transform panics, as for [`add`](Self::add).
    pub fn update(&self, obj: K) -> Result<(), FifoError> {
        self.enqueue(DeltaType::Updated, obj)
    }

    /// Queues a [`DeltaType::Deleted`] delta, unless the key is neither queued nor known: that
    /// deletion was already reported by a relist's tombstone, so it is dropped (client-go
    /// `DeltaFIFO.Delete`). A second trailing delete collapses into the first.
    ///
    /// # Errors
    ///
    /// [`FifoError::Key`] if the object has no valid key; the FIFO is unchanged.
    /// [`FifoError::Transform`] if the transform panics, as for [`add`](Self::add).
    pub fn delete(&self, obj: K) -> Result<(), FifoError> {
        let (key, obj) = self.prepare(obj)?;
        let queued = {
            let mut state = self.state.lock();
            state.populated = true;
            let news = state.items.contains_key(&key)
                || self
                    .known
                    .as_ref()
                    .is_some_and(|known| known.get_by_key(&key).is_some());
            let queued =
                news && state.queue_action(key, DeltaType::Deleted, DeltaObject::Object(obj));
            self.note_synced(&state);
            queued
        };
        if queued {
            self.wake.notify_one();
        }
        Ok(())
    }

    /// Makes one listed object ready to queue, as soon as it is decoded (the
    /// [`ReflectorStore::list_item`] of the FIFO): the cached `Arc` when the consumer holds the
    /// same resourceVersion (a relist then costs the cache plus what changed, not a second copy
    /// of everything, and handlers see the very same object on the resync), else the object
    /// transformed at once (so a transform that drops fields lowers the peak too).
    ///
    /// # Errors
    ///
    /// [`FifoError::Key`] for an object without a valid key, [`FifoError::Transform`] when the
    /// transform panics.
    pub fn prepare_list_item(&self, obj: K) -> Result<ListItem<K>, FifoError> {
        list_item(
            self.packer.as_ref(),
            self.known.as_ref(),
            self.transform.as_ref(),
            obj,
        )
    }

    /// [`prepare_list_item`](Self::prepare_list_item) for an object handed over as its bytes
    /// (see [`ReflectorStore::list_item_bytes`]): packed from them, never decoded here, or a
    /// reference to the cached version when its resourceVersion is the one listed. Without a
    /// cache that packs, or when the bytes cannot be packed, the object is decoded and prepared
    /// as usual.
    ///
    /// # Errors
    ///
    /// [`FifoError::Key`] for a missing or invalid name; [`FifoError::Packed`] without a cache
    /// that packs, or with a transform (which needs the decoded object); [`FifoError::Undecodable`]
    /// when the bytes could not be packed and the cache could not decode them either.
    pub fn prepare_list_item_bytes(
        &self,
        meta: ListedMeta,
        bytes: ItemBytes<'_>,
    ) -> Result<ListItem<K>, FifoError> {
        let key = meta.key()?;
        from_bytes(
            self.packer.as_ref(),
            self.transform.as_ref(),
            key,
            &meta,
            bytes,
        )
        .map(FromBytes::into_list_item)
    }

    /// Queues a [`DeltaType::Deleted`] tombstone for `key` whose current state cannot be
    /// represented (the server sent a version that does not decode). The tombstone carries the
    /// newest queued object, or else the known one; with neither, nothing is queued.
    pub fn delete_final_state_unknown(&self, key: &ObjectKey) {
        let queued = {
            let mut state = self.state.lock();
            state.populated = true;
            let newest = state
                .items
                .get(key)
                .and_then(|deltas| deltas.last())
                .and_then(|d| self.held_object(d));
            let queued =
                match newest.or_else(|| self.known.as_ref().and_then(|k| k.get_by_key(key))) {
                    Some(obj) => {
                        let tombstone = DeletedFinalStateUnknown {
                            key: key.clone(),
                            obj,
                        };
                        state.queue_action(
                            key.clone(),
                            DeltaType::Deleted,
                            DeltaObject::DeletedFinalStateUnknown(tombstone),
                        )
                    }
                    None => false,
                };
            self.note_synced(&state);
            queued
        };
        if queued {
            self.wake.notify_one();
        }
    }

    /// Replaces the FIFO's view with a full list (client-go `DeltaFIFO.Replace` with
    /// `EmitDeltaTypeReplaced`): every listed object gets a [`DeltaType::Replaced`] delta; a queued
    /// key missing from the list gets a [`DeltaType::Deleted`] tombstone carrying its newest queued
    /// object; a known key missing from the list with nothing queued gets a tombstone carrying the
    /// known object. The first replace fixes the number of items to pop before
    /// [`has_synced`](Self::has_synced).
    ///
    /// # Errors
    ///
    /// [`FifoError::Key`] if any object has no valid key; [`FifoError::Transform`] if the
    /// transform panics on a listed object. Both are met before anything changes, so the FIFO
    /// is then unchanged.
    pub fn replace(&self, list: Vec<K>, resource_version: &str) -> Result<(), FifoError> {
        let items = list
            .into_iter()
            .map(|obj| ListItem::Decoded(Box::new(obj)))
            .collect();
        self.replace_items(items, resource_version)
    }

    /// [`replace`](Self::replace) with items that may be ready already: the reflector transforms
    /// each listed object as soon as it is decoded, and hands over the cached `Arc` of every
    /// unchanged one. [`ListItem::Ready`] items are queued as they are.
    ///
    /// # Errors
    ///
    /// As [`replace`](Self::replace).
    pub fn replace_items(
        &self,
        list: Vec<ListItem<K>>,
        resource_version: &str,
    ) -> Result<(), FifoError> {
        let keys = list
            .iter()
            .map(|item| match item {
                ListItem::Decoded(obj) => key_of(obj),
                ListItem::Ready(obj) => key_of(obj),
                ListItem::Packed(packed) => Ok(packed.key().clone()),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let objs: Vec<Held<K>> = list
            .into_iter()
            .zip(&keys)
            .map(|(item, key)| {
                let obj = match item {
                    ListItem::Decoded(obj) => self.transformed(key, *obj)?,
                    ListItem::Ready(obj) => obj,
                    ListItem::Packed(packed) => {
                        return Ok(Held::Packed(DeltaType::Replaced, packed));
                    }
                };
                Ok(Held::Delta(Delta {
                    kind: DeltaType::Replaced,
                    object: DeltaObject::Object(obj),
                }))
            })
            .collect::<Result<_, FifoError>>()?;
        let mut listed: HashSet<ObjectKey> = HashSet::with_capacity(keys.len());
        let mut newly_queued = false;
        {
            let mut state = self.state.lock();
            for (key, obj) in keys.into_iter().zip(objs) {
                listed.insert(key.clone());
                newly_queued |= state.queue_held(key, obj);
            }

            // Deletions the watch missed, among keys still queued. These keys are queued already,
            // so the map's order does not matter.
            let mut queued_deletions = 0;
            for (key, deltas) in &mut state.items {
                if listed.contains(key) {
                    continue;
                }
                let Some(obj) = deltas.last().and_then(|newest| self.held_object(newest)) else {
                    continue;
                };
                let tombstone = DeletedFinalStateUnknown {
                    key: key.clone(),
                    obj,
                };
                deltas.push(Held::Delta(Delta {
                    kind: DeltaType::Deleted,
                    object: DeltaObject::DeletedFinalStateUnknown(tombstone),
                }));
                dedup_trailing_deletes(deltas);
                queued_deletions += 1;
            }

            // Deletions the watch missed, among objects the consumer holds and nothing is queued for.
            if let Some(known) = &self.known {
                let mut missing: Vec<(ObjectKey, Arc<K>)> = Vec::new();
                let gone =
                    |key: &ObjectKey| !listed.contains(key) && !state.items.contains_key(key);
                if self.packer.is_some() {
                    // Only the missing ones decoded, not the whole cache.
                    for key in known.list_keys() {
                        if gone(&key)
                            && let Some(obj) = known.get_by_key(&key)
                        {
                            missing.push((key, obj));
                        }
                    }
                } else {
                    known.for_each_known(&mut |key, obj| {
                        if gone(key) {
                            missing.push((key.clone(), Arc::clone(obj)));
                        }
                    });
                }
                // Sorted so the queue order is reproducible (client-go's follows Go's map order).
                missing.sort_unstable_by(|a, b| a.0.cmp(&b.0));
                queued_deletions += missing.len();
                for (key, obj) in missing {
                    let tombstone = DeletedFinalStateUnknown {
                        key: key.clone(),
                        obj,
                    };
                    newly_queued |= state.queue_action(
                        key,
                        DeltaType::Deleted,
                        DeltaObject::DeletedFinalStateUnknown(tombstone),
                    );
                }
            }

            if !state.populated {
                state.populated = true;
                state.initial_population_count = listed.len() + queued_deletions;
            }
            resource_version.clone_into(&mut state.last_sync_resource_version);
            self.note_synced(&state);
        }
        if newly_queued {
            self.wake.notify_waiters();
        }
        Ok(())
    }

    /// Queues a [`DeltaType::Sync`] delta with the known object for every known key that has
    /// nothing queued (client-go `DeltaFIFO.Resync`); does nothing without known objects.
    ///
    /// # Errors
    ///
    /// None today; the `Result` matches the other producer methods.
    pub fn resync(&self) -> Result<(), FifoError> {
        let Some(known) = &self.known else {
            return Ok(());
        };
        let mut newly_queued = false;
        if self.packer.is_some() {
            // Queued as references to the cache, decoded one at a time as they are popped.
            let mut state = self.state.lock();
            for key in known.list_keys() {
                if !state.items.contains_key(&key) {
                    let packed = Packed::cached(key.clone());
                    newly_queued |= state.queue_held(key, Held::Packed(DeltaType::Sync, packed));
                }
            }
        } else {
            let mut state = self.state.lock();
            known.for_each_known(&mut |key, obj| {
                if !state.items.contains_key(key) {
                    newly_queued |= state.queue_action(
                        key.clone(),
                        DeltaType::Sync,
                        DeltaObject::Object(Arc::clone(obj)),
                    );
                }
            });
        }
        if newly_queued {
            self.wake.notify_waiters();
        }
        Ok(())
    }

    /// Waits for a queued key, removes it and calls `process(deltas, is_in_initial_list)` with
    /// its deltas, oldest first, returning what `process` returns (client-go `DeltaFIFO.Pop`).
    /// `is_in_initial_list` is true while the FIFO has not synced, i.e. for the items of the first
    /// replace.
    ///
    /// `process` runs while the FIFO's lock is held, as in client-go, so that a concurrent
    /// `replace` cannot infer deletions from a store the consumer is halfway through updating.
    /// It must therefore not call into this FIFO (that would deadlock), must not block, and
    /// should be quick: the informer updates its cache in `process` and hands notifications to
    /// its handlers only after `pop` has returned, with the lock released.
    ///
    /// # Errors
    ///
    /// [`FifoError::Closed`] once the FIFO is closed and empty; items queued before (or after)
    /// closing are still handed out.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a key is removed only in the same step that calls `process` and completes
    /// the future, so dropping the future loses nothing.
    pub async fn pop<R>(&self, process: impl FnOnce(Deltas<K>, bool) -> R) -> Result<R, FifoError> {
        loop {
            // Registered before looking at the queue, so a push between the look and the await
            // still wakes us.
            let mut notified = pin!(self.wake.notified());
            notified.as_mut().enable();
            {
                let mut state = self.state.lock();
                while let Some(key) = state.queue.pop_front() {
                    let is_in_initial_list = !state.has_synced();
                    state.initial_population_count =
                        state.initial_population_count.saturating_sub(1);
                    // The invariant makes a miss impossible; skipping beats panicking.
                    let Some(held) = state.items.remove(&key) else {
                        continue;
                    };
                    let mut unreadable = Vec::new();
                    let deltas =
                        self.deltas_of(held.into_iter().map(HeldRef::Owned), &mut unreadable);
                    let out = process(deltas, is_in_initial_list);
                    self.note_synced(&state);
                    drop(state);
                    for (key, e) in &unreadable {
                        report_undecodable(self.unreadable.as_ref(), key, e);
                    }
                    return Ok(out);
                }
                // Keys skipped above still counted down the initial population.
                self.note_synced(&state);
                if state.closed {
                    return Err(FifoError::Closed);
                }
            }
            notified.await;
        }
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.state.lock().closed
    }

    /// True once the FIFO has been populated (by a replace or any add/update/delete) and every
    /// item of the first replace has been popped (client-go `DeltaFIFO.HasSynced`).
    pub fn has_synced(&self) -> bool {
        self.state.lock().has_synced()
    }

    /// The number of queued keys.
    pub fn len(&self) -> usize {
        self.state.lock().queue.len()
    }

    /// Whether no key is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The queued keys, in pop order.
    pub fn list_keys(&self) -> Vec<ObjectKey> {
        self.state.lock().queue.iter().cloned().collect()
    }

    /// A copy of the deltas queued for `key` (cheap: the objects are shared).
    pub fn get_by_key(&self, key: &str) -> Option<Deltas<K>> {
        let state = self.state.lock();
        let held = state.items.get(key)?;
        // A look decodes nothing it reports: an unreadable object is logged and left out.
        Some(self.deltas_of(held.iter().map(HeldRef::Borrowed), &mut Vec::new()))
    }

    /// The resource version passed to the last [`replace`](Self::replace).
    pub fn last_sync_resource_version(&self) -> String {
        self.state.lock().last_sync_resource_version.clone()
    }
}

impl<K> DeltaFifo<K> {
    /// Closes the FIFO: waiting and future [`pop`](Self::pop)s return [`FifoError::Closed`] once
    /// the queue is empty. Producers are not refused, as in client-go.
    pub fn close(&self) {
        self.state.lock().closed = true;
        self.wake.notify_waiters();
    }
}

impl<K: Resource + Send + Sync + 'static> ReflectorStore<K> for DeltaFifo<K> {
    type ListItem = ListItem<K>;

    fn add(&self, obj: K) -> Result<(), FifoError> {
        DeltaFifo::add(self, obj)
    }

    fn update(&self, obj: K) -> Result<(), FifoError> {
        DeltaFifo::update(self, obj)
    }

    fn delete(&self, obj: K) -> Result<(), FifoError> {
        DeltaFifo::delete(self, obj)
    }

    fn list_item(&self, obj: K) -> Result<ListItem<K>, FifoError> {
        self.prepare_list_item(obj)
    }

    /// Without a transform (which needs the decoded object), a packing FIFO packs listed and
    /// watched objects straight from their bytes.
    fn takes_item_bytes(&self) -> bool {
        self.packer.is_some() && self.transform.is_none()
    }

    fn list_item_bytes(
        &self,
        meta: ListedMeta,
        bytes: ItemBytes<'_>,
    ) -> Result<ListItem<K>, FifoError> {
        self.prepare_list_item_bytes(meta, bytes)
    }

    fn add_bytes(&self, object: &WatchedBytes) -> Result<(), FifoError> {
        self.enqueue_bytes(DeltaType::Added, object)
    }

    fn update_bytes(&self, object: &WatchedBytes) -> Result<(), FifoError> {
        self.enqueue_bytes(DeltaType::Updated, object)
    }

    fn replace(&self, items: Vec<ListItem<K>>, resource_version: &str) -> Result<(), FifoError> {
        self.replace_items(items, resource_version)
    }

    fn resync(&self) -> Result<(), FifoError> {
        DeltaFifo::resync(self)
    }

    fn forget(&self, key: &ObjectKey) {
        self.delete_final_state_unknown(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;
    use std::time::Duration;

    fn cm(name: &str, version: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                resource_version: Some(version.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn key(name: &str) -> ObjectKey {
        ObjectKey::new(Some("ns"), name).unwrap()
    }

    /// (kind, resourceVersion, is_tombstone) of each delta: enough to tell deltas apart.
    type Summary = Vec<(DeltaType, String, bool)>;

    fn summary(deltas: &Deltas<ConfigMap>) -> Summary {
        deltas
            .iter()
            .map(|d| {
                (
                    d.kind,
                    d.object
                        .object()
                        .metadata
                        .resource_version
                        .clone()
                        .unwrap_or_default(),
                    d.object.is_tombstone(),
                )
            })
            .collect()
    }

    /// Pops one key without waiting: `None` when nothing is queued.
    fn pop_now(fifo: &DeltaFifo<ConfigMap>) -> Option<(ObjectKey, Summary, bool)> {
        fifo.pop(|deltas, initial| {
            let k = match &deltas[0].object {
                DeltaObject::Object(o) => key_of(o).unwrap(),
                DeltaObject::DeletedFinalStateUnknown(t) => t.key.clone(),
            };
            (k, summary(&deltas), initial)
        })
        .now_or_never()
        .map(|r| r.unwrap())
    }

    fn s(kind: DeltaType, rv: &str, tomb: bool) -> (DeltaType, String, bool) {
        (kind, rv.to_owned(), tomb)
    }

    fn known_store(objs: &[ConfigMap]) -> (Indexer<ConfigMap>, DeltaFifo<ConfigMap>) {
        let store = Indexer::new();
        for o in objs {
            store.add(Arc::new(o.clone())).unwrap();
        }
        let fifo = DeltaFifo::new(Some(
            Arc::new(store.clone()) as Arc<dyn KnownObjects<ConfigMap>>
        ));
        (store, fifo)
    }

    #[test]
    fn deltas_accumulate_oldest_first_and_each_key_is_queued_once_in_first_change_order() {
        let fifo = DeltaFifo::new(None);
        fifo.add(cm("a", "1")).unwrap();
        fifo.add(cm("b", "1")).unwrap();
        fifo.update(cm("a", "2")).unwrap();
        fifo.delete(cm("a", "3")).unwrap();
        assert_eq!(fifo.list_keys(), [key("a"), key("b")]);
        assert_eq!(fifo.len(), 2);
        let (k, deltas, _) = pop_now(&fifo).unwrap();
        assert_eq!(k, key("a"));
        assert_eq!(
            deltas,
            [
                s(DeltaType::Added, "1", false),
                s(DeltaType::Updated, "2", false),
                s(DeltaType::Deleted, "3", false)
            ]
        );
        assert_eq!(pop_now(&fifo).unwrap().0, key("b"));
        assert!(pop_now(&fifo).is_none());
    }

    #[test]
    fn two_trailing_deletes_collapse_keeping_the_older() {
        let fifo = DeltaFifo::new(None);
        fifo.add(cm("a", "1")).unwrap();
        fifo.delete(cm("a", "2")).unwrap();
        fifo.delete(cm("a", "3")).unwrap();
        let (_, deltas, _) = pop_now(&fifo).unwrap();
        assert_eq!(
            deltas,
            [
                s(DeltaType::Added, "1", false),
                s(DeltaType::Deleted, "2", false)
            ]
        );
    }

    #[test]
    fn trailing_delete_after_a_tombstone_keeps_the_newer() {
        let fifo = DeltaFifo::new(None);
        fifo.add(cm("a", "1")).unwrap();
        fifo.replace(vec![], "10").unwrap(); // tombstone for queued "a"
        fifo.delete(cm("a", "2")).unwrap();
        let (_, deltas, _) = pop_now(&fifo).unwrap();
        assert_eq!(
            deltas,
            [
                s(DeltaType::Added, "1", false),
                s(DeltaType::Deleted, "2", false)
            ]
        );
    }

    #[test]
    fn delete_of_a_key_neither_queued_nor_known_is_dropped() {
        let fifo = DeltaFifo::new(None);
        fifo.delete(cm("a", "1")).unwrap();
        assert!(fifo.is_empty());
        let (_store, fifo) = known_store(&[cm("other", "1")]);
        fifo.delete(cm("a", "1")).unwrap();
        assert!(fifo.is_empty());
    }

    #[test]
    fn delete_of_a_known_key_is_queued() {
        let (_store, fifo) = known_store(&[cm("a", "1")]);
        fifo.delete(cm("a", "2")).unwrap();
        assert_eq!(
            pop_now(&fifo).unwrap().1,
            [s(DeltaType::Deleted, "2", false)]
        );
    }

    #[test]
    fn delete_final_state_unknown_tombstones_the_newest_queued_or_known_object() {
        let (_store, fifo) = known_store(&[cm("a", "1")]);
        let key = ObjectKey::parse("ns/a").unwrap();
        // Known only: the tombstone carries the known object.
        fifo.delete_final_state_unknown(&key);
        assert_eq!(
            pop_now(&fifo).unwrap().1,
            [s(DeltaType::Deleted, "1", true)]
        );
        // Queued: the tombstone carries the newest queued object.
        fifo.update(cm("a", "2")).unwrap();
        fifo.delete_final_state_unknown(&key);
        assert_eq!(
            pop_now(&fifo).unwrap().1,
            [
                s(DeltaType::Updated, "2", false),
                s(DeltaType::Deleted, "2", true)
            ]
        );
        // Neither queued nor known: nothing.
        let unknown = ObjectKey::parse("ns/nobody").unwrap();
        fifo.delete_final_state_unknown(&unknown);
        assert!(fifo.is_empty());
    }

    #[test]
    fn replace_queues_every_listed_object_as_replaced() {
        let fifo = DeltaFifo::new(None);
        fifo.add(cm("a", "1")).unwrap();
        fifo.replace(vec![cm("a", "2"), cm("b", "2")], "7").unwrap();
        assert_eq!(fifo.last_sync_resource_version(), "7");
        assert_eq!(
            pop_now(&fifo).unwrap().1,
            [
                s(DeltaType::Added, "1", false),
                s(DeltaType::Replaced, "2", false)
            ]
        );
        assert_eq!(
            pop_now(&fifo).unwrap().1,
            [s(DeltaType::Replaced, "2", false)]
        );
    }

    #[test]
    fn replace_emits_tombstone_for_queued_key_missing_from_list() {
        let fifo = DeltaFifo::new(None);
        fifo.add(cm("a", "1")).unwrap();
        fifo.update(cm("a", "2")).unwrap();
        fifo.replace(vec![cm("b", "5")], "5").unwrap();
        let (k, deltas, _) = pop_now(&fifo).unwrap();
        assert_eq!(k, key("a"));
        assert_eq!(
            deltas.last(),
            Some(&s(DeltaType::Deleted, "2", true)),
            "tombstone carries the newest queued object"
        );
    }

    #[test]
    fn replace_tombstone_unwraps_a_queued_tombstone() {
        let fifo = DeltaFifo::new(None);
        fifo.add(cm("a", "1")).unwrap();
        fifo.replace(vec![], "5").unwrap();
        fifo.replace(vec![], "6").unwrap();
        let deltas = fifo.get_by_key("ns/a").unwrap();
        assert_eq!(
            summary(&deltas),
            [
                s(DeltaType::Added, "1", false),
                s(DeltaType::Deleted, "1", true)
            ]
        );
        let DeltaObject::DeletedFinalStateUnknown(t) = &deltas[1].object else {
            panic!("not a tombstone")
        };
        assert_eq!(t.key, key("a"));
    }

    #[test]
    fn replace_emits_tombstone_for_known_key_missing_from_list() {
        let (_store, fifo) = known_store(&[cm("a", "1"), cm("b", "1")]);
        fifo.replace(vec![cm("b", "2")], "2").unwrap();
        assert_eq!(fifo.list_keys(), [key("b"), key("a")]);
        let deltas = fifo.get_by_key("ns/a").unwrap();
        assert_eq!(summary(&deltas), [s(DeltaType::Deleted, "1", true)]);
    }

    #[test]
    fn replace_gives_a_known_key_with_queued_deltas_only_one_tombstone() {
        let (_store, fifo) = known_store(&[cm("a", "1")]);
        fifo.update(cm("a", "2")).unwrap();
        fifo.replace(vec![], "3").unwrap();
        assert_eq!(
            summary(&fifo.get_by_key("ns/a").unwrap()),
            [
                s(DeltaType::Updated, "2", false),
                s(DeltaType::Deleted, "2", true)
            ]
        );
        assert_eq!(fifo.len(), 1);
    }

    #[test]
    fn replace_checks_every_key_before_changing_anything() {
        let fifo = DeltaFifo::new(None);
        fifo.add(cm("a", "1")).unwrap();
        let err = fifo
            .replace(vec![cm("b", "1"), ConfigMap::default()], "9")
            .unwrap_err();
        assert_eq!(err, FifoError::Key(KeyError::MissingName));
        assert_eq!(fifo.list_keys(), [key("a")]);
        assert_eq!(fifo.get_by_key("ns/a").unwrap().len(), 1);
        assert_eq!(fifo.last_sync_resource_version(), "");
    }

    #[test]
    fn object_without_name_is_a_typed_error() {
        let fifo = DeltaFifo::<ConfigMap>::new(None);
        for result in [
            fifo.add(ConfigMap::default()),
            fifo.update(ConfigMap::default()),
            fifo.delete(ConfigMap::default()),
        ] {
            assert_eq!(result, Err(FifoError::Key(KeyError::MissingName)));
        }
        assert!(fifo.is_empty());
    }

    #[test]
    fn has_synced_after_the_first_replace_has_been_popped() {
        let (_store, fifo) = known_store(&[cm("gone", "1")]);
        assert!(!fifo.has_synced());
        fifo.replace(vec![cm("a", "1"), cm("b", "1")], "1").unwrap();
        // Two listed items plus one tombstone for the known "gone".
        for _ in 0..3 {
            assert!(!fifo.has_synced());
            let (_, _, initial) = pop_now(&fifo).unwrap();
            assert!(
                initial,
                "items of the first replace are in the initial list"
            );
        }
        assert!(fifo.has_synced());
        fifo.add(cm("c", "1")).unwrap();
        assert!(
            !pop_now(&fifo).unwrap().2,
            "later items are not in the initial list"
        );
    }

    #[test]
    fn only_the_first_replace_sets_the_initial_population() {
        let fifo = DeltaFifo::new(None);
        fifo.replace(vec![cm("a", "1")], "1").unwrap();
        fifo.replace(vec![cm("a", "2"), cm("b", "2"), cm("c", "2")], "2")
            .unwrap();
        pop_now(&fifo).unwrap();
        assert!(fifo.has_synced());
        assert!(!pop_now(&fifo).unwrap().2);
    }

    #[test]
    fn any_producer_call_before_replace_populates_and_syncs() {
        let fifo = DeltaFifo::new(None);
        fifo.delete(cm("a", "1")).unwrap(); // dropped, but populates as in client-go
        assert!(fifo.has_synced());
        fifo.replace(vec![cm("a", "1")], "1").unwrap();
        assert!(fifo.has_synced());
    }

    #[test]
    fn resync_queues_sync_for_known_keys_with_nothing_queued() {
        let (_store, fifo) = known_store(&[cm("a", "1"), cm("b", "1")]);
        fifo.update(cm("a", "2")).unwrap();
        fifo.resync().unwrap();
        assert_eq!(
            summary(&fifo.get_by_key("ns/a").unwrap()),
            [s(DeltaType::Updated, "2", false)]
        );
        assert_eq!(
            summary(&fifo.get_by_key("ns/b").unwrap()),
            [s(DeltaType::Sync, "1", false)]
        );
        let fifo = DeltaFifo::<ConfigMap>::new(None);
        fifo.resync().unwrap();
        assert!(fifo.is_empty());
    }

    #[test]
    fn transform_applies_at_enqueue_but_not_to_sync_or_tombstones() {
        let (_store, fifo) = known_store(&[cm("known", "1"), cm("gone", "1")]);
        let fifo = fifo.with_transform(Arc::new(|mut o: ConfigMap| {
            o.metadata.resource_version = Some("T".into());
            o
        }));
        fifo.add(cm("a", "1")).unwrap();
        fifo.update(cm("a", "2")).unwrap();
        fifo.delete(cm("a", "3")).unwrap();
        fifo.replace(vec![cm("known", "2")], "2").unwrap();
        assert_eq!(
            summary(&fifo.get_by_key("ns/a").unwrap()),
            [
                s(DeltaType::Added, "T", false),
                s(DeltaType::Updated, "T", false),
                s(DeltaType::Deleted, "T", false)
            ]
        );
        assert_eq!(
            summary(&fifo.get_by_key("ns/known").unwrap()),
            [s(DeltaType::Replaced, "T", false)]
        );
        assert_eq!(
            summary(&fifo.get_by_key("ns/gone").unwrap()),
            [s(DeltaType::Deleted, "1", true)]
        );
        while pop_now(&fifo).is_some() {}
        fifo.resync().unwrap();
        assert_eq!(
            summary(&fifo.get_by_key("ns/known").unwrap()),
            [s(DeltaType::Sync, "1", false)]
        );
    }

    /// A task waiting in `pop`, returning the popped deltas' summary.
    fn spawn_pop(
        fifo: &Arc<DeltaFifo<ConfigMap>>,
    ) -> tokio::task::JoinHandle<Result<Summary, FifoError>> {
        let fifo = Arc::clone(fifo);
        tokio::spawn(async move { fifo.pop(|deltas, _| summary(&deltas)).await })
    }

    #[tokio::test(start_paused = true)]
    async fn pop_waits_for_work() {
        let fifo = Arc::new(DeltaFifo::new(None));
        let popper = spawn_pop(&fifo);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!popper.is_finished());
        fifo.add(cm("a", "1")).unwrap();
        let popped = tokio::time::timeout(Duration::from_secs(5), popper)
            .await
            .expect("pop likely deadlocked");
        assert_eq!(popped.unwrap().unwrap(), [s(DeltaType::Added, "1", false)]);
    }

    #[tokio::test(start_paused = true)]
    async fn pop_is_cancel_safe() {
        let fifo = DeltaFifo::new(None);
        // Cancelled while waiting: nothing lost, and the next pop still sees later work.
        assert!(
            tokio::time::timeout(Duration::from_secs(1), fifo.pop(|_, _| ()))
                .await
                .is_err()
        );
        fifo.add(cm("a", "1")).unwrap();
        let popped =
            tokio::time::timeout(Duration::from_secs(5), fifo.pop(|d, _| summary(&d))).await;
        assert_eq!(
            popped.expect("pop likely deadlocked").unwrap(),
            [s(DeltaType::Added, "1", false)]
        );
        // A pop future created but never polled takes nothing.
        fifo.add(cm("b", "1")).unwrap();
        drop(fifo.pop(|_, _| ()));
        assert_eq!(fifo.list_keys(), [key("b")]);
    }

    #[tokio::test(start_paused = true)]
    async fn close_wakes_a_waiting_pop_and_pop_drains_before_reporting_closed() {
        let fifo = Arc::new(DeltaFifo::new(None));
        let popper = spawn_pop(&fifo);
        tokio::task::yield_now().await;
        fifo.close();
        assert!(fifo.is_closed());
        let popped = tokio::time::timeout(Duration::from_secs(5), popper)
            .await
            .expect("pop likely deadlocked");
        assert_eq!(popped.unwrap(), Err(FifoError::Closed));
        fifo.add(cm("a", "1")).unwrap();
        assert!(fifo.pop(|_, _| ()).await.is_ok());
        assert_eq!(fifo.pop(|_, _| ()).await, Err(FifoError::Closed));
    }

    #[test]
    fn fifo_and_pop_future_are_send_sync() {
        fn assert_send_sync<T: Send + Sync>(_: &T) {}
        fn assert_send<T: Send>(_: &T) {}
        let fifo = DeltaFifo::<ConfigMap>::new(None);
        assert_send_sync(&fifo);
        assert_send(&fifo.pop(|_, _| ()));
    }
}

#[cfg(test)]
mod transform_panic_tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    fn cm(name: &str, rv: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn a_panicking_transform_is_a_typed_error_and_tombstones_the_cached_object() {
        let store = Indexer::new();
        store.add(Arc::new(cm("bad", "1"))).unwrap();
        let fifo = DeltaFifo::new(Some(Arc::new(store.clone()) as Arc<dyn KnownObjects<_>>))
            .with_transform(Arc::new(|o: ConfigMap| {
                assert_ne!(o.metadata.resource_version.as_deref(), Some("2"), "bug");
                o
            }));
        let err = fifo.update(cm("bad", "2")).unwrap_err();
        assert!(
            matches!(&err, FifoError::Transform { key, resource_version, panic }
                if key.as_str() == "ns/bad" && resource_version == "2" && panic.contains("bug")),
            "{err:?}"
        );
        let queued = fifo.get_by_key("ns/bad").unwrap();
        assert_eq!(queued.len(), 1);
        assert_eq!(queued[0].kind, DeltaType::Deleted);
        assert!(queued[0].object.is_tombstone());
        // A list item that panics is refused the same way; others go through.
        assert!(matches!(
            fifo.prepare_list_item(cm("bad", "2")),
            Err(FifoError::Transform { .. })
        ));
        assert!(fifo.prepare_list_item(cm("good", "3")).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn wait_synced_wakes_when_the_first_replace_is_popped_or_is_empty() {
        let fifo = Arc::new(DeltaFifo::<ConfigMap>::new(None));
        let waiter = tokio::spawn({
            let fifo = fifo.clone();
            async move { fifo.wait_synced().await }
        });
        fifo.replace(vec![cm("a", "1")], "1").unwrap();
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        fifo.pop(|_, _| ()).await.unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(1), waiter)
            .await
            .expect("wait_synced likely deadlocked")
            .unwrap();
        // An empty first list syncs without any pop.
        let empty = DeltaFifo::<ConfigMap>::new(None);
        empty.replace(vec![], "1").unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(1), empty.wait_synced())
            .await
            .expect("wait_synced likely deadlocked");
    }
}

/// A FIFO that packs listed objects for a compact cache (issue #12 part 4).
#[cfg(all(test, feature = "compact"))]
mod packing_tests {
    use super::*;
    use crate::{CacheStats, CacheStorage, CompactConfig};
    use futures::FutureExt;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    fn cm(name: &str, rv: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                resource_version: Some(rv.into()),
                labels: Some([("app".to_owned(), name.to_owned())].into()),
                ..Default::default()
            },
            data: Some([("body".to_owned(), format!("{name} at {rv} ").repeat(40))].into()),
            ..Default::default()
        }
    }

    /// A FIFO packing for a compact cache that keeps nothing decoded, and that cache.
    fn packing_fifo() -> (DeltaFifo<ConfigMap>, Indexer<ConfigMap>) {
        let config = CompactConfig::default()
            .hot_objects(0)
            .dictionary_samples(0);
        let cache = Indexer::with_storage(CacheStorage::Compact(config));
        let known: Arc<dyn KnownObjects<ConfigMap>> = Arc::new(cache.clone());
        (
            DeltaFifo::new(Some(known)).with_packing(cache.clone()),
            cache,
        )
    }

    /// Pops one key and applies its deltas to `cache` as the informer does; returns them.
    fn pop_apply(fifo: &DeltaFifo<ConfigMap>, cache: &Indexer<ConfigMap>) -> Deltas<ConfigMap> {
        fifo.pop(|deltas, _| {
            for d in &deltas {
                match (&d.kind, &d.object) {
                    (DeltaType::Deleted, obj) => cache.delete(obj.object()).unwrap(),
                    (_, obj) => cache.update(Arc::clone(obj.object())).unwrap(),
                }
            }
            deltas
        })
        .now_or_never()
        .expect("a key is queued")
        .unwrap()
    }

    fn list(fifo: &DeltaFifo<ConfigMap>, objs: &[ConfigMap], rv: &str) {
        let items = objs
            .iter()
            .map(|o| fifo.prepare_list_item(o.clone()).unwrap())
            .collect();
        fifo.replace_items(items, rv).unwrap();
    }

    fn counts(s: CacheStats) -> [u64; 4] {
        [s.packed, s.unpacks, s.kept_packed, s.decodes]
    }

    #[test]
    fn listed_objects_wait_packed_and_the_cache_keeps_their_bytes() {
        let (fifo, cache) = packing_fifo();
        let objs: Vec<_> = (0..50).map(|i| cm(&format!("c{i}"), "7")).collect();
        for o in &objs {
            assert!(matches!(
                fifo.prepare_list_item(o.clone()).unwrap(),
                ListItem::Packed(_)
            ));
        }
        list(&fifo, &objs, "7");
        // 50 packed for the look above, 50 for the list; nothing decoded while queued.
        assert_eq!(counts(cache.stats()), [100, 0, 0, 0]);

        // A look at the queue decodes a copy and leaves the object packed.
        let queued = fifo.get_by_key("ns/c3").unwrap();
        assert_eq!(**queued[0].object.object(), objs[3]);
        assert_eq!(counts(cache.stats()), [100, 1, 0, 0]);

        for _ in 0..50 {
            let deltas = pop_apply(&fifo, &cache);
            assert_eq!(deltas.len(), 1);
            assert_eq!(deltas[0].kind, DeltaType::Replaced);
        }
        // Each decoded once, as it was popped, and stored as the bytes packed: no encoding again.
        assert_eq!(counts(cache.stats()), [100, 51, 50, 0]);
        assert!(fifo.has_synced());
        for o in &objs {
            let key = key_of(o).unwrap();
            assert_eq!(*cache.get_by_key(key.as_str()).unwrap(), *o);
        }
        assert_eq!(cache.stats().decodes, 50);
    }

    #[test]
    fn a_relist_queues_unchanged_objects_as_references_to_the_cache() {
        let (fifo, cache) = packing_fifo();
        let objs: Vec<_> = (0..5).map(|i| cm(&format!("c{i}"), "1")).collect();
        list(&fifo, &objs, "1");
        while !fifo.is_empty() {
            pop_apply(&fifo, &cache);
        }
        let before = cache.stats();

        // c0..c2 unchanged, c3 changed, c4 gone.
        let mut relisted: Vec<_> = objs[..3].to_vec();
        relisted.push(cm("c3", "2"));
        list(&fifo, &relisted, "2");
        let after = cache.stats();
        // Only the changed one was packed, and only the gone one decoded (for its tombstone).
        assert_eq!(after.packed - before.packed, 1);
        assert_eq!(after.decodes - before.decodes, 1);

        let mut seen = Vec::new();
        while !fifo.is_empty() {
            let deltas = pop_apply(&fifo, &cache);
            let d = deltas.last().unwrap();
            let obj = d.object.object();
            seen.push((
                obj.metadata.name.clone().unwrap(),
                d.kind,
                obj.metadata.resource_version.clone().unwrap(),
                d.object.is_tombstone(),
            ));
        }
        seen.sort_by(|a, b| a.0.cmp(&b.0));
        let row = |n: &str, kind, rv: &str, tomb| (n.to_owned(), kind, rv.to_owned(), tomb);
        assert_eq!(
            seen,
            [
                row("c0", DeltaType::Replaced, "1", false),
                row("c1", DeltaType::Replaced, "1", false),
                row("c2", DeltaType::Replaced, "1", false),
                row("c3", DeltaType::Replaced, "2", false),
                row("c4", DeltaType::Deleted, "1", true),
            ]
        );
        assert_eq!(cache.len(), 4);
        assert_eq!(*cache.get_by_key("ns/c3").unwrap(), relisted[3]);
    }

    #[test]
    fn a_resync_queues_references_and_decodes_each_as_it_is_popped() {
        let (fifo, cache) = packing_fifo();
        let objs: Vec<_> = (0..3).map(|i| cm(&format!("c{i}"), "1")).collect();
        list(&fifo, &objs, "1");
        while !fifo.is_empty() {
            pop_apply(&fifo, &cache);
        }
        let decodes = cache.stats().decodes;
        fifo.resync().unwrap();
        assert_eq!(fifo.len(), 3);
        assert_eq!(
            cache.stats().decodes,
            decodes,
            "nothing decoded while queued"
        );
        let mut names = Vec::new();
        while !fifo.is_empty() {
            let deltas = pop_apply(&fifo, &cache);
            assert_eq!(deltas[0].kind, DeltaType::Sync);
            names.push(deltas[0].object.object().metadata.name.clone().unwrap());
        }
        names.sort();
        assert_eq!(names, ["c0", "c1", "c2"]);
        assert_eq!(cache.stats().decodes, decodes + 3);
    }

    #[test]
    fn a_queued_packed_object_missing_from_the_next_list_is_tombstoned_with_its_state() {
        let (fifo, cache) = packing_fifo();
        list(&fifo, &[cm("a", "1"), cm("b", "1")], "1");
        list(&fifo, &[cm("b", "1")], "2");
        let deltas = fifo.get_by_key("ns/a").unwrap();
        assert_eq!(deltas.len(), 2);
        assert!(deltas[1].object.is_tombstone());
        assert_eq!(**deltas[1].object.object(), cm("a", "1"));
        let popped = pop_apply(&fifo, &cache);
        assert_eq!(popped.len(), 2);
        assert_eq!(popped[0].kind, DeltaType::Replaced);
        assert_eq!(popped[1].kind, DeltaType::Deleted);
        assert!(cache.get_by_key("ns/a").is_none());
    }

    #[test]
    fn a_decoded_cache_packs_nothing() {
        let cache = Indexer::<ConfigMap>::new();
        let known: Arc<dyn KnownObjects<ConfigMap>> = Arc::new(cache.clone());
        let fifo = DeltaFifo::new(Some(known)).with_packing(cache);
        assert!(matches!(
            fifo.prepare_list_item(cm("a", "1")).unwrap(),
            ListItem::Ready(_)
        ));
    }

    /// A watched object handed over as its bytes (what the reflector does for a compact cache).
    fn watched(ty: &str, o: impl serde::Serialize) -> WatchedBytes {
        crate::reflector::decode::raw::watched_json(ty, o)
    }

    #[test]
    fn watched_objects_handed_over_as_bytes_wait_packed_and_the_cache_keeps_them() {
        let (fifo, cache) = packing_fifo();
        let (a1, a2) = (cm("a", "1"), cm("a", "2"));
        fifo.add_bytes(&watched("ADDED", &a1)).unwrap();
        fifo.update_bytes(&watched("MODIFIED", &a2)).unwrap();
        let stats = cache.stats();
        assert_eq!(
            (stats.packed_from_wire, stats.unpacks),
            (2, 0),
            "packed, not decoded"
        );

        // Merged under one key as decoded deltas are, and decoded as they are popped.
        let deltas = pop_apply(&fifo, &cache);
        let got: Vec<_> = deltas
            .iter()
            .map(|d| (d.kind, (**d.object.object()).clone()))
            .collect();
        assert_eq!(
            got,
            [(DeltaType::Added, a1), (DeltaType::Updated, a2.clone())]
        );
        let stats = cache.stats();
        assert_eq!((stats.unpacks, stats.kept_packed, stats.decodes), (2, 2, 0));
        assert_eq!(*cache.get_by_key("ns/a").unwrap(), a2);

        // The version already cached: a reference to it, nothing packed.
        fifo.update_bytes(&watched("MODIFIED", &a2)).unwrap();
        assert_eq!(cache.stats().packed_from_wire, 2);
        let deltas = pop_apply(&fifo, &cache);
        assert_eq!(**deltas[0].object.object(), a2);

        // A FIFO without a cache that packs takes no bytes; a nameless object has no key.
        let plain = DeltaFifo::<ConfigMap>::new(None);
        assert!(matches!(
            plain.update_bytes(&watched("MODIFIED", &a2)),
            Err(FifoError::Packed { key }) if key.as_str() == "ns/a"
        ));
        let mut nameless = a2.clone();
        nameless.metadata.name = None;
        assert_eq!(
            fifo.add_bytes(&watched("ADDED", &nameless)),
            Err(FifoError::Key(KeyError::MissingName))
        );
        assert!(fifo.is_empty());
    }

    #[test]
    fn a_watched_object_that_does_not_decode_tombstones_the_newest_one_before_it() {
        let (fifo, cache) = packing_fifo();
        cache.update(Arc::new(cm("a", "4"))).unwrap();
        let a5 = cm("a", "5");
        let mut bad = serde_json::to_value(cm("a", "6")).unwrap();
        bad["data"] = serde_json::json!("not a map");
        fifo.update_bytes(&watched("MODIFIED", &a5)).unwrap();
        fifo.update_bytes(&watched("MODIFIED", &bad)).unwrap();
        let deltas = pop_apply(&fifo, &cache);
        let got: Vec<_> = deltas
            .iter()
            .map(|d| {
                let tomb = matches!(d.object, DeltaObject::DeletedFinalStateUnknown(_));
                let rv = d.object.object().metadata.resource_version.clone();
                (d.kind, tomb, rv.unwrap())
            })
            .collect();
        // As the reflector's tombstone of a decoded watch: the newest queued object, not the
        // cached one.
        assert_eq!(
            got,
            [
                (DeltaType::Updated, false, "5".to_owned()),
                (DeltaType::Deleted, true, "5".to_owned())
            ]
        );
        assert!(cache.get_by_key("ns/a").is_none());
        assert_eq!(cache.stats().decode_errors, 1);
    }
}
