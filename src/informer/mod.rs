//! The shared index informer: reflector → FIFO (DeltaFIFO, or the in-order FIFO that client-go
//! v0.36+ runs; see [`FifoMode`]) → `handle_deltas` → indexer + listeners (client-go
//! `tools/cache/shared_informer.go`, `controller.go`).

mod handler;
mod metrics;
mod processor;
mod queue;
mod registration;

use std::{
    future::Future,
    sync::{Arc, Weak},
    time::Duration,
};

use kube::Resource;
use parking_lot::Mutex;
use tokio::{sync::watch, task::JoinHandle};
use tracing::Instrument;

pub use handler::{
    Event, FilteringResourceEventHandler, ResourceEventHandler, ResourceEventHandlerFuncs,
};
pub(crate) use metrics::{FifoMetrics, InformerMetrics, resource_version_metric_value};
pub use metrics::{InformerId, InformerMetricsProvider, names as metric_names};
use processor::{
    Deliveries, HandlerThread, HeldWakes, Listener, Processor, StoredEvent, determine_resync_period,
};
pub use queue::FifoMode;
use queue::{InformerQueue, QueueHandle};
pub use registration::{EventStream, ResourceEventHandlerRegistration};

use crate::{
    fifo::{DeltaFifo, DeltaObject, DeltaType, Deltas, InOrderFifo, KnownObjects, TransformFn},
    lister::Lister,
    reflector::{
        ListWatchTarget, ListerWatcher, Reflector, ReflectorConfig, ReflectorStatus,
        WatchErrorHandler,
    },
    store::{Cache, CacheStorage, IndexError, Indexer, Indexers, StoreOp, Written, key_of},
};

/// client-go `minimumResyncPeriod`: shorter requested periods are raised to this.
pub const MINIMUM_RESYNC_PERIOD: Duration = Duration::from_secs(1);

/// Errors of informer configuration calls.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InformerError {
    /// The call is only allowed before the informer starts (client-go returns the same error
    /// from `SetTransform` and `SetWatchErrorHandler`).
    #[error("informer has already started")]
    AlreadyStarted,
    /// The informer has been stopped; it cannot take handlers or run again.
    #[error("informer has been stopped")]
    Stopped,
    /// Adding indexers failed.
    #[error(transparent)]
    Index(#[from] IndexError),
    /// The thread a handler runs on could not be spawned (the process is out of threads or
    /// memory); the handler was not registered.
    #[error("cannot spawn an event handler thread")]
    HandlerThread(#[source] std::io::Error),
    /// The registration belongs to another informer; nothing was removed.
    #[error("the registration belongs to another informer")]
    ForeignRegistration,
}

/// Where an informer is in its life. Every way out of [`SharedIndexInformer::run`] (it returns,
/// its future is dropped, or something in it panics) ends in [`Stopped`](Self::Stopped), so
/// [`SharedIndexInformer::shutdown`] and [`SharedIndexInformer::wait_for_cache_sync`] can
/// always wait for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Lifecycle {
    /// Created; handlers, indexers, a transform and an error handler may be set.
    NotStarted,
    /// The reflector lists and watches; changes reach the cache and the handlers.
    Running,
    /// [`shutdown`](SharedIndexInformer::shutdown) was called; the informer is winding down.
    Stopping,
    /// Stopped for good: the reflector and every handler have finished, and no handler can be
    /// added.
    Stopped,
}

/// Informer options.
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct InformerConfig {
    /// The default resync period of handlers added without one (client-go
    /// `defaultEventHandlerResyncPeriod`); also the initial resync check period. Zero: no resync.
    pub resync_period: Duration,
    /// Reflector options (paging, watch timeouts, backoff, streaming list).
    pub reflector: ReflectorConfig,
    /// Which FIFO runs between the reflector and the cache: [`FifoMode::DeltaFifo`] (the
    /// default) or [`FifoMode::InOrder`] (what client-go v0.36+ runs).
    pub fifo_mode: FifoMode,
    /// Who the informer is in metrics (client-go `Identifier`); metrics are reported only when
    /// its name is set.
    pub identity: Option<InformerId>,
    /// Where metrics go ([`InformerMetricsProvider`]); none by default.
    pub metrics_provider: Option<Arc<dyn InformerMetricsProvider>>,
    /// The informer's name in logs: the `informer` field of its span and its reflector's name
    /// (see the crate docs, "Logging"). `None` (default): its lister-watcher's
    /// [`target`](ListerWatcher::target) name (`v1/pods`), or when that is unknown the object
    /// type (`PartialObjectMeta<Pod>`). [`SharedInformerFactory`](crate::SharedInformerFactory)
    /// names its informers as in its sync results (`v1/Pod`).
    pub name: Option<String>,
    /// How the cache holds objects: [`CacheStorage::Decoded`] (the default) or, with the
    /// `compact` feature, compressed (see README "Memory").
    pub cache_storage: CacheStorage,
}

impl std::fmt::Debug for InformerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InformerConfig")
            .field("resync_period", &self.resync_period)
            .field("reflector", &self.reflector)
            .field("fifo_mode", &self.fifo_mode)
            .field("identity", &self.identity)
            .field("metrics_provider", &self.metrics_provider.is_some())
            .field("name", &self.name)
            .field("cache_storage", &self.cache_storage)
            .finish()
    }
}

impl InformerConfig {
    /// Sets [`Self::resync_period`].
    #[must_use]
    pub fn resync_period(mut self, d: Duration) -> Self {
        self.resync_period = d;
        self
    }

    /// Sets [`Self::reflector`].
    #[must_use]
    pub fn reflector(mut self, r: ReflectorConfig) -> Self {
        self.reflector = r;
        self
    }

    /// Sets [`Self::fifo_mode`].
    #[must_use]
    pub fn fifo_mode(mut self, mode: FifoMode) -> Self {
        self.fifo_mode = mode;
        self
    }

    /// Sets the fields dropped from every object while it is decoded
    /// ([`ReflectorConfig::projection`], which this sets: set it after [`Self::reflector`]).
    /// Cheaper than a transform that drops the same fields (see
    /// [`Projection`](crate::Projection)).
    #[must_use]
    pub fn projection(mut self, projection: crate::Projection) -> Self {
        self.reflector.projection = projection;
        self
    }

    /// Sets [`Self::identity`].
    #[must_use]
    pub fn identity(mut self, id: InformerId) -> Self {
        self.identity = Some(id);
        self
    }

