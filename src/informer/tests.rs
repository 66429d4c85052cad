//! Handler-call sequences of the informer, checked exactly, over a scripted lister-watcher.

use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use parking_lot::Mutex;

use super::*;
use crate::{
    fifo::DeltaObject,
    reflector::{BackoffConfig, WatchEvent},
    testutil::{MockLw, WatchScript, api_error, cm, is_watch, page},
};

type Log = Arc<Mutex<Vec<String>>>;

fn describe(ev: &Event<ConfigMap>) -> String {
    fn rv(o: &ConfigMap) -> &str {
        o.metadata.resource_version.as_deref().unwrap_or("")
    }
    fn key(o: &ConfigMap) -> String {
        crate::key_of(o).unwrap().to_string()
    }
    match ev {
        Event::Add {
            obj,
            is_in_initial_list,
        } => {
            format!(
                "add {} {}{}",
                key(obj),
                rv(obj),
                if *is_in_initial_list { " initial" } else { "" }
            )
        }
        Event::Update { old, new } => format!("update {} {}->{}", key(new), rv(old), rv(new)),
        Event::Delete(DeltaObject::Object(o)) => format!("delete {} {}", key(o), rv(o)),
        Event::Delete(DeltaObject::DeletedFinalStateUnknown(t)) => {
            format!("tombstone {} {}", t.key, rv(&t.obj))
        }
    }
}

/// A handler that logs every call.
struct Recorder(Log);

impl ResourceEventHandler<ConfigMap> for Recorder {
    fn on_add(&mut self, obj: &Arc<ConfigMap>, initial: bool) {
        self.0.lock().push(describe(&Event::Add {
            obj: obj.clone(),
            is_in_initial_list: initial,
        }));
    }
    fn on_update(&mut self, old: &Arc<ConfigMap>, new: &Arc<ConfigMap>) {
        self.0.lock().push(describe(&Event::Update {
            old: old.clone(),
            new: new.clone(),
        }));
    }
    fn on_delete(&mut self, obj: &DeltaObject<ConfigMap>) {
        self.0.lock().push(describe(&Event::Delete(obj.clone())));
    }
}

fn recorder() -> (Recorder, Log) {
    let log = Log::default();
    (Recorder(log.clone()), log)
}

fn fast_config() -> InformerConfig {
    InformerConfig::default()
        .reflector(ReflectorConfig::default().backoff(BackoffConfig {
            initial: Duration::from_millis(10),
            jitter: 0.0,
            ..Default::default()
        }))
        .cache_storage(test_storage())
}

/// The cache storage these tests run with: `Decoded`, or with `KUBE_INFORMER_TEST_STORAGE=compact`
/// (CI runs them again so) a compact cache that keeps nothing decoded and sends every
/// notification compressed, so every object a handler sees has been through the compressed
/// store.
fn test_storage() -> crate::CacheStorage {
    match std::env::var("KUBE_INFORMER_TEST_STORAGE").as_deref() {
        Err(_) | Ok("" | "decoded") => crate::CacheStorage::Decoded,
        #[cfg(feature = "compact")]
        Ok("compact") => crate::CacheStorage::Compact(
            crate::CompactConfig::default()
                .hot_objects(0)
                .decoded_backlog(0),
        ),
        Ok(other) => panic!("KUBE_INFORMER_TEST_STORAGE={other}: not a storage these tests know"),
    }
}

fn informer(lw: &MockLw) -> SharedIndexInformer<ConfigMap> {
    SharedIndexInformer::new(lw.clone(), fast_config())
}

