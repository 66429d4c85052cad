//! Decoding list bodies and watch streams straight from bytes.
//!
//! kube's own list path collects the body, copies it into a `String` and decodes through
//! `ObjectList<K>`, whose `#[serde(flatten)]` type metadata makes serde buffer the whole document
//! (items included) before decoding it a second time. The reflector instead decodes the bytes once,
//! as they arrive ([`ListDecoder`]: each item as soon as its bytes are in, holding a window of about
//! a megabyte of the body rather than all of it), and frames watch streams itself so each event
//! line is decoded from the received bytes without a UTF-8 copy.

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
///
/// A list body is decoded one value at a time ([`ListDecoder`]), so for a list the message also
/// names the body offset of the failing value ([`DecodeError::body_offset`]), and serde's line
/// and column count from there. Errors in the list's own shape (a missing `,`, trailing bytes)
/// are fixed messages, which serde classifies as data errors.
#[derive(thiserror::Error)]
#[error("cannot decode {what}{}: {}", at_offset(*.offset), redacted(.error))]
pub struct DecodeError {
    what: &'static str,
    // Not named `source`: thiserror would make it one.
    error: serde_json::Error,
    /// Where in a list body the failing value (or token) starts: a list is decoded value by
    /// value, so serde's line and column count from there.
    offset: Option<u64>,
}

fn at_offset(offset: Option<u64>) -> String {
    offset.map_or_else(String::new, |o| format!(" at body byte {o}"))
}

impl fmt::Debug for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DecodeError")
            .field("what", &self.what)
            .field("error", &redacted(&self.error))
            .field("offset", &self.offset)
            .finish()
    }
}

impl DecodeError {
    /// The serde error, unredacted: its message may quote the offending value (for a Secret, its
    /// data), so keep it out of logs that must not carry object contents.
    pub fn unredacted(&self) -> &serde_json::Error {
        &self.error
    }

