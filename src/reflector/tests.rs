//! Reflector rules, one test each, against a scripted lister-watcher on a paused clock.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use k8s_openapi::api::core::v1::ConfigMap;
use tokio::time::Duration;

use super::*;
use crate::{
    fifo::{DeltaFifo, DeltaType},
    testutil::{
        MockLw, Request, WatchScript, api_error, cm, connection_refused, is_list, is_watch, page,
    },
};

fn no_jitter() -> ReflectorConfig {
    ReflectorConfig::default().backoff(BackoffConfig {
        jitter: 0.0,
        ..Default::default()
    })
}

struct Running {
    fifo: Arc<DeltaFifo<ConfigMap>>,
    errors: Arc<Mutex<Vec<String>>>,
    status: ReflectorStatus,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn start(lw: &MockLw, config: ReflectorConfig) -> Running {
    let fifo = Arc::new(DeltaFifo::new(None));
    let errors = Arc::new(Mutex::new(Vec::new()));
    let errs = errors.clone();
    let r = Reflector::new(lw.clone(), fifo.clone(), config)
        .with_error_handler(Arc::new(move |e: &Error| errs.lock().push(e.to_string())));
    let status = r.status();
    let task = tokio::spawn(r.run(futures::future::pending()));
    Running {
        fifo,
        errors,
        status,
        task,
    }
}

fn list_opts(r: &Request) -> &ListOptions {
    match r {
        Request::List(o) => o,
        other => panic!("expected a list, got {other:?}"),
    }
}

fn watch_opts(r: &Request) -> &WatchOptions {
    match r {
        Request::Watch(o) => o,
        other => panic!("expected a watch, got {other:?}"),
    }
}

/// Pops everything queued: (key, delta types) in order.
async fn drain(fifo: &DeltaFifo<ConfigMap>) -> Vec<(String, Vec<DeltaType>)> {
    let mut out = Vec::new();
    while !fifo.is_empty() {
        let item = fifo
            .pop(|deltas, _| {
                let key = crate::key_of(&**deltas[0].object.object())
                    .unwrap()
                    .to_string();
                (key, deltas.iter().map(|d| d.kind).collect::<Vec<_>>())
            })
            .await
            .unwrap();
        out.push(item);
    }
    out
}

#[tokio::test(start_paused = true)]
async fn first_list_is_at_resource_version_0_paginated() {
    let lw = MockLw::new();
    lw.list(Ok(page(
        "10",
        None,
        vec![cm("ns", "a", "5"), cm("ns", "b", "6")],
    )));
    let r = start(&lw, no_jitter());
    lw.wait_for("a watch", |rs| rs.iter().any(is_watch)).await;
    let reqs = lw.requests();
    assert_eq!(
        list_opts(&reqs[0]),
        &ListOptions {
            resource_version: "0".into(),
            limit: Some(500),
            ..Default::default()
        }
    );
    let queued = drain(&r.fifo).await;
    assert_eq!(
        queued,
        vec![
            ("ns/a".into(), vec![DeltaType::Replaced]),
            ("ns/b".into(), vec![DeltaType::Replaced])
        ]
    );
    assert_eq!(r.status.last_sync_resource_version(), "10");
}

#[tokio::test(start_paused = true)]
async fn watch_starts_from_list_resource_version_with_bookmarks_and_random_timeout() {
    let lw = MockLw::new();
    let mut timeouts = Vec::new();
    for _ in 0..20 {
        lw.list(Ok(page("10", None, vec![])));
        lw.watch(WatchScript::Fail(api_error(410, "Expired", "too old")));
    }
    let _r = start(&lw, no_jitter());
    lw.wait_for("20 watches", |rs| {
        rs.iter().filter(|r| is_watch(r)).count() >= 20
    })
    .await;
    for r in lw.requests().iter().filter(|r| is_watch(r)) {
        let w = watch_opts(r);
        assert_eq!(w.resource_version, "10");
        assert!(w.allow_bookmarks);
        assert!(!w.send_initial_events);
        assert!(
            (300..=600).contains(&w.timeout_seconds),
            "{}",
            w.timeout_seconds
        );
        timeouts.push(w.timeout_seconds);
    }
    timeouts.dedup();
    assert!(
        timeouts.len() > 1,
        "timeoutSeconds should vary between watches: {timeouts:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn list_pages_follow_continue_tokens_without_resource_version() {
    let lw = MockLw::new();
    lw.list(Ok(page("10", Some("c1"), vec![cm("ns", "a", "1")])))
        .list(Ok(page("10", Some("c2"), vec![cm("ns", "b", "2")])))
        .list(Ok(page("10", None, vec![cm("ns", "c", "3")])));
    let r = start(&lw, no_jitter().page_size(1));
    lw.wait_for("a watch", |rs| rs.iter().any(is_watch)).await;
    let reqs = lw.requests();
    assert_eq!(list_opts(&reqs[0]).limit, Some(1));
    for (i, token) in [(1, "c1"), (2, "c2")] {
        let o = list_opts(&reqs[i]);
        assert_eq!(o.continue_token.as_deref(), Some(token));
        assert_eq!(
            o.resource_version, "",
            "a continue request carries no resourceVersion"
        );
        assert_eq!(o.limit, Some(1));
    }
    assert_eq!(drain(&r.fifo).await.len(), 3);
}

#[tokio::test(start_paused = true)]
async fn expired_continue_page_falls_back_to_one_full_list_without_limit() {
    let lw = MockLw::new();
    lw.list(Ok(page("10", Some("c1"), vec![cm("ns", "a", "1")])))
        .list(Err(api_error(410, "Expired", "continue token expired")))
        .list(Ok(page(
            "12",
            None,
            vec![cm("ns", "a", "1"), cm("ns", "b", "12")],
        )));
    let r = start(&lw, no_jitter());
    lw.wait_for("a watch", |rs| rs.iter().any(is_watch)).await;
    let reqs = lw.requests();
    assert_eq!(
        list_opts(&reqs[2]),
        &ListOptions {
            resource_version: String::new(),
            limit: None,
            ..Default::default()
        }
    );
    assert_eq!(watch_opts(&reqs[3]).resource_version, "12");
    let keys: Vec<_> = drain(&r.fifo).await.into_iter().map(|(k, _)| k).collect();
    assert_eq!(
        keys,
        ["ns/a", "ns/b"],
        "only the full list's items, once each"
    );
}

#[tokio::test(start_paused = true)]
async fn expired_relist_retries_at_once_with_empty_resource_version() {
    let lw = MockLw::new();
    lw.list(Ok(page("10", None, vec![])))
        .watch(WatchScript::Events(vec![Ok(WatchEvent::Error(Box::new(
            {
                let mut s = kube::core::Status::failure("too old resource version", "Expired");
                s.code = 410;
                s
            },
        )))]))
        .list(Err(api_error(410, "Expired", "too old resource version")))
        .list(Ok(page("20", None, vec![])));
    let r = start(&lw, no_jitter());
    lw.wait_for("second watch", |rs| {
        rs.iter().filter(|r| is_watch(r)).count() >= 2
    })
    .await;
    let t = lw.timed_requests();
    let lists: Vec<_> = t.iter().filter(|(_, r)| is_list(r)).collect();
    assert_eq!(
        list_opts(&lists[1].1).resource_version,
        "10",
        "relist from the last version"
    );
    assert_eq!(
        list_opts(&lists[1].1).limit,
        None,
        "a specific version is not paginated"
    );
    assert_eq!(
        list_opts(&lists[2].1).resource_version,
        "",
        "then a consistent read"
    );
    assert_eq!(list_opts(&lists[2].1).limit, Some(500));
    assert_eq!(lists[2].0, lists[1].0, "retried at once, without backoff");
    assert_eq!(r.status.last_sync_resource_version(), "20");
}

#[tokio::test(start_paused = true)]
async fn too_large_resource_version_relists_with_empty_resource_version() {
    let lw = MockLw::new();
    lw.list(Ok(page("10", None, vec![])))
        .watch(WatchScript::Fail(api_error(410, "Gone", "gone")))
        .list(Err(api_error(
            504,
            "Timeout",
            "Too large resource version: 10, current: 5",
        )))
        .list(Ok(page("7", None, vec![])));
    let _r = start(&lw, no_jitter());
    lw.wait_for("second watch", |rs| {
        rs.iter().filter(|r| is_watch(r)).count() >= 2
    })
    .await;
    let lists: Vec<_> = lw.requests().into_iter().filter(is_list).collect();
    assert_eq!(list_opts(&lists[2]).resource_version, "");
}

#[tokio::test(start_paused = true)]
async fn watch_ending_normally_rewatches_from_last_resource_version_without_relist() {
    let lw = MockLw::new();
    lw.list(Ok(page("10", None, vec![])));
    let tx = lw.watch_channel();
    let r = start(&lw, no_jitter());
    lw.wait_for("first watch", |rs| rs.iter().any(is_watch))
        .await;
    tx.send(Ok(WatchEvent::Added(cm("ns", "a", "11")))).unwrap();
    tx.send(Ok(WatchEvent::Modified(cm("ns", "a", "12"))))
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    drop(tx);
    lw.wait_for("second watch", |rs| {
        rs.iter().filter(|r| is_watch(r)).count() >= 2
    })
    .await;
    let reqs = lw.requests();
    assert_eq!(reqs.iter().filter(|r| is_list(r)).count(), 1, "no relist");
    assert_eq!(watch_opts(&reqs[2]).resource_version, "12");
    assert!(r.errors.lock().is_empty(), "{:?}", r.errors.lock());
    let queued = drain(&r.fifo).await;
    assert_eq!(
        queued,
        vec![("ns/a".into(), vec![DeltaType::Added, DeltaType::Updated])]
    );
}

#[tokio::test(start_paused = true)]
async fn bookmarks_advance_the_resource_version() {
    let lw = MockLw::new();
    lw.list(Ok(page("10", None, vec![])));
    lw.watch(WatchScript::Events(vec![
        Ok(WatchEvent::Added(cm("ns", "a", "11"))),
        Ok(WatchEvent::Bookmark {
            resource_version: "15".into(),
            initial_events_end: false,
        }),
    ]));
    let r = start(&lw, no_jitter());
    lw.wait_for("second watch", |rs| {
        rs.iter().filter(|r| is_watch(r)).count() >= 2
    })
    .await;
    assert_eq!(watch_opts(&lw.requests()[2]).resource_version, "15");
    assert_eq!(r.status.last_sync_resource_version(), "15");
}

#[tokio::test(start_paused = true)]
async fn gone_during_watch_relists_from_last_resource_version() {
    let lw = MockLw::new();
    let mut gone = kube::core::Status::failure("too old resource version: 11 (30)", "Expired");
    gone.code = 410;
    lw.list(Ok(page("10", None, vec![cm("ns", "a", "9")])))
        .watch(WatchScript::Events(vec![
            Ok(WatchEvent::Modified(cm("ns", "a", "11"))),
            Ok(WatchEvent::Error(Box::new(gone))),
        ]))
        .list(Ok(page("30", None, vec![cm("ns", "a", "25")])));
    let r = start(&lw, no_jitter());
    lw.wait_for("second watch", |rs| {
        rs.iter().filter(|r| is_watch(r)).count() >= 2
    })
    .await;
    let reqs = lw.requests();
    assert_eq!(list_opts(&reqs[2]).resource_version, "11");
    assert_eq!(watch_opts(&reqs[3]).resource_version, "30");
    assert_eq!(r.errors.lock().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn very_short_watch_counts_as_failure_and_backs_off() {
    let lw = MockLw::new();
    lw.list(Ok(page("10", None, vec![])))
        .watch(WatchScript::Events(vec![]))
        .list(Ok(page("10", None, vec![])));
    let r = start(&lw, no_jitter());
    lw.wait_for("second watch", |rs| {
        rs.iter().filter(|r| is_watch(r)).count() >= 2
    })
    .await;
    let t = lw.timed_requests();
    assert!(is_list(&t[2].1), "a failed watch leads to a relist");
    assert_eq!(
        t[2].0 - t[1].0,
        Duration::from_millis(800),
        "after the initial backoff"
    );
    assert!(
        r.errors.lock()[0].contains("very short watch"),
        "{:?}",
        r.errors.lock()
    );
}

#[tokio::test(start_paused = true)]
async fn watch_start_connection_failure_backs_off_and_retries_the_watch() {
    let lw = MockLw::new();
    lw.list(Ok(page("10", None, vec![])))
        .watch(WatchScript::Fail(connection_refused()))
        .watch(WatchScript::Fail(api_error(
            429,
            "TooManyRequests",
            "slow down",
        )))
        .watch(WatchScript::EventsThenHang(vec![]));
    let r = start(&lw, no_jitter());
    lw.wait_for("third watch", |rs| {
        rs.iter().filter(|r| is_watch(r)).count() >= 3
    })
    .await;
    let t = lw.timed_requests();
    assert_eq!(t.iter().filter(|(_, r)| is_list(r)).count(), 1, "no relist");
    assert_eq!(t[2].0 - t[1].0, Duration::from_millis(800));
    assert_eq!(t[3].0 - t[2].0, Duration::from_millis(1600));
    assert_eq!(r.errors.lock().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn list_failures_back_off_exponentially_and_cap() {
    let lw = MockLw::new();
    // No scripts: every list fails with a 500.
    let r = start(&lw, no_jitter());
    lw.wait_for("9 lists", |rs| rs.len() >= 9).await;
    let t = lw.timed_requests();
    let gaps: Vec<_> = t
        .windows(2)
        .map(|w| (w[1].0 - w[0].0).as_millis())
        .collect();
    assert_eq!(gaps, [800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]);
    assert!(r.errors.lock().len() >= 8);
}

#[tokio::test(start_paused = true)]
async fn list_backoff_has_jitter_between_one_and_two_times_the_delay() {
    let lw = MockLw::new();
    let _r = start(&lw, ReflectorConfig::default());
    lw.wait_for("6 lists", |rs| rs.len() >= 6).await;
    let t = lw.timed_requests();
    let mut base = 800u128;
    for w in t.windows(2) {
        let gap = (w[1].0 - w[0].0).as_millis();
        assert!(
            gap >= base && gap <= 2 * base,
            "gap {gap} outside [{base}, {}]",
            2 * base
        );
        base *= 2;
    }
}

#[tokio::test(start_paused = true)]
async fn malformed_watch_line_is_reported_and_rewatched_without_relist() {
    let lw = MockLw::new();
    let bad = crate::reflector::decode::decode_watch_event::<ConfigMap>(b"{not json").unwrap_err();
    lw.list(Ok(page("10", None, vec![])))
        .watch(WatchScript::Events(vec![
            Ok(WatchEvent::Added(cm("ns", "a", "11"))),
            Err(ListWatchError::Decode(bad)),
        ]));
    let r = start(&lw, no_jitter());
    lw.wait_for("second watch", |rs| {
        rs.iter().filter(|r| is_watch(r)).count() >= 2
    })
    .await;
    let reqs = lw.requests();
    assert_eq!(reqs.iter().filter(|r| is_list(r)).count(), 1, "no relist");
    assert_eq!(
        watch_opts(&reqs[2]).resource_version,
        "11",
        "re-fetch from the last good event"
    );
    assert_eq!(r.errors.lock().len(), 1);
    assert!(
        r.errors.lock()[0].contains("decode"),
        "{:?}",
        r.errors.lock()
    );
}

#[tokio::test(start_paused = true)]
async fn idle_watch_is_treated_as_dead_and_rewatched() {
    let lw = MockLw::new();
    lw.list(Ok(page("10", None, vec![])))
        .watch(WatchScript::EventsThenHang(vec![Ok(WatchEvent::Added(
            cm("ns", "a", "11"),
        ))]));
    let r = start(&lw, no_jitter().idle_timeout(Duration::from_secs(30)));
    lw.wait_for("second watch", |rs| {
        rs.iter().filter(|r| is_watch(r)).count() >= 2
    })
    .await;
    let t = lw.timed_requests();
    // Restarted at once: a silent watch is not a failure of the server.
    assert_eq!(t[2].0 - t[1].0, Duration::from_secs(30));
    assert_eq!(watch_opts(&t[2].1).resource_version, "11");
    assert!(r.errors.lock()[0].contains("idle"), "{:?}", r.errors.lock());
}

/// After an idle timeout, the re-watch may go out on a pooled connection as dead as the watch's:
/// it is given up after the start timeout, not a whole idle timeout, and retried after one
/// backoff step from the same resourceVersion.
#[tokio::test(start_paused = true)]
async fn unanswered_watch_request_is_given_up_after_the_start_timeout() {
    let lw = MockLw::new();
    lw.list(Ok(page("10", None, vec![])))
        .watch(WatchScript::EventsThenHang(vec![Ok(WatchEvent::Added(
            cm("ns", "a", "11"),
        ))]))
        .watch(WatchScript::NoAnswer);
    let r = start(&lw, no_jitter());
    lw.wait_for("third watch", |rs| {
        rs.iter().filter(|r| is_watch(r)).count() >= 3
    })
    .await;
    let t = lw.timed_requests();
    assert_eq!(t[2].0 - t[1].0, DEFAULT_WATCH_IDLE_TIMEOUT);
    let backoff = BackoffConfig::default().initial;
    assert_eq!(t[3].0 - t[2].0, DEFAULT_WATCH_START_TIMEOUT + backoff);
    assert_eq!(watch_opts(&t[3].1).resource_version, "11");
    let errors = r.errors.lock().clone();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors[1].contains("no answer to the watch request within 30s"),
        "{errors:?}"
    );
    // Nothing was relisted.
    assert_eq!(t.iter().filter(|(_, r)| is_list(r)).count(), 1);
}

#[tokio::test(start_paused = true)]
async fn watch_start_timeout_is_bounded_by_the_idle_timeout() {
    let lw = MockLw::new();
    lw.list(Ok(page("10", None, vec![])))
        .watch(WatchScript::NoAnswer);
    let _r = start(&lw, no_jitter().idle_timeout(Duration::from_secs(10)));
    lw.wait_for("second watch", |rs| {
        rs.iter().filter(|r| is_watch(r)).count() >= 2
    })
    .await;
    let t = lw.timed_requests();
    let backoff = BackoffConfig::default().initial;
    assert_eq!(t[2].0 - t[1].0, Duration::from_secs(10) + backoff);
}

#[tokio::test(start_paused = true)]
async fn default_idle_timeout_follows_the_apiserver_bookmark_cadence() {
    let lw = MockLw::new();
    lw.list(Ok(page("10", None, vec![])));
    let _r = start(&lw, no_jitter());
    lw.wait_for("second watch", |rs| {
        rs.iter().filter(|r| is_watch(r)).count() >= 2
    })
    .await;
    let t = lw.timed_requests();
    assert_eq!(t[2].0 - t[1].0, DEFAULT_WATCH_IDLE_TIMEOUT);
    assert_eq!(DEFAULT_WATCH_IDLE_TIMEOUT, Duration::from_secs(75));
}

#[tokio::test(start_paused = true)]
async fn zero_idle_timeout_waits_for_the_watch_timeout_plus_a_minute() {
    let lw = MockLw::new();
    lw.list(Ok(page("10", None, vec![])));
    let _r = start(&lw, no_jitter().idle_timeout(Duration::ZERO));
    lw.wait_for("second watch", |rs| {
        rs.iter().filter(|r| is_watch(r)).count() >= 2
    })
    .await;
    let t = lw.timed_requests();
    let timeout = u64::from(watch_opts(&t[1].1).timeout_seconds);
    assert_eq!(t[2].0 - t[1].0, Duration::from_secs(timeout + 60));
}

/// With the idle check off, a list still gives up on a connection that sends nothing (kube's
/// client has no read timeout); watches keep their `timeoutSeconds` plus a minute (above).
#[tokio::test(start_paused = true)]
async fn zero_idle_timeout_still_bounds_lists() {
    let lw = MockLw::new();
    lw.list(Ok(page("10", None, vec![])));
    let _r = start(&lw, no_jitter().idle_timeout(Duration::ZERO));
    lw.wait_for("a list", |rs| !rs.is_empty()).await;
    let reqs = lw.requests();
    assert_eq!(
        list_opts(&reqs[0]).idle_timeout,
        Some(DEFAULT_WATCH_IDLE_TIMEOUT)
    );
}

/// Durations meant as "never" (`Duration::MAX`) do not overflow an `Instant` and panic the
/// reflector's task, which would end its watch too.
#[tokio::test(start_paused = true)]
async fn huge_resync_period_and_watch_timeout_do_not_panic() {
    let lw = MockLw::new();
    lw.list(Ok(page("10", None, vec![cm("ns", "a", "10")])));
    let mut config = no_jitter().resync_period(Duration::MAX);
    config.min_watch_timeout = Duration::MAX;
    let r = start(&lw, config);
    lw.wait_for("a watch", |rs| rs.iter().any(is_watch)).await;
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert!(
        !r.task.is_finished(),
        "the reflector's task ended (panicked)"
    );
    let reqs = lw.requests();
    let watch = reqs.iter().find(|r| is_watch(r)).unwrap();
    assert_eq!(watch_opts(watch).timeout_seconds, u32::MAX);
}

#[tokio::test(start_paused = true)]
async fn error_handler_sees_every_error() {
    let lw = MockLw::new();
    lw.list(Err(api_error(403, "Forbidden", "no")))
        .list(Err(api_error(500, "InternalError", "boom")))
        .list(Ok(page("10", None, vec![])))
        .watch(WatchScript::Fail(api_error(403, "Forbidden", "no")))
        .list(Ok(page("10", None, vec![])));
    let r = start(&lw, no_jitter());
    lw.wait_for("second watch", |rs| {
        rs.iter().filter(|r| is_watch(r)).count() >= 2
    })
    .await;
    let errs = r.errors.lock().clone();
    assert_eq!(errs.len(), 3, "{errs:?}");
    assert!(errs[0].contains("403") && errs[1].contains("500") && errs[2].contains("watch"));
}

#[tokio::test(start_paused = true)]
async fn object_without_name_in_watch_is_reported_not_fatal() {
    let lw = MockLw::new();
    let mut nameless = cm("ns", "x", "11");
    nameless.metadata.name = None;
    lw.list(Ok(page("10", None, vec![])))
        .watch(WatchScript::EventsThenHang(vec![
            Ok(WatchEvent::Added(nameless)),
            Ok(WatchEvent::Added(cm("ns", "b", "12"))),
        ]));
    let r = start(&lw, no_jitter());
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(r.errors.lock().len(), 1);
    assert_eq!(
        drain(&r.fifo).await,
        vec![("ns/b".into(), vec![DeltaType::Added])]
    );
    assert_eq!(r.status.last_sync_resource_version(), "12");
}

#[tokio::test(start_paused = true)]
async fn streaming_list_replaces_at_initial_events_end_bookmark_and_continues_same_watch() {
    let lw = MockLw::new();
    let tx = lw.watch_channel();
    let r = start(&lw, no_jitter().streaming_list(true));
    lw.wait_for("watch", |rs| rs.iter().any(is_watch)).await;
    for ev in [
        WatchEvent::Added(cm("ns", "a", "5")),
        WatchEvent::Added(cm("ns", "b", "6")),
        WatchEvent::Deleted(cm("ns", "b", "7")),
        WatchEvent::Bookmark {
            resource_version: "7".into(),
            initial_events_end: false,
        },
        WatchEvent::Added(cm("ns", "c", "8")),
        WatchEvent::Bookmark {
            resource_version: "9".into(),
            initial_events_end: true,
        },
        WatchEvent::Modified(cm("ns", "a", "10")),
    ] {
        tx.send(Ok(ev)).unwrap();
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let reqs = lw.requests();
    assert_eq!(reqs.len(), 1, "one watch, no list: {reqs:?}");
    let w = watch_opts(&reqs[0]);
    assert!(w.send_initial_events && w.allow_bookmarks);
    assert_eq!(w.resource_version, "");
    assert!(r.fifo.has_synced() || !r.fifo.is_empty());
    let mut queued = drain(&r.fifo).await;
    queued.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        queued,
        vec![
            ("ns/a".into(), vec![DeltaType::Replaced, DeltaType::Updated]),
            ("ns/c".into(), vec![DeltaType::Replaced]),
        ]
    );
    assert_eq!(r.status.last_sync_resource_version(), "10");
}

#[tokio::test(start_paused = true)]
async fn streaming_list_falls_back_to_list_when_refused() {
    let lw = MockLw::new();
    lw.watch(WatchScript::Fail(api_error(
        400,
        "BadRequest",
        "sendInitialEvents is forbidden",
    )))
    .list(Ok(page("10", None, vec![cm("ns", "a", "3")])))
    .watch(WatchScript::EventsThenHang(vec![]));
    let r = start(&lw, no_jitter().streaming_list(true));
    lw.wait_for("list then watch", |rs| rs.len() >= 3).await;
    let reqs = lw.requests();
    assert!(watch_opts(&reqs[0]).send_initial_events);
    assert_eq!(list_opts(&reqs[1]).resource_version, "0");
    assert!(!watch_opts(&reqs[2]).send_initial_events);
    assert_eq!(r.errors.lock().len(), 1);
    assert_eq!(drain(&r.fifo).await.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn resync_period_queues_sync_deltas_when_asked() {
    let lw = MockLw::new();
    lw.list(Ok(page("10", None, vec![cm("ns", "a", "3")])));
    let indexer = crate::store::Indexer::<ConfigMap>::new();
    let fifo = Arc::new(DeltaFifo::new(Some(Arc::new(indexer.clone()))));
    let asked = Arc::new(AtomicUsize::new(0));
    let a = asked.clone();
    let r = Reflector::new(
        lw.clone(),
        fifo.clone(),
        no_jitter().resync_period(Duration::from_secs(10)),
    )
    .with_should_resync(Arc::new(move || {
        a.fetch_add(1, Ordering::SeqCst).is_multiple_of(2)
    }));
    let task = tokio::spawn(r.run(futures::future::pending()));
    lw.wait_for("watch", |rs| rs.iter().any(is_watch)).await;
    // Apply the list to the indexer as an informer would.
    fifo.pop(|deltas, _| {
        indexer.add(deltas[0].object.object().clone()).unwrap();
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(10) + Duration::from_millis(10)).await;
    assert_eq!(
        drain(&fifo).await,
        vec![("ns/a".into(), vec![DeltaType::Sync])]
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(
        fifo.is_empty(),
        "the second tick was declined by should_resync"
    );
    assert_eq!(asked.load(Ordering::SeqCst), 2);
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn run_stops_when_shutdown_completes() {
    let lw = MockLw::new();
    lw.list(Ok(page("10", None, vec![])));
    let fifo = Arc::new(DeltaFifo::new(None));
    let r = Reflector::new(lw.clone(), fifo, no_jitter());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(r.run(async move {
        let _ = rx.await;
    }));
    lw.wait_for("watch", |rs| rs.iter().any(is_watch)).await;
    tx.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("reflector did not stop: likely deadlocked")
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn undecodable_object_is_reported_tombstoned_and_skipped_without_rewatch() {
    let lw = MockLw::new();
    let line = br#"{"type":"MODIFIED","object":{"metadata":{"name":"a","namespace":"ns","resourceVersion":"12"},"data":7}}"#;
    let err = crate::reflector::decode::decode_watch_event::<ConfigMap>(line).unwrap_err();
    let u = crate::reflector::decode::undecodable_event(line, err).unwrap();
    lw.list(Ok(page("10", None, vec![])))
        .watch(WatchScript::EventsThenHang(vec![
            Ok(WatchEvent::Added(cm("ns", "a", "11"))),
            Err(ListWatchError::Undecodable(Box::new(u))),
            Ok(WatchEvent::Added(cm("ns", "b", "13"))),
        ]));
    let r = start(&lw, no_jitter());
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        lw.requests().len(),
        2,
        "one list, one watch: no re-watch, no relist"
    );
    assert_eq!(r.status.last_sync_resource_version(), "13");
    assert_eq!(r.errors.lock().len(), 1);
    assert!(r.errors.lock()[0].contains("ns/a"), "{:?}", r.errors.lock());
    let mut queued = drain(&r.fifo).await;
    queued.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        queued,
        vec![
            ("ns/a".into(), vec![DeltaType::Added, DeltaType::Deleted]),
            ("ns/b".into(), vec![DeltaType::Added]),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn undecodable_list_items_are_reported_and_left_out() {
    let lw = MockLw::new();
    let body = br#"{"metadata":{"resourceVersion":"9"},"items":[
        {"metadata":{"name":"a","namespace":"ns","resourceVersion":"3"}},
        {"metadata":{"name":"b","namespace":"ns","resourceVersion":"4"},"data":[1]}]}"#;
    lw.list(Ok(
        crate::reflector::decode::decode_list::<ConfigMap>(body).unwrap()
    ));
    let r = start(&lw, no_jitter());
    lw.wait_for("a watch", |rs| rs.iter().any(is_watch)).await;
    assert_eq!(r.errors.lock().len(), 1);
    assert!(r.errors.lock()[0].contains("ns/b"), "{:?}", r.errors.lock());
    assert_eq!(
        drain(&r.fifo).await,
        vec![("ns/a".into(), vec![DeltaType::Replaced])]
    );
}

#[tokio::test(start_paused = true)]
async fn relist_reuses_cached_objects_whose_resource_version_is_unchanged() {
    let lw = MockLw::new();
    lw.list(Ok(page(
        "6",
        None,
        vec![cm("ns", "a", "5"), cm("ns", "b", "6")],
    )))
    // Delivered something, then expired: the relist comes after a backoff step.
    .watch(WatchScript::Events(vec![
        Ok(WatchEvent::Bookmark {
            resource_version: "6".into(),
            initial_events_end: false,
        }),
        Ok(WatchEvent::Error(Box::new({
            let mut s = kube::core::Status::failure("too old", "Expired");
            s.code = 410;
            s
        }))),
    ]))
    .list(Ok(page(
        "20",
        None,
        vec![cm("ns", "a", "19"), cm("ns", "b", "6")],
    )));
    let indexer = crate::store::Indexer::<ConfigMap>::new();
    let fifo = Arc::new(DeltaFifo::new(Some(Arc::new(indexer.clone()))));
    let r = Reflector::new(lw.clone(), fifo.clone(), no_jitter());
    let task = tokio::spawn(r.run(futures::future::pending()));
    lw.wait_for("first watch", |rs| rs.iter().any(is_watch))
        .await;
    // Apply the first list as an informer would.
    while !fifo.is_empty() {
        fifo.pop(|deltas, _| {
            indexer
                .add(deltas.last().unwrap().object.object().clone())
                .unwrap();
        })
        .await
        .unwrap();
    }
    let cached_b = indexer.get_by_key("ns/b").unwrap();
    let cached_a = indexer.get_by_key("ns/a").unwrap();
    lw.wait_for("relist", |rs| rs.iter().filter(|r| is_list(r)).count() >= 2)
        .await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    let mut seen = Vec::new();
    while !fifo.is_empty() {
        let (key, obj) = fifo
            .pop(|deltas, _| {
                let d = deltas.last().unwrap();
                (
                    crate::key_of(&**d.object.object()).unwrap().to_string(),
                    d.object.object().clone(),
                )
            })
            .await
            .unwrap();
        seen.push(key.clone());
        match key.as_str() {
            "ns/b" => assert!(
                Arc::ptr_eq(&obj, &cached_b),
                "unchanged: the cached Arc is reused"
            ),
            "ns/a" => assert!(!Arc::ptr_eq(&obj, &cached_a), "changed: the new version"),
            other => panic!("unexpected {other}"),
        }
    }
    seen.sort();
    assert_eq!(seen, ["ns/a", "ns/b"]);
    task.abort();
}

fn gone_status() -> Box<kube::core::Status> {
    let mut s = kube::core::Status::failure("too old resource version", "Expired");
    s.code = 410;
    Box::new(s)
}

#[tokio::test(start_paused = true)]
async fn a_cut_then_410_on_the_rewatch_relists_within_one_backoff_step() {
    // client-go TestSharedInformerWatchDisruption: the watch is cut, and by the time the
    // reflector is back the version has been compacted. One backoff step (before the
    // re-watch), then the 410 on the re-watch's first answer relists at once.
    let lw = MockLw::new();
    lw.list(Ok(page("10", None, vec![cm("ns", "a", "10")])))
        .watch(WatchScript::Events(vec![
            Ok(WatchEvent::Added(cm("ns", "b", "11"))),
            Err(ListWatchError::Stream(kube::Error::ReadEvents(
                std::io::Error::other("connection reset"),
            ))),
        ]))
        .watch(WatchScript::Events(vec![Ok(WatchEvent::Error(
            gone_status(),
        ))]))
        .list(Ok(page("20", None, vec![cm("ns", "b", "11")])));
    let r = start(&lw, no_jitter());
    lw.wait_for("the relist", |rs| {
        rs.iter().filter(|r| is_list(r)).count() >= 2
    })
    .await;
    let t = lw.timed_requests();
    assert!(
        is_watch(&t[1].1) && is_watch(&t[2].1) && is_list(&t[3].1),
        "{t:?}"
    );
    assert_eq!(
        t[2].0 - t[1].0,
        Duration::from_millis(800),
        "one backoff step"
    );
    assert_eq!(t[3].0 - t[2].0, Duration::ZERO, "no second backoff");
    assert_eq!(list_opts(&t[3].1).resource_version, "11");
    let errs = r.errors.lock().clone();
    assert_eq!(errs.len(), 2, "{errs:?}");
}

/// A watch that answers 410 right after a list (an HA control plane whose members' watch
/// caches disagree): each relist waits a backoff step, growing, as client-go's `BackoffUntil`
/// around `ListAndWatch` does, rather than relisting in a loop with no wait.
#[tokio::test(start_paused = true)]
async fn a_410_on_the_first_watch_after_a_list_relists_after_a_growing_backoff() {
    let lw = MockLw::new();
    let gone = || WatchScript::Fail(ListWatchError::Api(gone_status()));
    lw.list(Ok(page("10", None, vec![])))
        .watch(gone())
        .list(Ok(page("12", None, vec![])))
        .watch(WatchScript::Events(vec![Ok(WatchEvent::Error(
            gone_status(),
        ))]))
        .list(Ok(page("14", None, vec![])));
    let _r = start(&lw, no_jitter());
    lw.wait_for("the second relist", |rs| {
        rs.iter().filter(|r| is_list(r)).count() >= 3
    })
    .await;
    let t = lw.timed_requests();
    assert!(
        is_list(&t[0].1) && is_watch(&t[1].1) && is_list(&t[2].1) && is_watch(&t[3].1),
        "{t:?}"
    );
    assert!(is_list(&t[4].1), "{t:?}");
    assert_eq!(t[2].0 - t[1].0, Duration::from_millis(800));
    assert_eq!(t[4].0 - t[3].0, Duration::from_millis(1600));
}

#[tokio::test(start_paused = true)]
async fn streaming_list_items_are_transformed_and_cached_objects_reused() {
    let lw = MockLw::new();
    let indexer = crate::store::Indexer::<ConfigMap>::new();
    let cached = Arc::new(cm("ns", "kept", "5"));
    indexer.add(cached.clone()).unwrap();
    let fifo = Arc::new(
        DeltaFifo::new(Some(Arc::new(indexer.clone()))).with_transform(Arc::new(
            |mut o: ConfigMap| {
                o.data = None;
                o
            },
        )),
    );
    let tx = lw.watch_channel();
    let r = Reflector::new(lw.clone(), fifo.clone(), no_jitter().streaming_list(true));
    let task = tokio::spawn(r.run(futures::future::pending()));
    lw.wait_for("watch", |rs| rs.iter().any(is_watch)).await;
    for ev in [
        WatchEvent::Added(cm("ns", "kept", "5")),
        WatchEvent::Added(cm("ns", "new", "6")),
        WatchEvent::Bookmark {
            resource_version: "6".into(),
            initial_events_end: true,
        },
    ] {
        tx.send(Ok(ev)).unwrap();
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let kept = fifo.get_by_key("ns/kept").unwrap();
    assert!(
        Arc::ptr_eq(kept[0].object.object(), &cached),
        "the unchanged object is the cached Arc"
    );
    let new = fifo.get_by_key("ns/new").unwrap();
    assert_eq!(new[0].kind, DeltaType::Replaced);
    assert!(
        new[0].object.object().data.is_none(),
        "transformed as it arrived"
    );
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn a_panicking_watch_error_handler_is_caught_and_the_reflector_goes_on() {
    let lw = MockLw::new();
    lw.list(Err(connection_refused()))
        .list(Ok(page("10", None, vec![cm("ns", "a", "10")])));
    let fifo = Arc::new(DeltaFifo::new(None));
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let r = Reflector::new(lw.clone(), fifo.clone(), no_jitter()).with_error_handler(Arc::new(
        move |_: &Error| {
            seen.fetch_add(1, Ordering::SeqCst);
            panic!("error handler bug");
        },
    ));
    let task = tokio::spawn(r.run(futures::future::pending()));
    lw.wait_for("a watch after the failed list", |rs| {
        rs.iter().any(is_watch)
    })
    .await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(drain(&fifo).await.len(), 1);
    assert!(!task.is_finished());
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn a_too_large_watch_event_is_reported_and_relisted_after_a_backoff() {
    let lw = MockLw::new();
    lw.list(Ok(page("10", None, vec![])))
        .watch(WatchScript::Events(vec![
            Ok(WatchEvent::Added(cm("ns", "a", "11"))),
            Err(ListWatchError::TooLarge { limit: 64 }),
        ]))
        .list(Ok(page("12", None, vec![])));
    let r = start(&lw, no_jitter());
    lw.wait_for("the relist", |rs| {
        rs.iter().filter(|r| is_list(r)).count() >= 2
    })
    .await;
    let t = lw.timed_requests();
    assert_eq!(t[2].0 - t[1].0, Duration::from_millis(800));
    assert!(r.errors.lock()[0].contains("maximum object size"));
}

#[tokio::test(start_paused = true)]
async fn an_invalid_backoff_is_replaced_by_the_default() {
    let lw = MockLw::new();
    lw.list(Err(connection_refused()))
        .list(Ok(page("10", None, vec![])));
    let _r = start(
        &lw,
        ReflectorConfig::default().backoff(BackoffConfig {
            factor: f64::NAN,
            jitter: 0.0,
            ..Default::default()
        }),
    );
    lw.wait_for("the second list", |rs| {
        rs.iter().filter(|r| is_list(r)).count() >= 2
    })
    .await;
    let t = lw.timed_requests();
    // The default's first step (800 ms, full jitter): no panic on NaN arithmetic.
    let d = t[1].0 - t[0].0;
    assert!(
        d >= Duration::from_millis(800) && d <= Duration::from_millis(1600),
        "{d:?}"
    );
}

mod sharded {
    use super::*;
    use crate::sharding::{ShardError, ShardSelector};

    /// A ConfigMap whose uid hashes into (or out of) `shard`.
    fn cm_in(shard: &ShardSelector, inside: bool, name: &str, rv: &str) -> ConfigMap {
        let mut obj = cm("ns", name, rv);
        let uid = (0..)
            .map(|i| format!("{name}-uid-{i}"))
            .find(|u| shard.matches_value(u) == inside)
            .expect("some uid hashes each way");
        obj.metadata.uid = Some(uid);
        obj
    }

    fn sharded_page(shard: &ShardSelector, rv: &str, items: Vec<ConfigMap>) -> ListPage<ConfigMap> {
        let mut p = page(rv, None, items);
        p.shard_info = Some(shard.to_string());
        p
    }

    #[tokio::test(start_paused = true)]
    async fn every_list_and_watch_carries_the_shard_selector() {
        let shard = ShardSelector::of(0, 2).unwrap();
        let lw = MockLw::new();
        lw.list(Ok(sharded_page(
            &shard,
            "10",
            vec![cm_in(&shard, true, "a", "5")],
        )))
        .watch(WatchScript::Fail(ListWatchError::Api(gone_status())))
        .list(Ok(sharded_page(
            &shard,
            "12",
            vec![cm_in(&shard, true, "a", "5")],
        )));
        let r = start(&lw, no_jitter().shard(shard.clone()).streaming_list(true));
        lw.wait_for("the watch after the relist", |rs| {
            rs.iter().filter(|r| is_watch(r)).count() >= 2
        })
        .await;
        let want = Some(shard.to_string());
        let reqs = lw.requests();
        // Lists, not a streaming list: only a list response confirms the shard.
        assert!(is_list(&reqs[0]) && is_list(&reqs[2]), "{reqs:#?}");
        for r in &reqs {
            match r {
                Request::List(o) => assert_eq!(o.shard_selector, want),
                Request::Watch(o) => {
                    assert_eq!(o.shard_selector, want);
                    assert!(!o.send_initial_events);
                }
            }
        }
        assert_eq!(r.status.last_sync_resource_version(), "12");
        assert!(r.errors.lock().iter().all(|e| !e.contains("shard")));
    }

    /// A server without the gate sends the whole collection, lists without shardInfo: the shard
    /// is taken on the client, as client-go's `NewShardedListWatch` does, quietly.
    #[tokio::test(start_paused = true)]
    async fn a_server_that_does_not_shard_is_filtered_on_the_client() {
        let shard = ShardSelector::of(1, 3).unwrap();
        let lw = MockLw::new();
        lw.list(Ok(page(
            "10",
            None,
            vec![
                cm_in(&shard, true, "a", "5"),
                cm_in(&shard, false, "b", "6"),
            ],
        )))
        .watch(WatchScript::EventsThenHang(vec![
            Ok(WatchEvent::Added(cm_in(&shard, false, "d", "11"))),
            Ok(WatchEvent::Added(cm_in(&shard, true, "c", "12"))),
        ]));
        let r = start(&lw, no_jitter().shard(shard.clone()));
        let mut seen = Vec::new();
        while seen.len() < 2 {
            seen.extend(drain(&r.fifo).await.into_iter().map(|(k, _)| k));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        seen.extend(drain(&r.fifo).await.into_iter().map(|(k, _)| k));
        assert_eq!(seen, vec!["ns/a".to_string(), "ns/c".to_string()]);
        assert!(r.fifo.has_synced());
        assert!(r.errors.lock().is_empty(), "{:?}", r.errors.lock());
        assert_eq!(r.status.last_sync_resource_version(), "12");
        assert!(matches!(check_shard_info(&shard, None), Ok(false)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_different_echoed_selector_is_a_mismatch() {
        let shard = ShardSelector::of(0, 2).unwrap();
        let other = ShardSelector::of(1, 2).unwrap();
        let err = check_shard_info(&shard, Some(&other.to_string())).unwrap_err();
        assert!(matches!(
            err,
            ListWatchError::Shard(ShardError::Mismatch { .. })
        ));
        assert!(check_shard_info(&shard, Some("not a selector")).is_err());
        assert!(matches!(
            check_shard_info(&shard, Some(&shard.to_string())),
            Ok(true)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn objects_outside_the_shard_of_a_sharded_list_are_reported_and_none_are_cached() {
        let shard = ShardSelector::of(0, 2).unwrap();
        let lw = MockLw::new();
        lw.list(Ok(sharded_page(
            &shard,
            "10",
            vec![
                cm_in(&shard, true, "in", "5"),
                cm_in(&shard, false, "out", "6"),
            ],
        )))
        .watch(WatchScript::EventsThenHang(vec![
            Ok(WatchEvent::Added(cm_in(&shard, false, "out2", "11"))),
            Ok(WatchEvent::Added(cm_in(&shard, true, "in2", "12"))),
            Ok(WatchEvent::Modified(cm_in(&shard, false, "out3", "13"))),
        ]));
        let r = start(&lw, no_jitter().shard(shard.clone()));
        let mut seen = Vec::new();
        while seen.len() < 2 {
            seen.extend(drain(&r.fifo).await.into_iter().map(|(k, _)| k));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        seen.extend(drain(&r.fifo).await.into_iter().map(|(k, _)| k));
        assert_eq!(seen, vec!["ns/in".to_string(), "ns/in2".to_string()]);
        let errors = r.errors.lock().clone();
        let outside: Vec<_> = errors
            .iter()
            .filter(|e| e.contains("outside the shard"))
            .collect();
        // The list said it was sharded: its stray object is the server's fault, reported. Watch
        // events carry no such claim (an HA member without the gate sends them all): dropped.
        assert_eq!(outside.len(), 1, "{errors:?}");
        assert!(outside[0].contains("ns/out"));
        // The skipped events' versions still count.
        assert_eq!(r.status.last_sync_resource_version(), "13");
    }
}
