//! Informers under faults of a real control plane: a resourceVersion compacted away while the
//! informer was disconnected, kube-apiserver killed mid-watch, and a user without RBAC access.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use kube::Client;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::core::Selector;
use kube_informer::{
    ApiListerWatcher, BackoffConfig, ReflectorConfig, SharedIndexInformer, SharedInformerFactory,
};

use crate::common::{
    CONVERGE_TIMEOUT, ErrorLog, Recorder, Seen, config_map, config_maps_in, eventually, key, rv,
    server_versions, versions, within,
};
use crate::proxy::Proxy;
use crate::support::Cluster;

async fn create_config_maps(cms: &Api<ConfigMap>, names: impl IntoIterator<Item = String>) {
    for name in names {
        within(
            "create",
            cms.create(&PostParams::default(), &config_map(&name, "0")),
        )
        .await
        .unwrap_or_else(|e| panic!("create {name}: {e}"));
    }
}

async fn label(cms: &Api<ConfigMap>, name: &str, step: &str) -> ConfigMap {
    let patch = serde_json::json!({ "metadata": { "labels": { "step": step } } });
    within(
        "patch",
        cms.patch(name, &PatchParams::default(), &Patch::Merge(&patch)),
    )
    .await
    .unwrap_or_else(|e| panic!("patch {name}: {e}"))
}

async fn delete(cms: &Api<ConfigMap>, name: &str) {
    within("delete", cms.delete(name, &DeleteParams::default()))
        .await
        .unwrap_or_else(|e| panic!("delete {name}: {e}"));
}

/// Waits until the informer's cache holds exactly the server's versions.
async fn cache_matches_server(
    what: &str,
    cache: impl Fn() -> BTreeMap<String, String>,
    cms: &Api<ConfigMap>,
) {
    let want = server_versions(cms).await;
    eventually(what, CONVERGE_TIMEOUT, || {
        let got = cache();
        if got == want {
            Ok(())
        } else {
            Err(format!("cache {got:?}\nserver {want:?}"))
        }
    })
    .await;
}

/// The last notification per key must describe the object's final state: an add or update
/// to the server's resourceVersion for a live object, a delete for a gone one.
fn assert_last_events_match(
    seen: &[Seen],
    server: &BTreeMap<String, String>,
) -> Result<(), String> {
    let mut last: BTreeMap<&str, &Seen> = BTreeMap::new();
    for s in seen {
        last.insert(s.key(), s);
    }
    for (k, s) in &last {
        match (server.get(*k), s) {
            (Some(want), Seen::Add { rv, .. } | Seen::Update { new_rv: rv, .. }) if rv == want => {}
            (None, Seen::Delete { .. }) => {}
            (want, s) => return Err(format!("{k}: last notification {s:?}, server has {want:?}")),
        }
    }
    for k in server.keys() {
        if !last.contains_key(k.as_str()) {
            return Err(format!("{k}: never notified"));
        }
    }
    Ok(())
}