    /// For a list body: the byte offset in the body of the value (or token) that failed to
    /// decode. serde's line and column in the message count from there, since a list is decoded
    /// one value at a time.
    pub fn body_offset(&self) -> Option<u64> {
        self.offset
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
    if !e.is_data() || STRUCTURE_MESSAGES.contains(&full.as_str()) {
        // Syntax, EOF and I/O messages are fixed texts plus a position; so are the list
        // decoder's own messages about the list's shape.
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
/// Items that are well-formed JSON but do not decode as `K` are left out and reported in
/// [`ListPage::undecodable`]; the others are kept.
pub fn decode_list<K: DeserializeOwned>(body: &[u8]) -> Result<ListPage<K>, DecodeError> {
    decode_list_map(body, &mut |k| k)
}

/// Decodes a list body like [`decode_list`], handing each item to `map` as soon as it is
/// decoded, so a caller can drop what it does not need before the next item is decoded. A relist
/// of a large, mostly unchanged collection then peaks at the cache plus what changed, instead of
/// the cache plus a second full copy.
///
/// This is [`ListDecoder`] fed the whole body at once; a body that arrives in chunks is better
/// fed to a [`ListDecoder`] chunk by chunk.
///
/// # Errors
///
/// As [`decode_list`].
pub fn decode_list_map<K: DeserializeOwned, T>(
    body: &[u8],
    map: &mut dyn FnMut(K) -> T,
) -> Result<ListPage<T>, DecodeError> {
    let mut decoder = ListDecoder::new();
    decoder.push(body, map)?;
    decoder.finish(map)
}

/// How many undecoded bytes [`ListDecoder`] waits for before it tries to decode a value.
///
/// An attempt on a value whose end has not arrived yet is wasted work (serde cannot resume it), so
/// the decoder waits until this much is buffered: larger than all but the largest objects (a Pod
/// is 2 to 10 KiB, a large ConfigMap up to the 1 MiB etcd limit), small next to the memory the
/// decoded objects take. A larger value is retried each time the buffer has doubled, so its total
/// parsing cost stays within twice its size.
pub const LIST_DECODER_MARGIN: usize = 256 * 1024;

/// Consumed bytes are dropped from the front of the window once this many have accumulated, so
/// the memmove of the unconsumed tail (about [`LIST_DECODER_MARGIN`]) happens once per MiB of
/// body rather than once per chunk.
const COMPACT_AT: usize = 1 << 20;

/// The list decoder's own messages about the list's shape: fixed texts that quote nothing, so
/// [`redacted`] lets them through.
const STRUCTURE_MESSAGES: &[&str] = &[
    "expected `{` at the start of a list",
    "expected a field name or `}`",
    "expected a field name",
    "expected `:` after a field name",
    "expected `,` or `}` after a field of the list",
    "expected `,` or `]` after a list item",
    "trailing characters after the list",
    "EOF while parsing the list",
    "list decoder used after an error",
];

fn structure_error(message: &'static str, offset: u64) -> DecodeError {
    debug_assert!(STRUCTURE_MESSAGES.contains(&message));
    DecodeError {
        what: "list",
        error: de::Error::custom(message),
        offset: Some(offset),
    }
}

/// Decodes a list response body incrementally, as its chunks arrive.
///
/// Each item is decoded and handed to the `map` closure as soon as its bytes (plus a margin, see
/// [`LIST_DECODER_MARGIN`]) have arrived, and the bytes already decoded are dropped, so decoding a
/// list holds a window of about a megabyte of the body instead of the whole body: for 50,000 Pods
/// that is hundreds of megabytes less at the peak of a relist. The result is exactly what
/// [`decode_list_map`] gives for the whole body, however the body is split.
///
/// The top-level object's fields may come in any order (`metadata` after `items` is fine),
/// unknown fields are skipped, and `items` may be `null` or missing (no items). Items that are
/// well-formed JSON but do not decode as `K` are skipped and reported in
/// [`ListPage::undecodable`].
///
/// Useful to a custom [`ListerWatcher`](super::ListerWatcher) that receives list bodies in
/// chunks:
///
/// ```
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kube_informer::reflector::decode::ListDecoder;
///
/// let body = br#"{"kind":"ConfigMapList","items":[{"metadata":{"name":"a"}}],"metadata":{"resourceVersion":"7"}}"#;
/// let mut names = |cm: ConfigMap| cm.metadata.name.unwrap_or_default();
/// let mut decoder = ListDecoder::<ConfigMap, String>::new();
/// for chunk in body.chunks(10) {
///     decoder.push(chunk, &mut names)?;
/// }
/// let page = decoder.finish(&mut names)?;
/// assert_eq!(page.items, ["a"]);
/// assert_eq!(page.metadata.resource_version.as_deref(), Some("7"));
/// # Ok::<(), kube_informer::reflector::decode::DecodeError>(())
/// ```
pub struct ListDecoder<K, T> {
    /// Received bytes not yet dropped; `buf[pos..]` is not decoded yet.
    buf: Vec<u8>,
    pos: usize,
    parser: ListParser<K, T>,
}

impl<K, T> fmt::Debug for ListDecoder<K, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListDecoder")
            .field("buffered", &(self.buf.len() - self.pos))
            .field("decoded_bytes", &self.parser.offset)
            .field("items", &self.parser.items.len())
            .field("undecodable", &self.parser.undecodable.len())
            .finish()
    }
}

impl<K: DeserializeOwned, T> Default for ListDecoder<K, T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: DeserializeOwned, T> ListDecoder<K, T> {
    /// A decoder at the start of a body.
    pub fn new() -> Self {
        Self::with_margin(LIST_DECODER_MARGIN)
    }

    /// A decoder that tries to decode a value once `margin` undecoded bytes are buffered instead
    /// of [`LIST_DECODER_MARGIN`]. The result does not depend on it (only the work wasted on
    /// values that have not fully arrived does); tests use small margins to exercise every split.
    pub fn with_margin(margin: usize) -> Self {
        Self {
            buf: Vec::new(),
            pos: 0,
            parser: ListParser {
                state: State::Start,
                offset: 0,
                margin,
                retry_at: margin,
                metadata: None,
                items: Vec::new(),
                undecodable: Vec::new(),
                _k: PhantomData,
            },
        }
    }

