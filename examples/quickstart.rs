//! The whole flow in one program: informer factory → event handler → rate-limited workqueue →
//! worker reading the lister.
//!
//! ```sh
//! cargo run --example quickstart
//! ```
//!
//! With no cluster configured (no `KUBECONFIG`, no `~/.kube/config`, not in a pod) it starts the
//! crate's built-in fake API server, creates, updates and deletes a few ConfigMaps, shows each
//! handler event, lister read and worker step, and exits. Pointed at a real cluster it watches
//! that cluster's ConfigMaps (read-only) for `QUICKSTART_SECONDS` (default 10) and exits.
//! `KUBE_INFORMER_FAKE=1` forces the fake server even when a cluster is configured. A kubeconfig
//! that is there but fails to load is reported, not replaced by the fake server.

#[path = "support/cluster.rs"]
mod cluster;
use cluster::cluster_client;

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Client,
    api::{Api, DeleteParams, ObjectMeta, PostParams},
};
use kube_informer::{
    FactoryConfig, ObjectKey, RateLimitingQueue, ResourceEventHandlerFuncs, SharedInformerFactory,
    key_of, testing::FakeApiServer,
};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Warnings by default, so a cluster that cannot be listed says why while the sync waits.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let (client, fake) = if let Some(client) = cluster_client().await? {
        println!("using the cluster from your kubeconfig (read-only)");
        (client, None)
    } else {
        let server = FakeApiServer::start_with_core().await?;
        println!(
            "no cluster configured: started the built-in fake API server at {}",
            server.url()
        );
        // Something to find in the initial list.
        server.create(&ConfigMap {
            metadata: ObjectMeta {
                name: Some("settings".into()),
                namespace: Some("demo".into()),
                ..Default::default()
            },
            data: Some(BTreeMap::from([("mode".to_owned(), "demo".to_owned())])),
            ..Default::default()
        })?;
        (server.client(), Some(server))
    };

    // One factory per process; one informer per type, shared by every handler.
    let namespace = if fake.is_some() { Some("demo") } else { None };
    let mut config = FactoryConfig::default().strip_managed_fields();
    if let Some(ns) = namespace {
        config = config.namespace(ns);
    }
    let factory = SharedInformerFactory::new(client.clone(), config);
    let informer = factory.informer::<ConfigMap>();
    let lister = factory.lister::<ConfigMap>();

    // The handler only enqueues keys: the work happens in workers, as in client-go controllers.
    let queue: RateLimitingQueue<ObjectKey> = RateLimitingQueue::new();
    let enqueue = |queue: &RateLimitingQueue<ObjectKey>, cm: &ConfigMap| {
        if let Ok(key) = key_of(cm) {
            let _ = queue.add(key);
        }
    };
    let (q1, q2, q3) = (queue.clone(), queue.clone(), queue.clone());
    informer.add_event_handler(
        ResourceEventHandlerFuncs::new()
            .on_add(move |cm: &Arc<ConfigMap>, initial| {
                println!(
                    "  handler: add    {} (initial list: {initial})",
                    key_of(cm).unwrap()
                );
                enqueue(&q1, cm);
            })
            .on_update(move |old: &Arc<ConfigMap>, new: &Arc<ConfigMap>| {
                println!(
                    "  handler: update {} rv {} -> {}",
                    key_of(new).unwrap(),
                    old.metadata.resource_version.as_deref().unwrap_or("?"),
                    new.metadata.resource_version.as_deref().unwrap_or("?"),
                );
                enqueue(&q2, new);
            })
            .on_delete(move |deleted| {
                let tombstone = if deleted.is_tombstone() {
                    " (final state unknown)"
                } else {
                    ""
                };
                println!(
                    "  handler: delete {}{tombstone}",
                    key_of(deleted.object()).unwrap()
                );
                enqueue(&q3, deleted.object());
            }),
    )?;

    factory.start();
    // client-go: `if !cache.WaitForCacheSync(...) { return err }`: no workers on a cache that
    // never filled.
    let synced = factory
        .wait_for_cache_sync_timeout(Duration::from_secs(30))
        .await;
    println!("caches synced: {:?}", synced.synced);
    if let Err(e) = synced.into_result() {
        factory.shutdown().await;
        return Err(format!(
            "{e}: check that the API server is reachable and that your credentials may list \
             and watch ConfigMaps (RBAC); RUST_LOG=kube_informer=debug shows the reflector's errors"
        )
        .into());
    }

    // A worker: reads the current state from the lister, never from the event.
    let worker = {
        let queue = queue.clone();
        let lister = lister.clone();
        tokio::spawn(async move {
            let mut reconciled = 0usize;
            while let Some(key) = queue.get().await {
                match lister.get_by_key(key.as_str()) {
                    Some(cm) => println!(
                        "  worker:  reconcile {key}: {} data keys",
                        cm.data.as_ref().map_or(0, BTreeMap::len)
                    ),
                    None => println!("  worker:  reconcile {key}: gone, clean up"),
                }
                queue.forget(&key);
                queue.done(&key);
                reconciled += 1;
            }
            reconciled
        })
    };

    if let Some(server) = &fake {
        demo_writes(&client, server).await?;
        let demo = lister.namespaced("demo").list(&Default::default());
        println!("lister: {} ConfigMaps in namespace demo:", demo.len());
        for cm in demo {
            println!(
                "  {} data={:?}",
                key_of(&cm)?,
                cm.data.clone().unwrap_or_default()
            );
        }
    } else {
        let secs = std::env::var("QUICKSTART_SECONDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(10);
        println!("watching for {secs} s...");
        tokio::time::sleep(Duration::from_secs(secs)).await;
        println!(
            "lister: {} ConfigMaps cached",
            lister.list(&Default::default()).len()
        );
    }

    queue.shutdown_with_drain().await;
    let reconciled = worker.await;
    factory.shutdown().await;
    let reconciled = reconciled?;
    println!("done: {reconciled} reconciles; informers stopped");
    Ok(())
}

/// Writes through the API (over HTTP, like any client) so the informer sees real watch events.
async fn demo_writes(
    client: &Client,
    server: &FakeApiServer,
) -> Result<(), Box<dyn std::error::Error>> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "demo");
    let make = |name: &str, value: &str| ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("demo".into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("greeting".to_owned(), value.to_owned())])),
        ..Default::default()
    };
    println!("creating demo/alpha and demo/beta");
    api.create(&PostParams::default(), &make("alpha", "hello"))
        .await?;
    api.create(&PostParams::default(), &make("beta", "hi"))
        .await?;
    settle().await;
    println!("updating demo/alpha");
    let mut alpha = api.get("alpha").await?;
    alpha
        .data
        .get_or_insert_default()
        .insert("farewell".into(), "bye".into());
    api.replace("alpha", &PostParams::default(), &alpha).await?;
    settle().await;
    println!("deleting demo/beta");
    api.delete("beta", &DeleteParams::default()).await?;
    settle().await;
    println!(
        "server is at resourceVersion {}",
        server.current_resource_version()
    );
    Ok(())
}

/// Lets the watch deliver before the next step, so the output reads in order.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(200)).await;
}