/// The informer is cut off (behind a proxy) while objects are deleted, updated and created,
/// etcd is compacted and the apiserver restarted, so its re-watch gets 410 Gone. It relists,
/// and delivers `DeletedFinalStateUnknown` tombstones for exactly the deleted objects (carrying
/// their last known state), an update for the changed one and an add for the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs kube-apiserver + etcd: run bash .ci/e2e.sh"]
async fn relist_after_expiry_delivers_tombstones_for_objects_deleted_while_disconnected() {
    let mut cluster = within("start", Cluster::start_for("relist_after_expiry")).await;
    let ns = "expiry";
    let cms = config_maps_in(&cluster, ns).await;
    create_config_maps(&cms, (0..10).map(|i| format!("cm-{i}"))).await;

    let proxy = Proxy::start(cluster.apiserver_port()).await;
    let mut config = cluster.admin_config();
    config.cluster_url = proxy.url().parse().expect("proxy URL");
    let proxied = Client::try_from(config).expect("client through the proxy");
    // A short backoff keeps the test quick; the rules under test do not depend on it.
    let backoff = BackoffConfig {
        initial: Duration::from_millis(100),
        max: Duration::from_secs(1),
        ..BackoffConfig::default()
    };
    let informer = SharedIndexInformer::new(
        ApiListerWatcher::new(Api::<ConfigMap>::namespaced(proxied, ns)),
        crate::common::informer_config().reflector(ReflectorConfig::default().backoff(backoff)),
    );
    let errors = ErrorLog::attach(&informer);
    let events = Recorder::attach(&informer);
    informer.start();
    assert!(within("sync", informer.wait_for_cache_sync()).await);
    events.wait_for("initial adds", 10).await;
    let before: BTreeMap<String, String> = versions(
        informer
            .lister()
            .list(&Selector::default())
            .iter()
            .map(|o| &**o),
    );
    assert!(errors.all().is_empty(), "{:?}", errors.all());

    proxy.cut();
    // The informer notices: its watch breaks and its re-watches are refused.
    eventually("the informer reports the cut", CONVERGE_TIMEOUT, || {
        if errors.all().is_empty() {
            Err("no error yet".to_owned())
        } else {
            Ok(())
        }
    })
    .await;

    for name in ["cm-0", "cm-1", "cm-2"] {
        delete(&cms, name).await;
    }
    let updated = label(&cms, "cm-3", "updated").await;
    let created = within(
        "create",
        cms.create(&PostParams::default(), &config_map("cm-new", "0")),
    )
    .await
    .expect("create");
    let revision = within("compact", cluster.compact())
        .await
        .expect("etcd compacts");
    assert!(revision >= rv(&created).parse::<i64>().expect("integer RV"));
    within("restart", cluster.restart_apiserver())
        .await
        .expect("apiserver restarts");
    assert_eq!(
        events.len(),
        10,
        "nothing can arrive while disconnected: {:#?}",
        events.seen()
    );

    proxy.restore();
    // 5 changes, plus a same-version update for each of the 6 unchanged objects: the relist
    // lists them again, and a handler hears of that until a resync check marks it not syncing,
    // which never happens in an informer without resync (client-go `addListener`).
    let seen = events.wait_for("changes after reconnecting", 21).await;
    let mut got: Vec<Seen> = seen[10..].to_vec();
    got.sort();
    let tombstone = |name: &str| {
        let k = format!("{ns}/{name}");
        Seen::Delete {
            rv: before[&k].clone(),
            key: k,
            step: None,
            tombstone: true,
        }
    };
    let k3 = key(&updated);
    let mut want = vec![
        tombstone("cm-0"),
        tombstone("cm-1"),
        tombstone("cm-2"),
        Seen::Update {
            old_rv: before[&k3].clone(),
            key: k3,
            old_step: None,
            new_rv: rv(&updated),
            new_step: Some("updated".to_owned()),
            new_deleting: false,
        },
        Seen::Add {
            key: key(&created),
            rv: rv(&created),
            step: None,
            initial: false,
        },
    ];
    for name in ["cm-4", "cm-5", "cm-6", "cm-7", "cm-8", "cm-9"] {
        let k = format!("{ns}/{name}");
        want.push(Seen::Update {
            old_rv: before[&k].clone(),
            new_rv: before[&k].clone(),
            key: k,
            old_step: None,
            new_step: None,
            new_deleting: false,
        });
    }
    want.sort();
    assert_eq!(got, want);
    // The tombstones carry the last state the informer knew.
    for ev in &events.events()[10..] {
        if let kube_informer::InformerEvent::Delete(
            kube_informer::DeltaObject::DeletedFinalStateUnknown(t),
        ) = ev
        {
            assert_eq!(t.obj.data, config_map("x", "0").data);
            assert_eq!(t.key.as_str(), key(&*t.obj));
        }
    }
    // It got there by relisting after an expired version.
    let errs = errors.all();
    eprintln!("errors while cut off and after: {errs:#?}");
    assert!(errs.iter().any(|e| e.expired), "no 410 reported: {errs:#?}");

    cache_matches_server(
        "cache equals the server after the relist",
        || {
            versions(
                informer
                    .lister()
                    .list(&Selector::default())
                    .iter()
                    .map(|o| &**o),
            )
        },
        &cms,
    )
    .await;
    // Nothing else trickles in afterwards: each unchanged object was announced once, by the
    // relist, as a same-version update.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(events.len(), 21, "{:#?}", events.seen());
    within("shutdown", informer.shutdown()).await;
    drop(proxy);
}

