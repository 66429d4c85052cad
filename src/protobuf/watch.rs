//! Watch streams: length-prefixed frames, each a `metav1.WatchEvent` message.
//!
//! The API server writes a protobuf watch with the stream serializer of its codec factory:
//! apimachinery's `LengthDelimitedFramer` (a four-byte big-endian length before each frame)
//! around `RawSerializer`, which writes the `WatchEvent{type = 1, object = 2}` message with no
//! `k8s\0` magic nor `runtime.Unknown`. The event's `object` is a `runtime.RawExtension{raw = 1}`
//! whose bytes the embedded encoder wrote as a whole body: magic, `Unknown`, object.

use serde::{
    Deserialize,
    de::{self, DeserializeOwned},
};

use super::{
    envelope::{decode_enveloped, decode_enveloped_object, utf8_field},
    error::{Error, ErrorKind},
    schema::{BUILTIN, Schema},
    wire::{Raw, Reader},
};
use crate::reflector::decode::{
    Cause, DecodeError, EventType, PeekObject, Projection, UndecodableObject, WatchEvent,
};

/// Splits a protobuf watch body into frames as chunks arrive: each a four-byte big-endian
/// length and that many bytes.
#[derive(Debug)]
pub struct LengthPrefixFramer {
    buf: Vec<u8>,
    max: usize,
    failed: bool,
}

/// The bytes of the length prefix.
const PREFIX: usize = 4;

impl LengthPrefixFramer {
    /// A framer that refuses frames longer than `max_frame` bytes.
    pub fn new(max_frame: usize) -> Self {
        Self {
            buf: Vec::new(),
            max: max_frame,
            failed: false,
        }
    }

    /// Appends received bytes and returns every frame they complete.
    ///
    /// # Errors
    ///
    /// [`DecodeError`] as soon as a frame declares a length above the maximum (its bytes are
    /// not waited for). The framer is then spent: later calls fail too.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<Vec<u8>>, DecodeError> {
        let too_large = || DecodeError {
            what: "watch frame",
            error: Cause::Protobuf(Error::new(ErrorKind::FrameTooLarge)),
            offset: None,
        };
        if self.failed {
            return Err(too_large());
        }
        let mut frames = Vec::new();
        let buffered = !self.buf.is_empty();
        if buffered {
            self.buf.extend_from_slice(chunk);
        }
        let data = if buffered { &self.buf[..] } else { chunk };
        let mut start = 0;
        let result = loop {
            let rest = data.get(start..).unwrap_or_default();
            let Some(prefix) = rest.first_chunk::<PREFIX>() else {
                break Ok(());
            };
            let len = u32::from_be_bytes(*prefix);
            let Ok(len) = usize::try_from(len) else {
                break Err(());
            };
            if len > self.max {
                break Err(());
            }
            let Some(frame) = rest.get(PREFIX..PREFIX + len) else {
                break Ok(());
            };
            frames.push(frame.to_vec());
            start += PREFIX + len;
        };
        if result.is_err() {
            self.failed = true;
            self.buf.clear();
            return Err(too_large());
        }
        if buffered {
            self.buf.drain(..start);
        } else {
            self.buf
                .extend_from_slice(chunk.get(start..).unwrap_or_default());
        }
        Ok(frames)
    }

    /// Bytes received after the last complete frame (a frame cut off by a dropped connection).
    pub fn pending(&self) -> &[u8] {
        &self.buf
    }
}

