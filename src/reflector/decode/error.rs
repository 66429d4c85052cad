//! Decode errors, redacted so that no object's contents (a Secret's data) reach a log, and
//! what can be read of an object that does not decode.

use std::fmt;

use serde::Deserialize;

use super::list::STRUCTURE_MESSAGES;

/// An object the server sent that does not decode as the informer's type: what could be read of
/// it (never its contents), and why.
#[derive(Debug, thiserror::Error)]
#[error(
    "{} object {} at resourceVersion {} does not decode: {error}",
    if event_type.is_empty() { "listed" } else { event_type.as_str() },
    key.as_ref().map_or("<unnamed>", |k| k.as_str()),
    resource_version.as_deref().unwrap_or("?")
)]
pub struct UndecodableObject {
    /// The watch event type (`ADDED`, `MODIFIED`, `DELETED`), empty for a list item.
    pub event_type: String,
    /// The object's key, when its metadata could be read.
    pub key: Option<crate::store::ObjectKey>,
    /// The object's resourceVersion, when its metadata could be read.
    pub resource_version: Option<String>,
    /// The decoding error (redacted: it never quotes the object).
    pub error: DecodeError,
}

/// The parts of an object that identify it, read leniently.
#[derive(Deserialize, Default)]
pub(crate) struct PeekObject {
    #[serde(default)]
    metadata: PeekMeta,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct PeekMeta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    resource_version: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct PeekEvent {
    #[serde(rename = "type")]
    pub(super) event_type: String,
    #[serde(default)]
    pub(super) object: PeekObject,
}

impl PeekObject {
    pub(crate) fn into_undecodable(
        self,
        event_type: String,
        error: DecodeError,
    ) -> UndecodableObject {
        let m = self.metadata;
        let key = m
            .name
            .as_deref()
            .and_then(|n| crate::store::ObjectKey::new(m.namespace.as_deref(), n).ok());
        UndecodableObject {
            event_type,
            key,
            resource_version: m.resource_version,
            error,
        }
    }
}

/// Why a list body or a watch line could not be decoded.
///
/// Its `Display` and `Debug` never quote the bytes that failed: serde's messages do ("invalid
/// type: string \"...\""), and for a Secret those bytes are its data, which would then reach the
/// logs through the reflector's error handler. Syntax errors keep serde's message (it names no
/// input); data errors keep its shape with every quoted value replaced by `…`, and messages of
/// unknown shape (custom ones, such as base64 errors naming a byte) are withheld. The serde error
/// itself is not a `source()`, since error-chain reporters print sources;
/// [`DecodeError::unredacted`] gives it to code that knows where it goes.
///
/// A list body is decoded one value at a time ([`ListDecoder`](super::ListDecoder)), so for a list the message also
/// names the body offset of the failing value ([`DecodeError::body_offset`]), and serde's line
/// and column count from there. Errors in the list's own shape (a missing `,`, trailing bytes)
/// are fixed messages, which serde classifies as data errors.
///
/// A protobuf body ([`crate::protobuf`]) fails the same way: its wire errors are fixed
/// messages, its data errors are redacted as serde_json's are, and
/// [`DecodeError::protobuf_kind`] tells which class of protobuf error it is.
#[derive(thiserror::Error)]
#[error("cannot decode {what}{}: {}", at_offset(*.offset), .error.redacted())]
pub struct DecodeError {
    pub(crate) what: &'static str,
    // Not named `source`: thiserror would make it one.
    pub(crate) error: Cause,
    /// Where in a list body the failing value (or token) starts: a list is decoded value by
    /// value, so serde's line and column count from there.
    pub(crate) offset: Option<u64>,
}

/// What a [`DecodeError`] holds: the error of the format's decoder.
pub(crate) enum Cause {
    Json(serde_json::Error),
    Protobuf(crate::protobuf::Error),
}

impl From<serde_json::Error> for Cause {
    fn from(e: serde_json::Error) -> Self {
        Cause::Json(e)
    }
}

impl From<crate::protobuf::Error> for Cause {
    fn from(e: crate::protobuf::Error) -> Self {
        Cause::Protobuf(e)
    }
}

impl Cause {
    fn redacted(&self) -> String {
        match self {
            Cause::Json(e) => redacted(e),
            Cause::Protobuf(e) => e.redacted(),
        }
    }

