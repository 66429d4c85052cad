//! client-go's `tools/cache/shared_informer_test.go` (v0.37), against [`SharedIndexInformer`]
//! over an in-memory source with the behaviour of client-go's `FakeControllerSource`
//! (`clientgo_support`).
//!
//! client-go reads the informer's private state (its listener list, its resync check period,
//! the listeners' periods); the crate does not expose those, so these tests observe the same
//! facts through behaviour: a registered handler is one that receives notifications, a period
//! is the time at which resyncs arrive. Timed cases run on tokio's paused clock, moved with
//! `tokio::time::advance` where client-go steps its fake clock; see `clientgo_support` for how
//! the waits keep that clock still.
//!
//! Three of these failed before issue #18 parts 1-3 were fixed (a foreign registration removed
//! the wrong handler, two backoffs after a broken watch, no pause after a handler panic); see
//! `tests/CLIENTGO.md`.
//!
//! client-go v0.37 runs these tests on its in-order informer (`InOrderInformers` is GA, with
//! `AtomicFIFO`, `UnlockWhileProcessingFIFO` and `InOrderInformersBatchProcess` on by default),
//! so every test here runs twice: as written, on the crate's default `FifoMode::DeltaFifo`, and
//! in [`in_order`] on `FifoMode::InOrder`, the mode that matches client-go v0.37. With the
//! `compact` feature, [`compact`] runs them a third time on the default FIFO with a
//! `CacheStorage::Compact` cache that keeps no hot objects, so every read nobody else holds
//! decodes (the storage does not depend on the FIFO mode; the model test in the library covers
//! the storage itself).

mod clientgo_support;

use std::{
    cell::Cell,
    collections::{BTreeSet, HashMap},
    io,
    sync::{
        Arc, OnceLock,
        atomic::{AtomicBool, Ordering},
        mpsc as std_mpsc,
    },
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::Pod;
use kube::api::ObjectMeta;
use kube_informer::{
    FifoMode, IndexFn, InformerConfig, InformerError, ResourceEventHandler,
    ResourceEventHandlerFuncs, SharedIndexInformer, reflector::Error,
};
use parking_lot::Mutex;

use clientgo_support::{
    FakeControllerSource, PATIENCE, SETTLE, TestListener, deadlock_guard, settle, wait_until,
};

const SECOND: Duration = Duration::from_secs(1);

fn pod(name: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        ..Pod::default()
    }
}

/// A pod whose UID is its name, as several client-go cases build them.
fn pod_uid(name: &str) -> Pod {
    let mut p = pod(name);
    p.metadata.uid = Some(name.to_owned());
    p
}

fn pod_labels(name: &str, labels: &[(&str, &str)]) -> Pod {
    let mut p = pod(name);
    p.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    );
    p
}

thread_local! {
    /// The FIFO mode [`new_informer`] builds informers with: the default, except while
    /// [`in_order`] runs a test. Each test runs on a thread of its own, and builds its informers
    /// on it (a `#[tokio::test]` body runs on the calling thread).
    static MODE: Cell<FifoMode> = const { Cell::new(FifoMode::DeltaFifo) };
    /// Whether [`new_informer`] builds informers with a compact cache (while [`compact`] runs a
    /// test).
    static COMPACT: Cell<bool> = const { Cell::new(false) };
}

/// Runs `test` with [`new_informer`] building `mode` informers.
fn with_mode(mode: FifoMode, test: fn()) {
    struct Reset(FifoMode);
    impl Drop for Reset {
        fn drop(&mut self) {
            MODE.set(self.0);
        }
    }
    let _reset = Reset(MODE.replace(mode));
    test();
}

/// Runs `test` with [`new_informer`] building informers with a compact cache.
#[cfg(feature = "compact")]
fn with_compact_cache(test: fn()) {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            COMPACT.set(self.0);
        }
    }
    let _reset = Reset(COMPACT.replace(true));
    test();
}

/// The cache storage of the current test.
fn cache_storage() -> kube_informer::CacheStorage {
    #[cfg(feature = "compact")]
    if COMPACT.get() {
        return kube_informer::CacheStorage::Compact(
            kube_informer::CompactConfig::default().hot_objects(0),
        );
    }
    kube_informer::CacheStorage::Decoded
}

/// client-go `NewSharedInformer(source, &v1.Pod{}, resync)`, in the current [`MODE`].
fn new_informer(source: &FakeControllerSource<Pod>, resync: Duration) -> SharedIndexInformer<Pod> {
    let informer = SharedIndexInformer::new(
        source.clone(),
        InformerConfig::default()
            .resync_period(resync)
            .fifo_mode(MODE.get())
            .cache_storage(cache_storage()),
    );
    assert_eq!(informer.fifo_mode(), MODE.get());
    informer
}

async fn synced(informer: &SharedIndexInformer<Pod>) {
    wait_until("cache sync", || informer.has_synced()).await;
}

async fn stop(informer: &SharedIndexInformer<Pod>) {
    deadlock_guard("informer shutdown", informer.shutdown()).await;
}

async fn assert_ok(listener: &TestListener, name: &str, expected: &[&str]) {
    if let Err(e) = listener.ok(expected).await {
        panic!("{name}: {e}");
    }
}

/// Adds `p` at the source and waits until the informer has cached it (so it has been handed to
/// every registered handler), then a little longer for the handlers to run.
async fn deliver(source: &FakeControllerSource<Pod>, informer: &SharedIndexInformer<Pod>, p: Pod) {
    let name = p.metadata.name.clone().unwrap();
    source.add(p);
    wait_until(&format!("{name} cached"), || {
        informer.indexer().get_by_key(&name).is_some()
    })
    .await;
    settle(SETTLE).await;
}