/// A frame's event type (as sent) and its object's bytes (a whole body: magic, `Unknown`).
pub(crate) fn parts(frame: &[u8]) -> Result<(&str, &[u8]), Error> {
    let (mut ty, mut object) = (None, None);
    let mut r = Reader::new(frame);
    while let Some((number, raw)) = r.field()? {
        match (number, raw) {
            (1, _) => ty = Some(utf8_field(raw, "WatchEvent", 1)?),
            (2, Raw::Len(extension)) => {
                // `RawExtension{raw = 1}`.
                let mut bytes: &[u8] = &[];
                let mut ext = Reader::new(extension);
                while let Some((number, raw)) = ext.field()? {
                    match (number, raw) {
                        (1, Raw::Len(b)) => bytes = b,
                        (1, _) => {
                            return Err(Error::at_field(
                                ErrorKind::WrongWireType,
                                "RawExtension",
                                1,
                            ));
                        }
                        _ => {}
                    }
                }
                object = Some(bytes);
            }
            (2, _) => return Err(Error::at_field(ErrorKind::WrongWireType, "WatchEvent", 2)),
            _ => {}
        }
    }
    let ty = ty.ok_or_else(|| <Error as de::Error>::missing_field("type"))?;
    let object = object.ok_or_else(|| <Error as de::Error>::missing_field("object"))?;
    Ok((ty, object))
}

const EVENT_TYPES: &[&str] = &["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"];

fn frame_error(e: Error) -> DecodeError {
    DecodeError {
        what: "watch event",
        error: Cause::Protobuf(e),
        offset: None,
    }
}

/// Decodes one watch frame (without its length prefix) into an event, with the fields
/// `projection` drops skipped while decoding the object (bookmarks and `ERROR` statuses are
/// decoded whole).
///
/// A bookmark's resourceVersion and `k8s.io/initial-events-end` annotation are read from its
/// object's metadata, an `ERROR`'s object is decoded as a `Status`.
///
/// # Errors
///
/// [`DecodeError`] when the frame is not a protobuf watch event carrying a `K` of a kind in
/// [`BUILTIN`].
pub fn decode_watch_frame<K: DeserializeOwned + 'static>(
    frame: &[u8],
    projection: &Projection,
) -> Result<WatchEvent<K>, DecodeError> {
    decode_watch_frame_in(&BUILTIN, frame, projection)
}

/// [`decode_watch_frame`] with the messages of `schema`.
pub(crate) fn decode_watch_frame_in<K: DeserializeOwned + 'static>(
    schema: &'static Schema,
    frame: &[u8],
    projection: &Projection,
) -> Result<WatchEvent<K>, DecodeError> {
    let (name, object) = parts(frame).map_err(frame_error)?;
    let ty = EventType::from_name(name)
        .ok_or_else(|| frame_error(de::Error::unknown_variant(name, EVENT_TYPES)))?;
    let what = "watch event";
    Ok(match ty {
        EventType::Added => {
            WatchEvent::Added(decode_enveloped_object(schema, object, what, projection)?)
        }
        EventType::Modified => {
            WatchEvent::Modified(decode_enveloped_object(schema, object, what, projection)?)
        }
        EventType::Deleted => {
            WatchEvent::Deleted(decode_enveloped_object(schema, object, what, projection)?)
        }
        EventType::Bookmark | EventType::Error => decode_enveloped(schema, object, what, |de| {
            WatchEvent::from_parts(ty, de, projection)
        })?,
    })
}

/// After [`decode_watch_frame`] failed: is the frame a well-formed event whose object merely
/// does not fit `K`? Then the watch can skip it instead of failing.
pub(crate) fn undecodable_frame(
    frame: &[u8],
    error: DecodeError,
) -> Result<UndecodableObject, DecodeError> {
    undecodable_frame_in(&BUILTIN, frame, error)
}

pub(crate) fn undecodable_frame_in(
    schema: &'static Schema,
    frame: &[u8],
    error: DecodeError,
) -> Result<UndecodableObject, DecodeError> {
    if !error.error.is_data() {
        return Err(error);
    }
    let Ok((name @ ("ADDED" | "MODIFIED" | "DELETED"), object)) = parts(frame) else {
        return Err(error);
    };
    let Ok(peek) = decode_enveloped(schema, object, "watch event", PeekObject::deserialize) else {
        return Err(error);
    };
    let u = peek.into_undecodable(name.to_owned(), error);
    if u.resource_version.is_some() {
        Ok(u)
    } else {
        Err(u.error)
    }
}
