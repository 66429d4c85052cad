//! Why protobuf bytes do not decode.

use std::fmt;

/// The class of a protobuf decoding error.
///
/// All but [`ErrorKind::Data`], [`ErrorKind::InvalidUtf8`] and [`ErrorKind::TooDeep`] are wire
/// errors: the bytes are not a well-formed message of the schema, and the list or watch carrying
/// them fails. The three are in a well-formed message's values, which a list or a watch skips as
/// one undecodable object (reported, and left out of the cache) before going on:
/// - `Data`: a value the target type refuses (a visitor error, such as a missing required
///   field);
/// - `InvalidUtf8`: a string that is not UTF-8, which protobuf's wire format allows and
///   kube-apiserver stores and sends as a client wrote it (its JSON encoding replaces such bytes
///   with U+FFFD, so a JSON informer gets the object with those instead);
/// - `TooDeep`: messages nested deeper than the decoder follows (a custom resource definition
///   whose schema nests more than 96 levels), which the stack bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The bytes end inside a value.
    Truncated,
    /// A varint longer than ten bytes or past 64 bits.
    BadVarint,
    /// A tag with field number 0 or a wire type Kubernetes does not use (groups).
    BadTag,
    /// A field's wire type is not the one its schema type is encoded with.
    WrongWireType,
    /// A string that is not UTF-8.
    InvalidUtf8,
    /// A body that does not start with the `k8s\0` magic.
    BadMagic,
    /// A length prefix claims more bytes than its enclosing value has.
    LengthPastInput,
    /// Messages nested deeper than the decoder follows.
    TooDeep,
    /// A body of an `apiVersion` and `kind` the schema does not have.
    UnknownKind,
    /// A `runtime.Unknown` envelope that is not one the API server writes: a content encoding
    /// (compression), or its object missing.
    BadEnvelope,
    /// A repeated field whose occurrences are not contiguous.
    NonContiguous,
    /// A watch frame whose declared length is above the framer's maximum.
    FrameTooLarge,
    /// A well-formed value the target type refuses.
    Data,
}

/// A protobuf decoding error.
///
/// Its `Display` is not redacted: a [`Data`](ErrorKind::Data) error's message may quote the
/// object (serde's "invalid type: string \"...\""). It reaches users only through
/// [`DecodeError`](crate::reflector::decode::DecodeError), whose `Display` is redacted, and
/// [`DecodeError::unredacted`](crate::reflector::decode::DecodeError::unredacted).
pub struct Error(Box<Inner>);

/// Boxed, so that the `Result`s of the hot wire-reading paths stay two words (errors are rare).
struct Inner {
    kind: ErrorKind,
    detail: Detail,
}

enum Detail {
    None,
    /// The field of the schema a wire error is in (names from the schema, not the input).
    Field(&'static str, u32),
    /// A visitor's message: may quote the object.
    Message(Box<str>),
    /// serde_json's error on raw JSON bytes: may quote the object.
    Json(Box<serde_json::Error>),
    /// The type metadata of an unknown kind, if it looks like identifiers.
    Kind(Box<str>),
}

impl Error {
    #[cold]
    fn with(kind: ErrorKind, detail: Detail) -> Self {
        Self(Box::new(Inner { kind, detail }))
    }

    pub(crate) fn new(kind: ErrorKind) -> Self {
        Self::with(kind, Detail::None)
    }

    /// A wire error in field `number` of message `message`.
    pub(crate) fn at_field(kind: ErrorKind, message: &'static str, number: u32) -> Self {
        Self::with(kind, Detail::Field(message, number))
    }

    pub(crate) fn json(e: serde_json::Error) -> Self {
        Self::with(ErrorKind::Data, Detail::Json(Box::new(e)))
    }

    pub(crate) fn unknown_kind(api_version: &str, kind: &str) -> Self {
        let looks_safe = |s: &str| {
            s.len() <= 253
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'/' | b'_'))
        };
        let detail = if looks_safe(api_version) && looks_safe(kind) {
            Detail::Kind(format!("{api_version} {kind}").into())
        } else {
            Detail::None
        };
        Self::with(ErrorKind::UnknownKind, detail)
    }

    /// The class of the error.
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        self.0.kind
    }

    /// Whether the error is in the values rather than the wire format (see [`ErrorKind`]).
    pub(crate) fn is_data(&self) -> bool {
        matches!(
            self.0.kind,
            ErrorKind::Data | ErrorKind::InvalidUtf8 | ErrorKind::TooDeep
        )
    }

    /// The message with nothing of the object in it.
    pub(crate) fn redacted(&self) -> String {
        match &self.0.detail {
            Detail::Message(m) => crate::reflector::decode::redact_data_message(m, ""),
            Detail::Json(e) => crate::reflector::decode::redacted_json(e),
            _ => self.to_string(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.0.kind {
            ErrorKind::Truncated => "truncated protobuf message",
            ErrorKind::BadVarint => "malformed protobuf varint",
            ErrorKind::BadTag => "malformed protobuf tag",
            ErrorKind::WrongWireType => "protobuf field of the wrong wire type",
            ErrorKind::InvalidUtf8 => "protobuf string is not UTF-8",
            ErrorKind::BadMagic => "not a Kubernetes protobuf body (no `k8s\\0` magic)",
            ErrorKind::LengthPastInput => "protobuf length past the end of its input",
            ErrorKind::TooDeep => "protobuf messages nested too deep",
            ErrorKind::UnknownKind => "kind not in the protobuf schema",
            ErrorKind::BadEnvelope => "unexpected runtime.Unknown envelope",
            ErrorKind::NonContiguous => "repeated protobuf field is not contiguous",
            ErrorKind::FrameTooLarge => "watch frame longer than the limit",
            ErrorKind::Data => "invalid data",
        };
        match &self.0.detail {
            Detail::None => f.write_str(what),
            Detail::Field(message, number) => write!(f, "{what} (field {number} of {message})"),
            Detail::Kind(k) => write!(f, "{what}: {k}"),
            Detail::Message(m) => f.write_str(m),
            Detail::Json(e) => write!(f, "{e}"),
        }
    }
}

impl fmt::Debug for Error {
    /// Redacted, as `Debug` output ends up in logs as easily as `Display`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("kind", &self.0.kind)
            .field("message", &self.redacted())
            .finish()
    }
}

impl std::error::Error for Error {}

impl serde::de::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Self::with(ErrorKind::Data, Detail::Message(msg.to_string().into()))
    }
}
