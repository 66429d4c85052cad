//! Seeded randomised chaos test: an informer with several handlers and an async subscriber
//! watches the fake API server while writers create, update and delete ConfigMaps and random
//! faults hit the server (dropped watches, 410 through compaction and a bounded history, 429,
//! 500, 403 then recovery, malformed lines, stalled streams, restarts, dropped-after-n watches,
//! bookmarks).
//!
//! After each schedule, once the server is healthy again:
//! - the informer cache equals the server's state;
//! - replaying each consumer's notifications (three handlers, one of them slow, one handler
//!   registered while the informer runs, and one [`subscribe`] stream) reconstructs exactly the
//!   server's final state;
//! - no consumer gets an add for a key it holds, nor an update or delete for a key it does not
//!   hold; an update's `old` is the object the consumer holds; every object it sees is a version
//!   the server really wrote, and per key versions only move forward;
//! - deletions are real. A plain delete carries the server's deletion of that very incarnation
//!   (same uid, the deletion's resourceVersion). A `DeletedFinalStateUnknown` tombstone is
//!   legitimate exactly when it carries the object the consumer held for that key and the
//!   server deleted that incarnation (same uid) at some point, i.e. at a version after the one
//!   the consumer held; the key may have been re-created since, in which case the consumer
//!   must see the new incarnation as a separate add;
//! - adds flagged `is_in_initial_list` come before every other add; an update whose old and new
//!   objects are the same version is a resync (one handler asks for resyncs in some schedules),
//!   and every registration reports `has_synced`;
//! - nothing panicked (the informer task, handler threads, the test itself).
//!
//! Schedules alternate between the two FIFO modes (`FifoMode::DeltaFifo` for even seeds,
//! `FifoMode::InOrder` for odd ones); every check above holds in both. With the `compact`
//! feature, the seed's second bit picks the cache storage as well (`CacheStorage::Compact`, with
//! few hot objects and a small dictionary sample so that decoding and training happen, when it
//! is set), so all four combinations run in every batch of schedules.
//!
//! A failure prints its seed (a panic that something caught, in a handler or a spawned task,
//! prints the seeds of the schedules running at the time). Replay one schedule with
//!
//! ```text
//! KUBE_INFORMER_CHAOS_SEED=<seed> cargo test --all-features --test chaos -- --nocapture
//! ```
//!
//! (the same writes and faults in the same order; thread and socket timing still varies, so a
//! timing-dependent failure may need a few runs). CI runs a bounded number of schedules from a
//! fresh random base seed; a long soak runs thousands:
//!
//! ```text
//! KUBE_INFORMER_CHAOS_SCHEDULES=5000 cargo test --release --all-features --test chaos -- --nocapture
//! ```
//!
//! `KUBE_INFORMER_CHAOS_PARALLEL` (default 4) sets how many schedules run at once, each with
//! its own server and informer.
#![cfg(feature = "testing")]

mod informer_support;

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    panic::AssertUnwindSafe,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube_informer::{
    ApiListerWatcher, DeltaObject, FifoMode, InformerConfig, InformerEvent, ReflectorConfig,
    ResourceEventHandler, testing::FakeApiServer,
};
use parking_lot::Mutex;

use informer_support::{Harness, cache_state, cm, diff, eventually, fast_backoff, key, rv};

/// Default number of schedules: sized to about two minutes in a debug build on two cores.
const DEFAULT_SCHEDULES: usize = 400;
const DEFAULT_PARALLEL: usize = 4;
/// Names per namespace: few enough that deletes and re-creates of one key are common.
const NAMES: usize = 10;
const WRITERS: usize = 2;

