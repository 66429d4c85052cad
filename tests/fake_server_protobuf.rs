//! The fake API server's protobuf: raw requests with an `Accept` header (content types, magic,
//! frames), and round trips of what it serves through the crate's protobuf decoder.
#![cfg(feature = "testing")]

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod, Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::core::ApiResource;
use kube_informer::protobuf::encode::{self, EncodeError};
use kube_informer::protobuf::{self, LengthPrefixFramer, ProtobufListDecoder};
use kube_informer::reflector::{Projection, WatchEvent};
use kube_informer::testing::{FakeApiServer, Verb};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

const PB_FIRST: &str = "application/vnd.kubernetes.protobuf, application/json";
const PB: &str = "application/vnd.kubernetes.protobuf";
const PB_WATCH: &str = "application/vnd.kubernetes.protobuf;stream=watch";
const META_LIST: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";

fn ok<T, E: std::fmt::Display>(r: Result<T, E>) -> T {
    match r {
        Ok(t) => t,
        Err(e) => panic!("{e}"),
    }
}

async fn server() -> FakeApiServer {
    let s = ok(FakeApiServer::start_with_core().await);
    s.register::<Service>();
    s.register::<Lease>();
    s.register::<Event>();
    s.register::<Deployment>();
    s
}

/// A raw GET: status, content type and the whole body.
async fn get(s: &FakeApiServer, path: &str, accept: Option<&str>) -> (u16, String, Bytes) {
    let mut req = http::Request::get(path);
    if let Some(a) = accept {
        req = req.header(http::header::ACCEPT, a);
    }
    let req = ok(req.body(kube::client::Body::empty()));
    let resp = ok(s.client().send(req).await);
    let status = resp.status().as_u16();
    let ct = resp
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = ok(resp.into_body().collect().await).to_bytes();
    (status, ct, body)
}

/// An open watch: reads frames until `n` are in or the stream ends (`Err` when it ends with a
/// body error), with whatever is left half-read.
struct Watch {
    content_type: String,
    body: kube::client::Body,
    framer: LengthPrefixFramer,
}

async fn watch(s: &FakeApiServer, path: &str, accept: &str) -> Watch {
    let req = ok(http::Request::get(path)
        .header(http::header::ACCEPT, accept)
        .body(kube::client::Body::empty()));
    let resp = ok(s.client().send(req).await);
    assert_eq!(resp.status(), 200);
    let content_type = resp
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    Watch {
        content_type,
        body: resp.into_body(),
        framer: LengthPrefixFramer::new(16 << 20),
    }
}

impl Watch {
    /// `n` frames (fewer if the stream ends cleanly); the stream must not be cut.
    async fn whole(&mut self, n: usize) -> Vec<Vec<u8>> {
        match self.frames(n).await {
            Ok(f) => f,
            Err(f) => panic!("stream cut after {} frames", f.len()),
        }
    }

    /// Up to `n` more frames; `Err(frames)` if the body failed (a cut connection) first,
    /// `Ok` with fewer if it ended cleanly.
    async fn frames(&mut self, n: usize) -> Result<Vec<Vec<u8>>, Vec<Vec<u8>>> {
        let mut out = Vec::new();
        while out.len() < n {
            let next = tokio::time::timeout(Duration::from_secs(5), self.body.frame()).await;
            match next {
                Err(_) => panic!("no frame within 5s ({} of {n})", out.len()),
                Ok(None) => return Ok(out),
                Ok(Some(Err(_))) => return Err(out),
                Ok(Some(Ok(f))) => {
                    if let Ok(data) = f.into_data() {
                        out.extend(ok(self.framer.push(&data)));
                    }
                }
            }
        }
        Ok(out)
    }
}

fn event<K: DeserializeOwned + 'static>(frame: &[u8]) -> WatchEvent<K> {
    ok(protobuf::decode_watch_frame(frame, &Projection::none()))
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "x", "b": "2"}},
        "spec": {
            "containers": [{
                "name": "c", "image": "nginx:1", "args": ["-v", ""],
                "ports": [{"containerPort": 80, "protocol": "TCP"}, {"containerPort": 443, "name": "https"}],
                "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}, "requests": {"cpu": "1"}},
                "livenessProbe": {"httpGet": {"port": "http", "path": "/"}, "periodSeconds": 10},
                "readinessProbe": {"tcpSocket": {"port": 8080}},
                "env": [{"name": "A", "value": "1"}, {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
            }],
            "volumes": [
                {"name": "v", "hostPath": {"path": "/tmp"}},
                {"name": "s", "secret": {"secretName": "s", "defaultMode": 420}},
                {"name": "e", "emptyDir": {}},
            ],
            "terminationGracePeriodSeconds": 30,
            "enableServiceLinks": false,
            "priority": -5,
        },
        "status": {"phase": "Running", "startTime": "2024-01-02T03:04:05Z",
                   "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2024-01-02T03:04:06Z"}]},
    }))
    .unwrap_or_default()
}

