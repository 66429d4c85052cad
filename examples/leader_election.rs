//! Two replicas of `examples/controller.rs`, one leading: informers (a warm cache) run on
//! both, the workers only on the replica holding the Lease (`leader-election` feature).
//!
//! ```sh
//! cargo run --all-features --example leader_election
//! ```
//!
//! Without a cluster (or with `KUBE_INFORMER_FAKE` set) it starts the fake API server in this
//! process and two replicas, `a` and `b`, as tasks; waits until the leader has annotated the
//! ConfigMaps; kills the leader's task (a crash: nothing is released); creates one more
//! ConfigMap; and prints how long the other replica took to take over and reconcile it. It
//! exits non-zero if the two replicas' workers ever ran at the same time.
//!
//! With a cluster (kubeconfig) it is one replica, named by `LEADER_IDENTITY` (default: the
//! host name), in `CONTROLLER_NAMESPACE` (default `default`), for `CONTROLLER_SECONDS`
//! (default 30) or until SIGINT/SIGTERM, releasing the Lease on the way out. Run it twice
//! and kill one. `LEADER_TIMING=short` selects the short durations the demo uses (lease 2 s)
//! instead of client-go's defaults (lease 15 s). Each replica prints one line per leading
//! start and stop and per write, `EVENT <identity> <what> <unix ms> [key]`, which
//! `tests/e2e/leader.rs` reads to check that no two replicas reconcile at once.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::ObjectMeta;
use kube_informer::leader::{LeaderElectionConfig, LeaderElector, Leadership};
use kube_informer::testing::FakeApiServer;
use kube_informer::{
    FactoryConfig, ObjectKey, RateLimitingQueue, ResourceEventHandlerFuncs, SharedInformerFactory,
    key_of,
};
use tokio::sync::watch;
use tokio::task::JoinSet;

#[path = "controller.rs"]
#[allow(dead_code)] // the controller example's own `main` and `Controller`
mod controller;

use controller::{
    ANNOTATION, LABEL, MAX_RETRIES, SYNC_TIMEOUT, checksum, cluster_client, reconcile,
};

const LEASE_NAME: &str = "checksum-controller";

/// Terms running in this process, and whether two ever ran at once (the demo's check; each
/// process of a real deployment is one replica, where only the e2e test can check).
static LEADING: AtomicUsize = AtomicUsize::new(0);
static OVERLAP: AtomicBool = AtomicBool::new(false);

fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// One line of the replica's log; `EVENT` lines are the machine-readable ones.
fn event(identity: &str, what: &str, key: Option<&str>) {
    let key = key.map(|k| format!(" {k}")).unwrap_or_default();
    println!("EVENT {identity} {what} {}{key}", unix_ms());
}

/// The durations: client-go's defaults, or short ones for demos and tests.
fn election(identity: &str, namespace: &str, short: bool) -> LeaderElectionConfig {
    let c = LeaderElectionConfig::new(LEASE_NAME, identity).namespace(namespace);
    let c = if short {
        c.lease_duration(Duration::from_secs(2))
            .renew_period(Duration::from_secs(1))
            .renew_deadline(Duration::from_millis(1500))
            .worker_stop_timeout(Duration::from_millis(250))
            .retry_period(Duration::from_millis(250))
    } else {
        c
    };
    c.release_on_cancel(true)
}

/// Prints the end of a term however the term's future ends (returned, or aborted).
struct StopLine(String);

impl Drop for StopLine {
    fn drop(&mut self) {
        LEADING.fetch_sub(1, Ordering::SeqCst);
        event(&self.0, "leading-stop", None);
    }
}