fn names(pods: &[Arc<Pod>]) -> BTreeSet<String> {
    pods.iter()
        .map(|p| p.metadata.name.clone().unwrap_or_default())
        .collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

fn label_keys_index(name: &str) -> HashMap<String, IndexFn<Pod>> {
    let f: IndexFn<Pod> = Arc::new(|p: &Pod| {
        p.metadata
            .labels
            .as_ref()
            .map(|l| l.keys().cloned().collect())
            .unwrap_or_default()
    });
    HashMap::from([(name.to_owned(), f)])
}

/// client-go `TestIndexer`: an index added before start covers the initial list and later adds;
/// one added after start covers the cache at once.
#[tokio::test(start_paused = true)]
async fn indexer() {
    let source = FakeControllerSource::new();
    source.add(pod_labels("pod1", &[("a", "a-val"), ("b", "b-val1")]));
    source.add(pod_labels("pod2", &[("b", "b-val2")]));
    let informer = new_informer(&source, SECOND);
    informer.add_indexers(label_keys_index("labels")).unwrap();
    informer.start();
    synced(&informer).await;

    let by = |index: &str, value: &str| names(&informer.indexer().by_index(index, value).unwrap());
    assert_eq!(by("labels", "a"), set(&["pod1"]));

    // Adding an object later is fine as well.
    source.add(pod_labels("pod3", &[("a", "a-val2")]));
    wait_until("pod3 indexed", || {
        by("labels", "a") == set(&["pod1", "pod3"])
    })
    .await;

    // So is adding an index later: it is usable at once.
    informer
        .add_indexers(label_keys_index("labels-again"))
        .unwrap();
    assert_eq!(by("labels-again", "a"), set(&["pod1", "pod3"]));
    for index in ["labels", "labels-again"] {
        let values: BTreeSet<String> = informer
            .indexer()
            .list_index_func_values(index)
            .into_iter()
            .collect();
        assert_eq!(values, set(&["a", "b"]), "{index}");
    }
    stop(&informer).await;
}

/// A handler that blocks the informer's (shared) handler thread in its first call until released,
/// so that the other handlers' consumers start late.
struct Gate(Mutex<Option<std_mpsc::Receiver<()>>>);

impl ResourceEventHandler<Pod> for Gate {
    fn on_add(&mut self, _: &Arc<Pod>, _: bool) {
        if let Some(rx) = self.0.lock().take() {
            let _ = rx.recv();
        }
    }
}

/// client-go `testListenerResyncPeriods`, for `TestListenerResyncPeriods` and
/// `TestListenerResyncPeriodsDelayed`: three handlers with no resync, 2 s and 3 s on an informer
/// checking every second each get the initial list, then their resyncs at 2 s and 3 s only.
///
/// With `startup_delay`, the Go test holds the processor's start back through an internal hook
/// (`sharedProcessorRunHook`), so the first notifications are distributed before any listener
/// consumes them. Here a first handler blocks the informer's handler thread for that long
/// instead, which holds every other handler's consumer back the same way.
async fn listener_resync_periods(startup_delay: Duration) {
    let source = FakeControllerSource::new();
    source.add(pod("pod1"));
    source.add(pod("pod2"));
    let informer = new_informer(&source, SECOND);

    let release = if startup_delay.is_zero() {
        None
    } else {
        let (tx, rx) = std_mpsc::channel();
        informer
            .add_event_handler_with_resync_period(Gate(Mutex::new(Some(rx))), Duration::ZERO)
            .unwrap();
        Some(tx)
    };

    let listeners = [
        ("listener1", TestListener::new(), Duration::ZERO),
        ("listener2", TestListener::new(), 2 * SECOND),
        ("listener3", TestListener::new(), 3 * SECOND),
    ];
    for (_, l, period) in &listeners {
        informer
            .add_event_handler_with_resync_period(l.clone(), *period)
            .unwrap();
    }
    informer.start();

    if let Some(release) = release {
        synced(&informer).await;
        tokio::time::advance(startup_delay).await;
        settle(Duration::from_millis(10)).await;
        drop(release);
    }

    // Every listener gets the initial list.
    for (name, l, _) in &listeners {
        assert_ok(l, name, &["pod1", "pod2"]).await;
    }
    for (_, l, _) in &listeners {
        l.reset();
    }

    // At 2 s only listener2 resyncs.
    tokio::time::advance(2 * SECOND - startup_delay).await;
    assert_ok(&listeners[1].1, "listener2 at 2 s", &["pod1", "pod2"]).await;
    for i in [0, 2] {
        let (name, l, _) = &listeners[i];
        assert_eq!(l.received(), Vec::<String>::new(), "{name} resynced at 2 s");
    }
    for (_, l, _) in &listeners {
        l.reset();
    }

    // At 3 s only listener3 does.
    tokio::time::advance(SECOND).await;
    assert_ok(&listeners[2].1, "listener3 at 3 s", &["pod1", "pod2"]).await;
    for i in [0, 1] {
        let (name, l, _) = &listeners[i];
        assert_eq!(l.received(), Vec::<String>::new(), "{name} resynced at 3 s");
    }
    stop(&informer).await;
}

/// client-go `TestListenerResyncPeriods`.
#[tokio::test(start_paused = true)]
async fn listener_resync_periods_undelayed() {
    listener_resync_periods(Duration::ZERO).await;
}

/// client-go `TestListenerResyncPeriodsDelayed` (see [`listener_resync_periods`]).
#[tokio::test(start_paused = true)]
async fn listener_resync_periods_delayed() {
    listener_resync_periods(SECOND).await;
}

/// client-go `TestResyncCheckPeriod`: handlers registered before start with shorter periods than
/// the informer's (12 h) lower its check period to the shortest (5 s), and each keeps its own
/// period. Go reads the periods; this checks when resyncs arrive, every 5 s up to 60 s: the 5 s
/// handler at each step, the 55 s one at 55 s, the 1 min one at 60 s, the one without resync
/// never.
#[tokio::test(start_paused = true)]
async fn resync_check_period() {
    let source = FakeControllerSource::new();
    source.add(pod("pod1"));
    let informer = new_informer(&source, 12 * 3600 * SECOND);
    let periods = [0, 60, 55, 5];
    let listeners: Vec<TestListener> = periods.iter().map(|_| TestListener::new()).collect();
    for (l, secs) in listeners.iter().zip(periods) {
        informer
            .add_event_handler_with_resync_period(l.clone(), secs * SECOND)
            .unwrap();
    }
    informer.start();
    for (i, l) in listeners.iter().enumerate() {
        assert_ok(l, &format!("listener{}", i + 1), &["pod1"]).await;
        l.reset();
    }
    for t in (5..=60u32).step_by(5) {
        tokio::time::advance(5 * SECOND).await;
        // No resync period: never.
        let want = |period: u32| t.checked_div(period).unwrap_or(0);
        let counts = || -> Vec<usize> { listeners.iter().map(|l| l.received().len()).collect() };
        let expected: Vec<usize> = periods.iter().map(|p| want(*p) as usize).collect();
        // Too many resyncs show up as a count above `expected` at this step or a later one.
        let start = Instant::now();
        while counts() != expected && start.elapsed() < PATIENCE {
            settle(Duration::from_millis(1)).await;
        }
        settle(Duration::from_millis(10)).await;
        assert_eq!(
            counts(),
            expected,
            "resyncs per handler (periods {periods:?} s) after {t} s"
        );
    }
    stop(&informer).await;
}

/// client-go `TestSharedInformerInitializationRace` (kubernetes#59822): a handler added from
/// another thread while the informer starts.
#[tokio::test(start_paused = true)]
async fn shared_informer_initialization_race() {
    let source = FakeControllerSource::<Pod>::new();
    let informer = new_informer(&source, SECOND);
    let adder = {
        let informer = informer.clone();
        std::thread::spawn(move || {
            informer
                .add_event_handler_with_resync_period(TestListener::new(), Duration::ZERO)
                .map(|_| ())
        })
    };
    informer.start();
    let added = deadlock_guard(
        "handler added concurrently",
        tokio::task::spawn_blocking(move || adder.join()),
    )
    .await
    .unwrap()
    .expect("the adding thread panicked");
    added.expect("the informer was not stopped");
    stop(&informer).await;
}

/// client-go `testSharedInformerWatchDisruption` body, the watch being cut by `cut`: a watch is
/// cut while changes it never delivered wait on the server; after one backoff the informer
/// relists, and a handler without resync sees only what changed while one with resync also sees
/// the unchanged object.
///
/// client-go's backoff after the failed re-watch is at most 1.6 s (800 ms doubled by jitter) and
/// its test steps its clock by 1601 ms; this steps tokio's clock by as much, and if the handlers
/// have not seen the relist by then, keeps stepping to report how long recovery took.
async fn watch_disruption(cut: fn(&FakeControllerSource<Pod>)) {
    let source = FakeControllerSource::new();
    source.add(pod_uid("pod1"));
    source.add(pod_uid("pod2"));
    let informer = new_informer(&source, SECOND);
    let no_resync = TestListener::new();
    informer
        .add_event_handler_with_resync_period(no_resync.clone(), Duration::ZERO)
        .unwrap();
    let resync = TestListener::new();
    informer
        .add_event_handler_with_resync_period(resync.clone(), SECOND)
        .unwrap();
    informer.start();
    assert_ok(&no_resync, "listenerNoResync", &["pod1", "pod2"]).await;
    assert_ok(&resync, "listenerResync", &["pod1", "pod2"]).await;

    // Changes the watch never delivers: only a relist shows them.
    source.add_drop_watch(pod_uid("pod3"));
    source.modify_drop_watch(pod_uid("pod2"));
    assert_ok(&no_resync, "listenerNoResync", &["pod1", "pod2"]).await;
    assert_ok(&resync, "listenerResync", &["pod1", "pod2"]).await;
    no_resync.reset();
    resync.reset();

    // The resync check at 1 s finds only `resync` due.
    tokio::time::advance(SECOND).await;
    // A lost connection (or a too old watch): the watch ends and its resourceVersion expires.
    cut(&source);
    settle(Duration::from_millis(10)).await;
    let cut = tokio::time::Instant::now();
    tokio::time::advance(Duration::from_millis(1601)).await;
    settle(Duration::from_millis(10)).await;

    let recovered = || {
        no_resync.received_set() == set(&["pod2", "pod3"])
            && resync.received_set() == set(&["pod1", "pod2", "pod3"])
    };
    let start = Instant::now();
    while !recovered() && start.elapsed() < Duration::from_millis(500) {
        settle(Duration::from_millis(1)).await;
    }
    if !recovered() {
        // Find out how long recovery does take, for the failure message.
        while !recovered() && cut.elapsed() < 30 * SECOND {
            tokio::time::advance(Duration::from_millis(100)).await;
            settle(Duration::from_millis(20)).await;
        }
        panic!(
            "handlers had not seen the relist 1601 ms after the cut (client-go's bound); \
             recovered: {} after {:?} of tokio time; (lists, watches) = {:?}; \
             listenerNoResync got {:?}, listenerResync got {:?}",
            recovered(),
            cut.elapsed(),
            source.requests(),
            no_resync.received(),
            resync.received(),
        );
    }
    assert_ok(&no_resync, "listenerNoResync", &["pod2", "pod3"]).await;
    assert_ok(&resync, "listenerResync", &["pod1", "pod2", "pod3"]).await;
    stop(&informer).await;
}

/// client-go `TestSharedInformerWatchDisruption`, with client-go's `ResetWatch`: the server ends
/// every watch and forgets the history, so the re-watch is refused as expired.
#[tokio::test(start_paused = true)]
async fn shared_informer_watch_disruption() {
    watch_disruption(FakeControllerSource::reset_watch).await;
}

/// client-go `TestSharedInformerWatchDisruption`, the connection breaking instead of the watch
/// ending: to client-go both are the end of its watch channel (a cut connection reads as EOF),
/// so it recovers after the same single backoff.
#[tokio::test(start_paused = true)]
async fn shared_informer_watch_disruption_by_broken_connection() {
    watch_disruption(FakeControllerSource::break_watches).await;
}

/// client-go `TestSharedInformerErrorHandling`: a failing list reaches the watch-error handler.
#[tokio::test(start_paused = true)]
async fn shared_informer_error_handling() {
    let source = FakeControllerSource::new();
    source.add(pod("pod1"));
    source.set_list_error(Some((403, "Forbidden", "Access Denied")));
    let informer = new_informer(&source, SECOND);
    let (tx, mut errors) = tokio::sync::mpsc::unbounded_channel();
    informer
        .set_watch_error_handler(Arc::new(move |e: &Error| {
            let _ = tx.send(e.to_string());
        }))
        .unwrap();
    informer.start();
    let err = tokio::time::timeout(SECOND, errors.recv())
        .await
        .expect("timeout waiting for the error handler call")
        .unwrap();
    assert!(err.contains("Access Denied"), "{err}");
    stop(&informer).await;
}

/// client-go `TestSharedInformerStartRace`: setting the transform and the watch-error handler
/// from another thread while the informer starts is safe (once started, both are refused).
#[tokio::test(start_paused = true)]
async fn shared_informer_start_race() {
    let source = FakeControllerSource::<Pod>::new();
    let informer = new_informer(&source, SECOND);
    let done = Arc::new(AtomicBool::new(false));
    let setter = {
        let informer = informer.clone();
        let done = done.clone();
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                let _ = informer.set_transform(Arc::new(|p: Pod| p));
                let _ = informer.set_watch_error_handler(Arc::new(|_: &Error| {}));
            }
        })
    };
    informer.start();
    synced(&informer).await;
    done.store(true, Ordering::Relaxed);
    deadlock_guard(
        "setter thread",
        tokio::task::spawn_blocking(move || setter.join()),
    )
    .await
    .unwrap()
    .expect("the setter thread panicked");
    assert!(matches!(
        informer.set_transform(Arc::new(|p: Pod| p)),
        Err(InformerError::AlreadyStarted)
    ));
    assert!(matches!(
        informer.set_watch_error_handler(Arc::new(|_: &Error| {})),
        Err(InformerError::AlreadyStarted)
    ));
    stop(&informer).await;
}