async fn eventually(what: &str, f: impl Fn() -> bool) {
    let ok = tokio::time::timeout(Duration::from_secs(10), async {
        while !f() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
    assert!(
        ok.is_ok(),
        "timed out waiting for {what}: likely deadlocked"
    );
}

async fn log_reaches(log: &Log, n: usize) -> Vec<String> {
    eventually(&format!("{n} handler calls"), || log.lock().len() >= n).await;
    // Give stray extra calls a moment to show up, so exact comparisons mean something.
    tokio::time::sleep(Duration::from_millis(30)).await;
    log.lock().clone()
}

#[tokio::test]
async fn handlers_see_add_update_delete_with_old_and_new_objects() {
    let lw = MockLw::new();
    lw.list(Ok(page("5", None, vec![cm("ns", "a", "5")])));
    let tx = lw.watch_channel();
    let inf = informer(&lw);
    let (rec, log) = recorder();
    inf.add_event_handler(rec).unwrap();
    inf.start();
    assert!(inf.wait_for_cache_sync().await);
    // One at a time: the FIFO would otherwise (rightly) hand over both deltas of `a` together.
    for (i, ev) in [
        WatchEvent::Modified(cm("ns", "a", "6")),
        WatchEvent::Added(cm("ns", "b", "7")),
        WatchEvent::Deleted(cm("ns", "a", "8")),
    ]
    .into_iter()
    .enumerate()
    {
        tx.send(Ok(ev)).unwrap();
        log_reaches(&log, i + 2).await;
    }
    assert_eq!(
        log_reaches(&log, 4).await,
        [
            "add ns/a 5 initial",
            "update ns/a 5->6",
            "add ns/b 7",
            "delete ns/a 8"
        ]
    );
    assert_eq!(inf.lister().list(&Default::default()).len(), 1);
    assert_eq!(inf.last_sync_resource_version(), "8");
    inf.shutdown().await;
}

#[tokio::test]
async fn relist_with_vanished_objects_delivers_tombstones() {
    let lw = MockLw::new();
    lw.list(Ok(page(
        "6",
        None,
        vec![cm("ns", "a", "5"), cm("ns", "b", "6")],
    )))
    // A watch that delivered something, then expired: the relist follows a backoff step, by
    // when the first list has been handled.
    .watch(WatchScript::Events(vec![
        Ok(WatchEvent::Bookmark {
            resource_version: "6".into(),
            initial_events_end: false,
        }),
        Ok(WatchEvent::Error(Box::new({
            let mut s = kube::core::Status::failure("too old", "Expired");
            s.code = 410;
            s
        }))),
    ]))
    .list(Ok(page(
        "20",
        None,
        vec![cm("ns", "b", "6"), cm("ns", "c", "19")],
    )));
    let inf = informer(&lw);
    let (rec, log) = recorder();
    inf.add_event_handler(rec).unwrap();
    inf.start();
    let got = log_reaches(&log, 5).await;
    assert_eq!(
        got,
        [
            "add ns/a 5 initial",
            "add ns/b 6 initial",
            // b is unchanged (same resourceVersion): a same-version update, which every listener
            // hears until a resync check marks it not syncing (client-go `addListener`)
            "update ns/b 6->6",
            "add ns/c 19",
            "tombstone ns/a 5",
        ]
    );
    let keys: Vec<_> = inf
        .indexer()
        .list_keys()
        .into_iter()
        .map(|k| k.to_string())
        .collect();
    let mut keys = keys;
    keys.sort();
    assert_eq!(keys, ["ns/b", "ns/c"]);
    inf.shutdown().await;
}

#[tokio::test]
async fn late_handler_is_replayed_the_cache_as_initial_adds() {
    let lw = MockLw::new();
    lw.list(Ok(page(
        "6",
        None,
        vec![cm("ns", "a", "5"), cm("ns", "b", "6")],
    )));
    let tx = lw.watch_channel();
    let inf = informer(&lw);
    inf.start();
    assert!(inf.wait_for_cache_sync().await);
    let (rec, log) = recorder();
    let reg = inf.add_event_handler(rec).unwrap();
    let mut replay = log_reaches(&log, 2).await;
    replay.sort();
    assert_eq!(replay, ["add ns/a 5 initial", "add ns/b 6 initial"]);
    eventually("late handler synced", || reg.has_synced()).await;
    tx.send(Ok(WatchEvent::Modified(cm("ns", "a", "7"))))
        .unwrap();
    assert_eq!(log_reaches(&log, 3).await[2], "update ns/a 5->7");
    inf.shutdown().await;
}

#[tokio::test]
async fn resync_reaches_only_listeners_whose_period_is_due() {
    let lw = MockLw::new();
    lw.list(Ok(page("5", None, vec![cm("ns", "a", "5")])));
    // As in client-go, an informer built without a resync period never resyncs; this one has
    // 30 s, and the handler asking for 300 ms lowers the check period (to the 1 s minimum).
    let inf = SharedIndexInformer::new(
        lw.clone(),
        fast_config().resync_period(Duration::from_secs(30)),
    );
    let (resyncing, resync_log) = recorder();
    let (quiet, quiet_log) = recorder();
    let (default, default_log) = recorder();
    inf.add_event_handler_with_resync_period(resyncing, Duration::from_millis(300))
        .unwrap();
    inf.add_event_handler_with_resync_period(quiet, Duration::ZERO)
        .unwrap();
    inf.add_event_handler(default).unwrap();
    inf.start();
    // 300 ms is raised to the 1 s minimum.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        resync_log.lock().clone(),
        ["add ns/a 5 initial"],
        "no resync before 1 s"
    );
    let got = log_reaches(&resync_log, 2).await;
    assert_eq!(got, ["add ns/a 5 initial", "update ns/a 5->5"]);
    assert_eq!(
        quiet_log.lock().clone(),
        ["add ns/a 5 initial"],
        "no resync period: no resync"
    );
    assert_eq!(
        default_log.lock().clone(),
        ["add ns/a 5 initial"],
        "30 s period: not due yet"
    );
    inf.shutdown().await;
}

#[tokio::test]
async fn informer_without_resync_period_resyncs_no_handler() {
    let lw = MockLw::new();
    lw.list(Ok(page("5", None, vec![cm("ns", "a", "5")])));
    let inf = informer(&lw);
    let (rec, log) = recorder();
    inf.add_event_handler_with_resync_period(rec, Duration::from_secs(1))
        .unwrap();
    inf.start();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(log.lock().clone(), ["add ns/a 5 initial"]);
    inf.shutdown().await;
}

#[test]
fn resync_period_below_one_second_is_raised_and_lowers_the_check_period_before_start() {
    let lw = MockLw::new();
    let inf = SharedIndexInformer::new(
        lw,
        InformerConfig::default().resync_period(Duration::from_secs(30)),
    );
    let (r, _) = recorder();
    inf.add_event_handler_with_resync_period(r, Duration::from_millis(10))
        .unwrap();
    assert_eq!(
        inf.inner.state.lock().resync_check_period,
        Duration::from_secs(1)
    );
}

#[tokio::test]
async fn filtering_handler_translates_updates_by_whether_old_and_new_pass() {
    let lw = MockLw::new();
    lw.list(Ok(page("1", None, vec![cm("ns", "a", "1")])));
    let tx = lw.watch_channel();
    let inf = informer(&lw);
    let (rec, log) = recorder();
    // Passes when the data value's resourceVersion number is even.
    let even = |o: &ConfigMap| {
        o.data
            .as_ref()
            .and_then(|d| d.get("v"))
            .and_then(|v| v.parse::<u32>().ok())
            .is_some_and(|v| v % 2 == 0)
    };
    inf.add_event_handler(FilteringResourceEventHandler::new(even, rec))
        .unwrap();
    inf.start();
    for ev in [
        WatchEvent::Modified(cm("ns", "a", "2")), // fail -> pass: add
        WatchEvent::Modified(cm("ns", "a", "4")), // pass -> pass: update
        WatchEvent::Modified(cm("ns", "a", "5")), // pass -> fail: delete (of the old object)
        WatchEvent::Modified(cm("ns", "a", "7")), // fail -> fail: nothing
        WatchEvent::Deleted(cm("ns", "a", "9")),  // fails: nothing
        WatchEvent::Added(cm("ns", "b", "10")),   // passes: add
    ] {
        tx.send(Ok(ev)).unwrap();
    }
    assert_eq!(
        log_reaches(&log, 4).await,
        [
            "add ns/a 2",
            "update ns/a 2->4",
            "delete ns/a 4",
            "add ns/b 10"
        ]
    );
    inf.shutdown().await;
}

#[tokio::test]
async fn removed_handler_receives_nothing_more() {
    let lw = MockLw::new();
    lw.list(Ok(page("1", None, vec![cm("ns", "a", "1")])));
    let tx = lw.watch_channel();
    let inf = informer(&lw);
    let (rec, log) = recorder();
    let (other, other_log) = recorder();
    let reg = inf.add_event_handler(rec).unwrap();
    inf.add_event_handler(other).unwrap();
    inf.start();
    log_reaches(&log, 1).await;
    reg.remove();
    tx.send(Ok(WatchEvent::Modified(cm("ns", "a", "2"))))
        .unwrap();
    log_reaches(&other_log, 2).await;
    assert_eq!(log.lock().clone(), ["add ns/a 1 initial"]);
    reg.remove(); // harmless twice
    inf.shutdown().await;
}

#[tokio::test]
async fn slow_handler_does_not_delay_a_fast_one() {
    const N: usize = 100;
    let lw = MockLw::new();
    lw.list(Ok(page("1", None, vec![])));
    let tx = lw.watch_channel();
    let inf = informer(&lw);
    let slow = ResourceEventHandlerFuncs::new().on_add(|_: &Arc<ConfigMap>, _| {
        std::thread::sleep(Duration::from_millis(50));
    });
    // It blocks: it gets its own thread, as documented.
    let slow_reg = inf
        .add_event_handler_with_options(slow, HandlerOptions::default().dedicated_thread())
        .unwrap();
    let (fast, fast_log) = recorder();
    inf.add_event_handler(fast).unwrap();
    inf.start();
    assert!(inf.wait_for_cache_sync().await);
    let started = tokio::time::Instant::now();
    for i in 0..N {
        tx.send(Ok(WatchEvent::Added(cm(
            "ns",
            &format!("o{i}"),
            &(i + 2).to_string(),
        ))))
        .unwrap();
    }
    eventually("fast handler saw every event", || {
        fast_log.lock().len() == N
    })
    .await;
    let took = started.elapsed();
    // The slow handler needs 5 s for these; the fast one must not wait for it. Stated bound:
    // half the slow handler's time (generous for a loaded 2-core CI machine; unloaded it takes
    // a few milliseconds).
    assert!(
        took < Duration::from_millis(2500),
        "fast handler took {took:?}"
    );
    assert!(
        slow_reg.pending() > N / 2,
        "slow handler should still be behind: {}",
        slow_reg.pending()
    );
    inf.shutdown().await;
}

/// Records the name of the thread each call runs on.
struct ThreadNames(Arc<Mutex<Vec<String>>>);

impl ResourceEventHandler<ConfigMap> for ThreadNames {
    fn on_add(&mut self, _: &Arc<ConfigMap>, _: bool) {
        let name = std::thread::current().name().unwrap_or("").to_owned();
        self.0.lock().push(name);
    }
}

#[tokio::test]
async fn handlers_share_one_handler_thread_unless_they_ask_for_their_own() {
    let lw = MockLw::new();
    lw.list(Ok(page("1", None, vec![cm("ns", "a", "1")])));
    let inf = informer(&lw);
    let shared: Vec<_> = (0..3).map(|_| Arc::new(Mutex::new(Vec::new()))).collect();
    for names in &shared {
        inf.add_event_handler(ThreadNames(names.clone())).unwrap();
    }
    let own = Arc::new(Mutex::new(Vec::new()));
    inf.add_event_handler_with_options(
        ThreadNames(own.clone()),
        HandlerOptions::default().dedicated_thread(),
    )
    .unwrap();
    inf.start();
    eventually("every handler called", || {
        shared.iter().chain([&own]).all(|n| n.lock().len() == 1)
    })
    .await;
    let shared_threads: Vec<String> = shared.iter().map(|n| n.lock()[0].clone()).collect();
    assert_eq!(shared_threads, ["informer-ConfigMap-handlers"; 3]);
    assert!(
        own.lock()[0].starts_with("informer-ConfigMap-handler-"),
        "{:?}",
        own.lock()
    );
    inf.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handlers_run_outside_any_runtime_so_blocking_bridges_work() {
    let lw = MockLw::new();
    lw.list(Ok(page("1", None, vec![cm("ns", "a", "1")])));
    let inf = informer(&lw);
    let (tx, mut rx) = tokio::sync::mpsc::channel::<String>(1);
    // The usual way to hand events to async code from a synchronous handler; it panics
    // inside a runtime context.
    let bridge = ResourceEventHandlerFuncs::new().on_add(move |o: &Arc<ConfigMap>, _| {
        tx.blocking_send(o.metadata.name.clone().unwrap_or_default())
            .unwrap();
    });
    inf.add_event_handler(bridge).unwrap();
    inf.start();
    let got = tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .expect("handler never sent: likely deadlocked, or it panicked");
    assert_eq!(got.as_deref(), Some("a"));
    inf.shutdown().await;
}

#[tokio::test]
async fn shutdown_with_a_backlog_leaves_nothing_pending_and_refuses_new_handlers() {
    let lw = MockLw::new();
    let objs: Vec<_> = (0..200).map(|i| cm("ns", &format!("o{i}"), "1")).collect();
    lw.list(Ok(page("1", None, objs)));
    let inf = informer(&lw);
    let slow = ResourceEventHandlerFuncs::new().on_add(|_: &Arc<ConfigMap>, _| {
        std::thread::sleep(Duration::from_millis(1));
    });
    let reg = inf.add_event_handler(slow).unwrap();
    inf.start();
    assert!(inf.wait_for_cache_sync().await);
    assert!(reg.pending() > 0, "the handler should still be behind");
    tokio::time::timeout(Duration::from_secs(5), inf.shutdown())
        .await
        .expect("shutdown: likely deadlocked");
    assert_eq!(
        reg.pending(),
        0,
        "notifications dropped at shutdown still counted"
    );
    assert!(matches!(
        inf.add_event_handler(ResourceEventHandlerFuncs::new()),
        Err(InformerError::Stopped)
    ));
}

#[test]
fn handler_registered_outside_a_runtime_is_called_once_the_informer_runs() {
    let lw = MockLw::new();
    lw.list(Ok(page("1", None, vec![cm("ns", "a", "1")])));
    let inf = informer(&lw);
    let (rec, log) = recorder();
    // No runtime here: handlers run on the informer's own handler thread.
    inf.add_event_handler(rec).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        inf.start();
        assert!(inf.wait_for_cache_sync().await);
        assert_eq!(log_reaches(&log, 1).await, ["add ns/a 1 initial"]);
        tokio::time::timeout(Duration::from_secs(5), inf.shutdown())
            .await
            .expect("shutdown: likely deadlocked");
    });
}

