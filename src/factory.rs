//! The shared informer factory: one informer per resource type, started and stopped together
//! (client-go `informers/factory.go`).

use std::{
    any::{Any, TypeId},
    collections::{BTreeMap, HashMap},
    fmt::Debug,
    sync::Arc,
    time::Duration,
};

use futures::{FutureExt, future::BoxFuture};
use kube::{
    Client, Resource,
    api::{ApiResource, DynamicObject, PartialObjectMeta},
    discovery::Scope,
};
use parking_lot::Mutex;
use serde::{Serialize, de::DeserializeOwned};
use tracing::Instrument;

use crate::{
    informer::{
        FifoMode, InformerConfig, InformerId, InformerMetricsProvider, SharedIndexInformer,
    },
    lister::Lister,
    reflector::{ApiListerWatcher, Projection, ReflectorConfig, WireFormat},
    selector::SelectorArg,
    store::CacheStorage,
    transform::{MetaTransformFn, meta_transform},
};

/// Factory options (client-go `SharedInformerOption`s).
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct FactoryConfig {
    /// Watch only this namespace (namespaced resources); `None` for all namespaces.
    pub namespace: Option<String>,
    /// Label selector applied to every list and watch (client-go `WithTweakListOptions`).
    pub label_selector: Option<String>,
    /// Field selector applied to every list and watch.
    pub field_selector: Option<String>,
    /// Default resync period of every informer (client-go `defaultResync`). Zero: none.
    pub default_resync: Duration,
    /// Per-type resync periods (client-go `WithCustomResyncConfig`).
    pub custom_resync: HashMap<TypeId, Duration>,
    /// A metadata transform applied to every object of every informer (client-go
    /// `WithTransform`), e.g. dropping managed fields.
    pub transform: Option<MetaTransformFn>,
    /// Reflector options of every informer.
    pub reflector: ReflectorConfig,
    /// The FIFO mode of every informer ([`FifoMode::DeltaFifo`] by default; client-go v0.36+
    /// runs [`FifoMode::InOrder`]).
    pub fifo_mode: FifoMode,
    /// Per-type FIFO modes, overriding [`Self::fifo_mode`].
    pub custom_fifo_mode: HashMap<TypeId, FifoMode>,
    /// Per-type projections, overriding the default one in [`Self::reflector`]
    /// ([`ReflectorConfig::projection`]).
    pub custom_projection: HashMap<TypeId, Projection>,
    /// How every informer's cache holds objects ([`CacheStorage::Decoded`] by default).
    pub cache_storage: CacheStorage,
    /// Per-type cache storage, overriding [`Self::cache_storage`].
    pub custom_cache_storage: HashMap<TypeId, CacheStorage>,
    /// The name every informer of this factory reports metrics under, with its group, version
    /// and resource (client-go `WithInformerName`); none by default, and then no metrics. As
    /// in client-go, the first informer of a name and resource publishes: a second one of this
    /// factory (a metadata-only or dynamic informer beside a typed one) publishes nothing and
    /// logs an error. The check is per factory: two factories given one name and watching one
    /// resource share, and overwrite, that resource's series; give them different names.
    pub informer_name: Option<String>,
    /// Where informer metrics go (see [`InformerMetricsProvider`]).
    pub metrics_provider: Option<Arc<dyn InformerMetricsProvider>>,
    /// The encoding every informer asks the server for; `None` (the default) for client-go's
    /// choice: protobuf for built-in types and for metadata-only informers, JSON for custom
    /// resources and dynamic informers (see [`WireFormat`]).
    pub wire_format: Option<WireFormat>,
    /// Per-type encodings, overriding [`Self::wire_format`].
    pub custom_wire_format: HashMap<TypeId, WireFormat>,
    /// Per-type shards, overriding the factory's ([`ReflectorConfig::shard`] in
    /// [`Self::reflector`]); `None` for a type whose informers cache the whole collection.
    pub custom_shard: HashMap<TypeId, Option<crate::sharding::ShardSelector>>,
}

