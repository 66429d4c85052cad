//! The informer cache: a thread-safe, indexed store of objects keyed by [`ObjectKey`].
//!
//! [`Indexer`] is client-go's `ThreadSafeStore` + `Indexer` (`tools/cache/thread_safe_store.go`,
//! `index.go`, `store.go`): objects keyed like `MetaNamespaceKeyFunc`, and named indices mapping
//! index values to the keys of the objects that produce them. How each object is held (decoded,
//! or compressed) is the store's [`CacheStorage`].

mod cache;
mod index;
mod key;
mod storage;
mod thread_safe;

pub use cache::Cache;
pub use index::{IndexError, IndexFn, Indexers, NAMESPACE_INDEX, index_fn, namespace_index_fn};
pub use key::{KeyError, KeySource, ObjectKey, key_of, split_key};
#[cfg(feature = "compact")]
pub use storage::CompactConfig;
pub use storage::{CacheStats, CacheStorage, Packed, StorageError};
pub use thread_safe::{Indexer, StoreOp};
pub(crate) use {
    storage::Snapshot,
    thread_safe::{Listed, Written},
};
