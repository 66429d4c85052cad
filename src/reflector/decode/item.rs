//! One list item's bytes as the server sent them, for a store that keeps objects in a form of
//! its own (the compact cache): it can hold those bytes instead of a decoded object, and never
//! encode the object again (issue #12 part 4).

use std::collections::BTreeMap;

use serde::{Deserialize, de::DeserializeOwned};

use super::{Cause, DecodeError};
use crate::{
    protobuf::schema::{MessageId, Schema},
    store::{KeyError, ObjectKey},
};

/// One listed object undecoded: its bytes as the server sent them (after the list's framing),
/// and how to read them again. Made by the list decoders, handed to
/// [`ReflectorStore::list_item_bytes`](crate::reflector::ReflectorStore::list_item_bytes).
#[derive(Clone, Copy)]
pub struct ItemBytes<'a> {
    pub(crate) bytes: &'a [u8],
    pub(crate) encoding: ItemEncoding,
}

impl std::fmt::Debug for ItemBytes<'_> {
    // The bytes are the object's: never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ItemBytes")
            .field("len", &self.bytes.len())
            .field("encoding", &self.encoding)
            .finish()
    }
}

impl<'a> ItemBytes<'a> {
    /// The bytes.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Decodes the object (with no projection: the bytes are whole).
    ///
    /// # Errors
    ///
    /// The bytes do not decode as `K`; the error is redacted.
    pub fn decode<K: DeserializeOwned + 'static>(&self) -> Result<K, DecodeError> {
        self.encoding.decode(self.bytes)
    }
}

/// How an item's bytes are encoded.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ItemEncoding {
    /// One JSON object.
    Json,
    /// One protobuf message of `schema` (a list's item: no `k8s\0` envelope, no length prefix).
    Protobuf {
        schema: &'static Schema,
        message: MessageId,
    },
    /// A whole protobuf object body of `schema`: the `k8s\0` magic and the `runtime.Unknown`
    /// envelope that names the kind (a watch event's object). Decoded as a GET response is, so
    /// `apiVersion` and `kind` come from the envelope as in the decoded watch event.
    Enveloped { schema: &'static Schema },
}

impl ItemEncoding {
    /// Decodes `bytes`, encoded so, as a `K`.
    pub(crate) fn decode<K: DeserializeOwned + 'static>(
        self,
        bytes: &[u8],
    ) -> Result<K, DecodeError> {
        match self {
            Self::Json => serde_json::from_slice(bytes).map_err(|e| DecodeError {
                what: "object",
                error: Cause::Json(e),
                offset: None,
            }),
            Self::Protobuf { schema, message } => {
                let none = super::Projection::none();
                let type_meta = crate::protobuf::list_item_type_meta(schema, message);
                crate::protobuf::direct::decode(schema, bytes, message, type_meta, &none).map_err(
                    |e| DecodeError {
                        what: "object",
                        error: Cause::Protobuf(e),
                        offset: None,
                    },
                )
            }
            Self::Enveloped { schema } => {
                crate::protobuf::decode_object_in(schema, bytes, &super::Projection::none())
            }
        }
    }
}

/// What a store needs of a listed object it keeps undecoded: its key, resourceVersion and
/// labels, read by a decode that skips everything else.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListedMeta {
    /// `metadata.namespace`.
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: Option<String>,
    /// `metadata.resourceVersion`.
    pub resource_version: Option<String>,
    /// `metadata.labels`, for label selectors on the stored object (`None` when it has none).
    pub labels: Option<BTreeMap<String, String>>,
}

impl<'de> Deserialize<'de> for ListedMetaOf {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Meta {
            namespace: Option<String>,
            name: Option<String>,
            #[serde(rename = "resourceVersion")]
            resource_version: Option<String>,
            labels: Option<BTreeMap<String, String>>,
        }
        #[derive(Deserialize)]
        struct Object {
            metadata: Option<Meta>,
        }
        let meta = Object::deserialize(deserializer)?.metadata;
        Ok(ListedMetaOf(meta.map_or_else(ListedMeta::default, |m| {
            ListedMeta {
                namespace: m.namespace,
                name: m.name,
                resource_version: m.resource_version,
                labels: m.labels,
            }
        })))
    }
}

impl ListedMeta {
    /// The object's key.
    ///
    /// # Errors
    ///
    /// The name is missing or invalid.
    pub fn key(&self) -> Result<ObjectKey, KeyError> {
        ObjectKey::new(
            self.namespace.as_deref(),
            self.name.as_deref().unwrap_or_default(),
        )
    }

    /// The object's resourceVersion, empty when it has none.
    pub fn resource_version(&self) -> &str {
        self.resource_version.as_deref().unwrap_or_default()
    }

    /// What the list decoders read of `obj`'s bytes, taken from the object.
    #[cfg(test)]
    pub(crate) fn of<K: kube::Resource>(obj: &K) -> Self {
        let meta = obj.meta();
        Self {
            namespace: meta.namespace.clone(),
            name: meta.name.clone(),
            resource_version: meta.resource_version.clone(),
            labels: meta.labels.clone(),
        }
    }
}

/// A listed object decoded as its [`ListedMeta`] only: the type the list decoders decode items
/// as for a store that takes them undecoded.
pub(crate) struct ListedMetaOf(pub(crate) ListedMeta);
