//! Decoding list bodies and watch streams straight from bytes.
//!
//! kube's own list path collects the body, copies it into a `String` and decodes through
//! `ObjectList<K>`, whose `#[serde(flatten)]` type metadata makes serde buffer the whole document
//! (items included) before decoding it a second time. The reflector instead decodes the bytes once,
//! with a list shape that only names the two fields it needs, and frames watch streams itself so
//! each event line is decoded from the received bytes without a UTF-8 copy.

use std::{fmt, marker::PhantomData};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use kube::core::Status;
use serde::{
    Deserialize, Deserializer,
    de::{self, DeserializeOwned, IgnoredAny, MapAccess, Visitor},
};

/// The annotation on the bookmark that ends a streaming initial list (KEP-3157).
pub const INITIAL_EVENTS_END_ANNOTATION: &str = "k8s.io/initial-events-end";

/// A decoded list response: its metadata and items, oldest first as the server sent them.
#[derive(Debug)]
pub struct ListPage<K> {
    /// The list's `metadata`: `resourceVersion`, `continue`, `remainingItemCount`.
    pub metadata: ListMeta,
    /// The objects.
    pub items: Vec<K>,
}

impl<'de, K: Deserialize<'de>> Deserialize<'de> for ListPage<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct PageVisitor<K>(PhantomData<K>);
        impl<'de, K: Deserialize<'de>> Visitor<'de> for PageVisitor<K> {
            type Value = ListPage<K>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a Kubernetes list object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut metadata = None;
                let mut items = None;
                while let Some(key) = map.next_key::<FieldName>()? {
                    match key {
                        FieldName::Metadata => metadata = Some(map.next_value()?),
                        FieldName::Items => {
                            items = map.next_value::<Option<Vec<K>>>()?;
                        }
                        FieldName::Other => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(ListPage {
                    metadata: metadata.unwrap_or_default(),
                    items: items.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_map(PageVisitor(PhantomData))
    }
}

enum FieldName {
    Metadata,
    Items,
    Other,
}

impl<'de> Deserialize<'de> for FieldName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = FieldName;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<FieldName, E> {
                Ok(match v {
                    "metadata" => FieldName::Metadata,
                    "items" => FieldName::Items,
                    _ => FieldName::Other,
                })
            }
        }
        deserializer.deserialize_identifier(V)
    }
}

/// Why a list body or a watch line could not be decoded.
#[derive(Debug, thiserror::Error)]
#[error("cannot decode {what}: {source}")]
pub struct DecodeError {
    what: &'static str,
    #[source]
    source: serde_json::Error,
}

/// Decodes a list response body.
///
/// # Errors
///
/// [`DecodeError`] when the bytes are not a JSON list of `K`.
pub fn decode_list<K: DeserializeOwned>(body: &[u8]) -> Result<ListPage<K>, DecodeError> {
    serde_json::from_slice(body).map_err(|source| DecodeError {
        what: "list",
        source,
    })
}

/// One event of a watch stream.
#[derive(Debug)]
pub enum WatchEvent<K> {
    /// `ADDED`
    Added(K),
    /// `MODIFIED`
    Modified(K),
    /// `DELETED`
    Deleted(K),
    /// `BOOKMARK`: a new resourceVersion, and whether it ends a streaming initial list.
    Bookmark {
        /// The bookmark's `metadata.resourceVersion`.
        resource_version: String,
        /// True on the bookmark annotated `k8s.io/initial-events-end: "true"`.
        initial_events_end: bool,
    },
    /// `ERROR`: the server ended the watch with a `Status` (410 Gone for an expired RV).
    Error(Box<Status>),
}

#[derive(Deserialize)]
#[serde(rename_all = "UPPERCASE")]
enum EventType {
    Added,
    Modified,
    Deleted,
    Bookmark,
    Error,
}

#[derive(Deserialize)]
struct BookmarkObject {
    #[serde(default)]
    metadata: BookmarkMeta,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct BookmarkMeta {
    #[serde(default)]
    resource_version: String,
    #[serde(default)]
    annotations: Option<std::collections::BTreeMap<String, String>>,
}

impl<K: DeserializeOwned> WatchEvent<K> {
    fn from_parts<'de, D: Deserializer<'de>>(ty: EventType, obj: D) -> Result<Self, D::Error> {
        Ok(match ty {
            EventType::Added => WatchEvent::Added(K::deserialize(obj)?),
            EventType::Modified => WatchEvent::Modified(K::deserialize(obj)?),
            EventType::Deleted => WatchEvent::Deleted(K::deserialize(obj)?),
            EventType::Error => WatchEvent::Error(Box::new(Status::deserialize(obj)?)),
            EventType::Bookmark => {
                let b = BookmarkObject::deserialize(obj)?;
                let end = b
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(INITIAL_EVENTS_END_ANNOTATION))
                    .is_some_and(|v| v == "true");
                WatchEvent::Bookmark {
                    resource_version: b.metadata.resource_version,
                    initial_events_end: end,
                }
            }
        })
    }
}

