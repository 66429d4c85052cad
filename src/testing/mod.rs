//! An in-process fake Kubernetes API server for tests (feature `testing`).
//!
//! [`FakeApiServer`] speaks real HTTP/1.1 on `127.0.0.1` at an ephemeral port and hands out a
//! [`kube::Client`] pointed at itself, so the code under test runs unchanged. It holds any
//! registered resource as JSON and implements the parts of the API server that informers and
//! controllers rely on, with kube-apiserver's semantics:
//!
//! - create / update (with optimistic concurrency) / patch / delete / get, over HTTP or (all
//!   but patch) through [`FakeApiServer::create`] and friends, with one global increasing
//!   `resourceVersion`; `dryRun=All` on every write;
//! - `PATCH` with a JSON merge patch (RFC 7386) or a JSON patch (RFC 6902), and strategic merge
//!   patch and server-side apply (field managers, conflicts) for bodies of maps and scalars
//!   (see [Writes](#writes));
//! - `/status` subresources ([`StatusSubresource`]), and finalizers with two-phase deletion;
//! - list with `limit`/`continue` and the `resourceVersion`/`resourceVersionMatch` rules;
//! - watch as a chunked stream of JSON lines from a resourceVersion, bookmarks,
//!   `timeoutSeconds`, `sendInitialEvents` with the `k8s.io/initial-events-end` bookmark;
//! - a bounded event history ([`compact`](FakeApiServer::compact),
//!   [`set_history_limit`](FakeApiServer::set_history_limit)): older RVs get `410 Expired`;
//! - label selectors (full syntax) and `metadata.name` / `metadata.namespace` field selectors,
//!   parsed as `fields.ParseSelector` (`\,` `\=` `\\` escapes, no trimming; a cluster-scoped
//!   custom resource has no `metadata.namespace` field, `400`);
//! - boolean query parameters (`watch`, `allowWatchBookmarks`, `sendInitialEvents`, `force`)
//!   false only for `0` or `false` (any case), and the first of a repeated parameter counts;
//! - metadata-only (`PartialObjectMetadata`) responses;
//! - kube-apiserver's protobuf (`application/vnd.kubernetes.protobuf`) for built-in kinds and
//!   metadata-only requests, when the `Accept` header prefers it: objects, lists, watch frames
//!   and errors ([`set_protobuf_supported`](FakeApiServer::set_protobuf_supported),
//!   [`RecordedRequest::served_protobuf`]); request bodies are JSON only;
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
//!   Invalid` as `ValidateListOptions` does, which also refuses `resourceVersionMatch` with
//!   `continue`): synthetic `ADDED` events for the current state, a `BOOKMARK` annotated
//!   `k8s.io/initial-events-end: "true"` (only with `allowWatchBookmarks=true`, as the watch
//!   cache sends it), then live events. With
//!   [`set_watch_list_supported(false)`](FakeApiServer::set_watch_list_supported) the server
//!   acts like one without the `WatchList` feature: such requests get `422 Invalid`
//!   ("sendInitialEvents is forbidden for watch unless the WatchList feature gate is
//!   enabled"); servers older than 1.27 reject them too, since `resourceVersionMatch` was
//!   forbidden for watches. Either way a client must fall back to list + watch.
//! - `shardSelector` (KEP-5866) only with
//!   [`set_sharding_supported(true)`](FakeApiServer::set_sharding_supported), as kube-apiserver
//!   honours it only with the alpha `ShardedListAndWatch` gate: then lists and watches see only
//!   the shard's objects and sharded lists carry `metadata.shardInfo`; otherwise the parameter
//!   is ignored.
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
//! # Writes
//!
//! As kube-apiserver's generic registry (`registry/generic/registry/store.go`, `rest.BeforeCreate`
//! / `BeforeUpdate`, `handlers/patch.go`), for a client over HTTP:
//!
//! - **Types**: a write of a built-in kind whose object does not decode into the Go type (a
//!   value of the wrong JSON type, bad base64, a malformed time) is refused before anything is
//!   stored: `400 BadRequest` for a `POST`/`PUT` body ("ConfigMap in version "v1" cannot be
//!   handled as a ConfigMap: json: cannot unmarshal ..."), `422 Invalid` on `patch` for a
//!   JSON, merge or strategic merge patch, `500` ("failed to create typed patch object") for
//!   an apply. Direct methods do not check, so a test can still seed such an object.
//! - **Optimistic concurrency**: an update or patch whose `metadata.resourceVersion` is not the
//!   stored one gets `409 Conflict`; a patch keeps the stored one unless it removes it. Without
//!   one the write is unconditional, except for a custom resource or its status, or a `Lease`,
//!   `CustomResourceDefinition` or `APIService`, which gets `422 Invalid`
//!   ("widgets.example.com "w" is invalid: ... must be specified for an update"), as their
//!   strategies do not allow unconditional updates. A create that sets a `resourceVersion` gets `500` ("resourceVersion should
//!   not be set on objects to be created", as etcd3's store answers); one of an existing name
//!   `409 AlreadyExists`. `uid`, `creationTimestamp` and, once set, `deletionTimestamp` and
//!   `deletionGracePeriodSeconds` are kept from the stored object; changing the `uid` or
//!   setting a `deletionTimestamp` by update is `422 Invalid`.
//! - **Names**: a client's create needs a lowercase RFC 1123 subdomain (`422 Invalid`
//!   otherwise), as most kinds' `NameIsDNSSubdomain`; a Namespace's an RFC 1123 label, a
//!   Service's an RFC 1035 label; RBAC's names take any path segment. A
//!   `generateName` prefix is cut to 58 characters before its 5-character suffix.
//! - **No-op writes**: an update or patch that leaves the object as stored is not written (no
//!   new resourceVersion, no watch event), as etcd3's `GuaranteedUpdate`.
//! - **PATCH**: `application/merge-patch+json` and `application/json-patch+json` (every
//!   operation; a failing `test` or a missing path is `422 Invalid`, a body that is not a patch
//!   `400`), applied to the stored object, then stored as an update, so every rule here applies
//!   to the result. A patch of a missing object is `404`.
//! - **Strategic merge patch** (`application/strategic-merge-patch+json`; `415` for custom
//!   resources, as apiextensions-apiserver serves them none) of maps and scalars:
//!   without lists and `$`-directives it merges exactly as a JSON merge patch (`null` deletes).
//!   A body with a list anywhere, or a directive, is refused with `415` naming the field, since
//!   list merging follows per-field `patchStrategy` tags the fake server does not have.
//! - **Server-side apply** (`application/apply-patch+yaml`, the configuration written as JSON;
//!   CBOR is `415`), of maps and scalars (a list or a `null` in the configuration is `415`):
//!   `fieldManager` is required (`422`); an apply to a missing object creates it (`201`).
//!   `metadata.managedFields` gets one entry per manager and operation (`Apply`, `Update`)
//!   with its `FieldsV1` set of leaf fields. A non-forced apply that sets a field another entry
//!   owns to a different value is `409 Conflict` (reason `Conflict`, one `FieldManagerConflict`
//!   cause per field, "conflict with "m" using v1: .data.k"); an equal value is shared
//!   ownership; `force` (any value but `0` / `false`) takes the fields. Fields the manager applied before and leaves out
//!   now are removed unless another entry owns them. Once an object has managed fields, every
//!   other write (PUT, any patch) is recorded as an `Update` by its `fieldManager` (else the
//!   User-Agent up to its first `/`): it takes the fields it changes from every other entry,
//!   and removed fields are owned by nobody. Unlike kube-apiserver, an object that was never
//!   applied has no managed fields (creates and updates alone do not start tracking), so an
//!   apply never conflicts with fields set only by such writes; `status` is never owned where
//!   the status subresource serves it.
//! - **Status subresource** ([`StatusSubresource`], chosen at registration: by default, types
//!   with a `status` field have one): `GET`/`PUT`/`PATCH` of `.../{name}/status` change only
//!   `.status` (everything else is kept as stored, as apiextensions' status strategy does);
//!   creates clear `.status` and main-resource updates and patches keep the stored one;
//!   `metadata.generation` (1 on create) is bumped by a main-resource write that changes
//!   anything outside `metadata` and `status`, never by a status write. Without the
//!   subresource, `/status` is `404` and `.status` is an ordinary field.
//! - **Finalizers**: a `DELETE` of an object with finalizers sets `deletionTimestamp` and
//!   `deletionGracePeriodSeconds: 0` and bumps `generation` (watchers see `MODIFIED`; the
//!   response is the object); a second `DELETE` changes nothing. An update or patch that
//!   removes the last finalizer deletes it: the response is the object as sent, watchers see
//!   `DELETED` with the last stored state (finalizers included, as etcd's previous value). New
//!   finalizers on an object being deleted are `422 Invalid`. Without finalizers a delete is
//!   immediate. `DeleteOptions.preconditions` (`uid`, `resourceVersion`) give `409 Conflict`.
//!   There is no garbage collector: `propagationPolicy` and owner references have no effect,
//!   and Pods are deleted at once (no kubelet, so no grace period).
//! - **Direct methods** ([`create`](FakeApiServer::create), [`update`](FakeApiServer::update),
//!   [`delete`](FakeApiServer::delete) and the `_value` forms) are how tests seed state and
//!   follow the same rules, with two differences: they write `.status` as given (so a test can
//!   seed a Pod that is `Running`), and an update is always written, even unchanged (so a test
//!   can provoke a `MODIFIED` event).
//!
//! # Other behaviour worth knowing
//!
//! - A deleted object's response and `DELETED` event carry its last state with the deletion's
//!   RV (kube-apiserver answers some kinds' deletes with a `Status` instead; kube's
//!   `Api::delete` takes either).
//! - Errors are `meta/v1 Status` JSON (protobuf when negotiated) with `reason`, `code` and, for `Invalid`, `details.causes`
//!   naming the field; unknown paths, resources and subresources get `404 NotFound`, bad
//!   selectors and continue tokens `400 BadRequest`. Odd requests never panic the server.

