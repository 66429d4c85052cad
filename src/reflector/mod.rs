//! The reflector: lists and watches one resource with client-go's resourceVersion rules and
//! feeds every change into a [`ReflectorStore`] (a [`DeltaFifo`] by default, or an
//! [`InOrderFifo`](crate::InOrderFifo)).
//!
//! The rules (client-go `tools/cache/reflector.go`, `tools/pager/pager.go`):
//! - The first list asks for `resourceVersion=0` (served from the API server's watch cache).
//!   Later relists ask for the last resourceVersion seen. When that fails with 410 Expired or
//!   "too large resource version", the version is marked unavailable and the list is retried at
//!   once with `resourceVersion=""` (a consistent read from etcd).
//! - Lists at `""` or `"0"` are paginated (`limit`, default 500, plus `continue`); a continue page
//!   that expires falls back to one full list without a limit. A list at a specific version is not
//!   paginated, so the server can answer it from its watch cache.
//! - Watches start from the last resourceVersion with bookmarks allowed and `timeoutSeconds`
//!   uniformly random in [300, 600]; bookmarks advance the version; a client-side idle timeout
//!   catches a silently dead connection.
//! - A watch that ends normally is restarted from the last version without a relist; a watch that
//!   ends with 410 (or any other error event) leads to a relist from the last version. Connection
//!   failures, 429 and a watch request left unanswered back off and retry the watch. An
//!   established watch that goes silent past the idle timeout (a dead connection) is restarted
//!   at once from the last version, on a new connection, with no backoff: only a failure of that
//!   new request backs off. A watch that closes in under a second with no events counts as a
//!   failure.
//! - Between failures the reflector backs off exponentially ([`BackoffConfig`]), one step per
//!   failure: a 410 on the first answer of a re-watch after a backoff step (the version was
//!   compacted while the reflector waited) relists at once, so recovering from a cut takes one
//!   backoff step; any other 410 waits a step before the relist, as in client-go.
//! - The reflector is a state machine (`List`, `Watch`, `Watching`, `BackOff`) stepped one
//!   transition at a time; what follows each failure is one pure function (`policy::after`),
//!   whose table is its unit test.
//! - It writes into a [`ReflectorStore`]: the store decides how changes are kept (queued per key
//!   by the [`DeltaFifo`], transformed, reused from the cache on a relist). A store that keeps
//!   objects in a form of its own ([`ReflectorStore::takes_item_bytes`], the compact cache) is
//!   handed listed and changed objects as the bytes the server sent, undecoded, when there is no
//!   projection and no shard.
//! - With [`ReflectorConfig::streaming_list`], the initial state comes from a watch with
//!   `sendInitialEvents=true` (KEP-3157) that ends at the bookmark annotated
//!   `k8s.io/initial-events-end`, becomes one `replace`, and the same watch goes on; a server
//!   that refuses it is listed and watched instead.
//! - Every error reaches the watch-error handler (by default a `tracing` warning); none ends the
//!   reflector.
//! - An object that does not decode as `K` (a well-formed event or list item, e.g. a custom
//!   resource written under a newer schema) is reported with its key and resourceVersion and left
//!   out: a cached version of it is removed with a `DeletedFinalStateUnknown` tombstone, and the
//!   watch moves past it. A line that is not a watch event at all ends the watch, which resumes
//!   from the last resourceVersion.

mod backoff;
pub mod decode;
mod error;
mod listwatch;
mod policy;
mod store;

use std::{collections::HashMap, future::Future, sync::Arc, time::Duration};

use futures::StreamExt;
use kube::Resource;
use parking_lot::Mutex;
use tokio::time::Instant;

use backoff::Backoff;
pub use backoff::{BackoffConfig, BackoffConfigError};
use decode::WatchItem;
pub use decode::{ListPage, Projection, ProjectionError, UndecodableObject, WatchEvent};
pub use error::{Error, ListWatchError};
pub use listwatch::{
    ApiListerWatcher, DEFAULT_MAX_OBJECT_BYTES, ItemSink, ListOptions, ListSummary,
    ListWatchTarget, ListerWatcher, RawWatchStream, WatchOptions, WatchStream, WireFormat,
};
use policy::{Next, Step, Then};
pub use store::ReflectorStore;

/// Internals reachable only for the fuzz targets in `fuzz/` and `tests/fuzz_decode.rs`; not part
/// of the API and exempt from semver.
#[doc(hidden)]
pub mod __fuzz {
    pub use super::listwatch::{ListedItem, listed_items, watch_event_stream};
}

pub use crate::fifo::ListItem;
use crate::{
    fifo::DeltaFifo,
    panic_message,
    store::{ObjectKey, key_of},
};

/// A callback that sees every list/watch error (client-go `WatchErrorHandler`). A handler that
/// panics is caught and logged; the reflector goes on.
pub type WatchErrorHandler = Arc<dyn Fn(&Error) + Send + Sync>;

/// Decides at each resync tick whether to queue a resync (the informer asks its listeners).
pub type ShouldResync = Arc<dyn Fn() -> bool + Send + Sync>;

/// The default [`ReflectorConfig::idle_timeout`]: kube-apiserver's watch cache sends a bookmark
/// at least once a minute on every watch that allows them (`defaultBookmarkFrequency` in
/// `k8s.io/apiserver/pkg/storage/cacher/cacher.go`), so a watch silent for longer than that plus
/// 15 s of slack (the same slack as the cacher's `DefaultEventFreshDuration`) is dead.
pub const DEFAULT_WATCH_IDLE_TIMEOUT: Duration = Duration::from_secs(75);

