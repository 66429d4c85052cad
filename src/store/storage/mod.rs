//! How an [`Indexer`](super::Indexer) holds its objects: the seam between the store's key map and
//! indices and the form each object is kept in (issue #12).
//!
//! One trait, [`Storage`], two implementations in their own modules: [`decoded`] keeps today's
//! `Arc<K>`; `compact` (feature `compact`) keeps compressed bytes and decodes on demand. The key,
//! the index values and (for selectors) the labels are kept beside each object by the store
//! itself, so keys, index queries and label selectors never need the object.

pub(super) mod decoded;

#[cfg(feature = "compact")]
pub(super) mod compact;

use std::sync::Arc;

use kube::core::Selector;

use super::ObjectKey;

#[cfg(feature = "compact")]
pub use compact::CompactConfig;

/// How an informer's cache holds its objects. The read API ([`Indexer`](super::Indexer),
/// [`Cache`](super::Cache), [`Lister`](crate::Lister)) is the same in every mode: reads return
/// `Arc<K>`.
///
/// ```
/// use kube_informer::{CacheStorage, InformerConfig};
///
/// let config = InformerConfig::default();
/// assert_eq!(config.cache_storage, CacheStorage::Decoded);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub enum CacheStorage {
    /// Each object decoded once and held as the `Arc<K>` every reader shares (the default, and
    /// what client-go does). Fastest reads; a decoded k8s-openapi `Pod` holds ~54 KB of heap.
    #[default]
    Decoded,
    /// Each object held compressed (listed and watched objects as the bytes the server sent,
    /// JSON or protobuf; transformed or projected ones as JSON) and decoded on demand; decoded objects are shared
    /// while anyone holds them, and a bounded set of recently used ones is kept (see
    /// [`CompactConfig`]). A fraction of the memory for caches read less often than they change.
    #[cfg(feature = "compact")]
    Compact(CompactConfig),
}

/// Counters of a cache's storage, for tests, benchmarks and metrics
/// ([`Indexer::stats`](super::Indexer::stats)). In [`CacheStorage::Decoded`] mode they are all
/// zero: nothing is ever decoded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CacheStats {
    /// Objects decoded from their stored bytes since the cache was made.
    pub decodes: u64,
    /// Stored objects that failed to decode (logged each time; see [`StorageError`]).
    pub decode_errors: u64,
    /// Reads answered by an object someone still held (a `Weak` upgrade), without decoding.
    pub shared_hits: u64,
    /// Bytes of compressed object data held now.
    pub stored_bytes: u64,
    /// Bytes those objects take encoded but uncompressed.
    pub encoded_bytes: u64,
    /// How many compression dictionaries were trained (the first one and every retraining).
    pub dictionary_trainings: u64,
    /// How many trainings were started: samples collected and handed to a training thread.
    /// One more than [`dictionary_trainings`](Self::dictionary_trainings) from the start of a
    /// training until the first write after it ends (which puts its dictionary in use); more
    /// than that only for trainings that found no dictionary (logged).
    pub dictionary_trainings_started: u64,
    /// Listed and watched objects packed for the FIFO (a cold list held compressed until
    /// popped, see [`Packed`]).
    pub packed: u64,
    /// Of those, objects packed straight from the bytes the server sent (never decoded before
    /// they were popped, never encoded by the cache).
    pub packed_from_wire: u64,
    /// Packed objects decoded as the FIFO handed them to the informer (counted apart from
    /// [`decodes`](Self::decodes), which are reads of the cache).
    pub unpacks: u64,
    /// Packed objects whose bytes the cache then kept, never encoding the object again (those
    /// packed before the first dictionary was trained are re-compressed with it, bytes to
    /// bytes): unpacked ones, and those an in-order relist stored as they were packed, without
    /// decoding them (see [`Packed`]; a decode there for an index counts in
    /// [`decodes`](Self::decodes)) or once checked (see [`checked`](Self::checked)).
    pub kept_packed: u64,
    /// Of those, the JSON objects of a k8s-openapi kind (one with a generated protobuf decoder)
    /// that an in-order relist checked before it stored them as they were packed: decoded with
    /// each `managedFields` entry's `fieldsV1` read but not built (k8s-openapi takes any JSON
    /// value there; see [`Projection::checking`](crate::reflector::decode::Projection::checking)),
    /// and dropped.
    pub checked: u64,
}

