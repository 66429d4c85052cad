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
    de::{self, DeserializeOwned, DeserializeSeed, IgnoredAny, MapAccess, Visitor},
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
    /// Items of a well-formed list that do not decode as `K` (for example a custom resource
    /// written under a newer schema): left out of `items`, so one bad object cannot keep a whole
    /// informer from syncing; the reflector reports each.
    pub undecodable: Vec<UndecodableObject>,
}

impl<K> ListPage<K> {
    /// A page of `items` with the given list metadata.
    pub fn new(metadata: ListMeta, items: Vec<K>) -> Self {
        Self {
            metadata,
            items,
            undecodable: Vec::new(),
        }
    }
}

/// An object the server sent that does not decode as the informer's type: what could be read of
/// it (never its contents), and why.
#[derive(Debug, thiserror::Error)]
#[error(
    "{} object {} at resourceVersion {} does not decode: {error}",
    if event_type.is_empty() { "listed" } else { event_type.as_str() },
    key.as_ref().map_or("<unnamed>", |k| k.as_str()),
    resource_version.as_deref().unwrap_or("?")
)]
pub struct UndecodableObject {
    /// The watch event type (`ADDED`, `MODIFIED`, `DELETED`), empty for a list item.
    pub event_type: String,
    /// The object's key, when its metadata could be read.
    pub key: Option<crate::store::ObjectKey>,
    /// The object's resourceVersion, when its metadata could be read.
    pub resource_version: Option<String>,
    /// The decoding error (redacted: it never quotes the object).
    pub error: DecodeError,
}

/// The parts of an object that identify it, read leniently.
#[derive(Deserialize, Default)]
struct PeekObject {
    #[serde(default)]
    metadata: PeekMeta,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct PeekMeta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    resource_version: Option<String>,
}

#[derive(Deserialize)]
struct PeekEvent {
    #[serde(rename = "type")]
    event_type: String,
    #[serde(default)]
    object: PeekObject,
}

impl PeekObject {
    fn into_undecodable(self, event_type: String, error: DecodeError) -> UndecodableObject {
        let m = self.metadata;
        let key = m
            .name
            .as_deref()
            .and_then(|n| crate::store::ObjectKey::new(m.namespace.as_deref(), n).ok());
        UndecodableObject {
            event_type,
            key,
            resource_version: m.resource_version,
            error,
        }
    }
}

/// After `decode_watch_event` failed: is the line a well-formed event whose object merely does
/// not fit `K`? Then the watch can skip it instead of failing.
pub(crate) fn undecodable_event(
    line: &[u8],
    error: DecodeError,
) -> Result<UndecodableObject, DecodeError> {
    match serde_json::from_slice::<PeekEvent>(line) {
        Ok(ev) if matches!(ev.event_type.as_str(), "ADDED" | "MODIFIED" | "DELETED") => {
            let u = ev.object.into_undecodable(ev.event_type, error);
            if u.resource_version.is_some() {
                Ok(u)
            } else {
                Err(u.error)
            }
        }
        _ => Err(error),
    }
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
                    undecodable: Vec::new(),
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
///
/// Its `Display` and `Debug` never quote the bytes that failed: serde's messages do ("invalid
/// type: string \"...\""), and for a Secret those bytes are its data, which would then reach the
/// logs through the reflector's error handler. Syntax errors keep serde's message (it names no
/// input); data errors keep its shape with every quoted value replaced by `…`, and messages of
/// unknown shape (custom ones, such as base64 errors naming a byte) are withheld. The serde error
/// itself is not a `source()`, since error-chain reporters print sources;
/// [`DecodeError::unredacted`] gives it to code that knows where it goes.
#[derive(thiserror::Error)]
#[error("cannot decode {what}: {}", redacted(.error))]
pub struct DecodeError {
    what: &'static str,
    // Not named `source`: thiserror would make it one.
    error: serde_json::Error,
}

impl fmt::Debug for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DecodeError")
            .field("what", &self.what)
            .field("error", &redacted(&self.error))
            .finish()
    }
}

impl DecodeError {
    /// The serde error, unredacted: its message may quote the offending value (for a Secret, its
    /// data), so keep it out of logs that must not carry object contents.
    pub fn unredacted(&self) -> &serde_json::Error {
        &self.error
    }
}

/// serde's messages of these shapes quote input only between `"` or `` ` ``.
const KNOWN_DATA_MESSAGES: &[&str] = &[
    "invalid type: ",
    "invalid value: ",
    "invalid length ",
    "unknown variant ",
    "unknown field ",
];

/// `e`'s message with nothing of the input in it (see [`DecodeError`]).
fn redacted(e: &serde_json::Error) -> String {
    let full = e.to_string();
    if !e.is_data() {
        // Syntax, EOF and I/O messages are fixed texts plus a position.
        return full;
    }
    let position = match e.line() {
        0 => String::new(),
        line => format!(" at line {line} column {}", e.column()),
    };
    let msg = full.strip_suffix(&position).unwrap_or(&full);
    // Field names in these come from the Rust type, not from the input.
    if msg.starts_with("missing field `") || msg.starts_with("duplicate field `") {
        return full;
    }
    if !KNOWN_DATA_MESSAGES.iter().any(|p| msg.starts_with(p)) {
        return format!("invalid data{position} (details withheld: they may quote the object)");
    }
    let mut out = String::with_capacity(msg.len() + position.len());
    // The delimiter of the quoted span being skipped, and whether the last char was a `\`.
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in msg.chars() {
        match quote {
            None => {
                out.push(c);
                if c == '"' || c == '`' {
                    out.push('…');
                    quote = Some(c);
                }
            }
            // serde quotes strings with Rust escapes, so `\"` does not end one.
            Some('"') if escaped => escaped = false,
            Some('"') if c == '\\' => escaped = true,
            Some(q) if c == q => {
                out.push(c);
                quote = None;
            }
            Some(_) => {}
        }
    }
    out.push_str(&position);
    out
}

