//! Decode-time projection: fields dropped while parsing, never built.
//!
//! A [`Projection`] is a set of field paths to drop. The decoders apply it through a serde
//! [`Deserializer`] adapter that sits between serde_json and the object's own `Deserialize`
//! (k8s-openapi's generated visitors, a `#[derive(CustomResource)]` type, `DynamicObject`): at
//! each object on a path it reads the keys first, and a key to drop is never shown to the
//! object's visitor; its value is skipped in the underlying parser with [`IgnoredAny`], so no
//! string, map or `serde_json::Value` of it is ever allocated. Everywhere off the paths the
//! adapter steps aside and the object decodes from serde_json directly, at full speed.

use std::{cell::RefCell, fmt, sync::Arc};

use serde::{
    Deserialize, Deserializer,
    de::{
        self, DeserializeSeed, EnumAccess, IgnoredAny, IntoDeserializer, MapAccess, SeqAccess,
        Visitor, value::BorrowedStrDeserializer,
    },
};

/// Fields to drop from every object while it is decoded, before it is built.
///
/// Set it with [`ReflectorConfig::projection`](crate::ReflectorConfig::projection),
/// [`InformerConfig::projection`](crate::InformerConfig::projection) or
/// [`FactoryConfig::projection`](crate::FactoryConfig::projection); [`ApiListerWatcher`](crate::ApiListerWatcher)
/// applies it to list items, watch events and the streaming list's initial events.
///
/// # Paths
///
/// A path names fields from the top of the object, as in `kubectl explain`:
///
/// | path | drops |
/// |---|---|
/// | `metadata.managedFields` | a field of an object |
/// | `spec.containers[*].env` (or `[]`) | `env` of every element of the `containers` array |
/// | `metadata.annotations["kubectl.kubernetes.io/last-applied-configuration"]` | one key of a map, quoted (`\"` and `\\` escape) when it holds `.`, `[` or `]` |
///
/// `a.b` and `a["b"]` are the same path: JSON does not tell struct fields from map keys. A path
/// must end in a field or key (dropping every element of an array would be `a` itself). A
/// path that meets something else than it expects (an array where it names a field, a missing
/// field, `null`) drops nothing there. `metadata`, `metadata.name`, `metadata.namespace`,
/// `metadata.resourceVersion` and `metadata.uid` cannot be dropped: the informer keys and
/// versions objects by the first four, and a sharded informer places them by their uid.
/// Watch bookmarks and `ERROR` statuses are never projected.
///
/// # Fields the type requires
///
/// Drop only fields your code does not read. A dropped field decodes as if the server had not
/// sent it, and for k8s-openapi's types that means its default when the field is required:
/// dropping `spec.containers[*].name` gives every container the name `""`, and dropping
/// `spec.containers` gives an empty `Vec`. Two required fields have no default
/// (`Condition.lastTransitionTime`, `EventSeries.lastObservedTime`): an object whose
/// projection drops one of them fails to decode, and is reported and left out like any object
/// that does not decode. A `#[derive(CustomResource)]` type's required fields fail the same
/// way unless they have `#[serde(default)]`.
///
/// ```
/// use k8s_openapi::{api::core::v1::Pod, apimachinery::pkg::apis::meta::v1::Condition};
/// use kube_informer::reflector::decode::Projection;
///
/// let p = Projection::from_paths(["spec.containers[*].name"])?;
/// let pod: Pod = p.from_slice(br#"{"metadata":{"name":"a"},"spec":{"containers":[{"name":"c"}]}}"#)?;
/// assert_eq!(pod.spec.unwrap().containers[0].name, "");
///
/// let p = Projection::from_paths(["lastTransitionTime"])?;
/// let condition = br#"{"type":"Ready","status":"True","reason":"R","message":"",
///   "lastTransitionTime":"2026-12-04T00:00:00Z"}"#;
/// assert!(p.from_slice::<Condition>(condition).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Projection or transform
///
/// The projection is the cheaper way to drop fields: what it drops is skipped by the parser,
/// while a [transform](crate::strip_managed_fields_transform) runs after the whole object has been
/// built, so the dropped part is allocated, filled and freed again (for `managedFields` that is
/// most of a Pod's heap, and with it most of the sync CPU). Use a transform to change or compute
/// values, to drop fields conditionally, or with a custom [`ListerWatcher`](crate::ListerWatcher)
/// that does not decode through this crate's decoders (one that hands out objects it already
/// has may ignore the projection in [`ListOptions`](crate::reflector::ListOptions)).
///
/// # Malformed values
///
/// A dropped value is skipped, not decoded: one of the wrong type (`"managedFields": "x"`) is
/// no error, and an object that would fail to decode only because of it decodes. Malformed
/// JSON is still an error wherever it is: skipping checks the syntax, so a line or list that is
/// not JSON fails as without the projection.
///
/// ```
/// use k8s_openapi::api::core::v1::Pod;
/// use kube_informer::reflector::decode::Projection;
///
/// let p = Projection::strip_managed_fields()
///     .drop_path(r#"metadata.annotations["kubectl.kubernetes.io/last-applied-configuration"]"#)?
///     .drop_path("spec.containers[*].env")?;
/// let json = br#"{"metadata":{"name":"a","managedFields":[{"manager":"kubectl"}],
///   "annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{}","team":"x"}},
///   "spec":{"containers":[{"name":"c","env":[{"name":"A","value":"1"}]}]}}"#;
/// let pod: Pod = p.from_slice(json)?;
/// assert!(pod.metadata.managed_fields.is_none());
/// assert_eq!(pod.metadata.annotations.unwrap().len(), 1);
/// assert!(pod.spec.unwrap().containers[0].env.is_none());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Default)]
pub struct Projection {
    inner: Option<Arc<Inner>>,
}