    /// Sets [`Self::metrics_provider`].
    #[must_use]
    pub fn metrics_provider(mut self, provider: Arc<dyn InformerMetricsProvider>) -> Self {
        self.metrics_provider = Some(provider);
        self
    }

    /// Sets [`Self::name`].
    #[must_use]
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Sets [`Self::cache_storage`].
    #[must_use]
    pub fn cache_storage(mut self, storage: CacheStorage) -> Self {
        self.cache_storage = storage;
        self
    }
}

/// Options of one handler.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct HandlerOptions {
    /// This handler's resync period; `None` (default) takes the informer's.
    pub resync_period: Option<Duration>,
    /// Bound of the handler's buffer; `None` (default) is unbounded, as in client-go.
    ///
    /// Policy when a bounded buffer is full: **back-pressure**. The cache is still updated for
    /// the change in hand, but the informer waits (as a future: no runtime thread is blocked and
    /// no lock is held) until the handler has taken notifications out, so nothing is dropped and
    /// this handler's memory stays bounded. Meanwhile no handler of this informer receives
    /// anything new and no further change is applied: changes accumulate in the DeltaFIFO,
    /// which merges them per object, while the reflector keeps reading the watch; the in-order
    /// FIFO, which keeps every change, takes up to two batches and then holds the reflector
    /// back until it has room (as client-go's RealFIFO does by keeping its lock through a
    /// batch once two are queued). client-go has no handler bound. The in-order FIFO releases
    /// its lock while a batch is processed, as client-go v0.36+'s `UnlockWhileProcessingFIFO`
    /// does; the DeltaFIFO releases it only for
    /// this wait (client-go's DeltaFIFO, which v0.36 no longer runs, holds it while an item is
    /// processed). `has_synced` and the listers keep answering, also from the
    /// bounded handler itself. Use it for a handler that must not fall arbitrarily far behind
    /// and may hold the others back. Exception: the replay of the cache to a handler added
    /// after start is not bounded. A handler with a bounded buffer must not add handlers or
    /// indexers to its own informer from its callbacks (that waits for the informer, which may
    /// be waiting for it). A handler with a bounded buffer always runs on its own thread, as if
    /// [`Self::dedicated_thread`] were set: one slow enough to need a bound would hold up the
    /// handlers sharing the informer's handler thread.
    pub buffer_capacity: Option<usize>,
    /// Run this handler on an OS thread of its own instead of on the informer's handler thread.
    ///
    /// By default (`false`) an informer's handlers run as tasks on one thread the informer starts
    /// for them, much as client-go's run as goroutines: one thread wake per notification however
    /// many handlers there are, where a thread per handler costs a wake (a few microseconds of
    /// context switch) per handler. That suits what most handlers do (a few map lookups and a
    /// workqueue `add`). A handler that blocks (synchronous I/O, long computation,
    /// `std::thread::sleep`, locks held by slow code) would hold up the others on that thread
    /// (by one of its calls at a time: a handler yields to the others every 2 ms of work): give
    /// it its own. A handler call of 100 ms or more on the shared thread is logged once as a
    /// warning.
    ///
    /// A handler call that panics is caught and logged, wherever the handler runs; the handler
    /// then pauses for a second before its next notification (client-go's `processorListener`
    /// restarts its loop a second after a panic), so a handler that panics on every event cannot
    /// spin a core or flood the logs. Nothing is dropped: notifications wait in its buffer, and
    /// the other handlers go on.
    pub dedicated_thread: bool,
}

impl HandlerOptions {
    /// Sets [`Self::resync_period`].
    #[must_use]
    pub fn resync_period(mut self, d: Duration) -> Self {
        self.resync_period = Some(d);
        self
    }

    /// Sets [`Self::dedicated_thread`].
    #[must_use]
    pub fn dedicated_thread(mut self) -> Self {
        self.dedicated_thread = true;
        self
    }

    /// Sets [`Self::buffer_capacity`] (at least 1).
    #[must_use]
    pub fn bounded_buffer(mut self, capacity: usize) -> Self {
        self.buffer_capacity = Some(capacity.max(1));
        self
    }
}

/// A shared, indexed informer for objects of type `K` (client-go `SharedIndexInformer`).
///
/// Cheap to clone: clones are the same informer. Register handlers with
/// [`add_event_handler`](Self::add_event_handler) (before or after starting), read the cache with
/// [`lister`](Self::lister) or [`indexer`](Self::indexer), and run it with
/// [`run`](Self::run) or [`start`](Self::start).
pub struct SharedIndexInformer<K> {
    inner: Arc<Inner<K>>,
}

impl<K> Clone for SharedIndexInformer<K> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<K> std::fmt::Debug for SharedIndexInformer<K>
where
    K: Resource + Send + Sync + 'static,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedIndexInformer")
            .field("name", &self.inner.name)
            .field("type", &std::any::type_name::<K>())
            .field("lifecycle", &self.lifecycle())
            .field("objects", &self.inner.indexer.len())
            .finish()
    }
}

pub(crate) struct Inner<K> {
    lw: Arc<dyn ListerWatcher<K>>,
    indexer: Indexer<K>,
    processor: Processor<K>,
    state: Mutex<State<K>>,
    /// Held while deltas are applied, and while a late handler is replayed the cache, so the
    /// replay and live notifications never interleave (client-go `blockDeltas`).
    block_deltas: Mutex<()>,
    lifecycle: watch::Sender<Lifecycle>,
    reflector_config: ReflectorConfig,
    fifo_mode: FifoMode,
    /// With a compact cache, [`CompactConfig::decoded_backlog`](crate::CompactConfig): a handler
    /// this far behind is sent compressed snapshots instead of decoded objects.
    decoded_backlog: Option<usize>,
    /// Set when the informer has a name and a metrics provider.
    metrics: Option<InformerMetrics>,
    /// [`InformerConfig::name`] or the default made from the lister-watcher's target.
    name: String,
    /// Every log line of this informer's run, reflector and handlers is emitted inside it.
    span: tracing::Span,
    /// The threads inside [`shutdown`](SharedIndexInformer::shutdown) now: a handler thread
    /// among them waits for the stop, so the stop does not wait for it.
    shutdown_callers: watch::Sender<Vec<std::thread::ThreadId>>,
    /// Tests only: run by `wait_for_cache_sync` right after it finds no FIFO, to land a start
    /// in the window a lost wake-up once hid in.
    #[cfg(test)]
    after_no_fifo: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

struct State<K> {
    started: bool,
    resync_check_period: Duration,
    default_resync: Duration,
    transform: Option<TransformFn<K>>,
    error_handler: Option<WatchErrorHandler>,
    fifo: Option<QueueHandle<K>>,
    reflector: Option<ReflectorStatus>,
    task: Option<JoinHandle<()>>,
}

impl<K> SharedIndexInformer<K>
where
    K: Resource + serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    /// An informer over `lw` with the namespace index.
    ///
    /// `K` is `Serialize` and `DeserializeOwned` (every k8s-openapi, `DynamicObject`,
    /// `PartialObjectMeta` and derived custom resource type is) so that any
    /// [`CacheStorage`] can hold it.
    pub fn new(lw: impl ListerWatcher<K>, config: InformerConfig) -> Self {
        Self::from_arc(Arc::new(lw), config)
    }

