//! Unit tests of the projection: path syntax, and the adapter against a reference model that
//! decodes fully and then drops.

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::DynamicObject;
use serde::Deserialize;
use serde_json::{Value, json};

use super::*;
use crate::reflector::decode::{ListDecoder, WatchEvent, decode_watch_event_projected};

/// A path step of the reference model, written out by hand so the model does not share the
/// parser it checks.
#[derive(Clone, Copy)]
enum Step {
    K(&'static str),
    All,
}
use Step::{All, K};

/// The reference: drop `path` from a decoded `Value` tree.
fn drop_in(v: &mut Value, path: &[Step]) {
    match (path, v) {
        ([K(k)], Value::Object(m)) => {
            m.remove(*k);
        }
        ([K(k), rest @ ..], Value::Object(m)) => {
            if let Some(v) = m.get_mut(*k) {
                drop_in(v, rest);
            }
        }
        ([All, rest @ ..], Value::Array(a)) => a.iter_mut().for_each(|v| drop_in(v, rest)),
        _ => {}
    }
}

/// Decodes `json` as `T` through the projection of `paths`, and fully then dropped through the
/// model; both must agree.
fn check<T>(json: &Value, paths: &[(&str, &[Step])]) -> T
where
    T: serde::de::DeserializeOwned + serde::Serialize + PartialEq + fmt::Debug,
{
    let p = Projection::from_paths(paths.iter().map(|(s, _)| s)).unwrap();
    let bytes = serde_json::to_vec(json).unwrap();
    let projected: T = p.from_slice(&bytes).unwrap();
    let mut model = json.clone();
    for (_, steps) in paths {
        drop_in(&mut model, steps);
    }
    let expected: T = serde_json::from_value(model).unwrap();
    assert_eq!(projected, expected);
    projected
}

fn pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "web-1", "namespace": "prod", "resourceVersion": "12",
            "labels": {"app": "web"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"big\":1}", "team": "a"},
            "managedFields": [
                {"manager": "kubectl", "operation": "Apply", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}}}
            ]
        },
        "spec": {
            "containers": [
                {"name": "app", "image": "web:1", "env": [{"name": "A", "value": "1"}],
                 "ports": [{"containerPort": 80}]},
                {"name": "sidecar", "image": "envoy", "env": [{"name": "B", "value": "2"}]}
            ],
            "volumes": [{"name": "v", "configMap": {"name": "cm"}}]
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "app", "ready": true, "restartCount": 0, "image": "web:1", "imageID": ""}]
        }
    })
}