/// client-go `TestSharedInformerTransformer`: handlers see transformed objects.
#[tokio::test(start_paused = true)]
async fn shared_informer_transformer() {
    let source = FakeControllerSource::new();
    source.add(pod_uid("pod1"));
    source.add(pod_uid("pod2"));
    let informer = new_informer(&source, SECOND);
    informer
        .set_transform(Arc::new(|mut p: Pod| {
            if let Some(name) = &mut p.metadata.name {
                *name = name.to_uppercase();
            }
            p
        }))
        .unwrap();
    let listener = TestListener::new();
    informer.add_event_handler(listener.clone()).unwrap();
    informer.start();
    assert_ok(&listener, "listenerTransformer", &["POD1", "POD2"]).await;
    stop(&informer).await;
}

/// client-go `TestSharedInformerRemoveHandler`: handlers are removed one by one. Go counts the
/// informer's listeners without running it; this runs it to see which handlers still receive.
#[tokio::test(start_paused = true)]
async fn shared_informer_remove_handler() {
    let source = FakeControllerSource::new();
    source.add(pod("pod1"));
    let informer = new_informer(&source, SECOND);
    let (l1, l2) = (TestListener::new(), TestListener::new());
    let handle1 = informer.add_event_handler(l1.clone()).unwrap();
    let handle2 = informer.add_event_handler(l2.clone()).unwrap();

    informer.remove_event_handler(&handle2).unwrap();
    informer.start();
    assert_ok(&l1, "handler1 (still registered)", &["pod1"]).await;
    assert_eq!(
        l2.received(),
        Vec::<String>::new(),
        "removed handler2 received"
    );

    informer.remove_event_handler(&handle1).unwrap();
    deliver(&source, &informer, pod("pod2")).await;
    assert_eq!(l1.received(), ["pod1"], "removed handler1 received");
    assert_eq!(
        l2.received(),
        Vec::<String>::new(),
        "removed handler2 received"
    );
    stop(&informer).await;
}

