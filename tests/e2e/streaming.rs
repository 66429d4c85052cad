//! The initial state two ways against the real server: a streaming list (`sendInitialEvents`,
//! KEP-3157) and a classic list followed by a watch. A lister-watcher wrapper counts the
//! requests, so the streaming test proves that no list request was made.

use std::sync::{Arc, Mutex};

use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::core::Selector;
use kube_informer::reflector::{ListOptions, ListPage, ListWatchError, WatchOptions, WatchStream};
use kube_informer::{
    ApiListerWatcher, Event, FactoryConfig, InformerConfig, ListerWatcher, ReflectorConfig,
    SharedIndexInformer, SharedInformerFactory,
};

use crate::common::{
    CONVERGE_TIMEOUT, ErrorLog, Recorder, Seen, config_map, create_namespace, eventually, key, rv,
    server_versions, versions, within,
};
use crate::support::Cluster;

/// Passes every call through to an [`ApiListerWatcher`], remembering the options of each.
struct Counting {
    inner: ApiListerWatcher<ConfigMap>,
    lists: Arc<Mutex<Vec<ListOptions>>>,
    watches: Arc<Mutex<Vec<WatchOptions>>>,
}

impl ListerWatcher<ConfigMap> for Counting {
    fn list(
        &self,
        options: ListOptions,
    ) -> BoxFuture<'_, Result<ListPage<ConfigMap>, ListWatchError>> {
        self.lists.lock().unwrap().push(options.clone());
        self.inner.list(options)
    }

    fn watch(
        &self,
        options: WatchOptions,
    ) -> BoxFuture<'_, Result<WatchStream<ConfigMap>, ListWatchError>> {
        self.watches.lock().unwrap().push(options.clone());
        self.inner.watch(options)
    }
}

type Calls = (Arc<Mutex<Vec<ListOptions>>>, Arc<Mutex<Vec<WatchOptions>>>);

fn counting(api: Api<ConfigMap>) -> (Counting, Calls) {
    let lists = Arc::new(Mutex::new(Vec::new()));
    let watches = Arc::new(Mutex::new(Vec::new()));
    (
        Counting {
            inner: ApiListerWatcher::new(api),
            lists: lists.clone(),
            watches: watches.clone(),
        },
        (lists, watches),
    )
}

const OBJECTS: usize = 30;

/// Creates the namespace and [`OBJECTS`] config maps in it.
async fn populate(cluster: &Cluster, ns: &str) -> Api<ConfigMap> {
    let admin = cluster.admin();
    create_namespace(&admin, ns).await;
    let cms: Api<ConfigMap> = Api::namespaced(admin, ns);
    for i in 0..OBJECTS {
        within(
            "create",
            cms.create(&PostParams::default(), &config_map(&format!("cm-{i}"), "0")),
        )
        .await
        .expect("create");
    }
    cms
}

/// After the initial state: one create, one update, one delete, which `events` (already past
/// the initial adds) must show in order, with the right objects.
async fn live_changes_arrive(
    cms: &Api<ConfigMap>,
    events: &mut kube_informer::EventStream<ConfigMap>,
) {
    let created = within(
        "create",
        cms.create(&PostParams::default(), &config_map("live", "0")),
    )
    .await
    .expect("create");
    let before = within("get", cms.get("cm-0")).await.expect("get");
    let patch = serde_json::json!({ "metadata": { "labels": { "step": "updated" } } });
    let updated = within(
        "patch",
        cms.patch("cm-0", &PatchParams::default(), &Patch::Merge(&patch)),
    )
    .await
    .expect("patch");
    within("delete", cms.delete("cm-1", &DeleteParams::default()))
        .await
        .expect("delete");
    let mut seen = Vec::new();
    for _ in 0..3 {
        let ev = within("next live event", events.next())
            .await
            .expect("the stream ends only when the informer stops");
        seen.push(Seen::of(&ev));
    }
    assert_eq!(
        seen[0],
        Seen::Add {
            key: key(&created),
            rv: rv(&created),
            step: None,
            initial: false
        }
    );
    assert_eq!(
        seen[1],
        Seen::Update {
            key: key(&updated),
            old_rv: rv(&before),
            old_step: None,
            new_rv: rv(&updated),
            new_step: Some("updated".to_owned()),
            new_deleting: false,
        }
    );
    assert!(
        matches!(&seen[2], Seen::Delete { key, tombstone: false, .. } if key.ends_with("/cm-1")),
        "{seen:?}"
    );
}