/// kube-apiserver is SIGKILLed and restarted while the informer watches and a writer keeps
/// changing objects: the informer recovers, its cache ends equal to the server, and its last
/// notification for each object matches the object's final state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs kube-apiserver + etcd: run bash .ci/e2e.sh"]
async fn informer_recovers_after_apiserver_is_killed_and_restarted_mid_watch() {
    let mut cluster = within("start", Cluster::start_for("apiserver_restart")).await;
    let ns = "restart";
    let cms = config_maps_in(&cluster, ns).await;
    create_config_maps(&cms, (0..20).map(|i| format!("cm-{i}"))).await;

    let factory = SharedInformerFactory::new(
        cluster.admin(),
        crate::common::factory_config().namespace(ns),
    );
    let informer = factory.informer::<ConfigMap>();
    let errors = ErrorLog::attach(&informer);
    let events = Recorder::attach(&informer);
    factory.start();
    within("sync", factory.wait_for_cache_sync()).await;
    events.wait_for("initial adds", 20).await;

    // A writer that keeps relabelling cm-10..cm-19 throughout, ignoring failures while the
    // apiserver is down.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        let cms = cms.clone();
        tokio::spawn(async move {
            let mut writes = 0u32;
            let mut i = 0u32;
            while !stop.load(Ordering::SeqCst) {
                let name = format!("cm-{}", 10 + i % 10);
                let patch =
                    serde_json::json!({ "metadata": { "labels": { "step": i.to_string() } } });
                let (params, patch) = (PatchParams::default(), Patch::Merge(&patch));
                let write = cms.patch(&name, &params, &patch);
                if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(5), write).await {
                    writes += 1;
                } else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                i += 1;
            }
            writes
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    cluster.stop_apiserver();
    tokio::time::sleep(Duration::from_secs(1)).await;
    within("start apiserver", cluster.start_apiserver())
        .await
        .expect("apiserver starts again");
    for i in 0..5 {
        delete(&cms, &format!("cm-{i}")).await;
        label(&cms, &format!("cm-{}", 5 + i), "after-restart").await;
    }
    create_config_maps(&cms, (0..5).map(|i| format!("new-{i}"))).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::SeqCst);
    let writes = within("writer", writer).await.expect("writer task");
    assert!(writes > 0, "the writer never got through");

    cache_matches_server(
        "cache equals the server after the restart",
        || {
            versions(
                informer
                    .lister()
                    .list(&Selector::default())
                    .iter()
                    .map(|o| &**o),
            )
        },
        &cms,
    )
    .await;
    let server = server_versions(&cms).await;
    eventually(
        "last notifications match the final state",
        CONVERGE_TIMEOUT,
        || assert_last_events_match(&events.seen(), &server),
    )
    .await;
    eprintln!(
        "{writes} writes during the restart; errors: {:#?}",
        errors.all()
    );
    assert!(
        !errors.all().is_empty(),
        "the outage went unnoticed by the watch-error handler"
    );
    within("shutdown", factory.shutdown()).await;
}