    /// Like [`new`](Self::new) with a shared lister-watcher.
    pub fn from_arc(lw: Arc<dyn ListerWatcher<K>>, config: InformerConfig) -> Self {
        let target = lw.target();
        let name = config.name.unwrap_or_else(|| target.name_or_type::<K>());
        let shard = config.reflector.shard.as_ref().map(ToString::to_string);
        let span = informer_span(&name, &target, shard.as_deref());
        let (lifecycle, _) = watch::channel(Lifecycle::NotStarted);
        let metrics = match (config.identity, config.metrics_provider) {
            (Some(id), Some(provider)) if !id.name.is_empty() => {
                Some(InformerMetrics { id, provider })
            }
            _ => None,
        };
        let decoded_backlog = match &config.cache_storage {
            CacheStorage::Decoded => None,
            #[cfg(feature = "compact")]
            CacheStorage::Compact(c) => Some(c.decoded_backlog),
        };
        let indexer = Indexer::with_storage(config.cache_storage);
        // Only an in-order informer has a store version to report (as client-go's, whose
        // DeltaFIFO informers never set one); a DeltaFIFO one would report 0 for ever.
        if let Some(m) = metrics
            .as_ref()
            .filter(|_| config.fifo_mode == FifoMode::InOrder)
        {
            indexer.set_resource_version_metric(Arc::from(
                m.provider.new_store_resource_version_metric(&m.id),
            ));
        }
        Self {
            inner: Arc::new(Inner {
                lw,
                indexer,
                processor: Processor::new(
                    decoded_backlog.map_or(processor::WAKE_AT, |b: usize| {
                        (b / 2).min(processor::WAKE_AT)
                    }),
                ),
                state: Mutex::new(State {
                    started: false,
                    resync_check_period: config.resync_period,
                    default_resync: config.resync_period,
                    transform: None,
                    error_handler: None,
                    fifo: None,
                    reflector: None,
                    task: None,
                }),
                block_deltas: Mutex::new(()),
                lifecycle,
                reflector_config: config.reflector,
                fifo_mode: config.fifo_mode,
                decoded_backlog,
                metrics,
                name,
                span,
                shutdown_callers: watch::Sender::new(Vec::new()),
                #[cfg(test)]
                after_no_fifo: Mutex::new(None),
            }),
        }
    }
}

