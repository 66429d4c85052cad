//! List bodies, decoded item by item as their bytes arrive.

use crate::reflector::decode::{ItemBytes, ItemEncoding};
use std::{fmt, marker::PhantomData};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use serde::{Deserialize, de::DeserializeOwned};

use super::{
    de::MessageDeserializer,
    direct,
    envelope::{self, unknown},
    error::{Error, ErrorKind},
    schema::{BUILTIN, Card, MessageId, Schema, Type},
    wire::{self, Reader, WireType},
};
use crate::reflector::decode::{
    Cause, DecodeError, ListPage, PeekObject, Projection, UndecodableObject, WireListMeta,
};

/// A list message's field numbers (`metav1.ListMeta metadata = 1`, `repeated items = 2`).
const LIST_METADATA: u32 = 1;
const LIST_ITEMS: u32 = 2;

/// Decodes a protobuf list response body incrementally, as its chunks arrive: the protobuf
/// counterpart of [`ListDecoder`](crate::reflector::decode::ListDecoder), with the same API.
///
/// The body is the `k8s\0` magic and a `runtime.Unknown` whose `raw` is the list message
/// (`metadata = 1`, `items = 2`). Its fields are read as they arrive, so each item is decoded
/// and handed to `map` as soon as its last byte is in, and only the item being received is
/// buffered (the length prefix of `raw` claims the whole body, so the decoder does not wait
/// for it). The item message is the one of the list's `items` field in the schema.
///
/// Items whose bytes are well-formed but whose values do not decode as `K` are skipped and
/// reported in [`ListPage::undecodable`]; a wire error fails the list.
///
/// ```
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kube_informer::protobuf::ProtobufListDecoder;
///
/// let mut decoder = ProtobufListDecoder::<ConfigMap, ConfigMap>::new();
/// // Not protobuf: fails at once, without waiting for more.
/// assert!(decoder.push(b"{\"items\":[]}", &mut |cm| cm).is_err());
/// ```
pub struct ProtobufListDecoder<K, T> {
    /// Received bytes not yet dropped; `buf[pos..]` is not decoded yet.
    buf: Vec<u8>,
    pos: usize,
    parser: Parser<K, T>,
}

/// Where the parser is in the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before the `k8s\0` magic.
    Magic,
    /// Among the fields of the `runtime.Unknown`.
    Envelope,
    /// Inside `raw` (the list message), with this many of its bytes still to come.
    Raw(u64),
    /// An error of this kind was returned.
    Failed(ErrorKind),
}

/// The list message's item and metadata messages.
#[derive(Debug, Clone, Copy)]
struct ListMessages {
    metadata: Option<MessageId>,
    item: MessageId,
    /// What each item is given (see [`super::list_item_type_meta`]).
    item_type_meta: Option<(&'static str, &'static str)>,
}

struct Parser<K, T> {
    schema: &'static Schema,
    state: State,
    /// Body offset of the first byte `run` is given.
    offset: u64,
    /// Body offset of the field being decoded.
    at: u64,
    list: Option<ListMessages>,
    seen_raw: bool,
    metadata: Option<ListMeta>,
    shard_info: Option<String>,
    items: Vec<T>,
    undecodable: Vec<UndecodableObject>,
    projection: Projection,
    _k: PhantomData<fn() -> K>,
}

impl<K, T> fmt::Debug for ProtobufListDecoder<K, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProtobufListDecoder")
            .field("buffered", &(self.buf.len() - self.pos))
            .field("decoded_bytes", &self.parser.offset)
            .field("items", &self.parser.items.len())
            .field("undecodable", &self.parser.undecodable.len())
            .finish()
    }
}

impl<K: DeserializeOwned + 'static, T> Default for ProtobufListDecoder<K, T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: DeserializeOwned + 'static, T> ProtobufListDecoder<K, T> {
    /// A decoder at the start of a body, for the kinds of [`BUILTIN`].
    pub fn new() -> Self {
        Self::with_schema(&BUILTIN)
    }

    /// A decoder for the kinds of `schema`.
    pub fn with_schema(schema: &'static Schema) -> Self {
        Self {
            buf: Vec::new(),
            pos: 0,
            parser: Parser {
                schema,
                state: State::Magic,
                offset: 0,
                at: 0,
                list: None,
                seen_raw: false,
                metadata: None,
                shard_info: None,
                items: Vec::new(),
                undecodable: Vec::new(),
                projection: Projection::none(),
                _k: PhantomData,
            },
        }
    }

