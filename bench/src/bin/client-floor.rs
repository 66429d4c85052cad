//! The floor: fetch the list bytes (one GET through a kube `Client`, like the other clients) and
//! decode them with `serde_json` into `k8s_openapi::List<Pod>`; nothing else. Reports the same
//! `synced_s`/`cpu_sync_s` (fetch + decode) plus `decode_cpu_s` (decode alone).

use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::Pod;
use kube_informer_bench::{Meter, kube_client, measure::ClientArgs};

#[tokio::main]
async fn main() {
    let mut meter = Meter::new();
    let args = ClientArgs::parse();
    let client = kube_client(&args.addr);
    let req = http::Request::get("/api/v1/pods?limit=500&resourceVersion=0")
        .header(http::header::ACCEPT, "application/json")
        .body(kube::client::Body::empty())
        .expect("request");
    let body = client
        .send(req)
        .await
        .expect("list")
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    let cpu0 = Meter::cpu();
    let list: k8s_openapi::List<Pod> = serde_json::from_slice(&body).expect("decode");
    let cpu1 = Meter::cpu();
    meter.put("synced_s", format!("{:.4}", meter.wall()));
    meter.put("cpu_sync_s", format!("{cpu1:.4}"));
    meter.put("decode_cpu_s", format!("{:.4}", cpu1 - cpu0));
    meter.put("objects", list.items.len());
    meter.finish();
    std::process::exit(0);
}