impl<K> SharedIndexInformer<K>
where
    K: Resource + Send + Sync + 'static,
{
    /// Registers a handler with the informer's default resync period.
    ///
    /// Added after start, the handler is first replayed the whole cache as adds with
    /// `is_in_initial_list = true`, then sees live changes.
    ///
    /// # Errors
    ///
    /// [`InformerError::Stopped`] once the informer has been stopped;
    /// [`InformerError::HandlerThread`] if the thread that calls the handler cannot be spawned.
    pub fn add_event_handler(
        &self,
        handler: impl ResourceEventHandler<K>,
    ) -> Result<ResourceEventHandlerRegistration<K>, InformerError> {
        let period = self.inner.state.lock().default_resync;
        self.add_event_handler_with_resync_period(handler, period)
    }

    /// Registers a handler with its own resync period (client-go
    /// `AddEventHandlerWithResyncPeriod`): zero for none, below [`MINIMUM_RESYNC_PERIOD`] raised
    /// to it; shorter than the informer's check period, it lowers the check period before start
    /// and is raised to it after.
    ///
    /// # Errors
    ///
    /// [`InformerError::Stopped`] once the informer has been stopped;
    /// [`InformerError::HandlerThread`] if the thread that calls the handler cannot be spawned.
    pub fn add_event_handler_with_resync_period(
        &self,
        handler: impl ResourceEventHandler<K>,
        resync_period: Duration,
    ) -> Result<ResourceEventHandlerRegistration<K>, InformerError> {
        self.add_event_handler_with_options(
            handler,
            HandlerOptions::default().resync_period(resync_period),
        )
    }

    /// Registers a handler with [`HandlerOptions`]: its resync period and its buffer bound.
    ///
    /// # Errors
    ///
    /// [`InformerError::Stopped`] once the informer has been stopped;
    /// [`InformerError::HandlerThread`] if the thread that calls the handler cannot be spawned.
    pub fn add_event_handler_with_options(
        &self,
        handler: impl ResourceEventHandler<K>,
        options: HandlerOptions,
    ) -> Result<ResourceEventHandlerRegistration<K>, InformerError> {
        let period = options
            .resync_period
            .unwrap_or_else(|| self.inner.state.lock().default_resync);
        let thread = options.dedicated_thread || options.buffer_capacity.is_some();
        let listener = self.add_listener(
            period,
            options.buffer_capacity,
            Some((Box::new(handler), thread)),
        )?;
        Ok(ResourceEventHandlerRegistration::new(
            listener,
            Arc::downgrade(&self.inner),
        ))
    }

    /// The same notifications as a handler would get, as an async `Stream`, with its own buffer.
    /// Dropping the stream removes the subscription.
    ///
    /// # Errors
    ///
    /// [`InformerError::Stopped`] once the informer has been stopped.
    pub fn subscribe(&self) -> Result<EventStream<K>, InformerError> {
        let period = self.inner.state.lock().default_resync;
        let listener = self.add_listener(period, None, None)?;
        Ok(EventStream::new(listener, Arc::downgrade(&self.inner)))
    }

    fn add_listener(
        &self,
        requested: Duration,
        capacity: Option<usize>,
        handler: Option<(Box<dyn ResourceEventHandler<K>>, bool)>,
    ) -> Result<Arc<Listener<K>>, InformerError> {
        let inner = &self.inner;
        let _span = inner.span.enter();
        let mut st = inner.state.lock();
        if inner.stop_requested() {
            return Err(InformerError::Stopped);
        }
        let mut requested = requested;
        if !requested.is_zero() {
            requested = requested.max(MINIMUM_RESYNC_PERIOD);
            if requested < st.resync_check_period {
                if st.started {
                    tracing::warn!(
                        requested = ?requested,
                        check_period = ?st.resync_check_period,
                        "resync period is shorter than the running informer's check period; raised"
                    );
                    requested = st.resync_check_period;
                } else {
                    st.resync_check_period = requested;
                    inner.processor.resync_check_period_changed(requested);
                }
            }
        }
        let period = determine_resync_period(requested, st.resync_check_period);
        let listener = Listener::new(inner.processor.next_id(), requested, period, capacity);
        if let Some((h, dedicated_thread)) = handler {
            // Before registration: a bounded buffer needs its consumer running.
            let informer = &inner.name;
            let name = format!("informer-{informer}-handler-{}", listener.id);
            inner.processor.start_handler(
                &listener,
                h,
                name,
                dedicated_thread,
                &inner.span,
                || format!("informer-{informer}-handlers"),
            )?;
        }
        if !st.started {
            inner.processor.add(listener.clone())?;
            return Ok(listener);
        }
        drop(st);
        // Late join: no deltas may be applied between the snapshot and the registration.
        let _block = inner.block_deltas.lock();
        // The clock first: a resync check between the two would find a registered listener
        // without one, take it as due, and resync every handler at once.
        listener.start_resync_clock(tokio::time::Instant::now());
        inner.processor.add(listener.clone())?;
        // Snapshots: a compact cache's objects wait in the buffer compressed, decoded as the
        // handler is called.
        for obj in inner.indexer.snapshots() {
            listener.queue.push(
                StoredEvent::Add {
                    obj,
                    is_in_initial_list: true,
                }
                .into(),
            );
        }
        Ok(listener)
    }

    /// Removes a handler (client-go `RemoveEventHandler`); it finishes the notification in hand
    /// and stops. Removing twice is harmless.
    ///
    /// # Errors
    ///
    /// [`InformerError::ForeignRegistration`] for a registration of another informer, which is
    /// left alone (registrations are matched by identity, as client-go matches the handle).
    pub fn remove_event_handler(
        &self,
        registration: &ResourceEventHandlerRegistration<K>,
    ) -> Result<(), InformerError> {
        if !registration.belongs_to(&self.inner) {
            return Err(InformerError::ForeignRegistration);
        }
        registration.remove();
        Ok(())
    }

    /// Removes a handler and waits until it will be called no more (client-go 1.37
    /// `ShutDownEventHandler`): a call in progress has returned, the handler has been dropped,
    /// and its thread (if it has one of its own) has ended. Idempotent.
    ///
    /// Called on the thread that calls the handler (from the handler itself, or from another
    /// handler on the informer's shared handler thread), it returns once the handler is
    /// removed, rather than wait for a call that thread cannot make while it runs the caller:
    /// the handler is then called no more, and is dropped when that thread gets back to it.
    ///
    /// # Errors
    ///
    /// [`InformerError::ForeignRegistration`] for a registration of another informer.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the handler is removed at once; only the wait is cut short.
    pub async fn shut_down_event_handler(
        &self,
        registration: &ResourceEventHandlerRegistration<K>,
    ) -> Result<(), InformerError> {
        self.remove_event_handler(registration)?;
        registration.wait_finished().await;
        Ok(())
    }

    /// Adds indexes; works before and after start (existing objects are indexed at once). An
    /// index function must not call back into this informer or its cache (see [`IndexFn`](crate::IndexFn)).
    ///
    /// # Errors
    ///
    /// [`InformerError::Index`] for a name already in use.
    pub fn add_indexers(&self, indexers: Indexers<K>) -> Result<(), InformerError> {
        // Block deltas so no object is added between indexing the cache and the new index
        // taking effect.
        let _block = self.inner.block_deltas.lock();
        self.inner.indexer.add_indexers(indexers)?;
        Ok(())
    }

    /// Adds one index named `name` whose values come from `values`, before or after start
    /// (controller-runtime's `IndexField`; the one-index form of
    /// [`add_indexers`](Self::add_indexers), see [`index_fn`](crate::index_fn) for what
    /// `values` may return).
    ///
    /// ```
    /// # use kube_informer::{FactoryConfig, SharedInformerFactory, testing::FakeApiServer};
    /// use k8s_openapi::api::core::v1::Pod;
    ///
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// # let server = FakeApiServer::start_with_core().await?;
    /// # let factory = SharedInformerFactory::new(server.client(), FactoryConfig::default());
    /// let pods = factory.informer::<Pod>();
    /// pods.index_by("node", |pod: &Pod| pod.spec.as_ref()?.node_name.clone())?;
    /// // Later, in a worker:
    /// let on_node = pods.indexer().by_index("node", "node-1")?;
    /// # assert!(on_node.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    ///
    /// # Errors
    ///
    /// [`InformerError::Index`] for a name already in use.
    pub fn index_by<I>(
        &self,
        name: impl Into<String>,
        values: impl Fn(&K) -> I + Send + Sync + 'static,
    ) -> Result<(), InformerError>
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        self.add_indexers(Indexers::from([(name.into(), crate::index_fn(values))]))
    }

    /// Sets a transform applied to each object before it is cached (for example
    /// [`strip_managed_fields`](crate::strip_managed_fields)). A transform that only drops
    /// fields is better a [`Projection`](crate::Projection) ([`InformerConfig::projection`]):
    /// that skips them while decoding instead of building them first.
    ///
    /// # Errors
    ///
    /// [`InformerError::AlreadyStarted`] after start.
    pub fn set_transform(&self, transform: TransformFn<K>) -> Result<(), InformerError> {
        let mut st = self.inner.state.lock();
        if st.started {
            return Err(InformerError::AlreadyStarted);
        }
        st.transform = Some(transform);
        Ok(())
    }

    /// Sets the handler that sees every list/watch error, and every object the informer leaves
    /// out or cannot hand to its handlers. It is called from the informer's tasks and, for
    /// [`Error::Unreadable`](crate::reflector::Error::Unreadable), from the handlers' threads
    /// or tasks, possibly at the same time; never with a lock held that registering or removing
    /// a handler takes.
    ///
    /// # Errors
    ///
    /// [`InformerError::AlreadyStarted`] after start.
    pub fn set_watch_error_handler(&self, handler: WatchErrorHandler) -> Result<(), InformerError> {
        let mut st = self.inner.state.lock();
        if st.started {
            return Err(InformerError::AlreadyStarted);
        }
        st.error_handler = Some(handler);
        Ok(())
    }

    /// A read-only handle on the cache (client-go `GetIndexer`).
    ///
    /// The informer keeps the writable [`Indexer`] to itself: only its own event processing
    /// changes the cache, so what handlers and listers read is what the API server sent.
    /// Add indices with [`index_by`](Self::index_by) or [`add_indexers`](Self::add_indexers).
    #[doc(alias = "get_indexer")]
    #[doc(alias = "get_store")]
    pub fn indexer(&self) -> Cache<K> {
        self.inner.indexer.reader()
    }

    /// A lister over the cache.
    pub fn lister(&self) -> Lister<K> {
        Lister::new(self.inner.indexer.reader())
    }

    /// True once the initial list has been fully delivered into the cache.
    pub fn has_synced(&self) -> bool {
        self.inner.has_synced()
    }

    /// Waits until [`has_synced`](Self::has_synced), or returns `false` if the informer stops
    /// first. Waits on signals (the informer's [`Lifecycle`] and the FIFO's sync), never polls.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn wait_for_cache_sync(&self) -> bool {
        let mut lifecycle = self.inner.lifecycle.subscribe();
        // Wait for the FIFO to exist (the informer runs) or for the end.
        let fifo = loop {
            // The lifecycle is marked seen before the look at the FIFO. `prepare` sends
            // `Running` and sets the FIFO under one hold of the state lock, so a start is either
            // complete when the FIFO is looked at or wakes `changed` below. Marked after the
            // look, a start in between was marked seen with the FIFO unseen, and `changed`
            // then waited for the informer to stop (a CI run's 180 s sync timeout).
            let stopped = *lifecycle.borrow_and_update() == Lifecycle::Stopped;
            if let Some(f) = self.inner.state.lock().fifo.clone() {
                break f;
            }
            #[cfg(test)]
            if let Some(hook) = self.inner.after_no_fifo.lock().take() {
                hook();
            }
            if stopped || lifecycle.changed().await.is_err() {
                return false;
            }
        };
        if fifo.has_synced() {
            return true;
        }
        tokio::select! {
            () = fifo.wait_synced() => true,
            _ = lifecycle.wait_for(|l| *l == Lifecycle::Stopped) => fifo.has_synced(),
        }
    }

    /// The informer's name in logs ([`InformerConfig::name`]).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The `tracing` span every log line of this informer is emitted in (its fields are listed
    /// in the crate docs, "Logging"); enter it, or instrument a future with a clone
    /// ([`tracing::Instrument`]), to log under it too.
    pub fn span(&self) -> &tracing::Span {
        &self.inner.span
    }

    /// Where the informer is in its life.
    pub fn lifecycle(&self) -> Lifecycle {
        *self.inner.lifecycle.borrow()
    }

    /// Waits until the informer has [`Stopped`](Lifecycle::Stopped) (without asking it to: see
    /// [`shutdown`](Self::shutdown)).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn stopped(&self) {
        let mut rx = self.inner.lifecycle.subscribe();
        // The sender lives in `inner`, which `self` keeps alive.
        let _ = rx.wait_for(|l| *l == Lifecycle::Stopped).await;
    }

    /// The resourceVersion of the last change applied to the cache, in in-order mode (client-go
    /// 1.36 `LastStoreSyncResourceVersion`; see
    /// [`Indexer::last_store_sync_resource_version`]); empty in DeltaFIFO mode.
    pub fn last_store_sync_resource_version(&self) -> String {
        self.inner.indexer.last_store_sync_resource_version()
    }

    /// Which FIFO this informer runs.
    pub fn fifo_mode(&self) -> FifoMode {
        self.inner.fifo_mode
    }

    /// Changes queued in the FIFO and not yet applied to the cache (client-go
    /// `informer_queued_items`); 0 before start.
    pub fn queued_items(&self) -> usize {
        self.inner
            .state
            .lock()
            .fifo
            .as_ref()
            .map_or(0, QueueHandle::len)
    }

    /// The resourceVersion the informer last saw (client-go `LastSyncResourceVersion`).
    pub fn last_sync_resource_version(&self) -> String {
        self.inner
            .state
            .lock()
            .reflector
            .as_ref()
            .map(ReflectorStatus::last_sync_resource_version)
            .unwrap_or_default()
    }

    /// True once the informer has been started.
    pub fn is_started(&self) -> bool {
        self.inner.state.lock().started
    }

    /// True once the informer has stopped (client-go `IsStopped`).
    pub fn is_stopped(&self) -> bool {
        self.lifecycle() == Lifecycle::Stopped
    }

    /// Spawns [`run`](Self::run) on the current tokio runtime. Idempotent: a second call does
    /// nothing.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime; [`try_start`](Self::try_start) returns an error instead.
    pub fn start(&self) {
        self.try_start()
            .unwrap_or_else(|e| panic!("SharedIndexInformer::start: {e}"));
    }

    /// [`start`](Self::start) that reports a missing runtime instead of panicking; the
    /// informer is then left unstarted.
    ///
    /// # Errors
    ///
    /// [`NoRuntime`](crate::NoRuntime) outside a Tokio runtime (even if it had already started:
    /// the check comes first).
    pub fn try_start(&self) -> Result<(), crate::NoRuntime> {
        let runtime = crate::current_runtime()?;
        let mut st = self.inner.state.lock();
        if st.started || st.task.is_some() || self.inner.stop_requested() {
            return Ok(());
        }
        let me = self.clone();
        st.task = Some(runtime.spawn(async move { me.run().await }));
        Ok(())
    }

    /// Runs the informer until [`shutdown`](Self::shutdown) is called: the reflector lists and
    /// watches, and every popped change updates the cache and reaches the handlers. Returns at
    /// once if it is already running or was stopped.
    ///
    /// Callbacks that panic do not end it: handler panics are caught per listener, panics in a
    /// transform become [`FifoError::Transform`](crate::FifoError::Transform) reports (the object
    /// is treated as undecodable), panics in index functions are logged and the object is left
    /// out of that index, and a panicking watch-error handler is logged. Caught at the callback,
    /// because only there does the informer know which object it concerns and can go on with
    /// the rest; returning an error from `run` instead would stop every handler for one bad
    /// object.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops the informer: it ends in [`Lifecycle::Stopped`] (handler
    /// threads are then told to stop but not joined).
    pub async fn run(&self) {
        let span = self.inner.span.clone();
        self.run_in_span().instrument(span).await;
    }

    async fn run_in_span(&self) {
        // In Compact mode, listed and watched objects wait in either FIFO compressed; one that
        // then does not decode goes to the watch-error handler (fixed before start, like the
        // reflector's).
        let cache = self.inner.indexer.clone();
        let handler = self.inner.state.lock().error_handler.clone();
        let name = self.inner.name.clone();
        // Both reports reach the user's code here, so a panic in it is caught here, once, and
        // the FIFO or the read that reported goes on.
        let tell = Arc::new(move |e: crate::reflector::Error| {
            let call = || match &handler {
                Some(h) => h(&e),
                None => crate::reflector::default_watch_error_handler(&name, &e),
            };
            if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(call)) {
                tracing::error!(
                    informer = %name,
                    error = %e,
                    panic = %crate::panic_message(&*panic),
                    "the watch-error handler panicked; going on"
                );
            }
        });
        // And so does a cached object that does not decode when read for the handlers (an
        // in-order relist stores protobuf items undecoded), from the handler's thread.
        let told = Arc::clone(&tell);
        cache.report_unreadable(Arc::new(move |e| {
            told(crate::reflector::Error::Unreadable(e));
        }));
        let report: crate::fifo::UnreadableReport =
            Arc::new(move |e| tell(crate::reflector::Error::Store(e)));
        match self.inner.fifo_mode {
            FifoMode::DeltaFifo => {
                self.run_with(|known, transform| {
                    let mut fifo = DeltaFifo::new(Some(known))
                        .with_packing(cache)
                        .with_unreadable_report(report);
                    if let Some(t) = transform {
                        fifo = fifo.with_transform(t);
                    }
                    let fifo = Arc::new(fifo);
                    (fifo.clone(), QueueHandle::Delta(fifo))
                })
                .await;
            }
            FifoMode::InOrder => {
                let metrics = self
                    .inner
                    .metrics
                    .as_ref()
                    .map(|m| FifoMetrics::new(&m.id, &*m.provider));
                self.run_with(|known, transform| {
                    let mut fifo = InOrderFifo::new(Some(known))
                        .with_packing(cache)
                        .with_unreadable_report(report);
                    if let Some(m) = metrics {
                        fifo = fifo.with_metrics(m);
                    }
                    if let Some(t) = transform {
                        fifo = fifo.with_transform(t);
                    }
                    let fifo = Arc::new(fifo);
                    (fifo.clone(), QueueHandle::InOrder(fifo))
                })
                .await;
            }
        }
    }

    async fn run_with<Q: InformerQueue<K>>(
        &self,
        make: impl FnOnce(Arc<dyn KnownObjects<K>>, Option<TransformFn<K>>) -> (Arc<Q>, QueueHandle<K>),
    ) {
        let Some((fifo, handle, reflector)) = self.prepare(make) else {
            return;
        };
        let inner = self.inner.clone();
        // Whatever happens from here on (return, drop, panic), the informer ends `Stopped`.
        let guard = StopGuard {
            inner: inner.clone(),
            fifo: handle,
        };
        let mut stop = inner.lifecycle.subscribe();
        let stop_requested = async move {
            let _ = stop.wait_for(|l| *l != Lifecycle::Running).await;
        };
        let mut stop2 = inner.lifecycle.subscribe();
        let reflector_run = reflector.run(async move {
            let _ = stop2.wait_for(|l| *l != Lifecycle::Running).await;
        });
        let process = {
            let inner = inner.clone();
            let fifo = fifo.clone();
            async move {
                let mut held = HeldWakes::default();
                loop {
                    let popped = {
                        let mut pop = std::pin::pin!(fifo.pop_apply(&inner));
                        std::future::poll_fn(|cx| {
                            let popped = pop.as_mut().poll(cx);
                            if popped.is_pending() {
                                // Nothing ready: the handlers hear of what was popped now.
                                held.wake();
                            }
                            popped
                        })
                        .await
                    };
                    let Ok(deliveries) = popped else { break };
                    // No FIFO lock is held: a full bounded handler makes this wait as a future,
                    // while the reflector (polled in the same task) keeps reading the watch (the
                    // in-order FIFO holds it back once two batches are queued).
                    for r in held.hold(deliveries) {
                        r.deliver().await;
                    }
                }
            }
        };
        tokio::select! {
            () = stop_requested => {}
            () = reflector_run => {}
            () = process => {}
        }
        fifo.close();
        join_threads(&inner, inner.processor.stop_all()).await;
        drop(guard);
    }

    #[allow(clippy::type_complexity)]
    fn prepare<Q: InformerQueue<K>>(
        &self,
        make: impl FnOnce(Arc<dyn KnownObjects<K>>, Option<TransformFn<K>>) -> (Arc<Q>, QueueHandle<K>),
    ) -> Option<(Arc<Q>, QueueHandle<K>, Reflector<K, Q>)> {
        let inner = &self.inner;
        let mut st = inner.state.lock();
        if st.fifo.is_some() {
            return None;
        }
        // Under the state lock, which `shutdown` takes too: it either sees `Running` and waits
        // for this run to stop, or stops the informer before it ever runs.
        let started = inner.lifecycle.send_if_modified(|l| {
            if *l == Lifecycle::NotStarted {
                *l = Lifecycle::Running;
                true
            } else {
                false
            }
        });
        if !started {
            return None;
        }
        st.started = true;
        let known: Arc<dyn KnownObjects<K>> = Arc::new(inner.indexer.clone());
        let (fifo, handle) = make(known, st.transform.clone());
        let weak: Weak<Inner<K>> = Arc::downgrade(inner);
        let config = inner
            .reflector_config
            .clone()
            .resync_period(st.resync_check_period);
        let mut reflector = Reflector::from_arc(inner.lw.clone(), fifo.clone(), config)
            .with_name(inner.name.clone())
            .with_should_resync(Arc::new(move || {
                weak.upgrade().is_some_and(|i| i.processor.should_resync())
            }));
        if let Some(h) = st.error_handler.clone() {
            reflector = reflector.with_error_handler(h);
        }
        let now = tokio::time::Instant::now();
        for l in inner.processor.all() {
            l.start_resync_clock(now);
        }
        st.reflector = Some(reflector.status());
        st.fifo = Some(handle.clone());
        Some((fifo, handle, reflector))
    }

    /// Stops the informer and waits until its reflector, processing loop and every handler
    /// thread have finished: it returns once the informer is [`Lifecycle::Stopped`], and waits
    /// on that state, never polls. Idempotent, and safe to call from a handler, blocking on it
    /// there (`Handle::block_on`) too. The stop does not wait for a handler thread that is
    /// itself blocked in `shutdown`: that thread, and with the shared handler thread the other
    /// handlers on it, end once its handler returns. (A handler that hands `shutdown` to
    /// another thread and blocks on the result still deadlocks: the thread that blocks must be
    /// the one in `shutdown`.)
    ///
    /// A `run` future driven by the caller stops as well; `shutdown` then waits for it to wind
    /// down, so keep polling it (or drop it, which also ends in `Stopped`).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the informer stops all the same.
    pub async fn shutdown(&self) {
        // Registered first, so a stop that joins handler threads already knows of this one;
        // unregistered however this future ends.
        let _caller = ShutdownCaller::new(&self.inner.shutdown_callers);
        let (task, never_ran) = {
            let mut st = self.inner.state.lock();
            let mut never_ran = false;
            self.inner.lifecycle.send_if_modified(|l| match *l {
                Lifecycle::NotStarted => {
                    // `Stopped` once its handler threads have ended, so that a concurrent
                    // `shutdown` waits for them too.
                    never_ran = true;
                    *l = Lifecycle::Stopping;
                    true
                }
                Lifecycle::Running => {
                    *l = Lifecycle::Stopping;
                    true
                }
                Lifecycle::Stopping | Lifecycle::Stopped => false,
            });
            (st.task.take(), never_ran)
        };
        if never_ran {
            let _stopped = MarkStopped(&self.inner.lifecycle);
            join_threads(&self.inner, self.inner.processor.stop_all()).await;
        }
        if let Some(t) = task {
            let _ = t.await;
        }
        self.stopped().await;
    }

    /// Like [`run`](Self::run) but stops when `signal` completes, as
    /// [`shutdown`](Self::shutdown) does; returns once the informer is [`Lifecycle::Stopped`]
    /// and its handler threads have ended, even when the signal fired before it ever ran.
    ///
    /// # Cancel safety
    ///
    /// As [`run`](Self::run).
    pub async fn run_until(&self, signal: impl Future<Output = ()>) {
        let run = self.run();
        tokio::pin!(run);
        tokio::select! {
            () = &mut run => return,
            () = signal => {}
        }
        // `shutdown` stops the run, which winds down (closes the FIFO, joins the handler
        // threads) to `Stopped` as it is polled here. If the signal was polled first and the
        // informer never ran, `shutdown` joins its handler threads itself: setting it
        // `Stopped` alone would leave them running.
        tokio::join!(run, self.shutdown());
    }
}

