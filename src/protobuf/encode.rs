//! An encoder from JSON objects (as the fake API server stores them) to kube-apiserver's
//! protobuf wire format (feature `testing`): the inverse of the decoder's mapping, field by
//! field as Go's gogo-protobuf code writes it.
//!
//! - [`encode_object`]: a whole response body, `k8s\0` + `runtime.Unknown{typeMeta, raw,
//!   contentEncoding, contentType}`, as apimachinery's protobuf serializer writes it;
//! - [`encode_list`]: the same for a list (`metadata` + `items`);
//! - [`encode_watch_event`]: one frame of a protobuf watch stream: a 4-byte big-endian length,
//!   then `metav1.WatchEvent{type, object: RawExtension{raw}}` *without* prefix or `Unknown`
//!   (the apiserver's stream serializer is the raw one), whose `raw` is the object encoded as
//!   [`encode_object`] does;
//! - [`Encoder::message`]: one message by its [`MessageId`], for other schemas than
//!   [`BUILTIN`].
//!
//! The mapping, per [`Field`]: JSON keys the message does not have (and `apiVersion` / `kind`,
//! which travel in the envelope) are left out, as is a key whose value is `null` (a `null` in a
//! list or as a map value is the type's zero value, as Go's `encoding/json` decodes it); repeated
//! fields are consecutive occurrences (unpacked, as proto2); map entries are `{key = 1,
//! value = 2}` sorted by key, as Go sorts them; an inline field gathers the parent's keys into
//! one nested message; fields go out in field-number order. A value of the wrong JSON type is
//! an [`EncodeError`] naming the field's path, never its value.

use serde_json::{Map, Value};

use super::schema::{BUILTIN, Card, Field, MessageId, Schema, Type};

pub use super::{CONTENT_TYPE, MAGIC};

/// The media type of protobuf watch streams, as kube-apiserver sends it.
pub const WATCH_CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";

/// How deep messages may nest (`JSONSchemaProps` is recursive) before encoding gives up.
const MAX_DEPTH: usize = 128;

/// Why a JSON value could not be encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// The schema has no message for this `apiVersion` and `kind`.
    #[error("no protobuf message for apiVersion {api_version:?} kind {kind:?}")]
    UnknownKind {
        /// The `apiVersion` asked for.
        api_version: String,
        /// The `kind` asked for.
        kind: String,
    },
    /// A value has another JSON type than its field needs.
    #[error("{path}: expected {expected}, found {found}")]
    WrongType {
        /// The JSON path of the value, e.g. `.spec.containers[0].ports[1].containerPort`.
        path: String,
        /// What the field needs (`a string`, `an int32`, ...).
        expected: &'static str,
        /// The JSON type found (`a number`, `an object`, ...).
        found: &'static str,
    },
    /// A value has the right JSON type but not a valid form (bad base64, a time that is not
    /// RFC 3339, a number out of the field's range).
    #[error("{path}: invalid {what}")]
    Invalid {
        /// The JSON path of the value.
        path: String,
        /// What it should have been (`base64`, `RFC 3339 time`, `int32`, ...).
        what: &'static str,
    },
    /// Messages nest deeper than the encoder follows.
    #[error("{path}: nested too deeply")]
    TooDeep {
        /// The JSON path where it stopped.
        path: String,
    },
    /// A list's message has no `metadata` or `items` field.
    #[error("{kind} is not a list kind")]
    NotAList {
        /// The list kind asked for.
        kind: String,
    },
}

impl EncodeError {
    /// Prefixes the error's path with `seg` (`.name` or `[i]`), on the way out of recursion.
    fn at(mut self, seg: &Seg<'_>) -> Self {
        if let EncodeError::WrongType { path, .. }
        | EncodeError::Invalid { path, .. }
        | EncodeError::TooDeep { path } = &mut self
        {
            let mut p = seg.to_string();
            p.push_str(path);
            *path = p;
        }
        self
    }
}