/// A user without RBAC access: every list is refused with 403, the watch-error handler sees
/// each refusal, retries back off exponentially (no hot loop), and the informer syncs once an
/// admin grants access.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs kube-apiserver + etcd: run bash .ci/e2e.sh"]
async fn forbidden_informer_backs_off_then_syncs_once_rbac_grants_access() {
    let cluster = within("start", Cluster::start_for("forbidden_then_granted")).await;
    let ns = "rbac";
    let cms = config_maps_in(&cluster, ns).await;
    let admin = cluster.admin();
    create_config_maps(&cms, (0..3).map(|i| format!("cm-{i}"))).await;

    let factory = SharedInformerFactory::new(
        cluster.restricted(),
        crate::common::factory_config().namespace(ns),
    );
    let informer = factory.informer::<ConfigMap>();
    let errors = ErrorLog::attach(&informer);
    factory.start();

    // Ten seconds of refusals with the default backoff (800 ms, ×2, jitter up to ×2): the
    // attempts come at most at 0, 0.8, 2.4, 5.6 s... so 4 or 5 of them, never a hot loop.
    let window = Duration::from_secs(10);
    tokio::time::sleep(window).await;
    assert!(!informer.has_synced());
    let errs = errors.all();
    eprintln!("{} refusals in {window:?}: {errs:#?}", errs.len());
    assert!(
        errs.iter().all(|e| e.status == Some(403)),
        "every error is a 403: {errs:#?}"
    );
    assert!(
        (2..=10).contains(&errs.len()),
        "{} errors in {window:?}: {errs:#?}",
        errs.len()
    );
    for (i, pair) in errs.windows(2).enumerate() {
        let gap = pair[1].at.duration_since(pair[0].at);
        // Delay n is at least 800 ms × 2^n before jitter; allow some timer slack.
        let floor = Duration::from_millis(800 * (1 << i)).mul_f64(0.9);
        assert!(
            gap >= floor,
            "retry {} came {gap:?} after the previous one, less than {floor:?}: {errs:#?}",
            i + 1
        );
    }

    let role = ClusterRole {
        metadata: ObjectMeta {
            name: Some("config-map-reader".to_owned()),
            ..ObjectMeta::default()
        },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["configmaps".to_owned()]),
            verbs: vec!["get".to_owned(), "list".to_owned(), "watch".to_owned()],
            ..PolicyRule::default()
        }]),
        ..ClusterRole::default()
    };
    let binding = ClusterRoleBinding {
        metadata: ObjectMeta {
            name: Some("restricted-reads-config-maps".to_owned()),
            ..ObjectMeta::default()
        },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".to_owned()),
            kind: "ClusterRole".to_owned(),
            name: "config-map-reader".to_owned(),
        },
        subjects: Some(vec![Subject {
            api_group: Some("rbac.authorization.k8s.io".to_owned()),
            kind: "User".to_owned(),
            name: "restricted".to_owned(),
            namespace: None,
        }]),
    };
    let pp = PostParams::default();
    within(
        "create role",
        Api::<ClusterRole>::all(admin.clone()).create(&pp, &role),
    )
    .await
    .expect("create cluster role");
    within(
        "create binding",
        Api::<ClusterRoleBinding>::all(admin.clone()).create(&pp, &binding),
    )
    .await
    .expect("create cluster role binding");

    // The next retry succeeds; with the backoff grown to at most 12.8 s (×2 jitter) that is
    // well within a minute.
    let synced = tokio::time::timeout(Duration::from_secs(60), informer.wait_for_cache_sync())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "not synced 60 s after access was granted, likely stuck: {:#?}",
                errors.all()
            )
        });
    assert!(synced);
    let refusals = errors.all().len();
    cache_matches_server(
        "cache equals the server once allowed",
        || {
            versions(
                informer
                    .lister()
                    .list(&Selector::default())
                    .iter()
                    .map(|o| &**o),
            )
        },
        &cms,
    )
    .await;
    // And it watches: a new object arrives.
    create_config_maps(&cms, ["late".to_owned()]).await;
    cache_matches_server(
        "the watch delivers new objects",
        || {
            versions(
                informer
                    .lister()
                    .list(&Selector::default())
                    .iter()
                    .map(|o| &**o),
            )
        },
        &cms,
    )
    .await;
    assert_eq!(
        errors.all().len(),
        refusals,
        "errors after access was granted"
    );
    within("shutdown", factory.shutdown()).await;
}