/// Ends an informer's run in [`Lifecycle::Stopped`] however it ends: returned, dropped, or
/// unwound by a panic.
struct StopGuard<K> {
    inner: Arc<Inner<K>>,
    fifo: QueueHandle<K>,
}

impl<K> Drop for StopGuard<K> {
    fn drop(&mut self) {
        self.fifo.close();
        // Joined already on the normal path; on a drop or a panic the threads are told to stop
        // (their queues close) and left to finish on their own.
        drop(self.inner.processor.stop_all());
        self.inner.lifecycle.send_replace(Lifecycle::Stopped);
    }
}

impl<K> Inner<K> {
    /// Shutdown was asked for (or the informer has stopped).
    fn stop_requested(&self) -> bool {
        matches!(
            *self.lifecycle.borrow(),
            Lifecycle::Stopping | Lifecycle::Stopped
        )
    }
}

impl<K> Inner<K>
where
    K: Resource + Send + Sync + 'static,
{
    fn has_synced(&self) -> bool {
        self.state
            .lock()
            .fifo
            .as_ref()
            .is_some_and(|f| f.has_synced())
    }

    /// client-go `processDeltas`: apply each delta to the cache and notify. Runs under the FIFO
    /// lock and never waits: unbounded listeners have their notifications queued at once, bounded
    /// ones get reservations; those and the wakes owed are handed back, for after the lock.
    fn apply_deltas(&self, deltas: Deltas<K>, is_in_initial_list: bool) -> Deliveries<K> {
        let mut deferred = self.processor.deliveries();
        let _block = self.block_deltas.lock();
        for d in deltas {
            match d.kind {
                DeltaType::Sync | DeltaType::Replaced | DeltaType::Added | DeltaType::Updated => {
                    let obj = match d.object {
                        DeltaObject::Object(o) => o,
                        DeltaObject::DeletedFinalStateUnknown(t) => t.obj,
                    };
                    let key = match key_of(&*obj) {
                        Ok(k) => k,
                        Err(e) => {
                            tracing::warn!(error = %e, "dropping object without a valid key");
                            continue;
                        }
                    };
                    if let Some(backlog) = self.backlog(1) {
                        let written = self
                            .indexer
                            .transaction_snapshots(vec![StoreOp::Put(key, obj.clone())], None);
                        for w in written {
                            self.distribute_written(
                                w,
                                obj.clone(),
                                is_in_initial_list,
                                backlog,
                                &mut deferred,
                            );
                        }
                        continue;
                    }
                    match self.indexer.insert(key, obj.clone()) {
                        Some(old) => {
                            // Same resourceVersion: a resync (or an unchanged object in a relist);
                            // only listeners due for a resync hear of it.
                            let is_sync =
                                old.meta().resource_version == obj.meta().resource_version;
                            self.processor.distribute(
                                Event::Update { old, new: obj },
                                is_sync,
                                &mut deferred,
                            );
                        }
                        None => self.processor.distribute(
                            Event::Add {
                                obj,
                                is_in_initial_list,
                            },
                            false,
                            &mut deferred,
                        ),
                    }
                }
                DeltaType::Deleted => {
                    let key = match &d.object {
                        DeltaObject::DeletedFinalStateUnknown(t) => Ok(t.key.clone()),
                        DeltaObject::Object(o) => key_of(o),
                    };
                    match key {
                        Ok(k) => self.indexer.discard(&k),
                        Err(e) => {
                            tracing::warn!(error = %e, "delete of an object without a valid key")
                        }
                    }
                    self.processor
                        .distribute(Event::Delete(d.object), false, &mut deferred);
                }
            }
        }
        deferred
    }

    /// With a compact cache, when some handler would be [`decoded_backlog`](Self::decoded_backlog)
    /// notifications behind once sent `writes` more: that backlog, for the writes to hand back
    /// snapshots, so that the handlers that are (or get) behind are sent them (see
    /// [`Processor::distribute_stored`]). A batch of an in-order informer is up to 1,000 writes,
    /// which would otherwise all go out decoded to a handler that was not behind yet.
    pub(crate) fn backlog(&self, writes: usize) -> Option<usize> {
        self.decoded_backlog
            .filter(|&backlog| self.processor.any_behind(backlog.saturating_sub(writes)))
    }

    /// Notifies the add or update of `obj`, which `written` stored, to each listener: as
    /// snapshots to those `backlog` behind, decoded to the others.
    pub(crate) fn distribute_written(
        &self,
        written: Written<K>,
        obj: Arc<K>,
        is_in_initial_list: bool,
        backlog: usize,
        deferred: &mut Deliveries<K>,
    ) {
        let Written {
            old,
            new: Some(new),
        } = written
        else {
            return;
        };
        match old {
            Some(old) => {
                // Same resourceVersion: a resync (or an unchanged object in a relist); only
                // listeners due for a resync hear of it.
                let is_sync = old.resource_version() == new.resource_version();
                // The very object stored again (a resync): it is the old one too.
                let same = old.same_object(&new);
                let ready = {
                    let old = old.clone();
                    move || {
                        // Not kept in the snapshot, whose copies wait for handlers behind.
                        let old = if same {
                            Ok(Arc::clone(&obj))
                        } else {
                            old.load_unshared()
                        };
                        Event::update_or_add(old, obj, is_in_initial_list)
                    }
                };
                self.processor.distribute_stored(
                    StoredEvent::Update {
                        old,
                        new,
                        is_in_initial_list,
                    },
                    ready,
                    is_sync,
                    backlog,
                    deferred,
                );
            }
            None => self.processor.distribute_stored(
                StoredEvent::Add {
                    obj: new,
                    is_in_initial_list,
                },
                move || Event::Add {
                    obj,
                    is_in_initial_list,
                },
                false,
                backlog,
                deferred,
            ),
        }
    }
}