/// One listed object as a store that keeps objects in another form holds it while it waits in
/// the FIFO: in `CacheStorage::Compact` mode, its compressed bytes, so that a cold list of N
/// objects is never held as N decoded objects (issue #12 part 4). The FIFO decodes it when it
/// hands the object to the informer, and the store then keeps these very bytes (nothing is
/// encoded or compressed twice). Opaque: made and read by the store only.
pub struct Packed {
    pub(crate) key: ObjectKey,
    pub(crate) body: PackedBody,
}

impl Packed {
    /// The object's key.
    pub fn key(&self) -> &ObjectKey {
        &self.key
    }

    /// Whether this is a reference to the version cached under the key ([`cached`](Self::cached)).
    pub(crate) fn is_cached(&self) -> bool {
        matches!(self.body, PackedBody::Cached)
    }

    /// The version cached under the key when this was packed (a relist of an unchanged object, or
    /// a resync): nothing is copied, and the cached object is read when the FIFO hands it out.
    pub(crate) fn cached(key: ObjectKey) -> Self {
        Self {
            key,
            body: PackedBody::Cached,
        }
    }
}

impl std::fmt::Debug for Packed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let body = match &self.body {
            PackedBody::Cached => "cached",
            #[cfg(feature = "compact")]
            PackedBody::Compressed { .. } => "compressed",
        };
        f.debug_struct("Packed")
            .field("key", &self.key)
            .field("body", &body)
            .finish()
    }
}

/// What a [`Packed`] holds.
pub(crate) enum PackedBody {
    /// The cached object under the key.
    Cached,
    /// Compressed bytes made by the compact storage.
    #[cfg(feature = "compact")]
    Compressed {
        /// The bytes.
        blob: compact::Blob,
        /// What the store keeps beside them (resourceVersion and labels), when the bytes are
        /// known to decode, so that the store may hold them as they are, nothing decoded
        /// ([`Storage::store_packed`]): bytes encoded from a decoded object, and protobuf
        /// items of a kind `K` has a generated decoder for (`K` is then the k8s-openapi type the
        /// server encoded the object from). Not JSON as the server sent it, nor protobuf decoded
        /// through serde into a type of the user's, which may not fit `K` (a custom resource's
        /// type, a field whose type changed): those are decoded as the FIFO hands them out, and
        /// left out and reported if they do not decode.
        meta: Option<compact::SlotMeta>,
    },
}

/// Told of a stored object that did not decode when a snapshot of it was read for its handlers
/// (see [`Storage::report_unreadable`]). Called from a handler's thread with no lock held; a
/// panic in it unwinds into the read, so the informer's sink catches its user's.
pub(crate) type UnreadableSink = Arc<dyn Fn(StorageError) + Send + Sync>;

/// An object as a store held it when the snapshot was taken, readable later whatever the store
/// holds by then: the decoded object itself, or (`CacheStorage::Compact`) its compressed bytes,
/// decoded when read and shared by every clone of the snapshot while anyone holds the result.
/// The handlers' notifications of a relist, a resync or a late registration's replay carry
/// these, so that a compact cache never holds a whole list decoded while handlers work through
/// it (issue #12 part 4).
pub(crate) enum Snapshot<K> {
    /// The object.
    Decoded(Arc<K>),
    /// The stored form, decoded when read.
    Stored(Arc<dyn StoredObject<K>>),
}

impl<K> Clone for Snapshot<K> {
    fn clone(&self) -> Self {
        match self {
            Self::Decoded(obj) => Self::Decoded(Arc::clone(obj)),
            Self::Stored(s) => Self::Stored(Arc::clone(s)),
        }
    }
}

impl<K> Snapshot<K> {
    /// The object, decoded if need be.
    ///
    /// # Errors
    ///
    /// The stored form does not decode (see [`StorageError`]; counted and logged by the
    /// storage, and the first time reported to the storage's
    /// [sink](Storage::report_unreadable), since the handlers will not be told of the object).
    /// Call it with no lock held that the informer's error handler may take.
    pub(crate) fn load(&self) -> Result<Arc<K>, StorageError> {
        match self {
            Self::Decoded(obj) => Ok(Arc::clone(obj)),
            Self::Stored(s) => s.load(true),
        }
    }

    /// [`load`](Self::load) of an update's old object, not reported when it fails: the handlers
    /// are still told of the new object (as an add, as
    /// [`Indexer::insert`](crate::Indexer::insert) returns no old object it cannot read).
    pub(crate) fn load_old(&self) -> Result<Arc<K>, StorageError> {
        match self {
            Self::Decoded(obj) => Ok(Arc::clone(obj)),
            Self::Stored(s) => s.load(false),
        }
    }