    /// Whether the bytes are well-formed and only their values do not fit the type.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn is_data(&self) -> bool {
        match self {
            Cause::Json(e) => e.is_data(),
            Cause::Protobuf(e) => e.is_data(),
        }
    }
}

fn at_offset(offset: Option<u64>) -> String {
    offset.map_or_else(String::new, |o| format!(" at body byte {o}"))
}

impl fmt::Debug for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DecodeError")
            .field("what", &self.what)
            .field("error", &self.error.redacted())
            .field("offset", &self.offset)
            .finish()
    }
}

impl DecodeError {
    /// The serde error, unredacted: its message may quote the offending value (for a Secret, its
    /// data), so keep it out of logs that must not carry object contents.
    /// The decoder's error is serde_json's for JSON and [`crate::protobuf::Error`] for protobuf.
    pub fn unredacted(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        match &self.error {
            Cause::Json(e) => e,
            Cause::Protobuf(e) => e,
        }
    }

    /// For a protobuf body: the class of the error (`None` for JSON).
    pub fn protobuf_kind(&self) -> Option<crate::protobuf::ErrorKind> {
        match &self.error {
            Cause::Json(_) => None,
            Cause::Protobuf(e) => Some(e.kind()),
        }
    }

    /// For a list body: the byte offset in the body of the value (or token) that failed to
    /// decode. serde's line and column in the message count from there, since a list is decoded
    /// one value at a time.
    pub fn body_offset(&self) -> Option<u64> {
        self.offset
    }
}

/// serde's messages of these shapes quote input only between `"` or `` ` ``.
const KNOWN_DATA_MESSAGES: &[&str] = &[
    "invalid type: ",
    "invalid value: ",
    "invalid length ",
    "unknown variant ",
    "unknown field ",
];

/// `e`'s message with nothing of the input in it (see [`DecodeError`]).
pub(crate) fn redacted(e: &serde_json::Error) -> String {
    let full = e.to_string();
    if !e.is_data() || STRUCTURE_MESSAGES.contains(&full.as_str()) {
        // Syntax, EOF and I/O messages are fixed texts plus a position; so are the list
        // decoder's own messages about the list's shape.
        return full;
    }
    let position = match e.line() {
        0 => String::new(),
        line => format!(" at line {line} column {}", e.column()),
    };
    let msg = full.strip_suffix(&position).unwrap_or(&full);
    redact_data_message(msg, &position)
}

/// A data error's message `msg` (serde's, without its position) with nothing of the input in
/// it, then `position`.
pub(crate) fn redact_data_message(msg: &str, position: &str) -> String {
    // Field names in these come from the Rust type, not from the input.
    if msg.starts_with("missing field `") || msg.starts_with("duplicate field `") {
        return format!("{msg}{position}");
    }
    let withheld =
        || format!("invalid data{position} (details withheld: they may quote the object)");
    if !KNOWN_DATA_MESSAGES.iter().any(|p| msg.starts_with(p)) {
        return withheld();
    }
    // serde writes the input's variant or field name between backticks as it is, unescaped, so
    // a backtick in it would end the quote early: everything up to serde's own tail (the last
    // one, which the type wrote) is dropped instead.
    for prefix in ["unknown variant `", "unknown field `"] {
        if let Some(rest) = msg.strip_prefix(prefix) {
            let tail = ["`, expected ", "`, there are no "]
                .iter()
                .filter_map(|t| rest.rfind(t))
                .max();
            return match tail {
                Some(at) => format!("{prefix}…{}{position}", &rest[at..]),
                None => withheld(),
            };
        }
    }
    let mut out = String::with_capacity(msg.len() + position.len());
    // The delimiter of the quoted span being skipped, and whether the last char was a `\`.
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in msg.chars() {
        match quote {
            None => {
                out.push(c);
                if c == '"' || c == '`' {
                    out.push('…');
                    quote = Some(c);
                }
            }
            // serde quotes strings with Rust escapes, so `\"` does not end one.
            Some('"') if escaped => escaped = false,
            Some('"') if c == '\\' => escaped = true,
            Some(q) if c == q => {
                out.push(c);
                quote = None;
            }
            Some(_) => {}
        }
    }
    out.push_str(position);
    out
}
