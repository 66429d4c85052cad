//! The decoder against a small hand-written schema, with wire bytes built by hand.

use serde::{Deserialize, de::DeserializeOwned};
use serde_json::{Value, json};

use super::{
    ErrorKind,
    de::{MAX_DEPTH, MessageDeserializer},
    envelope::decode_object_in,
    list::ProtobufListDecoder,
    schema::{Card, Field, Message, MessageId, Root, Schema, Type},
    watch::{LengthPrefixFramer, decode_watch_frame_in, undecodable_frame_in},
};
use crate::reflector::decode::{DecodeError, Projection, WatchEvent};

const fn f(number: u32, json: &'static str, ty: Type, card: Card) -> Field {
    Field {
        number,
        json,
        ty,
        card,
        omit_zero: false,
        inline: false,
    }
}

const fn z(number: u32, json: &'static str, ty: Type) -> Field {
    Field {
        omit_zero: true,
        ..f(number, json, ty, Card::Single)
    }
}

const fn inline(number: u32, id: u16) -> Field {
    Field {
        inline: true,
        ..f(number, "", Type::Message(MessageId(id)), Card::Single)
    }
}

const fn m(id: u16) -> Type {
    Type::Message(MessageId(id))
}

use Card::{Repeated as R, Single as S};

const TEST: u16 = 0;
const CHILD: u16 = 1;
const META: u16 = 6;

static SCHEMA: Schema = Schema {
    messages: &[
        // 0
        Message {
            name: "test.Test",
            fields: &[
                f(1, "s", Type::String, S),
                z(2, "z", Type::String),
                f(3, "b", Type::Bytes, S),
                f(4, "flag", Type::Bool, S),
                f(5, "i32", Type::Int32, S),
                f(6, "i64", Type::Int64, S),
                f(7, "u32", Type::Uint32, S),
                f(8, "u64", Type::Uint64, S),
                f(9, "d", Type::Double, S),
                f(10, "fl", Type::Float, S),
                f(11, "child", m(CHILD), S),
                f(12, "kids", m(CHILD), R),
                f(13, "nums", Type::Int64, R),
                f(14, "names", Type::String, R),
                f(15, "labels", Type::String, Card::Map(Type::String)),
                f(16, "t", Type::Time, S),
                f(17, "mt", Type::MicroTime, S),
                f(18, "dur", Type::Duration, S),
                f(19, "q", Type::Quantity, S),
                f(20, "ios", Type::IntOrString, S),
                f(21, "raw", Type::RawJson, S),
                inline(22, 2),
                z(23, "zi", Type::Int32),
                f(24, "children", m(CHILD), Card::Map(Type::String)),
                f(25, "orArray", Type::SchemaPropsOrArray(MessageId(CHILD)), S),
                f(26, "orBool", Type::SchemaPropsOrBool(MessageId(CHILD)), S),
                f(
                    27,
                    "orStrings",
                    Type::SchemaPropsOrStringArray(MessageId(CHILD)),
                    S,
                ),
                f(28, "rec", m(TEST), S),
                z(29, "zb", Type::Bool),
                f(30, "metadata", m(META), S),
                f(31, "floats", Type::Double, R),
                z(32, "zd", Type::Double),
            ],
        },
        // 1
        Message {
            name: "test.Child",
            fields: &[f(1, "name", Type::String, S)],
        },
        // 2
        Message {
            name: "test.Inlined",
            fields: &[f(1, "inlineA", Type::String, S), inline(2, 3)],
        },
        // 3
        Message {
            name: "test.Inner",
            fields: &[f(1, "innerB", Type::Int32, S)],
        },
        // 4
        Message {
            name: "test.TestList",
            fields: &[f(1, "metadata", m(5), S), f(2, "items", m(TEST), R)],
        },
        // 5
        Message {
            name: "k8s.io.apimachinery.pkg.apis.meta.v1.ListMeta",
            fields: &[
                z(1, "selfLink", Type::String),
                z(2, "resourceVersion", Type::String),
                z(3, "continue", Type::String),
                f(4, "remainingItemCount", Type::Int64, S),
            ],
        },
        // 6
        Message {
            name: "k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta",
            fields: &[
                z(1, "name", Type::String),
                z(3, "namespace", Type::String),
                z(6, "resourceVersion", Type::String),
                f(12, "annotations", Type::String, Card::Map(Type::String)),
            ],
        },
        // 7
        Message {
            name: "k8s.io.apimachinery.pkg.apis.meta.v1.Status",
            fields: &[
                f(1, "metadata", m(5), S),
                z(2, "status", Type::String),
                z(3, "message", Type::String),
                z(4, "reason", Type::String),
                z(6, "code", Type::Int32),
            ],
        },
    ],
    roots: &[
        Root {
            api_version: "test/v1",
            kind: "Test",
            message: MessageId(TEST),
        },
        Root {
            api_version: "test/v1",
            kind: "TestList",
            message: MessageId(4),
        },
    ],
};