/// One term: a fresh queue filled from the (warm) cache, as a new leader must look at
/// everything, and two workers draining it until the term ends.
async fn term(
    identity: String,
    mut leadership: Leadership,
    client: Client,
    factory: SharedInformerFactory,
    slot: Arc<Mutex<Option<RateLimitingQueue<ObjectKey>>>>,
    writes: Arc<Mutex<Vec<String>>>,
) {
    event(&identity, "leading-start", None);
    if LEADING.fetch_add(1, Ordering::SeqCst) > 0 {
        OVERLAP.store(true, Ordering::SeqCst);
    }
    let _stop_line = StopLine(identity.clone());
    let queue: RateLimitingQueue<ObjectKey> = RateLimitingQueue::new();
    *slot.lock().unwrap() = Some(queue.clone());
    let lister = factory.lister::<ConfigMap>();
    for cm in lister.list(&Default::default()) {
        if let Ok(key) = key_of(cm.as_ref()) {
            let _ = queue.add(key);
        }
    }
    let mut workers = JoinSet::new();
    for _ in 0..2 {
        let (queue, lister, client) = (queue.clone(), lister.clone(), client.clone());
        let (identity, writes) = (identity.clone(), writes.clone());
        let mut leadership = leadership.clone();
        workers.spawn(async move {
            loop {
                // Once the term ends, take no more keys: after `queue.shutdown()` below, `get`
                // would still hand out the queued ones, to a replica that no longer leads.
                let key = tokio::select! {
                    biased;
                    () = leadership.stopped() => break,
                    key = queue.get() => match key {
                        Some(key) => key,
                        None => break,
                    },
                };
                if leadership.is_stopped() {
                    queue.done(&key);
                    break;
                }
                match reconcile(&key, &lister, &client).await {
                    Ok(wrote) => {
                        if wrote {
                            event(&identity, "reconciled", Some(key.as_str()));
                            writes.lock().unwrap().push(key.to_string());
                        }
                        queue.forget(&key);
                    }
                    Err(_) if queue.num_requeues(&key) < MAX_RETRIES => {
                        let _ = queue.add_rate_limited(key.clone());
                    }
                    Err(e) => {
                        println!("{identity}: {key}: giving up: {e}");
                        queue.forget(&key);
                    }
                }
                queue.done(&key);
            }
        });
    }
    leadership.stopped().await;
    // No new keys for this term; workers finish the key in hand and take no other (or are
    // aborted with this future once the stop timeout passes: the JoinSet aborts them when
    // dropped).
    *slot.lock().unwrap() = None;
    queue.shutdown();
    while workers.join_next().await.is_some() {}
}

/// A replica: its informer runs (and its cache stays warm) whether or not it leads.
async fn replica(
    client: Client,
    namespace: String,
    config: LeaderElectionConfig,
    identity: String,
    shutdown: watch::Receiver<bool>,
    writes: Arc<Mutex<Vec<String>>>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let factory = SharedInformerFactory::new(
        client.clone(),
        FactoryConfig::default()
            .namespace(&namespace)
            .labels(LABEL)
            .strip_managed_fields(),
    );
    let slot: Arc<Mutex<Option<RateLimitingQueue<ObjectKey>>>> = Arc::default();
    let enqueue = {
        let slot = slot.clone();
        move |cm: &ConfigMap| {
            if let (Some(q), Ok(key)) = (slot.lock().unwrap().as_ref(), key_of(cm)) {
                let _ = q.add(key);
            }
        }
    };
    let e2 = enqueue.clone();
    factory.informer::<ConfigMap>().add_event_handler(
        ResourceEventHandlerFuncs::new()
            .on_add(move |cm: &Arc<ConfigMap>, _| enqueue(cm))
            .on_update(move |_, cm: &Arc<ConfigMap>| e2(cm)),
    )?;
    factory.start();
    // The stop signal (SIGINT, SIGTERM, the timer) also ends the wait for the cache: an
    // unreachable API server or missing RBAC would otherwise hold the replica here for ever.
    let mut stop = shutdown;
    let synced = tokio::select! {
        () = async { let _ = stop.wait_for(|s| *s).await; } => None,
        synced = factory.wait_for_cache_sync_timeout(SYNC_TIMEOUT) => Some(synced),
    };
    let Some(synced) = synced else {
        factory.shutdown().await;
        return Ok(());
    };
    if let Err(e) = synced.into_result() {
        factory.shutdown().await;
        return Err(format!(
            "{e}: check that the API server is reachable and that this client may list and \
             watch ConfigMaps in {namespace} (RBAC)"
        )
        .into());
    }

    let elector = LeaderElector::new(client.clone(), config)?;
    let result = elector
        .run(
            async move {
                let _ = stop.wait_for(|s| *s).await;
            },
            |leadership| {
                term(
                    identity.clone(),
                    leadership,
                    client.clone(),
                    factory.clone(),
                    slot.clone(),
                    writes.clone(),
                )
            },
        )
        .await;
    factory.shutdown().await;
    Ok(result?)
}

fn labelled(name: &str, namespace: &str, data: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            labels: Some(BTreeMap::from([(
                "example.com/checksum".into(),
                "enabled".into(),
            )])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("v".into(), data.into())])),
        ..Default::default()
    }
}

fn in_sync(server: &FakeApiServer, name: &str) -> bool {
    server
        .get::<ConfigMap>(Some("default"), name)
        .ok()
        .flatten()
        .is_some_and(|cm| {
            cm.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ANNOTATION))
                == Some(&checksum(&cm))
        })
}