/// client-go `TestSharedInformerRemoveForeignHandler`: removing a registration through an
/// informer it does not belong to changes nothing.
#[tokio::test(start_paused = true)]
async fn shared_informer_remove_foreign_handler() {
    let source = FakeControllerSource::new();
    source.add(pod("pod1"));
    let informer = new_informer(&source, SECOND);
    let source2 = FakeControllerSource::new();
    source2.add(pod("pod1"));
    let informer2 = new_informer(&source2, SECOND);

    let (l1, l2) = (TestListener::new(), TestListener::new());
    let handle1 = informer.add_event_handler(l1.clone()).unwrap();
    let handle2 = informer.add_event_handler(l2.clone()).unwrap();

    // Remove at the foreign informer.
    assert!(informer2.remove_event_handler(&handle1).is_err());
    informer.start();
    informer2.start();
    assert_ok(&l1, "handle1 after a foreign removal", &["pod1"]).await;
    assert_ok(&l2, "handle2 after a foreign removal", &["pod1"]).await;

    informer.remove_event_handler(&handle2).unwrap();
    deliver(&source, &informer, pod("pod2")).await;
    assert_eq!(l1.received(), ["pod1", "pod2"]);
    assert_eq!(l2.received(), ["pod1"], "removed handle2 received");

    informer.remove_event_handler(&handle1).unwrap();
    deliver(&source, &informer, pod("pod3")).await;
    assert_eq!(l1.received(), ["pod1", "pod2"], "removed handle1 received");
    stop(&informer).await;
    stop(&informer2).await;
}

/// client-go `TestSharedInformerRemoveForeignHandler`, where the foreign informer has handlers of
/// its own: client-go identifies a registration by its listener, so removing one informer's
/// registration through another never touches the other's handlers.
#[tokio::test(start_paused = true)]
async fn shared_informer_remove_foreign_handler_keeps_the_foreign_informers_own() {
    let source = FakeControllerSource::new();
    source.add(pod("pod1"));
    let informer = new_informer(&source, SECOND);
    let source2 = FakeControllerSource::new();
    source2.add(pod("pod1"));
    let informer2 = new_informer(&source2, SECOND);

    let own2 = TestListener::new();
    informer2.add_event_handler(own2.clone()).unwrap();
    let l1 = TestListener::new();
    let handle1 = informer.add_event_handler(l1.clone()).unwrap();

    assert!(informer2.remove_event_handler(&handle1).is_err());
    informer.start();
    informer2.start();
    assert_ok(&l1, "handle1 after a foreign removal", &["pod1"]).await;
    assert_ok(
        &own2,
        "informer2's own handler after removing informer1's registration through informer2",
        &["pod1"],
    )
    .await;
    stop(&informer).await;
    stop(&informer2).await;
}

/// client-go `TestSharedInformerMultipleRegistration`: the same handler registered twice is two
/// registrations, each removed on its own.
#[tokio::test(start_paused = true)]
async fn shared_informer_multiple_registration() {
    let source = FakeControllerSource::new();
    source.add(pod("pod1"));
    let informer = new_informer(&source, SECOND);
    // One handler value registered twice (clones share what they record).
    let handler = TestListener::new();
    let reg1 = informer.add_event_handler(handler.clone()).unwrap();
    let reg2 = informer.add_event_handler(handler.clone()).unwrap();
    informer.start();
    wait_until("both registrations get the initial list", || {
        handler.received().len() == 2
    })
    .await;
    settle(SETTLE).await;
    assert_eq!(handler.received(), ["pod1", "pod1"]);

    informer.remove_event_handler(&reg1).unwrap();
    deliver(&source, &informer, pod("pod2")).await;
    assert_eq!(
        handler.received(),
        ["pod1", "pod1", "pod2"],
        "exactly the second registration should remain"
    );

    informer.remove_event_handler(&reg2).unwrap();
    deliver(&source, &informer, pod("pod3")).await;
    assert_eq!(
        handler.received(),
        ["pod1", "pod1", "pod2"],
        "no registration should remain"
    );
    stop(&informer).await;
}

