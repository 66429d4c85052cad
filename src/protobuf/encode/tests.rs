//! Encoder unit tests against a small hand-written schema (independent of the generated
//! tables), with expected bytes worked out by hand from the protobuf wire format.

use serde_json::json;

use super::*;
use crate::protobuf::schema::{Message, Root};

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

const S: Card = Card::Single;
const R: Card = Card::Repeated;
const THING: MessageId = MessageId(0);
const META: MessageId = MessageId(1);
const PROPS: MessageId = MessageId(5);

static MESSAGES: [Message; 6] = [
    Message {
        name: "test.Thing",
        fields: &[
            f(1, "metadata", Type::Message(META), S),
            f(2, "str", Type::String, S),
            f(3, "bytes", Type::Bytes, S),
            f(4, "flag", Type::Bool, S),
            f(5, "i32", Type::Int32, S),
            f(6, "i64", Type::Int64, S),
            f(7, "u32", Type::Uint32, S),
            f(8, "dbl", Type::Double, S),
            f(9, "flt", Type::Float, S),
            f(10, "created", Type::Time, S),
            f(11, "renewed", Type::MicroTime, S),
            f(12, "timeout", Type::Duration, S),
            f(13, "qty", Type::Quantity, S),
            f(14, "port", Type::IntOrString, S),
            f(15, "raw", Type::RawJson, S),
            f(16, "tags", Type::String, R),
            f(17, "labels", Type::String, Card::Map(Type::String)),
            f(19, "limits", Type::Quantity, Card::Map(Type::String)),
            f(20, "children", Type::Message(META), R),
            f(21, "u64", Type::Uint64, S),
            f(22, "counts", Type::Int32, Card::Map(Type::Int32)),
            f(23, "verbs", Type::Strings, S),
            Field {
                inline: true,
                ..f(30, "", Type::Message(MessageId(2)), S)
            },
        ],
    },
    Message {
        name: "test.Meta",
        fields: &[
            f(1, "name", Type::String, S),
            f(2, "resourceVersion", Type::String, S),
        ],
    },
    Message {
        name: "test.Source",
        fields: &[
            f(1, "hostPath", Type::String, S),
            f(2, "secretName", Type::String, S),
        ],
    },
    Message {
        name: "test.ThingList",
        fields: &[
            f(1, "metadata", Type::Message(MessageId(4)), S),
            f(2, "items", Type::Message(THING), R),
        ],
    },
    Message {
        name: "test.ListMeta",
        fields: &[
            f(2, "resourceVersion", Type::String, S),
            f(3, "continue", Type::String, S),
        ],
    },
    Message {
        name: "test.Props",
        fields: &[
            f(1, "type", Type::String, S),
            f(2, "items", Type::SchemaPropsOrArray(PROPS), S),
            f(3, "additionalProperties", Type::SchemaPropsOrBool(PROPS), S),
            f(
                4,
                "dependencies",
                Type::SchemaPropsOrStringArray(PROPS),
                Card::Map(Type::String),
            ),
        ],
    },
];

static TEST: Schema = Schema {
    messages: &MESSAGES,
    roots: &[
        Root {
            api_version: "test/v1",
            kind: "Props",
            message: PROPS,
        },
        Root {
            api_version: "test/v1",
            kind: "Thing",
            message: THING,
        },
        Root {
            api_version: "test/v1",
            kind: "ThingList",
            message: MessageId(3),
        },
    ],
};

const ENC: Encoder = Encoder::new(&TEST);

/// `v` as a Thing, without the empty inline message (field 30) it then ends with.
fn thing(v: serde_json::Value) -> Vec<u8> {
    no_inline(raw(v))
}

fn raw(v: serde_json::Value) -> Vec<u8> {
    match ENC.message(THING, &v) {
        Ok(b) => b,
        Err(e) => panic!("encoding {v} failed: {e}"),
    }
}

fn err(v: serde_json::Value) -> EncodeError {
    match ENC.message(THING, &v) {
        Ok(b) => panic!("encoding {v} succeeded: {b:?}"),
        Err(e) => e,
    }
}

