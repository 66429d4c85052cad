//! The fuzz targets' bodies, shared by the libFuzzer binaries in `fuzz_targets/` and by the
//! stable bounded run in `tests/fuzz_decode.rs` (which includes this file with `#[path]`), so CI
//! exercises exactly what `cargo fuzz` does.
//!
//! Each target takes arbitrary bytes, must never panic or hang, and asserts invariants that hold
//! for every input, valid or not.

use std::{
    pin::pin,
    task::{Context, Poll},
};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use k8s_openapi::{api::core::v1::Pod, apimachinery::pkg::apis::meta::v1::ListMeta};
use kube::core::{DynamicObject, PartialObjectMeta};
use kube_informer::{
    protobuf::{
        LengthPrefixFramer, ProtobufListDecoder, decode_object, decode_object_via_serde,
        decode_watch_frame,
    },
    reflector::{
        __fuzz::{ListedItem, listed_items, watch_event_stream},
        ListPage, WatchEvent,
        decode::{
            LineFramer, ListDecoder, ListedMeta, Projection, RawWatchEvent, WatchItem, decode_list,
            decode_watch_event,
        },
    },
};
use serde::de::DeserializeOwned;

/// Input layout of [`watch_stream`]: byte 0 seeds the chunking, byte 1 is the largest chunk
/// (0 = the whole body in one chunk; bit 7 set = the stream then fails with a read error), the
/// rest is the watch response body.
pub const WATCH_HEADER_LEN: usize = 2;

/// Frames `data` (after the header) in arbitrary chunks, decodes every line as a `Pod`, a
/// `DynamicObject` and a `PartialObjectMeta<Pod>` event, and runs the same chunks through the
/// reflector's wire stream.
///
/// Invariants:
/// - the framed lines are exactly the body's non-empty `\n`-separated lines (one trailing `\r`
///   trimmed), whatever the chunking, and the framer's pending tail is what follows the last `\n`;
/// - an event's type and, for bookmarks and errors, its payload do not depend on the object type
///   it is decoded as;
/// - the wire stream yields one item per framed line, each decoding exactly as the line alone
///   does, then the read error if one was injected, then ends (never `Pending` on ready input).
pub fn watch_stream(data: &[u8]) {
    if data.len() < WATCH_HEADER_LEN {
        return;
    }
    let (seed, max_chunk, fail) = (data[0], data[1] & 0x7f, data[1] & 0x80 != 0);
    let body = &data[WATCH_HEADER_LEN..];
    let chunks = chunk(body, seed, max_chunk);

    let (expected, tail) = reference_lines(body);
    let mut framer = LineFramer::new();
    let mut lines = Vec::new();
    for c in &chunks {
        lines.extend(framer.push(c));
    }
    assert_eq!(lines, expected, "framed lines differ from the body's lines");
    assert_eq!(framer.pending(), tail, "pending tail differs");

    for line in &lines {
        let pod = decode_watch_event::<Pod>(line);
        let dynamic = decode_watch_event::<DynamicObject>(line);
        let meta = decode_watch_event::<PartialObjectMeta<Pod>>(line);
        if let (Ok(a), Ok(b)) = (&pod, &dynamic) {
            assert_same_envelope(a, b);
        }
        if let (Ok(a), Ok(b)) = (&pod, &meta) {
            assert_same_envelope(a, b);
        }
        if let (Ok(a), Ok(b)) = (&dynamic, &meta) {
            assert_same_envelope(a, b);
        }
        check_raw_event(RawWatchEvent::json_line(line.clone()));
    }

    let items = drain(watch_event_stream::<Pod, _>(body_stream(&chunks, fail)));
    assert_eq!(
        items.len(),
        lines.len() + usize::from(fail),
        "one stream item per line (plus the read error)"
    );
    for (item, line) in items.iter().zip(&lines) {
        assert_eq!(
            item.is_ok(),
            decode_watch_event::<Pod>(line).is_ok(),
            "the stream decodes a line differently from decode_watch_event"
        );
    }
    if fail {
        assert!(
            matches!(
                items.last(),
                Some(Err(kube_informer::reflector::ListWatchError::Stream(_)))
            ),
            "an injected read error must be the stream's last item"
        );
    }
}