enum EventField {
    Type,
    Object,
    Other,
}

impl<'de> Deserialize<'de> for EventField {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = EventField;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<EventField, E> {
                Ok(match v {
                    "type" => EventField::Type,
                    "object" => EventField::Object,
                    _ => EventField::Other,
                })
            }
        }
        deserializer.deserialize_identifier(V)
    }
}

struct ObjectSeed<K>(EventType, PhantomData<K>);

impl<'de, K: DeserializeOwned> de::DeserializeSeed<'de> for ObjectSeed<K> {
    type Value = WatchEvent<K>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        WatchEvent::from_parts(self.0, deserializer)
    }
}

impl<'de, K: DeserializeOwned> Deserialize<'de> for WatchEvent<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EventVisitor<K>(PhantomData<K>);
        impl<'de, K: DeserializeOwned> Visitor<'de> for EventVisitor<K> {
            type Value = WatchEvent<K>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a watch event {\"type\": ..., \"object\": ...}")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                // The API server writes "type" before "object", so the object is decoded
                // straight into its final type; the other order costs one buffered copy.
                let mut ty: Option<EventType> = None;
                let mut early: Option<serde_json::Value> = None;
                let mut event = None;
                while let Some(key) = map.next_key::<EventField>()? {
                    match key {
                        EventField::Type if ty.is_some() || event.is_some() => {
                            return Err(de::Error::duplicate_field("type"));
                        }
                        EventField::Type => ty = Some(map.next_value()?),
                        EventField::Object if event.is_some() || early.is_some() => {
                            return Err(de::Error::duplicate_field("object"));
                        }
                        EventField::Object => match ty.take() {
                            Some(t) => {
                                event = Some(map.next_value_seed(ObjectSeed::<K>(t, PhantomData))?)
                            }
                            None => early = Some(map.next_value()?),
                        },
                        EventField::Other => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                match (event, ty, early) {
                    (Some(event), None, None) => Ok(event),
                    (None, Some(t), Some(obj)) => {
                        WatchEvent::from_parts(t, obj).map_err(de::Error::custom)
                    }
                    (None, None, _) => Err(de::Error::missing_field("type")),
                    _ => Err(de::Error::missing_field("object")),
                }
            }
        }
        deserializer.deserialize_map(EventVisitor(PhantomData))
    }
}

/// Decodes one watch event line (without its trailing newline).
///
/// # Errors
///
/// [`DecodeError`] when the line is not a JSON watch event carrying a `K`.
pub fn decode_watch_event<K: DeserializeOwned>(line: &[u8]) -> Result<WatchEvent<K>, DecodeError> {
    serde_json::from_slice(line).map_err(|source| DecodeError {
        what: "watch event",
        source,
    })
}

/// Splits a watch response body into lines as chunks arrive.
///
/// Chunk boundaries are arbitrary (an event may span many chunks, a chunk may hold many events);
/// the framer keeps the unfinished tail and hands out each complete line once. Empty lines are
/// skipped.
#[derive(Debug, Default)]
pub struct LineFramer {
    buf: Vec<u8>,
    /// How far `buf` has already been searched for a newline, so a large event arriving in many
    /// small chunks is scanned once, not once per chunk.
    scanned: usize,
}

impl LineFramer {
    /// A framer with nothing buffered.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends received bytes and returns every line they complete.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<Vec<u8>> {
        let mut lines = Vec::new();
        let mut rest = chunk;
        // Fast path: nothing buffered, split the chunk in place.
        if self.buf.is_empty() {
            while let Some(pos) = memchr(b'\n', rest) {
                let line = trim_cr(&rest[..pos]);
                if !line.is_empty() {
                    lines.push(line.to_vec());
                }
                rest = &rest[pos + 1..];
            }
            self.buf.extend_from_slice(rest);
            self.scanned = self.buf.len();
            return lines;
        }
        self.buf.extend_from_slice(rest);
        let mut start = 0;
        let mut search_from = self.scanned;
        while let Some(pos) = memchr(b'\n', &self.buf[search_from..]) {
            let end = search_from + pos;
            let line = trim_cr(&self.buf[start..end]);
            if !line.is_empty() {
                lines.push(line.to_vec());
            }
            start = end + 1;
            search_from = start;
        }
        self.buf.drain(..start);
        self.scanned = self.buf.len();
        lines
    }

    /// Bytes received after the last newline (an event cut off by a dropped connection).
    pub fn pending(&self) -> &[u8] {
        &self.buf
    }
}

fn trim_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

fn memchr(needle: u8, haystack: &[u8]) -> Option<usize> {
    // SIMD search: every watch byte is scanned for the newline, so a byte-at-a-time loop cost
    // about 3% of the CPU per event in the watch benchmark (S2, BENCHMARKS.md).
    memchr::memchr(needle, haystack)
}

#[cfg(test)]
mod tests {
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
}