    /// This decoder, with the fields `projection` drops skipped while decoding each item (see
    /// [`Projection`]).
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
    /// [`DecodeError`] when the bytes so far cannot be the start of a protobuf list. The decoder
    /// is then spent: later calls fail too.
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
            // Nothing pending: decode straight from the chunk and keep only its undecoded tail.
            self.buf.clear();
            self.pos = 0;
            let used = self.parser.run(chunk, false, map)?;
            self.buf
                .extend_from_slice(chunk.get(used..).unwrap_or_default());
            return Ok(());
        }
        self.buf.extend_from_slice(chunk);
        let rest = self.buf.get(self.pos..).unwrap_or_default();
        self.pos += self.parser.run(rest, false, map)?;
        // Drop decoded bytes once they are half the window: each byte moves at most once.
        if self.pos * 2 >= self.buf.len() {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        Ok(())
    }

    /// Bytes received and not yet decoded: the item being received. A caller bounds memory by
    /// failing the body once this passes its limit.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Ends the body: decodes what is still buffered and returns the page.
    ///
    /// # Errors
    ///
    /// [`DecodeError`] when the body is not a whole protobuf list.
    pub fn finish(self, map: &mut dyn FnMut(K) -> T) -> Result<ListPage<T>, DecodeError> {
        self.finish_bytes(&mut |obj, _| map(obj))
    }

    /// [`finish`](Self::finish), handing `map` each item's bytes as well.
    pub(crate) fn finish_bytes(
        mut self,
        map: &mut dyn FnMut(K, ItemBytes<'_>) -> T,
    ) -> Result<ListPage<T>, DecodeError> {
        let rest = self.buf.get(self.pos..).unwrap_or_default();
        self.parser.run(rest, true, map)?;
        let p = self.parser;
        Ok(ListPage {
            metadata: p.metadata.unwrap_or_default(),
            items: p.items,
            undecodable: p.undecodable,
            shard_info: p.shard_info,
        })
    }
}

/// Decodes a whole protobuf list body, handing each item to `map` as it is decoded.
///
/// # Errors
///
/// As [`ProtobufListDecoder::finish`].
pub fn decode_list_map<K: DeserializeOwned + 'static, T>(
    body: &[u8],
    map: &mut dyn FnMut(K) -> T,
) -> Result<ListPage<T>, DecodeError> {
    let mut decoder = ProtobufListDecoder::new();
    decoder.push(body, map)?;
    decoder.finish(map)
}

/// The outcome of looking at the next field.
enum Step {
    /// Consumed this many bytes.
    Took(usize),
    /// Its bytes have not all arrived.
    Wait,
}

