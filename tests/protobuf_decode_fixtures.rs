//! The protobuf decoder against golden bytes: each `tests/fixtures/protobuf/<name>.pb` (made by
//! apimachinery's protobuf serializer) must decode into its k8s-openapi type equal to serde_json's
//! decode of the matching `<name>.json` (made by its JSON serializer from the same object).
//!
//! `PROTOBUF_FIXTURES` names another directory of such pairs.

use std::{
    fs,
    path::{Path, PathBuf},
};

use k8s_openapi::{
    api::{
        admissionregistration::v1 as admissionregistration, apps::v1 as apps,
        autoscaling::v2 as autoscaling, batch::v1 as batch, certificates::v1 as certificates,
        coordination::v1 as coordination, core::v1 as core, discovery::v1 as discovery,
        events::v1 as events, networking::v1 as networking, policy::v1 as policy, rbac::v1 as rbac,
        scheduling::v1 as scheduling, storage::v1 as storage,
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions,
    apimachinery::pkg::apis::meta::v1 as meta,
    kube_aggregator::pkg::apis::apiregistration::v1 as apiregistration,
};
use kube_informer::{
    protobuf::{LengthPrefixFramer, ProtobufListDecoder, decode_object, decode_watch_frame},
    reflector::{
        WatchEvent,
        decode::{Projection, decode_list, decode_watch_event},
    },
};
use serde::de::DeserializeOwned;
use serde_json::Value;

fn dir() -> PathBuf {
    std::env::var_os("PROTOBUF_FIXTURES").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/protobuf"),
        PathBuf::from,
    )
}

/// The `.pb`/`.json` pairs of single objects and lists (not the watch stream).
fn fixtures() -> Vec<(String, Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    let Ok(entries) = fs::read_dir(dir()) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "pb") {
            let json = path.with_extension("json");
            if !json.exists() {
                continue;
            }
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            out.push((name, fs::read(&path).unwrap(), fs::read(&json).unwrap()));
        }
    }
    out.sort();
    out
}

/// Decodes both and asserts they are equal.
fn same<K: DeserializeOwned + 'static + PartialEq + std::fmt::Debug>(
    name: &str,
    pb: &[u8],
    json: &[u8],
) {
    let want: K = serde_json::from_slice(json).unwrap_or_else(|e| panic!("{name}: JSON: {e}"));
    let got: K = decode_object(pb, &Projection::none())
        .unwrap_or_else(|e| panic!("{name}: protobuf: {e}: {}", e.unredacted()));
    assert_eq!(got, want, "{name}");
}

/// Decodes a list both ways and asserts the pages are equal, and that the protobuf list decodes
/// the same fed in small chunks.
fn same_list<K: DeserializeOwned + 'static + PartialEq + std::fmt::Debug>(
    name: &str,
    pb: &[u8],
    json: &[u8],
) {
    let want = decode_list::<K>(json).unwrap_or_else(|e| panic!("{name}: JSON: {e}"));
    for chunk in [pb.len().max(1), 4096, 97] {
        let mut decoder = ProtobufListDecoder::<K, K>::new();
        for c in pb.chunks(chunk) {
            decoder
                .push(c, &mut |k| k)
                .unwrap_or_else(|e| panic!("{name}: {e}: {}", e.unredacted()));
        }
        let got = decoder
            .finish(&mut |k| k)
            .unwrap_or_else(|e| panic!("{name}: {e}: {}", e.unredacted()));
        assert!(got.undecodable.is_empty(), "{name}: {:?}", got.undecodable);
        assert_eq!(got.metadata, want.metadata, "{name}");
        assert_eq!(got.items.len(), want.items.len(), "{name}");
        for (g, w) in got.items.iter().zip(&want.items) {
            assert_eq!(g, w, "{name}");
        }
    }
}

/// Calls `same::<T>` (or `same_list::<T>` for its list kind) for the fixture's kind.
macro_rules! by_kind {
    ($name:expr, $pb:expr, $json:expr, $api_version:expr, $kind:expr; $($av:literal $k:literal => $ty:ty),* $(,)?) => {
        match ($api_version, $kind) {
            $(
                ($av, $k) => { same::<$ty>($name, $pb, $json); true }
                ($av, concat!($k, "List")) => { same_list::<$ty>($name, $pb, $json); true }
            )*
            _ => false,
        }
    };
}

