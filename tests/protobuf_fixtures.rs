//! The golden protobuf fixtures of `tests/fixtures/protobuf/` (written by
//! `scripts/protobuf-schema.sh fixtures` with apimachinery's own serializers) against the
//! generated schema: each `.pb` is the magic `k8s\0` and a `runtime.Unknown` whose typeMeta is a
//! root of the schema and matches the `.json` twin, and every field of the object, at every
//! depth, is in the schema with a wire type its `Type` accepts. The watch stream is framed as
//! kube-apiserver frames it.

use std::path::{Path, PathBuf};

use kube_informer::protobuf::schema::{BUILTIN, Card, Message, MessageId, Type};

const MAGIC: &[u8] = b"k8s\0";

/// Every fixture pair: name, apiVersion, kind.
const FIXTURES: &[(&str, &str, &str)] = &[
    ("apiservice", "apiregistration.k8s.io/v1", "APIService"),
    ("configmap", "v1", "ConfigMap"),
    ("crd", "apiextensions.k8s.io/v1", "CustomResourceDefinition"),
    ("deployment", "apps/v1", "Deployment"),
    ("endpointslice", "discovery.k8s.io/v1", "EndpointSlice"),
    ("event", "events.k8s.io/v1", "Event"),
    ("job", "batch/v1", "Job"),
    ("lease", "coordination.k8s.io/v1", "Lease"),
    ("namespace", "v1", "Namespace"),
    ("node", "v1", "Node"),
    (
        "partialobjectmetadatalist",
        "meta.k8s.io/v1",
        "PartialObjectMetadataList",
    ),
    ("pod", "v1", "Pod"),
    ("pod-minimal", "v1", "Pod"),
    ("podlist", "v1", "PodList"),
    ("replicaset", "apps/v1", "ReplicaSet"),
    ("secret", "v1", "Secret"),
    ("service", "v1", "Service"),
    ("status", "v1", "Status"),
];

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/protobuf")
}

fn read(name: &str) -> Vec<u8> {
    let path = dir().join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// One field on the wire: number, wire type, and a length-delimited field's bytes.
struct WireField<'a> {
    number: u64,
    wire: u64,
    payload: &'a [u8],
}

fn varint(b: &mut &[u8]) -> u64 {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = b.split_first().expect("truncated varint");
        *b = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return value;
        }
    }
    panic!("varint longer than ten bytes")
}

fn fields(mut b: &[u8]) -> Vec<WireField<'_>> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let key = varint(&mut b);
        let (number, wire) = (key >> 3, key & 7);
        let len = match wire {
            0 => {
                varint(&mut b);
                0
            }
            1 => 8,
            5 => 4,
            2 => usize::try_from(varint(&mut b)).unwrap(),
            other => panic!("wire type {other}"),
        };
        assert!(b.len() >= len, "field {number} overruns its message");
        let (payload, rest) = b.split_at(len);
        out.push(WireField {
            number,
            wire,
            payload: if wire == 2 { payload } else { &[] },
        });
        b = rest;
    }
    out
}

fn string(payload: &[u8]) -> &str {
    std::str::from_utf8(payload).expect("UTF-8")
}

/// The `runtime.Unknown` after the magic: (apiVersion, kind, raw).
fn unknown(bytes: &[u8]) -> (&str, &str, &[u8]) {
    let body = bytes
        .strip_prefix(MAGIC)
        .expect("starts with the magic k8s\\0");
    let (mut api_version, mut kind, mut raw) = ("", "", &[][..]);
    for f in fields(body) {
        match (f.number, f.wire) {
            (1, 2) => {
                for t in fields(f.payload) {
                    match (t.number, t.wire) {
                        (1, 2) => api_version = string(t.payload),
                        (2, 2) => kind = string(t.payload),
                        other => panic!("typeMeta field {other:?}"),
                    }
                }
            }
            (2, 2) => raw = f.payload,
            // contentEncoding, contentType: empty for an object the server encoded.
            (3 | 4, 2) => assert!(f.payload.is_empty()),
            other => panic!("Unknown field {other:?}"),
        }
    }
    (api_version, kind, raw)
}

fn wire_of(ty: Type) -> u64 {
    match ty {
        Type::Bool | Type::Int32 | Type::Int64 | Type::Uint32 | Type::Uint64 => 0,
        Type::Double => 1,
        Type::Float => 5,
        _ => 2,
    }
}