fn secret() -> Secret {
    let mut s = Secret::default();
    s.metadata.name = Some("bin".into());
    s.metadata.namespace = Some("default".into());
    s.data = Some(BTreeMap::from([
        ("all".to_string(), ByteString((0..=255).collect())),
        ("empty".to_string(), ByteString(Vec::new())),
    ]));
    s.string_data = None;
    s.type_ = Some("Opaque".into());
    s
}

fn config_map() -> ConfigMap {
    let mut c = ConfigMap::default();
    c.metadata.name = Some("cm".into());
    c.metadata.namespace = Some("default".into());
    c.data = Some(BTreeMap::from([("k".to_string(), "v".to_string())]));
    c.binary_data = Some(BTreeMap::from([(
        "b".to_string(),
        ByteString(vec![0, 0xff, 0x80, 10]),
    )]));
    c.immutable = Some(true);
    c
}

fn service() -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "svc", "namespace": "default", "annotations": {"a": "b"}},
        "spec": {
            "selector": {"app": "x"}, "type": "ClusterIP", "clusterIP": "10.0.0.1",
            "ports": [{"name": "a", "port": 80, "targetPort": 8080}, {"name": "b", "port": 443, "targetPort": "https"}],
        },
    }))
    .unwrap_or_default()
}

fn lease() -> Lease {
    serde_json::from_value(json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "l", "namespace": "default"},
        "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15,
                 "acquireTime": "2024-01-02T03:04:05.123456Z", "renewTime": "2024-01-02T03:04:07.000001Z",
                 "leaseTransitions": 0},
    }))
    .unwrap_or_default()
}

fn core_event() -> Event {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "e", "namespace": "default"},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default", "uid": "u"},
        "reason": "Started", "message": "started", "type": "Normal", "count": 3,
        "firstTimestamp": "2024-01-02T03:04:05Z", "lastTimestamp": "2024-01-02T03:04:09Z",
        "eventTime": "2024-01-02T03:04:05.250000Z",
        "source": {"component": "kubelet"},
        "reportingComponent": "", "reportingInstance": "",
    }))
    .unwrap_or_default()
}

fn deployment() -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "default", "generation": 2,
                     "managedFields": [{"manager": "m", "operation": "Apply", "apiVersion": "apps/v1",
                                        "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}},
                                        "time": "2024-01-02T03:04:05Z"}]},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "x"}},
                 "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}},
                 "template": {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}},
        "status": {"replicas": 3, "readyReplicas": 3, "observedGeneration": 2},
    }))
    .unwrap_or_default()
}

/// `obj` encoded (as the fake server would), then decoded with the crate's decoder.
fn round_trip<K>(obj: &K) -> K
where
    K: kube::Resource<DynamicType = ()> + Serialize + DeserializeOwned + 'static,
{
    let v = ok(serde_json::to_value(obj));
    let bytes = ok(encode::encode_object(
        &K::api_version(&()),
        &K::kind(&()),
        &v,
    ));
    assert_eq!(bytes.get(..4), Some(&b"k8s\0"[..]));
    ok(protobuf::decode_object(&bytes, &Projection::none()))
}

#[test]
fn objects_round_trip_through_the_decoder() {
    let p = pod("p");
    assert_eq!(round_trip(&p), p);
    assert!(p.spec.as_ref().is_some_and(|s| s.priority == Some(-5)));
    let s = secret();
    assert_eq!(round_trip(&s), s);
    let c = config_map();
    assert_eq!(round_trip(&c), c);
    let svc = service();
    assert_eq!(round_trip(&svc), svc);
    let l = lease();
    assert_eq!(round_trip(&l), l);
    let e = core_event();
    assert_eq!(round_trip(&e), e);
    let d = deployment();
    assert_eq!(round_trip(&d), d);
    // The fixtures must not be defaults (a failed `from_value` would make them so).
    assert!(svc.spec.is_some() && l.spec.is_some() && e.event_time.is_some());
}

