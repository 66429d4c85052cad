//! `SharedInformerFactory` against the fake API server: one informer per type, options applied
//! to the requests, start/sync/shutdown, typed, dynamic and metadata-only informers, listers.
#![cfg(feature = "testing")]

mod informer_support;
use informer_support::test_storage;

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{ApiResource, DynamicObject, ObjectMeta, PartialObjectMeta};
use kube::discovery::Scope;
use kube_informer::{
    FactoryConfig, ResourceEventHandlerFuncs, SharedInformerFactory,
    testing::{FakeApiServer, Verb},
};
use parking_lot::Mutex;

fn cm(ns: &str, name: &str, labels: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).into(), (*v).into()))
                    .collect(),
            ),
            managed_fields: Some(vec![Default::default()]),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("k".to_owned(), "v".to_owned())])),
        ..Default::default()
    }
}

async fn within<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), f)
        .await
        .unwrap_or_else(|_| panic!("{what}: likely deadlocked"))
}

async fn eventually(what: &str, f: impl Fn() -> bool) {
    within(what, async {
        while !f() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn same_type_gives_the_same_informer_and_start_is_idempotent() {
    let server = FakeApiServer::start_with_core().await.unwrap();
    server.create(&cm("a", "one", &[])).unwrap();
    let factory = SharedInformerFactory::new(
        server.client(),
        FactoryConfig::default().cache_storage(test_storage()),
    );
    let i1 = factory.informer::<ConfigMap>();
    let i2 = factory.informer::<ConfigMap>();
    let adds = Arc::new(Mutex::new(0));
    let a = adds.clone();
    i1.add_event_handler(
        ResourceEventHandlerFuncs::new().on_add(move |_: &Arc<ConfigMap>, _| *a.lock() += 1),
    )
    .unwrap();
    factory.start();
    factory.start();
    let synced = within("sync", factory.wait_for_cache_sync()).await;
    assert_eq!(synced, BTreeMap::from([("v1/ConfigMap".to_owned(), true)]));
    assert!(i2.has_synced(), "the second handle is the same informer");
    let lists = server
        .requests()
        .iter()
        .filter(|r| r.verb == Verb::List)
        .count();
    assert_eq!(lists, 1, "one informer, started once");
    eventually("one add", || *adds.lock() == 1).await;
    within("shutdown", factory.shutdown()).await;
    assert!(i1.is_stopped() && i2.is_stopped());
}

/// A slimmer type of the ConfigMap resource: only what a controller reads.
#[derive(kube::Resource, serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
#[resource(inherit = ConfigMap)]
struct SlimConfigMap {
    metadata: ObjectMeta,
    #[serde(default)]
    data: BTreeMap<String, String>,
}

/// client-go keys its informers by Go type; two Rust types of one resource get an informer
/// each, both started, synced and stopped, and neither hides the other in sync results.
#[tokio::test]
async fn two_types_of_one_resource_get_an_informer_each() {
    let server = FakeApiServer::start_with_core().await.unwrap();
    server.create(&cm("a", "one", &[])).unwrap();
    let factory = SharedInformerFactory::new(
        server.client(),
        FactoryConfig::default().cache_storage(test_storage()),
    );
    let full = factory.informer::<ConfigMap>();
    let slim = factory.informer::<SlimConfigMap>();
    let full_again = factory.informer::<ConfigMap>();
    factory.start();
    let synced = within("sync", factory.wait_for_cache_sync()).await;
    // Named by the resource and, as there are two types of it, the Rust type's path
    // (`std::any::type_name`, which spells k8s-openapi's through its version module).
    let names: Vec<_> = synced.keys().map(String::as_str).collect();
    assert_eq!(names.len(), 2, "{synced:?}");
    assert!(synced.values().all(|s| *s), "{synced:?}");
    assert_eq!(names[0], "v1/ConfigMap [factory::SlimConfigMap]");
    assert!(
        names[1].starts_with("v1/ConfigMap [k8s_openapi::") && names[1].ends_with("::ConfigMap]"),
        "{names:?}"
    );
    assert!(full.has_synced() && slim.has_synced() && full_again.has_synced());
    assert_eq!(
        full.indexer().get_by_key("a/one").unwrap().data,
        Some(BTreeMap::from([("k".to_owned(), "v".to_owned())]))
    );
    assert_eq!(
        slim.indexer().get_by_key("a/one").unwrap().data,
        BTreeMap::from([("k".to_owned(), "v".to_owned())])
    );
    let lists = server
        .requests()
        .iter()
        .filter(|r| r.verb == Verb::List)
        .count();
    assert_eq!(lists, 2, "one informer per type");
    within("shutdown", factory.shutdown()).await;
    assert!(full.is_stopped() && slim.is_stopped());
}

#[tokio::test]
async fn start_starts_only_informers_requested_since_the_last_start() {
    let server = FakeApiServer::start_with_core().await.unwrap();
    let factory = SharedInformerFactory::new(
        server.client(),
        FactoryConfig::default().cache_storage(test_storage()),
    );
    let cms = factory.informer::<ConfigMap>();
    factory.start();
    within("sync", factory.wait_for_cache_sync()).await;
    let secrets = factory.informer::<Secret>();
    assert!(
        !secrets.is_started(),
        "requested after start: waits for the next start"
    );
    factory.start();
    let synced = within("sync", factory.wait_for_cache_sync()).await;
    assert_eq!(synced.len(), 2);
    assert!(cms.has_synced() && secrets.has_synced());
    within("shutdown", factory.shutdown()).await;
    factory.start();
    assert!(
        !factory.informer::<Namespace>().is_started(),
        "nothing starts after shutdown"
    );
}

#[tokio::test]
async fn namespace_and_selectors_reach_every_request_and_transform_applies() {
    let server = FakeApiServer::start_with_core().await.unwrap();
    server
        .create(&cm("team", "web", &[("app", "web")]))
        .unwrap();
    server.create(&cm("team", "db", &[("app", "db")])).unwrap();
    server
        .create(&cm("other", "web", &[("app", "web")]))
        .unwrap();
    let factory = SharedInformerFactory::new(
        server.client(),
        FactoryConfig::default()
            .cache_storage(test_storage())
            .namespace("team")
            .labels("app=web")
            .strip_managed_fields(),
    );
    let lister = factory.lister::<ConfigMap>();
    // Cluster-scoped types ignore the namespace.
    let namespaces = factory.informer::<Namespace>();
    factory.start();
    within("sync", factory.wait_for_cache_sync()).await;
    let all = lister.list(&Default::default());
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].metadata.namespace.as_deref(), Some("team"));
    assert!(
        all[0].metadata.managed_fields.is_none(),
        "managedFields dropped"
    );
    for r in server
        .requests()
        .iter()
        .filter(|r| matches!(r.verb, Verb::List | Verb::Watch))
    {
        assert_eq!(r.query.label_selector.as_deref(), Some("app=web"), "{r:?}");
        if r.path.contains("configmaps") {
            assert_eq!(r.path, "/api/v1/namespaces/team/configmaps");
        } else {
            assert_eq!(r.path, "/api/v1/namespaces");
        }
    }
    assert!(namespaces.has_synced());
    within("shutdown", factory.shutdown()).await;
}

#[tokio::test]
async fn dynamic_and_metadata_informers_cache_what_they_are_asked_for() {
    let server = FakeApiServer::start_with_core().await.unwrap();
    server.create(&cm("ns", "a", &[("x", "1")])).unwrap();
    let factory = SharedInformerFactory::new(
        server.client(),
        FactoryConfig::default().cache_storage(test_storage()),
    );
    let ar = ApiResource::erase::<ConfigMap>(&());
    let dynamic = factory.dynamic_informer(&ar, &Scope::Namespaced);
    let meta = factory.metadata_informer::<ConfigMap>();
    assert_eq!(
        factory
            .dynamic_informer(&ar, &Scope::Namespaced)
            .indexer()
            .len(),
        0,
        "same informer, not yet synced"
    );
    factory.start();
    let synced = within("sync", factory.wait_for_cache_sync()).await;
    assert!(synced.values().all(|ok| *ok), "{synced:?}");
    let d: Arc<DynamicObject> = dynamic.lister().namespaced("ns").get("a").unwrap();
    assert_eq!(d.data["data"]["k"], "v");
    let m: Arc<PartialObjectMeta<ConfigMap>> = meta.lister().namespaced("ns").get("a").unwrap();
    assert_eq!(m.metadata.labels.as_ref().unwrap()["x"], "1");
    server.delete::<ConfigMap>(Some("ns"), "a").unwrap();
    eventually("delete seen by both", || {
        dynamic.indexer().is_empty() && meta.indexer().is_empty()
    })
    .await;
    within("shutdown", factory.shutdown()).await;
}

#[tokio::test]
async fn default_and_per_type_resync_periods() {
    let server = FakeApiServer::start_with_core().await.unwrap();
    server.create(&cm("ns", "a", &[])).unwrap();
    server
        .create(&Secret {
            metadata: ObjectMeta {
                name: Some("s".into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            ..Default::default()
        })
        .unwrap();
    let factory = SharedInformerFactory::new(
        server.client(),
        FactoryConfig::default()
            .cache_storage(test_storage())
            .default_resync(Duration::from_secs(1))
            .resync_for::<Secret>(Duration::ZERO),
    );
    let resyncs = Arc::new(Mutex::new(Vec::new()));
    let (r1, r2) = (resyncs.clone(), resyncs.clone());
    factory
        .informer::<ConfigMap>()
        .add_event_handler(
            ResourceEventHandlerFuncs::new()
                .on_update(move |_, _: &Arc<ConfigMap>| r1.lock().push("cm")),
        )
        .unwrap();
    factory
        .informer::<Secret>()
        .add_event_handler(
            ResourceEventHandlerFuncs::new()
                .on_update(move |_, _: &Arc<Secret>| r2.lock().push("secret")),
        )
        .unwrap();
    factory.start();
    within("sync", factory.wait_for_cache_sync()).await;
    // One ConfigMap, so each resync adds one entry; a second resync means the Secret's would
    // have come by now too, were its period not zero.
    eventually("two ConfigMap resyncs", || resyncs.lock().len() >= 2).await;
    let got = resyncs.lock().clone();
    assert!(
        got.iter().all(|k| *k == "cm"),
        "secrets have no resync: {got:?}"
    );
    within("shutdown", factory.shutdown()).await;
}

#[tokio::test]
async fn fifo_mode_applies_by_default_and_per_type() {
    use kube_informer::FifoMode;
    let server = FakeApiServer::start_with_core().await.unwrap();
    server.create(&cm("a", "one", &[])).unwrap();
    let factory = SharedInformerFactory::new(
        server.client(),
        FactoryConfig::default()
            .cache_storage(test_storage())
            .fifo_mode(FifoMode::InOrder)
            .fifo_mode_for::<Secret>(FifoMode::DeltaFifo),
    );
    let cms = factory.informer::<ConfigMap>();
    let secrets = factory.informer::<Secret>();
    assert_eq!(cms.fifo_mode(), FifoMode::InOrder);
    assert_eq!(secrets.fifo_mode(), FifoMode::DeltaFifo);
    factory.start();
    within("sync", factory.wait_for_cache_sync()).await;
    // The in-order cache knows the version it reflects; the DeltaFIFO one does not.
    assert_eq!(
        cms.last_store_sync_resource_version(),
        server.current_resource_version().to_string()
    );
    assert_eq!(secrets.last_store_sync_resource_version(), "");
    assert_eq!(cms.lister().list(&Default::default()).len(), 1);
    factory.shutdown().await;
}

#[tokio::test]
async fn wait_for_cache_sync_timeout_names_the_informers_that_did_not_sync() {
    let server = FakeApiServer::start_with_core().await.unwrap();
    let factory = SharedInformerFactory::new(
        server.client(),
        FactoryConfig::default()
            .cache_storage(test_storage())
            .reflector(kube_informer::ReflectorConfig::default().backoff(
                kube_informer::BackoffConfig {
                    initial: Duration::from_millis(10),
                    max: Duration::from_millis(20),
                    ..Default::default()
                },
            )),
    );
    let _cms = factory.informer::<ConfigMap>();
    let _ns = factory.informer::<Namespace>();
    // Every secret list fails: that informer cannot sync.
    server
        .faults()
        .fail_next_for(usize::MAX, 500, &[Verb::List]);
    let _secrets = factory.informer::<Secret>();
    factory.start();
    let result = within(
        "wait with a deadline",
        factory.wait_for_cache_sync_timeout(Duration::from_millis(500)),
    )
    .await;
    assert!(result.timed_out);
    assert_eq!(result.synced.len(), 3);
    let err = result.clone().into_result().unwrap_err();
    assert!(!err.unsynced.is_empty());
    assert!(err.to_string().contains("before the deadline"), "{err}");
    server.faults().clear();
    let ok = within(
        "wait after recovery",
        factory.wait_for_cache_sync_timeout(Duration::from_secs(10)),
    )
    .await;
    assert!(!ok.timed_out);
    assert_eq!(ok.into_result(), Ok(()));
    factory.shutdown().await;
}

/// Records what an informer reports, by metric name and labels; and each metric made.
#[derive(Default)]
struct Recorded(Mutex<BTreeMap<String, Vec<f64>>>, Mutex<Vec<String>>);

struct Handle(Arc<Recorded>, String);

impl kube_informer::workqueue::SettableGaugeMetric for Handle {
    fn set(&self, value: f64) {
        self.0
            .0
            .lock()
            .entry(self.1.clone())
            .or_default()
            .push(value);
    }
}

impl kube_informer::workqueue::HistogramMetric for Handle {
    fn observe(&self, value: f64) {
        self.0
            .0
            .lock()
            .entry(self.1.clone())
            .or_default()
            .push(value);
    }
}

struct Provider(Arc<Recorded>);

impl Provider {
    fn handle(&self, metric: &str, id: &kube_informer::InformerId) -> Box<Handle> {
        let key = format!(
            "{metric}{{name={},group={},version={},resource={}}}",
            id.name, id.group, id.version, id.resource
        );
        self.0.1.lock().push(key.clone());
        Box::new(Handle(self.0.clone(), key))
    }
}

impl kube_informer::InformerMetricsProvider for Provider {
    fn new_queued_items_metric(
        &self,
        id: &kube_informer::InformerId,
    ) -> Box<dyn kube_informer::workqueue::SettableGaugeMetric> {
        self.handle(kube_informer::informer::metric_names::QUEUED_ITEMS, id)
    }
    fn new_processing_latency_metric(
        &self,
        id: &kube_informer::InformerId,
    ) -> Box<dyn kube_informer::workqueue::HistogramMetric> {
        self.handle(
            kube_informer::informer::metric_names::PROCESSING_LATENCY,
            id,
        )
    }
    fn new_store_resource_version_metric(
        &self,
        id: &kube_informer::InformerId,
    ) -> Box<dyn kube_informer::workqueue::SettableGaugeMetric> {
        self.handle(
            kube_informer::informer::metric_names::STORE_RESOURCE_VERSION,
            id,
        )
    }
}

#[tokio::test]
async fn named_informers_report_client_go_metrics_with_their_labels() {
    use kube_informer::FifoMode;
    let server = FakeApiServer::start_with_core().await.unwrap();
    server.create(&cm("a", "one", &[])).unwrap();
    server.create(&cm("a", "two", &[])).unwrap();
    let recorded = Arc::new(Recorded::default());
    let factory = SharedInformerFactory::new(
        server.client(),
        FactoryConfig::default()
            .cache_storage(test_storage())
            .fifo_mode(FifoMode::InOrder)
            .fifo_mode_for::<Secret>(FifoMode::DeltaFifo)
            .informer_name("my-controller")
            .metrics_provider(Arc::new(Provider(recorded.clone()))),
    );
    let _cms = factory.informer::<ConfigMap>();
    let _secrets = factory.informer::<Secret>();
    // Same name and resource as the ConfigMap informer: as in client-go (`WithResource`), it
    // publishes nothing, rather than share and overwrite the first one's gauges.
    let _metadata = factory.metadata_informer::<ConfigMap>();
    factory.start();
    within("sync", factory.wait_for_cache_sync()).await;
    server.create(&cm("a", "three", &[])).unwrap();
    let rv = server.current_resource_version() as f64;
    let labels = "{name=my-controller,group=,version=v1,resource=configmaps}";
    let store_rv = format!("informer_store_resource_version{labels}");
    eventually("the store version reported", || {
        recorded
            .0
            .lock()
            .get(&store_rv)
            .and_then(|v| v.last().copied())
            == Some(rv)
    })
    .await;
    {
        let got = recorded.0.lock();
        let queued = &got[&format!("informer_queued_items{labels}")];
        assert!(queued.iter().any(|&n| n >= 1.0), "{queued:?}");
        assert_eq!(queued.last(), Some(&0.0));
        assert!(!got[&format!("informer_processing_latency_seconds{labels}")].is_empty());
        // The DeltaFIFO informer has no queue metrics (as client-go's DeltaFIFO) and no store
        // version to report.
        assert!(
            got.keys().all(|k| !k.contains("secrets")),
            "{:?}",
            got.keys()
        );
        let mut made = recorded.1.lock().clone();
        let all = made.len();
        made.sort();
        made.dedup();
        assert_eq!(made.len(), all, "a metric made twice: {made:?}");
    }
    factory.shutdown().await;
}

/// The root re-export is `InformerEvent`, so it sits next to Kubernetes' own `Event` in one
/// import list without a rename.
#[tokio::test]
async fn informer_events_do_not_clash_with_kubernetes_events() {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::Event;
    use kube_informer::InformerEvent;

    let server = FakeApiServer::start_with_core().await.unwrap();
    let factory = SharedInformerFactory::new(
        server.client(),
        FactoryConfig::default().cache_storage(test_storage()),
    );
    let mut events = factory.informer::<ConfigMap>().subscribe().unwrap();
    factory.start();
    server.create(&cm("ns", "a", &[])).unwrap();
    match within("the add", events.next()).await {
        Some(InformerEvent::Add { obj, .. }) => {
            assert_eq!(obj.metadata.name.as_deref(), Some("a"))
        }
        other => panic!("expected an add, got {other:?}"),
    }
    let k8s_event = Event::default();
    assert!(k8s_event.metadata.name.is_none());
    factory.shutdown().await;
}

/// `index_by` indexes by a field without building a map of `Arc<dyn Fn>`, before and after start.
#[tokio::test]
async fn index_by_a_field_before_and_after_start() {
    let server = FakeApiServer::start_with_core().await.unwrap();
    server.create(&cm("ns", "a", &[("app", "web")])).unwrap();
    server.create(&cm("ns", "b", &[("app", "db")])).unwrap();
    let factory = SharedInformerFactory::new(
        server.client(),
        FactoryConfig::default().cache_storage(test_storage()),
    );
    let informer = factory.informer::<ConfigMap>();
    informer
        .index_by("app", |c: &ConfigMap| {
            c.metadata.labels.as_ref()?.get("app").cloned()
        })
        .unwrap();
    factory.start();
    within("sync", factory.wait_for_cache_sync()).await;
    let names = |objs: Vec<Arc<ConfigMap>>| -> Vec<String> {
        objs.iter()
            .map(|o| o.metadata.name.clone().unwrap())
            .collect()
    };
    assert_eq!(
        names(informer.indexer().by_index("app", "web").unwrap()),
        ["a"]
    );
    // After start, existing objects are indexed at once.
    informer
        .index_by("name-len", |c: &ConfigMap| {
            [c.metadata
                .name
                .as_deref()
                .unwrap_or_default()
                .len()
                .to_string()]
        })
        .unwrap();
    assert_eq!(
        informer.indexer().by_index("name-len", "1").unwrap().len(),
        2
    );
    assert!(
        informer
            .index_by("app", |_: &ConfigMap| None::<String>)
            .is_err()
    );
    factory.shutdown().await;
}

/// Typed kube selectors filter as their strings do, and a dynamic informer takes the resource's
/// discovery `Scope`: a cluster-scoped one ignores the factory's namespace.
#[tokio::test]
async fn typed_selectors_and_dynamic_scope() {
    use kube::core::{Expression, Selector};

    let server = FakeApiServer::start_with_core().await.unwrap();
    server
        .create(&cm("team", "web", &[("app", "web")]))
        .unwrap();
    server.create(&cm("team", "db", &[("app", "db")])).unwrap();
    server
        .create(&Namespace {
            metadata: ObjectMeta {
                name: Some("team".into()),
                ..Default::default()
            },
            ..Default::default()
        })
        .unwrap();
    let selector: Selector = Expression::In("app".into(), ["web".to_owned()].into()).into();
    let factory = SharedInformerFactory::new(
        server.client(),
        FactoryConfig::default()
            .cache_storage(test_storage())
            .namespace("team")
            .labels(&selector)
            .fields(Expression::Equal("metadata.name".into(), "web".into())),
    );
    let lister = factory.lister::<ConfigMap>();
    let namespaces =
        factory.dynamic_informer(&ApiResource::erase::<Namespace>(&()), &Scope::Cluster);
    factory.start();
    within("sync", factory.wait_for_cache_sync()).await;
    let names: Vec<_> = lister
        .list(&Default::default())
        .iter()
        .map(|c| c.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["web"]);
    // The cluster-scoped list went to /api/v1/namespaces, not under the namespace; the factory's
    // selectors apply to it too, so nothing matches `app in (web)` there.
    assert!(namespaces.has_synced());
    assert!(namespaces.indexer().is_empty());
    let seen = server.requests();
    assert!(
        seen.iter().any(|r| r.path == "/api/v1/namespaces"),
        "cluster-scoped path requested: {seen:?}"
    );
    factory.shutdown().await;
}