    /// Appends the next chunk of the body and decodes every item it completes, handing each to
    /// `map` in order.
    ///
    /// # Errors
    ///
    /// [`DecodeError`] when the bytes so far cannot be the start of a JSON list. The decoder is
    /// then spent: later calls fail too.
    pub fn push(&mut self, chunk: &[u8], map: &mut dyn FnMut(K) -> T) -> Result<(), DecodeError> {
        if self.pos == self.buf.len() {
            // Nothing pending: decode straight from the chunk and keep only its undecoded tail,
            // so a whole body pushed at once is never copied.
            self.buf.clear();
            self.pos = 0;
            let used = self.parser.run(chunk, false, map)?;
            self.buf.extend_from_slice(&chunk[used..]);
            return Ok(());
        }
        self.buf.extend_from_slice(chunk);
        self.pos += self.parser.run(&self.buf[self.pos..], false, map)?;
        if self.pos >= COMPACT_AT {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        Ok(())
    }

    /// Bytes received and not yet decoded: the value being received (plus what may follow it in
    /// the last chunk). A caller bounds memory by failing the body once this passes its limit.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Ends the body: decodes what is still buffered and returns the page.
    ///
    /// # Errors
    ///
    /// [`DecodeError`] when the body is not a whole JSON list: truncated, malformed, or followed
    /// by anything but whitespace.
    pub fn finish(mut self, map: &mut dyn FnMut(K) -> T) -> Result<ListPage<T>, DecodeError> {
        self.parser.run(&self.buf[self.pos..], true, map)?;
        let p = self.parser;
        Ok(ListPage {
            metadata: p.metadata.unwrap_or_default(),
            items: p.items,
            undecodable: p.undecodable,
        })
    }
}

/// Where the list parser is in the top-level object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before the opening `{`.
    Start,
    /// After `{`: a field name or `}`.
    FirstKey,
    /// After `,`: a field name.
    Key,
    /// After a field name: `:`.
    Colon(FieldName),
    /// After `:`: the field's value.
    Value(FieldName),
    /// After a field's value: `,` or `}`.
    AfterValue,
    /// After `items: [`: an item or `]`.
    FirstItem,
    /// After `,` in `items`: an item.
    Item,
    /// After an item: `,` or `]`.
    AfterItem,
    /// After the closing `}`: only whitespace.
    Done,
    /// An error was returned.
    Failed,
}

/// The decoder's state apart from its byte window, so it can run over the window or straight
/// over a chunk.
struct ListParser<K, T> {
    state: State,
    /// Body offset of the first byte `run` is given.
    offset: u64,
    margin: usize,
    /// Undecoded bytes needed before the next attempt at a value.
    retry_at: usize,
    metadata: Option<ListMeta>,
    items: Vec<T>,
    undecodable: Vec<UndecodableObject>,
    _k: PhantomData<fn() -> K>,
}

/// One attempt at decoding the value at the start of a slice.
enum Attempt<V> {
    /// The value and how many bytes it took.
    Done(V, usize),
    /// Its end has not arrived.
    Wait,
    /// It cannot be decoded, whatever follows.
    Failed(serde_json::Error),
}

/// Decodes one JSON value of type `V` from the start of `data` (which starts at a non-whitespace
/// byte).
fn attempt<V: DeserializeOwned>(data: &[u8], finished: bool) -> Attempt<V> {
    let mut values = serde_json::Deserializer::from_slice(data).into_iter::<V>();
    match values.next() {
        // A value that ends exactly where the bytes do may be cut short (a number, `12` of
        // `1234`), so it is only taken once a byte after it, or the end of the body, is seen.
        Some(Ok(v)) if finished || values.byte_offset() < data.len() => {
            Attempt::Done(v, values.byte_offset())
        }
        Some(Ok(_)) => Attempt::Wait,
        // Not only EOF errors come from a cut: `2.` and `1e` are "invalid number"s, so a syntax
        // error at the last byte also waits (if it is real, it is met again with more bytes).
        Some(Err(e)) if !finished && (e.is_eof() || (e.is_syntax() && at_end(data, &e))) => {
            Attempt::Wait
        }
        Some(Err(e)) => Attempt::Failed(e),
        // Only reached for data made of whitespace, which the caller skips.
        None => Attempt::Wait,
    }
}

/// Whether serde's error `e` on `data` points at its last byte or past it.
fn at_end(data: &[u8], e: &serde_json::Error) -> bool {
    // serde_json counts lines from 1 and columns as bytes after the line's start.
    let line_start = match e.line() {
        0 | 1 => 0,
        line => memchr::memchr_iter(b'\n', data)
            .nth(line - 2)
            .map_or(data.len(), |nl| nl + 1),
    };
    line_start + e.column() + 1 >= data.len()
}

impl<K: DeserializeOwned, T> ListParser<K, T> {
    /// Decodes what it can of `data` (the bytes after those already consumed) and returns how
    /// many bytes it consumed. With `finished`, `data` is the rest of the body and must complete
    /// the list.
    fn run(
        &mut self,
        data: &[u8],
        finished: bool,
        map: &mut dyn FnMut(K) -> T,
    ) -> Result<usize, DecodeError> {
        if self.state == State::Failed {
            return Err(structure_error(
                "list decoder used after an error",
                self.offset,
            ));
        }
        let mut i = 0;
        let result = self.run_from(data, &mut i, finished, map);
        self.offset += i as u64;
        if result.is_err() {
            self.state = State::Failed;
        }
        result.map(|()| i)
    }

