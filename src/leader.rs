//! Leader election for controller replicas: informers run on every replica, workers only on
//! the one holding a `coordination.k8s.io/v1` Lease, and stop before another can take it.
//!
//! The Lease protocol is [`kube_lease_manager`]'s (acquire with a non-forced server-side
//! apply, renew with strategic merge patches, release by clearing the holder). What this
//! module adds is client-go's renew deadline (`tools/leaderelection/leaderelection.go`,
//! `renew`: a leader that has not renewed for `RenewDeadline` stops leading), which
//! kube-lease-manager lacks: on its own it keeps reporting "leader" while it cannot reach the
//! API server, however long that lasts, and another replica takes the Lease once it expires.
//!
//! # The guarantee
//!
//! The elector sees every Lease record the API server returns to kube-lease-manager (its
//! requests go through a client that reads the responses for this one Lease). Let `R` be the
//! `spec.renewTime` of the newest record naming this replica as holder; this replica wrote `R`
//! with its own clock when it renewed. Other replicas consider the Lease free only after
//! `R + lease_duration` (by their clocks, from that same `renewTime`). This replica runs its
//! workers only while
//!
//! - kube-lease-manager reports it holds the Lease, and
//! - the newest record it has seen names it as holder, and
//! - now `< R + renew_deadline`,
//!
//! and when any of these ends it signals the term's workers, gives them `worker_stop_timeout`
//! to return, then aborts them. So workers are gone by `R + renew_deadline +
//! worker_stop_timeout`, which [`LeaderElectionConfig`] requires to be before
//! `R + lease_duration`: the difference is the clock skew between replicas this tolerates.
//!
//! kube-lease-manager's writes carry no `resourceVersion` precondition, so a renewal that
//! arrives late, or a follower's clearing of a Lease it saw expire, can make two replicas
//! believe they hold the Lease for up to a renew period (README, "Scaling out"). Against that,
//! a new term's workers start only once the Lease has been held without a break for
//! `renew_deadline + worker_stop_timeout`
//! ([`wait_out_previous_leader`](LeaderElectionConfig::wait_out_previous_leader), on by
//! default): every other replica's last record naming itself predates this replica's
//! acquisition, so its workers are gone by then, and one that takes the Lease back meanwhile
//! is seen at the next renewal, which ends the wait.
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//! use kube_informer::leader::{LeaderElectionConfig, LeaderElector, Leadership};
//!
//! # async fn doc(client: kube::Client) -> Result<(), kube_informer::leader::Error> {
//! let config = LeaderElectionConfig::new("my-controller", "pod-a")
//!     .namespace("kube-system")
//!     .release_on_cancel(true);
//! let elector = LeaderElector::new(client, config)?;
//! // Informers and their caches run on every replica; only the term's workers need the lease.
//! elector
//!     .run(tokio::signal::ctrl_c().map(|_| ()), |mut leadership: Leadership| async move {
//!         // Start workers; stop them when leadership ends.
//!         leadership.stopped().await;
//!     })
//!     .await
//! # }
//! # use futures::FutureExt;
//! ```

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body_util::BodyExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::client::Body;
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder, LeaseManagerError};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Errors of leader election.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration breaks a timing rule (see [`LeaderElectionConfig`]).
    #[error("invalid leader election configuration: {0}")]
    Config(#[from] ConfigError),
    /// kube-lease-manager could not set up the Lease (it reads, and if needed creates, it
    /// before electing).
    #[error("setting up the lease failed: {0}")]
    Lease(#[source] LeaseManagerError),
    /// kube-lease-manager's background task ended on its own (it only does on a bug, or a
    /// failed release when it was told to stop).
    #[error("the lease manager stopped: {0}")]
    Manager(String),
    /// The future `lead` returned for a term panicked. As a panic in client-go's
    /// `OnStartedLeading` crashes the process, the elector stops: holding the Lease with no
    /// workers running would keep the other replicas from taking over. The Lease is released
    /// if [`release_on_cancel`](LeaderElectionConfig::release_on_cancel) is set (the workers are
    /// gone), and otherwise expires.
    #[error("the workers of term {term} panicked")]
    WorkersPanicked {
        /// The term whose workers panicked.
        term: u64,
    },
}

/// A timing rule [`LeaderElectionConfig`] breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The lease name or the identity is empty.
    #[error("{0} must not be empty")]
    Empty(&'static str),
    /// A Lease counts in whole seconds (`leaseDurationSeconds`), and so does kube-lease-manager
    /// for the renew period.
    #[error("{0} must be a whole number of seconds, at least 1 s")]
    WholeSeconds(&'static str),
    /// The leader renews `renew_period` after each renewal: that must come before the
    /// renew deadline, or every term would end at its first renewal.
    #[error(
        "renew_period ({renew_period:?}) must be shorter than renew_deadline ({renew_deadline:?})"
    )]
    RenewPeriod {
        /// The renew period.
        renew_period: Duration,
        /// The renew deadline.
        renew_deadline: Duration,
    },
    /// Workers must be gone before another replica may take the Lease (client-go:
    /// `leaseDuration must be greater than renewDeadline`, here with the stop timeout added).
    #[error(
        "renew_deadline + worker_stop_timeout ({0:?}) must be shorter than lease_duration ({1:?})"
    )]
    NoMargin(Duration, Duration),
    /// The retry period is zero.
    #[error("retry_period must be positive")]
    RetryPeriod,
}