/// client-go `TestRemovingRemovedSharedInformer`: removing a registration twice is harmless.
#[tokio::test(start_paused = true)]
async fn removing_removed_shared_informer() {
    let source = FakeControllerSource::new();
    source.add(pod("pod1"));
    let informer = new_informer(&source, SECOND);
    let l = TestListener::new();
    let reg = informer.add_event_handler(l.clone()).unwrap();
    informer.remove_event_handler(&reg).unwrap();
    informer.remove_event_handler(&reg).unwrap();
    reg.remove();
    informer.start();
    synced(&informer).await;
    settle(SETTLE).await;
    assert_eq!(
        l.received(),
        Vec::<String>::new(),
        "removed handler received"
    );
    stop(&informer).await;
}

/// client-go `TestSharedInformerHandlerAbuse`: threads add and remove handlers at random while
/// the source churns and the informer is shut down under them. Nothing to assert but that
/// nothing panics or hangs. Scaled down from client-go's 100 threads and 10,000 changes to 10
/// and 2,000, each thread keeping at most 8 registrations, to stay fast on two cores.
#[tokio::test]
async fn shared_informer_handler_abuse() {
    let source = FakeControllerSource::new();
    let informer = new_informer(&source, SECOND);
    informer.start();
    let finished = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..10u64)
        .map(|seed| {
            let informer = informer.clone();
            let finished = finished.clone();
            std::thread::spawn(move || {
                let mut rng = fastrand::Rng::with_seed(seed);
                let mut handles = Vec::new();
                while !finished.load(Ordering::Relaxed) {
                    if handles.is_empty() || (handles.len() < 8 && rng.bool()) {
                        let funcs = ResourceEventHandlerFuncs::<Pod>::new()
                            .on_add(|_, _| {})
                            .on_update(|_, _| {})
                            .on_delete(|_| {});
                        match informer.add_event_handler_with_resync_period(funcs, SECOND) {
                            Ok(reg) => handles.push(reg),
                            // The test is over.
                            Err(InformerError::Stopped) => return,
                            Err(e) => panic!("failed to add a handler: {e}"),
                        }
                    } else {
                        let reg = handles.swap_remove(rng.usize(..handles.len()));
                        informer.remove_event_handler(&reg).unwrap();
                    }
                    std::thread::sleep(Duration::from_micros(500));
                }
            })
        })
        .collect();

    let churn = {
        let source = source.clone();
        tokio::task::spawn_blocking(move || {
            let mut rng = fastrand::Rng::with_seed(99);
            let mut objs: Vec<Pod> = Vec::new();
            for i in 0..2000 {
                if objs.is_empty() {
                    let p = pod(&format!("pod{i}"));
                    objs.push(p.clone());
                    source.add(p);
                }
                match rng.u8(0..3) {
                    0 => {
                        let p = pod(&format!("pod{i}"));
                        objs.push(p.clone());
                        source.add(p);
                    }
                    1 => {
                        source.modify(objs[rng.usize(..objs.len())].clone());
                    }
                    _ => {
                        let p = objs.swap_remove(rng.usize(..objs.len()));
                        source.delete(p);
                    }
                }
            }
        })
    };
    tokio::time::timeout(PATIENCE, churn)
        .await
        .expect("source churn: likely deadlocked")
        .unwrap();
    // Stop the informer first, to exercise contention with handlers coming and going.
    stop(&informer).await;
    finished.store(true, Ordering::Relaxed);
    tokio::time::timeout(
        PATIENCE,
        tokio::task::spawn_blocking(move || {
            for w in workers {
                w.join().expect("a worker panicked");
            }
        }),
    )
    .await
    .expect("workers: likely deadlocked")
    .unwrap();
}

/// client-go `TestStateSharedInformer`: started and stopped as it runs and stops.
#[tokio::test(start_paused = true)]
async fn state_shared_informer() {
    let source = FakeControllerSource::new();
    source.add(pod("pod1"));
    let informer = new_informer(&source, SECOND);
    let listener = TestListener::new();
    informer
        .add_event_handler_with_resync_period(listener.clone(), Duration::ZERO)
        .unwrap();
    assert!(!informer.is_started(), "started after creation");
    assert!(!informer.is_stopped(), "stopped after creation");

    informer.start();
    assert_ok(&listener, "listener", &["pod1"]).await;
    assert!(
        informer.is_started(),
        "not started although handling events"
    );
    assert!(!informer.is_stopped(), "stopped although not shut down");

    stop(&informer).await;
    assert!(informer.is_stopped(), "not stopped after shutdown");
    assert!(
        informer.is_started(),
        "not started after it was started and stopped"
    );
}

/// client-go `TestAddOnStoppedSharedInformer`: a stopped informer refuses new handlers.
#[tokio::test(start_paused = true)]
async fn add_on_stopped_shared_informer() {
    let source = FakeControllerSource::new();
    source.add(pod("pod1"));
    let informer = new_informer(&source, SECOND);
    informer.start();
    stop(&informer).await;
    wait_until("informer stopped", || informer.is_stopped()).await;
    let res = informer.add_event_handler_with_resync_period(TestListener::new(), Duration::ZERO);
    assert!(
        matches!(res, Err(InformerError::Stopped)),
        "a stopped informer did not refuse a handler: {res:?}"
    );
}

/// client-go `TestRemoveOnStoppedSharedInformer`: removing a handler from a stopped informer
/// works.
#[tokio::test(start_paused = true)]
async fn remove_on_stopped_shared_informer() {
    let source = FakeControllerSource::new();
    source.add(pod("pod1"));
    let informer = new_informer(&source, SECOND);
    let handle = informer
        .add_event_handler_with_resync_period(TestListener::new(), Duration::ZERO)
        .unwrap();
    informer.start();
    stop(&informer).await;
    assert!(informer.is_stopped());
    informer.remove_event_handler(&handle).unwrap();
}

/// client-go `TestRemoveWhileActive`: a handler removed from a running informer hears nothing
/// more.
#[tokio::test(start_paused = true)]
async fn remove_while_active() {
    let source = FakeControllerSource::new();
    let informer = new_informer(&source, Duration::ZERO);
    let listener = TestListener::new();
    let handle = informer.add_event_handler(listener.clone()).unwrap();
    informer.start();

    source.add(pod("pod1"));
    assert_ok(&listener, "event did not occur", &["pod1"]).await;

    informer.remove_event_handler(&handle).unwrap();
    source.add(pod("pod2"));
    assert_ok(&listener, "unexpected event occurred", &["pod1"]).await;
    stop(&informer).await;
}