impl<K> Inner<K> {
    pub(crate) fn remove_listener(&self, listener: &Arc<Listener<K>>) {
        self.processor.remove(listener);
    }
}

impl<K> Drop for Inner<K> {
    fn drop(&mut self) {
        // Handler tasks and threads hold only their queue: closing it lets them exit on their own.
        self.lifecycle.send_replace(Lifecycle::Stopped);
        drop(self.processor.stop_all());
    }
}

/// Waits for the handler threads to end, then joins them off the runtime: a handler may be in
/// the middle of slow work. A thread that is itself in [`SharedIndexInformer::shutdown`] (a
/// handler that shuts its informer down), or that runs this, is not waited for: it would wait
/// on this wait. A thread may enter `shutdown` while this already waits for it; one passed over
/// is looked at again once the others have ended, in case its `shutdown` was cancelled and it
/// went back to its handlers.
async fn join_threads<K>(inner: &Inner<K>, threads: Vec<HandlerThread>) {
    let me = std::thread::current().id();
    let threads: Vec<_> = threads
        .into_iter()
        .filter(|t| t.handle.thread().id() != me)
        .collect();
    if threads.is_empty() {
        return;
    }
    let callers = inner.shutdown_callers.subscribe();
    // On a blocking thread, not as a task: with tokio's clock paused (a user's tests), a
    // blocking task in flight keeps the runtime from jumping the clock while threads end.
    let _ = tokio::task::spawn_blocking(move || {
        futures::executor::block_on(wait_for_threads(callers, threads))
    })
    .await;
}