#[test]
fn every_fixture_decodes_as_its_json() {
    let fixtures = fixtures();
    let mut typed = 0;
    let mut untyped = Vec::new();
    for (name, pb, json) in &fixtures {
        let value: Value = serde_json::from_slice(json).unwrap();
        let api_version = value["apiVersion"].as_str().unwrap_or_default().to_owned();
        let kind = value["kind"].as_str().unwrap_or_default().to_owned();
        let known = by_kind!(name, pb, json, api_version.as_str(), kind.as_str();
            "v1" "Pod" => core::Pod,
            "v1" "ConfigMap" => core::ConfigMap,
            "v1" "Secret" => core::Secret,
            "v1" "Service" => core::Service,
            "v1" "Node" => core::Node,
            "v1" "Namespace" => core::Namespace,
            "v1" "Event" => core::Event,
            "v1" "Endpoints" => core::Endpoints,
            "v1" "ServiceAccount" => core::ServiceAccount,
            "v1" "PersistentVolume" => core::PersistentVolume,
            "v1" "PersistentVolumeClaim" => core::PersistentVolumeClaim,
            "v1" "ReplicationController" => core::ReplicationController,
            "v1" "ResourceQuota" => core::ResourceQuota,
            "v1" "LimitRange" => core::LimitRange,
            "v1" "PodTemplate" => core::PodTemplate,
            "apps/v1" "Deployment" => apps::Deployment,
            "apps/v1" "StatefulSet" => apps::StatefulSet,
            "apps/v1" "DaemonSet" => apps::DaemonSet,
            "apps/v1" "ReplicaSet" => apps::ReplicaSet,
            "apps/v1" "ControllerRevision" => apps::ControllerRevision,
            "batch/v1" "Job" => batch::Job,
            "batch/v1" "CronJob" => batch::CronJob,
            "autoscaling/v2" "HorizontalPodAutoscaler" => autoscaling::HorizontalPodAutoscaler,
            "policy/v1" "PodDisruptionBudget" => policy::PodDisruptionBudget,
            "coordination.k8s.io/v1" "Lease" => coordination::Lease,
            "discovery.k8s.io/v1" "EndpointSlice" => discovery::EndpointSlice,
            "events.k8s.io/v1" "Event" => events::Event,
            "networking.k8s.io/v1" "Ingress" => networking::Ingress,
            "networking.k8s.io/v1" "NetworkPolicy" => networking::NetworkPolicy,
            "networking.k8s.io/v1" "IngressClass" => networking::IngressClass,
            "rbac.authorization.k8s.io/v1" "Role" => rbac::Role,
            "rbac.authorization.k8s.io/v1" "ClusterRole" => rbac::ClusterRole,
            "rbac.authorization.k8s.io/v1" "RoleBinding" => rbac::RoleBinding,
            "rbac.authorization.k8s.io/v1" "ClusterRoleBinding" => rbac::ClusterRoleBinding,
            "scheduling.k8s.io/v1" "PriorityClass" => scheduling::PriorityClass,
            "storage.k8s.io/v1" "StorageClass" => storage::StorageClass,
            "storage.k8s.io/v1" "CSIDriver" => storage::CSIDriver,
            "storage.k8s.io/v1" "VolumeAttachment" => storage::VolumeAttachment,
            "certificates.k8s.io/v1" "CertificateSigningRequest" => certificates::CertificateSigningRequest,
            "admissionregistration.k8s.io/v1" "ValidatingWebhookConfiguration" => admissionregistration::ValidatingWebhookConfiguration,
            "admissionregistration.k8s.io/v1" "MutatingWebhookConfiguration" => admissionregistration::MutatingWebhookConfiguration,
            "admissionregistration.k8s.io/v1" "ValidatingAdmissionPolicy" => admissionregistration::ValidatingAdmissionPolicy,
            "apiextensions.k8s.io/v1" "CustomResourceDefinition" => apiextensions::CustomResourceDefinition,
            "apiregistration.k8s.io/v1" "APIService" => apiregistration::APIService,
        );
        if known {
            typed += 1;
        } else if (api_version.as_str(), kind.as_str())
            == ("meta.k8s.io/v1", "PartialObjectMetadataList")
        {
            // kube's metadata-only objects; the JSON items also carry their type metadata,
            // which protobuf list items have no field for, so the metadata is compared.
            type Meta = kube::core::PartialObjectMeta<core::Pod>;
            let want = decode_list::<Meta>(json).unwrap();
            let got = kube_informer::protobuf::decode_list_map::<Meta, Meta>(pb, &mut |m| m)
                .unwrap_or_else(|e| panic!("{name}: {e}: {}", e.unredacted()));
            assert_eq!(got.metadata, want.metadata, "{name}");
            let metas = |p: &[Meta]| p.iter().map(|m| m.metadata.clone()).collect::<Vec<_>>();
            assert_eq!(metas(&got.items), metas(&want.items), "{name}");
            assert!(!got.items.is_empty());
            typed += 1;
        } else if (api_version.as_str(), kind.as_str()) == ("v1", "Status") {
            same::<meta::Status>(name, pb, json);
            typed += 1;
        } else {
            untyped.push(name.clone());
        }
        // Every fixture, typed or not, also decodes to the JSON's value (nulls, which protobuf
        // cannot tell from absent, dropped from both).
        let got: Value = decode_object(pb, &Projection::none())
            .or_else(|_| {
                kube_informer::protobuf::decode_list_map::<Value, Value>(pb, &mut |v| v)
                    .map(|page| serde_json::json!({"items": page.items}))
            })
            .unwrap_or_else(|e| panic!("{name}: {e}: {}", e.unredacted()));
        let mut want = value;
        if got.get("apiVersion").is_none() {
            want = serde_json::json!({"items": want["items"]});
        }
        // List items carry no type metadata in protobuf (their message has no field for it),
        // while the server's JSON gives PartialObjectMetadata items theirs.
        let (got, want) = (without_item_types(got), without_item_types(want));
        if let Some(at) = first_difference(&without_nulls(got), &without_nulls(want), String::new())
        {
            panic!("{name}: the protobuf and JSON values differ at {at}");
        }
    }
    assert!(
        untyped.is_empty(),
        "fixtures of kinds this test does not know: {untyped:?}"
    );
    eprintln!("{typed} fixtures decoded into their types");
}

