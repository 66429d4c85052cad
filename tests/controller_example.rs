//! `examples/controller.rs`, the code itself, against the fake API server: what it writes, how
//! it retries, and that it writes nothing else. The pattern of README's "Testing your
//! controller".
#![cfg(feature = "testing")]

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;
use kube_informer::testing::{FakeApiServer, Verb};

#[path = "../examples/controller.rs"]
#[allow(dead_code)] // the example's `main`
mod controller;

use controller::{ANNOTATION, Controller, MAX_RETRIES, checksum};

const DEADLOCK: &str = "likely deadlocked";

fn configmap(namespace: &str, name: &str, labelled: bool, data: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            labels: labelled.then(|| {
                BTreeMap::from([("example.com/checksum".to_string(), "enabled".to_string())])
            }),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("value".to_string(), data.to_string())])),
        ..Default::default()
    }
}

/// Five labelled ConfigMaps in `default`, plus two the controller must leave alone: one
/// unlabelled, one labelled in another namespace.
async fn seeded() -> FakeApiServer {
    let server = FakeApiServer::start_with_core().await.unwrap();
    for i in 0..5 {
        server
            .create(&configmap(
                "default",
                &format!("app-{i}"),
                true,
                &i.to_string(),
            ))
            .unwrap();
    }
    server
        .create(&configmap("default", "unlabelled", false, "x"))
        .unwrap();
    server
        .create(&configmap("elsewhere", "app-0", true, "y"))
        .unwrap();
    server
}

async fn settle(c: &Controller) {
    tokio::time::timeout(Duration::from_secs(30), async {
        while !c.settled() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect(DEADLOCK);
}

fn annotation(cm: &ConfigMap) -> Option<&str> {
    cm.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION))
        .map(String::as_str)
}

fn stored(server: &FakeApiServer, namespace: &str, name: &str) -> ConfigMap {
    server.get(Some(namespace), name).unwrap().unwrap()
}

/// The controller's writes, as `(method, path, status)`.
fn writes(server: &FakeApiServer) -> Vec<(String, String, u16)> {
    server
        .requests()
        .into_iter()
        .filter(|r| !matches!(r.verb, Verb::Get | Verb::List | Verb::Watch))
        .map(|r| (r.method, r.path, r.status))
        .collect()
}

fn app_path(i: usize) -> String {
    format!("/api/v1/namespaces/default/configmaps/app-{i}")
}

#[tokio::test]
async fn annotates_every_labelled_configmap_once_and_retries_injected_failures() {
    let server = seeded().await;
    let before_rv = server.current_resource_version();
    server.faults().fail_next_for(3, 500, &[Verb::Update]);
    let c = Controller::start(server.client(), "default").await.unwrap();
    settle(&c).await;
    let stats = c.stop().await.unwrap();

    for i in 0..5 {
        let cm = stored(&server, "default", &format!("app-{i}"));
        assert_eq!(annotation(&cm), Some(checksum(&cm).as_str()), "app-{i}");
        // Only the annotation changed.
        assert_eq!(
            cm.data,
            configmap("default", "x", true, &i.to_string()).data
        );
    }
    assert_eq!(stats.retries, 3, "{stats:?}");
    assert!(stats.gave_up.is_empty(), "{stats:?}");
    assert_eq!(stats.updated.len(), 5, "{stats:?}");
    assert!(stats.updated.values().all(|&n| n == 1), "{stats:?}");

    // Nothing else written: three failed and five successful PUTs of the labelled objects in
    // `default`, no other verb, and the others untouched.
    let writes = writes(&server);
    assert_eq!(writes.len(), 8, "{writes:#?}");
    assert!(writes.iter().all(|(m, _, _)| m == "PUT"), "{writes:#?}");
    assert_eq!(writes.iter().filter(|w| w.2 == 500).count(), 3);
    let ok: std::collections::BTreeSet<_> = writes
        .iter()
        .filter(|w| w.2 == 200)
        .map(|w| w.1.clone())
        .collect();
    assert_eq!(ok, (0..5).map(app_path).collect());
    assert_eq!(annotation(&stored(&server, "default", "unlabelled")), None);
    assert_eq!(annotation(&stored(&server, "elsewhere", "app-0")), None);
    assert_eq!(server.current_resource_version(), before_rv + 5);
}

#[tokio::test]
async fn follows_later_changes_and_retries_a_conflict() {
    let server = seeded().await;
    let c = Controller::start(server.client(), "default").await.unwrap();
    settle(&c).await;
    let first = stored(&server, "default", "app-2");

    // Someone changes the data; the first write of the new checksum gets a 409, as it would if
    // the object changed again meanwhile; the retry succeeds.
    server.faults().fail_next_for(1, 409, &[Verb::Update]);
    let mut changed = first.clone();
    changed.data = Some(BTreeMap::from([("value".to_string(), "new".to_string())]));
    server.update(&changed).unwrap();
    tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let cm = stored(&server, "default", "app-2");
            if annotation(&cm) == Some(checksum(&cm).as_str()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect(DEADLOCK);
    let stats = c.stop().await.unwrap();
    assert_ne!(
        annotation(&stored(&server, "default", "app-2")),
        annotation(&first)
    );
    assert_eq!(stats.retries, 1, "{stats:?}");
    assert_eq!(stats.updated["default/app-2"], 2, "{stats:?}");
}

#[tokio::test]
async fn gives_up_after_max_retries_and_writes_nothing_else() {
    let server = seeded().await;
    // Every write fails.
    server.faults().fail_next_for(1000, 500, &[Verb::Update]);
    let c = Controller::start(server.client(), "default").await.unwrap();
    settle(&c).await;
    let stats = c.stop().await.unwrap();
    let mut gave_up = stats.gave_up.clone();
    gave_up.sort();
    assert_eq!(
        gave_up,
        (0..5)
            .map(|i| format!("default/app-{i}"))
            .collect::<Vec<_>>()
    );
    assert_eq!(stats.retries, 5 * MAX_RETRIES, "{stats:?}");
    assert!(stats.updated.is_empty());
    // One first try and MAX_RETRIES retries per object, all refused.
    let writes = writes(&server);
    assert_eq!(writes.len(), 5 * (1 + MAX_RETRIES), "{writes:#?}");
    assert!(writes.iter().all(|(m, _, s)| m == "PUT" && *s == 500));
    for i in 0..5 {
        assert_eq!(
            annotation(&stored(&server, "default", &format!("app-{i}"))),
            None
        );
    }
}