/// Decodes a list response body.
///
/// # Errors
///
/// [`DecodeError`] when the bytes are not a JSON list.
///
/// One pass straight into `K`; only when that fails is the body read again item by item, so that
/// the items that do decode are kept and the others reported in
/// [`ListPage::undecodable`].
pub fn decode_list<K: DeserializeOwned>(body: &[u8]) -> Result<ListPage<K>, DecodeError> {
    decode_list_map(body, &mut |k| k)
}

/// Decodes a list body like [`decode_list`], handing each item to `map` as soon as it is
/// decoded, so a caller can drop what it does not need before the next item is decoded. A relist
/// of a large, mostly unchanged collection then peaks at the cache plus what changed, instead of
/// the cache plus a second full copy.
///
/// # Errors
///
/// As [`decode_list`].
pub fn decode_list_map<K: DeserializeOwned, T>(
    body: &[u8],
    map: &mut dyn FnMut(K) -> T,
) -> Result<ListPage<T>, DecodeError> {
    let error = {
        let mut de = serde_json::Deserializer::from_slice(body);
        let seed = PageSeed { map: &mut *map };
        match seed.deserialize(&mut de).and_then(|page| {
            de.end()?;
            Ok(page)
        }) {
            Ok(page) => return Ok(page),
            Err(error) => DecodeError {
                what: "list",
                error,
            },
        }
    };
    let Ok(raw) = serde_json::from_slice::<ListPage<serde_json::Value>>(body) else {
        return Err(error);
    };
    let mut page = ListPage::new(raw.metadata, Vec::with_capacity(raw.items.len()));
    for item in raw.items {
        match K::deserialize(&item) {
            Ok(obj) => page.items.push(map(obj)),
            Err(error) => {
                let peek = PeekObject::deserialize(&item).unwrap_or_default();
                page.undecodable.push(peek.into_undecodable(
                    String::new(),
                    DecodeError {
                        what: "list item",
                        error,
                    },
                ));
            }
        }
    }
    Ok(page)
}

/// Decodes a list page, mapping each item as it is decoded.
struct PageSeed<'m, K, T> {
    map: &'m mut dyn FnMut(K) -> T,
}

impl<'de, K: DeserializeOwned, T> de::DeserializeSeed<'de> for PageSeed<'_, K, T> {
    type Value = ListPage<T>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de, K: DeserializeOwned, T> Visitor<'de> for PageSeed<'_, K, T> {
    type Value = ListPage<T>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Kubernetes list object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut metadata = None;
        let mut items = Vec::new();
        while let Some(key) = map.next_key::<FieldName>()? {
            match key {
                FieldName::Metadata => metadata = Some(map.next_value()?),
                FieldName::Items => {
                    map.next_value_seed(ItemsSeed {
                        map: &mut *self.map,
                        out: &mut items,
                    })?;
                }
                FieldName::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(ListPage::new(metadata.unwrap_or_default(), items))
    }
}

/// The `items` array (or `null`), mapped element by element.
struct ItemsSeed<'m, 'o, K, T> {
    map: &'m mut dyn FnMut(K) -> T,
    out: &'o mut Vec<T>,
}

impl<'de, K: DeserializeOwned, T> de::DeserializeSeed<'de> for ItemsSeed<'_, '_, K, T> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_option(self)
    }
}

impl<'de, K: DeserializeOwned, T> Visitor<'de> for ItemsSeed<'_, '_, K, T> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of objects or null")
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        if let Some(n) = seq.size_hint() {
            self.out.reserve(n);
        }
        while let Some(item) = seq.next_element::<K>()? {
            self.out.push((self.map)(item));
        }
        Ok(())
    }
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
    serde_json::from_slice(line).map_err(|error| DecodeError {
        what: "watch event",
        error,
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
            // invalid value from a custom message (a bad timestamp)
            format!(
                r#"{{"type":"ADDED","object":{{"metadata":{{"creationTimestamp":"{canary}"}}}}}}"#
            ),
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

    #[test]
    fn list_keeps_decodable_items_and_reports_the_others() {
        let body = br#"{"metadata":{"resourceVersion":"9"},"items":[
            {"metadata":{"name":"a","namespace":"n","resourceVersion":"3"},"data":{"k":"v"}},
            {"metadata":{"name":"b","namespace":"n","resourceVersion":"4"},"data":"not a map"},
            {"metadata":{"name":"c","namespace":"n","resourceVersion":"5"}}]}"#;
        let page = decode_list::<ConfigMap>(body).unwrap();
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
        assert!(!u.to_string().contains("not a map"), "{u}");
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
        assert!(
            decode_list_map::<ConfigMap, ()>(br#"{"items":[]} trailing"#, &mut |_| ()).is_err()
        );
    }
}
