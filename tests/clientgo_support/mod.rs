//! Helpers of the client-go conformance tests (`clientgo_*.rs`): an in-memory list/watch source
//! with the behaviour of client-go's `tools/cache/testing.FakeControllerSource`, a recording
//! handler like `shared_informer_test.go`'s `testListener`, and waits that work on tokio's paused
//! clock.
//!
//! # Waiting on a paused clock
//!
//! Handlers run on the informer's own handler thread, outside tokio. While a paused-clock test
//! awaits something that thread will do, the runtime looks idle and tokio moves the clock forward
//! to the next timer (resyncs, backoffs) by itself. [`wait_until`] and [`settle`] therefore wait
//! in real time inside `spawn_blocking`, which holds tokio's auto-advance off: the clock moves
//! only when a test calls `tokio::time::advance`, as client-go's tests step their fake clock.
#![allow(dead_code)] // not every test file uses every helper

use std::{
    collections::{BTreeMap, BTreeSet},
    io,
    sync::Arc,
    time::{Duration, Instant},
};

use futures::{FutureExt, StreamExt, future::BoxFuture};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use kube::{Resource, core::Status};
use kube_informer::{
    DeltaObject, ListerWatcher, ResourceEventHandler,
    reflector::{ListOptions, ListPage, ListWatchError, WatchEvent, WatchOptions, WatchStream},
};
use parking_lot::Mutex;
use tokio::sync::mpsc;

/// How long a real-time wait may take before the test calls it a deadlock.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// After expectations are met, how long to wait for stray extra notifications (client-go's
/// `testListener.ok` waits a second).
pub const SETTLE: Duration = Duration::from_millis(100);

/// Sleeps in real time without letting a paused tokio clock advance.
pub async fn settle(d: Duration) {
    tokio::task::spawn_blocking(move || std::thread::sleep(d))
        .await
        .expect("a sleeping blocking task cannot fail");
}

/// Waits in real time, the paused clock standing still, until `cond` holds; panics after
/// [`PATIENCE`].
pub async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < PATIENCE,
            "{what}: not reached within {PATIENCE:?}: likely deadlocked"
        );
        settle(Duration::from_millis(1)).await;
    }
}

