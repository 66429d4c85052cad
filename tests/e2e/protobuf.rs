//! Protobuf against the real kube-apiserver: a realistic object of a dozen built-in kinds decodes
//! from the server's protobuf exactly as from its JSON; informers list and watch in protobuf
//! (asserted from the responses' content types); metadata-only informers of a custom resource
//! get protobuf too, while its typed informer falls back to JSON.

use std::fmt::Debug;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::BodyExt;
use k8s_openapi::api::{
    apps::v1::{Deployment, ReplicaSet},
    batch::v1::Job,
    coordination::v1::Lease,
    core::v1::{ConfigMap, Namespace, Node, Pod, Secret, Service},
    discovery::v1::EndpointSlice,
    events::v1::Event,
};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use kube_informer::reflector::Projection;
use kube_informer::reflector::decode::ListDecoder;
use kube_informer::{
    SharedInformerFactory,
    protobuf::{self, ProtobufListDecoder},
};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::common::{create_namespace, eventually, within};
use crate::support::Cluster;

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// GETs `path` with `accept`; the response's content type and body.
async fn get(client: &Client, path: &str, accept: &str) -> (String, Bytes) {
    let req = http::Request::get(path)
        .header(http::header::ACCEPT, accept)
        .body(kube::client::Body::empty())
        .expect("a valid request");
    let res = within("GET", client.send(req))
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    assert!(res.status().is_success(), "GET {path}: {}", res.status());
    let ct = res
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body = res.into_body().collect().await.expect("body").to_bytes();
    (ct, body)
}

/// The object at `path` decoded from the server's protobuf and from its JSON: equal, field for
/// field; and the collection at `list_path` likewise, through both list decoders.
async fn assert_same_from_both<K>(client: &Client, path: &str, list_path: &str) -> K
where
    K: DeserializeOwned + 'static + PartialEq + Debug,
{
    let (ct, pb) = get(client, path, &format!("{PROTOBUF},application/json")).await;
    assert!(ct.starts_with(PROTOBUF), "{path} served as {ct}");
    let from_pb: K = protobuf::decode_object(&pb, &Projection::none())
        .unwrap_or_else(|e| panic!("{path} from protobuf: {e}"));
    let (_, js) = get(client, path, "application/json").await;
    let from_json: K = serde_json::from_slice(&js).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert_eq!(
        from_pb, from_json,
        "{path}: protobuf and JSON decode differently"
    );

    let (ct, pb) = get(client, list_path, &format!("{PROTOBUF},application/json")).await;
    assert!(ct.starts_with(PROTOBUF), "{list_path} served as {ct}");
    let mut pb_list = ProtobufListDecoder::<K, K>::new();
    // Fed in small pieces, as a body arrives.
    for chunk in pb.chunks(777) {
        pb_list
            .push(chunk, &mut |k| k)
            .expect("protobuf list chunk");
    }
    let pb_page = pb_list.finish(&mut |k| k).expect("protobuf list");
    let (_, js) = get(client, list_path, "application/json").await;
    let mut js_list = ListDecoder::<K, K>::new();
    js_list.push(&js, &mut |k| k).expect("JSON list");
    let js_page = js_list.finish(&mut |k| k).expect("JSON list");
    assert!(pb_page.undecodable.is_empty() && js_page.undecodable.is_empty());
    assert_eq!(pb_page.metadata, js_page.metadata, "{list_path} metadata");
    assert_eq!(pb_page.items, js_page.items, "{list_path} items");
    assert!(!pb_page.items.is_empty(), "{list_path} is empty");
    from_pb
}

async fn create<K>(api: &Api<K>, value: serde_json::Value) -> K
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + 'static + serde::Serialize + Debug,
{
    let obj: K = serde_json::from_value(value).expect("a valid object");
    within("create", api.create(&PostParams::default(), &obj))
        .await
        .unwrap_or_else(|e| panic!("create {}: {e}", K::kind(&())))
}

async fn patch_status<K>(api: &Api<K>, name: &str, status: serde_json::Value)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + 'static + Debug,
{
    within(
        "patch status",
        api.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        ),
    )
    .await
    .unwrap_or_else(|e| panic!("patch status of {} {name}: {e}", K::kind(&())));
}