impl Debug for FactoryConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FactoryConfig")
            .field("namespace", &self.namespace)
            .field("label_selector", &self.label_selector)
            .field("field_selector", &self.field_selector)
            .field("default_resync", &self.default_resync)
            .field("custom_resync", &self.custom_resync.len())
            .field("transform", &self.transform.is_some())
            .field("reflector", &self.reflector)
            .field("fifo_mode", &self.fifo_mode)
            .field("custom_fifo_mode", &self.custom_fifo_mode.len())
            .field("custom_projection", &self.custom_projection.len())
            .field("cache_storage", &self.cache_storage)
            .field("custom_cache_storage", &self.custom_cache_storage.len())
            .field("informer_name", &self.informer_name)
            .field("metrics_provider", &self.metrics_provider.is_some())
            .field("wire_format", &self.wire_format)
            .field("custom_wire_format", &self.custom_wire_format)
            .field("custom_shard", &self.custom_shard)
            .finish()
    }
}

impl FactoryConfig {
    /// Sets [`Self::namespace`].
    #[must_use]
    pub fn namespace(mut self, ns: impl Into<String>) -> Self {
        self.namespace = Some(ns.into());
        self
    }

    /// Sets [`Self::label_selector`], from a string or kube's typed `Selector`/`Expression`
    /// (see [`SelectorArg`]); an empty selector selects everything and sets none.
    #[must_use]
    pub fn labels(mut self, selector: impl SelectorArg) -> Self {
        self.label_selector = Some(selector.into_selector_string()).filter(|s| !s.is_empty());
        self
    }

    /// Sets [`Self::field_selector`], from a string or kube's typed `Selector`/`Expression`
    /// (see [`SelectorArg`]); an empty selector selects everything and sets none.
    #[must_use]
    pub fn fields(mut self, selector: impl SelectorArg) -> Self {
        self.field_selector = Some(selector.into_selector_string()).filter(|s| !s.is_empty());
        self
    }

    /// Sets [`Self::default_resync`].
    #[must_use]
    pub fn default_resync(mut self, d: Duration) -> Self {
        self.default_resync = d;
        self
    }