#[test]
fn lists_and_watch_frames_round_trip() {
    let pods = [pod("a"), pod("b"), pod("c")];
    let values: Vec<Value> = pods.iter().map(|p| ok(serde_json::to_value(p))).collect();
    let refs: Vec<&Value> = values.iter().collect();
    let meta = json!({"resourceVersion": "12", "continue": "tok", "remainingItemCount": 4});
    let body = ok(encode::encode_list("v1", "PodList", &meta, &refs));
    // Fed in small chunks, as a body arrives.
    let mut decoder = ProtobufListDecoder::<Pod, Pod>::new();
    for chunk in body.chunks(7) {
        ok(decoder.push(chunk, &mut |p| p));
    }
    let page = ok(decoder.finish(&mut |p| p));
    assert_eq!(page.items, pods);
    assert_eq!(page.metadata.resource_version.as_deref(), Some("12"));
    assert_eq!(page.metadata.continue_.as_deref(), Some("tok"));
    assert_eq!(page.metadata.remaining_item_count, Some(4));

    let frame = ok(encode::encode_watch_event(
        "MODIFIED", "v1", "Pod", &values[1],
    ));
    let len = u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
    assert_eq!(len as usize, frame.len() - 4);
    match event::<Pod>(&frame[4..]) {
        WatchEvent::Modified(p) => assert_eq!(p, pods[1]),
        other => panic!("{other:?}"),
    }
    let status = json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": 410,
                        "reason": "Expired", "message": "too old resource version: 1 (5)"});
    let frame = ok(encode::encode_watch_event("ERROR", "v1", "Status", &status));
    match event::<Pod>(&frame[4..]) {
        WatchEvent::Error(s) => {
            assert_eq!(s.code, 410);
            assert_eq!(s.reason, "Expired");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn encoder_type_errors_name_the_path() {
    let bad = json!({"metadata": {"name": 5}});
    match encode::encode_object("v1", "Pod", &bad) {
        Err(EncodeError::WrongType { path, .. }) => assert_eq!(path, ".metadata.name"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        encode::encode_object("example.com/v1", "Widget", &json!({})),
        Err(EncodeError::UnknownKind { .. })
    ));
}

#[tokio::test]
async fn get_is_protobuf_when_preferred() {
    let s = server().await;
    let created = ok(s.create(&pod("p")));
    let path = "/api/v1/namespaces/default/pods/p";
    let (status, ct, body) = get(&s, path, Some(PB_FIRST)).await;
    assert_eq!((status, ct.as_str()), (200, PB));
    assert_eq!(body.get(..4), Some(&b"k8s\0"[..]));
    let decoded: Pod = ok(protobuf::decode_object(&body, &Projection::none()));
    assert_eq!(decoded, created);
    let last = s.requests().pop();
    assert!(
        last.as_ref()
            .is_some_and(|r| r.served_protobuf() && r.verb == Verb::Get)
    );

    // JSON when it comes first, when it is all that is asked for, and without Accept.
    for accept in [
        Some("application/json, application/vnd.kubernetes.protobuf"),
        Some("application/json"),
        None,
    ] {
        let (status, ct, body) = get(&s, path, accept).await;
        assert_eq!(
            (status, ct.as_str()),
            (200, "application/json"),
            "{accept:?}"
        );
        let decoded: Pod = ok(serde_json::from_slice(&body));
        assert_eq!(decoded, created);
        assert!(s.requests().pop().is_some_and(|r| !r.served_protobuf()));
    }

    // Every kind the server holds, as stored.
    let secret = ok(s.create(&secret()));
    let cm = ok(s.create(&config_map()));
    let svc = ok(s.create(&service()));
    let lease = ok(s.create(&lease()));
    let ev = ok(s.create(&core_event()));
    let d = ok(s.create(&deployment()));
    async fn check<K: DeserializeOwned + 'static + PartialEq + std::fmt::Debug>(
        s: &FakeApiServer,
        path: &str,
        want: &K,
    ) {
        let (status, ct, body) = get(s, path, Some(PB_FIRST)).await;
        assert_eq!((status, ct.as_str()), (200, PB), "{path}");
        let got: K = ok(protobuf::decode_object(&body, &Projection::none()));
        assert_eq!(&got, want, "{path}");
    }
    check(&s, "/api/v1/namespaces/default/secrets/bin", &secret).await;
    check(&s, "/api/v1/namespaces/default/configmaps/cm", &cm).await;
    check(&s, "/api/v1/namespaces/default/services/svc", &svc).await;
    check(
        &s,
        "/apis/coordination.k8s.io/v1/namespaces/default/leases/l",
        &lease,
    )
    .await;
    check(&s, "/api/v1/namespaces/default/events/e", &ev).await;
    check(&s, "/apis/apps/v1/namespaces/default/deployments/d", &d).await;
}

#[tokio::test]
async fn errors_are_protobuf_statuses() {
    let s = server().await;
    let (status, ct, body) = get(
        &s,
        "/api/v1/namespaces/default/pods/missing",
        Some(PB_FIRST),
    )
    .await;
    assert_eq!((status, ct.as_str()), (404, PB));
    let st: Status = ok(protobuf::decode_object(&body, &Projection::none()));
    assert_eq!(st.code, Some(404));
    assert_eq!(st.reason.as_deref(), Some("NotFound"));
    // Injected faults too.
    s.faults().fail_next(1, 429);
    let (status, ct, body) = get(&s, "/api/v1/namespaces/default/pods", Some(PB_FIRST)).await;
    assert_eq!((status, ct.as_str()), (429, PB));
    let st: Status = ok(protobuf::decode_object(&body, &Projection::none()));
    assert_eq!(st.reason.as_deref(), Some("TooManyRequests"));
    // A bad list option (422).
    let (status, ct, _) = get(&s, "/api/v1/pods?sendInitialEvents=true", Some(PB_FIRST)).await;
    assert_eq!((status, ct.as_str()), (422, PB));
    // An unknown resource has no protobuf form to negotiate: JSON.
    let (status, ct, _) = get(&s, "/apis/nope/v1/widgets", Some(PB_FIRST)).await;
    assert_eq!((status, ct.as_str()), (404, "application/json"));
}

#[tokio::test]
async fn paged_lists_are_protobuf() {
    let s = server().await;
    let mut want = Vec::new();
    for i in 0..5 {
        let mut c = config_map();
        c.metadata.name = Some(format!("cm-{i}"));
        want.push(ok(s.create(&c)));
    }
    let mut got = Vec::new();
    let mut next = Some(String::new());
    let mut pages = 0;
    while let Some(token) = next.take() {
        let path = format!("/api/v1/namespaces/default/configmaps?limit=2&continue={token}");
        let (status, ct, body) = get(&s, &path, Some(PB_FIRST)).await;
        assert_eq!((status, ct.as_str()), (200, PB));
        assert_eq!(body.get(..4), Some(&b"k8s\0"[..]));
        let mut decoder = ProtobufListDecoder::<ConfigMap, ConfigMap>::new();
        ok(decoder.push(&body, &mut |c| c));
        let page = ok(decoder.finish(&mut |c| c));
        assert!(page.items.len() <= 2);
        assert_eq!(page.metadata.resource_version.as_deref(), Some("5"));
        got.extend(page.items);
        next = page.metadata.continue_.filter(|c| !c.is_empty());
        pages += 1;
    }
    assert_eq!(pages, 3);
    assert_eq!(got, want);
    assert!(
        s.requests()
            .iter()
            .filter(|r| r.verb == Verb::List)
            .all(|r| r.served_protobuf() && r.content_type == PB)
    );
}

#[tokio::test]
async fn watches_are_length_prefixed_frames() {
    let s = server().await;
    let a = ok(s.create(&pod("a")));
    let mut w = watch(
        &s,
        "/api/v1/namespaces/default/pods?watch=true&allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan",
        PB_FIRST,
    )
    .await;
    assert_eq!(w.content_type, PB_WATCH);
    let frames = w.whole(2).await;
    match event::<Pod>(&frames[0]) {
        WatchEvent::Added(p) => assert_eq!(p, a),
        other => panic!("{other:?}"),
    }
    match event::<Pod>(&frames[1]) {
        WatchEvent::Bookmark {
            resource_version,
            initial_events_end,
        } => {
            assert_eq!(resource_version, "1");
            assert!(initial_events_end);
        }
        other => panic!("{other:?}"),
    }
    let b = ok(s.create(&pod("b")));
    s.bookmark();
    let frames = w.whole(2).await;
    match event::<Pod>(&frames[0]) {
        WatchEvent::Added(p) => assert_eq!(p, b),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        event::<Pod>(&frames[1]),
        WatchEvent::Bookmark {
            initial_events_end: false,
            ..
        }
    ));
    ok(s.delete::<Pod>(Some("default"), "a"));
    match event::<Pod>(&w.whole(1).await[0]) {
        WatchEvent::Deleted(p) => assert_eq!(p.metadata.name.as_deref(), Some("a")),
        other => panic!("{other:?}"),
    }
    assert!(w.framer.pending().is_empty());
    let rec = s.requests().into_iter().find(|r| r.verb == Verb::Watch);
    assert!(rec.is_some_and(|r| r.content_type == PB_WATCH && r.served_protobuf()));
}

