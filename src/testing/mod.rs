//! An in-process fake Kubernetes API server for tests (feature `testing`).
//!
//! [`FakeApiServer`] speaks real HTTP/1.1 on `127.0.0.1` at an ephemeral port and hands out a
//! [`kube::Client`] pointed at itself, so the code under test runs unchanged. It holds any
//! registered resource as JSON and implements the parts of the API server that informers rely
//! on, with kube-apiserver's semantics:
//!
//! - create / update (with optimistic concurrency) / delete / get, over HTTP or through
//!   [`FakeApiServer::create`] and friends, with one global increasing `resourceVersion`;
//! - list with `limit`/`continue` and the `resourceVersion`/`resourceVersionMatch` rules;
//! - watch as a chunked stream of JSON lines from a resourceVersion, bookmarks,
//!   `timeoutSeconds`, `sendInitialEvents` with the `k8s.io/initial-events-end` bookmark;
//! - a bounded event history ([`compact`](FakeApiServer::compact),
//!   [`set_history_limit`](FakeApiServer::set_history_limit)): older RVs get `410 Expired`;
//! - label selectors (full syntax) and `metadata.name` / `metadata.namespace` field selectors;
//! - metadata-only (`PartialObjectMetadata`) responses;
//! - injected [`Faults`] and a log of [`RecordedRequest`]s.
//!
//! # Example
//!
//! ```
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kube::api::{Api, ListParams, PostParams};
//! use kube_informer::testing::FakeApiServer;
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let server = FakeApiServer::start().await?;
//! server.register::<ConfigMap>();
//!
//! // Seed state directly...
//! let mut cm = ConfigMap::default();
//! cm.metadata.name = Some("seeded".into());
//! cm.metadata.namespace = Some("default".into());
//! server.create(&cm)?;
//!
//! // ...or through the API, with the kube client the code under test would use.
//! let api: Api<ConfigMap> = Api::namespaced(server.client(), "default");
//! cm.metadata.name = Some("posted".into());
//! api.create(&PostParams::default(), &cm).await?;
//!
//! let list = api.list(&ListParams::default()).await?;
//! assert_eq!(list.items.len(), 2);
//! assert_eq!(list.metadata.resource_version.as_deref(), Some("2"));
//!
//! // Make the next request fail as an overloaded server would.
//! server.faults().fail_next(1, 429);
//! assert!(api.list(&ListParams::default()).await.is_err());
//! assert_eq!(server.requests().last().unwrap().status, 429);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
//!
//! # Watch semantics
//!
//! - `resourceVersion` unset or `"0"` (without `sendInitialEvents`): synthetic `ADDED` events
//!   for the current state, then live events.
//! - `resourceVersion=N`: every event after `N` replayed from history, then live events. If
//!   `N` was compacted the stream carries one `ERROR` event with a `410 Expired` `Status` and
//!   ends, as kube-apiserver does; an `N` above the current RV is a `504` "Too large resource
//!   version" response.
//! - `sendInitialEvents=true` (requires `resourceVersionMatch=NotOlderThan`, else `422
//!   Invalid` as `ValidateListOptions` does): synthetic `ADDED` events for the current state,
//!   a `BOOKMARK` annotated `k8s.io/initial-events-end: "true"`, then live events. With
//!   [`set_watch_list_supported(false)`](FakeApiServer::set_watch_list_supported) the server
//!   acts like one without the `WatchList` feature: such requests get `422 Invalid`
//!   ("sendInitialEvents is forbidden for watch unless the WatchList feature gate is
//!   enabled"); servers older than 1.27 reject them too, since `resourceVersionMatch` was
//!   forbidden for watches. Either way a client must fall back to list + watch.
//! - With label or field selectors an object that stops matching is sent as `DELETED` (its
//!   last matching state, stamped with the new RV) and one that starts matching as `ADDED`.
//! - Bookmarks (only with `allowWatchBookmarks=true`) are sent on demand
//!   ([`FakeApiServer::bookmark`]), every minute on each watch as kube-apiserver's watch cache
//!   does ([`set_bookmark_interval`](FakeApiServer::set_bookmark_interval) changes or turns that
//!   off), and at the end of the initial events.
//! - `timeoutSeconds` ends the stream cleanly after that long on tokio's clock, so paused-clock
//!   tests can `advance` past it.
//! - Each watcher gets events in RV order, each exactly once. Writers never wait for watchers:
//!   each has a bounded queue ([`set_watcher_capacity`](FakeApiServer::set_watcher_capacity),
//!   default 1024) and one that falls that far behind is cut off (its connection closed
//!   abruptly), as kube-apiserver's watch cache does with slow watchers.
//!
//! # Other behaviour worth knowing
//!
//! - Deletes are immediate (no finalizers, no `deletionTimestamp`); the response and the
//!   `DELETED` event carry the last state with the deletion's RV.
//! - `generation` starts at 1 and is bumped by updates that change anything besides
//!   `metadata` and `status`.
//! - Errors are `meta/v1 Status` JSON with `reason` and `code`; unknown paths and resources
//!   get `404 NotFound`, bad selectors and continue tokens `400 BadRequest`. Odd requests
//!   never panic the server.

