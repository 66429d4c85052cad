//! The reflector's list/watch rules (see `src/reflector/mod.rs`) over the real wire protocol,
//! against the fake API server: each test checks the requests the informer made (from
//! [`FakeApiServer::requests`]) and that its cache ends up equal to the server's state.
//!
//! Real sockets run on tokio's real clock, so backoffs and timeouts are shortened through
//! [`ReflectorConfig`] rather than by pausing time.
#![cfg(feature = "testing")]

mod informer_support;

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use futures::{FutureExt, future::BoxFuture};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::Api;
use kube_informer::{
    ApiListerWatcher, ListerWatcher, ReflectorConfig,
    reflector::{ListOptions, ListPage, ListWatchError, WatchOptions, WatchStream},
    testing::{FakeApiServer, RecordedRequest, Verb},
};

use informer_support::{Harness, assert_converges, cm, eventually, fast_reflector};

const LONG: Duration = Duration::from_secs(20);

async fn server_with(n: usize) -> FakeApiServer {
    let s = FakeApiServer::start_with_core().await.unwrap();
    for i in 0..n {
        s.create(&cm("default", &format!("cm-{i:05}"), "0"))
            .unwrap();
    }
    s
}

fn lists(s: &FakeApiServer) -> Vec<RecordedRequest> {
    s.requests()
        .into_iter()
        .filter(|r| r.verb == Verb::List)
        .collect()
}

fn watches(s: &FakeApiServer) -> Vec<RecordedRequest> {
    s.requests()
        .into_iter()
        .filter(|r| r.verb == Verb::Watch)
        .collect()
}

fn rv_of(r: &RecordedRequest) -> Option<&str> {
    r.query.resource_version.as_deref()
}

/// Asserts a watch asked for bookmarks and a timeout in `[min, 2 × min]` seconds.
fn assert_watch_params(w: &RecordedRequest, min: u32) {
    assert_eq!(w.query.allow_watch_bookmarks.as_deref(), Some("true"));
    let t: u32 = w
        .query
        .timeout_seconds
        .as_deref()
        .and_then(|t| t.parse().ok())
        .expect("timeoutSeconds");
    assert!((min..=2 * min).contains(&t), "timeoutSeconds {t}");
}

/// Waits until the server has received `n` watch requests in total.
async fn wait_for_watches(s: &FakeApiServer, n: usize) {
    eventually("watch requests", LONG, || {
        let got = watches(s).len();
        (got < n).then(|| format!("{got} of {n} watches"))
    })
    .await;
}

fn touch(s: &FakeApiServer, name: &str, value: &str) {
    let mut c = s.get::<ConfigMap>(Some("default"), name).unwrap().unwrap();
    c.data = Some([("v".to_owned(), value.to_owned())].into());
    s.update(&c).unwrap();
}

#[tokio::test]
async fn first_list_is_at_resource_version_0_with_limit_500_then_watches_from_its_version() {
    let s = server_with(3).await;
    let mut h = Harness::new(&s, fast_reflector());
    h.start_synced().await;
    assert_converges("initial list", &h.informer, &s).await;
    wait_for_watches(&s, 1).await;

    let reqs = s.requests();
    assert_eq!(reqs[0].verb, Verb::List);
    assert_eq!(rv_of(&reqs[0]), Some("0"));
    assert_eq!(reqs[0].query.limit.as_deref(), Some("500"));
    assert_eq!(reqs[0].query.continue_token, None);
    assert_eq!(reqs[1].verb, Verb::Watch);
    assert_eq!(rv_of(&reqs[1]), Some("3"));
    assert_eq!(reqs[1].query.send_initial_events, None);
    assert_watch_params(&reqs[1], 300);

    // Live changes arrive over that watch.
    s.create(&cm("default", "new", "1")).unwrap();
    touch(&s, "cm-00000", "2");
    s.delete::<ConfigMap>(Some("default"), "cm-00001").unwrap();
    assert_converges("watch events", &h.informer, &s).await;
    assert_eq!(lists(&s).len(), 1);
    assert_eq!(h.informer.last_sync_resource_version(), "6");
    assert!(h.errors().is_empty(), "{:?}", h.errors());
    h.stop().await;
}