/// Takes the initial adds off `events` and checks they are exactly the server's objects.
async fn initial_adds(events: &mut kube_informer::EventStream<ConfigMap>, cms: &Api<ConfigMap>) {
    let want = server_versions(cms).await;
    let mut got = std::collections::BTreeMap::new();
    for _ in 0..want.len() {
        match within("next initial event", events.next()).await {
            Some(Event::Add {
                obj,
                is_in_initial_list: true,
            }) => {
                got.insert(key(&*obj), rv(&*obj));
            }
            other => panic!("expected an initial add, got {other:?}"),
        }
    }
    assert_eq!(got, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_initial_list_streams_from_the_real_server_without_list_requests() {
    let Some(cluster) = within("start", Cluster::start_or_skip("streaming_initial_list")).await
    else {
        return;
    };
    let ns = "streaming";
    let cms = populate(&cluster, ns).await;

    let (lw, (lists, watches)) = counting(Api::namespaced(cluster.admin(), ns));
    let informer = SharedIndexInformer::new(
        lw,
        InformerConfig::default().reflector(ReflectorConfig::default().streaming_list(true)),
    );
    let errors = ErrorLog::default();
    informer
        .set_watch_error_handler(errors.handler())
        .expect("before start");
    let mut events = informer.subscribe().expect("subscribe");
    informer.start();
    assert!(within("sync", informer.wait_for_cache_sync()).await);

    // It streamed: one watch with sendInitialEvents, no list, and no error (a refused
    // streaming list would have been reported before falling back to list+watch).
    assert!(
        lists.lock().unwrap().is_empty(),
        "{:?}",
        lists.lock().unwrap()
    );
    {
        let w = watches.lock().unwrap();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].send_initial_events && w[0].allow_bookmarks, "{w:?}");
    }
    assert!(errors.all().is_empty(), "{:?}", errors.all());
    assert!(!informer.last_sync_resource_version().is_empty());

    initial_adds(&mut events, &cms).await;
    assert_eq!(
        versions(
            informer
                .lister()
                .list(&Selector::default())
                .iter()
                .map(|o| &**o)
        ),
        server_versions(&cms).await
    );

    // The same watch goes on after the initial events.
    live_changes_arrive(&cms, &mut events).await;
    assert_eq!(watches.lock().unwrap().len(), 1);
    assert!(lists.lock().unwrap().is_empty());

    // Through the factory as well: the same configuration, no fallback.
    let factory = SharedInformerFactory::new(
        cluster.admin(),
        FactoryConfig::default()
            .namespace(ns)
            .reflector(ReflectorConfig::default().streaming_list(true)),
    );
    let from_factory = factory.informer::<ConfigMap>();
    let factory_errors = ErrorLog::default();
    from_factory
        .set_watch_error_handler(factory_errors.handler())
        .expect("before start");
    factory.start();
    within("factory sync", factory.wait_for_cache_sync()).await;
    let want = server_versions(&cms).await;
    eventually(
        "factory informer matches the server",
        CONVERGE_TIMEOUT,
        || {
            let got = versions(
                from_factory
                    .lister()
                    .list(&Selector::default())
                    .iter()
                    .map(|o| &**o),
            );
            if got == want {
                Ok(())
            } else {
                Err(format!("{got:?} vs {want:?}"))
            }
        },
    )
    .await;
    assert!(
        factory_errors.all().is_empty(),
        "{:?}",
        factory_errors.all()
    );

    within("shutdown", informer.shutdown()).await;
    within("shutdown", factory.shutdown()).await;
    // The subscription ends with its informer.
    assert!(within("stream end", events.next()).await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_then_watch_from_the_listed_resource_version() {
    let Some(cluster) = within("start", Cluster::start_or_skip("list_then_watch")).await else {
        return;
    };
    let ns = "listwatch";
    let cms = populate(&cluster, ns).await;

    let (lw, (lists, watches)) = counting(Api::namespaced(cluster.admin(), ns));
    let informer = SharedIndexInformer::new(lw, InformerConfig::default());
    let errors = ErrorLog::default();
    informer
        .set_watch_error_handler(errors.handler())
        .expect("before start");
    let mut events = informer.subscribe().expect("subscribe");
    informer.start();
    assert!(within("sync", informer.wait_for_cache_sync()).await);
    initial_adds(&mut events, &cms).await;

    // One list at resourceVersion 0 (from the watch cache, one page for 30 objects), then a
    // watch from the version that list returned.
    {
        let l = lists.lock().unwrap();
        assert_eq!(l.len(), 1, "{l:?}");
        assert_eq!(l[0].resource_version, "0");
        assert_eq!(l[0].limit, Some(500));
    }
    eventually("the watch starts", CONVERGE_TIMEOUT, || {
        if watches.lock().unwrap().is_empty() {
            Err("no watch yet".to_owned())
        } else {
            Ok(())
        }
    })
    .await;
    {
        let w = watches.lock().unwrap();
        assert!(!w[0].send_initial_events && w[0].allow_bookmarks, "{w:?}");
        assert_eq!(w[0].resource_version, informer.last_sync_resource_version());
        assert!(
            (300..=600).contains(&w[0].timeout_seconds),
            "timeoutSeconds {} outside client-go's [300, 600]",
            w[0].timeout_seconds
        );
    }

    live_changes_arrive(&cms, &mut events).await;
    assert_eq!(lists.lock().unwrap().len(), 1, "no relist");
    assert_eq!(watches.lock().unwrap().len(), 1, "no re-watch");
    assert!(errors.all().is_empty(), "{:?}", errors.all());
    assert_eq!(
        versions(
            informer
                .lister()
                .list(&Selector::default())
                .iter()
                .map(|o| &**o)
        ),
        server_versions(&cms).await
    );
    within("shutdown", informer.shutdown()).await;
}
