//! List bodies, decoded item by item as their bytes arrive.

use std::{fmt, marker::PhantomData};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use serde::{
    Deserialize, Deserializer,
    de::{self, DeserializeOwned, IgnoredAny, Visitor},
};

use super::ItemBytes;
use super::{
    error::{DecodeError, PeekObject, UndecodableObject},
    projection::{Projected, Projection},
};

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
    /// `metadata.shardInfo.selector`: the shard selector the server applied (KEP-5866), absent
    /// from unsharded lists and from servers that do not shard. k8s-openapi's `ListMeta` has no
    /// such field yet, so it is read beside it.
    pub shard_info: Option<String>,
}

impl<K> ListPage<K> {
    /// A page of `items` with the given list metadata.
    pub fn new(metadata: ListMeta, items: Vec<K>) -> Self {
        Self {
            metadata,
            items,
            undecodable: Vec::new(),
            shard_info: None,
        }
    }
}

/// A list's `metadata` as sent: k8s-openapi's `ListMeta` and the newer `shardInfo`.
#[derive(Deserialize)]
pub(crate) struct WireListMeta {
    #[serde(flatten)]
    meta: ListMeta,
    #[serde(rename = "shardInfo", default)]
    shard_info: Option<WireShardInfo>,
}

impl WireListMeta {
    /// k8s-openapi's `ListMeta` and the shard selector.
    pub(crate) fn into_parts(self) -> (ListMeta, Option<String>) {
        (self.meta, self.shard_info.map(|i| i.selector))
    }
}

