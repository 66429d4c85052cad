//! The FIFO an informer runs, in either mode: what the informer needs of it beyond the
//! reflector's [`ReflectorStore`] side, and how each mode's entries are applied to the cache.

use std::{future::Future, sync::Arc};

use kube::Resource;

use super::{
    Inner,
    handler::Event,
    processor::{Deliveries, StoredEvent},
};
use crate::{
    fifo::{
        DeletedFinalStateUnknown, DeltaFifo, DeltaObject, FifoError, InOrderDelta, InOrderFifo,
        ListItem, Popped,
    },
    reflector::ReflectorStore,
    store::{Listed, ObjectKey, Packed, StorageError, StoreOp, key_of},
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
    /// cache, listed and watched objects wait here compressed, as in the DeltaFIFO; a relist is
    /// applied one object at a time as the new cache is built, and its notifications (and a
    /// resync's) carry the cache's compressed objects, decoded as each handler is called. So a
    /// list is never held decoded at once. When the cache has no index but the namespace one, a
    /// listed object known to decode is decoded once, by the handlers: protobuf of a kind with
    /// a generated decoder (k8s-openapi's types, with its newest Kubernetes version feature),
    /// or one the reflector decoded before it was packed (with a transform, a projection or
    /// sharding). JSON of such a kind, as the server sent it, is first checked to fit the type,
    /// by a decode that reads `managedFields`' `fieldsV1` without building it. Else each listed
    /// object is decoded twice: once for the cache (its indices, or to check that JSON of
    /// another type fits it), once for the handlers.
    InOrder,
}

/// The informer's side of a FIFO.
pub(crate) trait InformerQueue<K>: ReflectorStore<K, ListItem = ListItem<K>> {
    fn close(&self);
    /// Takes the next entry (or batch) and applies it to the informer: the cache is updated and
    /// unbounded listeners' notifications queued; the wakes their consumers are owed and what
    /// bounded listeners are still owed are handed back, for the loop to send with no lock held.
    fn pop_apply<'a>(
        &'a self,
        inner: &'a Inner<K>,
    ) -> impl Future<Output = Result<Deliveries<K>, FifoError>> + Send + 'a;
}

impl<K: Resource + Send + Sync + 'static> InformerQueue<K> for DeltaFifo<K> {
    fn close(&self) {
        DeltaFifo::close(self);
    }

    fn pop_apply<'a>(
        &'a self,
        inner: &'a Inner<K>,
    ) -> impl Future<Output = Result<Deliveries<K>, FifoError>> + Send + 'a {
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
    ) -> impl Future<Output = Result<Deliveries<K>, FifoError>> + Send + 'a {
        // Runs with the FIFO lock released (client-go `UnlockWhileProcessingFIFO`).
        self.pop_entries(|batch, initial| inner.apply_in_order(batch, initial, self))
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

/// Consecutive per-object entries of a batch, applied in one transaction.
struct Run<K> {
    ops: Vec<StoreOp<K>>,
    pending: Vec<Pending<K>>,
    last_rv: Option<String>,
}

