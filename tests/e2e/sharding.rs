//! Sharded informers (KEP-5866) on a real kube-apiserver with the alpha `ShardedListAndWatch`
//! gate: three replicas split the config maps with no overlap, through writes and a relist;
//! without the gate the server sends each replica everything and the shards are taken on the
//! client, as client-go's `NewShardedListWatch` does.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, PostParams};
use kube_informer::SharedInformerFactory;
use kube_informer::sharding::ShardSelector;

use crate::common::{
    CONVERGE_TIMEOUT, ErrorLog, config_map, config_maps_in, eventually, factory_config,
    server_versions, within,
};
use crate::support::Cluster;

const GATE: &str = "ShardedListAndWatch=true";

fn replicas(cluster: &Cluster, ns: &str, n: u32) -> Vec<SharedInformerFactory> {
    (0..n)
        .map(|i| {
            SharedInformerFactory::new(
                cluster.admin(),
                factory_config()
                    .namespace(ns)
                    .shard(ShardSelector::of(i, n).unwrap()),
            )
        })
        .collect()
}

async fn create_range(cms: &Api<ConfigMap>, names: std::ops::Range<u32>) {
    for i in names {
        within(
            "create",
            cms.create(&PostParams::default(), &config_map(&format!("cm-{i}"), "v")),
        )
        .await
        .expect("create");
    }
}

fn cached(f: &SharedInformerFactory) -> BTreeSet<String> {
    f.informer::<ConfigMap>()
        .indexer()
        .list_keys()
        .into_iter()
        .map(|k| k.to_string())
        .collect()
}

/// Disjoint shards whose union is what the server holds.
async fn partitioned(what: &str, cms: &Api<ConfigMap>, replicas: &[SharedInformerFactory]) {
    let want: BTreeSet<String> = server_versions(cms).await.into_keys().collect();
    eventually(what, CONVERGE_TIMEOUT, || {
        let shards: Vec<_> = replicas.iter().map(cached).collect();
        let total: usize = shards.iter().map(BTreeSet::len).sum();
        let union: BTreeSet<String> = shards.iter().flatten().cloned().collect();
        if total != union.len() {
            Err(format!("shards overlap: {shards:?}"))
        } else if union != want {
            Err(format!(
                "union differs from the server: missing {:?}, extra {:?}",
                want.difference(&union).collect::<Vec<_>>(),
                union.difference(&want).collect::<Vec<_>>()
            ))
        } else {
            Ok(())
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs kube-apiserver + etcd: run bash .ci/e2e.sh"]
async fn three_sharded_replicas_partition_the_collection_through_writes_and_a_relist() {
    let mut cluster = within("start", Cluster::start_for_with_gates("sharded", GATE)).await;
    let ns = "sharded";
    let cms = config_maps_in(&cluster, ns).await;
    create_range(&cms, 0..90).await;
    let replicas = replicas(&cluster, ns, 3);
    let logs: Vec<_> = replicas
        .iter()
        .map(|r| ErrorLog::attach(&r.informer::<ConfigMap>()))
        .collect();
    for r in &replicas {
        r.start();
    }
    for r in &replicas {
        within(
            "sync",
            r.wait_for_cache_sync_timeout(Duration::from_secs(120)),
        )
        .await
        .into_result()
        .expect("every shard syncs");
    }
    partitioned("after the initial lists", &cms, &replicas).await;
    let sizes: Vec<usize> = replicas.iter().map(|r| cached(r).len()).collect();
    eprintln!("sharded e2e: 90 config maps split {sizes:?} over 3 replicas");
    assert!(sizes.iter().all(|&n| (10..=60).contains(&n)), "{sizes:?}");

    create_range(&cms, 90..120).await;
    for i in 0..15 {
        within(
            "delete",
            cms.delete(&format!("cm-{i}"), &DeleteParams::default()),
        )
        .await
        .expect("delete");
    }
    partitioned("after creates and deletes", &cms, &replicas).await;

    // A relist: writes the watches miss, history compacted, the watch cache dropped; each
    // re-watch from its old version gets 410 and the reflector relists, shard and all.
    cluster.stop_apiserver();
    within("compact", cluster.compact()).await.expect("compact");
    cluster.start_apiserver().await.expect("apiserver restarts");
    for i in 15..25 {
        within(
            "delete",
            cms.delete(&format!("cm-{i}"), &DeleteParams::default()),
        )
        .await
        .expect("delete");
    }
    within("compact", cluster.compact()).await.expect("compact");
    cluster.stop_apiserver();
    cluster.start_apiserver().await.expect("apiserver restarts");
    create_range(&cms, 120..130).await;
    partitioned("after the relist", &cms, &replicas).await;
    for (i, log) in logs.iter().enumerate() {
        let errors = log.all();
        assert!(
            errors.iter().all(|e| !e.message.contains("shard")),
            "replica {i}: {errors:#?}"
        );
    }
    for r in &replicas {
        within("shutdown", r.shutdown()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs kube-apiserver + etcd: run bash .ci/e2e.sh"]
async fn on_an_apiserver_without_the_gate_the_shards_are_taken_on_the_client() {
    let cluster = within("start", Cluster::start_for("unsharded")).await;
    let ns = "unsharded";
    let cms = config_maps_in(&cluster, ns).await;
    create_range(&cms, 0..5).await;
    let replicas = replicas(&cluster, ns, 2);
    let logs: Vec<_> = replicas
        .iter()
        .map(|r| ErrorLog::attach(&r.informer::<ConfigMap>()))
        .collect();
    for r in &replicas {
        r.start();
        let sync = within("sync", r.wait_for_cache_sync()).await;
        assert!(sync.values().all(|&synced| synced), "{sync:?}");
    }
    partitioned("the listed config maps", &cms, &replicas).await;
    // Watch events come unsharded too.
    create_range(&cms, 5..15).await;
    partitioned("the watched config maps", &cms, &replicas).await;
    for (i, log) in logs.iter().enumerate() {
        assert!(log.all().is_empty(), "replica {i}: {:#?}", log.all());
    }
    for r in &replicas {
        within("shutdown", r.shutdown()).await;
    }
}
