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
    queue::{FifoError, KnownObjects, TransformFn, transform_object},
};
use crate::{
    reflector::ReflectorStore,
    store::{ObjectKey, key_of},
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

struct Queued<K> {
    /// The object's key, for per-object deltas (batches hold distinct keys).
    key: Option<ObjectKey>,
    delta: InOrderDelta<K>,
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
    synced: watch::Sender<bool>,
    /// The consumer's store, read only to reuse the cached object of an unchanged listed item
    /// (a memory optimisation; client-go's atomic FIFO has no known objects).
    known: Option<Arc<dyn KnownObjects<K>>>,
    transform: Option<TransformFn<K>>,
    batch_size: usize,
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
            synced: watch::channel(false).0,
            known,
            transform: None,
            batch_size: DEFAULT_BATCH_SIZE,
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

    fn push(&self, key: Option<ObjectKey>, delta: InOrderDelta<K>) {
        {
            let mut state = self.state.lock();
            state.populated = true;
            state.items.push_back(Queued { key, delta });
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
        let key = key_of(&obj)?;
        if let Some(rv) = obj
            .meta()
            .resource_version
            .as_deref()
            .filter(|rv| !rv.is_empty())
            && let Some(cached) = self.known.as_ref().and_then(|k| k.get_by_key(&key))
            && cached.meta().resource_version.as_deref() == Some(rv)
        {
            return Ok(ListItem::Ready(cached));
        }
        Ok(ListItem::Ready(transform_object(
            self.transform.as_ref(),
            &key,
            obj,
        )?))
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
    /// As [`replace`](Self::replace).
    pub fn replace_items(
        &self,
        list: Vec<ListItem<K>>,
        resource_version: &str,
    ) -> Result<(), FifoError> {
        let objects = list
            .into_iter()
            .map(|item| match item {
                ListItem::Ready(obj) => {
                    key_of(&*obj)?;
                    Ok(obj)
                }
                ListItem::Decoded(obj) => {
                    let key = key_of(&*obj)?;
                    transform_object(self.transform.as_ref(), &key, *obj)
                }
            })
            .collect::<Result<Vec<_>, FifoError>>()?;
        {
            let mut state = self.state.lock();
            state.items.push_back(Queued {
                key: None,
                delta: InOrderDelta::ReplacedAll {
                    objects,
                    resource_version: resource_version.to_owned(),
                },
            });
            if !state.populated {
                state.populated = true;
                state.initial_population_count = state.items.len();
            }
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
        let (batch, is_in_initial_list) = loop {
            let mut notified = pin!(self.wake.notified());
            notified.as_mut().enable();
            {
                let mut state = self.state.lock();
                if !state.items.is_empty() {
                    let initial = !state.has_synced();
                    break (self.take_batch(&mut state), initial);
                }
                if state.closed {
                    return Err(FifoError::Closed);
                }
            }
            notified.await;
        };
        let taken = batch.len();
        let out = process(batch, is_in_initial_list);
        let mut state = self.state.lock();
        if state.initial_population_count > 0 {
            state.initial_population_count = state.initial_population_count.saturating_sub(taken);
            self.note_synced(&state);
        }
        Ok(out)
    }

    fn take_batch(&self, state: &mut State<K>) -> Vec<InOrderDelta<K>> {
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

    fn update(&self, obj: K) -> Result<(), FifoError> {
        InOrderFifo::update(self, obj)
    }

    fn delete(&self, obj: K) -> Result<(), FifoError> {
        InOrderFifo::delete(self, obj)
    }

    fn list_item(&self, obj: K) -> Result<ListItem<K>, FifoError> {
        self.prepare_list_item(obj)
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
