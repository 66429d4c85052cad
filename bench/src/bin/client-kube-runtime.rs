//! Benchmark client: kube-runtime's `watcher` feeding a `reflector` store (kube 5). It has no
//! handlers; events are counted off the reflected stream. Same options as `client-informer`.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api,
    runtime::{WatchStreamExt, reflector, watcher},
};
use kube_informer_bench::{Meter, http_get, kube_client, measure::ClientArgs};

#[tokio::main]
async fn main() {
    let mut meter = Meter::new();
    let args = ClientArgs::parse();
    let client = kube_client(&args.addr);
    let (reader, writer) = reflector::store::<Pod>();
    let strip = args.strip;
    let stream = reflector(
        writer,
        watcher(Api::<Pod>::all(client), watcher::Config::default()).modify(move |pod| {
            if strip {
                pod.metadata.managed_fields = None;
            }
        }),
    );
    let mut stream = std::pin::pin!(stream);
    let mut inits = 0;
    let mut applied = 0u64;
    let (mut synced, mut t_relist) = ((0.0, 0.0), 0.0);
    while let Some(ev) = stream.next().await {
        let ev = match ev {
            Ok(ev) => ev,
            Err(e) => {
                // The 410 of S4 lands here; the watcher relists on its next poll.
                eprintln!("watcher error: {e}");
                continue;
            }
        };
        match ev {
            watcher::Event::InitDone => {
                inits += 1;
                if inits == 1 {
                    synced = meter.put_synced();
                    meter.put("objects", reader.state().len());
                    match args.mode.as_str() {
                        "relist" => {
                            tokio::time::sleep(Duration::from_secs(1)).await;
                            meter.put("steady_kb", Meter::status_kb("VmRSS"));
                            Meter::reset_hwm();
                            t_relist = meter.wall();
                            http_get(&args.addr, "/relist").expect("trigger relist");
                        }
                        "watch" => {}
                        _ => break,
                    }
                } else if args.mode == "relist" {
                    meter.put("relist_s", format!("{:.4}", meter.wall() - t_relist));
                    break;
                }
            }
            watcher::Event::Apply(_) if args.mode == "watch" => {
                applied += 1;
                if applied == args.events {
                    // kube-runtime never calls /start-watch: it only runs against servers
                    // that do not gate (bench-runner leaves it out of the gated variants).
                    meter.put_watch(args.events, synced, false);
                    break;
                }
            }
            _ => {}
        }
    }
    meter.finish();
    std::process::exit(0);
}