/// Decodes `data` as a list of `Pod`s, `DynamicObject`s and `PartialObjectMeta<Pod>`s, whole
/// and through a [`ListDecoder`] fed in chunks.
///
/// Invariants:
/// - a body that decodes is JSON (up to strings in skipped fields) whose `items` (absent or
///   `null` meaning none) has as many elements as were decoded or reported undecodable and whose
///   `metadata.resourceVersion` is the one reported;
/// - however the body is split into chunks, and whatever the decoder's margin, the chunked
///   decode gives what the whole-body decode gives: the same items, metadata and undecodable
///   keys, or an error.
pub fn list_decode(data: &[u8]) {
    let pod = list_and_chunked::<Pod>(data);
    check_list(data, pod);
    let dynamic = list_and_chunked::<DynamicObject>(data);
    check_list(data, dynamic);
    let meta = list_and_chunked::<PartialObjectMeta<Pod>>(data);
    check_list(data, meta);
    check_listed(data, false, decode_list::<Pod>(data).ok());
}

/// What a list decode gives, comparable across decodes: items as JSON, metadata, and the
/// undecodable items' keys and resourceVersions.
type ListSummary = (
    Vec<serde_json::Value>,
    ListMeta,
    Vec<(Option<String>, Option<String>)>,
);

fn summarize<K: serde::Serialize, E>(page: Result<ListPage<K>, E>) -> Option<ListSummary> {
    let page = page.ok()?;
    Some((
        page.items
            .iter()
            .map(|k| serde_json::to_value(k).expect("a decoded object serializes"))
            .collect(),
        page.metadata,
        page.undecodable
            .iter()
            .map(|u| {
                (
                    u.key.as_ref().map(|k| k.as_str().to_owned()),
                    u.resource_version.clone(),
                )
            })
            .collect(),
    ))
}

/// Decodes `data` whole, then in chunks chosen by its length, and asserts they agree.
fn list_and_chunked<K: DeserializeOwned + serde::Serialize>(
    data: &[u8],
) -> Option<(usize, ListMeta)> {
    let whole = summarize(decode_list::<K>(data));
    // A pure function of the input, as libFuzzer needs.
    let seed = data
        .iter()
        .fold(data.len() as u8, |a, &b| a.wrapping_mul(31) ^ b);
    for (max_chunk, margin) in [(1, 0), (7, 3), (64, 16), (255, 1 << 20)] {
        let mut decoder = ListDecoder::<K, K>::with_margin(margin);
        let mut result = Ok(());
        for c in chunk(data, seed, max_chunk) {
            result = decoder.push(c, &mut |k| k);
            if result.is_err() {
                break;
            }
        }
        let chunked = summarize(result.and_then(|()| decoder.finish(&mut |k| k)));
        assert_eq!(
            chunked, whole,
            "chunks of up to {max_chunk} (margin {margin}) decode differently from the whole body"
        );
    }
    whole.map(|(items, meta, undecodable)| (items.len() + undecodable.len(), meta))
}

fn check_list(data: &[u8], page: Option<(usize, ListMeta)>) {
    let Some((n, meta)) = page else { return };
    // Fields the decoder skips are checked for JSON syntax but not for valid UTF-8 or escapes
    // (serde_json's `IgnoredAny`), so the reference parse repairs the bytes first and gives up on
    // what only a strict parser rejects.
    let Ok(value) = serde_json::from_str::<serde_json::Value>(&String::from_utf8_lossy(data))
    else {
        return;
    };
    let items = match value.get("items") {
        None | Some(serde_json::Value::Null) => 0,
        Some(serde_json::Value::Array(a)) => a.len(),
        Some(other) => panic!("decoded a list whose items are {other}"),
    };
    assert_eq!(n, items, "decoded item count differs from the JSON's");
    let json_rv = value
        .get("metadata")
        .and_then(|m| m.get("resourceVersion"))
        .and_then(|v| v.as_str());
    assert_eq!(
        meta.resource_version.as_deref(),
        json_rv,
        "list resourceVersion differs"
    );
}

/// Splits `body` into chunks of 1..=`max_chunk` bytes chosen by `seed` (one chunk if 0).
pub fn chunk(body: &[u8], seed: u8, max_chunk: u8) -> Vec<&[u8]> {
    if max_chunk == 0 {
        return vec![body];
    }
    // A tiny LCG: the chunking must be a pure function of the input for libFuzzer.
    let mut state = u32::from(seed).wrapping_mul(2_654_435_761).wrapping_add(1);
    let mut out = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        let n = ((state >> 16) as usize % usize::from(max_chunk)) + 1;
        let (head, tail) = rest.split_at(n.min(rest.len()));
        out.push(head);
        rest = tail;
    }
    out
}