mod faults;
mod query;
mod server;
mod store;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use kube::core::ApiResource;
use parking_lot::Mutex;
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;
use tokio::sync::watch;

pub use faults::{Faults, Verb};
pub use query::QueryParams;

use query::ApiError;
use store::{ResourceInfo, Store};

/// Errors of the fake API server's own (non-HTTP) API.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Binding or serving the loopback socket failed.
    #[error("fake API server I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The object's type was never registered.
    #[error("resource {0} is not registered with the fake API server")]
    NotRegistered(String),
    /// The operation failed as the API would fail it (not found, conflict, ...).
    #[error("{reason} ({code}): {message}")]
    Api {
        /// HTTP status code, e.g. 404.
        code: u16,
        /// `Status.reason`, e.g. `NotFound`, `Conflict`, `AlreadyExists`.
        reason: String,
        /// `Status.message`.
        message: String,
    },
    /// The object could not be converted to or from JSON.
    #[error("JSON conversion failed: {0}")]
    Json(#[from] serde_json::Error),
}

impl From<ApiError> for Error {
    fn from(e: ApiError) -> Self {
        Error::Api {
            code: e.code,
            reason: e.reason.to_string(),
            message: e.message,
        }
    }
}

/// A request the server received, for assertions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRequest {
    /// HTTP method, e.g. `GET`.
    pub method: String,
    /// URL path without the query.
    pub path: String,
    /// What the request was.
    pub verb: Verb,
    /// The list/watch query parameters.
    pub query: QueryParams,
    /// The response status (200 for a watch whose stream started).
    pub status: u16,
}

/// Whether watches may use `sendInitialEvents` (the streaming list, KEP-3157).
#[derive(Debug, Clone, Copy)]
struct Settings {
    watch_list: bool,
    bookmark_interval: Option<Duration>,
}

/// State shared by the server handle and its tasks.
pub(crate) struct Shared {
    store: Mutex<Store>,
    faults: faults::FaultState,
    requests: Mutex<Vec<RecordedRequest>>,
    settings: Mutex<Settings>,
    /// Bumped to close every watch stream abruptly.
    watch_abort: watch::Sender<u64>,
    /// Bumped to close every connection abruptly (restart).
    conn_abort: watch::Sender<u64>,
    /// Set once on shutdown.
    shutdown: watch::Sender<bool>,
}

/// How often the fake server sends a bookmark on each watch that allows them, by default: once
/// a minute, as kube-apiserver's watch cache (`defaultBookmarkFrequency` in
/// `k8s.io/apiserver/pkg/storage/cacher/cacher.go`).
pub const DEFAULT_BOOKMARK_INTERVAL: Duration = Duration::from_secs(60);

