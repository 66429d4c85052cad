//! A work queue that can add an item later: client-go's `util/workqueue/delaying_queue.go`.

use std::{
    cmp::{Ordering, Reverse},
    collections::{BinaryHeap, HashMap, hash_map::Entry},
    fmt,
    future::Future,
    ops::Deref,
    sync::{Arc, Weak},
    time::Duration,
};

use parking_lot::Mutex;
use tokio::{sync::Notify, time::Instant};

use super::{
    metrics::{CounterMetric, retries_metric},
    queue::{Config, QueueItem, ShutDown, WorkQueue},
};

/// A [`WorkQueue`] with [`add_after`](Self::add_after): the item is added once its delay has
/// passed, so a failing item can be retried later without a hot loop.
///
/// Every [`WorkQueue`] method is available through `Deref` (as Go's embedding gives client-go's
/// `delayingType` the `Interface` methods). Shutting the queue down by any route stops its timer
/// task and drops the items still waiting for their delay.
///
/// A cheap-to-clone handle: clones share one queue. The timer task uses `tokio::time`, so tests
/// with a paused clock drive it with `tokio::time::advance`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::time::Duration;
/// use kube_informer::DelayingQueue;
///
/// let queue = DelayingQueue::new();
/// queue.add_after("default/web", Duration::from_secs(5)).unwrap();
/// assert_eq!(queue.len(), 0);
/// assert_eq!(queue.get().await, Some("default/web")); // five (paused-clock) seconds later
/// # }
/// ```
pub struct DelayingQueue<T> {
    shared: Arc<DelayShared<T>>,
}

struct DelayShared<T> {
    queue: WorkQueue<T>,
    waiting: Mutex<Waiting<T>>,
    /// Wakes the timer task: a new earliest deadline, or the last handle gone.
    wake: Arc<Notify>,
    retries: Option<Box<dyn CounterMetric>>,
}

impl<T> Drop for DelayShared<T> {
    fn drop(&mut self) {
        // `notify_one` keeps a permit if the task is not waiting yet, so it cannot miss this.
        self.wake.notify_one();
    }
}

/// Items waiting for their deadline. The heap may hold stale entries (an item whose deadline
/// was moved earlier keeps its old entry); `deadlines` is the truth, and a popped entry counts
/// only if it matches. This keeps `add_after` O(log n) without a heap that supports `Fix`.
struct Waiting<T> {
    heap: BinaryHeap<Reverse<Timed<T>>>,
    deadlines: HashMap<T, Instant>,
    seq: u64,
}

struct Timed<T> {
    at: Instant,
    /// Insertion order breaks ties, so equal deadlines fire in `add_after` order.
    seq: u64,
    item: T,
}

impl<T> PartialEq for Timed<T> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl<T> Eq for Timed<T> {}
impl<T> PartialOrd for Timed<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Timed<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

impl<T> Clone for DelayingQueue<T> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<T> Deref for DelayingQueue<T> {
    type Target = WorkQueue<T>;

    fn deref(&self) -> &WorkQueue<T> {
        &self.shared.queue
    }
}

impl<T> fmt::Debug for DelayingQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DelayingQueue")
            .field("queue", &self.shared.queue)
            .field("waiting", &self.shared.waiting.lock().deadlines.len())
            .finish()
    }
}

impl<T: QueueItem> Default for DelayingQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: QueueItem> DelayingQueue<T> {
    /// An unnamed delaying queue without metrics (client-go's `NewDelayingQueue`).
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime, where its timer task cannot be spawned; see
    /// [`pair`](Self::pair) to run that task yourself, or [`try_new`](Self::try_new) for an
    /// error instead.
    pub fn new() -> Self {
        Self::with_config(Config::default())
    }

    /// A delaying queue built from `config`, its timer task spawned on the current runtime.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime; see [`pair`](Self::pair).
    pub fn with_config(config: Config) -> Self {
        Self::try_with_config(config).unwrap_or_else(|e| panic!("DelayingQueue: {e}"))
    }

    /// [`new`](Self::new) that reports a missing runtime instead of panicking.
    ///
    /// # Errors
    ///
    /// [`NoRuntime`](crate::NoRuntime) outside a Tokio runtime.
    pub fn try_new() -> Result<Self, crate::NoRuntime> {
        Self::try_with_config(Config::default())
    }