/// The lines a framer must produce from `body`, and the unterminated tail it must keep.
fn reference_lines(body: &[u8]) -> (Vec<Vec<u8>>, &[u8]) {
    let mut parts: Vec<&[u8]> = body.split(|&b| b == b'\n').collect();
    let tail = parts.pop().unwrap_or_default();
    let lines = parts
        .into_iter()
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .filter(|l| !l.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    (lines, tail)
}

fn assert_same_envelope<A, B>(a: &WatchEvent<A>, b: &WatchEvent<B>) {
    match (a, b) {
        (WatchEvent::Added(_), WatchEvent::Added(_))
        | (WatchEvent::Modified(_), WatchEvent::Modified(_))
        | (WatchEvent::Deleted(_), WatchEvent::Deleted(_)) => {}
        (
            WatchEvent::Bookmark {
                resource_version: r1,
                initial_events_end: e1,
            },
            WatchEvent::Bookmark {
                resource_version: r2,
                initial_events_end: e2,
            },
        ) => assert_eq!((r1, e1), (r2, e2), "bookmark depends on the object type"),
        (WatchEvent::Error(s1), WatchEvent::Error(s2)) => {
            assert_eq!(s1, s2, "error status depends on the object type")
        }
        _ => panic!("event type depends on the object type"),
    }
}

fn body_stream(
    chunks: &[&[u8]],
    fail: bool,
) -> impl Stream<Item = Result<Bytes, kube::Error>> + Send + 'static {
    let mut items: Vec<Result<Bytes, kube::Error>> = chunks
        .iter()
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    if fail {
        items.push(Err(kube::Error::ReadEvents(std::io::Error::other(
            "connection reset",
        ))));
    }
    futures::stream::iter(items)
}

/// Collects a stream whose input is all ready; `Pending` would mean it waits for nothing (a hang).
fn drain<S: Stream>(stream: S) -> Vec<S::Item> {
    let mut stream = pin!(stream);
    let mut cx = Context::from_waker(futures::task::noop_waker_ref());
    let mut out = Vec::new();
    loop {
        match stream.poll_next_unpin(&mut cx) {
            Poll::Ready(Some(item)) => out.push(item),
            Poll::Ready(None) => return out,
            Poll::Pending => panic!("watch stream pending on a fully received body: would hang"),
        }
    }
}

/// Decodes `data` as a protobuf list body of `Pod`s, `DynamicObject`s and
/// `PartialObjectMeta<Pod>`s, whole and in chunks chosen by its bytes, and as a single object.
///
/// Invariants:
/// - the chunked decode gives what the whole-body decode gives (items, metadata, undecodable
///   items), whatever the chunking, and fails exactly when it fails;
/// - the three item types agree on the number of items plus undecodable items, and on the list
///   metadata, when all three decode;
/// - a decoder never buffers more than the body.
pub fn protobuf_list(data: &[u8]) {
    let pod = protobuf_list_and_chunked::<Pod>(data);
    let dynamic = protobuf_list_and_chunked::<DynamicObject>(data);
    let meta = protobuf_list_and_chunked::<PartialObjectMeta<Pod>>(data);
    if let (Some(a), Some(b), Some(c)) = (&pod, &dynamic, &meta) {
        assert_eq!(a.1, b.1, "list metadata depends on the item type");
        assert_eq!(a.1, c.1, "list metadata depends on the item type");
    }
    // The direct decoder against the serde path, the reference: whatever the reference decodes,
    // the direct decoder decodes the same. (The direct decoder may accept more: repeated
    // fields whose occurrences are interleaved with other fields, which protobuf allows.)
    for p in [Projection::none(), Projection::strip_managed_fields()] {
        if let Ok(want) = decode_object_via_serde::<Pod>(data, &p) {
            match decode_object::<Pod>(data, &p) {
                Ok(got) => assert_eq!(got, want, "the direct decoder differs from the serde path"),
                Err(e) => panic!("the serde path decodes what the direct decoder refuses: {e:?}"),
            }
        }
    }
    let _ = decode_object::<DynamicObject>(data, &Projection::strip_managed_fields());
    let whole = {
        let mut decoder = ProtobufListDecoder::<Pod, Pod>::new();
        decoder
            .push(data, &mut |k| k)
            .and_then(|()| decoder.finish(&mut |k| k))
            .ok()
    };
    check_listed(data, true, whole);
}