/// One step of a JSON path.
enum Seg<'a> {
    Key(&'a str),
    Index(usize),
}

impl std::fmt::Display for Seg<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Seg::Key(k) => write!(f, ".{k}"),
            Seg::Index(i) => write!(f, "[{i}]"),
        }
    }
}

fn wrong(expected: &'static str, v: &Value) -> EncodeError {
    let found = match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    EncodeError::WrongType {
        path: String::new(),
        expected,
        found,
    }
}

fn invalid(what: &'static str) -> EncodeError {
    EncodeError::Invalid {
        path: String::new(),
        what,
    }
}

// Wire types.
const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LEN: u32 = 2;
const FIXED32: u32 = 5;

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        // Truncation intended: the low seven bits and the continuation bit.
        out.push((v & 0x7f) as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_tag(out: &mut Vec<u8>, number: u32, wire: u32) {
    put_varint(out, u64::from(number << 3 | wire));
}

fn put_bytes(out: &mut Vec<u8>, number: u32, bytes: &[u8]) {
    put_tag(out, number, LEN);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// A nested message as field `number`, written by `body` straight into `out`: the length
/// is reserved as one byte and widened in place afterwards if the message is 128 bytes or
/// longer, so nesting allocates nothing.
fn put_nested<E>(
    out: &mut Vec<u8>,
    number: u32,
    body: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
) -> Result<(), E> {
    put_tag(out, number, LEN);
    let len_at = out.len();
    out.push(0);
    let start = out.len();
    body(out)?;
    let len = (out.len() - start) as u64;
    if len < 0x80 {
        if let Some(b) = out.get_mut(len_at) {
            // `len` < 128 here.
            *b = len as u8;
        }
    } else {
        let mut prefix = Vec::with_capacity(10);
        put_varint(&mut prefix, len);
        out.splice(len_at..start, prefix);
    }
    Ok(())
}

fn put_uint(out: &mut Vec<u8>, number: u32, v: u64) {
    put_tag(out, number, VARINT);
    put_varint(out, v);
}

/// An `int32` or `int64`: negative numbers are sign-extended to ten bytes, as protobuf does.
fn put_int(out: &mut Vec<u8>, number: u32, v: i64) {
    // Two's complement reinterpretation is the protobuf varint encoding of a signed int.
    put_uint(out, number, v as u64);
}

/// Encodes JSON values as messages of one [`Schema`].
#[derive(Debug, Clone, Copy)]
pub struct Encoder {
    schema: &'static Schema,
}

impl Default for Encoder {
    fn default() -> Self {
        Self::new(&BUILTIN)
    }
}

impl Encoder {
    /// An encoder for `schema` ([`BUILTIN`] for the Kubernetes built-in kinds).
    #[must_use]
    pub const fn new(schema: &'static Schema) -> Self {
        Self { schema }
    }

    /// The schema this encoder writes.
    #[must_use]
    pub fn schema(&self) -> &'static Schema {
        self.schema
    }

    /// The message of `api_version` `kind`.
    fn root(&self, api_version: &str, kind: &str) -> Result<MessageId, EncodeError> {
        self.schema
            .root(api_version, kind)
            .ok_or_else(|| EncodeError::UnknownKind {
                api_version: api_version.to_string(),
                kind: kind.to_string(),
            })
    }

    /// Whether the schema has a message for `api_version` `kind`.
    #[must_use]
    pub fn has_kind(&self, api_version: &str, kind: &str) -> bool {
        self.schema.root(api_version, kind).is_some()
    }

    /// The bare message `id` for the JSON object `obj` (no envelope).
    ///
    /// # Errors
    ///
    /// [`EncodeError::WrongType`] if `obj` or a value in it has the wrong JSON type,
    /// [`EncodeError::Invalid`] for a malformed value, [`EncodeError::TooDeep`].
    pub fn message(&self, id: MessageId, obj: &Value) -> Result<Vec<u8>, EncodeError> {
        let map = obj.as_object().ok_or_else(|| wrong("an object", obj))?;
        let mut out = Vec::new();
        self.fields(&mut out, id, map, 0)?;
        Ok(out)
    }

    /// A response body: `k8s\0` + `runtime.Unknown` holding `obj` as the message of
    /// `api_version` `kind`.
    ///
    /// # Errors
    ///
    /// [`EncodeError::UnknownKind`] if the schema lacks the kind, else as
    /// [`message`](Self::message).
    pub fn object(
        &self,
        api_version: &str,
        kind: &str,
        obj: &Value,
    ) -> Result<Vec<u8>, EncodeError> {
        let raw = self.message(self.root(api_version, kind)?, obj)?;
        Ok(unknown(api_version, kind, &raw))
    }

    /// A list response body: `k8s\0` + `runtime.Unknown` holding the `list_kind` message
    /// (`PodList`, `PartialObjectMetadataList`) with `metadata` (a `ListMeta` as JSON) and
    /// `items` (each an object as JSON).
    ///
    /// # Errors
    ///
    /// [`EncodeError::UnknownKind`], [`EncodeError::NotAList`] if the message lacks `metadata`
    /// or `items`, else as [`message`](Self::message) (paths start at `.items[i]`).
    pub fn list(
        &self,
        api_version: &str,
        list_kind: &str,
        metadata: &Value,
        items: &[&Value],
    ) -> Result<Vec<u8>, EncodeError> {
        let id = self.root(api_version, list_kind)?;
        let msg = self.schema.message(id);
        let field = |json: &str| msg.fields.iter().find(|f| f.json == json && !f.inline);
        let (Some(meta_field), Some(items_field)) = (field("metadata"), field("items")) else {
            return Err(EncodeError::NotAList {
                kind: list_kind.to_string(),
            });
        };
        let mut raw = Vec::new();
        // Field-number order, as every other message.
        let write_meta = |raw: &mut Vec<u8>| {
            self.value(raw, meta_field.number, meta_field.ty, metadata, 1)
                .map_err(|e| e.at(&Seg::Key("metadata")))
        };
        let write_items = |raw: &mut Vec<u8>| {
            items.iter().enumerate().try_for_each(|(i, item)| {
                self.value(raw, items_field.number, items_field.ty, item, 1)
                    .map_err(|e| e.at(&Seg::Index(i)).at(&Seg::Key("items")))
            })
        };
        if meta_field.number < items_field.number {
            write_meta(&mut raw)?;
            write_items(&mut raw)?;
        } else {
            write_items(&mut raw)?;
            write_meta(&mut raw)?;
        }
        Ok(unknown(api_version, list_kind, &raw))
    }

    /// One watch stream frame: a 4-byte big-endian length, then `metav1.WatchEvent{type = 1,
    /// object = 2 RawExtension{raw = 1}}` whose `raw` is [`object`](Self::object)'s body for
    /// `obj`. `ERROR` events carry a `Status` (`api_version` `v1`, `kind` `Status`).
    ///
    /// # Errors
    ///
    /// As [`object`](Self::object).
    pub fn watch_event(
        &self,
        event_type: &str,
        api_version: &str,
        kind: &str,
        obj: &Value,
    ) -> Result<Vec<u8>, EncodeError> {
        let inner = self.object(api_version, kind, obj)?;
        let mut raw_ext = Vec::with_capacity(inner.len() + 6);
        put_bytes(&mut raw_ext, 1, &inner);
        let mut event = Vec::with_capacity(raw_ext.len() + event_type.len() + 8);
        put_bytes(&mut event, 1, event_type.as_bytes());
        put_bytes(&mut event, 2, &raw_ext);
        let len = u32::try_from(event.len()).map_err(|_| invalid("frame size"))?;
        let mut frame = Vec::with_capacity(event.len() + 4);
        frame.extend_from_slice(&len.to_be_bytes());
        frame.extend_from_slice(&event);
        Ok(frame)
    }

    /// Writes the fields of message `id` found in `map`, in field-number order.
    fn fields(
        &self,
        out: &mut Vec<u8>,
        id: MessageId,
        map: &Map<String, Value>,
        depth: usize,
    ) -> Result<(), EncodeError> {
        if depth > MAX_DEPTH {
            return Err(EncodeError::TooDeep {
                path: String::new(),
            });
        }
        for field in self.schema.message(id).fields {
            if field.inline {
                self.inline(out, field, map, depth)?;
                continue;
            }
            let Some(v) = map.get(field.json).filter(|v| !v.is_null()) else {
                continue;
            };
            self.field(out, field, v, depth)
                .map_err(|e| e.at(&Seg::Key(field.json)))?;
        }
        Ok(())
    }

    /// An inline field: one nested message of the parent's keys that are its fields. Written
    /// even when empty, as Go writes an embedded (non-pointer) struct.
    fn inline(
        &self,
        out: &mut Vec<u8>,
        field: &Field,
        map: &Map<String, Value>,
        depth: usize,
    ) -> Result<(), EncodeError> {
        let Type::Message(inner) = field.ty else {
            return Ok(());
        };
        put_nested(out, field.number, |out| {
            self.fields(out, inner, map, depth + 1)
        })
    }

    fn field(
        &self,
        out: &mut Vec<u8>,
        field: &Field,
        v: &Value,
        depth: usize,
    ) -> Result<(), EncodeError> {
        match field.card {
            Card::Single => self.value(out, field.number, field.ty, v, depth),
            Card::Repeated => {
                let items = v.as_array().ok_or_else(|| wrong("an array", v))?;
                let zero = null_as_zero(field.ty);
                items.iter().enumerate().try_for_each(|(i, item)| {
                    let item = match (item, &zero) {
                        (Value::Null, Some(z)) => z,
                        _ => item,
                    };
                    self.value(out, field.number, field.ty, item, depth)
                        .map_err(|e| e.at(&Seg::Index(i)))
                })
            }
            Card::Map(key_ty) => {
                let map = v.as_object().ok_or_else(|| wrong("an object", v))?;
                let mut keys: Vec<&String> = map.keys().collect();
                // Go's generated marshallers sort map keys (byte order for strings).
                keys.sort_unstable();
                let zero = null_as_zero(field.ty);
                for key in keys {
                    let Some(value) = map.get(key) else { continue };
                    let value = match (value, &zero) {
                        // A nil `[]byte` value: gogo writes the key alone.
                        (Value::Null, Some(_)) if field.ty == Type::Bytes => None,
                        (Value::Null, Some(z)) => Some(z),
                        _ => Some(value),
                    };
                    put_nested(out, field.number, |entry| {
                        map_key(entry, key_ty, key)?;
                        match value {
                            Some(value) => self.value(entry, 2, field.ty, value, depth),
                            None => Ok(()),
                        }
                    })
                    .map_err(|e| e.at(&Seg::Key(key)))?;
                }
                Ok(())
            }
        }
    }

    /// One value of type `ty` as field `number`.
    fn value(
        &self,
        out: &mut Vec<u8>,
        number: u32,
        ty: Type,
        v: &Value,
        depth: usize,
    ) -> Result<(), EncodeError> {
        let message = |out: &mut Vec<u8>, number: u32, id: MessageId, v: &Value| {
            let map = v.as_object().ok_or_else(|| wrong("an object", v))?;
            put_nested(out, number, |out| self.fields(out, id, map, depth + 1))
        };
        match ty {
            Type::Message(id) => message(out, number, id, v)?,
            Type::SchemaPropsOrArray(id) => put_nested(out, number, |out| match v {
                Value::Object(_) => message(out, 1, id, v),
                Value::Array(items) => items.iter().enumerate().try_for_each(|(i, item)| {
                    message(out, 2, id, item).map_err(|e| e.at(&Seg::Index(i)))
                }),
                _ => Err(wrong("an object or an array", v)),
            })?,
            Type::SchemaPropsOrBool(id) => put_nested(out, number, |out| match v {
                Value::Bool(b) => {
                    put_uint(out, 1, u64::from(*b));
                    Ok(())
                }
                // Go's UnmarshalJSON of an object sets `Allows` too, and it is always written.
                Value::Object(_) => {
                    put_uint(out, 1, 1);
                    message(out, 2, id, v)
                }
                _ => Err(wrong("a boolean or an object", v)),
            })?,
            Type::SchemaPropsOrStringArray(id) => put_nested(out, number, |out| match v {
                Value::Object(_) => message(out, 1, id, v),
                Value::Array(items) => items.iter().enumerate().try_for_each(|(i, item)| {
                    let item = if item.is_null() { &EMPTY_STRING } else { item };
                    scalar(out, 2, Type::String, item).map_err(|e| e.at(&Seg::Index(i)))
                }),
                _ => Err(wrong("an object or an array", v)),
            })?,
            _ => scalar(out, number, ty, v)?,
        }
        Ok(())
    }
}

/// A map entry's key (field 1) from its JSON object key.
fn map_key(out: &mut Vec<u8>, ty: Type, key: &str) -> Result<(), EncodeError> {
    match ty {
        Type::String => put_bytes(out, 1, key.as_bytes()),
        Type::Int32 | Type::Int64 | Type::Uint32 | Type::Uint64 | Type::Bool => {
            let v: Value = serde_json::from_str(key).map_err(|_| invalid("map key"))?;
            scalar(out, 1, ty, &v)?;
        }
        _ => return Err(invalid("map key type")),
    }
    Ok(())
}

/// `""`, what a `null` element of a `[]string` decodes to.
static EMPTY_STRING: Value = Value::String(String::new());

/// Unix seconds of Go's zero `time.Time`, `0001-01-01T00:00:00Z`.
const GO_ZERO_TIME_UNIX: i64 = -62_135_596_800;

/// What Go's `encoding/json` makes of a `null` element of a list or value of a map of `ty`: the
/// type's zero value (a `null` field is left out instead, as the encoder leaves out any
/// `null` key). `None` where Go's decoding of `null` fails (a `Duration`) or the value is kept
/// as it is (raw JSON).
fn null_as_zero(ty: Type) -> Option<Value> {
    Some(match ty {
        Type::String | Type::Bytes => Value::String(String::new()),
        Type::Bool => Value::Bool(false),
        Type::Int32 | Type::Int64 | Type::Uint32 | Type::Uint64 | Type::IntOrString => {
            Value::from(0)
        }
        Type::Double | Type::Float => Value::from(0.0),
        Type::Message(_) => Value::Object(Map::new()),
        Type::Time | Type::MicroTime => Value::String("0001-01-01T00:00:00Z".into()),
        Type::Quantity => Value::String("0".into()),
        Type::Duration
        | Type::RawJson
        | Type::Strings
        | Type::SchemaPropsOrArray(_)
        | Type::SchemaPropsOrBool(_)
        | Type::SchemaPropsOrStringArray(_) => return None,
    })
}

/// A value of a non-message type (messages with fixed shapes included: times, quantities).
fn scalar(out: &mut Vec<u8>, number: u32, ty: Type, v: &Value) -> Result<(), EncodeError> {
    match ty {
        Type::String => put_bytes(out, number, str_of(v)?.as_bytes()),
        Type::Bytes => put_bytes(out, number, &base64_decode(str_of(v)?)?),
        Type::Bool => put_uint(
            out,
            number,
            u64::from(v.as_bool().ok_or_else(|| wrong("a boolean", v))?),
        ),
        Type::Int32 => put_int(out, number, int32_of(v, "an int32")?),
        Type::Int64 => put_int(out, number, int_of(v, "an int64")?),
        Type::Uint32 => {
            let n = uint_of(v, "a uint32")?;
            if u32::try_from(n).is_err() {
                return Err(invalid("uint32 (out of range)"));
            }
            put_uint(out, number, n);
        }
        Type::Uint64 => put_uint(out, number, uint_of(v, "a uint64")?),
        Type::Double => {
            let f = v.as_f64().ok_or_else(|| wrong("a number", v))?;
            put_tag(out, number, FIXED64);
            out.extend_from_slice(&f.to_le_bytes());
        }
        Type::Float => {
            let f = v.as_f64().ok_or_else(|| wrong("a number", v))?;
            put_tag(out, number, FIXED32);
            // Narrowing intended: the field is a float.
            out.extend_from_slice(&(f as f32).to_le_bytes());
        }
        Type::Time | Type::MicroTime => {
            let (secs, nanos) =
                parse_rfc3339(str_of(v)?).ok_or_else(|| invalid("RFC 3339 time"))?;
            if secs == GO_ZERO_TIME_UNIX && nanos == 0 {
                // Go's zero `time.Time` (`0001-01-01T00:00:00Z`): `Time.MarshalToSizedBuffer`
                // and `MicroTime`'s write nothing when `IsZero`, so an empty message.
                put_bytes(out, number, &[]);
                return Ok(());
            }
            // `Time.ProtoTime` drops the fraction (its JSON has whole seconds); `MicroTime`
            // keeps microseconds. Both write `nanos`, even 0.
            let nanos = if ty == Type::Time {
                0
            } else {
                nanos / 1000 * 1000
            };
            put_nested(out, number, |ts| {
                put_int(ts, 1, secs);
                put_int(ts, 2, i64::from(nanos));
                Ok(())
            })?;
        }
        Type::Duration => {
            let nanos = parse_go_duration(str_of(v)?).ok_or_else(|| invalid("Go duration"))?;
            put_nested(out, number, |d| {
                put_int(d, 1, nanos);
                Ok(())
            })?;
        }
        Type::Quantity => {
            let text = match v {
                Value::String(s) => std::borrow::Cow::Borrowed(s.as_str()),
                // Go's Quantity reads JSON numbers too.
                Value::Number(n) => std::borrow::Cow::Owned(n.to_string()),
                _ => return Err(wrong("a quantity string", v)),
            };
            put_nested(out, number, |q| {
                put_bytes(q, 1, text.as_bytes());
                Ok(())
            })?;
        }
        Type::IntOrString => {
            // Go writes all three fields of `intstr.IntOrString`, zero or not.
            let (kind, int, text) = match v {
                Value::Number(_) => (0, int32_of(v, "an int32 or a string")?, ""),
                Value::String(s) => (1, 0, s.as_str()),
                _ => return Err(wrong("an int32 or a string", v)),
            };
            put_nested(out, number, |m| {
                put_uint(m, 1, kind);
                put_int(m, 2, int);
                put_bytes(m, 3, text.as_bytes());
                Ok(())
            })?;
        }
        Type::RawJson => {
            let raw = serde_json::to_vec(v).map_err(|_| invalid("JSON"))?;
            put_nested(out, number, |m| {
                put_bytes(m, 1, &raw);
                Ok(())
            })?;
        }
        Type::Strings => {
            let items = v
                .as_array()
                .ok_or_else(|| wrong("an array of strings", v))?;
            put_nested(out, number, |m| {
                items.iter().enumerate().try_for_each(|(i, item)| {
                    // A `null` element is "", as Go decodes it into a `[]string`.
                    let text = match item {
                        Value::Null => "",
                        _ => str_of(item).map_err(|e| e.at(&Seg::Index(i)))?,
                    };
                    put_bytes(m, 1, text.as_bytes());
                    Ok(())
                })
            })?;
        }
        // Messages are `Encoder::value`'s.
        Type::Message(_)
        | Type::SchemaPropsOrArray(_)
        | Type::SchemaPropsOrBool(_)
        | Type::SchemaPropsOrStringArray(_) => return Err(invalid("nested message position")),
    }
    Ok(())
}

fn str_of(v: &Value) -> Result<&str, EncodeError> {
    v.as_str().ok_or_else(|| wrong("a string", v))
}

fn int_of(v: &Value, expected: &'static str) -> Result<i64, EncodeError> {
    match v {
        Value::Number(n) => n.as_i64().ok_or_else(|| invalid("integer")),
        _ => Err(wrong(expected, v)),
    }
}

fn int32_of(v: &Value, expected: &'static str) -> Result<i64, EncodeError> {
    let n = int_of(v, expected)?;
    i32::try_from(n)
        .map(i64::from)
        .map_err(|_| invalid("int32 (out of range)"))
}

fn uint_of(v: &Value, expected: &'static str) -> Result<u64, EncodeError> {
    match v {
        Value::Number(n) => n.as_u64().ok_or_else(|| invalid("unsigned integer")),
        _ => Err(wrong(expected, v)),
    }
}

/// `k8s\0` + `runtime.Unknown{typeMeta = 1{apiVersion = 1, kind = 2}, raw = 2,
/// contentEncoding = 3, contentType = 4}`, every field written (the last two empty), as
/// apimachinery's protobuf serializer does.
fn unknown(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let mut type_meta = Vec::with_capacity(api_version.len() + kind.len() + 4);
    put_bytes(&mut type_meta, 1, api_version.as_bytes());
    put_bytes(&mut type_meta, 2, kind.as_bytes());
    let mut out = Vec::with_capacity(MAGIC.len() + type_meta.len() + raw.len() + 16);
    out.extend_from_slice(&MAGIC);
    put_bytes(&mut out, 1, &type_meta);
    put_bytes(&mut out, 2, raw);
    put_bytes(&mut out, 3, b"");
    put_bytes(&mut out, 4, b"");
    out
}

/// [`Encoder::object`] with the [`BUILTIN`] schema.
///
/// # Errors
///
/// As [`Encoder::object`].
pub fn encode_object(api_version: &str, kind: &str, obj: &Value) -> Result<Vec<u8>, EncodeError> {
    Encoder::default().object(api_version, kind, obj)
}

/// [`Encoder::list`] with the [`BUILTIN`] schema.
///
/// # Errors
///
/// As [`Encoder::list`].
pub fn encode_list(
    api_version: &str,
    list_kind: &str,
    metadata: &Value,
    items: &[&Value],
) -> Result<Vec<u8>, EncodeError> {
    Encoder::default().list(api_version, list_kind, metadata, items)
}

/// [`Encoder::watch_event`] with the [`BUILTIN`] schema: one length-prefixed watch frame.
///
/// # Errors
///
/// As [`Encoder::watch_event`].
pub fn encode_watch_event(
    event_type: &str,
    api_version: &str,
    kind: &str,
    obj: &Value,
) -> Result<Vec<u8>, EncodeError> {
    Encoder::default().watch_event(event_type, api_version, kind, obj)
}

/// Standard base64 (RFC 4648, `+/`) as Go's `encoding/json` reads a `[]byte`
/// (`base64.StdEncoding.Decode`): `\r` and `\n` anywhere are skipped, `=` padding is
/// required, and non-zero trailing bits in the last quantum are ignored (the encoding is not
/// `Strict`).
fn base64_decode(s: &str) -> Result<Vec<u8>, EncodeError> {
    fn sextet(c: u8) -> Option<u32> {
        match c {
            b'A'..=b'Z' => Some(u32::from(c - b'A')),
            b'a'..=b'z' => Some(u32::from(c - b'a') + 26),
            b'0'..=b'9' => Some(u32::from(c - b'0') + 52),
            b'+' => Some(62),
            b'/' => Some(63),
            _ => None,
        }
    }
    let bytes: Vec<u8> = s.bytes().filter(|&c| c != b'\r' && c != b'\n').collect();
    if !bytes.len().is_multiple_of(4) {
        return Err(invalid("base64"));
    }
    let quanta = bytes.len() / 4;
    let mut out = Vec::with_capacity(quanta * 3);
    for (q, chunk) in bytes.chunks(4).enumerate() {
        // `=` only ends the last quantum, as `==` or `=`.
        let data = match chunk {
            [a, b, b'=', b'='] => &[*a, *b][..],
            [a, b, c, b'='] => &[*a, *b, *c][..],
            _ => chunk,
        };
        if data.len() < 4 && q + 1 != quanta {
            return Err(invalid("base64"));
        }
        let mut acc = 0u32;
        for &c in data {
            acc = acc << 6 | sextet(c).ok_or_else(|| invalid("base64"))?;
        }
        // Shift into a full 24-bit quantum; the bits past the data are dropped.
        acc <<= 6 * (4 - data.len());
        let be = acc.to_be_bytes();
        out.extend_from_slice(&be[1..data.len()]);
    }
    Ok(out)
}

/// An RFC 3339 time (`2006-01-02T15:04:05.999999999Z07:00`) as Unix seconds and nanoseconds.
fn parse_rfc3339(s: &str) -> Option<(i64, u32)> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let digits = b.get(r)?;
        digits.iter().try_fold(0i64, |acc, &d| {
            d.is_ascii_digit().then(|| acc * 10 + i64::from(d - b'0'))
        })
    };
    let sep = |i: usize, c: &[u8]| b.get(i).is_some_and(|x| c.contains(x));
    if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt") && sep(13, b":") && sep(16, b":")) {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, min, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || min > 59 || sec > 59 {
        return None;
    }
    let mut i = 19;
    let mut nanos = 0u32;
    if sep(i, b".") {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            if i - start < 9 {
                nanos = nanos * 10 + u32::from(b[i] - b'0');
            }
            i += 1;
        }
        let n = i - start;
        if n == 0 {
            return None;
        }
        for _ in n..9 {
            nanos *= 10;
        }
    }
    let offset = match b.get(i..)? {
        b"Z" | b"z" => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let two = |a: u8, c: u8| -> Option<i64> {
                (a.is_ascii_digit() && c.is_ascii_digit())
                    .then(|| i64::from(a - b'0') * 10 + i64::from(c - b'0'))
            };
            let (h, m) = (two(*h1, *h2)?, two(*m1, *m2)?);
            if h > 23 || m > 59 {
                return None;
            }
            let off = h * 3600 + m * 60;
            if *sign == b'-' { -off } else { off }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    Some((days * 86_400 + hour * 3600 + min * 60 + sec - offset, nanos))
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A Go duration string (`time.ParseDuration`: `1h2m3.5s`, `-300ms`, `0`) in nanoseconds.
fn parse_go_duration(s: &str) -> Option<i64> {
    let (neg, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Some(0);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let int_end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (int_part, after) = rest.split_at(int_end);
        let (frac_part, after) = match after.strip_prefix('.') {
            Some(a) => {
                let end = a.find(|c: char| !c.is_ascii_digit()).unwrap_or(a.len());
                a.split_at(end)
            }
            None => ("", after),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return None;
        }
        let unit_end = after
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_end);
        let scale: u64 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return None,
        };
        let whole: u64 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().ok()?
        };
        let mut v = whole.checked_mul(scale)?;
        // The fraction, digit by digit, truncated as Go's `leadingFraction` does.
        let mut place = scale;
        for d in frac_part.bytes() {
            place /= 10;
            if place == 0 {
                break;
            }
            v = v.checked_add(u64::from(d - b'0') * place)?;
        }
        total = total.checked_add(v)?;
        rest = next;
    }
    if neg {
        0i64.checked_sub_unsigned(total)
    } else {
        i64::try_from(total).ok()
    }
}

#[cfg(test)]
mod tests;