impl<K: DeserializeOwned + 'static, T> Parser<K, T> {
    /// Decodes what it can of `data` (the bytes after those already consumed) and returns how
    /// many bytes it consumed. With `finished`, `data` is the rest of the body.
    fn run(
        &mut self,
        data: &[u8],
        finished: bool,
        map: &mut dyn FnMut(K, ItemBytes<'_>) -> T,
    ) -> Result<usize, DecodeError> {
        if let State::Failed(kind) = self.state {
            return Err(self.error(Error::new(kind), 0));
        }
        let mut i = 0;
        let error = loop {
            self.at = self.offset + i as u64;
            let rest = data.get(i..).unwrap_or_default();
            match self.step(rest, finished, map) {
                Ok(Some(Step::Took(n))) => i += n,
                Ok(Some(Step::Wait)) if finished => break Error::new(ErrorKind::Truncated),
                Ok(Some(Step::Wait) | None) => {
                    self.offset += i as u64;
                    return Ok(i);
                }
                Err(e) => break e,
            }
        };
        self.offset += i as u64;
        self.state = State::Failed(error.kind());
        Err(self.error(error, 0))
    }

    /// An error at the field being decoded (or, with `at`, `at` bytes past it).
    fn error(&self, e: Error, at: u64) -> DecodeError {
        DecodeError {
            what: "list",
            error: Cause::Protobuf(e),
            offset: Some(self.at + at),
        }
    }

    /// One step at the start of `data`: `None` at the end of what there is (and with
    /// `finished`, of a complete body).
    fn step(
        &mut self,
        data: &[u8],
        finished: bool,
        map: &mut dyn FnMut(K, ItemBytes<'_>) -> T,
    ) -> Result<Option<Step>, Error> {
        match self.state {
            State::Magic => {
                let n = data.len().min(envelope::MAGIC.len());
                if data.get(..n) != envelope::MAGIC.get(..n) {
                    return Err(Error::new(ErrorKind::BadMagic));
                }
                if n < envelope::MAGIC.len() {
                    return Ok(Some(Step::Wait));
                }
                self.state = State::Envelope;
                Ok(Some(Step::Took(n)))
            }
            State::Envelope if data.is_empty() => match (finished, self.seen_raw) {
                (true, false) => Err(Error::new(ErrorKind::BadEnvelope)),
                _ => Ok(None),
            },
            State::Envelope => {
                let Some(h) = wire::peek_header(data)? else {
                    return Ok(Some(Step::Wait));
                };
                if h.number == unknown::RAW && h.wire == WireType::Len {
                    if self.list.is_none() || self.seen_raw {
                        return Err(Error::new(ErrorKind::BadEnvelope));
                    }
                    self.seen_raw = true;
                    self.state = State::Raw(h.value_len);
                    return Ok(Some(Step::Took(h.header_len)));
                }
                let Some(field) = whole(data, h)? else {
                    return Ok(Some(Step::Wait));
                };
                let (number, raw) = Reader::new(field)
                    .field()?
                    .ok_or_else(|| Error::new(ErrorKind::Truncated))?;
                match number {
                    unknown::TYPE_META => {
                        let wire::Raw::Len(b) = raw else {
                            return Err(Error::at_field(
                                ErrorKind::WrongWireType,
                                "Unknown",
                                number,
                            ));
                        };
                        let (api_version, kind) = envelope::type_meta(b)?;
                        self.list = Some(self.list_messages(api_version, kind)?);
                    }
                    unknown::CONTENT_ENCODING => envelope::check_content_encoding(raw)?,
                    unknown::RAW => {
                        return Err(Error::at_field(ErrorKind::WrongWireType, "Unknown", number));
                    }
                    _ => {}
                }
                Ok(Some(Step::Took(field.len())))
            }
            State::Raw(0) => {
                self.state = State::Envelope;
                Ok(Some(Step::Took(0)))
            }
            State::Raw(left) => {
                if data.is_empty() {
                    return Ok(Some(Step::Wait));
                }
                let avail = usize::try_from(left).map_or(data.len(), |l| l.min(data.len()));
                let data = data.get(..avail).unwrap_or_default();
                let Some(h) = wire::peek_header(data)? else {
                    if avail as u64 == left {
                        return Err(Error::new(ErrorKind::Truncated));
                    }
                    return Ok(Some(Step::Wait));
                };
                if (h.header_len as u64).saturating_add(h.value_len) > left {
                    return Err(Error::new(ErrorKind::LengthPastInput));
                }
                let Some(field) = whole(data, h)? else {
                    return Ok(Some(Step::Wait));
                };
                let value = field.get(h.header_len..).unwrap_or_default();
                let list = self
                    .list
                    .ok_or_else(|| Error::new(ErrorKind::BadEnvelope))?;
                match h.number {
                    LIST_METADATA | LIST_ITEMS if h.wire != WireType::Len => {
                        return Err(Error::at_field(ErrorKind::WrongWireType, "List", h.number));
                    }
                    LIST_METADATA => {
                        if let Some(id) = list.metadata {
                            let meta = WireListMeta::deserialize(MessageDeserializer::new(
                                value,
                                self.schema,
                                id,
                            ))?;
                            let (meta, shard) = meta.into_parts();
                            self.metadata = Some(meta);
                            self.shard_info = shard;
                        }
                    }
                    LIST_ITEMS => self.item(value, list.item, list.item_type_meta, map)?,
                    _ => {}
                }
                self.state = State::Raw(left - field.len() as u64);
                Ok(Some(Step::Took(field.len())))
            }
            State::Failed(kind) => Err(Error::new(kind)),
        }
    }

    /// The item and metadata messages of the list kind `kind`.
    fn list_messages(&self, api_version: &str, kind: &str) -> Result<ListMessages, Error> {
        let id = envelope::resolve(self.schema, api_version, kind)?;
        let message = self.schema.message(id);
        let message_of = |number| match message.field(number) {
            Some(f) => match f.ty {
                Type::Message(id) => Some((id, f.card)),
                _ => None,
            },
            None => None,
        };
        match message_of(LIST_ITEMS) {
            Some((item, Card::Repeated)) => Ok(ListMessages {
                metadata: message_of(LIST_METADATA).map(|(id, _)| id),
                item,
                item_type_meta: super::list_item_type_meta(self.schema, item),
            }),
            // Not a list kind.
            _ => Err(Error::unknown_kind(api_version, kind)),
        }
    }

    /// Decodes one item's message into `items`, or into `undecodable` when its values do not
    /// fit `K`.
    fn item(
        &mut self,
        bytes: &[u8],
        item: MessageId,
        type_meta: Option<(&'static str, &'static str)>,
        map: &mut dyn FnMut(K, ItemBytes<'_>) -> T,
    ) -> Result<(), Error> {
        match direct::decode::<K>(self.schema, bytes, item, type_meta, &self.projection) {
            Ok(obj) => {
                let bytes = ItemBytes {
                    bytes,
                    encoding: ItemEncoding::Protobuf {
                        schema: self.schema,
                        message: item,
                    },
                };
                self.items.push(map(obj, bytes));
                Ok(())
            }
            Err(e) if e.is_data() => {
                let peek =
                    PeekObject::deserialize(MessageDeserializer::new(bytes, self.schema, item))
                        .unwrap_or_default();
                let error = DecodeError {
                    what: "list item",
                    error: Cause::Protobuf(e),
                    offset: Some(self.at),
                };
                self.undecodable
                    .push(peek.into_undecodable(String::new(), error));
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}

/// The whole field whose header is `h` at the start of `data`, once it has all arrived.
fn whole(data: &[u8], h: wire::Header) -> Result<Option<&[u8]>, Error> {
    let total = (h.header_len as u64).saturating_add(h.value_len);
    match usize::try_from(total) {
        Ok(n) if n <= data.len() => Ok(data.get(..n)),
        Ok(_) => Ok(None),
        Err(_) => Err(Error::new(ErrorKind::LengthPastInput)),
    }
}
