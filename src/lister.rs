//! Listers: typed reads of an informer's cache (client-go `listers/`).

use std::sync::Arc;

use kube::{
    Resource,
    core::{Selector, SelectorExt},
};

use crate::store::{Cache, NAMESPACE_INDEX, ObjectKey};

/// Reads objects of type `K` from an informer's cache. Cheap to clone.
///
/// Lists filter by a label [`Selector`]; `Selector::default()` selects everything. Build one
/// from a string with [`parse_label_selector`](crate::parse_label_selector).
pub struct Lister<K> {
    indexer: Cache<K>,
}

impl<K> Clone for Lister<K> {
    fn clone(&self) -> Self {
        Self {
            indexer: self.indexer.clone(),
        }
    }
}

impl<K> std::fmt::Debug for Lister<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lister")
            .field("type", &std::any::type_name::<K>())
            .finish()
    }
}

fn matches<K: Resource>(selector: &Selector, obj: &K) -> bool {
    if selector.selects_all() {
        return true;
    }
    match &obj.meta().labels {
        Some(labels) => selector.matches(labels),
        None => selector.matches(&Default::default()),
    }
}

impl<K> Lister<K>
where
    K: Resource + Send + Sync + 'static,
{
    /// A lister over a cache: an informer's read-only [`Cache`] (what
    /// [`SharedIndexInformer::indexer`](crate::SharedIndexInformer::indexer) returns) or a
    /// standalone [`Indexer`](crate::Indexer) (client-go's `NewLister(indexer)`).
    pub fn new(cache: impl Into<Cache<K>>) -> Self {
        Self {
            indexer: cache.into(),
        }
    }

    /// Every cached object matching `selector`, in all namespaces. Labels are matched before
    /// objects are read, so a compact cache decodes only the objects it returns.
    pub fn list(&self, selector: &Selector) -> Vec<Arc<K>> {
        self.indexer.list_selected(selector)
    }

    /// The object with this key (`namespace/name` or `name`).
    pub fn get_by_key(&self, key: &str) -> Option<Arc<K>> {
        self.indexer.get_by_key(key)
    }

    /// A cluster-scoped object by name (client-go's cluster-scoped `Lister.Get(name)`); for a
    /// cluster-scoped object the key is the name, so this is an alias of
    /// [`get_by_key`](Self::get_by_key). For a namespaced object use
    /// [`namespaced(ns).get(name)`](NamespaceLister::get).
    pub fn get(&self, name: &str) -> Option<Arc<K>> {
        self.indexer.get_by_key(name)
    }

    /// Reads restricted to one namespace.
    pub fn namespaced(&self, namespace: &str) -> NamespaceLister<K> {
        NamespaceLister {
            indexer: self.indexer.clone(),
            namespace: namespace.to_owned(),
        }
    }
}

/// Reads of one namespace, served from the namespace index (never a scan of the whole cache);
/// the namespace `""` reads every namespace, as [`Lister`] does.
pub struct NamespaceLister<K> {
    indexer: Cache<K>,
    namespace: String,
}

impl<K> std::fmt::Debug for NamespaceLister<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamespaceLister")
            .field("namespace", &self.namespace)
            .finish()
    }
}

impl<K> NamespaceLister<K>
where
    K: Resource + Send + Sync + 'static,
{
    /// Objects of this namespace matching `selector`. The namespace `""` is every namespace,
    /// as client-go's `ListAllByNamespace` has it (`metav1.NamespaceAll`).
    pub fn list(&self, selector: &Selector) -> Vec<Arc<K>> {
        if self.namespace.is_empty() {
            return self.indexer.list_selected(selector);
        }
        match self
            .indexer
            .by_index_selected(NAMESPACE_INDEX, &self.namespace, selector)
        {
            Ok(objs) => objs,
            // The namespace index is built in and cannot be removed; be defensive anyway.
            Err(_) => self
                .indexer
                .list()
                .into_iter()
                .filter(|o| {
                    o.meta().namespace.as_deref() == Some(&self.namespace)
                        && matches(selector, &**o)
                })
                .collect(),
        }
    }

    /// The object with this name in the namespace.
    pub fn get(&self, name: &str) -> Option<Arc<K>> {
        let key = ObjectKey::new(Some(&self.namespace), name).ok()?;
        self.indexer.get_by_key(key.as_str())
    }
}