#[test]
fn strings_and_nested_messages() {
    assert_eq!(thing(json!({"str": "hi"})), [0x12, 2, b'h', b'i']);
    assert_eq!(thing(json!({"str": ""})), [0x12, 0]);
    assert_eq!(
        thing(json!({"metadata": {"name": "a", "resourceVersion": "7"}})),
        [0x0a, 6, 0x0a, 1, b'a', 0x12, 1, b'7']
    );
    // An empty nested object is still written (as Go writes a non-pointer struct).
    assert_eq!(thing(json!({"metadata": {}})), [0x0a, 0]);
}

#[test]
fn unknown_keys_nulls_and_type_meta_are_left_out() {
    assert_eq!(
        thing(json!({"apiVersion": "test/v1", "kind": "Thing", "extra": [1, 2], "str": null})),
        Vec::<u8>::new()
    );
}

#[test]
fn fields_go_out_in_number_order() {
    // serde_json's map order is alphabetical: `str` < `tags` < `u32` but also `flag` < `i32`
    // while the numbers say str(2) < flag(4) < i32(5).
    assert_eq!(
        thing(json!({"i32": 1, "str": "x", "flag": true})),
        [0x12, 1, b'x', 0x20, 1, 0x28, 1]
    );
}

#[test]
fn integers() {
    assert_eq!(thing(json!({"i32": 300})), [0x28, 0xac, 0x02]);
    // Negative int32s are sign-extended to ten bytes.
    assert_eq!(
        thing(json!({"i32": -1})),
        [
            0x28, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01
        ]
    );
    assert_eq!(
        thing(json!({"i64": -2})),
        [
            0x30, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01
        ]
    );
    assert_eq!(
        thing(json!({"i64": i64::MAX})),
        [0x30, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]
    );
    assert_eq!(thing(json!({"u32": 0})), [0x38, 0]);
    assert_eq!(thing(json!({"u64": u64::MAX}))[0], 0xa8);
    assert_eq!(thing(json!({"flag": false})), [0x20, 0]);
}

#[test]
fn integer_range_and_type_errors() {
    assert!(matches!(
        err(json!({"i32": 2_147_483_648_i64})),
        EncodeError::Invalid { ref path, .. } if path == ".i32"
    ));
    assert!(matches!(
        err(json!({"i32": 1.5})),
        EncodeError::Invalid { .. }
    ));
    assert!(matches!(
        err(json!({"u32": -1})),
        EncodeError::Invalid { .. }
    ));
    assert_eq!(
        err(json!({"i32": "1"})),
        EncodeError::WrongType {
            path: ".i32".into(),
            expected: "an int32",
            found: "a string"
        }
    );
    assert!(matches!(
        err(json!({"flag": 1})),
        EncodeError::WrongType { .. }
    ));
    assert!(matches!(
        err(json!({"str": 1})),
        EncodeError::WrongType { .. }
    ));
    assert!(matches!(
        err(json!({"metadata": "x"})),
        EncodeError::WrongType { .. }
    ));
    assert!(matches!(
        err(json!("not an object")),
        EncodeError::WrongType { .. }
    ));
}

#[test]
fn floating_point() {
    let mut want = vec![0x41];
    want.extend_from_slice(&1.5f64.to_le_bytes());
    assert_eq!(thing(json!({"dbl": 1.5})), want);
    let mut want = vec![0x4d];
    want.extend_from_slice(&0.25f32.to_le_bytes());
    assert_eq!(thing(json!({"flt": 0.25})), want);
}