/// A [`TestListener`] that takes `gate` around each notification (client-go's test locks the
/// listener's own mutex to hold it back).
struct Gated {
    listener: TestListener,
    gate: Arc<Mutex<()>>,
}

impl ResourceEventHandler<Pod> for Gated {
    fn on_add(&mut self, obj: &Arc<Pod>, initial: bool) {
        let _held = self.gate.lock();
        ResourceEventHandler::<Pod>::on_add(&mut self.listener, obj, initial);
    }
    fn on_update(&mut self, old: &Arc<Pod>, new: &Arc<Pod>) {
        let _held = self.gate.lock();
        ResourceEventHandler::<Pod>::on_update(&mut self.listener, old, new);
    }
}

/// client-go `TestAddWhileActive`: a handler added to a running informer is replayed the cache,
/// has synced only once it has handled that replay, then gets live events with the others.
#[tokio::test(start_paused = true)]
async fn add_while_active() {
    let source = FakeControllerSource::new();
    let informer = new_informer(&source, Duration::ZERO);
    let listener1 = TestListener::new();
    let handle1 = informer.add_event_handler(listener1.clone()).unwrap();
    assert!(!handle1.has_synced(), "synced before run");

    informer.start();
    source.add(pod("pod1"));
    assert_ok(&listener1, "listener1", &["pod1"]).await;
    wait_until("handle1 synced", || handle1.has_synced()).await;

    let listener2 = TestListener::new();
    let gate = Arc::new(Mutex::new(()));
    let handle2 = {
        // Hold listener2 back so it is observed before it has synced.
        let _held = gate.lock();
        let handle2 = informer
            .add_event_handler(Gated {
                listener: listener2.clone(),
                gate: gate.clone(),
            })
            .unwrap();
        assert!(!handle2.has_synced(), "synced before processing anything");
        handle2
    };

    source.add(pod("pod2"));
    assert_ok(&listener2, "listener2", &["pod1", "pod2"]).await;
    assert!(handle2.has_synced(), "not synced even after processing");
    assert_ok(&listener1, "listener1", &["pod1", "pod2"]).await;
    stop(&informer).await;
}

/// Sets its flag when dropped: a handler holding one shows when the informer let go of it (the
/// Rust side of client-go's goroutine-leak check in `TestShutdown`).
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

fn dropped_with_handler() -> (ResourceEventHandlerFuncs<Pod>, Arc<AtomicBool>) {
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = DropFlag(dropped.clone());
    let handler = ResourceEventHandlerFuncs::new().on_add(move |_, _| {
        let _ = &flag;
    });
    (handler, dropped)
}

/// client-go `TestShutdown`, case "no-context": a handler added before run, removed after the
/// informer stopped; nothing is left running.
#[tokio::test(start_paused = true)]
async fn shutdown_handler_added_before_run() {
    let source = FakeControllerSource::<Pod>::new();
    let informer = new_informer(&source, SECOND);
    let (handler, dropped) = dropped_with_handler();
    let reg = informer.add_event_handler(handler).unwrap();
    informer.start();
    synced(&informer).await;
    stop(&informer).await;
    informer.remove_event_handler(&reg).unwrap();
    wait_until("handler released", || dropped.load(Ordering::SeqCst)).await;
}

/// client-go `TestShutdown`, case "no-context-later": a handler added after sync and removed
/// while running; nothing is left running.
#[tokio::test(start_paused = true)]
async fn shutdown_handler_added_after_sync() {
    let source = FakeControllerSource::<Pod>::new();
    let informer = new_informer(&source, SECOND);
    informer.start();
    synced(&informer).await;
    let (handler, dropped) = dropped_with_handler();
    let reg = informer.add_event_handler(handler).unwrap();
    informer.remove_event_handler(&reg).unwrap();
    stop(&informer).await;
    wait_until("handler released", || dropped.load(Ordering::SeqCst)).await;
}

/// client-go `TestShutdown`, case "no-run": an informer never run needs no stopping; dropping it
/// releases its handler.
#[tokio::test(start_paused = true)]
async fn shutdown_never_run() {
    let source = FakeControllerSource::<Pod>::new();
    let informer = new_informer(&source, SECOND);
    let (handler, dropped) = dropped_with_handler();
    informer.add_event_handler(handler).unwrap();
    drop(informer);
    wait_until("handler released", || dropped.load(Ordering::SeqCst)).await;
}

/// Everything logged through `tracing` by this test binary (client-go's `TestEventPanics` reads
/// klog's output).
fn logs() -> &'static Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        struct Sink(Arc<Mutex<Vec<u8>>>);
        impl io::Write for Sink {
            fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
                self.0.lock().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let buf = Arc::new(Mutex::new(Vec::new()));
        let sink = buf.clone();
        // Global, not per-thread: handlers run on the informer's own thread.
        tracing::subscriber::set_global_default(
            tracing_subscriber::fmt()
                .with_writer(move || Sink(sink.clone()))
                .finish(),
        )
        .expect("no other global subscriber in this test binary");
        buf
    })
}

fn log_occurrences(needle: &str) -> usize {
    String::from_utf8_lossy(&logs().lock())
        .matches(needle)
        .count()
}

/// The panic message of a test's handler, naming the [`MODE`] and the cache: the log is shared
/// by the whole binary, and each test runs once per mode, concurrently.
fn panic_message(what: &str) -> String {
    let cache = if COMPACT.get() { ", compact" } else { "" };
    format!("fake panic ({what}, {:?}{cache})", MODE.get())
}

fn panicking_handler(message: String) -> ResourceEventHandlerFuncs<Pod> {
    ResourceEventHandlerFuncs::new().on_add(move |_, _| panic!("{message}"))
}

/// client-go `TestEventPanics`, case "simple": a panicking handler is logged and does not stop
/// the informer.
#[tokio::test(start_paused = true)]
async fn event_panics_simple() {
    logs();
    let source = FakeControllerSource::new();
    source.add(pod("pod1"));
    let informer = new_informer(&source, SECOND);
    let message = panic_message("simple");
    let handle = informer
        .add_event_handler(panicking_handler(message.clone()))
        .unwrap();
    informer.start();
    synced(&informer).await;
    wait_until("the panic is logged", || log_occurrences(&message) > 0).await;
    assert!(
        !informer.is_stopped(),
        "a handler's panic stopped the informer"
    );
    stop(&informer).await;
    informer.remove_event_handler(&handle).unwrap();
}

