//! A Compact-mode informer against the fake API server, in both wire encodings: each listed or
//! watched object waits in the FIFO packed from the bytes the server sent, is decoded once as it
//! is popped, and the cache keeps those bytes (issue #12 part 4); the cache then equals the
//! server, handlers see the right objects, and a transform still gets the decoded object. Each
//! test runs with both FIFOs ([`FifoMode`]), which pack alike.
#![cfg(all(feature = "testing", feature = "compact"))]

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;
use kube_informer::{
    CacheStorage, CompactConfig, FactoryConfig, FifoMode, HandlerOptions, ReflectorConfig,
    ResourceEventHandler, ResourceEventHandlerFuncs, SharedInformerFactory,
    testing::{FakeApiServer, Verb},
};
use parking_lot::Mutex;

const N: usize = 300;

fn cm(i: usize) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(format!("cm-{i}")),
            namespace: Some(format!("ns-{}", i % 3)),
            labels: Some(BTreeMap::from([("i".to_owned(), i.to_string())])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            "body".to_owned(),
            format!("value {i} ").repeat(20),
        )])),
        ..Default::default()
    }
}

/// Rewrites `cm(i)`'s body on the server as `body`, for each `i`.
fn set_bodies(server: &FakeApiServer, is: std::ops::Range<usize>, body: impl Fn(usize) -> String) {
    for i in is {
        let mut c = cm(i);
        c.data.as_mut().unwrap().insert("body".into(), body(i));
        server.update(&c).unwrap();
    }
}

/// The record of `cm(i)`'s body changed to `new`, as [`recorder`] writes it.
fn updated(i: usize, new: String) -> (&'static str, String, String, String) {
    ("update", format!("cm-{i}"), body(&cm(i)), new)
}

async fn server(protobuf: bool) -> FakeApiServer {
    let server = FakeApiServer::start_with_core().await.unwrap();
    server.set_protobuf_supported(protobuf);
    for i in 0..N {
        server.create(&cm(i)).unwrap();
    }
    server
}

fn compact() -> CacheStorage {
    CacheStorage::Compact(
        CompactConfig::default()
            .hot_objects(0)
            .dictionary_samples(50),
    )
}

const MODES: [FifoMode; 2] = [FifoMode::DeltaFifo, FifoMode::InOrder];

/// A factory of Compact informers with `mode`'s FIFO.
fn config(mode: FifoMode) -> FactoryConfig {
    FactoryConfig::default()
        .cache_storage(compact())
        .fifo_mode(mode)
}

/// The cache holds what the server holds, object for object.
fn assert_equals_server(server: &FakeApiServer, factory: &SharedInformerFactory) {
    let indexer = factory.informer::<ConfigMap>().indexer();
    let want = server.list::<ConfigMap>().unwrap();
    assert_eq!(indexer.len(), want.len());
    for obj in want {
        let key = format!(
            "{}/{}",
            obj.metadata.namespace.as_deref().unwrap(),
            obj.metadata.name.as_deref().unwrap()
        );
        assert_eq!(*indexer.get_by_key(&key).unwrap(), obj, "{key}");
    }
}

/// Whether every request of `verb` was answered in protobuf (`protobuf`) or in JSON.
fn all_served(server: &FakeApiServer, verb: Verb, protobuf: bool) -> bool {
    server
        .requests()
        .iter()
        .filter(|r| r.verb == verb)
        .all(|r| r.served_protobuf() == protobuf)
}