#[test]
fn bytes_are_base64_decoded() {
    // "AP8=" is [0x00, 0xff]; binary data must come through untouched.
    assert_eq!(thing(json!({"bytes": "AP8="})), [0x1a, 2, 0x00, 0xff]);
    assert_eq!(thing(json!({"bytes": "aGVsbG8="})), b"\x1a\x05hello");
    assert_eq!(thing(json!({"bytes": "aGk="})), b"\x1a\x02hi");
    assert_eq!(thing(json!({"bytes": "YWJj"})), b"\x1a\x03abc");
    assert_eq!(thing(json!({"bytes": ""})), [0x1a, 0]);
    // As Go's `base64.StdEncoding` (not `Strict`): trailing bits that are not zero are
    // dropped, and `\r` / `\n` anywhere are skipped.
    assert_eq!(thing(json!({"bytes": "aGl="})), b"\x1a\x02hi");
    assert_eq!(thing(json!({"bytes": "aGVs\r\nbG8="})), b"\x1a\x05hello");
    assert_eq!(thing(json!({"bytes": "aG\nk=\n"})), b"\x1a\x02hi");
    assert_eq!(thing(json!({"bytes": "\n"})), [0x1a, 0]);
    // Padding is required, as `StdEncoding` does.
    for bad in [
        "a", "a===", "ab!c", "aGk=aGk=", "aGVsbG8", "aGk", "=", "====", "aGk =", "aG==aGk=",
    ] {
        assert!(
            matches!(
                err(json!({"bytes": bad})),
                EncodeError::Invalid { what: "base64", .. }
            ),
            "{bad}"
        );
    }
    // The error never quotes the value.
    let e = err(json!({"bytes": "s3cr3t!!"}));
    assert!(!e.to_string().contains("s3cr3t"), "{e}");
}

#[test]
fn time_is_whole_seconds_with_zero_nanos() {
    // 2024-01-02T03:04:05Z is 1704164645 seconds after the epoch.
    assert_eq!(
        thing(json!({"created": "2024-01-02T03:04:05Z"})),
        timestamp(10, 1_704_164_645, 0)
    );
    // Time drops the fraction; offsets are applied.
    assert_eq!(
        thing(json!({"created": "2024-01-02T04:04:05.9+01:00"})),
        timestamp(10, 1_704_164_645, 0)
    );
    assert_eq!(
        thing(json!({"created": "1970-01-01T00:00:00Z"})),
        [0x52, 4, 0x08, 0, 0x10, 0]
    );
    // Before the epoch: negative seconds, sign-extended.
    assert_eq!(
        thing(json!({"created": "1969-12-31T23:59:59Z"})).len(),
        2 + 11 + 2
    );
    for bad in [
        "2024-01-02 03:04:05Z",
        "2024-13-02T03:04:05Z",
        "2023-02-29T03:04:05Z",
        "2024-01-02T03:04:05",
        "2024-01-02T03:04:05.Z",
        "2024-01-02T24:00:00Z",
        "yesterday",
    ] {
        assert!(
            matches!(err(json!({"created": bad})), EncodeError::Invalid { .. }),
            "{bad}"
        );
    }
    assert_eq!(
        thing(json!({"created": "2024-02-29T00:00:00Z"})),
        timestamp(10, 1_709_164_800, 0)
    );
}

/// A `Timestamp{seconds, nanos}` as field `number`, both fields written.
fn timestamp(number: u32, seconds: i64, nanos: i64) -> Vec<u8> {
    let mut ts = Vec::new();
    put_int(&mut ts, 1, seconds);
    put_int(&mut ts, 2, nanos);
    let mut out = Vec::new();
    put_bytes(&mut out, number, &ts);
    out
}

#[test]
fn micro_time_keeps_microseconds() {
    assert_eq!(
        thing(json!({"renewed": "2024-01-02T03:04:05.123456Z"})),
        timestamp(11, 1_704_164_645, 123_456_000)
    );
    // Nanoseconds are truncated to microseconds, as `ProtoMicroTime` does.
    assert_eq!(
        thing(json!({"renewed": "2024-01-02T03:04:05.123456789Z"})),
        timestamp(11, 1_704_164_645, 123_456_000)
    );
}