/// How a replica takes part in the election; `Default`-like values from
/// [`new`](Self::new) mirror client-go's component defaults (`LeaseDuration` 15 s,
/// `RenewDeadline` 10 s, `RetryPeriod` 2 s in `k8s.io/component-base/config/v1alpha1`).
///
/// Rules ([`LeaderElector::new`] checks them): `lease_duration` and `renew_period` are whole
/// seconds; `renew_period < renew_deadline`; `renew_deadline + worker_stop_timeout <
/// lease_duration`. `lease_duration - renew_deadline - worker_stop_timeout` is the clock skew
/// between replicas the guarantee tolerates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderElectionConfig {
    lease_name: String,
    namespace: String,
    identity: String,
    lease_duration: Duration,
    renew_period: Duration,
    renew_deadline: Duration,
    retry_period: Duration,
    worker_stop_timeout: Duration,
    release_on_cancel: bool,
    wait_out_previous_leader: bool,
}

impl LeaderElectionConfig {
    /// The Lease `lease_name` in namespace `default`, contended as `identity` (a pod name:
    /// unique among the replicas, and stable is not required), with lease duration 15 s,
    /// renew period 2 s, renew deadline 10 s, retry period 2 s, worker stop timeout 2 s, and
    /// no release on cancel (client-go's `ReleaseOnCancel` default).
    pub fn new(lease_name: impl Into<String>, identity: impl Into<String>) -> Self {
        Self {
            lease_name: lease_name.into(),
            namespace: "default".into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_period: Duration::from_secs(2),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            worker_stop_timeout: Duration::from_secs(2),
            release_on_cancel: false,
            wait_out_previous_leader: true,
        }
    }

    /// The namespace of the Lease.
    #[must_use]
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// How long a Lease stays valid after its last renewal, for the other replicas
    /// (`spec.leaseDurationSeconds`; client-go's `LeaseDuration`). Whole seconds.
    #[must_use]
    pub fn lease_duration(mut self, d: Duration) -> Self {
        self.lease_duration = d;
        self
    }

    /// How long after each renewal the leader renews again (kube-lease-manager renews
    /// `grace = lease_duration - renew_period` before expiry; client-go renews every
    /// `RetryPeriod`). Whole seconds.
    #[must_use]
    pub fn renew_period(mut self, d: Duration) -> Self {
        self.renew_period = d;
        self
    }

    /// How long after its last successful renewal (`spec.renewTime`) a leader stops leading
    /// (client-go's `RenewDeadline`).
    #[must_use]
    pub fn renew_deadline(mut self, d: Duration) -> Self {
        self.renew_deadline = d;
        self
    }

    /// How often a follower reads the Lease to notice a release (kube-lease-manager itself
    /// only looks again when the lease it saw expires; client-go's `RetryPeriod`).
    #[must_use]
    pub fn retry_period(mut self, d: Duration) -> Self {
        self.retry_period = d;
        self
    }

    /// How long a term's workers get to return once told to stop, before they are aborted.
    #[must_use]
    pub fn worker_stop_timeout(mut self, d: Duration) -> Self {
        self.worker_stop_timeout = d;
        self
    }

    /// Whether shutting down [`LeaderElector::run`] releases a held Lease (after the workers
    /// stopped), so another replica takes the Lease within about two `retry_period`s (it takes
    /// a Lease it has read free twice in a row) instead of at expiry (client-go's
    /// `ReleaseOnCancel`). Its workers then start once it has
    /// [waited out the previous leader](Self::wait_out_previous_leader), if it does.
    #[must_use]
    pub fn release_on_cancel(mut self, release: bool) -> Self {
        self.release_on_cancel = release;
        self
    }