mod faults;
mod fields;
mod patch;
mod query;
mod server;
mod store;
mod wire;

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
use store::{DeleteOptions, ResourceInfo, Store, WriteMode};

/// Errors of the fake API server's own (non-HTTP) API.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
    /// The response's `Content-Type`: `application/json`,
    /// `application/vnd.kubernetes.protobuf` (objects, lists, errors) or
    /// `application/vnd.kubernetes.protobuf;stream=watch` (watches); see
    /// [`served_protobuf`](Self::served_protobuf).
    pub content_type: String,
}

impl RecordedRequest {
    /// Whether the response was protobuf (`application/vnd.kubernetes.protobuf`, a watch
    /// stream's included).
    #[must_use]
    pub fn served_protobuf(&self) -> bool {
        self.content_type
            .starts_with("application/vnd.kubernetes.protobuf")
    }
}

/// Whether watches may use `sendInitialEvents` (the streaming list, KEP-3157).
#[derive(Debug, Clone, Copy)]
struct Settings {
    watch_list: bool,
    sharding: bool,
    bookmark_interval: Option<Duration>,
}

/// State shared by the server handle and its tasks.
pub(crate) struct Shared {
    store: Mutex<Store>,
    faults: faults::FaultState,
    requests: Mutex<Vec<RecordedRequest>>,
    settings: Mutex<Settings>,
    /// What is served in protobuf.
    protobuf: Mutex<wire::ProtobufSettings>,
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

/// Whether a registered resource has a `/status` subresource.
///
/// With one (`Enabled`), as for most built-in types with a `status` and for custom resources
/// whose CRD declares `subresources.status`: `.../{name}/status` serves GET, PUT and PATCH,
/// which change only `.status`; creates and main-resource updates and patches leave `.status`
/// as stored; neither a status write nor a status change bumps `metadata.generation`.
/// Without one (`Disabled`): `/status` is `404 NotFound`, and `.status` is written with the
/// object like any other field (and bumps `generation` when it changes, as for a custom
/// resource without the subresource).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusSubresource {
    /// `/status` is served and owns `.status`.
    Enabled,
    /// No `/status`; `.status` is an ordinary field.
    Disabled,
}

