//! The basic work queue: client-go's `util/workqueue/queue.go`.

use std::{
    collections::{HashMap, VecDeque, hash_map::Entry},
    fmt,
    hash::Hash,
    pin::pin,
    sync::{Arc, Weak},
    time::Duration,
};

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::metrics::{MetricsProvider, QueueMetrics};

/// The bounds every queued item meets: cloned into the dedup set, hashed, shared across tasks.
///
/// Blanket-implemented; item types are typically [`ObjectKey`](crate::ObjectKey), `String`
/// or a small `Copy` struct, as client-go's convention of queueing keys rather than objects.
pub trait QueueItem: Clone + Eq + Hash + Send + Sync + 'static {}
impl<T: Clone + Eq + Hash + Send + Sync + 'static> QueueItem for T {}

/// Returned by an add to a queue that is shutting down, handing the item back
/// (as tokio's `SendError` does) instead of dropping it silently as client-go does.
#[derive(thiserror::Error, Clone, Copy, PartialEq, Eq)]
#[error("the workqueue is shutting down")]
pub struct ShutDown<T>(pub T);

impl<T> ShutDown<T> {
    /// The item that was not added.
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> fmt::Debug for ShutDown<T> {
    // Not bounded on `T: Debug`, so `.unwrap()` / `?` work for any item type.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ShutDown").finish_non_exhaustive()
    }
}

/// Options of a queue; `Config::default()` is what client-go's `New()` builds.
#[derive(Clone)]
#[non_exhaustive]
pub struct Config {
    /// Queue name, the `name` label of every metric. Default: empty, which (as in client-go)
    /// disables metrics.
    pub name: String,
    /// Where metrics go. Default: `None`, no metrics (client-go's `noopMetricsProvider`).
    pub metrics_provider: Option<Arc<dyn MetricsProvider>>,
    /// How often the unfinished-work and longest-running-processor gauges are refreshed while
    /// the queue is alive. Default: 500 ms (client-go's `defaultUnfinishedWorkUpdatePeriod`).
    pub unfinished_work_update_period: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            name: String::new(),
            metrics_provider: None,
            unfinished_work_update_period: Duration::from_millis(500),
        }
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("name", &self.name)
            .field("metrics_provider", &self.metrics_provider.is_some())
            .field(
                "unfinished_work_update_period",
                &self.unfinished_work_update_period,
            )
            .finish()
    }
}

impl Config {
    /// Sets the queue name (the metrics' `name` label).
    #[must_use]
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Sets the metrics provider; metrics are reported only if the queue also has a name.
    #[must_use]
    pub fn metrics_provider(mut self, provider: Arc<dyn MetricsProvider>) -> Self {
        self.metrics_provider = Some(provider);
        self
    }

    /// Sets the refresh period of the unfinished-work gauges.
    #[must_use]
    pub fn unfinished_work_update_period(mut self, period: Duration) -> Self {
        self.unfinished_work_update_period = period;
        self
    }
}

/// Where an item known to the queue stands. client-go keeps two sets (`dirty`, `processing`);
/// one map with both flags costs one hash lookup per operation instead of two.
#[derive(Clone, Copy)]
struct Status {
    /// Needs processing: queued, or added again while being processed.
    dirty: bool,
    /// Handed out by `get`, `done` not yet called.
    processing: bool,
}

struct State<T> {
    /// Processing order. Invariant: every element is dirty and not processing, and appears once.
    queue: VecDeque<T>,
    /// Every item that is dirty or processing (or both); absent means unknown to the queue.
    items: HashMap<T, Status>,
    processing: usize,
    shutting_down: bool,
    drain: bool,
    metrics: Option<QueueMetrics<T>>,
}

pub(crate) struct Shared<T> {
    name: String,
    state: Mutex<State<T>>,
    /// One `notify_one` per queued item, `notify_waiters` on shutdown.
    item_ready: Notify,
    /// Woken when the last in-flight item is done, or when a drain is cancelled.
    drained: Notify,
    /// Woken on shutdown, for background tasks tied to the queue (the delaying loop).
    closed: Notify,
}