#[tokio::test]
async fn handler_added_from_a_plain_thread_after_start_is_replayed_the_cache() {
    let lw = MockLw::new();
    lw.list(Ok(page("1", None, vec![cm("ns", "a", "1")])));
    let inf = informer(&lw);
    inf.start();
    assert!(inf.wait_for_cache_sync().await);
    let (rec, log) = recorder();
    let i2 = inf.clone();
    std::thread::spawn(move || i2.add_event_handler(rec).map(drop))
        .join()
        .unwrap()
        .unwrap();
    assert_eq!(log_reaches(&log, 1).await, ["add ns/a 1 initial"]);
    inf.shutdown().await;
}

#[tokio::test]
async fn panicking_handler_does_not_stop_the_informer() {
    let lw = MockLw::new();
    lw.list(Ok(page("1", None, vec![cm("ns", "a", "1")])));
    let tx = lw.watch_channel();
    let inf = informer(&lw);
    let (rec, log) = recorder();
    let mut first = true;
    let panicker_log = log.clone();
    let panicker = ResourceEventHandlerFuncs::new()
        .on_add(move |_: &Arc<ConfigMap>, _| {
            if std::mem::take(&mut first) {
                panic!("handler bug");
            }
        })
        .on_update(move |_, new: &Arc<ConfigMap>| {
            panicker_log.lock().push(format!(
                "panicker saw {}",
                new.metadata.resource_version.as_deref().unwrap()
            ));
        });
    inf.add_event_handler(panicker).unwrap();
    inf.add_event_handler(rec).unwrap();
    inf.start();
    assert!(inf.wait_for_cache_sync().await);
    tx.send(Ok(WatchEvent::Modified(cm("ns", "a", "2"))))
        .unwrap();
    let mut got = log_reaches(&log, 3).await;
    got.sort();
    assert_eq!(
        got,
        ["add ns/a 1 initial", "panicker saw 2", "update ns/a 1->2"]
    );
    assert!(!inf.is_stopped());
    inf.shutdown().await;
}

/// A handler whose drop is observable: dropped only when its thread has ended.
struct DropFlag(Arc<AtomicBool>);
impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}
impl ResourceEventHandler<ConfigMap> for DropFlag {}

/// Registers two handlers, on the shared handler thread and on a dedicated one, each with a
/// flag set once the handler is dropped (its thread has let it go).
fn drop_flagged_handlers(
    inf: &SharedIndexInformer<ConfigMap>,
) -> (Arc<AtomicBool>, Arc<AtomicBool>) {
    let dropped = Arc::new(AtomicBool::new(false));
    inf.add_event_handler(DropFlag(dropped.clone())).unwrap();
    let dropped_thread = Arc::new(AtomicBool::new(false));
    inf.add_event_handler_with_options(
        DropFlag(dropped_thread.clone()),
        HandlerOptions::default().dedicated_thread(),
    )
    .unwrap();
    (dropped, dropped_thread)
}

#[tokio::test]
async fn shutdown_leaves_no_task_or_handler_thread_running() {
    let lw = MockLw::new();
    lw.list(Ok(page("1", None, vec![cm("ns", "a", "1")])));
    let inf = informer(&lw);
    let (dropped, dropped_thread) = drop_flagged_handlers(&inf);
    let mut stream = inf.subscribe().unwrap();
    inf.start();
    assert!(inf.wait_for_cache_sync().await);
    tokio::time::timeout(Duration::from_secs(5), inf.shutdown())
        .await
        .expect("shutdown: likely deadlocked");
    assert!(inf.is_stopped());
    assert!(
        dropped.load(Ordering::SeqCst),
        "handler task still running after shutdown"
    );
    assert!(
        dropped_thread.load(Ordering::SeqCst),
        "handler thread still running after shutdown"
    );
    // The reflector's task is gone: no further requests.
    let n = lw.requests().len();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(lw.requests().len(), n);
    // Streams end.
    let rest: Vec<_> =
        tokio::time::timeout(Duration::from_secs(5), stream.by_ref().collect::<Vec<_>>())
            .await
            .expect("stream did not end: likely deadlocked");
    assert!(rest.len() <= 1);
    assert!(matches!(
        inf.add_event_handler(recorder().0),
        Err(InformerError::Stopped)
    ));
}

#[tokio::test]
async fn shutdown_of_an_informer_never_started_joins_its_handlers() {
    let inf = informer(&MockLw::new());
    let dropped = Arc::new(AtomicBool::new(false));
    inf.add_event_handler(DropFlag(dropped.clone())).unwrap();
    inf.shutdown().await;
    assert!(dropped.load(Ordering::SeqCst));
    assert!(inf.is_stopped());
    assert!(!inf.wait_for_cache_sync().await);
}

#[tokio::test]
async fn registration_has_synced_once_its_initial_adds_are_handled() {
    let lw = MockLw::new();
    lw.list(Ok(page(
        "3",
        None,
        vec![cm("ns", "a", "1"), cm("ns", "b", "2"), cm("ns", "c", "3")],
    )));
    let inf = informer(&lw);
    let gate = Arc::new(AtomicBool::new(false));
    let g = gate.clone();
    let slow = ResourceEventHandlerFuncs::new().on_add(move |_: &Arc<ConfigMap>, _| {
        while !g.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    let reg = inf
        .add_event_handler_with_options(slow, HandlerOptions::default().dedicated_thread())
        .unwrap();
    assert!(!reg.has_synced());
    inf.start();
    assert!(inf.wait_for_cache_sync().await);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !reg.has_synced(),
        "informer synced but the handler has not handled its adds"
    );
    assert_eq!(reg.pending(), 3);
    gate.store(true, Ordering::SeqCst);
    eventually("registration synced", || reg.has_synced()).await;
    assert_eq!(reg.pending(), 0);
    inf.shutdown().await;
}

#[tokio::test]
async fn subscribe_streams_the_same_events() {
    let lw = MockLw::new();
    lw.list(Ok(page("5", None, vec![cm("ns", "a", "5")])));
    let tx = lw.watch_channel();
    let inf = informer(&lw);
    let mut stream = inf.subscribe().unwrap();
    inf.start();
    tx.send(Ok(WatchEvent::Modified(cm("ns", "a", "6"))))
        .unwrap();
    tx.send(Ok(WatchEvent::Deleted(cm("ns", "a", "7"))))
        .unwrap();
    let mut got = Vec::new();
    for _ in 0..3 {
        let ev = tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .expect("stream: likely deadlocked")
            .expect("stream ended early");
        got.push(describe(&ev));
    }
    assert_eq!(
        got,
        ["add ns/a 5 initial", "update ns/a 5->6", "delete ns/a 7"]
    );
    eventually("stream registration synced", || {
        stream.registration().has_synced()
    })
    .await;
    inf.shutdown().await;
    assert!(
        stream.next().await.is_none(),
        "stream ends when the informer stops"
    );
}

#[tokio::test]
async fn dropping_a_stream_unsubscribes() {
    let lw = MockLw::new();
    let inf = informer(&lw);
    let stream = inf.subscribe().unwrap();
    assert_eq!(inf.inner.processor.all().len(), 1);
    drop(stream);
    assert_eq!(inf.inner.processor.all().len(), 0);
}

#[tokio::test]
async fn transform_and_error_handler_can_only_be_set_before_start() {
    let lw = MockLw::new();
    lw.list(Ok(page(
        "5",
        None,
        vec![{
            let mut o = cm("ns", "a", "5");
            o.metadata.managed_fields = Some(vec![Default::default()]);
            o
        }],
    )));
    let inf = informer(&lw);
    inf.set_transform(crate::strip_managed_fields_transform())
        .unwrap();
    inf.set_watch_error_handler(Arc::new(|_| {})).unwrap();
    inf.start();
    assert!(inf.wait_for_cache_sync().await);
    assert!(
        inf.lister()
            .get_by_key("ns/a")
            .unwrap()
            .metadata
            .managed_fields
            .is_none()
    );
    assert!(matches!(
        inf.set_transform(crate::strip_managed_fields_transform()),
        Err(InformerError::AlreadyStarted)
    ));
    assert!(matches!(
        inf.set_watch_error_handler(Arc::new(|_| {})),
        Err(InformerError::AlreadyStarted)
    ));
    inf.shutdown().await;
}

#[tokio::test]
async fn add_indexers_after_start_indexes_existing_objects() {
    let lw = MockLw::new();
    lw.list(Ok(page(
        "5",
        None,
        vec![cm("ns", "a", "4"), cm("other", "b", "5")],
    )));
    let inf = informer(&lw);
    let by_rv: crate::store::IndexFn<ConfigMap> =
        Arc::new(|o: &ConfigMap| vec![o.metadata.resource_version.clone().unwrap_or_default()]);
    inf.start();
    assert!(inf.wait_for_cache_sync().await);
    inf.add_indexers([("rv".to_owned(), by_rv.clone())].into())
        .unwrap();
    let hits = inf.indexer().by_index("rv", "5").unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].metadata.name.as_deref(), Some("b"));
    assert!(matches!(
        inf.add_indexers([("rv".to_owned(), by_rv)].into()),
        Err(InformerError::Index(_))
    ));
    inf.shutdown().await;
}