#[tokio::test]
async fn expired_watch_is_an_error_frame() {
    let s = server().await;
    ok(s.create(&pod("a")));
    ok(s.create(&pod("b")));
    s.compact(2);
    let mut w = watch(
        &s,
        "/api/v1/namespaces/default/pods?watch=true&resourceVersion=1",
        PB_FIRST,
    )
    .await;
    assert_eq!(w.content_type, PB_WATCH);
    let frames = w.whole(2).await;
    assert_eq!(frames.len(), 1);
    match event::<Pod>(&frames[0]) {
        WatchEvent::Error(st) => assert_eq!(st.code, 410),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn metadata_only_is_protobuf_for_custom_resources_too() {
    let s = server().await;
    let widgets = ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    };
    s.register_api_resource(&widgets, true);
    ok(s.create_value(json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w", "namespace": "default", "labels": {"a": "b"}},
        "spec": {"size": 3},
    })));
    // The custom resource itself: JSON even when protobuf is preferred.
    let (status, ct, body) = get(
        &s,
        "/apis/example.com/v1/namespaces/default/widgets/w",
        Some(PB_FIRST),
    )
    .await;
    assert_eq!((status, ct.as_str()), (200, "application/json"));
    let v: Value = ok(serde_json::from_slice(&body));
    assert_eq!(v["spec"]["size"], 3);
    // Its metadata: protobuf.
    let (status, ct, body) = get(
        &s,
        "/apis/example.com/v1/namespaces/default/widgets",
        Some(META_LIST),
    )
    .await;
    assert_eq!((status, ct.as_str()), (200, PB));
    let mut decoder = ProtobufListDecoder::<Value, Value>::new();
    ok(decoder.push(&body, &mut |v| v));
    let page = ok(decoder.finish(&mut |v| v));
    assert_eq!(page.items.len(), 1);
    // Protobuf list items carry no apiVersion/kind (only the envelope does).
    assert_eq!(page.items[0]["metadata"]["labels"]["a"], "b");
    assert!(page.items[0].get("spec").is_none());
    // And a metadata-only watch of pods.
    ok(s.create(&pod("p")));
    let mut w = watch(
        &s,
        "/api/v1/namespaces/default/pods?watch=true",
        "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json",
    )
    .await;
    assert_eq!(w.content_type, PB_WATCH);
    match event::<Value>(&w.whole(1).await[0]) {
        WatchEvent::Added(v) => {
            assert_eq!(v["kind"], "PartialObjectMetadata");
            assert_eq!(v["metadata"]["name"], "p");
            assert!(v.get("spec").is_none());
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn protobuf_can_be_switched_off() {
    let s = server().await;
    ok(s.create(&pod("p")));
    ok(s.create(&config_map()));
    let pods = "/api/v1/namespaces/default/pods";
    let cms = "/api/v1/namespaces/default/configmaps";
    s.set_protobuf_supported_for::<Pod>(false);
    assert_eq!(get(&s, pods, Some(PB_FIRST)).await.1, "application/json");
    assert_eq!(get(&s, cms, Some(PB_FIRST)).await.1, PB);
    // Metadata-only requests are not affected by the per-kind switch.
    assert_eq!(get(&s, pods, Some(META_LIST)).await.1, PB);
    s.set_protobuf_supported_for::<Pod>(true);
    assert_eq!(get(&s, pods, Some(PB_FIRST)).await.1, PB);
    s.set_protobuf_supported(false);
    assert_eq!(get(&s, pods, Some(PB_FIRST)).await.1, "application/json");
    assert_eq!(get(&s, cms, Some(META_LIST)).await.1, "application/json");
    let (_, ct, _) = get(&s, "/api/v1/namespaces/default/pods/none", Some(PB_FIRST)).await;
    assert_eq!(ct, "application/json");
    // A protobuf-only Accept with protobuf off: JSON (the fake server does not answer 406).
    assert_eq!(get(&s, pods, Some(PB)).await.1, "application/json");
}

#[tokio::test]
async fn faults_on_protobuf_watches() {
    let s = server().await;
    let mut w = watch(&s, "/api/v1/namespaces/default/pods?watch=true", PB_FIRST).await;
    s.faults().malformed_line_next();
    ok(s.create(&pod("a")));
    // A well-framed frame that is not a WatchEvent, then the real event.
    let frames = w.whole(2).await;
    assert!(protobuf::decode_watch_frame::<Pod>(&frames[0], &Projection::none()).is_err());
    assert!(matches!(event::<Pod>(&frames[1]), WatchEvent::Added(_)));

    // A truncated frame: the stream is cut with part of a frame in the framer.
    s.faults().truncated_event_next();
    ok(s.create(&pod("b")));
    let cut = w.frames(1).await;
    assert!(matches!(cut, Err(ref f) if f.is_empty()), "{cut:?}");
    assert!(w.framer.pending().len() > 4);

    // drop_watches_after cuts a stream after whole frames.
    s.faults().clear();
    s.faults().drop_watches_after(1);
    let mut w = watch(&s, "/api/v1/namespaces/default/pods?watch=true", PB_FIRST).await;
    let got = w.frames(3).await;
    assert!(matches!(got, Err(ref f) if f.len() == 1), "{got:?}");
    assert!(w.framer.pending().is_empty());
}

/// Where two JSON values first differ (numbers compared by value: a protobuf `double` reads
/// back as `1.0` where Go's JSON wrote `1`).
fn first_diff(a: &Value, b: &Value, path: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            x.keys()
                .chain(y.keys())
                .find_map(|k| match (x.get(k), y.get(k)) {
                    (Some(p), Some(q)) => first_diff(p, q, &format!("{path}.{k}")),
                    // Go's JSON writes a zero `metav1.Time` as `null`; decoded protobuf leaves it out.
                    (None, Some(Value::Null)) | (Some(Value::Null), None) => None,
                    (p, q) => Some(format!("{path}.{k}: {p:?} vs {q:?}")),
                })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (p, q))| first_diff(p, q, &format!("{path}[{i}]"))),
        (Value::Number(x), Value::Number(y)) if x.as_f64() == y.as_f64() => None,
        _ => (a != b).then(|| format!("{path}: {a} vs {b}")),
    }
}

