//! Slow consumer: one handler sleeping 100 ms per event next to one doing nothing.
//!
//! Measures the fast handler's delivery latency (from the write on the fake API server to the
//! handler call) and how the slow handler's backlog and the process's memory grow, with the
//! sleeping handler on its own thread (`dedicated_thread`, as documented for handlers that
//! block); then the same misused, sharing the informer's handler thread with the fast one; then on
//! a bounded buffer (back-pressure), to show the trade-offs.
//!
//! ```sh
//! cargo bench --bench slow_consumer
//! ```
//! Not a timed assertion anywhere: it prints figures (BENCHMARKS.md records them).

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta};
use kube_informer::{
    ApiListerWatcher, HandlerOptions, InformerConfig, ResourceEventHandlerFuncs,
    SharedIndexInformer, testing::FakeApiServer,
};
use parking_lot::Mutex;

const EVENTS: usize = 2_000;
const RATE_PER_SEC: u64 = 500;
const SLOW_HANDLER_SLEEP: Duration = Duration::from_millis(100);

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx]
}

async fn run(label: &str, events: usize, slow_options: HandlerOptions) {
    let server = FakeApiServer::start_with_core().await.expect("fake server");
    let informer = SharedIndexInformer::new(
        ApiListerWatcher::new(Api::<ConfigMap>::all(server.client())),
        InformerConfig::default(),
    );
    let written: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let latencies: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let (w, l) = (written.clone(), latencies.clone());
    informer
        .add_event_handler(ResourceEventHandlerFuncs::new().on_add(
            move |cm: &Arc<ConfigMap>, _| {
                let name = cm.metadata.name.as_deref().unwrap_or_default();
                if let Some(t) = w.lock().get(name) {
                    l.lock().push(t.elapsed());
                }
            },
        ))
        .unwrap();
    let slow = informer
        .add_event_handler_with_options(
            ResourceEventHandlerFuncs::new()
                .on_add(|_: &Arc<ConfigMap>, _| std::thread::sleep(SLOW_HANDLER_SLEEP)),
            slow_options,
        )
        .unwrap();
    informer.start();
    informer.wait_for_cache_sync().await;
    let rss_before = rss_kib();
    let mut max_backlog = 0;
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / RATE_PER_SEC));
    let started = Instant::now();
    for i in 0..events {
        tick.tick().await;
        let name = format!("cm-{i}");
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some("bench".into()),
                ..Default::default()
            },
            data: Some([("payload".to_owned(), "x".repeat(2048))].into()),
            ..Default::default()
        };
        written.lock().insert(name, Instant::now());
        server.create(&cm).expect("create");
        max_backlog = max_backlog.max(slow.pending());
    }
    // Wait for the fast handler to see every event (bounded mode: as fast as the slow one lets).
    while latencies.lock().len() < events {
        tokio::time::sleep(Duration::from_millis(10)).await;
        max_backlog = max_backlog.max(slow.pending());
    }
    let wrote_for = started.elapsed();
    let rss_after = rss_kib();
    let mut lat = latencies.lock().clone();
    lat.sort();
    println!(
        "{label:<28} events={events:>5} written in {:>6.2?}  fast handler latency p50={:>9.2?} p99={:>9.2?} max={:>9.2?}  \
         slow backlog max={max_backlog:>5}  RSS growth={:>6} KiB",
        wrote_for,
        percentile(&lat, 0.50),
        percentile(&lat, 0.99),
        lat.last().copied().unwrap_or_default(),
        rss_after.saturating_sub(rss_before),
    );
    informer.shutdown().await;
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing: run a tiny smoke
    // version then, so the file stays compiled and working without taking minutes.
    if !std::env::args().any(|a| a == "--bench") {
        println!("slow_consumer: run with `cargo bench --bench slow_consumer`");
        return;
    }
    println!(
        "slow consumer: {EVENTS} ConfigMaps (~2 KiB each) created at {RATE_PER_SEC}/s; one handler sleeps {SLOW_HANDLER_SLEEP:?} per event, one does nothing"
    );
    run(
        "own thread, unbounded",
        EVENTS,
        HandlerOptions::default().dedicated_thread(),
    )
    .await;
    // Misuse: a blocking handler left on the shared handler thread holds the fast handler back,
    // one sleep per event; fewer events keep this run short.
    run("shared thread (misuse)", 100, HandlerOptions::default()).await;
    // Back-pressure paces everyone at the slow handler's 10 events/s once its 100 slots fill:
    // fewer events keep this run short.
    run(
        "bounded_buffer(100)",
        300,
        HandlerOptions::default().bounded_buffer(100),
    )
    .await;
}
