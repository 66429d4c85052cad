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
use crate::proxy::Proxy;
use crate::support::Cluster;

const LEASE_NAME: &str = "checksum-controller";
const LEASE: Duration = Duration::from_secs(2);
/// kube-lease-manager pauses 0.1-1 s (random) after clearing an expired lease before it
/// applies its own claim (`manager.rs`, `watcher_step`).
const ACQUIRE_PAUSE: Duration = Duration::from_secs(1);
const ANNOTATION: &str = "example.com/checksum";
const RENEW_DEADLINE: Duration = Duration::from_millis(1500);
const STOP_TIMEOUT: Duration = Duration::from_millis(250);
/// A new leader's workers start this long after it acquired the Lease (the elector's
/// `wait_out_previous_leader`).
const SETTLE: Duration = Duration::from_millis(1750);

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

/// Each replica's leading intervals `[start, stop)` in unix ms; a term without a stop line
/// lasts until `end_ms` (the replica's death, or now).
fn intervals(events: &Events, end_ms: &BTreeMap<String, u128>) -> Vec<(String, u128, u128)> {
    let mut open: BTreeMap<String, u128> = BTreeMap::new();
    let mut out = Vec::new();
    for e in events.lock().unwrap().iter() {
        match e.what.as_str() {
            "leading-start" => {
                open.insert(e.replica.clone(), e.at_ms);
            }
            "leading-stop" => {
                if let Some(start) = open.remove(&e.replica) {
                    out.push((e.replica.clone(), start, e.at_ms));
                }
            }
            _ => {}
        }
    }
    for (replica, start) in open {
        let end = end_ms.get(&replica).copied().unwrap_or_else(unix_ms);
        out.push((replica, start, end));
    }
    out
}