/// Awaits `f` for at most [`PATIENCE`] of tokio time.
pub async fn deadlock_guard<F: std::future::Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(PATIENCE, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: likely deadlocked"))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

type Sender<K> = mpsc::UnboundedSender<Result<WatchEvent<K>, ListWatchError>>;

struct SourceState<K> {
    /// By (namespace, name, uid), as client-go's fake keys its items.
    items: BTreeMap<(String, String, String), K>,
    /// Every change since the last [`FakeControllerSource::reset_watch`], oldest first, one per
    /// resourceVersion.
    changes: Vec<(ChangeKind, K)>,
    last_rv: u64,
    watchers: Vec<Sender<K>>,
    list_error: Option<Status>,
    lists: usize,
    watches: usize,
}

/// An in-memory API endpoint for one kind (client-go's `FakeControllerSource`): every change
/// gets the next resourceVersion; a list returns everything at the latest one; a watch replays
/// the changes after its resourceVersion, then streams new ones. Cheap to clone (clones share the
/// state); implements [`ListerWatcher`].
pub struct FakeControllerSource<K> {
    state: Arc<Mutex<SourceState<K>>>,
}

impl<K> Clone for FakeControllerSource<K> {
    fn clone(&self) -> Self {
        Self {
            state: self.state.clone(),
        }
    }
}

impl<K> Default for FakeControllerSource<K> {
    fn default() -> Self {
        Self {
            state: Arc::new(Mutex::new(SourceState {
                items: BTreeMap::new(),
                changes: Vec::new(),
                last_rv: 0,
                watchers: Vec::new(),
                list_error: None,
                lists: 0,
                watches: 0,
            })),
        }
    }
}

fn expired(message: String) -> ListWatchError {
    let mut s = Status::failure(&message, "Expired");
    s.code = 410;
    ListWatchError::Api(Box::new(s))
}

impl<K: Resource + Clone + Send + Sync + 'static> FakeControllerSource<K> {
    /// An empty source.
    pub fn new() -> Self {
        Self::default()
    }

    /// Creates `obj` and tells the watchers.
    pub fn add(&self, obj: K) -> K {
        self.change(ChangeKind::Added, obj, true)
    }

    /// Updates `obj` and tells the watchers.
    pub fn modify(&self, obj: K) -> K {
        self.change(ChangeKind::Modified, obj, true)
    }

    /// Deletes `obj` and tells the watchers.
    pub fn delete(&self, obj: K) -> K {
        self.change(ChangeKind::Deleted, obj, true)
    }

    /// Creates `obj` without telling the watchers: only a relist shows it.
    pub fn add_drop_watch(&self, obj: K) -> K {
        self.change(ChangeKind::Added, obj, false)
    }

    /// Updates `obj` without telling the watchers.
    pub fn modify_drop_watch(&self, obj: K) -> K {
        self.change(ChangeKind::Modified, obj, false)
    }

    /// Deletes `obj` without telling the watchers.
    pub fn delete_drop_watch(&self, obj: K) -> K {
        self.change(ChangeKind::Deleted, obj, false)
    }

    /// Simulates a connection loss: ends every watch and forgets the change history, so a
    /// watch from any earlier resourceVersion is refused as expired (410) and clients must
    /// relist.
    pub fn reset_watch(&self) {
        let mut st = self.state.lock();
        st.watchers.clear();
        st.changes.clear();
    }

    /// Simulates a connection cut mid-stream, as kube's client reports one: every watch fails
    /// with a connection reset, and the change history is forgotten as by
    /// [`reset_watch`](Self::reset_watch). client-go cannot tell the two apart (its watch
    /// channel just closes); the crate's reflector can, so tests exercise both.
    pub fn break_watches(&self) {
        let mut st = self.state.lock();
        for w in st.watchers.drain(..) {
            let reset = io::Error::new(io::ErrorKind::ConnectionReset, "connection reset by peer");
            let _ = w.send(Err(ListWatchError::Stream(kube::Error::Service(Box::new(
                reset,
            )))));
        }
        st.changes.clear();
    }

    /// Makes every list fail with this status (client-go's `ListError`); `None` to stop.
    pub fn set_list_error(&self, error: Option<(u16, &str, &str)>) {
        self.state.lock().list_error = error.map(|(code, reason, message)| {
            let mut s = Status::failure(message, reason);
            s.code = code;
            s
        });
    }

    /// How many lists and watches were asked for.
    pub fn requests(&self) -> (usize, usize) {
        let st = self.state.lock();
        (st.lists, st.watches)
    }

    /// The latest resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.state.lock().last_rv
    }

    fn change(&self, kind: ChangeKind, mut obj: K, broadcast: bool) -> K {
        let mut st = self.state.lock();
        st.last_rv += 1;
        obj.meta_mut().resource_version = Some(st.last_rv.to_string());
        let meta = obj.meta();
        let key = (
            meta.namespace.clone().unwrap_or_default(),
            meta.name.clone().unwrap_or_default(),
            meta.uid.clone().unwrap_or_default(),
        );
        match kind {
            ChangeKind::Added | ChangeKind::Modified => {
                st.items.insert(key, obj.clone());
            }
            ChangeKind::Deleted => {
                st.items.remove(&key);
            }
        }
        st.changes.push((kind, obj.clone()));
        if broadcast {
            st.watchers
                .retain(|w| w.send(Ok(event(kind, obj.clone()))).is_ok());
        }
        obj
    }
}

fn event<K>(kind: ChangeKind, obj: K) -> WatchEvent<K> {
    match kind {
        ChangeKind::Added => WatchEvent::Added(obj),
        ChangeKind::Modified => WatchEvent::Modified(obj),
        ChangeKind::Deleted => WatchEvent::Deleted(obj),
    }
}