struct Inner {
    /// The paths as given, sorted and deduplicated: what `Debug` and `==` look at, with `check`.
    paths: Vec<String>,
    root: Node,
    /// Whether the values at the paths are checked (see [`Projection::checking`]) rather than
    /// skipped.
    check: bool,
}

impl fmt::Debug for Projection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_checking() {
            f.write_str("checking ")?;
        }
        f.debug_set().entries(self.paths()).finish()
    }
}

/// Equal when they hide the same paths the same way (both [checking](Projection::checking)
/// or both dropping).
impl PartialEq for Projection {
    fn eq(&self, other: &Self) -> bool {
        self.is_checking() == other.is_checking() && self.paths().eq(other.paths())
    }
}

impl Eq for Projection {}

/// A path given to [`Projection::drop_path`] that is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProjectionError {
    /// The path does not follow the syntax in [`Projection`].
    #[error("invalid projection path {path:?} at byte {at}: {reason}")]
    Syntax {
        /// The path.
        path: String,
        /// Where in it the error is.
        at: usize,
        /// What was expected there.
        reason: &'static str,
    },
    /// The path would drop a field the informer needs: `metadata` itself, its `name`,
    /// `namespace`, `resourceVersion` or `uid`.
    #[error("projection path {path:?} would drop `{field}`, which the informer needs")]
    Protected {
        /// The path.
        path: String,
        /// The field it would drop.
        field: &'static str,
    },
}

/// Fields that must survive: keys and resourceVersions come from them, and a sharded
/// informer checks each object's shard by its uid (or namespace) on the client too: with the
/// uid dropped every object would hash alike and land outside all shards but one.
const PROTECTED: &[(&[&str], &str)] = &[
    (&["metadata"], "metadata"),
    (&["metadata", "name"], "metadata.name"),
    (&["metadata", "namespace"], "metadata.namespace"),
    (&["metadata", "resourceVersion"], "metadata.resourceVersion"),
    (&["metadata", "uid"], "metadata.uid"),
];

impl Projection {
    /// Drops nothing (the default).
    pub fn none() -> Self {
        Self::default()
    }

    /// Drops `metadata.managedFields`.
    pub fn strip_managed_fields() -> Self {
        Self::none()
            .drop_path("metadata.managedFields")
            .expect("a valid path")
    }

