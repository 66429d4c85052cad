//! The read-only view of an [`Indexer`]: what an informer hands out.

use std::{fmt, sync::Arc};

use kube::{Resource, core::Selector};

use super::{CacheStats, IndexError, Indexer, KeyError, ObjectKey, StorageError};

/// A read-only handle on an informer's cache (client-go's `GetIndexer()` as seen by user code).
///
/// The informer owns the writable [`Indexer`] and keeps it to itself, so nothing outside the
/// informer can put, remove or replace objects behind its back (kube-runtime's `Store`/`Writer`
/// split). Every read of [`Indexer`] is here, under the same name and with the same cost. Cloning
/// is cheap (one `Arc`), and clones see the informer's updates as they happen.
///
/// A standalone [`Indexer`] hands out its own read-only view with [`Indexer::reader`] or
/// `Cache::from(indexer)`.
///
/// ```
/// use std::sync::Arc;
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kube::api::ObjectMeta;
/// use kube_informer::{Cache, Indexer, NAMESPACE_INDEX};
///
/// let store = Indexer::<ConfigMap>::new();
/// let cache: Cache<ConfigMap> = store.reader();
/// store.add(Arc::new(ConfigMap {
///     metadata: ObjectMeta { name: Some("a".into()), namespace: Some("ns".into()), ..Default::default() },
///     ..Default::default()
/// })).unwrap();
/// assert!(cache.get_by_key("ns/a").is_some());
/// assert_eq!(cache.by_index(NAMESPACE_INDEX, "ns").unwrap().len(), 1);
/// ```
///
/// It has no write: this does not compile.
///
/// ```compile_fail
/// # use std::sync::Arc;
/// # use k8s_openapi::api::core::v1::ConfigMap;
/// let cache = kube_informer::Indexer::<ConfigMap>::new().reader();
/// cache.add(Arc::new(ConfigMap::default()));
/// ```
#[doc(alias = "Store")]
#[doc(alias = "IndexerReader")]
pub struct Cache<K> {
    indexer: Indexer<K>,
}

impl<K> Clone for Cache<K> {
    fn clone(&self) -> Self {
        Self {
            indexer: self.indexer.clone(),
        }
    }
}

impl<K> fmt::Debug for Cache<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Cache").field(&self.indexer).finish()
    }
}

impl<K> From<Indexer<K>> for Cache<K> {
    fn from(indexer: Indexer<K>) -> Self {
        Self { indexer }
    }
}

impl<K> From<&Indexer<K>> for Cache<K> {
    fn from(indexer: &Indexer<K>) -> Self {
        Self {
            indexer: indexer.clone(),
        }
    }
}