/// The default [`ReflectorConfig::watch_start_timeout`]. kube-apiserver answers a watch request
/// with its headers as soon as the watch is registered: after at most the API Priority and
/// Fairness queue wait (a quarter of the request deadline, 15 s for requests without one) and the
/// watch cache's wait to catch up with a newer resourceVersion (`blockTimeout`, 3 s, in
/// `k8s.io/apiserver/pkg/storage/cacher/watch_cache.go`). Twice that sum leaves room for a slow
/// network without letting a dead connection hold a re-watch for a whole idle timeout.
pub const DEFAULT_WATCH_START_TIMEOUT: Duration = Duration::from_secs(30);

/// Reflector options. Defaults mirror client-go's reflector.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ReflectorConfig {
    /// Page size of paginated lists (client-go pager `defaultPageSize`, 500).
    pub page_size: u32,
    /// Watches ask for `timeoutSeconds` uniformly random in `[min, 2 × min]` (client-go
    /// `minWatchTimeout`, 5 min), spreading re-watches of many clients over time.
    pub min_watch_timeout: Duration,
    /// How long a watch may deliver nothing, not even a bookmark, before its connection is
    /// taken for dead and the watch is started again from the last resourceVersion. Default
    /// [`DEFAULT_WATCH_IDLE_TIMEOUT`] (75 s), derived from the apiserver's bookmark cadence:
    /// kube's HTTP/1.1 client sets no TCP keepalive and sends no HTTP/2 pings (client-go's
    /// health checks notice a dead connection in 30-45 s), so without this a black-holed
    /// connection would go unnoticed until the watch's own timeout. Servers without a watch
    /// cache (`--watch-cache=false`, some aggregated APIs) send no bookmarks: there a quiet
    /// watch is restarted every `idle_timeout`, which costs one request and no relist.
    /// `Duration::ZERO` disables the check beyond the watch's `timeoutSeconds` plus 60 s (and
    /// for lists, beyond [`DEFAULT_WATCH_IDLE_TIMEOUT`] without a byte).
    pub idle_timeout: Duration,
    /// How long a watch request may wait for the server's answer (its response headers) before
    /// the connection is taken for dead; the reflector then backs off one step and watches again
    /// (a new connection: the request that timed out takes its connection with it). Default
    /// [`DEFAULT_WATCH_START_TIMEOUT`] (30 s); never longer than [`Self::idle_timeout`].
    ///
    /// This matters after a network path dies: kube's client keeps idle connections from earlier
    /// requests (the list's) in a pool, and the re-watch after an idle timeout may be sent on one
    /// of them, as dead as the watch's. With the defaults a dead path is recovered from within
    /// about 106 s: the idle timeout (75 s), one start timeout on a dead pooled connection, one
    /// backoff step, and by then hyper's pool has expired the connections idle for over 90 s,
    /// so the next watch gets a new one. `Duration::ZERO` uses the idle timeout.
    pub watch_start_timeout: Duration,
    /// Backoff between failures.
    pub backoff: BackoffConfig,
    /// Use a streaming initial list (`sendInitialEvents`, KEP-3157) instead of list requests.
    /// Default `false`.
    pub streaming_list: bool,
    /// Queue a resync of every cached object this often (`Duration::ZERO`, the default, for never).
    pub resync_period: Duration,
    /// The largest list item or watch event accepted, in bytes (default
    /// [`DEFAULT_MAX_OBJECT_BYTES`], 16 MiB: well above the 1.5 MiB etcd stores at most). One
    /// that grows past it before it ends fails its request with [`ListWatchError::TooLarge`],
    /// reported to the watch-error handler, and the reflector relists after a backoff step:
    /// memory stays bounded whatever the server sends. Passed to the [`ListerWatcher`] in
    /// [`ListOptions::max_object_bytes`] and [`WatchOptions::max_object_bytes`].
    pub max_object_bytes: usize,
    /// List and watch only this shard of the collection (KEP-5866; see [`crate::sharding`]).
    /// Every list and watch, relists included, carries it as `shardSelector`, and the shard is
    /// also checked on the client, as client-go's `NewShardedListWatch` does: a server that
    /// ignores the selector (kube-apiserver without the `ShardedListAndWatch` gate: its list
    /// response has no `metadata.shardInfo`) sends the whole collection, of which only the
    /// shard is cached (logged at info level for each such list page), and a watch event outside
    /// the shard (such a server, or one member of an HA control plane without the gate) is
    /// dropped, logged at debug level. A list response that echoes another selector fails with
    /// [`ShardError::Mismatch`](crate::sharding::ShardError::Mismatch), and an object outside
    /// the shard in a list the server says it sharded is reported ([`Error::OutOfShard`]) and
    /// not cached. A sharded reflector lists rather than stream its initial list
    /// ([`Self::streaming_list`] is not used). Default `None`.
    pub shard: Option<crate::sharding::ShardSelector>,
    /// Fields dropped from every object while it is decoded, in lists, watches and streaming
    /// lists alike (none by default; see [`Projection`]). Passed to the [`ListerWatcher`] in
    /// [`ListOptions::projection`] and [`WatchOptions::projection`].
    pub projection: Projection,
}

impl Default for ReflectorConfig {
    fn default() -> Self {
        Self {
            page_size: 500,
            min_watch_timeout: Duration::from_secs(300),
            idle_timeout: DEFAULT_WATCH_IDLE_TIMEOUT,
            watch_start_timeout: DEFAULT_WATCH_START_TIMEOUT,
            backoff: BackoffConfig::default(),
            streaming_list: false,
            resync_period: Duration::ZERO,
            max_object_bytes: DEFAULT_MAX_OBJECT_BYTES,
            shard: None,
            projection: Projection::none(),
        }
    }
}