/// client-go `TestEventPanics`, case "many": two panicking handlers, each panicking on every one
/// of the pods, each logged once per pod; after each panic but the last, each handler pauses for
/// a second, so the whole takes at least (pods − 1) seconds. client-go uses 5 pods; 3 keep this
/// test at 2 s. Real time: the pause is taken on the handler thread, outside tokio.
#[tokio::test]
async fn event_panics_many() {
    logs();
    const PODS: usize = 3;
    let source = FakeControllerSource::new();
    for i in 1..=PODS {
        source.add(pod(&format!("pod{i}")));
    }
    let informer = new_informer(&source, SECOND);
    let messages = [1, 2].map(|h| panic_message(&format!("many, handler {h}")));
    let handle1 = informer
        .add_event_handler(panicking_handler(messages[0].clone()))
        .unwrap();
    let handle2 = informer
        .add_event_handler(panicking_handler(messages[1].clone()))
        .unwrap();
    let start = Instant::now();
    informer.start();
    synced(&informer).await;
    let deadline = Instant::now() + 30 * SECOND;
    while messages.iter().any(|m| log_occurrences(m) < PODS) && Instant::now() < deadline {
        settle(Duration::from_millis(10)).await;
    }
    for (h, m) in messages.iter().enumerate() {
        assert_eq!(
            log_occurrences(m),
            PODS,
            "handler {}: one logged panic per pod",
            h + 1
        );
    }
    assert!(
        start.elapsed() >= (PODS as u32 - 1) * SECOND,
        "no pause after each panic: all {PODS} panics of each handler within {:?}",
        start.elapsed()
    );
    stop(&informer).await;
    informer.remove_event_handler(&handle1).unwrap();
    informer.remove_event_handler(&handle2).unwrap();
}

/// client-go `TestRemoveEventHandler_AsynchronousPanic`: removing a handler that is inside a
/// callback returns at once, without waiting for the callback; the callback then runs on into
/// what the caller has torn down (in Go a send on a closed channel panics; here the send fails).
#[tokio::test]
async fn remove_event_handler_asynchronous_panic() {
    let source = FakeControllerSource::new();
    let informer = new_informer(&source, Duration::ZERO);
    informer.start();

    let (scheduled_tx, scheduled_rx) = std_mpsc::sync_channel::<String>(1);
    let (block_tx, block_rx) = std_mpsc::channel::<()>();
    let (started_tx, started_rx) = std_mpsc::channel::<()>();
    let (finished_tx, finished_rx) = std_mpsc::channel::<bool>();
    let handler = ResourceEventHandlerFuncs::<Pod>::new().on_add(move |p, _| {
        let _ = started_tx.send(());
        let _ = block_rx.recv();
        let send_failed = scheduled_tx
            .send(p.metadata.name.clone().unwrap_or_default())
            .is_err();
        let _ = finished_tx.send(send_failed);
    });
    let handle = informer.add_event_handler(handler).unwrap();

    source.add(pod("pod1"));
    let started = tokio::task::spawn_blocking(move || started_rx.recv_timeout(PATIENCE))
        .await
        .unwrap();
    started.expect("the handler did not start: likely deadlocked");

    // The handler is blocked inside its callback: removal must not wait for it.
    let remover = {
        let informer = informer.clone();
        tokio::task::spawn_blocking(move || informer.remove_event_handler(&handle))
    };
    tokio::time::timeout(Duration::from_secs(5), remover)
        .await
        .expect("removal waited for a running callback: likely deadlocked")
        .unwrap()
        .unwrap();

    // Tear down what the handler writes to, then let it go on.
    drop(scheduled_rx);
    block_tx.send(()).unwrap();
    let send_failed = tokio::task::spawn_blocking(move || finished_rx.recv_timeout(PATIENCE))
        .await
        .unwrap()
        .expect("the handler did not finish: likely deadlocked");
    assert!(
        send_failed,
        "the callback should have run on after removal and found its channel closed"
    );
    stop(&informer).await;
}

/// client-go `TestRemoveEventHandler_SynchronousShutdown`: `ShutDownEventHandler` removes a
/// handler and waits until it has finished, so once it returns the caller may tear down what
/// the handler uses (in Go a send on a closed channel would panic; here the send would fail).
/// Beyond Go: by then the handler has also been dropped.
#[tokio::test]
async fn remove_event_handler_synchronous_shutdown() {
    let source = FakeControllerSource::new();
    let informer = new_informer(&source, Duration::ZERO);
    informer.start();

    let (scheduled_tx, scheduled_rx) = std_mpsc::sync_channel::<String>(1);
    let (block_tx, block_rx) = std_mpsc::channel::<()>();
    let (started_tx, started_rx) = std_mpsc::channel::<()>();
    let (finished_tx, finished_rx) = std_mpsc::channel::<bool>();
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = DropFlag(dropped.clone());
    let handler = ResourceEventHandlerFuncs::<Pod>::new().on_add(move |p, _| {
        let _ = &flag;
        let _ = started_tx.send(());
        let _ = block_rx.recv();
        let send_failed = scheduled_tx
            .send(p.metadata.name.clone().unwrap_or_default())
            .is_err();
        let _ = finished_tx.send(send_failed);
    });
    let handle = informer.add_event_handler(handler).unwrap();

    source.add(pod("pod1"));
    tokio::task::spawn_blocking(move || started_rx.recv_timeout(PATIENCE))
        .await
        .unwrap()
        .expect("the handler did not start: likely deadlocked");

    // Let the handler run on, then remove it and wait for it to stop.
    block_tx.send(()).unwrap();
    deadlock_guard(
        "shut_down_event_handler",
        informer.shut_down_event_handler(&handle),
    )
    .await
    .unwrap();

    // Only now is it safe to tear down what the handler writes to.
    drop(scheduled_rx);
    let send_failed = finished_rx
        .try_recv()
        .expect("the handler had not finished when shut_down_event_handler returned");
    assert!(!send_failed, "the handler ran into the torn-down channel");
    assert!(
        dropped.load(Ordering::SeqCst),
        "the handler was not dropped when shut_down_event_handler returned"
    );
    stop(&informer).await;
}

/// Registers a do-nothing add handler holding a [`DropFlag`], and shuts it down with
/// `shut_down_event_handler`, which must return and leave the handler dropped.
async fn shut_down_dropping_handler(
    informer: &SharedIndexInformer<Pod>,
    reg: &kube_informer::ResourceEventHandlerRegistration<Pod>,
    dropped: &AtomicBool,
) {
    deadlock_guard(
        "shut_down_event_handler",
        informer.shut_down_event_handler(reg),
    )
    .await
    .unwrap();
    assert!(
        dropped.load(Ordering::SeqCst),
        "the handler was not dropped when shut_down_event_handler returned"
    );
}