impl<K: Resource + Send + Sync + 'static> Cache<K> {
    /// The cached object with `obj`'s key (client-go `Get`).
    ///
    /// # Errors
    ///
    /// [`KeyError`] if the object has no valid key.
    pub fn get(&self, obj: &K) -> Result<Option<Arc<K>>, KeyError> {
        self.indexer.get(obj)
    }

    /// The cached object with this key (`namespace/name` or `name`; client-go `GetByKey`).
    pub fn get_by_key(&self, key: &str) -> Option<Arc<K>> {
        self.indexer.get_by_key(key)
    }

    /// Every cached object, in no particular order (client-go `List`).
    pub fn list(&self) -> Vec<Arc<K>> {
        self.indexer.list()
    }

    /// Every cached object whose labels `selector` selects (see [`Indexer::list_selected`]).
    pub fn list_selected(&self, selector: &Selector) -> Vec<Arc<K>> {
        self.indexer.list_selected(selector)
    }

    /// [`get_by_key`](Self::get_by_key) returning an unreadable stored object as an error (see
    /// [`Indexer::try_get_by_key`]).
    ///
    /// # Errors
    ///
    /// [`StorageError`] if the stored object does not decode.
    pub fn try_get_by_key(&self, key: &str) -> Result<Option<Arc<K>>, StorageError> {
        self.indexer.try_get_by_key(key)
    }

    /// The `resourceVersion` of the cached object with this key, read without decoding it
    /// (see [`Indexer::resource_version_of`]).
    pub fn resource_version_of(&self, key: &str) -> Option<String> {
        self.indexer.resource_version_of(key)
    }

    /// The cache's storage counters (see [`Indexer::stats`]).
    pub fn stats(&self) -> CacheStats {
        self.indexer.stats()
    }

    /// Every cached key, in no particular order (client-go `ListKeys`).
    pub fn list_keys(&self) -> Vec<ObjectKey> {
        self.indexer.list_keys()
    }

    /// The number of cached objects.
    pub fn len(&self) -> usize {
        self.indexer.len()
    }

    /// Whether the cache holds no object.
    pub fn is_empty(&self) -> bool {
        self.indexer.is_empty()
    }

    /// The objects indexed under `value` in index `index_name` (client-go `ByIndex`).
    ///
    /// # Errors
    ///
    /// [`IndexError::NoSuchIndex`] if no such index is registered.
    pub fn by_index(&self, index_name: &str, value: &str) -> Result<Vec<Arc<K>>, IndexError> {
        self.indexer.by_index(index_name, value)
    }

    /// [`by_index`](Self::by_index) keeping only the objects `selector` selects (see
    /// [`Indexer::by_index_selected`]).
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
        self.indexer.by_index_selected(index_name, value, selector)
    }

    /// The keys of the objects indexed under `value` in index `index_name` (client-go `IndexKeys`).
    ///
    /// # Errors
    ///
    /// [`IndexError::NoSuchIndex`] if no such index is registered.
    pub fn index_keys(&self, index_name: &str, value: &str) -> Result<Vec<ObjectKey>, IndexError> {
        self.indexer.index_keys(index_name, value)
    }

    /// The objects sharing at least one value of index `index_name` with `obj`
    /// (client-go `Index`), each once.
    ///
    /// # Errors
    ///
    /// [`IndexError::NoSuchIndex`] if no such index is registered;
    /// [`IndexError::Panicked`] if its function panicked on `obj`.
    pub fn index(&self, index_name: &str, obj: &K) -> Result<Vec<Arc<K>>, IndexError> {
        self.indexer.index(index_name, obj)
    }

    /// Every value index `index_name` currently holds objects under; empty for an unknown index
    /// (client-go `ListIndexFuncValues`).
    pub fn list_index_func_values(&self, index_name: &str) -> Vec<String> {
        self.indexer.list_index_func_values(index_name)
    }

    /// The names of the registered indices (client-go `GetIndexers`, names only).
    pub fn indexers(&self) -> Vec<String> {
        self.indexer.indexers()
    }

    /// The resourceVersion of the last change applied to the cache in order (client-go 1.36
    /// `LastStoreSyncResourceVersion`); see [`Indexer::last_store_sync_resource_version`].
    pub fn last_store_sync_resource_version(&self) -> String {
        self.indexer.last_store_sync_resource_version()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    fn cm(name: &str) -> Arc<ConfigMap> {
        Arc::new(ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    #[test]
    fn a_reader_sees_every_write_of_its_indexer() {
        let store = Indexer::<ConfigMap>::new();
        let cache = store.reader();
        assert!(cache.is_empty());
        store.add(cm("a")).unwrap();
        store.add(cm("b")).unwrap();
        assert_eq!(cache.len(), 2);
        assert!(cache.get_by_key("ns/a").is_some());
        assert!(cache.get(&cm("b")).unwrap().is_some());
        assert_eq!(
            cache.by_index(crate::NAMESPACE_INDEX, "ns").unwrap().len(),
            2
        );
        assert_eq!(
            cache
                .index_keys(crate::NAMESPACE_INDEX, "ns")
                .unwrap()
                .len(),
            2
        );
        assert_eq!(
            cache.index(crate::NAMESPACE_INDEX, &cm("x")).unwrap().len(),
            2
        );
        assert_eq!(
            cache.list_index_func_values(crate::NAMESPACE_INDEX),
            vec!["ns"]
        );
        assert_eq!(cache.indexers(), vec![crate::NAMESPACE_INDEX]);
        store.remove(&ObjectKey::parse("ns/a").unwrap());
        assert_eq!(cache.list_keys(), vec![ObjectKey::parse("ns/b").unwrap()]);
        assert_eq!(cache.list().len(), 1);
        store.bookmark("7");
        assert_eq!(cache.last_store_sync_resource_version(), "7");
    }

    #[test]
    fn a_reader_is_cheap_to_clone_and_send_sync() {
        fn assert_send_sync<T: Send + Sync + Clone>() {}
        assert_send_sync::<Cache<ConfigMap>>();
    }
}