/// Walks `bytes` as message `id`, checking each field against the schema; counts the fields.
fn walk(id: MessageId, bytes: &[u8], seen: &mut usize) {
    let message: &Message = BUILTIN.message(id);
    for f in fields(bytes) {
        *seen += 1;
        let number = u32::try_from(f.number).unwrap();
        let field = message
            .field(number)
            .unwrap_or_else(|| panic!("{} has no field {number}", message.name));
        let at = format!("{}.{}", message.name, field.json);
        if let Card::Map(key) = field.card {
            assert_eq!(f.wire, 2, "{at}: map entry");
            for e in fields(f.payload) {
                match e.number {
                    1 => assert_eq!(e.wire, wire_of(key), "{at}: key"),
                    2 => value(&at, field.ty, &e, seen),
                    other => panic!("{at}: map entry field {other}"),
                }
            }
        } else if field.card == Card::Repeated && f.wire == 2 && wire_of(field.ty) != 2 {
            // A packed run of scalars.
        } else {
            value(&at, field.ty, &f, seen);
        }
    }
}

fn value(at: &str, ty: Type, f: &WireField<'_>, seen: &mut usize) {
    assert_eq!(f.wire, wire_of(ty), "{at}: wire type for {ty:?}");
    match ty {
        Type::Message(id) => walk(id, f.payload, seen),
        Type::String => {
            string(f.payload);
        }
        Type::RawJson => {
            for raw in fields(f.payload) {
                assert_eq!((raw.number, raw.wire), (1, 2), "{at}");
                serde_json::from_slice::<serde_json::Value>(raw.payload)
                    .unwrap_or_else(|e| panic!("{at}: raw is no JSON: {e}"));
            }
        }
        Type::SchemaPropsOrArray(id) | Type::SchemaPropsOrStringArray(id) => {
            for inner in fields(f.payload) {
                match (ty, inner.number) {
                    (_, 1) | (Type::SchemaPropsOrArray(_), 2) => walk(id, inner.payload, seen),
                    (_, 2) => {
                        string(inner.payload);
                    }
                    (_, other) => panic!("{at}: field {other}"),
                }
            }
        }
        Type::SchemaPropsOrBool(id) => {
            for inner in fields(f.payload) {
                match (inner.number, inner.wire) {
                    (1, 0) => {}
                    (2, 2) => walk(id, inner.payload, seen),
                    other => panic!("{at}: field {other:?}"),
                }
            }
        }
        _ => {}
    }
}

