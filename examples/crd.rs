//! An informer for a custom resource, typed with `#[derive(CustomResource)]`, next to a dynamic
//! informer for the same resource.
//!
//! ```sh
//! cargo run --example crd
//! ```
//!
//! Without a cluster it registers the `Backup` kind with the built-in fake API server and creates
//! a few. With a cluster, the `backups.example.com` CustomResourceDefinition must be installed
//! (`cargo run --example crd -- --print-crd | kubectl apply -f -`); it then watches for
//! `CRD_SECONDS` (default 10).

#[path = "support/cluster.rs"]
mod cluster;
use cluster::cluster_client;

use std::{sync::Arc, time::Duration};

use kube::{
    CustomResource, CustomResourceExt, Resource,
    api::{Api, ApiResource, DynamicObject, ObjectMeta, PostParams},
    discovery::Scope,
};
use kube_informer::{
    FactoryConfig, ResourceEventHandlerFuncs, SharedInformerFactory, testing::FakeApiServer,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A backup schedule.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, JsonSchema)]
#[kube(group = "example.com", version = "v1", kind = "Backup", namespaced)]
pub struct BackupSpec {
    /// Cron schedule.
    pub schedule: String,
    /// How many backups to keep.
    pub keep: u32,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::args().any(|a| a == "--print-crd") {
        println!("{}", serde_json::to_string_pretty(&Backup::crd())?);
        return Ok(());
    }
    // Warnings by default, so a cluster that cannot be listed says why while the sync waits.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let (client, fake) = match cluster_client().await? {
        Some(client) => (client, None),
        None => {
            let server = FakeApiServer::start().await?;
            server.register::<Backup>();
            (server.client(), Some(server))
        }
    };

    let factory = SharedInformerFactory::new(client.clone(), FactoryConfig::default());
    // Typed: the derive gives the Rust type everything the informer needs.
    let typed = factory.informer::<Backup>();
    typed.add_event_handler(
        ResourceEventHandlerFuncs::new()
            .on_add(|b: &Arc<Backup>, _| {
                println!(
                    "typed:   add {} (every {}, keep {})",
                    b.metadata.name.as_deref().unwrap_or("?"),
                    b.spec.schedule,
                    b.spec.keep
                )
            })
            .on_update(|old: &Arc<Backup>, new: &Arc<Backup>| {
                println!(
                    "typed:   update {}: keep {} -> {}",
                    new.metadata.name.as_deref().unwrap_or("?"),
                    old.spec.keep,
                    new.spec.keep
                )
            }),
    )?;
    // Dynamic: for kinds known only at run time (here from the same type's metadata; from a
    // cluster, `kube::discovery` gives both the `ApiResource` and its `Scope`).
    let ar = ApiResource::erase::<Backup>(&());
    let dynamic = factory.dynamic_informer(&ar, &Scope::Namespaced);
    dynamic.add_event_handler(ResourceEventHandlerFuncs::new().on_add(
        |o: &Arc<DynamicObject>, _| {
            println!(
                "dynamic: add {} spec={}",
                o.metadata.name.as_deref().unwrap_or("?"),
                o.data["spec"]
            );
        },
    ))?;
    factory.start();
    // client-go: `if !cache.WaitForCacheSync(...) { return err }`.
    if let Err(e) = factory
        .wait_for_cache_sync_timeout(Duration::from_secs(30))
        .await
        .into_result()
    {
        factory.shutdown().await;
        return Err(format!(
            "{e}: check that the API server is reachable, that the backups.example.com CRD is \
             installed (--print-crd), and that your credentials may list and watch backups (RBAC)"
        )
        .into());
    }

    if fake.is_some() {
        let api: Api<Backup> = Api::namespaced(client, "default");
        for (name, keep) in [("nightly", 7), ("weekly", 4)] {
            let b = Backup {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    namespace: Some("default".into()),
                    ..Default::default()
                },
                spec: BackupSpec {
                    schedule: "0 3 * * *".into(),
                    keep,
                },
            };
            api.create(&PostParams::default(), &b).await?;
        }
        let mut nightly = api.get("nightly").await?;
        nightly.spec.keep = 14;
        api.replace("nightly", &PostParams::default(), &nightly)
            .await?;
        tokio::time::sleep(Duration::from_millis(300)).await;
    } else {
        let secs = std::env::var("CRD_SECONDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(10);
        tokio::time::sleep(Duration::from_secs(secs)).await;
    }
    println!(
        "cached: {} typed, {} dynamic ({})",
        typed.lister().list(&Default::default()).len(),
        dynamic.lister().list(&Default::default()).len(),
        Backup::api_version(&()),
    );
    factory.shutdown().await;
    Ok(())
}