    /// Whether a term's workers start only once the Lease has been held without a break for
    /// `renew_deadline + worker_stop_timeout` (default: yes). By then any previous leader's
    /// workers are gone by its own deadline, even where kube-lease-manager's unconditional
    /// writes let two replicas believe they hold the Lease (README, "Scaling out", point 3):
    /// every replica's last renewal naming itself predates this replica's acquisition, and a
    /// replica that takes the Lease back meanwhile is seen at the next renewal. Off, workers
    /// start at once: failover is faster by that much, and exposed to those races.
    #[must_use]
    pub fn wait_out_previous_leader(mut self, wait: bool) -> Self {
        self.wait_out_previous_leader = wait;
        self
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.lease_name.is_empty() {
            return Err(ConfigError::Empty("lease name"));
        }
        if self.identity.is_empty() {
            return Err(ConfigError::Empty("identity"));
        }
        for (name, d) in [
            ("lease_duration", self.lease_duration),
            ("renew_period", self.renew_period),
        ] {
            if d.subsec_nanos() != 0 || d.is_zero() {
                return Err(ConfigError::WholeSeconds(name));
            }
        }
        if self.renew_period >= self.renew_deadline {
            return Err(ConfigError::RenewPeriod {
                renew_period: self.renew_period,
                renew_deadline: self.renew_deadline,
            });
        }
        // Saturating: `Duration::MAX` ("never abort the workers") is no margin, not a panic.
        let stop_by = self.renew_deadline.saturating_add(self.worker_stop_timeout);
        if stop_by >= self.lease_duration {
            return Err(ConfigError::NoMargin(stop_by, self.lease_duration));
        }
        if self.retry_period.is_zero() {
            return Err(ConfigError::RetryPeriod);
        }
        Ok(())
    }
}

/// Whether this replica leads, as [`LeaderElector::role`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Not leading: no workers run.
    Following,
    /// Leading in term `n` (counted from 1 in this process): the workers run.
    Leading(u64),
}

/// Handed to the workers of one term: tells them when to stop.
#[derive(Debug, Clone)]
pub struct Leadership {
    term: u64,
    stop: watch::Receiver<bool>,
}

impl Leadership {
    /// The term, counted from 1 in this process.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// Whether the term has ended (stop now).
    pub fn is_stopped(&self) -> bool {
        *self.stop.borrow()
    }

    /// Completes when the term ends. The workers then have the configured
    /// `worker_stop_timeout` to return before they are aborted.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits.
    pub async fn stopped(&mut self) {
        // An error means the elector is gone, which also ends the term.
        let _ = self.stop.wait_for(|stopped| *stopped).await;
    }
}

/// What the newest Lease record returned by the API server says about this replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Observed {
    /// Nothing seen yet.
    Nothing,
    /// Held by this replica, renewed at `renew_time` (by this replica's clock); `deadline` is
    /// `renew_time + renew_deadline` as a monotonic instant, converted with the clocks read
    /// as the request that returned the record was sent, and never moved later for the same
    /// `renew_time`: a wall clock stepped back afterwards does not lengthen the term (client-go
    /// times its renew deadline on the monotonic clock).
    Ours {
        renew_time: SystemTime,
        deadline: Instant,
    },
    /// Held by another replica.
    Theirs,
    /// No holder (released, or never taken), or the Lease is gone.
    Free,
}

/// The `tower` service kube-lease-manager's client goes through: the user's client, with the
/// responses for the one Lease read on the way back.
#[derive(Clone)]
struct Observer {
    inner: kube::Client,
    path: String,
    identity: String,
    renew_deadline: Duration,
    observed: watch::Sender<Observed>,
    holder: watch::Sender<Option<String>>,
}

/// The wall and monotonic clocks, read together.
#[derive(Debug, Clone, Copy)]
struct Clocks {
    wall: SystemTime,
    mono: Instant,
}

impl Clocks {
    fn now() -> Self {
        Self {
            wall: SystemTime::now(),
            mono: Instant::now(),
        }
    }
}

impl Observer {
    /// `sent`: the clocks as the request was sent.
    fn observe(&self, status: http::StatusCode, body: &[u8], sent: Clocks) {
        let (seen, holder) = if status == http::StatusCode::NOT_FOUND {
            (Observed::Free, None)
        } else {
            match serde_json::from_slice::<Lease>(body) {
                Ok(lease) => (
                    classify(&lease, &self.identity, self.renew_deadline, sent),
                    lease
                        .spec
                        .and_then(|s| s.holder_identity)
                        .filter(|h| !h.is_empty()),
                ),
                // Not a Lease (a Status body of an error): says nothing about the holder.
                Err(_) => return,
            }
        };
        self.holder.send_if_modified(|current| {
            let changed = *current != holder;
            *current = holder;
            changed
        });
        self.observed
            .send_modify(|current| *current = merge(*current, seen));
    }
}