    /// [`with_config`](Self::with_config) that reports a missing runtime instead of panicking.
    ///
    /// # Errors
    ///
    /// [`NoRuntime`](crate::NoRuntime) outside a Tokio runtime.
    pub fn try_with_config(config: Config) -> Result<Self, crate::NoRuntime> {
        let runtime = crate::current_runtime()?;
        let (queue, timer) = Self::pair(config);
        runtime.spawn(timer);
        Ok(queue)
    }

    /// A delaying queue and its timer task, for the caller to spawn or drive. Until the future
    /// runs, delayed items are not added. It ends when the queue shuts down or its last handle
    /// is dropped.
    pub fn pair(config: Config) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let retries = retries_metric(&config.name, config.metrics_provider.as_ref());
        let wake = Arc::new(Notify::new());
        let shared = Arc::new(DelayShared {
            queue: WorkQueue::with_config(config),
            waiting: Mutex::new(Waiting {
                heap: BinaryHeap::new(),
                deadlines: HashMap::new(),
                seq: 0,
            }),
            wake: Arc::clone(&wake),
            retries,
        });
        let timer = waiting_loop(Arc::downgrade(&shared), wake);
        (Self { shared }, timer)
    }

    /// Adds `item` once `delay` has passed; a zero delay adds it now.
    ///
    /// An item already waiting keeps the earlier of its two deadlines (client-go's `insert`).
    /// Counts one `workqueue_retries_total`. A delay longer than 30 years waits 30 years.
    /// Items still waiting when the queue shuts down are dropped, as client-go drops them.
    ///
    /// # Errors
    ///
    /// [`ShutDown`], holding `item`, once the queue is shutting down.
    pub fn add_after(&self, item: T, delay: Duration) -> Result<(), ShutDown<T>> {
        if self.shared.queue.is_shutting_down() {
            return Err(ShutDown(item));
        }
        // Counted once accepted: a refused item is handed back uncounted.
        let count = || {
            if let Some(retries) = &self.shared.retries {
                retries.inc();
            }
        };
        if delay.is_zero() {
            return self.shared.queue.add(item).inspect(|()| count());
        }
        let at = Instant::now() + delay.min(crate::FAR_FUTURE);
        let mut waiting = self.shared.waiting.lock();
        // Checked again under the lock the timer clears the waiting items under, once it has
        // seen the shutdown: an item is either refused here or dropped with the others.
        if self.shared.queue.is_shutting_down() {
            return Err(ShutDown(item));
        }
        count();
        let head = waiting.heap.peek().map(|Reverse(t)| t.at);
        let Waiting {
            heap,
            deadlines,
            seq,
        } = &mut *waiting;
        match deadlines.entry(item) {
            Entry::Occupied(mut e) => {
                if at >= *e.get() {
                    return Ok(());
                }
                e.insert(at);
                *seq += 1;
                heap.push(Reverse(Timed {
                    at,
                    seq: *seq,
                    item: e.key().clone(),
                }));
                // The later entry stays in the heap until its deadline; once stale entries
                // outnumber live ones, drop them (client-go's heap moves the entry instead), so
                // an item re-added sooner and sooner, or fired and re-added for a far deadline,
                // does not grow the heap.
                if heap.len() > 2 * deadlines.len() + 16 {
                    heap.retain(|Reverse(t)| deadlines.get(&t.item) == Some(&t.at));
                }
            }
            Entry::Vacant(e) => {
                *seq += 1;
                heap.push(Reverse(Timed {
                    at,
                    seq: *seq,
                    item: e.key().clone(),
                }));
                e.insert(at);
            }
        }
        drop(waiting);
        // The timer sleeps until the head's deadline; only an earlier one needs to wake it.
        if head.is_none_or(|h| at < h) {
            self.shared.wake.notify_one();
        }
        Ok(())
    }

    /// Number of items waiting for their delay (not yet in the queue).
    pub fn num_waiting(&self) -> usize {
        self.shared.waiting.lock().deadlines.len()
    }

    #[cfg(test)]
    fn heap_len(&self) -> usize {
        self.shared.waiting.lock().heap.len()
    }
}

impl<T: QueueItem> DelayShared<T> {
    /// Drops the items still waiting, once the queue shuts down.
    fn clear_waiting(&self) {
        let mut waiting = self.waiting.lock();
        waiting.heap.clear();
        waiting.deadlines.clear();
    }