fn json(name: &str) -> serde_json::Value {
    serde_json::from_slice(&read(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn every_fixture_is_listed() {
    let mut on_disk: Vec<String> = std::fs::read_dir(dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    on_disk.sort();
    let mut expected: Vec<String> = FIXTURES
        .iter()
        .flat_map(|(name, ..)| [format!("{name}.json"), format!("{name}.pb")])
        .chain(["watch-pods.jsonl".to_owned(), "watch-pods.pb".to_owned()])
        .collect();
    expected.sort();
    assert_eq!(on_disk, expected);
}

#[test]
fn objects_are_unknowns_of_schema_roots() {
    for &(name, api_version, kind) in FIXTURES {
        let pb = read(&format!("{name}.pb"));
        let (got_version, got_kind, raw) = unknown(&pb);
        assert_eq!((got_version, got_kind), (api_version, kind), "{name}.pb");
        let id = BUILTIN
            .root(api_version, kind)
            .unwrap_or_else(|| panic!("{name}: {api_version} {kind} is no root"));
        let text = json(&format!("{name}.json"));
        assert_eq!(text["apiVersion"], api_version, "{name}.json");
        assert_eq!(text["kind"], kind, "{name}.json");
        let mut seen = 0;
        walk(id, raw, &mut seen);
        assert!(seen > 5, "{name}: only {seen} fields");
    }
}

#[test]
fn watch_stream_is_length_framed_raw_watch_events() {
    let stream = read("watch-pods.pb");
    let lines = read("watch-pods.jsonl");
    let lines: Vec<serde_json::Value> = lines
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    assert!(BUILTIN.root("v1", "WatchEvent").is_some());
    let mut rest = &stream[..];
    let mut events = Vec::new();
    while !rest.is_empty() {
        let (len, tail) = rest.split_at(4);
        let len = usize::try_from(u32::from_be_bytes(len.try_into().unwrap())).unwrap();
        let (frame, tail) = tail.split_at(len);
        rest = tail;
        // The event itself is raw protobuf: no magic, no Unknown.
        assert!(!frame.starts_with(MAGIC));
        // Not walked with the schema: WatchEvent.object is a RawExtension, whose raw is here the
        // object encoded as protobuf (magic and Unknown), not JSON.
        let mut seen = 0;
        let (mut ty, mut object) = ("", &[][..]);
        for f in fields(frame) {
            match f.number {
                1 => ty = string(f.payload),
                2 => {
                    let raw = fields(f.payload);
                    assert_eq!(raw.len(), 1);
                    object = raw[0].payload;
                }
                other => panic!("WatchEvent field {other}"),
            }
        }
        let (api_version, kind, raw) = unknown(object);
        let id = BUILTIN.root(api_version, kind).unwrap();
        walk(id, raw, &mut seen);
        events.push((ty.to_owned(), kind.to_owned(), raw.to_vec()));
    }
    let types: Vec<_> = events
        .iter()
        .map(|(t, k, _)| (t.as_str(), k.as_str()))
        .collect();
    assert_eq!(
        types,
        [
            ("ADDED", "Pod"),
            ("MODIFIED", "Pod"),
            ("DELETED", "Pod"),
            ("BOOKMARK", "Pod"),
            ("ERROR", "Status"),
        ]
    );
    assert_eq!(lines.len(), events.len());
    for (line, (ty, kind, _)) in lines.iter().zip(&events) {
        assert_eq!(line["type"], ty.as_str());
        assert_eq!(line["object"]["kind"], kind.as_str());
    }
    let bookmark = &lines[3]["object"]["metadata"];
    assert_eq!(bookmark["annotations"]["k8s.io/initial-events-end"], "true");
    assert_eq!(lines[4]["object"]["code"], 410);
}

/// The JSON twins are what k8s-openapi reads: the decoder's output is compared with them.
#[test]
fn json_twins_deserialize_into_k8s_openapi() {
    use k8s_openapi::api::{apps, batch, coordination, core, discovery, events};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
    use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1 as apiregistration;
    // k8s-openapi has no PartialObjectMetadata: its fields, with k8s-openapi's ObjectMeta.
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Partial {
        #[serde(rename = "apiVersion")]
        api_version: String,
        kind: String,
        metadata: meta::ObjectMeta,
    }
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct PartialList {
        #[serde(rename = "apiVersion")]
        api_version: String,
        kind: String,
        metadata: meta::ListMeta,
        items: Vec<Partial>,
    }
    fn check<T: serde::de::DeserializeOwned + 'static>(name: &str) {
        let bytes = read(&format!("{name}.json"));
        if let Err(e) = serde_json::from_slice::<T>(&bytes) {
            panic!("{name}.json: {e}");
        }
    }
    for &(name, ..) in FIXTURES {
        match name {
            "apiservice" => check::<apiregistration::APIService>(name),
            "configmap" => check::<core::v1::ConfigMap>(name),
            "crd" => check::<apiextensions::CustomResourceDefinition>(name),
            "deployment" => check::<apps::v1::Deployment>(name),
            "endpointslice" => check::<discovery::v1::EndpointSlice>(name),
            "event" => check::<events::v1::Event>(name),
            "job" => check::<batch::v1::Job>(name),
            "lease" => check::<coordination::v1::Lease>(name),
            "namespace" => check::<core::v1::Namespace>(name),
            "node" => check::<core::v1::Node>(name),
            "partialobjectmetadatalist" => check::<PartialList>(name),
            "pod" | "pod-minimal" => check::<core::v1::Pod>(name),
            "podlist" => check::<k8s_openapi::List<core::v1::Pod>>(name),
            "replicaset" => check::<apps::v1::ReplicaSet>(name),
            "secret" => check::<core::v1::Secret>(name),
            "service" => check::<core::v1::Service>(name),
            "status" => check::<meta::Status>(name),
            other => panic!("no k8s-openapi type for {other}"),
        }
    }
}