#[tokio::test]
async fn more_than_500_objects_are_paged_with_continue_tokens_and_no_resource_version() {
    let s = server_with(1203).await;
    let mut h = Harness::new(&s, fast_reflector());
    h.start_synced().await;
    assert_converges("paged list", &h.informer, &s).await;
    let ls = lists(&s);
    assert_eq!(ls.len(), 3, "{ls:#?}");
    assert_eq!(rv_of(&ls[0]), Some("0"));
    for page in &ls[1..] {
        assert!(page.query.continue_token.is_some());
        assert_eq!(rv_of(page), None);
        assert_eq!(page.query.limit.as_deref(), Some("500"));
    }
    wait_for_watches(&s, 1).await;
    assert_eq!(rv_of(&watches(&s)[0]), Some("1203"));
    h.stop().await;
}

/// Stalls the watch, writes, compacts past everything the informer saw and drops the watch: the
/// informer's last resourceVersion is gone.
async fn expire_last_resource_version(s: &FakeApiServer, h: &Harness) -> String {
    let seen = h.informer.last_sync_resource_version();
    s.faults().stall_watches();
    s.create(&cm("default", "while-stalled", "1")).unwrap();
    touch(s, "cm-00000", "stalled");
    s.delete::<ConfigMap>(Some("default"), "cm-00001").unwrap();
    s.compact(s.current_resource_version());
    s.faults().drop_all_watches();
    s.faults().unstall_watches();
    seen
}

#[tokio::test]
async fn watch_expired_by_compaction_relists_from_the_last_resource_version() {
    let s = server_with(5).await;
    let mut h = Harness::new(&s, fast_reflector());
    h.start_synced().await;
    wait_for_watches(&s, 1).await;
    let seen = expire_last_resource_version(&s, &h).await;
    assert_converges("after compaction", &h.informer, &s).await;

    // The re-watch from the lost version got 410; the relist asks "not older than" that version
    // (client-go keeps the version after a watch 410), unpaginated, and succeeds.
    assert!(
        watches(&s)
            .iter()
            .any(|w| rv_of(w) == Some(seen.as_str()) && w.status == 200),
        "no re-watch from {seen}"
    );
    let ls = lists(&s);
    assert_eq!(ls.len(), 2, "{ls:#?}");
    assert_eq!(rv_of(&ls[1]), Some(seen.as_str()));
    assert_eq!(ls[1].query.limit, None);
    assert_eq!(ls[1].status, 200);
    assert!(
        h.errors().iter().any(|e| e.contains("410")),
        "{:?}",
        h.errors()
    );
    h.stop().await;
}

#[tokio::test]
async fn paged_relist_at_a_compacted_version_retries_at_once_with_empty_resource_version() {
    // More than a page: the first list came back paged, so relists are paged too, and a paged
    // list at a version reads exactly that (compacted) snapshot.
    let s = server_with(600).await;
    let mut h = Harness::new(&s, fast_reflector());
    h.start_synced().await;
    wait_for_watches(&s, 1).await;
    let before = lists(&s).len();
    let seen = expire_last_resource_version(&s, &h).await;
    assert_converges("after compaction", &h.informer, &s).await;

    let ls = lists(&s);
    let relist = &ls[before..];
    assert_eq!(rv_of(&relist[0]), Some(seen.as_str()));
    assert_eq!(relist[0].query.limit.as_deref(), Some("500"));
    assert_eq!(relist[0].status, 410);
    assert_eq!(rv_of(&relist[1]), None, "consistent read expected");
    assert_eq!(relist[1].query.continue_token, None);
    assert_eq!(relist[1].query.limit.as_deref(), Some("500"));
    assert_eq!(relist[1].status, 200);
    assert!(relist[2].query.continue_token.is_some());
    assert_eq!(relist.len(), 3, "{relist:#?}");
    assert!(
        h.errors().iter().filter(|e| e.contains("410")).count() >= 2,
        "{:?}",
        h.errors()
    );
    h.stop().await;
}

