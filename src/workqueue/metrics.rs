//! Workqueue metrics: the hook through which a queue reports to Prometheus (or anything else).
//!
//! Mirrors client-go's `util/workqueue/metrics.go`: a [`MetricsProvider`] creates one handle per
//! metric and queue name, and the queue drives the handles. Nothing here depends on a metrics
//! library; an adapter for `prometheus` or `metrics` is a few lines implementing the provider.

use std::{collections::HashMap, hash::Hash, sync::Arc};

use tokio::time::Instant;

/// Metric names as client-go's Prometheus adapter registers them
/// (`k8s.io/component-base/metrics/prometheus/workqueue`), each with the queue name as the
/// `name` label, so dashboards written for Go controllers work unchanged.
pub mod names {
    /// Gauge: current depth of the queue (items added and not yet handed out by `get`).
    pub const DEPTH: &str = "workqueue_depth";
    /// Counter: total number of adds handled by the queue (deduplicated adds are not counted).
    pub const ADDS: &str = "workqueue_adds_total";
    /// Histogram: seconds an item stays in the queue before being requested.
    pub const QUEUE_DURATION: &str = "workqueue_queue_duration_seconds";
    /// Histogram: seconds processing an item takes (from `get` to `done`).
    pub const WORK_DURATION: &str = "workqueue_work_duration_seconds";
    /// Gauge: seconds of work in progress not yet observed by `work_duration`; large values
    /// indicate stuck workers.
    pub const UNFINISHED_WORK: &str = "workqueue_unfinished_work_seconds";
    /// Gauge: seconds the longest-running processor has been running.
    pub const LONGEST_RUNNING_PROCESSOR: &str = "workqueue_longest_running_processor_seconds";
    /// Counter: total number of retries (`add_after` / `add_rate_limited` calls).
    pub const RETRIES: &str = "workqueue_retries_total";
    /// Histogram buckets (seconds) client-go's Prometheus adapter uses for both duration
    /// histograms (`k8s.io/component-base/metrics/prometheus/workqueue`:
    /// `ExponentialBuckets(10e-9, 10, 10)`), i.e. 10 ns to 10 s.
    pub const DURATION_BUCKETS: [f64; 10] =
        [1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0];
}

/// A value that goes up and down by one (client-go's `GaugeMetric`).
pub trait GaugeMetric: Send + Sync {
    /// Adds one.
    fn inc(&self);
    /// Subtracts one.
    fn dec(&self);
}

/// A value that is set outright (client-go's `SettableGaugeMetric`).
pub trait SettableGaugeMetric: Send + Sync {
    /// Sets the value.
    fn set(&self, value: f64);
}

/// A value that only goes up (client-go's `CounterMetric`).
pub trait CounterMetric: Send + Sync {
    /// Adds one.
    fn inc(&self);
}

/// A distribution of observations (client-go's `HistogramMetric`).
pub trait HistogramMetric: Send + Sync {
    /// Records one observation.
    fn observe(&self, value: f64);
}

/// A metric that ignores everything; what [`MetricsProvider`]'s default methods return.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopMetric;

impl GaugeMetric for NoopMetric {
    fn inc(&self) {}
    fn dec(&self) {}
}

impl SettableGaugeMetric for NoopMetric {
    fn set(&self, _value: f64) {}
}

impl CounterMetric for NoopMetric {
    fn inc(&self) {}
}

impl HistogramMetric for NoopMetric {
    fn observe(&self, _value: f64) {}
}