/// The newest record's reading, keeping the earliest deadline seen for the same renewal.
fn merge(current: Observed, seen: Observed) -> Observed {
    match (current, seen) {
        (
            Observed::Ours {
                renew_time: was,
                deadline: before,
            },
            Observed::Ours {
                renew_time,
                deadline,
            },
        ) if was == renew_time => Observed::Ours {
            renew_time,
            deadline: deadline.min(before),
        },
        _ => seen,
    }
}

fn classify(lease: &Lease, identity: &str, renew_deadline: Duration, sent: Clocks) -> Observed {
    let spec = lease.spec.as_ref();
    match spec.and_then(|s| s.holder_identity.as_deref()) {
        None | Some("") => Observed::Free,
        Some(holder) if holder == identity => match spec.and_then(|s| s.renew_time.as_ref()) {
            Some(t) => {
                let renew_time = SystemTime::from(t.0);
                Observed::Ours {
                    renew_time,
                    deadline: local_deadline(renew_time, renew_deadline, sent),
                }
            }
            // Held without a renewal time: nobody can judge it valid; do not lead on it.
            None => Observed::Free,
        },
        Some(_) => Observed::Theirs,
    }
}

impl tower_service::Service<http::Request<Body>> for Observer {
    type Response = http::Response<Body>;
    type Error = kube::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, kube::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), kube::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let watched = request.uri().path() == this.path;
            let sent = Clocks::now();
            let response = this.inner.send(request).await?;
            let status = response.status();
            if !watched || !(status.is_success() || status == http::StatusCode::NOT_FOUND) {
                return Ok(response);
            }
            let (parts, body) = response.into_parts();
            let bytes: Bytes = body.collect().await?.to_bytes();
            this.observe(status, &bytes, sent);
            Ok(http::Response::from_parts(parts, Body::from(bytes)))
        })
    }
}

/// A replica's participant in the election; see the [module docs](self).
pub struct LeaderElector {
    config: LeaderElectionConfig,
    client: kube::Client,
    role: watch::Sender<Role>,
    holder: watch::Sender<Option<String>>,
}

impl std::fmt::Debug for LeaderElector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderElector")
            .field("config", &self.config)
            .field("role", &*self.role.borrow())
            .finish_non_exhaustive()
    }
}

/// One term: its workers and the signal that stops them.
struct Term {
    stop: watch::Sender<bool>,
    /// `None` once the workers returned by themselves (the term goes on: the Lease is held).
    workers: Option<JoinHandle<()>>,
}

impl LeaderElector {
    /// An elector using `client` for the Lease.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] if `config` breaks a timing rule.
    pub fn new(client: kube::Client, config: LeaderElectionConfig) -> Result<Self, Error> {
        config.validate()?;
        Ok(Self {
            config,
            client,
            role: watch::Sender::new(Role::Following),
            holder: watch::Sender::new(None),
        })
    }

    /// The role, as it changes (`Leading` while the workers of a term may run).
    pub fn role(&self) -> watch::Receiver<Role> {
        self.role.subscribe()
    }

    /// The Lease's holder as last read while [`run`](Self::run) runs (client-go's `GetLeader`,
    /// and its `OnNewLeader` as the changes of this channel): `None` until read, and while the
    /// Lease names nobody or is gone. A follower reads the Lease every `retry_period`, so it
    /// sees a new holder within about that. The holder named is not necessarily running its
    /// workers yet (see [`Role`] for this replica's own).
    pub fn holder(&self) -> watch::Receiver<Option<String>> {
        self.holder.subscribe()
    }

    fn observed_client(&self) -> (kube::Client, watch::Receiver<Observed>) {
        let c = &self.config;
        let (tx, rx) = watch::channel(Observed::Nothing);
        let observer = Observer {
            inner: self.client.clone(),
            path: format!(
                "/apis/coordination.k8s.io/v1/namespaces/{}/leases/{}",
                c.namespace, c.lease_name
            ),
            identity: c.identity.clone(),
            renew_deadline: c.renew_deadline,
            observed: tx,
            holder: self.holder.clone(),
        };
        (kube::Client::new(observer, c.namespace.clone()), rx)
    }

    async fn manager(&self, client: kube::Client) -> Result<LeaseManager, Error> {
        let c = &self.config;
        LeaseManagerBuilder::new(client, c.lease_name.clone())
            .with_namespace(c.namespace.clone())
            .with_identity(c.identity.clone())
            // kube-lease-manager's builder derives the field manager from the random identity
            // of its defaults, not from `with_identity`: name it after the identity, so that a
            // restarted manager is the same field manager as before.
            .with_field_manager(format!("kube-lease-manager-{}", c.identity))
            .with_duration(c.lease_duration.as_secs())
            .with_grace((c.lease_duration - c.renew_period).as_secs())
            .build()
            .await
            .map_err(Error::Lease)
    }