fn protobuf_list_and_chunked<K: DeserializeOwned + serde::Serialize + 'static>(
    data: &[u8],
) -> Option<(usize, ListMeta)> {
    let decode = |chunks: &[&[u8]]| {
        let mut decoder = ProtobufListDecoder::<K, K>::new();
        for c in chunks {
            decoder.push(c, &mut |k| k)?;
            assert!(
                decoder.buffered() <= data.len(),
                "buffered more than the body"
            );
        }
        decoder.finish(&mut |k| k)
    };
    let whole = summarize(decode(&[data]));
    let seed = data
        .iter()
        .fold(data.len() as u8, |a, &b| a.wrapping_mul(31) ^ b);
    for max_chunk in [1, 7, 64, 255] {
        let chunked = summarize(decode(&chunk(data, seed, max_chunk)));
        assert_eq!(
            chunked, whole,
            "chunks of up to {max_chunk} decode differently from the whole body"
        );
    }
    whole.map(|(items, meta, undecodable)| (items.len() + undecodable.len(), meta))
}

/// Largest frame [`protobuf_watch`] accepts: small, so the limit is reached.
pub const PROTOBUF_MAX_FRAME: usize = 4096;

/// Frames `data` (after the [`WATCH_HEADER_LEN`] header, as for [`watch_stream`]) as a protobuf
/// watch body in arbitrary chunks and decodes every frame as a `Pod`, a `DynamicObject` and a
/// `PartialObjectMeta<Pod>` event.
///
/// Invariants:
/// - the frames are exactly the body's length-prefixed frames, whatever the chunking, the
///   pending bytes what follows the last whole frame, and a declared length above the limit
///   fails the framer as soon as its prefix is in;
/// - an event's type and, for bookmarks and errors, its payload do not depend on the object type
///   it is decoded as.
pub fn protobuf_watch(data: &[u8]) {
    if data.len() < WATCH_HEADER_LEN {
        return;
    }
    let (seed, max_chunk) = (data[0], data[1] & 0x7f);
    let body = &data[WATCH_HEADER_LEN..];
    let (expected, tail, too_large) = reference_frames(body);
    let mut framer = LengthPrefixFramer::new(PROTOBUF_MAX_FRAME);
    let mut frames = Vec::new();
    let mut failed = false;
    for c in chunk(body, seed, max_chunk) {
        match framer.push(c) {
            Ok(f) => frames.extend(f),
            Err(_) => {
                failed = true;
                break;
            }
        }
    }
    assert_eq!(
        failed, too_large,
        "the framer fails exactly on a frame above the limit"
    );
    if !failed {
        assert_eq!(
            frames, expected,
            "framed frames differ from the body's frames"
        );
        assert_eq!(framer.pending(), tail, "pending tail differs");
    }
    for frame in &expected {
        let none = Projection::none();
        let pod = decode_watch_frame::<Pod>(frame, &none);
        let dynamic = decode_watch_frame::<DynamicObject>(frame, &none);
        let meta = decode_watch_frame::<PartialObjectMeta<Pod>>(frame, &none);
        if let (Ok(a), Ok(b)) = (&pod, &dynamic) {
            assert_same_envelope(a, b);
        }
        if let (Ok(a), Ok(b)) = (&pod, &meta) {
            assert_same_envelope(a, b);
        }
        check_raw_event(RawWatchEvent::protobuf_frame(frame.clone()));
    }
}

/// The frames a framer must produce from `body`, the tail it must keep, and whether a frame
/// declares a length above [`PROTOBUF_MAX_FRAME`].
fn reference_frames(body: &[u8]) -> (Vec<Vec<u8>>, &[u8], bool) {
    let mut frames = Vec::new();
    let mut rest = body;
    while rest.len() >= 4 {
        let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        if len > PROTOBUF_MAX_FRAME {
            return (frames, rest, true);
        }
        if rest.len() < 4 + len {
            break;
        }
        frames.push(rest[4..4 + len].to_vec());
        rest = &rest[4 + len..];
    }
    (frames, rest, false)
}