#[tokio::test]
async fn a_cold_sync_keeps_the_bytes_the_server_sent_in_both_encodings() {
    for (mode, protobuf) in MODES.into_iter().flat_map(|m| [(m, true), (m, false)]) {
        let server = server(protobuf).await;
        let factory = SharedInformerFactory::new(server.client(), config(mode));
        factory.informer::<ConfigMap>();
        factory.start();
        assert!(factory.wait_for_cache_sync().await.values().all(|s| *s));
        let stats = factory.informer::<ConfigMap>().indexer().stats();
        assert_eq!(
            stats.packed, N as u64,
            "{mode:?} protobuf {protobuf}: {stats:?}"
        );
        assert_eq!(
            stats.packed_from_wire, N as u64,
            "{mode:?} protobuf {protobuf}: {stats:?}"
        );
        // An in-order relist stores protobuf items as they are, never decoded (no index but the
        // namespace one needs them, and no handler reads them), and JSON items, which may not
        // fit the type, once checked (a decode that skips `fieldsV1`); DeltaFIFO pops each
        // decoded.
        let in_order = mode == FifoMode::InOrder;
        let (unpacked, checked) = match (in_order, protobuf) {
            (false, _) => (N as u64, 0),
            (true, true) => (0, 0),
            (true, false) => (0, N as u64),
        };
        assert_eq!(
            (stats.unpacks, stats.checked),
            (unpacked, checked),
            "{mode:?} protobuf {protobuf}: {stats:?}"
        );
        assert_eq!(
            stats.kept_packed, N as u64,
            "{mode:?} protobuf {protobuf}: {stats:?}"
        );
        assert_eq!(
            stats.decodes, 0,
            "{mode:?} protobuf {protobuf}: nothing read yet"
        );
        assert!(stats.dictionary_trainings <= 1);
        // Labels and resourceVersions as the list decoder read them beside the bytes, or the
        // check read them (in order, the objects were never decoded for the cache).
        let indexer = factory.informer::<ConfigMap>().indexer();
        let selector = kube_informer::parse_label_selector("i in (7,8)").unwrap();
        let mut selected: Vec<_> = indexer
            .list_selected(&selector)
            .iter()
            .map(|c| c.metadata.name.clone().unwrap())
            .collect();
        selected.sort();
        assert_eq!(selected, ["cm-7", "cm-8"], "{mode:?} protobuf {protobuf}");
        for c in server.list::<ConfigMap>().unwrap() {
            let key = format!(
                "{}/{}",
                c.metadata.namespace.as_deref().unwrap(),
                c.metadata.name.as_deref().unwrap()
            );
            assert_eq!(
                indexer.resource_version_of(&key),
                c.metadata.resource_version,
                "{key}"
            );
        }
        assert_equals_server(&server, &factory);
        assert!(all_served(&server, Verb::List, protobuf));
        factory.shutdown().await;
    }
}

#[tokio::test]
async fn with_a_transform_listed_objects_are_decoded_transformed_and_then_packed() {
    let server = server(true).await;
    let factory = SharedInformerFactory::new(
        server.client(),
        FactoryConfig::default().cache_storage(compact()),
    );
    let informer = factory.informer::<ConfigMap>();
    informer
        .set_transform(Arc::new(|mut c: ConfigMap| {
            c.metadata
                .annotations
                .get_or_insert_default()
                .insert("seen".into(), "yes".into());
            c
        }))
        .unwrap();
    factory.start();
    assert!(factory.wait_for_cache_sync().await.values().all(|s| *s));
    let indexer = informer.indexer();
    let stats = indexer.stats();
    assert_eq!((stats.packed, stats.kept_packed), (N as u64, N as u64));
    assert_eq!(
        stats.packed_from_wire, 0,
        "a transform needs the decoded object"
    );
    for obj in indexer.list() {
        assert_eq!(
            obj.metadata.annotations.as_ref().unwrap()["seen"],
            "yes",
            "the transform ran before packing"
        );
    }
    factory.shutdown().await;
}

/// A listed object whose JSON does not fit `K` is packed undecoded; it is found out when popped,
/// left out of the cache and reported, and the informer still syncs with the rest.
#[tokio::test]
async fn a_listed_object_that_does_not_decode_is_left_out_when_popped() {
    for mode in MODES {
        a_listed_object_that_does_not_decode_is_left_out(mode).await;
    }
}

async fn a_listed_object_that_does_not_decode_is_left_out(mode: FifoMode) {
    let server = server(false).await;
    server
        .create_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "bad", "namespace": "ns-0"},
            "data": "not a map",
        }))
        .unwrap();
    let factory = SharedInformerFactory::new(server.client(), config(mode));
    let informer = factory.informer::<ConfigMap>();
    let reported = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let sink = reported.clone();
    // The error handler registers a handler: it must not be called with a lock held that the
    // registration takes (a deadlock).
    let (late, registered) = (informer.clone(), Arc::new(Mutex::new(Vec::new())));
    let registrations = registered.clone();
    informer
        .set_watch_error_handler(Arc::new(move |e| {
            sink.lock().push(e.to_string());
            let r = late.add_event_handler(ResourceEventHandlerFuncs::new());
            registrations.lock().push(r.is_ok());
        }))
        .unwrap();
    factory.start();
    let synced = tokio::time::timeout(Duration::from_secs(30), factory.wait_for_cache_sync())
        .await
        .unwrap_or_else(|_| panic!("{mode:?}: likely deadlocked"));
    assert!(synced.values().all(|s| *s));
    assert_eq!(*registered.lock(), [true], "{mode:?}");
    let indexer = informer.indexer();
    assert!(indexer.get_by_key("ns-0/bad").is_none());
    // Reported to the informer's error handler, as an undecodable item of a decoded list is,
    // without quoting the object.
    let reported = reported.lock().clone();
    assert_eq!(
        reported
            .iter()
            .filter(|e| e.contains("ns-0/bad") && e.contains("does not decode"))
            .count(),
        1,
        "{mode:?}: {reported:?}"
    );
    assert!(
        reported.iter().all(|e| !e.contains("not a map")),
        "{reported:?}"
    );
    assert_eq!(indexer.len(), N);
    assert_eq!(indexer.stats().packed_from_wire, N as u64 + 1);
    assert_eq!(indexer.stats().decode_errors, 1);
    factory.shutdown().await;
}

