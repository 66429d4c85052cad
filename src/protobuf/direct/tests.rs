//! The direct decoders against the serde path, which is the reference: on the golden fixtures
//! (apimachinery's own encodings), on random messages of every kind they decode, with
//! projections, and on every truncation of a Pod.

use std::{fmt::Debug, path::PathBuf};

use serde::de::DeserializeOwned;

use super::{direct, serde_path};
use crate::{
    protobuf::{
        envelope::{envelope, resolve},
        schema::{BUILTIN, Card, MessageId, Type},
    },
    reflector::decode::Projection,
    testutil::Rng,
};

k8s_openapi::k8s_if_1_37! {
    use super::{generated::for_each_root, rt::Roots};
}

/// Both paths on `bytes`; panics unless they agree, and returns whether they decoded.
fn same<R>(
    id: MessageId,
    bytes: &[u8],
    tm: Option<(&str, &str)>,
    p: &Projection,
    what: &str,
) -> bool
where
    R: DeserializeOwned + PartialEq + Debug + 'static,
{
    let reference = serde_path::<R>(&BUILTIN, bytes, id, tm, p);
    let got = direct::<R>(&BUILTIN, bytes, id, tm, p);
    match (reference, got) {
        (Ok(want), Ok(Some(got))) => {
            assert_eq!(
                got, want,
                "{what}: the direct decode differs from the serde path"
            );
            true
        }
        (Ok(_), Ok(None)) => panic!("{what}: no direct decoder"),
        (Ok(_), Err(e)) => panic!("{what}: the serde path decodes, the direct decode fails: {e:?}"),
        (Err(_), Err(_)) => false,
        (Err(e), Ok(_)) => {
            panic!("{what}: the serde path fails ({e:?}), the direct decode does not")
        }
    }
}

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/protobuf")
}