#[test]
fn paths_parse_to_fields_elements_and_quoted_keys() {
    let s = |k: &str| Segment::Key(k.to_owned());
    assert_eq!(
        parse("metadata.managedFields").unwrap(),
        [s("metadata"), s("managedFields")]
    );
    assert_eq!(
        parse("spec.containers[*].env").unwrap(),
        [s("spec"), s("containers"), Segment::Elements, s("env")]
    );
    assert_eq!(parse("a[][].b").unwrap(), parse("a[*][*].b").unwrap());
    assert_eq!(
        parse(r#"metadata.annotations["a.b/c[d]"]"#).unwrap(),
        [s("metadata"), s("annotations"), s("a.b/c[d]")]
    );
    assert_eq!(
        parse(r#"a["q\"b\\"].c"#).unwrap(),
        [s("a"), s(r#"q"b\"#), s("c")]
    );
    assert_eq!(
        parse(r#"["metadata"]["x"]"#).unwrap(),
        [s("metadata"), s("x")]
    );
    assert_eq!(parse(r#"a[""]"#).unwrap(), [s("a"), s("")]);
}

#[test]
fn invalid_paths_are_typed_errors_with_the_position() {
    for (path, at) in [
        ("", 0),
        ("a..b", 2),
        (".a", 0),
        ("a.", 2),
        ("a[", 2),
        ("a[x]", 2),
        ("a[*", 2),
        (r#"a["b"#, 4),
        (r#"a["b"x"#, 5),
        (r#"a["\n"]"#, 4),
        ("a]b", 1),
        ("a\"b", 1),
        ("[*].a", 0),
        ("a[*]", 4),
    ] {
        match Projection::none().drop_path(path) {
            Err(ProjectionError::Syntax {
                path: p,
                at: got,
                reason,
            }) => {
                assert_eq!((p.as_str(), got), (path, at), "{path:?}: {reason}");
            }
            other => panic!("{path:?}: {other:?}"),
        }
    }
}

#[test]
fn the_fields_the_informer_keys_objects_by_cannot_be_dropped() {
    for (path, field) in [
        ("metadata", "metadata"),
        ("metadata.name", "metadata.name"),
        (r#"metadata["namespace"]"#, "metadata.namespace"),
        ("metadata.resourceVersion", "metadata.resourceVersion"),
        // A sharded informer checks each object's shard by its uid.
        ("metadata.uid", "metadata.uid"),
    ] {
        let err = Projection::strip_managed_fields()
            .drop_path(path)
            .unwrap_err();
        assert_eq!(
            err,
            ProjectionError::Protected {
                path: path.to_owned(),
                field
            }
        );
        assert!(err.to_string().contains(field), "{err}");
    }
    // Below them, or beside them, is fine.
    Projection::from_paths(["metadata.labels", "metadata.name.x", "spec.metadata"]).unwrap();
}

#[test]
fn projections_compare_by_their_sorted_distinct_paths() {
    let a = Projection::from_paths(["b.c", "a", "b.c"]).unwrap();
    let b = Projection::from_paths(["a", "b.c"]).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.paths().collect::<Vec<_>>(), ["a", "b.c"]);
    assert_eq!(format!("{a:?}"), r#"{"a", "b.c"}"#);
    assert_ne!(a, Projection::none());
    assert!(Projection::none().is_empty() && !a.is_empty());
    assert_eq!(
        Projection::from_paths(Vec::<String>::new()).unwrap(),
        Projection::none()
    );
    // The same paths checked and dropped differ: one refuses what the other takes.
    let checked = Projection::checking("a").unwrap().drop_path("b.c").unwrap();
    assert!(checked.is_checking() && !a.is_checking());
    assert_ne!(checked, a);
    assert_eq!(checked.paths().collect::<Vec<_>>(), ["a", "b.c"]);
    assert_eq!(format!("{checked:?}"), r#"checking {"a", "b.c"}"#);
    assert_eq!(
        checked,
        Projection::checking("b.c").unwrap().drop_path("a").unwrap()
    );
}

#[test]
fn nested_array_and_map_key_paths_drop_exactly_what_the_model_drops() {
    let last_applied: &[Step] = &[
        K("metadata"),
        K("annotations"),
        K("kubectl.kubernetes.io/last-applied-configuration"),
    ];
    let cases: &[&[(&str, &[Step])]] = &[
        &[(
            "metadata.managedFields",
            &[K("metadata"), K("managedFields")],
        )],
        &[(
            r#"metadata.annotations["kubectl.kubernetes.io/last-applied-configuration"]"#,
            last_applied,
        )],
        &[(
            "spec.containers[*].env",
            &[K("spec"), K("containers"), All, K("env")],
        )],
        &[
            ("status.conditions", &[K("status"), K("conditions")]),
            (
                "spec.containers[].ports",
                &[K("spec"), K("containers"), All, K("ports")],
            ),
            (
                "spec.containers[*].env",
                &[K("spec"), K("containers"), All, K("env")],
            ),
            (
                "metadata.labels.app",
                &[K("metadata"), K("labels"), K("app")],
            ),
        ],
        // A path and one below it: the shorter wins.
        &[
            ("status", &[K("status")]),
            ("status.conditions", &[K("status"), K("conditions")]),
        ],
    ];
    for paths in cases {
        let typed: Pod = check(&pod(), paths);
        let dynamic: DynamicObject = check(&pod(), paths);
        check::<Value>(&pod(), paths);
        // Nothing else is lost.
        assert_eq!(typed.metadata.name.as_deref(), Some("web-1"));
        assert_eq!(dynamic.metadata.resource_version.as_deref(), Some("12"));
    }
    let p: Pod = check(
        &pod(),
        &[(
            "spec.containers[*].env",
            &[K("spec"), K("containers"), All, K("env")],
        )],
    );
    let containers = p.spec.unwrap().containers;
    assert!(containers.iter().all(|c| c.env.is_none()));
    assert_eq!(containers[0].ports.as_ref().map(Vec::len), Some(1));
}

#[test]
fn paths_that_meet_absent_null_or_other_shapes_drop_nothing() {
    let doc = json!({"metadata": {"name": "a"}, "spec": null, "status": {"conditions": "x"}, "list": [1, {"a": 1}]});
    let cases: &[(&str, &[Step])] = &[
        ("nothere.deeper", &[K("nothere"), K("deeper")]),
        (
            "spec.containers[*].env",
            &[K("spec"), K("containers"), All, K("env")],
        ),
        (
            "status.conditions[*].type",
            &[K("status"), K("conditions"), All, K("type")],
        ),
        ("list.a", &[K("list"), K("a")]),
        ("list[*].a", &[K("list"), All, K("a")]),
        (
            "metadata.name.first",
            &[K("metadata"), K("name"), K("first")],
        ),
    ];
    for case in cases {
        check::<Value>(&doc, std::slice::from_ref(case));
    }
    let v: Value = check(&doc, &[("list[*].a", &[K("list"), All, K("a")])]);
    assert_eq!(v["list"], json!([1, {}]));
}

#[test]
fn escaped_keys_are_matched_by_their_decoded_text_and_kept_ones_survive() {
    // `\u002e` is `.`: serde_json hands such keys over as transient strings, not borrowed ones.
    let json = br#"{"metadata":{"name":"a","annotations":{"a\u002eb":"drop","c\u002ed":"keep","e":"keep"}}}"#;
    let p = Projection::none()
        .drop_path(r#"metadata.annotations["a.b"]"#)
        .unwrap();
    let cm: ConfigMap = p.from_slice(json).unwrap();
    let annotations = cm.metadata.annotations.unwrap();
    assert_eq!(annotations.keys().collect::<Vec<_>>(), ["c.d", "e"]);
    // Escaped field names of the struct itself are recognised too.
    let json = br#"{"metadata":{"n\u0061me":"a","m\u0061nagedFields":[{"manager":"m"}]}}"#;
    let cm: ConfigMap = Projection::strip_managed_fields().from_slice(json).unwrap();
    assert_eq!(
        (cm.metadata.name.as_deref(), cm.metadata.managed_fields),
        (Some("a"), None)
    );
    // And keys owned by a `Value` being re-decoded (the watch's other field order).
    let value = json!({"metadata": {"name": "a", "managedFields": [{}]}});
    let cm: ConfigMap = Projection::strip_managed_fields()
        .deserialize(value)
        .unwrap();
    assert!(cm.metadata.managed_fields.is_none());
}

#[test]
fn a_dropped_value_is_skipped_unless_it_is_not_json() {
    let p = Projection::strip_managed_fields();
    // Of the wrong type: never decoded, so no error, where the full decode fails.
    let wrong = br#"{"metadata":{"name":"a","managedFields":"not a list"}}"#;
    assert!(serde_json::from_slice::<ConfigMap>(wrong).is_err());
    let cm: ConfigMap = p.from_slice(wrong).unwrap();
    assert_eq!(cm.metadata.name.as_deref(), Some("a"));
    // Not JSON: the skip parses it, and fails as the full decode does.
    for bad in [
        &br#"{"metadata":{"name":"a","managedFields":[{"manager":}]}}"#[..],
        br#"{"metadata":{"name":"a","managedFields":[1,]}}"#,
        br#"{"metadata":{"name":"a","managedFields":"unterminated}}"#,
        br#"{"metadata":{"name":"a","managedFields":[{"manager":"m"}"#,
    ] {
        let err = p.from_slice::<ConfigMap>(bad).unwrap_err();
        assert!(err.is_syntax() || err.is_eof(), "{err}");
    }
}

#[test]
fn a_type_error_outside_the_dropped_paths_is_still_an_error() {
    let json = br#"{"metadata":{"name":"a","managedFields":[]},"data":{"k":1}}"#;
    let err = Projection::strip_managed_fields()
        .from_slice::<ConfigMap>(json)
        .unwrap_err();
    assert!(err.is_data(), "{err}");
}

#[test]
fn enums_untagged_values_newtypes_and_options_decode_through_the_adapter() {
    #[derive(Debug, Deserialize, PartialEq, serde::Serialize)]
    enum Tagged {
        A { x: u32 },
        B,
    }
    #[derive(Debug, Deserialize, PartialEq, serde::Serialize)]
    #[serde(untagged)]
    enum Untagged {
        Obj { keep: u32, secret: Option<String> },
        Num(u32),
    }
    #[derive(Debug, Deserialize, PartialEq, serde::Serialize)]
    struct Wrap(Inner);
    #[derive(Debug, Deserialize, PartialEq, serde::Serialize)]
    struct Inner {
        keep: Option<Vec<Untagged>>,
        secret: Option<String>,
    }
    #[derive(Debug, Deserialize, PartialEq, serde::Serialize)]
    struct Doc {
        tagged: Vec<Tagged>,
        untagged: Untagged,
        wrap: Option<Wrap>,
        #[serde(default)]
        absent: Option<Wrap>,
        bytes: Vec<u8>,
        pair: (i64, f64, char, bool),
    }
    let doc = json!({
        "tagged": [{"A": {"x": 1}}, "B"],
        "untagged": {"keep": 1, "secret": "s"},
        "wrap": {"keep": [{"keep": 2, "secret": "t"}, 3], "secret": "u"},
        "bytes": [1, 2],
        "pair": [-1, 0.5, "c", true],
    });
    let doc: Doc = check(
        &doc,
        &[
            ("untagged.secret", &[K("untagged"), K("secret")]),
            ("wrap.secret", &[K("wrap"), K("secret")]),
            (
                "wrap.keep[*].secret",
                &[K("wrap"), K("keep"), All, K("secret")],
            ),
            ("absent.secret", &[K("absent"), K("secret")]),
        ],
    );
    assert_eq!(
        doc.untagged,
        Untagged::Obj {
            keep: 1,
            secret: None
        }
    );
    assert_eq!(doc.wrap.unwrap().0.secret, None);
}

#[test]
fn list_bodies_are_projected_item_by_item_however_they_are_split() {
    let items: Vec<Value> = (0..5)
        .map(|i| {
            let mut p = pod();
            p["metadata"]["name"] = json!(format!("p{i}"));
            p
        })
        .collect();
    let body =
        serde_json::to_vec(&json!({"metadata": {"resourceVersion": "9"}, "items": items})).unwrap();
    let p = Projection::from_paths(["metadata.managedFields", "spec.containers[*].env"]).unwrap();
    let expected: Vec<Pod> = items
        .iter()
        .map(|i| {
            let mut i = i.clone();
            drop_in(&mut i, &[K("metadata"), K("managedFields")]);
            drop_in(&mut i, &[K("spec"), K("containers"), All, K("env")]);
            serde_json::from_value(i).unwrap()
        })
        .collect();
    for chunk in [1, 7, 100, body.len()] {
        let mut decoder = ListDecoder::<Pod, Pod>::with_margin(64).projection(p.clone());
        for c in body.chunks(chunk) {
            decoder.push(c, &mut |k| k).unwrap();
        }
        let page = decoder.finish(&mut |k| k).unwrap();
        assert_eq!(page.items, expected, "chunks of {chunk}");
        assert_eq!(page.metadata.resource_version.as_deref(), Some("9"));
    }
    // The projection is scoped to the decoder: a plain decode on the same thread keeps all.
    let full: Pod = serde_json::from_value(items[0].clone()).unwrap();
    assert!(full.metadata.managed_fields.is_some());
    let mut plain = ListDecoder::<Pod, Pod>::new();
    plain.push(&body, &mut |k| k).unwrap();
    assert!(
        plain.finish(&mut |k| k).unwrap().items[0]
            .metadata
            .managed_fields
            .is_some()
    );
}

#[test]
fn a_list_item_undecodable_only_in_a_dropped_field_is_kept() {
    let body = br#"{"items":[{"metadata":{"name":"a","managedFields":7}},{"metadata":{"name":"b"},"data":[1]}]}"#;
    let mut decoder =
        ListDecoder::<ConfigMap, ConfigMap>::new().projection(Projection::strip_managed_fields());
    decoder.push(body, &mut |k| k).unwrap();
    let page = decoder.finish(&mut |k| k).unwrap();
    assert_eq!(page.items.len(), 1);
    assert_eq!(page.items[0].metadata.name.as_deref(), Some("a"));
    assert_eq!(page.undecodable.len(), 1);
    assert_eq!(
        page.undecodable[0].key.as_ref().map(|k| k.as_str()),
        Some("b")
    );
}

#[test]
fn watch_objects_are_projected_in_either_field_order_and_bookmarks_are_not() {
    let p =
        Projection::from_paths(["metadata.managedFields", "metadata.annotations", "data"]).unwrap();
    let object = r#"{"metadata":{"name":"a","resourceVersion":"3","managedFields":[{}],"annotations":{"x":"y"}},"data":{"k":"v"}}"#;
    for line in [
        format!(r#"{{"type":"MODIFIED","object":{object}}}"#),
        format!(r#"{{"object":{object},"type":"MODIFIED"}}"#),
    ] {
        let WatchEvent::Modified(cm) =
            decode_watch_event_projected::<ConfigMap>(line.as_bytes(), &p).unwrap()
        else {
            panic!("{line}");
        };
        assert_eq!(cm.metadata.name.as_deref(), Some("a"));
        assert_eq!(
            (cm.metadata.managed_fields, cm.metadata.annotations, cm.data),
            (None, None, None)
        );
    }
    // The annotation that ends a streaming list survives a projection of annotations.
    let bookmark = br#"{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"7","annotations":{"k8s.io/initial-events-end":"true"}}}}"#;
    assert!(matches!(
        decode_watch_event_projected::<ConfigMap>(bookmark, &p).unwrap(),
        WatchEvent::Bookmark {
            initial_events_end: true,
            ..
        }
    ));
    let error = br#"{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"gone"}}"#;
    assert!(matches!(
        decode_watch_event_projected::<ConfigMap>(error, &Projection::from_paths(["message"]).unwrap()).unwrap(),
        WatchEvent::Error(s) if s.message == "gone"
    ));
    // Malformed JSON in a dropped field still fails the line.
    let bad = br#"{"type":"ADDED","object":{"metadata":{"name":"a","managedFields":[}}}"#;
    assert!(decode_watch_event_projected::<ConfigMap>(bad, &p).is_err());
}

/// A checking projection (what an in-order relist into a Compact cache checks listed JSON with)
/// refuses exactly what a decode that builds the value as a `serde_json::Value` refuses, and the
/// object it gives is the decoded one without the value.
#[test]
fn a_checked_value_fails_exactly_where_a_value_decode_would() {
    let check = Projection::checking("metadata.managedFields[*].fieldsV1").unwrap();
    let nested =
        |depth: usize, leaf: &str| format!("{}{leaf}{}", "[".repeat(depth), "]".repeat(depth));
    let fields_v1 = [
        // Taken by a decode.
        r#"{"f:metadata":{"f:labels":{".":{},"f:app":{}}}}"#.to_owned(),
        r#"[1, -2, 3.5e10, "x\n\u00e9", true, null, {"k": [[]]}]"#.to_owned(),
        r#"{"dup": 1, "dup": 2}"#.to_owned(),
        r#""\ud83d\ude00""#.to_owned(),
        r#"{"$serde_json::private::RawValue": "{\"a\": [1, 2]}"}"#.to_owned(),
        r#"{"a": 1, "$serde_json::private::RawValue": 5}"#.to_owned(),
        nested(100, "1"),
        // Refused by a decode: a lone surrogate, a number out of range, the raw-value key with
        // something else than JSON text, nesting past serde_json's limit.
        r#""\ud800""#.to_owned(),
        r#"{"\udc00": 1}"#.to_owned(),
        "1e400".to_owned(),
        r#"{"$serde_json::private::RawValue": 1}"#.to_owned(),
        r#"{"$serde_json::private::RawValue": "{\"a\":"}"#.to_owned(),
        r#"{"$serde_json::private::RawValue": "1", "b": 2}"#.to_owned(),
        nested(130, "1"),
        // Not JSON.
        r#"{"a":}"#.to_owned(),
    ];
    let mut refused = 0;
    for fields in &fields_v1 {
        let json = format!(
            r#"{{"metadata":{{"name":"p","namespace":"n","managedFields":[{{"manager":"m","fieldsV1":{fields}}}]}}}}"#
        );
        let decoded = serde_json::from_str::<Pod>(&json);
        let checked = check.from_slice::<Pod>(json.as_bytes());
        assert_eq!(checked.is_ok(), decoded.is_ok(), "{fields}: {decoded:?}");
        if let (Ok(checked), Ok(mut decoded)) = (checked, decoded) {
            for entry in decoded.metadata.managed_fields.iter_mut().flatten() {
                entry.fields_v1 = None;
            }
            assert_eq!(checked, decoded, "{fields}");
        } else {
            refused += 1;
        }
    }
    assert_eq!(refused, 8);
    // Not UTF-8 inside the value: refused as a decode refuses it.
    let mut bytes = br#"{"metadata":{"name":"p","managedFields":[{"fieldsV1":{"k":""#.to_vec();
    bytes.extend([0xff, 0xfe]);
    bytes.extend(br#""}}]}}"#);
    assert!(serde_json::from_slice::<Pod>(&bytes).is_err());
    assert!(check.from_slice::<Pod>(&bytes).is_err());
    // A skipping projection takes all of these, which is why the check does not skip.
    let skip = Projection::none()
        .drop_path("metadata.managedFields[*].fieldsV1")
        .unwrap();
    assert!(skip.from_slice::<Pod>(&bytes).is_ok());
    // Paths added to a checking projection are checked too.
    let both = check.drop_path("metadata.annotations").unwrap();
    let json = r#"{"metadata":{"name":"p","annotations":{"a":"\ud800"}}}"#;
    assert!(both.from_slice::<Pod>(json.as_bytes()).is_err());
}