/// A lister-watcher that writes and compacts on the server just before the first continue page
/// is asked for, so that page's token has expired.
struct CompactBeforeContinue {
    inner: ApiListerWatcher<ConfigMap>,
    server: Arc<FakeApiServer>,
    done: AtomicBool,
}

impl ListerWatcher<ConfigMap> for CompactBeforeContinue {
    fn list(
        &self,
        options: ListOptions,
    ) -> BoxFuture<'_, Result<ListPage<ConfigMap>, ListWatchError>> {
        if options.continue_token.is_some() && !self.done.swap(true, Ordering::SeqCst) {
            self.server.create(&cm("default", "mid-list", "1")).unwrap();
            self.server.compact(self.server.current_resource_version());
        }
        self.inner.list(options)
    }

    fn watch(
        &self,
        options: WatchOptions,
    ) -> BoxFuture<'_, Result<WatchStream<ConfigMap>, ListWatchError>> {
        self.inner.watch(options).boxed()
    }
}

#[tokio::test]
async fn expired_continue_page_falls_back_to_one_full_list_without_limit() {
    let s = Arc::new(server_with(700).await);
    let lw = CompactBeforeContinue {
        inner: ApiListerWatcher::new(Api::<ConfigMap>::all(s.client())),
        server: s.clone(),
        done: AtomicBool::new(false),
    };
    let mut h = Harness::with_lw(lw, fast_reflector());
    h.start_synced().await;
    assert_converges("full list", &h.informer, &s).await;
    let ls = lists(&s);
    assert_eq!(ls.len(), 3, "{ls:#?}");
    assert_eq!(ls[1].status, 410);
    assert!(ls[1].query.continue_token.is_some());
    let full = &ls[2];
    assert_eq!(
        (rv_of(full), full.query.limit.as_deref(), full.status),
        (None, None, 200)
    );
    assert_eq!(full.query.continue_token, None);
    assert!(
        h.informer
            .indexer()
            .get_by_key("default/mid-list")
            .is_some()
    );
    wait_for_watches(&s, 1).await;
    assert_eq!(rv_of(&watches(&s)[0]), Some("701"));
    h.stop().await;
}

#[tokio::test]
async fn bookmarks_advance_the_resource_version_the_next_watch_starts_from() {
    let s = server_with(2).await;
    let mut h = Harness::new(&s, fast_reflector());
    h.start_synced().await;
    wait_for_watches(&s, 1).await;
    // Writes to another resource move the global version without a ConfigMap event.
    let mut secret = Secret::default();
    secret.metadata.name = Some("s".into());
    s.create(&secret).unwrap();
    s.create(&{
        secret.metadata.name = Some("t".into());
        secret
    })
    .unwrap();
    s.bookmark();
    eventually("bookmark applied", LONG, || {
        let got = h.informer.last_sync_resource_version();
        (got != "4").then(|| format!("last version {got}"))
    })
    .await;
    s.faults().drop_all_watches();
    wait_for_watches(&s, 2).await;
    assert_eq!(rv_of(&watches(&s)[1]), Some("4"));
    assert_eq!(lists(&s).len(), 1);
    h.stop().await;
}

#[tokio::test]
async fn watch_ended_by_its_timeout_is_restarted_from_the_last_version_without_relist() {
    let s = server_with(2).await;
    let mut h = Harness::new(
        &s,
        fast_reflector().min_watch_timeout(Duration::from_secs(1)),
    );
    h.start_synced().await;
    wait_for_watches(&s, 1).await;
    s.create(&cm("default", "during-first-watch", "1")).unwrap();
    wait_for_watches(&s, 3).await;
    let ws = watches(&s);
    assert_eq!(rv_of(&ws[0]), Some("2"));
    assert_eq!(rv_of(&ws[1]), Some("3"));
    assert_eq!(rv_of(&ws[2]), Some("3"));
    for w in &ws {
        assert_watch_params(w, 1);
    }
    assert_eq!(lists(&s).len(), 1);
    assert_converges("after re-watch", &h.informer, &s).await;
    assert!(h.errors().is_empty(), "{:?}", h.errors());
    h.stop().await;
}

