//! Watch events: one JSON line each.

use std::{fmt, marker::PhantomData};

use kube::core::Status;
use serde::{
    Deserialize, Deserializer,
    de::{self, DeserializeOwned, IgnoredAny, MapAccess, Visitor},
};

use super::{
    error::{DecodeError, PeekEvent, UndecodableObject},
    projection::Projection,
};

/// The annotation on the bookmark that ends a streaming initial list (KEP-3157).
pub const INITIAL_EVENTS_END_ANNOTATION: &str = "k8s.io/initial-events-end";

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

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "UPPERCASE")]
pub(crate) enum EventType {
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

impl EventType {
    /// The type a watch event's `type` names.
    pub(crate) fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "ADDED" => EventType::Added,
            "MODIFIED" => EventType::Modified,
            "DELETED" => EventType::Deleted,
            "BOOKMARK" => EventType::Bookmark,
            "ERROR" => EventType::Error,
            _ => return None,
        })
    }
}

impl<K: DeserializeOwned> WatchEvent<K> {
    /// The event of type `ty` whose object is `obj`; only an object (not a bookmark, whose
    /// annotations end a streaming list, nor a status) goes through the projection.
    pub(crate) fn from_parts<'de, D: Deserializer<'de>>(
        ty: EventType,
        obj: D,
        projection: &Projection,
    ) -> Result<Self, D::Error> {
        Ok(match ty {
            EventType::Added => WatchEvent::Added(projection.deserialize(obj)?),
            EventType::Modified => WatchEvent::Modified(projection.deserialize(obj)?),
            EventType::Deleted => WatchEvent::Deleted(projection.deserialize(obj)?),
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

struct ObjectSeed<'p, K>(EventType, &'p Projection, PhantomData<K>);

impl<'de, K: DeserializeOwned> de::DeserializeSeed<'de> for ObjectSeed<'_, K> {
    type Value = WatchEvent<K>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        WatchEvent::from_parts(self.0, deserializer, self.1)
    }
}

impl<'de, K: DeserializeOwned> Deserialize<'de> for WatchEvent<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        de::DeserializeSeed::deserialize(
            EventSeed::<K>(&Projection::none(), PhantomData),
            deserializer,
        )
    }
}

/// A watch event whose object goes through a projection.
struct EventSeed<'p, K>(&'p Projection, PhantomData<K>);

impl<'de, K: DeserializeOwned> de::DeserializeSeed<'de> for EventSeed<'_, K> {
    type Value = WatchEvent<K>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        struct EventVisitor<'p, K>(&'p Projection, PhantomData<K>);
        impl<'de, K: DeserializeOwned> Visitor<'de> for EventVisitor<'_, K> {
            type Value = WatchEvent<K>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a watch event {\"type\": ..., \"object\": ...}")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                // The API server writes "type" before "object", so the object is decoded
                // straight into its final type; the other order costs one buffered copy, kept
                // as its bytes (a `Value` would merge duplicate keys, where the object decoded
                // in place, or from the bytes a compact cache keeps, meets each one).
                let mut ty: Option<EventType> = None;
                let mut early: Option<Box<serde_json::value::RawValue>> = None;
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
                                event = Some(map.next_value_seed(ObjectSeed::<K>(
                                    t,
                                    self.0,
                                    PhantomData,
                                ))?)
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
                        let mut de = serde_json::Deserializer::from_str(obj.get());
                        WatchEvent::from_parts(t, &mut de, self.0).map_err(de::Error::custom)
                    }
                    (None, None, _) => Err(de::Error::missing_field("type")),
                    _ => Err(de::Error::missing_field("object")),
                }
            }
        }
        deserializer.deserialize_map(EventVisitor(self.0, PhantomData))
    }
}

/// Decodes one watch event line (without its trailing newline).
///
/// # Errors
///
/// [`DecodeError`] when the line is not a JSON watch event carrying a `K`.
pub fn decode_watch_event<K: DeserializeOwned>(line: &[u8]) -> Result<WatchEvent<K>, DecodeError> {
    decode_watch_event_projected(line, &Projection::none())
}

/// Decodes one watch event line like [`decode_watch_event`], with the fields `projection` drops
/// skipped while parsing the object (bookmarks and `ERROR` statuses are decoded whole).
///
/// ```
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kube_informer::reflector::{WatchEvent, decode::{Projection, decode_watch_event_projected}};
///
/// let line = br#"{"type":"ADDED","object":{"metadata":{"name":"a","managedFields":[{}]},"data":{"k":"v"}}}"#;
/// let p = Projection::strip_managed_fields().drop_path("data")?;
/// let WatchEvent::Added(cm) = decode_watch_event_projected::<ConfigMap>(line, &p)? else { panic!() };
/// assert_eq!((cm.metadata.managed_fields, cm.data), (None, None));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// As [`decode_watch_event`].
pub fn decode_watch_event_projected<K: DeserializeOwned>(
    line: &[u8],
    projection: &Projection,
) -> Result<WatchEvent<K>, DecodeError> {
    let mut de = serde_json::Deserializer::from_slice(line);
    de::DeserializeSeed::deserialize(EventSeed::<K>(projection, PhantomData), &mut de)
        .and_then(|ev| de.end().map(|()| ev))
        .map_err(|error| DecodeError {
            what: "watch event",
            error: error.into(),
            offset: None,
        })
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
