//! A replay API server for benchmarks: serves a pre-encoded list of N Pods and then a watch stream
//! of M MODIFIED events as fast as the client reads them. Plain HTTP/1.1 on 127.0.0.1.
//!
//! Protocol, just enough for kube-informer, kube-runtime and client-go:
//! - `GET /api/v1/pods?...` without `watch`: the whole list in one page (legal whatever `limit`
//!   says: the API server also ignores `limit` when it serves from its watch cache), at
//!   resourceVersion `LIST_RV` (list A) or, after `/relist`, `RELIST_RV` (list B, where every
//!   10th pod — `--changed-every` — has a new resourceVersion).
//! - `GET /api/v1/pods?watch=true&resourceVersion=X`: with `--relist` off, the events after X (event
//!   k has resourceVersion `LIST_RV + 1 + k` and modifies pod `k % N`), one per chunk (with
//!   `--burst B`, B events per chunk: each burst is one write of B lines back to back, so a
//!   client that decodes a chunk's events before yielding queues them together), then the
//!   stream stays open and idle. With `--relist` on, a watch from list A waits for `/relist`, then
//!   sends a 410 `Expired` ERROR event and ends, so every client relists; a watch from list B
//!   stays idle.
//! - `--gate-watch true`: the events of a watch from list A wait for `GET /start-watch`, which
//!   clients send once every handler has had the listed objects (without it the endpoint only
//!   records the call). It answers `gated` or `ungated`: a gated client times its watch phase
//!   (wall and CPU) from that call, an ungated one from its sync point.
//! - `--shards n`: a list with `shardSelector=<ShardSelector::of(i, n)>` gets only the pods of
//!   shard i (by uid), with `metadata.shardInfo`, as kube-apiserver with the
//!   `ShardedListAndWatch` gate answers; other selectors get `400`. List A only (S1).
//! - `--protobuf true`: every body is also pre-encoded in Kubernetes protobuf (with the crate's
//!   encoder, over the schema of the Go types), and served to clients whose `Accept` prefers
//!   `application/vnd.kubernetes.protobuf` (client-go's clientsets, kube-informer's default),
//!   watch events as length-prefixed frames; others get JSON.
//! - `GET /relist` switches to list B; `GET /reset` back to list A (the runner calls it before
//!   each client run).
//!
//! Usage: `replay-server --port P --pods N [--events M] [--burst 1] [--gate-watch false] [--relist true]
//! [--changed-every 10] [--managed-fields false]`;
//! prints `LISTENING <addr>` once every body is encoded.

use std::{convert::Infallible, sync::Arc};

use bytes::Bytes;
use futures::StreamExt;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody, combinators::UnsyncBoxBody};
use hyper::body::Frame;
use hyper_util::rt::TokioIo;
use kube_informer_bench::{Fixture, LIST_RV, RELIST_RV, event_line, expired_event, parse_args};
use tokio::{net::TcpListener, sync::watch};

type Body = UnsyncBoxBody<Bytes, Infallible>;

/// The bodies of one encoding.
struct Bodies {
    list_a: Bytes,
    list_b: Bytes,
    /// All watch events back to back; event k is `events[offsets[k]..offsets[k + 1]]`.
    events: Bytes,
    offsets: Vec<usize>,
    expired: Bytes,
}

struct Server {
    json: Arc<Bodies>,
    /// The protobuf bodies (`--protobuf true`).
    protobuf: Option<Arc<Bodies>>,
    /// List A of each shard (`--shards n`): the selector and its body.
    shard_lists: Vec<(kube_informer::sharding::ShardSelector, Bytes)>,
    relist_mode: bool,
    /// Watch events per HTTP chunk (`--burst`, default 1).
    burst: usize,
    /// With `--gate-watch true`, the watch events wait for `GET /start-watch` (which the
    /// clients send once their handlers have had the list), so none is decoded before the
    /// point the watch figures are timed from (the call itself, when gated).
    gate_watch: bool,
    started: watch::Sender<bool>,
    phase_b: watch::Sender<bool>,
}

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// Whether `accept` lists protobuf before JSON (the first media range decides, as both clients
/// send them in order of preference).
fn prefers_protobuf(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|r| r.split(';').next().is_some_and(|m| m.trim() == PROTOBUF))
}

fn full(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(body.into()).boxed_unsync())
        .expect("static response")
}

fn query_param<'a>(query: &'a str, key: &str) -> Option<&'a str> {
    query
        .split('&')
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