    /// Sets the resync period of informers of type `K`.
    #[must_use]
    pub fn resync_for<K: 'static>(mut self, d: Duration) -> Self {
        self.custom_resync.insert(TypeId::of::<K>(), d);
        self
    }

    /// Sets [`Self::transform`].
    #[must_use]
    pub fn transform(
        mut self,
        f: impl Fn(&mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta)
        + Send
        + Sync
        + 'static,
    ) -> Self {
        self.transform = Some(Arc::new(f));
        self
    }

    /// Drops `metadata.managedFields` from every cached object: adds it to the default
    /// [projection](Self::projection), so the parser skips them instead of building them (a
    /// transform that drops them, as client-go users write, costs the full decode first). A
    /// type given its own projection with [`Self::projection_for`] drops only what that says.
    #[must_use]
    pub fn strip_managed_fields(self) -> Self {
        let projection = self
            .reflector
            .projection
            .clone()
            .drop_path("metadata.managedFields")
            .expect("a valid path");
        self.projection(projection)
    }

    /// Sets [`Self::reflector`].
    #[must_use]
    pub fn reflector(mut self, r: ReflectorConfig) -> Self {
        self.reflector = r;
        self
    }

    /// Makes every informer of the factory cache only `shard` of its collection (sets
    /// [`ReflectorConfig::shard`] in [`Self::reflector`]): one replica of n, each started with
    /// [`ShardSelector::of(i, n)`](crate::sharding::ShardSelector::of). Set it after
    /// [`Self::reflector`], which replaces the whole reflector config.
    ///
    /// Every type of the factory is then sharded by its own uid (or namespace): objects of two
    /// types related by owner (a Deployment and its ReplicaSets) land on different replicas,
    /// and a type every replica needs whole (Nodes, Namespaces) is split too. Use
    /// [`Self::shard_for`] to shard a type otherwise or not at all, or
    /// [`ShardSelector::of_key`](crate::sharding::ShardSelector::of_key) to keep each namespace
    /// on one replica.
    ///
    /// ```
    /// use kube_informer::{FactoryConfig, sharding::ShardSelector};
    /// let replica = 1; // e.g. from the StatefulSet ordinal
    /// let config = FactoryConfig::default().shard(ShardSelector::of(replica, 3).unwrap());
    /// assert!(config.reflector.shard.is_some());
    /// ```
    #[must_use]
    pub fn shard(mut self, shard: crate::sharding::ShardSelector) -> Self {
        self.reflector.shard = Some(shard);
        self
    }

    /// Shards informers of type `K` by `shard`, or with `None` not at all, whatever
    /// [`Self::shard`] says (for dynamic informers, `K` is `DynamicObject`; for metadata-only
    /// ones, `PartialObjectMeta<K>`).
    ///
    /// ```
    /// use k8s_openapi::api::{apps::v1::Deployment, core::v1::Node};
    /// use kube_informer::{FactoryConfig, sharding::ShardSelector};
    /// let config = FactoryConfig::default()
    ///     .shard(ShardSelector::of(1, 3).unwrap())
    ///     // Every replica needs every Node.
    ///     .shard_for::<Node>(None);
    /// assert_eq!(config.custom_shard.len(), 1);
    /// # let _ = std::marker::PhantomData::<Deployment>;
    /// ```
    #[must_use]
    pub fn shard_for<K: 'static>(mut self, shard: Option<crate::sharding::ShardSelector>) -> Self {
        self.custom_shard.insert(TypeId::of::<K>(), shard);
        self
    }

    /// Sets [`Self::fifo_mode`].
    #[must_use]
    pub fn fifo_mode(mut self, mode: FifoMode) -> Self {
        self.fifo_mode = mode;
        self
    }

    /// Sets [`Self::informer_name`].
    #[must_use]
    pub fn informer_name(mut self, name: impl Into<String>) -> Self {
        self.informer_name = Some(name.into());
        self
    }

    /// Sets [`Self::metrics_provider`].
    #[must_use]
    pub fn metrics_provider(mut self, provider: Arc<dyn InformerMetricsProvider>) -> Self {
        self.metrics_provider = Some(provider);
        self
    }

    /// Sets the FIFO mode of informers of type `K` (for dynamic informers, `K` is
    /// `DynamicObject`; for metadata-only ones, `PartialObjectMeta<K>`).
    #[must_use]
    pub fn fifo_mode_for<K: 'static>(mut self, mode: FifoMode) -> Self {
        self.custom_fifo_mode.insert(TypeId::of::<K>(), mode);
        self
    }

    /// Sets the fields every informer drops from its objects while decoding them
    /// ([`ReflectorConfig::projection`] of [`Self::reflector`], which this sets: set it after
    /// [`Self::reflector`]). See [`Projection`].
    ///
    /// ```
    /// use k8s_openapi::api::core::v1::{ConfigMap, Pod};
    /// use kube_informer::{FactoryConfig, Projection};
    ///
    /// let config = FactoryConfig::default()
    ///     .projection(Projection::strip_managed_fields())
    ///     .projection_for::<Pod>(Projection::from_paths([
    ///         "metadata.managedFields",
    ///         "status.conditions",
    ///         "spec.containers[*].env",
    ///     ])?)
    ///     .projection_for::<ConfigMap>(Projection::none());
    /// assert_eq!(config.reflector.projection, Projection::strip_managed_fields());
    /// # Ok::<(), kube_informer::ProjectionError>(())
    /// ```
    #[must_use]
    pub fn projection(mut self, projection: Projection) -> Self {
        self.reflector.projection = projection;
        self
    }

    /// Sets the projection of informers of type `K`, overriding [`Self::projection`] (`K` as in
    /// [`Self::fifo_mode_for`]).
    #[must_use]
    pub fn projection_for<K: 'static>(mut self, projection: Projection) -> Self {
        self.custom_projection.insert(TypeId::of::<K>(), projection);
        self
    }

    /// Sets [`Self::cache_storage`].
    #[must_use]
    pub fn cache_storage(mut self, storage: CacheStorage) -> Self {
        self.cache_storage = storage;
        self
    }

    /// Sets how the caches of informers of type `K` hold objects (for dynamic informers, `K` is
    /// `DynamicObject`; for metadata-only ones, `PartialObjectMeta<K>`).
    #[must_use]
    pub fn cache_storage_for<K: 'static>(mut self, storage: CacheStorage) -> Self {
        self.custom_cache_storage.insert(TypeId::of::<K>(), storage);
        self
    }

    /// Sets [`Self::wire_format`]: the encoding every informer asks for.
    /// `wire_format(WireFormat::Json)` turns protobuf off.
    ///
    /// ```
    /// use k8s_openapi::api::core::v1::Pod;
    /// use kube_informer::{FactoryConfig, reflector::WireFormat};
    ///
    /// // Protobuf where the server has it (the default), except for Pods.
    /// let config = FactoryConfig::default().wire_format_for::<Pod>(WireFormat::Json);
    /// assert_eq!(config.wire_format, None);
    /// ```
    #[must_use]
    pub fn wire_format(mut self, format: WireFormat) -> Self {
        self.wire_format = Some(format);
        self
    }

    /// Sets the encoding informers of type `K` ask for, overriding [`Self::wire_format`] (`K`
    /// as in [`Self::cache_storage_for`]).
    #[must_use]
    pub fn wire_format_for<K: 'static>(mut self, format: WireFormat) -> Self {
        self.custom_wire_format.insert(TypeId::of::<K>(), format);
        self
    }
}