/// client-go `TestShutDownEventHandler_Lifecycles`, case "InformerNeverStarted": shutting down
/// a handler of an informer never started returns at once.
///
/// The three cases run in real time: `shut_down_event_handler` waits for the handler thread,
/// outside tokio, so a paused clock would jump past the deadlock guard's timeout.
#[tokio::test]
async fn shut_down_event_handler_informer_never_started() {
    let source = FakeControllerSource::<Pod>::new();
    let informer = new_informer(&source, Duration::ZERO);
    let (handler, dropped) = dropped_with_handler();
    let reg = informer.add_event_handler(handler).unwrap();
    shut_down_dropping_handler(&informer, &reg, &dropped).await;
}

/// client-go `TestShutDownEventHandler_Lifecycles`, case "StartedThenAddedThenShutDown": a
/// handler added to a synced informer is shut down.
#[tokio::test]
async fn shut_down_event_handler_started_then_added() {
    let source = FakeControllerSource::<Pod>::new();
    let informer = new_informer(&source, Duration::ZERO);
    informer.start();
    deadlock_guard("informer sync", informer.wait_for_cache_sync()).await;
    let (handler, dropped) = dropped_with_handler();
    let reg = informer.add_event_handler(handler).unwrap();
    shut_down_dropping_handler(&informer, &reg, &dropped).await;
    stop(&informer).await;
}

/// client-go `TestShutDownEventHandler_Lifecycles`, case "AddedThenStartedThenShutDown": a
/// handler added before start is shut down once the informer has synced.
#[tokio::test]
async fn shut_down_event_handler_added_then_started() {
    let source = FakeControllerSource::<Pod>::new();
    let informer = new_informer(&source, Duration::ZERO);
    let (handler, dropped) = dropped_with_handler();
    let reg = informer.add_event_handler(handler).unwrap();
    informer.start();
    deadlock_guard("informer sync", informer.wait_for_cache_sync()).await;
    shut_down_dropping_handler(&informer, &reg, &dropped).await;
    stop(&informer).await;
}

/// Not a Go test: client-go's rule that a listener starts out "syncing"
/// (`sharedProcessor.addListener` registers it with `p.listeners[listener] = true`; only
/// `shouldResync` changes that), so until the first resync check an update between two objects
/// of the same resourceVersion (an unchanged object in a relist, `isSync`) reaches every
/// handler. An informer without resync is never checked, so each relist tells every handler of
/// each unchanged object. Checked against client-go v0.37.2 itself (its shared informer, which
/// runs in-order) with a small program over its `FakeControllerSource`, informer resync 0 and
/// 10 s (before the first check), handler resync 0: after `ResetWatch` the relist calls
/// `UpdateFunc(pod1@1, pod1@1)`, then `AddFunc(pod2@2)`.
#[tokio::test(start_paused = true)]
async fn a_relist_tells_every_handler_of_unchanged_objects_until_a_resync_check() {
    let source = FakeControllerSource::new();
    source.add(pod_uid("pod1"));
    let informer = new_informer(&source, Duration::ZERO);
    let listener = TestListener::new();
    informer.add_event_handler(listener.clone()).unwrap();
    informer.start();
    assert_ok(&listener, "initial list", &["pod1"]).await;

    // A change only a relist shows, then the watch ends and its version expires: the re-watch
    // gets 410, and the relist follows one backoff step (at most 1.6 s with jitter), as
    // client-go's `BackoffUntil` around `ListAndWatch` waits.
    source.add_drop_watch(pod_uid("pod2"));
    tokio::time::advance(SECOND).await;
    source.reset_watch();
    settle(Duration::from_millis(10)).await;
    tokio::time::advance(Duration::from_millis(1601)).await;
    wait_until("pod2 relisted", || {
        listener.received().contains(&"pod2".to_owned())
    })
    .await;
    settle(SETTLE).await;
    assert_eq!(
        listener.received(),
        ["pod1", "pod1", "pod2"],
        "the relist's update of unchanged pod1, then the add of pod2"
    );
    stop(&informer).await;
}

/// Calls `$run!` with every test of this file, so each mode below lists them once.
macro_rules! every_test {
    ($run:ident) => {
        $run!(
            indexer,
            listener_resync_periods_undelayed,
            listener_resync_periods_delayed,
            resync_check_period,
            shared_informer_initialization_race,
            shared_informer_watch_disruption,
            shared_informer_watch_disruption_by_broken_connection,
            shared_informer_error_handling,
            shared_informer_start_race,
            shared_informer_transformer,
            shared_informer_remove_handler,
            shared_informer_remove_foreign_handler,
            shared_informer_remove_foreign_handler_keeps_the_foreign_informers_own,
            shared_informer_multiple_registration,
            removing_removed_shared_informer,
            shared_informer_handler_abuse,
            state_shared_informer,
            add_on_stopped_shared_informer,
            remove_on_stopped_shared_informer,
            remove_while_active,
            add_while_active,
            shutdown_handler_added_before_run,
            shutdown_handler_added_after_sync,
            shutdown_never_run,
            event_panics_simple,
            event_panics_many,
            remove_event_handler_asynchronous_panic,
            remove_event_handler_synchronous_shutdown,
            shut_down_event_handler_informer_never_started,
            shut_down_event_handler_started_then_added,
            shut_down_event_handler_added_then_started,
            a_relist_tells_every_handler_of_unchanged_objects_until_a_resync_check,
        );
    };
}

/// Every test of this file again, on in-order informers (`FifoMode::InOrder`): what client-go
/// v0.37 runs them on.
mod in_order {
    use kube_informer::FifoMode;

    macro_rules! in_order {
        ($($(#[$attr:meta])* $test:ident),* $(,)?) => {$(
            #[doc = concat!("[`super::", stringify!($test), "`] on an in-order informer.")]
            #[test]
            $(#[$attr])*
            fn $test() {
                super::with_mode(FifoMode::InOrder, super::$test);
            }
        )*};
    }

    every_test!(in_order);
}

/// Every test of this file again, with a compact cache (`CacheStorage::Compact`, no hot objects)
/// on the default FIFO.
#[cfg(feature = "compact")]
mod compact {
    macro_rules! compact {
        ($($(#[$attr:meta])* $test:ident),* $(,)?) => {$(
            #[doc = concat!("[`super::", stringify!($test), "`] with a compact cache.")]
            #[test]
            $(#[$attr])*
            fn $test() {
                super::with_compact_cache(super::$test);
            }
        )*};
    }

    every_test!(compact);
}
