//! The FIFO an informer runs, in either mode: what the informer needs of it beyond the
//! reflector's [`ReflectorStore`] side, and how each mode's entries are applied to the cache.

use std::{collections::HashSet, future::Future, sync::Arc};

use kube::Resource;

use super::{Inner, handler::Event, processor::Reservation};
use crate::{
    fifo::{
        DeletedFinalStateUnknown, DeltaFifo, DeltaObject, FifoError, InOrderDelta, InOrderFifo,
        ListItem,
    },
    reflector::ReflectorStore,
    store::{ObjectKey, StoreOp, key_of},
};

/// Which FIFO an informer runs between its reflector and its cache, and so which client-go
/// behaviour its handlers see.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FifoMode {
    /// The [`DeltaFifo`]: changes merge per key while queued; a relist is one `Replaced` delta
    /// per object plus tombstones, a resync one `Sync` delta per object. What client-go's shared
    /// informers ran up to v0.32, and from v0.33 to v0.35 with `InOrderInformers` off. The
    /// default: the design this crate is built on.
    #[default]
    DeltaFifo,
    /// The [`InOrderFifo`]: every change in arrival order; a relist replaces the cache at once
    /// (`ReplacedAll`: the store first, then tombstones for what went, then updates and adds in
    /// list order), a resync is one `SyncAll`, bookmarks advance the store's resourceVersion
    /// ([`Indexer::last_store_sync_resource_version`](crate::Indexer::last_store_sync_resource_version)),
    /// and up to 1,000 changes of distinct keys are applied to the cache in one transaction
    /// before their handlers are called. What client-go v0.36+ shared informers always run
    /// (`InOrderInformers` GA, with `AtomicFIFO`, `UnlockWhileProcessingFIFO` and
    /// `InOrderInformersBatchProcess` on, their defaults). With a `CacheStorage::Compact`
    /// cache, a list waits here decoded until its `ReplacedAll` is applied (the DeltaFIFO holds
    /// it compressed).
    InOrder,
}

/// The informer's side of a FIFO.
pub(crate) trait InformerQueue<K>: ReflectorStore<K, ListItem = ListItem<K>> {
    fn close(&self);
    /// Takes the next entry (or batch) and applies it to the informer: the cache is updated and
    /// unbounded listeners notified; what bounded listeners are still owed is handed back, to be
    /// delivered with no lock held.
    fn pop_apply<'a>(
        &'a self,
        inner: &'a Inner<K>,
    ) -> impl Future<Output = Result<Vec<Reservation<K>>, FifoError>> + Send + 'a;
}

impl<K: Resource + Send + Sync + 'static> InformerQueue<K> for DeltaFifo<K> {
    fn close(&self) {
        DeltaFifo::close(self);
    }

    fn pop_apply<'a>(
        &'a self,
        inner: &'a Inner<K>,
    ) -> impl Future<Output = Result<Vec<Reservation<K>>, FifoError>> + Send + 'a {
        // The cache is updated under the FIFO lock (so a relist never infers deletions from a
        // half-updated cache); notifications for bounded listeners wait until it is released.
        self.pop(|deltas, initial| inner.apply_deltas(deltas, initial))
    }
}

impl<K: Resource + Send + Sync + 'static> InformerQueue<K> for InOrderFifo<K> {
    fn close(&self) {
        InOrderFifo::close(self);
    }

    fn pop_apply<'a>(
        &'a self,
        inner: &'a Inner<K>,
    ) -> impl Future<Output = Result<Vec<Reservation<K>>, FifoError>> + Send + 'a {
        // Runs with the FIFO lock released (client-go `UnlockWhileProcessingFIFO`).
        self.pop(|batch, initial| inner.apply_in_order(batch, initial))
    }
}

/// The running informer's FIFO, whichever mode.
pub(crate) enum QueueHandle<K> {
    Delta(Arc<DeltaFifo<K>>),
    InOrder(Arc<InOrderFifo<K>>),
}

impl<K> Clone for QueueHandle<K> {
    fn clone(&self) -> Self {
        match self {
            Self::Delta(q) => Self::Delta(q.clone()),
            Self::InOrder(q) => Self::InOrder(q.clone()),
        }
    }
}

impl<K> QueueHandle<K> {
    pub(crate) fn close(&self) {
        match self {
            Self::Delta(q) => q.close(),
            Self::InOrder(q) => q.close(),
        }
    }
}

impl<K: Resource + Send + Sync + 'static> QueueHandle<K> {
    pub(crate) fn has_synced(&self) -> bool {
        match self {
            Self::Delta(q) => q.has_synced(),
            Self::InOrder(q) => q.has_synced(),
        }
    }

    pub(crate) async fn wait_synced(&self) {
        match self {
            Self::Delta(q) => q.wait_synced().await,
            Self::InOrder(q) => q.wait_synced().await,
        }
    }

    /// Entries queued and not yet taken.
    pub(crate) fn len(&self) -> usize {
        match self {
            Self::Delta(q) => q.len(),
            Self::InOrder(q) => q.len(),
        }
    }
}

/// What a per-object entry of a batch asks of the handlers once the batch is in the cache.
enum Pending<K> {
    Upsert(Arc<K>),
    Delete(Arc<K>),
}

fn same_version<K: Resource>(a: &K, b: &K) -> bool {
    a.meta().resource_version == b.meta().resource_version
}

