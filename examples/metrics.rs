//! A small controller exporting client-go's `workqueue_*` and `informer_*` metrics on
//! `/metrics`, the way a Go controller does, so the same dashboards and alerts work.
//!
//! ```sh
//! cargo run --example metrics --features prometheus
//! ```
//!
//! With no cluster configured (or `KUBE_INFORMER_FAKE=1`) it starts the crate's built-in fake
//! API server with a few ConfigMaps; pointed at a real cluster it watches that cluster's
//! ConfigMaps (read-only) for `METRICS_SECONDS` (default 5). Either way an in-order informer
//! named `metrics-example` feeds a rate-limited workqueue named `configmaps` (the worker fails
//! each key once, to show retries), `/metrics` is served over HTTP on `METRICS_ADDR` (default
//! `127.0.0.1:0`, any free port), and the program scrapes itself once, prints what a Prometheus
//! server would read, and exits.

#[path = "support/cluster.rs"]
mod cluster;
use cluster::cluster_client;

use std::{collections::HashSet, convert::Infallible, net::SocketAddr, sync::Arc, time::Duration};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{
    Request, Response, StatusCode, body::Incoming, server::conn::http1, service::service_fn,
};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;
use kube_informer::{
    FactoryConfig, FifoMode, ObjectKey, RateLimitingQueue, ResourceEventHandlerFuncs,
    SharedInformerFactory, default_controller_rate_limiter, key_of,
    prometheus::{
        PrometheusMetrics,
        prometheus_client::{encoding::prometheus_text, registry::Registry},
    },
    testing::FakeApiServer,
    workqueue::Config,
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::watch,
};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Warnings by default, so a cluster that cannot be listed says why while the sync waits.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let (client, fake) = match cluster_client().await? {
        Some(client) => {
            println!("using the cluster from your kubeconfig (read-only)");
            (client, None)
        }
        None => {
            let server = FakeApiServer::start_with_core().await?;
            println!("no cluster configured: started the built-in fake API server");
            for name in ["alpha", "beta", "gamma"] {
                server.create(&config_map(name))?;
            }
            (server.client(), Some(server))
        }
    };

    // One registry and one provider for the whole process, shared by every queue and informer.
    let mut registry = Registry::default();
    let metrics = Arc::new(PrometheusMetrics::new(&mut registry));
    let registry = Arc::new(registry);

    // Informer metrics need a name (client-go `WithInformerName`) and, for the queue metrics,
    // the in-order FIFO that client-go 1.36+ runs.
    let mut config = FactoryConfig::default()
        .strip_managed_fields()
        .fifo_mode(FifoMode::InOrder)
        .informer_name("metrics-example")
        .metrics_provider(metrics.clone());
    if fake.is_some() {
        config = config.namespace("demo");
    }
    let factory = SharedInformerFactory::new(client, config);
    let lister = factory.lister::<ConfigMap>();

    // Workqueue metrics need a queue name: it is the `name` label of every series.
    let queue: RateLimitingQueue<ObjectKey> = RateLimitingQueue::with_config(
        Config::default()
            .name("configmaps")
            .metrics_provider(metrics.clone()),
        default_controller_rate_limiter(),
    );
    let (q1, q2) = (queue.clone(), queue.clone());
    factory.informer::<ConfigMap>().add_event_handler(
        ResourceEventHandlerFuncs::new()
            .on_add(move |cm: &Arc<ConfigMap>, _| enqueue(&q1, cm))
            .on_update(move |_: &Arc<ConfigMap>, cm: &Arc<ConfigMap>| enqueue(&q2, cm)),
    )?;

    let listener = TcpListener::bind(
        std::env::var("METRICS_ADDR").unwrap_or_else(|_| "127.0.0.1:0".to_owned()),
    )
    .await?;
    let addr = listener.local_addr()?;
    let http = tokio::spawn(serve(listener, registry));
    println!("serving http://{addr}/metrics");

    factory.start();
    // client-go: `if !cache.WaitForCacheSync(...) { return err }`, and the workers start after.
    let synced = factory
        .wait_for_cache_sync_timeout(Duration::from_secs(30))
        .await;
    println!("caches synced: {:?}", synced.synced);
    if let Err(e) = synced.into_result() {
        factory.shutdown().await;
        http.abort();
        return Err(format!(
            "{e}: check that the API server is reachable and that your credentials may list \
             and watch ConfigMaps (RBAC); RUST_LOG=kube_informer=debug shows the reflector's errors"
        )
        .into());
    }

    // The worker fails each key once (a transient error: back off and retry), then succeeds.
    let (reconciled_tx, mut reconciled) = watch::channel(0usize);
    let worker = {
        let queue = queue.clone();
        tokio::spawn(async move {
            let mut failed_once = HashSet::new();
            while let Some(key) = queue.get().await {
                let exists = lister.get_by_key(key.as_str()).is_some();
                if failed_once.insert(key.clone()) {
                    let _ = queue.add_rate_limited(key.clone());
                } else {
                    println!("  worker: reconciled {key} (exists: {exists})");
                    queue.forget(&key);
                    reconciled_tx.send_modify(|n| *n += 1);
                }
                queue.done(&key);
            }
        })
    };

    if let Some(server) = &fake {
        // One change through the watch, then wait until all four keys are reconciled.
        server.create(&config_map("delta"))?;
        tokio::time::timeout(Duration::from_secs(30), reconciled.wait_for(|n| *n >= 4))
            .await
            .map_err(|_| "reconciles did not finish in 30 s")??;
        println!(
            "fake API server at resourceVersion {}",
            server.current_resource_version()
        );
    } else {
        let secs = std::env::var("METRICS_SECONDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(5);
        println!("watching for {secs} s...");
        tokio::time::sleep(Duration::from_secs(secs)).await;
    }

    // What a Prometheus server would read.
    let response = scrape(addr).await?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or("malformed HTTP response")?;
    println!("--- GET /metrics\n{head}\n\n{body}---");

    queue.shutdown_with_drain().await;
    let worker = worker.await;
    factory.shutdown().await;
    http.abort();
    worker?;
    let pick = |series: &str| body.lines().find(|l| l.starts_with(series)).unwrap_or("");
    println!("{}", pick("workqueue_adds_total"));
    println!("{}", pick("workqueue_retries_total"));
    println!("{}", pick("informer_store_resource_version"));
    Ok(())
}

