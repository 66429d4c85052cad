//! The reflector: lists and watches one resource with client-go's resourceVersion rules and
//! feeds every change into a [`DeltaFifo`].
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
//!   failures and 429 back off and retry the watch. A watch that closes in under a second with no
//!   events counts as a failure.
//! - Between failures the reflector backs off exponentially ([`BackoffConfig`]).
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

use std::{collections::HashMap, future::Future, sync::Arc, time::Duration};

use futures::StreamExt;
use kube::Resource;
use parking_lot::Mutex;
use tokio::time::Instant;

use backoff::Backoff;
pub use backoff::BackoffConfig;
pub use decode::{ListPage, UndecodableObject, WatchEvent};
pub use error::{Error, ListWatchError};
pub use listwatch::{
    ApiListerWatcher, ListOptions, ListerWatcher, Prepare, WatchOptions, WatchStream,
};

/// Internals reachable only for the fuzz targets in `fuzz/` and `tests/fuzz_decode.rs`; not part
/// of the API and exempt from semver.
#[doc(hidden)]
pub mod __fuzz {
    pub use super::listwatch::watch_event_stream;
}

pub use crate::fifo::ListItem;
use crate::{
    fifo::DeltaFifo,
    store::{ObjectKey, key_of},
};

/// A callback that sees every list/watch error (client-go `WatchErrorHandler`).
pub type WatchErrorHandler = Arc<dyn Fn(&Error) + Send + Sync>;

/// Decides at each resync tick whether to queue a resync (the informer asks its listeners).
pub type ShouldResync = Arc<dyn Fn() -> bool + Send + Sync>;

/// Reflector options. Defaults mirror client-go's reflector.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ReflectorConfig {
    /// Page size of paginated lists (client-go pager `defaultPageSize`, 500).
    pub page_size: u32,
    /// Watches ask for `timeoutSeconds` uniformly random in `[min, 2 × min]` (client-go
    /// `minWatchTimeout`, 5 min), spreading re-watches of many clients over time.
    pub min_watch_timeout: Duration,
    /// How long a watch may deliver nothing (not even a bookmark) before it is treated as dead.
    /// `None` (default) means the watch's own `timeoutSeconds` plus 60 s: the server promised to
    /// end it by then.
    pub idle_timeout: Option<Duration>,
    /// Backoff between failures.
    pub backoff: BackoffConfig,
    /// Use a streaming initial list (`sendInitialEvents`, KEP-3157) instead of list requests.
    /// Default `false`.
    pub streaming_list: bool,
    /// Queue a resync of every cached object this often (`Duration::ZERO`, the default, for never).
    pub resync_period: Duration,
}

