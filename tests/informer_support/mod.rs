//! Helpers shared by the informer tests that run against the fake API server
//! (`reflector_fake.rs`, `chaos.rs`).
#![allow(dead_code)] // each test crate uses a different subset

use std::{
    collections::BTreeMap,
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta};
use kube_informer::{
    ApiListerWatcher, BackoffConfig, InformerConfig, ListerWatcher, ReflectorConfig,
    SharedIndexInformer, reflector::Error, testing::FakeApiServer,
};
use parking_lot::Mutex;

/// A ConfigMap `ns/name` with one data entry.
pub fn cm(ns: &str, name: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(ns.to_owned()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([("v".to_owned(), value.to_owned())])),
        ..ConfigMap::default()
    }
}

/// Backoff short enough for real-time tests (the defaults start at 800 ms).
pub fn fast_backoff() -> BackoffConfig {
    BackoffConfig {
        initial: Duration::from_millis(5),
        max: Duration::from_millis(50),
        factor: 2.0,
        jitter: 1.0,
        reset_after: Duration::from_secs(1),
    }
}

/// Reflector defaults with [`fast_backoff`].
pub fn fast_reflector() -> ReflectorConfig {
    ReflectorConfig::default().backoff(fast_backoff())
}

/// An informer over every ConfigMap of `server`, recording what its watch-error handler sees.
pub struct Harness {
    pub informer: SharedIndexInformer<ConfigMap>,
    pub errors: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Harness {
    /// The informer over the server's ConfigMaps through kube's client.
    pub fn new(server: &FakeApiServer, reflector: ReflectorConfig) -> Self {
        Self::with_lw(
            ApiListerWatcher::new(Api::<ConfigMap>::all(server.client())),
            reflector,
        )
    }

    /// The informer over any lister-watcher; not started yet.
    pub fn with_lw(lw: impl ListerWatcher<ConfigMap>, reflector: ReflectorConfig) -> Self {
        Self::with_config(lw, InformerConfig::default().reflector(reflector))
    }

    /// The informer over any lister-watcher with any options; not started yet.
    pub fn with_config(lw: impl ListerWatcher<ConfigMap>, config: InformerConfig) -> Self {
        let informer = SharedIndexInformer::new(lw, config);
        let errors = Arc::new(Mutex::new(Vec::new()));
        let errs = errors.clone();
        informer
            .set_watch_error_handler(Arc::new(move |e: &Error| errs.lock().push(e.to_string())))
            .expect("not started yet");
        let task = tokio::spawn(async {});
        Self {
            informer,
            errors,
            task,
        }
    }

    /// Runs the informer on its own task (its panics surface in [`Harness::stop`]).
    pub fn start(&mut self) {
        let i = self.informer.clone();
        self.task = tokio::spawn(async move { i.run().await });
    }

    /// Starts and waits for the cache to sync.
    pub async fn start_synced(&mut self) {
        self.start();
        let synced =
            tokio::time::timeout(Duration::from_secs(20), self.informer.wait_for_cache_sync())
                .await
                .expect("cache sync: likely deadlocked");
        assert!(synced, "informer stopped before syncing");
    }

    /// The errors reported so far.
    pub fn errors(&self) -> Vec<String> {
        self.errors.lock().clone()
    }

    /// Shuts the informer down and fails if its task panicked.
    pub async fn stop(self) {
        tokio::time::timeout(Duration::from_secs(20), self.informer.shutdown())
            .await
            .expect("informer shutdown: likely deadlocked");
        tokio::time::timeout(Duration::from_secs(20), self.task)
            .await
            .expect("informer task: likely deadlocked")
            .expect("the informer task panicked");
    }
}

/// The server's ConfigMaps by `namespace/name`.
pub fn server_state(server: &FakeApiServer) -> BTreeMap<String, ConfigMap> {
    server
        .list::<ConfigMap>()
        .expect("ConfigMaps are registered")
        .into_iter()
        .map(|c| (key(&c), c))
        .collect()
}

/// The informer cache by `namespace/name`.
pub fn cache_state(informer: &SharedIndexInformer<ConfigMap>) -> BTreeMap<String, ConfigMap> {
    informer
        .indexer()
        .list()
        .into_iter()
        .map(|c| (key(&c), (*c).clone()))
        .collect()
}

/// `namespace/name`.
pub fn key(c: &ConfigMap) -> String {
    format!(
        "{}/{}",
        c.metadata.namespace.as_deref().unwrap_or(""),
        c.metadata.name.as_deref().unwrap_or("")
    )
}

/// The resourceVersion of an object as a number.
pub fn rv(c: &ConfigMap) -> u64 {
    c.metadata
        .resource_version
        .as_deref()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

/// A one-line summary of how two states differ (keys only in one, keys with other RVs).
pub fn diff(
    want: &BTreeMap<String, ConfigMap>,
    got: &BTreeMap<String, ConfigMap>,
) -> Option<String> {
    let mut out = Vec::new();
    for (k, w) in want {
        match got.get(k) {
            None => out.push(format!("missing {k}@{}", rv(w))),
            Some(g) if g != w => out.push(format!("stale {k}: have @{} want @{}", rv(g), rv(w))),
            Some(_) => {}
        }
    }
    for (k, g) in got {
        if !want.contains_key(k) {
            out.push(format!("extra {k}@{}", rv(g)));
        }
    }
    if out.is_empty() {
        return None;
    }
    let n = out.len();
    out.truncate(10);
    Some(format!("{n} differences: {}", out.join(", ")))
}

/// Polls `check` until it returns `None` or `limit` passes; then panics with its last answer.
pub async fn eventually(what: &str, limit: Duration, mut check: impl FnMut() -> Option<String>) {
    let start = Instant::now();
    loop {
        let Some(problem) = check() else {
            return;
        };
        assert!(
            start.elapsed() < limit,
            "{what}: not reached within {limit:?} (likely deadlocked or lost events): {problem}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until the informer cache equals the server's state.
pub async fn assert_converges(
    what: &str,
    informer: &SharedIndexInformer<ConfigMap>,
    server: &FakeApiServer,
) {
    eventually(what, Duration::from_secs(20), || {
        diff(&server_state(server), &cache_state(informer))
    })
    .await;
}

/// The cache storage a suite runs with: `Decoded`, or with `KUBE_INFORMER_TEST_STORAGE=compact`
/// (CI runs some suites again so) a compact cache that keeps nothing decoded and sends every
/// notification compressed, so every object a handler or a lister sees has been through the
/// compressed store.
pub fn test_storage() -> kube_informer::CacheStorage {
    match std::env::var("KUBE_INFORMER_TEST_STORAGE").as_deref() {
        Err(_) | Ok("" | "decoded") => kube_informer::CacheStorage::Decoded,
        #[cfg(feature = "compact")]
        Ok("compact") => kube_informer::CacheStorage::Compact(
            kube_informer::CompactConfig::default()
                .hot_objects(0)
                .decoded_backlog(0),
        ),
        Ok(other) => panic!("KUBE_INFORMER_TEST_STORAGE={other}: not a storage these tests know"),
    }
}