impl<K> Inner<K>
where
    K: Resource + Send + Sync + 'static,
{
    /// client-go `processDeltas` / `processDeltasInBatch` for an in-order batch. Runs with the
    /// FIFO lock released, under `block_deltas` (so late registrations see a consistent cache).
    pub(crate) fn apply_in_order(
        &self,
        batch: Vec<InOrderDelta<K>>,
        is_in_initial_list: bool,
    ) -> Vec<Reservation<K>> {
        let mut deferred = Vec::new();
        let _block = self.block_deltas.lock();
        let mut ops = Vec::new();
        let mut pending = Vec::new();
        let mut last_rv = None;
        for delta in batch {
            match delta {
                InOrderDelta::Added(obj) | InOrderDelta::Updated(obj) => {
                    let Ok(key) = key_of(&*obj) else { continue };
                    last_rv = obj.meta().resource_version.clone();
                    ops.push(StoreOp::Put(key, obj.clone()));
                    pending.push(Pending::Upsert(obj));
                }
                InOrderDelta::Deleted(obj) => {
                    let Ok(key) = key_of(&*obj) else { continue };
                    last_rv = obj.meta().resource_version.clone();
                    ops.push(StoreOp::Remove(key));
                    pending.push(Pending::Delete(obj));
                }
                InOrderDelta::ReplacedAll {
                    objects,
                    resource_version,
                } => self.apply_replaced_all(
                    objects,
                    &resource_version,
                    is_in_initial_list,
                    &mut deferred,
                ),
                InOrderDelta::SyncAll => {
                    // client-go: `OnUpdate(obj, obj)` for everything cached; the same version,
                    // so only listeners due for a resync hear of it.
                    for obj in self.indexer.list() {
                        self.processor.distribute(
                            Event::Update {
                                old: obj.clone(),
                                new: obj,
                            },
                            true,
                            &mut deferred,
                        );
                    }
                }
                InOrderDelta::Bookmark { resource_version } => {
                    self.indexer.bookmark(&resource_version);
                }
                InOrderDelta::Forgotten(key) => {
                    let removed = self
                        .indexer
                        .transaction(vec![StoreOp::Remove(key.clone())], None);
                    if let Some(Some(obj)) = removed.into_iter().next() {
                        self.processor.distribute(
                            Event::Delete(DeltaObject::DeletedFinalStateUnknown(
                                DeletedFinalStateUnknown { key, obj },
                            )),
                            false,
                            &mut deferred,
                        );
                    }
                }
            }
        }
        if ops.is_empty() {
            return deferred;
        }
        // One transaction for the batch, then the handlers, in order (client-go
        // `processDeltasInBatch`: the store's version becomes that of the batch's last object).
        let previous = self.indexer.transaction(ops, last_rv.as_deref());
        for (p, old) in pending.into_iter().zip(previous) {
            let ev = match (p, old) {
                (Pending::Upsert(new), Some(old)) => {
                    let is_sync = same_version(&*old, &*new);
                    self.processor
                        .distribute(Event::Update { old, new }, is_sync, &mut deferred);
                    continue;
                }
                (Pending::Upsert(obj), None) => Event::Add {
                    obj,
                    is_in_initial_list,
                },
                // Delivered whether or not the key was cached, as client-go's RealFIFO does.
                (Pending::Delete(obj), _) => Event::Delete(DeltaObject::Object(obj)),
            };
            self.processor.distribute(ev, false, &mut deferred);
        }
        deferred
    }

    /// client-go `processReplacedAllInfo`: replace the cache atomically first, so it reflects
    /// what the handlers are told; then a tombstone for every cached key the list lacks; then
    /// updates and adds in list order.
    fn apply_replaced_all(
        &self,
        objects: Vec<Arc<K>>,
        resource_version: &str,
        is_in_initial_list: bool,
        deferred: &mut Vec<Reservation<K>>,
    ) {
        let listed: HashSet<ObjectKey> = objects.iter().filter_map(|o| key_of(o).ok()).collect();
        let mut deletions: Vec<(ObjectKey, Arc<K>)> = Vec::new();
        self.indexer.for_each(|key, obj| {
            if !listed.contains(key) {
                deletions.push((key.clone(), obj.clone()));
            }
        });
        // Sorted, so the order is reproducible (client-go's follows Go's map order).
        deletions.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let replacements: Vec<(Arc<K>, Option<Arc<K>>)> = objects
            .iter()
            .map(|o| {
                let old = key_of(o)
                    .ok()
                    .and_then(|k| self.indexer.get_by_key(k.as_str()));
                (o.clone(), old)
            })
            .collect();
        if let Err(e) = self.indexer.replace_at(objects, resource_version) {
            // Keys were checked when the list was queued; nothing to tell handlers otherwise.
            tracing::error!(error = %e, "relist not applied: an object has no valid key");
            return;
        }
        for (key, obj) in deletions {
            self.processor.distribute(
                Event::Delete(DeltaObject::DeletedFinalStateUnknown(
                    DeletedFinalStateUnknown { key, obj },
                )),
                false,
                deferred,
            );
        }
        for (new, old) in replacements {
            match old {
                Some(old) => {
                    let is_sync = same_version(&*old, &*new);
                    self.processor
                        .distribute(Event::Update { old, new }, is_sync, deferred);
                }
                None => self.processor.distribute(
                    Event::Add {
                        obj: new,
                        is_in_initial_list,
                    },
                    false,
                    deferred,
                ),
            }
        }
    }
}
