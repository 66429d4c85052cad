//! The in-order FIFO that client-go 1.36+ shared informers run (client-go
//! `tools/cache/the_real_fifo.go` `RealFIFO` with `AtomicEvents`, `UnlockWhileProcessing` and
//! bookmark deltas, popped in batches as `PopBatch` does).

use std::{
    collections::{HashSet, VecDeque},
    fmt,
    pin::pin,
    sync::Arc,
};

use kube::Resource;
use parking_lot::Mutex;
use tokio::sync::{Notify, watch};

use super::{
    ListItem,
    packing::{FromBytes, UnreadableReport, from_bytes, list_item, report_undecodable},
    queue::{FifoError, KnownObjects, TransformFn, transform_object},
};
use crate::{
    informer::FifoMetrics,
    reflector::{
        ReflectorStore,
        decode::{ItemBytes, ListedMeta, WatchedBytes},
    },
    store::{Indexer, ObjectKey, Packed, key_of},
};

/// client-go `defaultBatchSize`: a batch holds at most this many distinct keys.
pub const DEFAULT_BATCH_SIZE: usize = 1000;

/// One entry of an [`InOrderFifo`], in the order the reflector saw it (client-go's `Delta` with
/// the `AtomicFIFO` types `ReplacedAll`, `SyncAll` and `Bookmark`).
#[derive(Debug)]
pub enum InOrderDelta<K> {
    /// A watch `ADDED` event.
    Added(Arc<K>),
    /// A watch `MODIFIED` event.
    Updated(Arc<K>),
    /// A watch `DELETED` event, queued whether or not the consumer knows the key, as client-go's
    /// RealFIFO does.
    Deleted(Arc<K>),
    /// A whole list (client-go `ReplacedAll` with `ReplacedAllInfo`): the consumer replaces its
    /// store with exactly these objects at once, then hears of what went (tombstones), changed
    /// and appeared.
    ReplacedAll {
        /// The listed objects, in list order, transformed (or the consumer's own object, when it
        /// holds the same resourceVersion).
        objects: Vec<Arc<K>>,
        /// The list's resourceVersion.
        resource_version: String,
    },
    /// A periodic resync of everything the consumer holds (client-go `SyncAll`).
    SyncAll,
    /// The watch reached this resourceVersion (client-go `Bookmark`): the store's version
    /// advances, no handler is called.
    Bookmark {
        /// The bookmark's resourceVersion.
        resource_version: String,
    },
    /// The server holds an object under this key that cannot be represented (it does not decode,
    /// or its transform panicked): the consumer drops its cached version, as a deletion whose
    /// final state is unknown. Not in client-go, which has no such case.
    Forgotten(ObjectKey),
}

impl<K> InOrderDelta<K> {
    /// Whether this delta may share a batch with others (client-go `batchable`): the per-object
    /// events; whole-store deltas and bookmarks go alone.
    fn batchable(&self) -> bool {
        matches!(self, Self::Added(_) | Self::Updated(_) | Self::Deleted(_))
    }
}

/// An entry as it waits in the queue: a delta as it is handed out, or, with a cache that packs
/// ([`InOrderFifo::with_packing`]), a watched object or a list whose objects wait packed and are
/// decoded as the entry is popped.
enum Held<K> {
    Delta(InOrderDelta<K>),
    /// A watch `ADDED` event's object, packed, and its resourceVersion.
    Added(Packed, Box<str>),
    /// A watch `MODIFIED` event's object, packed, and its resourceVersion.
    Updated(Packed, Box<str>),
    /// A list, each object ready ([`ListItem::Ready`]) or packed.
    List {
        items: Vec<ListItem<K>>,
        resource_version: String,
    },
}

impl<K> Held<K> {
    /// See [`InOrderDelta::batchable`].
    fn batchable(&self) -> bool {
        match self {
            Self::Delta(d) => d.batchable(),
            Self::Added(..) | Self::Updated(..) => true,
            Self::List { .. } => false,
        }
    }
}

/// An entry as the informer takes it ([`InOrderFifo::pop_entries`]): a delta, or a list whose
/// objects may still be packed, to be decoded one at a time as the cache is replaced with them
/// ([`InOrderFifo::unpack_item`]).
pub(crate) enum Popped<K> {
    Delta(InOrderDelta<K>),
    /// A watched object that did not decode: [`InOrderDelta::Forgotten`], with the event's
    /// resourceVersion, which the store still reaches (as a decoded watch's undecodable event
    /// is bookmarked).
    Forgotten {
        key: ObjectKey,
        resource_version: Box<str>,
    },
    List {
        items: Vec<ListItem<K>>,
        resource_version: String,
    },
}

struct Queued<K> {
    /// The object's key, for per-object deltas (batches hold distinct keys).
    key: Option<ObjectKey>,
    delta: Held<K>,
}

struct State<K> {
    items: VecDeque<Queued<K>>,
    /// Set by the first producer call (client-go `populated`).
    populated: bool,
    /// Entries of the first replace not yet processed (client-go `initialPopulationCount`).
    initial_population_count: usize,
    closed: bool,
}

impl<K> State<K> {
    fn has_synced(&self) -> bool {
        self.populated && self.initial_population_count == 0
    }
}