// A tiny encoder, for the bytes of the tests.

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn tag(number: u32, wire: u8) -> Vec<u8> {
    let mut out = Vec::new();
    varint(u64::from(number) << 3 | u64::from(wire), &mut out);
    out
}

/// A varint field.
fn v(number: u32, value: u64) -> Vec<u8> {
    let mut out = tag(number, 0);
    varint(value, &mut out);
    out
}

/// A length-delimited field.
fn l(number: u32, bytes: &[u8]) -> Vec<u8> {
    let mut out = tag(number, 2);
    varint(bytes.len() as u64, &mut out);
    out.extend_from_slice(bytes);
    out
}

fn s(number: u32, text: &str) -> Vec<u8> {
    l(number, text.as_bytes())
}

/// A message field of the given fields.
fn msg(number: u32, fields: &[Vec<u8>]) -> Vec<u8> {
    l(number, &fields.concat())
}

fn fixed64(number: u32, bits: u64) -> Vec<u8> {
    let mut out = tag(number, 1);
    out.extend_from_slice(&bits.to_le_bytes());
    out
}

fn fixed32(number: u32, bits: u32) -> Vec<u8> {
    let mut out = tag(number, 5);
    out.extend_from_slice(&bits.to_le_bytes());
    out
}

fn decode(bytes: &[u8]) -> Result<Value, super::Error> {
    decode_as(bytes)
}

fn decode_as<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, super::Error> {
    T::deserialize(MessageDeserializer::new(bytes, &SCHEMA, MessageId(TEST)))
}

fn kind(r: Result<Value, super::Error>) -> ErrorKind {
    r.expect_err("an error").kind()
}

/// `k8s\0` + `runtime.Unknown{typeMeta, raw, contentEncoding, contentType}`.
fn body(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    [
        b"k8s\0".to_vec(),
        msg(1, &[s(1, api_version), s(2, kind)]),
        l(2, raw),
        s(3, ""),
        s(4, ""),
    ]
    .concat()
}