    /// [`load_old`](Self::load_old), without keeping the decoded object for the snapshot's
    /// other readers: for a read made for someone else than the snapshot's holders (whose copy
    /// of the snapshot would otherwise pin the object's allocation once it is dropped). Not
    /// reported either: the informer reads so under its locks.
    pub(crate) fn load_unshared(&self) -> Result<Arc<K>, StorageError> {
        match self {
            Self::Decoded(obj) => Ok(Arc::clone(obj)),
            Self::Stored(s) => s.load_unshared(),
        }
    }
}

impl<K: kube::Resource> Snapshot<K> {
    /// The object's resourceVersion, read without decoding it; `None` when it has none or an
    /// empty one, in both forms.
    pub(crate) fn resource_version(&self) -> Option<&str> {
        match self {
            Self::Decoded(obj) => obj
                .meta()
                .resource_version
                .as_deref()
                .filter(|rv| !rv.is_empty()),
            Self::Stored(s) => s.resource_version(),
        }
    }
}

impl<K> Snapshot<K> {
    /// Whether both are of the very same stored object (the same `Arc`, or the same stored
    /// bytes): an unchanged object of a relist, whose old and new snapshots then decode once.
    pub(crate) fn same_object(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Decoded(a), Self::Decoded(b)) => Arc::ptr_eq(a, b),
            (Self::Stored(a), Self::Stored(b)) => std::ptr::eq(a.stored(), b.stored()),
            _ => false,
        }
    }
}

/// A stored form of one object, kept apart from the store (see [`Snapshot::Stored`]).
pub(crate) trait StoredObject<K>: Send + Sync {
    /// The object decoded, or the one decoded before if someone still holds it; a failure
    /// reported (the first time) if `report`.
    fn load(&self, report: bool) -> Result<Arc<K>, StorageError>;

    /// [`load`](Self::load), without keeping what it decodes for later loads, nor reporting.
    fn load_unshared(&self) -> Result<Arc<K>, StorageError>;

    /// Its resourceVersion.
    fn resource_version(&self) -> Option<&str>;

    /// Where its stored form is: equal for snapshots of the same stored bytes.
    fn stored(&self) -> *const ();
}

/// A stored object that could not be turned back into a `K`. It cannot happen unless memory is
/// corrupted, `K`'s `Serialize` and `Deserialize` disagree (the store encoded the object
/// itself), or a protobuf item that an in-order relist stored undecoded (see
/// [`CacheStats::kept_packed`]) does not decode: `K` is then the k8s-openapi type the server
/// encoded it from, so only bytes its encoding does not check can do that, such as a string
/// that is not UTF-8 written by another client in protobuf. Such an object is in the cache, but
/// its handlers are not called for it: the informer's error handler is told instead
/// ([`reflector::Error::Unreadable`](crate::reflector::Error::Unreadable)), once per stored
/// version of the object, however many handlers, resyncs and replays meet it. It is never
/// silently lost: every read that meets it counts it in [`CacheStats::decode_errors`] and logs
/// it (at error level the first time for that version, then at debug level), and
/// [`Indexer::try_get_by_key`](super::Indexer::try_get_by_key) returns it. The message is redacted: it never quotes the object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    /// The compressed bytes did not decompress.
    #[error("cached object {key} does not decompress: {reason}")]
    Decompress {
        /// The object's key.
        key: ObjectKey,
        /// The codec's message.
        reason: String,
    },
    /// An object the FIFO queued as "the version cached under this key" (a relist of an
    /// unchanged object, a resync) was no longer cached when the FIFO handed it out. It cannot
    /// happen unless the cache is written from outside its informer.
    #[error("cached object {key} is gone from the cache")]
    Gone {
        /// The object's key.
        key: ObjectKey,
    },
    /// The decompressed bytes did not decode as the cache's type.
    #[error("cached object {key} does not decode: {reason}")]
    Decode {
        /// The object's key.
        key: ObjectKey,
        /// What went wrong and where, without the object's contents.
        reason: String,
    },
}

