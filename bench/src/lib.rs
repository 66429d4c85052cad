//! Shared pieces of the benchmark binaries: the seeded Pod generator, the wire bodies the replay
//! server serves, and the measurement helpers every Rust client uses to report its own figures.
//!
//! Every client prints one line `RESULT key=value ...` on stdout; `bench-runner` parses it.

use std::{
    io::{Read, Write},
    time::Instant,
};

use serde_json::json;

pub mod measure;
pub mod podgen;

pub use measure::{Meter, parse_args};
pub use podgen::{Fixture, pod_json};

/// The `resourceVersion` of the first list (list A).
pub const LIST_RV: u64 = 1_000_000;
/// The `resourceVersion` of the relist (list B, after the 410).
pub const RELIST_RV: u64 = 3_000_000;

/// A kube `Client` for the replay server at `addr` (`host:port`, plain HTTP).
pub fn kube_client(addr: &str) -> kube::Client {
    let config = kube::Config::new(format!("http://{addr}").parse().expect("server url"));
    kube::Client::try_from(config).expect("kube client")
}

/// A kube `Client` from the kubeconfig file at `path` (its current context), for S5's real
/// kube-apiserver.
pub async fn kubeconfig_client(path: &str) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(path).expect("read kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .expect("kubeconfig to config");
    kube::Client::try_from(config).expect("kube client")
}

/// Sends `GET path` to `addr` (`host:port`) over a fresh TCP connection and returns the status
/// line; enough to poke the replay server's control endpoints without an HTTP client crate.
pub fn http_get(addr: &str, path: &str) -> std::io::Result<String> {
    let out = http_get_response(addr, path)?;
    Ok(out.lines().next().unwrap_or_default().to_owned())
}

/// As [`http_get`], but returns the response's body (the replay server's control endpoints
/// answer with a short plain body and a `Content-Length`, so no chunked decoding is needed).
pub fn http_get_body(addr: &str, path: &str) -> std::io::Result<String> {
    let out = http_get_response(addr, path)?;
    Ok(out
        .split_once("\r\n\r\n")
        .map_or("", |(_, body)| body)
        .to_owned())
}

fn http_get_response(addr: &str, path: &str) -> std::io::Result<String> {
    let mut s = std::net::TcpStream::connect(addr)?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

/// A watch event line (`{"type":...,"object":...}\n`) around an already encoded object.
pub fn event_line(kind: &str, object: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(object.len() + 32);
    v.extend_from_slice(b"{\"type\":\"");
    v.extend_from_slice(kind.as_bytes());
    v.extend_from_slice(b"\",\"object\":");
    v.extend_from_slice(object);
    v.extend_from_slice(b"}\n");
    v
}

/// The watch event that tells a client its resourceVersion is too old (forces a relist).
pub fn expired_event() -> Vec<u8> {
    let status = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "too old resource version", "reason": "Expired", "code": 410
    });
    event_line("ERROR", &serde_json::to_vec(&status).expect("static json"))
}

/// Milliseconds since `start`, as seconds.
pub fn secs_since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64()
}