fn config_map(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("demo".into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn enqueue(queue: &RateLimitingQueue<ObjectKey>, cm: &ConfigMap) {
    if let Ok(key) = key_of(cm) {
        let _ = queue.add(key);
    }
}

/// Serves `/metrics` until aborted, one task per connection.
async fn serve(listener: TcpListener, registry: Arc<Registry>) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors, say: wait a little rather than spin.
                eprintln!("metrics accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let registry = registry.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<Incoming>| {
                let response = metrics_response(&req, &registry);
                async move { Ok::<_, Infallible>(response) }
            });
            if let Err(e) = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                eprintln!("metrics connection: {e}");
            }
        });
    }
}

/// The Prometheus text format (0.0.4), as Go's `promhttp` serves by default: the very series a Go
/// controller exposes, bucket bounds included (`le="1"`, where OpenMetrics writes `le="1.0"`).
/// `prometheus_client::encoding::text::encode` gives OpenMetrics instead.
fn metrics_response(req: &Request<Incoming>, registry: &Registry) -> Response<Full<Bytes>> {
    let mut text = String::new();
    let status = if req.uri().path() != "/metrics" {
        StatusCode::NOT_FOUND
    } else if prometheus_text::encode(&mut text, registry).is_err() {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::OK
    };
    Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, prometheus_text::CONTENT_TYPE)
        .body(Full::new(Bytes::from(text)))
        .expect("a valid response")
}

/// One plain HTTP/1.1 GET, as a scraper sends it; the whole response as text.
async fn scrape(addr: SocketAddr) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(addr).await?;
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    String::from_utf8(response).map_err(std::io::Error::other)
}
