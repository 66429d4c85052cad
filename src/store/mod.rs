//! The informer cache: a thread-safe, indexed store of `Arc<K>` keyed by [`ObjectKey`].

mod key;

pub use key::{KeyError, ObjectKey, key_of, split_key};
