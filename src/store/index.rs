//! Index functions and the per-index value → keys map (client-go `tools/cache/index.go`).

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use kube::Resource;

use super::{KeyError, ObjectKey};

/// An index function: maps an object to the zero or more values it is indexed under
/// (client-go's `IndexFunc`, which cannot fail here: an object it has nothing to say about
/// simply yields no value).
///
/// It runs while the cache is being updated, with the cache's write lock held (and, in an
/// informer's DeltaFIFO mode, the FIFO's lock, as in client-go): it must look at the object
/// only, and must not call back into the cache, its informer or its FIFO, which would
/// deadlock.
pub type IndexFn<K> = Arc<dyn Fn(&K) -> Vec<String> + Send + Sync>;

/// Named index functions (client-go's `Indexers`).
pub type Indexers<K> = HashMap<String, IndexFn<K>>;

/// An [`IndexFn`] from a closure returning any iterable of values: a `Vec<String>`, an
/// `Option<String>` (one value or none), `[String; 1]`, an iterator (controller-runtime's
/// `IndexField` extractor, client-go's `IndexFunc` without the error).
///
/// ```
/// use k8s_openapi::api::core::v1::Pod;
/// use kube_informer::{IndexFn, index_fn};
///
/// // Pods by the node they run on; unscheduled Pods are in no entry.
/// let by_node: IndexFn<Pod> = index_fn(|pod: &Pod| pod.spec.as_ref()?.node_name.clone());
/// # let _ = by_node;
/// ```
pub fn index_fn<K, I>(f: impl Fn(&K) -> I + Send + Sync + 'static) -> IndexFn<K>
where
    I: IntoIterator,
    I::Item: Into<String>,
{
    Arc::new(move |obj: &K| f(obj).into_iter().map(Into::into).collect())
}

/// The name of the built-in namespace index (client-go's `cache.NamespaceIndex`).
pub const NAMESPACE_INDEX: &str = "namespace";

/// The namespace index function (client-go's `MetaNamespaceIndexFunc`): an object is indexed
/// under its `metadata.namespace`, so cluster-scoped objects land under `""` as in client-go.
pub fn namespace_index_fn<K: Resource>() -> IndexFn<K> {
    Arc::new(|obj: &K| vec![obj.meta().namespace.clone().unwrap_or_default()])
}

/// Why an index operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IndexError {
    /// No index with this name was registered.
    #[error("index {0:?} does not exist")]
    NoSuchIndex(String),
    /// An index with this name is already registered (client-go's "indexer conflict").
    #[error("index {0:?} already exists")]
    DuplicateIndex(String),
    /// The object has no valid key.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// The index function panicked on the object a query gave it
    /// ([`Indexer::index`](super::Indexer::index)); the panic is logged. (On a write, the object
    /// is left out of that index instead.)
    #[error("index function {0:?} panicked")]
    Panicked(String),
}

/// Index values → keys of the objects indexed under them, for one index (client-go's `Index`).
#[derive(Default)]
pub(super) struct Index {
    values: HashMap<String, HashSet<ObjectKey>>,
}

/// Below this many values a linear `contains` beats building a set to diff old and new values.
const LINEAR_DIFF_MAX: usize = 8;

/// The values one object is indexed under in one index, kept beside the object so that
/// updating or removing it never needs the old object (nor, in a compact cache, its decoding).
pub(super) type Values = Box<[Box<str>]>;

/// The index values of `values` as the store keeps them.
pub(super) fn values_of(values: Vec<String>) -> Values {
    values.into_iter().map(String::into_boxed_str).collect()
}

impl Index {
    pub(super) fn add(&mut self, key: &ObjectKey, values: &[Box<str>]) {
        for value in values {
            self.add_one(key, value);
        }
    }

    fn add_one(&mut self, key: &ObjectKey, value: &str) {
        match self.values.get_mut(value) {
            Some(keys) => {
                keys.insert(key.clone());
            }
            None => {
                self.values
                    .insert(value.to_owned(), HashSet::from([key.clone()]));
            }
        }
    }

    pub(super) fn remove(&mut self, key: &ObjectKey, values: &[Box<str>]) {
        for value in values {
            self.remove_one(key, value);
        }
    }

    fn remove_one(&mut self, key: &ObjectKey, value: &str) {
        if let Some(keys) = self.values.get_mut(value) {
            keys.remove(key);
            // An empty set would keep its value listed by `list_index_func_values` and leak
            // memory as values churn (client-go thread_safe_store.go deleteKeyFromIndex).
            if keys.is_empty() {
                self.values.remove(value);
            }
        }
    }

    /// Moves `key` from its `old` values to its `new` ones, touching only the values that
    /// differ (client-go only short-cuts the single unchanged value; a label index with many
    /// values would otherwise rehash every one of them on each update).
    pub(super) fn update(&mut self, key: &ObjectKey, old: &[Box<str>], new: &[Box<str>]) {
        if old == new {
            return;
        }
        if old.len() <= LINEAR_DIFF_MAX && new.len() <= LINEAR_DIFF_MAX {
            for value in old.iter().filter(|v| !new.contains(v)) {
                self.remove_one(key, value);
            }
            for value in new.iter().filter(|v| !old.contains(v)) {
                self.add_one(key, value);
            }
        } else {
            let old_set: HashSet<&str> = old.iter().map(|v| &**v).collect();
            let new_set: HashSet<&str> = new.iter().map(|v| &**v).collect();
            for value in old_set.difference(&new_set) {
                self.remove_one(key, value);
            }
            for value in new_set.difference(&old_set) {
                self.add_one(key, value);
            }
        }
    }

    pub(super) fn keys(&self, value: &str) -> Option<&HashSet<ObjectKey>> {
        self.values.get(value)
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &String> {
        self.values.keys()
    }
}
