//! The kube-informer side of the differential conformance test against client-go
//! (`tests/e2e/conformance.rs`, `conformance/README.md`): one shared informer on ConfigMaps whose
//! handlers print every call as one normalized JSON line, in the same format and with the same
//! flags and stdin commands as `conformance/clientgo-trace`.
//!
//! ```sh
//! cargo run --example conformance_trace -- --kubeconfig ~/.kube/config --fifo in-order
//! # then type `dump`, `add-handler late 0` or `quit` on stdin
//! ```
//!
//! Flags: `--kubeconfig PATH`, or `--server URL --token TOKEN --ca-file PEM`; `--namespace NS`
//! (default: all namespaces); `--label-selector SEL`; `--informer-resync SECONDS` (the
//! informer's default resync period, default 0: then, as in client-go, no handler resyncs,
//! whatever its own period); `--fifo in-order|delta` (default `delta`); `--cache compact`
//! (feature `compact`: a `CacheStorage::Compact` cache keeping no hot objects, so reads and old
//! objects are decoded); `--list` (list and watch instead of a streaming list, so a Compact
//! cache packs listed objects from the bytes the server sent).
//! By default the informer streams its initial list (`sendInitialEvents`), as client-go does by
//! default since v0.35 (`WatchListClient` on).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config, Resource};
use kube_informer::reflector::ApiListerWatcher;
use kube_informer::{
    DeltaObject, FifoMode, InformerConfig, ReflectorConfig, ResourceEventHandlerFuncs,
    SharedIndexInformer, key_of,
};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

/// What the command line asked for.
#[derive(Debug, Default)]
struct Args {
    kubeconfig: Option<PathBuf>,
    server: Option<String>,
    token: Option<String>,
    ca_file: Option<PathBuf>,
    namespace: Option<String>,
    label_selector: Option<String>,
    fifo: FifoMode,
    informer_resync: Duration,
    compact: bool,
    list: bool,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut parsed = Args::default();
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--kubeconfig" => parsed.kubeconfig = Some(value()?.into()),
            "--server" => parsed.server = Some(value()?),
            "--token" => parsed.token = Some(value()?),
            "--ca-file" => parsed.ca_file = Some(value()?.into()),
            "--namespace" => parsed.namespace = Some(value()?).filter(|s| !s.is_empty()),
            "--label-selector" => parsed.label_selector = Some(value()?).filter(|s| !s.is_empty()),
            "--informer-resync" => {
                let secs = value()?;
                let secs = secs
                    .parse()
                    .map_err(|e| format!("--informer-resync {secs}: {e}"))?;
                parsed.informer_resync = Duration::from_secs(secs);
            }
            "--fifo" => {
                parsed.fifo = match value()?.as_str() {
                    "in-order" => FifoMode::InOrder,
                    "delta" => FifoMode::DeltaFifo,
                    other => return Err(format!("--fifo {other}: expected in-order or delta")),
                }
            }
            "--cache" => {
                parsed.compact = match value()?.as_str() {
                    "compact" if cfg!(feature = "compact") => true,
                    "decoded" => false,
                    other => {
                        return Err(format!(
                            "--cache {other}: expected decoded or compact (feature `compact`)"
                        ));
                    }
                }
            }
            "--list" => parsed.list = true,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(parsed)
}

/// A kubeconfig from `--kubeconfig`, or one made of `--server`, `--token` and `--ca-file`.
fn kubeconfig(args: &Args) -> Result<Kubeconfig, String> {
    if let Some(path) = &args.kubeconfig {
        return Kubeconfig::read_from(path).map_err(|e| format!("{}: {e}", path.display()));
    }
    let server = args
        .server
        .as_deref()
        .ok_or("give --kubeconfig or --server (with --token and --ca-file)")?;
    serde_json::from_value(json!({
        "clusters": [{ "name": "c", "cluster": {
            "server": server,
            "certificate-authority": args.ca_file,
        }}],
        "users": [{ "name": "u", "user": { "token": args.token } }],
        "contexts": [{ "name": "x", "context": { "cluster": "c", "user": "u" } }],
        "current-context": "x",
    }))
    .map_err(|e| format!("kubeconfig from flags: {e}"))
}

/// Prints one JSON line; `println!` holds stdout's lock for the whole line, so lines from
/// handlers running at once never interleave.
fn emit(line: &Value) {
    println!("{line}");
}

fn rv_uid(cm: &ConfigMap) -> (String, String) {
    let meta = cm.meta();
    (
        meta.resource_version.clone().unwrap_or_default(),
        meta.uid.clone().unwrap_or_default(),
    )
}