    /// Drops every path of `paths` (see [`Projection`] for their syntax).
    ///
    /// # Errors
    ///
    /// [`ProjectionError`] for the first path that is not valid.
    pub fn from_paths<I>(paths: I) -> Result<Self, ProjectionError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        paths
            .into_iter()
            .try_fold(Self::none(), |p, path| p.drop_path(path.as_ref()))
    }

    /// This projection and `path` dropped too.
    ///
    /// # Errors
    ///
    /// [`ProjectionError`] when `path` is not valid.
    pub fn drop_path(self, path: &str) -> Result<Self, ProjectionError> {
        let check = self.is_checking();
        self.add_path(path, check)
    }

    /// A projection that hides the value at `path` from the object's type, as
    /// [`drop_path`](Self::drop_path) does, but reads it as strictly as a `serde_json::Value`
    /// would be read (every string's escapes and UTF-8, every number's range, serde_json's
    /// nesting limit and its `RawValue` key) without building it. Where the type would take any
    /// JSON value there (a `serde_json::Value`, like k8s-openapi's `FieldsV1`), a decode through
    /// it fails exactly where a full decode would, at less cost: it checks that an object
    /// decodes. Paths added to it with [`drop_path`](Self::drop_path) are checked too.
    ///
    /// ```
    /// use k8s_openapi::api::core::v1::Pod;
    /// use kube_informer::reflector::decode::Projection;
    ///
    /// let check = Projection::checking("metadata.managedFields[*].fieldsV1")?;
    /// let good = br#"{"metadata":{"name":"a","managedFields":[{"fieldsV1":{"f:data":{}}}]}}"#;
    /// let pod: Pod = check.from_slice(good)?;
    /// assert!(pod.metadata.managed_fields.unwrap()[0].fields_v1.is_none());
    /// // A lone surrogate, which a `serde_json::Value` refuses (a skipping projection takes it).
    /// let bad = br#"{"metadata":{"name":"a","managedFields":[{"fieldsV1":"\ud800"}]}}"#;
    /// assert!(check.from_slice::<Pod>(bad).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ProjectionError`] when `path` is not valid.
    pub fn checking(path: &str) -> Result<Self, ProjectionError> {
        Self::none().add_path(path, true)
    }

    fn add_path(self, path: &str, check: bool) -> Result<Self, ProjectionError> {
        let segments = parse(path)?;
        let fields: Option<Vec<&str>> = segments
            .iter()
            .map(|s| match s {
                Segment::Key(k) => Some(k.as_str()),
                Segment::Elements => None,
            })
            .collect();
        if let Some((_, field)) = fields.and_then(|f| PROTECTED.iter().find(|(p, _)| **p == f[..]))
        {
            return Err(ProjectionError::Protected {
                path: path.to_owned(),
                field,
            });
        }
        let mut paths = self.paths().map(str::to_owned).collect::<Vec<_>>();
        if let Err(at) = paths.binary_search_by(|p| p.as_str().cmp(path)) {
            paths.insert(at, path.to_owned());
        }
        let mut root = Node::default();
        for p in &paths {
            root.insert(&parse(p).expect("validated when added"), check);
        }
        Ok(Self {
            inner: Some(Arc::new(Inner { paths, root, check })),
        })
    }

    /// Whether it reads what it hides as strictly as a `serde_json::Value` would
    /// ([`checking`](Self::checking)) rather than skipping it.
    pub fn is_checking(&self) -> bool {
        self.inner.as_ref().is_some_and(|i| i.check)
    }

    /// Whether it drops nothing.
    pub fn is_empty(&self) -> bool {
        self.inner.is_none()
    }

    /// The dropped paths, sorted.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.inner
            .iter()
            .flat_map(|i| i.paths.iter().map(String::as_str))
    }

    /// Decodes a `T` from `deserializer` with the projected fields dropped.
    ///
    /// # Errors
    ///
    /// Whatever `T` and `deserializer` fail with.
    pub fn deserialize<'de, T, D>(&self, deserializer: D) -> Result<T, D::Error>
    where
        T: Deserialize<'de>,
        D: Deserializer<'de>,
    {
        self.seed(std::marker::PhantomData)
            .deserialize(deserializer)
    }

    /// Decodes a `T` from JSON bytes with the projected fields dropped (as
    /// `serde_json::from_slice`).
    ///
    /// # Errors
    ///
    /// As `serde_json::from_slice`.
    pub fn from_slice<'a, T: Deserialize<'a>>(
        &self,
        json: &'a [u8],
    ) -> Result<T, serde_json::Error> {
        let mut de = serde_json::Deserializer::from_slice(json);
        let value = self.deserialize(&mut de)?;
        de.end()?;
        Ok(value)
    }

    /// The top level of the paths; `None` when nothing is dropped.
    // For the direct protobuf decoders, which compile with k8s-openapi's `v1_37` alone.
    #[allow(dead_code)]
    pub(crate) fn root(&self) -> Option<&Node> {
        self.inner.as_deref().map(|i| &i.root)
    }

    /// `seed` applied through this projection.
    pub(super) fn seed<S>(&self, seed: S) -> Hidden<'_, S> {
        Hidden {
            seed,
            node: self.inner.as_deref().map(|i| &i.root),
        }
    }

    /// Runs `f` with this projection current on this thread, for [`Projected`] values decoded in
    /// it.
    pub(super) fn scope<R>(&self, f: impl FnOnce() -> R) -> R {
        struct Restore(Option<Arc<Inner>>);
        impl Drop for Restore {
            fn drop(&mut self) {
                CURRENT.with(|c| *c.borrow_mut() = self.0.take());
            }
        }
        let _restore = Restore(CURRENT.with(|c| c.replace(self.inner.clone())));
        f()
    }
}

