//! Deltas: what happened to one object (client-go `delta_fifo.go` `Delta`, `Deltas`).

use std::sync::Arc;

use crate::store::{ObjectKey, Packed};

/// The kind of change a [`Delta`] records (client-go's `DeltaType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeltaType {
    /// The object was created (watch `ADDED`).
    Added,
    /// The object was modified (watch `MODIFIED`).
    Updated,
    /// The object was deleted; the object may be a [`DeletedFinalStateUnknown`] tombstone when
    /// the deletion was inferred from a relist.
    Deleted,
    /// The object was listed by a relist ([`DeltaFifo::replace`](crate::DeltaFifo::replace)).
    Replaced,
    /// A periodic resync re-delivered the cached object
    /// ([`DeltaFifo::resync`](crate::DeltaFifo::resync)).
    Sync,
}

/// A deletion inferred from a relist, where the final state of the object is unknown
/// (client-go's `DeletedFinalStateUnknown`): `obj` is the last state this process saw, which may
/// be stale.
#[derive(Debug)]
pub struct DeletedFinalStateUnknown<K> {
    /// The key of the deleted object.
    pub key: ObjectKey,
    /// The last known state of the object.
    pub obj: Arc<K>,
}

/// The object a [`Delta`] carries: the object itself or, for a deletion inferred from a relist,
/// a tombstone.
#[derive(Debug)]
pub enum DeltaObject<K> {
    /// The object as the API server sent it (after the FIFO's transform).
    Object(Arc<K>),
    /// A tombstone for a deletion the watch missed.
    DeletedFinalStateUnknown(DeletedFinalStateUnknown<K>),
}

impl<K> DeltaObject<K> {
    /// The object, or the last known state inside a tombstone.
    pub fn object(&self) -> &Arc<K> {
        match self {
            Self::Object(obj) => obj,
            Self::DeletedFinalStateUnknown(tombstone) => &tombstone.obj,
        }
    }

    /// Whether this is a [`DeletedFinalStateUnknown`] tombstone.
    pub fn is_tombstone(&self) -> bool {
        matches!(self, Self::DeletedFinalStateUnknown(_))
    }
}

/// One change to one object.
#[derive(Debug)]
pub struct Delta<K> {
    /// What happened.
    pub kind: DeltaType,
    /// The object after the change (for [`DeltaType::Deleted`], its last state).
    pub object: DeltaObject<K>,
}

// Manual `Clone`s: cloning shares the `Arc`s, so `K` itself need not be `Clone`.
impl<K> Clone for DeletedFinalStateUnknown<K> {
    fn clone(&self) -> Self {
        Self {
            key: self.key.clone(),
            obj: Arc::clone(&self.obj),
        }
    }
}

impl<K> Clone for DeltaObject<K> {
    fn clone(&self) -> Self {
        match self {
            Self::Object(obj) => Self::Object(Arc::clone(obj)),
            Self::DeletedFinalStateUnknown(t) => Self::DeletedFinalStateUnknown(t.clone()),
        }
    }
}

impl<K> Clone for Delta<K> {
    fn clone(&self) -> Self {
        Self {
            kind: self.kind,
            object: self.object.clone(),
        }
    }
}

/// The changes queued for one key, oldest first (client-go's `Deltas`).
pub type Deltas<K> = Vec<Delta<K>>;

/// A delta as a FIFO holds it while queued: decoded, or (a listed, watched or resynced object,
/// when the cache keeps objects in a form of its own) [`Packed`], decoded when the FIFO hands
/// it out.
pub(super) enum Held<K> {
    Delta(Delta<K>),
    Packed(DeltaType, Packed),
}

/// What [`dedup_trailing_deletes`] needs of a delta.
pub(super) trait DeltaKind {
    fn kind(&self) -> DeltaType;
    fn is_tombstone(&self) -> bool;
}

impl<K> DeltaKind for Delta<K> {
    fn kind(&self) -> DeltaType {
        self.kind
    }

    fn is_tombstone(&self) -> bool {
        self.object.is_tombstone()
    }
}

impl<K> DeltaKind for Held<K> {
    fn kind(&self) -> DeltaType {
        match self {
            Self::Delta(d) => d.kind,
            Self::Packed(kind, _) => *kind,
        }
    }

    fn is_tombstone(&self) -> bool {
        matches!(self, Self::Delta(d) if d.object.is_tombstone())
    }
}

/// Collapses two trailing deletions into one (client-go `dedupDeltas` / `isDeletionDup`): the
/// older one is kept because it carries the real final state, unless the older one is a tombstone,
/// whose object may be stale.
pub(super) fn dedup_trailing_deletes<D: DeltaKind>(deltas: &mut Vec<D>) {
    let n = deltas.len();
    if n < 2
        || deltas[n - 1].kind() != DeltaType::Deleted
        || deltas[n - 2].kind() != DeltaType::Deleted
    {
        return;
    }
    if deltas[n - 2].is_tombstone() {
        deltas.swap_remove(n - 2);
    } else {
        deltas.pop();
    }
}

/// One item of a full list handed to [`DeltaFifo::replace_items`](super::DeltaFifo::replace_items).
#[derive(Debug)]
pub enum ListItem<K> {
    /// An object as decoded: the FIFO applies its transform. Boxed, so that a list of mostly
    /// [`Ready`](Self::Ready) items stays two words an item instead of the size of `K`.
    Decoded(Box<K>),
    /// An object ready to queue as it is: transformed already, or the cached object itself when
    /// the listed version is the one cached (same resourceVersion).
    Ready(Arc<K>),
    /// An object transformed and packed by the cache's storage (`CacheStorage::Compact`), or a
    /// reference to the version cached: held so until the FIFO hands it out, so that a list of
    /// N objects is never N decoded objects at once.
    Packed(Packed),
}
