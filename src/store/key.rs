//! Object keys: client-go's `MetaNamespaceKeyFunc` and its inverse.

use std::{borrow::Borrow, fmt, sync::Arc};

use kube::Resource;

/// The cache key of an object: `namespace/name`, or `name` for cluster-scoped objects.
///
/// This is the key client-go's `MetaNamespaceKeyFunc` produces, so keys written to logs, to a
/// workqueue or compared with a Go controller's keys read the same. It is a cheap-to-clone shared
/// string (one allocation, reference counted), because the same key sits in the store, its indices,
/// the DeltaFIFO's queue and usually a workqueue at once.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey(Arc<str>);

impl ObjectKey {
    /// Builds the key of an object with the given namespace (`None` or empty for cluster-scoped)
    /// and name.
    ///
    /// # Errors
    ///
    /// [`KeyError::MissingName`] when `name` is empty, [`KeyError::InvalidName`] when the
    /// name or namespace contains a `/` (the API server never accepts one there, and it would make
    /// the key ambiguous).
    pub fn new(namespace: Option<&str>, name: &str) -> Result<Self, KeyError> {
        if name.is_empty() {
            return Err(KeyError::MissingName);
        }
        if name.contains('/') {
            return Err(KeyError::InvalidName(name.to_owned()));
        }
        match namespace {
            Some(ns) if !ns.is_empty() => {
                if ns.contains('/') {
                    return Err(KeyError::InvalidName(ns.to_owned()));
                }
                let mut s = String::with_capacity(ns.len() + 1 + name.len());
                s.push_str(ns);
                s.push('/');
                s.push_str(name);
                Ok(Self(s.into()))
            }
            _ => Ok(Self(name.into())),
        }
    }

    /// Parses a key in client-go's `namespace/name` or `name` form
    /// (client-go's `SplitMetaNamespaceKey` run in reverse).
    ///
    /// # Errors
    ///
    /// [`KeyError::MalformedKey`] for an empty key, an empty part, or more than one `/`.
    pub fn parse(key: &str) -> Result<Self, KeyError> {
        let (ns, name) = split_key(key)?;
        Self::new(ns, name)
    }

    /// The namespace part, `None` for a cluster-scoped key.
    pub fn namespace(&self) -> Option<&str> {
        self.0.split_once('/').map(|(ns, _)| ns)
    }

    /// The name part.
    pub fn name(&self) -> &str {
        match self.0.split_once('/') {
            Some((_, name)) => name,
            None => &self.0,
        }
    }

    /// The key as client-go would print it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Splits a `namespace/name` or `name` key into its parts (client-go's `SplitMetaNamespaceKey`).
///
/// # Errors
///
/// [`KeyError::MalformedKey`] for an empty key, an empty part, or more than one `/`.
pub fn split_key(key: &str) -> Result<(Option<&str>, &str), KeyError> {
    let malformed = || KeyError::MalformedKey(key.to_owned());
    match key.split_once('/') {
        None if key.is_empty() => Err(malformed()),
        None => Ok((None, key)),
        Some((ns, name)) if ns.is_empty() || name.is_empty() || name.contains('/') => {
            Err(malformed())
        }
        Some((ns, name)) => Ok((Some(ns), name)),
    }
}

/// Anything [`key_of`] takes a key from: a resource `K` itself, or the `Arc<K>` the informer
/// hands to handlers and listers (or a `Box<K>`), so `key_of(&obj)` reads the same for all.
///
/// Implement it for another smart pointer to your resource type if you need one.
pub trait KeySource<K> {
    /// The resource whose metadata makes the key.
    fn resource(&self) -> &K;
}

impl<K: Resource> KeySource<K> for K {
    fn resource(&self) -> &K {
        self
    }
}

impl<K: Resource> KeySource<K> for Arc<K> {
    fn resource(&self) -> &K {
        self
    }
}

impl<K: Resource> KeySource<K> for Box<K> {
    fn resource(&self) -> &K {
        self
    }
}

/// The key of an object, from its metadata (client-go's `MetaNamespaceKeyFunc`).
///
/// Takes `&K` or `&Arc<K>` alike (see [`KeySource`]):
///
/// ```
/// use std::sync::Arc;
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kube::api::ObjectMeta;
/// use kube_informer::key_of;
///
/// let cm = ConfigMap {
///     metadata: ObjectMeta { name: Some("a".into()), namespace: Some("ns".into()), ..Default::default() },
///     ..Default::default()
/// };
/// let shared = Arc::new(cm.clone());
/// assert_eq!(key_of(&cm).unwrap(), key_of(&shared).unwrap());
/// ```
///
/// # Errors
///
/// [`KeyError::MissingName`] when the object has no `metadata.name`; [`KeyError::InvalidName`]
/// when its name or namespace contains a `/`. Never panics: an object that arrived from a
/// misbehaving server or a test without a name is reported, not trusted.
pub fn key_of<K: Resource>(obj: &(impl KeySource<K> + ?Sized)) -> Result<ObjectKey, KeyError> {
    let meta = obj.resource().meta();
    let name = meta.name.as_deref().unwrap_or_default();
    ObjectKey::new(meta.namespace.as_deref(), name)
}

/// Conversions with kube-runtime's [`ObjectRef`](kube_runtime::reflector::ObjectRef), for
/// controllers that mix this crate's informers with kube-runtime's controller or reflector
/// (feature `runtime`).
#[cfg(feature = "runtime")]
mod object_ref {
    use kube_runtime::reflector::{Lookup, ObjectRef};

    use super::{KeyError, ObjectKey};

    impl<K: Lookup + ?Sized> TryFrom<&ObjectRef<K>> for ObjectKey {
        type Error = KeyError;

