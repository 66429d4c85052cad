//! Leader election on a real control plane: two replica processes of
//! `examples/leader_election.rs` (cluster mode, lease 2 s, renew every 1 s, renew deadline
//! 1.5 s), the leader killed with SIGKILL. Each replica prints `EVENT <identity> <what> <unix
//! ms> [key]` lines (leading-start, leading-stop, reconciled); the test checks from them that
//! the other replica takes over within the lease duration (plus kube-lease-manager's pause)
//! and that no two replicas ever reconciled at once.
//!
//! The example binary is not built by `cargo test --test e2e`: build it first with
//! `cargo build --all-features --example leader_election` (CI's example step does).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::common::within;
use crate::support::Cluster;

const LEASE_NAME: &str = "checksum-controller";
const LEASE: Duration = Duration::from_secs(2);
/// kube-lease-manager pauses 0.1-1 s (random) after clearing an expired lease before it
/// applies its own claim (`manager.rs`, `watcher_step`).
const ACQUIRE_PAUSE: Duration = Duration::from_secs(1);
const ANNOTATION: &str = "example.com/checksum";

fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// One `EVENT` line of a replica.
#[derive(Debug, Clone)]
struct Event {
    replica: String,
    what: String,
    at_ms: u128,
    key: Option<String>,
}

type Events = Arc<Mutex<Vec<Event>>>;

/// `target/<profile>/examples/leader_election`, beside this test binary's `deps/`.
fn example_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary has a path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("test binaries live in target/<profile>/deps");
    let bin = profile_dir.join("examples").join("leader_election");
    assert!(
        bin.is_file(),
        "{} is missing: run `cargo build --all-features --example leader_election` first",
        bin.display()
    );
    bin
}

fn spawn_replica(bin: &PathBuf, kubeconfig: &PathBuf, name: &str, events: &Events) -> Child {
    let mut child = Command::new(bin)
        .env("KUBECONFIG", kubeconfig)
        .env("LEADER_IDENTITY", name)
        .env("LEADER_TIMING", "short")
        .env("CONTROLLER_SECONDS", "120")
        .env_remove("KUBE_INFORMER_FAKE")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("the example binary starts");
    let stdout = child.stdout.take().expect("stdout is piped");
    let events = events.clone();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let f: Vec<&str> = line.split_whitespace().collect();
            if let ["EVENT", replica, what, at, rest @ ..] = f.as_slice()
                && let Ok(at_ms) = at.parse()
            {
                events.lock().unwrap().push(Event {
                    replica: replica.to_string(),
                    what: what.to_string(),
                    at_ms,
                    key: rest.first().map(|k| k.to_string()),
                });
            }
        }
    });
    child
}

fn labelled(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([(
                "example.com/checksum".into(),
                "enabled".into(),
            )])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("v".into(), name.into())])),
        ..Default::default()
    }
}

async fn annotated(cms: &Api<ConfigMap>, name: &str) -> Result<(), String> {
    let cm = cms.get(name).await.map_err(|e| e.to_string())?;
    match cm
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION))
    {
        Some(_) => Ok(()),
        None => Err(format!("{name} has no checksum annotation yet")),
    }
}

