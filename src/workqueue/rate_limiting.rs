//! A delaying queue that retries through a rate limiter: client-go's
//! `util/workqueue/rate_limiting_queue.go`.

use std::{fmt, future::Future, ops::Deref, sync::Arc};

use super::{
    delaying::DelayingQueue,
    queue::{Config, QueueItem, ShutDown},
    rate_limiter::{RateLimiter, default_controller_rate_limiter},
};

/// A [`DelayingQueue`] whose retries are paced by a [`RateLimiter`]: the queue a controller's
/// workers drain.
///
/// Every [`DelayingQueue`] and [`WorkQueue`](super::WorkQueue) method is available through
/// `Deref`. Remember to [`forget`](Self::forget) an item once it succeeds, or its failure count
/// (and so its backoff) keeps growing.
///
/// A cheap-to-clone handle: clones share one queue and one limiter.
///
/// ```no_run
/// # async fn reconcile(_key: &str) -> Result<(), ()> { Ok(()) }
/// # #[tokio::main]
/// # async fn main() {
/// use kube_informer::RateLimitingQueue;
///
/// let queue = RateLimitingQueue::<String>::new();
/// queue.add("default/web".to_owned()).unwrap();
///
/// while let Some(key) = queue.get().await {
///     match reconcile(&key).await {
///         Ok(()) => queue.forget(&key),
///         Err(()) if queue.num_requeues(&key) < 5 => {
///             // Refused only once shutting down: then there is nothing to retry.
///             let _ = queue.add_rate_limited(key.clone());
///         }
///         Err(()) => queue.forget(&key), // give up
///     }
///     queue.done(&key);
/// }
/// # }
/// ```
pub struct RateLimitingQueue<T> {
    queue: DelayingQueue<T>,
    limiter: Arc<dyn RateLimiter<T>>,
}

impl<T> Clone for RateLimitingQueue<T> {
    fn clone(&self) -> Self {
        Self {
            queue: self.queue.clone(),
            limiter: Arc::clone(&self.limiter),
        }
    }
}

impl<T> Deref for RateLimitingQueue<T> {
    type Target = DelayingQueue<T>;

    fn deref(&self) -> &DelayingQueue<T> {
        &self.queue
    }
}

impl<T> fmt::Debug for RateLimitingQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitingQueue")
            .field("queue", &self.queue)
            .finish_non_exhaustive()
    }
}

impl<T: QueueItem> Default for RateLimitingQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: QueueItem> RateLimitingQueue<T> {
    /// An unnamed queue with [`default_controller_rate_limiter`], the usual controller setup.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime (see [`DelayingQueue::new`]); [`try_new`](Self::try_new) returns
    /// an error instead.
    pub fn new() -> Self {
        Self::with_rate_limiter(default_controller_rate_limiter())
    }

    /// An unnamed queue with the given limiter (client-go's `NewRateLimitingQueue`).
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime (see [`DelayingQueue::new`]).
    pub fn with_rate_limiter(limiter: impl RateLimiter<T> + 'static) -> Self {
        Self::with_config(Config::default(), limiter)
    }

    /// A queue built from `config` with the given limiter (client-go's
    /// `NewTypedRateLimitingQueueWithConfig`, which also takes the limiter apart from the config).
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime (see [`DelayingQueue::new`]).
    pub fn with_config(config: Config, limiter: impl RateLimiter<T> + 'static) -> Self {
        Self::try_with_config(config, limiter).unwrap_or_else(|e| panic!("RateLimitingQueue: {e}"))
    }

    /// [`new`](Self::new) that reports a missing runtime instead of panicking.
    ///
    /// # Errors
    ///
    /// [`NoRuntime`](crate::NoRuntime) outside a Tokio runtime.
    pub fn try_new() -> Result<Self, crate::NoRuntime> {
        Self::try_with_config(Config::default(), default_controller_rate_limiter())
    }

