//! The informer cache: a thread-safe, indexed store of `Arc<K>` keyed by [`ObjectKey`].
//!
//! [`Indexer`] is client-go's `ThreadSafeStore` + `Indexer` (`tools/cache/thread_safe_store.go`,
//! `index.go`, `store.go`): objects keyed like `MetaNamespaceKeyFunc`, and named indices mapping
//! index values to the keys of the objects that produce them.

mod cache;
mod index;
mod key;
mod thread_safe;

pub use cache::Cache;
pub use index::{IndexError, IndexFn, Indexers, NAMESPACE_INDEX, index_fn, namespace_index_fn};
pub use key::{KeyError, KeySource, ObjectKey, key_of, split_key};
pub use thread_safe::{Indexer, StoreOp};