/// What [`SharedInformerFactory::wait_for_cache_sync_timeout`] found (client-go 1.37
/// `SyncResult`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SyncResult {
    /// Per started informer, whether it synced.
    pub synced: BTreeMap<String, bool>,
    /// Whether the wait ended at its deadline (rather than with every informer synced or
    /// stopped).
    pub timed_out: bool,
}

impl SyncResult {
    /// The informers that did not sync.
    pub fn unsynced(&self) -> Vec<&str> {
        self.synced
            .iter()
            .filter(|(_, ok)| !**ok)
            .map(|(name, _)| name.as_str())
            .collect()
    }

    /// `Ok` when every informer synced, else an error naming those that did not (client-go
    /// `SyncResult.AsError`).
    ///
    /// # Errors
    ///
    /// [`CacheSyncError`] naming the informers that did not sync.
    pub fn into_result(self) -> Result<(), CacheSyncError> {
        let unsynced: Vec<String> = self.unsynced().into_iter().map(str::to_owned).collect();
        if unsynced.is_empty() {
            Ok(())
        } else {
            Err(CacheSyncError {
                unsynced,
                timed_out: self.timed_out,
            })
        }
    }
}

/// Some informers did not sync (see [`SyncResult::into_result`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "caches not synced{}: {}",
    if *timed_out { " before the deadline" } else { " (informers stopped)" },
    unsynced.join(", ")
)]
pub struct CacheSyncError {
    /// The informers that did not sync.
    pub unsynced: Vec<String>,
    /// Whether the wait hit its deadline.
    pub timed_out: bool,
}

/// Type-erased operations the factory runs on all its informers.
trait AnyInformer: Send + Sync {
    fn start(&self);
    fn has_synced(&self) -> bool;
    fn wait_for_cache_sync(&self) -> BoxFuture<'static, bool>;
    fn shutdown(&self) -> BoxFuture<'static, ()>;
    fn as_any(&self) -> &dyn Any;
    fn span(&self) -> tracing::Span;
}

