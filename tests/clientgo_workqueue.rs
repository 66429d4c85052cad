//! client-go's `util/workqueue` tests (v0.37): `queue_test.go`, `delaying_queue_test.go`,
//! `rate_limiting_queue_test.go` and `default_rate_limiters_test.go`, against [`WorkQueue`],
//! [`DelayingQueue`], [`RateLimitingQueue`] and the rate limiters.
//!
//! client-go drives delays with a fake clock; these run on tokio's paused clock and move it with
//! [`tokio::time::advance`]. Tokio's timers have millisecond resolution, so a delay is checked as
//! "not added one millisecond before, added at" its deadline.

use std::{
    collections::HashMap,
    sync::{
        Arc, Weak,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use kube_informer::{
    DelayingQueue, FastSlow, ItemExponentialFailure, MaxOf, RateLimiter, RateLimitingQueue,
    WorkQueue, workqueue::WithMaxWait,
};

const MS: Duration = Duration::from_millis(1);

async fn deadlock_guard<F: std::future::Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .unwrap_or_else(|_| panic!("{what}: likely deadlocked"))
}

/// Lets the delaying queue's timer task run after the clock moved.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

/// How the queue under test is shut down: client-go runs several cases with both.
#[derive(Debug, Clone, Copy)]
enum Shutdown {
    Now,
    Drain,
}

async fn shut_down(q: &WorkQueue<String>, how: Shutdown) {
    match how {
        Shutdown::Now => q.shutdown(),
        Shutdown::Drain => deadlock_guard("shutdown_with_drain", q.shutdown_with_drain()).await,
    }
}

/// client-go `TestBasic`: 50 producers and 10 consumers; after shutdown, an added item is refused
/// (client-go drops it silently, the crate hands it back) and never handed out.
#[tokio::test(start_paused = true)]
async fn basic() {
    for how in [Shutdown::Now, Shutdown::Drain] {
        let q = WorkQueue::<String>::new();
        let producers: Vec<_> = (0..50)
            .map(|i| {
                let q = q.clone();
                tokio::spawn(async move {
                    for _ in 0..50 {
                        q.add(i.to_string()).unwrap();
                        tokio::time::sleep(MS).await;
                    }
                })
            })
            .collect();
        let consumers: Vec<_> = (0..10)
            .map(|_| {
                let q = q.clone();
                tokio::spawn(async move {
                    while let Some(item) = q.get().await {
                        assert_ne!(item, "added after shutdown!", "{how:?}");
                        tokio::time::sleep(3 * MS).await;
                        q.done(&item);
                    }
                })
            })
            .collect();
        for p in producers {
            deadlock_guard("producer", p).await.unwrap();
        }
        shut_down(&q, how).await;
        assert!(
            q.add("added after shutdown!".to_owned()).is_err(),
            "{how:?}"
        );
        for c in consumers {
            deadlock_guard("consumer", c).await.unwrap();
        }
        assert_eq!(q.len(), 0, "{how:?}");
    }
}

/// client-go `TestAddWhileProcessing`: every worker re-adds each item it gets once, while
/// processing it; nothing is lost or left behind.
#[tokio::test(start_paused = true)]
async fn add_while_processing() {
    for how in [Shutdown::Now, Shutdown::Drain] {
        let q = WorkQueue::<String>::new();
        let producers: Vec<_> = (0..50)
            .map(|i| {
                let q = q.clone();
                tokio::spawn(async move { q.add(i.to_string()).unwrap() })
            })
            .collect();
        let consumers: Vec<_> = (0..10)
            .map(|_| {
                let q = q.clone();
                tokio::spawn(async move {
                    let mut counters: HashMap<String, usize> = HashMap::new();
                    while let Some(item) = q.get().await {
                        let n = counters.entry(item.clone()).or_default();
                        *n += 1;
                        if *n < 2 {
                            // Refused once the queue shuts down, as client-go drops it.
                            let _ = q.add(item.clone());
                        }
                        q.done(&item);
                    }
                })
            })
            .collect();
        for p in producers {
            deadlock_guard("producer", p).await.unwrap();
        }
        shut_down(&q, how).await;
        for c in consumers {
            deadlock_guard("consumer", c).await.unwrap();
        }
        assert_eq!(q.len(), 0, "{how:?}");
    }
}

/// client-go `TestLen`: an item already queued does not count twice.
#[tokio::test]
async fn len() {
    let q = WorkQueue::<&str>::new();
    q.add("foo").unwrap();
    assert_eq!(q.len(), 1);
    q.add("bar").unwrap();
    assert_eq!(q.len(), 2);
    q.add("foo").unwrap();
    assert_eq!(q.len(), 2, "a queued item must not be queued again");
}

/// client-go `TestReinsert`: an item added while being processed is queued again by `done`.
#[tokio::test(start_paused = true)]
async fn reinsert() {
    let q = WorkQueue::<&str>::new();
    q.add("foo").unwrap();
    let i = deadlock_guard("get", q.get()).await.unwrap();
    assert_eq!(i, "foo");
    q.add(i).unwrap();
    q.done(&i);
    let i = deadlock_guard("get again", q.get()).await.unwrap();
    assert_eq!(i, "foo");
    q.done(&i);
    assert_eq!(q.len(), 0);
}

/// client-go `TestCollapse`: two adds of an idle item are handed out once. (The Go test also
/// checks, through a pluggable inner queue, that the second add "touched" the queued item; the
/// crate's queue is not pluggable.)
#[tokio::test(start_paused = true)]
async fn collapse() {
    let q = WorkQueue::<&str>::new();
    q.add("bar").unwrap();
    q.add("bar").unwrap();
    let i = deadlock_guard("get", q.get()).await.unwrap();
    assert_eq!(i, "bar");
    q.done(&i);
    assert_eq!(q.len(), 0);
}

/// client-go `TestCollapseWhileProcessing`: two adds while an item is processed make one more
/// processing, which no other worker can start before `done`.
#[tokio::test(start_paused = true)]
async fn collapse_while_processing() {
    let q = WorkQueue::<&str>::new();
    q.add("foo").unwrap();
    let i = deadlock_guard("get", q.get()).await.unwrap();
    assert_eq!(i, "foo");
    q.add("foo").unwrap();
    q.add("foo").unwrap();

    let other = {
        let q = q.clone();
        tokio::spawn(async move {
            let i = q.get().await.unwrap();
            assert_eq!(i, "foo");
            q.done(&i);
        })
    };
    // Give the other worker a head start: it must stay blocked until `done`.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !other.is_finished(),
        "the other worker got the item while it was being processed"
    );
    q.done(&"foo");
    deadlock_guard("other worker", other).await.unwrap();
    assert_eq!(q.len(), 0);
}

