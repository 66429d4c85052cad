//! Kubernetes client-go style informers for Rust.
//!
//! `kube-informer` ports client-go's informer machinery (`tools/cache`, `informers`,
//! `util/workqueue`) onto [`kube`]'s `Client`:
//!
//! ```text
//! API server ─list/watch─▶ Reflector ─deltas─▶ DeltaFifo ─pop─▶ handle_deltas ─▶ Indexer ◀─ Lister
//!                                        (or InOrderFifo)             │
//!                                                      SharedProcessor ─▶ one buffered listener
//!                                                                         (task) per handler
//!                                                                     │
//!                                                    your handler ─▶ WorkQueue ─▶ your workers
//! ```
//!
//! - [`reflector`]: lists and watches with client-go's resourceVersion rules (relist on 410,
//!   paging, bookmarks, backoff, streaming lists).
//! - [`fifo`]: the [`DeltaFifo`] (client-go's DeltaFIFO, per-key merging, `DeletedFinalStateUnknown`
//!   tombstones for deletions inferred from a relist) and the [`InOrderFifo`] (client-go 1.36+'s
//!   RealFIFO: arrival order, atomic relists, batches), chosen per informer by [`FifoMode`].
//! - [`store`]: the thread-safe, indexed cache of `Arc<K>`.
//! - [`informer`]: [`SharedIndexInformer`], handlers with old and new objects, per-handler
//!   buffers, resync, late registration, removable handlers.
//! - [`factory`]: [`SharedInformerFactory`], one informer per type.
//! - [`lister`]: typed reads, by namespace from the namespace index.
//! - [`workqueue`]: dedup'ing, rate-limited work queues.
//! - `testing` (feature): an in-process fake API server for tests.
//! - `runtime` (feature): conversions between [`ObjectKey`] and kube-runtime's `ObjectRef`.
//! - `prometheus` (feature): workqueue and informer metrics exported to Prometheus under
//!   client-go's names and labels.
//! - `leader-election` (feature): `leader`, leader election for controller replicas over
//!   coordination.k8s.io Leases.
//! - `compact` (feature): `CacheStorage::Compact`, caches that hold each object
//!   zstd-compressed and decode it on demand.
//!
//! With the default [`CacheStorage::Decoded`], objects are decoded once and shared as `Arc<K>` by
//! the cache, the FIFO, every handler and every lister read. A `CacheStorage::Compact` cache
//! (feature `compact`) keeps them compressed instead, so a lister read of an object that nobody
//! holds and that is not among its recently used ones decodes it again.
//!
//! # The whole flow
//!
//! Against the built-in fake API server (feature `testing`); with a real cluster, take the
//! client from `kube::Client::try_default()` instead.
//!
//! ```
//! use std::sync::Arc;
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kube::api::ObjectMeta;
//! use kube_informer::{
//!     FactoryConfig, ObjectKey, RateLimitingQueue, ResourceEventHandlerFuncs,
//!     SharedInformerFactory, key_of, testing::FakeApiServer,
//! };
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let server = FakeApiServer::start_with_core().await?;
//! let factory = SharedInformerFactory::new(server.client(), FactoryConfig::default());
//!
//! // A handler that only enqueues keys; workers do the work.
//! let queue: RateLimitingQueue<ObjectKey> = RateLimitingQueue::new();
//! let q = queue.clone();
//! factory.informer::<ConfigMap>().add_event_handler(
//!     ResourceEventHandlerFuncs::new()
//!         .on_add(move |cm: &Arc<ConfigMap>, _initial| { let _ = q.add(key_of(cm).unwrap()); }),
//! )?;
//! factory.start();
//! // client-go: `if !cache.WaitForCacheSync(...) { return err }`. On a real cluster the error
//! // names the informers that did not sync: check the API server is reachable and RBAC lets
//! // the client list and watch them.
//! factory
//!     .wait_for_cache_sync_timeout(std::time::Duration::from_secs(30))
//!     .await
//!     .into_result()?;
//!
//! // A change on the server reaches the handler, then the queue.
//! server.create(&ConfigMap {
//!     metadata: ObjectMeta { name: Some("app".into()), namespace: Some("prod".into()), ..Default::default() },
//!     ..Default::default()
//! })?;
//! let key = queue.get().await.expect("queue is running");
//! assert_eq!(key.as_str(), "prod/app");
//!
//! // The worker reads the current state from the lister (the cache), not from the event.
//! let lister = factory.lister::<ConfigMap>();
//! assert!(lister.namespaced("prod").get("app").is_some());
//! queue.forget(&key);
//! queue.done(&key);
//!
//! queue.shutdown();
//! factory.shutdown().await;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
//!
//! # Logging
//!
//! The crate logs through [`tracing`]; install any subscriber to see it. Every informer has an
//! INFO-level span named `informer` ([`SharedIndexInformer::span`]), and everything it logs is
//! emitted inside it: its reflector's lists, watches and retries, its FIFO processing, its
//! handlers (tasks on the handler thread and dedicated threads alike), and the factory's
//! cache-sync lines for it. The span is made with the informer, so install the subscriber
//! before creating informers. Its fields, from [`ListerWatcher::target`]:
//!
//! | field | value |
//! |---|---|
//! | `informer` | its name ([`InformerConfig::name`]): in a factory `v1/Pod`, `v1/Pod (metadata)`, `stable.example.com/v1/CronTab (dynamic)`; otherwise `v1/pods`, or the type when the lister-watcher does not tell |
//! | `group` | API group, `""` for core |
//! | `version` | API version |
//! | `resource` | resource, plural (`pods`) |
//! | `namespace` | the namespace, `""` for all namespaces (client-go `NamespaceAll`) |
//! | `label_selector`, `field_selector` | the selectors, left out when there are none |
//! | `shard` | the shard selector of a sharded informer ([`sharding`]), left out when unsharded |
//!
//! [`SharedInformerFactory::wait_for_cache_sync`] logs client-go's `WaitForNamedCacheSync`
//! lines at INFO, `Waiting for caches to sync for v1/Pod` and `Caches are synced for v1/Pod`,
//! so the usual greps find them. Reflector events also carry `reflector`, the informer's name.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod factory;
pub mod fifo;
pub mod informer;
#[cfg(feature = "leader-election")]
pub mod leader;
pub mod lister;
#[cfg(feature = "prometheus")]
pub mod prometheus;
pub mod protobuf;
pub mod reflector;
pub mod selector;
pub mod sharding;
pub mod store;
#[cfg(feature = "testing")]
pub mod testing;
pub mod transform;
pub mod workqueue;

