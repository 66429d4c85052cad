//! The body of a protobuf response: the `k8s\0` magic, then a `runtime.Unknown` whose `raw`
//! holds the object and whose type metadata names its message.

use serde::de::DeserializeOwned;

use super::{
    de::MessageDeserializer,
    direct,
    error::{Error, ErrorKind},
    schema::{BUILTIN, MessageId, Schema},
    wire::{Raw, Reader},
};
use crate::reflector::decode::{Cause, DecodeError, Projection};

/// The four bytes every Kubernetes protobuf body starts with.
pub const MAGIC: [u8; 4] = *b"k8s\0";

/// `runtime.Unknown`'s field numbers.
pub(crate) mod unknown {
    pub(crate) const TYPE_META: u32 = 1;
    pub(crate) const RAW: u32 = 2;
    pub(crate) const CONTENT_ENCODING: u32 = 3;
}

/// A parsed envelope.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Envelope<'a> {
    pub(crate) api_version: &'a str,
    pub(crate) kind: &'a str,
    pub(crate) raw: &'a [u8],
}

/// Strips the magic from `body`.
pub(crate) fn strip_magic(body: &[u8]) -> Result<&[u8], Error> {
    body.strip_prefix(&MAGIC[..])
        .ok_or_else(|| Error::new(ErrorKind::BadMagic))
}

/// The `apiVersion` and `kind` of a `runtime.TypeMeta` message.
pub(crate) fn type_meta(bytes: &[u8]) -> Result<(&str, &str), Error> {
    let (mut api_version, mut kind) = ("", "");
    let mut r = Reader::new(bytes);
    while let Some((number, raw)) = r.field()? {
        let slot = match number {
            1 => &mut api_version,
            2 => &mut kind,
            _ => continue,
        };
        *slot = utf8_field(raw, "TypeMeta", number)?;
    }
    Ok((api_version, kind))
}

/// A string field's value.
pub(crate) fn utf8_field<'a>(
    raw: Raw<'a>,
    message: &'static str,
    number: u32,
) -> Result<&'a str, Error> {
    let Raw::Len(b) = raw else {
        return Err(Error::at_field(ErrorKind::WrongWireType, message, number));
    };
    std::str::from_utf8(b).map_err(|_| Error::new(ErrorKind::InvalidUtf8))
}

/// A `contentEncoding` value: only none is the API server's.
pub(crate) fn check_content_encoding(raw: Raw<'_>) -> Result<(), Error> {
    match raw {
        Raw::Len([]) => Ok(()),
        _ => Err(Error::new(ErrorKind::BadEnvelope)),
    }
}

/// Parses a whole body: magic and `runtime.Unknown`.
pub(crate) fn envelope(body: &[u8]) -> Result<Envelope<'_>, Error> {
    let mut r = Reader::new(strip_magic(body)?);
    let mut meta = ("", "");
    let mut raw = None;
    while let Some((number, value)) = r.field()? {
        match number {
            unknown::TYPE_META => {
                let Raw::Len(b) = value else {
                    return Err(Error::at_field(ErrorKind::WrongWireType, "Unknown", number));
                };
                meta = type_meta(b)?;
            }
            unknown::RAW => match value {
                Raw::Len(b) => raw = Some(b),
                _ => return Err(Error::at_field(ErrorKind::WrongWireType, "Unknown", number)),
            },
            unknown::CONTENT_ENCODING => check_content_encoding(value)?,
            _ => {}
        }
    }
    Ok(Envelope {
        api_version: meta.0,
        kind: meta.1,
        raw: raw.ok_or_else(|| Error::new(ErrorKind::BadEnvelope))?,
    })
}

/// The message of `kind` in `api_version`. A `Status` (which the server sends in any group
/// version, as `v1` in watch errors) falls back to meta/v1's.
pub(crate) fn resolve(schema: &Schema, api_version: &str, kind: &str) -> Result<MessageId, Error> {
    schema
        .root(api_version, kind)
        .or_else(|| match kind {
            "Status" => message_named(schema, "k8s.io.apimachinery.pkg.apis.meta.v1.Status"),
            _ => None,
        })
        .ok_or_else(|| Error::unknown_kind(api_version, kind))
}

/// The message named `name`.
pub(crate) fn message_named(schema: &Schema, name: &str) -> Option<MessageId> {
    let i = schema.messages.iter().position(|m| m.name == name)?;
    u16::try_from(i).ok().map(MessageId)
}

fn object_error(what: &'static str, e: Error) -> DecodeError {
    DecodeError {
        what,
        error: Cause::Protobuf(e),
        offset: None,
    }
}

/// Decodes a top-level object body (a GET response) into `K`, with the fields `projection`
/// drops skipped.
///
/// `apiVersion` and `kind` come from the envelope, as the first two keys of the object, where
/// JSON has them.
///
/// # Errors
///
/// [`DecodeError`] when the body is not a protobuf object of a kind in
/// [`BUILTIN`](super::schema::BUILTIN), or its object does not decode as `K`
/// ([`DecodeError::protobuf_kind`] tells which).
pub fn decode_object<K: DeserializeOwned + 'static>(
    body: &[u8],
    projection: &Projection,
) -> Result<K, DecodeError> {
    decode_object_in(&BUILTIN, body, projection)
}

/// [`decode_object`] with the messages of `schema`.
pub(crate) fn decode_object_in<K: DeserializeOwned + 'static>(
    schema: &'static Schema,
    body: &[u8],
    projection: &Projection,
) -> Result<K, DecodeError> {
    decode_enveloped_object(schema, body, "object", projection)
}

/// [`decode_object`] through the serde path alone, never the direct decoders: the reference
/// the direct decoders are compared with, for differential tests, fuzzing and benchmarks.
///
/// # Errors
///
/// As [`decode_object`].
#[doc(hidden)]
pub fn decode_object_via_serde<K: DeserializeOwned>(
    body: &[u8],
    projection: &Projection,
) -> Result<K, DecodeError> {
    let run = || {
        let env = envelope(body)?;
        let id = resolve(&BUILTIN, env.api_version, env.kind)?;
        direct::serde_path(
            &BUILTIN,
            env.raw,
            id,
            Some((env.api_version, env.kind)),
            projection,
        )
    };
    run().map_err(|e| object_error("object", e))
}

/// Parses the envelope of `body` and decodes its object as a `K`.
pub(crate) fn decode_enveloped_object<K: DeserializeOwned + 'static>(
    schema: &'static Schema,
    body: &[u8],
    what: &'static str,
    projection: &Projection,
) -> Result<K, DecodeError> {
    let run = || {
        let env = envelope(body)?;
        let id = resolve(schema, env.api_version, env.kind)?;
        direct::decode(
            schema,
            env.raw,
            id,
            Some((env.api_version, env.kind)),
            projection,
        )
    };
    run().map_err(|e| object_error(what, e))
}

/// Parses the envelope of `body` and hands its object's deserializer to `f`.
pub(crate) fn decode_enveloped<'a, T>(
    schema: &'static Schema,
    body: &'a [u8],
    what: &'static str,
    f: impl FnOnce(MessageDeserializer<'a>) -> Result<T, Error>,
) -> Result<T, DecodeError> {
    let run = || {
        let env = envelope(body)?;
        let id = resolve(schema, env.api_version, env.kind)?;
        f(MessageDeserializer::new(env.raw, schema, id).with_type_meta(env.api_version, env.kind))
    };
    run().map_err(|e| object_error(what, e))
}
