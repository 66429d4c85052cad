//! A `serde::Deserializer` over a protobuf message, driven by its [`Schema`]: the message is a
//! map keyed by the JSON names of its fields, with values shaped as the JSON encoding has them,
//! so any type whose `Deserialize` reads the JSON form (k8s-openapi's, kube's `DynamicObject`)
//! decodes from protobuf unchanged.

use serde::de::{
    self, DeserializeSeed, MapAccess, SeqAccess, Visitor, value::BorrowedStrDeserializer,
};

use super::{
    error::{Error, ErrorKind},
    format,
    schema::{Card, Field, Message, MessageId, Schema, Type},
    wire::{Raw, Reader, WireType},
};

/// How deep messages may nest (CRD schemas recurse; serde_json stops at 128 for JSON).
pub(crate) const MAX_DEPTH: u32 = 100;

/// How many inline messages may nest in one JSON object (Kubernetes nests at most two).
const MAX_INLINE: usize = 4;

/// The schema and the nesting depth of the message being decoded.
#[derive(Clone, Copy)]
struct Ctx {
    schema: &'static Schema,
    depth: u32,
}

impl Ctx {
    fn deeper(self) -> Result<Self, Error> {
        if self.depth >= MAX_DEPTH {
            return Err(Error::new(ErrorKind::TooDeep));
        }
        Ok(Ctx {
            depth: self.depth + 1,
            ..self
        })
    }
}

/// The deserializer of one message: the bytes of its fields (no length prefix).
pub(crate) struct MessageDeserializer<'de> {
    data: &'de [u8],
    ctx: Ctx,
    message: MessageId,
    type_meta: Option<(&'de str, &'de str)>,
}

impl<'de> MessageDeserializer<'de> {
    /// The message `message` of `schema` in `data`.
    pub(crate) fn new(data: &'de [u8], schema: &'static Schema, message: MessageId) -> Self {
        Self {
            data,
            ctx: Ctx { schema, depth: 0 },
            message,
            type_meta: None,
        }
    }

    /// This message with `apiVersion` and `kind` as its first two keys, as a top-level object
    /// has them in JSON.
    pub(crate) fn with_type_meta(mut self, api_version: &'de str, kind: &'de str) -> Self {
        self.type_meta = Some((api_version, kind));
        self
    }

    fn access(&self) -> MessageAccess<'de> {
        MessageAccess::new(
            self.data,
            self.ctx,
            self.ctx.schema.message(self.message),
            self.type_meta,
        )
    }
}

impl<'de> de::Deserializer<'de> for MessageDeserializer<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_map(self.access())
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple
        tuple_struct map struct enum identifier
    }
}

/// The wire type a value of `ty` is encoded with.
pub(crate) fn wire_of(ty: Type) -> WireType {
    match ty {
        Type::Bool | Type::Int32 | Type::Int64 | Type::Uint32 | Type::Uint64 => WireType::Varint,
        Type::Double => WireType::Fixed64,
        Type::Float => WireType::Fixed32,
        _ => WireType::Len,
    }
}

/// The value of an absent field of type `ty` (a map entry without its key or value).
pub(crate) fn zero_of(ty: Type) -> Raw<'static> {
    match wire_of(ty) {
        WireType::Varint => Raw::Varint(0),
        WireType::Fixed64 => Raw::Fixed64(0),
        WireType::Fixed32 => Raw::Fixed32(0),
        WireType::Len => Raw::Len(&[]),
    }
}

/// Whether a single field holding `raw` is left out, as JSON leaves it out.
pub(crate) fn skipped(field: &Field, raw: Raw<'_>) -> bool {
    match (field.ty, raw) {
        // The zero time, which JSON writes as `null`.
        (Type::Time | Type::MicroTime, Raw::Len(b)) => b.is_empty(),
        (_, _) if !field.omit_zero => false,
        (Type::Double, Raw::Fixed64(bits)) => f64::from_bits(bits) == 0.0,
        (Type::Float, Raw::Fixed32(bits)) => f32::from_bits(bits) == 0.0,
        (Type::String | Type::Bytes, Raw::Len(b)) => b.is_empty(),
        // At the field's width, as Go truncates the varint before `omitempty` sees it.
        #[allow(clippy::cast_possible_truncation)]
        (Type::Int32 | Type::Uint32, Raw::Varint(v)) => v as u32 == 0,
        (_, Raw::Varint(v)) => v == 0,
        _ => false,
    }
}