    /// Takes part in the election until `shutdown` completes: each time this replica becomes
    /// leader it calls `lead` and runs the returned future (the term's workers) on a task of
    /// its own, and ends the term as the [module docs](self) say. On shutdown it stops the
    /// workers the same way, then releases the Lease if the configuration says so.
    ///
    /// The workers should watch [`Leadership::stopped`] and own what they spawn (a
    /// `JoinSet` inside the future is aborted with it). Code that blocks a thread without
    /// reaching an `.await` cannot be aborted by anyone, and so is not covered by the stop
    /// bound.
    ///
    /// # Errors
    ///
    /// [`Error::Lease`] if the Lease cannot be read or created at the start (no Lease
    /// access, API server unreachable): the caller decides whether to retry or exit.
    /// [`Error::Manager`] if kube-lease-manager's task ends on its own; the workers have been
    /// stopped by then. [`Error::WorkersPanicked`] if a term's future panics (one that returns
    /// ends nothing: the Lease stays held until `shutdown`). A Lease deleted meanwhile is
    /// created again, as client-go's elector does, and contended for.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future aborts the current term's workers (dropping a `JoinHandle` does
    /// not; the term task is aborted explicitly) but does not release the Lease, which then
    /// expires: use `shutdown` to stop cleanly.
    pub async fn run<S, F, Fut>(&self, shutdown: S, mut lead: F) -> Result<(), Error>
    where
        S: Future<Output = ()>,
        F: FnMut(Leadership) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let c = &self.config;
        let (client, mut observed) = self.observed_client();
        tokio::pin!(shutdown);
        // Raced with the shutdown: kube's client has no read timeout by default, so a server
        // that accepts the connection and never answers would hold `run` here.
        let first = tokio::select! {
            biased;
            () = &mut shutdown => return Ok(()),
            built = self.manager(client.clone()) => built?,
        };
        let mut manager = ManagerGuard::start(first).await;
        let leases: kube::Api<Lease> = kube::Api::namespaced(client.clone(), &c.namespace);
        let mut guard = TermGuard(None);
        let mut term_number = 0u64;
        let retry_period = c.retry_period.min(crate::FAR_FUTURE);
        let mut retry = tokio::time::interval_at(Instant::now() + retry_period, retry_period);
        // Polls in a row that found the Lease free while the manager did not take it.
        let mut free_polls = 0u32;
        retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