/// client-go `TestQueueDrainageUsingShutDownWithDrain`: a drain waits for the items in flight.
#[tokio::test(start_paused = true)]
async fn queue_drainage_using_shutdown_with_drain() {
    let q = WorkQueue::<&str>::new();
    q.add("foo").unwrap();
    q.add("bar").unwrap();
    let first = q.get().await.unwrap();
    let second = q.get().await.unwrap();

    let drain = {
        let q = q.clone();
        tokio::spawn(async move { q.shutdown_with_drain().await })
    };
    // Once the drain has begun, `get` reports the shutdown.
    while deadlock_guard("get during drain", q.get()).await.is_some() {}
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(!drain.is_finished(), "the drain ended with items in flight");
    q.done(&first);
    q.done(&second);
    deadlock_guard("drain", drain).await.unwrap();
}

/// client-go `TestNoQueueDrainageUsingShutDown`: `shutdown` does not wait for items in flight.
#[tokio::test(start_paused = true)]
async fn no_queue_drainage_using_shutdown() {
    let q = WorkQueue::<&str>::new();
    q.add("foo").unwrap();
    q.add("bar").unwrap();
    q.get().await.unwrap();
    q.get().await.unwrap();
    let shutdown = {
        let q = q.clone();
        tokio::spawn(async move { q.shutdown() })
    };
    deadlock_guard("shutdown", shutdown).await.unwrap();
}

