//! A Compact-mode informer's cold sync against the fake API server, in both wire encodings: each
//! listed object waits in the FIFO packed from the bytes the server sent, is decoded once as it
//! is popped, and the cache keeps those bytes (issue #12 part 4); the cache then equals the
//! server, and a transform still gets the decoded object.
#![cfg(all(feature = "testing", feature = "compact"))]

use std::{collections::BTreeMap, sync::Arc};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;
use kube_informer::{
    CacheStorage, CompactConfig, FactoryConfig, SharedInformerFactory, testing::FakeApiServer,
};

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
        assert!(
            server
                .requests()
                .iter()
                .filter(|r| r.verb == kube_informer::testing::Verb::List)
                .all(|r| r.served_protobuf() == protobuf)
        );
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