impl ReflectorConfig {
    /// Sets [`Self::page_size`].
    #[must_use]
    pub fn page_size(mut self, n: u32) -> Self {
        self.page_size = n;
        self
    }

    /// Sets [`Self::min_watch_timeout`].
    #[must_use]
    pub fn min_watch_timeout(mut self, d: Duration) -> Self {
        self.min_watch_timeout = d;
        self
    }

    /// Sets [`Self::idle_timeout`].
    #[must_use]
    pub fn idle_timeout(mut self, d: Duration) -> Self {
        self.idle_timeout = d;
        self
    }

    /// Sets [`Self::watch_start_timeout`].
    #[must_use]
    pub fn watch_start_timeout(mut self, d: Duration) -> Self {
        self.watch_start_timeout = d;
        self
    }

    /// Sets [`Self::backoff`]. An invalid backoff is replaced by the default when the reflector
    /// is built, with an error logged; check it first with [`BackoffConfig::validate`].
    #[must_use]
    pub fn backoff(mut self, b: BackoffConfig) -> Self {
        self.backoff = b;
        self
    }

    /// Sets [`Self::streaming_list`].
    #[must_use]
    pub fn streaming_list(mut self, on: bool) -> Self {
        self.streaming_list = on;
        self
    }

    /// Sets [`Self::resync_period`].
    #[must_use]
    pub fn resync_period(mut self, d: Duration) -> Self {
        self.resync_period = d;
        self
    }

    /// Sets [`Self::shard`].
    #[must_use]
    pub fn shard(mut self, shard: crate::sharding::ShardSelector) -> Self {
        self.shard = Some(shard);
        self
    }

    /// Sets [`Self::max_object_bytes`] (at least 1).
    #[must_use]
    pub fn max_object_bytes(mut self, limit: usize) -> Self {
        self.max_object_bytes = limit.max(1);
        self
    }

    /// Sets [`Self::projection`].
    #[must_use]
    pub fn projection(mut self, projection: Projection) -> Self {
        self.projection = projection;
        self
    }
}

/// What the reflector has seen, readable while it runs.
#[derive(Debug, Clone, Default)]
pub struct ReflectorStatus {
    inner: Arc<Mutex<StatusInner>>,
}

#[derive(Debug, Default)]
struct StatusInner {
    last_sync_resource_version: String,
}

impl ReflectorStatus {
    /// The resourceVersion of the last list, watch event or bookmark processed (client-go
    /// `LastSyncResourceVersion`); empty before the first list.
    pub fn last_sync_resource_version(&self) -> String {
        self.inner.lock().last_sync_resource_version.clone()
    }

    fn set(&self, rv: &str) {
        if !rv.is_empty() {
            let mut g = self.inner.lock();
            if g.last_sync_resource_version != rv {
                g.last_sync_resource_version = rv.to_owned();
            }
        }
    }
}

/// The reflector's state between two steps: what it does next. Each step of
/// [`Reflector::step`] performs one of these and returns the next one; the policy that picks
/// the next state after a failure is the pure function [`policy::after`].
enum State<K> {
    /// List (or stream the initial list, when enabled and supported), replace the store, then
    /// watch.
    List,
    /// Start a watch from the last resourceVersion; `after_backoff`: right after a backoff
    /// step (see [`policy::after`]).
    Watch { after_backoff: bool },
    /// Read events from a running watch.
    Watching(Watching<K>),
    /// Wait out one backoff step, then go on.
    BackOff(Then),
}

/// A running watch.
struct Watching<K> {
    stream: Events<K>,
    idle: Duration,
    started: Instant,
    events: usize,
    /// Started right after a backoff step (see [`policy::after`]).
    after_backoff: bool,
}

/// A running watch's events: decoded, or with added and changed objects undecoded, for a store
/// that takes them as their bytes ([`ReflectorStore::takes_item_bytes`]).
enum Events<K> {
    Decoded(WatchStream<K>),
    Raw(RawWatchStream<K>),
}

impl<K> Events<K> {
    /// The next event; `None` when the watch has ended.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as `StreamExt::next`.
    async fn next(&mut self) -> Option<Result<WatchItem<K>, ListWatchError>> {
        match self {
            Self::Decoded(s) => s.next().await.map(|r| r.map(WatchItem::Event)),
            Self::Raw(s) => s.next().await,
        }
    }
}

/// Lists and watches through a [`ListerWatcher`] and writes what it sees into a
/// [`ReflectorStore`] (by default a [`DeltaFifo`]).
pub struct Reflector<K, S = DeltaFifo<K>> {
    lw: Arc<dyn ListerWatcher<K>>,
    store: Arc<S>,
    config: ReflectorConfig,
    /// `None`: [`default_watch_error_handler`] under the reflector's current name.
    error_handler: Option<WatchErrorHandler>,
    should_resync: Option<ShouldResync>,
    status: ReflectorStatus,
    name: String,
    // loop state
    last_rv: String,
    rv_unavailable: bool,
    paginated_result: bool,
    watch_list_unsupported: bool,
    backoff: Backoff,
    rng: fastrand::Rng,
}

/// The report for an object the server sent from outside `shard`.
fn out_of_shard<K: Resource>(
    shard: &crate::sharding::ShardSelector,
    obj: &K,
) -> crate::sharding::ShardError {
    let meta = obj.meta();
    let name = meta.name.as_deref().unwrap_or("");
    let key = match meta.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_string(),
    };
    crate::sharding::ShardError::OutOfShard {
        key,
        selector: shard.to_string(),
    }
}