#[test]
fn durations_are_nanoseconds() {
    let dur = |n: i64| {
        let mut d = Vec::new();
        put_int(&mut d, 1, n);
        let mut out = Vec::new();
        put_bytes(&mut out, 12, &d);
        out
    };
    assert_eq!(thing(json!({"timeout": "1h2m3s"})), dur(3_723_000_000_000));
    assert_eq!(thing(json!({"timeout": "1.5s"})), dur(1_500_000_000));
    assert_eq!(thing(json!({"timeout": "-300ms"})), dur(-300_000_000));
    assert_eq!(thing(json!({"timeout": "0"})), dur(0));
    assert_eq!(thing(json!({"timeout": "0s"})), dur(0));
    assert_eq!(thing(json!({"timeout": "2µs3ns"})), dur(2003));
    assert_eq!(thing(json!({"timeout": ".5m"})), dur(30_000_000_000));
    for bad in ["", "5", "1d", "1h-2m", ".s", "-", "99999999999999999999h"] {
        assert!(
            matches!(err(json!({"timeout": bad})), EncodeError::Invalid { .. }),
            "{bad}"
        );
    }
}

#[test]
fn quantity_and_int_or_string() {
    assert_eq!(
        thing(json!({"qty": "100m"})),
        [0x6a, 6, 0x0a, 4, b'1', b'0', b'0', b'm']
    );
    assert_eq!(thing(json!({"qty": 2})), [0x6a, 3, 0x0a, 1, b'2']);
    // intstr: type, intVal and strVal are all written, as Go does.
    assert_eq!(
        thing(json!({"port": 8080})),
        [0x72, 7, 0x08, 0, 0x10, 0x90, 0x3f, 0x1a, 0]
    );
    assert_eq!(
        thing(json!({"port": "http"})),
        [0x72, 10, 0x08, 1, 0x10, 0, 0x1a, 4, b'h', b't', b't', b'p']
    );
    assert!(matches!(
        err(json!({"port": true})),
        EncodeError::WrongType { .. }
    ));
    assert!(matches!(
        err(json!({"port": 1_i64 << 40})),
        EncodeError::Invalid { .. }
    ));
}

#[test]
fn raw_json_holds_the_serialized_value() {
    let raw = br#"{"a":[1,"x"]}"#;
    let mut want = vec![0x7a, (raw.len() + 2) as u8, 0x0a, raw.len() as u8];
    want.extend_from_slice(raw);
    assert_eq!(thing(json!({"raw": {"a": [1, "x"]}})), want);
    assert_eq!(thing(json!({"raw": 5})), [0x7a, 3, 0x0a, 1, b'5']);
}

#[test]
fn repeated_fields_are_unpacked_occurrences() {
    // Field 16 needs a two-byte tag: (16 << 3 | 2) = 130 = 0x82 0x01.
    assert_eq!(
        thing(json!({"tags": ["a", "", "b"]})),
        [0x82, 0x01, 1, b'a', 0x82, 0x01, 0, 0x82, 0x01, 1, b'b']
    );
    assert_eq!(thing(json!({"tags": []})), Vec::<u8>::new());
    assert_eq!(
        thing(json!({"children": [{"name": "x"}, {}]})),
        [0xa2, 0x01, 3, 0x0a, 1, b'x', 0xa2, 0x01, 0]
    );
    assert_eq!(
        err(json!({"tags": ["a", 1]})),
        EncodeError::WrongType {
            path: ".tags[1]".into(),
            expected: "a string",
            found: "a number"
        }
    );
    assert!(matches!(
        err(json!({"tags": "a"})),
        EncodeError::WrongType { .. }
    ));
}

#[test]
fn string_lists_with_their_own_message() {
    // `{repeated string items = 1}` around the array.
    assert_eq!(
        thing(json!({"verbs": ["get", ""]})),
        [0xba, 0x01, 7, 0x0a, 3, b'g', b'e', b't', 0x0a, 0]
    );
    assert_eq!(thing(json!({"verbs": []})), [0xba, 0x01, 0]);
    assert_eq!(
        err(json!({"verbs": ["a", 1]})),
        EncodeError::WrongType {
            path: ".verbs[1]".into(),
            expected: "a string",
            found: "a number"
        }
    );
    assert!(matches!(
        err(json!({"verbs": "get"})),
        EncodeError::WrongType { .. }
    ));
}