#[tokio::test]
async fn streaming_list_takes_the_initial_state_from_one_watch_and_goes_on_with_it() {
    let s = server_with(4).await;
    let mut h = Harness::new(&s, fast_reflector().streaming_list(true));
    h.start_synced().await;
    assert_converges("streamed list", &h.informer, &s).await;
    s.create(&cm("default", "live", "1")).unwrap();
    assert_converges("live event", &h.informer, &s).await;
    assert!(lists(&s).is_empty());
    let ws = watches(&s);
    assert_eq!(ws.len(), 1, "{ws:#?}");
    assert_eq!(ws[0].query.send_initial_events.as_deref(), Some("true"));
    assert_eq!(
        ws[0].query.resource_version_match.as_deref(),
        Some("NotOlderThan")
    );
    assert_eq!(rv_of(&ws[0]).unwrap_or(""), "");
    assert_watch_params(&ws[0], 300);
    assert_eq!(h.informer.last_sync_resource_version(), "5");
    h.stop().await;
}

#[tokio::test]
async fn streaming_list_refused_by_the_server_falls_back_to_list_and_watch_for_good() {
    let s = server_with(4).await;
    s.set_watch_list_supported(false);
    let mut h = Harness::new(&s, fast_reflector().streaming_list(true));
    h.start_synced().await;
    assert_converges("fallback list", &h.informer, &s).await;
    wait_for_watches(&s, 2).await;
    let ws = watches(&s);
    assert_eq!(ws[0].status, 422);
    assert_eq!(ws[1].query.send_initial_events, None);
    assert_eq!(rv_of(&ws[1]), Some("4"));
    let ls = lists(&s);
    assert_eq!(
        (rv_of(&ls[0]), ls[0].query.limit.as_deref()),
        (Some("0"), Some("500"))
    );
    assert!(
        h.errors().iter().any(|e| e.contains("streaming list")),
        "{:?}",
        h.errors()
    );

    // A later relist does not try the streaming list again.
    s.faults().fail_next_for(1, 403, &[Verb::Watch]);
    s.faults().drop_all_watches();
    s.create(&cm("default", "after", "1")).unwrap();
    assert_converges("after relist", &h.informer, &s).await;
    eventually("relist", LONG, || {
        (lists(&s).len() < 2).then(|| "no relist".into())
    })
    .await;
    let streaming = watches(&s)
        .iter()
        .filter(|w| w.query.send_initial_events.is_some())
        .count();
    assert_eq!(streaming, 1);
    h.stop().await;
}

#[tokio::test]
async fn forbidden_list_is_retried_until_the_server_recovers() {
    let s = server_with(3).await;
    s.faults().fail_next(3, 403);
    let mut h = Harness::new(&s, fast_reflector());
    h.start_synced().await;
    assert_converges("after 403s", &h.informer, &s).await;
    let ls = lists(&s);
    assert_eq!(
        ls.iter().map(|r| r.status).collect::<Vec<_>>(),
        [403, 403, 403, 200]
    );
    assert!(ls.iter().all(|r| rv_of(r) == Some("0")));
    assert_eq!(
        h.errors().iter().filter(|e| e.contains("403")).count(),
        3,
        "{:?}",
        h.errors()
    );
    h.stop().await;
}

#[tokio::test]
async fn forbidden_watch_relists_and_recovers() {
    let s = server_with(3).await;
    let mut h = Harness::new(&s, fast_reflector());
    h.start_synced().await;
    wait_for_watches(&s, 1).await;
    s.faults().fail_next_for(2, 403, &[Verb::Watch]);
    s.faults().drop_all_watches();
    s.create(&cm("default", "x", "1")).unwrap();
    assert_converges("after 403 watches", &h.informer, &s).await;
    assert!(lists(&s).len() >= 2, "a forbidden watch relists");
    assert!(
        h.errors().iter().any(|e| e.contains("403")),
        "{:?}",
        h.errors()
    );
    h.stop().await;
}