impl<K> AnyInformer for SharedIndexInformer<K>
where
    K: Resource + Send + Sync + 'static,
{
    fn start(&self) {
        SharedIndexInformer::start(self);
    }
    fn has_synced(&self) -> bool {
        SharedIndexInformer::has_synced(self)
    }
    fn wait_for_cache_sync(&self) -> BoxFuture<'static, bool> {
        let me = self.clone();
        async move { me.wait_for_cache_sync().await }.boxed()
    }
    fn shutdown(&self) -> BoxFuture<'static, ()> {
        let me = self.clone();
        async move { me.shutdown().await }.boxed()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn span(&self) -> tracing::Span {
        SharedIndexInformer::span(self).clone()
    }
}

/// One informer per resource and Rust type: two types of one resource (`Pod` and a slimmer
/// type that inherits its `Resource`) get an informer each, as client-go keys its informers by
/// Go type.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
struct InformerKey {
    name: String,
    url: String,
    metadata_only: bool,
    type_id: TypeId,
    /// Tells two types of one resource apart in sync results ([`sync_names`]).
    type_name: &'static str,
}

struct Entry {
    informer: Arc<dyn AnyInformer>,
    started: bool,
}

/// Hands out one [`SharedIndexInformer`] per resource type (and per dynamic resource), and starts,
/// syncs and stops them together (client-go `SharedInformerFactory`).
///
/// ```no_run
/// use k8s_openapi::api::core::v1::{ConfigMap, Pod};
/// use kube::Client;
/// use kube_informer::{FactoryConfig, ResourceEventHandlerFuncs, SharedInformerFactory};
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// let client = Client::try_default().await?;
/// let factory = SharedInformerFactory::new(client, FactoryConfig::default().strip_managed_fields());
/// let pods = factory.informer::<Pod>();
/// pods.add_event_handler(ResourceEventHandlerFuncs::new().on_add(|pod: &std::sync::Arc<Pod>, _| {
///     println!("pod {:?}", pod.metadata.name);
/// }))?;
/// let config_maps = factory.lister::<ConfigMap>();
/// factory.start();
/// factory.wait_for_cache_sync().await;
/// println!("{} config maps", config_maps.list(&Default::default()).len());
/// factory.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SharedInformerFactory {
    inner: Arc<FactoryInner>,
}

struct FactoryInner {
    client: Client,
    config: FactoryConfig,
    informers: Mutex<BTreeMap<InformerKey, Entry>>,
    /// Metric identities given out (see `informer_config`).
    metric_ids: Mutex<std::collections::HashSet<InformerId>>,
    /// Set by `shutdown` and read by `try_start` with `informers` locked (taken first).
    shut_down: Mutex<bool>,
}

