//! A Compact-mode informer against the fake API server, in both wire encodings: each listed or
//! watched object waits in the FIFO packed from the bytes the server sent, is decoded once as it
//! is popped, and the cache keeps those bytes (issue #12 part 4); the cache then equals the
//! server, handlers see the right objects, and a transform still gets the decoded object.
#![cfg(all(feature = "testing", feature = "compact"))]

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;
use kube_informer::{
    CacheStorage, CompactConfig, FactoryConfig, ReflectorConfig, ResourceEventHandlerFuncs,
    SharedInformerFactory,
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
    for protobuf in [true, false] {
        let server = server(protobuf).await;
        let factory = SharedInformerFactory::new(
            server.client(),
            FactoryConfig::default().cache_storage(compact()),
        );
        factory.informer::<ConfigMap>();
        factory.start();
        assert!(factory.wait_for_cache_sync().await.values().all(|s| *s));
        let stats = factory.informer::<ConfigMap>().indexer().stats();
        assert_eq!(stats.packed, N as u64, "protobuf {protobuf}: {stats:?}");
        assert_eq!(
            stats.packed_from_wire, N as u64,
            "protobuf {protobuf}: {stats:?}"
        );
        assert_eq!(stats.unpacks, N as u64, "protobuf {protobuf}: {stats:?}");
        assert_eq!(
            stats.kept_packed, N as u64,
            "protobuf {protobuf}: {stats:?}"
        );
        assert_eq!(stats.decodes, 0, "protobuf {protobuf}: nothing read yet");
        assert!(stats.dictionary_trainings <= 1);
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
    let server = server(false).await;
    server
        .create_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "bad", "namespace": "ns-0"},
            "data": "not a map",
        }))
        .unwrap();
    let factory = SharedInformerFactory::new(
        server.client(),
        FactoryConfig::default().cache_storage(compact()),
    );
    let informer = factory.informer::<ConfigMap>();
    let reported = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let sink = reported.clone();
    informer
        .set_watch_error_handler(Arc::new(move |e| sink.lock().push(e.to_string())))
        .unwrap();
    factory.start();
    assert!(factory.wait_for_cache_sync().await.values().all(|s| *s));
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
        "{reported:?}"
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
    for protobuf in [true, false] {
        let server = server(protobuf).await;
        let factory = SharedInformerFactory::new(
            server.client(),
            FactoryConfig::default()
                .cache_storage(compact())
                .reflector(ReflectorConfig::default().streaming_list(streaming)),
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
        for i in 0..30 {
            let mut c = cm(i);
            c.data
                .as_mut()
                .unwrap()
                .insert("body".into(), format!("changed {i}"));
            server.update(&c).unwrap();
        }
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
            "protobuf {protobuf}: {stats:?}"
        );
        assert_eq!(grew(stats.unpacks, before.unpacks), 40, "{stats:?}");
        assert_eq!(grew(stats.kept_packed, before.kept_packed), 40, "{stats:?}");
        assert_eq!(stats.decode_errors, 0);
        assert_equals_server(&server, &factory);
        let seen = seen.lock().clone();
        let mut want: Vec<_> = (0..30)
            .map(|i| {
                (
                    "update",
                    format!("cm-{i}"),
                    body(&cm(i)),
                    format!("changed {i}"),
                )
            })
            .chain((N..N + 10).map(|i| ("add", format!("cm-{i}"), String::new(), body(&cm(i)))))
            .chain((100..105).map(|i| ("delete", format!("cm-{i}"), String::new(), String::new())))
            .collect();
        let mut got = seen.clone();
        want.sort();
        got.sort();
        assert_eq!(got, want, "protobuf {protobuf}");
        assert!(all_served(&server, Verb::Watch, protobuf));
        factory.shutdown().await;
    }
}

/// A watched object that does not fit `K` is packed undecoded like any other; it is found out
/// when popped, reported once (without quoting it), and its cached version is dropped with a
/// tombstone, as for a decoded watch.
#[tokio::test]
async fn a_watched_object_that_does_not_decode_tombstones_its_cached_version() {
    let server = server(false).await;
    let factory = SharedInformerFactory::new(
        server.client(),
        FactoryConfig::default().cache_storage(compact()),
    );
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
    server.update_value(bad).unwrap();
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
        "{reported:?}"
    );
    assert!(
        reported.iter().all(|e| !e.contains("not a map")),
        "{reported:?}"
    );
    assert_eq!(indexer.stats().decode_errors, 1);
    factory.shutdown().await;
}