        // See `LeaderElectionConfig::wait_out_previous_leader`.
        let settle = if c.wait_out_previous_leader {
            c.renew_deadline + c.worker_stop_timeout
        } else {
            Duration::ZERO
        };
        let mut held_since: Option<Instant> = None;
        let outcome = loop {
            let manager_says = *manager.holding.borrow_and_update();
            let seen = *observed.borrow_and_update();
            let deadline = match seen {
                Observed::Ours { deadline, .. } => Some(deadline),
                _ => None,
            };
            let now = Instant::now();
            let holds = manager_says && deadline.is_some_and(|d| d > now);
            // Held without a break since `held_since` (the first record of this stretch that
            // named this replica, seen then or later than it was written).
            held_since = if holds {
                held_since.or(Some(now))
            } else {
                None
            };
            let settled_at = held_since.map(|t| t + settle);
            let leading = holds && (guard.0.is_some() || settled_at.is_some_and(|t| t <= now));
            if leading && guard.0.is_none() {
                term_number += 1;
                tracing::info!(identity = %c.identity, lease = %c.lease_name, term = term_number, "started leading");
                let (stop, stop_rx) = watch::channel(false);
                let leadership = Leadership {
                    term: term_number,
                    stop: stop_rx,
                };
                guard.0 = Some(Term {
                    stop,
                    workers: Some(tokio::spawn(lead(leadership))),
                });
                self.role.send_replace(Role::Leading(term_number));
            } else if !leading && guard.0.is_some() {
                let why = if !manager_says {
                    "kube-lease-manager reports the lease lost"
                } else if seen == Observed::Theirs || seen == Observed::Free {
                    "the lease names another holder or none"
                } else {
                    "no renewal within renew_deadline"
                };
                tracing::warn!(identity = %c.identity, lease = %c.lease_name, term = term_number, reason = why, "stopped leading");
                self.end_term(&mut guard).await;
            }

            let workers_running = guard.0.as_ref().is_some_and(|t| t.workers.is_some());
            tokio::select! {
                biased;
                () = &mut shutdown => break Ok(()),
                changed = manager.holding.changed() => {
                    if changed.is_err() {
                        // The manager's task ended; its result says why.
                        break Err(manager.ended().await);
                    }
                }
                _ = observed.changed() => {}
                () = sleep_until_opt(deadline), if guard.0.is_some() => {}
                () = sleep_until_opt(settled_at), if guard.0.is_none() && holds => {}
                joined = async {
                    match guard.0.as_mut().and_then(|t| t.workers.as_mut()) {
                        Some(h) => h.await,
                        None => std::future::pending().await,
                    }
                }, if workers_running => {
                    if let Some(t) = guard.0.as_mut() {
                        t.workers = None;
                    }
                    match joined {
                        Err(e) if e.is_panic() => {
                            tracing::error!(identity = %c.identity, lease = %c.lease_name, term = term_number, "the term's workers panicked; stopping");
                            break Err(Error::WorkersPanicked { term: term_number });
                        }
                        _ => tracing::info!(term = term_number, "the term's workers returned; the lease is still held"),
                    }
                }
                // Polled whenever this replica does not lead: also when kube-lease-manager
                // still says it holds a Lease that names another holder, none, or is gone.
                _ = retry.tick(), if guard.0.is_none() && !holds => {
                    // kube-lease-manager sleeps until the expiry it last saw, so it would miss
                    // a release; read the Lease (the observer sees the record) and, if it was
                    // free at two polls in a row (one free poll may just precede the manager's
                    // own acquisition), restart the manager so it acquires now.
                    // A Lease deleted is free too: kube-lease-manager creates it only when
                    // built, so a new manager is what recreates it (client-go's
                    // `tryAcquireOrRenew` creates it on NotFound).
                    let holding_before = *manager.holding.borrow();
                    let read = tokio::time::timeout(c.retry_period, leases.get_opt(&c.lease_name)).await;
                    // The manager may have taken the Lease while the read was under way (its
                    // answer, processed after the manager's, can still say free): then there
                    // is nothing to restart.
                    let acquired_meanwhile = !holding_before && *manager.holding.borrow();
                    let free = matches!(read, Ok(Ok(_)))
                        && !acquired_meanwhile
                        && *observed.borrow() == Observed::Free;
                    free_polls = if free { free_polls + 1 } else { 0 };
                    if free_polls >= 2 {
                        free_polls = 0;
                        tracing::debug!(lease = %c.lease_name, "lease released; contending now");
                        // Built before the old one is stopped, and raced with the shutdown; a
                        // failure is retried at a later poll rather than ending `run`.
                        let built = tokio::select! {
                            biased;
                            () = &mut shutdown => break Ok(()),
                            built = self.manager(client.clone()) => built,
                        };
                        match built {
                            Ok(new) => {
                                manager.abort().await;
                                manager = ManagerGuard::start(new).await;
                            }
                            Err(e) => tracing::warn!(
                                lease = %c.lease_name,
                                error = %e,
                                "could not restart the lease manager; retrying at the next poll"
                            ),
                        }
                    }
                }
            }
        };

        // Workers first: the lease is released only once they are gone.
        self.end_term(&mut guard).await;
        let manager_alive = matches!(outcome, Ok(()) | Err(Error::WorkersPanicked { .. }));
        if c.release_on_cancel && manager_alive {
            manager.release(c.renew_deadline).await;
        } else {
            manager.abort().await;
        }
        outcome
    }

    /// Ends the current term: signal, wait up to the stop timeout, abort. The term stays in
    /// `guard` until its workers are gone, so that dropping `run` during the wait aborts them
    /// (a dropped `JoinHandle` would only detach them).
    async fn end_term(&self, guard: &mut TermGuard) {
        let Some(term) = guard.0.as_mut() else {
            return;
        };
        self.role.send_replace(Role::Following);
        term.stop.send_replace(true);
        if let Some(workers) = term.workers.as_mut() {
            let timeout = self.config.worker_stop_timeout;
            if tokio::time::timeout(timeout, &mut *workers).await.is_err() {
                tracing::warn!(
                    ?timeout,
                    "the term's workers did not stop in time; aborting them"
                );
                workers.abort();
            }
        }
        guard.0 = None;
    }
}

/// Aborts the term's workers if `run` is dropped mid-term.
struct TermGuard(Option<Term>);

impl Drop for TermGuard {
    fn drop(&mut self) {
        if let Some(term) = self.0.take() {
            term.stop.send_replace(true);
            if let Some(w) = term.workers {
                w.abort();
            }
        }
    }
}

type ManagerTask = JoinHandle<Result<LeaseManager, LeaseManagerError>>;

/// kube-lease-manager's `watch` task and its channel. The manager releases the lease when the
/// channel closes, so the channel must outlive an aborted task: a crash-like stop (dropping
/// `run`, or a restart) must never release behind the elector's back, before the workers
/// are gone.
struct ManagerGuard {
    holding: watch::Receiver<bool>,
    task: Option<ManagerTask>,
}