#[derive(Deserialize)]
struct WireShardInfo {
    #[serde(default)]
    selector: String,
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
pub(super) const COMPACT_AT: usize = 1 << 20;

/// The list decoder's own messages about the list's shape: fixed texts that quote nothing, so
/// [`redacted`] lets them through.
pub(super) const STRUCTURE_MESSAGES: &[&str] = &[
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
        error: super::error::Cause::Json(de::Error::custom(message)),
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
/// Useful to a custom [`ListerWatcher`](crate::reflector::ListerWatcher) that receives list bodies in
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
    pub(super) buf: Vec<u8>,
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
                shard_info: None,
                items: Vec::new(),
                undecodable: Vec::new(),
                projection: Projection::none(),
                _k: PhantomData,
            },
        }
    }

    /// This decoder, with the fields `projection` drops skipped while parsing each item (see
    /// [`Projection`]).
    ///
    /// ```
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use kube_informer::reflector::decode::{ListDecoder, Projection};
    ///
    /// let body = br#"{"items":[{"metadata":{"name":"a","managedFields":[{"manager":"m"}]}}]}"#;
    /// let mut decoder = ListDecoder::<ConfigMap, ConfigMap>::new()
    ///     .projection(Projection::strip_managed_fields());
    /// decoder.push(body, &mut |cm| cm)?;
    /// let page = decoder.finish(&mut |cm| cm)?;
    /// assert!(page.items[0].metadata.managed_fields.is_none());
    /// # Ok::<(), kube_informer::reflector::decode::DecodeError>(())
    /// ```
    #[must_use]
    pub fn projection(mut self, projection: Projection) -> Self {
        self.parser.projection = projection;
        self
    }

    /// Appends the next chunk of the body and decodes every item it completes, handing each to
    /// `map` in order.
    ///
    /// # Errors
    ///
    /// [`DecodeError`] when the bytes so far cannot be the start of a JSON list. The decoder is
    /// then spent: later calls fail too.
    pub fn push(&mut self, chunk: &[u8], map: &mut dyn FnMut(K) -> T) -> Result<(), DecodeError> {
        self.push_bytes(chunk, &mut |obj, _| map(obj))
    }

    /// [`push`](Self::push), handing `map` each item's bytes as well.
    pub(crate) fn push_bytes(
        &mut self,
        chunk: &[u8],
        map: &mut dyn FnMut(K, ItemBytes<'_>) -> T,
    ) -> Result<(), DecodeError> {
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
    /// the last chunk). A caller bounds memory by failing the body once this passes its limit,
    /// after a [`retry_now`](Self::retry_now).
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Tries the value being received now. [`push`](Self::push) tries an unfinished value again
    /// only once the buffered bytes have doubled, so that a large value is not parsed again for
    /// every chunk; so a value may have arrived whole and still be buffered. A caller that fails
    /// the body once [`buffered`](Self::buffered) passes a limit calls this first, so that a
    /// value within the limit is not refused for how the body happened to be chunked.
    ///
    /// # Errors
    ///
    /// As [`push`](Self::push).
    pub fn retry_now(&mut self, map: &mut dyn FnMut(K) -> T) -> Result<(), DecodeError> {
        self.retry_now_bytes(&mut |obj, _| map(obj))
    }

    /// [`retry_now`](Self::retry_now), handing `map` each item's bytes as well.
    pub(crate) fn retry_now_bytes(
        &mut self,
        map: &mut dyn FnMut(K, ItemBytes<'_>) -> T,
    ) -> Result<(), DecodeError> {
        self.parser.retry_at = 0;
        self.push_bytes(&[], map)
    }

    /// Ends the body: decodes what is still buffered and returns the page.
    ///
    /// # Errors
    ///
    /// [`DecodeError`] when the body is not a whole JSON list: truncated, malformed, or followed
    /// by anything but whitespace.
    pub fn finish(self, map: &mut dyn FnMut(K) -> T) -> Result<ListPage<T>, DecodeError> {
        self.finish_bytes(&mut |obj, _| map(obj))
    }

    /// [`finish`](Self::finish), handing `map` each item's bytes as well.
    pub(crate) fn finish_bytes(
        mut self,
        map: &mut dyn FnMut(K, ItemBytes<'_>) -> T,
    ) -> Result<ListPage<T>, DecodeError> {
        self.parser.run(&self.buf[self.pos..], true, map)?;
        let p = self.parser;
        Ok(ListPage {
            metadata: p.metadata.unwrap_or_default(),
            items: p.items,
            undecodable: p.undecodable,
            shard_info: p.shard_info,
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
    shard_info: Option<String>,
    items: Vec<T>,
    undecodable: Vec<UndecodableObject>,
    /// Applied to each item.
    projection: Projection,
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

/// Whether `e` is serde_json's nesting limit (128 arrays and objects), met inside an item. That
/// limit bounds the stack a decode takes, not the JSON: the skip that follows reads past the
/// item with no limit (serde_json ignores a value without recursing), and fails the list if the
/// item is not well-formed after all.
fn nested_too_deep(e: &serde_json::Error) -> bool {
    e.is_syntax() && e.to_string().starts_with("recursion limit exceeded")
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
        map: &mut dyn FnMut(K, ItemBytes<'_>) -> T,
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
        map: &mut dyn FnMut(K, ItemBytes<'_>) -> T,
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
                            .value::<WireListMeta>(rest, finished, "list", at)?
                            .map(|(meta, len)| {
                                self.metadata = Some(meta.meta);
                                self.shard_info = meta.shard_info.map(|i| i.selector);
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
                error: error.into(),
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
        map: &mut dyn FnMut(K, ItemBytes<'_>) -> T,
    ) -> Result<Option<usize>, DecodeError> {
        let attempt = if self.projection.is_empty() {
            self.attempt::<K>(data, finished)
        } else {
            let projection = self.projection.clone();
            projection
                .scope(|| self.attempt::<Projected<K>>(data, finished))
                .map(|r| r.map(|(Projected(obj), len)| (obj, len)))
        };
        let error = match attempt {
            None => return Ok(None),
            Some(Ok((obj, len))) => {
                let bytes = super::ItemBytes {
                    bytes: &data[..len],
                    encoding: super::ItemEncoding::Json,
                };
                self.items.push(map(obj, bytes));
                return Ok(Some(len));
            }
            // Well-formed JSON of another shape (for example a custom resource written under a
            // newer schema), or nested past serde_json's limit: skip it below rather than fail
            // the whole list.
            Some(Err(error)) if error.is_data() || nested_too_deep(&error) => error,
            Some(Err(error)) => {
                return Err(DecodeError {
                    what: "list",
                    error: error.into(),
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
                error: error.into(),
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
