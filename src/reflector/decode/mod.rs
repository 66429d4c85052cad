//! Decoding list bodies and watch streams straight from bytes.
//!
//! kube's own list path collects the body, copies it into a `String` and decodes through
//! `ObjectList<K>`, whose `#[serde(flatten)]` type metadata makes serde buffer the whole document
//! (items included) before decoding it a second time. The reflector instead decodes the bytes once,
//! as they arrive ([`ListDecoder`]: each item as soon as its bytes are in, holding a window of about
//! a megabyte of the body rather than all of it), and frames watch streams itself so each event
//! line is decoded from the received bytes without a UTF-8 copy.
//!
//! Both apply a [`Projection`]: fields it drops are skipped by the parser, never built.
//!
//! One module per concept: [`list`](ListDecoder) bodies, [`watch`](WatchEvent) events, the
//! [line framer](LineFramer) of watch bodies, [undecoded watch events](RawWatchEvent) and
//! [list items](ItemBytes) for a store that keeps objects in its own form, the
//! [projection](Projection), and the [errors](DecodeError), which never quote the bytes that
//! failed.

mod error;
mod framer;
mod item;
mod list;
mod projection;
pub(crate) mod raw;
mod watch;

pub(crate) use error::{Cause, PeekObject, redact_data_message, redacted as redacted_json};
pub use error::{DecodeError, UndecodableObject};
pub use framer::LineFramer;
pub use item::{ItemBytes, ListedMeta};
pub(crate) use item::{ItemEncoding, ListedMetaOf};
pub(crate) use list::WireListMeta;
pub use list::{LIST_DECODER_MARGIN, ListDecoder, ListPage, decode_list, decode_list_map};
// `Child` is for the direct protobuf decoders, which compile with k8s-openapi's `v1_37` alone.
#[allow(unused_imports)]
pub(crate) use projection::{Child, Hidden, Node};
pub use projection::{Projection, ProjectionError};
pub use raw::{RawWatchEvent, WatchItem, WatchedBytes};
pub(crate) use watch::{EventType, undecodable_event};
pub use watch::{
    INITIAL_EVENTS_END_ANNOTATION, WatchEvent, decode_watch_event, decode_watch_event_projected,
};

#[cfg(test)]
use {k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta, list::COMPACT_AT};

#[cfg(test)]
mod tests;