impl ManagerGuard {
    async fn start(manager: LeaseManager) -> Self {
        let (holding, task) = manager.watch().await;
        Self {
            holding,
            task: Some(task),
        }
    }

    /// Stops the manager without releasing: the lease, if held, expires.
    async fn abort(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }

    /// Closes the channel, on which the manager releases a held lease and returns; bounded
    /// as client-go bounds its release (`release`: a context with the renew deadline).
    async fn release(mut self, within: Duration) {
        let Some(mut task) = self.task.take() else {
            return;
        };
        drop(self);
        match tokio::time::timeout(within, &mut task).await {
            Ok(Ok(Ok(_))) => tracing::info!("lease released"),
            Ok(Ok(Err(e))) => tracing::warn!(error = %e, "releasing the lease failed"),
            Ok(Err(e)) => tracing::warn!(error = %e, "the lease manager task failed"),
            Err(_) => {
                tracing::warn!(?within, "releasing the lease timed out");
                task.abort();
            }
        }
    }

    /// Why the task ended by itself.
    async fn ended(&mut self) -> Error {
        match self.task.take() {
            Some(task) => match task.await {
                Ok(Ok(_)) => Error::Manager("it returned".into()),
                Ok(Err(e)) => Error::Manager(e.to_string()),
                Err(e) => Error::Manager(e.to_string()),
            },
            None => Error::Manager("it was stopped".into()),
        }
    }
}

impl Drop for ManagerGuard {
    fn drop(&mut self) {
        let Some(task) = self.task.take() else {
            return;
        };
        task.abort();
        // Keep the channel open until the aborted task is gone.
        let holding = self.holding.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move {
                    let _ = task.await;
                    drop(holding);
                });
            }
            Err(_) => std::mem::forget(holding),
        }
    }
}