/// The in-order queue between a reflector and an informer: every change in arrival order, no
/// per-key merging, a relist as one atomic [`InOrderDelta::ReplacedAll`], a resync as one
/// [`InOrderDelta::SyncAll`], bookmarks as [`InOrderDelta::Bookmark`]. [`pop`](Self::pop)
/// hands out a batch of up to [`DEFAULT_BATCH_SIZE`] per-object deltas with distinct keys, or
/// one whole-store delta, and runs the consumer's `process` with the FIFO's lock released
/// (client-go `UnlockWhileProcessingFIFO`): producers keep adding meanwhile.
///
/// This is what client-go's shared informers run from v0.36 (`InOrderInformers` GA and locked
/// on, with the beta `AtomicFIFO`, `UnlockWhileProcessingFIFO` and
/// `InOrderInformersBatchProcess` gates on by default).
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kube::api::ObjectMeta;
/// use kube_informer::fifo::{InOrderDelta, InOrderFifo};
///
/// let fifo = InOrderFifo::<ConfigMap>::new(None);
/// let cm = ConfigMap { metadata: ObjectMeta { name: Some("a".into()), ..Default::default() }, ..Default::default() };
/// fifo.add(cm.clone()).unwrap();
/// fifo.update(cm).unwrap();
/// // Two changes of one key never share a batch: each comes on its own, in order.
/// let first = fifo.pop(|batch, _| batch.len()).await.unwrap();
/// let second = fifo.pop(|batch, _| matches!(batch[0], InOrderDelta::Updated(_))).await.unwrap();
/// assert_eq!((first, second), (1, true));
/// # });
/// ```
pub struct InOrderFifo<K> {
    state: Mutex<State<K>>,
    wake: Notify,
    /// Told when the queue falls below [`Self::full_at`] or closes ([`ReflectorStore::room`]).
    room: Notify,
    synced: watch::Sender<bool>,
    /// The consumer's store, read only to reuse the cached object of an unchanged listed item
    /// (a memory optimisation; client-go's atomic FIFO has no known objects).
    known: Option<Arc<dyn KnownObjects<K>>>,
    transform: Option<TransformFn<K>>,
    batch_size: usize,
    metrics: Option<FifoMetrics>,
    /// The cache that packs listed and watched objects while they are queued
    /// ([`with_packing`](InOrderFifo::with_packing)).
    packer: Option<Indexer<K>>,
    /// Told of each packed object that does not decode when popped.
    unreadable: Option<UnreadableReport>,
}

impl<K> fmt::Debug for InOrderFifo<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state.lock();
        f.debug_struct("InOrderFifo")
            .field("queued", &state.items.len())
            .field("populated", &state.populated)
            .field("initial_population_count", &state.initial_population_count)
            .field("closed", &state.closed)
            .finish()
    }
}

impl<K> InOrderFifo<K> {
    /// Closes the FIFO: waiting and future [`pop`](Self::pop)s return [`FifoError::Closed`] once
    /// the queue is empty.
    pub fn close(&self) {
        self.state.lock().closed = true;
        self.wake.notify_waiters();
        self.room.notify_waiters();
    }

    /// The queue length at which the reflector waits before it reads another watch event: two
    /// batches, as client-go's RealFIFO, whose Pop holds the queue's lock while it processes a
    /// batch once that many are queued, so that the reflector's Add waits.
    fn full_at(&self) -> usize {
        self.batch_size.saturating_mul(2)
    }

    /// Waits until fewer than [`full_at`](Self::full_at) entries are queued (or the FIFO is
    /// closed).
    async fn wait_for_room(&self) {
        loop {
            let mut notified = pin!(self.room.notified());
            notified.as_mut().enable();
            {
                let state = self.state.lock();
                if state.closed || state.items.len() < self.full_at() {
                    return;
                }
            }
            notified.await;
        }
    }
}