#[cfg(test)]
mod testutil;

/// A constructor or `start` that spawns a task was called outside a Tokio runtime (returned by
/// the `try_` forms: [`DelayingQueue::try_new`], [`RateLimitingQueue::try_new`],
/// [`SharedIndexInformer::try_start`], [`SharedInformerFactory::try_start`]).
///
/// The queues and the informer also have a form that hands the task back for the caller to run
/// instead of spawning it ([`DelayingQueue::pair`], [`RateLimitingQueue::pair`],
/// [`SharedIndexInformer::run`]); the factory has none: it always spawns its informers' tasks.
#[derive(Debug, thiserror::Error)]
#[error("called outside a Tokio runtime, where the task it needs cannot be spawned")]
pub struct NoRuntime {
    #[source]
    source: tokio::runtime::TryCurrentError,
}

/// The current runtime's handle, or why there is none.
pub(crate) fn current_runtime() -> Result<tokio::runtime::Handle, NoRuntime> {
    tokio::runtime::Handle::try_current().map_err(|source| NoRuntime { source })
}

/// The longest wait the crate's timers take (tokio's own "far future", 30 years): a longer
/// configured delay or period (`Duration::MAX` meant as "never") waits this long instead.
/// Past it `Instant` arithmetic could overflow, and tokio panics on a deadline within a
/// millisecond of the largest `Instant`.
pub(crate) const FAR_FUTURE: std::time::Duration =
    std::time::Duration::from_secs(86_400 * 365 * 30);

/// The message of a caught panic, for logs and errors.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic".to_owned())
}