#[test]
fn maps_are_sorted_key_value_entries() {
    // Entries sorted by key in byte order ("B" < "a"), each {1: key, 2: value}.
    assert_eq!(
        thing(json!({"labels": {"a": "1", "B": "2"}})),
        [
            0x8a, 0x01, 6, 0x0a, 1, b'B', 0x12, 1, b'2', //
            0x8a, 0x01, 6, 0x0a, 1, b'a', 0x12, 1, b'1',
        ]
    );
    // Message values (a Quantity) nest as field 2.
    assert_eq!(
        thing(json!({"limits": {"cpu": "1"}})),
        [
            0x9a, 0x01, 10, 0x0a, 3, b'c', b'p', b'u', 0x12, 3, 0x0a, 1, b'1'
        ]
    );
    // Integer keys are parsed from the JSON key.
    assert_eq!(
        thing(json!({"counts": {"-1": 2}})),
        [
            0xb2, 0x01, 13, 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x10,
            2
        ]
    );
    assert!(matches!(
        err(json!({"labels": {"k": 1}})),
        EncodeError::WrongType { ref path, .. } if path == ".labels.k"
    ));
    assert!(matches!(
        err(json!({"counts": {"x": 1}})),
        EncodeError::Invalid { .. }
    ));
}

#[test]
fn inline_fields_gather_the_parents_keys() {
    assert_eq!(
        raw(json!({"hostPath": "/x", "secretName": "s"})),
        [0xf2, 0x01, 7, 0x0a, 2, b'/', b'x', 0x12, 1, b's']
    );
    // Always written, even empty (the Go struct is embedded by value), after lower numbers.
    assert_eq!(raw(json!({"str": "x"})), [0x12, 1, b'x', 0xf2, 0x01, 0]);
    assert_eq!(
        err(json!({"hostPath": 1})),
        EncodeError::WrongType {
            path: ".hostPath".into(),
            expected: "a string",
            found: "a number"
        }
    );
}

/// Strips the empty inline message (field 30) a Thing ends with.
fn no_inline(mut b: Vec<u8>) -> Vec<u8> {
    let tail = b.split_off(b.len().saturating_sub(3));
    assert_eq!(tail, [0xf2, 0x01, 0]);
    b
}

#[test]
fn json_schema_props_or() {
    let props = |v: serde_json::Value| match ENC.message(PROPS, &v) {
        Ok(b) => b,
        Err(e) => panic!("{e}"),
    };
    // OrArray: an object is field 1, an array field 2 per element.
    assert_eq!(
        props(json!({"items": {"type": "x"}})),
        [0x12, 5, 0x0a, 3, 0x0a, 1, b'x']
    );
    assert_eq!(
        props(json!({"items": [{"type": "x"}, {}]})),
        [0x12, 7, 0x12, 3, 0x0a, 1, b'x', 0x12, 0]
    );
    // OrBool: `allows` always written; an object also sets it to true.
    assert_eq!(
        props(json!({"additionalProperties": false})),
        [0x1a, 2, 0x08, 0]
    );
    assert_eq!(
        props(json!({"additionalProperties": {}})),
        [0x1a, 4, 0x08, 1, 0x12, 0]
    );
    // OrStringArray: an object is field 1, strings field 2.
    assert_eq!(
        props(json!({"dependencies": {"a": ["b", "c"]}})),
        [
            0x22, 11, 0x0a, 1, b'a', 0x12, 6, 0x12, 1, b'b', 0x12, 1, b'c'
        ]
    );
    assert_eq!(
        props(json!({"dependencies": {"a": {}}})),
        [0x22, 7, 0x0a, 1, b'a', 0x12, 2, 0x0a, 0]
    );
    assert!(ENC.message(PROPS, &json!({"items": "x"})).is_err());
    assert!(
        ENC.message(PROPS, &json!({"additionalProperties": 1}))
            .is_err()
    );
    assert!(
        ENC.message(PROPS, &json!({"dependencies": {"a": [1]}}))
            .is_err()
    );
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let mut v = json!({});
    for _ in 0..200 {
        v = json!({ "items": v });
    }
    assert!(matches!(
        ENC.message(PROPS, &v),
        Err(EncodeError::TooDeep { .. })
    ));
}

