//! S6: memory and reads of a cache of N podgen Pods, in `CacheStorage::Decoded` and
//! `CacheStorage::Compact` mode (issue #12).
//!
//! ```text
//! cargo run --release --bin s6-reads -- [pods=50000] [samples=20000] [managed=1]
//! ```
//!
//! client-go's side: `s6-reads dump /tmp/pods.jsonl [pods] [managed]` writes the same Pods,
//! and `cd bench/client-go && go run ./s6 -pods /tmp/pods.jsonl` measures its indexer and
//! lister the same way.
//!
//! - **heap per Pod**: a counting global allocator measures the bytes the indexer holds once
//!   every Pod is stored and nothing else holds any (live bytes after − before, ÷ N);
//! - **get by key**, one `get_by_key` timed at a time, p50/p99: *cold* is a random key of all N
//!   (in Compact mode almost never among the hot objects: a decode), *hot* a random key of 200
//!   read just before (kept by the hot ring);
//! - the last mode fills a Compact cache the way an informer does against kube-apiserver: a cold
//!   sync from the fake API server in protobuf (its default), so the cache holds the compressed
//!   protobuf bytes the server sent and a cold `get` is one direct protobuf decode (`S6_ONLY=...`
//!   runs the modes whose name contains it);
//! - **namespaced list** (`Lister::namespaced(ns).list`, 2,500 Pods: podgen spreads Pods over 20
//!   namespaces) and **by_index returning 1,000** (an index on the Pod's ordinal / 1000), cold.

use std::{
    alloc::{GlobalAlloc, Layout, System},
    sync::{
        Arc,
        atomic::{AtomicIsize, Ordering::Relaxed},
    },
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::Pod;
use kube::core::Selector;
use kube_informer::{Cache, CacheStorage, CompactConfig, Indexer, Indexers, Lister, index_fn};
use kube_informer_bench::podgen::pod_json;

/// Counts live heap bytes.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Relaxed);
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as isize - layout.size() as isize, Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

fn report(what: &str, mut times: Vec<Duration>) {
    times.sort();
    println!(
        "  {what:<34} p50 {:>9.2} µs   p99 {:>9.2} µs   (n={})",
        percentile(&times, 0.5),
        percentile(&times, 0.99),
        times.len()
    );
}

/// The Pod's ordinal: podgen names end in `-<index>`.
fn ordinal(p: &Pod) -> usize {
    p.metadata
        .name
        .as_deref()
        .and_then(|n| n.rsplit('-').next())
        .and_then(|i| i.parse().ok())
        .unwrap_or(0)
}

/// Pod `i` of the fixture, as JSON.
fn fixture_pod(i: usize, managed: bool) -> serde_json::Value {
    let mut v = pod_json(7, i, &(1000 + i).to_string());
    if !managed {
        v["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("managedFields");
    }
    v
}

fn bucket() -> Indexers<Pod> {
    Indexers::from([(
        "bucket".to_owned(),
        index_fn(|p: &Pod| Some((ordinal(p) / 1000).to_string())),
    )])
}

/// A store filled by hand: each Pod decoded from its JSON, as the informer does, and handed
/// over, so the store holds the only `Arc` (a Compact cache then holds it as compressed JSON).
fn fill(storage: CacheStorage, pods: usize, managed: bool) -> (Cache<Pod>, Box<dyn std::any::Any>) {
    let store = Indexer::<Pod>::with_storage(storage);
    store.add_indexers(bucket()).unwrap();
    for i in 0..pods {
        let bytes = serde_json::to_vec(&fixture_pod(i, managed)).unwrap();
        let pod: Pod = serde_json::from_slice(&bytes).unwrap();
        let key = kube_informer::key_of(&pod).unwrap();
        store.insert(key, Arc::new(pod));
    }
    // The dictionary trains on a thread; let it finish and the first objects be re-compressed,
    // as the informer's next writes would.
    std::thread::sleep(Duration::from_secs(1));
    for key in store.list_keys().into_iter().take(2000) {
        if let Some(p) = store.get_by_key(key.as_str()) {
            store.insert(key, p);
        }
    }
    (store.reader(), Box::new(store))
}

/// An informer's cache after a cold sync from the fake API server, listed in protobuf (its
/// default): a Compact cache keeps each Pod as the compressed protobuf bytes the server sent,
/// as against a real kube-apiserver.
fn listed(
    storage: CacheStorage,
    pods: usize,
    managed: bool,
) -> (Cache<Pod>, Box<dyn std::any::Any>) {
    use kube_informer::{FactoryConfig, SharedInformerFactory, testing::FakeApiServer};
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (server, factory) = rt.block_on(async {
        let server = FakeApiServer::start_with_core().await.unwrap();
        server.set_protobuf_supported(true);
        for i in 0..pods {
            server.create_value(fixture_pod(i, managed)).unwrap();
        }
        let factory = SharedInformerFactory::new(
            server.client(),
            FactoryConfig::default().cache_storage(storage),
        );
        factory.informer::<Pod>().add_indexers(bucket()).unwrap();
        factory.start();
        assert!(factory.wait_for_cache_sync().await.values().all(|s| *s));
        tokio::time::sleep(Duration::from_secs(1)).await;
        (server, factory)
    });
    let cache = factory.informer::<Pod>().indexer();
    (cache, Box::new((factory, server, rt)))
}

fn run(
    mode: &str,
    storage: CacheStorage,
    pods: usize,
    samples: usize,
    managed: bool,
    from_server: bool,
) {
    let mut rng = fastrand::Rng::with_seed(11);
    let before = LIVE.load(Relaxed);
    let start = Instant::now();
    let (store, keep) = if from_server {
        listed(storage, pods, managed)
    } else {
        fill(storage, pods, managed)
    };
    let load = start.elapsed();
    let keys = store.list_keys();
    let keys_bytes = (keys.capacity() * size_of::<kube_informer::ObjectKey>()) as isize;
    // With the fake server, its copy of the Pods is counted too.
    let held = LIVE.load(Relaxed) - before - keys_bytes;
    let stats = store.stats();
    println!(
        "{mode}: {pods} Pods (managedFields {}), stored in {:.2} s",
        if managed { "kept" } else { "stripped" },
        load.as_secs_f64()
    );
    println!(
        "  heap held by the cache: {:.1} MiB, {:.0} bytes per Pod",
        held as f64 / (1024.0 * 1024.0),
        held as f64 / pods as f64
    );
    if from_server {
        println!(
            "  (heap includes the fake server's copy) packed from the wire: {} of {pods}",
            stats.packed_from_wire
        );
    }
    if stats.encoded_bytes > 0 {
        println!(
            "  compressed {:.0} B/Pod of {:.0} B/Pod encoded (JSON, or protobuf as listed) (ratio {:.1}), dictionaries trained: {}",
            stats.stored_bytes as f64 / pods as f64,
            stats.encoded_bytes as f64 / pods as f64,
            stats.encoded_bytes as f64 / stats.stored_bytes.max(1) as f64,
            stats.dictionary_trainings
        );
    }

    let decodes = store.stats().decodes;
    let cold: Vec<Duration> = (0..samples)
        .map(|_| {
            let key = &keys[rng.usize(..pods)];
            let t = Instant::now();
            let p = store.get_by_key(key.as_str());
            let e = t.elapsed();
            assert!(p.is_some());
            e
        })
        .collect();
    let cold_decodes = store.stats().decodes - decodes;
    report("get_by_key cold", cold);
    let hot_keys: Vec<_> = (0..200).map(|_| keys[rng.usize(..pods)].clone()).collect();
    for k in &hot_keys {
        store.get_by_key(k.as_str());
    }
    let decodes = store.stats().decodes;
    let hot: Vec<Duration> = (0..samples)
        .map(|_| {
            let key = &hot_keys[rng.usize(..hot_keys.len())];
            let t = Instant::now();
            let p = store.get_by_key(key.as_str());
            let e = t.elapsed();
            assert!(p.is_some());
            e
        })
        .collect();
    let hot_decodes = store.stats().decodes - decodes;
    report("get_by_key hot (200 keys)", hot);
    println!("  decodes: cold gets {cold_decodes}, hot gets {hot_decodes}");

    let lister = Lister::new(store.clone());
    let everything = Selector::default();
    let reps = 10;
    let ns_list: Vec<Duration> = (0..reps)
        .map(|r| {
            let ns = format!(
                "{}-{}",
                ["commerce", "platform", "growth", "data", "identity"][r % 5],
                r % 20
            );
            let t = Instant::now();
            let n = lister.namespaced(&ns).list(&everything).len();
            let e = t.elapsed();
            assert_eq!(n, pods / 20);
            e
        })
        .collect();
    report(&format!("namespaced list of {}", pods / 20), ns_list);
    let by_index: Vec<Duration> = (0..reps)
        .map(|r| {
            let t = Instant::now();
            let n = store
                .by_index("bucket", &(r % (pods / 1000)).to_string())
                .unwrap()
                .len();
            let e = t.elapsed();
            assert_eq!(n, 1000);
            e
        })
        .collect();
    report("by_index returning 1,000", by_index);
    drop(store);
    drop(keep);
}

/// `s6-reads dump <path> [pods] [managed]`: the same Pods as JSON lines, for client-go's S6
/// (`bench/client-go/s6`).
fn dump(path: &str, pods: usize, managed: bool) {
    use std::io::Write;
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).expect("create the dump"));
    for i in 0..pods {
        let mut v = pod_json(7, i, &(1000 + i).to_string());
        if !managed {
            v["metadata"]
                .as_object_mut()
                .unwrap()
                .remove("managedFields");
        }
        serde_json::to_writer(&mut out, &v).unwrap();
        out.write_all(b"\n").unwrap();
    }
    out.flush().unwrap();
}