impl Debug for SharedInformerFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedInformerFactory")
            .field("config", &self.inner.config)
            .field(
                "informers",
                &self.inner.informers.lock().keys().collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl SharedInformerFactory {
    /// A factory over `client`.
    pub fn new(client: Client, config: FactoryConfig) -> Self {
        Self {
            inner: Arc::new(FactoryInner {
                client,
                config,
                informers: Mutex::new(BTreeMap::new()),
                metric_ids: Mutex::new(std::collections::HashSet::new()),
                shut_down: Mutex::new(false),
            }),
        }
    }

    fn namespace_for(&self, namespaced: bool) -> Option<&str> {
        if namespaced {
            self.inner.config.namespace.as_deref()
        } else {
            None
        }
    }

    fn informer_config<K: 'static>(&self, log_name: String, gvr: [String; 3]) -> InformerConfig {
        let c = &self.inner.config;
        let resync = c
            .custom_resync
            .get(&TypeId::of::<K>())
            .copied()
            .unwrap_or(c.default_resync);
        let fifo_mode = c
            .custom_fifo_mode
            .get(&TypeId::of::<K>())
            .copied()
            .unwrap_or(c.fifo_mode);
        let cache_storage = c
            .custom_cache_storage
            .get(&TypeId::of::<K>())
            .unwrap_or(&c.cache_storage)
            .clone();
        let mut reflector = c.reflector.clone();
        if let Some(shard) = c.custom_shard.get(&TypeId::of::<K>()) {
            reflector.shard.clone_from(shard);
        }
        let mut config = InformerConfig::default()
            .name(log_name.clone())
            .resync_period(resync)
            .reflector(reflector)
            .fifo_mode(fifo_mode)
            .cache_storage(cache_storage);
        if let Some(p) = c.custom_projection.get(&TypeId::of::<K>()) {
            config = config.projection(p.clone());
        }
        if let Some(name) = &c.informer_name {
            let [group, version, resource] = gvr;
            let id = InformerId::new(name.clone(), group, version, resource);
            // client-go `InformerName.WithResource`: the first informer of a name and resource
            // publishes metrics; a second one of the same (a metadata-only or dynamic informer
            // beside a typed one, a second Rust type) would share and overwrite its gauges, so
            // it publishes none.
            if self.inner.metric_ids.lock().insert(id.clone()) {
                config = config.identity(id);
            } else {
                tracing::error!(
                    informer = %log_name,
                    "duplicate informer registration for {id:?}: metrics will not be published"
                );
            }
        }
        if let Some(p) = &c.metrics_provider {
            config = config.metrics_provider(p.clone());
        }
        config
    }

    fn get_or_create<K>(
        &self,
        key: InformerKey,
        make: impl FnOnce() -> SharedIndexInformer<K>,
    ) -> SharedIndexInformer<K>
    where
        K: Resource + Send + Sync + 'static,
    {
        let mut map = self.inner.informers.lock();
        if let Some(i) = map
            .get(&key)
            .and_then(|e| e.informer.as_any().downcast_ref::<SharedIndexInformer<K>>())
        {
            return i.clone();
        }
        let informer = make();
        if let Some(t) = self.inner.config.transform.clone() {
            // A new informer has not started: setting the transform cannot fail.
            let _ = informer.set_transform(meta_transform::<K>(t));
        }
        map.insert(
            key,
            Entry {
                informer: Arc::new(informer.clone()),
                started: false,
            },
        );
        informer
    }

    fn lister_watcher<K: 'static>(
        &self,
        url: String,
        metadata_only: bool,
        dynamic: bool,
    ) -> ApiListerWatcher<K> {
        let c = &self.inner.config;
        let mut lw = ApiListerWatcher::from_url(self.inner.client.clone(), url, metadata_only);
        // client-go's dynamic client speaks JSON; its clientsets and metadata client protobuf.
        let default = if dynamic {
            WireFormat::Json
        } else {
            lw.wire_format_requested()
        };
        let format = c
            .custom_wire_format
            .get(&TypeId::of::<K>())
            .copied()
            .or(c.wire_format)
            .unwrap_or(default);
        lw = lw.wire_format(format);
        if let Some(l) = &c.label_selector {
            lw = lw.labels(l);
        }
        if let Some(f) = &c.field_selector {
            lw = lw.fields(f);
        }
        lw
    }

    /// The informer of objects of type `T` at `url` (created on first request).
    fn shared_informer<T>(
        &self,
        name: String,
        url: String,
        metadata_only: bool,
        dynamic: bool,
        gvr: [String; 3],
    ) -> SharedIndexInformer<T>
    where
        T: Resource + Serialize + DeserializeOwned + Send + Sync + 'static,
    {
        let key = InformerKey {
            name,
            url: url.clone(),
            metadata_only,
            type_id: TypeId::of::<T>(),
            type_name: std::any::type_name::<T>(),
        };
        let log_name = informer_name(&key);
        self.get_or_create(key, || {
            SharedIndexInformer::new(
                self.lister_watcher::<T>(url, metadata_only, dynamic),
                self.informer_config::<T>(log_name, gvr),
            )
        })
    }

    /// The informer for `K` (the same one on every call).
    pub fn informer<K>(&self) -> SharedIndexInformer<K>
    where
        K: Resource<DynamicType = ()> + Serialize + DeserializeOwned + Send + Sync + 'static,
        K::Scope: 'static,
    {
        let url = K::url_path(&(), self.namespace_for(is_namespaced::<K>()));
        self.shared_informer(type_label::<K>(), url, false, false, gvr::<K>())
    }

    /// The lister of the informer for `K`.
    pub fn lister<K>(&self) -> Lister<K>
    where
        K: Resource<DynamicType = ()> + Serialize + DeserializeOwned + Send + Sync + 'static,
        K::Scope: 'static,
    {
        self.informer::<K>().lister()
    }

    /// A metadata-only informer for `K`: caches [`PartialObjectMeta<K>`], a fraction of the
    /// memory of full objects.
    pub fn metadata_informer<K>(&self) -> SharedIndexInformer<PartialObjectMeta<K>>
    where
        K: Resource<DynamicType = ()> + Send + Sync + 'static,
        K::Scope: 'static,
    {
        let url = K::url_path(&(), self.namespace_for(is_namespaced::<K>()));
        self.shared_informer(type_label::<K>(), url, true, false, gvr::<K>())
    }

    /// A dynamic informer for the resource `ar` (for kinds known only at run time, such as
    /// custom resources without Rust types). `scope` is the resource's, from discovery
    /// (`ApiCapabilities::scope`): a cluster-scoped resource ignores the factory's namespace.
    /// It is named `apiVersion/Kind (dynamic)` (`stable.example.com/v1/CronTab (dynamic)`) in
    /// sync results and logs, apart from a typed informer of the same kind.
    pub fn dynamic_informer(
        &self,
        ar: &ApiResource,
        scope: &Scope,
    ) -> SharedIndexInformer<DynamicObject> {
        let namespaced = matches!(scope, Scope::Namespaced);
        let url = DynamicObject::url_path(ar, self.namespace_for(namespaced));
        // apiVersion/Kind as for typed informers, marked so that a typed and a dynamic informer
        // of one kind stay apart in sync results.
        let name = format!("{}/{} (dynamic)", ar.api_version, ar.kind);
        let gvr = [ar.group.clone(), ar.version.clone(), ar.plural.clone()];
        self.shared_informer(name, url, false, true, gvr)
    }

    /// Starts every informer requested since the last call (client-go `Start`). Non-blocking
    /// and idempotent; does nothing after [`shutdown`](Self::shutdown).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime; [`try_start`](Self::try_start) returns an error instead.
    pub fn start(&self) {
        self.try_start()
            .unwrap_or_else(|e| panic!("SharedInformerFactory::start: {e}"));
    }

    /// [`start`](Self::start) that reports a missing runtime instead of panicking; no informer
    /// is started then.
    ///
    /// # Errors
    ///
    /// [`NoRuntime`](crate::NoRuntime) outside a Tokio runtime.
    pub fn try_start(&self) -> Result<(), crate::NoRuntime> {
        // Checked once up front: each informer's `start` spawns on this same runtime, so none
        // can fail half-way through the loop.
        crate::current_runtime()?;
        // The flag is read under the map's lock, which `shutdown` sets it under: a start that
        // passed the check cannot start, after `shutdown` returned, an informer requested since.
        let mut informers = self.inner.informers.lock();
        if *self.inner.shut_down.lock() {
            return Ok(());
        }
        for e in informers.values_mut() {
            if !e.started {
                e.informer.start();
                e.started = true;
            }
        }
        Ok(())
    }

    /// Waits until every started informer has synced (client-go `WaitForCacheSync`); the map
    /// tells, per informer, whether it synced (`false`: it was stopped first).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn wait_for_cache_sync(&self) -> BTreeMap<String, bool> {
        let started = sync_names(&self.inner.informers.lock(), |e| e.informer.clone());
        let mut out = BTreeMap::new();
        // client-go `WaitForNamedCacheSync`'s two log lines, per informer, in its span.
        for (name, inf) in started {
            let ok = async {
                tracing::info!(informer = %name, "Waiting for caches to sync for {name}");
                let ok = inf.wait_for_cache_sync().await;
                if ok {
                    tracing::info!(informer = %name, "Caches are synced for {name}");
                } else {
                    tracing::warn!(informer = %name, "Informer for {name} stopped before its cache synced");
                }
                ok
            }
            .instrument(inf.span())
            .await;
            out.insert(name, ok);
        }
        out
    }

    /// Waits until every started informer has synced, or until `timeout` (client-go 1.37
    /// `WaitForCacheSyncWithContext` with a deadline): the result says which did not.
    ///
    /// ```no_run
    /// # async fn f(factory: kube_informer::SharedInformerFactory) -> Result<(), Box<dyn std::error::Error>> {
    /// factory.start();
    /// factory
    ///     .wait_for_cache_sync_timeout(std::time::Duration::from_secs(60))
    ///     .await
    ///     .into_result()?; // "caches not synced before the deadline: v1/Pod"
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn wait_for_cache_sync_timeout(&self, timeout: std::time::Duration) -> SyncResult {
        match tokio::time::timeout(timeout, self.wait_for_cache_sync()).await {
            Ok(synced) => SyncResult {
                synced,
                timed_out: false,
            },
            Err(_) => SyncResult {
                synced: self.sync_states(),
                timed_out: true,
            },
        }
    }

    fn sync_states(&self) -> BTreeMap<String, bool> {
        sync_names(&self.inner.informers.lock(), |e| e.informer.has_synced())
            .into_iter()
            .collect()
    }

    /// True when every started informer has synced.
    pub fn has_synced(&self) -> bool {
        self.inner
            .informers
            .lock()
            .values()
            .filter(|e| e.started)
            .all(|e| e.informer.has_synced())
    }

    /// Stops every informer and waits for their tasks and every handler task and thread to finish
    /// (client-go `Shutdown`). Informers requested afterwards never start. A handler may call it
    /// (blocking on it too): a handler thread blocked in it is not waited for, nor the handlers
    /// that share it ([`SharedIndexInformer::shutdown`](crate::SharedIndexInformer::shutdown)).
    pub async fn shutdown(&self) {
        let all: Vec<_> = {
            let informers = self.inner.informers.lock();
            *self.inner.shut_down.lock() = true;
            informers.values().map(|e| e.informer.clone()).collect()
        };
        futures::future::join_all(all.iter().map(|i| i.shutdown())).await;
    }
}