/// The index in `message.fields` of field `number`.
#[inline]
fn field_index(message: &Message, number: u32) -> Option<usize> {
    // Most messages number their fields densely from 1.
    let dense = usize::try_from(number).ok()?.checked_sub(1)?;
    match message.fields.get(dense) {
        Some(f) if f.number == number => Some(dense),
        _ => message
            .fields
            .binary_search_by_key(&number, |f| f.number)
            .ok(),
    }
}

/// Decodes one value of `ty` in a message of `schema` nested `depth` deep (a single field, one
/// element of a repeated field, or one map value) as a `T`, with what `node` drops hidden: the
/// serde path for one value, for the direct decoders' values they do not build themselves.
// The direct decoders compile with k8s-openapi's `v1_37` alone.
#[allow(dead_code)]
pub(crate) fn value<'de, T: de::Deserialize<'de>>(
    schema: &'static Schema,
    depth: u32,
    ty: Type,
    raw: Raw<'de>,
    node: Option<&crate::reflector::decode::Node>,
) -> Result<T, Error> {
    let value = Value::Single(Ctx { schema, depth }, ty, raw);
    crate::reflector::decode::Hidden::new(std::marker::PhantomData::<T>, node).deserialize(value)
}

/// One message's fields in the JSON object being decoded (itself or an inline one).
#[derive(Clone, Copy)]
struct Frame<'de> {
    reader: Reader<'de>,
    message: &'static Message,
    /// Indexes (below 128) in `message.fields` of the repeated fields already presented, so a
    /// second run of one is an error rather than an overwrite. Two `u64` halves rather than a
    /// `u128`: a `u128` would align every frame (and `MessageAccess`, built per nested message)
    /// to 16 bytes and pad it.
    seen: [u64; 2],
}

/// A message's fields as a map.
struct MessageAccess<'de> {
    ctx: Ctx,
    frames: [Frame<'de>; MAX_INLINE],
    /// Index in `frames` of the innermost inline message being read.
    top: usize,
    type_meta: Option<(&'de str, &'de str)>,
    /// Whether `type_meta`'s `apiVersion` and `kind` were presented.
    meta_keys: u8,
    pending: Option<Pending<'de>>,
}