        /// The key of the referenced object: `namespace/name`, or `name` without a namespace.
        fn try_from(r: &ObjectRef<K>) -> Result<Self, KeyError> {
            ObjectKey::new(r.namespace.as_deref(), &r.name)
        }
    }

    impl<K: Lookup + ?Sized> TryFrom<ObjectRef<K>> for ObjectKey {
        type Error = KeyError;

        /// The key of the referenced object: `namespace/name`, or `name` without a namespace.
        fn try_from(r: ObjectRef<K>) -> Result<Self, KeyError> {
            Self::try_from(&r)
        }
    }

    /// For types whose `DynamicType` is `()` (every `k8s-openapi` type and derived custom
    /// resource); for dynamic types use [`ObjectKey::to_object_ref_with`].
    impl<K: Lookup> From<&ObjectKey> for ObjectRef<K>
    where
        K::DynamicType: Default,
    {
        fn from(key: &ObjectKey) -> Self {
            key.to_object_ref_with(Default::default())
        }
    }

    /// As `From<&ObjectKey>`.
    impl<K: Lookup> From<ObjectKey> for ObjectRef<K>
    where
        K::DynamicType: Default,
    {
        fn from(key: ObjectKey) -> Self {
            Self::from(&key)
        }
    }

    impl ObjectKey {
        /// A kube-runtime [`ObjectRef`] to the object with this key, for a type whose
        /// `DynamicType` must be given (such as `DynamicObject`'s `ApiResource`).
        pub fn to_object_ref_with<K: Lookup>(&self, dyntype: K::DynamicType) -> ObjectRef<K> {
            let r = ObjectRef::new_with(self.name(), dyntype);
            match self.namespace() {
                Some(ns) => r.within(ns),
                None => r,
            }
        }
    }
}

/// Why an object or string has no valid key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The object has no `metadata.name` (and no `generateName` resolution happened).
    #[error("object has no metadata.name")]
    MissingName,
    /// The name or namespace contains a `/`.
    #[error("object name or namespace {0:?} contains '/'")]
    InvalidName(String),
    /// A key string is not of the form `namespace/name` or `name`.
    #[error("malformed object key {0:?}: expected \"namespace/name\" or \"name\"")]
    MalformedKey(String),
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl AsRef<str> for ObjectKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for ObjectKey {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for ObjectKey {
    type Err = KeyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl serde::Serialize for ObjectKey {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for ObjectKey {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
    use kube::api::ObjectMeta;

    #[test]
    fn namespaced_key_is_namespace_slash_name() {
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some("a".into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let key = key_of(&cm).unwrap();
        assert_eq!(key.as_str(), "ns/a");
        assert_eq!(key.namespace(), Some("ns"));
        assert_eq!(key.name(), "a");
    }

    #[test]
    fn cluster_scoped_key_is_name() {
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some("kube-system".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let key = key_of(&ns).unwrap();
        assert_eq!(key.as_str(), "kube-system");
        assert_eq!(key.namespace(), None);
        assert_eq!(key.name(), "kube-system");
    }

    #[test]
    fn object_without_name_is_a_typed_error() {
        let cm = ConfigMap::default();
        assert_eq!(key_of(&cm), Err(KeyError::MissingName));
    }

    #[test]
    fn empty_namespace_means_cluster_scoped() {
        assert_eq!(ObjectKey::new(Some(""), "x").unwrap().as_str(), "x");
    }

    #[test]
    fn split_rejects_malformed_keys() {
        for bad in ["", "/a", "a/", "a/b/c", "/"] {
            assert!(
                matches!(split_key(bad), Err(KeyError::MalformedKey(_))),
                "{bad:?}"
            );
        }
        assert_eq!(split_key("a/b").unwrap(), (Some("a"), "b"));
        assert_eq!(split_key("b").unwrap(), (None, "b"));
    }

    #[test]
    fn an_arc_and_its_object_have_the_same_key() {
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some("a".into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let shared = Arc::new(cm.clone());
        assert_eq!(key_of(&shared).unwrap(), key_of(&cm).unwrap());
        assert_eq!(key_of(&*shared).unwrap().as_str(), "ns/a");
        // Generic code over `K: Resource` sees the same.
        fn generic<K: Resource>(o: &Arc<K>) -> ObjectKey {
            key_of(o).unwrap()
        }
        assert_eq!(generic(&shared).as_str(), "ns/a");
    }

    #[cfg(feature = "runtime")]
    #[test]
    fn object_refs_convert_both_ways() {
        use kube::api::{ApiResource, DynamicObject};
        use kube_runtime::reflector::ObjectRef;

        let key = ObjectKey::parse("ns/a").unwrap();
        let r: ObjectRef<ConfigMap> = key.clone().into();
        assert_eq!(r, ObjectRef::new("a").within("ns"));
        assert_eq!(ObjectKey::try_from(&r).unwrap(), key);
        let cluster: ObjectRef<Namespace> = (&ObjectKey::parse("kube-system").unwrap()).into();
        assert_eq!(cluster.namespace, None);
        assert_eq!(
            ObjectKey::try_from(cluster).unwrap().as_str(),
            "kube-system"
        );

        let ar = ApiResource::erase::<ConfigMap>(&());
        let dynamic: ObjectRef<DynamicObject> = key.to_object_ref_with(ar.clone());
        assert_eq!(dynamic, ObjectRef::new_with("a", ar).within("ns"));

        let bad: ObjectRef<ConfigMap> = ObjectRef::new("");
        assert_eq!(ObjectKey::try_from(&bad), Err(KeyError::MissingName));
    }

    #[test]
    fn parse_round_trips_display() {
        for k in ["ns/name", "name"] {
            assert_eq!(ObjectKey::parse(k).unwrap().to_string(), k);
        }
    }
}
