//! Integration tests of the fake API server through kube's own client.
#![cfg(feature = "testing")]

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use kube::core::ApiResource;
use kube_informer::testing::{FakeApiServer, Verb};
use serde_json::json;

const DEADLOCK: &str = "likely deadlocked";

fn cm(name: &str, labels: &[(&str, &str)]) -> ConfigMap {
    let mut c = ConfigMap::default();
    c.metadata.name = Some(name.into());
    c.metadata.namespace = Some("default".into());
    if !labels.is_empty() {
        c.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
    }
    c
}

async fn server() -> (FakeApiServer, Api<ConfigMap>) {
    let s = FakeApiServer::start_with_core().await.unwrap();
    let api = Api::namespaced(s.client(), "default");
    (s, api)
}

/// The names of a list's items, in order.
fn names(list: &kube::core::ObjectList<ConfigMap>) -> Vec<String> {
    list.items
        .iter()
        .map(|c| c.metadata.name.clone().unwrap())
        .collect()
}

/// The code, reason and message of an API error response.
struct ApiErr {
    code: u16,
    reason: String,
    message: String,
}

fn api_err(e: kube::Error) -> ApiErr {
    match e {
        kube::Error::Api(s) => ApiErr {
            code: s.code,
            reason: s.reason.clone(),
            message: s.message.clone(),
        },
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Waits until the server has registered `n` watchers, so later writes reach them live.
async fn wait_for_watchers(s: &FakeApiServer, n: usize) {
    tokio::time::timeout(Duration::from_secs(5), async {
        while s.watcher_count() < n {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect(DEADLOCK);
}

/// Collects `n` watch events, failing the test rather than hanging.
async fn take_events<S>(stream: S, n: usize) -> Vec<WatchEvent<ConfigMap>>
where
    S: futures::Stream<Item = kube::Result<WatchEvent<ConfigMap>>>,
{
    tokio::time::timeout(Duration::from_secs(10), stream.take(n).try_collect())
        .await
        .expect(DEADLOCK)
        .unwrap()
}

fn describe(ev: &WatchEvent<ConfigMap>) -> String {
    match ev {
        WatchEvent::Added(o) => format!("ADDED {}", o.metadata.name.as_deref().unwrap_or("")),
        WatchEvent::Modified(o) => format!("MODIFIED {}", o.metadata.name.as_deref().unwrap_or("")),
        WatchEvent::Deleted(o) => format!("DELETED {}", o.metadata.name.as_deref().unwrap_or("")),
        WatchEvent::Bookmark(b) => format!("BOOKMARK {}", b.metadata.resource_version),
        WatchEvent::Error(e) => format!("ERROR {}", e.code),
    }
}

#[tokio::test]
async fn create_get_update_delete_over_http() {
    let (s, api) = server().await;
    let created = api
        .create(&PostParams::default(), &cm("a", &[]))
        .await
        .unwrap();
    assert_eq!(created.metadata.resource_version.as_deref(), Some("1"));
    assert!(created.metadata.uid.is_some());
    assert!(created.metadata.creation_timestamp.is_some());
    let dup = api
        .create(&PostParams::default(), &cm("a", &[]))
        .await
        .unwrap_err();
    assert_eq!(api_err(dup).reason, "AlreadyExists");
    let mut changed = created.clone();
    changed.data = Some([("k".to_string(), "v".to_string())].into());
    let updated = api
        .replace("a", &PostParams::default(), &changed)
        .await
        .unwrap();
    assert_eq!(updated.metadata.resource_version.as_deref(), Some("2"));
    let stale = api
        .replace("a", &PostParams::default(), &changed)
        .await
        .unwrap_err();
    assert_eq!(api_err(stale).code, 409);
    assert_eq!(api.get("a").await.unwrap().data, changed.data);
    api.delete("a", &Default::default()).await.unwrap();
    assert_eq!(api_err(api.get("a").await.unwrap_err()).code, 404);
    assert_eq!(s.current_resource_version(), 3);
    assert!(s.client().apiserver_version().await.is_ok());
}

#[tokio::test]
async fn unknown_resources_and_paths_get_404_status() {
    let s = FakeApiServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(s.client(), "default");
    let e = api_err(api.list(&ListParams::default()).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (404, "NotFound"));
}

#[tokio::test]
async fn list_pages_with_limit_and_continue_from_one_snapshot() {
    let (s, api) = server().await;
    for i in 0..5 {
        s.create(&cm(&format!("c{i}"), &[])).unwrap();
    }
    let first = api.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(first.items.len(), 2);
    assert_eq!(first.metadata.remaining_item_count, Some(3));
    let token = first.metadata.continue_.clone().unwrap();
    // A write between pages must not show up: later pages come from the first page's RV.
    s.create(&cm("c9", &[])).unwrap();
    let second = api
        .list(&ListParams::default().limit(10).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(names(&second), ["c2", "c3", "c4"]);
    assert_eq!(second.metadata.resource_version.as_deref(), Some("5"));
    assert!(second.metadata.continue_.is_none());
    // Once compacted past, the token has expired.
    s.compact(6);
    let e = api_err(
        api.list(&ListParams::default().limit(2).continue_token(&token))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (410, "Expired"));
    assert!(e.message.contains("continue"), "{}", e.message);
    // Its `Status` carries a token for the rest of the list from the latest state, as
    // kube-apiserver's does: an inconsistent list that shows the write made between pages.
    let uri = format!("/api/v1/namespaces/default/configmaps?limit=2&continue={token}");
    let request = http::Request::get(uri)
        .body(kube::client::Body::empty())
        .unwrap();
    let response = s.client().send(request).await.unwrap();
    assert_eq!(response.status().as_u16(), 410);
    let status: serde_json::Value =
        serde_json::from_slice(&response.into_body().collect_bytes().await.unwrap()).unwrap();
    let latest = status["metadata"]["continue"].as_str().unwrap().to_string();
    let rest = api
        .list(&ListParams::default().limit(10).continue_token(&latest))
        .await
        .unwrap();
    assert_eq!(names(&rest), ["c2", "c3", "c4", "c9"]);
    assert_eq!(rest.metadata.resource_version.as_deref(), Some("6"));
}

#[tokio::test]
async fn list_resource_version_rules() {
    let (s, api) = server().await;
    s.create(&cm("a", &[])).unwrap();
    s.create(&cm("b", &[])).unwrap();
    s.delete::<ConfigMap>(Some("default"), "a").unwrap();
    let exact = api
        .list(
            &ListParams::default()
                .at("1")
                .matching(kube::api::VersionMatch::Exact),
        )
        .await
        .unwrap();
    assert_eq!(exact.items.len(), 1);
    assert_eq!(exact.items[0].metadata.name.as_deref(), Some("a"));
    assert_eq!(exact.metadata.resource_version.as_deref(), Some("1"));
    let any = api.list(&ListParams::default().match_any()).await.unwrap();
    assert_eq!(any.metadata.resource_version.as_deref(), Some("3"));
    let too_large = api_err(
        api.list(
            &ListParams::default()
                .at("99")
                .matching(kube::api::VersionMatch::NotOlderThan),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(too_large.code, 504);
    assert!(too_large.message.contains("Too large resource version"));
    s.compact(2);
    let old = api_err(
        api.list(
            &ListParams::default()
                .at("1")
                .matching(kube::api::VersionMatch::Exact),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((old.code, old.reason.as_str()), (410, "Expired"));
    assert!(old.message.contains("too old resource version"));
}

#[tokio::test]
async fn watch_replays_history_after_the_given_resource_version() {
    let (s, api) = server().await;
    s.create(&cm("a", &[])).unwrap();
    s.create(&cm("b", &[])).unwrap();
    let stream = api.watch(&WatchParams::default(), "1").await.unwrap();
    s.delete::<ConfigMap>(Some("default"), "a").unwrap();
    let evs: Vec<_> = take_events(stream, 2).await.iter().map(describe).collect();
    assert_eq!(evs, ["ADDED b", "DELETED a"]);
}

#[tokio::test]
async fn watch_from_zero_starts_with_synthetic_adds() {
    let (s, api) = server().await;
    s.create(&cm("a", &[])).unwrap();
    let stream = api.watch(&WatchParams::default(), "0").await.unwrap();
    s.create(&cm("b", &[])).unwrap();
    let evs: Vec<_> = take_events(stream, 2).await.iter().map(describe).collect();
    assert_eq!(evs, ["ADDED a", "ADDED b"]);
}

#[tokio::test]
async fn watch_from_compacted_rv_gets_410_error_event() {
    let (s, api) = server().await;
    s.set_history_limit(Some(1));
    for i in 0..3 {
        s.create(&cm(&format!("c{i}"), &[])).unwrap();
    }
    let stream = api.watch(&WatchParams::default(), "1").await.unwrap();
    let evs = take_events(stream, 1).await;
    match &evs[0] {
        WatchEvent::Error(e) => assert_eq!((e.code, e.reason.as_str()), (410, "Expired")),
        other => panic!("expected ERROR, got {}", describe(other)),
    }
}

#[tokio::test]
async fn bookmarks_on_demand_only_when_allowed() {
    let (s, api) = server().await;
    s.create(&cm("a", &[])).unwrap();
    let with = api.watch(&WatchParams::default(), "1").await.unwrap();
    let without = api
        .watch(&WatchParams::default().disable_bookmarks(), "1")
        .await
        .unwrap();
    wait_for_watchers(&s, 2).await;
    s.bookmark();
    s.create(&cm("b", &[])).unwrap();
    let a: Vec<_> = take_events(with, 2).await.iter().map(describe).collect();
    assert_eq!(a, ["BOOKMARK 1", "ADDED b"]);
    let b: Vec<_> = take_events(without, 1).await.iter().map(describe).collect();
    assert_eq!(b, ["ADDED b"]);
}

#[tokio::test]
async fn send_initial_events_ends_with_annotated_bookmark() {
    let (s, api) = server().await;
    s.create(&cm("a", &[])).unwrap();
    let wp = WatchParams::streaming_lists();
    let stream = api.watch(&wp, "").await.unwrap();
    s.create(&cm("b", &[])).unwrap();
    let evs = take_events(stream, 3).await;
    assert_eq!(describe(&evs[0]), "ADDED a");
    match &evs[1] {
        WatchEvent::Bookmark(b) => {
            assert_eq!(b.metadata.resource_version, "1");
            assert_eq!(
                b.metadata
                    .annotations
                    .get("k8s.io/initial-events-end")
                    .map(String::as_str),
                Some("true")
            );
        }
        other => panic!("expected BOOKMARK, got {}", describe(other)),
    }
    assert_eq!(describe(&evs[2]), "ADDED b");

    s.set_watch_list_supported(false);
    let Err(e) = api.watch(&wp, "").await else {
        panic!("an old server must refuse sendInitialEvents");
    };
    let e = api_err(e);
    assert_eq!(e.code, 422);
}

/// `timeoutSeconds=0` is unset, as kube-apiserver reads it, not "end at once".
#[tokio::test]
async fn timeout_seconds_zero_is_no_timeout() {
    let (s, api) = server().await;
    let stream = api
        .watch(&WatchParams::default().timeout(0), "0")
        .await
        .unwrap();
    wait_for_watchers(&s, 1).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    s.create(&cm("a", &[])).unwrap();
    let evs: Vec<_> = take_events(stream, 1).await.iter().map(describe).collect();
    assert_eq!(evs, ["ADDED a"]);
}

/// A bookmark to a watcher whose queue is full is dropped, not a reason to cut it off.
#[tokio::test]
async fn a_bookmark_never_cuts_off_a_full_watcher() {
    let (s, api) = server().await;
    s.set_watcher_capacity(2);
    let mut stream = api
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    wait_for_watchers(&s, 1).await;
    s.faults().stall_watches();
    s.create(&cm("a", &[])).unwrap();
    s.create(&cm("b", &[])).unwrap();
    s.bookmark();
    s.faults().unstall_watches();
    let evs: Vec<_> = take_events(&mut stream, 2)
        .await
        .iter()
        .map(describe)
        .collect();
    assert_eq!(evs, ["ADDED a", "ADDED b"]);
    // Still watched: a cut-off watcher would get nothing more.
    s.create(&cm("c", &[])).unwrap();
    let evs: Vec<_> = take_events(&mut stream, 1)
        .await
        .iter()
        .map(describe)
        .collect();
    assert_eq!(evs, ["ADDED c"]);
}

#[tokio::test(start_paused = true)]
async fn timeout_seconds_ends_the_stream_on_tokio_time() {
    let (_s, api) = server().await;
    let stream = api
        .watch(&WatchParams::default().timeout(5), "0")
        .await
        .unwrap();
    let all: Vec<_> = tokio::time::timeout(Duration::from_secs(60), stream.collect::<Vec<_>>())
        .await
        .expect(DEADLOCK);
    assert!(all.is_empty());
}

#[tokio::test]
async fn numeric_label_selectors_filter_as_in_kube_apiserver() {
    let (s, api) = server().await;
    s.create(&cm("low", &[("tier", "2")])).unwrap();
    s.create(&cm("high", &[("tier", "10")])).unwrap();
    s.create(&cm("word", &[("tier", "top")])).unwrap();
    s.create(&cm("none", &[])).unwrap();
    let list = |selector: &'static str| {
        let api = api.clone();
        async move { api.list(&ListParams::default().labels(selector)).await }
    };
    // Compared as integers (10 > 5, though "10" < "5" as text); a label that is missing or not
    // an integer never matches.
    assert_eq!(names(&list("tier>5").await.unwrap()), ["high"]);
    assert_eq!(names(&list("tier<5").await.unwrap()), ["low"]);
    assert_eq!(names(&list("tier > 1,tier<10").await.unwrap()), ["low"]);
    for bad in ["tier>x", "tier>", "tier>-1", "tier>(1)"] {
        let e = api_err(list(bad).await.unwrap_err());
        assert_eq!(e.code, 400, "{bad}: {}", e.message);
    }
}

#[tokio::test]
async fn selectors_filter_lists_and_turn_watch_transitions_into_add_delete() {
    let (s, api) = server().await;
    s.create(&cm("a", &[("app", "web")])).unwrap();
    s.create(&cm("b", &[("app", "db")])).unwrap();
    let lp = ListParams::default().labels("app in (web)");
    let list = api.list(&lp).await.unwrap();
    assert_eq!(list.items.len(), 1);
    let by_name = api
        .list(&ListParams::default().fields("metadata.name=b"))
        .await
        .unwrap();
    assert_eq!(by_name.items[0].metadata.name.as_deref(), Some("b"));
    let bad = api_err(
        api.list(&ListParams::default().labels("a in ("))
            .await
            .unwrap_err(),
    );
    assert_eq!(bad.code, 400);
    let bad = api_err(
        api.list(&ListParams::default().fields("spec.x=1"))
            .await
            .unwrap_err(),
    );
    assert_eq!(bad.code, 400);

    let stream = api
        .watch(&WatchParams::default().labels("app=web"), "2")
        .await
        .unwrap();
    let mut b = s.get::<ConfigMap>(Some("default"), "b").unwrap().unwrap();
    b.metadata.labels = Some([("app".to_string(), "web".to_string())].into());
    s.update(&b).unwrap();
    let mut a = s.get::<ConfigMap>(Some("default"), "a").unwrap().unwrap();
    a.metadata.labels = None;
    s.update(&a).unwrap();
    let evs: Vec<_> = take_events(stream, 2).await.iter().map(describe).collect();
    assert_eq!(evs, ["ADDED b", "DELETED a"]);
}

#[tokio::test]
async fn metadata_only_list() {
    let (s, api) = server().await;
    let mut c = cm("a", &[]);
    c.data = Some([("big".to_string(), "x".repeat(100))].into());
    s.create(&c).unwrap();
    let list = api.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].metadata.name.as_deref(), Some("a"));
    assert_eq!(
        list.items[0].types.as_ref().unwrap().kind,
        "PartialObjectMetadata"
    );
}

#[tokio::test]
async fn dynamic_resources_register_and_serve() {
    let s = FakeApiServer::start().await.unwrap();
    let ar = ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    };
    s.register_api_resource(&ar, false);
    s.create_value(
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}),
    )
    .unwrap();
    let api: Api<kube::api::DynamicObject> = Api::all_with(s.client(), &ar);
    let list = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items[0].metadata.name.as_deref(), Some("w"));
    assert!(s.get_value(&ar, None, "w").unwrap().is_some());
}

#[tokio::test]
async fn fail_next_fails_matching_requests_then_recovers() {
    let (s, api) = server().await;
    s.faults().fail_next_for(2, 500, &[Verb::List]);
    s.faults().fail_next(1, 403);
    for code in [500, 500] {
        assert_eq!(
            api_err(api.list(&ListParams::default()).await.unwrap_err()).code,
            code
        );
    }
    let e = api_err(api.get("x").await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
    assert!(api.list(&ListParams::default()).await.is_ok());
    let statuses: Vec<_> = s.requests().iter().map(|r| r.status).collect();
    assert_eq!(statuses, [500, 500, 403, 200]);
    assert_eq!(s.requests()[0].verb, Verb::List);
}

#[tokio::test]
async fn drop_watches_after_n_events_cuts_the_stream() {
    let (s, api) = server().await;
    for i in 0..3 {
        s.create(&cm(&format!("c{i}"), &[])).unwrap();
    }
    s.faults().drop_watches_after(1);
    let stream = api.watch(&WatchParams::default(), "0").await.unwrap();
    let all: Vec<_> = tokio::time::timeout(Duration::from_secs(10), stream.collect::<Vec<_>>())
        .await
        .expect(DEADLOCK);
    assert!(all[0].is_ok());
    assert!(all.len() <= 2, "{}", all.len());
    assert!(all.iter().skip(1).all(|r| r.is_err()));
}

#[tokio::test]
async fn malformed_line_is_reported_and_the_event_still_follows() {
    let (s, api) = server().await;
    s.create(&cm("a", &[])).unwrap();
    s.faults().malformed_line_next();
    let stream = api.watch(&WatchParams::default(), "0").await.unwrap();
    let evs: Vec<_> =
        tokio::time::timeout(Duration::from_secs(10), stream.take(2).collect::<Vec<_>>())
            .await
            .expect(DEADLOCK);
    assert!(evs[0].is_err());
    assert_eq!(describe(evs[1].as_ref().unwrap()), "ADDED a");
}

#[tokio::test]
async fn stalled_watch_sends_nothing_until_unstalled() {
    let (s, api) = server().await;
    s.faults().stall_watches();
    let mut stream = api
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    s.create(&cm("a", &[])).unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(200), stream.next())
            .await
            .is_err()
    );
    s.faults().unstall_watches();
    let ev = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect(DEADLOCK)
        .unwrap()
        .unwrap();
    assert_eq!(describe(&ev), "ADDED a");
}

#[tokio::test]
async fn restart_drops_connections_but_keeps_state_and_port() {
    let (s, api) = server().await;
    s.create(&cm("a", &[])).unwrap();
    let stream = api.watch(&WatchParams::default(), "1").await.unwrap();
    wait_for_watchers(&s, 1).await;
    s.faults().restart();
    let rest: Vec<_> = tokio::time::timeout(Duration::from_secs(10), stream.collect::<Vec<_>>())
        .await
        .expect(DEADLOCK);
    assert!(rest.iter().all(|r| r.is_err()));
    let list = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
}

#[tokio::test]
async fn drop_all_watches_closes_open_streams() {
    let (s, api) = server().await;
    let stream = api.watch(&WatchParams::default(), "0").await.unwrap();
    wait_for_watchers(&s, 1).await;
    s.faults().drop_all_watches();
    let rest: Vec<_> = tokio::time::timeout(Duration::from_secs(10), stream.collect::<Vec<_>>())
        .await
        .expect(DEADLOCK);
    assert!(rest.iter().all(|r| r.is_err()));
}

/// The cacher sends the `k8s.io/initial-events-end` bookmark only to a watch that allows
/// bookmarks (`isListWatchRequest` needs `allowWatchBookmarks`); validation does not require
/// it. `resourceVersionMatch` with `continue` is forbidden on watches too.
#[tokio::test]
async fn initial_events_end_needs_allow_watch_bookmarks() {
    let (s, _api) = server().await;
    s.create(&cm("a", &[])).unwrap();
    let path = "/api/v1/namespaces/default/configmaps?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan";
    let req = http::Request::get(path).body(Vec::new()).unwrap();
    let stream = s.client().request_events::<ConfigMap>(req).await.unwrap();
    wait_for_watchers(&s, 1).await;
    s.create(&cm("b", &[])).unwrap();
    let evs: Vec<_> = take_events(stream, 2).await.iter().map(describe).collect();
    assert_eq!(evs, ["ADDED a", "ADDED b"]);

    let req = http::Request::get(format!("{path}&continue=abc"))
        .body(Vec::new())
        .unwrap();
    let Err(e) = s.client().request_events::<ConfigMap>(req).await else {
        panic!("resourceVersionMatch with continue must be refused");
    };
    let e = api_err(e);
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert!(
        e.message
            .contains("resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue is provided"),
        "{}",
        e.message
    );
}
