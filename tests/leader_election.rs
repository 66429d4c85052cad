//! Leader election (`leader` module) against the fake API server, with short real durations
//! (lease 2 s, renew every 1 s, renew deadline 1.5 s, worker stop timeout 0.25 s, retry
//! 0.25 s): kube-lease-manager runs on wall-clock time, so paused tokio time does not apply.
//! Every test records the interval during which each replica's workers ran and checks that
//! no two replicas' intervals overlap.
#![cfg(all(feature = "testing", feature = "leader-election"))]

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube_informer::leader::{LeaderElectionConfig, LeaderElector, Leadership, Role};
use kube_informer::testing::{FakeApiServer, Verb};
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

const DEADLOCK: &str = "likely deadlocked";
const LEASE: Duration = Duration::from_secs(2);
const RENEW_DEADLINE: Duration = Duration::from_millis(1500);
const STOP_TIMEOUT: Duration = Duration::from_millis(250);
const RETRY: Duration = Duration::from_millis(250);
/// A new term's workers wait this long after the acquisition (`wait_out_previous_leader`).
const SETTLE: Duration = Duration::from_millis(1750);

fn config(identity: &str) -> LeaderElectionConfig {
    LeaderElectionConfig::new("controller", identity)
        .lease_duration(LEASE)
        .renew_period(Duration::from_secs(1))
        .renew_deadline(RENEW_DEADLINE)
        .worker_stop_timeout(STOP_TIMEOUT)
        .retry_period(RETRY)
}

/// When one replica's workers ran: `end` is `None` while they still run.
#[derive(Debug, Clone)]
struct Interval {
    replica: String,
    start: Instant,
    end: Option<Instant>,
}

#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<Interval>>>);

impl Log {
    fn leaders_now(&self) -> Vec<String> {
        let log = self.0.lock();
        log.iter()
            .filter(|i| i.end.is_none())
            .map(|i| i.replica.clone())
            .collect()
    }

    fn intervals(&self) -> Vec<Interval> {
        self.0.lock().clone()
    }

    /// No two replicas' workers ever ran at the same time.
    fn assert_no_overlap(&self) {
        let log = self.intervals();
        let now = Instant::now();
        for (i, a) in log.iter().enumerate() {
            for b in &log[i + 1..] {
                if a.replica == b.replica {
                    continue;
                }
                let (ae, be) = (a.end.unwrap_or(now), b.end.unwrap_or(now));
                assert!(
                    ae <= b.start || be <= a.start,
                    "two replicas' workers overlapped: {a:?} and {b:?}"
                );
            }
        }
    }