/// A work queue with client-go's guarantees (`util/workqueue/queue.go`):
///
/// * **Fair**: items are handed out in the order they were added.
/// * **Stingy**: an item added several times before it is handed out is processed once.
/// * **Exclusive**: an item is never handed to two workers at once; if it is added while a
///   worker processes it, it is queued again when that worker calls [`done`](Self::done).
/// * **Shutdown**: after [`shutdown`](Self::shutdown) adds are refused and [`get`](Self::get)
///   returns the remaining items, then `None`.
///
/// A cheap-to-clone handle: clones share one queue.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use kube_informer::WorkQueue;
///
/// let queue = WorkQueue::new();
/// queue.add("default/web").unwrap();
/// queue.add("default/web").unwrap(); // deduplicated
/// assert_eq!(queue.len(), 1);
///
/// let key = queue.get().await.unwrap();
/// // ... reconcile `key`; on a transient failure a rate-limited queue would re-add it ...
/// queue.done(&key);
///
/// queue.shutdown();
/// assert_eq!(queue.get().await, None);
/// # }
/// ```
pub struct WorkQueue<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Clone for WorkQueue<T> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<T> fmt::Debug for WorkQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.state.lock();
        f.debug_struct("WorkQueue")
            .field("name", &self.shared.name)
            .field("len", &state.queue.len())
            .field("processing", &state.processing)
            .field("shutting_down", &state.shutting_down)
            .finish()
    }
}

impl<T: QueueItem> Default for WorkQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// An item being processed, from [`WorkQueue::get_guarded`]: reads as the item, and marks
/// it [`done`](WorkQueue::done) when dropped.
#[must_use = "dropping the guard marks the item done at once"]
pub struct Processing<T: QueueItem> {
    queue: WorkQueue<T>,
    /// `None` only after `into_inner`.
    item: Option<T>,
}

impl<T: QueueItem> Processing<T> {
    /// Marks the item done now; the same as dropping the guard, said explicitly.
    pub fn done(self) {
        drop(self);
    }

    /// The item, leaving the caller to call [`done`](WorkQueue::done) for it.
    pub fn into_inner(mut self) -> T {
        self.item
            .take()
            .unwrap_or_else(|| unreachable!("taken only here, which consumes the guard"))
    }
}

impl<T: QueueItem> std::ops::Deref for Processing<T> {
    type Target = T;

    fn deref(&self) -> &T {
        self.item
            .as_ref()
            .unwrap_or_else(|| unreachable!("taken only by into_inner, which consumes the guard"))
    }
}

impl<T: QueueItem + fmt::Debug> fmt::Debug for Processing<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Processing").field(&self.item).finish()
    }
}

impl<T: QueueItem> Drop for Processing<T> {
    fn drop(&mut self) {
        if let Some(item) = self.item.take() {
            self.queue.done(&item);
        }
    }
}

impl<T: QueueItem> WorkQueue<T> {
    /// An unnamed queue without metrics (client-go's `New`).
    pub fn new() -> Self {
        Self::with_config(Config::default())
    }

