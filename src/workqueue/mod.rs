//! Work queues for controllers: client-go's `util/workqueue`, generic over the item type.
//!
//! Three layers, each a cheap-to-clone handle that derefs to the one below:
//!
//! * [`WorkQueue`]: deduplicating FIFO where an item is never processed by two workers at once
//!   (`add`, `get`, `done`, `shutdown`, `shutdown_with_drain`);
//! * [`DelayingQueue`]: adds `add_after`, backed by a timer task;
//! * [`RateLimitingQueue`]: adds `add_rate_limited`, `forget` and `num_requeues` through a
//!   [`RateLimiter`] ([`ItemExponentialFailure`], [`Bucket`], [`FastSlow`], [`MaxOf`],
//!   [`WithMaxWait`], [`default_controller_rate_limiter`]).
//!
//! Metrics go through a [`MetricsProvider`] under client-go's names (see [`names`]).
//! Unlike client-go, adding to a queue that is shutting down returns the item in a [`ShutDown`]
//! error rather than dropping it silently.

mod delaying;
mod metrics;

mod queue;
mod rate_limiter;
mod rate_limiting;

pub use delaying::DelayingQueue;
pub use metrics::{
    CounterMetric, GaugeMetric, HistogramMetric, MetricsProvider, NoopMetric, NoopMetricsProvider,
    SettableGaugeMetric, names,
};
pub use queue::{Config, Processing, QueueItem, ShutDown, WorkQueue};
pub use rate_limiter::{
    Bucket, FastSlow, ItemExponentialFailure, MaxOf, RateLimiter, WithMaxWait,
    default_controller_rate_limiter,
};
pub use rate_limiting::RateLimitingQueue;

// Compile-time check: the handles and the futures of their async methods can cross threads.
const _: () = {
    fn send_sync<T: Send + Sync + Clone>() {}
    fn send<F: Send>(_: &F) {}
    #[allow(dead_code)]
    fn check(q: &RateLimitingQueue<String>) {
        send_sync::<WorkQueue<String>>();
        send_sync::<DelayingQueue<String>>();
        send_sync::<RateLimitingQueue<String>>();
        send(&q.get());
        send(&q.shutdown_with_drain());
        send(&ShutDown(String::new()));
    }
};
