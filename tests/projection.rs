//! Decode-time projection (issue #12 part 5) on realistic Pods: the projected decode equals a
//! full decode with the same fields dropped afterwards, for list bodies, watch lines and
//! `DynamicObject`; and informers on the fake API server cache objects without the dropped
//! fields whether they came from a list, a watch or a streaming list.
#![cfg(feature = "testing")]

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{ApiResource, DynamicObject, ObjectMeta};
use kube::discovery::Scope;
use kube_informer::{
    FactoryConfig, Projection, ReflectorConfig, SharedInformerFactory,
    reflector::decode::{ListDecoder, WatchEvent, decode_watch_event_projected},
    testing::FakeApiServer,
};
use serde_json::Value;

/// The benchmarks' seeded Pod generator (7.4–7.9 KB of JSON a Pod, two `managedFields`).
#[allow(dead_code)]
#[path = "../bench/src/podgen.rs"]
mod podgen;

const LAST_APPLIED: &str = "kubectl.kubernetes.io/restartedAt";

/// The user paths of these tests: a map key with dots and slashes, a status list, a field of
/// every container.
fn user_projection() -> Projection {
    Projection::strip_managed_fields()
        .drop_path(&format!(r#"metadata.annotations["{LAST_APPLIED}"]"#))
        .and_then(|p| p.drop_path("status.conditions"))
        .and_then(|p| p.drop_path("spec.containers[*].env"))
        .unwrap()
}

/// The reference: what [`user_projection`] drops, dropped from a fully decoded Pod.
fn dropped_after(mut pod: Pod) -> Pod {
    pod.metadata.managed_fields = None;
    if let Some(a) = pod.metadata.annotations.as_mut() {
        a.remove(LAST_APPLIED);
    }
    if let Some(s) = pod.status.as_mut() {
        s.conditions = None;
    }
    for c in pod.spec.iter_mut().flat_map(|s| s.containers.iter_mut()) {
        c.env = None;
    }
    pod
}

/// The same for a `Value` (and so a `DynamicObject`).
fn dropped_after_value(mut v: Value) -> Value {
    let m = v["metadata"].as_object_mut().unwrap();
    m.remove("managedFields");
    m["annotations"]
        .as_object_mut()
        .unwrap()
        .remove(LAST_APPLIED);
    v["status"].as_object_mut().unwrap().remove("conditions");
    for c in v["spec"]["containers"].as_array_mut().unwrap() {
        c.as_object_mut().unwrap().remove("env");
    }
    v
}

fn fixture_pods(n: usize) -> Vec<Vec<u8>> {
    let f = podgen::Fixture::new(11, n);
    (0..n)
        .map(|i| {
            let mut b = Vec::new();
            f.write_pod(i, podgen::Fixture::base_rv(i), &mut b);
            b
        })
        .collect()
}

#[test]
fn projected_pods_equal_fully_decoded_pods_with_the_fields_dropped() {
    for bytes in fixture_pods(50) {
        let full: Pod = serde_json::from_slice(&bytes).unwrap();
        assert!(full.metadata.managed_fields.is_some());
        assert!(full.status.as_ref().unwrap().conditions.is_some());
        assert_eq!(
            user_projection().from_slice::<Pod>(&bytes).unwrap(),
            dropped_after(full.clone())
        );
        let stripped: Pod = Projection::strip_managed_fields()
            .from_slice(&bytes)
            .unwrap();
        assert_eq!(stripped, kube_informer::strip_managed_fields(full));
    }
}

#[test]
fn projected_list_bodies_equal_the_full_decode_with_the_fields_dropped_in_any_chunking() {
    let f = podgen::Fixture::new(5, 40);
    let body = f.list(77, podgen::Fixture::base_rv);
    let expected: Vec<Pod> = serde_json::from_slice::<k8s_openapi::List<Pod>>(&body)
        .unwrap()
        .items
        .into_iter()
        .map(dropped_after)
        .collect();
    for chunk in [1000, 4096, 65536, body.len()] {
        let mut decoder = ListDecoder::<Pod, Pod>::with_margin(8192).projection(user_projection());
        for c in body.chunks(chunk) {
            decoder.push(c, &mut |p| p).unwrap();
        }
        let page = decoder.finish(&mut |p| p).unwrap();
        assert_eq!(page.metadata.resource_version.as_deref(), Some("77"));
        assert!(page.undecodable.is_empty());
        assert_eq!(page.items, expected, "chunks of {chunk}");
    }
}

#[test]
fn projected_watch_lines_and_dynamic_objects_equal_the_full_decode_with_the_fields_dropped() {
    let p = user_projection();
    for (i, bytes) in fixture_pods(20).into_iter().enumerate() {
        let object = std::str::from_utf8(&bytes).unwrap();
        // Both field orders: the second buffers the object before its type is known.
        let line = match i % 2 {
            0 => format!(r#"{{"type":"MODIFIED","object":{object}}}"#),
            _ => format!(r#"{{"object":{object},"type":"MODIFIED"}}"#),
        };
        let WatchEvent::Modified(pod) =
            decode_watch_event_projected::<Pod>(line.as_bytes(), &p).unwrap()
        else {
            panic!("not a MODIFIED event");
        };
        let full: Pod = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(pod, dropped_after(full));

        let WatchEvent::Modified(dynamic) =
            decode_watch_event_projected::<DynamicObject>(line.as_bytes(), &p).unwrap()
        else {
            panic!("not a MODIFIED event");
        };
        let value: Value = serde_json::from_slice(&bytes).unwrap();
        let expected: DynamicObject = serde_json::from_value(dropped_after_value(value)).unwrap();
        assert_eq!(dynamic, expected);
        assert!(dynamic.data["spec"]["containers"][0].get("env").is_none());
        assert!(dynamic.data["spec"]["containers"][0].get("ports").is_some());
    }
}

async fn within<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), f)
        .await
        .unwrap_or_else(|_| panic!("{what}: likely deadlocked"))
}

async fn eventually(what: &str, f: impl Fn() -> bool) {
    within(what, async {
        while !f() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

/// Seeds `server` with `n` generated Pods (status, managedFields and all).
fn seed_pods(server: &FakeApiServer, seed: u64, n: usize) {
    for i in 0..n {
        let mut pod = podgen::pod_json(seed, i, "1");
        pod["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("resourceVersion");
        server.create_value(pod).unwrap();
    }
}

/// A cached Pod lacks every dropped field and keeps the others.
fn assert_projected(pod: &Pod) {
    let name = pod.metadata.name.as_deref().unwrap_or("?");
    assert!(
        pod.metadata.managed_fields.is_none(),
        "{name}: managedFields"
    );
    let annotations = pod.metadata.annotations.as_ref().unwrap();
    assert!(
        !annotations.contains_key(LAST_APPLIED),
        "{name}: annotation"
    );
    assert!(
        annotations.contains_key("prometheus.io/scrape"),
        "{name}: other annotations"
    );
    let status = pod.status.as_ref().unwrap();
    assert!(status.conditions.is_none(), "{name}: conditions");
    assert!(
        status.container_statuses.is_some(),
        "{name}: container statuses"
    );
    let containers = &pod.spec.as_ref().unwrap().containers;
    assert!(containers.iter().all(|c| c.env.is_none()), "{name}: env");
    assert!(
        containers.iter().all(|c| c.image.is_some()),
        "{name}: image"
    );
}

#[tokio::test]
async fn informers_cache_projected_objects_from_lists_watches_and_streaming_lists() {
    for streaming in [false, true] {
        let server = FakeApiServer::start_with_core().await.unwrap();
        seed_pods(&server, 3, 30);
        server
            .create(&ConfigMap {
                metadata: ObjectMeta {
                    name: Some("cm".into()),
                    namespace: Some("default".into()),
                    managed_fields: Some(vec![Default::default()]),
                    ..Default::default()
                },
                ..Default::default()
            })
            .unwrap();
        // Pods get the user projection, other types the default (managedFields only), and a
        // dynamic informer of Pods the default too.
        let config = FactoryConfig::default()
            .reflector(ReflectorConfig::default().streaming_list(streaming))
            .projection(Projection::strip_managed_fields())
            .projection_for::<Pod>(user_projection());
        let factory = SharedInformerFactory::new(server.client(), config);
        let pods = factory.informer::<Pod>();
        let cms = factory.informer::<ConfigMap>();
        let dynamic = factory.dynamic_informer(&ApiResource::erase::<Pod>(&()), &Scope::Namespaced);
        factory.start();
        within("sync", factory.wait_for_cache_sync()).await;

        let cached = pods.indexer().list();
        assert_eq!(cached.len(), 30, "streaming={streaming}");
        cached.iter().for_each(|p| assert_projected(p));
        let cm = cms.indexer().list();
        assert!(cm[0].metadata.managed_fields.is_none());
        let dyns = dynamic.indexer().list();
        assert_eq!(dyns.len(), 30);
        for d in &dyns {
            assert!(d.metadata.managed_fields.is_none());
            assert!(
                d.data["status"].get("conditions").is_some(),
                "only the default projection"
            );
        }

        // Objects that arrive by watch: a new Pod and a changed one.
        seed_pods(&server, 4, 1);
        let (ns, name) = (
            cached[0].metadata.namespace.as_deref(),
            cached[0].metadata.name.as_deref(),
        );
        let mut changed: Pod = server.get(ns, name.unwrap()).unwrap().unwrap();
        assert!(
            changed.metadata.managed_fields.is_some(),
            "the server keeps them"
        );
        changed
            .metadata
            .labels
            .get_or_insert_default()
            .insert("changed".into(), "yes".into());
        let changed = server.update(&changed).unwrap();
        let rv = changed.metadata.resource_version.clone();
        eventually("watched changes", || {
            let list = pods.indexer().list();
            list.len() == 31 && list.iter().any(|p| p.metadata.resource_version == rv)
        })
        .await;
        let list = pods.indexer().list();
        list.iter().for_each(|p| assert_projected(p));
        let updated = list
            .iter()
            .find(|p| p.metadata.resource_version == rv)
            .unwrap();
        assert_eq!(updated.metadata.labels.as_ref().unwrap()["changed"], "yes");
        factory.shutdown().await;
        server.shutdown().await;
    }
}