/// client-go `TestForceQueueShutdownUsingShutDown`: a `shutdown` ends a drain that is waiting.
#[tokio::test(start_paused = true)]
async fn force_queue_shutdown_using_shutdown() {
    let q = WorkQueue::<&str>::new();
    q.add("foo").unwrap();
    q.add("bar").unwrap();
    q.get().await.unwrap();
    q.get().await.unwrap();
    let drain = {
        let q = q.clone();
        tokio::spawn(async move { q.shutdown_with_drain().await })
    };
    while deadlock_guard("get during drain", q.get()).await.is_some() {}
    // As on a second SIGTERM: stop waiting for the items in flight.
    q.shutdown();
    deadlock_guard("drain ended by shutdown", drain)
        .await
        .unwrap();
}

/// client-go `TestQueueDrainageUsingShutDownWithDrainWithDirtyItem`: an item re-added while in
/// flight is handed out again during the drain, after its `done`.
#[tokio::test(start_paused = true)]
async fn queue_drainage_using_shutdown_with_drain_with_dirty_item() {
    let q = WorkQueue::<&str>::new();
    q.add("foo").unwrap();
    let gotten = q.get().await.unwrap();
    q.add("foo").unwrap();

    let drain = {
        let q = q.clone();
        tokio::spawn(async move { q.shutdown_with_drain().await })
    };
    while deadlock_guard("get during drain", q.get()).await.is_some() {}

    q.done(&gotten);
    // `done` queued the dirty item again.
    let again = deadlock_guard("get the dirty item", q.get())
        .await
        .expect("the re-added item should be handed out, not the shutdown");
    q.done(&again);
    assert!(
        deadlock_guard("final get", q.get()).await.is_none(),
        "should be done"
    );
    deadlock_guard("drain", drain).await.unwrap();
}

/// An item whose memory can be watched: equal and hashed by its contents.
#[derive(Clone, Debug)]
struct Big(Arc<Vec<u8>>);