/// `k8s\0` + Unknown{1: TypeMeta{1: apiVersion, 2: kind}, 2: raw, 3: "", 4: ""}.
fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let mut tm = Vec::new();
    put_bytes(&mut tm, 1, api_version.as_bytes());
    put_bytes(&mut tm, 2, kind.as_bytes());
    let mut out = b"k8s\0".to_vec();
    put_bytes(&mut out, 1, &tm);
    put_bytes(&mut out, 2, raw);
    out.extend_from_slice(&[0x1a, 0, 0x22, 0]);
    out
}

#[test]
fn object_envelope() {
    let obj = json!({"apiVersion": "test/v1", "kind": "Thing", "str": "x"});
    let got = ENC.object("test/v1", "Thing", &obj);
    assert_eq!(got, Ok(envelope("test/v1", "Thing", &raw(obj))));
    let bytes = ENC
        .object("test/v1", "Thing", &json!({}))
        .unwrap_or_default();
    assert_eq!(
        bytes,
        [
            b'k', b'8', b's', 0, 0x0a, 16, 0x0a, 7, b't', b'e', b's', b't', b'/', b'v', b'1', 0x12,
            5, b'T', b'h', b'i', b'n', b'g', 0x12, 3, 0xf2, 0x01, 0, 0x1a, 0, 0x22, 0
        ]
    );
    assert_eq!(
        ENC.object("test/v1", "Nope", &json!({})),
        Err(EncodeError::UnknownKind {
            api_version: "test/v1".into(),
            kind: "Nope".into()
        })
    );
    assert!(ENC.has_kind("test/v1", "Thing"));
    assert!(!ENC.has_kind("v1", "Thing"));
}

#[test]
fn list_envelope() {
    let a = json!({"apiVersion": "test/v1", "kind": "Thing", "metadata": {"name": "a"}});
    let b = json!({"metadata": {"name": "b"}});
    let meta = json!({"resourceVersion": "5", "continue": "c"});
    let got = ENC.list("test/v1", "ThingList", &meta, &[&a, &b]);
    let mut raw = vec![0x0a, 6, 0x12, 1, b'5', 0x1a, 1, b'c'];
    for item in [a.clone(), b.clone()] {
        put_bytes(&mut raw, 2, &self::raw(item));
    }
    assert_eq!(got, Ok(envelope("test/v1", "ThingList", &raw)));
    // No items: just the metadata.
    assert_eq!(
        ENC.list("test/v1", "ThingList", &json!({}), &[]),
        Ok(envelope("test/v1", "ThingList", &[0x0a, 0]))
    );
    assert!(matches!(
        ENC.list("test/v1", "Thing", &meta, &[]),
        Err(EncodeError::NotAList { .. })
    ));
    assert_eq!(
        ENC.list("test/v1", "ThingList", &meta, &[&a, &json!({"str": 1})]),
        Err(EncodeError::WrongType {
            path: ".items[1].str".into(),
            expected: "a string",
            found: "a number"
        })
    );
}

#[test]
fn watch_frame() {
    let obj = json!({"metadata": {"name": "a"}});
    let frame = ENC
        .watch_event("ADDED", "test/v1", "Thing", &obj)
        .unwrap_or_default();
    let inner = envelope("test/v1", "Thing", &raw(obj));
    // WatchEvent{1: type, 2: RawExtension{1: inner}}, no magic or Unknown around it.
    let mut ext = Vec::new();
    put_bytes(&mut ext, 1, &inner);
    let mut event = Vec::new();
    put_bytes(&mut event, 1, b"ADDED");
    put_bytes(&mut event, 2, &ext);
    assert_eq!(
        frame.get(..4),
        Some(&u32::try_from(event.len()).unwrap_or(0).to_be_bytes()[..])
    );
    assert_eq!(frame.get(4..), Some(&event[..]));
    assert_eq!(frame.get(4..7), Some(&[0x0a, 5, b'A'][..]));
}