/// `renew_time + renew_deadline` (wall clock, this replica's) as a monotonic instant, by the
/// clocks read at `at`.
fn local_deadline(renew_time: SystemTime, renew_deadline: Duration, at: Clocks) -> Instant {
    match (renew_time + renew_deadline).duration_since(at.wall) {
        Ok(left) => at.mono + left,
        Err(_) => at.mono,
    }
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn timing_rules_are_checked() {
        let ok = LeaderElectionConfig::new("l", "a");
        ok.validate().unwrap();
        let cases = [
            (
                LeaderElectionConfig::new("", "a"),
                ConfigError::Empty("lease name"),
            ),
            (
                LeaderElectionConfig::new("l", ""),
                ConfigError::Empty("identity"),
            ),
            (
                ok.clone().lease_duration(Duration::from_millis(2500)),
                ConfigError::WholeSeconds("lease_duration"),
            ),
            (
                ok.clone().renew_period(Duration::ZERO),
                ConfigError::WholeSeconds("renew_period"),
            ),
            (
                ok.clone().renew_period(secs(10)),
                ConfigError::RenewPeriod {
                    renew_period: secs(10),
                    renew_deadline: secs(10),
                },
            ),
            (
                ok.clone().renew_deadline(secs(13)),
                ConfigError::NoMargin(secs(15), secs(15)),
            ),
            (
                ok.clone().retry_period(Duration::ZERO),
                ConfigError::RetryPeriod,
            ),
            (
                ok.clone().worker_stop_timeout(Duration::MAX),
                ConfigError::NoMargin(Duration::MAX, secs(15)),
            ),
        ];
        for (config, want) in cases {
            assert_eq!(config.validate(), Err(want), "{config:?}");
        }
        LeaderElectionConfig::new("l", "a")
            .lease_duration(secs(2))
            .renew_period(secs(1))
            .renew_deadline(Duration::from_millis(1500))
            .worker_stop_timeout(Duration::from_millis(250))
            .validate()
            .unwrap();
    }

    #[test]
    fn records_are_classified_by_holder_and_renew_time() {
        let t = k8s_openapi::jiff::Timestamp::from_second(1_700_000_000).unwrap();
        let lease = |holder: Option<&str>, renew: bool| Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_string),
                renew_time: renew.then_some(MicroTime(t)),
                ..Default::default()
            }),
            ..Default::default()
        };
        let rd = Duration::from_secs(10);
        // Sent 2 s after the renewal: 8 s of the renew deadline left.
        let sent = Clocks {
            wall: SystemTime::from(t) + Duration::from_secs(2),
            mono: Instant::now(),
        };
        let classify = |l: &Lease, id: &str| classify(l, id, rd, sent);
        assert_eq!(
            classify(&lease(Some("a"), true), "a"),
            Observed::Ours {
                renew_time: SystemTime::from(t),
                deadline: sent.mono + Duration::from_secs(8),
            }
        );
        assert_eq!(classify(&lease(Some("a"), false), "a"), Observed::Free);
        assert_eq!(classify(&lease(Some("b"), true), "a"), Observed::Theirs);
        assert_eq!(classify(&lease(None, true), "a"), Observed::Free);
        assert_eq!(classify(&lease(Some(""), true), "a"), Observed::Free);
        assert_eq!(classify(&Lease::default(), "a"), Observed::Free);
    }

    /// The wall clock steps back 5 s while the leader cannot renew: a later read of the same
    /// record must not move the renew deadline later (it would run its workers 5 s longer,
    /// past the point where another replica takes the Lease).
    #[test]
    fn a_wall_clock_stepped_back_does_not_lengthen_the_term() {
        let renew_time = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let rd = Duration::from_secs(10);
        let mono = Instant::now();
        let first = Clocks {
            wall: renew_time,
            mono,
        };
        let ours = |at: Clocks| Observed::Ours {
            renew_time,
            deadline: local_deadline(renew_time, rd, at),
        };
        let seen = merge(Observed::Nothing, ours(first));
        assert_eq!(seen, ours(first));
        // One second later by the monotonic clock, four seconds earlier by the stepped wall.
        let stepped = Clocks {
            wall: renew_time - Duration::from_secs(4),
            mono: mono + Duration::from_secs(1),
        };
        assert_eq!(merge(seen, ours(stepped)), seen);
        // A new renewal is taken as it comes.
        let renewed = Observed::Ours {
            renew_time: renew_time + Duration::from_secs(3),
            deadline: mono + Duration::from_secs(13),
        };
        assert_eq!(merge(seen, renewed), renewed);
        assert_eq!(merge(seen, Observed::Theirs), Observed::Theirs);
    }

    /// An elector whose API server never answers.
    fn unanswered_elector() -> LeaderElector {
        let never = tower::service_fn(|_: http::Request<kube::client::Body>| {
            std::future::pending::<Result<http::Response<kube::client::Body>, std::io::Error>>()
        });
        LeaderElector::new(
            kube::Client::new(never, "default"),
            LeaderElectionConfig::new("l", "a"),
        )
        .unwrap()
    }

    /// A shutdown while the Lease is first read (here: a server that never answers) ends
    /// `run`, rather than waiting for an answer that kube's client has no timeout for.
    #[tokio::test(start_paused = true)]
    async fn shutdown_while_the_lease_is_first_read_returns() {
        let elector = unanswered_elector();
        let run = elector.run(tokio::time::sleep(secs(1)), |_| async {});
        let ran = tokio::time::timeout(secs(60), run).await;
        assert!(matches!(ran, Ok(Ok(()))), "{ran:?}");
        assert_eq!(*elector.role().borrow(), Role::Following);
    }

    /// `run` dropped while a term ends (an outer timeout, a `select!`), with workers that do
    /// not watch `stopped()`: they are aborted, not left running after the elector is gone.
    #[tokio::test(start_paused = true)]
    async fn workers_are_aborted_if_run_is_dropped_while_their_term_ends() {
        use std::sync::{
            Arc,
            atomic::{AtomicU64, Ordering},
        };
        let elector = unanswered_elector();
        let ticks = Arc::new(AtomicU64::new(0));
        let t = Arc::clone(&ticks);
        let (stop, _stopped) = watch::channel(false);
        let mut guard = TermGuard(Some(Term {
            stop,
            workers: Some(tokio::spawn(async move {
                loop {
                    t.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })),
        }));
        let wait = elector.config.worker_stop_timeout / 2;
        let ending = tokio::time::timeout(wait, elector.end_term(&mut guard)).await;
        assert!(
            ending.is_err(),
            "the workers ignore the stop: the wait goes on"
        );
        drop(guard);
        tokio::time::sleep(Duration::from_millis(50)).await;
        let n = ticks.load(Ordering::SeqCst);
        tokio::time::sleep(secs(10)).await;
        assert_eq!(ticks.load(Ordering::SeqCst), n, "the workers still run");
    }

    #[test]
    fn deadlines_in_the_past_are_now() {
        let now = Instant::now();
        let past = local_deadline(SystemTime::now() - secs(60), secs(10), Clocks::now());
        assert!(past >= now && past <= Instant::now());
        let future = local_deadline(SystemTime::now(), secs(10), Clocks::now());
        assert!(future > now + secs(9));
    }

    #[test]
    fn public_types_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<LeaderElector>();
        check::<Leadership>();
        check::<Error>();
    }
}