/// Whether the server sharded a list: a sharding server echoes the selector in
/// `metadata.shardInfo`; one that does not shard sends the whole collection without it, and
/// the shard is then taken on the client (as client-go's `NewShardedListWatch` does).
///
/// # Errors
///
/// [`ShardError::Mismatch`](crate::sharding::ShardError::Mismatch): the server applied another
/// selector, so the list may lack objects of this shard.
fn check_shard_info(
    shard: &crate::sharding::ShardSelector,
    echoed: Option<&str>,
) -> Result<bool, ListWatchError> {
    use crate::sharding::{ShardError, ShardSelector};
    let asked = shard.to_string();
    let Some(echoed) = echoed else {
        return Ok(false);
    };
    if echoed.parse::<ShardSelector>().ok().as_ref() == Some(shard) {
        Ok(true)
    } else {
        Err(ShardError::Mismatch {
            asked,
            applied: echoed.to_string(),
        }
        .into())
    }
}

/// The default watch-error handler: a `tracing` warning (expired versions at debug level and
/// idle watches at info level, since they are routine; a cached object the handlers could not be
/// told of at error level).
pub fn default_watch_error_handler(name: &str, err: &Error) {
    if err.is_expired() {
        tracing::debug!(reflector = name, error = %err, "watch expired; relisting");
    } else if matches!(err, Error::Unreadable(_)) {
        tracing::error!(reflector = name, error = %err, "cached object unreadable; handlers not told of it");
    } else if matches!(err, Error::IdleTimeout(_)) {
        // Routine on an idle resource, whose first bookmark can take two minutes.
        tracing::info!(reflector = name, error = %err, "watch silent; restarting it");
    } else {
        tracing::warn!(reflector = name, error = %err, "list/watch failed; retrying");
    }
}

