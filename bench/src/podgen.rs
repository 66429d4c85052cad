//! A seeded generator of realistic Pods (5–8 KB of JSON each): what a Deployment's pods look like
//! on a real cluster, with labels, annotations, an owner reference, two containers with env,
//! ports, probes and resources, projected service-account volumes, a full status with conditions
//! and container statuses, and the `managedFields` of the controller manager and the kubelet.

use serde_json::{Value, json};

/// splitmix64: tiny, seeded, good enough to vary names, IPs and sizes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn hex(&mut self, len: usize) -> String {
        let mut out = String::with_capacity(len);
        while out.len() < len {
            out.push_str(&format!("{:016x}", self.next()));
        }
        out.truncate(len);
        out
    }
    fn alnum(&mut self, len: usize) -> String {
        const A: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        (0..len)
            .map(|_| A[self.below(A.len() as u64) as usize] as char)
            .collect()
    }
    fn uid(&mut self) -> String {
        let h = self.hex(32);
        format!(
            "{}-{}-{}-{}-{}",
            &h[0..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..32]
        )
    }
}

const APPS: &[&str] = &[
    "checkout",
    "payments",
    "catalog",
    "search",
    "frontend",
    "recommendations",
    "cart",
    "shipping",
    "email",
    "ads",
    "currency",
    "inventory",
];
const TEAMS: &[&str] = &["commerce", "platform", "growth", "data", "identity"];

fn ts(rng: &mut Rng, day: u64) -> String {
    format!(
        "2026-11-{:02}T{:02}:{:02}:{:02}Z",
        day,
        rng.below(24),
        rng.below(60),
        rng.below(60)
    )
}