impl<K> Default for Run<K> {
    fn default() -> Self {
        Self {
            ops: Vec::new(),
            pending: Vec::new(),
            last_rv: None,
        }
    }
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
        batch: Vec<Popped<K>>,
        is_in_initial_list: bool,
        fifo: &InOrderFifo<K>,
    ) -> Deliveries<K> {
        let mut deferred = self.processor.deliveries();
        // Listed objects that did not decode: reported once `block_deltas` is released, since
        // the report calls the user's error handler, which may register a handler.
        let mut undecodable = Vec::new();
        let block = self.block_deltas.lock();
        let mut run = Run::default();
        for entry in batch {
            let delta = match entry {
                Popped::Delta(delta) => delta,
                Popped::Forgotten {
                    key,
                    resource_version,
                } => {
                    self.apply_run(std::mem::take(&mut run), is_in_initial_list, &mut deferred);
                    self.forget(key, Some(&resource_version), &mut deferred);
                    continue;
                }
                Popped::List {
                    items,
                    resource_version,
                } => {
                    self.apply_run(std::mem::take(&mut run), is_in_initial_list, &mut deferred);
                    undecodable.extend(self.apply_replaced_all(
                        items,
                        fifo,
                        &resource_version,
                        is_in_initial_list,
                        &mut deferred,
                    ));
                    continue;
                }
            };
            match delta {
                InOrderDelta::Added(obj) | InOrderDelta::Updated(obj) => {
                    let Ok(key) = key_of(&*obj) else { continue };
                    run.last_rv = obj.meta().resource_version.clone();
                    run.ops.push(StoreOp::Put(key, obj.clone()));
                    run.pending.push(Pending::Upsert(obj));
                    continue;
                }
                InOrderDelta::Deleted(obj) => {
                    let Ok(key) = key_of(&*obj) else { continue };
                    run.last_rv = obj.meta().resource_version.clone();
                    run.ops.push(StoreOp::Remove(key));
                    run.pending.push(Pending::Delete(obj));
                    continue;
                }
                _ => {}
            }
            // Any other delta comes after the per-object ones before it (a batch holds one
            // alone, except a watched object that did not decode, which the FIFO turns into
            // `Forgotten` where it was).
            self.apply_run(std::mem::take(&mut run), is_in_initial_list, &mut deferred);
            match delta {
                InOrderDelta::Added(_) | InOrderDelta::Updated(_) | InOrderDelta::Deleted(_) => {}
                // Not made by `pop_entries`, which hands lists out as `Popped::List`.
                InOrderDelta::ReplacedAll {
                    objects,
                    resource_version,
                } => undecodable.extend(self.apply_replaced_all(
                    objects.into_iter().map(ListItem::Ready).collect(),
                    fifo,
                    &resource_version,
                    is_in_initial_list,
                    &mut deferred,
                )),
                InOrderDelta::SyncAll => {
                    // client-go: `OnUpdate(obj, obj)` for everything cached; the same version,
                    // so only listeners due for a resync hear of it. Snapshots, so a compact
                    // cache's objects wait in the listeners' buffers compressed.
                    for obj in self.indexer.snapshots() {
                        self.processor.distribute(
                            StoredEvent::Update {
                                old: obj.clone(),
                                new: obj,
                                is_in_initial_list,
                            },
                            true,
                            &mut deferred,
                        );
                    }
                }
                InOrderDelta::Bookmark { resource_version } => {
                    self.indexer.bookmark(&resource_version);
                }
                InOrderDelta::Forgotten(key) => self.forget(key, None, &mut deferred),
            }
        }
        self.apply_run(run, is_in_initial_list, &mut deferred);
        drop(block);
        for (key, e) in undecodable {
            fifo.report(&key, &e);
        }
        deferred
    }

    /// Per-object deltas of a batch: one transaction, then the handlers, in order (client-go
    /// `processDeltasInBatch`: the store's version becomes that of the batch's last object).
    /// [`InOrderDelta::Forgotten`]: the key's cached version goes, handed to the handlers as a
    /// deletion whose final state is unknown; `resource_version` (a watched event's that did
    /// not decode) is the store's version from then on, as after any watched event.
    fn forget(&self, key: ObjectKey, resource_version: Option<&str>, deferred: &mut Deliveries<K>) {
        let resource_version = resource_version.filter(|rv| !rv.is_empty());
        let removed = self
            .indexer
            .transaction(vec![StoreOp::Remove(key.clone())], resource_version);
        if let Some(Some(obj)) = removed.into_iter().next() {
            self.processor.distribute(
                Event::Delete(DeltaObject::DeletedFinalStateUnknown(
                    DeletedFinalStateUnknown { key, obj },
                )),
                false,
                deferred,
            );
        }
    }

    fn apply_run(&self, run: Run<K>, is_in_initial_list: bool, deferred: &mut Deliveries<K>) {
        if run.ops.is_empty() {
            return;
        }
        if let Some(backlog) = self.backlog(run.ops.len()) {
            let written = self
                .indexer
                .transaction_snapshots(run.ops, run.last_rv.as_deref());
            for (p, w) in run.pending.into_iter().zip(written) {
                match p {
                    Pending::Upsert(obj) => {
                        self.distribute_written(w, obj, is_in_initial_list, backlog, deferred);
                    }
                    // The server's final state, as sent: nothing of the cache's to spare.
                    Pending::Delete(obj) => self.processor.distribute(
                        Event::Delete(DeltaObject::Object(obj)),
                        false,
                        deferred,
                    ),
                }
            }
            return;
        }
        let previous = self.indexer.transaction(run.ops, run.last_rv.as_deref());
        for (p, old) in run.pending.into_iter().zip(previous) {
            let ev = match (p, old) {
                (Pending::Upsert(new), Some(old)) => {
                    let is_sync = same_version(&*old, &*new);
                    self.processor
                        .distribute(Event::Update { old, new }, is_sync, deferred);
                    continue;
                }
                (Pending::Upsert(obj), None) => Event::Add {
                    obj,
                    is_in_initial_list,
                },
                // Delivered whether or not the key was cached, as client-go's RealFIFO does.
                (Pending::Delete(obj), _) => Event::Delete(DeltaObject::Object(obj)),
            };
            self.processor.distribute(ev, false, deferred);
        }
    }

    /// client-go `processReplacedAllInfo`: replace the cache atomically first, so it reflects
    /// what the handlers are told; then a tombstone for every cached key the list lacks; then
    /// updates and adds in list order.
    ///
    /// Streamed for a compact cache (issue #12 part 4): a listed object is stored as the FIFO
    /// held it packed when it is known to decode and no index needs it decoded, else decoded as
    /// the new cache is built (for its index values, or to find out that it does not fit the
    /// type) and dropped once stored; the notifications carry snapshots, decoded as each
    /// handler is called. So neither this nor the listeners' buffers hold the list decoded, and
    /// with the namespace index alone a protobuf list is decoded once, by the handlers. A
    /// listed object that does not decode is left out, and so tombstoned if it was cached.
    fn apply_replaced_all(
        &self,
        items: Vec<ListItem<K>>,
        fifo: &InOrderFifo<K>,
        resource_version: &str,
        is_in_initial_list: bool,
        deferred: &mut Deliveries<K>,
    ) -> Vec<(ObjectKey, StorageError)> {
        let mut undecodable = Vec::new();
        let mut objects = items.into_iter().filter_map(|item| match item {
            // An unchanged object: kept as the cache holds it, not decoded.
            ListItem::Packed(packed) if packed.is_cached() => {
                Some((packed.key().clone(), Listed::Cached))
            }
            // Kept as packed; decoded here only if an index other than the namespace one
            // needs it. The handlers' snapshots decode it as each is called, so when none is
            // needed each listed object is decoded once, not twice.
            ListItem::Packed(packed) => {
                let Packed { key, body } = packed;
                Some((key, Listed::Packed(body)))
            }
            item => {
                let obj = fifo
                    .unpack_item(item)
                    .map_err(|failed| undecodable.push(failed))
                    .ok()?;
                // Keys were checked when the list was queued.
                let key = key_of(&*obj).ok()?;
                Some((key, Listed::Object(obj)))
            }
        });
        let mut replaced = self
            .indexer
            .replace_streaming(&mut objects, resource_version);
        drop(objects);
        undecodable.extend(replaced.take_undecodable());
        // What the list lacks went. Sorted, so the order is reproducible (client-go's follows
        // Go's map order).
        for (key, obj) in replaced.take_gone() {
            self.processor
                .distribute(StoredEvent::Tombstone { key, obj }, false, deferred);
        }
        // Snapshots taken as each is notified, each old object's slot dropped once it is, so
        // only the listeners' buffers hold them.
        for key in replaced.take_keys() {
            let (old, Some(new)) = replaced.take(&key) else {
                continue;
            };
            match old {
                Some(old) => {
                    // An unchanged object: one snapshot for both, decoded once (in Decoded mode
                    // they are the same `Arc` already).
                    let old = if old.same_object(&new) {
                        new.clone()
                    } else {
                        old
                    };
                    let is_sync = old.resource_version() == new.resource_version();
                    self.processor.distribute(
                        StoredEvent::Update {
                            old,
                            new,
                            is_in_initial_list,
                        },
                        is_sync,
                        deferred,
                    );
                }
                None => self.processor.distribute(
                    StoredEvent::Add {
                        obj: new,
                        is_in_initial_list,
                    },
                    false,
                    deferred,
                ),
            }
        }
        undecodable
    }
}