    /// A queue built from `config`.
    ///
    /// With metrics enabled (a name and a provider), a task refreshing the unfinished-work gauges
    /// is spawned on the current Tokio runtime; outside a runtime those two gauges stay unset
    /// (a warning is logged) while every other metric works.
    pub fn with_config(config: Config) -> Self {
        let metrics = QueueMetrics::new(&config.name, config.metrics_provider.as_ref());
        let has_metrics = metrics.is_some();
        let shared = Arc::new(Shared {
            name: config.name,
            state: Mutex::new(State {
                queue: VecDeque::new(),
                items: HashMap::new(),
                processing: 0,
                shutting_down: false,
                drain: false,
                metrics,
            }),
            item_ready: Notify::new(),
            drained: Notify::new(),
            closed: Notify::new(),
        });
        // As client-go, no ticker at all for a queue without metrics.
        if has_metrics {
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => {
                    rt.spawn(update_unfinished_work_loop(
                        Arc::downgrade(&shared),
                        tokio::time::Instant::now(),
                        config.unfinished_work_update_period,
                    ));
                }
                Err(_) => tracing::warn!(
                    queue = %shared.name,
                    "workqueue built outside a Tokio runtime: unfinished-work gauges disabled"
                ),
            }
        }
        Self { shared }
    }

    /// The queue's name (empty when unnamed).
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Marks `item` as needing processing.
    ///
    /// An item already waiting is not queued twice; an item being processed is queued again when
    /// its worker calls [`done`](Self::done).
    ///
    /// # Errors
    ///
    /// [`ShutDown`], holding `item`, once the queue is shutting down (client-go drops it silently).
    pub fn add(&self, item: T) -> Result<(), ShutDown<T>> {
        let mut state = self.shared.state.lock();
        if state.shutting_down {
            return Err(ShutDown(item));
        }
        let State {
            queue,
            items,
            metrics,
            ..
        } = &mut *state;
        let queue_it = match items.entry(item) {
            Entry::Occupied(mut e) => {
                let status = e.get_mut();
                if status.dirty {
                    return Ok(());
                }
                status.dirty = true;
                if let Some(m) = metrics {
                    m.add(e.key());
                }
                // Being processed: `done` queues it, so that no two workers hold it at once.
                false
            }
            Entry::Vacant(e) => {
                if let Some(m) = metrics {
                    m.add(e.key());
                }
                queue.push_back(e.key().clone());
                e.insert(Status {
                    dirty: true,
                    processing: false,
                });
                true
            }
        };
        drop(state);
        if queue_it {
            self.shared.item_ready.notify_one();
        }
        Ok(())
    }

    /// Number of items waiting to be handed out (not counting items being processed).
    ///
    /// For information only: another task may change it right after.
    pub fn len(&self) -> usize {
        self.shared.state.lock().queue.len()
    }

    /// Whether no item is waiting (see [`len`](Self::len)).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether [`shutdown`](Self::shutdown) or [`shutdown_with_drain`](Self::shutdown_with_drain)
    /// was called.
    pub fn is_shutting_down(&self) -> bool {
        self.shared.state.lock().shutting_down
    }

    /// Waits for the next item and marks it as being processed; `None` once the queue is shutting
    /// down and no item is left, the signal for a worker to stop.
    ///
    /// Every item returned must be passed to [`done`](Self::done) when processing ends, or the
    /// item is never handed out again (and [`shutdown_with_drain`](Self::shutdown_with_drain)
    /// waits forever). A worker that can stop between the two without reaching `done` (a task
    /// aborted, a future dropped by `select!` or a timeout, a panic) should take its items with
    /// [`get_guarded`](Self::get_guarded): Go's `defer queue.Done(item)` has no such gap, since
    /// a goroutine cannot be cancelled.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: an item is taken off the queue only in the poll that returns it, and a wake-up
    /// meant for a cancelled call passes on to another waiting worker.
    pub async fn get(&self) -> Option<T> {
        // Fast path: an item is waiting, no need to register for a wake-up.
        if let Some(item) = self.try_get() {
            return Some(item);
        }
        loop {
            // Register for a wake-up before looking, so an add between the look and the wait
            // is not missed.
            let mut notified = pin!(self.shared.item_ready.notified());
            notified.as_mut().enable();
            {
                let mut state = self.shared.state.lock();
                if let Some(item) = state.pop() {
                    return Some(item);
                }
                if state.shutting_down {
                    return None;
                }
            }
            notified.await;
        }
    }

    /// [`get`](Self::get), with the item in a guard that marks it [`done`](Self::done) when
    /// dropped: when processing ends, and also when the worker's future is dropped or
    /// unwinds. Cancel safe as `get`.
    ///
    /// Do not also call `queue.done(&item)` for a guarded item: the guard's own `done` would
    /// then come second, and if the item had been added again meanwhile and taken by another
    /// worker, it would end that worker's mark, letting a third take the item while the second
    /// still processes it. Use [`Processing::done`], or [`Processing::into_inner`] to take the
    /// item out of the guard.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use kube_informer::workqueue::WorkQueue;
    ///
    /// let queue = WorkQueue::new();
    /// queue.add("default/web").unwrap();
    /// let worker = tokio::spawn({
    ///     let queue = queue.clone();
    ///     async move {
    ///         while let Some(key) = queue.get_guarded().await {
    ///             // Reconcile `*key`; the guard marks it done at the end of the iteration.
    ///             std::future::pending::<()>().await;
    ///         }
    ///     }
    /// });
    /// tokio::task::yield_now().await;
    /// // Aborted mid-item: the key is done, so it is handed out again once re-added.
    /// worker.abort();
    /// let _ = worker.await;
    /// queue.add("default/web").unwrap();
    /// assert_eq!(queue.try_get(), Some("default/web"));
    /// # }
    /// ```
    pub async fn get_guarded(&self) -> Option<Processing<T>> {
        self.get().await.map(|item| Processing {
            queue: self.clone(),
            item: Some(item),
        })
    }

    /// Takes the next item without waiting, `None` if none is queued.
    pub fn try_get(&self) -> Option<T> {
        self.shared.state.lock().pop()
    }

    /// Marks `item`, returned by [`get`](Self::get), as processed; if it was added again
    /// meanwhile, it is queued now.
    ///
    /// An item that is not being processed is ignored (client-go would queue a dirty one twice).
    pub fn done(&self, item: &T) {
        let mut state = self.shared.state.lock();
        let State {
            queue,
            items,
            processing,
            drain,
            metrics,
            ..
        } = &mut *state;
        let Some(status) = items.get_mut(item).filter(|s| s.processing) else {
            return;
        };
        if let Some(m) = metrics {
            m.done(item);
        }
        status.processing = false;
        *processing -= 1;
        let requeued = status.dirty;
        if requeued {
            queue.push_back(item.clone());
        } else {
            items.remove(item);
        }
        let drained = *processing == 0 && *drain;
        drop(state);
        if requeued {
            self.shared.item_ready.notify_one();
        }
        if drained {
            self.shared.drained.notify_waiters();
        }
    }

    /// Refuses further adds and tells workers to stop: [`get`](Self::get) hands out what is still
    /// queued, then returns `None`. Cancels a [`shutdown_with_drain`](Self::shutdown_with_drain)
    /// in progress. Idempotent.
    pub fn shutdown(&self) {
        self.start_shutdown(false);
    }

    /// Like [`shutdown`](Self::shutdown), then waits until every item handed out by
    /// [`get`](Self::get) is [`done`](Self::done) (client-go's `ShutDownWithDrain`).
    ///
    /// As in client-go this waits for items in flight, not for items still queued: workers keep
    /// taking those until `get` returns `None`. A later [`shutdown`](Self::shutdown) ends the
    /// wait early.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the shutdown happens on the first poll; cancelling only stops the waiting.
    pub async fn shutdown_with_drain(&self) {
        self.start_shutdown(true);
        loop {
            let mut notified = pin!(self.shared.drained.notified());
            notified.as_mut().enable();
            {
                let state = self.shared.state.lock();
                if state.processing == 0 || !state.drain {
                    return;
                }
            }
            notified.await;
        }
    }

    fn start_shutdown(&self, drain: bool) {
        {
            let mut state = self.shared.state.lock();
            state.shutting_down = true;
            state.drain = drain;
        }
        self.shared.item_ready.notify_waiters();
        self.shared.closed.notify_waiters();
        if !drain {
            self.shared.drained.notify_waiters();
        }
    }

    /// Resolves once the queue is shutting down; for background tasks that must stop with it.
    pub(crate) async fn closed(&self) {
        let mut notified = pin!(self.shared.closed.notified());
        notified.as_mut().enable();
        if self.is_shutting_down() {
            return;
        }
        notified.await;
    }
}