impl<K, S> Reflector<K, S>
where
    K: Resource + Send + Sync + 'static,
    S: ReflectorStore<K>,
{
    /// A reflector writing what `lw` lists and watches into `store`.
    pub fn new(lw: impl ListerWatcher<K>, store: Arc<S>, config: ReflectorConfig) -> Self {
        Self::from_arc(Arc::new(lw), store, config)
    }

    /// Like [`Reflector::new`] with a shared lister-watcher.
    pub fn from_arc(
        lw: Arc<dyn ListerWatcher<K>>,
        store: Arc<S>,
        mut config: ReflectorConfig,
    ) -> Self {
        let name = lw.target().name_or_type::<K>();
        if let Err(e) = config.backoff.validate() {
            tracing::error!(reflector = %name, error = %e, "invalid backoff; using the default");
            config.backoff = BackoffConfig::default();
        }
        Self {
            lw,
            store,
            backoff: Backoff::new(config.backoff),
            config,
            error_handler: None,
            should_resync: None,
            status: ReflectorStatus::default(),
            name,
            last_rv: String::new(),
            rv_unavailable: false,
            paginated_result: false,
            watch_list_unsupported: false,
            rng: fastrand::Rng::new(),
        }
    }

    /// Replaces the watch-error handler.
    #[must_use]
    pub fn with_error_handler(mut self, handler: WatchErrorHandler) -> Self {
        self.error_handler = Some(handler);
        self
    }

    /// Sets the check run at each resync tick; without one every tick resyncs.
    #[must_use]
    pub fn with_should_resync(mut self, f: ShouldResync) -> Self {
        self.should_resync = Some(f);
        self
    }

    /// Names the reflector in logs (default: its lister-watcher's
    /// [`target`](ListerWatcher::target) name, such as `v1/pods`, or else the object type).
    #[must_use]
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// A handle to read the reflector's progress while it runs.
    pub fn status(&self) -> ReflectorStatus {
        self.status.clone()
    }

    /// Runs until `shutdown` completes. Never returns early: every failure is reported to the
    /// watch-error handler and recovered from.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops the reflector; the store keeps what it was given.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) {
        let store = self.store.clone();
        let period = self.config.resync_period;
        let should_resync = self.should_resync.clone();
        // Which successful list the store reflects (`None` while a list is due or running):
        // resyncs run only between a list and the next relist, each period counted from the
        // list, as client-go's reflector starts `startResync` inside `ListAndWatch` after it has
        // listed. Resyncing before the first list would make an informer synced with nothing.
        let (listed, listed_rx) = tokio::sync::watch::channel((None::<u64>, Instant::now()));
        let resync = resync_loop(store, period, should_resync, listed_rx);
        let steps = async {
            let mut state = State::List;
            let mut lists = 0u64;
            loop {
                let listing = matches!(state, State::List);
                if listing {
                    listed.send_replace((None, Instant::now()));
                }
                state = self.step(state).await;
                if listing && !matches!(state, State::List | State::BackOff(_)) {
                    lists += 1;
                    listed.send_replace((Some(lists), Instant::now()));
                }
            }
        };
        tokio::select! {
            () = shutdown => {}
            () = resync => {}
            () = steps => {}
        }
    }

    /// Performs one state and returns the next.
    async fn step(&mut self, state: State<K>) -> State<K> {
        match state {
            // A streaming list's watch goes on from it: no backoff before it.
            State::List => match self.list_or_stream().await {
                Ok(Some(watching)) => State::Watching(watching),
                Ok(None) => State::Watch {
                    after_backoff: false,
                },
                Err(e) => self.recover(Step::List, &e),
            },
            State::Watch { after_backoff } => match self.start_watch(after_backoff).await {
                Ok(watching) => State::Watching(watching),
                Err(e) => self.recover(Step::WatchStart { after_backoff }, &e),
            },
            State::Watching(mut w) => {
                // A store whose consumer has fallen behind holds the watch back.
                self.store.room().await;
                match self.next_event(&mut w).await {
                    Ok(true) => State::Watching(w),
                    // Ended as the server promised (timeoutSeconds): go on from the last
                    // version.
                    Ok(false) => State::Watch {
                        after_backoff: false,
                    },
                    Err(e) => self.recover(
                        Step::Watch {
                            delivered: w.events > 0,
                            after_backoff: w.after_backoff,
                        },
                        &e,
                    ),
                }
            }
            State::BackOff(then) => {
                self.back_off().await;
                match then {
                    Then::List => State::List,
                    Then::Watch => State::Watch {
                        after_backoff: true,
                    },
                }
            }
        }
    }

    /// Reports `e` and decides what comes next (see [`policy::after`]).
    fn recover(&mut self, step: Step, e: &Error) -> State<K> {
        self.report(e);
        let next = policy::after(step, e);
        tracing::trace!(reflector = %self.name, ?step, ?next, "recovering");
        next.into()
    }

    fn report(&self, e: &Error) {
        let call = || match &self.error_handler {
            Some(handler) => handler(e),
            None => default_watch_error_handler(&self.name, e),
        };
        if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(call)) {
            tracing::error!(
                reflector = %self.name,
                error = %e,
                panic = %panic_message(&*panic),
                "the watch-error handler panicked; going on"
            );
        }
    }

    async fn back_off(&mut self) {
        let d = self.backoff.next_delay();
        tracing::trace!(reflector = %self.name, delay = ?d, "backing off");
        tokio::time::sleep(d).await;
        self.backoff.waited();
    }

    /// client-go `relistResourceVersion`.
    fn relist_resource_version(&self) -> String {
        if self.rv_unavailable {
            String::new()
        } else if self.last_rv.is_empty() {
            "0".to_owned()
        } else {
            self.last_rv.clone()
        }
    }

    fn set_last_rv(&mut self, rv: &str) {
        if !rv.is_empty() {
            rv.clone_into(&mut self.last_rv);
            self.status.set(rv);
        }
    }

    fn watch_timeout_seconds(&mut self) -> u32 {
        let min = self
            .config
            .min_watch_timeout
            .as_secs()
            .clamp(1, u64::from(u32::MAX));
        u32::try_from(min + self.rng.u64(0..=min)).unwrap_or(u32::MAX)
    }

    fn idle_timeout(&self, timeout_seconds: u32) -> Duration {
        let promised = Duration::from_secs(u64::from(timeout_seconds) + 60);
        if self.config.idle_timeout.is_zero() {
            promised
        } else {
            self.config.idle_timeout.min(promised)
        }
    }

    /// How long a watch request may wait for its response headers: the start timeout, bounded
    /// by the stream's idle timeout `idle`.
    fn watch_start_timeout(&self, idle: Duration) -> Duration {
        let start = self.config.watch_start_timeout;
        if start.is_zero() {
            idle
        } else {
            start.min(idle)
        }
    }

    /// How long a list request may go without receiving anything (headers or body bytes): the
    /// idle timeout, which is longer than kube-apiserver's own default request timeout (60 s).
    /// With the idle check off a list still has [`DEFAULT_WATCH_IDLE_TIMEOUT`]: kube's client
    /// has no read timeout, and a list on a dead connection would otherwise never end, nor
    /// report anything.
    fn list_idle_timeout(&self) -> Option<Duration> {
        Some(if self.config.idle_timeout.is_zero() {
            DEFAULT_WATCH_IDLE_TIMEOUT
        } else {
            self.config.idle_timeout
        })
    }

    /// The `List` state: a streaming list when enabled (handing back its watch to go on with),
    /// else a list.
    async fn list_or_stream(&mut self) -> Result<Option<Watching<K>>, Error> {
        if self.config.streaming_list && !self.watch_list_unsupported && self.config.shard.is_none()
        {
            match self.watch_list().await {
                Ok(w) => return Ok(Some(w)),
                Err(e) => {
                    if e.list_watch_error()
                        .is_some_and(ListWatchError::is_bad_request)
                    {
                        // The server does not know sendInitialEvents: don't ask again.
                        self.watch_list_unsupported = true;
                    }
                    // Fall back to a list at once: the list is what decides whether the server
                    // is reachable.
                    self.report(&e);
                }
            }
        }
        self.list().await.map(|()| None)
    }

    /// The `Watch` state: starts a watch from the last resourceVersion.
    async fn start_watch(&mut self, after_backoff: bool) -> Result<Watching<K>, Error> {
        let timeout_seconds = self.watch_timeout_seconds();
        let options = WatchOptions {
            resource_version: self.last_rv.clone(),
            timeout_seconds,
            allow_bookmarks: true,
            send_initial_events: false,
            max_object_bytes: self.config.max_object_bytes,
            shard_selector: self.shard_selector(),
            projection: self.config.projection.clone(),
        };
        let idle = self.idle_timeout(timeout_seconds);
        // The server answers a watch's headers at once; one that does not within the start
        // timeout is as dead as a silent stream (kube sets no read timeout of its own).
        let start = self.watch_start_timeout(idle);
        let stream = tokio::time::timeout(start, self.open_events(options))
            .await
            .map_err(|_| Error::WatchStartTimeout(start))?
            .map_err(Error::WatchStart)?;
        Ok(Watching {
            stream,
            idle,
            started: Instant::now(),
            events: 0,
            after_backoff,
        })
    }

    /// client-go `list`: paginated list, replace into the store.
    async fn list(&mut self) -> Result<(), Error> {
        let rv = self.relist_resource_version();
        let (items, list_rv) = match self.list_at(rv).await {
            Ok(r) => r,
            Err(e) if e.is_expired() || e.is_too_large_resource_version() => {
                // The version we listed at is gone (or not reached yet): make progress with a
                // consistent read rather than retrying an impossible request.
                self.rv_unavailable = true;
                self.report(&Error::List(e));
                self.list_at(String::new()).await.map_err(Error::List)?
            }
            Err(e) => return Err(Error::List(e)),
        };
        self.rv_unavailable = false;
        let n = items.len();
        self.store.replace(items, &list_rv).map_err(Error::Store)?;
        tracing::debug!(reflector = %self.name, items = n, resource_version = %list_rv, "listed");
        self.set_last_rv(&list_rv);
        Ok(())
    }

    /// One list, page by page; each item goes to the store's [`ReflectorStore::list_item`] as
    /// soon as it is decoded, so the list is collected in the store's form.
    async fn list_at(&mut self, rv: String) -> Result<(Vec<S::ListItem>, String), ListWatchError> {
        let specific = !rv.is_empty() && rv != "0";
        let paginate = !specific || self.paginated_result;
        let first_at_zero = rv == "0";
        let mut options = ListOptions {
            resource_version: rv,
            resource_version_match: None,
            limit: paginate.then_some(self.config.page_size).filter(|&n| n > 0),
            continue_token: None,
            max_object_bytes: self.config.max_object_bytes,
            idle_timeout: self.list_idle_timeout(),
            shard_selector: self.shard_selector(),
            projection: self.config.projection.clone(),
        };
        let mut items = Vec::new();
        let mut rejected = Vec::new();
        let mut first = true;
        loop {
            let summary = match self
                .list_page(options.clone(), &mut items, &mut rejected)
                .await
            {
                Ok(s) => s,
                Err(e) if e.is_expired() && options.continue_token.is_some() => {
                    // The snapshot the pages came from was compacted mid-list: one full list
                    // without a limit (client-go pager `FullListIfExpired`).
                    tracing::debug!(reflector = %self.name, "continue token expired; full list");
                    items.clear();
                    rejected.clear();
                    let full = ListOptions {
                        max_object_bytes: self.config.max_object_bytes,
                        idle_timeout: self.list_idle_timeout(),
                        shard_selector: self.shard_selector(),
                        projection: self.config.projection.clone(),
                        ..Default::default()
                    };
                    let summary = self.list_page(full, &mut items, &mut rejected).await?;
                    self.report_list_rejects(summary.undecodable, rejected);
                    let rv = summary.metadata.resource_version.unwrap_or_default();
                    return Ok((items, rv));
                }
                Err(e) => return Err(e),
            };
            let cont = summary.metadata.continue_.clone().filter(|c| !c.is_empty());
            self.report_list_rejects(summary.undecodable, std::mem::take(&mut rejected));
            if first && first_at_zero && cont.is_some() {
                // The server paginated a list at "0": it has no watch cache for this
                // resource, so keep paginating later relists too.
                self.paginated_result = true;
            }
            first = false;
            match cont {
                Some(c) => {
                    options.continue_token = Some(c);
                    options.resource_version.clear();
                    options.resource_version_match = None;
                }
                None => return Ok((items, summary.metadata.resource_version.unwrap_or_default())),
            }
        }
    }

    async fn list_page(
        &self,
        options: ListOptions,
        items: &mut Vec<S::ListItem>,
        rejected: &mut Vec<crate::fifo::FifoError>,
    ) -> Result<ListSummary, ListWatchError> {
        let store = &self.store;
        let shard = self.config.shard.as_ref();
        let before = items.len();
        if self.store_takes_bytes() {
            let mut sink = |meta: decode::ListedMeta, bytes: decode::ItemBytes<'_>| match store
                .list_item_bytes(meta, bytes)
            {
                Ok(item) => items.push(item),
                Err(e) => rejected.push(e),
            };
            if let Some(listed) = self.lw.list_each_bytes(options.clone(), &mut sink) {
                return listed.await;
            }
        }
        let mut outside = Vec::new();
        let mut sink = |obj: K| {
            if let Some(shard) = shard.filter(|s| !s.matches(&obj)) {
                outside.push(out_of_shard(shard, &obj));
                return;
            }
            match store.list_item(obj) {
                Ok(item) => items.push(item),
                Err(e) => rejected.push(e),
            }
        };
        let summary = self.lw.list_each(options, &mut sink).await?;
        let Some(shard) = shard else {
            return Ok(summary);
        };
        if check_shard_info(shard, summary.shard_info.as_deref())? {
            // A server that sharded the list sent something outside the shard.
            for e in outside {
                self.report(&Error::OutOfShard(e));
            }
        } else {
            tracing::info!(
                reflector = %self.name,
                shard = %shard,
                kept = items.len() - before,
                outside = outside.len(),
                "the server does not shard (no metadata.shardInfo: kube-apiserver without the \
                 ShardedListAndWatch gate); the shard is taken on the client"
            );
        }
        Ok(summary)
    }

    /// Whether objects go to the store as their bytes, undecoded, when the lister-watcher has
    /// them: the store keeps objects in its own form, there is nothing to project, and no shard
    /// to check each object against.
    fn store_takes_bytes(&self) -> bool {
        self.config.shard.is_none()
            && self.config.projection.is_empty()
            && self.store.takes_item_bytes()
    }

    fn shard_selector(&self) -> Option<String> {
        self.config.shard.as_ref().map(ToString::to_string)
    }

    /// A watched object outside the shard: not cached, its version still passed. A server that
    /// does not shard sends every event (as client-go's `NewShardedListWatch` does, they are
    /// filtered here quietly).
    fn skip_out_of_shard(&mut self, shard: &crate::sharding::ShardSelector, obj: &K) {
        let rv = object_rv(obj);
        tracing::debug!(reflector = %self.name, error = %out_of_shard(shard, obj), "watch event outside the shard; dropped");
        self.set_last_rv(&rv);
        self.store.bookmark(&rv);
    }

    /// Items of a list that were left out (they do not decode, or the store refused them): a
    /// cached version of each is then removed by the replace's tombstone, so the cache holds
    /// only objects that decode and went through the transform.
    fn report_list_rejects(
        &self,
        undecodable: Vec<UndecodableObject>,
        rejected: Vec<crate::fifo::FifoError>,
    ) {
        for u in undecodable {
            self.report(&Error::List(ListWatchError::Undecodable(Box::new(u))));
        }
        for e in rejected {
            self.report(&Error::Store(e));
        }
    }

    /// Streaming initial list: collects the initial events in the store's list form (transformed,
    /// cached objects reused, exactly as a list), replaces the store at the end bookmark, and
    /// hands back the same watch to go on with.
    async fn watch_list(&mut self) -> Result<Watching<K>, Error> {
        let timeout_seconds = self.watch_timeout_seconds();
        let idle = self.idle_timeout(timeout_seconds);
        let options = WatchOptions {
            resource_version: if self.rv_unavailable {
                String::new()
            } else {
                self.last_rv.clone()
            },
            timeout_seconds,
            allow_bookmarks: true,
            send_initial_events: true,
            max_object_bytes: self.config.max_object_bytes,
            shard_selector: self.shard_selector(),
            projection: self.config.projection.clone(),
        };
        let start = self.watch_start_timeout(idle);
        let mut stream = tokio::time::timeout(start, self.open_events(options))
            .await
            .map_err(|_| Error::WatchStartTimeout(start))?
            .map_err(Error::WatchList)?;
        let started = Instant::now();
        // A temporary store: an object deleted during the initial events must not survive.
        let mut initial: HashMap<ObjectKey, S::ListItem> = HashMap::new();
        loop {
            let ev = match tokio::time::timeout(idle, stream.next()).await {
                Err(_) => return Err(Error::IdleTimeout(idle)),
                Ok(None) => {
                    return Err(Error::WatchList(ListWatchError::Api(Box::new(
                        kube::core::Status::failure(
                            "watch ended before the initial-events-end bookmark",
                            "StreamingListIncomplete",
                        ),
                    ))));
                }
                Ok(Some(item)) => item.map(|item| self.initial_event(item, &mut initial)),
            };
            let ev = match ev {
                // A changed object, handed to the store as its bytes.
                Ok(None) => continue,
                Ok(Some(ev)) => ev,
                Err(ListWatchError::Undecodable(u)) => {
                    if let Some(k) = &u.key {
                        initial.remove(k);
                    }
                    self.report(&Error::WatchList(ListWatchError::Undecodable(u)));
                    continue;
                }
                Err(e) => return Err(Error::WatchList(e)),
            };
            match ev {
                WatchEvent::Added(o) | WatchEvent::Modified(o) => {
                    self.collect_initial(&mut initial, key_of(&o), || self.store.list_item(o));
                }
                WatchEvent::Deleted(o) => {
                    if let Ok(k) = key_of(&o) {
                        initial.remove(&k);
                    }
                }
                WatchEvent::Bookmark {
                    resource_version,
                    initial_events_end,
                } => {
                    if initial_events_end {
                        let n = initial.len();
                        self.store
                            .replace(initial.into_values().collect(), &resource_version)
                            .map_err(Error::Store)?;
                        tracing::debug!(reflector = %self.name, items = n, resource_version = %resource_version, "streamed initial list");
                        self.rv_unavailable = false;
                        self.set_last_rv(&resource_version);
                        return Ok(Watching {
                            stream,
                            idle,
                            started,
                            events: n + 1,
                            after_backoff: false,
                        });
                    }
                }
                WatchEvent::Error(status) => {
                    return Err(Error::WatchList(ListWatchError::Api(status)));
                }
            }
        }
    }

    /// One event of a streaming list's initial events: an added or changed object handed over
    /// undecoded goes into `initial` as the store's list item made from its bytes (`None`); any
    /// other event is the caller's.
    fn initial_event(
        &self,
        item: WatchItem<K>,
        initial: &mut HashMap<ObjectKey, S::ListItem>,
    ) -> Option<WatchEvent<K>> {
        match item {
            WatchItem::Event(ev) => Some(ev),
            WatchItem::Added(object) | WatchItem::Modified(object) => {
                self.collect_initial(initial, object.meta().key(), || {
                    self.store
                        .list_item_bytes(object.meta().clone(), object.bytes())
                });
                None
            }
        }
    }

    /// Puts an initial event's object under `key` in `initial`, as the store's list item
    /// `item` makes it; an object the store refuses is reported, and leaves `initial`.
    fn collect_initial(
        &self,
        initial: &mut HashMap<ObjectKey, S::ListItem>,
        key: Result<ObjectKey, crate::store::KeyError>,
        item: impl FnOnce() -> Result<S::ListItem, crate::fifo::FifoError>,
    ) {
        let key = match key {
            Ok(k) => k,
            Err(e) => {
                self.report(&Error::Store(e.into()));
                return;
            }
        };
        match item() {
            Ok(item) => {
                initial.insert(key, item);
            }
            Err(e) => {
                initial.remove(&key);
                self.report(&Error::Store(e));
            }
        }
    }

    /// Starts a watch as the store takes its events: as raw events for a store that takes
    /// changed objects as their bytes, when the lister-watcher has them; decoded otherwise.
    async fn open_events(&self, options: WatchOptions) -> Result<Events<K>, ListWatchError> {
        let raw = self
            .store_takes_bytes()
            .then(|| self.lw.watch_raw(options.clone()))
            .flatten();
        match raw {
            Some(raw) => raw.await.map(Events::Raw),
            None => self.lw.watch(options).await.map(Events::Decoded),
        }
    }

    /// A watch event whose object does not decode as `K`: report it, drop any cached version
    /// of the object (a tombstone: its current state cannot be represented, and a relist would
    /// leave it out the same way), and move past it. Re-watching would only fetch it again,
    /// forever; client-go relists, which loops the same way while the object exists.
    fn skip_undecodable(&mut self, u: UndecodableObject) {
        if let Some(key) = &u.key {
            self.store.forget(key);
        }
        let rv = u.resource_version.clone().unwrap_or_default();
        self.report(&Error::Watch(ListWatchError::Undecodable(Box::new(u))));
        self.set_last_rv(&rv);
        // The skipped event carried a version the store holds no object of.
        self.store.bookmark(&rv);
    }

    /// The `Watching` state: applies the watch's next event to the store (client-go
    /// `handleWatch`, one event at a time). `Ok(false)` when the watch ended normally.
    async fn next_event(&mut self, w: &mut Watching<K>) -> Result<bool, Error> {
        let received = match tokio::time::timeout(w.idle, w.stream.next()).await {
            Err(_) => return Err(Error::IdleTimeout(w.idle)),
            Ok(None) => {
                let lasted = w.started.elapsed();
                if w.events == 0 && lasted < Duration::from_secs(1) {
                    return Err(Error::VeryShortWatch(lasted));
                }
                return Ok(false);
            }
            Ok(Some(Err(e))) => return self.watch_failed(w, e),
            Ok(Some(Ok(received))) => received,
        };
        let ev = match received {
            WatchItem::Event(ev) => ev,
            // An added or changed object, as the bytes the server sent.
            WatchItem::Added(object) => {
                let res = self.store.add_bytes(&object);
                self.applied(w, object.meta().resource_version(), res);
                return Ok(true);
            }
            WatchItem::Modified(object) => {
                let res = self.store.update_bytes(&object);
                self.applied(w, object.meta().resource_version(), res);
                return Ok(true);
            }
        };
        if let (
            Some(shard),
            WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o),
        ) = (&self.config.shard, &ev)
            && !shard.matches(o)
        {
            w.events += 1;
            let shard = shard.clone();
            self.skip_out_of_shard(&shard, o);
            return Ok(true);
        }
        let (rv, res) = match ev {
            WatchEvent::Added(o) => (object_rv(&o), self.store.add(o)),
            WatchEvent::Modified(o) => (object_rv(&o), self.store.update(o)),
            WatchEvent::Deleted(o) => (object_rv(&o), self.store.delete(o)),
            WatchEvent::Bookmark {
                resource_version, ..
            } => {
                self.store.bookmark(&resource_version);
                (resource_version, Ok(()))
            }
            WatchEvent::Error(status) => return Err(Error::Watch(ListWatchError::Api(status))),
        };
        self.applied(w, &rv, res);
        Ok(true)
    }

    /// An event was given to the store (`res` is what it answered) and the watch has reached
    /// `rv`.
    fn applied(&mut self, w: &mut Watching<K>, rv: &str, res: Result<(), crate::fifo::FifoError>) {
        w.events += 1;
        if let Err(e) = res {
            // An object the cache cannot hold (no name, a transform that panicked): report it;
            // the version still advances, since re-fetching would only return the same object,
            // for the store too (an in-order store's version), as for an undecodable event.
            self.report(&Error::Store(e));
            self.set_last_rv(rv);
            self.store.bookmark(rv);
            return;
        }
        self.set_last_rv(rv);
    }

    /// The watch yielded `e` instead of an event: an object that does not decode is skipped
    /// (the watch goes on); anything else ends the watch.
    fn watch_failed(&mut self, w: &mut Watching<K>, e: ListWatchError) -> Result<bool, Error> {
        match e {
            ListWatchError::Undecodable(u) => {
                w.events += 1;
                self.skip_undecodable(*u);
                Ok(true)
            }
            e => Err(Error::Watch(e)),
        }
    }
}