    fn run_from(
        &mut self,
        data: &[u8],
        i: &mut usize,
        finished: bool,
        map: &mut dyn FnMut(K) -> T,
    ) -> Result<(), DecodeError> {
        loop {
            // JSON's four whitespace bytes (`is_ascii_whitespace` would also take form feed).
            while matches!(data.get(*i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
                *i += 1;
            }
            let at = self.offset + *i as u64;
            let Some(&byte) = data.get(*i) else {
                return match (finished, self.state) {
                    (false, _) | (true, State::Done) => Ok(()),
                    (true, _) => Err(structure_error("EOF while parsing the list", at)),
                };
            };
            // Structural bytes are taken by hand; values go to serde below.
            let next = match (self.state, byte) {
                (State::Start, b'{') => State::FirstKey,
                (State::Start, _) => {
                    return Err(structure_error("expected `{` at the start of a list", at));
                }
                (State::FirstKey, b'}') => State::Done,
                (State::FirstKey | State::Key, b'"') => {
                    match self.value::<FieldName>(&data[*i..], finished, "list", at)? {
                        Some((field, len)) => {
                            *i += len;
                            self.state = State::Colon(field);
                            continue;
                        }
                        None => return Ok(()),
                    }
                }
                (State::FirstKey, _) => {
                    return Err(structure_error("expected a field name or `}`", at));
                }
                (State::Key, _) => return Err(structure_error("expected a field name", at)),
                (State::Colon(field), b':') => State::Value(field),
                (State::Colon(_), _) => {
                    return Err(structure_error("expected `:` after a field name", at));
                }
                (State::Value(FieldName::Items), b'[') => State::FirstItem,
                (State::Value(field), _) => {
                    let rest = &data[*i..];
                    let len = match field {
                        FieldName::Metadata => self
                            .value::<ListMeta>(rest, finished, "list", at)?
                            .map(|(meta, len)| {
                                self.metadata = Some(meta);
                                len
                            }),
                        FieldName::Items => self
                            .value::<NullItems>(rest, finished, "list", at)?
                            .map(|(NullItems, len)| len),
                        FieldName::Other => self
                            .value::<IgnoredAny>(rest, finished, "list", at)?
                            .map(|(IgnoredAny, len)| len),
                    };
                    let Some(len) = len else { return Ok(()) };
                    *i += len;
                    self.state = State::AfterValue;
                    continue;
                }
                (State::AfterValue, b',') => State::Key,
                (State::AfterValue, b'}') => State::Done,
                (State::AfterValue, _) => {
                    return Err(structure_error(
                        "expected `,` or `}` after a field of the list",
                        at,
                    ));
                }
                (State::FirstItem, b']') => State::AfterValue,
                (State::FirstItem | State::Item, _) => {
                    match self.item(&data[*i..], finished, at, map)? {
                        Some(len) => {
                            *i += len;
                            self.state = State::AfterItem;
                            continue;
                        }
                        None => return Ok(()),
                    }
                }
                (State::AfterItem, b',') => State::Item,
                (State::AfterItem, b']') => State::AfterValue,
                (State::AfterItem, _) => {
                    return Err(structure_error("expected `,` or `]` after a list item", at));
                }
                (State::Done, _) => {
                    return Err(structure_error("trailing characters after the list", at));
                }
                (State::Failed, _) => unreachable!("run refuses a failed parser"),
            };
            *i += 1;
            self.state = next;
        }
    }

    /// One attempt at the value at the start of `data`, once enough is buffered (see
    /// [`LIST_DECODER_MARGIN`]): `None` means wait for more bytes.
    fn attempt<V: DeserializeOwned>(
        &mut self,
        data: &[u8],
        finished: bool,
    ) -> Option<Result<(V, usize), serde_json::Error>> {
        if !finished && data.len() < self.retry_at {
            return None;
        }
        match attempt::<V>(data, finished) {
            Attempt::Done(v, len) => {
                self.retry_at = self.margin;
                Some(Ok((v, len)))
            }
            Attempt::Wait => {
                self.retry_at = self.margin.max(data.len().saturating_mul(2));
                None
            }
            Attempt::Failed(error) => Some(Err(error)),
        }
    }

    /// Decodes one value at the start of `data`; `None` means wait for more bytes.
    fn value<V: DeserializeOwned>(
        &mut self,
        data: &[u8],
        finished: bool,
        what: &'static str,
        at: u64,
    ) -> Result<Option<(V, usize)>, DecodeError> {
        self.attempt(data, finished)
            .transpose()
            .map_err(|error| DecodeError {
                what,
                error,
                offset: Some(at),
            })
    }

    /// Decodes the item at the start of `data` into `items` (or `undecodable`) and returns its
    /// length; `None` means wait for more bytes.
    fn item(
        &mut self,
        data: &[u8],
        finished: bool,
        at: u64,
        map: &mut dyn FnMut(K) -> T,
    ) -> Result<Option<usize>, DecodeError> {
        let error = match self.attempt::<K>(data, finished) {
            None => return Ok(None),
            Some(Ok((obj, len))) => {
                self.items.push(map(obj));
                return Ok(Some(len));
            }
            // Well-formed JSON of another shape (for example a custom resource written under a
            // newer schema): skip it below rather than fail the whole list.
            Some(Err(error)) if error.is_data() => error,
            Some(Err(error)) => {
                return Err(DecodeError {
                    what: "list",
                    error,
                    offset: Some(at),
                });
            }
        };
        let Some((IgnoredAny, len)) = self.value::<IgnoredAny>(data, finished, "list", at)? else {
            return Ok(None);
        };
        let peek = serde_json::from_slice::<PeekObject>(&data[..len]).unwrap_or_default();
        self.undecodable.push(peek.into_undecodable(
            String::new(),
            DecodeError {
                what: "list item",
                error,
                offset: Some(at),
            },
        ));
        Ok(Some(len))
    }
}

/// A non-array `items` value: only `null` is accepted.
struct NullItems;

impl<'de> Deserialize<'de> for NullItems {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = NullItems;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of objects or null")
            }
            fn visit_none<E: de::Error>(self) -> Result<NullItems, E> {
                Ok(NullItems)
            }
            fn visit_unit<E: de::Error>(self) -> Result<NullItems, E> {
                Ok(NullItems)
            }
        }
        deserializer.deserialize_option(V)
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
        offset: None,
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
}
