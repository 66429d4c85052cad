//! Direct decoders: protobuf bytes built into k8s-openapi's structs in place, field by field.
//!
//! The serde path ([`de`](super::de)) presents each message as the JSON object Go would write,
//! so k8s-openapi's visitors build it as from JSON: they match every key by name, wrap every
//! value in an `Option` and move each finished struct into its parent (a `Container` is 2.3 KB).
//! The times go through RFC 3339 text and back, bytes through base64. That glue is most of a
//! decode. The decoders in `generated.rs` (from the schema and k8s-openapi's sources, by
//! `scripts/protobuf-direct.py`) match the field number instead, write each value into its
//! place in the struct being built, size each `Vec` once from the run of its occurrences, and
//! build times, quantities and bytes from their binary form.
//!
//! They give the object the serde path gives, field for field; the serde path stays the
//! reference (the tests decode both ways and compare). The few values the generator has no
//! direct arm for (raw JSON, durations, the `JSONSchemaProps` unions) decode through the serde
//! path one value at a time, so a message is never decoded halfway by each.
//!
//! One difference, on input the API server does not write: the occurrences of a repeated or
//! map field that are not contiguous (other fields between them) are all kept, as protobuf
//! specifies, where the serde path refuses them. Anything the serde path decodes, these decode
//! the same (the fuzzer checks it); a message field that occurs twice is its last occurrence in
//! both.
//!
//! The generated code is for k8s-openapi's newest Kubernetes version (`v1_37`), whose structs
//! it names field by field. With another version feature enabled it is left out, and every
//! object decodes through the serde path: the same objects, more slowly.

use std::any::Any;

use serde::de::DeserializeOwned;

use super::{
    de::MessageDeserializer,
    error::Error,
    schema::{BUILTIN, MessageId, Schema},
};
use crate::reflector::decode::Projection;

k8s_openapi::k8s_if_1_37! {
    #[rustfmt::skip]
    mod generated;
    mod rt;
}

#[cfg(test)]
mod tests;

/// Decodes the message `id` of `schema` in `bytes` as a `K`, with what `projection` drops
/// skipped: directly when `K` is the k8s-openapi type of the kind `id` is (and its
/// `apiVersion` and `kind` are `type_meta`'s, when given), through serde otherwise.
pub(crate) fn decode<K: DeserializeOwned + 'static>(
    schema: &'static Schema,
    bytes: &[u8],
    id: MessageId,
    type_meta: Option<(&str, &str)>,
    projection: &Projection,
) -> Result<K, Error> {
    if let Some(k) = direct::<K>(schema, bytes, id, type_meta, projection)? {
        return Ok(k);
    }
    serde_path(schema, bytes, id, type_meta, projection)
}

/// The serde path of [`decode`].
pub(crate) fn serde_path<K: DeserializeOwned>(
    schema: &'static Schema,
    bytes: &[u8],
    id: MessageId,
    type_meta: Option<(&str, &str)>,
    projection: &Projection,
) -> Result<K, Error> {
    let de = MessageDeserializer::new(bytes, schema, id);
    match type_meta {
        Some((api_version, kind)) => projection.deserialize(de.with_type_meta(api_version, kind)),
        None => projection.deserialize(de),
    }
}

/// The direct decode of [`decode`]: `Ok(None)` when there is no direct decoder for `K` and
/// `id`.
#[allow(unused_variables)]
pub(crate) fn direct<K: 'static>(
    schema: &'static Schema,
    bytes: &[u8],
    id: MessageId,
    type_meta: Option<(&str, &str)>,
    projection: &Projection,
) -> Result<Option<K>, Error> {
    let mut slot: Option<K> = None;
    if !std::ptr::eq(schema, &BUILTIN) {
        return Ok(None);
    }
    let done = root(
        id.0,
        &mut slot as &mut dyn Any,
        bytes,
        type_meta,
        projection,
    )?;
    Ok(if done { slot } else { None })
}

k8s_openapi::k8s_if_1_37! {
    fn root(
        id: u16,
        slot: &mut dyn Any,
        bytes: &[u8],
        type_meta: Option<(&str, &str)>,
        projection: &Projection,
    ) -> Result<bool, Error> {
        generated::root(id, slot, bytes, type_meta, projection.root())
    }
}

k8s_openapi::k8s_if_le_1_36! {
    #[allow(clippy::unnecessary_wraps)]
    fn root(
        _id: u16,
        _slot: &mut dyn Any,
        _bytes: &[u8],
        _type_meta: Option<(&str, &str)>,
        _projection: &Projection,
    ) -> Result<bool, Error> {
        Ok(false)
    }
}
