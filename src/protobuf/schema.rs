//! The protobuf schema of the Kubernetes built-in types: for each message, its fields by number,
//! with the JSON name k8s-openapi's `Deserialize` impls expect and how the value is encoded.
//!
//! The tables in `generated.rs` are generated from Kubernetes' own Go types (their
//! `protobuf:"..."` and `json:"..."` struct tags) by `scripts/protobuf-schema` at the Kubernetes
//! version of k8s-openapi's newest feature; CI regenerates them and fails on a diff.

/// Index of a [`Message`] in its [`Schema`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MessageId(pub u16);

/// A protobuf schema: messages, and the message of each top-level `apiVersion` + `kind`.
#[derive(Debug)]
pub struct Schema {
    /// Every message, indexed by [`MessageId`].
    pub messages: &'static [Message],
    /// The message of each kind the API serves, sorted by `(api_version, kind)`.
    pub roots: &'static [Root],
}

/// A top-level kind (`v1` `Pod`, `apps/v1` `DeploymentList`, `meta.k8s.io/v1`
/// `PartialObjectMetadata`) and its message.
#[derive(Debug, Clone, Copy)]
pub struct Root {
    /// `apiVersion`: `v1` for the core group, `group/version` otherwise.
    pub api_version: &'static str,
    /// `kind`.
    pub kind: &'static str,
    /// Its message.
    pub message: MessageId,
}

/// One protobuf message (a Go struct).
#[derive(Debug)]
pub struct Message {
    /// The protobuf name, e.g. `k8s.io.api.core.v1.Pod`.
    pub name: &'static str,
    /// Its fields, sorted by [`Field::number`].
    pub fields: &'static [Field],
}

/// One field of a message.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    /// The protobuf field number.
    pub number: u32,
    /// The JSON name (from the Go `json` tag). Empty for an [inline](Field::inline) field.
    pub json: &'static str,
    /// The value's type (for a map, the value's; for a repeated field, each element's).
    pub ty: Type,
    /// Single, repeated or a map.
    pub card: Card,
    /// The Go field is not a pointer and its JSON tag has `omitempty`: JSON leaves the field out
    /// when it holds its zero value (`""`, `0`, `false`, empty bytes) while protobuf writes it,
    /// so a decoder matching the JSON decode skips such a zero. Only meaningful for scalars.
    pub omit_zero: bool,
    /// The Go field is embedded with `json:",inline"` (e.g. `Volume.VolumeSource`): one nested
    /// message on the wire, whose fields are the parent's in JSON. `ty` is then a message.
    pub inline: bool,
}

/// How many values a field holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Card {
    /// One value (`opt` in the tag).
    Single,
    /// A sequence (`rep`): consecutive occurrences of the field, or one packed run for scalars.
    Repeated,
    /// A Go map: repeated entries, each a message of `key = 1` (of this type) and `value = 2`
    /// (of the field's [`Field::ty`]).
    Map(Type),
}

/// The type of a value, and so its wire encoding and its JSON form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    /// `string` (length-delimited UTF-8) → a JSON string.
    String,
    /// Go `[]byte` (length-delimited) → a base64 JSON string, as k8s-openapi's `ByteString`
    /// reads.
    Bytes,
    /// `bool` (varint).
    Bool,
    /// `int32` (varint, negative numbers sign-extended to ten bytes).
    Int32,
    /// `int64` (varint).
    Int64,
    /// `uint32` (varint).
    Uint32,
    /// `uint64` (varint).
    Uint64,
    /// `double` (fixed64).
    Double,
    /// `float` (fixed32).
    Float,
    /// A nested message → a JSON object.
    Message(MessageId),
    /// `metav1.Time`: `Timestamp{seconds = 1, nanos = 2}` → RFC 3339 in whole seconds; an empty
    /// message is the zero time, which JSON writes as `null`.
    Time,
    /// `metav1.MicroTime`: the same `Timestamp` → RFC 3339 with microseconds.
    MicroTime,
    /// `metav1.Duration`: `{duration = 1}` (int64 nanoseconds) → Go's duration string (`1h2m3s`).
    Duration,
    /// `resource.Quantity`: `{string = 1}` → the JSON string.
    Quantity,
    /// `intstr.IntOrString`: `{type = 1, intVal = 2, strVal = 3}` → a JSON number or string.
    IntOrString,
    /// Raw JSON bytes in field 1 of a message: `metav1.FieldsV1{Raw}`,
    /// `runtime.RawExtension{raw}`, apiextensions `JSON{raw}` → the JSON value they hold.
    RawJson,
    /// apiextensions `JSONSchemaPropsOrArray{schema = 1, jSONSchemas = 2}` → an object or an
    /// array of the given `JSONSchemaProps` message.
    SchemaPropsOrArray(MessageId),
    /// apiextensions `JSONSchemaPropsOrBool{allows = 1, schema = 2}` → `true`/`false` or an
    /// object of the given message.
    SchemaPropsOrBool(MessageId),
    /// apiextensions `JSONSchemaPropsOrStringArray{schema = 1, property = 2}` → an object of the
    /// given message or an array of strings.
    SchemaPropsOrStringArray(MessageId),
}

impl Schema {
    /// The message `id` names.
    ///
    /// # Panics
    ///
    /// If `id` is not of this schema (ids come from the schema's own tables).
    #[must_use]
    pub fn message(&self, id: MessageId) -> &'static Message {
        &self.messages[usize::from(id.0)]
    }

    /// The message of `kind` in `api_version`, if the schema has it.
    #[must_use]
    pub fn root(&self, api_version: &str, kind: &str) -> Option<MessageId> {
        self.roots
            .binary_search_by(|r| (r.api_version, r.kind).cmp(&(api_version, kind)))
            .ok()
            .map(|i| self.roots[i].message)
    }

    /// Whether any kind of `api_version` is in the schema (a built-in group version, which
    /// kube-apiserver serves in protobuf).
    #[must_use]
    pub fn has_api_version(&self, api_version: &str) -> bool {
        let i = self.roots.partition_point(|r| r.api_version < api_version);
        self.roots.get(i).is_some_and(|r| r.api_version == api_version)
    }
}

impl Message {
    /// The field numbered `number`.
    #[must_use]
    pub fn field(&self, number: u32) -> Option<&'static Field> {
        self.fields
            .binary_search_by_key(&number, |f| f.number)
            .ok()
            .map(|i| &self.fields[i])
    }
}

mod generated;

/// The schema of every built-in kind k8s-openapi has, at the Kubernetes version
/// [`KUBERNETES_VERSION`].
pub static BUILTIN: Schema = Schema {
    messages: &generated::MESSAGES,
    roots: &generated::ROOTS,
};

/// The Kubernetes version whose Go types [`BUILTIN`] was generated from.
pub const KUBERNETES_VERSION: &str = generated::KUBERNETES_VERSION;
