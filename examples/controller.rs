//! A small, realistic controller: keeps a checksum annotation on every ConfigMap labelled
//! `example.com/checksum=enabled` up to date.
//!
//! ```sh
//! cargo run --example controller
//! ```
//!
//! The shape is client-go's: the informer's handler only enqueues keys; two workers take keys
//! from a rate-limited workqueue, read the object from the lister, write to the API, `forget`
//! the key on success and `add_rate_limited` it on failure (a 500, or a 409 when the object
//! changed since it was cached) (exponential per-item backoff), giving
//! up after five retries. Without a cluster it runs against the built-in fake API server, which
//! is told to fail a few writes so the requeue path shows; it exits once everything is in sync.
//! With a cluster (kubeconfig) it reconciles labelled ConfigMaps in `CONTROLLER_NAMESPACE`
//! (default `default`) for `CONTROLLER_SECONDS` (default 30).
//!
//! The controller itself is `Controller` (start, `settled`, stop), apart from `main`, so that
//! `tests/controller_example.rs` runs this very code against the fake API server and checks
//! what it wrote.

#[path = "support/cluster.rs"]
mod cluster;
pub use cluster::cluster_client;

use std::{
    collections::{BTreeMap, hash_map::DefaultHasher},
    hash::{Hash, Hasher},
    sync::{Arc, Mutex},
    time::Duration,
};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Client,
    api::{Api, ObjectMeta, PostParams},
};
use kube_informer::{
    FactoryConfig, Lister, ObjectKey, RateLimitingQueue, ResourceEventHandlerFuncs,
    SharedInformerFactory, key_of,
    testing::{FakeApiServer, Verb},
};

/// The label selector of the ConfigMaps this controller looks after.
pub const LABEL: &str = "example.com/checksum=enabled";
/// The annotation it keeps equal to [`checksum`] of the data.
pub const ANNOTATION: &str = "example.com/checksum";
/// Retries of one key before giving up on it.
pub const MAX_RETRIES: usize = 5;
/// How long to wait for the informer's first list before giving up.
pub const SYNC_TIMEOUT: Duration = Duration::from_secs(30);

/// The checksum of a ConfigMap's data.
pub fn checksum(cm: &ConfigMap) -> String {
    let mut h = DefaultHasher::new();
    cm.data.hash(&mut h);
    format!("{:016x}", h.finish())
}

/// One reconcile: make the annotation match the data (`Ok(true)` if it wrote). Errors are
/// retried by the caller.
pub async fn reconcile(
    key: &ObjectKey,
    lister: &Lister<ConfigMap>,
    client: &Client,
) -> Result<bool, kube::Error> {
    let Some(cm) = lister.get_by_key(key.as_str()) else {
        return Ok(false); // deleted: nothing to clean up for an annotation
    };
    let want = checksum(&cm);
    let have = cm
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION));
    if have == Some(&want) {
        return Ok(false);
    }
    // Write from the cached copy with its resourceVersion: if the object changed meanwhile the
    // server answers 409 Conflict, the key is retried, and the next attempt sees the new version.
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), key.namespace().unwrap_or("default"));
    let mut updated = (*cm).clone();
    updated
        .metadata
        .annotations
        .get_or_insert_default()
        .insert(ANNOTATION.into(), want);
    api.replace(key.name(), &PostParams::default(), &updated)
        .await?;
    Ok(true)
}

fn short(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} {}", s.code, s.message),
        other => other.to_string(),
    }
}

/// What the workers did: for the log, and for tests to assert on.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Stats {
    /// Successful writes of the annotation, by key.
    pub updated: BTreeMap<String, usize>,
    /// Failed reconciles put back with backoff.
    pub retries: usize,
    /// Keys given up on after `MAX_RETRIES` retries.
    pub gave_up: Vec<String>,
}

async fn worker(
    id: usize,
    queue: RateLimitingQueue<ObjectKey>,
    lister: Lister<ConfigMap>,
    client: Client,
    stats: Arc<Mutex<Stats>>,
) {
    while let Some(key) = queue.get().await {
        match reconcile(&key, &lister, &client).await {
            Ok(changed) => {
                if changed {
                    println!("worker {id}: {key}: checksum annotation updated");
                    *stats
                        .lock()
                        .unwrap()
                        .updated
                        .entry(key.to_string())
                        .or_default() += 1;
                }
                queue.forget(&key);
            }
            Err(e) if queue.num_requeues(&key) < MAX_RETRIES => {
                println!(
                    "worker {id}: {key}: {e}; retry #{}",
                    queue.num_requeues(&key) + 1
                );
                stats.lock().unwrap().retries += 1;
                let _ = queue.add_rate_limited(key.clone());
            }
            Err(e) => {
                println!(
                    "worker {id}: {key}: giving up after {MAX_RETRIES} retries: {}",
                    short(&e)
                );
                stats.lock().unwrap().gave_up.push(key.to_string());
                queue.forget(&key);
            }
        }
        queue.done(&key);
    }
}

/// The running controller: an informer on the labelled ConfigMaps of one namespace, whose
/// handler enqueues keys, and two workers draining the queue.
pub struct Controller {
    factory: SharedInformerFactory,
    queue: RateLimitingQueue<ObjectKey>,
    workers: Vec<tokio::task::JoinHandle<()>>,
    stats: Arc<Mutex<Stats>>,
}