thread_local! {
    /// The projection of [`Projection::scope`]. serde_json's `StreamDeserializer`, the only
    /// public way to learn where a value ends in a slice (which the list decoder needs to drop
    /// the bytes behind it), takes `Deserialize` types, not seeds; this is how the projection
    /// reaches [`Projected`]'s `Deserialize`.
    static CURRENT: RefCell<Option<Arc<Inner>>> = const { RefCell::new(None) };
}

/// A `K` decoded through the projection current on this thread ([`Projection::scope`]).
pub(super) struct Projected<K>(pub K);

impl<'de, K: Deserialize<'de>> Deserialize<'de> for Projected<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let inner = CURRENT.with(|c| c.borrow().clone());
        let seed = Hidden {
            seed: std::marker::PhantomData::<K>,
            node: inner.as_deref().map(|i| &i.root),
        };
        seed.deserialize(deserializer).map(Projected)
    }
}

/// One step of a path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    /// A field or map key of an object.
    Key(String),
    /// Every element of an array.
    Elements,
}

fn parse(path: &str) -> Result<Vec<Segment>, ProjectionError> {
    let err = |at: usize, reason: &'static str| ProjectionError::Syntax {
        path: path.to_owned(),
        at,
        reason,
    };
    let bytes = path.as_bytes();
    let mut segments = Vec::new();
    let mut i = 0;
    while i < bytes.len() || segments.is_empty() {
        match bytes.get(i) {
            Some(b'[') => {
                i += 1;
                match bytes.get(i) {
                    Some(b']') => {
                        segments.push(Segment::Elements);
                        i += 1;
                    }
                    Some(b'*') if bytes.get(i + 1) == Some(&b']') => {
                        segments.push(Segment::Elements);
                        i += 2;
                    }
                    Some(b'"') => {
                        let mut key = String::new();
                        let mut chars = path[i + 1..].char_indices();
                        let end = loop {
                            match chars.next() {
                                Some((j, '"')) => break i + 1 + j + 1,
                                Some((_, '\\')) => match chars.next() {
                                    Some((_, c @ ('"' | '\\'))) => key.push(c),
                                    Some((j, _)) => {
                                        return Err(err(
                                            i + 1 + j,
                                            "only `\\\"` and `\\\\` escape",
                                        ));
                                    }
                                    None => return Err(err(path.len(), "unterminated key")),
                                },
                                Some((_, c)) => key.push(c),
                                None => return Err(err(path.len(), "unterminated key")),
                            }
                        };
                        if bytes.get(end) != Some(&b']') {
                            return Err(err(end, "expected `]` after a quoted key"));
                        }
                        segments.push(Segment::Key(key));
                        i = end + 1;
                    }
                    _ => return Err(err(i, "expected `*]`, `]` or a quoted key after `[`")),
                }
                if segments.len() == 1 && segments[0] == Segment::Elements {
                    return Err(err(0, "a path starts at a field of the object"));
                }
            }
            Some(b'.') if !segments.is_empty() => {
                i += 1;
                let (key, len) = field(&path[i..]);
                if len == 0 {
                    return Err(err(i, "expected a field name after `.`"));
                }
                segments.push(Segment::Key(key.to_owned()));
                i += len;
            }
            _ if segments.is_empty() => {
                let (key, len) = field(path);
                if len == 0 {
                    return Err(err(0, "expected a field name"));
                }
                segments.push(Segment::Key(key.to_owned()));
                i = len;
            }
            _ => return Err(err(i, "expected `.` or `[`")),
        }
    }
    if segments.last() == Some(&Segment::Elements) {
        return Err(err(path.len(), "a path ends in a field or key, not `[*]`"));
    }
    Ok(segments)
}

