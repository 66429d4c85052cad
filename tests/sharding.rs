//! Sharded informers (KEP-5866) against the fake API server: n replicas split a collection with
//! no overlap, through writes and relists, and a server that does not shard is refused.
#![cfg(feature = "testing")]

mod informer_support;
use informer_support::test_storage;

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;
use kube_informer::{
    FactoryConfig, SharedInformerFactory,
    reflector::Error,
    sharding::{ShardKey, ShardSelector},
    testing::{FakeApiServer, Verb},
};
use parking_lot::Mutex;

fn cm(ns: &str, name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

async fn eventually(what: &str, f: impl Fn() -> bool) {
    tokio::time::timeout(Duration::from_secs(20), async {
        while !f() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what}: not reached in 20 s"));
}

/// One replica: a factory caching shard `i` of `n`.
fn replica(server: &FakeApiServer, shard: ShardSelector) -> SharedInformerFactory {
    SharedInformerFactory::new(
        server.client(),
        FactoryConfig::default()
            .cache_storage(test_storage())
            .shard(shard),
    )
}

fn keys(f: &SharedInformerFactory) -> BTreeSet<String> {
    f.informer::<ConfigMap>()
        .indexer()
        .list_keys()
        .into_iter()
        .map(|k| k.to_string())
        .collect()
}

fn server_keys(server: &FakeApiServer) -> BTreeSet<String> {
    server
        .list::<ConfigMap>()
        .unwrap()
        .iter()
        .map(|c| {
            format!(
                "{}/{}",
                c.metadata.namespace.as_deref().unwrap(),
                c.metadata.name.as_deref().unwrap()
            )
        })
        .collect()
}

/// The shards are disjoint and their union is the server's collection.
fn partitioned(server: &FakeApiServer, replicas: &[SharedInformerFactory]) -> Result<(), String> {
    let shards: Vec<_> = replicas.iter().map(keys).collect();
    let total: usize = shards.iter().map(BTreeSet::len).sum();
    let union: BTreeSet<String> = shards.iter().flatten().cloned().collect();
    if total != union.len() {
        return Err(format!("shards overlap: {shards:?}"));
    }
    let want = server_keys(server);
    if union != want {
        return Err(format!("union {union:?} != server {want:?}"));
    }
    Ok(())
}

async fn check_partitioned(what: &str, server: &FakeApiServer, replicas: &[SharedInformerFactory]) {
    let r = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if partitioned(server, replicas).is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    if r.is_err() {
        panic!("{what}: {}", partitioned(server, replicas).unwrap_err());
    }
}

#[tokio::test]
async fn three_shards_partition_the_collection_through_writes_and_relists() {
    let server = FakeApiServer::start_with_core().await.unwrap();
    server.set_sharding_supported(true);
    for i in 0..60 {
        server
            .create(&cm(&format!("ns-{}", i % 4), &format!("cm-{i}")))
            .unwrap();
    }
    let replicas: Vec<_> = (0..3)
        .map(|i| replica(&server, ShardSelector::of(i, 3).unwrap()))
        .collect();
    for r in &replicas {
        r.informer::<ConfigMap>();
        r.start();
    }
    for r in &replicas {
        assert!(
            r.wait_for_cache_sync_timeout(Duration::from_secs(20))
                .await
                .into_result()
                .is_ok()
        );
    }
    check_partitioned("after the initial lists", &server, &replicas).await;
    for r in &replicas {
        let n = keys(r).len();
        assert!(
            (5..=40).contains(&n),
            "a shard of {n} of 60: the hash split is lopsided"
        );
    }

    // Writes arrive by the watches, each at its one shard.
    for i in 60..90 {
        server.create(&cm("ns-9", &format!("cm-{i}"))).unwrap();
    }
    for i in 0..20 {
        server
            .delete::<ConfigMap>(Some(&format!("ns-{}", i % 4)), &format!("cm-{i}"))
            .unwrap();
    }
    check_partitioned("after creates and deletes", &server, &replicas).await;

    // Force relists: compact the history and cut every watch, so each re-watch gets 410.
    let lists_before = server
        .requests()
        .iter()
        .filter(|r| r.verb == Verb::List)
        .count();
    server.compact(server.current_resource_version());
    for i in 90..100 {
        server.create(&cm("ns-1", &format!("cm-{i}"))).unwrap();
    }
    server.compact(server.current_resource_version());
    server.faults().drop_all_watches();
    eventually("every replica relists", || {
        server
            .requests()
            .iter()
            .filter(|r| r.verb == Verb::List)
            .count()
            >= lists_before + 3
    })
    .await;
    check_partitioned("after the relists", &server, &replicas).await;

    // Every list and watch of every replica carried its selector.
    let requests = server.requests();
    let sharded: Vec<_> = requests
        .iter()
        .filter(|r| matches!(r.verb, Verb::List | Verb::Watch))
        .collect();
    assert!(sharded.len() >= 9);
    for r in sharded {
        let s = r
            .query
            .shard_selector
            .as_deref()
            .expect("shardSelector on every request");
        assert!(s.parse::<ShardSelector>().is_ok(), "{s}");
    }
    for r in &replicas {
        r.shutdown().await;
    }
}

#[tokio::test]
async fn namespace_shards_keep_each_namespace_on_one_replica() {
    let server = FakeApiServer::start_with_core().await.unwrap();
    server.set_sharding_supported(true);
    for i in 0..40 {
        server
            .create(&cm(&format!("team-{}", i % 8), &format!("cm-{i}")))
            .unwrap();
    }
    let replicas: Vec<_> = (0..2)
        .map(|i| {
            replica(
                &server,
                ShardSelector::of_key(ShardKey::Namespace, i, 2).unwrap(),
            )
        })
        .collect();
    for r in &replicas {
        r.informer::<ConfigMap>();
        r.start();
        assert!(
            r.wait_for_cache_sync_timeout(Duration::from_secs(20))
                .await
                .into_result()
                .is_ok()
        );
    }
    check_partitioned("namespace shards", &server, &replicas).await;
    let namespaces = |f: &SharedInformerFactory| -> BTreeSet<String> {
        keys(f)
            .iter()
            .map(|k| k.split('/').next().unwrap().to_string())
            .collect()
    };
    assert!(namespaces(&replicas[0]).is_disjoint(&namespaces(&replicas[1])));
    for r in &replicas {
        r.shutdown().await;
    }
}

/// A server without the gate sends every replica everything: the shards are taken on the
/// client (as client-go's `NewShardedListWatch` does), in lists and watches, quietly.
#[tokio::test]
async fn a_server_that_ignores_the_selector_is_filtered_on_the_client() {
    let server = FakeApiServer::start_with_core().await.unwrap();
    // Sharding off: the server answers with everything, as one without the gate does.
    for i in 0..10 {
        server.create(&cm("ns", &format!("cm-{i}"))).unwrap();
    }
    let shards = [
        ShardSelector::of(0, 2).unwrap(),
        ShardSelector::of(1, 2).unwrap(),
    ];
    let replicas: Vec<_> = shards.iter().map(|s| replica(&server, s.clone())).collect();
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    for r in &replicas {
        let e = errors.clone();
        r.informer::<ConfigMap>()
            .set_watch_error_handler(Arc::new(move |err: &Error| e.lock().push(err.to_string())))
            .unwrap();
        r.start();
        let sync = r.wait_for_cache_sync_timeout(Duration::from_secs(10)).await;
        assert!(!sync.timed_out, "{sync:?}");
    }
    for i in 10..20 {
        server.create(&cm("ns", &format!("cm-{i}"))).unwrap();
    }
    let partitioned = || {
        let (a, b) = (keys(&replicas[0]), keys(&replicas[1]));
        a.is_disjoint(&b) && a.union(&b).cloned().collect::<BTreeSet<_>>() == server_keys(&server)
    };
    eventually("the shards to partition the server", partitioned).await;
    for (r, shard) in replicas.iter().zip(&shards) {
        let informer = r.informer::<ConfigMap>();
        assert!(!informer.indexer().list_keys().is_empty());
        for obj in informer.indexer().list() {
            assert!(
                shard.matches(&*obj),
                "{:?} outside {shard}",
                obj.metadata.name
            );
        }
    }
    assert!(errors.lock().is_empty(), "{:?}", errors.lock());
    for r in &replicas {
        r.shutdown().await;
    }
}

/// `shard_for::<K>(None)`: a type every replica needs whole is not sharded with the rest.
#[tokio::test]
async fn a_type_can_be_left_unsharded() {
    use k8s_openapi::api::core::v1::Secret;
    let server = FakeApiServer::start_with_core().await.unwrap();
    server.set_sharding_supported(true);
    for i in 0..40 {
        server.create(&cm("ns", &format!("cm-{i}"))).unwrap();
    }
    for i in 0..10 {
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(format!("s-{i}")),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        server.create(&secret).unwrap();
    }
    let factory = SharedInformerFactory::new(
        server.client(),
        FactoryConfig::default()
            .cache_storage(test_storage())
            .shard(ShardSelector::of(0, 2).unwrap())
            .shard_for::<Secret>(None),
    );
    let secrets = factory.informer::<Secret>();
    let cms = factory.informer::<ConfigMap>();
    factory.start();
    let sync = factory
        .wait_for_cache_sync_timeout(Duration::from_secs(10))
        .await;
    assert!(!sync.timed_out, "{sync:?}");
    assert_eq!(secrets.indexer().list_keys().len(), 10);
    let n = cms.indexer().list_keys().len();
    assert!(
        n > 0 && n < 40,
        "{n} of 40 config maps in one of two shards"
    );
    let shard = ShardSelector::of(0, 2).unwrap();
    assert!(cms.indexer().list().iter().all(|c| shard.matches(&**c)));
    let selectors = |resource: &str| -> Vec<Option<String>> {
        server
            .requests()
            .iter()
            .filter(|r| r.path.contains(resource))
            .map(|r| r.query.shard_selector.clone())
            .collect()
    };
    assert!(selectors("/secrets").iter().all(Option::is_none));
    assert!(selectors("/configmaps").iter().all(Option::is_some));
    factory.shutdown().await;
}