fn env_usize(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Every panic on any thread, so a panic swallowed by a handler thread or a spawned task still
/// fails the test.
static PANICS: Mutex<Vec<String>> = Mutex::new(Vec::new());
/// The seeds of the schedules running now: a swallowed panic cannot tell which schedule it
/// belongs to, so it names these, the candidates to replay.
static RUNNING: Mutex<BTreeSet<u64>> = Mutex::new(BTreeSet::new());

fn install_panic_recorder() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let thread = std::thread::current().name().unwrap_or("?").to_owned();
        let running = RUNNING.lock().clone();
        PANICS.lock().push(format!(
            "thread {thread}, schedule seed(s) {running:?} running: {info}"
        ));
        previous(info);
    }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_schedules_keep_cache_and_handlers_equal_to_the_server() {
    install_panic_recorder();
    let replay_one = env_u64("KUBE_INFORMER_CHAOS_SEED");
    let seeds: Vec<u64> = match replay_one {
        Some(seed) => vec![seed],
        None => {
            let n = env_usize("KUBE_INFORMER_CHAOS_SCHEDULES").unwrap_or(DEFAULT_SCHEDULES);
            let base = fastrand::u64(..u64::MAX / 2);
            (0..n as u64).map(|i| base + i).collect()
        }
    };
    let parallel = env_usize("KUBE_INFORMER_CHAOS_PARALLEL")
        .unwrap_or(DEFAULT_PARALLEL)
        .max(1);
    eprintln!(
        "chaos: {} schedule(s) from seed {}, {parallel} at a time",
        seeds.len(),
        seeds[0]
    );
    let started = Instant::now();
    let totals = Arc::new(Totals::default());
    let mut pending = seeds.into_iter();
    let mut running = futures::stream::FuturesUnordered::new();
    loop {
        while running.len() < parallel {
            let Some(seed) = pending.next() else { break };
            let totals = totals.clone();
            running.push(tokio::spawn(async move {
                RUNNING.lock().insert(seed);
                let outcome = tokio::time::timeout(
                    Duration::from_secs(120),
                    AssertUnwindSafe(run_schedule(seed, &totals)).catch_unwind(),
                )
                .await;
                RUNNING.lock().remove(&seed);
                (seed, outcome)
            }));
        }
        let Some(done) = running.next().await else {
            break;
        };
        let (seed, outcome) = done.expect("schedule task");
        let failure = match outcome {
            Err(_) => Some("no end within 120 s, likely deadlocked".to_owned()),
            Ok(Err(panic)) => Some(
                panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_else(|| "non-string panic".into()),
            ),
            Ok(Ok(())) => None,
        };
        if let Some(failure) = failure {
            panic!(
                "chaos schedule with seed {seed} failed: {failure}\n\
                 replay: KUBE_INFORMER_CHAOS_SEED={seed} cargo test --all-features --test chaos -- --nocapture"
            );
        }
        // A panic that something caught (a handler's, a server or informer task's) did not fail
        // its schedule: stop at once rather than after thousands more, and name the seeds.
        let panics = PANICS.lock().clone();
        assert!(
            panics.is_empty(),
            "panics during the run: {panics:#?}\n\
             replay each seed named there: KUBE_INFORMER_CHAOS_SEED=<seed> cargo test --all-features --test chaos -- --nocapture"
        );
    }
    eprintln!(
        "chaos: {} schedules, {} writes, {} faults, {} watch errors reported, {} lists, \
         {} notifications checked ({} tombstones, {} resyncs) in {:?}",
        totals.schedules.load(Ordering::Relaxed),
        totals.writes.load(Ordering::Relaxed),
        totals.faults.load(Ordering::Relaxed),
        totals.errors.load(Ordering::Relaxed),
        totals.lists.load(Ordering::Relaxed),
        totals.notifications.load(Ordering::Relaxed),
        totals.tombstones.load(Ordering::Relaxed),
        totals.resyncs.load(Ordering::Relaxed),
        started.elapsed()
    );
    // A sanity check of the whole run, not of one schedule: some schedules draw only faults
    // that report no watch error (bookmarks, compactions), so a replay of one seed skips it.
    assert!(
        replay_one.is_some() || totals.errors.load(Ordering::Relaxed) > 0,
        "no fault ever reached the watch-error handler"
    );
}

#[derive(Default)]
struct Totals {
    schedules: AtomicUsize,
    writes: AtomicUsize,
    faults: AtomicUsize,
    errors: AtomicUsize,
    notifications: AtomicUsize,
    tombstones: AtomicUsize,
    resyncs: AtomicUsize,
    lists: AtomicUsize,
}

/// What the server really did, recorded by the writers.
#[derive(Default)]
struct Truth {
    /// Every `(uid, resourceVersion)` the server stored.
    versions: HashSet<(String, u64)>,
    /// The deletion resourceVersion of every deleted incarnation, by uid.
    deleted: HashMap<String, u64>,
}

fn uid(c: &ConfigMap) -> String {
    c.metadata.uid.clone().unwrap_or_default()
}