#[tokio::test]
async fn too_many_requests_on_watch_backs_off_and_rewatches_without_relist() {
    let s = server_with(3).await;
    let mut h = Harness::new(&s, fast_reflector());
    h.start_synced().await;
    wait_for_watches(&s, 1).await;
    s.faults().fail_next_for(2, 429, &[Verb::Watch]);
    s.faults().drop_all_watches();
    touch(&s, "cm-00002", "x");
    assert_converges("after 429s", &h.informer, &s).await;
    let ws = watches(&s);
    assert_eq!(
        ws.iter().map(|w| w.status).collect::<Vec<_>>(),
        [200, 429, 429, 200]
    );
    assert!(ws[1..].iter().all(|w| rv_of(w) == Some("3")));
    assert_eq!(lists(&s).len(), 1);
    assert_eq!(
        h.errors().iter().filter(|e| e.contains("429")).count(),
        2,
        "{:?}",
        h.errors()
    );
    h.stop().await;
}

#[tokio::test]
async fn internal_errors_on_list_back_off_and_retry() {
    let s = server_with(3).await;
    s.faults().fail_next_for(2, 500, &[Verb::List]);
    let mut h = Harness::new(&s, fast_reflector());
    h.start_synced().await;
    assert_converges("after 500s", &h.informer, &s).await;
    assert_eq!(
        lists(&s).iter().map(|r| r.status).collect::<Vec<_>>(),
        [500, 500, 200]
    );
    assert_eq!(
        h.errors().iter().filter(|e| e.contains("500")).count(),
        2,
        "{:?}",
        h.errors()
    );
    h.stop().await;
}

#[tokio::test]
async fn dropped_watches_are_resumed_from_the_last_version_without_relist() {
    let s = server_with(3).await;
    let mut h = Harness::new(&s, fast_reflector());
    h.start_synced().await;
    wait_for_watches(&s, 1).await;
    s.faults().drop_watches_after(2);
    for i in 0..10 {
        s.create(&cm("default", &format!("burst-{i}"), "1"))
            .unwrap();
    }
    // Each watch delivers two events and breaks; the next resumes after them.
    wait_for_watches(&s, 5).await;
    s.faults().clear();
    assert_converges("after dropped watches", &h.informer, &s).await;
    assert_eq!(lists(&s).len(), 1);
    assert!(
        h.errors().iter().any(|e| e.contains("watch stream broke")),
        "{:?}",
        h.errors()
    );
    h.stop().await;
}

#[tokio::test]
async fn malformed_watch_line_is_reported_and_the_watch_resumed_without_relist() {
    let s = server_with(3).await;
    let mut h = Harness::new(&s, fast_reflector());
    h.start_synced().await;
    wait_for_watches(&s, 1).await;
    s.faults().malformed_line_next();
    s.create(&cm("default", "after-garbage", "1")).unwrap();
    assert_converges("after malformed line", &h.informer, &s).await;
    assert!(
        h.errors().iter().any(|e| e.contains("cannot decode")),
        "{:?}",
        h.errors()
    );
    assert_eq!(lists(&s).len(), 1);
    assert!(watches(&s).len() >= 2);
    h.stop().await;
}

#[tokio::test]
async fn stalled_watch_is_detected_by_the_idle_timeout_and_resumed() {
    let s = server_with(3).await;
    let mut h = Harness::new(
        &s,
        fast_reflector().idle_timeout(Duration::from_millis(200)),
    );
    s.set_bookmark_interval(Some(Duration::from_millis(50)));
    h.start_synced().await;
    wait_for_watches(&s, 1).await;
    s.faults().stall_watches();
    s.create(&cm("default", "while-stalled", "1")).unwrap();
    eventually("idle timeout", LONG, || {
        (!h.errors().iter().any(|e| e.contains("idle"))).then(|| format!("{:?}", h.errors()))
    })
    .await;
    assert!(
        h.informer
            .indexer()
            .get_by_key("default/while-stalled")
            .is_none()
    );
    s.faults().unstall_watches();
    assert_converges("after stall", &h.informer, &s).await;
    assert_eq!(lists(&s).len(), 1);
    h.stop().await;
}