fn key(cm: &ConfigMap) -> String {
    key_of(cm).map(|k| k.to_string()).unwrap_or_default()
}

/// A handler printing each call as `{"handler", "call", "key", "initial", "old_rv", "old_uid",
/// "new_rv", "new_uid", "tombstone"}`.
fn handler(id: &str) -> ResourceEventHandlerFuncs<ConfigMap> {
    let (a, u, d) = (id.to_owned(), id.to_owned(), id.to_owned());
    ResourceEventHandlerFuncs::new()
        .on_add(move |cm: &Arc<ConfigMap>, initial| {
            let (rv, uid) = rv_uid(cm);
            emit(&json!({
                "handler": a, "call": "add", "key": key(cm), "initial": initial,
                "old_rv": "", "old_uid": "", "new_rv": rv, "new_uid": uid, "tombstone": false,
            }));
        })
        .on_update(move |old: &Arc<ConfigMap>, new: &Arc<ConfigMap>| {
            let ((orv, ouid), (nrv, nuid)) = (rv_uid(old), rv_uid(new));
            emit(&json!({
                "handler": u, "call": "update", "key": key(new), "initial": false,
                "old_rv": orv, "old_uid": ouid, "new_rv": nrv, "new_uid": nuid, "tombstone": false,
            }));
        })
        .on_delete(move |gone: &DeltaObject<ConfigMap>| {
            let tombstone = matches!(gone, DeltaObject::DeletedFinalStateUnknown(_));
            let (rv, uid) = rv_uid(gone.object());
            emit(&json!({
                "handler": d, "call": "delete", "key": key(gone.object()), "initial": false,
                "old_rv": rv, "old_uid": uid, "new_rv": "", "new_uid": "", "tombstone": tombstone,
            }));
        })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args(std::env::args().skip(1))?;
    let config =
        Config::from_custom_kubeconfig(kubeconfig(&args)?, &KubeConfigOptions::default()).await?;
    let client = Client::try_from(config)?;
    let api: Api<ConfigMap> = match &args.namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    };
    let lw = ApiListerWatcher::new(api).labels(args.label_selector.clone().unwrap_or_default());
    #[allow(unused_mut)]
    let mut config = InformerConfig::default()
        .fifo_mode(args.fifo)
        .resync_period(args.informer_resync)
        .reflector(ReflectorConfig::default().streaming_list(!args.list));
    #[cfg(feature = "compact")]
    if args.compact {
        config = config.cache_storage(kube_informer::CacheStorage::Compact(
            kube_informer::CompactConfig::default().hot_objects(0),
        ));
    }
    #[cfg(not(feature = "compact"))]
    let _ = args.compact; // `--cache compact` is refused without the feature.
    let informer = SharedIndexInformer::new(lw, config);
    // Two handlers before start: no resync, and a resync every second (client-go's minimum).
    informer.add_event_handler_with_resync_period(handler("h0"), Duration::ZERO)?;
    informer.add_event_handler_with_resync_period(handler("h1"), Duration::from_secs(1))?;
    emit(&json!({ "hello": {
        "impl": "kube-informer",
        "in_order": args.fifo == FifoMode::InOrder,
        "watch_list": !args.list,
        "namespace": args.namespace.clone().unwrap_or_default(),
        "label_selector": args.label_selector.clone().unwrap_or_default(),
        "informer_resync": args.informer_resync.as_secs(),
    }}));
    informer.start();

    // Commands, one a line: `dump` prints the cache as key → RV (with `synced`);
    // `add-handler ID SECONDS` adds a handler now; `quit` stops the informer and exits.
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            [] => {}
            ["dump"] => {
                let cache: serde_json::Map<String, Value> = informer
                    .indexer()
                    .list()
                    .iter()
                    .map(|cm| (key(cm), Value::from(rv_uid(cm).0)))
                    .collect();
                emit(&json!({ "dump": cache, "synced": informer.has_synced() }));
            }
            ["add-handler", id, secs] => {
                let secs: u64 = secs.parse().map_err(|e| format!("add-handler: {e}"))?;
                informer
                    .add_event_handler_with_resync_period(handler(id), Duration::from_secs(secs))?;
                emit(&json!({ "added": id }));
            }
            ["quit"] => break,
            other => return Err(format!("unknown command {other:?}").into()),
        }
    }
    informer.shutdown().await;
    emit(&json!({ "bye": true }));
    Ok(())
}
