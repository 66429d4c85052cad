//! The seam between a reflector and what it writes into (client-go `ReflectorStore`).
//!
//! The reflector only decides *what happened* on the server (an object was added, changed or
//! deleted; a full list says this is everything; a bookmark moved the resourceVersion). Every
//! decision about how that is kept (queued per key or in order, transformed, held decoded or
//! compressed, reused from the cache on a relist) belongs to the store behind this trait.
//! [`DeltaFifo`](crate::DeltaFifo) is one implementation.

use super::decode::{ItemBytes, ListedMeta, WatchedBytes};
use crate::{fifo::FifoError, store::ObjectKey};

/// What a [`Reflector`](super::Reflector) writes into.
///
/// Methods take `&self`: the store is shared (through an `Arc`) with whoever consumes it, and is
/// called from the reflector's task only, one call at a time.
pub trait ReflectorStore<K>: Send + Sync + 'static {
    /// One listed object made ready for [`replace`](Self::replace) as soon as it is decoded,
    /// so a list is never held twice: for the [`DeltaFifo`](crate::DeltaFifo), the transformed
    /// `Arc`, or the cached `Arc` itself when the cache holds the same resourceVersion. A store
    /// that keeps objects in another form (compressed bytes, say) chooses its own item type.
    type ListItem: Send + 'static;

    /// A watch `ADDED` event.
    ///
    /// # Errors
    ///
    /// The object cannot be held (for example it has no name); the store is unchanged.
    fn add(&self, obj: K) -> Result<(), FifoError>;

    /// A watch `MODIFIED` event.
    ///
    /// # Errors
    ///
    /// As [`add`](Self::add).
    fn update(&self, obj: K) -> Result<(), FifoError>;

    /// A watch `DELETED` event.
    ///
    /// # Errors
    ///
    /// As [`add`](Self::add).
    fn delete(&self, obj: K) -> Result<(), FifoError>;

    /// Prepares one object of a list (or of a streaming list's initial events) as soon as it is
    /// decoded: what the store does here lowers the peak of a relist, since the list is
    /// collected as items of this type, never as decoded objects.
    ///
    /// # Errors
    ///
    /// The object cannot be held; the reflector reports it and leaves it out of the list, so
    /// [`replace`](Self::replace) removes any cached version of it.
    fn list_item(&self, obj: K) -> Result<Self::ListItem, FifoError>;

    /// Whether this store takes objects undecoded: listed ones through
    /// [`list_item_bytes`](Self::list_item_bytes), watched ones through
    /// [`add_bytes`](Self::add_bytes) and [`update_bytes`](Self::update_bytes). The default is
    /// `false`.
    fn takes_item_bytes(&self) -> bool {
        false
    }

    /// A watch `ADDED` event whose object is handed over as its bytes, undecoded (only called
    /// when [`takes_item_bytes`](Self::takes_item_bytes)), with its key and resourceVersion.
    /// The store keeps the bytes in its own form and decodes the object when it hands it out;
    /// an object that then does not decode is the store's to report and to drop from its cache.
    ///
    /// # Errors
    ///
    /// As [`add`](Self::add). The default refuses every object ([`FifoError::Packed`]).
    fn add_bytes(&self, object: &WatchedBytes) -> Result<(), FifoError> {
        Err(refused(object.meta()))
    }

    /// A watch `MODIFIED` event whose object is handed over as its bytes, as for
    /// [`add_bytes`](Self::add_bytes).
    ///
    /// # Errors
    ///
    /// As [`add_bytes`](Self::add_bytes).
    fn update_bytes(&self, object: &WatchedBytes) -> Result<(), FifoError> {
        Err(refused(object.meta()))
    }

    /// Prepares one listed object from its bytes, undecoded (only called when
    /// [`takes_item_bytes`](Self::takes_item_bytes)): `meta` is its key and resourceVersion. The
    /// store keeps the bytes in its own form and decodes the object when it hands it out.
    ///
    /// # Errors
    ///
    /// As [`list_item`](Self::list_item). The default refuses every item
    /// ([`FifoError::Packed`]).
    fn list_item_bytes(
        &self,
        meta: ListedMeta,
        bytes: ItemBytes<'_>,
    ) -> Result<Self::ListItem, FifoError> {
        let _ = bytes;
        Err(refused(&meta))
    }

    /// A complete list at `resource_version`: everything not in it is gone.
    ///
    /// # Errors
    ///
    /// An item cannot be held; the store is unchanged.
    fn replace(&self, items: Vec<Self::ListItem>, resource_version: &str) -> Result<(), FifoError>;

    /// A periodic resync: re-deliver what is cached.
    ///
    /// # Errors
    ///
    /// Implementation-defined; the reflector reports it and goes on.
    fn resync(&self) -> Result<(), FifoError>;

    /// The watch reached `resource_version` (a bookmark, or any event). The default does
    /// nothing; an in-order store records it as the store's resourceVersion.
    fn bookmark(&self, resource_version: &str) {
        let _ = resource_version;
    }

    /// The server holds an object under `key` that cannot be represented (it does not decode,
    /// or it could not be held): drop any cached version of it, as a deletion whose final state
    /// is unknown.
    fn forget(&self, key: &ObjectKey);

    /// Waits until the store takes another watch event: the reflector awaits it before reading
    /// each one, so a store whose consumer has fallen behind holds the watch back (and the
    /// server's stream with it) rather than queueing without bound. The default is always
    /// ready: the [`DeltaFifo`](crate::DeltaFifo) merges a key's changes, so it holds at most
    /// one entry per object.
    fn room(&self) -> impl std::future::Future<Output = ()> + Send {
        std::future::ready(())
    }
}

/// What a store that takes no bytes answers when handed an object's bytes: the object's key
/// with [`FifoError::Packed`], or the reason it has none.
fn refused(meta: &ListedMeta) -> FifoError {
    match meta.key() {
        Ok(key) => FifoError::Packed { key },
        Err(e) => e.into(),
    }
}