enum Pending<'de> {
    Str(&'de str),
    Value(Value<'de>),
}

impl<'de> MessageAccess<'de> {
    fn new(
        data: &'de [u8],
        ctx: Ctx,
        message: &'static Message,
        type_meta: Option<(&'de str, &'de str)>,
    ) -> Self {
        let frame = Frame {
            reader: Reader::new(data),
            message,
            seen: [0; 2],
        };
        Self {
            ctx,
            frames: [frame; MAX_INLINE],
            top: 0,
            type_meta,
            meta_keys: 0,
            pending: None,
        }
    }

    /// Reads to the next field that is presented, and stores its value in `pending`.
    fn next_field(&mut self) -> Result<Option<&'static str>, Error> {
        loop {
            let ctx = self.ctx;
            let Some(frame) = self.frames.get_mut(self.top) else {
                return Err(Error::new(ErrorKind::TooDeep));
            };
            if frame.reader.is_empty() {
                if self.top == 0 {
                    return Ok(None);
                }
                self.top -= 1;
                continue;
            }
            let start = frame.reader.rest();
            let (number, wire) = frame.reader.tag()?;
            let message = frame.message;
            let Some(index) = field_index(message, number) else {
                // A field of a newer server.
                frame.reader.value(wire)?;
                continue;
            };
            let field = &message.fields[index];
            let wrong = || Error::at_field(ErrorKind::WrongWireType, message.name, number);
            if field.inline {
                let (Type::Message(id), WireType::Len) = (field.ty, wire) else {
                    return Err(wrong());
                };
                let bytes = frame.reader.len_delimited()?;
                let next = self.top + 1;
                if next >= MAX_INLINE {
                    return Err(Error::new(ErrorKind::TooDeep));
                }
                self.frames[next] = Frame {
                    reader: Reader::new(bytes),
                    message: ctx.schema.message(id),
                    seen: [0; 2],
                };
                self.top = next;
                continue;
            }
            let value = match field.card {
                Card::Single => {
                    if wire != wire_of(field.ty) {
                        return Err(wrong());
                    }
                    let raw = frame.reader.value(wire)?;
                    if skipped(field, raw) {
                        continue;
                    }
                    Value::Single(ctx, field.ty, raw)
                }
                Card::Repeated | Card::Map(_) => {
                    if let Some(word) = frame.seen.get_mut(index / 64) {
                        let bit = 1u64 << (index % 64);
                        if *word & bit != 0 {
                            return Err(Error::at_field(
                                ErrorKind::NonContiguous,
                                message.name,
                                number,
                            ));
                        }
                        *word |= bit;
                    }
                    // The run of consecutive occurrences, validated as its elements are read.
                    frame.reader.value(wire)?;
                    // Occurrences: the element count, unless scalars are packed.
                    let mut count = 1usize;
                    let mut packed = wire != wire_of(field.ty);
                    while frame.reader.peek_number() == Some(number) {
                        let (_, wire) = frame.reader.tag()?;
                        frame.reader.value(wire)?;
                        count += 1;
                        packed |= wire != wire_of(field.ty);
                    }
                    let used = start.len() - frame.reader.rest().len();
                    let run = Reader::new(start.get(..used).unwrap_or_default());
                    match field.card {
                        Card::Map(key) => Value::Map(Entries {
                            ctx,
                            message: message.name,
                            number,
                            key,
                            value: field.ty,
                            reader: run,
                            pending: None,
                        }),
                        _ => Value::Repeated(Elements {
                            ctx,
                            message: message.name,
                            number,
                            ty: field.ty,
                            reader: run,
                            packed: None,
                            left: (!packed).then_some(count),
                        }),
                    }
                }
            };
            self.pending = Some(Pending::Value(value));
            return Ok(Some(field.json));
        }
    }
}

impl<'de> MapAccess<'de> for MessageAccess<'de> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        if let Some((api_version, kind)) = self.type_meta {
            let (key, value) = match self.meta_keys {
                0 => ("apiVersion", api_version),
                1 => ("kind", kind),
                _ => ("", ""),
            };
            if !key.is_empty() {
                self.meta_keys += 1;
                self.pending = Some(Pending::Str(value));
                return seed
                    .deserialize(BorrowedStrDeserializer::new(key))
                    .map(Some);
            }
        }
        match self.next_field()? {
            Some(name) => seed
                .deserialize(BorrowedStrDeserializer::new(name))
                .map(Some),
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        match self.pending.take() {
            Some(Pending::Str(s)) => seed.deserialize(BorrowedStrDeserializer::new(s)),
            Some(Pending::Value(value)) => seed.deserialize(value),
            None => Err(de::Error::custom(
                "a map value was asked for before its key",
            )),
        }
    }
}

/// A field's value.
enum Value<'de> {
    /// One value of a type, in a message of the context.
    Single(Ctx, Type, Raw<'de>),
    /// A repeated field's run of occurrences.
    Repeated(Elements<'de>),
    /// A map field's run of entries.
    Map(Entries<'de>),
}

/// The elements of a repeated field: its occurrences, each one element or (for scalars) a
/// packed run of them.
struct Elements<'de> {
    ctx: Ctx,
    message: &'static str,
    number: u32,
    ty: Type,
    reader: Reader<'de>,
    packed: Option<Reader<'de>>,
    /// Elements still to come, when known (none are packed): the sequence's size hint, so a
    /// `Vec` of large structs is allocated once rather than grown by copying.
    left: Option<usize>,
}

impl<'de> SeqAccess<'de> for Elements<'de> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        let wire = wire_of(self.ty);
        loop {
            if let Some(packed) = self.packed.as_mut().filter(|p| !p.is_empty()) {
                let raw = packed.value(wire)?;
                return seed
                    .deserialize(Value::Single(self.ctx, self.ty, raw))
                    .map(Some);
            }
            self.packed = None;
            if self.reader.is_empty() {
                return Ok(None);
            }
            let (number, got) = self.reader.tag()?;
            if number != self.number {
                return Err(Error::at_field(
                    ErrorKind::NonContiguous,
                    self.message,
                    self.number,
                ));
            }
            if got == WireType::Len && wire != WireType::Len {
                self.packed = Some(Reader::new(self.reader.len_delimited()?));
                continue;
            }
            if got != wire {
                return Err(Error::at_field(
                    ErrorKind::WrongWireType,
                    self.message,
                    self.number,
                ));
            }
            let raw = self.reader.value(got)?;
            if let Some(left) = self.left.as_mut() {
                *left = left.saturating_sub(1);
            }
            return seed
                .deserialize(Value::Single(self.ctx, self.ty, raw))
                .map(Some);
        }
    }

    fn size_hint(&self) -> Option<usize> {
        self.left
    }
}