impl<K: Resource + Clone + Send + Sync + 'static> ListerWatcher<K> for FakeControllerSource<K> {
    fn list(&self, _options: ListOptions) -> BoxFuture<'_, Result<ListPage<K>, ListWatchError>> {
        let mut st = self.state.lock();
        st.lists += 1;
        let res = match &st.list_error {
            Some(s) => Err(ListWatchError::Api(Box::new(s.clone()))),
            None => Ok(ListPage::new(
                ListMeta {
                    resource_version: Some(st.last_rv.to_string()),
                    ..ListMeta::default()
                },
                st.items.values().cloned().collect(),
            )),
        };
        async move { res }.boxed()
    }

    fn watch(
        &self,
        options: WatchOptions,
    ) -> BoxFuture<'_, Result<WatchStream<K>, ListWatchError>> {
        let mut st = self.state.lock();
        st.watches += 1;
        let res = (|| {
            let from: u64 = options.resource_version.parse().map_err(|_| {
                expired(format!(
                    "cannot watch from resourceVersion {:?}",
                    options.resource_version
                ))
            })?;
            let (tx, mut rx) = mpsc::unbounded_channel();
            if from < st.last_rv {
                let Some((_, first)) = st.changes.first() else {
                    return Err(expired(format!(
                        "too old resource version: {from} ({})",
                        st.last_rv
                    )));
                };
                let oldest: u64 = first
                    .meta()
                    .resource_version
                    .as_deref()
                    .and_then(|rv| rv.parse().ok())
                    .expect("the source numbers its changes");
                if from < oldest {
                    return Err(expired(format!(
                        "too old resource version: {from} ({oldest})"
                    )));
                }
                let skip = usize::try_from(from + 1 - oldest).unwrap();
                for (kind, obj) in &st.changes[skip..] {
                    let _ = tx.send(Ok(event(*kind, obj.clone())));
                }
            } else if from > st.last_rv {
                let mut s = Status::failure("resource version in the future", "InternalError");
                s.code = 500;
                return Err(ListWatchError::Api(Box::new(s)));
            }
            st.watchers.push(tx);
            Ok(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).boxed())
        })();
        async move { res }.boxed()
    }
}

/// A handler that records the name of every object added or updated, as client-go's
/// `testListener` does (deletions are not recorded). Clones share the record.
#[derive(Clone, Default)]
pub struct TestListener {
    received: Arc<Mutex<Vec<String>>>,
}

impl TestListener {
    /// A listener with nothing received yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The names received, in order.
    pub fn received(&self) -> Vec<String> {
        self.received.lock().clone()
    }

    /// The distinct names received.
    pub fn received_set(&self) -> BTreeSet<String> {
        self.received.lock().iter().cloned().collect()
    }

    /// Forgets what was received.
    pub fn reset(&self) {
        self.received.lock().clear();
    }

    /// client-go `testListener.ok`: waits until the names received are exactly `expected` (as
    /// sets), then a little longer, and checks again that no stray ones came in.
    pub async fn ok(&self, expected: &[&str]) -> Result<(), String> {
        let want: BTreeSet<String> = expected.iter().map(|s| (*s).to_owned()).collect();
        let start = Instant::now();
        while self.received_set() != want && start.elapsed() < PATIENCE {
            settle(Duration::from_millis(1)).await;
        }
        settle(SETTLE).await;
        let got = self.received_set();
        if got == want {
            Ok(())
        } else {
            Err(format!(
                "expected {want:?}, got {got:?} (in order: {:?})",
                self.received()
            ))
        }
    }

    fn handle<K: Resource>(&self, obj: &K) {
        self.received
            .lock()
            .push(obj.meta().name.clone().unwrap_or_default());
    }
}

impl<K: Resource + Send + Sync + 'static> ResourceEventHandler<K> for TestListener {
    fn on_add(&mut self, obj: &Arc<K>, _is_in_initial_list: bool) {
        self.handle(&**obj);
    }

    fn on_update(&mut self, _old: &Arc<K>, new: &Arc<K>) {
        self.handle(&**new);
    }

    fn on_delete(&mut self, _obj: &DeltaObject<K>) {}
}
