//! Unit tests of the decoders.

use super::*;
use k8s_openapi::api::core::v1::ConfigMap;

#[test]
fn list_decodes_items_and_metadata_ignoring_other_fields() {
    let body = br#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"42","continue":"c"},
        "items":[{"metadata":{"name":"a","namespace":"n"}},{"metadata":{"name":"b"}}],"extra":[1,2]}"#;
    let page = decode_list::<ConfigMap>(body).unwrap();
    assert_eq!(page.metadata.resource_version.as_deref(), Some("42"));
    assert_eq!(page.metadata.continue_.as_deref(), Some("c"));
    assert_eq!(page.items.len(), 2);
    assert_eq!(page.items[1].metadata.name.as_deref(), Some("b"));
}

#[test]
fn list_with_null_items_is_empty() {
    let page = decode_list::<ConfigMap>(br#"{"metadata":{},"items":null}"#).unwrap();
    assert!(page.items.is_empty());
}

#[test]
fn event_decodes_in_either_field_order() {
    for line in [
        &br#"{"type":"ADDED","object":{"metadata":{"name":"a"}}}"#[..],
        &br#"{"object":{"metadata":{"name":"a"}},"type":"ADDED"}"#[..],
    ] {
        match decode_watch_event::<ConfigMap>(line).unwrap() {
            WatchEvent::Added(cm) => assert_eq!(cm.metadata.name.as_deref(), Some("a")),
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[test]
fn bookmark_reports_initial_events_end() {
    let line = br#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"7","annotations":{"k8s.io/initial-events-end":"true"}}}}"#;
    match decode_watch_event::<ConfigMap>(line).unwrap() {
        WatchEvent::Bookmark {
            resource_version,
            initial_events_end,
        } => {
            assert_eq!(resource_version, "7");
            assert!(initial_events_end);
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn error_event_carries_status() {
    let line = br#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version: 1 (5)","reason":"Expired","code":410}}"#;
    match decode_watch_event::<ConfigMap>(line).unwrap() {
        WatchEvent::Error(s) => assert_eq!(s.code, 410),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn malformed_lines_are_errors_not_panics() {
    for line in [
        &b"{"[..],
        b"not json",
        br#"{"type":"ADDED"}"#,
        br#"{"object":{}}"#,
        br#"{"type":"NOPE","object":{}}"#,
        br#"{"type":"ADDED","object":{"metadata":{"name":5}}}"#,
        br#"{"type":"ADDED","type":"ADDED","object":{}}"#,
    ] {
        assert!(
            decode_watch_event::<ConfigMap>(line).is_err(),
            "{:?}",
            String::from_utf8_lossy(line)
        );
    }
}

#[test]
fn decode_errors_never_quote_the_input() {
    let canary = "c4n4ry";
    for line in [
        // invalid type: string "…", expected a map
        format!(r#"{{"type":"ADDED","object":{{"metadata":"{canary}"}}}}"#),
        // an escaped quote inside the value does not end the redaction
        format!(r#"{{"type":"ADDED","object":{{"metadata":"a\"b`{canary}"}}}}"#),
        // invalid type: integer `…`
        r#"{"type":"ADDED","object":{"metadata":{"name":41414141}}}"#
            .replace("41414141", "9876543210"),
        // unknown variant `…`
        format!(r#"{{"type":"{canary}","object":{{}}}}"#),
        // a backtick in it does not end the quote early (serde does not escape it)
        format!(r#"{{"type":"x`{canary}","object":{{}}}}"#),
        format!(r#"{{"type":"x`, expected `{canary}","object":{{}}}}"#),
        // invalid value from a custom message (a bad timestamp)
        format!(r#"{{"type":"ADDED","object":{{"metadata":{{"creationTimestamp":"{canary}"}}}}}}"#),
    ] {
        let err = decode_watch_event::<ConfigMap>(line.as_bytes()).unwrap_err();
        for shown in [err.to_string(), format!("{err:?}")] {
            assert!(
                !shown.contains(canary) && !shown.contains("9876543210"),
                "{shown}"
            );
            assert!(shown.contains("at line 1 column"), "{shown}");
        }
        assert!(std::error::Error::source(&err).is_none());
        assert!(err.unredacted().to_string().contains("at line"));
    }
    let err = decode_watch_event::<ConfigMap>(br#"{"object":{}}"#).unwrap_err();
    assert!(err.to_string().contains("missing field `type`"), "{err}");
    let err = decode_watch_event::<ConfigMap>(br#"{"type":"ADDED","object":{"data":{"k":5}}}"#)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "cannot decode watch event: invalid type: integer `…`, expected a string at line 1 column 39"
    );
}

/// A user's type with an enum or `deny_unknown_fields` (a custom resource's spec): serde
/// quotes the input's variant or field name between backticks, unescaped.
#[test]
fn a_backtick_in_an_unknown_variant_or_field_does_not_leak_what_follows() {
    use super::error::redacted;
    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    enum Mode {
        Fast,
        Slow,
    }
    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Spec {
        mode: Option<Mode>,
    }
    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Unit {}
    for (input, want) in [
        (
            r#"{"mode":"a`hunter2"}"#,
            "unknown variant `…`, expected `Fast` or `Slow` at line 1 column 19",
        ),
        (
            r#"{"mo`hunter2":1}"#,
            "unknown field `…`, expected `mode` at line 1 column 13",
        ),
    ] {
        let e = serde_json::from_str::<Spec>(input).unwrap_err();
        assert_eq!(redacted(&e), want);
    }
    let e = serde_json::from_str::<std::collections::BTreeMap<String, Mode>>(
        r#"{"k":"a`, expected `hunter2"}"#,
    )
    .unwrap_err();
    assert!(!redacted(&e).contains("hunter2"), "{}", redacted(&e));
}

#[test]
fn framer_reassembles_lines_across_arbitrary_chunks() {
    let stream = b"{\"a\":1}\n{\"b\":2}\r\n\n{\"c\":3}\n{\"d\"";
    for split in 1..stream.len() {
        let mut f = LineFramer::new();
        let mut out = Vec::new();
        for chunk in stream.chunks(split) {
            out.extend(f.push(chunk));
        }
        assert_eq!(
            out,
            vec![
                b"{\"a\":1}".to_vec(),
                b"{\"b\":2}".to_vec(),
                b"{\"c\":3}".to_vec()
            ],
            "split {split}"
        );
        assert_eq!(f.pending(), b"{\"d\"");
    }
}

/// Asserts that of items `a`, `b` and `c`, only `n/b` (at resourceVersion 4) was reported.
fn only_b_is_undecodable(page: &ListPage<ConfigMap>) -> &UndecodableObject {
    let names: Vec<_> = page
        .items
        .iter()
        .map(|c| c.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["a", "c"]);
    assert_eq!(page.undecodable.len(), 1);
    let u = &page.undecodable[0];
    assert_eq!(u.key.as_ref().map(|k| k.as_str()), Some("n/b"));
    assert_eq!(u.resource_version.as_deref(), Some("4"));
    u
}

#[test]
fn list_keeps_decodable_items_and_reports_the_others() {
    let body = br#"{"metadata":{"resourceVersion":"9"},"items":[
        {"metadata":{"name":"a","namespace":"n","resourceVersion":"3"},"data":{"k":"v"}},
        {"metadata":{"name":"b","namespace":"n","resourceVersion":"4"},"data":"not a map"},
        {"metadata":{"name":"c","namespace":"n","resourceVersion":"5"}}]}"#;
    let page = decode_list::<ConfigMap>(body).unwrap();
    let u = only_b_is_undecodable(&page);
    assert!(!u.to_string().contains("not a map"), "{u}");
}

#[test]
fn list_skips_an_item_nested_past_the_json_limit() {
    // managedFields' fieldsV1 is a serde_json::Value, which serde_json stops at 128 levels.
    let deep = format!("{}1{}", r#"{"a":"#.repeat(200), "}".repeat(200));
    let body = format!(
        r#"{{"metadata":{{"resourceVersion":"9"}},"items":[
        {{"metadata":{{"name":"a","namespace":"n","resourceVersion":"3"}}}},
        {{"metadata":{{"name":"b","namespace":"n","resourceVersion":"4","managedFields":[{{"fieldsV1":{deep}}}]}}}},
        {{"metadata":{{"name":"c","namespace":"n","resourceVersion":"5"}}}}]}}"#
    );
    // Whole, and in chunks that cut the deep item anywhere, with no margin (each push tries).
    let page = decode_list::<ConfigMap>(body.as_bytes()).unwrap();
    let u = only_b_is_undecodable(&page);
    assert!(u.to_string().contains("recursion limit"), "{u}");
    for size in [1, 2, 7, 97, 500] {
        let mut d = ListDecoder::<ConfigMap, ConfigMap>::with_margin(0);
        for chunk in body.as_bytes().chunks(size) {
            d.push(chunk, &mut |c| c).unwrap();
        }
        only_b_is_undecodable(&d.finish(&mut |c| c).unwrap());
    }
    // Not well-formed after all: the list fails.
    let broken = body.replacen("}]}", "]]}", 1);
    assert!(decode_list::<ConfigMap>(broken.as_bytes()).is_err());
    // A watch event skips it the same way.
    let line = format!(
        r#"{{"type":"MODIFIED","object":{{"metadata":{{"name":"b","namespace":"n","resourceVersion":"4","managedFields":[{{"fieldsV1":{deep}}}]}}}}}}"#
    );
    let err = decode_watch_event::<ConfigMap>(line.as_bytes()).unwrap_err();
    let u = undecodable_event(line.as_bytes(), err).unwrap();
    assert_eq!(u.resource_version.as_deref(), Some("4"));
}

#[test]
fn well_formed_event_with_an_undecodable_object_is_identified() {
    let line = br#"{"type":"MODIFIED","object":{"metadata":{"name":"b","namespace":"n","resourceVersion":"12"},"data":7}}"#;
    let err = decode_watch_event::<ConfigMap>(line).unwrap_err();
    let u = undecodable_event(line, err).unwrap();
    assert_eq!(u.event_type, "MODIFIED");
    assert_eq!(u.key.unwrap().as_str(), "n/b");
    assert_eq!(u.resource_version.as_deref(), Some("12"));
    // Not an event at all: stays a plain decode error.
    let err = decode_watch_event::<ConfigMap>(b"garbage").unwrap_err();
    assert!(undecodable_event(b"garbage", err).is_err());
}

#[test]
fn list_items_are_mapped_one_by_one_as_they_are_decoded() {
    let body = br#"{"metadata":{"resourceVersion":"9"},"items":[
        {"metadata":{"name":"a"}},{"metadata":{"name":"b"}},{"metadata":{"name":"c"}}]}"#;
    let mut calls = 0;
    let page = decode_list_map::<ConfigMap, String>(body, &mut |cm| {
        calls += 1;
        cm.metadata.name.unwrap()
    })
    .unwrap();
    assert_eq!(calls, 3);
    assert_eq!(page.items, ["a", "b", "c"]);
    assert!(
        decode_list_map::<ConfigMap, ()>(br#"{"items":null}"#, &mut |_| ())
            .unwrap()
            .items
            .is_empty()
    );
    assert!(decode_list_map::<ConfigMap, ()>(br#"{"items":[]} trailing"#, &mut |_| ()).is_err());
}

/// What a page decodes to, comparable across decodings.
fn summary(page: &ListPage<ConfigMap>) -> (ListMeta, Vec<ConfigMap>, Vec<Option<String>>) {
    (
        page.metadata.clone(),
        page.items.clone(),
        page.undecodable
            .iter()
            .map(|u| u.key.as_ref().map(|k| k.as_str().to_owned()))
            .collect(),
    )
}

fn decode_chunks<'a>(
    chunks: impl IntoIterator<Item = &'a [u8]>,
    margin: usize,
) -> Result<ListPage<ConfigMap>, DecodeError> {
    let mut d = ListDecoder::<ConfigMap, ConfigMap>::with_margin(margin);
    for c in chunks {
        d.push(c, &mut |k| k)?;
    }
    d.finish(&mut |k| k)
}

const SMALL_LIST: &[u8] = br#" { "kind" : "ConfigMapList", "apiVersion":"v1",
    "items" : [ {"metadata":{"name":"a","namespace":"n","resourceVersion":"3"},"data":{"k":"v"}} ,
      {"metadata":{"name":"b","namespace":"n","resourceVersion":"4"},"data":"not a map"},
      {"metadata":{"name":"c","resourceVersion":"12345"}}
    ] , "metadata" : {"resourceVersion":"9","continue":"x"}, "extra": [1, 2.5e3, -7, {"z":null}], "n": 1234 }
"#;

#[test]
fn list_split_at_every_point_decodes_as_the_whole_body() {
    let whole = summary(&decode_list::<ConfigMap>(SMALL_LIST).unwrap());
    assert_eq!(whole.1.len(), 2);
    assert_eq!(whole.2, [Some("n/b".to_owned())]);
    for margin in [0, 1, 7, 64] {
        for split in 0..=SMALL_LIST.len() {
            let (a, b) = SMALL_LIST.split_at(split);
            let page = decode_chunks([a, b], margin).unwrap();
            assert_eq!(summary(&page), whole, "split {split} margin {margin}");
        }
    }
}

#[test]
fn list_in_random_chunks_decodes_as_the_whole_body() {
    let whole = summary(&decode_list::<ConfigMap>(SMALL_LIST).unwrap());
    let mut rng = fastrand::Rng::with_seed(7);
    for _ in 0..500 {
        let mut chunks = Vec::new();
        let mut rest = SMALL_LIST;
        while !rest.is_empty() {
            let (c, r) = rest.split_at(rng.usize(0..=rest.len().min(20)));
            chunks.push(c);
            rest = r;
        }
        let page = decode_chunks(chunks, rng.usize(0..100)).unwrap();
        assert_eq!(summary(&page), whole);
    }
}

#[test]
fn list_metadata_may_follow_items_and_unknown_keys_and_whitespace_are_skipped() {
    let body = b"\n\t{ \"unknown\" : { \"items\" : [1] , \"metadata\" : 5 } ,\r\n \"items\" :\n[ ] ,\
        \"items\" : [ { \"metadata\" : { \"name\" : \"a\" } } ] , \"metadata\" :\t{ \"resourceVersion\" : \"5\" } } \n";
    for chunk in [1, 2, 3, body.len()] {
        let page = decode_chunks(body.chunks(chunk), 0).unwrap();
        assert_eq!(page.metadata.resource_version.as_deref(), Some("5"));
        assert_eq!(page.items.len(), 1, "chunk {chunk}");
        assert_eq!(page.items[0].metadata.name.as_deref(), Some("a"));
    }
    for body in [&b"{}"[..], br#"{"items":null}"#, br#"{"metadata":{}}"#] {
        let page = decode_chunks(body.chunks(1), 0).unwrap();
        assert!(page.items.is_empty());
    }
}

#[test]
fn item_larger_than_the_margin_split_across_many_chunks_is_decoded() {
    let big = "x".repeat(3 * 1024 * 1024);
    let body = format!(
        r#"{{"metadata":{{"resourceVersion":"1"}},"items":[{{"metadata":{{"name":"small"}}}},{{"metadata":{{"name":"big"}},"data":{{"k":"{big}"}}}},{{"metadata":{{"name":"after"}}}}]}}"#
    );
    let mut calls = 0;
    let mut d = ListDecoder::<ConfigMap, String>::new();
    let mut map = |cm: ConfigMap| {
        calls += 1;
        cm.metadata.name.unwrap()
    };
    for chunk in body.as_bytes().chunks(16 * 1024) {
        d.push(chunk, &mut map).unwrap();
        // The window never holds much more than the item being decoded.
        assert!(d.buf.len() <= big.len() + 2 * COMPACT_AT, "{}", d.buf.len());
    }
    let page = d.finish(&mut map).unwrap();
    assert_eq!(page.items, ["small", "big", "after"]);
    assert_eq!(calls, 3);
}

#[test]
fn long_list_is_decoded_while_it_arrives_within_a_bounded_window() {
    let item = r#"{"metadata":{"name":"n","namespace":"ns"},"data":{"k":"0123456789abcdef0123456789abcdef"}}"#;
    let count = 100_000;
    let body = format!(
        r#"{{"items":[{}],"metadata":{{"resourceVersion":"3"}}}}"#,
        vec![item; count].join(",")
    );
    assert!(body.len() > 8 * 1024 * 1024);
    let mut seen = 0;
    let mut d = ListDecoder::<ConfigMap, ()>::new();
    let mut map = |_| seen += 1;
    let mut max_window = 0;
    for chunk in body.as_bytes().chunks(16 * 1024) {
        d.push(chunk, &mut map).unwrap();
        max_window = max_window.max(d.buf.capacity());
    }
    let page = d.finish(&mut map).unwrap();
    assert_eq!((page.items.len(), seen), (count, count));
    assert!(
        max_window <= 2 * (COMPACT_AT + LIST_DECODER_MARGIN),
        "window grew to {max_window}"
    );
}

#[test]
fn undecodable_item_in_a_chunked_body_is_reported_and_the_rest_kept() {
    let body = br#"{"metadata":{"resourceVersion":"9"},"items":[
        {"metadata":{"name":"a","namespace":"n","resourceVersion":"3"}},
        {"metadata":{"name":"b","namespace":"n","resourceVersion":"4"},"data":{"k":["c4n4ry"]}},
        {"metadata":{"name":"c","namespace":"n","resourceVersion":"5"}}]}"#;
    for chunk in [1, 5, 33] {
        let page = decode_chunks(body.chunks(chunk), 0).unwrap();
        let u = only_b_is_undecodable(&page);
        assert!(u.error.body_offset().is_some());
        assert!(!format!("{u} {u:?}").contains("c4n4ry"), "{u}");
    }
}

#[test]
fn truncated_list_is_an_error_not_a_short_list() {
    let whole = decode_list::<ConfigMap>(SMALL_LIST).unwrap();
    assert_eq!(whole.items.len(), 2);
    let end = SMALL_LIST.iter().rposition(|&b| b == b'}').unwrap();
    for cut in 0..=end {
        let body = &SMALL_LIST[..cut];
        for margin in [0, 1000] {
            let err = decode_chunks(body.chunks(3), margin).unwrap_err();
            assert!(!err.to_string().contains("not a map"), "{err}");
        }
        assert!(decode_list::<ConfigMap>(body).is_err(), "cut at {cut}");
    }
}

#[test]
fn trailing_garbage_and_malformed_structure_are_errors() {
    for body in [
        &br#"{"items":[]} x"#[..],
        br#"{"items":[]}{}"#,
        br#"[]"#,
        br#""list""#,
        br#"{"items":[],}"#,
        br#"{"items":[{}}"#,
        br#"{"items":[{},]}"#,
        br#"{"items" []}"#,
        br#"{items:[]}"#,
        br#"{"items":{}}"#,
        br#"{"items":5}"#,
        br#"{"metadata":null}"#,
        br#"{"items":[{"metadata":{"name":"a"}} {}]}"#,
        br#"{"n":12x}"#,
        b"",
        b"  ",
    ] {
        for chunk in [1, 2, body.len().max(1)] {
            assert!(
                decode_chunks(body.chunks(chunk), 0).is_err(),
                "{} in chunks of {chunk}",
                String::from_utf8_lossy(body)
            );
        }
        assert!(decode_list::<ConfigMap>(body).is_err());
    }
    let err = decode_list::<ConfigMap>(br#"{"items":[]} x"#).unwrap_err();
    assert_eq!(
        err.to_string(),
        "cannot decode list at body byte 13: trailing characters after the list"
    );
}

#[test]
fn decoder_is_spent_after_an_error() {
    let mut d = ListDecoder::<ConfigMap, ConfigMap>::with_margin(0);
    assert!(d.push(b"[", &mut |k| k).is_err());
    assert!(d.push(b"{}", &mut |k| k).is_err());
    assert!(d.finish(&mut |k| k).is_err());
}