/// No two replicas led at once, and every write happened inside its replica's term.
fn assert_no_overlap(events: &Events, end_ms: &BTreeMap<String, u128>) {
    let terms = intervals(events, end_ms);
    for (i, a) in terms.iter().enumerate() {
        for b in &terms[i + 1..] {
            if a.0 != b.0 {
                assert!(
                    a.2 <= b.1 || b.2 <= a.1,
                    "two replicas led at once: {a:?} and {b:?}"
                );
            }
        }
    }
    for e in events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e.what == "reconciled")
    {
        assert!(
            terms
                .iter()
                .any(|t| t.0 == e.replica && t.1 <= e.at_ms && e.at_ms <= t.2),
            "a write outside its replica's term: {e:?} (terms {terms:?})"
        );
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
    // Printed before it reconciled, but its stdout is read by another task.
    until_ok("leading-start is read", Duration::from_secs(5), || async {
        if of(&events, &holder, "leading-start").is_empty() {
            Err(format!("{:?}", events.lock().unwrap()))
        } else {
            Ok(())
        }
    })
    .await;
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
        "the follower takes the lease",
        LEASE + ACQUIRE_PAUSE + Duration::from_secs(10),
        || async {
            let lease = leases.get(LEASE_NAME).await.map_err(|e| e.to_string())?;
            match lease.spec.and_then(|s| s.holder_identity) {
                Some(h) if h == follower => Ok(()),
                other => Err(format!("holder {other:?}")),
            }
        },
    )
    .await;
    let lease_taken = Duration::from_millis((unix_ms() - killed_ms) as u64);
    until_ok(
        "the follower's workers start",
        SETTLE + Duration::from_secs(10),
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
        "leader election e2e: {follower} took the lease {lease_taken:?} and started its workers \
         {failover:?} after {holder} was killed (lease duration {LEASE:?}, renew every 1 s)"
    );
    until_ok(
        "the new leader reconciles app-new",
        Duration::from_secs(10),
        || async { annotated(&cms, "app-new").await },
    )
    .await;

    // The lease within its duration after the kill, plus kube-lease-manager's acquisition
    // pause (and 1.5 s of polling, scheduling and request slack on a loaded machine: waiting
    // out a second lease would take 2 s more); the workers `SETTLE` later.
    assert!(
        lease_taken <= LEASE + ACQUIRE_PAUSE + Duration::from_millis(1500),
        "the lease was taken over after {lease_taken:?}"
    );
    assert!(
        failover <= lease_taken + SETTLE + Duration::from_millis(1000),
        "the workers started {failover:?} after the kill"
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

    assert_no_overlap(&events, &BTreeMap::from([(holder.clone(), dead_ms)]));

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
    // The replica may exit before the task reading its stdout has pushed its last lines.
    until_ok("leading-stop is read", Duration::from_secs(5), || async {
        if of(&events, follower, "leading-stop").is_empty() {
            Err(format!("{:?}", events.lock().unwrap()))
        } else {
            Ok(())
        }
    })
    .await;
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

/// How the leader's network path breaks.
#[derive(Clone, Copy, Debug)]
enum Partition {
    /// Connections closed and refused: every request fails at once.
    Cut,
    /// Connections kept open but silent: requests hang.
    BlackHole,
}

/// The leader loses the API server while its process lives on: it must stop its workers
/// within the renew deadline (+ stop timeout) of its last renewal, before the Lease expires and
/// the other replica takes over; after the path heals it stays a follower.
async fn partitioned_leader(mode: Partition) {
    let bin = example_binary();
    let cluster = within("start", Cluster::start_for("leader_partition")).await;
    let admin = cluster.admin();
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), "default");
    let leases: Api<Lease> = Api::namespaced(admin.clone(), "default");
    within(
        "create",
        cms.create(&PostParams::default(), &labelled("app-0")),
    )
    .await
    .expect("create a labelled ConfigMap");
    let events: Events = Arc::default();
    let mut proxies = BTreeMap::new();
    let mut children = BTreeMap::new();
    for name in ["a", "b"] {
        let proxy = Proxy::start(cluster.apiserver_port()).await;
        let kubeconfig = cluster
            .write_kubeconfig_via(&proxy.url(), &format!("kubeconfig-{name}"))
            .expect("kubeconfig written");
        children.insert(
            name.to_string(),
            spawn_replica(&bin, &kubeconfig, name, &events),
        );
        proxies.insert(name.to_string(), proxy);
    }
    until_ok(
        "the first leader reconciles",
        Duration::from_secs(30),
        || async { annotated(&cms, "app-0").await },
    )
    .await;
    // Let a renewal or two happen, then break the leader's path right after one.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let holder = within("get lease", leases.get(LEASE_NAME))
        .await
        .expect("the lease exists")
        .spec
        .and_then(|s| s.holder_identity)
        .expect("the lease has a holder");
    let follower = if holder == "a" { "b" } else { "a" };
    let cut_ms = unix_ms();
    match mode {
        Partition::Cut => proxies[&holder].cut(),
        Partition::BlackHole => proxies[&holder].black_hole(),
    }
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
    let stepped_down = of(&events, &holder, "leading-stop");
    let took_over = of(&events, follower, "leading-start")[0].at_ms;
    assert_eq!(
        stepped_down.len(),
        1,
        "the cut-off leader stopped its workers: {:?}",
        events.lock().unwrap()
    );
    let down_after = Duration::from_millis((stepped_down[0].at_ms - cut_ms) as u64);
    eprintln!(
        "leader election e2e ({mode:?}): {holder} stepped down {down_after:?} after its path broke; \
         {follower} took over {:?} after",
        Duration::from_millis((took_over - cut_ms) as u64)
    );
    // The last renewal was at most at the cut: workers gone by then + deadline + stop timeout
    // (+ scheduling slack; that no one else led meanwhile is the check after this one).
    assert!(
        down_after <= RENEW_DEADLINE + STOP_TIMEOUT + Duration::from_millis(700),
        "the cut-off leader kept its workers for {down_after:?}"
    );
    assert!(
        stepped_down[0].at_ms <= took_over,
        "the follower led before the leader stopped"
    );

    // The path heals: the old leader reads the new holder and stays a follower.
    match mode {
        Partition::Cut => proxies[&holder].restore(),
        Partition::BlackHole => proxies[&holder].heal(),
    }
    within(
        "create",
        cms.create(&PostParams::default(), &labelled("app-1")),
    )
    .await
    .expect("create a ConfigMap after the takeover");
    until_ok(
        "the new leader reconciles app-1",
        Duration::from_secs(10),
        || async { annotated(&cms, "app-1").await },
    )
    .await;
    // A renewal the old leader sent into the broken path may reach the server now: as
    // kube-lease-manager renews without a precondition, it rewrites the new holder's renewTime
    // with an old time, the Lease looks expired, and the old leader may take it back. Whatever
    // happens, no two replicas' workers may overlap.
    tokio::time::sleep(Duration::from_secs(5)).await;
    eprintln!(
        "leader election e2e ({mode:?}): after healing, {holder} led {} more time(s)",
        of(&events, &holder, "leading-start").len() - 1
    );
    assert_no_overlap(&events, &BTreeMap::new());
    for (_, mut child) in children {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs kube-apiserver + etcd: run bash .ci/e2e.sh"]
async fn leader_election_leader_cut_off_stops_its_workers_before_the_takeover() {
    partitioned_leader(Partition::Cut).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs kube-apiserver + etcd: run bash .ci/e2e.sh"]
async fn leader_election_leader_black_holed_stops_its_workers_before_the_takeover() {
    partitioned_leader(Partition::BlackHole).await;
}