/// Polls the async `check` every 50 ms until it is `Ok`; panics with its last complaint after
/// `timeout`.
async fn until_ok<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match check().await {
            Ok(()) => return,
            Err(why) if tokio::time::Instant::now() >= deadline => {
                panic!("{what}: not reached in {timeout:?}, likely deadlocked or lost: {why}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

fn of(events: &Events, replica: &str, what: &str) -> Vec<Event> {
    events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e.replica == replica && e.what == what)
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs kube-apiserver + etcd: run bash .ci/e2e.sh"]
async fn leader_election_killed_leader_process_is_replaced_and_no_two_reconcile_at_once() {
    let bin = example_binary();
    let cluster = within("start", Cluster::start_for("leader_election")).await;
    let kubeconfig = cluster.write_kubeconfig().expect("kubeconfig written");
    let admin = cluster.admin();
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), "default");
    let leases: Api<Lease> = Api::namespaced(admin.clone(), "default");
    for i in 0..3 {
        within(
            "create",
            cms.create(&PostParams::default(), &labelled(&format!("app-{i}"))),
        )
        .await
        .expect("create a labelled ConfigMap");
    }

    let events: Events = Arc::default();
    let mut children: BTreeMap<String, Child> = ["a", "b"]
        .iter()
        .map(|n| (n.to_string(), spawn_replica(&bin, &kubeconfig, n, &events)))
        .collect();

    until_ok(
        "the first leader reconciles",
        Duration::from_secs(30),
        || async {
            for i in 0..3 {
                annotated(&cms, &format!("app-{i}")).await?;
            }
            Ok(())
        },
    )
    .await;
    let holder = within("get lease", leases.get(LEASE_NAME))
        .await
        .expect("the lease exists")
        .spec
        .and_then(|s| s.holder_identity)
        .expect("the lease has a holder");
    let follower = if holder == "a" { "b" } else { "a" };
    assert_eq!(of(&events, &holder, "leading-start").len(), 1);
    assert!(
        of(&events, follower, "leading-start").is_empty(),
        "only one replica leads: {:?}",
        events.lock().unwrap()
    );
    // Several renewals in: still one leader.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(of(&events, follower, "leading-start").is_empty());

    // kill -9 the leader process: no release, no goodbye.
    let mut leader = children.remove(&holder).expect("the holder is a replica");
    let killed_ms = unix_ms();
    leader.start_kill().expect("SIGKILL sent");
    within("the killed leader exits", leader.wait())
        .await
        .expect("wait for the killed leader");
    let dead_ms = unix_ms();
    within(
        "create",
        cms.create(&PostParams::default(), &labelled("app-new")),
    )
    .await
    .expect("create a ConfigMap after the kill");

    until_ok(
        "the follower takes over",
        LEASE + ACQUIRE_PAUSE + Duration::from_secs(10),
        || async {
            match of(&events, follower, "leading-start").first() {
                Some(_) => Ok(()),
                None => Err("the follower has not started leading".to_string()),
            }
        },
    )
    .await;
    let took_over_ms = of(&events, follower, "leading-start")[0].at_ms;
    let failover = Duration::from_millis((took_over_ms - killed_ms) as u64);
    eprintln!(
        "leader election e2e: {follower} took over {failover:?} after {holder} was killed \
         (lease duration {LEASE:?}, renew every 1 s)"
    );
    until_ok(
        "the new leader reconciles app-new",
        Duration::from_secs(10),
        || async { annotated(&cms, "app-new").await },
    )
    .await;

    // Within the lease duration after the kill, plus kube-lease-manager's acquisition pause
    // (and 500 ms of scheduling and request slack).
    assert!(
        failover <= LEASE + ACQUIRE_PAUSE + Duration::from_millis(500),
        "failover took {failover:?}"
    );
    // No two reconciled at once: the dead leader's writes all happened before it died, the
    // new leader's all after it started leading, which was after the old one died.
    assert!(
        took_over_ms >= dead_ms,
        "the follower led before the leader died"
    );
    for e in of(&events, &holder, "reconciled") {
        assert!(e.at_ms <= dead_ms, "the dead leader wrote late: {e:?}");
    }
    let new_writes = of(&events, follower, "reconciled");
    assert!(
        new_writes.iter().all(|e| e.at_ms >= took_over_ms),
        "{new_writes:?}"
    );
    assert!(
        new_writes
            .iter()
            .any(|e| e.key.as_deref() == Some("default/app-new")),
        "the new leader reconciled app-new: {new_writes:?}"
    );

    // A graceful stop (SIGTERM) stops the workers, then releases the lease.
    let mut last = children
        .remove(follower)
        .expect("the follower is a replica");
    let pid = last.id().expect("the follower runs");
    let term = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill -TERM runs");
    assert!(term.success());
    let status = within("the last replica exits", last.wait())
        .await
        .expect("wait for the last replica");
    assert!(status.success(), "{status:?}");
    let stops = of(&events, follower, "leading-stop");
    assert_eq!(stops.len(), 1, "{:?}", events.lock().unwrap());
    let lease = within("get lease", leases.get(LEASE_NAME))
        .await
        .expect("the lease exists");
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity),
        None,
        "released on the way out"
    );
}
