//! Typed informers (Pod, ConfigMap) and a metadata-only informer from one factory: initial
//! list, then create / update / delete with the right old and new objects; listers agree with
//! the server.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, PodSpec};
use kube::api::{Api, ObjectMeta, PartialObjectMeta, PostParams};
use kube::core::Selector;
use kube_informer::SharedInformerFactory;

use crate::common::{
    Recorder, Seen, assert_create_update_delete_seen, config_map, create_namespace,
    create_update_delete, key, rv, server_versions, versions, within,
};
use crate::support::Cluster;

fn labelled(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        labels: Some(BTreeMap::from([("step".to_owned(), "created".to_owned())])),
        ..ObjectMeta::default()
    }
}

fn pod(name: &str) -> Pod {
    Pod {
        metadata: labelled(name),
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "main".to_owned(),
                image: Some("registry.invalid/never-pulled:1".to_owned()),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
}

fn labelled_config_map(name: &str) -> ConfigMap {
    let mut cm = config_map(name, "v");
    cm.metadata = labelled(name);
    cm
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs kube-apiserver + etcd: run bash .ci/e2e.sh"]
async fn typed_pod_and_config_map_informers_see_create_update_delete_and_listers_agree() {
    let cluster = within(
        "start",
        Cluster::start_for("typed_pod_and_config_map_informers"),
    )
    .await;
    let admin = cluster.admin();
    let ns = "typed";
    create_namespace(&admin, ns).await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), ns);

    // Objects that exist before the informers start arrive as initial adds.
    let pp = PostParams::default();
    let early_pod = within("create", pods.create(&pp, &pod("early")))
        .await
        .expect("create pod");
    let early_cm = within("create", cms.create(&pp, &labelled_config_map("early")))
        .await
        .expect("create config map");

    let factory = SharedInformerFactory::new(
        cluster.admin(),
        crate::common::factory_config().namespace(ns),
    );
    let pod_informer = factory.informer::<Pod>();
    let cm_informer = factory.informer::<ConfigMap>();
    let meta_informer = factory.metadata_informer::<ConfigMap>();
    let pod_events = Recorder::<Pod>::new();
    let cm_events = Recorder::<ConfigMap>::new();
    let meta_events = Recorder::<PartialObjectMeta<ConfigMap>>::new();
    pod_informer
        .add_event_handler(pod_events.handler())
        .expect("add handler");
    cm_informer
        .add_event_handler(cm_events.handler())
        .expect("add handler");
    meta_informer
        .add_event_handler(meta_events.handler())
        .expect("add handler");
    factory.start();
    let synced = within("wait_for_cache_sync", factory.wait_for_cache_sync()).await;
    assert_eq!(synced.len(), 3, "{synced:?}");
    assert!(synced.values().all(|s| *s), "{synced:?}");

    let initial = |k: String, r: String| {
        vec![Seen::Add {
            key: k,
            rv: r,
            step: Some("created".to_owned()),
            initial: true,
        }]
    };
    assert_eq!(
        pod_events.wait_for("initial pod", 1).await,
        initial(key(&early_pod), rv(&early_pod))
    );
    assert_eq!(
        cm_events.wait_for("initial config map", 1).await,
        initial(key(&early_cm), rv(&early_cm))
    );
    assert_eq!(
        meta_events.wait_for("initial metadata", 1).await,
        initial(key(&early_cm), rv(&early_cm))
    );

    // Live changes: each write is one notification, in order, with the right objects.
    let (pod_created, pod_updated) = create_update_delete(&pods, &pod("live")).await;
    let (cm_created, cm_updated) = create_update_delete(&cms, &labelled_config_map("live")).await;
    let seen = pod_events.wait_for("pod add, update, delete", 5).await;
    assert_create_update_delete_seen("pod informer", &seen[1..], &pod_created, &pod_updated, true);
    let seen = cm_events
        .wait_for("config map add, update, delete", 4)
        .await;
    assert_create_update_delete_seen(
        "config map informer",
        &seen[1..],
        &cm_created,
        &cm_updated,
        false,
    );
    let seen = meta_events
        .wait_for("metadata add, update, delete", 4)
        .await;
    assert_create_update_delete_seen(
        "metadata informer",
        &seen[1..],
        &cm_created,
        &cm_updated,
        false,
    );

    // The full objects made it into the cache, not only their metadata.
    let cached = cm_informer
        .lister()
        .namespaced(ns)
        .get("early")
        .expect("early is cached");
    assert_eq!(cached.data, early_cm.data);
    assert_eq!(
        pod_informer
            .lister()
            .namespaced(ns)
            .get("early")
            .and_then(|p| p.spec.clone())
            .map(|s| s.containers[0].name.clone()),
        Some("main".to_owned())
    );

    // A few more objects, then the listers must agree with a fresh list from the server.
    for i in 0..5 {
        let name = format!("extra-{i}");
        within("create", cms.create(&pp, &labelled_config_map(&name)))
            .await
            .expect("create");
        within("create", pods.create(&pp, &pod(&name)))
            .await
            .expect("create");
    }
    let want_cms = server_versions(&cms).await;
    let want_pods = server_versions(&pods).await;
    assert_eq!(want_cms.len(), 6);
    crate::common::eventually("listers agree", crate::common::CONVERGE_TIMEOUT, || {
        let all = Selector::default();
        let got_cms = versions(cm_informer.lister().list(&all).iter().map(|o| &**o));
        let got_pods = versions(
            pod_informer
                .lister()
                .namespaced(ns)
                .list(&all)
                .iter()
                .map(|o| &**o),
        );
        let got_meta = versions(meta_informer.lister().list(&all).iter().map(|o| &**o));
        if got_cms == want_cms && got_pods == want_pods && got_meta == want_cms {
            Ok(())
        } else {
            Err(format!(
                "config maps {got_cms:?} vs {want_cms:?}; pods {got_pods:?} vs {want_pods:?}; \
                 metadata {got_meta:?}"
            ))
        }
    })
    .await;
    // A label selector is applied to cached objects.
    let updated_only = Selector::from_iter([("step", "updated")]);
    assert!(cm_informer.lister().list(&updated_only).is_empty());
    assert_eq!(
        cm_informer
            .lister()
            .namespaced(ns)
            .list(&Selector::from_iter([("step", "created")]))
            .len(),
        6
    );
    assert!(!cm_informer.last_sync_resource_version().is_empty());

    within("shutdown", factory.shutdown()).await;
    assert!(pod_informer.is_stopped() && cm_informer.is_stopped() && meta_informer.is_stopped());
}