async fn wait_until(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < until, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The in-process demo against the fake API server.
async fn demo() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let server = FakeApiServer::start_with_core().await?;
    server.register::<Lease>();
    for i in 0..3 {
        server.create(&labelled(&format!("app-{i}"), "default", &i.to_string()))?;
    }
    let writes: BTreeMap<&str, Arc<Mutex<Vec<String>>>> =
        [("a", Arc::default()), ("b", Arc::default())].into();
    let mut replicas = BTreeMap::new();
    for (name, log) in &writes {
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(replica(
            server.client(),
            "default".into(),
            election(name, "default", true),
            name.to_string(),
            stop_rx,
            log.clone(),
        ));
        replicas.insert(*name, (stop, task));
    }
    wait_until(
        "the first leader reconciles",
        Duration::from_secs(10),
        || {
            (0..3).all(|i| in_sync(&server, &format!("app-{i}")))
                && writes
                    .values()
                    .map(|w| w.lock().unwrap().len())
                    .sum::<usize>()
                    >= 3
        },
    )
    .await;
    let holder = |server: &FakeApiServer| {
        server
            .get::<Lease>(Some("default"), LEASE_NAME)
            .ok()
            .flatten()
            .and_then(|l| l.spec?.holder_identity)
    };
    let leader = holder(&server).ok_or("nobody holds the lease")?;
    let follower = if leader == "a" { "b" } else { "a" };
    println!(
        "{leader} leads and wrote {:?}; {follower} follows with a warm cache",
        writes[leader.as_str()].lock().unwrap()
    );
    assert!(writes[follower].lock().unwrap().is_empty());

    // Crash the leader: its task is dropped, the Lease is not released. (Its stop sender is
    // kept: dropping it would be a graceful shutdown, which releases.)
    let (_keep_running, task) = replicas
        .remove(leader.as_str())
        .ok_or("the leader is one of the replicas")?;
    task.abort();
    let killed = Instant::now();
    let _ = task.await;
    server.create(&labelled("app-new", "default", "new"))?;
    wait_until("the follower takes over", Duration::from_secs(10), || {
        holder(&server).as_deref() == Some(follower)
    })
    .await;
    let failover = killed.elapsed();
    // The worker records its write after the server's reply, so wait for the record too,
    // not only for the object on the server.
    let wrote_new = || {
        writes[follower]
            .lock()
            .unwrap()
            .iter()
            .any(|k| k == "default/app-new")
    };
    wait_until(
        "the new leader reconciles app-new",
        Duration::from_secs(10),
        || in_sync(&server, "app-new") && wrote_new(),
    )
    .await;
    println!(
        "failover: {follower} took the lease {} ms after {leader} was killed (lease duration 2000 ms), \
         and reconciled app-new {} ms after (its workers wait 1750 ms after the acquisition, \
         renew deadline + stop timeout, for any previous leader's to be gone)",
        failover.as_millis(),
        killed.elapsed().as_millis()
    );

    let (stop, task) = replicas
        .remove(follower)
        .ok_or("the follower is one of the replicas")?;
    stop.send_replace(true);
    task.await??;
    if OVERLAP.load(Ordering::SeqCst) {
        return Err("two replicas' workers ran at the same time".into());
    }
    println!("no two replicas led at once");
    Ok(())
}

/// Completes on SIGTERM (how Kubernetes stops a pod).
#[cfg(unix)]
async fn terminated() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            term.recv().await;
        }
        Err(_) => std::future::pending().await,
    }
}

/// No SIGTERM here: only Ctrl-C and the timer stop the replica.
#[cfg(not(unix))]
async fn terminated() {
    std::future::pending().await
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // `RUST_LOG=kube_informer=debug,kube_lease_manager=debug` shows the election's steps.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let Some(client) = cluster_client().await? else {
        return demo().await;
    };
    let namespace = std::env::var("CONTROLLER_NAMESPACE").unwrap_or_else(|_| "default".into());
    let identity = std::env::var("LEADER_IDENTITY")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| format!("replica-{}", std::process::id()));
    let short = std::env::var("LEADER_TIMING").is_ok_and(|t| t == "short");
    let secs = std::env::var("CONTROLLER_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    let (stop, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(secs)) => {}
            _ = tokio::signal::ctrl_c() => {}
            () = terminated() => {}
        }
        stop.send_replace(true);
    });
    event(&identity, "replica-start", None);
    replica(
        client,
        namespace.clone(),
        election(&identity, &namespace, short),
        identity.clone(),
        stop_rx,
        Arc::default(),
    )
    .await?;
    event(&identity, "replica-exit", None);
    Ok(())
}
