//! A CustomResourceDefinition created at run time, watched three ways from one factory: a
//! typed informer (`#[derive(CustomResource)]`), a dynamic informer (`DynamicObject` +
//! `ApiResource`), and a metadata-only informer.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, ListParams, ObjectMeta, PostParams};
use kube::core::Selector;
use kube::discovery::Scope;
use kube::{CustomResource, CustomResourceExt};
use kube_informer::SharedInformerFactory;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{
    CONVERGE_TIMEOUT, Recorder, Seen, assert_create_update_delete_seen, create_namespace,
    create_update_delete, eventually, key, rv, server_versions, versions, within,
};
use crate::support::Cluster;

/// A namespaced custom resource for the test.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "e2e.kube-informer.dev",
    version = "v1",
    kind = "Widget",
    namespaced
)]
pub struct WidgetSpec {
    size: i64,
}

pub fn widget(name: &str, size: i64) -> Widget {
    let mut w = Widget::new(name, WidgetSpec { size });
    w.metadata = ObjectMeta {
        name: Some(name.to_owned()),
        labels: Some(BTreeMap::from([("step".to_owned(), "created".to_owned())])),
        ..ObjectMeta::default()
    };
    w
}

/// Creates the CRD and waits until the server serves the new resource.
pub async fn install_crd(cluster: &Cluster, ns: &str) {
    let crds: Api<CustomResourceDefinition> = Api::all(cluster.admin());
    within(
        "create CRD",
        crds.create(&PostParams::default(), &Widget::crd()),
    )
    .await
    .expect("admin creates the CRD");
    let widgets: Api<Widget> = Api::namespaced(cluster.admin(), ns);
    // Established first, then the resource's handler must answer (it is installed a moment
    // after the condition flips).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let crd = within("get CRD", crds.get(Widget::crd_name()))
            .await
            .expect("get CRD");
        let established = crd
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        if established
            && within("list widgets", widgets.list(&ListParams::default()))
                .await
                .is_ok()
        {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the Widget CRD is not served after 60s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs kube-apiserver + etcd: run bash .ci/e2e.sh"]
async fn custom_resource_typed_dynamic_and_metadata_informers_see_changes() {
    let cluster = within("start", Cluster::start_for("custom_resource_informers")).await;
    let admin = cluster.admin();
    let ns = "crd";
    create_namespace(&admin, ns).await;
    install_crd(&cluster, ns).await;
    let widgets: Api<Widget> = Api::namespaced(admin.clone(), ns);
    let early = within(
        "create",
        widgets.create(&PostParams::default(), &widget("early", 1)),
    )
    .await
    .expect("create widget");

    let factory = SharedInformerFactory::new(
        cluster.admin(),
        crate::common::factory_config().namespace(ns),
    );
    let typed = factory.informer::<Widget>();
    let ar = ApiResource::erase::<Widget>(&());
    let dynamic = factory.dynamic_informer(&ar, &Scope::Namespaced);
    let metadata = factory.metadata_informer::<Widget>();
    // The factory hands out one informer per kind.
    assert_eq!(
        typed.indexer().len(),
        factory.informer::<Widget>().indexer().len()
    );
    let typed_events = Recorder::new();
    let dynamic_events = Recorder::new();
    let metadata_events = Recorder::new();
    typed
        .add_event_handler(typed_events.handler())
        .expect("add handler");
    dynamic
        .add_event_handler(dynamic_events.handler())
        .expect("add handler");
    metadata
        .add_event_handler(metadata_events.handler())
        .expect("add handler");
    factory.start();
    let synced = within("wait_for_cache_sync", factory.wait_for_cache_sync()).await;
    assert_eq!(synced.len(), 3, "{synced:?}");
    assert!(synced.values().all(|s| *s), "{synced:?}");

    let initial = vec![Seen::Add {
        key: key(&early),
        rv: rv(&early),
        step: Some("created".to_owned()),
        initial: true,
    }];
    assert_eq!(typed_events.wait_for("typed initial", 1).await, initial);
    assert_eq!(dynamic_events.wait_for("dynamic initial", 1).await, initial);
    assert_eq!(
        metadata_events.wait_for("metadata initial", 1).await,
        initial
    );

    // Each kind of informer decoded what it should: the typed spec, the dynamic data, and
    // metadata only.
    let cached = typed
        .lister()
        .namespaced(ns)
        .get("early")
        .expect("early is cached");
    assert_eq!(cached.spec, WidgetSpec { size: 1 });
    let cached = dynamic
        .lister()
        .namespaced(ns)
        .get("early")
        .expect("early is cached");
    assert_eq!(cached.data["spec"]["size"], 1, "{:?}", cached.data);
    assert_eq!(
        cached.types.as_ref().map(|t| t.kind.as_str()),
        Some("Widget")
    );
    let cached = metadata
        .lister()
        .namespaced(ns)
        .get("early")
        .expect("early is cached");
    assert_eq!(cached.metadata.uid, early.metadata.uid);

    let (created, updated) = create_update_delete(&widgets, &widget("live", 2)).await;
    let seen = typed_events.wait_for("typed changes", 4).await;
    assert_create_update_delete_seen("typed informer", &seen[1..], &created, &updated, false);
    let seen = dynamic_events.wait_for("dynamic changes", 4).await;
    assert_create_update_delete_seen("dynamic informer", &seen[1..], &created, &updated, false);
    let seen = metadata_events.wait_for("metadata changes", 4).await;
    assert_create_update_delete_seen("metadata informer", &seen[1..], &created, &updated, false);

    for i in 0..5 {
        within(
            "create",
            widgets.create(&PostParams::default(), &widget(&format!("extra-{i}"), i)),
        )
        .await
        .expect("create widget");
    }
    let want = server_versions(&widgets).await;
    assert_eq!(want.len(), 6);
    eventually("listers agree with the server", CONVERGE_TIMEOUT, || {
        let all = Selector::default();
        let t = versions(typed.lister().list(&all).iter().map(|o| &**o));
        let d = versions(dynamic.lister().list(&all).iter().map(|o| &**o));
        let m = versions(metadata.lister().list(&all).iter().map(|o| &**o));
        if t == want && d == want && m == want {
            Ok(())
        } else {
            Err(format!(
                "want {want:?}; typed {t:?}; dynamic {d:?}; metadata {m:?}"
            ))
        }
    })
    .await;

    within("shutdown", factory.shutdown()).await;
}