/// The golden fixtures Go's serializers wrote (`scripts/protobuf-schema.sh fixtures`).
fn fixtures_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/protobuf")
}

/// Encoder parity with Go: for each golden fixture (`x.json` as Go's `encoding/json` wrote an
/// object, `x.pb` as its protobuf serializer did), this encoder's bytes for the JSON decode to
/// the same value as Go's bytes. (Not the same bytes: Go also writes the zero values JSON
/// leaves out.)
#[test]
fn encoder_matches_go_fixtures() {
    let dir = fixtures_dir();
    let mut checked = Vec::new();
    for entry in ok(std::fs::read_dir(&dir)).flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "pb") {
            continue;
        }
        let Ok(text) = std::fs::read(path.with_extension("json")) else {
            continue;
        };
        let go = ok(std::fs::read(&path));
        let v: Value = ok(serde_json::from_slice(&text));
        let (Some(api_version), Some(kind)) = (v["apiVersion"].as_str(), v["kind"].as_str()) else {
            panic!("{}: no apiVersion/kind", path.display());
        };
        let ours = match encode::encode_object(api_version, kind, &v) {
            Ok(b) => b,
            Err(e) => panic!("{}: {e}", path.display()),
        };
        // The same envelope.
        let envelope_len = 4 + 2 + 4 + api_version.len() + kind.len();
        assert_eq!(
            ours.get(..envelope_len),
            go.get(..envelope_len),
            "{}",
            path.display()
        );
        let from_go: Value = ok(protobuf::decode_object(&go, &Projection::none()));
        let from_ours: Value = ok(protobuf::decode_object(&ours, &Projection::none()));
        assert_eq!(
            from_ours,
            from_go,
            "{}: {:?}",
            path.display(),
            first_diff(&from_ours, &from_go, "")
        );
        // And what JSON said, but for what protobuf does not carry (list items' TypeMeta).
        if !kind.ends_with("List") {
            let diff = first_diff(&from_ours, &v, "");
            assert!(diff.is_none(), "{}: {diff:?}", path.display());
        }
        checked.push(path);
    }
    assert!(checked.len() >= 18, "only {checked:?}");
}

