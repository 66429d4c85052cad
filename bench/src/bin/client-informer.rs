//! Benchmark client: this crate's `SharedIndexInformer<Pod>` with no-op counting handlers, in
//! either FIFO mode (`--fifo delta|in-order`), managedFields kept, stripped by a transform
//! (`--strip true`) or by the decode-time projection (`--project true`), either cache storage
//! (`--cache decoded|compact`; the compact cache's decode count is reported as `decodes`);
//! `--handler-sleep-us n` makes each handler call that slow; `--shard i/n` caches one shard (the
//! replay server needs `--shards n`); `--wire json|protobuf` picks the encoding (default: the
//! crate's, protobuf for Pods).
//! See `kube_informer_bench::measure::ClientArgs` for the options and `bench-runner` for the
//! scenarios.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::Duration,
};

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube_informer::{
    InformerConfig, Projection, ResourceEventHandlerFuncs, SharedIndexInformer,
    reflector::ApiListerWatcher,
};
use kube_informer_bench::{
    Meter, http_get, http_get_body, kube_client, kubeconfig_client, measure::ClientArgs,
};
use tokio::sync::Notify;

#[tokio::main]
async fn main() {
    let mut meter = Meter::new();
    let args = ClientArgs::parse();
    let client = match &args.kubeconfig {
        Some(path) => kubeconfig_client(path).await,
        None => kube_client(&args.addr),
    };
    let mut lw = ApiListerWatcher::new(Api::<Pod>::all(client));
    if let Some(wire) = args.wire {
        lw = lw.wire_format(wire);
    }
    let mut config = InformerConfig::default()
        .fifo_mode(args.fifo)
        .cache_storage(args.cache.clone());
    if args.project {
        config = config.projection(Projection::strip_managed_fields());
    }
    if let Some(shard) = args.shard.clone() {
        config.reflector = config.reflector.shard(shard);
    }
    let informer = SharedIndexInformer::new(lw, config);
    if args.strip {
        informer
            .set_transform(kube_informer::strip_managed_fields_transform())
            .expect("transform");
    }

    // Each handler counts its updates; the last one to reach the target wakes main. In a
    // relist only updates whose resourceVersion changed count: without a resync period the
    // informer (as client-go's) also delivers every unchanged relisted object as an update, so
    // counting those would stop after about a tenth of the relist's notifications. The
    // changed Pods are spread over the list, so the last of them is handled near its end
    // (kube-runtime stops at the relist's `InitDone`).
    let target = match args.mode.as_str() {
        "watch" => args.events,
        "relist" => args.changed,
        _ => u64::MAX,
    };
    let changed_only = args.mode == "relist";
    let done = Arc::new(AtomicUsize::new(0));
    let all_done = Arc::new(Notify::new());
    let handlers = args.handlers;
    let sleep = Duration::from_micros(args.handler_sleep_us);
    let mut registrations = Vec::new();
    // Adds each handler was told of, to see when every handler has had the listed objects.
    let mut added = Vec::new();
    for _ in 0..handlers {
        let count = AtomicU64::new(0);
        let adds = Arc::new(AtomicU64::new(0));
        added.push(adds.clone());
        let (done, all_done) = (done.clone(), all_done.clone());
        let registration = informer
            .add_event_handler(
                ResourceEventHandlerFuncs::new()
                    .on_add(move |_obj, _initial| {
                        if !sleep.is_zero() {
                            std::thread::sleep(sleep);
                        }
                        adds.fetch_add(1, Ordering::Relaxed);
                    })
                    .on_update(move |old: &Arc<Pod>, new: &Arc<Pod>| {
                        if !sleep.is_zero() {
                            std::thread::sleep(sleep);
                        }
                        if changed_only
                            && old.metadata.resource_version == new.metadata.resource_version
                        {
                            return;
                        }
                        if count.fetch_add(1, Ordering::Relaxed) + 1 == target
                            && done.fetch_add(1, Ordering::AcqRel) + 1 == handlers
                        {
                            all_done.notify_one();
                        }
                    }),
            )
            .expect("handler");
        registrations.push(registration);
    }
    // `BENCH_SAMPLE_MS=n`: every n ms, print RSS and the first handler's backlog to stderr, to
    // see where memory piles up (not used by the runner).
    if let Some(ms) = std::env::var("BENCH_SAMPLE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        let reg = registrations.swap_remove(0);
        std::thread::spawn(move || {
            loop {
                std::thread::sleep(Duration::from_millis(ms));
                eprintln!(
                    "sample rss_kb={} handler_pending={}",
                    Meter::status_kb("VmRSS"),
                    reg.pending()
                );
            }
        });
    }
    informer.start();
    while !informer.has_synced() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let synced = meter.put_synced();
    let objects = informer.indexer().len() as u64;
    meter.put("objects", objects);
    // Synced means the informer has handed the list to its handlers' buffers (and, in order
    // with a Compact cache, not decoded it for them yet); this is when every handler has been
    // called for every listed object (polled every millisecond, as client-go-bench does).
    for adds in &added {
        while adds.load(Ordering::Relaxed) < objects {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    meter.put_handled();
    meter.put(
        "in_order",
        u8::from(informer.fifo_mode() == kube_informer::FifoMode::InOrder),
    );
    match args.mode.as_str() {
        "watch" => {
            // Releases the replay server's watch events if it holds them (`--gate-watch`). If
            // it did, no event was sent before this call, so the watch phase is timed from it
            // (not from `synced`: the time until every handler had the list is the sync's);
            // if not, events have flowed since the sync and the phase starts there.
            let mark = meter.mark();
            let gated = http_get_body(&args.addr, "/start-watch").expect("start watch") == "gated";
            all_done.notified().await;
            meter.put_watch(args.events, if gated { mark } else { synced }, gated);
        }
        "relist" => {
            tokio::time::sleep(Duration::from_secs(1)).await;
            meter.put("steady_kb", Meter::status_kb("VmRSS"));
            Meter::reset_hwm();
            let t0 = meter.wall();
            http_get(&args.addr, "/relist").expect("trigger relist");
            all_done.notified().await;
            meter.put("relist_s", format!("{:.4}", meter.wall() - t0));
        }
        _ => {}
    }
    let stats = informer.indexer().stats();
    meter.put("decodes", stats.decodes);
    // Compact only: compressed bytes held per cached object, how objects reached the cache
    // (and how many listed JSON objects were checked rather than decoded before it), and how
    // many dictionaries were trained.
    let cached = informer.indexer().len().max(1) as u64;
    meter.put("stored_b_per_obj", stats.stored_bytes / cached);
    meter.put("packed_from_wire", stats.packed_from_wire);
    meter.put("checked", stats.checked);
    meter.put("dictionary_trainings", stats.dictionary_trainings);
    // `BENCH_TRIM=1`: a second after the scenario, return freed heap to the OS (glibc
    // `malloc_trim`) and report the RSS left: what the cache itself holds, without the pages
    // glibc keeps from the sync's transient objects.
    if std::env::var_os("BENCH_TRIM").is_some() {
        tokio::time::sleep(Duration::from_secs(1)).await;
        // SAFETY: malloc_trim only releases free memory of glibc's heap.
        unsafe { libc::malloc_trim(0) };
        meter.put("trimmed_kb", Meter::status_kb("VmRSS"));
    }
    meter.put("final_kb", Meter::status_kb("VmRSS"));
    meter.finish();
    std::process::exit(0);
}