/// The entries of a map field, each a message of `key = 1` and `value = 2`.
struct Entries<'de> {
    ctx: Ctx,
    message: &'static str,
    number: u32,
    key: Type,
    value: Type,
    reader: Reader<'de>,
    pending: Option<Raw<'de>>,
}

impl<'de> MapAccess<'de> for Entries<'de> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        if self.reader.is_empty() {
            return Ok(None);
        }
        let wrong = || Error::at_field(ErrorKind::WrongWireType, self.message, self.number);
        let (_, wire) = self.reader.tag()?;
        if wire != WireType::Len {
            return Err(wrong());
        }
        let mut entry = Reader::new(self.reader.len_delimited()?);
        let (mut key, mut value) = (zero_of(self.key), zero_of(self.value));
        while let Some((number, raw)) = entry.field()? {
            let (slot, ty) = match number {
                1 => (&mut key, self.key),
                2 => (&mut value, self.value),
                _ => continue,
            };
            if raw.wire_type() != wire_of(ty) {
                return Err(wrong());
            }
            *slot = raw;
        }
        self.pending = Some(value);
        seed.deserialize(Value::Single(self.ctx, self.key, key))
            .map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let raw = self.pending.take().unwrap_or(zero_of(self.value));
        seed.deserialize(Value::Single(self.ctx, self.value, raw))
    }
}

/// The JSON null, or nothing, that some values stand for: the zero time, empty raw JSON.
fn is_null(ty: Type, raw: Raw<'_>) -> bool {
    match (ty, raw) {
        (Type::Time | Type::MicroTime, Raw::Len(b)) => b.is_empty(),
        (Type::RawJson, Raw::Len(b)) => raw_json(b).is_ok_and(|j| j.is_empty()),
        _ => false,
    }
}

/// The JSON bytes in field 1 of a `RawJson` message.
fn raw_json(bytes: &[u8]) -> Result<&[u8], Error> {
    let mut json: &[u8] = &[];
    let mut r = Reader::new(bytes);
    while let Some((number, raw)) = r.field()? {
        if number == 1 {
            json = expect_len(raw, "RawJson", 1)?;
        }
    }
    Ok(json)
}

fn expect_len<'de>(raw: Raw<'de>, message: &'static str, number: u32) -> Result<&'de [u8], Error> {
    match raw {
        Raw::Len(b) => Ok(b),
        _ => Err(Error::at_field(ErrorKind::WrongWireType, message, number)),
    }
}

fn expect_varint(raw: Raw<'_>, message: &'static str, number: u32) -> Result<u64, Error> {
    match raw {
        Raw::Varint(v) => Ok(v),
        _ => Err(Error::at_field(ErrorKind::WrongWireType, message, number)),
    }
}

fn utf8(bytes: &[u8]) -> Result<&str, Error> {
    std::str::from_utf8(bytes).map_err(|_| Error::new(ErrorKind::InvalidUtf8))
}

impl<'de> de::Deserializer<'de> for Value<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            Value::Single(ctx, ty, raw) => single(ctx, ty, raw, visitor),
            Value::Repeated(elements) => visitor.visit_seq(elements),
            Value::Map(entries) => visitor.visit_map(entries),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            Value::Single(_, ty, raw) if is_null(ty, raw) => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self {
            // A unit variant, as JSON writes it.
            Value::Single(_, Type::String, Raw::Len(b)) => {
                let s = BorrowedStrDeserializer::<'de, Error>::new(utf8(b)?);
                de::Deserializer::deserialize_enum(s, name, variants, visitor)
            }
            other => other.deserialize_any(visitor),
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple
        tuple_struct map struct identifier
    }
}