/// The same for the watch stream fixture: frame by frame, our frames for the JSON lines decode
/// as Go's frames do.
#[test]
fn watch_frames_match_go_fixture() {
    let dir = fixtures_dir();
    let go = ok(std::fs::read(dir.join("watch-pods.pb")));
    let lines = ok(std::fs::read_to_string(dir.join("watch-pods.jsonl")));
    let mut framer = LengthPrefixFramer::new(1 << 20);
    let go_frames = ok(framer.push(&go));
    assert!(framer.pending().is_empty());
    let lines: Vec<Value> = lines.lines().map(|l| ok(serde_json::from_str(l))).collect();
    assert_eq!(go_frames.len(), lines.len());
    assert!(lines.len() >= 5);
    let describe = |e: WatchEvent<Value>| format!("{e:?}");
    for (line, go_frame) in lines.iter().zip(&go_frames) {
        let object = &line["object"];
        let frame = ok(encode::encode_watch_event(
            line["type"].as_str().unwrap_or(""),
            object["apiVersion"].as_str().unwrap_or(""),
            object["kind"].as_str().unwrap_or(""),
            object,
        ));
        assert_eq!(
            describe(event::<Value>(&frame[4..])),
            describe(event::<Value>(go_frame)),
            "{line}"
        );
        // The frame's event type and the object's envelope are where Go puts them.
        assert_eq!(frame.get(4..6), go_frame.get(..2));
    }
}