impl StatusSubresource {
    /// The default for a static type: `Enabled` if its serde form has a top-level `status`
    /// field (`Pod`, `Namespace`, `Deployment`, a `#[derive(CustomResource)]` type with
    /// `#[kube(status = ...)]`), else `Disabled` (`ConfigMap`, `Secret`).
    pub fn of<K: DeserializeOwned>() -> Self {
        if struct_fields::<K>().contains(&"status") {
            Self::Enabled
        } else {
            Self::Disabled
        }
    }
}

/// The field names `K`'s `Deserialize` passes to `deserialize_struct`, read without an instance
/// (empty for types that are not deserialized as a struct, e.g. `DynamicObject`).
fn struct_fields<K: DeserializeOwned>() -> &'static [&'static str] {
    use serde::de::{Error as _, Visitor, value::Error};

    struct Probe<'a>(&'a mut &'static [&'static str]);

    impl<'de> serde::Deserializer<'de> for Probe<'_> {
        type Error = Error;

        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Error> {
            Err(Error::custom("not a struct"))
        }

        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _name: &'static str,
            fields: &'static [&'static str],
            _visitor: V,
        ) -> Result<V::Value, Error> {
            *self.0 = fields;
            Err(Error::custom("fields recorded"))
        }

        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
            option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
            ignored_any
        }
    }

    let mut fields: &'static [&'static str] = &[];
    let _ = K::deserialize(Probe(&mut fields));
    fields
}