#[tokio::test]
async fn server_restart_is_survived_without_losing_events() {
    let s = server_with(3).await;
    let mut h = Harness::new(&s, fast_reflector());
    h.start_synced().await;
    wait_for_watches(&s, 1).await;
    s.faults().restart();
    s.create(&cm("default", "after-restart", "1")).unwrap();
    s.delete::<ConfigMap>(Some("default"), "cm-00000").unwrap();
    assert_converges("after restart", &h.informer, &s).await;
    assert!(watches(&s).len() >= 2);
    assert!(!h.errors().is_empty());
    h.stop().await;
}

#[tokio::test]
async fn undecodable_objects_are_reported_and_left_out_without_a_retry_loop() {
    let s = server_with(3).await;
    // A built-in kind whose stored JSON does not fit its schema cannot be sent in protobuf
    // (kube-apiserver could not have stored it); in JSON it reaches the decoder, as a custom
    // resource written under a newer schema does.
    s.set_protobuf_supported(false);
    let bad = |name: &str, value: serde_json::Value| {
        serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default"},
            "data": value,
        })
    };
    // One in the initial list...
    s.create_value(bad("bad-listed", serde_json::json!("not a map")))
        .unwrap();
    let mut h = Harness::new(&s, fast_reflector());
    h.start_synced().await;
    assert!(
        h.informer
            .indexer()
            .get_by_key("default/bad-listed")
            .is_none()
    );
    // ...and a cached object modified into something undecodable on the watch.
    s.update_value(bad("cm-00000", serde_json::json!([1, 2])))
        .unwrap();
    s.create(&cm("default", "after-bad", "1")).unwrap();
    eventually("the good object after the bad one", LONG, || {
        h.informer
            .indexer()
            .get_by_key("default/after-bad")
            .is_none()
            .then(|| "not yet".to_owned())
    })
    .await;
    assert!(
        h.informer
            .indexer()
            .get_by_key("default/cm-00000")
            .is_none(),
        "a cached object whose new version does not decode is removed, not left stale"
    );
    let errors = h.errors();
    assert_eq!(
        errors
            .iter()
            .filter(|e| e.contains("does not decode"))
            .count(),
        2,
        "each reported once: {errors:?}"
    );
    assert!(
        errors.iter().any(|e| e.contains("default/bad-listed")),
        "{errors:?}"
    );
    assert!(
        errors.iter().any(|e| e.contains("default/cm-00000")),
        "{errors:?}"
    );
    assert_eq!(lists(&s).len(), 1, "no relist");
    assert_eq!(watches(&s).len(), 1, "no re-watch: the watch moved past it");
    h.stop().await;
}

/// The same in protobuf, for the one kind of undecodable object kube-apiserver can hold: a string
/// that is not UTF-8, which protobuf's wire format allows and a client writing protobuf can
/// store. The list and the watch go on past it, as for JSON's objects that do not fit.
#[tokio::test]
async fn protobuf_strings_that_are_not_utf8_are_reported_and_left_out_without_a_retry_loop() {
    let s = server_with(3).await;
    s.set_protobuf_supported(true);
    s.faults().garble_protobuf("\u{1}garbled");
    let bad = |name: &str| {
        let mut c = cm("default", name, "0");
        c.data = Some([("k".to_owned(), "\u{1}garbled".to_owned())].into());
        c
    };
    // One in the initial list...
    s.create(&bad("bad-listed")).unwrap();
    let mut h = Harness::new(&s, fast_reflector());
    h.start_synced().await;
    let indexer = h.informer.indexer();
    assert!(indexer.get_by_key("default/bad-listed").is_none());
    assert!(indexer.get_by_key("default/cm-00001").is_some());
    // ...and a cached object modified into one on the watch.
    let mut garbled = bad("cm-00000");
    garbled.metadata.resource_version = None;
    s.update(&garbled).unwrap();
    s.create(&cm("default", "after-bad", "1")).unwrap();
    eventually("the good object after the bad one", LONG, || {
        indexer
            .get_by_key("default/after-bad")
            .is_none()
            .then(|| "not yet".to_owned())
    })
    .await;
    assert!(
        indexer.get_by_key("default/cm-00000").is_none(),
        "a cached object whose new version does not decode is removed, not left stale"
    );
    let errors = h.errors();
    let undecodable: Vec<_> = errors
        .iter()
        .filter(|e| e.contains("does not decode"))
        .collect();
    assert_eq!(undecodable.len(), 2, "each reported once: {errors:?}");
    for key in ["default/bad-listed", "default/cm-00000"] {
        assert!(undecodable.iter().any(|e| e.contains(key)), "{errors:?}");
    }
    assert!(
        undecodable.iter().all(|e| !e.contains("garbled")),
        "redacted: {errors:?}"
    );
    assert!(
        s.requests()
            .iter()
            .filter(|r| matches!(r.verb, Verb::List | Verb::Watch))
            .all(RecordedRequest::served_protobuf),
        "served in protobuf"
    );
    assert_eq!(lists(&s).len(), 1, "no relist");
    assert_eq!(watches(&s).len(), 1, "no re-watch: the watch moved past it");
    h.stop().await;
}