fn gvr<K: Resource<DynamicType = ()>>() -> [String; 3] {
    [
        K::group(&()).into_owned(),
        K::version(&()).into_owned(),
        K::plural(&()).into_owned(),
    ]
}

fn informer_name(k: &InformerKey) -> String {
    k.name.clone() + if k.metadata_only { " (metadata)" } else { "" }
}

/// `f` of each started informer, under its name in sync results: [`informer_name`], followed
/// by the Rust type in brackets when more than one started informer has that name (two types
/// of one resource), so that neither result hides the other.
fn sync_names<T>(
    informers: &BTreeMap<InformerKey, Entry>,
    f: impl Fn(&Entry) -> T,
) -> Vec<(String, T)> {
    let mut types = BTreeMap::<String, usize>::new();
    for (k, _) in informers.iter().filter(|(_, e)| e.started) {
        *types.entry(informer_name(k)).or_default() += 1;
    }
    informers
        .iter()
        .filter(|(_, e)| e.started)
        .map(|(k, e)| {
            let name = informer_name(k);
            let name = if types[&name] > 1 {
                format!("{name} [{}]", k.type_name)
            } else {
                name
            };
            (name, f(e))
        })
        .collect()
}

/// `apiVersion/Kind`, e.g. `apps/v1/Deployment`: how informers are named in sync results.
fn type_label<K: Resource<DynamicType = ()>>() -> String {
    format!("{}/{}", K::api_version(&()), K::kind(&()))
}

fn is_namespaced<K: Resource>() -> bool
where
    K::Scope: 'static,
{
    TypeId::of::<K::Scope>() != TypeId::of::<k8s_openapi::ClusterResourceScope>()
}