#[test]
fn long_nested_messages_get_multi_byte_lengths() {
    let name = "a".repeat(200);
    let mut want = vec![0x0a, 0xcb, 0x01, 0x0a, 0xc8, 0x01];
    want.extend_from_slice(name.as_bytes());
    assert_eq!(thing(json!({"metadata": {"name": name}})), want);
    // Two levels of widening, and what follows lands after them.
    let children: Vec<_> = (0..3).map(|_| json!({"name": "b".repeat(130)})).collect();
    let got = thing(json!({"children": children, "u64": 1}));
    let mut want = Vec::new();
    for _ in 0..3 {
        want.extend_from_slice(&[0xa2, 0x01, 0x85, 0x01, 0x0a, 0x82, 0x01]);
        want.extend_from_slice("b".repeat(130).as_bytes());
    }
    want.extend_from_slice(&[0xa8, 0x01, 1]);
    assert_eq!(got, want);
}

#[test]
fn nulls_in_lists_and_maps_are_zero_values_as_go_decodes_them() {
    // `{"k": null}` in a `map[string]string` is the entry `k: ""` in Go, written in full.
    assert_eq!(
        thing(json!({"labels": {"k": null}})),
        [0x8a, 0x01, 5, 0x0a, 1, b'k', 0x12, 0]
    );
    // `[null]` in a `[]string` is `[""]`.
    assert_eq!(
        thing(json!({"tags": [null, "a"]})),
        [0x82, 0x01, 0, 0x82, 0x01, 1, b'a']
    );
    // A null message in a list is the zero struct; a null quantity in a map is "0".
    assert_eq!(thing(json!({"children": [null]})), [0xa2, 0x01, 0]);
    assert_eq!(
        thing(json!({"limits": {"cpu": null}})),
        [
            0x9a, 0x01, 10, 0x0a, 3, b'c', b'p', b'u', 0x12, 3, 0x0a, 1, b'0'
        ]
    );
    assert_eq!(
        thing(json!({"counts": {"1": null}})),
        [0xb2, 0x01, 4, 0x08, 1, 0x10, 0]
    );
    assert_eq!(thing(json!({"verbs": [null]})), [0xba, 0x01, 2, 0x0a, 0]);
}

#[test]
fn null_bytes_are_empty() {
    static BYTES: [Message; 1] = [Message {
        name: "test.Blobs",
        fields: &[
            f(1, "data", Type::Bytes, Card::Map(Type::String)),
            f(2, "list", Type::Bytes, R),
        ],
    }];
    static SCHEMA: Schema = Schema {
        messages: &BYTES,
        roots: &[],
    };
    let enc = Encoder::new(&SCHEMA);
    // A nil `[]byte` map value: gogo writes the key alone (`if v != nil`).
    assert_eq!(
        enc.message(MessageId(0), &json!({"data": {"k": null}})),
        Ok(vec![0x0a, 3, 0x0a, 1, b'k'])
    );
    assert_eq!(
        enc.message(MessageId(0), &json!({"list": [null]})),
        Ok(vec![0x12, 0])
    );
}

#[test]
fn the_zero_time_is_an_empty_message() {
    // Go's `Time.Marshal` / `MicroTime.Marshal` write nothing for `IsZero`.
    assert_eq!(thing(json!({"created": "0001-01-01T00:00:00Z"})), [0x52, 0]);
    assert_eq!(
        thing(json!({"renewed": "0001-01-01T00:00:00.000000Z"})),
        [0x5a, 0]
    );
    // The same instant in another zone is zero too; a moment later is not.
    assert_eq!(
        thing(json!({"created": "0001-01-01T01:00:00+01:00"})),
        [0x52, 0]
    );
    assert_eq!(
        thing(json!({"created": "0001-01-01T00:00:01Z"})),
        timestamp(10, -62_135_596_799, 0)
    );
}