#[test]
fn every_type() {
    let bytes = [
        s(1, "hello"),
        l(3, b"\x00\xffab"),
        v(4, 1),
        // -2 as Go writes an int32: sign-extended to ten bytes.
        v(5, (-2i64) as u64),
        v(6, (-3i64) as u64),
        v(7, 7),
        v(8, u64::MAX),
        fixed64(9, 1.5f64.to_bits()),
        fixed32(10, 0.25f32.to_bits()),
        msg(11, &[s(1, "c")]),
        msg(12, &[s(1, "k1")]),
        msg(12, &[]),
        msg(16, &[v(1, 1_700_000_000), v(2, 999)]),
        msg(17, &[v(1, 1_700_000_000), v(2, 123_456_789)]),
        msg(18, &[v(1, 90_000_000_000)]),
        msg(19, &[s(1, "100Mi")]),
        msg(20, &[v(1, 0), v(2, 8080)]),
        msg(21, &[s(1, r#"{"f:metadata":{"x":[1,true,null]}}"#)]),
    ]
    .concat();
    assert_eq!(
        decode(&bytes).unwrap(),
        json!({
            "s": "hello",
            "b": "AP9hYg==",
            "flag": true,
            "i32": -2,
            "i64": -3,
            "u32": 7,
            "u64": u64::MAX,
            "d": 1.5,
            "fl": 0.25,
            "child": {"name": "c"},
            "kids": [{"name": "k1"}, {}],
            "t": "2023-11-14T22:13:20Z",
            "mt": "2023-11-14T22:13:20.123456Z",
            "dur": "1m30s",
            "q": "100Mi",
            "ios": 8080,
            "raw": {"f:metadata": {"x": [1, true, null]}},
        })
    );
    let bytes = [
        msg(20, &[v(1, 1), s(3, "http")]),
        msg(19, &[]),
        msg(21, &[]),
    ]
    .concat();
    assert_eq!(
        decode(&bytes).unwrap(),
        json!({"ios": "http", "q": "0", "raw": null})
    );
}

#[test]
fn omit_zero_and_zero_time_are_left_out() {
    let bytes = [
        s(1, ""),
        s(2, ""),
        v(23, 0),
        v(29, 0),
        fixed64(32, (-0.0f64).to_bits()),
        msg(16, &[]),
        msg(17, &[]),
    ]
    .concat();
    // Only the field JSON writes though empty: `s` has no omitempty.
    assert_eq!(decode(&bytes).unwrap(), json!({"s": ""}));
    let bytes = [s(2, "x"), v(23, 5), v(29, 1), fixed64(32, 2.0f64.to_bits())].concat();
    assert_eq!(
        decode(&bytes).unwrap(),
        json!({"z": "x", "zi": 5, "zb": true, "zd": 2})
    );
    // An epoch time that is not empty is not the zero time.
    assert_eq!(
        decode(&msg(16, &[v(1, 0)])).unwrap(),
        json!({"t": "1970-01-01T00:00:00Z"})
    );
    // k8s-openapi reads a skipped time as `None`, a present one as `Some`.
    #[derive(Deserialize)]
    struct T {
        t: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    }
    assert!(decode_as::<T>(&msg(16, &[])).unwrap().t.is_none());
    let t = decode_as::<T>(&msg(16, &[v(1, 1)])).unwrap().t.unwrap();
    assert_eq!(t.0.as_second(), 1);
}

#[test]
fn unknown_fields_are_skipped() {
    let bytes = [
        v(99, 5),
        s(1, "a"),
        s(100, "new"),
        fixed64(101, 1),
        fixed32(102, 1),
        msg(103, &[v(1, 1)]),
        // An unknown field inside a nested message too.
        msg(11, &[v(7, 1), s(1, "c")]),
    ]
    .concat();
    assert_eq!(
        decode(&bytes).unwrap(),
        json!({"s": "a", "child": {"name": "c"}})
    );
}

#[test]
fn packed_and_unpacked_repeated_scalars() {
    let mut packed = Vec::new();
    for n in [1u64, 300, (-1i64) as u64] {
        varint(n, &mut packed);
    }
    let bytes = [l(13, &packed), v(13, 4), l(13, &[]), v(13, 5)].concat();
    assert_eq!(decode(&bytes).unwrap(), json!({"nums": [1, 300, -1, 4, 5]}));
    let floats = [
        1.0f64.to_bits().to_le_bytes(),
        2.5f64.to_bits().to_le_bytes(),
    ]
    .concat();
    let bytes = [l(31, &floats), fixed64(31, 3.0f64.to_bits())].concat();
    // Integral floats are integers, as Go's JSON writes them.
    assert_eq!(decode(&bytes).unwrap(), json!({"floats": [1, 2.5, 3]}));
    let bytes = [s(14, "a"), s(14, ""), s(14, "c")].concat();
    assert_eq!(decode(&bytes).unwrap(), json!({"names": ["a", "", "c"]}));
    // A packed run cut inside an element.
    assert_eq!(kind(decode(&l(13, &[0x80]))), ErrorKind::Truncated);
    assert_eq!(kind(decode(&l(31, &[0; 7]))), ErrorKind::Truncated);
}

#[test]
fn a_repeated_field_must_be_contiguous() {
    let bytes = [s(14, "a"), s(1, "x"), s(14, "b")].concat();
    assert_eq!(kind(decode(&bytes)), ErrorKind::NonContiguous);
}

#[test]
fn map_entries_with_missing_key_or_value() {
    let bytes = [
        msg(15, &[s(1, "a"), s(2, "1")]),
        msg(15, &[s(1, "k")]),
        msg(15, &[s(2, "v"), s(9, "unknown")]),
        msg(24, &[s(1, "c")]),
        msg(24, &[s(1, "d"), msg(2, &[s(1, "n")])]),
    ]
    .concat();
    assert_eq!(
        decode(&bytes).unwrap(),
        json!({
            "labels": {"a": "1", "k": "", "": "v"},
            "children": {"c": {}, "d": {"name": "n"}},
        })
    );
    assert_eq!(kind(decode(&msg(15, &[v(1, 3)]))), ErrorKind::WrongWireType);
    assert_eq!(kind(decode(&v(15, 3))), ErrorKind::WrongWireType);
}

#[test]
fn inline_fields_are_the_parents() {
    let bytes = [
        s(1, "a"),
        msg(22, &[s(1, "in"), msg(2, &[v(1, 7)])]),
        v(4, 1),
    ]
    .concat();
    assert_eq!(
        decode(&bytes).unwrap(),
        json!({"s": "a", "inlineA": "in", "innerB": 7, "flag": true})
    );
}

#[test]
fn schema_props_unions() {
    // JSONSchemaPropsOrArray: the array when it has schemas, else the schema, else null.
    let bytes = [
        msg(25, &[msg(2, &[s(1, "a")]), msg(2, &[s(1, "b")])]),
        msg(26, &[v(1, 0)]),
        msg(27, &[s(2, "x"), s(2, "y")]),
    ]
    .concat();
    assert_eq!(
        decode(&bytes).unwrap(),
        json!({
            "orArray": [{"name": "a"}, {"name": "b"}],
            "orBool": false,
            "orStrings": ["x", "y"],
        })
    );
    let bytes = [
        msg(25, &[msg(1, &[s(1, "one")])]),
        msg(26, &[v(1, 1), msg(2, &[s(1, "s")])]),
        msg(27, &[msg(1, &[s(1, "t")])]),
    ]
    .concat();
    assert_eq!(
        decode(&bytes).unwrap(),
        json!({
            "orArray": {"name": "one"},
            "orBool": {"name": "s"},
            "orStrings": {"name": "t"},
        })
    );
    let bytes = [msg(25, &[]), msg(26, &[v(1, 1)]), msg(27, &[])].concat();
    assert_eq!(
        decode(&bytes).unwrap(),
        json!({"orArray": null, "orBool": true, "orStrings": null})
    );
}

/// `depth` messages nested through `rec`.
fn nested(depth: usize) -> Vec<u8> {
    let mut bytes = s(1, "leaf");
    for _ in 0..depth {
        bytes = l(28, &bytes);
    }
    bytes
}

#[test]
fn nesting_is_bounded() {
    let ok = nested(MAX_DEPTH as usize);
    let mut value = decode(&ok).unwrap();
    for _ in 0..MAX_DEPTH {
        value = value["rec"].take();
    }
    assert_eq!(value, json!({"s": "leaf"}));
    assert_eq!(
        kind(decode(&nested(MAX_DEPTH as usize + 1))),
        ErrorKind::TooDeep
    );
    // Far deeper than the stack would take.
    assert_eq!(kind(decode(&nested(100_000))), ErrorKind::TooDeep);
}

#[test]
fn bad_input_classes() {
    let cases: &[(&str, Vec<u8>, ErrorKind)] = &[
        (
            "varint past ten bytes",
            [tag(4, 0), vec![0x80; 10], vec![0]].concat(),
            ErrorKind::BadVarint,
        ),
        (
            "varint past 64 bits",
            [tag(4, 0), vec![0xff; 9], vec![0x02]].concat(),
            ErrorKind::BadVarint,
        ),
        ("start group", vec![0x0b], ErrorKind::BadTag),
        ("end group", vec![0x0c], ErrorKind::BadTag),
        ("field number 0", vec![0x02, 0x00], ErrorKind::BadTag),
        ("varint for a string", v(1, 5), ErrorKind::WrongWireType),
        ("string for a bool", s(4, "x"), ErrorKind::WrongWireType),
        (
            "fixed32 for a double",
            fixed32(9, 0),
            ErrorKind::WrongWireType,
        ),
        ("string for an inline", v(22, 1), ErrorKind::WrongWireType),
        ("invalid UTF-8", l(1, b"\xff\xfe"), ErrorKind::InvalidUtf8),
        (
            "invalid UTF-8 in a map key",
            msg(15, &[l(1, b"\xc3")]),
            ErrorKind::InvalidUtf8,
        ),
        (
            "invalid UTF-8 in a quantity",
            msg(19, &[l(1, b"\xc3")]),
            ErrorKind::InvalidUtf8,
        ),
        (
            "huge length",
            [tag(1, 2), vec![0xff; 9], vec![0x01]].concat(),
            ErrorKind::LengthPastInput,
        ),
        (
            "length past the end",
            [tag(1, 2), vec![5, b'a']].concat(),
            ErrorKind::LengthPastInput,
        ),
        ("truncated tag", vec![0x80], ErrorKind::Truncated),
        (
            "truncated fixed64",
            [tag(9, 1), vec![0; 3]].concat(),
            ErrorKind::Truncated,
        ),
        (
            "bad timestamp",
            msg(16, &[s(1, "x")]),
            ErrorKind::WrongWireType,
        ),
        ("bad raw JSON", msg(21, &[s(1, "{")]), ErrorKind::Data),
        (
            "a time out of range",
            msg(16, &[v(1, i64::MAX as u64)]),
            ErrorKind::Data,
        ),
    ];
    for (what, bytes, want) in cases {
        let got = decode(bytes).expect_err(what).kind();
        assert_eq!(got, *want, "{what}");
    }
}

#[test]
fn every_truncation_fails_cleanly() {
    let fields = [
        s(1, "hello"),
        msg(11, &[s(1, "c")]),
        msg(15, &[s(1, "a"), s(2, "1")]),
        v(6, 300),
        msg(16, &[v(1, 1_700_000_000)]),
        fixed64(9, 1.5f64.to_bits()),
        msg(22, &[s(1, "in"), msg(2, &[v(1, 7)])]),
    ];
    let bytes = fields.concat();
    let mut boundaries = vec![0];
    for f in &fields {
        boundaries.push(boundaries.last().unwrap() + f.len());
    }
    assert!(decode(&bytes).is_ok());
    for cut in 0..bytes.len() {
        let result = decode(&bytes[..cut]);
        if boundaries.contains(&cut) {
            assert!(result.is_ok(), "cut at a field boundary {cut}");
        } else {
            let k = kind(result);
            assert!(
                matches!(k, ErrorKind::Truncated | ErrorKind::LengthPastInput),
                "cut at {cut}: {k:?}"
            );
        }
    }
    // And through an envelope, where a cut before the end of `raw` is an error, as is one
    // inside the empty `contentEncoding` and `contentType` that follow it.
    let full = body("test/v1", "Test", &bytes);
    for cut in 0..full.len() {
        let result = decode_object_in::<Value>(&SCHEMA, &full[..cut], &Projection::none());
        assert_eq!(
            result.is_ok(),
            [full.len() - 4, full.len() - 2].contains(&cut),
            "{cut}"
        );
    }
}

#[test]
fn data_errors_are_redacted() {
    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Wrong {
        s: u32,
    }
    let bytes = body("test/v1", "Test", &s(1, "hunter2-secret"));
    let err = decode_object_in::<Wrong>(&SCHEMA, &bytes, &Projection::none()).unwrap_err();
    assert_eq!(err.protobuf_kind(), Some(ErrorKind::Data));
    for shown in [err.to_string(), format!("{err:?}")] {
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("invalid type: string"), "{shown}");
    }
    assert!(err.unredacted().to_string().contains("hunter2-secret"));
    // Raw JSON's errors are serde_json's, redacted the same way.
    let bytes = body("test/v1", "Test", &msg(21, &[s(1, r#"{"a":"hunter2"}"#)]));
    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct WrongRaw {
        raw: std::collections::BTreeMap<String, u32>,
    }
    let err = decode_object_in::<WrongRaw>(&SCHEMA, &bytes, &Projection::none()).unwrap_err();
    assert!(!err.to_string().contains("hunter2"), "{err}");
    assert!(!format!("{err:?}").contains("hunter2"), "{err:?}");
}

#[test]
fn objects_have_their_type_meta_first() {
    let bytes = body(
        "test/v1",
        "Test",
        &[s(1, "a"), msg(30, &[s(1, "n")])].concat(),
    );
    let value: Value = decode_object_in(&SCHEMA, &bytes, &Projection::none()).unwrap();
    assert_eq!(
        value,
        json!({"apiVersion": "test/v1", "kind": "Test", "s": "a", "metadata": {"name": "n"}})
    );
    let keys: Vec<_> = value.as_object().unwrap().keys().cloned().collect();
    assert!(keys.contains(&"apiVersion".to_owned()));
    // The projection applies.
    let p = Projection::from_paths(["s"]).unwrap();
    let value: Value = decode_object_in(&SCHEMA, &bytes, &p).unwrap();
    assert_eq!(value.get("s"), None);
    // kube's DynamicObject decodes through `deserialize_any`.
    let obj: kube::api::DynamicObject =
        decode_object_in(&SCHEMA, &bytes, &Projection::none()).unwrap();
    assert_eq!(obj.metadata.name.as_deref(), Some("n"));
    assert_eq!(obj.types.unwrap().kind, "Test");
    assert_eq!(obj.data["s"], "a");
}

#[test]
fn envelope_errors() {
    let raw = s(1, "a");
    let none = Projection::none();
    let cases: &[(&str, Vec<u8>, ErrorKind)] = &[
        ("no magic", raw.clone(), ErrorKind::BadMagic),
        ("JSON", br#"{"kind":"Test"}"#.to_vec(), ErrorKind::BadMagic),
        (
            "unknown kind",
            body("test/v1", "Nope", &raw),
            ErrorKind::UnknownKind,
        ),
        (
            "unknown group",
            body("other/v1", "Test", &raw),
            ErrorKind::UnknownKind,
        ),
        (
            "content encoding",
            [body("test/v1", "Test", &raw), s(3, "gzip")].concat(),
            ErrorKind::BadEnvelope,
        ),
        (
            "no raw",
            [b"k8s\0".to_vec(), msg(1, &[s(1, "test/v1"), s(2, "Test")])].concat(),
            ErrorKind::BadEnvelope,
        ),
    ];
    for (what, bytes, want) in cases {
        let err = decode_object_in::<Value>(&SCHEMA, bytes, &none).expect_err(what);
        assert_eq!(err.protobuf_kind(), Some(*want), "{what}: {err}");
    }
    let err =
        decode_object_in::<Value>(&SCHEMA, &body("test/v1", "Nope", &raw), &none).unwrap_err();
    assert!(err.to_string().contains("test/v1 Nope"), "{err}");
}

fn item(name: &str, rv: &str, s_value: &str) -> Vec<u8> {
    msg(
        2,
        &[msg(30, &[s(1, name), s(3, "ns"), s(6, rv)]), s(1, s_value)],
    )
}

fn list_body(items: &[Vec<u8>]) -> Vec<u8> {
    let list = [msg(1, &[s(2, "42"), s(3, "next"), v(4, 7)]), items.concat()].concat();
    body("test/v1", "TestList", &list)
}

fn decode_list_chunks<K: DeserializeOwned + 'static>(
    chunks: &[&[u8]],
) -> Result<crate::reflector::decode::ListPage<K>, DecodeError> {
    let mut decoder = ProtobufListDecoder::<K, K>::with_schema(&SCHEMA);
    for chunk in chunks {
        decoder.push(chunk, &mut |k| k)?;
    }
    decoder.finish(&mut |k| k)
}

#[test]
fn lists_decode_incrementally_at_every_split() {
    let body = list_body(&[item("a", "1", "x"), item("b", "2", "y"), msg(2, &[])]);
    let whole = decode_list_chunks::<Value>(&[&body]).unwrap();
    assert_eq!(whole.metadata.resource_version.as_deref(), Some("42"));
    assert_eq!(whole.metadata.continue_.as_deref(), Some("next"));
    assert_eq!(whole.metadata.remaining_item_count, Some(7));
    assert_eq!(
        whole.items,
        [
            json!({"metadata": {"name": "a", "namespace": "ns", "resourceVersion": "1"}, "s": "x"}),
            json!({"metadata": {"name": "b", "namespace": "ns", "resourceVersion": "2"}, "s": "y"}),
            json!({}),
        ]
    );
    for cut in 0..=body.len() {
        let (a, b) = body.split_at(cut);
        let page = decode_list_chunks::<Value>(&[a, b]).unwrap();
        assert_eq!(page.items, whole.items, "{cut}");
        assert_eq!(page.metadata, whole.metadata, "{cut}");
    }
    let bytes: Vec<&[u8]> = body.chunks(1).collect();
    assert_eq!(
        decode_list_chunks::<Value>(&bytes).unwrap().items,
        whole.items
    );
    // Truncated before the end of `raw` (or inside a field after it): an error at `finish`,
    // never a panic nor a short list.
    for cut in 0..body.len() {
        let result = decode_list_chunks::<Value>(&[&body[..cut]]);
        assert_eq!(
            result.is_ok(),
            [body.len() - 4, body.len() - 2].contains(&cut),
            "{cut}"
        );
    }
}

#[test]
fn a_list_holds_only_the_item_being_received() {
    let items: Vec<_> = (0..50)
        .map(|i| item(&format!("n{i}"), "1", &"x".repeat(100)))
        .collect();
    let body = list_body(&items);
    let mut decoder = ProtobufListDecoder::<Value, String>::with_schema(&SCHEMA);
    let mut most = 0;
    let mut names = |v: Value| {
        v["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    for chunk in body.chunks(7) {
        decoder.push(chunk, &mut names).unwrap();
        most = most.max(decoder.buffered());
    }
    let page = decoder.finish(&mut names).unwrap();
    assert_eq!(page.items.len(), 50);
    assert_eq!(page.items[49], "n49");
    assert!(most < 2 * items[0].len(), "{most}");
}

#[test]
fn undecodable_items_are_skipped() {
    #[derive(Debug, Deserialize)]
    struct Strict {
        #[allow(dead_code)]
        s: u32,
    }
    let body = list_body(&[item("a", "1", "x")]);
    let page = decode_list_chunks::<Strict>(&[&body]).unwrap();
    assert!(page.items.is_empty());
    let [u] = &page.undecodable[..] else { panic!() };
    assert_eq!(u.key.as_ref().map(|k| k.as_str()), Some("ns/a"));
    assert_eq!(u.resource_version.as_deref(), Some("1"));
    assert!(u.error.body_offset().is_some());
    // So are an item with a string that is not UTF-8 and one nested past the limit, between
    // good ones: the list goes on.
    let deep = [
        msg(30, &[s(1, "deep"), s(3, "ns"), s(6, "3")]),
        nested(MAX_DEPTH as usize + 1),
    ];
    let body = list_body(&[
        item("a", "1", "x"),
        msg(
            2,
            &[
                msg(30, &[s(1, "b"), s(3, "ns"), s(6, "2")]),
                l(1, b"\xff\xfe"),
            ],
        ),
        msg(2, &deep),
        item("c", "4", "y"),
    ]);
    let page = decode_list_chunks::<Value>(&[&body]).unwrap();
    let names: Vec<_> = page
        .items
        .iter()
        .map(|v| v["metadata"]["name"].clone())
        .collect();
    assert_eq!(names, [json!("a"), json!("c")]);
    let skipped: Vec<_> = page
        .undecodable
        .iter()
        .map(|u| {
            (
                u.key.as_ref().map(|k| k.as_str().to_owned()),
                u.error.protobuf_kind(),
            )
        })
        .collect();
    assert_eq!(
        skipped,
        [
            (Some("ns/b".to_owned()), Some(ErrorKind::InvalidUtf8)),
            (Some("ns/deep".to_owned()), Some(ErrorKind::TooDeep)),
        ]
    );
    // A wire error in an item fails the list.
    let body = list_body(&[msg(2, &[v(1, 1)])]);
    let err = decode_list_chunks::<Value>(&[&body]).unwrap_err();
    assert_eq!(err.protobuf_kind(), Some(ErrorKind::WrongWireType));
}

#[test]
fn list_errors() {
    let cases: &[(&str, Vec<u8>, ErrorKind)] = &[
        (
            "not a list kind",
            body("test/v1", "Test", &[]),
            ErrorKind::UnknownKind,
        ),
        (
            "unknown kind",
            body("test/v1", "Nope", &[]),
            ErrorKind::UnknownKind,
        ),
        ("no magic", b"{}".to_vec(), ErrorKind::BadMagic),
        ("empty", Vec::new(), ErrorKind::Truncated),
        (
            "content encoding",
            [list_body(&[]), s(3, "gzip")].concat(),
            ErrorKind::BadEnvelope,
        ),
        (
            "raw before typeMeta",
            [b"k8s\0".to_vec(), l(2, &[])].concat(),
            ErrorKind::BadEnvelope,
        ),
        (
            "item past raw",
            {
                let mut b = [
                    b"k8s\0".to_vec(),
                    msg(1, &[s(1, "test/v1"), s(2, "TestList")]),
                ]
                .concat();
                b.extend(tag(2, 2));
                b.push(3);
                b.extend(l(2, &[1, 2, 3]));
                b
            },
            ErrorKind::LengthPastInput,
        ),
    ];
    for (what, bytes, want) in cases {
        let err = decode_list_chunks::<Value>(&[bytes]).expect_err(what);
        assert_eq!(err.protobuf_kind(), Some(*want), "{what}: {err}");
    }
}

/// A watch frame: `WatchEvent{type, object: RawExtension{raw: body}}`, without its prefix.
fn frame(ty: &str, object: &[u8]) -> Vec<u8> {
    [s(1, ty), msg(2, &[l(1, object)])].concat()
}

fn prefixed(frame: &[u8]) -> Vec<u8> {
    [(frame.len() as u32).to_be_bytes().to_vec(), frame.to_vec()].concat()
}

#[test]
fn watch_frames() {
    let none = Projection::none();
    let obj = body(
        "test/v1",
        "Test",
        &[msg(30, &[s(1, "a"), s(6, "5")]), s(1, "x")].concat(),
    );
    let WatchEvent::Added(added) =
        decode_watch_frame_in::<Value>(&SCHEMA, &frame("ADDED", &obj), &none).unwrap()
    else {
        panic!()
    };
    assert_eq!(added["s"], "x");
    assert_eq!(added["kind"], "Test");
    let p = Projection::from_paths(["s"]).unwrap();
    let WatchEvent::Deleted(deleted) =
        decode_watch_frame_in::<Value>(&SCHEMA, &frame("DELETED", &obj), &p).unwrap()
    else {
        panic!()
    };
    assert_eq!(deleted.get("s"), None);
    let bookmark = body(
        "test/v1",
        "Test",
        &msg(
            30,
            &[
                s(6, "77"),
                msg(12, &[s(1, "k8s.io/initial-events-end"), s(2, "true")]),
            ],
        ),
    );
    let ev = decode_watch_frame_in::<Value>(&SCHEMA, &frame("BOOKMARK", &bookmark), &none).unwrap();
    assert!(matches!(
        ev,
        WatchEvent::Bookmark { ref resource_version, initial_events_end: true } if resource_version == "77"
    ));
    let status = body(
        "v1",
        "Status",
        &[s(2, "Failure"), s(3, "too old"), s(4, "Expired"), v(6, 410)].concat(),
    );
    let WatchEvent::Error(st) =
        decode_watch_frame_in::<Value>(&SCHEMA, &frame("ERROR", &status), &none).unwrap()
    else {
        panic!()
    };
    assert_eq!((st.code, st.reason.as_str()), (410, "Expired"));

    let err = decode_watch_frame_in::<Value>(&SCHEMA, &frame("NOPE", &obj), &none).unwrap_err();
    assert_eq!(err.protobuf_kind(), Some(ErrorKind::Data));
    // The event type is quoted between backticks, unescaped: one in it must not end the quote.
    let err = decode_watch_frame_in::<Value>(&SCHEMA, &frame("x`c4n4ry", &obj), &none).unwrap_err();
    for shown in [err.to_string(), format!("{err:?}")] {
        assert!(!shown.contains("c4n4ry"), "{shown}");
    }
    let err = decode_watch_frame_in::<Value>(&SCHEMA, &s(1, "ADDED"), &none).unwrap_err();
    assert!(err.to_string().contains("missing field `object`"), "{err}");
    // A frame with the magic (not how the server writes one) is not a WatchEvent.
    let err = decode_watch_frame_in::<Value>(&SCHEMA, &obj, &none).unwrap_err();
    assert!(err.protobuf_kind().is_some());
    for cut in 0..frame("ADDED", &obj).len() {
        let _ = decode_watch_frame_in::<Value>(&SCHEMA, &frame("ADDED", &obj)[..cut], &none);
    }
}

#[test]
fn undecodable_watch_objects_are_skippable() {
    #[derive(Debug, Deserialize)]
    struct Strict {
        #[allow(dead_code)]
        s: u32,
    }
    let obj = body(
        "test/v1",
        "Test",
        &[msg(30, &[s(1, "a"), s(3, "ns"), s(6, "5")]), s(1, "x")].concat(),
    );
    let f = frame("MODIFIED", &obj);
    let err = decode_watch_frame_in::<Strict>(&SCHEMA, &f, &Projection::none()).unwrap_err();
    let u = undecodable_frame_in(&SCHEMA, &f, err).unwrap();
    assert_eq!(u.event_type, "MODIFIED");
    assert_eq!(u.resource_version.as_deref(), Some("5"));
    // Nor are a string that is not UTF-8 and messages nested past the limit.
    let meta = msg(30, &[s(1, "a"), s(3, "ns"), s(6, "6")]);
    for (value, want) in [
        (l(1, b"\xff"), ErrorKind::InvalidUtf8),
        (nested(MAX_DEPTH as usize + 1), ErrorKind::TooDeep),
    ] {
        let f = frame(
            "ADDED",
            &body("test/v1", "Test", &[meta.clone(), value].concat()),
        );
        let err = decode_watch_frame_in::<Value>(&SCHEMA, &f, &Projection::none()).unwrap_err();
        assert_eq!(err.protobuf_kind(), Some(want));
        let u = undecodable_frame_in(&SCHEMA, &f, err).unwrap();
        assert_eq!(u.resource_version.as_deref(), Some("6"), "{want:?}");
    }
    // A wire error is not skippable.
    let f = frame("MODIFIED", &body("test/v1", "Test", &v(1, 1)));
    let err = decode_watch_frame_in::<Strict>(&SCHEMA, &f, &Projection::none()).unwrap_err();
    assert!(undecodable_frame_in(&SCHEMA, &f, err).is_err());
}

#[test]
fn length_prefix_framer() {
    let frames = [b"one".to_vec(), Vec::new(), vec![7; 300]];
    let stream: Vec<u8> = frames.iter().flat_map(|f| prefixed(f)).collect();
    for cut in 0..=stream.len() {
        let mut framer = LengthPrefixFramer::new(1000);
        let mut got = framer.push(&stream[..cut]).unwrap();
        got.extend(framer.push(&stream[cut..]).unwrap());
        assert_eq!(got, frames, "{cut}");
        assert!(framer.pending().is_empty());
    }
    let mut framer = LengthPrefixFramer::new(1000);
    for b in &stream {
        framer.push(std::slice::from_ref(b)).unwrap();
    }
    let mut framer = LengthPrefixFramer::new(1000);
    assert!(framer.push(&stream[..10]).unwrap().len() == 1);
    assert_eq!(framer.pending(), &stream[7..10]);
    // Too long: refused as soon as the prefix is in, without waiting for the bytes.
    let mut framer = LengthPrefixFramer::new(100);
    let err = framer.push(&u32::MAX.to_be_bytes()).unwrap_err();
    assert_eq!(err.protobuf_kind(), Some(ErrorKind::FrameTooLarge));
    assert!(framer.push(b"").is_err());
}
