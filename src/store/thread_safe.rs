//! The thread-safe indexed store (client-go `tools/cache/thread_safe_store.go`).

use std::{
    collections::{HashMap, HashSet, hash_map::Entry},
    fmt,
    sync::Arc,
};

use kube::Resource;
use parking_lot::RwLock;

use super::{
    IndexError, IndexFn, Indexers, KeyError, NAMESPACE_INDEX, ObjectKey, index::Index, key_of,
    namespace_index_fn,
};

/// A thread-safe store of `Arc<K>` keyed by [`ObjectKey`], with named indices
/// (client-go's `cache.Indexer` over a `ThreadSafeStore`).
///
/// Client-go's `Resync` is not here: on a store it does nothing (the informer's resync goes
/// through its FIFO).
///
/// Cloning is cheap: clones share the same store. Readers never copy objects, they get the
/// `Arc` the informer stored.
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
    inner: Arc<RwLock<Inner<K>>>,
}

struct NamedIndex<K> {
    name: String,
    func: IndexFn<K>,
    index: Index,
}

struct Inner<K> {
    items: HashMap<ObjectKey, Arc<K>>,
    /// Few indices per store, so a `Vec` scanned by name beats hashing the name.
    indices: Vec<NamedIndex<K>>,
    /// The resourceVersion of the last change applied in order (client-go
    /// `LastStoreSyncResourceVersion`); empty until an in-order informer applies one.
    resource_version: String,
    /// Reports every change of `resource_version` (client-go `informer_store_resource_version`).
    rv_metric: Option<Arc<dyn crate::workqueue::SettableGaugeMetric>>,
}

impl<K> Inner<K> {
    fn set_resource_version(&mut self, rv: &str) {
        rv.clone_into(&mut self.resource_version);
        if let (Some(m), Some(v)) = (
            &self.rv_metric,
            crate::informer::resource_version_metric_value(rv),
        ) {
            m.set(v);
        }
    }
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
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<K> fmt::Debug for Indexer<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = self.inner.read();
        f.debug_struct("Indexer")
            .field("len", &inner.items.len())
            .field(
                "indexers",
                &inner.indices.iter().map(|i| &i.name).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl<K: Resource + Send + Sync + 'static> Default for Indexer<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K> Inner<K> {
    fn index(&self, name: &str) -> Result<&NamedIndex<K>, IndexError> {
        self.indices
            .iter()
            .find(|i| i.name == name)
            .ok_or_else(|| IndexError::NoSuchIndex(name.to_owned()))
    }

    /// Stores `obj` under `key` and maintains every index: one hash lookup for the item.
    fn put(&mut self, key: ObjectKey, obj: Arc<K>) -> Option<Arc<K>> {
        match self.items.entry(key) {
            Entry::Occupied(mut entry) => {
                let old = entry.get();
                // The same `Arc` again (a resync re-storing the cached object) cannot have moved.
                if !Arc::ptr_eq(old, &obj) {
                    for idx in &mut self.indices {
                        let old_values = idx.values(entry.key(), old);
                        let new_values = idx.values(entry.key(), &obj);
                        idx.index.update(entry.key(), old_values, new_values);
                    }
                }
                Some(entry.insert(obj))
            }
            Entry::Vacant(entry) => {
                for idx in &mut self.indices {
                    let values = idx.values(entry.key(), &obj);
                    idx.index.add(entry.key(), values);
                }
                entry.insert(obj);
                None
            }
        }
    }

    fn take(&mut self, key: &ObjectKey) -> Option<Arc<K>> {
        let old = self.items.remove(key)?;
        for idx in &mut self.indices {
            let values = idx.values(key, &old);
            idx.index.remove(key, &values);
        }
        Some(old)
    }

    fn objects<'a>(&self, keys: impl Iterator<Item = &'a ObjectKey>) -> Vec<Arc<K>> {
        keys.filter_map(|k| self.items.get(k).cloned()).collect()
    }
}

impl<K> NamedIndex<K> {
    /// The index values of `obj`. An index function that panics is caught, logged, and taken
    /// to give no values: the object stays in the store (and reaches the handlers), just not
    /// under this index, and the store's indices stay consistent, since every update and
    /// removal computes values the same way.
    fn values(&self, key: &ObjectKey, obj: &K) -> Vec<String> {
        index_values(&self.name, &self.func, key, obj)
    }
}

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