/// The wait of [`join_threads`], then the joins of the threads that ended.
async fn wait_for_threads(
    mut callers: watch::Receiver<Vec<std::thread::ThreadId>>,
    mut pending: Vec<HandlerThread>,
) {
    let mut ended = Vec::with_capacity(pending.len());
    for _ in 0..2 {
        let mut passed_over = Vec::new();
        for HandlerThread { handle, mut exited } in pending {
            let id = handle.thread().id();
            let exited_now = loop {
                // Marked seen before the look, so a caller registered after it wakes the wait.
                if callers.borrow_and_update().contains(&id) {
                    break false;
                }
                tokio::select! {
                    biased;
                    _ = &mut exited => break true,
                    changed = callers.changed() => {
                        // The informer is gone, and its threads' queues with it.
                        if changed.is_err() {
                            return;
                        }
                    }
                }
            };
            if exited_now {
                ended.push(handle);
            } else {
                passed_over.push(HandlerThread { handle, exited });
            }
        }
        pending = passed_over;
    }
    for t in ended {
        let _ = t.join();
    }
}

/// Sends [`Lifecycle::Stopped`] when dropped: the end of a stop, or of its cancelled wait.
struct MarkStopped<'a>(&'a watch::Sender<Lifecycle>);

impl Drop for MarkStopped<'_> {
    fn drop(&mut self) {
        self.0.send_replace(Lifecycle::Stopped);
    }
}