/// An in-process fake Kubernetes API server; see the [module docs](self).
///
/// Dropping it shuts it down (connections close, the port is released).
pub struct FakeApiServer {
    shared: Arc<Shared>,
    addr: SocketAddr,
    accept: Option<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for FakeApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeApiServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// The resource identity of a static type, and whether it is namespaced.
fn info_of<K>() -> ResourceInfo
where
    K: kube::Resource<DynamicType = ()>,
    K::Scope: 'static,
{
    use std::any::TypeId;
    ResourceInfo {
        group: K::group(&()).into_owned(),
        version: K::version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        plural: K::plural(&()).into_owned(),
        namespaced: TypeId::of::<K::Scope>() != TypeId::of::<kube::core::ClusterResourceScope>(),
    }
}

impl FakeApiServer {
    /// Starts a server with no registered resources on `127.0.0.1` at an ephemeral port.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if the socket cannot be bound.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (it spawns its accept loop).
    pub async fn start() -> Result<Self, Error> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            store: Mutex::new(Store::new()),
            faults: faults::FaultState::new(),
            requests: Mutex::new(Vec::new()),
            settings: Mutex::new(Settings {
                watch_list: true,
                bookmark_interval: Some(DEFAULT_BOOKMARK_INTERVAL),
            }),
            watch_abort: watch::Sender::new(0),
            conn_abort: watch::Sender::new(0),
            shutdown: watch::Sender::new(false),
        });
        let accept = tokio::spawn(server::accept_loop(listener, shared.clone()));
        Ok(Self {
            shared,
            addr,
            accept: Some(accept),
        })
    }

    /// Starts a server with the core `v1` pods, configmaps, secrets and namespaces registered.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub async fn start_with_core() -> Result<Self, Error> {
        use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret};
        let s = Self::start().await?;
        s.register::<Pod>();
        s.register::<ConfigMap>();
        s.register::<Secret>();
        s.register::<Namespace>();
        Ok(s)
    }

    /// The base URL, e.g. `http://127.0.0.1:41234`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The socket address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A [`kube::Config`] for this server: plain HTTP, default namespace `default`, and
    /// kube's built-in retry of 429/503/504 turned off, so the code under test sees every
    /// response the server (or an injected fault) sends.
    ///
    /// # Panics
    ///
    /// Never in practice: a socket address always forms a valid URI.
    pub fn config(&self) -> kube::Config {
        let url: http::Uri = self
            .url()
            .parse()
            .expect("a socket address always forms a valid URI");
        let mut config = kube::Config::new(url);
        config.default_namespace = "default".into();
        config.default_retry = false;
        config
    }

    /// A [`kube::Client`] built from [`config`](Self::config).
    ///
    /// # Panics
    ///
    /// Never in practice: kube only fails on TLS or proxy settings, which this configuration
    /// has none of.
    pub fn client(&self) -> kube::Client {
        kube::Client::try_from(self.config()).expect("a plain-HTTP kube client always builds")
    }

    /// A handle to inject faults.
    pub fn faults(&self) -> Faults {
        Faults {
            shared: self.shared.clone(),
        }
    }

    /// Registers a static resource type (idempotent).
    pub fn register<K>(&self)
    where
        K: kube::Resource<DynamicType = ()>,
        K::Scope: 'static,
    {
        self.shared.store.lock().register(info_of::<K>());
    }

    /// Registers a dynamic resource (e.g. a CRD) (idempotent).
    pub fn register_api_resource(&self, resource: &ApiResource, namespaced: bool) {
        self.shared.store.lock().register(ResourceInfo {
            group: resource.group.clone(),
            version: resource.version.clone(),
            kind: resource.kind.clone(),
            plural: resource.plural.clone(),
            namespaced,
        });
    }

    fn resource_id(&self, info: &ResourceInfo) -> Result<usize, Error> {
        self.shared
            .store
            .lock()
            .lookup(&info.group, &info.version, &info.plural)
            .ok_or_else(|| Error::NotRegistered(format!("{}/{}", info.api_version(), info.plural)))
    }

    fn resource_of_value(&self, obj: &Value) -> Result<usize, Error> {
        let api_version = obj["apiVersion"].as_str().unwrap_or("");
        let kind = obj["kind"].as_str().unwrap_or("");
        self.shared
            .store
            .lock()
            .lookup_kind(api_version, kind)
            .ok_or_else(|| Error::NotRegistered(format!("{api_version} {kind}")))
    }

    fn api_resource_id(&self, ar: &ApiResource) -> Result<usize, Error> {
        self.shared
            .store
            .lock()
            .lookup(&ar.group, &ar.version, &ar.plural)
            .ok_or_else(|| Error::NotRegistered(format!("{}/{}", ar.api_version, ar.plural)))
    }

    /// Creates an object, as `POST` would; a namespaced object without a namespace goes to
    /// `default`. Returns the stored object (with resourceVersion, uid, creationTimestamp,
    /// generation).
    ///
    /// # Errors
    ///
    /// [`Error::NotRegistered`], [`Error::Api`] (`AlreadyExists`, `Invalid`), [`Error::Json`].
    pub fn create<K>(&self, obj: &K) -> Result<K, Error>
    where
        K: kube::Resource<DynamicType = ()> + Serialize + DeserializeOwned,
        K::Scope: 'static,
    {
        let res = self.resource_id(&info_of::<K>())?;
        let v = self
            .shared
            .store
            .lock()
            .create(res, None, serde_json::to_value(obj)?)?;
        Ok(serde_json::from_value(v)?)
    }

    /// Replaces an object, as `PUT` would: if `metadata.resourceVersion` is set it must be the
    /// current one (else `Conflict`).
    ///
    /// # Errors
    ///
    /// [`Error::NotRegistered`], [`Error::Api`] (`NotFound`, `Conflict`), [`Error::Json`].
    pub fn update<K>(&self, obj: &K) -> Result<K, Error>
    where
        K: kube::Resource<DynamicType = ()> + Serialize + DeserializeOwned,
        K::Scope: 'static,
    {
        let res = self.resource_id(&info_of::<K>())?;
        let v = self
            .shared
            .store
            .lock()
            .update(res, None, None, serde_json::to_value(obj)?)?;
        Ok(serde_json::from_value(v)?)
    }

    /// Deletes an object (`namespace` is ignored for cluster-scoped kinds) and returns its last
    /// state, stamped with the deletion's resourceVersion.
    ///
    /// # Errors
    ///
    /// [`Error::NotRegistered`], [`Error::Api`] (`NotFound`), [`Error::Json`].
    pub fn delete<K>(&self, namespace: Option<&str>, name: &str) -> Result<K, Error>
    where
        K: kube::Resource<DynamicType = ()> + DeserializeOwned,
        K::Scope: 'static,
    {
        let info = info_of::<K>();
        let res = self.resource_id(&info)?;
        let ns = namespace.filter(|_| info.namespaced);
        let v = self.shared.store.lock().delete(res, ns, name)?;
        Ok(serde_json::from_value(v)?)
    }

    /// The current state of one object, if it exists.
    ///
    /// # Errors
    ///
    /// [`Error::NotRegistered`], [`Error::Json`].
    pub fn get<K>(&self, namespace: Option<&str>, name: &str) -> Result<Option<K>, Error>
    where
        K: kube::Resource<DynamicType = ()> + DeserializeOwned,
        K::Scope: 'static,
    {
        let info = info_of::<K>();
        let res = self.resource_id(&info)?;
        let ns = namespace.filter(|_| info.namespaced);
        match self.shared.store.lock().get(res, ns, name) {
            Ok(v) => Ok(Some(serde_json::from_value(v)?)),
            Err(_) => Ok(None),
        }
    }

    /// Every object of a type, in key (`namespace/name`) order.
    ///
    /// # Errors
    ///
    /// [`Error::NotRegistered`], [`Error::Json`].
    pub fn list<K>(&self) -> Result<Vec<K>, Error>
    where
        K: kube::Resource<DynamicType = ()> + DeserializeOwned,
        K::Scope: 'static,
    {
        let res = self.resource_id(&info_of::<K>())?;
        let (_, items) = self.shared.store.lock().snapshot(res, None)?;
        items
            .into_iter()
            .map(|(_, v)| Ok(serde_json::from_value((*v).clone())?))
            .collect()
    }

    /// Creates an object given as JSON; its `apiVersion` and `kind` pick the resource.
    ///
    /// # Errors
    ///
    /// As [`create`](Self::create).
    pub fn create_value(&self, obj: Value) -> Result<Value, Error> {
        let res = self.resource_of_value(&obj)?;
        Ok(self.shared.store.lock().create(res, None, obj)?)
    }

    /// Replaces an object given as JSON; its `apiVersion` and `kind` pick the resource.
    ///
    /// # Errors
    ///
    /// As [`update`](Self::update).
    pub fn update_value(&self, obj: Value) -> Result<Value, Error> {
        let res = self.resource_of_value(&obj)?;
        Ok(self.shared.store.lock().update(res, None, None, obj)?)
    }

    /// Deletes an object of a dynamic resource.
    ///
    /// # Errors
    ///
    /// As [`delete`](Self::delete).
    pub fn delete_value(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, Error> {
        let res = self.api_resource_id(resource)?;
        let mut store = self.shared.store.lock();
        let ns = namespace.filter(|_| store.info(res).namespaced);
        Ok(store.delete(res, ns, name)?)
    }

    /// One object of a dynamic resource, if it exists.
    ///
    /// # Errors
    ///
    /// [`Error::NotRegistered`].
    pub fn get_value(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Value>, Error> {
        let res = self.api_resource_id(resource)?;
        let store = self.shared.store.lock();
        let ns = namespace.filter(|_| store.info(res).namespaced);
        Ok(store.get(res, ns, name).ok())
    }

    /// Every object of a dynamic resource, in key order.
    ///
    /// # Errors
    ///
    /// [`Error::NotRegistered`].
    pub fn list_values(&self, resource: &ApiResource) -> Result<Vec<Value>, Error> {
        let res = self.api_resource_id(resource)?;
        let (_, items) = self.shared.store.lock().snapshot(res, None)?;
        Ok(items.into_iter().map(|(_, v)| (*v).clone()).collect())
    }

    /// The resourceVersion of the latest write (0 before any).
    pub fn current_resource_version(&self) -> u64 {
        self.shared.store.lock().current_rv()
    }

    /// The oldest resourceVersion lists and watches can still start from.
    pub fn oldest_resource_version(&self) -> u64 {
        self.shared.store.lock().oldest_rv()
    }

    /// Drops the history up to and including `rv` (capped at the current RV), like an etcd
    /// compaction: lists at, and watches from, an RV below `rv` then get `410 Expired`
    /// ("too old resource version"), and so do continue tokens from before it.
    pub fn compact(&self, rv: u64) {
        self.shared.store.lock().compact(rv);
    }

    /// Bounds the history to the last `n` events (`None`: unbounded, the default), compacting
    /// automatically as writes go on (like the watch cache's fixed-size window).
    pub fn set_history_limit(&self, n: Option<usize>) {
        self.shared.store.lock().set_history_limit(n);
    }

    /// Sends a `BOOKMARK` at the current RV to every watch that asked for bookmarks.
    pub fn bookmark(&self) {
        self.shared.store.lock().bookmark_all();
    }

    /// Sends periodic bookmarks on watches that asked for them, every
    /// [`DEFAULT_BOOKMARK_INTERVAL`] (a minute) by default, as kube-apiserver's watch cache does
    /// (`defaultBookmarkFrequency`); `None`: only on demand and at the end of initial events.
    /// Applies to watches started afterwards.
    pub fn set_bookmark_interval(&self, interval: Option<Duration>) {
        self.shared.settings.lock().bookmark_interval = interval;
    }

    /// Whether `sendInitialEvents` watches are served (default `true`); `false` acts like a
    /// server without the `WatchList` feature (see the [module docs](self)).
    pub fn set_watch_list_supported(&self, supported: bool) {
        self.shared.settings.lock().watch_list = supported;
    }

    /// How many events a watcher may lag behind before it is cut off (default 1024); applies
    /// to watches started afterwards.
    pub fn set_watcher_capacity(&self, capacity: usize) {
        self.shared.store.lock().watcher_capacity = capacity.max(1);
    }

    /// The number of open watch streams.
    pub fn watcher_count(&self) -> usize {
        self.shared.store.lock().watcher_count()
    }

    /// Every request received so far (since the last [`clear_requests`](Self::clear_requests)).
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.requests.lock().clone()
    }

    /// Forgets the recorded requests.
    pub fn clear_requests(&self) {
        self.shared.requests.lock().clear();
    }

    /// Stops accepting connections, closes the open ones and waits for the accept loop to end.
    pub async fn shutdown(mut self) {
        self.shared.shutdown.send_replace(true);
        if let Some(accept) = self.accept.take() {
            let _ = accept.await;
        }
    }
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        self.shared.shutdown.send_replace(true);
    }
}