impl Default for ReflectorConfig {
    fn default() -> Self {
        Self {
            page_size: 500,
            min_watch_timeout: Duration::from_secs(300),
            idle_timeout: None,
            backoff: BackoffConfig::default(),
            streaming_list: false,
            resync_period: Duration::ZERO,
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
        self.idle_timeout = Some(d);
        self
    }

    /// Sets [`Self::backoff`].
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

/// Lists and watches through a [`ListerWatcher`] and writes into a [`DeltaFifo`].
pub struct Reflector<K> {
    lw: Arc<dyn ListerWatcher<K>>,
    fifo: Arc<DeltaFifo<K>>,
    config: ReflectorConfig,
    error_handler: WatchErrorHandler,
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

/// The default watch-error handler: a `tracing` warning (expired versions at debug level, since
/// they are routine).
pub fn default_watch_error_handler(name: &str, err: &Error) {
    if err.is_expired() {
        tracing::debug!(reflector = name, error = %err, "watch expired; relisting");
    } else {
        tracing::warn!(reflector = name, error = %err, "list/watch failed; retrying");
    }
}

impl<K> Reflector<K>
where
    K: Resource + Send + Sync + 'static,
{
    /// A reflector writing what `lw` lists and watches into `fifo`.
    pub fn new(
        lw: impl ListerWatcher<K>,
        fifo: Arc<DeltaFifo<K>>,
        config: ReflectorConfig,
    ) -> Self {
        Self::from_arc(Arc::new(lw), fifo, config)
    }

    /// Like [`Reflector::new`] with a shared lister-watcher.
    pub fn from_arc(
        lw: Arc<dyn ListerWatcher<K>>,
        fifo: Arc<DeltaFifo<K>>,
        config: ReflectorConfig,
    ) -> Self {
        let name = std::any::type_name::<K>()
            .rsplit("::")
            .next()
            .unwrap_or("object")
            .to_owned();
        let handler_name = name.clone();
        Self {
            lw,
            fifo,
            backoff: Backoff::new(config.backoff),
            config,
            error_handler: Arc::new(move |e| default_watch_error_handler(&handler_name, e)),
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
        self.error_handler = handler;
        self
    }

    /// Sets the check run at each resync tick; without one every tick resyncs.
    #[must_use]
    pub fn with_should_resync(mut self, f: ShouldResync) -> Self {
        self.should_resync = Some(f);
        self
    }

    /// Names the reflector in logs (default: the type name).
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
    /// Dropping the future stops the reflector; the FIFO keeps what was queued.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) {
        let fifo = self.fifo.clone();
        let period = self.config.resync_period;
        let should_resync = self.should_resync.clone();
        let resync = resync_loop(fifo, period, should_resync);
        tokio::select! {
            () = shutdown => {}
            () = resync => {}
            () = self.run_forever() => {}
        }
    }

    async fn run_forever(&mut self) {
        loop {
            if let Err(e) = self.list_and_watch().await {
                self.report(&e);
            }
            self.back_off().await;
        }
    }

    fn report(&self, e: &Error) {
        (self.error_handler)(e);
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
        let min = self.config.min_watch_timeout.as_secs().max(1);
        u32::try_from(min + self.rng.u64(0..=min)).unwrap_or(u32::MAX)
    }

    fn idle_timeout(&self, timeout_seconds: u32) -> Duration {
        self.config
            .idle_timeout
            .unwrap_or_else(|| Duration::from_secs(u64::from(timeout_seconds) + 60))
    }

    /// One list (or streaming list) followed by watches until a watch fails.
    async fn list_and_watch(&mut self) -> Result<(), Error> {
        let mut stream = None;
        if self.config.streaming_list && !self.watch_list_unsupported {
            match self.watch_list().await {
                Ok(s) => stream = Some(s),
                Err(e) => {
                    if e.list_watch_error()
                        .is_some_and(ListWatchError::is_bad_request)
                    {
                        // The server does not know sendInitialEvents: don't ask again.
                        self.watch_list_unsupported = true;
                    }
                    self.report(&e);
                }
            }
        }
        if stream.is_none() {
            self.list().await?;
        }
        loop {
            let (s, timeout_seconds) = match stream.take() {
                Some(s) => s,
                None => {
                    let timeout_seconds = self.watch_timeout_seconds();
                    let options = WatchOptions {
                        resource_version: self.last_rv.clone(),
                        timeout_seconds,
                        allow_bookmarks: true,
                        send_initial_events: false,
                    };
                    match self.lw.watch(options).await {
                        Ok(s) => (s, timeout_seconds),
                        // Connection refused or 429: the server is there but busy or restarting;
                        // keep the cache and retry the watch after a backoff (client-go
                        // `isWatchErrorRetriable`).
                        Err(e @ ListWatchError::Request(_)) => {
                            self.report(&Error::WatchStart(e));
                            self.back_off().await;
                            continue;
                        }
                        Err(e) if e.is_too_many_requests() => {
                            self.report(&Error::WatchStart(e));
                            self.back_off().await;
                            continue;
                        }
                        Err(e) => return Err(Error::WatchStart(e)),
                    }
                }
            };
            match self.handle_watch(s, timeout_seconds).await {
                Ok(()) => {}
                // A broken connection or an undecodable line: the events after the last
                // version are fetched again by the next watch, so re-watch (after a backoff)
                // instead of relisting.
                Err(e @ Error::Watch(ListWatchError::Stream(_) | ListWatchError::Decode(_)))
                | Err(e @ Error::IdleTimeout(_)) => {
                    self.report(&e);
                    self.back_off().await;
                }
                Err(Error::Watch(e)) if e.is_too_many_requests() => {
                    self.report(&Error::Watch(e));
                    self.back_off().await;
                }
                // 410 and other error events, very short watches: relist.
                Err(e) => return Err(e),
            }
        }
    }

    /// client-go `list`: paginated list, replace into the FIFO.
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
        self.fifo
            .replace_items(items, &list_rv)
            .map_err(Error::Store)?;
        tracing::debug!(reflector = %self.name, items = n, resource_version = %list_rv, "listed");
        self.set_last_rv(&list_rv);
        Ok(())
    }

    async fn list_at(&mut self, rv: String) -> Result<(Vec<ListItem<K>>, String), ListWatchError> {
        // Each listed object is made ready for the FIFO as soon as it is decoded: swapped for the
        // cached `Arc` when the cache holds the same resourceVersion (a relist then costs the
        // cache plus what changed, not a second copy of everything, and handlers see the very
        // same object on the resync), else transformed at once (so a transform that drops
        // fields lowers the peak too).
        let fifo = self.fifo.clone();
        let prepare = move |obj: K| -> ListItem<K> {
            // A keyless object is left for `replace_items` to reject with its error.
            let Ok(key) = key_of(&obj) else {
                return ListItem::Decoded(Box::new(obj));
            };
            if let Some(rv) = obj
                .meta()
                .resource_version
                .as_deref()
                .filter(|rv| !rv.is_empty())
                && let Some(cached) = fifo.known_object(&key)
                && cached.meta().resource_version.as_deref() == Some(rv)
            {
                return ListItem::Ready(cached);
            }
            ListItem::Ready(fifo.prepare_object(obj))
        };
        let specific = !rv.is_empty() && rv != "0";
        let paginate = !specific || self.paginated_result;
        let first_at_zero = rv == "0";
        let mut options = ListOptions {
            resource_version: rv,
            resource_version_match: None,
            limit: paginate.then_some(self.config.page_size).filter(|&n| n > 0),
            continue_token: None,
        };
        let mut items = Vec::new();
        let mut first = true;
        loop {
            let page = match self.lw.list_reusing(options.clone(), &prepare).await {
                Ok(p) => p,
                Err(e) if e.is_expired() && options.continue_token.is_some() => {
                    // The snapshot the pages came from was compacted mid-list: one full list
                    // without a limit (client-go pager `FullListIfExpired`).
                    tracing::debug!(reflector = %self.name, "continue token expired; full list");
                    let full = ListOptions {
                        resource_version: String::new(),
                        ..Default::default()
                    };
                    let page = self.lw.list_reusing(full, &prepare).await?;
                    for u in page.undecodable {
                        self.report(&Error::List(ListWatchError::Undecodable(Box::new(u))));
                    }
                    let rv = page.metadata.resource_version.unwrap_or_default();
                    return Ok((page.items, rv));
                }
                Err(e) => return Err(e),
            };
            for u in page.undecodable {
                // Left out of the list: a cached version of it is then removed by the
                // replace's tombstone, so the cache holds only objects that decode.
                self.report(&Error::List(ListWatchError::Undecodable(Box::new(u))));
            }
            let cont = page.metadata.continue_.filter(|c| !c.is_empty());
            if first && first_at_zero && cont.is_some() {
                // The server paginated a list at "0": it has no watch cache for this
                // resource, so keep paginating later relists too.
                self.paginated_result = true;
            }
            first = false;
            if items.is_empty() {
                items = page.items;
            } else {
                items.extend(page.items);
            }
            match cont {
                Some(c) => {
                    options.continue_token = Some(c);
                    options.resource_version.clear();
                    options.resource_version_match = None;
                }
                None => return Ok((items, page.metadata.resource_version.unwrap_or_default())),
            }
        }
    }

    /// Streaming initial list: collects the initial events, replaces the FIFO at the end
    /// bookmark, and hands back the same watch to go on with.
    async fn watch_list(&mut self) -> Result<(WatchStream<K>, u32), Error> {
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
        };
        let mut stream = self.lw.watch(options).await.map_err(Error::WatchList)?;
        // A temporary store: an object deleted during the initial events must not survive.
        let mut initial: HashMap<ObjectKey, K> = HashMap::new();
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
                Ok(Some(Err(ListWatchError::Undecodable(u)))) => {
                    if let Some(k) = &u.key {
                        initial.remove(k);
                    }
                    self.report(&Error::WatchList(ListWatchError::Undecodable(u)));
                    continue;
                }
                Ok(Some(Err(e))) => return Err(Error::WatchList(e)),
                Ok(Some(Ok(ev))) => ev,
            };
            match ev {
                WatchEvent::Added(o) | WatchEvent::Modified(o) => match key_of(&o) {
                    Ok(k) => {
                        initial.insert(k, o);
                    }
                    Err(e) => self.report(&Error::Store(e.into())),
                },
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
                        self.fifo
                            .replace(initial.into_values().collect(), &resource_version)
                            .map_err(Error::Store)?;
                        tracing::debug!(reflector = %self.name, items = n, resource_version = %resource_version, "streamed initial list");
                        self.rv_unavailable = false;
                        self.set_last_rv(&resource_version);
                        return Ok((stream, timeout_seconds));
                    }
                }
                WatchEvent::Error(status) => {
                    return Err(Error::WatchList(ListWatchError::Api(status)));
                }
            }
        }
    }

    /// A watch event whose object does not decode as `K`: report it, drop any cached version
    /// of the object (a tombstone: its current state cannot be represented, and a relist would
    /// leave it out the same way), and move past it. Re-watching would only fetch it again,
    /// forever; client-go relists, which loops the same way while the object exists.
    fn skip_undecodable(&mut self, u: UndecodableObject) {
        if let Some(key) = &u.key {
            self.fifo.delete_final_state_unknown(key);
        }
        let rv = u.resource_version.clone().unwrap_or_default();
        self.report(&Error::Watch(ListWatchError::Undecodable(Box::new(u))));
        self.set_last_rv(&rv);
    }

    /// Applies one watch's events to the FIFO until it ends (client-go `handleWatch`).
    async fn handle_watch(
        &mut self,
        mut stream: WatchStream<K>,
        timeout_seconds: u32,
    ) -> Result<(), Error> {
        let idle = self.idle_timeout(timeout_seconds);
        let start = Instant::now();
        let mut events = 0usize;
        loop {
            let ev = match tokio::time::timeout(idle, stream.next()).await {
                Err(_) => return Err(Error::IdleTimeout(idle)),
                Ok(None) => {
                    let lasted = start.elapsed();
                    if events == 0 && lasted < Duration::from_secs(1) {
                        return Err(Error::VeryShortWatch(lasted));
                    }
                    return Ok(());
                }
                Ok(Some(Err(ListWatchError::Undecodable(u)))) => {
                    events += 1;
                    self.skip_undecodable(*u);
                    continue;
                }
                Ok(Some(Err(e))) => return Err(Error::Watch(e)),
                Ok(Some(Ok(ev))) => ev,
            };
            events += 1;
            let (rv, res) = match ev {
                WatchEvent::Added(o) => (object_rv(&o), self.fifo.add(o)),
                WatchEvent::Modified(o) => (object_rv(&o), self.fifo.update(o)),
                WatchEvent::Deleted(o) => (object_rv(&o), self.fifo.delete(o)),
                WatchEvent::Bookmark {
                    resource_version, ..
                } => (resource_version, Ok(())),
                WatchEvent::Error(status) => return Err(Error::Watch(ListWatchError::Api(status))),
            };
            if let Err(e) = res {
                // An object the cache cannot hold (no name): report it; the version still
                // advances, since re-fetching would only return the same object again.
                self.report(&Error::Store(e));
            }
            self.set_last_rv(&rv);
        }
    }
}

fn object_rv<K: Resource>(o: &K) -> String {
    o.meta().resource_version.clone().unwrap_or_default()
}

async fn resync_loop<K>(fifo: Arc<DeltaFifo<K>>, period: Duration, should: Option<ShouldResync>)
where
    K: Resource + Send + Sync + 'static,
{
    if period.is_zero() {
        return futures::future::pending().await;
    }
    loop {
        // Re-armed after each check, as client-go's `resyncChan`: the listeners' next-due times
        // are set during the check, so a fixed-rate ticker would find them not quite due every
        // other time and resync at twice the period.
        tokio::time::sleep(period).await;
        if should.as_ref().is_none_or(|f| f())
            && let Err(e) = fifo.resync()
        {
            tracing::warn!(error = %e, "resync failed");
        }
    }
}

#[cfg(test)]
mod tests;