#[tokio::test]
async fn listers_read_by_namespace_and_label_selector() {
    let lw = MockLw::new();
    let mut labelled = cm("ns", "a", "1");
    labelled.metadata.labels = Some(BTreeMap::from([("app".to_owned(), "web".to_owned())]));
    lw.list(Ok(page(
        "3",
        None,
        vec![labelled, cm("ns", "b", "2"), cm("other", "c", "3")],
    )));
    let inf = informer(&lw);
    inf.start();
    assert!(inf.wait_for_cache_sync().await);
    let lister = inf.lister();
    let web = crate::parse_label_selector("app=web").unwrap();
    assert_eq!(lister.list(&Default::default()).len(), 3);
    assert_eq!(lister.list(&web).len(), 1);
    assert_eq!(lister.namespaced("ns").list(&Default::default()).len(), 2);
    assert_eq!(lister.namespaced("ns").list(&web).len(), 1);
    assert!(lister.namespaced("ns").get("b").is_some());
    assert!(lister.namespaced("other").get("b").is_none());
    inf.shutdown().await;
}

#[tokio::test]
async fn watch_error_handler_is_called_and_informer_recovers() {
    let lw = MockLw::new();
    lw.list(Err(api_error(403, "Forbidden", "no")))
        .list(Ok(page("1", None, vec![cm("ns", "a", "1")])));
    let inf = informer(&lw);
    let errors = Arc::new(Mutex::new(Vec::new()));
    let e = errors.clone();
    inf.set_watch_error_handler(Arc::new(move |err| e.lock().push(err.to_string())))
        .unwrap();
    inf.start();
    assert!(inf.wait_for_cache_sync().await);
    assert_eq!(errors.lock().len(), 1);
    lw.wait_for("a watch", |rs| rs.iter().any(is_watch)).await;
    inf.shutdown().await;
}

#[test]
fn public_handles_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<SharedIndexInformer<ConfigMap>>();
    check::<ResourceEventHandlerRegistration<ConfigMap>>();
    check::<crate::Lister<ConfigMap>>();
    check::<crate::SharedInformerFactory>();
    check::<crate::Indexer<ConfigMap>>();
    check::<crate::DeltaFifo<ConfigMap>>();
    fn check_send<T: Send>() {}
    check_send::<EventStream<ConfigMap>>();
    fn future_is_send<F: std::future::Future + Send>(_: F) {}
    let inf = informer(&MockLw::new());
    future_is_send(inf.run());
    future_is_send(inf.shutdown());
    future_is_send(inf.wait_for_cache_sync());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounded_buffer_applies_back_pressure_and_loses_nothing() {
    const N: usize = 60;
    const CAP: usize = 5;
    let lw = MockLw::new();
    lw.list(Ok(page("1", None, vec![])));
    let tx = lw.watch_channel();
    let inf = informer(&lw);
    let (rec, log) = recorder();
    let max_pending = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = max_pending.clone();
    // The slow handler samples its own backlog while it works.
    let reg_slot: Arc<Mutex<Option<ResourceEventHandlerRegistration<ConfigMap>>>> = Arc::default();
    let slot = reg_slot.clone();
    let slow = ResourceEventHandlerFuncs::new().on_add(move |_: &Arc<ConfigMap>, _| {
        if let Some(r) = slot.lock().as_ref() {
            seen.fetch_max(r.pending(), Ordering::SeqCst);
        }
        std::thread::sleep(Duration::from_millis(5));
    });
    let reg = inf
        .add_event_handler_with_options(slow, HandlerOptions::default().bounded_buffer(CAP))
        .unwrap();
    *reg_slot.lock() = Some(ResourceEventHandlerRegistration::new(
        reg.listener_for_tests(),
        Arc::downgrade(&inf.inner),
    ));
    inf.add_event_handler(rec).unwrap();
    inf.start();
    assert!(inf.wait_for_cache_sync().await);
    for i in 0..N {
        tx.send(Ok(WatchEvent::Added(cm(
            "ns",
            &format!("o{i}"),
            &(i + 2).to_string(),
        ))))
        .unwrap();
    }
    eventually("every event reached the unbounded handler", || {
        log.lock().len() == N
    })
    .await;
    eventually("the bounded handler drained", || reg.pending() == 0).await;
    let max = max_pending.load(Ordering::SeqCst);
    // Buffered, plus the one being handled, plus one a blocked push has already counted.
    assert!(max <= CAP + 2, "bounded handler's backlog reached {max}");
    assert!(
        max >= CAP,
        "the bound was never reached ({max}); the test proves nothing"
    );
    let got = log.lock().clone();
    let want: Vec<_> = (0..N).map(|i| format!("add ns/o{i} {}", i + 2)).collect();
    assert_eq!(got, want, "order and completeness for the other handler");
    inf.shutdown().await;
}

// Exit paths and back-pressure (issue #11), registration identity and panic pauses (#18).

/// Waits for `f` with a deadline whose failure says what hung.
async fn within<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), f)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within 10 s: likely deadlocked"))
}

#[tokio::test]
async fn run_until_returns_once_the_signal_fires_and_ends_stopped() {
    let lw = MockLw::new();
    lw.list(Ok(page("1", None, vec![cm("ns", "a", "1")])));
    let inf = informer(&lw);
    let (rec, log) = recorder();
    inf.add_event_handler(rec).unwrap();
    within(
        "run_until",
        inf.run_until(tokio::time::sleep(Duration::from_millis(500))),
    )
    .await;
    assert_eq!(inf.lifecycle(), Lifecycle::Stopped);
    assert!(inf.is_stopped());
    assert_eq!(log.lock().clone(), ["add ns/a 1 initial"]);
    // Everything after is immediate and refuses new work.
    within("shutdown after run_until", inf.shutdown()).await;
    assert!(matches!(
        inf.add_event_handler(ResourceEventHandlerFuncs::new()),
        Err(InformerError::Stopped)
    ));
    assert!(within("wait_for_cache_sync after stop", inf.wait_for_cache_sync()).await);
}

#[tokio::test]
async fn run_until_a_signal_already_fired_joins_the_handlers_of_an_informer_that_never_ran() {
    // `run_until` polls the run and the signal in a random order; whichever comes first, the
    // handler threads must have ended when it returns.
    for round in 0..16 {
        let inf = informer(&MockLw::new());
        let (dropped, dropped_thread) = drop_flagged_handlers(&inf);
        within("run_until", inf.run_until(std::future::ready(()))).await;
        assert!(inf.is_stopped());
        assert!(
            dropped.load(Ordering::SeqCst),
            "round {round}: handler still running after run_until"
        );
        assert!(
            dropped_thread.load(Ordering::SeqCst),
            "round {round}: handler thread still running after run_until"
        );
    }
}

#[tokio::test]
async fn a_dropped_run_future_ends_stopped_and_shutdown_returns() {
    let lw = MockLw::new();
    lw.list(Ok(page("1", None, vec![cm("ns", "a", "1")])));
    let inf = informer(&lw);
    {
        let run = inf.run();
        tokio::pin!(run);
        // Drive it until it has synced, then drop it mid-run.
        tokio::select! {
            () = &mut run => panic!("run ended on its own"),
            synced = inf.wait_for_cache_sync() => assert!(synced),
        }
        assert_eq!(inf.lifecycle(), Lifecycle::Running);
    }
    assert_eq!(inf.lifecycle(), Lifecycle::Stopped);
    within("shutdown after a dropped run", inf.shutdown()).await;
}

#[tokio::test]
async fn shutdown_waits_for_a_run_driven_by_the_caller() {
    let lw = MockLw::new();
    lw.list(Ok(page("1", None, vec![])));
    let inf = informer(&lw);
    let run = tokio::spawn({
        let inf = inf.clone();
        async move { inf.run().await }
    });
    assert!(within("sync", inf.wait_for_cache_sync()).await);
    within("shutdown", inf.shutdown()).await;
    assert!(inf.is_stopped());
    within("run returns", run).await.unwrap();
}