/// The bare field name at the start of `s` and its length.
fn field(s: &str) -> (&str, usize) {
    let len = s.find(['.', '[', ']', '"']).unwrap_or(s.len());
    (&s[..len], len)
}

/// What happens below one value: the keys to drop or descend into when it is an object, and the
/// node of every element when it is an array.
/// One level of a projection's paths: the keys of an object to drop or descend into, and what
/// to drop in each element of an array.
#[derive(Debug, Default)]
pub(crate) struct Node {
    keys: Vec<(Box<str>, Child)>,
    elements: Option<Box<Node>>,
}

/// What a projection does at one key.
#[derive(Debug)]
pub(crate) enum Child {
    Drop,
    /// Hidden like `Drop`, but read as strictly as a `serde_json::Value` (see
    /// [`Projection::checking`]); the protobuf decoders, which have no JSON to check there, drop
    /// it.
    Check,
    Descend(Node),
}

impl Node {
    fn insert(&mut self, path: &[Segment], check: bool) {
        let Some((first, rest)) = path.split_first() else {
            return;
        };
        match first {
            Segment::Elements => self.elements.get_or_insert_default().insert(rest, check),
            Segment::Key(k) => {
                let at = match self.keys.iter().position(|(key, _)| **key == **k) {
                    Some(at) => at,
                    None => {
                        self.keys
                            .push((k.as_str().into(), Child::Descend(Node::default())));
                        self.keys.len() - 1
                    }
                };
                let child = &mut self.keys[at].1;
                match child {
                    // Dropped whole already: nothing below it matters.
                    Child::Drop | Child::Check => {}
                    Child::Descend(_) if rest.is_empty() => {
                        *child = if check { Child::Check } else { Child::Drop };
                    }
                    Child::Descend(node) => node.insert(rest, check),
                }
            }
        }
    }

    /// What is done at `key` of an object at this level: `None` when no path goes through it.
    pub(crate) fn child(&self, key: &str) -> Option<&Child> {
        self.keys.iter().find(|(k, _)| **k == *key).map(|(_, c)| c)
    }

    /// What is dropped in each element of an array at this level.
    // For the direct protobuf decoders, which compile with k8s-openapi's `v1_37` alone.
    #[allow(dead_code)]
    pub(crate) fn elements(&self) -> Option<&Node> {
        self.elements.as_deref()
    }
}

/// A seed decoded through `node` (`None`: nothing to drop below, decode directly).
pub(crate) struct Hidden<'n, S> {
    seed: S,
    node: Option<&'n Node>,
}

impl<'n, S> Hidden<'n, S> {
    /// `seed`, with what `node` drops hidden from it.
    pub(crate) fn new(seed: S, node: Option<&'n Node>) -> Self {
        Self { seed, node }
    }
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Hidden<'_, S> {
    type Value = S::Value;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<S::Value, D::Error> {
        match self.node {
            None => self.seed.deserialize(deserializer),
            Some(node) => self.seed.deserialize(Hide {
                de: deserializer,
                node,
            }),
        }
    }
}

/// The adapter: `de` with the keys `node` drops hidden.
struct Hide<'n, D> {
    de: D,
    node: &'n Node,
}