/// Builds one index over `items`.
fn build_index<K>(name: &str, func: &IndexFn<K>, items: &HashMap<ObjectKey, Arc<K>>) -> Index {
    let mut index = Index::default();
    for (key, obj) in items {
        index.add(key, index_values(name, func, key, obj));
    }
    index
}

impl<K: Resource + Send + Sync + 'static> Indexer<K> {
    /// An empty store with the built-in [`NAMESPACE_INDEX`] (which listers rely on).
    pub fn new() -> Self {
        Self {
            inner: Arc::new(RwLock::new(Inner {
                items: HashMap::new(),
                indices: vec![NamedIndex {
                    name: NAMESPACE_INDEX.to_owned(),
                    func: namespace_index_fn(),
                    index: Index::default(),
                }],
                resource_version: String::new(),
                rv_metric: None,
            })),
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
        self.inner.write().rv_metric = Some(metric);
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
        self.insert(key, obj);
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
        self.remove(&key);
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
    pub fn get_by_key(&self, key: &str) -> Option<Arc<K>> {
        self.inner.read().items.get(key).cloned()
    }

    /// Every stored object, in no particular order.
    pub fn list(&self) -> Vec<Arc<K>> {
        self.inner.read().items.values().cloned().collect()
    }

    /// Every stored key, in no particular order.
    pub fn list_keys(&self) -> Vec<ObjectKey> {
        self.inner.read().items.keys().cloned().collect()
    }

    /// The number of stored objects.
    pub fn len(&self) -> usize {
        self.inner.read().items.len()
    }

    /// Whether the store holds no object.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
        let keys = objs
            .iter()
            .map(|obj| key_of(obj))
            .collect::<Result<Vec<_>, _>>()?;
        let mut fresh = Inner {
            items: HashMap::with_capacity(objs.len()),
            indices: self.empty_indices(),
            resource_version: String::new(),
            rv_metric: None,
        };
        // Filled in list order, as `add` would: walking a built map in hash order instead
        // touches every object at random and measured four times slower at 100k objects.
        for (key, obj) in keys.into_iter().zip(objs) {
            fresh.put(key, obj);
        }
        let mut inner = self.inner.write();
        // Indexers are only ever appended, so any added meanwhile are the ones past ours.
        for named in inner.indices.iter().skip(fresh.indices.len()) {
            let index = build_index(&named.name, &named.func, &fresh.items);
            fresh.indices.push(NamedIndex {
                name: named.name.clone(),
                func: Arc::clone(&named.func),
                index,
            });
        }
        fresh.rv_metric = inner.rv_metric.take();
        match resource_version {
            Some(rv) => fresh.set_resource_version(rv),
            None => fresh.resource_version = std::mem::take(&mut inner.resource_version),
        }
        let old = std::mem::replace(&mut *inner, fresh);
        drop(inner);
        // Freeing the old objects can take a while; readers need not wait for it.
        drop(old);
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

    /// Applies `ops` in order under one write lock, so readers see all of them or none, and sets
    /// the store's resourceVersion to `resource_version` when given (client-go
    /// `threadSafeMap.Transaction`, used by in-order informers to apply a batch). Returns, for
    /// each op, the object it replaced or removed.
    pub fn transaction(
        &self,
        ops: Vec<StoreOp<K>>,
        resource_version: Option<&str>,
    ) -> Vec<Option<Arc<K>>> {
        let mut inner = self.inner.write();
        let previous = ops
            .into_iter()
            .map(|op| match op {
                StoreOp::Put(key, obj) => inner.put(key, obj),
                StoreOp::Remove(key) => inner.take(&key),
            })
            .collect();
        if let Some(rv) = resource_version.filter(|rv| !rv.is_empty()) {
            inner.set_resource_version(rv);
        }
        previous
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
        self.inner.read().resource_version.clone()
    }

    /// Sets the store's resourceVersion without changing its objects (client-go
    /// `threadSafeMap.Bookmark`).
    pub fn bookmark(&self, resource_version: &str) {
        if !resource_version.is_empty() {
            self.inner.write().set_resource_version(resource_version);
        }
    }

    /// The registered index functions with empty indices.
    fn empty_indices(&self) -> Vec<NamedIndex<K>> {
        let inner = self.inner.read();
        inner
            .indices
            .iter()
            .map(|i| NamedIndex {
                name: i.name.clone(),
                func: Arc::clone(&i.func),
                index: Index::default(),
            })
            .collect()
    }

    /// Stores `obj` under `key` (which the caller has computed with [`key_of`]) and returns the
    /// object it replaced: the informer's hot path, one lock and one hash lookup.
    pub fn insert(&self, key: ObjectKey, obj: Arc<K>) -> Option<Arc<K>> {
        self.inner.write().put(key, obj)
    }

    /// Removes the object under `key` and returns it.
    pub fn remove(&self, key: &ObjectKey) -> Option<Arc<K>> {
        self.inner.write().take(key)
    }

    /// The objects sharing at least one value of index `index_name` with `obj`
    /// (client-go `Index`), each once.
    ///
    /// # Errors
    ///
    /// [`IndexError::NoSuchIndex`] if no such index is registered.
    pub fn index(&self, index_name: &str, obj: &K) -> Result<Vec<Arc<K>>, IndexError> {
        let inner = self.inner.read();
        let named = inner.index(index_name)?;
        let values = (named.func)(obj);
        if let [value] = values.as_slice() {
            return Ok(named
                .index
                .keys(value)
                .map(|keys| inner.objects(keys.iter()))
                .unwrap_or_default());
        }
        let mut keys: HashSet<&ObjectKey> = HashSet::new();
        for value in &values {
            keys.extend(named.index.keys(value).into_iter().flatten());
        }
        Ok(inner.objects(keys.into_iter()))
    }

    /// The keys of the objects indexed under `value` in index `index_name` (client-go `IndexKeys`).
    ///
    /// # Errors
    ///
    /// [`IndexError::NoSuchIndex`] if no such index is registered.
    pub fn index_keys(&self, index_name: &str, value: &str) -> Result<Vec<ObjectKey>, IndexError> {
        let inner = self.inner.read();
        let named = inner.index(index_name)?;
        Ok(named
            .index
            .keys(value)
            .map(|keys| keys.iter().cloned().collect())
            .unwrap_or_default())
    }

    /// Every value index `index_name` currently holds objects under; empty for an unknown index,
    /// as in client-go `ListIndexFuncValues`.
    pub fn list_index_func_values(&self, index_name: &str) -> Vec<String> {
        let inner = self.inner.read();
        inner
            .index(index_name)
            .map(|named| named.index.values().cloned().collect())
            .unwrap_or_default()
    }

    /// The objects indexed under `value` in index `index_name` (client-go `ByIndex`).
    ///
    /// # Errors
    ///
    /// [`IndexError::NoSuchIndex`] if no such index is registered.
    pub fn by_index(&self, index_name: &str, value: &str) -> Result<Vec<Arc<K>>, IndexError> {
        let inner = self.inner.read();
        let named = inner.index(index_name)?;
        Ok(named
            .index
            .keys(value)
            .map(|keys| inner.objects(keys.iter()))
            .unwrap_or_default())
    }

    /// The names of the registered indices.
    pub fn indexers(&self) -> Vec<String> {
        self.inner
            .read()
            .indices
            .iter()
            .map(|i| i.name.clone())
            .collect()
    }

    /// Registers more indices and indexes the objects already stored under them, so it works
    /// before and after an informer starts (client-go `AddIndexers` since v0.30).
    ///
    /// # Errors
    ///
    /// [`IndexError::DuplicateIndex`] if a name is already registered; nothing is added then.
    pub fn add_indexers(&self, indexers: Indexers<K>) -> Result<(), IndexError> {
        let mut inner = self.inner.write();
        if let Some(name) = indexers
            .keys()
            .find(|n| inner.indices.iter().any(|i| &i.name == *n))
        {
            return Err(IndexError::DuplicateIndex(name.clone()));
        }
        for (name, func) in indexers {
            let index = build_index(&name, &func, &inner.items);
            inner.indices.push(NamedIndex { name, func, index });
        }
        Ok(())
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
    /// into this store with a write.
    pub(crate) fn for_each(&self, mut f: impl FnMut(&ObjectKey, &Arc<K>)) {
        for (key, obj) in &self.inner.read().items {
            f(key, obj);
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
