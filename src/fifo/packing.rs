//! What both FIFOs do with a cache that packs (`CacheStorage::Compact`): listed and watched
//! objects wait in the queue as the cache's compressed bytes, or as a reference to the version
//! it holds, and are decoded as they are popped (issue #12 part 4).

use std::sync::Arc;

use kube::Resource;

use super::{
    ListItem,
    queue::{FifoError, KnownObjects, TransformFn, ready_list_item, transform_object},
};
use crate::{
    reflector::decode::{ItemBytes, ListedMeta},
    store::{Indexer, ObjectKey, Packed, StorageError, key_of},
};

/// Reports a packed object that did not decode when popped (as [`FifoError::Undecodable`]).
/// Called by Pop with the FIFO's lock released (the user's handler may call back into the
/// informer); a panic in it unwinds into Pop, so the informer's report catches its user's.
pub(crate) type UnreadableReport = Arc<dyn Fn(FifoError) + Send + Sync>;

/// An object handed over as its bytes, made ready to hold ([`from_bytes`]).
pub(super) enum FromBytes<K> {
    Packed(Packed),
    Decoded(Arc<K>),
}

impl<K> FromBytes<K> {
    pub(super) fn into_list_item(self) -> ListItem<K> {
        match self {
            Self::Packed(packed) => ListItem::Packed(packed),
            Self::Decoded(obj) => ListItem::Ready(obj),
        }
    }
}

/// Whether `cache` holds `key` at resourceVersion `rv` (not empty), read without decoding.
fn cached_at<K: Resource + Send + Sync + 'static>(
    cache: &Indexer<K>,
    key: &ObjectKey,
    rv: Option<&str>,
) -> bool {
    rv.is_some_and(|rv| !rv.is_empty()) && cache.resource_version_of(key.as_str()).as_deref() == rv
}

/// A listed object, decoded, made ready to queue in a FIFO: packed by `packer`, the cache that
/// packs, if there is one ([`pack_list_item`]), else the known object or the object transformed
/// ([`ready_list_item`]).
///
/// # Errors
///
/// [`FifoError::Key`], [`FifoError::Transform`].
pub(super) fn list_item<K: Resource + Send + Sync + 'static>(
    packer: Option<&Indexer<K>>,
    known: Option<&Arc<dyn KnownObjects<K>>>,
    transform: Option<&TransformFn<K>>,
    obj: K,
) -> Result<ListItem<K>, FifoError> {
    let key = key_of(&obj)?;
    match packer {
        Some(cache) => pack_list_item(cache, transform, key, obj),
        None => ready_list_item(known, transform, &key, obj).map(ListItem::Ready),
    }
}

/// A listed object, decoded, made ready to queue in a FIFO whose cache packs: a reference to
/// the cached version when it has the listed resourceVersion (compared without decoding it),
/// else the object transformed and packed (or held decoded when it cannot be packed).
fn pack_list_item<K: Resource + Send + Sync + 'static>(
    cache: &Indexer<K>,
    transform: Option<&TransformFn<K>>,
    key: ObjectKey,
    obj: K,
) -> Result<ListItem<K>, FifoError> {
    if cached_at(cache, &key, obj.meta().resource_version.as_deref()) {
        return Ok(ListItem::Packed(Packed::cached(key)));
    }
    let obj = transform_object(transform, &key, obj)?;
    // Keyed as transformed, as the object the FIFO decodes from it is.
    let key = key_of(&obj)?;
    Ok(match cache.pack(&key, &obj) {
        Some(packed) => ListItem::Packed(packed),
        None => ListItem::Ready(obj),
    })
}

/// An object handed over as its bytes (listed or watched), made ready to hold: packed from
/// them, or a reference to the cached version when its resourceVersion is the one given;
/// decoded when the bytes cannot be packed (no compression context). Only for a FIFO without a
/// transform, which needs the decoded object.
///
/// # Errors
///
/// [`FifoError::Packed`] without a cache that packs (`packer`) or with a transform;
/// [`FifoError::Undecodable`] when the bytes could not be packed and do not decode either.
pub(super) fn from_bytes<K: Resource + Send + Sync + 'static>(
    packer: Option<&Indexer<K>>,
    transform: Option<&TransformFn<K>>,
    key: ObjectKey,
    meta: &ListedMeta,
    bytes: ItemBytes<'_>,
) -> Result<FromBytes<K>, FifoError> {
    let Some(cache) = packer.filter(|_| transform.is_none()) else {
        return Err(FifoError::Packed { key });
    };
    if cached_at(cache, &key, meta.resource_version.as_deref()) {
        return Ok(FromBytes::Packed(Packed::cached(key)));
    }
    if let Some(packed) = cache.pack_bytes(&key, bytes, meta) {
        return Ok(FromBytes::Packed(packed));
    }
    match cache.decode_bytes(&key, bytes) {
        Ok(obj) => Ok(FromBytes::Decoded(obj)),
        Err(e) => Err(FifoError::Undecodable {
            key,
            error: e.to_string(),
        }),
    }
}

/// Logs a packed object that did not decode as it was popped, and tells `report` (the informer's,
/// which catches a panic in the user's handler). The caller drops the object and its cached
/// version goes, as for an undecodable object of a decoded list or watch.
pub(super) fn report_undecodable(
    report: Option<&UnreadableReport>,
    key: &ObjectKey,
    e: &StorageError,
) {
    tracing::warn!(key = %key, error = %e, "queued object does not decode; its key is tombstoned");
    let Some(report) = report else { return };
    let error = FifoError::Undecodable {
        key: key.clone(),
        error: e.to_string(),
    };
    report(error);
}