    /// Moves every item whose deadline has passed into the queue; returns the next deadline.
    fn fire_ready(&self, now: Instant) -> Option<Instant> {
        let mut ready = Vec::new();
        let next = {
            let mut waiting = self.waiting.lock();
            loop {
                let Some(Reverse(head)) = waiting.heap.peek() else {
                    break None;
                };
                if head.at > now {
                    break Some(head.at);
                }
                let Some(Reverse(Timed { at, item, .. })) = waiting.heap.pop() else {
                    break None;
                };
                // Skip stale entries (superseded by an earlier deadline that already fired).
                if waiting.deadlines.get(&item) == Some(&at) {
                    waiting.deadlines.remove(&item);
                    ready.push(item);
                }
            }
        };
        for item in ready {
            // Refused only when shutting down, and then the loop ends anyway.
            let _ = self.queue.add(item);
        }
        next
    }
}

/// The timer task (client-go's `waitingLoop`): sleeps until the earliest deadline or a wake-up,
/// moves ready items into the queue. Holds the queue only weakly while asleep, so dropping every
/// handle ends it.
async fn waiting_loop<T: QueueItem>(shared: Weak<DelayShared<T>>, wake: Arc<Notify>) {
    loop {
        let (queue, next) = {
            let Some(shared) = shared.upgrade() else {
                return;
            };
            if shared.queue.is_shutting_down() {
                shared.clear_waiting();
                return;
            }
            (shared.queue.clone(), shared.fire_ready(Instant::now()))
        };
        let sleep = async {
            match next {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = wake.notified() => {}
            () = sleep => {}
            () = queue.closed() => {
                if let Some(shared) = shared.upgrade() {
                    shared.clear_waiting();
                }
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::time::{advance, timeout};

    use super::super::metrics::{MetricsProvider, names, tests::Recorder};
    use super::*;

    const DEADLOCK: Duration = Duration::from_secs(10);

    /// Lets the timer task run after the clock moved.
    async fn settle() {
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn add_after_adds_once_the_delay_has_passed() {
        let q = DelayingQueue::new();
        q.add_after("a", Duration::from_millis(50)).unwrap();
        settle().await;
        assert_eq!(q.len(), 0);
        assert_eq!(q.num_waiting(), 1);
        advance(Duration::from_millis(49)).await;
        settle().await;
        assert_eq!(q.len(), 0);
        advance(Duration::from_millis(1)).await;
        settle().await;
        assert_eq!(q.len(), 1);
        assert_eq!(q.num_waiting(), 0);
        assert_eq!(q.try_get(), Some("a"));
    }

    /// A delay too large for an `Instant` waits (counted, and dropped at shutdown), and the
    /// timer goes on serving the other items.
    #[tokio::test(start_paused = true)]
    async fn a_huge_delay_waits_and_the_timer_goes_on() {
        let (q, timer) = DelayingQueue::pair(Config::default());
        let timer = tokio::spawn(timer);
        q.add_after(1, Duration::MAX).unwrap();
        q.add_after(2, Duration::from_secs(u64::MAX / 2)).unwrap();
        q.add_after(3, Duration::from_millis(1)).unwrap();
        assert_eq!(q.num_waiting(), 3);
        advance(Duration::from_millis(1)).await;
        settle().await;
        assert_eq!(q.try_get(), Some(3));
        assert_eq!(q.num_waiting(), 2);
        q.shutdown();
        timeout(DEADLOCK, timer).await.unwrap().unwrap();
        assert_eq!(q.num_waiting(), 0, "dropped at shutdown");
    }

    /// Items waiting at shutdown are dropped (client-go's timer drops its heap), and later
    /// `add_after`s are refused with the item.
    #[tokio::test(start_paused = true)]
    async fn shutdown_drops_the_waiting_items() {
        let q = DelayingQueue::new();
        q.add_after("a", Duration::from_secs(1)).unwrap();
        settle().await;
        q.shutdown();
        settle().await;
        assert_eq!(q.num_waiting(), 0);
        assert!(matches!(
            q.add_after("b", Duration::from_secs(1)),
            Err(ShutDown("b"))
        ));
        advance(Duration::from_secs(2)).await;
        settle().await;
        assert!(q.is_empty());
    }

    /// An item moved to an earlier deadline, fired, and re-added for a far one (a retry, then
    /// a periodic requeue) leaves its old entry behind each time; those stay bounded.
    #[tokio::test(start_paused = true)]
    async fn superseded_deadlines_do_not_pile_up() {
        let q = DelayingQueue::new();
        for _ in 0..1000 {
            q.add_after("k", Duration::from_secs(3600)).unwrap();
            q.add_after("k", Duration::from_millis(1)).unwrap();
            advance(Duration::from_millis(1)).await;
            settle().await;
            assert_eq!(q.try_get(), Some("k"));
            q.done(&"k");
        }
        assert_eq!(q.num_waiting(), 0);
        assert!(q.heap_len() <= 18, "{} heap entries", q.heap_len());
        // What is left still fires on time.
        q.add_after("k", Duration::from_secs(3600)).unwrap();
        q.add_after("j", Duration::from_secs(1)).unwrap();
        q.add_after("k", Duration::from_secs(2)).unwrap();
        advance(Duration::from_secs(2)).await;
        settle().await;
        assert_eq!(
            (q.try_get(), q.try_get(), q.try_get()),
            (Some("j"), Some("k"), None)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn add_after_zero_delay_adds_now() {
        let q = DelayingQueue::new();
        q.add_after(1, Duration::ZERO).unwrap();
        assert_eq!(q.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn earliest_deadline_wins() {
        let q = DelayingQueue::new();
        q.add_after("a", Duration::from_secs(10)).unwrap();
        q.add_after("a", Duration::from_secs(1)).unwrap();
        q.add_after("a", Duration::from_secs(5)).unwrap(); // later: ignored
        assert_eq!(q.num_waiting(), 1);
        advance(Duration::from_secs(1)).await;
        settle().await;
        assert_eq!(q.try_get(), Some("a"));
        q.done(&"a");
        // The superseded 5 s and 10 s deadlines do not add it again.
        advance(Duration::from_secs(10)).await;
        settle().await;
        assert!(q.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn delayed_items_fire_in_deadline_order() {
        let q = DelayingQueue::new();
        q.add_after(3, Duration::from_millis(30)).unwrap();
        q.add_after(1, Duration::from_millis(10)).unwrap();
        q.add_after(2, Duration::from_millis(20)).unwrap();
        q.add_after(4, Duration::from_millis(30)).unwrap();
        advance(Duration::from_millis(30)).await;
        settle().await;
        let got: Vec<_> = std::iter::from_fn(|| q.try_get()).collect();
        assert_eq!(got, vec![1, 2, 3, 4]);
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_get_wakes_when_the_delay_passes() {
        let q = DelayingQueue::new();
        q.add_after("a", Duration::from_secs(3)).unwrap();
        let start = Instant::now();
        let got = timeout(DEADLOCK, q.get())
            .await
            .expect("get likely deadlocked");
        assert_eq!(got, Some("a"));
        assert_eq!(start.elapsed(), Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn add_after_to_shut_down_queue_hands_the_item_back() {
        let q = DelayingQueue::new();
        q.shutdown();
        assert_eq!(q.add_after(5, Duration::from_secs(1)).unwrap_err().0, 5);
        assert_eq!(q.add_after(6, Duration::ZERO).unwrap_err().0, 6);
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_drops_waiting_items_and_stops_the_timer() {
        let (q, timer) = DelayingQueue::pair(Config::default());
        let timer = tokio::spawn(timer);
        q.add_after("a", Duration::from_secs(1)).unwrap();
        q.shutdown();
        timeout(DEADLOCK, timer)
            .await
            .expect("timer likely deadlocked")
            .unwrap();
        advance(Duration::from_secs(2)).await;
        assert_eq!(q.get().await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn timer_task_ends_when_the_last_handle_is_dropped() {
        let (q, timer) = DelayingQueue::<u8>::pair(Config::default());
        let timer = tokio::spawn(timer);
        q.add_after(1, Duration::from_secs(100)).unwrap();
        settle().await;
        drop(q);
        timeout(DEADLOCK, timer)
            .await
            .expect("timer likely deadlocked")
            .unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn huge_delay_never_fires_and_does_not_panic() {
        let q = DelayingQueue::new();
        q.add_after(1, Duration::MAX).unwrap();
        advance(Duration::from_secs(1_000_000)).await;
        settle().await;
        assert!(q.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn add_after_counts_retries() {
        let rec = Recorder::default();
        let provider: Arc<dyn MetricsProvider> = Arc::new(rec.clone());
        let q = DelayingQueue::with_config(Config::default().name("d").metrics_provider(provider));
        q.add_after(1, Duration::ZERO).unwrap();
        q.add_after(2, Duration::from_secs(1)).unwrap();
        assert_eq!(rec.sum(names::RETRIES, "d"), 2.0);
    }
}