/// A listed protobuf object whose bytes frame and carry their metadata but do not decode (a
/// string that is not UTF-8): the DeltaFIFO decodes it as it is popped and leaves it out; an
/// in-order relist stores it undecoded, and it is found when the handlers' snapshot is read. In
/// both, the informer's error handler hears of it once, however many handlers there are,
/// without the object quoted, and every other object reaches every handler.
#[tokio::test]
async fn a_listed_protobuf_object_that_does_not_decode_is_reported_once_in_both_fifos() {
    for mode in MODES {
        an_undecodable_protobuf_object_is_reported_once(mode).await;
    }
}

async fn an_undecodable_protobuf_object_is_reported_once(mode: FifoMode) {
    let server = server(true).await;
    let mut bad = cm(N);
    bad.metadata.name = Some("bad".into());
    bad.data = Some(BTreeMap::from([("k".into(), "\u{1}garbled".into())]));
    server.create(&bad).unwrap();
    server.faults().garble_protobuf("\u{1}garbled");
    // A backlog of 1: the watch's writes go out as snapshots, and a listener that keeps up has
    // them decoded by the informer, under its locks (the update's old object among them).
    let config = config(mode).cache_storage(CacheStorage::Compact(
        CompactConfig::default()
            .hot_objects(0)
            .dictionary_samples(50)
            .decoded_backlog(1),
    ));
    let factory = SharedInformerFactory::new(server.client(), config);
    let informer = factory.informer::<ConfigMap>();
    let reported = Arc::new(Mutex::new(Vec::new()));
    let sink = reported.clone();
    // At its first report the error handler asks whether the informer has synced and registers
    // a handler: it must not be called with a lock held that either takes (a deadlock). That
    // handler's replay of the cache is a notification of its own. Then it panics, which must
    // stop nothing.
    let (late, registered) = (informer.clone(), Arc::new(Mutex::new(Vec::new())));
    let registrations = registered.clone();
    informer
        .set_watch_error_handler(Arc::new(move |e| {
            let first = {
                let mut sink = sink.lock();
                sink.push(e.to_string());
                sink.len() == 1
            };
            if first {
                let _ = late.has_synced();
                let r = late.add_event_handler(ResourceEventHandlerFuncs::new());
                registrations.lock().push(r.is_ok());
                panic!("the error handler's first report panics");
            }
        }))
        .unwrap();
    // Once in both modes. The in-order cache keeps the object, and the late handler's replay
    // meets it again, as would each resync: the same stored bytes, so the same error, which is
    // reported once per stored version of the object.
    let reports = 1;
    let adds: Vec<Arc<Mutex<Vec<String>>>> = (0..2).map(|_| Arc::default()).collect();
    for seen in &adds {
        let seen = seen.clone();
        informer
            .add_event_handler(
                ResourceEventHandlerFuncs::new()
                    .on_add(move |c: &Arc<ConfigMap>, _| seen.lock().push(name(c))),
            )
            .unwrap();
    }
    factory.start();
    tokio::time::timeout(Duration::from_secs(30), async {
        while adds.iter().any(|a| a.lock().len() < N) || reported.lock().len() < reports {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "{mode:?}: adds or the report missing: {:?}",
            reported.lock()
        )
    });
    // Whatever is still on its way has had time to arrive.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(all_served(&server, Verb::List, true), "{mode:?}");
    for seen in &adds {
        let mut seen = seen.lock().clone();
        seen.sort();
        let mut want: Vec<_> = (0..N).map(|i| format!("cm-{i}")).collect();
        want.sort();
        assert_eq!(seen, want, "{mode:?}: every other object, the bad one not");
    }
    assert_eq!(*registered.lock(), [true], "{mode:?}");
    let sink = reported;
    let reported = sink.lock().clone();
    assert_eq!(reported.len(), reports, "{mode:?}: {reported:?}");
    assert!(
        reported
            .iter()
            .all(|e| e.contains("ns-0/bad") && !e.contains("garbled")),
        "{mode:?}: {reported:?}"
    );
    let indexer = informer.indexer();
    match mode {
        // Found as it was popped: left out of the cache.
        FifoMode::DeltaFifo => {
            assert!(reported[0].contains("does not decode"), "{reported:?}");
            assert_eq!(indexer.len(), N);
        }
        // Stored undecoded, found when read: cached, and a typed error to readers too.
        _ => {
            assert!(
                reported[0].contains("not handed to handlers"),
                "{reported:?}"
            );
            assert_eq!(indexer.len(), N + 1);
            assert!(indexer.try_get_by_key("ns-0/bad").is_err());
            // A reader gets the error itself; the error handler is not told again.
            assert_eq!(sink.lock().len(), reports);
        }
    }
    // Written again, and watched: the handlers are told of it as an add (its old version
    // does not decode), and that is not reported, so nothing is called under the informer's
    // locks.
    let mut fixed = cm(N);
    fixed.metadata.name = Some("bad".into());
    let fixed = server.update(&fixed).unwrap();
    tokio::time::timeout(Duration::from_secs(30), async {
        while adds.iter().any(|a| a.lock().len() < N + 1) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{mode:?}: likely deadlocked: {:?}", sink.lock()));
    for seen in &adds {
        assert_eq!(seen.lock().last().map(String::as_str), Some("bad"));
    }
    assert_eq!(*indexer.get_by_key("ns-0/bad").unwrap(), fixed);
    assert_eq!(sink.lock().len(), reports, "{mode:?}: {:?}", sink.lock());
    factory.shutdown().await;
}

/// What a handler was told, in order: `add`/`update`/`delete`, the key, and for an update the
/// old and the new object's `body`; for a delete whether it was a tombstone.
type Seen = Arc<Mutex<Vec<(&'static str, String, String, String)>>>;

fn body(c: &ConfigMap) -> String {
    c.data
        .as_ref()
        .and_then(|d| d.get("body"))
        .cloned()
        .unwrap_or_default()
}

fn name(c: &ConfigMap) -> String {
    c.metadata.name.clone().unwrap_or_default()
}

/// A handler recording what happens after the initial list.
fn recorder(seen: &Seen) -> ResourceEventHandlerFuncs<ConfigMap> {
    let (a, u, d) = (seen.clone(), seen.clone(), seen.clone());
    ResourceEventHandlerFuncs::new()
        .on_add(move |c: &Arc<ConfigMap>, initial| {
            if !initial {
                a.lock().push(("add", name(c), String::new(), body(c)));
            }
        })
        .on_update(move |old: &Arc<ConfigMap>, new: &Arc<ConfigMap>| {
            u.lock().push(("update", name(new), body(old), body(new)));
        })
        .on_delete(move |deleted| {
            let tomb = if deleted.is_tombstone() {
                "tombstone"
            } else {
                ""
            };
            d.lock().push((
                "delete",
                name(deleted.object()),
                tomb.to_owned(),
                String::new(),
            ));
        })
}

async fn wait_for(seen: &Seen, n: usize) {
    tokio::time::timeout(Duration::from_secs(30), async {
        while seen.lock().len() < n {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("likely deadlocked: {:?}", seen.lock()));
}

/// After the sync, each object a watch adds or changes reaches the cache as the bytes the server
/// sent: packed from them, decoded once as it is popped, kept as it was. Handlers see the old and
/// the new object as with a decoded watch, and the cache equals the server.
#[tokio::test]
async fn watched_objects_are_packed_from_the_bytes_the_server_sent_in_both_encodings() {
    watched_objects_are_packed(false).await;
}

/// The same with a streaming list (KEP-3157): the initial events are packed from their bytes
/// too, and the watch that follows goes on that way.
#[tokio::test]
async fn a_streaming_list_and_the_watch_after_it_are_packed_from_their_bytes() {
    watched_objects_are_packed(true).await;
}

async fn watched_objects_are_packed(streaming: bool) {
    for (mode, protobuf) in MODES.into_iter().flat_map(|m| [(m, true), (m, false)]) {
        let server = server(protobuf).await;
        let factory = SharedInformerFactory::new(
            server.client(),
            config(mode).reflector(ReflectorConfig::default().streaming_list(streaming)),
        );
        let informer = factory.informer::<ConfigMap>();
        let seen: Seen = Arc::default();
        informer.add_event_handler(recorder(&seen)).unwrap();
        factory.start();
        assert!(factory.wait_for_cache_sync().await.values().all(|s| *s));
        let indexer = informer.indexer();
        let before = indexer.stats();
        assert_eq!(before.packed_from_wire, N as u64, "{before:?}");
        let lists = server
            .requests()
            .iter()
            .filter(|r| r.verb == Verb::List)
            .count();
        assert_eq!(lists, usize::from(!streaming), "streaming {streaming}");
        set_bodies(&server, 0..30, |i| format!("changed {i}"));
        for i in N..N + 10 {
            server.create(&cm(i)).unwrap();
        }
        for i in 100..105 {
            server
                .delete::<ConfigMap>(Some(&format!("ns-{}", i % 3)), &format!("cm-{i}"))
                .unwrap();
        }
        wait_for(&seen, 45).await;
        let stats = indexer.stats();
        let grew = |now: u64, then: u64| now - then;
        // 30 updates and 10 creates packed from the wire; deletions are decoded as before.
        assert_eq!(
            grew(stats.packed_from_wire, before.packed_from_wire),
            40,
            "{mode:?} protobuf {protobuf}: {stats:?}"
        );
        assert_eq!(grew(stats.unpacks, before.unpacks), 40, "{stats:?}");
        assert_eq!(grew(stats.kept_packed, before.kept_packed), 40, "{stats:?}");
        assert_eq!(stats.decode_errors, 0);
        assert_equals_server(&server, &factory);
        let seen = seen.lock().clone();
        let mut want: Vec<_> = (0..30)
            .map(|i| updated(i, format!("changed {i}")))
            .chain((N..N + 10).map(|i| ("add", format!("cm-{i}"), String::new(), body(&cm(i)))))
            .chain((100..105).map(|i| ("delete", format!("cm-{i}"), String::new(), String::new())))
            .collect();
        let mut got = seen.clone();
        want.sort();
        got.sort();
        assert_eq!(got, want, "{mode:?} protobuf {protobuf}");
        assert!(all_served(&server, Verb::Watch, protobuf));
        factory.shutdown().await;
    }
}

/// A watched object that does not fit `K` is packed undecoded like any other; it is found out
/// when popped, reported once (without quoting it), and its cached version is dropped with a
/// tombstone, as for a decoded watch.
#[tokio::test]
async fn a_watched_object_that_does_not_decode_tombstones_its_cached_version() {
    for mode in MODES {
        a_watched_object_that_does_not_decode_tombstones(mode).await;
    }
}

async fn a_watched_object_that_does_not_decode_tombstones(mode: FifoMode) {
    let server = server(false).await;
    let factory = SharedInformerFactory::new(server.client(), config(mode));
    let informer = factory.informer::<ConfigMap>();
    let reported = Arc::new(Mutex::new(Vec::new()));
    let sink = reported.clone();
    informer
        .set_watch_error_handler(Arc::new(move |e| sink.lock().push(e.to_string())))
        .unwrap();
    let seen: Seen = Arc::default();
    informer.add_event_handler(recorder(&seen)).unwrap();
    factory.start();
    assert!(factory.wait_for_cache_sync().await.values().all(|s| *s));
    let mut bad = serde_json::to_value(cm(7)).unwrap();
    bad["data"] = serde_json::json!("not a map");
    let written = server.update_value(bad).unwrap();
    if mode == FifoMode::InOrder {
        // The store reaches the event's version, as for a decoded watch's undecodable event,
        // before any later event arrives.
        let rv = written["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_owned();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while informer.last_store_sync_resource_version() != rv {
            assert!(
                std::time::Instant::now() < deadline,
                "the store stayed at {:?}, not {rv:?}",
                informer.last_store_sync_resource_version()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    // A later change of another object still arrives.
    server.create(&cm(N)).unwrap();
    wait_for(&seen, 2).await;
    let indexer = informer.indexer();
    assert!(indexer.get_by_key("ns-1/cm-7").is_none());
    assert_eq!(indexer.len(), N);
    let mut seen = seen.lock().clone();
    seen.sort();
    assert_eq!(
        seen,
        [
            ("add", format!("cm-{N}"), String::new(), body(&cm(N))),
            (
                "delete",
                "cm-7".to_owned(),
                "tombstone".to_owned(),
                String::new()
            ),
        ]
    );
    let reported = reported.lock().clone();
    assert_eq!(
        reported
            .iter()
            .filter(|e| e.contains("ns-1/cm-7") && e.contains("does not decode"))
            .count(),
        1,
        "{mode:?}: {reported:?}"
    );
    assert!(
        reported.iter().all(|e| !e.contains("not a map")),
        "{reported:?}"
    );
    assert_eq!(indexer.stats().decode_errors, 1);
    factory.shutdown().await;
}

/// With the in-order FIFO a list is one `ReplacedAll`: the cache is replaced at once, then the
/// handlers hear of every object. In Compact mode neither step holds the list decoded (issue #12
/// part 4): each object is decoded as the new cache is built and dropped once stored, and the
/// notifications carry snapshots of the cache, decoded as the handler is called. So while a
/// handler is stuck on the first notification of a list, nobody holds the objects behind it:
/// reading them decodes each one, where notifications holding decoded objects would hand them
/// back shared. Then the handler is told of every object, and a relist after a 410 gives the
/// right tombstones, updates and adds.
#[tokio::test]
async fn an_in_order_list_waits_for_slow_handlers_as_snapshots_not_decoded_objects() {
    for protobuf in [true, false] {
        in_order_lists_wait_as_snapshots(protobuf).await;
    }
}

async fn in_order_lists_wait_as_snapshots(protobuf: bool) {
    let server = server(protobuf).await;
    let factory = SharedInformerFactory::new(server.client(), config(FifoMode::InOrder));
    let informer = factory.informer::<ConfigMap>();
    let seen: Seen = Arc::default();
    let (release, released) = std::sync::mpsc::channel::<()>();
    informer
        .add_event_handler(Gated {
            gate: Some(released),
            inner: recorder(&seen),
            seen: seen.clone(),
        })
        .unwrap();
    factory.start();
    assert!(factory.wait_for_cache_sync().await.values().all(|s| *s));
    let indexer = informer.indexer();
    let before = indexer.stats();
    assert_eq!(before.kept_packed, N as u64, "{before:?}");
    // Only the notification in the handler's hand was decoded: the others wait as snapshots.
    assert!(
        before.decodes <= 1,
        "protobuf {protobuf}: notifications were decoded ahead: {before:?}"
    );
    for i in 0..N {
        let c = cm(i);
        let key = format!("ns-{}/cm-{i}", i % 3);
        assert_eq!(body(&indexer.get_by_key(&key).unwrap()), body(&c), "{key}");
    }
    let after = indexer.stats();
    // At most the object in the stuck handler's hand is shared; every other read decodes.
    assert!(
        after.shared_hits - before.shared_hits <= 1,
        "protobuf {protobuf}: notifications hold decoded objects: {before:?} {after:?}"
    );
    assert!(after.decodes - before.decodes >= N as u64 - 1, "{after:?}");
    release.send(()).unwrap();
    wait_for(&seen, N).await;
    let mut initial: Vec<_> = seen.lock().iter().map(|s| s.1.clone()).collect();
    initial.sort();
    let mut want: Vec<_> = (0..N).map(|i| format!("cm-{i}")).collect();
    want.sort();
    assert_eq!(initial, want, "every listed object, once");
    seen.lock().clear();

    // A relist: the informer misses writes, they are compacted away, its watch breaks.
    let faults = server.faults();
    faults.stall_watches();
    tokio::time::sleep(Duration::from_millis(50)).await;
    set_bodies(&server, 0..10, |i| format!("relisted {i}"));
    for i in 10..15 {
        server
            .delete::<ConfigMap>(Some(&format!("ns-{}", i % 3)), &format!("cm-{i}"))
            .unwrap();
    }
    server.create(&cm(N)).unwrap();
    server.compact(server.current_resource_version());
    faults.drop_all_watches();
    faults.unstall_watches();
    // Every object of the new list (295 updates and 1 add), and 5 tombstones.
    wait_for(&seen, 301).await;
    let mut got = seen.lock().clone();
    assert_eq!(got.len(), 301);
    // The unchanged objects come as updates of the same version (client-go's relist `Sync`).
    got.retain(|(kind, _, old, new)| !(*kind == "update" && old == new));
    got.sort();
    let mut want: Vec<_> = (0..10)
        .map(|i| updated(i, format!("relisted {i}")))
        .chain((10..15).map(|i| {
            (
                "delete",
                format!("cm-{i}"),
                "tombstone".to_owned(),
                String::new(),
            )
        }))
        .chain([("add", format!("cm-{N}"), String::new(), body(&cm(N)))])
        .collect();
    want.sort();
    assert_eq!(got, want, "protobuf {protobuf}");
    assert_equals_server(&server, &factory);
    assert_eq!(indexer.stats().decode_errors, 0);
    factory.shutdown().await;
}

/// A handler stuck on its first notification until `gate` is sent to; then it records initial
/// adds as `("initial", name, "", body)` and everything else as [`recorder`] does.
struct Gated {
    gate: Option<std::sync::mpsc::Receiver<()>>,
    inner: ResourceEventHandlerFuncs<ConfigMap>,
    seen: Seen,
}

impl Gated {
    fn wait(&mut self) {
        if let Some(gate) = self.gate.take() {
            gate.recv().unwrap();
        }
    }
}

impl ResourceEventHandler<ConfigMap> for Gated {
    fn on_add(&mut self, obj: &Arc<ConfigMap>, is_in_initial_list: bool) {
        self.wait();
        if is_in_initial_list {
            self.seen
                .lock()
                .push(("initial", name(obj), String::new(), body(obj)));
        }
        ResourceEventHandler::on_add(&mut self.inner, obj, is_in_initial_list);
    }

    fn on_update(&mut self, old: &Arc<ConfigMap>, new: &Arc<ConfigMap>) {
        self.wait();
        ResourceEventHandler::on_update(&mut self.inner, old, new);
    }

    fn on_delete(&mut self, obj: &kube_informer::DeltaObject<ConfigMap>) {
        self.wait();
        ResourceEventHandler::on_delete(&mut self.inner, obj);
    }
}

/// `CompactConfig::decoded_backlog` in the test below.
const BACKLOG: usize = 4;

/// A handler that falls behind is sent the cache's compressed objects once `decoded_backlog`
/// notifications wait for it (issue #12 part 4), in both FIFOs: its buffer then holds at most
/// that many decoded objects however far behind it is, where it held one per notification. A
/// DeltaFIFO informer hands each popped object to its handlers decoded, so before this a
/// handler stuck through a cold sync held the whole list decoded; either FIFO held every watched
/// change so. Here one handler is stuck from the first notification on, through the list and
/// then 100 watched updates, while another keeps up: reading the cache meanwhile decodes
/// (nobody holds the objects) instead of sharing what the stuck handler's buffer holds. Then,
/// once it has caught up, it is stuck again through a burst of 100 more, which a third handler
/// with a bounded buffer holds back so that it reaches the informer at once. Once released, the
/// stuck handlers see exactly what the one that kept up saw, old objects included.
#[tokio::test]
async fn a_handler_that_falls_behind_is_sent_compressed_objects_in_both_fifos() {
    for (mode, protobuf) in MODES.into_iter().flat_map(|m| [(m, true), (m, false)]) {
        falls_behind(mode, protobuf).await;
    }
}

async fn falls_behind(mode: FifoMode, protobuf: bool) {
    let server = server(protobuf).await;
    let storage = CacheStorage::Compact(
        CompactConfig::default()
            .hot_objects(0)
            .dictionary_samples(50)
            .decoded_backlog(BACKLOG),
    );
    let factory = SharedInformerFactory::new(
        server.client(),
        FactoryConfig::default()
            .cache_storage(storage)
            .fifo_mode(mode),
    );
    let informer = factory.informer::<ConfigMap>();
    let gate = Gate::default();
    gate.close();
    let (slow, fast, bounded): (Seen, Seen, Seen) = Default::default();
    // A third handler, whose one-notification buffer holds the informer back while it is stuck.
    let hold = Gate::default();
    informer
        .add_event_handler_with_options(
            Behind {
                gate: gate.clone(),
                seen: slow.clone(),
            },
            HandlerOptions::default().dedicated_thread(),
        )
        .unwrap();
    informer
        .add_event_handler(Behind {
            gate: Gate::default(),
            seen: fast.clone(),
        })
        .unwrap();
    informer
        .add_event_handler_with_options(
            Behind {
                gate: hold.clone(),
                seen: bounded.clone(),
            },
            HandlerOptions::default().bounded_buffer(1),
        )
        .unwrap();
    factory.start();
    assert!(factory.wait_for_cache_sync().await.values().all(|s| *s));
    wait_for(&fast, N).await;
    wait_for(&bounded, N).await;
    let indexer = informer.indexer();
    let what = format!("{mode:?}, protobuf {protobuf}");

    // Reads of every object: shared only with what the stuck handler holds decoded, which is
    // at most the backlog (the DeltaFIFO's first notifications; none in order, whose list
    // notifications are snapshots already).
    let reads = |range: std::ops::Range<usize>| {
        let before = indexer.stats();
        for i in range.clone() {
            assert!(
                indexer
                    .get_by_key(&format!("ns-{}/cm-{i}", i % 3))
                    .is_some()
            );
        }
        let after = indexer.stats();
        let shared = after.shared_hits - before.shared_hits;
        assert!(
            shared <= BACKLOG as u64,
            "{what}: the stuck handler's buffer holds decoded objects: {shared} of {} reads \
             shared ({after:?})",
            range.len()
        );
        assert_eq!(
            after.decodes - before.decodes + shared,
            range.len() as u64,
            "{what}"
        );
    };
    reads(0..N);

    // Watched updates, while the handler is still stuck on its first notification.
    set_bodies(&server, 0..100, |i| format!("watched {i}"));
    wait_for(&fast, N + 100).await;
    wait_for(&bounded, N + 100).await;
    reads(0..100);
    assert_eq!(
        slow.lock().len(),
        0,
        "{what}: the stuck handler was not stuck"
    );

    gate.open();
    wait_for(&slow, N + 100).await;

    // A burst while every handler is caught up. The bounded handler is stuck too: once it has
    // a notification in hand and one in its buffer, the informer waits for room, with fewer
    // than the backlog pending anywhere, and the rest of the burst piles up in the FIFO. When
    // the bounded handler is let go, the in-order FIFO hands that rest to the informer as one
    // batch, applied at once (or the burst came as one batch to begin with); it must not go out
    // decoded whole to the handler that is stuck.
    wait_for(&bounded, N + 100).await;
    gate.close();
    hold.close();
    set_bodies(&server, 100..200, |i| format!("burst {i}"));
    // Until every change of the burst has reached the informer: queued, or applied (when it
    // came as one batch before the informer was held back, which a loaded machine makes
    // likely; applied, it has been told to the handler that keeps up).
    tokio::time::timeout(Duration::from_secs(30), async {
        while informer.queued_items() + fast.lock().len() < N + 200 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what}: the burst did not reach the informer"));
    hold.open();
    wait_for(&fast, N + 200).await;
    wait_for(&bounded, N + 200).await;
    reads(100..200);
    gate.open();
    wait_for(&slow, N + 200).await;

    let (slow, fast) = (slow.lock().clone(), fast.lock().clone());
    assert_eq!(slow, fast, "{what}: the handler behind saw something else");
    assert_eq!(
        *bounded.lock(),
        fast,
        "{what}: the bounded handler saw something else"
    );
    let mut initial: Vec<_> = fast[..N].iter().map(|s| (s.0, s.1.clone())).collect();
    initial.sort();
    let mut want: Vec<_> = (0..N).map(|i| ("initial", format!("cm-{i}"))).collect();
    want.sort();
    assert_eq!(initial, want, "{what}");
    let updates: Vec<_> = (0..100)
        .map(|i| updated(i, format!("watched {i}")))
        .chain((100..200).map(|i| updated(i, format!("burst {i}"))))
        .collect();
    assert_eq!(fast[N..], updates[..], "{what}");
    assert_equals_server(&server, &factory);
    assert_eq!(indexer.stats().decode_errors, 0, "{what}");
    factory.shutdown().await;
}

/// A gate handlers wait at while it is closed.
#[derive(Clone, Default)]
struct Gate(Arc<(Mutex<bool>, parking_lot::Condvar)>);

impl Gate {
    fn close(&self) {
        *self.0.0.lock() = true;
    }

    fn open(&self) {
        *self.0.0.lock() = false;
        self.0.1.notify_all();
    }

    fn pass(&self) {
        let mut closed = self.0.0.lock();
        while *closed {
            self.0.1.wait(&mut closed);
        }
    }
}

/// Records every notification, the initial adds too, after passing its gate.
struct Behind {
    gate: Gate,
    seen: Seen,
}

impl ResourceEventHandler<ConfigMap> for Behind {
    fn on_add(&mut self, obj: &Arc<ConfigMap>, is_in_initial_list: bool) {
        self.gate.pass();
        let kind = if is_in_initial_list { "initial" } else { "add" };
        self.seen
            .lock()
            .push((kind, name(obj), String::new(), body(obj)));
    }

    fn on_update(&mut self, old: &Arc<ConfigMap>, new: &Arc<ConfigMap>) {
        self.gate.pass();
        self.seen
            .lock()
            .push(("update", name(new), body(old), body(new)));
    }

    fn on_delete(&mut self, obj: &kube_informer::DeltaObject<ConfigMap>) {
        self.gate.pass();
        self.seen
            .lock()
            .push(("delete", name(obj.object()), String::new(), String::new()));
    }
}
