//! One watch event as the server sent it, undecoded: for a store that keeps objects in a form
//! of its own (the compact cache), which can then keep a watched object's bytes instead of
//! decoding it here and encoding it again (issue #12).

use std::ops::Range;

use serde::{Deserialize, de::DeserializeOwned};
use serde_json::value::RawValue;

use super::{
    DecodeError, EventType, ItemBytes, ItemEncoding, ListedMeta, ListedMetaOf, Projection,
    WatchEvent, decode_watch_event_projected, undecodable_event,
};
use crate::{
    protobuf::{self, schema::BUILTIN},
    reflector::ListWatchError,
};

/// One event of a watch stream, framed but not decoded: a JSON line, or a protobuf frame (a
/// `metav1.WatchEvent` message without its length prefix). Made by
/// [`ListerWatcher::watch_raw`](crate::reflector::ListerWatcher::watch_raw) streams.
#[derive(Clone)]
pub struct RawWatchEvent {
    bytes: Vec<u8>,
    protobuf: bool,
}

impl std::fmt::Debug for RawWatchEvent {
    // The bytes are the object's: never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawWatchEvent")
            .field("len", &self.bytes.len())
            .field("protobuf", &self.protobuf)
            .finish()
    }
}

/// An object a watch event adds or changes, read only as far as a store that takes objects
/// undecoded needs: its key and resourceVersion, and its bytes as the server sent them.
pub struct WatchedBytes {
    meta: ListedMeta,
    event: Vec<u8>,
    object: Range<usize>,
    encoding: ItemEncoding,
}

impl std::fmt::Debug for WatchedBytes {
    // The bytes are the object's: never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchedBytes")
            .field("meta", &self.meta)
            .field("len", &self.object.len())
            .finish()
    }
}

impl WatchedBytes {
    /// The object's namespace, name and resourceVersion.
    pub fn meta(&self) -> &ListedMeta {
        &self.meta
    }

    /// The object's bytes, and how to decode them.
    pub fn bytes(&self) -> ItemBytes<'_> {
        ItemBytes {
            bytes: &self.event[self.object.clone()],
            encoding: self.encoding,
        }
    }
}

/// One event of a [`RawWatchStream`](crate::reflector::RawWatchStream): an object added or
/// changed, undecoded, or any other event decoded.
#[derive(Debug)]
pub enum WatchItem<K> {
    /// An `ADDED` event's object, undecoded.
    Added(WatchedBytes),
    /// A `MODIFIED` event's object, undecoded.
    Modified(WatchedBytes),
    /// Any other event (a deletion, a bookmark, an error), or a change whose object's metadata
    /// did not read, decoded.
    Event(WatchEvent<K>),
}

/// The two fields of a JSON watch event, the object left as its bytes.
#[derive(Deserialize)]
struct JsonEvent<'a> {
    #[serde(rename = "type")]
    event: EventType,
    #[serde(borrow)]
    object: &'a RawValue,
}

impl RawWatchEvent {
    /// A JSON watch event: one line of a watch body, without its newline.
    pub fn json_line(line: Vec<u8>) -> Self {
        Self {
            bytes: line,
            protobuf: false,
        }
    }

    /// A protobuf watch event: one frame of a `;stream=watch` body, without its four-byte
    /// length prefix.
    pub fn protobuf_frame(frame: Vec<u8>) -> Self {
        Self {
            bytes: frame,
            protobuf: true,
        }
    }