/// `K`'s type name with every module path dropped, generic arguments kept:
/// `kube_core::metadata::PartialObjectMeta<k8s_openapi::api::core::v1::Pod>` becomes
/// `PartialObjectMeta<Pod>`.
pub(crate) fn short_type_name<K: ?Sized>() -> String {
    let full = std::any::type_name::<K>();
    let mut out = String::with_capacity(full.len());
    let mut path_start = 0;
    let push_path = |out: &mut String, path: &str| {
        out.push_str(path.rsplit("::").next().unwrap_or(path));
    };
    for (i, c) in full.char_indices() {
        if matches!(
            c,
            '<' | '>' | ',' | ' ' | '(' | ')' | '[' | ']' | ';' | '&' | '*'
        ) {
            push_path(&mut out, &full[path_start..i]);
            out.push(c);
            path_start = i + c.len_utf8();
        }
    }
    push_path(&mut out, &full[path_start..]);
    out
}

pub use factory::{CacheSyncError, FactoryConfig, SharedInformerFactory, SyncResult};
pub use fifo::{
    DeletedFinalStateUnknown, Delta, DeltaFifo, DeltaObject, DeltaType, Deltas, FifoError,
    InOrderDelta, InOrderFifo, KnownObjects, TransformFn,
};
/// One notification to a handler or subscriber ([`informer::Event`]), renamed at the root so that
/// it does not clash with Kubernetes' own `Event` type in user code.
pub use informer::Event as InformerEvent;
pub use informer::{
    EventStream, FifoMode, FilteringResourceEventHandler, HandlerOptions, InformerConfig,
    InformerError, InformerId, InformerMetricsProvider, Lifecycle, ResourceEventHandler,
    ResourceEventHandlerFuncs, ResourceEventHandlerRegistration, SharedIndexInformer,
};
#[cfg(feature = "leader-election")]
pub use leader::{LeaderElectionConfig, LeaderElector, Leadership, Role};
pub use lister::{Lister, NamespaceLister};
pub use reflector::{
    ApiListerWatcher, BackoffConfig, ListWatchTarget, ListerWatcher, Projection, ProjectionError,
    Reflector, ReflectorConfig,
};
pub use selector::{SelectorArg, parse_label_selector};
#[cfg(feature = "compact")]
pub use store::CompactConfig;
pub use store::{
    Cache, CacheStats, CacheStorage, IndexError, IndexFn, Indexer, Indexers, KeyError, KeySource,
    NAMESPACE_INDEX, ObjectKey, Packed, StorageError, StoreOp, index_fn, key_of,
    namespace_index_fn, split_key,
};
pub use transform::{MetaTransformFn, strip_managed_fields, strip_managed_fields_transform};
pub use workqueue::{
    Bucket, DelayingQueue, FastSlow, ItemExponentialFailure, MaxOf, MetricsProvider, RateLimiter,
    RateLimitingQueue, ShutDown, WorkQueue, default_controller_rate_limiter,
};

/// The README's examples, compiled as doc tests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

#[cfg(test)]
mod no_runtime_tests {
    use std::time::Duration;

    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;

    #[test]
    fn the_try_forms_report_a_missing_runtime_and_the_others_panic() {
        assert!(DelayingQueue::<u32>::try_new().is_err());
        assert!(RateLimitingQueue::<u32>::try_new().is_err());
        let err = DelayingQueue::<u32>::try_with_config(Default::default()).unwrap_err();
        assert!(err.to_string().contains("outside a Tokio runtime"), "{err}");
        assert!(std::error::Error::source(&err).is_some());
        assert!(std::panic::catch_unwind(DelayingQueue::<u32>::new).is_err());
        assert!(std::panic::catch_unwind(RateLimitingQueue::<u32>::new).is_err());
    }

    #[test]
    fn informers_and_factories_do_not_start_outside_a_runtime() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let (server, factory, informer) = rt.block_on(async {
            let server = testing::FakeApiServer::start_with_core().await.unwrap();
            let factory = SharedInformerFactory::new(server.client(), FactoryConfig::default());
            let informer = factory.informer::<ConfigMap>();
            (server, factory, informer)
        });
        assert!(informer.try_start().is_err());
        assert!(factory.try_start().is_err());
        assert!(!informer.is_started());
        // Inside the runtime the same calls start them, and nothing was half-started before.
        rt.block_on(async {
            factory.try_start().unwrap();
            tokio::time::timeout(Duration::from_secs(20), factory.wait_for_cache_sync())
                .await
                .expect("sync: likely deadlocked");
            assert!(informer.has_synced());
            factory.shutdown().await;
        });
        drop(server);
    }
}