/// The resource identity of a static type, and whether it is namespaced.
fn info_of<K>(status: StatusSubresource) -> ResourceInfo
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
        status_subresource: status == StatusSubresource::Enabled,
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
                sharding: false,
                bookmark_interval: Some(DEFAULT_BOOKMARK_INTERVAL),
            }),
            protobuf: Mutex::new(wire::ProtobufSettings::default()),
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

    /// Starts a server with the core `v1` pods, configmaps, secrets and namespaces registered
    /// (pods and namespaces with a status subresource, as in Kubernetes).
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

    /// Registers a static resource type (idempotent), with a status subresource if the type
    /// has a `status` field ([`StatusSubresource::of`]).
    pub fn register<K>(&self)
    where
        K: kube::Resource<DynamicType = ()> + DeserializeOwned,
        K::Scope: 'static,
    {
        self.shared
            .store
            .lock()
            .register(info_of::<K>(StatusSubresource::of::<K>()), false);
    }

    /// Registers a static resource type with or without a status subresource, e.g. a custom
    /// resource whose CRD has a `status` but no `subresources.status`. On a type already
    /// registered it changes only that choice (objects are kept).
    pub fn register_with_status<K>(&self, status: StatusSubresource)
    where
        K: kube::Resource<DynamicType = ()>,
        K::Scope: 'static,
    {
        self.shared
            .store
            .lock()
            .register(info_of::<K>(status), true);
    }

    /// Registers a dynamic resource (e.g. a CRD) (idempotent), without a status subresource;
    /// see [`register_api_resource_with_status`](Self::register_api_resource_with_status).
    pub fn register_api_resource(&self, resource: &ApiResource, namespaced: bool) {
        self.shared.store.lock().register(
            api_resource_info(resource, namespaced, StatusSubresource::Disabled),
            false,
        );
    }

    /// Registers a dynamic resource with or without a status subresource (a CRD's
    /// `subresources.status`). On a resource already registered it changes only that choice.
    pub fn register_api_resource_with_status(
        &self,
        resource: &ApiResource,
        namespaced: bool,
        status: StatusSubresource,
    ) {
        self.shared
            .store
            .lock()
            .register(api_resource_info(resource, namespaced, status), true);
    }

    fn resource_id_of<K>(&self) -> Result<usize, Error>
    where
        K: kube::Resource<DynamicType = ()>,
        K::Scope: 'static,
    {
        // The status choice plays no part in finding a registration.
        self.resource_id(&info_of::<K>(StatusSubresource::Disabled))
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

    /// Creates an object, as `POST` would, but with its `.status` as given (to seed state); a
    /// namespaced object without a namespace goes to `default`, and a `resourceVersion` it
    /// carries is ignored. Returns the stored object (with resourceVersion, uid,
    /// creationTimestamp, generation).
    ///
    /// # Errors
    ///
    /// [`Error::NotRegistered`], [`Error::Api`] (`AlreadyExists`, `Invalid`), [`Error::Json`].
    pub fn create<K>(&self, obj: &K) -> Result<K, Error>
    where
        K: kube::Resource<DynamicType = ()> + Serialize + DeserializeOwned,
        K::Scope: 'static,
    {
        let res = self.resource_id_of::<K>()?;
        let v = self.shared.store.lock().create(
            res,
            None,
            serde_json::to_value(obj)?,
            WriteMode::DIRECT,
        )?;
        Ok(serde_json::from_value(v)?)
    }

    /// Replaces an object, as `PUT` would: if `metadata.resourceVersion` is set it must be the
    /// current one (else `Conflict`), and removing the last finalizer of an object being
    /// deleted deletes it. Unlike `PUT` it writes `.status` as given and always writes, even an
    /// unchanged object (a new resourceVersion and a `MODIFIED` event).
    ///
    /// # Errors
    ///
    /// [`Error::NotRegistered`], [`Error::Api`] (`NotFound`, `Conflict`, `Invalid`),
    /// [`Error::Json`].
    pub fn update<K>(&self, obj: &K) -> Result<K, Error>
    where
        K: kube::Resource<DynamicType = ()> + Serialize + DeserializeOwned,
        K::Scope: 'static,
    {
        let res = self.resource_id_of::<K>()?;
        let v = self.shared.store.lock().update(
            res,
            None,
            None,
            serde_json::to_value(obj)?,
            WriteMode::DIRECT,
        )?;
        Ok(serde_json::from_value(v)?)
    }

    /// Deletes an object, as `DELETE` would (`namespace` is ignored for cluster-scoped kinds):
    /// an object with finalizers is only marked as being deleted and returned so; any other is
    /// removed and its last state returned, stamped with the deletion's resourceVersion.
    ///
    /// # Errors
    ///
    /// [`Error::NotRegistered`], [`Error::Api`] (`NotFound`), [`Error::Json`].
    pub fn delete<K>(&self, namespace: Option<&str>, name: &str) -> Result<K, Error>
    where
        K: kube::Resource<DynamicType = ()> + DeserializeOwned,
        K::Scope: 'static,
    {
        let res = self.resource_id_of::<K>()?;
        let ns = namespace.filter(|_| self.shared.store.lock().info(res).namespaced);
        let v = self
            .shared
            .store
            .lock()
            .delete(res, ns, name, &DeleteOptions::default())?;
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
        let res = self.resource_id_of::<K>()?;
        let ns = namespace.filter(|_| self.shared.store.lock().info(res).namespaced);
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
        let res = self.resource_id_of::<K>()?;
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
        Ok(self
            .shared
            .store
            .lock()
            .create(res, None, obj, WriteMode::DIRECT)?)
    }

    /// Replaces an object given as JSON; its `apiVersion` and `kind` pick the resource.
    ///
    /// # Errors
    ///
    /// As [`update`](Self::update).
    pub fn update_value(&self, obj: Value) -> Result<Value, Error> {
        let res = self.resource_of_value(&obj)?;
        Ok(self
            .shared
            .store
            .lock()
            .update(res, None, None, obj, WriteMode::DIRECT)?)
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
        Ok(store.delete(res, ns, name, &DeleteOptions::default())?)
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
    /// ("too old resource version"), and so do continue tokens from before it; that `410`'s
    /// `metadata.continue` lists the rest from the latest state, as kube-apiserver's does.
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

    /// Whether `shardSelector` is honoured (KEP-5866; default `false`, as kube-apiserver's
    /// alpha `ShardedListAndWatch` gate). With it on, lists and watches return only the objects
    /// whose FNV-1a hash of `metadata.uid` (or `metadata.namespace`) falls in the selector's
    /// ranges, sharded lists echo the selector in `metadata.shardInfo`, and a malformed selector
    /// is a `400 Bad Request`. With it off the parameter is ignored, as a server without the
    /// gate does: the whole collection comes back, without `shardInfo`.
    pub fn set_sharding_supported(&self, supported: bool) {
        self.shared.settings.lock().sharding = supported;
    }

    /// Whether protobuf (`application/vnd.kubernetes.protobuf`) is served at all (default
    /// `true`). When on, a request whose `Accept` header prefers protobuf (by `q`, then order)
    /// gets it, as from kube-apiserver, for a built-in kind ([`protobuf::schema::BUILTIN`]
    /// has its message) and for metadata-only requests
    /// (`;as=PartialObjectMetadata[List];g=meta.k8s.io;v=v1`) of any resource, custom
    /// resources included; a custom resource's objects are JSON, as apiextensions-apiserver
    /// serves them. Protobuf covers GET, LIST (pages included), WATCH (length-prefixed
    /// `WatchEvent` frames, `Content-Type: application/vnd.kubernetes.protobuf;stream=watch`:
    /// events, bookmarks, `ERROR` `Status`es), write responses and error `Status`es.
    /// [`RecordedRequest::content_type`] says what each request got.
    ///
    /// [`protobuf::schema::BUILTIN`]: crate::protobuf::schema::BUILTIN
    ///
    /// The default is on, unless the environment variable `KUBE_INFORMER_FAKE_PROTOBUF` is `0`
    /// when the server starts: then JSON only, so a whole suite can be run in both encodings.
    pub fn set_protobuf_supported(&self, supported: bool) {
        self.shared.protobuf.lock().enabled = supported;
    }

    /// Whether the built-in kind `K` is served in protobuf (default `true`; see
    /// [`set_protobuf_supported`](Self::set_protobuf_supported), which overrides this when
    /// off). Metadata-only requests are not affected.
    pub fn set_protobuf_supported_for<K>(&self, supported: bool)
    where
        K: kube::Resource<DynamicType = ()>,
    {
        let key = (K::api_version(&()).into_owned(), K::kind(&()).into_owned());
        let mut settings = self.shared.protobuf.lock();
        if supported {
            settings.disabled.remove(&key);
        } else {
            settings.disabled.insert(key);
        }
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

fn api_resource_info(
    resource: &ApiResource,
    namespaced: bool,
    status: StatusSubresource,
) -> ResourceInfo {
    ResourceInfo {
        group: resource.group.clone(),
        version: resource.version.clone(),
        kind: resource.kind.clone(),
        plural: resource.plural.clone(),
        namespaced,
        status_subresource: status == StatusSubresource::Enabled,
    }
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        self.shared.shutdown.send_replace(true);
    }
}
