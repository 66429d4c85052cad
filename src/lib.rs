//! Kubernetes client-go style informers for Rust.
//!
//! `kube-informer` ports client-go's informer machinery (`tools/cache`, `informers`,
//! `util/workqueue`) onto [`kube`]'s `Client`: a reflector lists and watches with client-go's
//! resourceVersion rules, feeds a DeltaFIFO, whose pops update a thread-safe indexer and fan
//! out to per-handler buffered listeners; listers read the cache; a rate-limited workqueue drives
//! your workers.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod fifo;
pub mod store;

pub use fifo::{
    DeletedFinalStateUnknown, Delta, DeltaFifo, DeltaObject, DeltaType, Deltas, FifoError,
    KnownObjects, TransformFn,
};
pub use store::{
    IndexError, IndexFn, Indexer, Indexers, KeyError, NAMESPACE_INDEX, ObjectKey, key_of,
    namespace_index_fn, split_key,
};
