//! Kubernetes protobuf (`application/vnd.kubernetes.protobuf`), the API server's default wire
//! format for built-in kinds, decoded straight into k8s-openapi's types.
//!
//! client-go asks for protobuf for built-in kinds (`Accept: application/vnd.kubernetes.protobuf,
//! application/json`) and decodes it with the generated Go unmarshalers. This module reaches the
//! same objects two ways, over one [`Schema`](schema::Schema) (generated from the Go types' struct
//! tags):
//!
//! - **directly** (module `direct`): decoders generated from the schema and k8s-openapi's own sources
//!   build each k8s-openapi struct in place, field by field, for the kinds k8s-openapi has (with
//!   its newest Kubernetes version feature, `v1_37`);
//! - **through serde** (module `de`), for every other target type (kube's `DynamicObject` and
//!   `PartialObjectMeta`, a `CustomResource`, or any type with another version feature): a
//!   `serde::Deserializer` over the wire bytes presents each message as the JSON object Go's
//!   `encoding/json` would write for it, so their `Deserialize` impls (and any
//!   [`Projection`](crate::reflector::decode::Projection)) see what they see in JSON.
//!
//! Both give the same object, which is the one JSON gives:
//!
//! - fields left out of JSON (`omitempty` zeros, the zero `metav1.Time`) are left out;
//! - `metav1.Time` and `MicroTime` become RFC 3339 strings, `Duration` Go's duration string,
//!   `Quantity` and `IntOrString` their JSON forms, bytes base64, raw JSON (`FieldsV1`,
//!   `RawExtension`) the JSON value it holds;
//! - fields unknown to the schema (from a newer server) are skipped, as client-go skips them.
//!
//! Bodies: a [GET](decode_object) and a [list](ProtobufListDecoder) are the `k8s\0` magic and a
//! `runtime.Unknown` envelope naming the kind; a [watch](decode_watch_frame) is a stream of
//! length-prefixed `metav1.WatchEvent` frames ([`LengthPrefixFramer`]), as apimachinery's
//! `LengthDelimitedFramer` and `RawSerializer` write them. Errors are
//! [`DecodeError`](crate::reflector::decode::DecodeError)s, redacted as for JSON, with a
//! [`ErrorKind`] for the protobuf class.
//!
//! One module per concept: the wire reader, the deserializer, the direct decoders, the
//! [envelope](decode_object), [lists](ProtobufListDecoder), [watch frames](decode_watch_frame), the JSON formats of times
//! and durations, and the [errors](Error).

pub(crate) mod de;
pub(crate) mod direct;
#[cfg(feature = "testing")]
pub mod encode;
mod envelope;
mod error;
mod format;
mod list;
pub mod schema;
mod watch;
mod wire;

pub(crate) use envelope::decode_object_in;
pub use envelope::{MAGIC, decode_object, decode_object_via_serde};
pub use error::{Error, ErrorKind};
pub use list::{ProtobufListDecoder, decode_list_map};
pub use watch::{LengthPrefixFramer, decode_watch_frame};
pub(crate) use watch::{parts as watch_frame_parts, undecodable_frame};

/// Whether `K` has a generated (direct) decoder for message `id` of `schema`: `K` is the
/// k8s-openapi type of that built-in kind, which decodes what the server encodes from its own
/// typed object; a type of the user's, decoded through serde, may not fit it.
#[cfg(feature = "compact")]
pub(crate) fn has_generated_decoder<K: 'static>(
    schema: &'static schema::Schema,
    id: schema::MessageId,
) -> bool {
    // An empty message is the type's default: cheap, and a decoder exists iff it gives one.
    matches!(
        direct::direct::<K>(
            schema,
            &[],
            id,
            None,
            &crate::reflector::decode::Projection::none()
        ),
        Ok(Some(_))
    )
}

/// Whether `K` is the k8s-openapi type of a built-in kind with a generated decoder (see
/// [`has_generated_decoder`]): one whose JSON decoding is k8s-openapi's own, which takes any
/// JSON value as a `managedFields` entry's `fieldsV1`.
#[cfg(feature = "compact")]
pub(crate) fn is_generated_kind<K: 'static>() -> bool {
    schema::BUILTIN
        .roots
        .iter()
        .any(|root| has_generated_decoder::<K>(&schema::BUILTIN, root.message))
}

/// The message of the object a whole protobuf body (the `k8s\0` magic and its envelope)
/// holds, read from the envelope; `None` if it does not parse or names no message of `schema`.
#[cfg(feature = "compact")]
pub(crate) fn enveloped_message(
    schema: &'static schema::Schema,
    body: &[u8],
) -> Option<schema::MessageId> {
    let env = envelope::envelope(body).ok()?;
    envelope::resolve(schema, env.api_version, env.kind).ok()
}

/// The `apiVersion` and `kind` a list item of message `id` is given. kube-apiserver's JSON
/// stamps each item of a `PartialObjectMetadataList` as `meta.k8s.io/v1`
/// `PartialObjectMetadata`, as watch events' objects are; protobuf cannot (the message has no
/// `TypeMeta`), so the decode gives it, for the same object as from JSON. Items of other lists
/// have none in either encoding.
pub(crate) fn list_item_type_meta(
    schema: &schema::Schema,
    id: schema::MessageId,
) -> Option<(&'static str, &'static str)> {
    const PARTIAL: (&str, &str) = ("meta.k8s.io/v1", "PartialObjectMetadata");
    (schema.root(PARTIAL.0, PARTIAL.1) == Some(id)).then_some(PARTIAL)
}

/// The media type of Kubernetes protobuf, for `Accept` and `Content-Type`.
pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

#[cfg(test)]
mod tests;