/// The compact cache's view of a list body (each item's metadata and bytes, not decoded by the
/// list decoder) against the decoded list `decoded` (`None` if the body does not decode).
///
/// Invariants:
/// - however the body is split into chunks, the items' metadata and what their bytes decode to
///   are the same, or the list fails either way;
/// - an item whose bytes decode has the metadata that was read for it;
/// - when both decode: the list metadata and the item count (decoded or reported) agree, and
///   the objects the items' bytes decode to are the decoded list's, in its order (the decoded
///   list may have more: metadata the compact read refuses leaves an item reported instead).
fn check_listed(data: &[u8], protobuf: bool, decoded: Option<ListPage<Pod>>) {
    let whole = listed_items::<Pod>(&[data], protobuf, 1 << 20);
    let seed = data
        .iter()
        .fold(data.len() as u8, |a, &b| a.wrapping_mul(17) ^ b);
    // Small margins, as in `list_decode`, so a JSON body is read item by item as it arrives.
    for (max_chunk, margin) in [(1, 0), (7, 3), (64, 16)] {
        let chunked = listed_items::<Pod>(&chunk(data, seed, max_chunk), protobuf, margin);
        assert_eq!(
            listed_summary(&chunked),
            listed_summary(&whole),
            "chunks of up to {max_chunk} (margin {margin}) read items differently from the whole body"
        );
    }
    let Ok(listed) = whole else { return };
    for (meta, obj) in &listed.items {
        if let Ok(obj) = obj {
            assert_meta(meta, obj);
        }
    }
    let Some(decoded) = decoded else { return };
    assert_eq!(
        listed.metadata, decoded.metadata,
        "list metadata differs between the compact read and the decoded list"
    );
    assert_eq!(
        listed.items.len() + listed.undecodable.len(),
        decoded.items.len() + decoded.undecodable.len(),
        "item count differs between the compact read and the decoded list"
    );
    let mut rest = decoded.items.iter();
    for obj in listed.items.iter().filter_map(|(_, o)| o.as_ref().ok()) {
        assert!(
            rest.any(|d| d == obj),
            "an item's bytes decode to an object the decoded list does not have in that place"
        );
    }
}

/// What [`listed_items`] gives, comparable across reads.
type ListedSummary = (
    Vec<(ListedMeta, Option<serde_json::Value>)>,
    ListMeta,
    Vec<Option<String>>,
);

fn listed_summary<E>(page: &Result<ListPage<ListedItem<Pod>>, E>) -> Option<ListedSummary> {
    let page = page.as_ref().ok()?;
    Some((
        page.items
            .iter()
            .map(|(meta, obj)| {
                let obj = obj
                    .as_ref()
                    .ok()
                    .map(|o| serde_json::to_value(o).expect("a decoded object serializes"));
                (meta.clone(), obj)
            })
            .collect(),
        page.metadata.clone(),
        page.undecodable
            .iter()
            .map(|u| u.key.as_ref().map(|k| k.as_str().to_owned()))
            .collect(),
    ))
}

/// The metadata a compact read took for an object is the object's.
fn assert_meta(meta: &ListedMeta, obj: &Pod) {
    let m = &obj.metadata;
    assert_eq!(meta.namespace, m.namespace, "namespace read differs");
    assert_eq!(meta.name, m.name, "name read differs");
    assert_eq!(
        meta.resource_version, m.resource_version,
        "resourceVersion read differs"
    );
    assert_eq!(meta.labels, m.labels, "labels read differ");
}

/// A watch event as the compact cache takes it against the decoded event.
///
/// Invariant: an `ADDED` or `MODIFIED` event that decodes is taken as that type, either as the
/// same decoded event (metadata the compact read refuses) or as metadata and bytes that decode
/// to the same object, the metadata the object's. The compact read may take more than the
/// decoder: a JSON event whose object comes before its type is buffered whole by the decoder,
/// which checks values (`1e999`, lone surrogates) that skipping does not, and one level of
/// nesting more; a server sends neither.
fn check_raw_event(raw: RawWatchEvent) {
    let decoded = raw.decode::<Pod>(&Projection::none());
    let item = raw.into_item::<Pod>();
    if let Ok(WatchItem::Added(b) | WatchItem::Modified(b)) = &item
        && let Ok(obj) = b.bytes().decode::<Pod>()
    {
        assert_meta(b.meta(), &obj);
    }
    let (added, want) = match decoded {
        Ok(WatchEvent::Added(d)) => (true, d),
        Ok(WatchEvent::Modified(d)) => (false, d),
        _ => return,
    };
    match item {
        Ok(WatchItem::Added(b)) if added => assert_eq!(b.bytes().decode::<Pod>().ok(), Some(want)),
        Ok(WatchItem::Modified(b)) if !added => {
            assert_eq!(b.bytes().decode::<Pod>().ok(), Some(want));
        }
        Ok(WatchItem::Event(WatchEvent::Added(d))) if added => assert_eq!(d, want),
        Ok(WatchItem::Event(WatchEvent::Modified(d))) if !added => assert_eq!(d, want),
        other => panic!(
            "an {} event that decodes is taken as {other:?}",
            if added { "ADDED" } else { "MODIFIED" }
        ),
    }
}