impl<K: Resource + Send + Sync + 'static> InOrderFifo<K> {
    /// An empty FIFO. `known` is the consumer's store (normally the informer's indexer), used
    /// only to hand over the cached object of a listed item whose resourceVersion is unchanged.
    pub fn new(known: Option<Arc<dyn KnownObjects<K>>>) -> Self {
        Self {
            state: Mutex::new(State {
                items: VecDeque::new(),
                populated: false,
                initial_population_count: 0,
                closed: false,
            }),
            wake: Notify::new(),
            room: Notify::new(),
            synced: watch::channel(false).0,
            known,
            transform: None,
            batch_size: DEFAULT_BATCH_SIZE,
            metrics: None,
            packer: None,
            unreadable: None,
        }
    }

    /// Holds listed and watched objects packed by `cache` while they are queued, and decodes
    /// each as its entry is popped, as [`DeltaFifo`](super::DeltaFifo) does: in
    /// `CacheStorage::Compact` mode a burst of watch events, or a list waiting behind them, is
    /// then held compressed, and the cache keeps the bytes packed here. `cache` must be the
    /// store the popped entries are applied to; a store that keeps objects decoded packs
    /// nothing.
    #[must_use]
    pub(crate) fn with_packing(mut self, cache: Indexer<K>) -> Self {
        self.packer = cache.packs().then_some(cache);
        self
    }

    /// Reports each packed object that does not decode when popped through `report` (it is
    /// left out: a watched object becomes [`InOrderDelta::Forgotten`], a listed one is missing
    /// from its [`InOrderDelta::ReplacedAll`], so its cached version goes either way).
    #[must_use]
    pub(crate) fn with_unreadable_report(mut self, report: UnreadableReport) -> Self {
        self.unreadable = Some(report);
        self
    }

    /// Reports queue length and processing latency (client-go's `fifoMetrics`).
    pub(crate) fn with_metrics(mut self, metrics: FifoMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    fn report_len(&self, state: &State<K>) {
        if let Some(m) = &self.metrics {
            m.queued_items.set(state.items.len() as f64);
        }
    }

    /// Sets the transform applied to every object as it is queued (see [`TransformFn`]).
    #[must_use]
    pub fn with_transform(mut self, transform: TransformFn<K>) -> Self {
        self.transform = Some(transform);
        self
    }

    /// Sets the largest batch [`pop`](Self::pop) hands out (at least 1; default
    /// [`DEFAULT_BATCH_SIZE`]). 1 pops one delta at a time, as client-go without
    /// `InOrderInformersBatchProcess`.
    #[must_use]
    pub fn with_batch_size(mut self, n: usize) -> Self {
        self.batch_size = n.max(1);
        self
    }

    fn note_synced(&self, state: &State<K>) {
        if state.has_synced() && !*self.synced.borrow() {
            self.synced.send_replace(true);
        }
    }

    /// Queues `delta`. Per-object deltas populate the FIFO (client-go `Add`/`Update`/`Delete`);
    /// bookmarks and resyncs do not (client-go `Bookmark`, atomic `Resync`), so neither makes an
    /// informer synced before its first list.
    fn push(&self, key: Option<ObjectKey>, delta: InOrderDelta<K>) {
        self.push_held(key, Held::Delta(delta));
    }

    fn push_held(&self, key: Option<ObjectKey>, delta: Held<K>) {
        let populates = !matches!(
            delta,
            Held::Delta(InOrderDelta::Bookmark { .. } | InOrderDelta::SyncAll)
        );
        {
            let mut state = self.state.lock();
            state.populated |= populates;
            state.items.push_back(Queued { key, delta });
            self.report_len(&state);
            self.note_synced(&state);
        }
        self.wake.notify_one();
    }

    fn prepare(&self, obj: K) -> Result<(ObjectKey, Arc<K>), FifoError> {
        let key = key_of(&obj)?;
        match transform_object(self.transform.as_ref(), &key, obj) {
            Ok(obj) => Ok((key, obj)),
            Err(e) => {
                self.forget(&key);
                Err(e)
            }
        }
    }

    /// Queues [`InOrderDelta::Added`].
    ///
    /// # Errors
    ///
    /// [`FifoError::Key`] for an object without a valid key (nothing queued);
    /// [`FifoError::Transform`] when the transform panics (the key is queued as
    /// [`InOrderDelta::Forgotten`]).
    pub fn add(&self, obj: K) -> Result<(), FifoError> {
        let (key, obj) = self.prepare(obj)?;
        self.push(Some(key), InOrderDelta::Added(obj));
        Ok(())
    }

    /// Queues [`InOrderDelta::Updated`].
    ///
    /// # Errors
    ///
    /// As [`add`](Self::add).
    pub fn update(&self, obj: K) -> Result<(), FifoError> {
        let (key, obj) = self.prepare(obj)?;
        self.push(Some(key), InOrderDelta::Updated(obj));
        Ok(())
    }

    /// Queues [`InOrderDelta::Deleted`].
    ///
    /// # Errors
    ///
    /// As [`add`](Self::add).
    pub fn delete(&self, obj: K) -> Result<(), FifoError> {
        let (key, obj) = self.prepare(obj)?;
        self.push(Some(key), InOrderDelta::Deleted(obj));
        Ok(())
    }

    /// Queues [`InOrderDelta::Forgotten`] for `key`.
    pub fn forget(&self, key: &ObjectKey) {
        self.push(Some(key.clone()), InOrderDelta::Forgotten(key.clone()));
    }

    /// Queues [`InOrderDelta::Bookmark`].
    pub fn bookmark(&self, resource_version: &str) {
        if resource_version.is_empty() {
            return;
        }
        self.push(
            None,
            InOrderDelta::Bookmark {
                resource_version: resource_version.to_owned(),
            },
        );
    }

    /// Makes one listed object ready for [`replace_items`](Self::replace_items), as
    /// [`DeltaFifo::prepare_list_item`](crate::DeltaFifo::prepare_list_item) does.
    ///
    /// # Errors
    ///
    /// [`FifoError::Key`], [`FifoError::Transform`].
    pub fn prepare_list_item(&self, obj: K) -> Result<ListItem<K>, FifoError> {
        list_item(
            self.packer.as_ref(),
            self.known.as_ref(),
            self.transform.as_ref(),
            obj,
        )
    }

    /// Queues a watched object handed over as its bytes: packed from them, never decoded here
    /// (see [`ReflectorStore::add_bytes`]). One that cannot be packed and does not decode
    /// either has its key forgotten, as a decoded watch event whose object does not decode.
    /// `packed` and `decoded` make the entry of the event's kind.
    fn enqueue_bytes(
        &self,
        object: &WatchedBytes,
        packed: fn(Packed, Box<str>) -> Held<K>,
        decoded: fn(Arc<K>) -> InOrderDelta<K>,
    ) -> Result<(), FifoError> {
        let key = object.meta().key()?;
        let held = match from_bytes(
            self.packer.as_ref(),
            self.transform.as_ref(),
            key.clone(),
            object.meta(),
            object.bytes(),
        ) {
            Ok(FromBytes::Packed(p)) => packed(p, object.meta().resource_version().into()),
            Ok(FromBytes::Decoded(obj)) => Held::Delta(decoded(obj)),
            Err(e) => {
                if matches!(e, FifoError::Undecodable { .. }) {
                    self.forget(&key);
                }
                return Err(e);
            }
        };
        self.push_held(Some(key), held);
        Ok(())
    }

    /// Queues one [`InOrderDelta::ReplacedAll`] with `list` (transformed). The first replace (or
    /// any producer call before it) fixes what must be processed before
    /// [`has_synced`](Self::has_synced): every entry queued by then, the replace included
    /// (client-go `initialPopulationCount = len(f.items)`).
    ///
    /// # Errors
    ///
    /// [`FifoError::Key`] if an object has no valid key, [`FifoError::Transform`] if the
    /// transform panics; nothing is queued then.
    pub fn replace(&self, list: Vec<K>, resource_version: &str) -> Result<(), FifoError> {
        let items = list
            .into_iter()
            .map(|obj| ListItem::Decoded(Box::new(obj)))
            .collect();
        self.replace_items(items, resource_version)
    }

    /// [`replace`](Self::replace) with items that may be ready already.
    ///
    /// # Errors
    ///
    /// As [`replace`](Self::replace), and [`FifoError::Packed`] for a packed item when this FIFO
    /// has no cache that packs (it was packed by another FIFO's); nothing is queued then.
    pub fn replace_items(
        &self,
        list: Vec<ListItem<K>>,
        resource_version: &str,
    ) -> Result<(), FifoError> {
        let items = list
            .into_iter()
            .map(|item| match item {
                ListItem::Ready(obj) => {
                    key_of(&*obj)?;
                    Ok(ListItem::Ready(obj))
                }
                ListItem::Decoded(obj) => {
                    let key = key_of(&*obj)?;
                    transform_object(self.transform.as_ref(), &key, *obj).map(ListItem::Ready)
                }
                // Made by this FIFO's cache, or else by another FIFO for its own.
                ListItem::Packed(packed) if self.packer.is_some() => Ok(ListItem::Packed(packed)),
                ListItem::Packed(packed) => Err(FifoError::Packed {
                    key: packed.key().clone(),
                }),
            })
            .collect::<Result<Vec<_>, FifoError>>()?;
        {
            let mut state = self.state.lock();
            state.items.push_back(Queued {
                key: None,
                delta: Held::List {
                    items,
                    resource_version: resource_version.to_owned(),
                },
            });
            if !state.populated {
                state.populated = true;
                state.initial_population_count = state.items.len();
            }
            self.report_len(&state);
            self.note_synced(&state);
        }
        self.wake.notify_one();
        Ok(())
    }

    /// Queues one [`InOrderDelta::SyncAll`].
    pub fn resync(&self) {
        self.push(None, InOrderDelta::SyncAll);
    }

    /// Waits for queued deltas, takes a batch and calls `process(batch, is_in_initial_list)`
    /// with the FIFO's lock released (client-go `PopBatch` with `UnlockWhileProcessing`).
    ///
    /// A batch is either one whole-store delta ([`InOrderDelta::ReplacedAll`],
    /// [`InOrderDelta::SyncAll`], [`InOrderDelta::Bookmark`], [`InOrderDelta::Forgotten`]) or
    /// up to the batch size of per-object deltas with distinct keys, in order; it never crosses
    /// the end of the initial population, so `is_in_initial_list` (true until synced) holds for
    /// all of it. [`has_synced`](Self::has_synced) turns true only after `process` has returned
    /// for the last entry of the initial population.
    ///
    /// There must be one consumer: deltas of the same key are processed in order only because
    /// batches are.
    ///
    /// # Errors
    ///
    /// [`FifoError::Closed`] once the FIFO is closed and empty.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: entries are taken only in the step that runs `process`.
    pub async fn pop<R>(
        &self,
        process: impl FnOnce(Vec<InOrderDelta<K>>, bool) -> R,
    ) -> Result<R, FifoError> {
        self.pop_entries(|entries, initial| {
            let batch = entries
                .into_iter()
                .map(|entry| match entry {
                    Popped::Delta(delta) => delta,
                    Popped::Forgotten { key, .. } => InOrderDelta::Forgotten(key),
                    Popped::List {
                        items,
                        resource_version,
                    } => InOrderDelta::ReplacedAll {
                        objects: items
                            .into_iter()
                            .filter_map(|item| {
                                self.unpack_item(item)
                                    .map_err(|(key, e)| self.report(&key, &e))
                                    .ok()
                            })
                            .collect(),
                        resource_version,
                    },
                })
                .collect();
            process(batch, initial)
        })
        .await
    }

    /// [`pop`](Self::pop) with a list's objects left as queued, for the informer to decode one
    /// at a time ([`unpack_item`](Self::unpack_item)) as it replaces its cache with them.
    pub(crate) async fn pop_entries<R>(
        &self,
        process: impl FnOnce(Vec<Popped<K>>, bool) -> R,
    ) -> Result<R, FifoError> {
        let (batch, is_in_initial_list) = loop {
            let mut notified = pin!(self.wake.notified());
            notified.as_mut().enable();
            {
                let mut state = self.state.lock();
                if !state.items.is_empty() {
                    let initial = !state.has_synced();
                    let was_full = state.items.len() >= self.full_at();
                    let batch = self.take_batch(&mut state);
                    self.report_len(&state);
                    if was_full && state.items.len() < self.full_at() {
                        self.room.notify_waiters();
                    }
                    break (batch, initial);
                }
                if state.closed {
                    return Err(FifoError::Closed);
                }
            }
            notified.await;
        };
        let taken = batch.len();
        let started = std::time::Instant::now();
        // Packed watched objects are decoded here, with the lock released.
        let batch = batch.into_iter().map(|held| self.unpacked(held)).collect();
        let out = process(batch, is_in_initial_list);
        if let Some(m) = &self.metrics {
            m.processing_latency
                .observe(started.elapsed().as_secs_f64());
        }
        let mut state = self.state.lock();
        if state.initial_population_count > 0 {
            state.initial_population_count = state.initial_population_count.saturating_sub(taken);
            self.note_synced(&state);
        }
        Ok(out)
    }

    /// An entry taken out of the queue as it is handed out: a packed watched object decoded (and
    /// its bytes passed to the cache), or [`InOrderDelta::Forgotten`] if it does not decode (its
    /// cached version goes, as for an undecodable object of a decoded watch); a list as it is.
    fn unpacked(&self, held: Held<K>) -> Popped<K> {
        let (packed, resource_version, updated) = match held {
            Held::Delta(delta) => return Popped::Delta(delta),
            Held::Added(packed, rv) => (packed, rv, false),
            Held::Updated(packed, rv) => (packed, rv, true),
            Held::List {
                items,
                resource_version,
            } => {
                return Popped::List {
                    items,
                    resource_version,
                };
            }
        };
        match self.unpack(packed) {
            Ok(obj) if updated => Popped::Delta(InOrderDelta::Updated(obj)),
            Ok(obj) => Popped::Delta(InOrderDelta::Added(obj)),
            Err(key) => Popped::Forgotten {
                key,
                resource_version,
            },
        }
    }

    /// A listed object as its list's replace takes it: decoded if packed (and its bytes passed
    /// to the cache); its key and why, if it does not decode, for the caller to
    /// [`report`](Self::report) (with no lock held: the report calls the user's error handler).
    /// It is then left out of the list, so its cached version goes, as for an undecodable item of
    /// a decoded list.
    pub(crate) fn unpack_item(
        &self,
        item: ListItem<K>,
    ) -> Result<Arc<K>, (ObjectKey, crate::store::StorageError)> {
        match item {
            ListItem::Ready(obj) => Ok(obj),
            ListItem::Decoded(obj) => Ok(Arc::new(*obj)),
            ListItem::Packed(packed) => self.decode(packed),
        }
    }

    /// Reports a packed object that did not decode (see [`with_unreadable_report`](Self::with_unreadable_report)).
    pub(crate) fn report(&self, key: &ObjectKey, e: &crate::store::StorageError) {
        report_undecodable(self.unreadable.as_ref(), key, e);
    }

    fn decode(&self, packed: Packed) -> Result<Arc<K>, (ObjectKey, crate::store::StorageError)> {
        let key = packed.key().clone();
        match &self.packer {
            Some(cache) => cache.unpack(packed).map_err(|e| (key, e)),
            // Only this FIFO's cache packs what it holds.
            None => Err((key.clone(), crate::store::StorageError::Gone { key })),
        }
    }

    /// A packed watched object decoded, or its key (reported) when it does not decode.
    fn unpack(&self, packed: Packed) -> Result<Arc<K>, ObjectKey> {
        self.decode(packed).map_err(|(key, e)| {
            self.report(&key, &e);
            key
        })
    }

    fn take_batch(&self, state: &mut State<K>) -> Vec<Held<K>> {
        let limit = match state.initial_population_count {
            0 => self.batch_size,
            n => self.batch_size.min(n),
        };
        let mut keys: HashSet<&ObjectKey> = HashSet::new();
        let mut n = 0;
        for q in &state.items {
            if n == limit {
                break;
            }
            if !q.delta.batchable() {
                if n == 0 {
                    n = 1;
                }
                break;
            }
            match &q.key {
                Some(k) if keys.insert(k) => n += 1,
                _ => break,
            }
        }
        state.items.drain(..n.max(1)).map(|q| q.delta).collect()
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.state.lock().closed
    }

    /// True once the FIFO has been populated and every entry of the first replace has been
    /// processed (client-go `RealFIFO.HasSynced`).
    pub fn has_synced(&self) -> bool {
        self.state.lock().has_synced()
    }

    /// Waits until [`has_synced`](Self::has_synced).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn wait_synced(&self) {
        let mut rx = self.synced.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    /// The number of queued deltas (client-go's `informer_queued_items`).
    pub fn len(&self) -> usize {
        self.state.lock().items.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<K: Resource + Send + Sync + 'static> ReflectorStore<K> for InOrderFifo<K> {
    type ListItem = ListItem<K>;

    fn add(&self, obj: K) -> Result<(), FifoError> {
        InOrderFifo::add(self, obj)
    }

    fn room(&self) -> impl std::future::Future<Output = ()> + Send {
        self.wait_for_room()
    }

    fn update(&self, obj: K) -> Result<(), FifoError> {
        InOrderFifo::update(self, obj)
    }

    fn delete(&self, obj: K) -> Result<(), FifoError> {
        InOrderFifo::delete(self, obj)
    }

    fn list_item(&self, obj: K) -> Result<ListItem<K>, FifoError> {
        self.prepare_list_item(obj)
    }

    /// Without a transform (which needs the decoded object), a packing FIFO packs listed and
    /// watched objects straight from their bytes.
    fn takes_item_bytes(&self) -> bool {
        self.packer.is_some() && self.transform.is_none()
    }

    fn list_item_bytes(
        &self,
        meta: ListedMeta,
        bytes: ItemBytes<'_>,
    ) -> Result<ListItem<K>, FifoError> {
        let key = meta.key()?;
        from_bytes(
            self.packer.as_ref(),
            self.transform.as_ref(),
            key,
            &meta,
            bytes,
        )
        .map(FromBytes::into_list_item)
    }

    fn add_bytes(&self, object: &WatchedBytes) -> Result<(), FifoError> {
        self.enqueue_bytes(object, Held::Added, InOrderDelta::Added)
    }

    fn update_bytes(&self, object: &WatchedBytes) -> Result<(), FifoError> {
        self.enqueue_bytes(object, Held::Updated, InOrderDelta::Updated)
    }

    fn replace(&self, items: Vec<ListItem<K>>, resource_version: &str) -> Result<(), FifoError> {
        self.replace_items(items, resource_version)
    }

    fn resync(&self) -> Result<(), FifoError> {
        InOrderFifo::resync(self);
        Ok(())
    }

    fn bookmark(&self, resource_version: &str) {
        InOrderFifo::bookmark(self, resource_version);
    }

    fn forget(&self, key: &ObjectKey) {
        InOrderFifo::forget(self, key);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::FutureExt;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    use super::*;
    use crate::store::Indexer;

    fn cm(name: &str, rv: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// A short description of a delta: kind, then name@rv of each object.
    fn describe(d: &InOrderDelta<ConfigMap>) -> String {
        let o = |o: &Arc<ConfigMap>| {
            format!(
                "{}@{}",
                o.metadata.name.as_deref().unwrap_or(""),
                o.metadata.resource_version.as_deref().unwrap_or("")
            )
        };
        match d {
            InOrderDelta::Added(x) => format!("added {}", o(x)),
            InOrderDelta::Updated(x) => format!("updated {}", o(x)),
            InOrderDelta::Deleted(x) => format!("deleted {}", o(x)),
            InOrderDelta::ReplacedAll {
                objects,
                resource_version,
            } => format!(
                "replaced-all@{resource_version} [{}]",
                objects.iter().map(o).collect::<Vec<_>>().join(" ")
            ),
            InOrderDelta::SyncAll => "sync-all".into(),
            InOrderDelta::Bookmark { resource_version } => format!("bookmark@{resource_version}"),
            InOrderDelta::Forgotten(k) => format!("forgotten {k}"),
        }
    }

    /// Pops one batch now, if any: (descriptions, is_in_initial_list).
    fn pop_now(fifo: &InOrderFifo<ConfigMap>) -> Option<(Vec<String>, bool)> {
        fifo.pop(|batch, initial| (batch.iter().map(describe).collect(), initial))
            .now_or_never()
            .map(Result::unwrap)
    }

    fn drain(fifo: &InOrderFifo<ConfigMap>) -> Vec<Vec<String>> {
        std::iter::from_fn(|| pop_now(fifo).map(|(b, _)| b)).collect()
    }

    #[test]
    fn changes_queue_in_arrival_order_without_merging() {
        let fifo = InOrderFifo::new(None).with_batch_size(1);
        fifo.add(cm("a", "1")).unwrap();
        fifo.update(cm("b", "2")).unwrap();
        fifo.update(cm("a", "3")).unwrap();
        fifo.delete(cm("a", "4")).unwrap();
        fifo.delete(cm("a", "4")).unwrap();
        assert_eq!(
            drain(&fifo).concat(),
            [
                "added a@1",
                "updated b@2",
                "updated a@3",
                "deleted a@4",
                "deleted a@4"
            ]
        );
    }

    #[test]
    fn a_delete_of_an_unknown_key_is_queued() {
        // client-go RealFIFO: no known-objects check in atomic mode.
        let fifo = InOrderFifo::new(None);
        fifo.delete(cm("never-seen", "9")).unwrap();
        assert_eq!(drain(&fifo), [["deleted never-seen@9"]]);
    }

    #[test]
    fn a_batch_takes_distinct_keys_and_stops_at_a_repeat_or_a_whole_store_delta() {
        let fifo = InOrderFifo::new(None);
        fifo.add(cm("a", "1")).unwrap();
        fifo.add(cm("b", "2")).unwrap();
        fifo.update(cm("a", "3")).unwrap();
        fifo.update(cm("c", "4")).unwrap();
        fifo.bookmark("5");
        fifo.delete(cm("c", "6")).unwrap();
        fifo.resync();
        fifo.resync();
        assert_eq!(
            drain(&fifo),
            vec![
                vec!["added a@1", "added b@2"],
                vec!["updated a@3", "updated c@4"],
                vec!["bookmark@5"],
                vec!["deleted c@6"],
                vec!["sync-all"],
                vec!["sync-all"],
            ]
        );
    }

    #[test]
    fn a_batch_holds_at_most_the_batch_size() {
        let fifo = InOrderFifo::new(None).with_batch_size(3);
        for i in 0..7 {
            fifo.add(cm(&format!("o{i}"), &i.to_string())).unwrap();
        }
        let sizes: Vec<usize> = drain(&fifo).iter().map(Vec::len).collect();
        assert_eq!(sizes, [3, 3, 1]);
        let big = InOrderFifo::new(None);
        for i in 0..2500 {
            big.add(cm(&format!("o{i}"), &i.to_string())).unwrap();
        }
        let sizes: Vec<usize> = drain(&big).iter().map(Vec::len).collect();
        assert_eq!(sizes, [DEFAULT_BATCH_SIZE, DEFAULT_BATCH_SIZE, 500]);
    }

    #[test]
    fn a_relist_is_one_replaced_all_and_a_resync_one_sync_all() {
        let fifo = InOrderFifo::new(None);
        fifo.replace(vec![cm("a", "1"), cm("b", "2")], "7").unwrap();
        fifo.resync();
        assert_eq!(drain(&fifo), [["replaced-all@7 [a@1 b@2]"], ["sync-all"]]);
    }

    #[test]
    fn has_synced_after_the_first_replace_and_what_was_queued_before_it_are_processed() {
        let fifo = InOrderFifo::new(None);
        assert!(!fifo.has_synced());
        fifo.replace(vec![cm("a", "1")], "1").unwrap();
        fifo.add(cm("b", "2")).unwrap();
        assert!(!fifo.has_synced());
        let seen_synced_inside = fifo
            .pop(|_, initial| {
                assert!(initial);
                fifo.has_synced()
            })
            .now_or_never()
            .unwrap()
            .unwrap();
        assert!(!seen_synced_inside, "synced only once processing returned");
        assert!(fifo.has_synced());
        // The add after the replace is not part of the initial list.
        assert!(!pop_now(&fifo).unwrap().1);
        // Only the first replace counts.
        fifo.replace(vec![], "3").unwrap();
        assert!(fifo.has_synced());
    }

    #[test]
    fn a_batch_never_crosses_the_end_of_the_initial_population() {
        let fifo = InOrderFifo::new(None);
        fifo.add(cm("a", "1")).unwrap(); // populates: synced at once, no initial population
        assert!(fifo.has_synced());
        let fifo = InOrderFifo::new(None);
        fifo.replace(vec![], "1").unwrap();
        // A later-created FIFO whose first call is a replace: the replace alone is initial.
        fifo.add(cm("b", "2")).unwrap();
        assert_eq!(
            pop_now(&fifo).unwrap(),
            (vec!["replaced-all@1 []".into()], true)
        );
        assert_eq!(pop_now(&fifo).unwrap(), (vec!["added b@2".into()], false));
    }

    #[test]
    fn producers_are_not_blocked_while_a_batch_is_processed() {
        let fifo = InOrderFifo::new(None);
        fifo.add(cm("a", "1")).unwrap();
        // With the lock held while processing, this add would deadlock.
        fifo.pop(|_, _| fifo.add(cm("b", "2")).unwrap())
            .now_or_never()
            .unwrap()
            .unwrap();
        assert_eq!(drain(&fifo), [["added b@2"]]);
    }

    #[test]
    fn transform_applies_at_enqueue_and_a_panic_forgets_the_key() {
        let fifo = InOrderFifo::new(None).with_transform(Arc::new(|mut o: ConfigMap| {
            assert_ne!(o.metadata.name.as_deref(), Some("bad"), "bug");
            o.metadata.resource_version = Some("T".into());
            o
        }));
        fifo.add(cm("a", "1")).unwrap();
        fifo.replace(vec![cm("b", "2")], "2").unwrap();
        assert!(matches!(
            fifo.update(cm("bad", "3")),
            Err(FifoError::Transform { .. })
        ));
        assert_eq!(
            drain(&fifo),
            vec![
                vec!["added a@T".to_owned()],
                vec!["replaced-all@2 [b@T]".to_owned()],
                vec!["forgotten ns/bad".to_owned()],
            ]
        );
    }

    #[test]
    fn a_relist_item_reuses_the_cached_object_at_the_same_version() {
        let store = Indexer::new();
        let cached = Arc::new(cm("a", "5"));
        store.add(cached.clone()).unwrap();
        let fifo = InOrderFifo::new(Some(Arc::new(store) as Arc<dyn KnownObjects<_>>));
        let ListItem::Ready(same) = fifo.prepare_list_item(cm("a", "5")).unwrap() else {
            panic!("not ready")
        };
        assert!(Arc::ptr_eq(&same, &cached));
        let ListItem::Ready(newer) = fifo.prepare_list_item(cm("a", "6")).unwrap() else {
            panic!("not ready")
        };
        assert!(!Arc::ptr_eq(&newer, &cached));
    }

    #[tokio::test(start_paused = true)]
    async fn pop_waits_and_close_ends_it_after_the_queue_drains() {
        let fifo = Arc::new(InOrderFifo::<ConfigMap>::new(None));
        let popper = tokio::spawn({
            let fifo = fifo.clone();
            async move { fifo.pop(|b, _| b.len()).await }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!popper.is_finished());
        fifo.add(cm("a", "1")).unwrap();
        let n = tokio::time::timeout(Duration::from_secs(5), popper)
            .await
            .expect("pop likely deadlocked");
        assert_eq!(n.unwrap().unwrap(), 1);
        fifo.add(cm("b", "2")).unwrap();
        fifo.close();
        assert!(fifo.pop(|_, _| ()).await.is_ok());
        assert_eq!(fifo.pop(|_, _| ()).await, Err(FifoError::Closed));
    }

    /// A FIFO packing for a compact cache that keeps nothing decoded, that cache, and what the
    /// FIFO reported as undecodable.
    #[cfg(feature = "compact")]
    fn packing_fifo() -> (
        InOrderFifo<ConfigMap>,
        Indexer<ConfigMap>,
        Arc<parking_lot::Mutex<Vec<String>>>,
    ) {
        let config = crate::CompactConfig::default()
            .hot_objects(0)
            .dictionary_samples(0);
        let cache = Indexer::with_storage(crate::CacheStorage::Compact(config));
        let known: Arc<dyn KnownObjects<ConfigMap>> = Arc::new(cache.clone());
        let reported = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let sink = reported.clone();
        let fifo = InOrderFifo::new(Some(known))
            .with_packing(cache.clone())
            .with_unreadable_report(Arc::new(move |e| sink.lock().push(e.to_string())));
        (fifo, cache, reported)
    }

    #[cfg(feature = "compact")]
    fn packed_counts(cache: &Indexer<ConfigMap>) -> [u64; 5] {
        let s = cache.stats();
        [
            s.packed,
            s.packed_from_wire,
            s.unpacks,
            s.kept_packed,
            s.decodes,
        ]
    }

    #[cfg(feature = "compact")]
    #[test]
    fn with_a_cache_that_packs_lists_and_watched_objects_wait_packed_until_popped() {
        use crate::reflector::decode::raw::watched_json;
        let (fifo, cache, reported) = packing_fifo();
        let objs: Vec<_> = (0..20).map(|i| cm(&format!("c{i}"), "1")).collect();
        let items: Vec<_> = objs
            .iter()
            .map(|o| fifo.prepare_list_item(o.clone()).unwrap())
            .collect();
        assert!(items.iter().all(|i| matches!(i, ListItem::Packed(_))));
        fifo.replace_items(items, "1").unwrap();
        fifo.add_bytes(&watched_json("ADDED", cm("new", "2")))
            .unwrap();
        fifo.update_bytes(&watched_json("MODIFIED", cm("c3", "3")))
            .unwrap();
        // Nothing decoded while queued.
        assert_eq!(packed_counts(&cache), [22, 2, 0, 0, 0]);

        let objects = fifo
            .pop(|batch, initial| {
                assert!(initial);
                match batch.into_iter().next() {
                    Some(InOrderDelta::ReplacedAll { objects, .. }) => objects,
                    other => panic!("{other:?}"),
                }
            })
            .now_or_never()
            .unwrap()
            .unwrap();
        let got: Vec<ConfigMap> = objects.iter().map(|o| (**o).clone()).collect();
        assert_eq!(got, objs);
        cache.replace_at(objects, "1").unwrap();
        // Each decoded once as popped; the cache kept the bytes packed.
        assert_eq!(packed_counts(&cache), [22, 2, 20, 20, 0]);

        // The two watched objects share a batch, in order, decoded as popped.
        let batch = fifo
            .pop(|batch, _| {
                for d in &batch {
                    if let InOrderDelta::Added(o) | InOrderDelta::Updated(o) = d {
                        cache.update(o.clone()).unwrap();
                    }
                }
                batch.iter().map(describe).collect::<Vec<_>>()
            })
            .now_or_never()
            .unwrap()
            .unwrap();
        assert_eq!(batch, ["added new@2", "updated c3@3"]);
        assert_eq!(packed_counts(&cache), [22, 2, 22, 22, 0]);
        assert_eq!(*cache.get_by_key("ns/c3").unwrap(), cm("c3", "3"));

        // A relist of unchanged objects queues references to the cache, read when popped.
        let relisted: Vec<_> = ["c0", "c1"]
            .map(|n| fifo.prepare_list_item(cm(n, "1")).unwrap())
            .into_iter()
            .collect();
        fifo.replace_items(relisted, "4").unwrap();
        assert_eq!(packed_counts(&cache)[0], 22);
        assert_eq!(drain(&fifo), [["replaced-all@4 [c0@1 c1@1]"]]);
        assert!(reported.lock().is_empty());
        assert!(fifo.is_empty());
    }

    #[cfg(feature = "compact")]
    #[test]
    fn a_packed_object_that_does_not_decode_is_reported_and_its_key_forgotten() {
        use crate::reflector::decode::raw::watched_json;
        let (fifo, cache, reported) = packing_fifo();
        cache.update(Arc::new(cm("a", "1"))).unwrap();
        let mut bad = serde_json::to_value(cm("a", "2")).unwrap();
        bad["data"] = serde_json::json!("not a map");
        fifo.update_bytes(&watched_json("MODIFIED", &bad)).unwrap();
        fifo.add_bytes(&watched_json("ADDED", cm("b", "2")))
            .unwrap();
        // Where the watched object was: its key forgotten (the cached version goes).
        assert_eq!(drain(&fifo), [["forgotten ns/a", "added b@2"]]);

        // A listed one is left out of its list, which then drops the cached version.
        let bad_c = {
            let mut v = serde_json::to_value(cm("c", "3")).unwrap();
            v["data"] = serde_json::json!(7);
            watched_json("ADDED", v)
        };
        let items = vec![
            fifo.list_item_bytes(bad_c.meta().clone(), bad_c.bytes())
                .unwrap(),
            fifo.prepare_list_item(cm("d", "3")).unwrap(),
        ];
        fifo.replace_items(items, "3").unwrap();
        assert_eq!(drain(&fifo), [["replaced-all@3 [d@3]"]]);

        let reported = reported.lock().clone();
        assert_eq!(reported.len(), 2, "{reported:?}");
        assert!(reported[0].contains("ns/a") && reported[1].contains("ns/c"));
        assert!(reported.iter().all(|r| !r.contains("not a map")));
        assert_eq!(cache.stats().decode_errors, 2);
    }

    #[test]
    fn fifo_and_pop_future_are_send_sync() {
        fn assert_send_sync<T: Send + Sync>(_: &T) {}
        fn assert_send<T: Send>(_: &T) {}
        let fifo = InOrderFifo::<ConfigMap>::new(None);
        assert_send_sync(&fifo);
        assert_send(&fifo.pop(|_, _| ()));
    }
}