impl Controller {
    /// Starts the informer, waits for its cache, and starts the workers.
    pub async fn start(
        client: Client,
        namespace: &str,
    ) -> Result<Self, Box<dyn std::error::Error>> {
        let factory = SharedInformerFactory::new(
            client.clone(),
            FactoryConfig::default()
                .namespace(namespace)
                .labels(LABEL)
                .strip_managed_fields(),
        );
        let informer = factory.informer::<ConfigMap>();
        let queue: RateLimitingQueue<ObjectKey> = RateLimitingQueue::new();
        let enqueue = {
            let queue = queue.clone();
            move |cm: &ConfigMap| {
                if let Ok(key) = key_of(cm) {
                    let _ = queue.add(key);
                }
            }
        };
        let (e1, e2) = (enqueue.clone(), enqueue);
        informer.add_event_handler(
            ResourceEventHandlerFuncs::new()
                .on_add(move |cm: &Arc<ConfigMap>, _| e1(cm))
                .on_update(move |_, cm: &Arc<ConfigMap>| e2(cm)),
        )?;
        factory.start();
        // client-go: `if !cache.WaitForCacheSync(...) { return err }`. No workers on a cache
        // that never filled.
        let synced = factory.wait_for_cache_sync_timeout(SYNC_TIMEOUT).await;
        if let Err(e) = synced.into_result() {
            factory.shutdown().await;
            return Err(format!(
                "{e}: check that the API server is reachable and that this client may list and \
                 watch ConfigMaps in {namespace} (RBAC); RUST_LOG=kube_informer=debug shows the \
                 reflector's errors"
            )
            .into());
        }

        let stats = Arc::new(Mutex::new(Stats::default()));
        let workers = (0..2)
            .map(|id| {
                tokio::spawn(worker(
                    id,
                    queue.clone(),
                    factory.lister::<ConfigMap>(),
                    client.clone(),
                    stats.clone(),
                ))
            })
            .collect();
        Ok(Self {
            factory,
            queue,
            workers,
            stats,
        })
    }

    /// Whether the work is done for now: every cached ConfigMap carries its current checksum
    /// (or was given up on) and no key is queued.
    pub fn settled(&self) -> bool {
        let gave_up = self.stats.lock().unwrap().gave_up.clone();
        let lister = self.factory.lister::<ConfigMap>();
        let all_done = lister.list(&Default::default()).iter().all(|cm| {
            cm.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ANNOTATION))
                == Some(&checksum(cm))
                || key_of(cm).is_ok_and(|k| gave_up.contains(&k.to_string()))
        });
        all_done && self.queue.is_empty()
    }

    /// What the workers did so far.
    pub fn stats(&self) -> Stats {
        self.stats.lock().unwrap().clone()
    }

    /// Lets the workers finish what is queued, then stops them and the informer (the informer
    /// even if a worker panicked).
    pub async fn stop(self) -> Result<Stats, Box<dyn std::error::Error>> {
        // No new keys; each worker finishes what is queued and returns once `get` says the
        // queue is shut down and empty, which is `shutdown_with_drain` without waiting for ever
        // on a key a panicked worker never marked done.
        self.queue.shutdown();
        let mut panicked = None;
        for w in self.workers {
            if let Err(e) = w.await {
                panicked.get_or_insert(e);
            }
        }
        self.factory.shutdown().await;
        match panicked {
            Some(e) => Err(e.into()),
            None => Ok(self.stats.lock().unwrap().clone()),
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Warnings by default, so a cluster that cannot be listed says why while the sync waits.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let (client, fake) = match cluster_client().await? {
        Some(client) => (client, None),
        None => {
            let server = FakeApiServer::start_with_core().await?;
            (server.client(), Some(server))
        }
    };
    let namespace = std::env::var("CONTROLLER_NAMESPACE").unwrap_or_else(|_| "default".into());
    if let Some(server) = &fake {
        for i in 0..5 {
            server.create(&ConfigMap {
                metadata: ObjectMeta {
                    name: Some(format!("app-{i}")),
                    namespace: Some(namespace.clone()),
                    labels: Some(BTreeMap::from([(
                        "example.com/checksum".into(),
                        "enabled".into(),
                    )])),
                    ..Default::default()
                },
                data: Some(BTreeMap::from([("index".into(), i.to_string())])),
                ..Default::default()
            })?;
        }
        // The next three writes fail, as an overloaded API server would: watch the requeues.
        server.faults().fail_next_for(3, 500, &[Verb::Update]);
    }

    let controller = Controller::start(client, &namespace).await?;
    if fake.is_some() {
        // Done when every object carries its current checksum and the queue is idle.
        while !controller.settled() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let stats = controller.stats();
        println!(
            "all {} ConfigMaps in sync ({} retries)",
            stats.updated.len(),
            stats.retries
        );
    } else {
        let secs = std::env::var("CONTROLLER_SECONDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(30);
        tokio::time::sleep(Duration::from_secs(secs)).await;
    }
    controller.stop().await?;
    Ok(())
}
