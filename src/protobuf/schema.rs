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
    ///
    /// One exception: in a protobuf watch stream, `WatchEvent.object` (a `RawExtension`) holds
    /// the object's own protobuf encoding (magic `k8s\0` and a `runtime.Unknown`), not JSON.
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
    /// A named Go `[]string` with its own protobuf message `{repeated string items = 1}`
    /// (`metav1.Verbs` in `APIResource.verbs`, authentication's `ExtraValue` as a map value)
    /// → a JSON array of strings (JSON does not see the wrapper).
    Strings,
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
        self.roots
            .get(i)
            .is_some_and(|r| r.api_version == api_version)
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

// Formatted by its generator, compactly: rustfmt would spread each field over several lines.
#[rustfmt::skip]
mod generated;

/// The schema of every built-in kind k8s-openapi has, at the Kubernetes version
/// [`KUBERNETES_VERSION`].
pub static BUILTIN: Schema = Schema {
    messages: &generated::MESSAGES,
    roots: &generated::ROOTS,
};

/// The Kubernetes version whose Go types [`BUILTIN`] was generated from.
pub const KUBERNETES_VERSION: &str = generated::KUBERNETES_VERSION;

#[cfg(test)]
mod tests {
    use super::{BUILTIN, Card, Field, Message, MessageId, Type};