macro_rules! forward {
    ($($method:ident($($arg:ident: $ty:ty),*);)*) => {$(
        fn $method<V: Visitor<'de>>(self, $($arg: $ty,)* visitor: V) -> Result<V::Value, D::Error> {
            self.de.$method($($arg,)* HideVisitor { visitor, node: self.node })
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Hide<'_, D> {
    type Error = D::Error;

    forward! {
        deserialize_any();
        deserialize_bool();
        deserialize_i8();
        deserialize_i16();
        deserialize_i32();
        deserialize_i64();
        deserialize_i128();
        deserialize_u8();
        deserialize_u16();
        deserialize_u32();
        deserialize_u64();
        deserialize_u128();
        deserialize_f32();
        deserialize_f64();
        deserialize_char();
        deserialize_str();
        deserialize_string();
        deserialize_bytes();
        deserialize_byte_buf();
        deserialize_option();
        deserialize_unit();
        deserialize_unit_struct(name: &'static str);
        deserialize_newtype_struct(name: &'static str);
        deserialize_seq();
        deserialize_tuple(len: usize);
        deserialize_tuple_struct(name: &'static str, len: usize);
        deserialize_map();
        deserialize_struct(name: &'static str, fields: &'static [&'static str]);
        deserialize_enum(name: &'static str, variants: &'static [&'static str]);
        deserialize_identifier();
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        // Nothing is built: nothing to hide.
        self.de.deserialize_ignored_any(visitor)
    }

    fn is_human_readable(&self) -> bool {
        self.de.is_human_readable()
    }
}

/// `visitor`, handed maps, sequences, options and newtypes with the keys `node` drops hidden.
struct HideVisitor<'n, V> {
    visitor: V,
    node: &'n Node,
}

macro_rules! forward_visit {
    ($($method:ident($ty:ty);)*) => {$(
        fn $method<E: de::Error>(self, v: $ty) -> Result<V::Value, E> {
            self.visitor.$method(v)
        }
    )*};
}

impl<'de, V: Visitor<'de>> Visitor<'de> for HideVisitor<'_, V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.visitor.expecting(f)
    }

    forward_visit! {
        visit_bool(bool);
        visit_i8(i8);
        visit_i16(i16);
        visit_i32(i32);
        visit_i64(i64);
        visit_i128(i128);
        visit_u8(u8);
        visit_u16(u16);
        visit_u32(u32);
        visit_u64(u64);
        visit_u128(u128);
        visit_f32(f32);
        visit_f64(f64);
        visit_char(char);
        visit_str(&str);
        visit_borrowed_str(&'de str);
        visit_string(String);
        visit_bytes(&[u8]);
        visit_borrowed_bytes(&'de [u8]);
        visit_byte_buf(Vec<u8>);
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.visitor.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.visitor.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        self.visitor.visit_some(Hide {
            de: d,
            node: self.node,
        })
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        self.visitor.visit_newtype_struct(Hide {
            de: d,
            node: self.node,
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        match &self.node.elements {
            None => self.visitor.visit_seq(seq),
            Some(node) => self.visitor.visit_seq(HideSeq { seq, node }),
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        if self.node.keys.is_empty() {
            return self.visitor.visit_map(map);
        }
        self.visitor.visit_map(HideMap {
            map,
            node: self.node,
            value: None,
        })
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        // An externally tagged enum's payload is not a path of the object's JSON fields that a
        // Kubernetes object uses: it is decoded as it is.
        self.visitor.visit_enum(data)
    }
}

struct HideSeq<'n, A> {
    seq: A,
    node: &'n Node,
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for HideSeq<'_, A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, A::Error> {
        self.seq.next_element_seed(Hidden {
            seed,
            node: Some(self.node),
        })
    }

    fn size_hint(&self) -> Option<usize> {
        self.seq.size_hint()
    }
}

struct HideMap<'n, A> {
    map: A,
    node: &'n Node,
    /// What to hide in the value of the key just returned.
    value: Option<&'n Node>,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for HideMap<'_, A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        let mut seed = seed;
        loop {
            match self.map.next_key_seed(KeySeed {
                seed,
                node: self.node,
            })? {
                None => return Ok(None),
                Some(Key::Hidden(back)) => {
                    // Consumed in the parser, never shown to the object's visitor.
                    self.map.next_value::<IgnoredAny>()?;
                    seed = back;
                }
                Some(Key::Checked(back)) => {
                    self.map.next_value::<Checked>()?;
                    seed = back;
                }
                Some(Key::Kept(key, value)) => {
                    self.value = value;
                    return Ok(Some(key));
                }
            }
        }
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, A::Error> {
        self.map.next_value_seed(Hidden {
            seed,
            node: self.value.take(),
        })
    }

    // No size hint: hidden keys make the inner one too large.
}

/// A map key as [`HideMap`] sees it.
enum Key<'n, S, V> {
    /// Dropped: the seed comes back for the next key.
    Hidden(S),
    /// Hidden, its value to be checked: the seed comes back for the next key.
    Checked(S),
    /// Shown: the key as the object's seed decoded it, and what to hide in its value.
    Kept(V, Option<&'n Node>),
}

/// Reads a key's string, and decodes it with `seed` only when it is not dropped.
struct KeySeed<'n, S> {
    seed: S,
    node: &'n Node,
}

impl<'de, 'n, S: DeserializeSeed<'de>> DeserializeSeed<'de> for KeySeed<'n, S> {
    type Value = Key<'n, S, S::Value>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

/// What [`KeySeed`] found a key to be.
enum Look<'n, S> {
    Drop(S),
    Check(S),
    Keep(S, Option<&'n Node>),
}

impl<'n, S> KeySeed<'n, S> {
    fn look(self, key: &str) -> Look<'n, S> {
        match self.node.child(key) {
            Some(Child::Drop) => Look::Drop(self.seed),
            Some(Child::Check) => Look::Check(self.seed),
            Some(Child::Descend(node)) => Look::Keep(self.seed, Some(node)),
            None => Look::Keep(self.seed, None),
        }
    }
}

impl<'n, S> Look<'n, S> {
    /// The key, decoded by the object's seed from `key` unless it is dropped.
    fn decode<'de, D>(self, key: impl FnOnce() -> D) -> Result<Key<'n, S, S::Value>, D::Error>
    where
        S: DeserializeSeed<'de>,
        D: Deserializer<'de>,
    {
        match self {
            Look::Drop(seed) => Ok(Key::Hidden(seed)),
            Look::Check(seed) => Ok(Key::Checked(seed)),
            Look::Keep(seed, node) => seed.deserialize(key()).map(|k| Key::Kept(k, node)),
        }
    }
}

impl<'de, 'n, S: DeserializeSeed<'de>> Visitor<'de> for KeySeed<'n, S> {
    type Value = Key<'n, S, S::Value>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string key")
    }

    // Each form is handed on as it came (borrowed, transient or owned), so the object's seed
    // allocates exactly what it would without the projection.
    fn visit_borrowed_str<E: de::Error>(self, k: &'de str) -> Result<Self::Value, E> {
        self.look(k).decode(|| BorrowedStrDeserializer::new(k))
    }

    fn visit_str<E: de::Error>(self, k: &str) -> Result<Self::Value, E> {
        self.look(k).decode(|| k.into_deserializer())
    }

    fn visit_string<E: de::Error>(self, k: String) -> Result<Self::Value, E> {
        self.look(&k).decode(|| k.into_deserializer())
    }
}

/// A JSON value read as `serde_json::Value` reads one (`deserialize_any`, so every string is
/// parsed with its escapes and UTF-8, every number with its range, and nesting counts against
/// serde_json's limit), and not built: strings are visited borrowed, and nothing is kept.
struct Checked;

/// The key serde_json's `Value` reads, as an object's first key, as "the JSON text in this
/// string" (its `raw_value` feature, which this crate enables).
const RAW_VALUE_KEY: &str = "$serde_json::private::RawValue";

impl<'de> Deserialize<'de> for Checked {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(Checked)
    }
}

impl<'de> Visitor<'de> for Checked {
    type Value = Checked;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_none<E: de::Error>(self) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Checked, D::Error> {
        Checked::deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Checked, A::Error> {
        while seq.next_element::<Checked>()?.is_some() {}
        Ok(Checked)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Checked, A::Error> {
        let Some(first) = map.next_key::<CheckedKey>()? else {
            return Ok(Checked);
        };
        if first.0 {
            // As `Value` does: the string's text is parsed as a whole JSON document, and the
            // object ends there.
            let text: String = map.next_value()?;
            serde_json::from_str::<Checked>(&text).map_err(de::Error::custom)?;
            return Ok(Checked);
        }
        map.next_value::<Checked>()?;
        while map.next_key::<CheckedKey>()?.is_some() {
            map.next_value::<Checked>()?;
        }
        Ok(Checked)
    }
}

/// An object's key, read as [`Checked`] reads a string; whether it is [`RAW_VALUE_KEY`].
struct CheckedKey(bool);

impl<'de> Deserialize<'de> for CheckedKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = CheckedKey;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string key")
            }
            fn visit_str<E: de::Error>(self, k: &str) -> Result<CheckedKey, E> {
                Ok(CheckedKey(k == RAW_VALUE_KEY))
            }
        }
        deserializer.deserialize_str(V)
    }
}

#[cfg(test)]
mod tests;