    /// [`with_config`](Self::with_config) that reports a missing runtime instead of panicking.
    ///
    /// # Errors
    ///
    /// [`NoRuntime`](crate::NoRuntime) outside a Tokio runtime.
    pub fn try_with_config(
        config: Config,
        limiter: impl RateLimiter<T> + 'static,
    ) -> Result<Self, crate::NoRuntime> {
        Ok(Self {
            queue: DelayingQueue::try_with_config(config)?,
            limiter: Arc::new(limiter),
        })
    }

    /// A queue and its timer task, for the caller to spawn (see [`DelayingQueue::pair`]).
    pub fn pair(
        config: Config,
        limiter: impl RateLimiter<T> + 'static,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let (queue, timer) = DelayingQueue::pair(config);
        let limiter: Arc<dyn RateLimiter<T>> = Arc::new(limiter);
        (Self { queue, limiter }, timer)
    }

    /// Adds `item` after the delay the rate limiter gives it (which counts one more failure).
    ///
    /// # Errors
    ///
    /// [`ShutDown`], holding `item`, once the queue is shutting down; the limiter is then not
    /// consulted, so a refused retry is not counted as a failure.
    pub fn add_rate_limited(&self, item: T) -> Result<(), ShutDown<T>> {
        if self.queue.is_shutting_down() {
            return Err(ShutDown(item));
        }
        let delay = self.limiter.when(&item);
        self.queue.add_after(item, delay)
    }

    /// Stops the rate limiter tracking `item` (after success, or giving up). It does not replace
    /// [`done`](super::WorkQueue::done), which must still be called.
    pub fn forget(&self, item: &T) {
        self.limiter.forget(item);
    }

    /// How many times `item` was rate-limited since it was last forgotten.
    pub fn num_requeues(&self, item: &T) -> usize {
        self.limiter.num_requeues(item)
    }

    /// The rate limiter.
    pub fn rate_limiter(&self) -> &Arc<dyn RateLimiter<T>> {
        &self.limiter
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::{Instant, advance, timeout};

    use super::super::rate_limiter::{Bucket, ItemExponentialFailure};
    use super::*;

    async fn settle() {
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn add_rate_limited_waits_the_limiters_delay() {
        let q = RateLimitingQueue::with_rate_limiter(ItemExponentialFailure::new(
            Duration::from_millis(10),
            Duration::from_secs(1),
        ));
        q.add_rate_limited("a").unwrap();
        q.add_rate_limited("b").unwrap();
        q.add_rate_limited("b").unwrap(); // 20 ms, but the earlier 10 ms deadline wins
        settle().await;
        assert_eq!(q.len(), 0);
        let start = Instant::now();
        let a = timeout(Duration::from_secs(5), q.get())
            .await
            .expect("get likely deadlocked");
        assert_eq!(a, Some("a"));
        assert_eq!(start.elapsed(), Duration::from_millis(10));
        advance(Duration::ZERO).await;
        settle().await;
        assert_eq!(q.try_get(), Some("b"));
    }

    #[tokio::test(start_paused = true)]
    async fn forget_resets_num_requeues() {
        let q = RateLimitingQueue::new();
        for _ in 0..3 {
            q.add_rate_limited(1).unwrap();
        }
        assert_eq!(q.num_requeues(&1), 3);
        q.forget(&1);
        assert_eq!(q.num_requeues(&1), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn add_rate_limited_to_shut_down_queue_hands_the_item_back_uncounted() {
        let q = RateLimitingQueue::new();
        q.shutdown();
        assert_eq!(q.add_rate_limited("a").unwrap_err().into_inner(), "a");
        assert_eq!(q.num_requeues(&"a"), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn overall_bucket_paces_retries_of_many_items() {
        let q = RateLimitingQueue::with_rate_limiter(Bucket::new(10.0, 1));
        for i in 0..3 {
            q.add_rate_limited(i).unwrap();
        }
        settle().await;
        assert_eq!(q.try_get(), Some(0));
        advance(Duration::from_millis(100)).await;
        settle().await;
        assert_eq!(q.try_get(), Some(1));
        assert_eq!(q.try_get(), None);
        advance(Duration::from_millis(100)).await;
        settle().await;
        assert_eq!(q.try_get(), Some(2));
    }
}