#[tokio::test]
async fn a_panic_in_the_run_task_still_ends_stopped() {
    // A `ShouldResync` that panics runs inside the informer's own task (the reflector's resync
    // tick), standing for any bug there: the drop guard must still end the lifecycle.
    let lw = MockLw::new();
    lw.list(Ok(page("1", None, vec![cm("ns", "a", "1")])));
    let inf = informer(&lw);
    let fifo = Arc::new(DeltaFifo::<ConfigMap>::new(None));
    let guard = StopGuard {
        inner: inf.inner.clone(),
        fifo: queue::QueueHandle::Delta(fifo.clone()),
    };
    inf.inner.lifecycle.send_replace(Lifecycle::Running);
    let task = tokio::spawn(async move {
        let _guard = guard;
        panic!("a bug inside the run task");
    });
    assert!(task.await.unwrap_err().is_panic());
    assert_eq!(inf.lifecycle(), Lifecycle::Stopped);
    assert!(fifo.is_closed());
    within("shutdown after a panic", inf.shutdown()).await;
}

#[tokio::test]
async fn panics_in_transform_index_and_error_handler_are_caught_and_reported() {
    let lw = MockLw::new();
    lw.list(Ok(page(
        "1",
        None,
        vec![cm("ns", "a", "1"), cm("ns", "bad", "1")],
    )));
    let tx = lw.watch_channel();
    let inf = informer(&lw);
    let errors: Arc<Mutex<Vec<String>>> = Arc::default();
    let errs = errors.clone();
    inf.set_watch_error_handler(Arc::new(move |e| {
        errs.lock().push(e.to_string());
        panic!("the error handler itself panics");
    }))
    .unwrap();
    inf.set_transform(Arc::new(|o: ConfigMap| {
        assert!(o.metadata.name.as_deref() != Some("bad"), "transform bug");
        o
    }))
    .unwrap();
    inf.add_indexers(
        BTreeMap::from([(
            "by-value".to_owned(),
            Arc::new(|o: &ConfigMap| {
                let v = o.data.as_ref().and_then(|d| d.get("v")).cloned();
                assert!(v.as_deref() != Some("3"), "index function bug");
                v.into_iter().collect::<Vec<_>>()
            }) as crate::IndexFn<ConfigMap>,
        )])
        .into_iter()
        .collect(),
    )
    .unwrap();
    let (rec, log) = recorder();
    inf.add_event_handler(rec).unwrap();
    inf.start();
    assert!(within("sync", inf.wait_for_cache_sync()).await);
    // An object whose index function panics is still cached (and delivered), just not indexed.
    tx.send(Ok(WatchEvent::Added(cm("ns", "c", "3")))).unwrap();
    // The transform keeps panicking on `bad`: its update is reported and left out.
    tx.send(Ok(WatchEvent::Modified(cm("ns", "bad", "4"))))
        .unwrap();
    tx.send(Ok(WatchEvent::Added(cm("ns", "d", "5")))).unwrap();
    let got = log_reaches(&log, 3).await;
    assert_eq!(got, ["add ns/a 1 initial", "add ns/c 3", "add ns/d 5"]);
    assert!(inf.indexer().get_by_key("ns/c").is_some());
    assert!(inf.indexer().by_index("by-value", "3").unwrap().is_empty());
    assert_eq!(inf.indexer().by_index("by-value", "5").unwrap().len(), 1);
    assert!(inf.indexer().get_by_key("ns/bad").is_none());
    let errors = errors.lock().clone();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors
            .iter()
            .all(|e| e.contains("transform panicked on ns/bad")),
        "{errors:?}"
    );
    assert_eq!(inf.lifecycle(), Lifecycle::Running);
    inf.shutdown().await;
}

/// A bounded handler blocked on a gate; the rest of the informer must go on.
fn blocked_bounded_handler(
    inf: &SharedIndexInformer<ConfigMap>,
) -> (
    std::sync::mpsc::SyncSender<()>,
    Arc<std::sync::atomic::AtomicUsize>,
) {
    let (open, gate) = std::sync::mpsc::sync_channel::<()>(1000);
    let gate = Mutex::new(gate);
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = calls.clone();
    let inner = inf.clone();
    let slow = ResourceEventHandlerFuncs::new().on_add(move |_: &Arc<ConfigMap>, _| {
        // A bounded handler may ask the informer about itself without deadlocking.
        let _ = inner.has_synced();
        let _ = gate.lock().recv();
        seen.fetch_add(1, Ordering::SeqCst);
    });
    inf.add_event_handler_with_options(slow, HandlerOptions::default().bounded_buffer(1))
        .unwrap();
    (open, calls)
}

async fn full_bounded_buffer_never_blocks_the_runtime() {
    const N: usize = 50;
    let lw = MockLw::new();
    lw.list(Ok(page("1", None, vec![])));
    let tx = lw.watch_channel();
    let inf = informer(&lw);
    let (open, calls) = blocked_bounded_handler(&inf);
    let (rec, log) = recorder();
    inf.add_event_handler(rec).unwrap();
    inf.start();
    assert!(within("sync", inf.wait_for_cache_sync()).await);
    for i in 0..N {
        tx.send(Ok(WatchEvent::Added(cm(
            "ns",
            &format!("o{i}"),
            &(i + 2).to_string(),
        ))))
        .unwrap();
    }
    // With the bounded handler stuck on its first call and its buffer full, the watch is still
    // read to the end (the reflector runs), the FIFO holds the rest, and the informer answers.
    let last = (N + 1).to_string();
    eventually("the watch to be read to its end", || {
        inf.last_sync_resource_version() == last
    })
    .await;
    assert!(inf.has_synced());
    assert!(calls.load(Ordering::SeqCst) <= 1);
    // The other handler is held back (back-pressure is informer-wide), but nothing is lost.
    for _ in 0..N {
        open.send(()).unwrap();
    }
    eventually("every event reached both handlers", || {
        log.lock().len() == N && calls.load(Ordering::SeqCst) == N
    })
    .await;
    within("shutdown", inf.shutdown()).await;
}

