//! Test doubles shared by the crate's unit tests: a scripted [`ListerWatcher`] that records
//! every request, and a seeded random generator.

use std::{collections::VecDeque, sync::Arc};

use futures::{FutureExt, StreamExt, future::BoxFuture};
use k8s_openapi::{
    api::core::v1::ConfigMap,
    apimachinery::pkg::apis::meta::v1::{ListMeta, ObjectMeta},
};
use kube::core::Status;
use parking_lot::Mutex;
use tokio::{sync::mpsc, time::Instant};

use crate::reflector::{
    ListOptions, ListPage, ListWatchError, ListerWatcher, WatchEvent, WatchOptions, WatchStream,
};

/// A small splitmix64, so a randomised test replays exactly from its seed.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `n`.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// True one time in `one_in`.
    pub(crate) fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }
}

/// A ConfigMap with a namespace, name, resourceVersion and one data entry.
pub(crate) fn cm(ns: &str, name: &str, rv: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            resource_version: Some(rv.into()),
            ..Default::default()
        },
        data: Some([("v".to_owned(), rv.to_owned())].into()),
        ..Default::default()
    }
}

pub(crate) fn page(rv: &str, cont: Option<&str>, items: Vec<ConfigMap>) -> ListPage<ConfigMap> {
    ListPage::new(
        ListMeta {
            resource_version: Some(rv.into()),
            continue_: cont.map(str::to_owned),
            ..Default::default()
        },
        items,
    )
}

pub(crate) fn api_error(code: u16, reason: &str, message: &str) -> ListWatchError {
    let mut s = Status::failure(message, reason);
    s.code = code;
    ListWatchError::Api(Box::new(s))
}

pub(crate) fn connection_refused() -> ListWatchError {
    ListWatchError::Request(kube::Error::Service(Box::new(std::io::Error::new(
        std::io::ErrorKind::ConnectionRefused,
        "connection refused",
    ))))
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Request {
    List(ListOptions),
    Watch(WatchOptions),
}

pub(crate) enum WatchScript {
    /// The watch request fails.
    Fail(ListWatchError),
    /// The watch delivers these, then ends (closes).
    Events(Vec<Result<WatchEvent<ConfigMap>, ListWatchError>>),
    /// The watch delivers these, then stays open delivering nothing.
    EventsThenHang(Vec<Result<WatchEvent<ConfigMap>, ListWatchError>>),
    /// The watch request is never answered (a dead connection from the client's pool).
    NoAnswer,
    /// The watch delivers what the test sends; it ends when the sender is dropped.
    Channel(mpsc::UnboundedReceiver<Result<WatchEvent<ConfigMap>, ListWatchError>>),
}

#[derive(Default)]
pub(crate) struct MockState {
    pub(crate) lists: VecDeque<Result<ListPage<ConfigMap>, ListWatchError>>,
    pub(crate) watches: VecDeque<WatchScript>,
    pub(crate) requests: Vec<(Instant, Request)>,
}

/// A scripted lister-watcher. When its scripts run out, lists fail with a 500 and watches stay
/// open forever.
#[derive(Clone, Default)]
pub(crate) struct MockLw {
    pub(crate) state: Arc<Mutex<MockState>>,
}

impl MockLw {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    pub(crate) fn list(&self, r: Result<ListPage<ConfigMap>, ListWatchError>) -> &Self {
        self.state.lock().lists.push_back(r);
        self
    }

    pub(crate) fn watch(&self, w: WatchScript) -> &Self {
        self.state.lock().watches.push_back(w);
        self
    }

    /// A watch fed by the returned sender.
    pub(crate) fn watch_channel(
        &self,
    ) -> mpsc::UnboundedSender<Result<WatchEvent<ConfigMap>, ListWatchError>> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.watch(WatchScript::Channel(rx));
        tx
    }

    pub(crate) fn requests(&self) -> Vec<Request> {
        self.state
            .lock()
            .requests
            .iter()
            .map(|(_, r)| r.clone())
            .collect()
    }

    pub(crate) fn timed_requests(&self) -> Vec<(Instant, Request)> {
        self.state.lock().requests.clone()
    }

    /// Waits (in tokio time) until `f` holds for the recorded requests.
    pub(crate) async fn wait_for(&self, what: &str, f: impl Fn(&[Request]) -> bool) {
        let deadline = tokio::time::Duration::from_secs(3600);
        let res = tokio::time::timeout(deadline, async {
            loop {
                if f(&self.requests()) {
                    return;
                }
                tokio::time::sleep(tokio::time::Duration::from_millis(5)).await;
            }
        })
        .await;
        assert!(
            res.is_ok(),
            "waiting for {what}: likely deadlocked; requests so far: {:#?}",
            self.requests()
        );
    }
}

pub(crate) fn is_list(r: &Request) -> bool {
    matches!(r, Request::List(_))
}

pub(crate) fn is_watch(r: &Request) -> bool {
    matches!(r, Request::Watch(_))
}

impl ListerWatcher<ConfigMap> for MockLw {
    fn list(
        &self,
        options: ListOptions,
    ) -> BoxFuture<'_, Result<ListPage<ConfigMap>, ListWatchError>> {
        let mut st = self.state.lock();
        st.requests.push((Instant::now(), Request::List(options)));
        let r = st
            .lists
            .pop_front()
            .unwrap_or_else(|| Err(api_error(500, "InternalError", "no list scripted")));
        async move { r }.boxed()
    }

    fn watch(
        &self,
        options: WatchOptions,
    ) -> BoxFuture<'_, Result<WatchStream<ConfigMap>, ListWatchError>> {
        let mut st = self.state.lock();
        st.requests.push((Instant::now(), Request::Watch(options)));
        let script = st
            .watches
            .pop_front()
            .unwrap_or(WatchScript::EventsThenHang(Vec::new()));
        let r = match script {
            WatchScript::NoAnswer => return futures::future::pending().boxed(),
            WatchScript::Fail(e) => Err(e),
            WatchScript::Events(evs) => Ok(futures::stream::iter(evs).boxed()),
            WatchScript::EventsThenHang(evs) => Ok(futures::stream::iter(evs)
                .chain(futures::stream::pending())
                .boxed()),
            WatchScript::Channel(mut rx) => {
                Ok(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).boxed())
            }
        };
        async move { r }.boxed()
    }
}