/// Creates the metric handles of one named queue (client-go's `MetricsProvider`).
///
/// Each method receives the queue name, which a Prometheus adapter uses as the `name` label of
/// the metric named in its documentation (see [`names`]). Every method defaults to a
/// [`NoopMetric`], so a provider implements only what it exports.
///
/// Unlike client-go there is no process-wide `SetProvider`: the provider is passed per queue in
/// [`Config::metrics_provider`](super::Config::metrics_provider). As in client-go, a queue
/// without a name reports nothing.
///
/// ```
/// use std::sync::{Arc, atomic::{AtomicI64, Ordering}};
/// use kube_informer::workqueue::{GaugeMetric, MetricsProvider};
///
/// #[derive(Default)]
/// struct Depth(AtomicI64);
/// impl GaugeMetric for Depth {
///     fn inc(&self) { self.0.fetch_add(1, Ordering::Relaxed); }
///     fn dec(&self) { self.0.fetch_sub(1, Ordering::Relaxed); }
/// }
///
/// struct OnlyDepth;
/// impl MetricsProvider for OnlyDepth {
///     fn new_depth_metric(&self, _queue: &str) -> Box<dyn GaugeMetric> {
///         Box::new(Depth::default())
///     }
/// }
/// ```
pub trait MetricsProvider: Send + Sync {
    /// `workqueue_depth`.
    fn new_depth_metric(&self, _queue: &str) -> Box<dyn GaugeMetric> {
        Box::new(NoopMetric)
    }
    /// `workqueue_adds_total`.
    fn new_adds_metric(&self, _queue: &str) -> Box<dyn CounterMetric> {
        Box::new(NoopMetric)
    }
    /// `workqueue_queue_duration_seconds`.
    fn new_latency_metric(&self, _queue: &str) -> Box<dyn HistogramMetric> {
        Box::new(NoopMetric)
    }
    /// `workqueue_work_duration_seconds`.
    fn new_work_duration_metric(&self, _queue: &str) -> Box<dyn HistogramMetric> {
        Box::new(NoopMetric)
    }
    /// `workqueue_unfinished_work_seconds`.
    fn new_unfinished_work_seconds_metric(&self, _queue: &str) -> Box<dyn SettableGaugeMetric> {
        Box::new(NoopMetric)
    }
    /// `workqueue_longest_running_processor_seconds`.
    fn new_longest_running_processor_seconds_metric(
        &self,
        _queue: &str,
    ) -> Box<dyn SettableGaugeMetric> {
        Box::new(NoopMetric)
    }
    /// `workqueue_retries_total`.
    fn new_retries_metric(&self, _queue: &str) -> Box<dyn CounterMetric> {
        Box::new(NoopMetric)
    }
}

/// The provider that reports nothing (client-go's `noopMetricsProvider`), the default.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopMetricsProvider;

impl MetricsProvider for NoopMetricsProvider {}

/// The per-queue metrics state; the queue calls it with its lock held, like client-go's
/// `defaultQueueMetrics`, so the per-item timestamps need no lock of their own.
pub(crate) struct QueueMetrics<T> {
    depth: Box<dyn GaugeMetric>,
    adds: Box<dyn CounterMetric>,
    latency: Box<dyn HistogramMetric>,
    work_duration: Box<dyn HistogramMetric>,
    unfinished_work_seconds: Box<dyn SettableGaugeMetric>,
    longest_running_processor: Box<dyn SettableGaugeMetric>,
    add_times: HashMap<T, Instant>,
    processing_start_times: HashMap<T, Instant>,
}

impl<T: Clone + Eq + Hash> QueueMetrics<T> {
    /// `None` when the queue should report nothing: as in client-go's `newQueueMetrics`, an
    /// unnamed queue or no provider means no metrics (and no bookkeeping cost).
    pub(crate) fn new(name: &str, provider: Option<&Arc<dyn MetricsProvider>>) -> Option<Self> {
        let p = provider.filter(|_| !name.is_empty())?;
        Some(Self {
            depth: p.new_depth_metric(name),
            adds: p.new_adds_metric(name),
            latency: p.new_latency_metric(name),
            work_duration: p.new_work_duration_metric(name),
            unfinished_work_seconds: p.new_unfinished_work_seconds_metric(name),
            longest_running_processor: p.new_longest_running_processor_seconds_metric(name),
            add_times: HashMap::new(),
            processing_start_times: HashMap::new(),
        })
    }

    pub(crate) fn add(&mut self, item: &T) {
        self.adds.inc();
        self.depth.inc();
        if !self.add_times.contains_key(item) {
            self.add_times.insert(item.clone(), Instant::now());
        }
    }

    pub(crate) fn get(&mut self, item: &T) {
        let now = Instant::now();
        self.depth.dec();
        self.processing_start_times.insert(item.clone(), now);
        if let Some(start) = self.add_times.remove(item) {
            self.latency.observe((now - start).as_secs_f64());
        }
    }

    pub(crate) fn done(&mut self, item: &T) {
        if let Some(start) = self.processing_start_times.remove(item) {
            self.work_duration.observe(start.elapsed().as_secs_f64());
        }
    }

    pub(crate) fn update_unfinished_work(&self) {
        let now = Instant::now();
        let (mut total, mut oldest) = (0.0_f64, 0.0_f64);
        for start in self.processing_start_times.values() {
            let age = (now - *start).as_secs_f64();
            total += age;
            oldest = oldest.max(age);
        }
        self.unfinished_work_seconds.set(total);
        self.longest_running_processor.set(oldest);
    }
}