    /// The event's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Decodes the event, with the fields `projection` drops skipped while decoding its object
    /// (what a [`WatchStream`](crate::reflector::WatchStream) yields for it).
    ///
    /// # Errors
    ///
    /// [`ListWatchError::Undecodable`] for a well-formed event whose object does not fit `K`
    /// (the watch skips it), [`ListWatchError::Decode`] for bytes that are no watch event.
    pub fn decode<K: DeserializeOwned + 'static>(
        &self,
        projection: &Projection,
    ) -> Result<WatchEvent<K>, ListWatchError> {
        type Undecodable = fn(&[u8], DecodeError) -> Result<super::UndecodableObject, DecodeError>;
        let (decoded, undecodable): (_, Undecodable) = if self.protobuf {
            (
                protobuf::decode_watch_frame::<K>(&self.bytes, projection),
                protobuf::undecodable_frame,
            )
        } else {
            (
                decode_watch_event_projected::<K>(&self.bytes, projection),
                undecodable_event,
            )
        };
        decoded.map_err(|e| match undecodable(&self.bytes, e) {
            Ok(u) => ListWatchError::Undecodable(Box::new(u)),
            Err(e) => ListWatchError::Decode(e),
        })
    }

    /// The event as a [`WatchItem`]: an `ADDED` or `MODIFIED` event whose object's metadata
    /// reads is handed over undecoded; any other (a deletion is decoded, for the object its
    /// handlers are given) is decoded.
    ///
    /// # Errors
    ///
    /// As [`decode`](Self::decode).
    pub fn into_item<K: DeserializeOwned + 'static>(self) -> Result<WatchItem<K>, ListWatchError> {
        match self.into_changed() {
            Ok(changed) => Ok(changed),
            Err(raw) => raw.decode(&Projection::none()).map(WatchItem::Event),
        }
    }

    /// For an `ADDED` or `MODIFIED` event whose object's metadata reads: that metadata and the
    /// object's bytes, without decoding the object. The event is handed back for other events
    /// and for bytes that do not read so far; [`decode`](Self::decode) then tells what they
    /// are.
    pub(crate) fn into_changed<K>(self) -> Result<WatchItem<K>, Self> {
        let Some((added, meta, object, encoding)) = self.read_changed() else {
            return Err(self);
        };
        let bytes = WatchedBytes {
            meta,
            event: self.bytes,
            object,
            encoding,
        };
        Ok(if added {
            WatchItem::Added(bytes)
        } else {
            WatchItem::Modified(bytes)
        })
    }

    /// Whether the event is `ADDED` (else `MODIFIED`), the object's metadata, where the object
    /// is in the event, and its encoding; `None` for other events and unreadable metadata.
    fn read_changed(&self) -> Option<(bool, ListedMeta, Range<usize>, ItemEncoding)> {
        let (event, meta, body, encoding) = if self.protobuf {
            let (event, body) = protobuf::watch_frame_parts(&self.bytes).ok()?;
            let event = EventType::from_name(event)?;
            let meta =
                protobuf::decode_object_in::<ListedMetaOf>(&BUILTIN, body, &Projection::none())
                    .ok()?
                    .0;
            (
                event,
                meta,
                body,
                ItemEncoding::Enveloped { schema: &BUILTIN },
            )
        } else {
            // A derived struct takes a JSON array too; the event decoder takes only an object.
            if self.bytes.trim_ascii_start().first() != Some(&b'{') {
                return None;
            }
            let ev: JsonEvent<'_> = serde_json::from_slice(&self.bytes).ok()?;
            let body = ev.object.get().as_bytes();
            let meta = serde_json::from_slice::<ListedMetaOf>(body).ok()?.0;
            (ev.event, meta, body, ItemEncoding::Json)
        };
        let added = match event {
            EventType::Added => true,
            EventType::Modified => false,
            _ => return None,
        };
        // `body` borrows from `self.bytes`: where it starts in them.
        let start = (body.as_ptr() as usize).checked_sub(self.bytes.as_ptr() as usize)?;
        Some((added, meta, start..start + body.len(), encoding))
    }
}

/// A JSON watch event's object handed over as its bytes, as the reflector hands it to a store
/// that takes bytes (for the FIFOs' tests).
#[cfg(test)]
pub(crate) fn watched_json(ty: &str, object: impl serde::Serialize) -> WatchedBytes {
    let line = serde_json::to_vec(&serde_json::json!({"type": ty, "object": object}))
        .expect("serializable");
    match RawWatchEvent::json_line(line).into_changed::<()>() {
        Ok(WatchItem::Added(o) | WatchItem::Modified(o)) => o,
        _ => panic!("not an ADDED or MODIFIED event with a readable key"),
    }
}