/// Calls `f` with the golden Pod's message, its bytes and its type metadata.
fn with_pod<T>(f: impl FnOnce(MessageId, &[u8], (&str, &str)) -> T) -> T {
    let body = std::fs::read(fixture_dir().join("pod.pb")).unwrap();
    let env = envelope(&body).unwrap();
    let id = resolve(&BUILTIN, env.api_version, env.kind).unwrap();
    f(id, env.raw, (env.api_version, env.kind))
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn tag(out: &mut Vec<u8>, number: u32, wire: u8) {
    varint(out, (u64::from(number) << 3) | u64::from(wire));
}

fn len(out: &mut Vec<u8>, number: u32, bytes: &[u8]) {
    tag(out, number, 2);
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

const WORDS: &[&str] = &[
    "",
    "a",
    "nginx",
    "kube-system",
    "ünïcode",
    "app.kubernetes.io/name",
    "x y",
];

fn word(rng: &mut Rng) -> String {
    let w = WORDS[rng.below(WORDS.len() as u64) as usize];
    if rng.chance(3) {
        format!("{w}{}", rng.below(1000))
    } else {
        w.to_owned()
    }
}

/// A random value of `ty`, written as field `number` of the message in `out` (one occurrence).
fn value(rng: &mut Rng, ty: Type, number: u32, depth: u32, out: &mut Vec<u8>) {
    match ty {
        Type::String => len(out, number, word(rng).as_bytes()),
        Type::Bytes => {
            let b: Vec<u8> = (0..rng.below(6)).map(|_| rng.next() as u8).collect();
            len(out, number, &b);
        }
        Type::Bool | Type::Int32 | Type::Int64 | Type::Uint32 | Type::Uint64 => {
            tag(out, number, 0);
            let v = match rng.below(6) {
                0 => 0,
                1 => 1,
                2 => (-(rng.below(1000) as i64)) as u64,
                3 => rng.next(),
                // Zero once truncated to 32 bits, as Go reads an int32.
                4 => 1 << 32,
                _ => rng.below(100_000),
            };
            varint(out, v);
        }
        Type::Double => {
            tag(out, number, 1);
            let f = match rng.below(4) {
                0 => 0.0,
                1 => -0.0,
                2 => rng.below(1000) as f64,
                _ => (rng.below(1_000_000) as f64) / 7.0 - 1000.0,
            };
            out.extend_from_slice(&f64::to_bits(f).to_le_bytes());
        }
        Type::Float => {
            tag(out, number, 5);
            out.extend_from_slice(&(rng.below(100) as f32 / 4.0).to_bits().to_le_bytes());
        }
        Type::Message(id) => {
            let b = message(rng, id, depth + 1);
            len(out, number, &b);
        }
        Type::Time | Type::MicroTime => {
            let mut b = Vec::new();
            if !rng.chance(4) {
                tag(&mut b, 1, 0);
                varint(&mut b, rng.below(4_000_000_000));
                if rng.chance(2) {
                    tag(&mut b, 2, 0);
                    // Sometimes out of 0..1e9 (negative, or past a second), which carries.
                    let nanos = match rng.below(4) {
                        0 => (-(rng.below(3_000_000_000) as i64)) as u64,
                        1 => rng.below(2_000_000_000),
                        _ => rng.below(1_000_000_000),
                    };
                    varint(&mut b, nanos);
                }
            }
            len(out, number, &b);
        }
        Type::Duration => {
            let mut b = Vec::new();
            tag(&mut b, 1, 0);
            varint(&mut b, rng.below(10_000_000_000_000));
            len(out, number, &b);
        }
        Type::Quantity => {
            let mut b = Vec::new();
            if !rng.chance(4) {
                let q = ["100m", "1Gi", "0", "2", "1.5"][rng.below(5) as usize];
                len(&mut b, 1, q.as_bytes());
            }
            len(out, number, &b);
        }
        Type::IntOrString => {
            let mut b = Vec::new();
            tag(&mut b, 1, 0);
            varint(&mut b, rng.below(2));
            tag(&mut b, 2, 0);
            varint(&mut b, rng.below(65536));
            len(&mut b, 3, word(rng).as_bytes());
            len(out, number, &b);
        }
        Type::RawJson => {
            let mut b = Vec::new();
            let j = [
                "",
                "{}",
                r#"{"f:metadata":{"f:labels":{}}}"#,
                "[1,2]",
                "\"x\"",
                "3",
            ][rng.below(6) as usize];
            if !j.is_empty() || rng.chance(2) {
                len(&mut b, 1, j.as_bytes());
            }
            len(out, number, &b);
        }
        Type::SchemaPropsOrArray(id)
        | Type::SchemaPropsOrBool(id)
        | Type::SchemaPropsOrStringArray(id) => {
            let mut b = Vec::new();
            match ty {
                Type::SchemaPropsOrBool(_) if rng.chance(2) => {
                    tag(&mut b, 1, 0);
                    varint(&mut b, rng.below(2));
                }
                Type::SchemaPropsOrBool(_) => len(&mut b, 2, &message(rng, id, depth + 1)),
                Type::SchemaPropsOrStringArray(_) if rng.chance(2) => {
                    len(&mut b, 2, b"a");
                    len(&mut b, 2, b"b");
                }
                _ => len(&mut b, 1, &message(rng, id, depth + 1)),
            }
            len(out, number, &b);
        }
        Type::Strings => {
            let mut b = Vec::new();
            for _ in 0..rng.below(3) {
                len(&mut b, 1, word(rng).as_bytes());
            }
            len(out, number, &b);
        }
    }
}

/// A random message `id`: each field present or not, repeated fields run 0 to 3 times (varint
/// scalars sometimes packed), maps with 0 to 3 entries; nesting thins out with depth.
fn message(rng: &mut Rng, id: MessageId, depth: u32) -> Vec<u8> {
    let mut out = Vec::new();
    if depth > 6 {
        return out;
    }
    for field in BUILTIN.message(id).fields {
        let nested = matches!(
            field.ty,
            Type::Message(_) | Type::SchemaPropsOrArray(_) | Type::SchemaPropsOrBool(_)
        );
        let odds = if nested { 2 + u64::from(depth) } else { 2 };
        if !rng.chance(odds) {
            continue;
        }
        match field.card {
            Card::Single => {
                value(rng, field.ty, field.number, depth, &mut out);
                // Now and then a second occurrence: the last one wins, and a second inline
                // message adds its fields (replacing its repeated ones), in both paths.
                if rng.chance(10) {
                    value(rng, field.ty, field.number, depth, &mut out);
                }
            }
            Card::Repeated => {
                let n = 1 + rng.below(3);
                let scalar = matches!(field.ty, Type::Bool | Type::Int32 | Type::Int64);
                if scalar && rng.chance(2) {
                    let mut packed = Vec::new();
                    for _ in 0..n {
                        varint(&mut packed, rng.below(1000));
                    }
                    len(&mut out, field.number, &packed);
                } else {
                    for _ in 0..n {
                        value(rng, field.ty, field.number, depth, &mut out);
                    }
                }
            }
            Card::Map(_) => {
                for _ in 0..rng.below(4) {
                    let mut entry = Vec::new();
                    if !rng.chance(8) {
                        len(&mut entry, 1, word(rng).as_bytes());
                    }
                    if !rng.chance(8) {
                        value(rng, field.ty, 2, depth, &mut entry);
                    }
                    len(&mut out, field.number, &entry);
                }
            }
        }
    }
    out
}

k8s_openapi::k8s_if_1_37! {
    /// Random messages of every kind with a direct decoder, and (for those with one) its golden
    /// fixture, each decoded both ways.
    struct Differential {
        rng: Rng,
        kinds: usize,
        decoded: usize,
        fixtures: Vec<(String, String, Vec<u8>)>,
        fixtures_checked: usize,
    }

    impl Roots for Differential {
        fn root<R>(&mut self, id: u16)
        where
            R: k8s_openapi::Resource + DeserializeOwned + Default + PartialEq + Debug + 'static,
        {
            let id = MessageId(id);
            self.kinds += 1;
            let tm = Some((R::API_VERSION, R::KIND));
            let none = Projection::none();
            for i in 0..40 {
                let bytes = message(&mut self.rng, id, 0);
                let what = format!("{} random message {i}", R::KIND);
                if same::<R>(id, &bytes, tm, &none, &what) {
                    self.decoded += 1;
                }
            }
            for (name, raw_kind, body) in &self.fixtures {
                if raw_kind != &format!("{} {}", R::API_VERSION, R::KIND) {
                    continue;
                }
                let env = envelope(body).unwrap();
                assert!(same::<R>(id, env.raw, Some((env.api_version, env.kind)), &none, name));
                self.fixtures_checked += 1;
            }
        }
    }

    #[test]
    fn every_kind_decodes_as_through_serde() {
        let mut fixtures = Vec::new();
        for entry in std::fs::read_dir(fixture_dir()).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "pb") {
                let body = std::fs::read(&path).unwrap();
                if let Ok(env) = envelope(&body) {
                    let kind = format!("{} {}", env.api_version, env.kind);
                    fixtures.push((path.display().to_string(), kind, body.clone()));
                }
            }
        }
        let mut d = Differential {
            rng: Rng(0x5eed),
            kinds: 0,
            decoded: 0,
            fixtures,
            fixtures_checked: 0,
        };
        for_each_root(&mut d);
        assert!(d.kinds > 100, "{} kinds", d.kinds);
        // Random messages are mostly valid: a differential that compares only failures proves
        // nothing.
        assert!(d.decoded * 10 > d.kinds * 40 * 9, "{} of {} decoded", d.decoded, d.kinds * 40);
        assert!(d.fixtures_checked >= 12, "{} fixtures", d.fixtures_checked);
    }

    #[test]
    fn projections_drop_what_the_serde_path_drops() {
        use k8s_openapi::api::core::v1::Pod;
        let projections = [
            Projection::strip_managed_fields(),
            Projection::from_paths([
                "metadata.managedFields",
                r#"metadata.annotations["kubectl.kubernetes.io/last-applied-configuration"]"#,
                "metadata.labels.app",
                "spec.containers[*].env",
                "spec.containers[*].resources.requests.cpu",
                "spec.volumes",
                "status.conditions[*].lastTransitionTime",
                "status.containerStatuses[].state.running",
                // Paths that meet something else than they expect drop nothing there.
                "spec.containers.name",
                "metadata[*].x",
            ])
            .unwrap(),
        ];
        let id = with_pod(|id, raw, tm| {
            for p in &projections {
                assert!(same::<Pod>(id, raw, Some(tm), p, &format!("{p:?}")));
            }
            id
        });
        let tm = Some(("v1", "Pod"));
        let mut rng = Rng(7);
        for i in 0..200 {
            let bytes = message(&mut rng, id, 0);
            for p in &projections {
                same::<Pod>(id, &bytes, tm, p, &format!("random Pod {i}, {p:?}"));
            }
        }
    }

    #[test]
    fn every_truncation_fails_or_decodes_as_through_serde() {
        use k8s_openapi::api::core::v1::Pod;
        with_pod(|id, raw, _| {
            let none = Projection::none();
            let mut failed = 0;
            for cut in 0..raw.len() {
                if !same::<Pod>(id, &raw[..cut], None, &none, &format!("cut at {cut}")) {
                    failed += 1;
                }
            }
            assert!(failed > raw.len() / 2, "{failed} truncations failed");
        });
    }

    #[test]
    fn other_types_and_kinds_go_through_serde() {
        use k8s_openapi::api::core::v1::{ConfigMap, Pod};
        with_pod(|id, raw, _| {
            let none = Projection::none();
            // Not the kind's type: no direct decoder.
            assert!(direct::<serde_json::Value>(&BUILTIN, raw, id, None, &none).unwrap().is_none());
            assert!(direct::<ConfigMap>(&BUILTIN, raw, id, None, &none).unwrap().is_none());
            // The type, but the envelope names another kind: the serde path reports it.
            let other = Some(("v1", "ConfigMap"));
            assert!(direct::<Pod>(&BUILTIN, raw, id, other, &none).unwrap().is_none());
            assert!(super::decode::<Pod>(&BUILTIN, raw, id, other, &none).is_err());
            assert!(direct::<Pod>(&BUILTIN, raw, id, None, &none).unwrap().is_some());
        });
    }

    /// The field of message `id` whose JSON name is `json`: its number and value type.
    fn field(id: MessageId, json: &str) -> (u32, MessageId) {
        let f = BUILTIN.message(id).fields.iter().find(|f| f.json == json).unwrap();
        match f.ty {
            Type::Message(m) => (f.number, m),
            _ => panic!("{json} is not a message"),
        }
    }

    /// A CRD whose one version's `openAPIV3Schema` is the message `schema(properties_n)` builds
    /// (given the field number of `JSONSchemaProps.properties`).
    fn crd_with_schema(schema: impl FnOnce(u32) -> Vec<u8>) -> (MessageId, Vec<u8>) {
        let crd = resolve(&BUILTIN, "apiextensions.k8s.io/v1", "CustomResourceDefinition").unwrap();
        let (spec_n, spec) = field(crd, "spec");
        let (versions_n, version) = field(spec, "versions");
        let (schema_n, validation) = field(version, "schema");
        let (open_n, props) = field(validation, "openAPIV3Schema");
        let (properties_n, _) = field(props, "properties");
        let mut bytes = schema(properties_n);
        for number in [open_n, schema_n, versions_n, spec_n] {
            let mut outer = Vec::new();
            len(&mut outer, number, &bytes);
            bytes = outer;
        }
        (crd, bytes)
    }

    /// `properties` entries: each key with the given schema bytes.
    fn properties(properties_n: u32, entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        for (k, v) in entries {
            let mut entry = Vec::new();
            len(&mut entry, 1, k.as_bytes());
            len(&mut entry, 2, v);
            len(&mut out, properties_n, &entry);
        }
        out
    }

    #[test]
    fn a_map_of_messages_whose_entries_are_all_dropped_is_empty_not_absent() {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        let path = |k: &str| format!(r#"spec.versions[*].schema.openAPIV3Schema.properties["{k}"]"#);
        for (keys, dropped) in [(&["a"][..], &["a"][..]), (&["a", "b"], &["a"]), (&["a", "b"], &["a", "b"])] {
            let entries: Vec<(&str, &[u8])> = keys.iter().map(|k| (*k, &[][..])).collect();
            let (crd, obj) = crd_with_schema(|n| properties(n, &entries));
            let p = Projection::from_paths(dropped.iter().map(|k| path(k))).unwrap();
            assert!(same::<CustomResourceDefinition>(crd, &obj, None, &p, &format!("{keys:?} - {dropped:?}")));
        }
    }

    #[test]
    fn nesting_is_bounded_as_in_the_serde_path() {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        for (depth, decodes) in [(90, true), (101, false)] {
            // properties: {"a": {properties: {"a": ...}}}, `depth` schemas deep.
            let (crd, obj) = crd_with_schema(|n| {
                let mut schema = Vec::new();
                for _ in 0..depth {
                    schema = properties(n, &[("a", &schema)]);
                }
                schema
            });
            // The direct decoders reach their limit within a test thread's 2 MiB stack, even
            // unoptimized.
            let direct = direct::<CustomResourceDefinition>(&BUILTIN, &obj, crd, None, &Projection::none());
            assert_eq!(direct.is_ok(), decodes, "{depth} schemas deep");
            // The serde path's frames, unoptimized, outgrow a test thread's stack first.
            let decoded = std::thread::Builder::new()
                .stack_size(256 << 20)
                .spawn(move || {
                    let what = format!("{depth} schemas deep");
                    same::<CustomResourceDefinition>(crd, &obj, None, &Projection::none(), &what)
                })
                .unwrap()
                .join()
                .unwrap();
            assert_eq!(decoded, decodes, "{depth} schemas deep");
        }
    }
}