impl Truth {
    fn stored(&mut self, c: &ConfigMap) {
        self.versions.insert((uid(c), rv(c)));
    }
}

/// One consumer's notifications, in the order it got them.
type Log = Arc<Mutex<Vec<InformerEvent<ConfigMap>>>>;

/// A handler that records every call, optionally pausing now and then like a slow consumer.
struct Recorder {
    log: Log,
    slow: Option<fastrand::Rng>,
}

impl Recorder {
    fn push(&mut self, ev: InformerEvent<ConfigMap>) {
        self.log.lock().push(ev);
        if let Some(rng) = &mut self.slow
            && rng.u8(..10) == 0
        {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl ResourceEventHandler<ConfigMap> for Recorder {
    fn on_add(&mut self, obj: &Arc<ConfigMap>, is_in_initial_list: bool) {
        self.push(InformerEvent::Add {
            obj: obj.clone(),
            is_in_initial_list,
        });
    }
    fn on_update(&mut self, old: &Arc<ConfigMap>, new: &Arc<ConfigMap>) {
        self.push(InformerEvent::Update {
            old: old.clone(),
            new: new.clone(),
        });
    }
    fn on_delete(&mut self, obj: &DeltaObject<ConfigMap>) {
        self.push(InformerEvent::Delete(obj.clone()));
    }
}

/// Replays a consumer's log, checking each call against what it already had and what the
/// server did. `Err` is a violation (permanent); `Ok` is the reconstructed state.
fn replay(
    events: &[InformerEvent<ConfigMap>],
    truth: &Truth,
) -> Result<BTreeMap<String, ConfigMap>, String> {
    let mut model: BTreeMap<String, Arc<ConfigMap>> = BTreeMap::new();
    let mut last_rv: HashMap<String, u64> = HashMap::new();
    let mut non_initial_add_seen = false;
    let real = |c: &ConfigMap, what: &str| -> Result<(), String> {
        if truth.versions.contains(&(uid(c), rv(c))) {
            Ok(())
        } else {
            Err(format!(
                "{what} of {}@{} (uid {}): a version the server never stored",
                key(c),
                rv(c),
                uid(c)
            ))
        }
    };
    let forward =
        |last_rv: &HashMap<String, u64>, k: &str, c: &ConfigMap, what: &str| match last_rv.get(k) {
            Some(&last) if rv(c) <= last => Err(format!(
                "{what} of {k}@{} after having seen @{last}: went back in time",
                rv(c)
            )),
            _ => Ok(()),
        };
    for (i, ev) in events.iter().enumerate() {
        let at = |e: String| format!("notification #{i}: {e}");
        match ev {
            InformerEvent::Add {
                obj,
                is_in_initial_list,
            } => {
                let k = key(obj);
                if model.contains_key(&k) {
                    return Err(at(format!("add for {k}, which the consumer already has")));
                }
                if *is_in_initial_list && non_initial_add_seen {
                    return Err(at(format!("initial-list add of {k} after a live add")));
                }
                non_initial_add_seen |= !is_in_initial_list;
                real(obj, "add").map_err(at)?;
                forward(&last_rv, &k, obj, "add").map_err(at)?;
                last_rv.insert(k.clone(), rv(obj));
                model.insert(k, obj.clone());
            }
            InformerEvent::Update { old, new } => {
                let k = key(new);
                let Some(had) = model.get(&k) else {
                    return Err(at(format!(
                        "update for {k}, which the consumer does not have"
                    )));
                };
                if had != old {
                    return Err(at(format!(
                        "update of {k}: old is @{} but the consumer has @{}",
                        rv(old),
                        rv(had)
                    )));
                }
                real(new, "update").map_err(at)?;
                // A resync re-delivers the held object unchanged; anything else moves forward.
                if !(rv(new) == rv(old) && new == old) {
                    forward(&last_rv, &k, new, "update").map_err(at)?;
                }
                last_rv.insert(k.clone(), rv(new));
                model.insert(k, new.clone());
            }
            InformerEvent::Delete(DeltaObject::Object(obj)) => {
                let k = key(obj);
                let Some(had) = model.remove(&k) else {
                    return Err(at(format!(
                        "delete for {k}, which the consumer does not have"
                    )));
                };
                if uid(&had) != uid(obj) {
                    return Err(at(format!(
                        "delete of {k}: another incarnation than the one held"
                    )));
                }
                if truth.deleted.get(&uid(obj)) != Some(&rv(obj)) {
                    return Err(at(format!(
                        "delete of {k}@{}: the server did not delete it at that version (deleted at {:?})",
                        rv(obj),
                        truth.deleted.get(&uid(obj))
                    )));
                }
                last_rv.insert(k, rv(obj));
            }
            InformerEvent::Delete(DeltaObject::DeletedFinalStateUnknown(t)) => {
                let k = t.key.to_string();
                let Some(had) = model.remove(&k) else {
                    return Err(at(format!(
                        "tombstone for {k}, which the consumer does not have"
                    )));
                };
                if had != t.obj {
                    return Err(at(format!(
                        "tombstone for {k} carries @{} but the consumer had @{}",
                        rv(&t.obj),
                        rv(&had)
                    )));
                }
                match truth.deleted.get(&uid(&had)) {
                    Some(&d) if d > rv(&had) => {}
                    other => {
                        return Err(at(format!(
                            "tombstone for {k}@{} (uid {}): that incarnation was not deleted after it (deleted at {other:?})",
                            rv(&had),
                            uid(&had)
                        )));
                    }
                }
            }
        }
    }
    Ok(model.into_iter().map(|(k, v)| (k, (*v).clone())).collect())
}

/// Random settings of one schedule.
#[derive(Debug)]
struct Setup {
    page_size: u32,
    streaming_list: bool,
    watch_list_supported: bool,
    history_limit: Option<usize>,
    resync: bool,
    watcher_capacity: usize,
    initial_objects: usize,
    writes_per_writer: usize,
    faults: usize,
}

impl Setup {
    fn draw(rng: &mut fastrand::Rng) -> Self {
        Self {
            page_size: [500, 3, 7][rng.usize(..3)],
            streaming_list: rng.bool(),
            watch_list_supported: rng.u8(..4) != 0,
            history_limit: rng.bool().then(|| rng.usize(10..80)),
            resync: rng.u8(..4) == 0,
            // Small queues get a lagging watch cut off, as the watch cache does.
            watcher_capacity: if rng.bool() { 1024 } else { rng.usize(2..32) },
            initial_objects: rng.usize(0..2 * NAMES),
            writes_per_writer: rng.usize(20..150),
            faults: rng.usize(2..12),
        }
    }
}

/// The FIFO mode of a schedule: from the seed's low bit, so both modes run in every batch of
/// schedules and a seed replays in its own mode (and old seeds keep their schedule).
fn fifo_mode_of(seed: u64) -> FifoMode {
    if seed.is_multiple_of(2) {
        FifoMode::DeltaFifo
    } else {
        FifoMode::InOrder
    }
}

/// The cache storage of a schedule: from the seed's second bit (with the `compact` feature).
fn cache_storage_of(seed: u64) -> kube_informer::CacheStorage {
    #[cfg(feature = "compact")]
    if seed & 2 != 0 {
        return kube_informer::CacheStorage::Compact(
            kube_informer::CompactConfig::default()
                .hot_objects(8)
                .dictionary_samples(50),
        );
    }
    let _ = seed;
    kube_informer::CacheStorage::Decoded
}

async fn run_schedule(seed: u64, totals: &Totals) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let setup = Setup::draw(&mut rng);
    let server = Arc::new(FakeApiServer::start_with_core().await.unwrap());
    server.set_watch_list_supported(setup.watch_list_supported);
    server.set_history_limit(setup.history_limit);
    server.set_watcher_capacity(setup.watcher_capacity);
    // Periodic bookmarks keep healthy watches from tripping the short idle timeout below.
    server.set_bookmark_interval(Some(Duration::from_millis(100)));
    let truth = Arc::new(Mutex::new(Truth::default()));

    let mut state: Vec<BTreeMap<String, ConfigMap>> = vec![BTreeMap::new(); WRITERS];
    for _ in 0..setup.initial_objects {
        let w = rng.usize(..WRITERS);
        let name = format!("cm-{}", rng.usize(..NAMES));
        if state[w].contains_key(&name) {
            continue;
        }
        let c = server
            .create(&cm(&format!("ns-{w}"), &name, "seed"))
            .unwrap();
        truth.lock().stored(&c);
        state[w].insert(name, c);
    }

    let config = ReflectorConfig::default()
        .backoff(fast_backoff())
        .page_size(setup.page_size)
        .streaming_list(setup.streaming_list)
        .min_watch_timeout(Duration::from_secs(1))
        .idle_timeout(Duration::from_millis(400));
    // Resyncs come at most once a second (client-go `minimumResyncPeriod`); handlers that do
    // not set their own period (the subscriber, the late handler) take the informer's.
    let resync = if setup.resync {
        Duration::from_secs(1)
    } else {
        Duration::ZERO
    };
    let mut h = Harness::with_config(
        ApiListerWatcher::new(Api::<ConfigMap>::all(server.client())),
        InformerConfig::default()
            .reflector(config)
            .resync_period(resync)
            .fifo_mode(fifo_mode_of(seed))
            .cache_storage(cache_storage_of(seed)),
    );
    let mut logs: Vec<(String, Log)> = Vec::new();
    let mut registrations = Vec::new();
    // handler-2 takes resyncs when the schedule has them, so they interleave with relists
    // and watch events; the others opt out.
    for (name, slow, period) in [
        ("handler-0", false, Duration::ZERO),
        ("handler-1-slow", true, Duration::ZERO),
        ("handler-2", false, resync),
    ] {
        let log = Log::default();
        let recorder = Recorder {
            log: log.clone(),
            slow: slow.then(|| fastrand::Rng::with_seed(seed ^ 0x5eed)),
        };
        registrations.push(
            h.informer
                .add_event_handler_with_resync_period(recorder, period)
                .unwrap(),
        );
        logs.push((name.to_owned(), log));
    }
    let stream_log = Log::default();
    let mut stream = h.informer.subscribe().unwrap();
    let consumer = {
        let log = stream_log.clone();
        tokio::spawn(async move {
            while let Some(ev) = stream.next().await {
                log.lock().push(ev);
            }
        })
    };
    logs.push(("subscribe-stream".to_owned(), stream_log));
    h.start();

    // Writers, each over its own namespace so its view of the server is exact.
    let writers: Vec<_> = state
        .into_iter()
        .enumerate()
        .map(|(w, objects)| {
            let mut rng = fastrand::Rng::with_seed(seed.wrapping_add(1 + w as u64));
            let server = server.clone();
            let truth = truth.clone();
            let n = setup.writes_per_writer;
            // Resyncs come at most once a second: schedules that ask for them write slower,
            // so that several resyncs fall among the writes and faults.
            let pace = if setup.resync { 10 } else { 1 };
            tokio::spawn(
                async move { write_load(w, objects, n, pace, &mut rng, &server, &truth).await },
            )
        })
        .collect();

    // Faults, and a handler that joins while the informer runs.
    let late_at = rng.usize(..setup.faults.max(1));
    let mut late_log = None;
    let pace = if setup.resync { 5 } else { 1 };
    for i in 0..setup.faults {
        tokio::time::sleep(Duration::from_millis(pace * rng.u64(5..60))).await;
        if i == late_at {
            let log = Log::default();
            registrations.push(
                h.informer
                    .add_event_handler(Recorder {
                        log: log.clone(),
                        slow: None,
                    })
                    .unwrap(),
            );
            late_log = Some(log);
        }
        inject_fault(&mut rng, &server).await;
    }
    logs.extend(late_log.map(|l| ("late-handler".to_owned(), l)));
    let mut writes = 0;
    for w in writers {
        writes += w.await.expect("writer task");
    }

    // Heal the server and wait for everyone to catch up.
    server.faults().clear();
    eventually(
        &format!("seed {seed}: cache equals server"),
        Duration::from_secs(30),
        || {
            diff(
                &informer_support::server_state(&server),
                &cache_state(&h.informer),
            )
        },
    )
    .await;
    let final_state = informer_support::server_state(&server);
    for (name, log) in &logs {
        eventually(
            &format!("seed {seed}: {name} replays to the server state"),
            Duration::from_secs(30),
            || {
                let events = log.lock().clone();
                match replay(&events, &truth.lock()) {
                    Err(violation) => panic!("seed {seed}: {name}: {violation} ({setup:?})"),
                    Ok(model) => diff(&final_state, &model),
                }
            },
        )
        .await;
    }
    for (i, r) in registrations.iter().enumerate() {
        assert!(
            r.has_synced(),
            "seed {seed}: registration {i} has not synced"
        );
    }
    totals.errors.fetch_add(h.errors().len(), Ordering::Relaxed);
    let tombstones = logs
        .iter()
        .flat_map(|(_, l)| l.lock().clone())
        .filter(|e| matches!(e, InformerEvent::Delete(d) if d.is_tombstone()))
        .count();
    totals.tombstones.fetch_add(tombstones, Ordering::Relaxed);
    let resyncs = logs
        .iter()
        .flat_map(|(_, l)| l.lock().clone())
        .filter(|e| matches!(e, InformerEvent::Update { old, new } if old == new))
        .count();
    totals.resyncs.fetch_add(resyncs, Ordering::Relaxed);
    let lists = server
        .requests()
        .iter()
        .filter(|r| r.verb == kube_informer::testing::Verb::List)
        .count();
    totals.lists.fetch_add(lists, Ordering::Relaxed);
    totals.notifications.fetch_add(
        logs.iter().map(|(_, l)| l.lock().len()).sum(),
        Ordering::Relaxed,
    );
    h.stop().await;
    tokio::time::timeout(Duration::from_secs(10), consumer)
        .await
        .expect("subscriber did not end with the informer: likely deadlocked")
        .expect("subscriber task panicked");
    totals.schedules.fetch_add(1, Ordering::Relaxed);
    totals.writes.fetch_add(writes, Ordering::Relaxed);
    totals.faults.fetch_add(setup.faults, Ordering::Relaxed);
}

/// `n` random creates, updates and deletes in namespace `ns-{w}`, pauses stretched by `pace`;
/// returns how many were made.
async fn write_load(
    w: usize,
    mut objects: BTreeMap<String, ConfigMap>,
    n: usize,
    pace: u64,
    rng: &mut fastrand::Rng,
    server: &FakeApiServer,
    truth: &Mutex<Truth>,
) -> usize {
    let ns = format!("ns-{w}");
    for i in 0..n {
        let name = format!("cm-{}", rng.usize(..NAMES));
        match objects.get(&name).cloned() {
            None => {
                let c = server.create(&cm(&ns, &name, &i.to_string())).unwrap();
                truth.lock().stored(&c);
                objects.insert(name, c);
            }
            Some(mut c) if rng.u8(..10) < 6 => {
                c.data = Some([("v".to_owned(), i.to_string())].into());
                let c = server.update(&c).unwrap();
                truth.lock().stored(&c);
                objects.insert(name, c);
            }
            Some(_) => {
                let gone = server.delete::<ConfigMap>(Some(&ns), &name).unwrap();
                truth.lock().deleted.insert(uid(&gone), rv(&gone));
                objects.remove(&name);
            }
        }
        match rng.u8(..10) {
            0..=5 => tokio::task::yield_now().await,
            6..=8 => tokio::time::sleep(Duration::from_millis(pace * rng.u64(..3))).await,
            _ => tokio::time::sleep(Duration::from_millis(pace * rng.u64(5..20))).await,
        }
    }
    n
}

async fn inject_fault(rng: &mut fastrand::Rng, server: &FakeApiServer) {
    let faults = server.faults();
    match rng.u8(..12) {
        0 => faults.drop_all_watches(),
        1 => faults.restart(),
        2 => faults.fail_next(rng.usize(1..4), 429),
        3 => faults.fail_next(rng.usize(1..4), 500),
        // Forbidden for a while, then recovered.
        4 => faults.fail_next(rng.usize(1..4), 403),
        5 => faults.fail_next(1, 410),
        6 => faults.malformed_line_next(),
        7 => {
            // Sometimes shorter, sometimes longer than the idle timeout.
            faults.stall_watches();
            tokio::time::sleep(Duration::from_millis(rng.u64(20..700))).await;
            faults.unstall_watches();
        }
        8 => server.compact(server.current_resource_version()),
        9 => {
            // Make the informer's last version expire: it misses writes, they get compacted,
            // and its watch breaks.
            faults.stall_watches();
            tokio::time::sleep(Duration::from_millis(rng.u64(5..50))).await;
            server.compact(server.current_resource_version());
            faults.drop_all_watches();
            faults.unstall_watches();
        }
        10 => {
            faults.drop_watches_after(rng.usize(1..5));
            tokio::time::sleep(Duration::from_millis(rng.u64(10..100))).await;
            faults.clear();
        }
        _ => server.bookmark(),
    }
}