/// The retry counter of a delaying queue (client-go's `retryMetrics`); `None` when unnamed.
pub(crate) fn retries_metric(
    name: &str,
    provider: Option<&Arc<dyn MetricsProvider>>,
) -> Option<Box<dyn CounterMetric>> {
    provider
        .filter(|_| !name.is_empty())
        .map(|p| p.new_retries_metric(name))
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::{Arc, Mutex as StdMutex};

    use super::*;

    /// A provider recording every call as `(metric name, queue name) -> values`, for tests of
    /// the queues that use metrics.
    /// `(metric name, queue name)` to the values recorded.
    type Recorded = HashMap<(&'static str, String), Vec<f64>>;

    #[derive(Default, Clone)]
    pub(crate) struct Recorder(Arc<StdMutex<Recorded>>);

    struct Handle {
        rec: Recorder,
        key: (&'static str, String),
    }

    impl Handle {
        fn push(&self, v: f64) {
            let mut map = self.rec.0.lock().unwrap();
            map.entry(self.key.clone()).or_default().push(v);
        }
    }

    impl GaugeMetric for Handle {
        fn inc(&self) {
            self.push(1.0);
        }
        fn dec(&self) {
            self.push(-1.0);
        }
    }
    impl SettableGaugeMetric for Handle {
        fn set(&self, value: f64) {
            self.push(value);
        }
    }
    impl CounterMetric for Handle {
        fn inc(&self) {
            self.push(1.0);
        }
    }
    impl HistogramMetric for Handle {
        fn observe(&self, value: f64) {
            self.push(value);
        }
    }

    impl Recorder {
        fn handle(&self, metric: &'static str, queue: &str) -> Box<Handle> {
            Box::new(Handle {
                rec: self.clone(),
                key: (metric, queue.to_owned()),
            })
        }

        /// The values recorded for one metric of one queue.
        pub(crate) fn values(&self, metric: &'static str, queue: &str) -> Vec<f64> {
            let map = self.0.lock().unwrap();
            map.get(&(metric, queue.to_owned()))
                .cloned()
                .unwrap_or_default()
        }

        /// The sum of the values recorded (a gauge's level, a counter's total).
        pub(crate) fn sum(&self, metric: &'static str, queue: &str) -> f64 {
            self.values(metric, queue).iter().sum()
        }
    }

    impl MetricsProvider for Recorder {
        fn new_depth_metric(&self, q: &str) -> Box<dyn GaugeMetric> {
            self.handle(names::DEPTH, q)
        }
        fn new_adds_metric(&self, q: &str) -> Box<dyn CounterMetric> {
            self.handle(names::ADDS, q)
        }
        fn new_latency_metric(&self, q: &str) -> Box<dyn HistogramMetric> {
            self.handle(names::QUEUE_DURATION, q)
        }
        fn new_work_duration_metric(&self, q: &str) -> Box<dyn HistogramMetric> {
            self.handle(names::WORK_DURATION, q)
        }
        fn new_unfinished_work_seconds_metric(&self, q: &str) -> Box<dyn SettableGaugeMetric> {
            self.handle(names::UNFINISHED_WORK, q)
        }
        fn new_longest_running_processor_seconds_metric(
            &self,
            q: &str,
        ) -> Box<dyn SettableGaugeMetric> {
            self.handle(names::LONGEST_RUNNING_PROCESSOR, q)
        }
        fn new_retries_metric(&self, q: &str) -> Box<dyn CounterMetric> {
            self.handle(names::RETRIES, q)
        }
    }

    #[test]
    fn unnamed_queue_or_missing_provider_reports_nothing() {
        let p: Arc<dyn MetricsProvider> = Arc::new(Recorder::default());
        assert!(QueueMetrics::<u32>::new("", Some(&p)).is_none());
        assert!(QueueMetrics::<u32>::new("q", None).is_none());
        assert!(retries_metric("", Some(&p)).is_none());
        assert!(QueueMetrics::<u32>::new("q", Some(&p)).is_some());
    }

    #[test]
    fn noop_provider_hands_out_noop_metrics() {
        let p = NoopMetricsProvider;
        p.new_depth_metric("q").inc();
        p.new_adds_metric("q").inc();
        p.new_latency_metric("q").observe(1.0);
        p.new_unfinished_work_seconds_metric("q").set(1.0);
    }
}