#[tokio::test]
async fn relist_keeps_the_cached_object_of_every_unchanged_item() {
    let s = server_with(5).await;
    let mut h = Harness::new(&s, fast_reflector());
    h.start_synced().await;
    let before = |name: &str| {
        h.informer
            .indexer()
            .get_by_key(&format!("default/{name}"))
            .unwrap()
    };
    let unchanged = before("cm-00001");
    let changed_before = before("cm-00002");
    wait_for_watches(&s, 1).await;
    // While the informer is cut off, one object changes and the history is compacted, so its
    // re-watch gets 410 and it relists.
    s.faults().stall_watches();
    let mut c = (*changed_before).clone();
    c.data = Some([("v".to_owned(), "new".to_owned())].into());
    c.metadata.resource_version = None;
    s.update(&c).unwrap();
    s.compact(s.current_resource_version());
    s.faults().unstall_watches();
    s.faults().drop_all_watches();
    assert_converges("after relist", &h.informer, &s).await;
    assert!(lists(&s).len() >= 2, "relisted");
    let after = h.informer.indexer().get_by_key("default/cm-00001").unwrap();
    assert!(
        Arc::ptr_eq(&unchanged, &after),
        "the unchanged object is the very same Arc"
    );
    let changed_after = h.informer.indexer().get_by_key("default/cm-00002").unwrap();
    assert!(!Arc::ptr_eq(&changed_before, &changed_after));
    h.stop().await;
}

/// A connection that goes silent (packets dropped, no FIN/RST: nothing arrives, not even the
/// bookmarks the server sends every minute) is noticed with the default settings within two
/// minutes, and the watch resumes from where it was, without a relist.
#[tokio::test(start_paused = true)]
async fn black_holed_watch_is_detected_with_default_settings_within_two_minutes() {
    let s = server_with(3).await;
    let mut h = Harness::new(&s, ReflectorConfig::default());
    h.start_synced().await;
    wait_for_watches(&s, 1).await;
    let silent_since = tokio::time::Instant::now();
    s.faults().stall_watches();
    s.create(&cm("default", "while-silent", "1")).unwrap();
    eventually(
        "the dead watch to be noticed",
        Duration::from_secs(300),
        || (!h.errors().iter().any(|e| e.contains("idle"))).then(|| format!("{:?}", h.errors())),
    )
    .await;
    let noticed = silent_since.elapsed();
    assert!(
        noticed >= kube_informer::reflector::DEFAULT_WATCH_IDLE_TIMEOUT
            && noticed < Duration::from_secs(120),
        "noticed after {noticed:?}"
    );
    s.faults().unstall_watches();
    assert_converges("after the silence", &h.informer, &s).await;
    assert_eq!(lists(&s).len(), 1, "resumed by a watch, not a relist");
    h.stop().await;
}