/// Decodes `%XX` escapes and `+` of a query value.
fn percent_decode(v: &str) -> String {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                match std::str::from_utf8(&b[i + 1..i + 3]).map(|h| u8::from_str_radix(h, 16)) {
                    Ok(Ok(x)) => {
                        out.push(x);
                        i += 3;
                        continue;
                    }
                    _ => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A stream that never yields: an idle watch the client ends by disconnecting.
fn idle() -> futures::stream::BoxStream<'static, Result<Frame<Bytes>, Infallible>> {
    futures::stream::pending().boxed()
}

impl Server {
    async fn handle(self: Arc<Self>, req: Request<hyper::body::Incoming>) -> Response<Body> {
        let path = req.uri().path();
        let query = req.uri().query().unwrap_or("");
        match path {
            "/start-watch" => {
                self.started.send_replace(true);
                // The body tells the client whether its watch events were held until now, so
                // it times the watch from this call (gated) or from its sync point (not).
                return full(
                    StatusCode::OK,
                    if self.gate_watch { "gated" } else { "ungated" },
                );
            }
            "/reset" => {
                self.phase_b.send_replace(false);
                self.started.send_replace(false);
                return full(StatusCode::OK, "ok");
            }
            "/relist" => {
                self.phase_b.send_replace(true);
                return full(StatusCode::OK, "ok");
            }
            "/api/v1/pods" => {}
            _ => return full(StatusCode::NOT_FOUND, "{}"),
        }
        let is_watch = matches!(query_param(query, "watch"), Some("true" | "1"));
        let accept = req
            .headers()
            .get(http::header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if let Some(pb) = self.protobuf.clone().filter(|_| prefers_protobuf(accept)) {
            return self.serve(&pb, query, is_watch, true);
        }
        if !is_watch && let Some(selector) = query_param(query, "shardSelector") {
            let asked = percent_decode(selector)
                .parse::<kube_informer::sharding::ShardSelector>()
                .ok();
            return match self
                .shard_lists
                .iter()
                .find(|(s, _)| Some(s) == asked.as_ref())
            {
                Some((_, body)) => full(StatusCode::OK, body.clone()),
                None => full(StatusCode::BAD_REQUEST, "{}"),
            };
        }
        let json = self.json.clone();
        self.serve(&json, query, is_watch, false)
    }

    /// A list or watch response from `bodies`.
    fn serve(
        self: &Arc<Self>,
        bodies: &Arc<Bodies>,
        query: &str,
        is_watch: bool,
        protobuf: bool,
    ) -> Response<Body> {
        let content_type = match (protobuf, is_watch) {
            (false, _) => "application/json",
            (true, false) => PROTOBUF,
            (true, true) => "application/vnd.kubernetes.protobuf;stream=watch",
        };
        if !is_watch {
            let body = if *self.phase_b.borrow() {
                bodies.list_b.clone()
            } else {
                bodies.list_a.clone()
            };
            return Response::builder()
                .status(StatusCode::OK)
                .header(http::header::CONTENT_TYPE, content_type)
                .body(Full::new(body).map_err(|e| match e {}).boxed_unsync())
                .expect("static response");
        }
        let rv: u64 = query_param(query, "resourceVersion")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let stream = if rv >= RELIST_RV {
            idle()
        } else if self.relist_mode {
            let mut phase = self.phase_b.subscribe();
            let expired = bodies.expired.clone();
            futures::stream::once(async move {
                let _ = phase.wait_for(|b| *b).await;
                Ok(Frame::data(expired))
            })
            .boxed()
        } else {
            let first = rv.saturating_sub(LIST_RV) as usize;
            let b = bodies.clone();
            let n = bodies.offsets.len().saturating_sub(1);
            let burst = self.burst;
            let events = futures::stream::iter((first.min(n)..n).step_by(burst).map(move |k| {
                let end = (k + burst).min(n);
                Ok(Frame::data(b.events.slice(b.offsets[k]..b.offsets[end])))
            }));
            if self.gate_watch {
                let mut started = self.started.subscribe();
                futures::stream::once(async move {
                    let _ = started.wait_for(|s| *s).await;
                })
                .filter_map(|()| async { None })
                .chain(events)
                .chain(idle())
                .boxed()
            } else {
                events.chain(idle()).boxed()
            }
        };
        Response::builder()
            .header(http::header::CONTENT_TYPE, content_type)
            .body(StreamBody::new(stream).boxed_unsync())
            .expect("static response")
    }
}

/// `bodies` in protobuf: each list and event decoded from its JSON and encoded again.
fn protobuf_bodies(json: &Bodies) -> Bodies {
    use kube_informer::protobuf::encode;
    let list = |body: &Bytes| -> Bytes {
        let v: serde_json::Value = serde_json::from_slice(body).expect("the fixture list");
        let items: Vec<&serde_json::Value> =
            v["items"].as_array().expect("items").iter().collect();
        encode::encode_list("v1", "PodList", &v["metadata"], &items)
            .expect("the fixture encodes")
            .into()
    };
    let event = |line: &[u8]| -> Vec<u8> {
        let v: serde_json::Value = serde_json::from_slice(line).expect("a fixture event");
        let ty = v["type"].as_str().expect("type");
        let (api_version, kind) = if ty == "ERROR" { ("v1", "Status") } else { ("v1", "Pod") };
        encode::encode_watch_event(ty, api_version, kind, &v["object"]).expect("the event encodes")
    };
    let mut events = Vec::new();
    let mut offsets = vec![0];
    for w in json.offsets.windows(2) {
        events.extend(event(&json.events[w[0]..w[1]]));
        offsets.push(events.len());
    }
    Bodies {
        list_a: list(&json.list_a),
        list_b: list(&json.list_b),
        events: events.into(),
        offsets,
        expired: event(&json.expired).into(),
    }
}

fn main() {
    let args = parse_args();
    let get = |k: &str, d: &str| args.get(k).cloned().unwrap_or_else(|| d.to_owned());
    let port: u16 = get("port", "18080").parse().expect("--port");
    let pods: usize = get("pods", "10000").parse().expect("--pods");
    let events: usize = get("events", "0").parse().expect("--events");
    let seed: u64 = get("seed", "42").parse().expect("--seed");
    let relist_mode = get("relist", "false") == "true";
    let changed_every: usize = get("changed-every", "10").parse().expect("--changed-every");
    let burst: usize = get("burst", "1").parse().expect("--burst");
    assert!(burst > 0, "--burst must be at least 1");
    let gate_watch = get("gate-watch", "false") == "true";

    let managed = get("managed-fields", "true") == "true";
    let fixture = Fixture::with_managed_fields(seed, pods, managed);
    let list_a = Bytes::from(fixture.list(LIST_RV, Fixture::base_rv));
    let list_b = Bytes::from(fixture.list(RELIST_RV, |i| {
        if i % changed_every == 0 {
            2_000_000 + i as u64
        } else {
            Fixture::base_rv(i)
        }
    }));
    let shards: u32 = get("shards", "0").parse().expect("--shards");
    let shard_lists = (0..shards)
        .map(|i| {
            let shard = kube_informer::sharding::ShardSelector::of(i, shards).expect("shard");
            let body = fixture.list_where(
                LIST_RV,
                Fixture::base_rv,
                |p| shard.matches_value(fixture.uid(p)),
                Some(&shard.to_string()),
            );
            (shard, Bytes::from(body))
        })
        .collect();
    let mut buf = Vec::new();
    let mut offsets = vec![0];
    let mut obj = Vec::new();
    for k in 0..events {
        obj.clear();
        fixture.write_pod(k % pods, LIST_RV + 1 + k as u64, &mut obj);
        buf.extend_from_slice(&event_line("MODIFIED", &obj));
        offsets.push(buf.len());
    }
    let json = Bodies {
        list_a,
        list_b,
        events: Bytes::from(buf),
        offsets,
        expired: Bytes::from(expired_event()),
    };
    let protobuf = (get("protobuf", "false") == "true").then(|| Arc::new(protobuf_bodies(&json)));
    let server = Arc::new(Server {
        json: Arc::new(json),
        protobuf,
        shard_lists,
        relist_mode,
        burst,
        gate_watch,
        started: watch::channel(false).0,
        phase_b: watch::channel(false).0,
    });
    eprintln!(
        "replay-server: {pods} pods, list {} bytes, {events} events {} bytes",
        server.json.list_a.len(),
        server.json.events.len()
    );
    if let Some(pb) = &server.protobuf {
        eprintln!(
            "replay-server: protobuf list {} bytes, events {} bytes",
            pb.list_a.len(),
            pb.events.len()
        );
    }

    // One thread: the server only copies pre-encoded bytes, and the clients get the other core.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let listener = TcpListener::bind(("127.0.0.1", port)).await.expect("bind");
        println!("LISTENING {}", listener.local_addr().expect("addr"));
        use std::io::Write;
        let _ = std::io::stdout().flush();
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let _ = tcp.set_nodelay(true);
            let server = server.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    let server = server.clone();
                    async move { Ok::<_, Infallible>(server.handle(req).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
}