#[cfg(all(test, feature = "testing"))]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use serde_json::json;

    use super::*;
    use crate::protobuf::encode::encode_watch_event;

    fn config_map() -> serde_json::Value {
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "7",
                         "labels": {"app": "x"}},
            "data": {"k": "v"},
        })
    }

    fn json_event(ty: &str, object: &serde_json::Value) -> RawWatchEvent {
        RawWatchEvent::json_line(
            serde_json::to_vec(&json!({"type": ty, "object": object})).unwrap(),
        )
    }

    fn protobuf_event(ty: &str, object: &serde_json::Value) -> RawWatchEvent {
        let framed = encode_watch_event(ty, "v1", "ConfigMap", object).unwrap();
        // Without its four-byte length prefix, as the framer hands frames over.
        RawWatchEvent::protobuf_frame(framed[4..].to_vec())
    }

    fn events(ty: &str, object: &serde_json::Value) -> [RawWatchEvent; 2] {
        [json_event(ty, object), protobuf_event(ty, object)]
    }

    /// What the decoded watch gives for the same event.
    fn decoded(raw: &RawWatchEvent) -> ConfigMap {
        match raw.decode::<ConfigMap>(&Projection::none()).unwrap() {
            WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => o,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_changed_object_is_its_metadata_and_bytes_that_decode_as_the_watch_decodes_it() {
        for (ty, added) in [("ADDED", true), ("MODIFIED", false)] {
            for raw in events(ty, &config_map()) {
                let want = decoded(&raw);
                let changed = match raw.into_changed::<ConfigMap>() {
                    Ok(WatchItem::Added(c)) if added => c,
                    Ok(WatchItem::Modified(c)) if !added => c,
                    other => panic!("{ty}: {other:?}"),
                };
                assert_eq!(
                    *changed.meta(),
                    ListedMeta {
                        namespace: Some("ns".into()),
                        name: Some("a".into()),
                        resource_version: Some("7".into()),
                        labels: Some([("app".into(), "x".into())].into()),
                    }
                );
                let obj: ConfigMap = changed.bytes().decode().unwrap();
                assert_eq!(obj, want);
                assert_eq!(obj.data.unwrap()["k"], "v");
            }
        }
    }

    #[test]
    fn the_object_may_come_before_the_type_in_json() {
        let line =
            serde_json::to_vec(&json!({"object": config_map(), "type": "MODIFIED"})).unwrap();
        let line = String::from_utf8(line).unwrap();
        // serde_json writes keys in order; make sure the object really comes first.
        assert!(line.find("\"object\"") < line.find("\"type\""));
        let raw = RawWatchEvent::json_line(line.into_bytes());
        let want = decoded(&raw);
        let Ok(WatchItem::Modified(changed)) = raw.into_changed::<ConfigMap>() else {
            panic!("not a change");
        };
        assert_eq!(changed.bytes().decode::<ConfigMap>().unwrap(), want);
    }

    #[test]
    fn deletions_bookmarks_errors_and_unreadable_events_are_left_to_the_decode() {
        for raw in events("DELETED", &config_map()) {
            assert!(matches!(
                raw.into_item::<ConfigMap>(),
                Ok(WatchItem::Event(WatchEvent::Deleted(c))) if c.metadata.name.as_deref() == Some("a")
            ));
        }
        let bookmark = json!({"apiVersion": "v1", "kind": "ConfigMap",
                              "metadata": {"resourceVersion": "9"}});
        for raw in events("BOOKMARK", &bookmark) {
            assert!(matches!(
                raw.into_item::<ConfigMap>(),
                Ok(WatchItem::Event(WatchEvent::Bookmark { ref resource_version, .. }))
                    if resource_version == "9"
            ));
        }
        let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                            "code": 410, "reason": "Expired", "metadata": {}});
        let raw = json_event("ERROR", &status);
        assert!(matches!(
            raw.into_item::<ConfigMap>(),
            Ok(WatchItem::Event(WatchEvent::Error(s))) if s.code == 410
        ));
        // Not a watch event at all.
        let raw = RawWatchEvent::json_line(b"{\"type\":".to_vec());
        assert!(matches!(
            raw.into_item::<ConfigMap>(),
            Err(ListWatchError::Decode(_))
        ));
        let raw = RawWatchEvent::protobuf_frame(vec![0xff, 0xff]);
        assert!(matches!(
            raw.into_item::<ConfigMap>(),
            Err(ListWatchError::Decode(_))
        ));
        // Metadata that does not read: the decode says which object it is.
        let mut bad = config_map();
        bad["metadata"]["resourceVersion"] = json!(7);
        let raw = json_event("ADDED", &bad);
        assert!(matches!(
            raw.into_item::<ConfigMap>(),
            Err(ListWatchError::Undecodable(_) | ListWatchError::Decode(_))
        ));
    }

    #[test]
    fn an_object_that_does_not_fit_the_type_still_hands_over_its_bytes() {
        // Read as far as the key: the store finds out when it decodes the object.
        let mut bad = config_map();
        bad["data"] = json!("not a map");
        let raw = json_event("MODIFIED", &bad);
        let Ok(WatchItem::Modified(changed)) = raw.into_item::<ConfigMap>() else {
            panic!("handed over undecoded");
        };
        assert_eq!(changed.meta().name.as_deref(), Some("a"));
        assert!(changed.bytes().decode::<ConfigMap>().is_err());
    }

    #[test]
    fn debug_never_prints_the_bytes() {
        let raw = json_event("ADDED", &config_map());
        let shown = format!("{raw:?}");
        assert!(!shown.contains("ns") && shown.contains("len"), "{shown}");
        let shown = format!("{:?}", raw.into_changed::<ConfigMap>().unwrap());
        assert!(!shown.contains("\"v\"") && shown.contains("len"), "{shown}");
    }
}