/// Decodes one value of `ty` from `raw` into `visitor`.
fn single<'de, V: Visitor<'de>>(
    ctx: Ctx,
    ty: Type,
    raw: Raw<'de>,
    visitor: V,
) -> Result<V::Value, Error> {
    if raw.wire_type() != wire_of(ty) {
        return Err(Error::new(ErrorKind::WrongWireType));
    }
    match (ty, raw) {
        (Type::String, Raw::Len(b)) => visitor.visit_borrowed_str(utf8(b)?),
        (Type::Bytes, Raw::Len(b)) => visitor.visit_string(format::base64(b)),
        (Type::Bool, Raw::Varint(v)) => visitor.visit_bool(v != 0),
        // Go truncates a varint to its field's width.
        #[allow(clippy::cast_possible_truncation, clippy::cast_possible_wrap)]
        (Type::Int32, Raw::Varint(v)) => visitor.visit_i32(v as i32),
        #[allow(clippy::cast_possible_wrap)]
        (Type::Int64, Raw::Varint(v)) => visitor.visit_i64(v as i64),
        #[allow(clippy::cast_possible_truncation)]
        (Type::Uint32, Raw::Varint(v)) => visitor.visit_u32(v as u32),
        (Type::Uint64, Raw::Varint(v)) => visitor.visit_u64(v),
        (Type::Double, Raw::Fixed64(bits)) => float(f64::from_bits(bits), visitor),
        (Type::Float, Raw::Fixed32(bits)) => float(f64::from(f32::from_bits(bits)), visitor),
        (Type::Message(id), Raw::Len(b)) => nested(ctx, b, id, visitor),
        (Type::Time | Type::MicroTime, Raw::Len(b)) => {
            if b.is_empty() {
                return visitor.visit_unit();
            }
            let (mut seconds, mut nanos) = (0i64, 0i64);
            let mut r = Reader::new(b);
            while let Some((number, raw)) = r.field()? {
                #[allow(clippy::cast_possible_wrap, clippy::cast_possible_truncation)]
                match number {
                    1 => seconds = expect_varint(raw, "Timestamp", 1)? as i64,
                    2 => nanos = i64::from(expect_varint(raw, "Timestamp", 2)? as i32),
                    _ => {}
                }
            }
            let micro = ty == Type::MicroTime;
            let mut buf = [0u8; format::TIME_LEN];
            let s = format::rfc3339(seconds, if micro { nanos } else { 0 }, micro, &mut buf)
                .ok_or_else(|| de::Error::custom("invalid value: a time out of range"))?;
            visitor.visit_str(s)
        }
        (Type::Duration, Raw::Len(b)) => {
            let mut nanos = 0i64;
            let mut r = Reader::new(b);
            while let Some((number, raw)) = r.field()? {
                if number == 1 {
                    #[allow(clippy::cast_possible_wrap)]
                    let v = expect_varint(raw, "Duration", 1)? as i64;
                    nanos = v;
                }
            }
            visitor.visit_string(format::go_duration(nanos))
        }
        (Type::Quantity, Raw::Len(b)) => {
            let mut s = None;
            let mut r = Reader::new(b);
            while let Some((number, raw)) = r.field()? {
                if number == 1 {
                    s = Some(utf8(expect_len(raw, "Quantity", 1)?)?);
                }
            }
            // The zero Quantity, which JSON writes as "0".
            visitor.visit_borrowed_str(s.unwrap_or("0"))
        }
        (Type::IntOrString, Raw::Len(b)) => {
            let (mut is_string, mut int, mut string) = (false, 0i32, "");
            let mut r = Reader::new(b);
            while let Some((number, raw)) = r.field()? {
                #[allow(clippy::cast_possible_truncation, clippy::cast_possible_wrap)]
                match number {
                    1 => is_string = expect_varint(raw, "IntOrString", 1)? == 1,
                    2 => int = expect_varint(raw, "IntOrString", 2)? as i32,
                    3 => string = utf8(expect_len(raw, "IntOrString", 3)?)?,
                    _ => {}
                }
            }
            if is_string {
                visitor.visit_borrowed_str(string)
            } else {
                visitor.visit_i32(int)
            }
        }
        (Type::RawJson, Raw::Len(b)) => {
            let json = raw_json(b)?;
            if json.is_empty() {
                return visitor.visit_unit();
            }
            let mut de = serde_json::Deserializer::from_slice(json);
            let v = de::Deserializer::deserialize_any(&mut de, visitor).map_err(Error::json)?;
            de.end().map_err(Error::json)?;
            Ok(v)
        }
        (
            Type::SchemaPropsOrArray(id)
            | Type::SchemaPropsOrBool(id)
            | Type::SchemaPropsOrStringArray(id),
            Raw::Len(b),
        ) => schema_props(ctx, ty, id, b, visitor),
        _ => Err(Error::new(ErrorKind::WrongWireType)),
    }
}