#[tokio::test]
async fn write_responses_are_protobuf_too() {
    let s = server().await;
    let body = ok(serde_json::to_vec(&config_map()));
    let req = ok(http::Request::post("/api/v1/namespaces/default/configmaps")
        .header(http::header::ACCEPT, PB_FIRST)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(kube::client::Body::from(body)));
    let resp = ok(s.client().send(req).await);
    assert_eq!(resp.status(), 201);
    assert_eq!(
        resp.headers()
            .get(http::header::CONTENT_TYPE)
            .map(|v| v.as_bytes()),
        Some(PB.as_bytes())
    );
    let bytes = ok(resp.into_body().collect().await).to_bytes();
    let created: ConfigMap = ok(protobuf::decode_object(&bytes, &Projection::none()));
    assert_eq!(created.binary_data, config_map().binary_data);
    assert_eq!(created.metadata.resource_version.as_deref(), Some("1"));
    let rec = s.requests().pop();
    assert!(rec.is_some_and(|r| r.verb == Verb::Create && r.served_protobuf()));

    let req = ok(
        http::Request::delete("/api/v1/namespaces/default/configmaps/cm")
            .header(http::header::ACCEPT, PB_FIRST)
            .body(kube::client::Body::empty()),
    );
    let resp = ok(s.client().send(req).await);
    assert_eq!(resp.status(), 200);
    let bytes = ok(resp.into_body().collect().await).to_bytes();
    let deleted: ConfigMap = ok(protobuf::decode_object(&bytes, &Projection::none()));
    assert_eq!(deleted.metadata.name.as_deref(), Some("cm"));
}

#[tokio::test]
async fn truncated_event_on_a_json_watch_is_a_partial_line() {
    let s = server().await;
    let req = ok(
        http::Request::get("/api/v1/namespaces/default/pods?watch=true")
            .header(http::header::ACCEPT, "application/json")
            .body(kube::client::Body::empty()),
    );
    let resp = ok(s.client().send(req).await);
    assert_eq!(
        resp.headers()
            .get(http::header::CONTENT_TYPE)
            .map(|v| v.as_bytes()),
        Some(&b"application/json"[..])
    );
    let mut body = resp.into_body();
    s.faults().truncated_event_next();
    ok(s.create(&pod("a")));
    let mut got = Vec::new();
    let cut = loop {
        match tokio::time::timeout(Duration::from_secs(5), body.frame()).await {
            Err(_) => panic!("no end within 5s"),
            Ok(None) => break false,
            Ok(Some(Err(_))) => break true,
            Ok(Some(Ok(f))) => got.extend_from_slice(&f.into_data().unwrap_or_default()),
        }
    };
    assert!(cut, "the stream must end with an error");
    assert!(
        !got.is_empty() && !got.contains(&b'\n'),
        "{}",
        String::from_utf8_lossy(&got)
    );
    assert!(serde_json::from_slice::<Value>(&got).is_err());
}