impl<K> From<Next> for State<K> {
    fn from(next: Next) -> Self {
        let then = |t| match t {
            Then::List => State::List,
            Then::Watch => State::Watch {
                after_backoff: false,
            },
        };
        match next {
            Next::Now(t) => then(t),
            Next::AfterBackOff(t) => State::BackOff(t),
        }
    }
}

fn object_rv<K: Resource>(o: &K) -> String {
    o.meta().resource_version.clone().unwrap_or_default()
}

async fn resync_loop<K, S>(
    store: Arc<S>,
    period: Duration,
    should: Option<ShouldResync>,
    mut listed: tokio::sync::watch::Receiver<(Option<u64>, Instant)>,
) where
    S: ReflectorStore<K>,
{
    if period.is_zero() {
        return futures::future::pending().await;
    }
    loop {
        // Wait for a successful list; the period counts from it.
        let Ok(generation) = listed.wait_for(|(g, _)| g.is_some()).await.map(|g| g.0) else {
            return futures::future::pending().await;
        };
        loop {
            // Re-armed after each check, as client-go's `resyncChan`: the listeners' next-due
            // times are set during the check, so a fixed-rate ticker would find them not quite
            // due every other time and resync at twice the period.
            let deadline = Instant::now() + period.min(crate::FAR_FUTURE);
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => {}
                _ = listed.changed() => {}
            }
            let (now_listed, since) = *listed.borrow_and_update();
            // A tick due before the relist began still counts (the two can be seen together,
            // in either order); one that would come after it does not.
            let due = Instant::now() >= deadline && (now_listed == generation || since >= deadline);
            if due
                && should.as_ref().is_none_or(|f| f())
                && let Err(e) = store.resync()
            {
                tracing::warn!(error = %e, "resync failed");
            }
            if now_listed != generation {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests;