    async fn wait_for_leader(&self, other_than: Option<&str>, within: Duration) -> String {
        let until = Instant::now() + within;
        loop {
            let now = self.leaders_now();
            if let [one] = now.as_slice()
                && Some(one.as_str()) != other_than
            {
                return one.clone();
            }
            assert!(
                Instant::now() < until,
                "no single new leader within {within:?}: {:?}",
                self.intervals()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Marks the interval's end however the term's future ends (returned or aborted).
struct EndOnDrop(Log, usize);

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        self.0.0.lock()[self.1].end = Some(Instant::now());
    }
}

/// How a replica's workers react to the end of their term.
#[derive(Clone, Copy)]
enum Workers {
    /// Return as soon as told to stop.
    Obedient,
    /// Never look at the stop signal (they are aborted after the stop timeout).
    Stubborn,
    /// Panic as soon as they start.
    Panicking,
}

struct Replica {
    name: String,
    shutdown: watch::Sender<bool>,
    task: JoinHandle<Result<(), kube_informer::leader::Error>>,
    role: watch::Receiver<Role>,
    holder: watch::Receiver<Option<String>>,
}

fn replica(
    server: &FakeApiServer,
    log: &Log,
    config: LeaderElectionConfig,
    name: &str,
    workers: Workers,
) -> Replica {
    replica_on(server.client(), log, config, name, workers)
}

/// A replica whose requests go through `client`.
fn replica_on(
    client: kube::Client,
    log: &Log,
    config: LeaderElectionConfig,
    name: &str,
    workers: Workers,
) -> Replica {
    let elector = LeaderElector::new(client, config).unwrap();
    let role = elector.role();
    let holder = elector.holder();
    let (shutdown, mut shutdown_rx) = watch::channel(false);
    let (log, owner) = (log.clone(), name.to_string());
    let task = tokio::spawn(async move {
        elector
            .run(
                async move {
                    let _ = shutdown_rx.wait_for(|s| *s).await;
                },
                move |mut leadership: Leadership| {
                    let (log, owner) = (log.clone(), owner.clone());
                    async move {
                        let i = {
                            let mut l = log.0.lock();
                            l.push(Interval {
                                replica: owner,
                                start: Instant::now(),
                                end: None,
                            });
                            l.len() - 1
                        };
                        let _end = EndOnDrop(log, i);
                        match workers {
                            Workers::Obedient => leadership.stopped().await,
                            Workers::Stubborn => std::future::pending().await,
                            Workers::Panicking => panic!("the workers panic"),
                        }
                    }
                },
            )
            .await
    });
    Replica {
        name: name.to_string(),
        shutdown,
        task,
        role,
        holder,
    }
}

/// Stops every replica, whatever its run returned.
async fn shut_down(replicas: Vec<Replica>) {
    for r in replicas {
        r.shutdown.send_replace(true);
        let _ = tokio::time::timeout(Duration::from_secs(5), r.task)
            .await
            .expect(DEADLOCK);
    }
}

async fn server() -> FakeApiServer {
    let s = FakeApiServer::start().await.unwrap();
    s.register::<Lease>();
    s
}

#[tokio::test]
async fn exactly_one_of_three_replicas_leads_and_keeps_leading() {
    let s = server().await;
    let log = Log::default();
    let replicas: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|n| replica(&s, &log, config(n), n, Workers::Obedient))
        .collect();
    let leader = log.wait_for_leader(None, Duration::from_secs(5)).await;
    // Several renewals later: still the same single term.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(log.leaders_now(), std::slice::from_ref(&leader));
    assert_eq!(log.intervals().len(), 1, "{:?}", log.intervals());
    let lease: Lease = s.get(Some("default"), "controller").unwrap().unwrap();
    let spec = lease.spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some(leader.as_str()));
    assert_eq!(spec.lease_duration_seconds, Some(2));
    // The acquisition was a server-side apply: the holder's apply entry owns holderIdentity.
    let managers = lease.metadata.managed_fields.unwrap();
    assert!(
        managers
            .iter()
            .any(|m| m.operation.as_deref() == Some("Apply")
                && m.manager.as_deref() == Some(&*format!("kube-lease-manager-{leader}"))),
        "{managers:?}"
    );
    for r in &replicas {
        let want = if r.name == leader {
            Role::Leading(1)
        } else {
            Role::Following
        };
        assert_eq!(*r.role.borrow(), want, "{}", r.name);
        // Every replica knows who leads (client-go's `GetLeader`).
        assert_eq!(
            r.holder.borrow().as_deref(),
            Some(leader.as_str()),
            "{}",
            r.name
        );
    }
    for r in replicas {
        r.shutdown.send_replace(true);
        tokio::time::timeout(Duration::from_secs(5), r.task)
            .await
            .expect(DEADLOCK)
            .unwrap()
            .unwrap();
    }
    log.assert_no_overlap();
    assert!(log.leaders_now().is_empty(), "shutdown stopped the workers");
}

/// The Lease holder, as the server has it.
fn holder(s: &FakeApiServer) -> Option<String> {
    s.get::<Lease>(Some("default"), "controller")
        .ok()
        .flatten()
        .and_then(|l| l.spec?.holder_identity)
}