/// A raw write with a JSON body: status and the `Status` (or object) it answered.
async fn send_json(
    s: &FakeApiServer,
    method: http::Method,
    path: &str,
    content_type: &str,
    body: &Value,
) -> (u16, Value) {
    let req = ok(http::Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::CONTENT_TYPE, content_type)
        .body(kube::client::Body::from(ok(serde_json::to_vec(body)))));
    let resp = ok(s.client().send(req).await);
    let status = resp.status().as_u16();
    let bytes = ok(resp.into_body().collect().await).to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// kube-apiserver decodes a write into its Go type first: a value of the wrong JSON type is
/// refused (400 for a body, 422 for a patch, 500 for an apply, as the handlers answer) and
/// never stored, so watchers and protobuf lists never see it.
#[tokio::test]
async fn writes_of_the_wrong_json_type_are_refused_and_not_stored() {
    let s = server().await;
    let path = "/api/v1/namespaces/default/configmaps";
    let (code, status) = send_json(
        &s,
        http::Method::POST,
        path,
        "application/json",
        &json!({"metadata": {"name": "bad"}, "data": {"k": 5}}),
    )
    .await;
    assert_eq!((code, status["reason"].as_str()), (400, Some("BadRequest")));
    let message = status["message"].as_str().unwrap_or("");
    assert!(
        message.starts_with("ConfigMap in version \"v1\" cannot be handled as a ConfigMap: json: cannot unmarshal number into Go struct field ConfigMap.data.k of type string"),
        "{message}"
    );
    assert_eq!(s.current_resource_version(), 0);

    ok(s.create(&config_map()));
    let item = format!("{path}/cm");
    let mut bad = ok(serde_json::to_value(config_map()));
    bad["data"]["k"] = json!(true);
    let (code, _) = send_json(&s, http::Method::PUT, &item, "application/json", &bad).await;
    assert_eq!(code, 400);
    let (code, status) = send_json(
        &s,
        http::Method::PATCH,
        &item,
        "application/merge-patch+json",
        &json!({"data": {"k": 5}}),
    )
    .await;
    assert_eq!((code, status["reason"].as_str()), (422, Some("Invalid")));
    assert_eq!(status["details"]["causes"][0]["field"], "patch");
    let (code, _) = send_json(
        &s,
        http::Method::PATCH,
        &item,
        "application/json-patch+json",
        &json!([{"op": "add", "path": "/binaryData/x", "value": "not base64!"}]),
    )
    .await;
    assert_eq!(code, 422);
    let (code, _) = send_json(
        &s,
        http::Method::PATCH,
        &item,
        "application/strategic-merge-patch+json",
        &json!({"immutable": "yes"}),
    )
    .await;
    assert_eq!(code, 422);
    let (code, status) = send_json(
        &s,
        http::Method::PATCH,
        &format!("{item}?fieldManager=m"),
        "application/apply-patch+yaml",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"k": 5}}),
    )
    .await;
    assert_eq!(code, 500, "{status}");
    let message = status["message"].as_str().unwrap_or("");
    assert!(
        message.starts_with(
            "failed to create typed patch object (default/cm; /v1, Kind=ConfigMap): .data.k"
        ),
        "{message}"
    );
    // Nothing was written, and the resource still lists in protobuf.
    assert_eq!(s.current_resource_version(), 1);
    let (code, _, _) = get(&s, path, Some(PB)).await;
    assert_eq!(code, 200);

    // What Go decodes is taken: lenient base64, nulls in maps.
    let (code, status) = send_json(
        &s,
        http::Method::POST,
        path,
        "application/json",
        &json!({"metadata": {"name": "ok"}, "data": {"k": null}, "binaryData": {"b": "aGl="}}),
    )
    .await;
    assert_eq!(code, 201, "{status}");
    let (code, _, _) = get(&s, path, Some(PB)).await;
    assert_eq!(code, 200);
}