fn pod_json() -> serde_json::Value {
    json!({
        "metadata": {
            "name": "web-0", "labels": {"app": "web", "tier": "front"},
            "annotations": {"note": "with \"quotes\" and ünïcode"},
            "finalizers": ["e2e.kube-informer.dev/hold"],
        },
        "spec": {
            "initContainers": [{"name": "init", "image": "busybox:1", "command": ["sh", "-c", "true"]}],
            "containers": [{
                "name": "main", "image": "registry.invalid/web:1.2.3",
                "args": ["--port=8080", ""],
                "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"},
                          {"containerPort": 9090, "hostPort": 0}],
                "env": [{"name": "A", "value": "1"}, {"name": "EMPTY", "value": ""},
                        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}}],
                "resources": {"requests": {"cpu": "250m", "memory": "64Mi"},
                              "limits": {"cpu": "1", "memory": "128Mi", "ephemeral-storage": "1Gi"}},
                "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "initialDelaySeconds": 3,
                                  "periodSeconds": 10, "failureThreshold": 0},
                "readinessProbe": {"tcpSocket": {"port": 8080}, "timeoutSeconds": 1},
                "securityContext": {"runAsUser": 0, "runAsNonRoot": false, "readOnlyRootFilesystem": true,
                                    "capabilities": {"drop": ["ALL"]}, "allowPrivilegeEscalation": false},
                "volumeMounts": [{"name": "cfg", "mountPath": "/etc/cfg", "readOnly": true},
                                 {"name": "scratch", "mountPath": "/tmp"}],
            }, {
                "name": "sidecar", "image": "registry.invalid/sidecar:2",
                "lifecycle": {"preStop": {"exec": {"command": ["sleep", "1"]}}},
                "terminationMessagePolicy": "FallbackToLogsOnError",
            }],
            "volumes": [
                {"name": "cfg", "configMap": {"name": "web-config", "defaultMode": 420,
                                               "items": [{"key": "a", "path": "a.txt"}]}},
                {"name": "scratch", "emptyDir": {"sizeLimit": "500Mi", "medium": ""}},
                {"name": "creds", "secret": {"secretName": "web-secret", "optional": true}},
                {"name": "all", "projected": {"sources": [
                    {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}},
                    {"downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}]}},
            ],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                             "effect": "NoExecute", "tolerationSeconds": 300}],
            "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                "weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {"matchLabels": {"app": "web"},
                                      "matchExpressions": [{"key": "tier", "operator": "In", "values": ["front"]}]}}}]}},
            "nodeSelector": {"disk": "ssd"},
            "terminationGracePeriodSeconds": 0, "serviceAccountName": "default",
            "enableServiceLinks": false,
        },
    })
}