/// The path of the first value where `a` and `b` differ, with both values.
fn first_difference(a: &Value, b: &Value, path: String) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for key in x.keys().chain(y.keys()) {
                let (Some(xv), Some(yv)) = (x.get(key), y.get(key)) else {
                    return Some(format!(
                        "{path}.{key}: {:?} vs {:?}",
                        x.get(key),
                        y.get(key)
                    ));
                };
                if let Some(d) = first_difference(xv, yv, format!("{path}.{key}")) {
                    return Some(d);
                }
            }
            None
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (xv, yv))| first_difference(xv, yv, format!("{path}[{i}]"))),
        _ if a == b => None,
        _ => Some(format!("{path}: {a} vs {b}")),
    }
}

fn without_item_types(mut v: Value) -> Value {
    if let Some(items) = v.get_mut("items").and_then(Value::as_array_mut) {
        for item in items.iter_mut().filter_map(Value::as_object_mut) {
            item.remove("apiVersion");
            item.remove("kind");
        }
    }
    v
}

fn without_nulls(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, without_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(without_nulls).collect()),
        other => other,
    }
}

#[test]
fn the_watch_stream_decodes_as_its_json_lines() {
    let pb = fs::read(dir().join("watch-pods.pb")).unwrap();
    let jsonl = fs::read_to_string(dir().join("watch-pods.jsonl")).unwrap();
    let lines: Vec<&str> = jsonl.lines().filter(|l| !l.trim().is_empty()).collect();
    for chunk in [pb.len(), 1000, 13] {
        let mut framer = LengthPrefixFramer::new(16 << 20);
        let mut frames = Vec::new();
        for c in pb.chunks(chunk) {
            frames.extend(framer.push(c).unwrap());
        }
        assert!(framer.pending().is_empty());
        assert_eq!(frames.len(), lines.len());
        for (frame, line) in frames.iter().zip(&lines) {
            let got = decode_watch_frame::<core::Pod>(frame, &Projection::none())
                .unwrap_or_else(|e| panic!("{e}: {}", e.unredacted()));
            let want = decode_watch_event::<core::Pod>(line.as_bytes()).unwrap();
            match (got, want) {
                (WatchEvent::Added(g), WatchEvent::Added(w))
                | (WatchEvent::Modified(g), WatchEvent::Modified(w))
                | (WatchEvent::Deleted(g), WatchEvent::Deleted(w)) => assert_eq!(g, w),
                (
                    WatchEvent::Bookmark {
                        resource_version: g,
                        initial_events_end: ge,
                    },
                    WatchEvent::Bookmark {
                        resource_version: w,
                        initial_events_end: we,
                    },
                ) => assert_eq!((g, ge), (w, we)),
                (WatchEvent::Error(g), WatchEvent::Error(w)) => assert_eq!(g, w),
                (g, w) => panic!("{g:?} is not {w:?}"),
            }
        }
    }
}