impl<T: QueueItem> State<T> {
    fn pop(&mut self) -> Option<T> {
        let item = self.queue.pop_front()?;
        // The invariant makes the entry present, dirty and idle.
        if let Some(status) = self.items.get_mut(&item) {
            status.dirty = false;
            status.processing = true;
        }
        self.processing += 1;
        if let Some(m) = &mut self.metrics {
            m.get(&item);
        }
        Some(item)
    }
}

/// Refreshes the unfinished-work gauges every `period` until the queue shuts down or is dropped
/// (client-go's `updateUnfinishedWorkLoop`).
/// Ticks count from `start`, the queue's creation, not from the task's first poll.
async fn update_unfinished_work_loop<T: QueueItem>(
    shared: Weak<Shared<T>>,
    start: tokio::time::Instant,
    period: Duration,
) {
    // `interval` panics on a zero period; a 1 ms floor is far below any sensible setting. A
    // huge period (to turn the refresh off) must not overflow `start + period`, which would
    // panic in this task.
    let period = period.clamp(Duration::from_millis(1), crate::FAR_FUTURE);
    let mut ticker = tokio::time::interval_at(start + period, period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let state = shared.state.lock();
        if state.shutting_down {
            return;
        }
        if let Some(m) = &state.metrics {
            m.update_unfinished_work();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{
        collections::HashSet,
        sync::atomic::{AtomicU64, AtomicUsize, Ordering},
    };

    use tokio::time::{advance, timeout};

    use super::super::metrics::{names, tests::Recorder};
    use super::*;

    const DEADLOCK: Duration = Duration::from_secs(10);

    async fn get<T: QueueItem>(q: &WorkQueue<T>) -> Option<T> {
        timeout(DEADLOCK, q.get())
            .await
            .expect("get likely deadlocked")
    }

    /// A period too large to add to an `Instant` waits, rather than panicking in the task
    /// (whose panic would go unseen: the gauges would just stop).
    #[tokio::test(start_paused = true)]
    async fn a_huge_unfinished_work_period_does_not_panic() {
        let refresh = update_unfinished_work_loop::<u8>(
            std::sync::Weak::new(),
            tokio::time::Instant::now(),
            Duration::MAX,
        );
        assert!(timeout(Duration::from_secs(3600), refresh).await.is_err());
    }

    #[test]
    fn config_defaults_mirror_client_go() {
        let c = Config::default();
        assert_eq!(c.name, "");
        assert!(c.metrics_provider.is_none());
        assert_eq!(c.unfinished_work_update_period, Duration::from_millis(500));
        // Built outside a runtime: fine without metrics (no task to spawn).
        let q = WorkQueue::<u8>::with_config(c.name("q"));
        assert_eq!(q.name(), "q");
    }

    #[tokio::test]
    async fn items_are_handed_out_in_add_order() {
        let q = WorkQueue::new();
        for i in 0..5 {
            q.add(i).unwrap();
        }
        for i in 0..5 {
            assert_eq!(get(&q).await, Some(i));
        }
    }

    #[tokio::test]
    async fn dedup_while_queued() {
        let q = WorkQueue::new();
        q.add("a").unwrap();
        q.add("b").unwrap();
        q.add("a").unwrap();
        assert_eq!(q.len(), 2);
        assert_eq!(get(&q).await, Some("a"));
        assert_eq!(get(&q).await, Some("b"));
        assert!(q.is_empty());
    }

    #[tokio::test]
    async fn item_is_never_handed_to_two_workers_at_once() {
        let q = WorkQueue::new();
        q.add("a").unwrap();
        assert_eq!(get(&q).await, Some("a"));
        q.add("a").unwrap();
        // Added while processing: waits for `done`, not handed to a second worker.
        assert_eq!(q.len(), 0);
        assert_eq!(q.try_get(), None);
    }

    #[tokio::test]
    async fn done_requeues_an_item_added_while_processing() {
        let q = WorkQueue::new();
        q.add("a").unwrap();
        let a = get(&q).await.unwrap();
        q.add("a").unwrap();
        q.add("a").unwrap();
        q.done(&a);
        assert_eq!(q.len(), 1);
        let a = get(&q).await.unwrap();
        q.done(&a);
        assert!(q.is_empty());
        // Fully forgotten: a new add queues it again.
        q.add("a").unwrap();
        assert_eq!(q.len(), 1);
    }

    #[tokio::test]
    async fn done_of_an_item_not_processing_is_ignored() {
        let q = WorkQueue::new();
        q.add("a").unwrap();
        q.done(&"a");
        q.done(&"zzz");
        assert_eq!(q.len(), 1);
    }

    #[tokio::test]
    async fn add_to_shut_down_queue_hands_the_item_back() {
        let q = WorkQueue::new();
        q.shutdown();
        let err = q.add(String::from("a")).unwrap_err();
        assert_eq!(err.to_string(), "the workqueue is shutting down");
        assert_eq!(err.into_inner(), "a");
        assert!(q.is_shutting_down());
    }

    #[tokio::test]
    async fn get_returns_remaining_items_then_none_after_shutdown() {
        let q = WorkQueue::new();
        q.add(1).unwrap();
        q.add(2).unwrap();
        q.shutdown();
        assert_eq!(get(&q).await, Some(1));
        assert_eq!(get(&q).await, Some(2));
        assert_eq!(get(&q).await, None);
    }

    #[tokio::test]
    async fn shutdown_wakes_every_waiting_worker() {
        let q = WorkQueue::<u32>::new();
        let workers: Vec<_> = (0..3)
            .map(|_| {
                let q = q.clone();
                tokio::spawn(async move { q.get().await })
            })
            .collect();
        tokio::task::yield_now().await;
        q.shutdown();
        for w in workers {
            let got = timeout(DEADLOCK, w).await.expect("likely deadlocked");
            assert_eq!(got.unwrap(), None);
        }
    }

    #[tokio::test]
    async fn get_wakes_on_add() {
        let q = WorkQueue::new();
        let worker = tokio::spawn({
            let q = q.clone();
            async move { q.get().await }
        });
        tokio::task::yield_now().await;
        q.add(7).unwrap();
        let got = timeout(DEADLOCK, worker).await.expect("likely deadlocked");
        assert_eq!(got.unwrap(), Some(7));
    }

    #[tokio::test]
    async fn cancelled_get_loses_no_item_and_no_wakeup() {
        let q = WorkQueue::new();
        // A get cancelled while waiting...
        let cancelled = timeout(Duration::from_millis(5), q.get()).await;
        assert!(cancelled.is_err());
        // ...and one cancelled right after being woken: its wake-up passes on.
        let waiter = tokio::spawn({
            let q = q.clone();
            async move { q.get().await }
        });
        tokio::task::yield_now().await;
        {
            let mut doomed = pin!(q.get());
            let waker = futures::task::noop_waker();
            let mut cx = std::task::Context::from_waker(&waker);
            assert!(doomed.as_mut().poll(&mut cx).is_pending());
            q.add(1).unwrap();
            // Dropped without being polled again.
        }
        let got = timeout(DEADLOCK, waiter).await.expect("likely deadlocked");
        assert_eq!(got.unwrap(), Some(1));
    }

    #[tokio::test]
    async fn shutdown_with_drain_waits_for_items_in_flight() {
        let q = WorkQueue::new();
        q.add("a").unwrap();
        let a = get(&q).await.unwrap();
        let drain = tokio::spawn({
            let q = q.clone();
            async move { q.shutdown_with_drain().await }
        });
        tokio::task::yield_now().await;
        assert!(!drain.is_finished());
        assert!(q.is_shutting_down());
        q.done(&a);
        timeout(DEADLOCK, drain)
            .await
            .expect("drain likely deadlocked")
            .unwrap();
    }

    /// A worker aborted, or panicking, mid-item: with the guard the item is done, so it is
    /// handed out again and a drain does not wait for it.
    #[tokio::test]
    async fn a_guarded_item_is_done_when_its_worker_is_aborted_or_panics() {
        let q = WorkQueue::new();
        for _ in 0..2 {
            q.add("a").unwrap();
        }
        let aborted = tokio::spawn({
            let q = q.clone();
            async move {
                let _a = q.get_guarded().await;
                std::future::pending::<()>().await;
            }
        });
        tokio::task::yield_now().await;
        assert!(q.is_empty(), "taken");
        aborted.abort();
        assert!(aborted.await.unwrap_err().is_cancelled());
        q.add("a").unwrap();
        let panicked = tokio::spawn({
            let q = q.clone();
            async move {
                let a = q.get_guarded().await.unwrap();
                assert_eq!(*a, "a");
                panic!("the reconcile of {}", *a);
            }
        });
        assert!(panicked.await.unwrap_err().is_panic());
        q.add("a").unwrap();
        q.get_guarded().await.unwrap().done();
        q.add("a").unwrap();
        let a = q.get_guarded().await.unwrap();
        // Handed back for the caller to mark.
        let a = a.into_inner();
        let drain = tokio::spawn({
            let q = q.clone();
            async move { q.shutdown_with_drain().await }
        });
        tokio::task::yield_now().await;
        assert!(
            !drain.is_finished(),
            "into_inner leaves `done` to the caller"
        );
        q.done(&a);
        timeout(DEADLOCK, drain)
            .await
            .expect("drain likely deadlocked")
            .unwrap();
    }

    #[tokio::test]
    async fn shutdown_with_drain_returns_at_once_when_nothing_in_flight() {
        let q = WorkQueue::<u8>::new();
        timeout(DEADLOCK, q.shutdown_with_drain())
            .await
            .expect("drain likely deadlocked");
    }

    #[tokio::test]
    async fn shutdown_cancels_a_drain_in_progress() {
        let q = WorkQueue::new();
        q.add("a").unwrap();
        let _a = get(&q).await.unwrap();
        let drain = tokio::spawn({
            let q = q.clone();
            async move { q.shutdown_with_drain().await }
        });
        tokio::task::yield_now().await;
        q.shutdown();
        timeout(DEADLOCK, drain)
            .await
            .expect("drain likely deadlocked")
            .unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn metrics_follow_client_go() {
        let rec = Recorder::default();
        let q = WorkQueue::with_config(
            Config::default()
                .name("q")
                .metrics_provider(Arc::new(rec.clone())),
        );
        q.add("a").unwrap();
        q.add("a").unwrap(); // deduplicated: not counted
        q.add("b").unwrap();
        assert_eq!(rec.sum(names::ADDS, "q"), 2.0);
        assert_eq!(rec.sum(names::DEPTH, "q"), 2.0);

        advance(Duration::from_secs(2)).await;
        let a = get(&q).await.unwrap();
        assert_eq!(rec.sum(names::DEPTH, "q"), 1.0);
        assert_eq!(rec.values(names::QUEUE_DURATION, "q"), vec![2.0]);

        // The periodic gauges see the item in flight.
        advance(Duration::from_millis(1500)).await;
        tokio::task::yield_now().await;
        let longest = rec.values(names::LONGEST_RUNNING_PROCESSOR, "q");
        assert!(
            longest.last().is_some_and(|s| *s >= 1.0),
            "longest running: {longest:?}"
        );
        assert!(!rec.values(names::UNFINISHED_WORK, "q").is_empty());

        q.done(&a);
        assert_eq!(rec.values(names::WORK_DURATION, "q"), vec![1.5]);
    }

    #[tokio::test(start_paused = true)]
    async fn unfinished_work_loop_stops_on_shutdown() {
        let rec = Recorder::default();
        let q = WorkQueue::<u8>::with_config(
            Config::default()
                .name("q")
                .metrics_provider(Arc::new(rec.clone())),
        );
        advance(Duration::from_millis(1100)).await;
        tokio::task::yield_now().await;
        let before = rec.values(names::UNFINISHED_WORK, "q").len();
        assert!(before >= 1);
        q.shutdown();
        advance(Duration::from_secs(5)).await;
        tokio::task::yield_now().await;
        assert!(rec.values(names::UNFINISHED_WORK, "q").len() <= before + 1);
    }

    use crate::testutil::Rng;

    /// Several workers on a multi-thread runtime against concurrent producers: no item processed
    /// by two workers at once, no item lost (every add is followed by a processing of it),
    /// and dedup (an item is processed at most once per batch of adds that found it idle).
    /// Seed from `WORKQUEUE_SEED` to replay; the seed is printed on failure.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn randomised_workers_never_overlap_lose_or_duplicate_items() {
        let seed = std::env::var("WORKQUEUE_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| fastrand::u64(..));
        let result = tokio::spawn(run_random(seed)).await;
        if let Err(e) = result {
            panic!("randomised workqueue test failed, replay with WORKQUEUE_SEED={seed}: {e}");
        }
    }

    async fn run_random(seed: u64) {
        const ITEMS: u64 = 50;
        const ADDS_PER_PRODUCER: usize = 2_000;
        const PRODUCERS: u64 = 3;
        const WORKERS: usize = 4;

        let q = WorkQueue::<u64>::new();
        let in_flight = Arc::new(Mutex::new(HashSet::new()));
        // Per item: adds accepted, and processings; each add must be followed by a processing.
        let added = Arc::new((0..ITEMS).map(|_| AtomicUsize::new(0)).collect::<Vec<_>>());
        let processed = Arc::new((0..ITEMS).map(|_| AtomicUsize::new(0)).collect::<Vec<_>>());
        // A global logical clock: the last add of an item must be followed by a processing that
        // starts later (stamped before the add, so any processing covering it stamps higher).
        let clock = Arc::new(AtomicU64::new(1));
        let last_add = Arc::new((0..ITEMS).map(|_| AtomicU64::new(0)).collect::<Vec<_>>());
        let last_start = Arc::new((0..ITEMS).map(|_| AtomicU64::new(0)).collect::<Vec<_>>());

        let workers: Vec<_> = (0..WORKERS)
            .map(|w| {
                let (q, in_flight, processed) = (q.clone(), in_flight.clone(), processed.clone());
                let (clock, last_start) = (clock.clone(), last_start.clone());
                let mut rng = Rng(seed ^ (w as u64 + 1).wrapping_mul(0xA5A5));
                tokio::spawn(async move {
                    while let Some(item) = q.get().await {
                        assert!(
                            in_flight.lock().insert(item),
                            "item {item} handed to two workers at once"
                        );
                        processed[item as usize].fetch_add(1, Ordering::SeqCst);
                        let now = clock.fetch_add(1, Ordering::SeqCst);
                        last_start[item as usize].fetch_max(now, Ordering::SeqCst);
                        if rng.next().is_multiple_of(4) {
                            tokio::task::yield_now().await;
                        }
                        in_flight.lock().remove(&item);
                        q.done(&item);
                    }
                })
            })
            .collect();

        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let (q, added) = (q.clone(), added.clone());
                let (clock, last_add) = (clock.clone(), last_add.clone());
                let mut rng = Rng(seed.wrapping_add(p + 1));
                tokio::spawn(async move {
                    for _ in 0..ADDS_PER_PRODUCER {
                        let item = rng.next() % ITEMS;
                        added[item as usize].fetch_add(1, Ordering::SeqCst);
                        let now = clock.fetch_add(1, Ordering::SeqCst);
                        last_add[item as usize].fetch_max(now, Ordering::SeqCst);
                        q.add(item).unwrap();
                        if rng.next().is_multiple_of(8) {
                            tokio::task::yield_now().await;
                        }
                    }
                })
            })
            .collect();
        for p in producers {
            p.await.unwrap();
        }
        timeout(Duration::from_secs(30), q.shutdown_with_drain())
            .await
            .expect("drain likely deadlocked");
        for w in workers {
            timeout(Duration::from_secs(30), w)
                .await
                .expect("worker likely deadlocked")
                .unwrap();
        }
        for i in 0..ITEMS as usize {
            let (a, p) = (
                added[i].load(Ordering::SeqCst),
                processed[i].load(Ordering::SeqCst),
            );
            // No lost item: anything added was processed after its last add.
            let (la, ls) = (
                last_add[i].load(Ordering::SeqCst),
                last_start[i].load(Ordering::SeqCst),
            );
            assert!(
                a == 0 || ls > la,
                "item {i}: last add at {la}, last processing at {ls}: lost"
            );
            // Dedup: never processed more often than added.
            assert!(p <= a, "item {i} processed {p} times for {a} adds");
        }
        assert!(q.is_empty());
        let total_processed: usize = processed.iter().map(|p| p.load(Ordering::SeqCst)).sum();
        let total_added: usize = added.iter().map(|a| a.load(Ordering::SeqCst)).sum();
        assert!(
            total_processed < total_added,
            "dedup never kicked in: {total_processed} processings for {total_added} adds"
        );
    }
}