fn pod_status() -> serde_json::Value {
    json!({
        "phase": "Running", "podIP": "10.0.0.7", "podIPs": [{"ip": "10.0.0.7"}, {"ip": "fd00::7"}],
        "hostIP": "192.168.1.2", "startTime": "2026-11-30T10:00:00Z", "qosClass": "Burstable",
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-30T10:00:05Z"},
                       {"type": "PodScheduled", "status": "True", "lastProbeTime": null,
                        "lastTransitionTime": "2026-11-30T10:00:00Z", "reason": "", "message": ""}],
        "containerStatuses": [{
            "name": "main", "image": "registry.invalid/web:1.2.3", "imageID": "sha256:abc",
            "ready": true, "restartCount": 2, "started": true, "containerID": "containerd://1",
            "state": {"running": {"startedAt": "2026-11-30T10:00:02Z"}},
            "lastState": {"terminated": {"exitCode": -1, "reason": "Error", "startedAt": "2026-11-30T09:00:00Z",
                                         "finishedAt": "2026-11-30T09:59:59Z", "signal": 9}},
        }, {
            "name": "sidecar", "image": "registry.invalid/sidecar:2", "imageID": "", "ready": false,
            "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}},
        }],
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs kube-apiserver + etcd: run bash .ci/e2e.sh"]
async fn a_dozen_builtin_kinds_decode_from_protobuf_as_from_json() {
    let cluster = within("start", Cluster::start_for("protobuf_builtin_kinds")).await;
    let c = cluster.admin();
    let ns = "pb";
    create_namespace(&c, ns).await;

    // Namespace
    assert_same_from_both::<Namespace>(&c, "/api/v1/namespaces/pb", "/api/v1/namespaces").await;

    // Pod, with a status
    create(&Api::<Pod>::namespaced(c.clone(), ns), pod_json()).await;
    patch_status(
        &Api::<Pod>::namespaced(c.clone(), ns),
        "web-0",
        pod_status(),
    )
    .await;
    let pod = assert_same_from_both::<Pod>(
        &c,
        "/api/v1/namespaces/pb/pods/web-0",
        "/api/v1/namespaces/pb/pods",
    )
    .await;
    // The object is the rich one (not an empty decode that happens to agree).
    assert_eq!(pod.spec.as_ref().map(|s| s.containers.len()), Some(2));
    assert!(
        pod.metadata
            .managed_fields
            .as_ref()
            .is_some_and(|m| !m.is_empty())
    );
    assert_eq!(
        pod.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .map(Vec::len),
        Some(2)
    );

    // ConfigMap and Secret, with binary data
    create(
        &Api::<ConfigMap>::namespaced(c.clone(), ns),
        json!({"metadata": {"name": "web-config"}, "data": {"a": "1", "empty": ""},
               "binaryData": {"blob": "AAECAwT/"}, "immutable": false}),
    )
    .await;
    assert_same_from_both::<ConfigMap>(
        &c,
        "/api/v1/namespaces/pb/configmaps/web-config",
        "/api/v1/namespaces/pb/configmaps",
    )
    .await;
    create(
        &Api::<Secret>::namespaced(c.clone(), ns),
        json!({"metadata": {"name": "web-secret"}, "type": "Opaque",
               "data": {"password": "c2VjcmV0", "zero": ""}}),
    )
    .await;
    assert_same_from_both::<Secret>(
        &c,
        "/api/v1/namespaces/pb/secrets/web-secret",
        "/api/v1/namespaces/pb/secrets",
    )
    .await;

    // Service (IntOrString both ways), EndpointSlice
    create(
        &Api::<Service>::namespaced(c.clone(), ns),
        json!({"metadata": {"name": "web"}, "spec": {"selector": {"app": "web"},
               "ports": [{"name": "http", "port": 80, "targetPort": "http"},
                         {"name": "metrics", "port": 9090, "targetPort": 9090, "protocol": "TCP"}],
               "sessionAffinity": "ClientIP",
               "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 600}}}}),
    )
    .await;
    assert_same_from_both::<Service>(
        &c,
        "/api/v1/namespaces/pb/services/web",
        "/api/v1/namespaces/pb/services",
    )
    .await;
    create(&Api::<EndpointSlice>::namespaced(c.clone(), ns),
        json!({"metadata": {"name": "web-abc", "labels": {"kubernetes.io/service-name": "web"}},
               "addressType": "IPv4",
               "endpoints": [{"addresses": ["10.0.0.7"], "conditions": {"ready": true, "serving": true, "terminating": false},
                              "nodeName": "node-a", "zone": "z1", "hints": {"forZones": [{"name": "z1"}]}}],
               "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}),
    )
    .await;
    assert_same_from_both::<EndpointSlice>(
        &c,
        "/apis/discovery.k8s.io/v1/namespaces/pb/endpointslices/web-abc",
        "/apis/discovery.k8s.io/v1/namespaces/pb/endpointslices",
    )
    .await;

    // Deployment, ReplicaSet, Job
    let template = json!({"metadata": {"labels": {"app": "api"}},
        "spec": {"containers": [{"name": "api", "image": "registry.invalid/api:1",
                                  "resources": {"requests": {"cpu": "100m"}}}]}});
    create(&Api::<Deployment>::namespaced(c.clone(), ns),
        json!({"metadata": {"name": "api"}, "spec": {"replicas": 3,
               "selector": {"matchLabels": {"app": "api"}}, "template": template,
               "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}},
               "revisionHistoryLimit": 5, "progressDeadlineSeconds": 600}}),
    )
    .await;
    assert_same_from_both::<Deployment>(
        &c,
        "/apis/apps/v1/namespaces/pb/deployments/api",
        "/apis/apps/v1/namespaces/pb/deployments",
    )
    .await;
    create(&Api::<ReplicaSet>::namespaced(c.clone(), ns),
        json!({"metadata": {"name": "api-rs", "annotations": {"deployment.kubernetes.io/revision": "1"}},
               "spec": {"replicas": 0, "minReadySeconds": 0,
                        "selector": {"matchLabels": {"app": "api"}}, "template": template}}),
    )
    .await;
    assert_same_from_both::<ReplicaSet>(
        &c,
        "/apis/apps/v1/namespaces/pb/replicasets/api-rs",
        "/apis/apps/v1/namespaces/pb/replicasets",
    )
    .await;
    create(&Api::<Job>::namespaced(c.clone(), ns),
        json!({"metadata": {"name": "batch"}, "spec": {"backoffLimit": 2, "activeDeadlineSeconds": 600,
               "completions": 1, "parallelism": 1, "ttlSecondsAfterFinished": 0,
               "podFailurePolicy": {"rules": [{"action": "FailJob",
                   "onExitCodes": {"containerName": "work", "operator": "In", "values": [42, 43]}}]},
               "template": {"spec": {"restartPolicy": "Never",
                   "containers": [{"name": "work", "image": "registry.invalid/work:1"}]}}}}),
    )
    .await;
    assert_same_from_both::<Job>(
        &c,
        "/apis/batch/v1/namespaces/pb/jobs/batch",
        "/apis/batch/v1/namespaces/pb/jobs",
    )
    .await;

    // Node (cluster-scoped), with a status
    create(&Api::<Node>::all(c.clone()),
        json!({"metadata": {"name": "node-a", "labels": {"kubernetes.io/hostname": "node-a"}},
               "spec": {"podCIDR": "10.0.0.0/24", "podCIDRs": ["10.0.0.0/24"], "unschedulable": false,
                        "taints": [{"key": "dedicated", "value": "web", "effect": "NoSchedule"}]}}),
    )
    .await;
    patch_status(&Api::<Node>::all(c.clone()),
        "node-a",
        json!({"capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
               "allocatable": {"cpu": "3900m", "memory": "15Gi", "pods": "110"},
               "addresses": [{"type": "InternalIP", "address": "192.168.1.2"}, {"type": "Hostname", "address": "node-a"}],
               "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                               "lastHeartbeatTime": "2026-11-30T10:00:00Z", "lastTransitionTime": "2026-11-01T00:00:00Z"}],
               "nodeInfo": {"machineID": "m", "systemUUID": "s", "bootID": "b", "kernelVersion": "6.1",
                            "osImage": "Debian", "containerRuntimeVersion": "containerd://2", "kubeletVersion": "v1.37.2",
                            "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"},
               "images": [{"names": ["registry.invalid/web:1.2.3"], "sizeBytes": 12345678}]}),
    )
    .await;
    assert_same_from_both::<Node>(&c, "/api/v1/nodes/node-a", "/api/v1/nodes").await;

    // events.k8s.io Event (MicroTime), Lease (MicroTime)
    create(
        &Api::<Event>::namespaced(c.clone(), ns),
        json!({"metadata": {"name": "web-0.1"}, "eventTime": "2026-11-30T10:00:01.123456Z",
               "reportingController": "e2e.kube-informer.dev/ctl", "reportingInstance": "ctl-1",
               "action": "Scheduled", "reason": "Scheduled", "type": "Normal", "note": "assigned",
               "regarding": {"kind": "Pod", "namespace": "pb", "name": "web-0", "apiVersion": "v1"},
               "series": {"count": 3, "lastObservedTime": "2026-11-30T10:05:00.000001Z"}}),
    )
    .await;
    assert_same_from_both::<Event>(
        &c,
        "/apis/events.k8s.io/v1/namespaces/pb/events/web-0.1",
        "/apis/events.k8s.io/v1/namespaces/pb/events",
    )
    .await;
    create(&Api::<Lease>::namespaced(c.clone(), ns),
        json!({"metadata": {"name": "leader"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15,
               "acquireTime": "2026-11-30T10:00:00.000000Z", "renewTime": "2026-11-30T10:00:10.500000Z",
               "leaseTransitions": 0}}),
    )
    .await;
    assert_same_from_both::<Lease>(
        &c,
        "/apis/coordination.k8s.io/v1/namespaces/pb/leases/leader",
        "/apis/coordination.k8s.io/v1/namespaces/pb/leases",
    )
    .await;
}

/// The content type of every list and watch response an informer's client received.
#[derive(Clone, Default)]
struct ContentTypes(Arc<Mutex<Vec<(String, String)>>>);

impl ContentTypes {
    /// A client for `cluster` that records `(path and query, content type)` per response.
    fn client(&self, cluster: &Cluster) -> Client {
        let seen = self.0.clone();
        kube::client::ClientBuilder::try_from(cluster.admin_config())
            .expect("a client builder")
            .with_layer(&tower::layer::layer_fn(move |inner| Recording {
                inner,
                seen: seen.clone(),
            }))
            .build()
    }

    /// The content types of responses to requests whose path starts with `prefix`, as
    /// `(watch, content type)`.
    fn of(&self, prefix: &str) -> Vec<(bool, String)> {
        self.0
            .lock()
            .iter()
            .filter(|(p, _)| p.starts_with(prefix))
            .map(|(p, ct)| (p.contains("watch=true"), ct.clone()))
            .collect()
    }
}

#[derive(Clone)]
struct Recording<S> {
    inner: S,
    seen: Arc<Mutex<Vec<(String, String)>>>,
}

impl<S, B, RB> tower::Service<http::Request<B>> for Recording<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<RB>>,
    RB: Send + 'static,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = futures::future::BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let path = req
            .uri()
            .path_and_query()
            .map(|p| p.as_str().to_owned())
            .unwrap_or_default();
        let seen = self.seen.clone();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let res = fut.await?;
            let ct = res
                .headers()
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            seen.lock().push((path, ct));
            Ok(res)
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs kube-apiserver + etcd: run bash .ci/e2e.sh"]
async fn informers_list_and_watch_in_protobuf_and_custom_resources_fall_back_to_json() {
    let cluster = within("start", Cluster::start_for("protobuf_informers")).await;
    let admin = cluster.admin();
    let ns = "pbi";
    create_namespace(&admin, ns).await;
    crate::crd::install_crd(&cluster, ns).await;
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), ns);
    for i in 0..20 {
        within(
            "create",
            cms.create(
                &PostParams::default(),
                &crate::common::config_map(&format!("cm-{i}"), "v"),
            ),
        )
        .await
        .expect("create config map");
    }
    let widgets: Api<crate::crd::Widget> = Api::namespaced(admin.clone(), ns);
    within(
        "create widget",
        widgets.create(&PostParams::default(), &crate::crd::widget("w1", 1)),
    )
    .await
    .expect("create widget");

    let types = ContentTypes::default();
    let factory = SharedInformerFactory::new(
        types.client(&cluster),
        crate::common::factory_config().namespace(ns),
    );
    let cm_informer = factory.informer::<ConfigMap>();
    let widget_meta = factory.metadata_informer::<crate::crd::Widget>();
    let widget_typed = factory.informer::<crate::crd::Widget>();
    factory.start();
    within("sync", factory.wait_for_cache_sync()).await;

    // Writes after the sync arrive through the watch.
    within(
        "update",
        cms.patch(
            "cm-3",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "changed"}})),
        ),
    )
    .await
    .expect("update");
    within("delete", cms.delete("cm-4", &Default::default()))
        .await
        .expect("delete");
    within(
        "create widget",
        widgets.create(&PostParams::default(), &crate::crd::widget("w2", 2)),
    )
    .await
    .expect("create widget");
    eventually(
        "the caches converge",
        crate::common::CONVERGE_TIMEOUT,
        || {
            let changed = cm_informer
                .indexer()
                .get_by_key(&format!("{ns}/cm-3"))
                .is_some_and(|cm| {
                    cm.data
                        .as_ref()
                        .and_then(|d| d.get("k"))
                        .map(String::as_str)
                        == Some("changed")
                });
            let sizes = (
                cm_informer.indexer().len(),
                widget_meta.indexer().len(),
                widget_typed.indexer().len(),
            );
            if changed && sizes == (19, 2, 2) {
                Ok(())
            } else {
                Err(format!("updated: {changed}, sizes {sizes:?}"))
            }
        },
    )
    .await;

    let cm_responses = types.of(&format!("/api/v1/namespaces/{ns}/configmaps"));
    assert!(cm_responses.iter().any(|(w, _)| !w) && cm_responses.iter().any(|(w, _)| *w));
    for (watch, ct) in &cm_responses {
        assert!(
            ct.starts_with(PROTOBUF),
            "config map watch={watch} served as {ct}"
        );
    }
    let widget_responses = types.of(&format!(
        "/apis/e2e.kube-informer.dev/v1/namespaces/{ns}/widgets"
    ));
    let (pb, js): (Vec<_>, Vec<_>) = widget_responses
        .iter()
        .partition(|(_, ct)| ct.starts_with(PROTOBUF));
    // The metadata informer's list and watch in protobuf, the typed one's in JSON.
    let list_and_watch =
        |r: &[&(bool, String)]| r.iter().any(|(w, _)| !w) && r.iter().any(|(w, _)| *w);
    assert!(list_and_watch(&pb), "{widget_responses:?}");
    assert!(
        list_and_watch(&js) && js.iter().all(|(_, ct)| ct.starts_with("application/json")),
        "{widget_responses:?}"
    );
    factory.shutdown().await;
}