async fn crash_the_leader(wait_out_previous_leader: bool) -> (Duration, Duration) {
    let s = server().await;
    let log = Log::default();
    let config = |n: &str| config(n).wait_out_previous_leader(wait_out_previous_leader);
    let mut replicas: Vec<_> = ["a", "b"]
        .iter()
        .map(|n| replica(&s, &log, config(n), n, Workers::Obedient))
        .collect();
    let leader = log.wait_for_leader(None, Duration::from_secs(5)).await;
    let i = replicas.iter().position(|r| r.name == leader).unwrap();
    let crashed = replicas.remove(i);
    // A crash: the elector's future is dropped mid-term, nothing is released.
    crashed.task.abort();
    let killed = Instant::now();
    let _ = crashed.task.await;
    let until = killed + LEASE + Duration::from_secs(3);
    // Until another replica holds it (kube-lease-manager first clears an expired lease).
    while holder(&s).is_none_or(|h| h == leader) {
        assert!(Instant::now() < until, "the lease was never taken over");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let lease_taken = killed.elapsed();
    let next = log
        .wait_for_leader(Some(&leader), LEASE + SETTLE + Duration::from_secs(3))
        .await;
    let workers_started = log.intervals().last().unwrap().start - killed;
    println!(
        "after a crash (wait_out_previous_leader: {wait_out_previous_leader}): lease taken over \
         after {lease_taken:?}, workers started after {workers_started:?}"
    );
    assert_ne!(next, leader);
    log.assert_no_overlap();
    shut_down(replicas).await;
    (lease_taken, workers_started)
}

#[tokio::test]
async fn a_crashed_leader_is_replaced_after_its_lease_expires() {
    let (lease_taken, workers_started) = crash_the_leader(true).await;
    // The follower takes the lease once it expired (at most `LEASE` after the last renewal),
    // after kube-lease-manager's random 0.1-1 s pause following its release of the expired
    // lease; its workers start `SETTLE` later.
    assert!(
        lease_taken <= LEASE + Duration::from_millis(1500),
        "took {lease_taken:?}"
    );
    assert!(
        workers_started >= lease_taken + SETTLE - Duration::from_millis(500),
        "the new leader did not wait out the old one: {workers_started:?}"
    );
    assert!(
        workers_started <= lease_taken + SETTLE + Duration::from_millis(500),
        "{workers_started:?}"
    );
}

#[tokio::test]
async fn without_waiting_out_the_previous_leader_workers_start_with_the_takeover() {
    let (lease_taken, workers_started) = crash_the_leader(false).await;
    assert!(
        lease_taken <= LEASE + Duration::from_millis(1500),
        "took {lease_taken:?}"
    );
    assert!(
        workers_started <= lease_taken + Duration::from_millis(700),
        "{workers_started:?}"
    );
}

#[tokio::test]
async fn release_on_cancel_hands_over_within_the_retry_period() {
    let s = server().await;
    let log = Log::default();
    let mut replicas: Vec<_> = ["a", "b"]
        .iter()
        .map(|n| {
            replica(
                &s,
                &log,
                config(n).release_on_cancel(true),
                n,
                Workers::Obedient,
            )
        })
        .collect();
    let leader = log.wait_for_leader(None, Duration::from_secs(5)).await;
    // Right after a renewal the lease has nearly its whole duration left: a takeover before it
    // expired can only come from the release.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let i = replicas.iter().position(|r| r.name == leader).unwrap();
    let leaving = replicas.remove(i);
    let asked = Instant::now();
    leaving.shutdown.send_replace(true);
    tokio::time::timeout(Duration::from_secs(5), leaving.task)
        .await
        .expect(DEADLOCK)
        .unwrap()
        .unwrap();
    let released = holder(&s) != Some(leader.clone());
    assert!(released, "the leaving leader released the lease");
    let until = asked + Duration::from_secs(3);
    while holder(&s).is_none() {
        assert!(Instant::now() < until, "the released lease was never taken");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let handover = asked.elapsed();
    let next = log
        .wait_for_leader(Some(&leader), SETTLE + Duration::from_secs(3))
        .await;
    let workers = log.intervals().last().unwrap().start - asked;
    println!("after a release: lease taken after {handover:?}, workers started after {workers:?}");
    assert_ne!(next, leader);
    assert_eq!(holder(&s).as_deref(), Some(next.as_str()));
    assert!(
        // Waiting for expiry instead would take at least LEASE - RETRY plus a 0.1 s pause.
        handover < Duration::from_millis(1500),
        "took {handover:?}: the follower waited for expiry instead of seeing the release"
    );
    log.assert_no_overlap();
    shut_down(replicas).await;
}

#[tokio::test]
async fn a_leader_that_cannot_renew_stops_its_workers_before_the_lease_expires() {
    let s = server().await;
    let log = Log::default();
    // The workers ignore the stop signal: the elector must abort them within the timeout.
    let replicas: Vec<_> = ["a", "b"]
        .iter()
        .map(|n| replica(&s, &log, config(n), n, Workers::Stubborn))
        .collect();
    let leader = log.wait_for_leader(None, Duration::from_secs(5)).await;
    // From now on every PATCH fails: no renewal, no release, no acquisition. The last
    // successful renewal was at or before this instant.
    s.faults().fail_next_for(usize::MAX, 500, &[Verb::Patch]);
    let cut = Instant::now();
    let until = cut + LEASE + Duration::from_secs(2);
    while !log.leaders_now().is_empty() {
        assert!(Instant::now() < until, "the leader never stepped down");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let stopped = log.intervals()[0].end.unwrap();
    println!(
        "stepped down {:?} after renewals started failing",
        stopped - cut
    );
    // Workers gone within renew deadline + stop timeout of the last renewal (+ scheduling
    // slack), which is before the lease expires for anyone else.
    assert!(
        stopped - cut < LEASE,
        "workers ran until {:?} after the cut",
        stopped - cut
    );
    assert!(stopped - cut < LEASE);
    // While nothing can be written nobody leads.
    tokio::time::sleep(LEASE).await;
    assert!(log.leaders_now().is_empty(), "{:?}", log.intervals());
    // The API recovers: exactly one replica leads again (kube-lease-manager backs off up to
    // a few seconds after errors).
    s.faults().clear();
    log.wait_for_leader(None, Duration::from_secs(20)).await;
    log.assert_no_overlap();
    let _ = leader;
    shut_down(replicas).await;
    log.assert_no_overlap();
}

#[tokio::test]
async fn a_deleted_lease_is_recreated_and_taken() {
    let s = server().await;
    let log = Log::default();
    let replicas: Vec<_> = ["a", "b"]
        .iter()
        .map(|n| replica(&s, &log, config(n), n, Workers::Obedient))
        .collect();
    let leader = log.wait_for_leader(None, Duration::from_secs(5)).await;
    // Deleted (by an operator, or a namespace cleanup): client-go's electors create it again
    // at their next try, and one of them leads.
    s.delete::<Lease>(Some("default"), "controller").unwrap();
    let until = Instant::now() + LEASE * 3;
    while log.leaders_now().contains(&leader) && holder(&s).is_none() {
        assert!(
            Instant::now() < until,
            "the deleted lease was never noticed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let next = log
        .wait_for_leader(None, LEASE * 3 + SETTLE + Duration::from_secs(2))
        .await;
    assert_eq!(holder(&s).as_deref(), Some(next.as_str()));
    log.assert_no_overlap();
    for r in replicas {
        r.shutdown.send_replace(true);
        tokio::time::timeout(Duration::from_secs(5), r.task)
            .await
            .expect(DEADLOCK)
            .unwrap()
            .unwrap();
    }
}

#[tokio::test]
async fn workers_that_panic_end_the_election_and_hand_the_lease_over() {
    let s = server().await;
    let log = Log::default();
    let config_of = |n: &str| config(n).release_on_cancel(true);
    let a = replica(&s, &log, config_of("a"), "a", Workers::Panicking);
    // "a" leads first: "b" starts once the Lease names it.
    let until = Instant::now() + Duration::from_secs(5);
    while holder(&s).as_deref() != Some("a") {
        assert!(Instant::now() < until, "a never took the lease");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let b = replica(&s, &log, config_of("b"), "b", Workers::Obedient);
    // The panic is a typed error from `run`, not a Lease held with nothing running.
    let ended = tokio::time::timeout(SETTLE + Duration::from_secs(5), a.task)
        .await
        .expect(DEADLOCK)
        .unwrap();
    // Released before `run` returned (not left to expire).
    assert_ne!(
        holder(&s).as_deref(),
        Some("a"),
        "the lease was not released"
    );
    assert!(
        matches!(
            ended,
            Err(kube_informer::leader::Error::WorkersPanicked { term: 1 })
        ),
        "{ended:?}"
    );
    // Released on the way out: "b" leads well before the lease would have expired.
    let next = log
        .wait_for_leader(Some("a"), SETTLE + Duration::from_secs(3))
        .await;
    assert_eq!(next, "b");
    log.assert_no_overlap();
    b.shutdown.send_replace(true);
    tokio::time::timeout(Duration::from_secs(5), b.task)
        .await
        .expect(DEADLOCK)
        .unwrap()
        .unwrap();
}

/// How a partitioned replica's requests end.
#[derive(Clone, Copy, PartialEq)]
enum Cut {
    /// At once, with a connection error.
    Refused,
    /// Never.
    Hanging,
}

/// A client to `s` that `cut` turns off for this replica alone.
fn partitionable_client(s: &FakeApiServer, cut: Arc<Mutex<Option<Cut>>>) -> kube::Client {
    let inner = s.client();
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let (inner, cut) = (inner.clone(), *cut.lock());
        async move {
            match cut {
                None => inner.send(request).await,
                Some(Cut::Refused) => Err(kube::Error::Service(
                    std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "partitioned")
                        .into(),
                )),
                Some(Cut::Hanging) => std::future::pending().await,
            }
        }
    });
    kube::Client::new(service, "default")
}

/// The leader loses the API server while the follower still reaches it: the case the renew
/// deadline exists for. The leader's workers (which ignore the stop signal) must be gone
/// before the follower's start.
async fn partition_the_leader(how: Cut) {
    let s = server().await;
    let log = Log::default();
    let cuts: Vec<Arc<Mutex<Option<Cut>>>> = (0..2).map(|_| Arc::default()).collect();
    let replicas: Vec<_> = ["a", "b"]
        .iter()
        .zip(&cuts)
        .map(|(n, cut)| {
            let client = partitionable_client(&s, cut.clone());
            replica_on(client, &log, config(n), n, Workers::Stubborn)
        })
        .collect();
    let leader = log.wait_for_leader(None, Duration::from_secs(5)).await;
    let i = replicas.iter().position(|r| r.name == leader).unwrap();
    *cuts[i].lock() = Some(how);
    let cut_at = Instant::now();
    let next = log
        .wait_for_leader(Some(&leader), LEASE + SETTLE + Duration::from_secs(4))
        .await;
    println!(
        "{}: the other replica's workers started {:?} after the cut",
        if how == Cut::Refused {
            "refused"
        } else {
            "hanging"
        },
        log.intervals().last().unwrap().start - cut_at
    );
    assert_ne!(next, leader);
    assert_eq!(holder(&s).as_deref(), Some(next.as_str()));
    log.assert_no_overlap();
    // The partitioned leader still leads nothing once it reaches the server again, and as a
    // follower it sees who does (client-go's `OnNewLeader`).
    *cuts[i].lock() = None;
    tokio::time::sleep(LEASE).await;
    assert_eq!(log.leaders_now(), std::slice::from_ref(&next));
    let mut seen = replicas[i].holder.clone();
    tokio::time::timeout(
        RETRY * 4,
        seen.wait_for(|h| h.as_deref() == Some(next.as_str())),
    )
    .await
    .expect(DEADLOCK)
    .unwrap();
    log.assert_no_overlap();
    shut_down(replicas).await;
}

#[tokio::test]
async fn a_leader_cut_off_from_the_api_stops_before_the_follower_takes_over() {
    partition_the_leader(Cut::Refused).await;
}

#[tokio::test]
async fn a_leader_whose_requests_hang_stops_before_the_follower_takes_over() {
    partition_the_leader(Cut::Hanging).await;
}

#[tokio::test]
async fn a_bad_configuration_is_a_typed_error() {
    let s = server().await;
    let e = LeaderElector::new(
        s.client(),
        config("a").renew_deadline(Duration::from_secs(2)),
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            kube_informer::leader::Error::Config(kube_informer::leader::ConfigError::NoMargin(..))
        ),
        "{e}"
    );
}

#[tokio::test]
async fn an_unreachable_api_server_at_start_is_a_typed_error() {
    let s = server().await;
    let client = s.client();
    drop(s);
    let elector = LeaderElector::new(client, config("a")).unwrap();
    let e = tokio::time::timeout(
        Duration::from_secs(10),
        elector.run(std::future::pending(), |_l: Leadership| async {}),
    )
    .await
    .expect(DEADLOCK)
    .unwrap_err();
    assert!(matches!(e, kube_informer::leader::Error::Lease(_)), "{e}");
}