/// A float as the number Go's `encoding/json` writes: an integral value below 1e21 without a
/// fraction (`1`, not `1.0`), so self-describing targets (`serde_json::Value`, `DynamicObject`)
/// see an integer where JSON has one; typed `f64` fields accept either.
fn float<'de, V: Visitor<'de>>(f: f64, visitor: V) -> Result<V::Value, Error> {
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    if f.fract() == 0.0 && f.abs() < 1e19 && !(f == 0.0 && f.is_sign_negative()) {
        if f >= 0.0 {
            return visitor.visit_u64(f as u64);
        }
        if f >= -9.2e18 {
            return visitor.visit_i64(f as i64);
        }
    }
    visitor.visit_f64(f)
}

/// A nested message, one level deeper.
fn nested<'de, V: Visitor<'de>>(
    ctx: Ctx,
    b: &'de [u8],
    id: MessageId,
    visitor: V,
) -> Result<V::Value, Error> {
    let ctx = ctx.deeper()?;
    visitor.visit_map(MessageAccess::new(b, ctx, ctx.schema.message(id), None))
}

/// The apiextensions `JSONSchemaPropsOr*` unions: a schema (a `JSONSchemaProps` object), or
/// an array (of schemas, or of strings), or a bool, as their Go `MarshalJSON` chooses.
fn schema_props<'de, V: Visitor<'de>>(
    ctx: Ctx,
    ty: Type,
    id: MessageId,
    b: &'de [u8],
    visitor: V,
) -> Result<V::Value, Error> {
    const NAME: &str = "JSONSchemaPropsOr";
    // Field numbers of the schema and of the other alternative.
    let (schema_field, other_field) = match ty {
        Type::SchemaPropsOrBool(_) => (2, 1),
        _ => (1, 2),
    };
    let mut schema = None;
    let mut allows = false;
    // The run of the array alternative's occurrences.
    let mut array: Option<(&'de [u8], usize)> = None;
    let mut r = Reader::new(b);
    loop {
        let start = r.rest();
        let Some((number, raw)) = r.field()? else {
            break;
        };
        if number == schema_field {
            schema = Some(expect_len(raw, NAME, number)?);
        } else if number == other_field {
            if let Type::SchemaPropsOrBool(_) = ty {
                allows = expect_varint(raw, NAME, number)? != 0;
                continue;
            }
            expect_len(raw, NAME, number)?;
            let used = start.len() - r.rest().len();
            array = match array {
                None => Some((start, used)),
                // Contiguous with the run so far.
                Some((run, len)) if run.len() - len == start.len() => Some((run, len + used)),
                Some(_) => {
                    return Err(Error::at_field(ErrorKind::NonContiguous, NAME, number));
                }
            };
        }
    }
    if let Some((run, len)) = array {
        let element = match ty {
            Type::SchemaPropsOrStringArray(_) => Type::String,
            _ => Type::Message(id),
        };
        return visitor.visit_seq(Elements {
            ctx,
            message: NAME,
            number: other_field,
            ty: element,
            reader: Reader::new(run.get(..len).unwrap_or_default()),
            packed: None,
            left: None,
        });
    }
    match (schema, ty) {
        (Some(s), _) => nested(ctx, s, id, visitor),
        (None, Type::SchemaPropsOrBool(_)) => visitor.visit_bool(allows),
        (None, _) => visitor.visit_unit(),
    }
}