fn env(rng: &mut Rng, app: &str, n: usize) -> Vec<Value> {
    let mut v = vec![
        json!({"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}),
        json!({"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}}),
        json!({"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": format!("{app}-db"), "key": "password"}}}),
    ];
    for i in v.len()..n {
        v.push(json!({"name": format!("{}_SETTING_{i}", app.to_uppercase()), "value": rng.alnum(12 + i)}));
    }
    v
}

/// The envoy sidecar: smaller than the app container, as injected sidecars usually are.
fn sidecar(rng: &mut Rng, image: &str) -> Value {
    json!({
        "name": "envoy",
        "image": image,
        "args": ["proxy", "sidecar"],
        "ports": [{"name": "http-envoy-prom", "containerPort": 15090, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "2", "memory": "1Gi"}},
        "volumeMounts": [{"name": format!("kube-api-access-{}", rng.alnum(5)), "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent"
    })
}

fn container(rng: &mut Rng, name: &str, app: &str, image: &str, port: u16) -> Value {
    let envs = 3 + rng.below(5) as usize;
    json!({
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "args": ["--port", port.to_string(), "--log-level=info", format!("--config=/etc/{app}/config.yaml")],
        "env": env(rng, app, envs),
        "ports": [
            {"name": "http", "containerPort": port, "protocol": "TCP"},
            {"name": "metrics", "containerPort": 9090 + (port % 10), "protocol": "TCP"}
        ],
        "resources": {
            "requests": {"cpu": format!("{}m", 100 + rng.below(400)), "memory": format!("{}Mi", 128 + rng.below(384))},
            "limits": {"cpu": "1", "memory": "1Gi"}
        },
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": port, "scheme": "HTTP"}, "initialDelaySeconds": 10,
            "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3},
        "readinessProbe": {"httpGet": {"path": "/ready", "port": port, "scheme": "HTTP"}, "timeoutSeconds": 1,
            "periodSeconds": 5, "successThreshold": 1, "failureThreshold": 3},
        "volumeMounts": [
            {"name": "config", "mountPath": format!("/etc/{app}"), "readOnly": true},
            {"name": format!("kube-api-access-{}", rng.alnum(5)), "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}
        ],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}
    })
}

fn container_status(rng: &mut Rng, name: &str, image: &str, started: &str) -> Value {
    json!({
        "name": name,
        "state": {"running": {"startedAt": started}},
        "lastState": {},
        "ready": true,
        "restartCount": rng.below(3),
        "image": image,
        "imageID": format!("{}@sha256:{}", image.split(':').next().unwrap_or(image), rng.hex(64)),
        "containerID": format!("containerd://{}", rng.hex(64)),
        "started": true
    })
}

/// Field set of a managedFields entry, in its `f:`/`k:` notation (an opaque JSON object to
/// clients, but it is most of the bytes of a real Pod).
fn fields_v1_spec(containers: &[&str]) -> Value {
    let mut cs = serde_json::Map::new();
    for c in containers {
        cs.insert(
            format!("k:{{\"name\":\"{c}\"}}"),
            json!({
                ".": {}, "f:args": {}, "f:env": {".": {}, "k:{\"name\":\"POD_NAME\"}": {".": {}, "f:name": {}, "f:valueFrom": {".": {}, "f:fieldRef": {}}},
                    "k:{\"name\":\"POD_NAMESPACE\"}": {".": {}, "f:name": {}, "f:valueFrom": {".": {}, "f:fieldRef": {}}}},
                "f:image": {}, "f:imagePullPolicy": {},
                "f:name": {}, "f:ports": {".": {}, "k:{\"containerPort\":8080,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}, "f:name": {}, "f:protocol": {}}},
                "f:resources": {".": {}, "f:limits": {".": {}, "f:cpu": {}, "f:memory": {}}, "f:requests": {".": {}, "f:cpu": {}, "f:memory": {}}},
                "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {},
                "f:volumeMounts": {".": {}, "k:{\"mountPath\":\"/etc/app\"}": {".": {}, "f:mountPath": {}, "f:name": {}, "f:readOnly": {}}}
            }),
        );
    }
    json!({
        "f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {}, "f:team": {}, "f:tier": {}, "f:version": {}},
            "f:ownerReferences": {".": {}, "k:{\"uid\":\"x\"}": {}}},
        "f:spec": {"f:containers": Value::Object(cs), "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:restartPolicy": {},
            "f:schedulerName": {}, "f:securityContext": {}, "f:serviceAccount": {}, "f:serviceAccountName": {},
            "f:terminationGracePeriodSeconds": {}, "f:volumes": {".": {}, "k:{\"name\":\"config\"}": {".": {}, "f:configMap": {".": {}, "f:defaultMode": {}, "f:name": {}}, "f:name": {}}}}
    })
}

fn fields_v1_status() -> Value {
    let cond = |t: &str| {
        (
            format!("k:{{\"type\":\"{t}\"}}"),
            json!({".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}}),
        )
    };
    let conds: serde_json::Map<String, Value> = [
        "ContainersReady",
        "Initialized",
        "PodReadyToStartContainers",
        "Ready",
    ]
    .into_iter()
    .map(cond)
    .collect();
    json!({"f:status": {"f:conditions": Value::Object(conds), "f:containerStatuses": {}, "f:hostIP": {}, "f:hostIPs": {},
        "f:phase": {}, "f:podIP": {}, "f:podIPs": {".": {}, "k:{\"ip\":\"10.0.0.1\"}": {".": {}, "f:ip": {}}}, "f:startTime": {}}})
}

/// Pod number `index` of the fixture seeded `seed`, with the given `resourceVersion`.
pub fn pod_json(seed: u64, index: usize, resource_version: &str) -> Value {
    let mut rng = Rng(seed ^ (index as u64).wrapping_mul(0x2545_F491_4F6C_DD1D));
    let app = APPS[index % APPS.len()];
    let team = TEAMS[index % TEAMS.len()];
    let ns = format!("{team}-{}", index % 20);
    let hash = rng.alnum(10);
    let name = format!("{app}-{hash}-{}-{}", rng.alnum(5), index);
    let rs_uid = rng.uid();
    let day = 1 + rng.below(28);
    let created = ts(&mut rng, day);
    let started = created.clone();
    let node = format!("node-pool-a-{:04}", rng.below(500));
    let ip = format!(
        "10.{}.{}.{}",
        rng.below(256),
        rng.below(256),
        2 + rng.below(250)
    );
    let host_ip = format!("172.20.{}.{}", rng.below(256), 2 + rng.below(250));
    let version = format!("v1.{}.{}", rng.below(30), rng.below(10));
    let image = format!("registry.example.com/{team}/{app}:{version}");
    let sidecar_image = "registry.example.com/platform/envoy:v1.36.2";
    json!({
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "generateName": format!("{app}-{hash}-"),
            "namespace": ns,
            "uid": rng.uid(),
            "resourceVersion": resource_version,
            "creationTimestamp": created,
            "labels": {"app": app, "pod-template-hash": hash, "team": team, "tier": if index.is_multiple_of(3) { "backend" } else { "web" }, "version": version},
            "annotations": {
                "kubectl.kubernetes.io/restartedAt": ts(&mut rng, 1),
                "prometheus.io/scrape": "true",
                "prometheus.io/port": "9090",
                "checksum/config": rng.hex(64),
            },
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{app}-{hash}"), "uid": rs_uid,
                "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [
                {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1", "time": created,
                    "fieldsType": "FieldsV1", "fieldsV1": fields_v1_spec(&[app])},
                {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": started,
                    "fieldsType": "FieldsV1", "fieldsV1": fields_v1_status(), "subresource": "status"}
            ]
        },
        "spec": {
            "volumes": [
                {"name": "config", "configMap": {"name": format!("{app}-config"), "defaultMode": 420}},
                {"name": format!("kube-api-access-{}", rng.alnum(5)), "projected": {"defaultMode": 420, "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
                ]}}
            ],
            "containers": [
                container(&mut rng, app, app, &image, 8080),
                sidecar(&mut rng, sidecar_image)
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": app,
            "serviceAccount": app,
            "nodeName": node,
            "securityContext": {"runAsUser": 1000, "fsGroup": 2000},
            "schedulerName": "default-scheduler",
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            ],
            "priority": 0,
            "enableServiceLinks": true,
            "preemptionPolicy": "PreemptLowerPriority"
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "PodReadyToStartContainers", "status": "True", "lastProbeTime": null, "lastTransitionTime": started},
                {"type": "Initialized", "status": "True", "lastProbeTime": null, "lastTransitionTime": started},
                {"type": "Ready", "status": "True", "lastProbeTime": null, "lastTransitionTime": started},
                {"type": "ContainersReady", "status": "True", "lastProbeTime": null, "lastTransitionTime": started},
                {"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": created}
            ],
            "hostIP": host_ip,
            "hostIPs": [{"ip": host_ip}],
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": started,
            "containerStatuses": [
                container_status(&mut rng, app, &image, &started),
                container_status(&mut rng, "envoy", sidecar_image, &started)
            ],
            "qosClass": "Burstable"
        }
    })
}

const RV_MARK: &str = "@@RV@@";

/// N pods, each encoded once around its `resourceVersion`, so lists and watch events at any
/// version are byte concatenations.
pub struct Fixture {
    parts: Vec<(Vec<u8>, Vec<u8>)>,
    uids: Vec<String>,
}

impl Fixture {
    /// Encodes `n` pods of the fixture seeded `seed`.
    pub fn new(seed: u64, n: usize) -> Self {
        Self::with_managed_fields(seed, n, true)
    }

    /// Like [`new`](Self::new); without `managedFields` when `managed` is false (to measure
    /// what they cost).
    pub fn with_managed_fields(seed: u64, n: usize, managed: bool) -> Self {
        let mut uids = Vec::with_capacity(n);
        let parts = (0..n)
            .map(|i| {
                let mut pod = pod_json(seed, i, RV_MARK);
                uids.push(pod["metadata"]["uid"].as_str().unwrap_or("").to_owned());
                if !managed {
                    pod["metadata"]
                        .as_object_mut()
                        .expect("metadata")
                        .remove("managedFields");
                }
                let bytes = serde_json::to_vec(&pod).expect("json");
                let at = find(&bytes, RV_MARK.as_bytes()).expect("rv mark present");
                (bytes[..at].to_vec(), bytes[at + RV_MARK.len()..].to_vec())
            })
            .collect();
        Self { parts, uids }
    }

    /// The `metadata.uid` of pod `i`.
    pub fn uid(&self, i: usize) -> &str {
        &self.uids[i]
    }

    /// How many pods.
    pub fn len(&self) -> usize {
        self.parts.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// Pod `i` encoded with `resourceVersion` `rv`, appended to `out`.
    pub fn write_pod(&self, i: usize, rv: u64, out: &mut Vec<u8>) {
        let (pre, post) = &self.parts[i];
        out.extend_from_slice(pre);
        out.extend_from_slice(rv.to_string().as_bytes());
        out.extend_from_slice(post);
    }

    /// A `PodList` at `list_rv` whose item `i` has resourceVersion `item_rv(i)`.
    pub fn list(&self, list_rv: u64, item_rv: impl Fn(usize) -> u64) -> Vec<u8> {
        self.list_where(list_rv, item_rv, |_| true, None)
    }

    /// Like [`list`](Self::list), with only the pods `keep` accepts and, for a sharded list,
    /// `metadata.shardInfo.selector` set to `shard_info`.
    pub fn list_where(
        &self,
        list_rv: u64,
        item_rv: impl Fn(usize) -> u64,
        keep: impl Fn(usize) -> bool,
        shard_info: Option<&str>,
    ) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            self.parts
                .iter()
                .map(|(a, b)| a.len() + b.len() + 10)
                .sum::<usize>()
                + 128,
        );
        out.extend_from_slice(
            b"{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"",
        );
        out.extend_from_slice(list_rv.to_string().as_bytes());
        out.push(b'"');
        if let Some(selector) = shard_info {
            out.extend_from_slice(b",\"shardInfo\":");
            out.extend_from_slice(
                &serde_json::to_vec(&serde_json::json!({ "selector": selector })).expect("json"),
            );
        }
        out.extend_from_slice(b"},\"items\":[");
        let mut first = true;
        for i in (0..self.len()).filter(|&i| keep(i)) {
            if !first {
                out.push(b',');
            }
            first = false;
            self.write_pod(i, item_rv(i), &mut out);
        }
        out.extend_from_slice(b"]}");
        out
    }

    /// The resourceVersion of pod `i` in list A.
    pub fn base_rv(i: usize) -> u64 {
        1000 + i as u64
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    #[test]
    fn pods_are_5_to_8_kb_and_decode_as_pods() {
        let f = Fixture::new(7, 200);
        let mut sizes = Vec::new();
        for i in 0..f.len() {
            let mut b = Vec::new();
            f.write_pod(i, 12345, &mut b);
            sizes.push(b.len());
            let p: Pod = serde_json::from_slice(&b).unwrap();
            assert_eq!(p.metadata.resource_version.as_deref(), Some("12345"));
            assert_eq!(p.spec.unwrap().containers.len(), 2);
        }
        let (lo, hi) = (*sizes.iter().min().unwrap(), *sizes.iter().max().unwrap());
        eprintln!(
            "pod sizes {lo}..{hi} mean {}",
            sizes.iter().sum::<usize>() / sizes.len()
        );
        assert!(lo >= 5_000 && hi <= 8_192, "pods are {lo}..{hi} bytes");
        let list: k8s_openapi::List<Pod> =
            serde_json::from_slice(&f.list(99, Fixture::base_rv)).unwrap();
        assert_eq!(list.items.len(), 200);
    }

    #[test]
    fn same_seed_same_bytes() {
        assert_eq!(pod_json(1, 5, "1"), pod_json(1, 5, "1"));
        assert_ne!(pod_json(1, 5, "1"), pod_json(2, 5, "1"));
    }
}
