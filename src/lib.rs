//! Kubernetes client-go style informers for Rust.
//!
//! `kube-informer` ports client-go's informer machinery (`tools/cache`, `informers`,
//! `util/workqueue`) onto [`kube`]'s `Client`: a reflector lists and watches with client-go's
//! resourceVersion rules, feeds a DeltaFIFO, whose pops update a thread-safe indexer and fan
//! out to per-handler buffered listeners; listers read the cache; a rate-limited workqueue drives
//! your workers.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod selector;
pub mod store;
#[cfg(feature = "testing")]
pub mod testing;

pub use selector::parse_label_selector;
pub use store::{KeyError, ObjectKey, key_of, split_key};