fn main() {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    if raw.first().map(String::as_str) == Some("dump") {
        let path = raw.get(1).expect("s6-reads dump <path> [pods] [managed]");
        let pods = raw.get(2).map_or(50_000, |n| n.parse().expect("pods"));
        let managed = raw.get(3).is_none_or(|m| m != "0");
        return dump(path, pods, managed);
    }
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("numeric argument"))
        .collect();
    let pods = args.first().copied().unwrap_or(50_000);
    let samples = args.get(1).copied().unwrap_or(20_000);
    let managed = args.get(2).copied().unwrap_or(1) != 0;
    println!(
        "size_of::<Pod>() = {} bytes (what a dead Weak would pin)",
        size_of::<Pod>()
    );
    let only = std::env::var("S6_ONLY").unwrap_or_default();
    let want = |mode: &str| only.is_empty() || mode.contains(only.as_str());
    if want("Decoded") {
        run("Decoded", CacheStorage::Decoded, pods, samples, managed, false);
    }
    for hot in [0, CompactConfig::default().hot_objects] {
        let mode = format!("Compact, hot_objects {hot}");
        if want(&mode) {
            let storage = CacheStorage::Compact(CompactConfig::default().hot_objects(hot));
            run(&mode, storage, pods, samples, managed, false);
        }
    }
    // The cache an informer builds from a protobuf list: compressed protobuf, decoded directly.
    let mode = "Compact, hot_objects 0, listed in protobuf";
    if want(mode) {
        let storage = CacheStorage::Compact(CompactConfig::default().hot_objects(0));
        run(mode, storage, pods, samples, managed, true);
    }
}