impl PartialEq for Big {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}
impl Eq for Big {}
impl std::hash::Hash for Big {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

/// client-go `TestGarbageCollection`: the queue keeps nothing of an item once it is done.
#[tokio::test(start_paused = true)]
async fn garbage_collection() {
    let q = WorkQueue::<Big>::new();
    let data = Arc::new(b"hello".to_vec());
    let weak: Weak<Vec<u8>> = Arc::downgrade(&data);
    q.add(Big(data)).unwrap();
    let o = q.get().await.unwrap();
    q.done(&o);
    drop(o);
    assert!(
        weak.upgrade().is_none(),
        "the queue still holds a processed item"
    );
    // The queue itself is alive all along.
    assert_eq!(q.len(), 0);
}

/// client-go `TestSimpleQueue`: an item is added once its delay has passed, and only once.
#[tokio::test(start_paused = true)]
async fn simple_queue() {
    let q = DelayingQueue::<&str>::new();
    q.add_after("foo", 50 * MS).unwrap();
    settle().await;
    assert_eq!(q.num_waiting(), 1);
    assert_eq!(q.len(), 0, "should not have added");

    tokio::time::advance(60 * MS).await;
    settle().await;
    assert_eq!(q.len(), 1, "should have added");
    let item = q.get().await.unwrap();
    q.done(&item);

    // Well past any heartbeat: nothing more is added.
    tokio::time::advance(Duration::from_secs(10)).await;
    settle().await;
    assert_eq!(q.len(), 0, "should not have added");
}

/// client-go `TestDeduping`: an item waiting twice keeps the earlier deadline.
#[tokio::test(start_paused = true)]
async fn deduping() {
    let q = DelayingQueue::<&str>::new();
    q.add_after("foo", 50 * MS).unwrap();
    q.add_after("foo", 70 * MS).unwrap();
    settle().await;
    assert_eq!(q.len(), 0, "should not have added");

    // Past the first deadline: it is there.
    tokio::time::advance(60 * MS).await;
    settle().await;
    assert_eq!(q.len(), 1, "should have added");
    let item = q.get().await.unwrap();
    q.done(&item);

    // Past the second: nothing more.
    tokio::time::advance(20 * MS).await;
    settle().await;
    assert_eq!(q.len(), 0, "should not have added");

    // Again, the later add being the earlier deadline.
    q.add_after("foo", 50 * MS).unwrap();
    q.add_after("foo", 30 * MS).unwrap();
    settle().await;
    assert_eq!(q.len(), 0, "should not have added");

    tokio::time::advance(40 * MS).await;
    settle().await;
    assert_eq!(q.len(), 1, "should have added");
    let item = q.get().await.unwrap();
    q.done(&item);

    tokio::time::advance(20 * MS).await;
    settle().await;
    assert_eq!(q.len(), 0, "should not have added");
}

/// client-go `TestAddTwoFireEarly`: items come out in deadline order, including one added after
/// the first fired.
#[tokio::test(start_paused = true)]
async fn add_two_fire_early() {
    let q = DelayingQueue::<&str>::new();
    q.add_after("foo", Duration::from_secs(1)).unwrap();
    q.add_after("bar", 50 * MS).unwrap();
    settle().await;
    assert_eq!(q.len(), 0, "should not have added");

    tokio::time::advance(60 * MS).await;
    settle().await;
    assert_eq!(q.len(), 1);
    assert_eq!(q.get().await.unwrap(), "bar");

    q.add_after("baz", Duration::from_secs(2)).unwrap();

    tokio::time::advance(Duration::from_secs(1)).await;
    settle().await;
    assert_eq!(q.len(), 1);
    assert_eq!(q.get().await.unwrap(), "foo");

    tokio::time::advance(Duration::from_secs(2)).await;
    settle().await;
    assert_eq!(q.len(), 1);
    assert_eq!(q.get().await.unwrap(), "baz");
}

/// client-go `TestCopyShifting`: items added in reverse deadline order come out in deadline
/// order.
#[tokio::test(start_paused = true)]
async fn copy_shifting() {
    let q = DelayingQueue::<&str>::new();
    q.add_after("foo", Duration::from_secs(1)).unwrap();
    q.add_after("bar", 500 * MS).unwrap();
    q.add_after("baz", 250 * MS).unwrap();
    settle().await;
    assert_eq!(q.len(), 0, "should not have added");

    tokio::time::advance(Duration::from_secs(2)).await;
    settle().await;
    assert_eq!(q.len(), 3);
    assert_eq!(q.get().await.unwrap(), "baz");
    assert_eq!(q.get().await.unwrap(), "bar");
    assert_eq!(q.get().await.unwrap(), "foo");
}

/// Asserts that `item` lands in the queue exactly `delay` after now: not one millisecond before.
/// Takes it out again so the next check starts from an empty queue.
async fn lands_after(q: &RateLimitingQueue<&'static str>, item: &'static str, delay: Duration) {
    settle().await;
    if delay > MS {
        tokio::time::advance(delay - MS).await;
        settle().await;
    }
    assert_eq!(q.len(), 0, "{item} added before {delay:?}");
    tokio::time::advance(if delay > MS { MS } else { delay }).await;
    settle().await;
    assert_eq!(q.len(), 1, "{item} not added after {delay:?}");
    let got = q.get().await.unwrap();
    assert_eq!(got, item);
    q.done(&got);
}

/// client-go `TestRateLimitingQueue`: each `add_rate_limited` waits as the limiter says, per
/// item; `forget` starts an item over. (Go reads the deadline of the entry handed to the delaying
/// queue; this watches the item land.)
#[tokio::test(start_paused = true)]
async fn rate_limiting_queue() {
    let q = RateLimitingQueue::with_rate_limiter(ItemExponentialFailure::new(
        MS,
        Duration::from_secs(1),
    ));
    q.add_rate_limited("one").unwrap();
    lands_after(&q, "one", MS).await;
    q.add_rate_limited("one").unwrap();
    lands_after(&q, "one", 2 * MS).await;
    assert_eq!(q.num_requeues(&"one"), 2);

    q.add_rate_limited("two").unwrap();
    lands_after(&q, "two", MS).await;
    q.add_rate_limited("two").unwrap();
    lands_after(&q, "two", 2 * MS).await;

    q.forget(&"one");
    assert_eq!(q.num_requeues(&"one"), 0);
    q.add_rate_limited("one").unwrap();
    lands_after(&q, "one", MS).await;
}

/// client-go `TestItemExponentialFailureRateLimiter`.
#[test]
fn item_exponential_failure_rate_limiter() {
    let l = ItemExponentialFailure::new(MS, Duration::from_secs(1));
    for want in [1, 2, 4, 8, 16] {
        assert_eq!(l.when(&"one"), want * MS);
    }
    assert_eq!(l.num_requeues(&"one"), 5);

    assert_eq!(l.when(&"two"), MS);
    assert_eq!(l.when(&"two"), 2 * MS);
    assert_eq!(l.num_requeues(&"two"), 2);

    l.forget(&"one");
    assert_eq!(l.num_requeues(&"one"), 0);
    assert_eq!(l.when(&"one"), MS);
}

/// client-go `TestItemExponentialFailureRateLimiterOverFlow`: the doubling saturates at the cap
/// instead of overflowing.
#[test]
fn item_exponential_failure_rate_limiter_overflow() {
    let l = ItemExponentialFailure::new(MS, Duration::from_secs(1000));
    for _ in 0..5 {
        l.when(&"one");
    }
    assert_eq!(l.when(&"one"), 32 * MS);
    for _ in 0..1000 {
        l.when(&"overflow1");
    }
    assert_eq!(l.when(&"overflow1"), Duration::from_secs(1000));

    let minute = Duration::from_secs(60);
    let l = ItemExponentialFailure::new(minute, 1000 * 60 * minute);
    for _ in 0..2 {
        l.when(&"two");
    }
    assert_eq!(l.when(&"two"), 4 * minute);
    for _ in 0..1000 {
        l.when(&"overflow2");
    }
    assert_eq!(l.when(&"overflow2"), 1000 * 60 * minute);
}

/// client-go `TestItemFastSlowRateLimiter`.
#[test]
fn item_fast_slow_rate_limiter() {
    let l = FastSlow::new(5 * MS, Duration::from_secs(10), 3);
    for want in [
        5 * MS,
        5 * MS,
        5 * MS,
        Duration::from_secs(10),
        Duration::from_secs(10),
    ] {
        assert_eq!(l.when(&"one"), want);
    }
    assert_eq!(l.num_requeues(&"one"), 5);

    assert_eq!(l.when(&"two"), 5 * MS);
    assert_eq!(l.when(&"two"), 5 * MS);
    assert_eq!(l.num_requeues(&"two"), 2);

    l.forget(&"one");
    assert_eq!(l.num_requeues(&"one"), 0);
    assert_eq!(l.when(&"one"), 5 * MS);
}

/// client-go `TestMaxOfRateLimiter`: the longest of the limiters' delays, and the most requeues.
#[test]
fn max_of_rate_limiter() {
    let l = MaxOf::new()
        .with(FastSlow::new(5 * MS, Duration::from_secs(3), 3))
        .with(ItemExponentialFailure::new(MS, Duration::from_secs(1)));
    for want in [
        5 * MS,
        5 * MS,
        5 * MS,
        Duration::from_secs(3),
        Duration::from_secs(3),
    ] {
        assert_eq!(l.when(&"one"), want);
    }
    assert_eq!(l.num_requeues(&"one"), 5);

    assert_eq!(l.when(&"two"), 5 * MS);
    assert_eq!(l.when(&"two"), 5 * MS);
    assert_eq!(l.num_requeues(&"two"), 2);

    l.forget(&"one");
    assert_eq!(l.num_requeues(&"one"), 0);
    assert_eq!(l.when(&"one"), 5 * MS);
}

/// A limiter answering `base` for its first `threshold` calls, whatever the item, then `max`
/// (the Go test's `StepRateLimiter`).
struct Step {
    count: AtomicUsize,
    threshold: usize,
    base: Duration,
    max: Duration,
}

impl RateLimiter<usize> for Step {
    fn when(&self, _: &usize) -> Duration {
        if self.count.fetch_add(1, Ordering::Relaxed) < self.threshold {
            self.base
        } else {
            self.max
        }
    }
    fn forget(&self, _: &usize) {}
    fn num_requeues(&self, _: &usize) -> usize {
        0
    }
}

/// client-go `TestWithMaxWaitRateLimiter`: the wrapped limiter's delay, capped.
#[test]
fn with_max_wait_rate_limiter() {
    let l = WithMaxWait::new(
        Step {
            count: AtomicUsize::new(0),
            threshold: 100,
            base: 5 * MS,
            max: Duration::from_secs(1000),
        },
        Duration::from_secs(500),
    );
    for i in 0..100 {
        assert_eq!(l.when(&i), 5 * MS, "call {i}");
    }
    for i in 100..200 {
        assert_eq!(l.when(&i), Duration::from_secs(500), "call {i}");
    }
}