/// A thread's registration in [`Inner::shutdown_callers`] while it is in `shutdown`.
struct ShutdownCaller<'a> {
    callers: &'a watch::Sender<Vec<std::thread::ThreadId>>,
    id: std::thread::ThreadId,
}

impl<'a> ShutdownCaller<'a> {
    fn new(callers: &'a watch::Sender<Vec<std::thread::ThreadId>>) -> Self {
        let id = std::thread::current().id();
        callers.send_modify(|c| c.push(id));
        Self { callers, id }
    }
}

impl Drop for ShutdownCaller<'_> {
    fn drop(&mut self) {
        self.callers.send_modify(|c| {
            if let Some(i) = c.iter().position(|t| *t == self.id) {
                c.swap_remove(i);
            }
        });
    }
}

/// The informer's span: what it lists and watches, as structured fields. Selector fields are
/// left out when there is no selector; `namespace` is `""` for all namespaces (client-go
/// `NamespaceAll`); `shard` is the shard selector of a sharded informer.
fn informer_span(name: &str, target: &ListWatchTarget, shard: Option<&str>) -> tracing::Span {
    tracing::info_span!(
        "informer",
        informer = name,
        group = target.group.as_str(),
        version = target.version.as_str(),
        resource = target.resource.as_str(),
        namespace = target.namespace.as_deref().unwrap_or(""),
        label_selector = target.label_selector.as_deref(),
        field_selector = target.field_selector.as_deref(),
        shard,
    )
}

#[cfg(test)]
mod tests;