/// The form one object takes in a store, chosen per store. Implementations keep whatever
/// object-wide state they need (a codec, a cache of decoded objects) in `self`; the store calls
/// [`store`](Self::store) and [`drop_slot`](Self::drop_slot) under its write lock,
/// [`load`](Self::load) under its read lock, and [`load_detached`](Self::load_detached) with no
/// lock held.
pub(crate) trait Storage<K>: Send + Sync + 'static {
    /// What is kept per object.
    type Slot: Send + Sync;

    /// The slot for `obj`, stored under `key`.
    fn store(&self, key: &ObjectKey, obj: &Arc<K>) -> Self::Slot;

    /// [`store`](Self::store) for one object of a list stored whole (a relist building the
    /// store's replacement): not what a controller reads next, as a single write is, so a
    /// storage that keeps recent objects decoded does not keep it.
    fn store_listed(&self, key: &ObjectKey, obj: &Arc<K>) -> Self::Slot {
        self.store(key, obj)
    }

    /// The object in `slot`: the one someone holds, or decoded.
    fn load(&self, key: &ObjectKey, slot: &Self::Slot) -> Result<Arc<K>, StorageError>;

    /// The object in a slot just taken out of the store (the old object of an update or a
    /// removal), read outside the store's lock: like [`load`](Self::load), without keeping the
    /// object for later reads.
    fn load_detached(&self, key: &ObjectKey, slot: &Self::Slot) -> Result<Arc<K>, StorageError> {
        self.load(key, slot)
    }

    /// Whether `slot` holds this very `Arc` (a resync storing the cached object again), so the
    /// store can skip recomputing its index values.
    fn holds(&self, slot: &Self::Slot, obj: &Arc<K>) -> bool;

    /// The slot for `obj` when `slot`, of another store (a relist building the store's
    /// replacement), [`holds`](Self::holds) it: a copy that shares what can be shared, so
    /// that an unchanged object is not encoded again.
    fn restore(&self, key: &ObjectKey, _slot: &Self::Slot, obj: &Arc<K>) -> Self::Slot {
        self.store(key, obj)
    }

    /// The slot for the object in `slot`, of another store (a relist building the store's
    /// replacement), as it is stored: nothing decoded, nothing encoded.
    fn copy(&self, key: &ObjectKey, slot: &Self::Slot) -> Self::Slot;

    /// `slot`'s object was just dropped by whoever stored it (a store being built, which no read
    /// sweeps): forget it if nobody else holds it, else make sure the sweep sees it later.
    fn settle(&self, _key: &ObjectKey, _slot: &Self::Slot) {}

    /// A snapshot of the object in `slot`, sharing the decoded object while someone holds it.
    fn snapshot(&self, key: &ObjectKey, slot: &Self::Slot) -> Snapshot<K>;

    /// A snapshot of the object in `slot` that does not share the decoded object the slot
    /// has now: for an object its holder is about to drop, whose dead allocation a shared
    /// snapshot would pin while it waits.
    fn snapshot_unshared(&self, key: &ObjectKey, slot: &Self::Slot) -> Snapshot<K> {
        self.snapshot(key, slot)
    }

    /// Whether the object in `slot` has labels matching `selector`, without decoding it.
    fn labels_match(&self, slot: &Self::Slot, selector: &Selector) -> bool;

    /// The object's `resourceVersion`, without decoding it.
    fn resource_version(&self, slot: &Self::Slot) -> Option<String>;

    /// A slot left the store (replaced or removed), for the storage's byte counts.
    fn drop_slot(&self, _slot: &Self::Slot) {}

    /// Called after each write, under the store's write lock: a chance to re-encode a few slots
    /// (after a new compression dictionary) and to release what dead objects still pin.
    fn maintain(&self, slots: &mut dyn SlotMap<Self::Slot>) {
        self.tidy(slots);
    }

    /// Called after each read that may have decoded, under the store's read lock: releases what
    /// dead objects still pin, a few slots at a time.
    fn tidy(&self, _slots: &dyn SlotMap<Self::Slot>) {}

    /// Called each time the store's lock has been released, `after_write` if it was the write
    /// lock: frees what the storage set aside under this lock or earlier ones, maybe on other
    /// threads (a compact cache's objects pushed out of its hot ring, each a decoded object whose
    /// free can take tens of microseconds), so that neither readers nor writers wait for those
    /// frees under the lock. The caller may still hold locks of its own.
    fn release(&self, _after_write: bool) {}

    /// Whether [`pack`](Self::pack) packs: the FIFO then holds listed objects packed.
    fn packs(&self) -> bool {
        false
    }

    /// Packs a listed object for the FIFO, or `None` when this storage holds objects decoded
    /// (the FIFO then holds the `Arc`) or `obj` cannot be packed.
    fn pack(&self, _key: &ObjectKey, _obj: &K) -> Option<PackedBody> {
        None
    }

    /// Packs a listed object from its bytes as the server sent them (never decoded here), with
    /// `meta`, read from them, or `None` as [`pack`](Self::pack).
    fn pack_bytes(
        &self,
        _key: &ObjectKey,
        _bytes: crate::reflector::decode::ItemBytes<'_>,
        _meta: &crate::reflector::decode::ListedMeta,
    ) -> Option<PackedBody> {
        None
    }

    /// The slot for what [`pack`](Self::pack) or [`pack_bytes`](Self::pack_bytes) made, as it
    /// is: nothing decoded (a relist building the store's replacement when no index needs the
    /// object). `body` back when this storage cannot hold it so.
    fn store_packed(&self, _key: &ObjectKey, body: PackedBody) -> Result<Self::Slot, PackedBody> {
        Err(body)
    }

    /// The slot for a packed body [`store_packed`](Self::store_packed) gave back because its
    /// bytes may not fit the type (JSON as the server sent it), once a check that they decode
    /// has passed: the check costs less than a decode where the storage knows the type (see
    /// `Compact`), and the object it builds is dropped, so the store holds the bytes as they
    /// were packed. `Ok(Err(_))` when they do not decode; `body` back when this storage cannot
    /// check it so (the caller decodes it and stores the object).
    fn store_checked(
        &self,
        _key: &ObjectKey,
        body: PackedBody,
    ) -> Result<Result<Self::Slot, StorageError>, PackedBody> {
        Err(body)
    }

    /// A slot [`store_packed`](Self::store_packed) made, left out of the store after all (its
    /// object did not decode for an index): counted out as [`drop_slot`](Self::drop_slot), and
    /// no longer as kept.
    fn discard_packed(&self, slot: &Self::Slot) {
        self.drop_slot(slot);
    }

    /// Decodes a listed object's bytes (that [`pack_bytes`](Self::pack_bytes) could not pack).
    fn decode_bytes(
        &self,
        key: &ObjectKey,
        _bytes: crate::reflector::decode::ItemBytes<'_>,
    ) -> Result<Arc<K>, StorageError> {
        Err(StorageError::Decode {
            key: key.clone(),
            reason: "this storage packs nothing".to_owned(),
        })
    }

    /// Decodes what [`pack`](Self::pack) made, when the FIFO hands the object out; the next
    /// [`store`](Self::store) of that very object under `key` keeps the packed bytes.
    fn unpack(&self, key: &ObjectKey, body: PackedBody) -> Result<Arc<K>, StorageError> {
        let _ = body;
        Err(StorageError::Decode {
            key: key.clone(),
            reason: "this storage packs nothing".to_owned(),
        })
    }

    /// Decodes what [`pack`](Self::pack) made without handing the bytes to the store (a copy
    /// read while the object stays queued).
    fn peek(&self, key: &ObjectKey, body: &PackedBody) -> Result<Arc<K>, StorageError> {
        let _ = body;
        Err(StorageError::Decode {
            key: key.clone(),
            reason: "this storage packs nothing".to_owned(),
        })
    }

    /// Where to report a snapshot's object that does not decode when read
    /// ([`Snapshot::load`]): once per stored version of an object, however many snapshots
    /// of it are read, on the thread that read it, never under the store's lock. Storages whose snapshots always hold the object ignore it.
    fn report_unreadable(&self, _sink: UnreadableSink) {}

    /// The storage's counters (without the object count, which the store adds).
    fn stats(&self) -> CacheStats {
        CacheStats::default()
    }

    /// Keys queued to check for a dropped decoded object.
    #[cfg(test)]
    fn sweep_len(&self) -> usize {
        0
    }

    /// The mode's name, for `Debug`.
    fn name(&self) -> &'static str;
}

/// Slots by key, as the store holds them.
// Only the compact storage looks slots up; the decoded one needs no upkeep.
#[cfg_attr(not(feature = "compact"), allow(dead_code))]
pub(crate) trait SlotMap<S> {
    /// The slot under `key`.
    fn slot(&self, key: &ObjectKey) -> Option<&S>;

    /// The slot under `key`, to change it.
    fn slot_mut(&mut self, key: &ObjectKey) -> Option<&mut S>;
}

/// Whether `labels` (absent: none) match `selector`.
pub(crate) fn selector_matches(
    selector: &Selector,
    labels: Option<&std::collections::BTreeMap<String, String>>,
) -> bool {
    use kube::core::SelectorExt;
    if selector.selects_all() {
        return true;
    }
    match labels {
        Some(labels) => selector.matches(labels),
        None => selector.matches(&Default::default()),
    }
}

#[cfg(all(test, feature = "compact"))]
mod tests;