#[tokio::test(flavor = "current_thread")]
async fn full_bounded_buffer_never_blocks_a_current_thread_runtime() {
    full_bounded_buffer_never_blocks_the_runtime().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_bounded_buffer_never_blocks_a_multi_thread_runtime() {
    full_bounded_buffer_never_blocks_the_runtime().await;
}

#[tokio::test(flavor = "current_thread")]
async fn shutdown_with_a_full_bounded_buffer_returns_and_accounts_for_everything() {
    let lw = MockLw::new();
    lw.list(Ok(page("1", None, vec![])));
    let tx = lw.watch_channel();
    let inf = informer(&lw);
    let (open, _calls) = blocked_bounded_handler(&inf);
    inf.start();
    assert!(within("sync", inf.wait_for_cache_sync()).await);
    for i in 0..5 {
        tx.send(Ok(WatchEvent::Added(cm("ns", &format!("o{i}"), "2"))))
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The handler is still stuck in its first call: shutdown must not wait on the delivery.
    let shutdown = tokio::spawn({
        let inf = inf.clone();
        async move { inf.shutdown().await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    open.send(()).unwrap();
    within("shutdown with a full bounded buffer", shutdown)
        .await
        .unwrap();
    assert!(inf.is_stopped());
}

#[tokio::test]
async fn removing_a_registration_through_another_informer_removes_nothing() {
    let lw1 = MockLw::new();
    let lw2 = MockLw::new();
    let inf1 = informer(&lw1);
    let inf2 = informer(&lw2);
    let reg1 = inf1
        .add_event_handler(ResourceEventHandlerFuncs::new())
        .unwrap();
    let (rec, log) = recorder();
    let reg2 = inf2.add_event_handler(rec).unwrap();
    assert!(matches!(
        inf2.remove_event_handler(&reg1),
        Err(InformerError::ForeignRegistration)
    ));
    lw2.list(Ok(page("1", None, vec![cm("ns", "a", "1")])));
    inf2.start();
    assert_eq!(log_reaches(&log, 1).await, ["add ns/a 1 initial"]);
    // Its own registration is removed, and removing again is harmless.
    inf2.remove_event_handler(&reg2).unwrap();
    inf2.remove_event_handler(&reg2).unwrap();
    inf1.remove_event_handler(&reg1).unwrap();
    inf1.shutdown().await;
    inf2.shutdown().await;
}

async fn panicking_handler_pauses_after_each_panic(options: HandlerOptions) {
    let lw = MockLw::new();
    lw.list(Ok(page(
        "3",
        None,
        vec![cm("ns", "a", "1"), cm("ns", "b", "2"), cm("ns", "c", "3")],
    )));
    let inf = informer(&lw);
    let calls: Arc<Mutex<Vec<std::time::Instant>>> = Arc::default();
    let seen = calls.clone();
    let poisoned = ResourceEventHandlerFuncs::new().on_add(move |_: &Arc<ConfigMap>, _| {
        seen.lock().push(std::time::Instant::now());
        panic!("poisoned handler");
    });
    let reg = inf
        .add_event_handler_with_options(poisoned, options)
        .unwrap();
    inf.start();
    eventually("all three calls", || calls.lock().len() == 3).await;
    let calls = calls.lock().clone();
    for pair in calls.windows(2) {
        assert!(
            pair[1] - pair[0] >= processor::PANIC_PAUSE - Duration::from_millis(50),
            "a panicking handler was called again after {:?}",
            pair[1] - pair[0]
        );
    }
    eventually("nothing left pending", || reg.pending() == 0).await;
    assert!(inf.has_synced());
    inf.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panicking_handler_on_the_shared_thread_pauses_and_loses_nothing() {
    panicking_handler_pauses_after_each_panic(HandlerOptions::default()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panicking_handler_on_its_own_thread_pauses_and_loses_nothing() {
    panicking_handler_pauses_after_each_panic(HandlerOptions::default().dedicated_thread()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_handler_does_not_hold_up_the_others_or_shutdown() {
    let lw = MockLw::new();
    lw.list(Ok(page("1", None, vec![cm("ns", "a", "1")])));
    let tx = lw.watch_channel();
    let inf = informer(&lw);
    inf.add_event_handler(
        ResourceEventHandlerFuncs::new().on_add(|_: &Arc<ConfigMap>, _| panic!("poisoned handler")),
    )
    .unwrap();
    let (rec, log) = recorder();
    inf.add_event_handler(rec).unwrap();
    inf.start();
    assert!(within("sync", inf.wait_for_cache_sync()).await);
    tx.send(Ok(WatchEvent::Added(cm("ns", "b", "2")))).unwrap();
    let started = std::time::Instant::now();
    assert_eq!(
        log_reaches(&log, 2).await,
        ["add ns/a 1 initial", "add ns/b 2"]
    );
    assert!(started.elapsed() < processor::PANIC_PAUSE);
    within("shutdown during a pause", inf.shutdown()).await;
}

// In-order informers (issue #14): what client-go 1.36+ runs.

fn in_order(lw: &MockLw) -> SharedIndexInformer<ConfigMap> {
    SharedIndexInformer::new(lw.clone(), fast_config().fifo_mode(FifoMode::InOrder))
}

fn gone_after_a_bookmark() -> WatchScript {
    WatchScript::Events(vec![
        Ok(WatchEvent::Bookmark {
            resource_version: "7".into(),
            initial_events_end: false,
        }),
        Ok(WatchEvent::Error(Box::new({
            let mut s = kube::core::Status::failure("too old", "Expired");
            s.code = 410;
            s
        }))),
    ])
}

/// A relist that changes `a`, keeps `b`, adds `c` and loses `d`, as each mode delivers it.
async fn relist_trace(mode: FifoMode) -> (Vec<String>, String) {
    let lw = MockLw::new();
    lw.list(Ok(page(
        "7",
        None,
        vec![cm("ns", "a", "5"), cm("ns", "b", "6"), cm("ns", "d", "7")],
    )))
    .watch(gone_after_a_bookmark())
    .list(Ok(page(
        "20",
        None,
        vec![cm("ns", "b", "6"), cm("ns", "a", "19"), cm("ns", "c", "20")],
    )));
    let inf = SharedIndexInformer::new(lw.clone(), fast_config().fifo_mode(mode));
    let (rec, log) = recorder();
    inf.add_event_handler(rec).unwrap();
    inf.start();
    let got = log_reaches(&log, 7).await;
    let rv = inf.last_store_sync_resource_version();
    inf.shutdown().await;
    (got, rv)
}

#[tokio::test]
async fn a_relist_in_delta_fifo_mode_delivers_per_key_in_queue_order() {
    let (got, rv) = relist_trace(FifoMode::DeltaFifo).await;
    assert_eq!(
        got,
        [
            "add ns/a 5 initial",
            "add ns/b 6 initial",
            "add ns/d 7 initial",
            // Replaced deltas in list order (b unchanged: a same-version update, which reaches
            // this listener since an informer without resync never marks it not syncing, as
            // in client-go), then the tombstone of the known key the list lacks.
            "update ns/b 6->6",
            "update ns/a 5->19",
            "add ns/c 20",
            "tombstone ns/d 7",
        ]
    );
    assert_eq!(rv, "", "no store resourceVersion without the in-order FIFO");
}

#[tokio::test]
async fn a_relist_in_in_order_mode_replaces_the_store_then_tombstones_then_list_order() {
    let (got, rv) = relist_trace(FifoMode::InOrder).await;
    assert_eq!(
        got,
        [
            "add ns/a 5 initial",
            "add ns/b 6 initial",
            "add ns/d 7 initial",
            // client-go processReplacedAllInfo: deletions first, then updates and adds in list
            // order (b unchanged: a same-version update, as in delta mode).
            "tombstone ns/d 7",
            "update ns/b 6->6",
            "update ns/a 5->19",
            "add ns/c 20",
        ]
    );
    assert_eq!(rv, "20");
}

#[tokio::test]
async fn in_order_handlers_see_the_cache_as_replaced_and_batches_after_commit() {
    let lw = MockLw::new();
    lw.list(Ok(page("1", None, vec![cm("ns", "a", "1")])));
    let tx = lw.watch_channel();
    let inf = in_order(&lw);
    let lister = inf.lister();
    let seen: Arc<Mutex<Vec<(String, usize, String)>>> = Arc::default();
    let s = seen.clone();
    let store = inf.indexer();
    inf.add_event_handler(
        ResourceEventHandlerFuncs::new().on_add(move |o: &Arc<ConfigMap>, _| {
            s.lock().push((
                crate::key_of(o).unwrap().to_string(),
                lister.list(&Default::default()).len(),
                store.last_store_sync_resource_version(),
            ));
        }),
    )
    .unwrap();
    // Queued before the informer pops them: they form one batch.
    for (i, name) in ["b", "c", "d"].into_iter().enumerate() {
        tx.send(Ok(WatchEvent::Added(cm("ns", name, &(i + 2).to_string()))))
            .unwrap();
    }
    inf.start();
    eventually("four adds", || seen.lock().len() == 4).await;
    let seen = seen.lock().clone();
    assert_eq!(seen[0].0, "ns/a");
    // The three adds came in one batch: their handlers ran after all three were committed, in
    // one transaction whose version is the batch's last.
    for (i, (key, cached, rv)) in seen[1..].iter().enumerate() {
        assert_eq!(key, &format!("ns/{}", ["b", "c", "d"][i]));
        assert_eq!((*cached, rv.as_str()), (4, "4"), "{seen:?}");
    }
    inf.shutdown().await;
}

#[tokio::test]
async fn in_order_bookmarks_advance_the_store_version_and_call_no_handler() {
    let lw = MockLw::new();
    lw.list(Ok(page("3", None, vec![cm("ns", "a", "3")])));
    let tx = lw.watch_channel();
    let inf = in_order(&lw);
    let (rec, log) = recorder();
    inf.add_event_handler(rec).unwrap();
    inf.start();
    assert!(inf.wait_for_cache_sync().await);
    assert_eq!(inf.last_store_sync_resource_version(), "3");
    tx.send(Ok(WatchEvent::Bookmark {
        resource_version: "9".into(),
        initial_events_end: false,
    }))
    .unwrap();
    eventually("the bookmark applied", || {
        inf.last_store_sync_resource_version() == "9"
    })
    .await;
    // A delete of a key the cache never had still reaches the handlers, as client-go's
    // RealFIFO delivers it.
    tx.send(Ok(WatchEvent::Deleted(cm("ns", "ghost", "10"))))
        .unwrap();
    assert_eq!(
        log_reaches(&log, 2).await,
        ["add ns/a 3 initial", "delete ns/ghost 10"]
    );
    assert_eq!(inf.last_store_sync_resource_version(), "10");
    inf.shutdown().await;
}

#[tokio::test]
async fn in_order_resync_is_one_sync_all_delivered_only_to_due_listeners() {
    let lw = MockLw::new();
    lw.list(Ok(page(
        "5",
        None,
        vec![cm("ns", "a", "5"), cm("ns", "b", "5")],
    )));
    let inf = SharedIndexInformer::new(
        lw.clone(),
        fast_config()
            .fifo_mode(FifoMode::InOrder)
            .resync_period(Duration::from_secs(30)),
    );
    let (resyncing, resync_log) = recorder();
    let (quiet, quiet_log) = recorder();
    inf.add_event_handler_with_resync_period(resyncing, Duration::from_secs(1))
        .unwrap();
    inf.add_event_handler_with_resync_period(quiet, Duration::ZERO)
        .unwrap();
    inf.start();
    let mut got = log_reaches(&resync_log, 4).await;
    got.sort();
    assert_eq!(
        got,
        [
            "add ns/a 5 initial",
            "add ns/b 5 initial",
            "update ns/a 5->5",
            "update ns/b 5->5"
        ]
    );
    assert_eq!(quiet_log.lock().len(), 2);
    inf.shutdown().await;
}

#[tokio::test]
async fn in_order_late_handler_and_undecodable_objects_behave_as_in_delta_fifo_mode() {
    let lw = MockLw::new();
    lw.list(Ok(page("5", None, vec![cm("ns", "a", "5")])));
    let tx = lw.watch_channel();
    let inf = in_order(&lw);
    inf.start();
    assert!(inf.wait_for_cache_sync().await);
    let (rec, log) = recorder();
    let reg = inf.add_event_handler(rec).unwrap();
    assert_eq!(log_reaches(&log, 1).await, ["add ns/a 5 initial"]);
    eventually("the late handler synced", || reg.has_synced()).await;
    let line = br#"{"type":"MODIFIED","object":{"metadata":{"name":"a","namespace":"ns","resourceVersion":"6"},"data":7}}"#;
    let err = crate::reflector::decode::decode_watch_event::<ConfigMap>(line).unwrap_err();
    let u = crate::reflector::decode::undecodable_event(line, err).unwrap();
    tx.send(Err(crate::reflector::ListWatchError::Undecodable(
        Box::new(u),
    )))
    .unwrap();
    assert_eq!(
        log_reaches(&log, 2).await,
        ["add ns/a 5 initial", "tombstone ns/a 5"]
    );
    assert!(inf.indexer().is_empty());
    assert_eq!(inf.last_store_sync_resource_version(), "6");
    inf.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shut_down_event_handler_returns_once_the_handler_runs_no_more() {
    for dedicated in [false, true] {
        let lw = MockLw::new();
        lw.list(Ok(page("1", None, vec![cm("ns", "a", "1")])));
        let inf = informer(&lw);
        let (entered_tx, entered_rx) = std::sync::mpsc::channel::<()>();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let release_rx = Mutex::new(release_rx);
        let dropped = Arc::new(AtomicBool::new(false));
        let flag = DropFlag(dropped.clone());
        let handler = ResourceEventHandlerFuncs::new().on_add(move |_: &Arc<ConfigMap>, _| {
            let _keep = &flag;
            entered_tx.send(()).unwrap();
            release_rx.lock().recv().unwrap();
        });
        let options = if dedicated {
            HandlerOptions::default().dedicated_thread()
        } else {
            HandlerOptions::default()
        };
        let reg = inf
            .add_event_handler_with_options(handler, options)
            .unwrap();
        inf.start();
        tokio::task::spawn_blocking(move || entered_rx.recv().unwrap())
            .await
            .unwrap();
        // The handler is inside a call: the shutdown must wait for it.
        let shut = tokio::spawn({
            let inf = inf.clone();
            async move { inf.shut_down_event_handler(&reg).await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            !shut.is_finished(),
            "returned while the handler was running"
        );
        release_tx.send(()).unwrap();
        within("shut_down_event_handler", shut)
            .await
            .unwrap()
            .unwrap();
        assert!(
            dropped.load(Ordering::SeqCst),
            "the handler is dropped by then"
        );
        inf.shutdown().await;
    }
}

#[tokio::test]
async fn shut_down_of_a_subscription_and_of_a_foreign_registration() {
    let lw = MockLw::new();
    let inf = informer(&lw);
    let other = informer(&MockLw::new());
    let stream = inf.subscribe().unwrap();
    let foreign = other
        .add_event_handler(ResourceEventHandlerFuncs::new())
        .unwrap();
    assert!(matches!(
        inf.shut_down_event_handler(&foreign).await,
        Err(InformerError::ForeignRegistration)
    ));
    within(
        "shut down a stream's registration",
        inf.shut_down_event_handler(stream.registration()),
    )
    .await
    .unwrap();
    within("shut down again", other.shut_down_event_handler(&foreign))
        .await
        .unwrap();
}

#[tokio::test]
async fn informers_are_named_by_config_else_by_target_else_by_type() {
    // A lister-watcher that tells nothing: the type names it, without module paths.
    let custom = SharedIndexInformer::new(MockLw::new(), InformerConfig::default());
    assert_eq!(custom.name(), "ConfigMap");
    let server = crate::testing::FakeApiServer::start_with_core()
        .await
        .unwrap();
    let api = kube::Api::<ConfigMap>::namespaced(server.client(), "prod");
    let metadata = SharedIndexInformer::new(
        crate::reflector::ApiListerWatcher::metadata(api.clone()),
        InformerConfig::default(),
    );
    assert_eq!(metadata.name(), "v1/configmaps");
    let named = SharedIndexInformer::new(
        crate::reflector::ApiListerWatcher::new(api),
        InformerConfig::default().name("web config"),
    );
    assert_eq!(named.name(), "web config");
}

/// A start that lands after `wait_for_cache_sync` has looked for the FIFO and before it waits
/// for a lifecycle change must still wake it: a lost wake-up there once left a CI run waiting
/// until its timeout. The hook starts the informer in exactly that window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_cache_sync_sees_a_start_between_its_look_and_its_wait() {
    let lw = MockLw::new();
    lw.list(Ok(page("1", None, vec![cm("ns", "a", "1")])));
    let inf = informer(&lw);
    let started = inf.clone();
    *inf.inner.after_no_fifo.lock() = Some(Box::new(move || {
        started.start();
        // The start is complete (its FIFO set, `Running` sent) before the wait goes on.
        while started.lifecycle() == Lifecycle::NotStarted {
            std::thread::sleep(Duration::from_millis(1));
        }
    }));
    let synced = tokio::time::timeout(Duration::from_secs(5), inf.wait_for_cache_sync())
        .await
        .expect("the start was missed: wait_for_cache_sync still waits");
    assert!(synced);
    inf.shutdown().await;
}

/// A handler whose `on_add` and drop are slow and whose drop (its thread's end) sets a flag, to
/// show the stop waited for its thread.
struct SlowHandler(Arc<AtomicBool>);

impl ResourceEventHandler<ConfigMap> for SlowHandler {
    fn on_add(&mut self, _: &Arc<ConfigMap>, _: bool) {
        std::thread::sleep(Duration::from_millis(200));
    }
}

impl Drop for SlowHandler {
    fn drop(&mut self) {
        // Its thread ends a little after its queue closes.
        std::thread::sleep(Duration::from_millis(50));
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A handler that, on its first add, runs `first` and then blocks on `inf`'s `shutdown`; the
/// flag says the shutdown returned.
fn shutting_down_handler<F: Fn(&SharedIndexInformer<ConfigMap>) + Send + 'static>(
    inf: &SharedIndexInformer<ConfigMap>,
    first: F,
) -> (
    impl ResourceEventHandler<ConfigMap> + use<F>,
    Arc<AtomicBool>,
) {
    let returned = Arc::new(AtomicBool::new(false));
    let (inf, flag) = (inf.clone(), returned.clone());
    let rt = tokio::runtime::Handle::current();
    let handler = ResourceEventHandlerFuncs::new().on_add(move |_: &Arc<ConfigMap>, _| {
        first(&inf);
        rt.block_on(inf.shutdown());
        flag.store(true, Ordering::SeqCst);
    });
    (handler, returned)
}

/// Starts `inf`, waits until a handler says it has entered a call, then removes `reg`.
async fn start_then_remove_once_entered(
    inf: &SharedIndexInformer<ConfigMap>,
    reg: &ResourceEventHandlerRegistration<ConfigMap>,
    entered: std::sync::mpsc::Receiver<()>,
) {
    inf.start();
    tokio::task::spawn_blocking(move || entered.recv().unwrap())
        .await
        .unwrap();
    inf.remove_event_handler(reg).unwrap();
}

/// An informer (not started) whose list holds one object and whose watch then stays open.
fn listing_one_then_watching() -> (MockLw, SharedIndexInformer<ConfigMap>) {
    let lw = MockLw::new();
    lw.list(Ok(page("1", None, vec![cm("ns", "a", "1")])));
    lw.watch_channel();
    let inf = informer(&lw);
    (lw, inf)
}

/// A handler on the shared handler thread shuts another one there down, blocking on it: the
/// other cannot be mid-call (the thread is busy with the first), so waiting for it would wait
/// on the waiter. It returns, the other is called no more, and the informer's shutdown ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_thread_handler_may_shut_down_a_sibling() {
    let (_lw, inf) = listing_one_then_watching();
    let (sibling, log) = recorder();
    let reg = inf.add_event_handler(sibling).unwrap();
    let (rt, inf2) = (tokio::runtime::Handle::current(), inf.clone());
    let done = Arc::new(AtomicBool::new(false));
    let flag = done.clone();
    inf.add_event_handler(
        ResourceEventHandlerFuncs::new().on_add(move |_: &Arc<ConfigMap>, _| {
            rt.block_on(inf2.shut_down_event_handler(&reg)).unwrap();
            flag.store(true, Ordering::SeqCst);
        }),
    )
    .unwrap();
    inf.start();
    eventually("the sibling shut down", || done.load(Ordering::SeqCst)).await;
    within("shutdown", inf.shutdown()).await;
    assert!(log.lock().len() <= 1, "{:?}", log.lock());
}

/// A handler on the shared handler thread waits for another one there to finish before that
/// one is removed: the wait ends at the removal (the other cannot be mid-call), not never.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_thread_handler_may_wait_for_a_sibling_removed_later() {
    let (_lw, inf) = listing_one_then_watching();
    let reg = Arc::new(inf.add_event_handler(recorder().0).unwrap());
    let (rt, waited_on) = (tokio::runtime::Handle::current(), reg.clone());
    let (entered_tx, entered_rx) = std::sync::mpsc::channel::<()>();
    let done = Arc::new(AtomicBool::new(false));
    let flag = done.clone();
    inf.add_event_handler(
        ResourceEventHandlerFuncs::new().on_add(move |_: &Arc<ConfigMap>, _| {
            entered_tx.send(()).unwrap();
            rt.block_on(waited_on.wait_finished());
            flag.store(true, Ordering::SeqCst);
        }),
    )
    .unwrap();
    start_then_remove_once_entered(&inf, &reg, entered_rx).await;
    eventually("the wait ended", || done.load(Ordering::SeqCst)).await;
    within("shutdown", inf.shutdown()).await;
}

/// A handler on its own thread shuts itself down and blocks on it: it returns, the handler is
/// called no more, and the informer's shutdown (which waits for removed handlers' threads)
/// ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_on_its_own_thread_may_shut_itself_down() {
    let lw = MockLw::new();
    lw.list(Ok(page(
        "2",
        None,
        vec![cm("ns", "a", "1"), cm("ns", "b", "2")],
    )));
    lw.watch_channel();
    let inf = informer(&lw);
    let own = Arc::new(std::sync::OnceLock::<
        ResourceEventHandlerRegistration<ConfigMap>,
    >::new());
    let (rt, inf2, mine) = (tokio::runtime::Handle::current(), inf.clone(), own.clone());
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = calls.clone();
    let reg = inf
        .add_event_handler_with_options(
            ResourceEventHandlerFuncs::new().on_add(move |_: &Arc<ConfigMap>, _| {
                counted.fetch_add(1, Ordering::SeqCst);
                let reg = loop {
                    if let Some(r) = mine.get() {
                        break r;
                    }
                    std::thread::yield_now();
                };
                rt.block_on(inf2.shut_down_event_handler(reg)).unwrap();
            }),
            HandlerOptions::default().dedicated_thread(),
        )
        .unwrap();
    let _ = own.set(reg);
    inf.start();
    eventually("the first call", || calls.load(Ordering::SeqCst) >= 1).await;
    within("shutdown", inf.shutdown()).await;
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "called after its own shutdown"
    );
}

/// A handler on its own thread, removed while in a call: the informer's shutdown still waits
/// for that thread, as it says it waits for every handler thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_waits_for_the_thread_of_a_removed_handler() {
    let (_lw, inf) = listing_one_then_watching();
    let (entered_tx, entered_rx) = std::sync::mpsc::channel::<()>();
    let done = Arc::new(AtomicBool::new(false));
    let flag = done.clone();
    let reg = inf
        .add_event_handler_with_options(
            ResourceEventHandlerFuncs::new().on_add(move |_: &Arc<ConfigMap>, _| {
                entered_tx.send(()).unwrap();
                std::thread::sleep(Duration::from_millis(300));
                flag.store(true, Ordering::SeqCst);
            }),
            HandlerOptions::default().dedicated_thread(),
        )
        .unwrap();
    start_then_remove_once_entered(&inf, &reg, entered_rx).await;
    within("shutdown", inf.shutdown()).await;
    assert!(done.load(Ordering::SeqCst), "shutdown returned mid-call");
}

/// A handler may block on its informer's `shutdown` (`Handle::block_on`), on a thread of its
/// own or on the shared handler thread: the stop does not wait for the thread that waits for
/// it, and still waits for the other handler threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_may_block_on_its_informers_shutdown() {
    for dedicated in [true, false] {
        let lw = MockLw::new();
        lw.list(Ok(page("1", None, vec![cm("ns", "a", "1")])));
        let inf = informer(&lw);
        let (handler, returned) = shutting_down_handler(&inf, |_| {});
        let options = if dedicated {
            HandlerOptions::default().dedicated_thread()
        } else {
            HandlerOptions::default()
        };
        inf.add_event_handler_with_options(handler, options)
            .unwrap();
        let slow_done = Arc::new(AtomicBool::new(false));
        inf.add_event_handler_with_options(
            SlowHandler(slow_done.clone()),
            HandlerOptions::default().dedicated_thread(),
        )
        .unwrap();
        inf.start();
        tokio::time::timeout(Duration::from_secs(5), inf.stopped())
            .await
            .unwrap_or_else(|_| {
                panic!("dedicated {dedicated}: the stop waits for the handler that waits for it")
            });
        assert!(
            slow_done.load(Ordering::SeqCst),
            "dedicated {dedicated}: stopped before the other handler thread ended"
        );
        eventually("the handler's shutdown to return", || {
            returned.load(Ordering::SeqCst)
        })
        .await;
        // A second shutdown from outside returns at once.
        tokio::time::timeout(Duration::from_secs(5), inf.shutdown())
            .await
            .expect("shutdown after the handler's");
    }
}

/// A handler that blocks on `shutdown` after a stop from outside has begun waiting for its
/// thread: the waiting stop lets go of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_joins_a_stop_already_waiting_for_it_is_let_go() {
    let lw = MockLw::new();
    lw.list(Ok(page("1", None, vec![cm("ns", "a", "1")])));
    let inf = informer(&lw);
    let (handler, returned) = shutting_down_handler(&inf, |inf| {
        // Until the outside stop has begun.
        while inf.lifecycle() == Lifecycle::Running {
            std::thread::sleep(Duration::from_millis(1));
        }
        // Give that stop time to reach its wait for this thread.
        std::thread::sleep(Duration::from_millis(50));
    });
    inf.add_event_handler_with_options(handler, HandlerOptions::default().dedicated_thread())
        .unwrap();
    inf.start();
    eventually("the informer to run", || {
        inf.lifecycle() == Lifecycle::Running
    })
    .await;
    tokio::time::timeout(Duration::from_secs(5), inf.shutdown())
        .await
        .expect("the outside stop waits for the handler that waits for it");
    eventually("the handler's shutdown to return", || {
        returned.load(Ordering::SeqCst)
    })
    .await;
}

/// A `shutdown` of an informer that never ran waits for its handler threads, and so does a
/// second one running at the same time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_shutdowns_of_an_informer_that_never_ran_both_wait_for_its_handlers() {
    let inf = informer(&MockLw::new());
    let dropped = Arc::new(AtomicBool::new(false));
    inf.add_event_handler_with_options(
        SlowHandler(dropped.clone()),
        HandlerOptions::default().dedicated_thread(),
    )
    .unwrap();
    let (a, b) = tokio::join!(
        async {
            inf.shutdown().await;
            dropped.load(Ordering::SeqCst)
        },
        async {
            inf.shutdown().await;
            dropped.load(Ordering::SeqCst)
        },
    );
    assert!(
        a && b,
        "a shutdown returned before the handler thread ended"
    );
    assert!(inf.is_stopped());
}

/// client-go's RealFIFO holds its lock while it processes a batch once two batches are queued,
/// so the reflector's Add waits: a consumer held up by a full bounded handler holds the watch
/// back instead of queueing every event (found by a review: 10,000 queued, without bound).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_order_a_stalled_bounded_handler_holds_the_watch_back() {
    let lw = MockLw::new();
    lw.list(Ok(page("1", None, vec![cm("ns", "a", "1")])));
    let tx = lw.watch_channel();
    let inf = in_order(&lw);
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let release_rx = Mutex::new(release_rx);
    let updates = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = updates.clone();
    inf.add_event_handler_with_options(
        ResourceEventHandlerFuncs::new().on_update(
            move |_: &Arc<ConfigMap>, _: &Arc<ConfigMap>| {
                // Blocks until released (then the sender is gone and every call returns at once).
                let _ = release_rx.lock().recv();
                seen.fetch_add(1, Ordering::SeqCst);
            },
        ),
        HandlerOptions::default().bounded_buffer(1),
    )
    .unwrap();
    inf.start();
    assert!(inf.wait_for_cache_sync().await);
    let n = 10_000;
    for i in 2..n + 2 {
        tx.send(Ok(WatchEvent::Modified(cm("ns", "a", &i.to_string()))))
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let queued = inf.queued_items();
    assert!(
        queued <= 2 * crate::fifo::DEFAULT_BATCH_SIZE,
        "{queued} queued behind a stalled handler"
    );
    drop(release_tx);
    eventually("every update handled", || {
        updates.load(Ordering::SeqCst) == n
    })
    .await;
    assert_eq!(inf.last_store_sync_resource_version(), (n + 1).to_string());
    inf.shutdown().await;
}

/// In order, an event the store cannot hold (its transform panicked) still moves the store's
/// version to the event's, as an undecodable event does.
#[tokio::test]
async fn in_order_an_event_the_transform_refuses_still_moves_the_store_version() {
    let lw = MockLw::new();
    lw.list(Ok(page("5", None, vec![cm("ns", "a", "5")])));
    let tx = lw.watch_channel();
    let inf = in_order(&lw);
    inf.set_transform(Arc::new(|o: ConfigMap| {
        assert_ne!(o.metadata.name.as_deref(), Some("boom"), "transform bug");
        o
    }))
    .unwrap();
    inf.start();
    assert!(inf.wait_for_cache_sync().await);
    tx.send(Ok(WatchEvent::Modified(cm("ns", "boom", "6"))))
        .unwrap();
    eventually("the store at 6", || {
        inf.last_store_sync_resource_version() == "6"
    })
    .await;
    assert_eq!(inf.indexer().list_keys().len(), 1);
    inf.shutdown().await;
}