    fn message(name: &str) -> &'static Message {
        BUILTIN
            .messages
            .iter()
            .find(|m| m.name == name)
            .unwrap_or_else(|| panic!("no message {name}"))
    }

    fn field(message: &Message, json: &str) -> &'static Field {
        let found = message.fields.iter().find(|f| f.json == json);
        let found = found.unwrap_or_else(|| panic!("no field {json} in {}", message.name));
        // `field` finds it by number too.
        assert!(std::ptr::eq(message.field(found.number).unwrap(), found));
        found
    }

    fn message_of(ty: Type) -> &'static Message {
        match ty {
            Type::Message(id)
            | Type::SchemaPropsOrArray(id)
            | Type::SchemaPropsOrBool(id)
            | Type::SchemaPropsOrStringArray(id) => BUILTIN.message(id),
            other => panic!("{other:?} is no message"),
        }
    }

    fn root(api_version: &str, kind: &str) -> &'static Message {
        let id = BUILTIN
            .root(api_version, kind)
            .unwrap_or_else(|| panic!("no root {api_version} {kind}"));
        BUILTIN.message(id)
    }

    #[test]
    fn version() {
        assert_eq!(super::KUBERNETES_VERSION, "1.37.2");
    }

    #[test]
    fn roots_are_sorted_unique_and_in_range() {
        assert!(BUILTIN.roots.len() > 400, "{} roots", BUILTIN.roots.len());
        for pair in BUILTIN.roots.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            assert!(
                (a.api_version, a.kind) < (b.api_version, b.kind),
                "{a:?} before {b:?}"
            );
        }
        for r in BUILTIN.roots {
            assert!(usize::from(r.message.0) < BUILTIN.messages.len(), "{r:?}");
            assert!(!r.api_version.contains("__internal"), "{r:?}");
        }
    }

    /// Each root's message is its kind, of its group version's Go package (or apimachinery's
    /// meta for WatchEvent, Status, the options kinds...).
    #[test]
    fn roots_name_their_own_message() {
        for r in BUILTIN.roots {
            let name = BUILTIN.message(r.message).name;
            let (package, kind) = name.rsplit_once('.').unwrap();
            assert_eq!(kind, r.kind, "{r:?} is {name}");
            if package == "k8s.io.apimachinery.pkg.apis.meta.v1" {
                continue;
            }
            let version = r.api_version.rsplit('/').next().unwrap();
            assert!(package.ends_with(&format!(".{version}")), "{r:?} is {name}");
            let group = r.api_version.rsplit_once('/').map_or("core", |(g, _)| g);
            let group = group.split('.').next().unwrap();
            let group = if group == "internal" {
                "apiserverinternal"
            } else {
                group
            };
            assert!(package.contains(&format!(".{group}.")), "{r:?} is {name}");
        }
    }

    #[test]
    fn fields_are_sorted_unique_and_ids_in_range() {
        let in_range = |id: MessageId| usize::from(id.0) < BUILTIN.messages.len();
        let mut names: Vec<_> = BUILTIN.messages.iter().map(|m| m.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(
            names.len(),
            BUILTIN.messages.len(),
            "message names are unique"
        );
        for m in BUILTIN.messages {
            for pair in m.fields.windows(2) {
                assert!(pair[0].number < pair[1].number, "{}: {pair:?}", m.name);
            }
            for f in m.fields {
                assert!(f.number > 0, "{}: {f:?}", m.name);
                if let Type::Message(id)
                | Type::SchemaPropsOrArray(id)
                | Type::SchemaPropsOrBool(id)
                | Type::SchemaPropsOrStringArray(id) = f.ty
                {
                    assert!(in_range(id), "{}: {f:?}", m.name);
                }
                if let Card::Map(key) = f.card {
                    assert!(
                        matches!(key, Type::String | Type::Int32 | Type::Int64 | Type::Bool),
                        "{}: {f:?}",
                        m.name
                    );
                }
                assert_eq!(f.json.is_empty(), f.inline, "{}: {f:?}", m.name);
                if f.inline {
                    assert!(matches!(f.ty, Type::Message(_)) && f.card == Card::Single);
                }
                if f.omit_zero {
                    assert!(f.card == Card::Single, "{}: {f:?}", m.name);
                    assert!(
                        matches!(
                            f.ty,
                            Type::String
                                | Type::Bytes
                                | Type::Bool
                                | Type::Int32
                                | Type::Int64
                                | Type::Uint32
                                | Type::Uint64
                                | Type::Double
                                | Type::Float
                        ),
                        "{}: {f:?}",
                        m.name
                    );
                }
            }
        }
    }

    #[test]
    fn pod() {
        let pod = root("v1", "Pod");
        assert_eq!(pod.name, "k8s.io.api.core.v1.Pod");
        let numbers: Vec<_> = pod.fields.iter().map(|f| (f.number, f.json)).collect();
        assert_eq!(numbers, [(1, "metadata"), (2, "spec"), (3, "status")]);
        let meta = message_of(pod.field(1).unwrap().ty);
        assert_eq!(meta.name, "k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta");
        assert_eq!(
            message_of(pod.field(2).unwrap().ty).name,
            "k8s.io.api.core.v1.PodSpec"
        );
        assert_eq!(
            message_of(pod.field(3).unwrap().ty).name,
            "k8s.io.api.core.v1.PodStatus"
        );

        let list = root("v1", "PodList");
        assert_eq!(list.name, "k8s.io.api.core.v1.PodList");
        let items = field(list, "items");
        assert_eq!((items.number, items.card), (2, Card::Repeated));
        assert!(std::ptr::eq(message_of(items.ty), pod));

        let container = message("k8s.io.api.core.v1.Container");
        assert_eq!(field(container, "ports").card, Card::Repeated);
        assert_eq!(
            message_of(field(container, "ports").ty).name,
            "k8s.io.api.core.v1.ContainerPort"
        );
        // `name` is a non-pointer string without omitempty; `image` has omitempty.
        assert!(!field(container, "name").omit_zero);
        assert!(field(container, "image").omit_zero);
        // A pointer is written when set, even to its zero value.
        let security = message("k8s.io.api.core.v1.SecurityContext");
        assert_eq!(field(security, "runAsUser").ty, Type::Int64);
        assert!(!field(security, "runAsUser").omit_zero);

        let resources = message("k8s.io.api.core.v1.ResourceRequirements");
        let limits = field(resources, "limits");
        assert_eq!(
            (limits.ty, limits.card),
            (Type::Quantity, Card::Map(Type::String))
        );

        let probe = message("k8s.io.api.core.v1.HTTPGetAction");
        assert_eq!(field(probe, "port").ty, Type::IntOrString);
    }

    #[test]
    fn object_meta() {
        let meta = message("k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta");
        assert_eq!(field(meta, "creationTimestamp").ty, Type::Time);
        assert_eq!(field(meta, "deletionTimestamp").ty, Type::Time);
        let labels = field(meta, "labels");
        assert_eq!(
            (labels.ty, labels.card),
            (Type::String, Card::Map(Type::String))
        );
        let managed = field(meta, "managedFields");
        assert_eq!(managed.card, Card::Repeated);
        let entry = message_of(managed.ty);
        assert_eq!(
            entry.name,
            "k8s.io.apimachinery.pkg.apis.meta.v1.ManagedFieldsEntry"
        );
        assert_eq!(field(entry, "fieldsV1").ty, Type::RawJson);
        assert_eq!(field(entry, "time").ty, Type::Time);
        assert_eq!(field(meta, "generation").ty, Type::Int64);
        assert!(field(meta, "generation").omit_zero);
    }

    #[test]
    fn secret_and_config_map_bytes() {
        let data = field(root("v1", "Secret"), "data");
        assert_eq!((data.ty, data.card), (Type::Bytes, Card::Map(Type::String)));
        let string_data = field(root("v1", "Secret"), "stringData");
        assert_eq!(
            (string_data.ty, string_data.card),
            (Type::String, Card::Map(Type::String))
        );
        let binary = field(root("v1", "ConfigMap"), "binaryData");
        assert_eq!(
            (binary.ty, binary.card),
            (Type::Bytes, Card::Map(Type::String))
        );
    }

    #[test]
    fn inline_sources() {
        let volume = message("k8s.io.api.core.v1.Volume");
        let inline: Vec<_> = volume.fields.iter().filter(|f| f.inline).collect();
        assert_eq!(inline.len(), 1, "{volume:?}");
        assert_eq!(
            message_of(inline[0].ty).name,
            "k8s.io.api.core.v1.VolumeSource"
        );
        assert_eq!(field(volume, "name").number, 1);

        let pv = message("k8s.io.api.core.v1.PersistentVolumeSpec");
        let inline: Vec<_> = pv.fields.iter().filter(|f| f.inline).collect();
        assert_eq!(inline.len(), 1, "{pv:?}");
        let source = message_of(inline[0].ty);
        assert_eq!(source.name, "k8s.io.api.core.v1.PersistentVolumeSource");
        assert_eq!(field(pv, "capacity").ty, Type::Quantity);
    }

    #[test]
    fn service_int_or_string() {
        let port = message("k8s.io.api.core.v1.ServicePort");
        assert_eq!(field(port, "targetPort").ty, Type::IntOrString);
        assert_eq!(field(port, "port").ty, Type::Int32);
    }

    #[test]
    fn micro_time() {
        let event = root("events.k8s.io/v1", "Event");
        assert_eq!(event.name, "k8s.io.api.events.v1.Event");
        assert_eq!(field(event, "eventTime").ty, Type::MicroTime);
        assert_eq!(field(event, "deprecatedFirstTimestamp").ty, Type::Time);
        let series = message_of(field(event, "series").ty);
        // Not core/v1's EventSeries: Go types of the same name in two packages are two messages.
        assert_eq!(series.name, "k8s.io.api.events.v1.EventSeries");
        let slice = root("discovery.k8s.io/v1", "EndpointSlice");
        assert_eq!(
            message_of(field(slice, "ports").ty).name,
            "k8s.io.api.discovery.v1.EndpointPort"
        );
        assert_eq!(field(series, "lastObservedTime").ty, Type::MicroTime);

        let lease = message_of(field(root("coordination.k8s.io/v1", "Lease"), "spec").ty);
        assert_eq!(field(lease, "renewTime").ty, Type::MicroTime);
        assert_eq!(field(lease, "acquireTime").ty, Type::MicroTime);
        assert_eq!(field(lease, "leaseDurationSeconds").ty, Type::Int32);
    }

    #[test]
    fn custom_resource_definition() {
        let crd = root("apiextensions.k8s.io/v1", "CustomResourceDefinition");
        let props =
            message("k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps");
        let id = |ty: Type| match ty {
            Type::SchemaPropsOrArray(id)
            | Type::SchemaPropsOrBool(id)
            | Type::SchemaPropsOrStringArray(id) => BUILTIN.message(id),
            other => panic!("{other:?}"),
        };
        assert!(matches!(
            field(props, "items").ty,
            Type::SchemaPropsOrArray(_)
        ));
        assert!(std::ptr::eq(id(field(props, "items").ty), props));
        assert!(matches!(
            field(props, "additionalProperties").ty,
            Type::SchemaPropsOrBool(_)
        ));
        assert!(std::ptr::eq(
            id(field(props, "additionalProperties").ty),
            props
        ));
        let deps = field(props, "dependencies");
        assert!(matches!(deps.ty, Type::SchemaPropsOrStringArray(_)));
        assert_eq!(deps.card, Card::Map(Type::String));
        let properties = field(props, "properties");
        assert_eq!(properties.card, Card::Map(Type::String));
        assert!(std::ptr::eq(message_of(properties.ty), props));
        assert_eq!(field(props, "default").ty, Type::RawJson);
        assert_eq!(
            (field(props, "enum").ty, field(props, "enum").card),
            (Type::RawJson, Card::Repeated)
        );
        assert_eq!(field(props, "maximum").ty, Type::Double);
        assert_eq!(
            field(props, "x-kubernetes-preserve-unknown-fields").ty,
            Type::Bool
        );
        assert_eq!(field(props, "$ref").ty, Type::String);
        // Reachable from the root.
        let spec = message_of(field(crd, "spec").ty);
        let version = message_of(field(spec, "versions").ty);
        let validation = message_of(field(version, "schema").ty);
        assert!(std::ptr::eq(
            message_of(field(validation, "openAPIV3Schema").ty),
            props
        ));
    }

    #[test]
    fn strings_wrappers() {
        let resource = message("k8s.io.apimachinery.pkg.apis.meta.v1.APIResource");
        assert_eq!(field(resource, "verbs").ty, Type::Strings);
        assert_eq!(field(resource, "verbs").card, Card::Single);
        let user = message("k8s.io.api.authentication.v1.UserInfo");
        let extra = field(user, "extra");
        assert_eq!(
            (extra.ty, extra.card),
            (Type::Strings, Card::Map(Type::String))
        );
    }

    #[test]
    fn meta_and_unversioned_kinds() {
        assert!(BUILTIN.root("v1", "Status").is_some());
        assert!(BUILTIN.root("v1", "APIResourceList").is_some());
        let partial = root("meta.k8s.io/v1", "PartialObjectMetadataList");
        assert_eq!(
            partial.name,
            "k8s.io.apimachinery.pkg.apis.meta.v1.PartialObjectMetadataList"
        );
        assert!(
            BUILTIN
                .root("meta.k8s.io/v1", "PartialObjectMetadata")
                .is_some()
        );
        let watch = root("apps/v1", "WatchEvent");
        assert_eq!(
            watch.name,
            "k8s.io.apimachinery.pkg.apis.meta.v1.WatchEvent"
        );
        assert_eq!(field(watch, "type").ty, Type::String);
        assert_eq!(field(watch, "object").ty, Type::RawJson);
        // Table has no protobuf form.
        assert!(BUILTIN.root("meta.k8s.io/v1", "Table").is_none());
        assert!(
            BUILTIN
                .root("apiregistration.k8s.io/v1", "APIService")
                .is_some()
        );
        assert!(BUILTIN.root("v1", "Nope").is_none());
    }

    #[test]
    fn api_versions() {
        for v in [
            "v1",
            "apps/v1",
            "batch/v1",
            "meta.k8s.io/v1",
            "apiextensions.k8s.io/v1",
        ] {
            assert!(BUILTIN.has_api_version(v), "{v}");
        }
        for v in [
            "stable.example.com/v1",
            "apps/v1beta2",
            "extensions/v1beta1",
            "",
            "apps",
            "v2",
        ] {
            assert!(!BUILTIN.has_api_version(v), "{v}");
        }
    }

    /// The group versions the generator takes are those k8s-openapi has: a kind of each.
    #[test]
    fn k8s_openapi_kinds_are_roots() {
        use k8s_openapi::Resource;
        fn has<R: Resource>() -> bool {
            BUILTIN.root(R::API_VERSION, R::KIND).is_some()
        }
        use k8s_openapi::api;
        assert!(has::<api::core::v1::Pod>());
        assert!(has::<api::apps::v1::Deployment>());
        assert!(has::<api::coordination::v1::Lease>());
        assert!(has::<api::coordination::v1alpha2::LeaseCandidate>());
        assert!(has::<api::resource::v1beta2::ResourceClaim>());
        assert!(has::<api::storagemigration::v1beta1::StorageVersionMigration>());
        assert!(has::<api::flowcontrol::v1::FlowSchema>());
        assert!(has::<api::apiserverinternal::v1alpha1::StorageVersion>());
        assert!(has::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>());
        assert!(has::<
            k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService,
        >());
    }
}
