//! Prometheus export (feature `prometheus`): workqueue and informer metrics under client-go's
//! names, labels and buckets, through [`prometheus_client`].
//!
//! [`PrometheusMetrics`] registers the ten metric families of client-go's Prometheus adapters
//! (`k8s.io/component-base/metrics/prometheus/workqueue` and `.../clientgo/fifo`) into your
//! [`Registry`], and is both the workqueue [`MetricsProvider`] and the
//! [`InformerMetricsProvider`], so dashboards and alerts written for Go controllers work on a
//! Rust one unchanged:
//!
//! | series | type | labels |
//! |---|---|---|
//! | `workqueue_depth` | gauge | `name` |
//! | `workqueue_adds_total` | counter | `name` |
//! | `workqueue_queue_duration_seconds` | histogram | `name` |
//! | `workqueue_work_duration_seconds` | histogram | `name` |
//! | `workqueue_unfinished_work_seconds` | gauge | `name` |
//! | `workqueue_longest_running_processor_seconds` | gauge | `name` |
//! | `workqueue_retries_total` | counter | `name` |
//! | `informer_queued_items` | gauge | `name`, `group`, `version`, `resource` |
//! | `informer_processing_latency_seconds` | histogram | `name`, `group`, `version`, `resource` |
//! | `informer_store_resource_version` | gauge | `name`, `group`, `version`, `resource` |
//!
//! As in client-go, only named queues ([`Config::name`](crate::workqueue::Config::name)) and
//! named informers ([`InformerId`], or [`FactoryConfig::informer_name`](crate::FactoryConfig::informer_name))
//! report, and only in-order informers ([`FifoMode::InOrder`](crate::FifoMode::InOrder)) report
//! the three informer metrics: a DeltaFIFO informer reports none (client-go's DeltaFIFO has no
//! queue metrics and never sets the store's resourceVersion).
//!
//! ```
//! use std::sync::Arc;
//! use kube_informer::{
//!     RateLimitingQueue, default_controller_rate_limiter,
//!     prometheus::{PrometheusMetrics, prometheus_client::{encoding::text::encode, registry::Registry}},
//!     workqueue::Config,
//! };
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let mut registry = Registry::default();
//! let metrics = Arc::new(PrometheusMetrics::new(&mut registry));
//! let queue: RateLimitingQueue<String> = RateLimitingQueue::with_config(
//!     Config::default().name("pods").metrics_provider(metrics.clone()),
//!     default_controller_rate_limiter(),
//! );
//! queue.add("default/web".to_owned()).unwrap();
//!
//! let mut text = String::new();
//! encode(&mut text, &registry).unwrap();
//! assert!(text.contains("workqueue_adds_total{name=\"pods\"} 1\n"));
//! assert!(text.contains("workqueue_depth{name=\"pods\"} 1\n"));
//! # });
//! ```
//!
//! The metric types of `prometheus-client` implement this crate's metric traits
//! ([`GaugeMetric`], [`CounterMetric`], [`HistogramMetric`], [`SettableGaugeMetric`]), so a
//! provider with a different layout (say, an extra `controller` label) is a few lines.
//!
//! Use the `prometheus-client` version this crate re-exports ([`prometheus_client`]), or the same
//! version in your own `Cargo.toml`; a registry of another version is another type.

use std::sync::atomic::{AtomicI64, AtomicU64};

pub use prometheus_client;
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{MetricType, counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::{Metric, Registry, Unit},
};

use crate::{
    InformerId, InformerMetricsProvider, MetricsProvider,
    informer::metric_names as informer_names,
    workqueue::{CounterMetric, GaugeMetric, HistogramMetric, SettableGaugeMetric, names},
};

/// The labels of a workqueue series (client-go: `name`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct QueueLabels {
    name: String,
}

/// The labels of an informer series (client-go: `name`, `group`, `version`, `resource`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct InformerLabels {
    name: String,
    group: String,
    version: String,
    resource: String,
}

impl From<&InformerId> for InformerLabels {
    fn from(id: &InformerId) -> Self {
        Self {
            name: id.name.clone(),
            group: id.group.clone(),
            version: id.version.clone(),
            resource: id.resource.clone(),
        }
    }
}

/// A gauge holding an `f64`, for values that are set (seconds, counts reported whole).
type FloatGauge = Gauge<f64, AtomicU64>;
/// A family of histograms that all share one set of buckets.
type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Workqueue and informer metrics in a `prometheus-client` [`Registry`], with client-go's names,
/// labels and buckets (see the [module docs](self)).
///
/// Create it once per registry and share it: it is the provider of every queue
/// ([`Config::metrics_provider`](crate::workqueue::Config::metrics_provider)) and every informer
/// ([`InformerConfig::metrics_provider`](crate::InformerConfig::metrics_provider),
/// [`FactoryConfig::metrics_provider`](crate::FactoryConfig::metrics_provider)). Clones share the
/// same series. Queues or informers with the same name (and resource) share their series, as
/// with client-go's `WithLabelValues`.
#[derive(Debug, Clone)]
pub struct PrometheusMetrics {
    depth: Family<QueueLabels, Gauge>,
    adds: Family<QueueLabels, Counter>,
    queue_duration: HistogramFamily<QueueLabels>,
    work_duration: HistogramFamily<QueueLabels>,
    unfinished_work: Family<QueueLabels, FloatGauge>,
    longest_running_processor: Family<QueueLabels, FloatGauge>,
    retries: Family<QueueLabels, Counter>,
    queued_items: Family<InformerLabels, FloatGauge>,
    processing_latency: HistogramFamily<InformerLabels>,
    store_resource_version: Family<InformerLabels, FloatGauge>,
}

fn duration_histogram() -> Histogram {
    Histogram::new(names::DURATION_BUCKETS)
}

fn processing_latency_histogram() -> Histogram {
    Histogram::new(informer_names::PROCESSING_LATENCY_BUCKETS)
}

/// Registers `metric` so that its series are exposed under exactly `name`.
///
/// `prometheus-client` appends `_total` to counters and the unit to names registered with one,
/// so both come off client-go's full name first: `workqueue_adds_total` is registered as
/// `workqueue_adds` (and exposed as `workqueue_adds_total`, not `workqueue_adds_total_total`),
/// and `workqueue_queue_duration_seconds` as `workqueue_queue_duration` in seconds (which also
/// gives OpenMetrics its `# UNIT` line).
fn register(registry: &mut Registry, name: &str, help: &str, metric: impl Metric) {
    let name = match metric.metric_type() {
        MetricType::Counter => name.strip_suffix("_total").unwrap_or(name),
        _ => name,
    };
    match name.strip_suffix("_seconds") {
        Some(stem) => registry.register_with_unit(stem, help, Unit::Seconds, metric),
        None => registry.register(name, help, metric),
    }
}

impl PrometheusMetrics {
    /// Registers the workqueue and informer metric families into `registry` and returns the
    /// provider that feeds them.
    ///
    /// Pass the root registry (or one with labels only): a registry made with a prefix
    /// (`Registry::with_prefix`, `sub_registry_with_prefix`) prefixes every name, and the
    /// series no longer carry client-go's names. Call it once per registry: a second call
    /// registers every family again, and the exposition then names each family twice.
    ///
    /// Families with no series yet (say, informer metrics in a program without named informers)
    /// are exposed as their `# HELP` and `# TYPE` lines only.
    pub fn new(registry: &mut Registry) -> Self {
        let metrics = Self {
            depth: Family::default(),
            adds: Family::default(),
            queue_duration: Family::new_with_constructor(duration_histogram),
            work_duration: Family::new_with_constructor(duration_histogram),
            unfinished_work: Family::default(),
            longest_running_processor: Family::default(),
            retries: Family::default(),
            queued_items: Family::default(),
            processing_latency: Family::new_with_constructor(processing_latency_histogram),
            store_resource_version: Family::default(),
        };
        // Help texts are client-go's; `prometheus-client` ends each with a full stop.
        let r = registry;
        register(
            r,
            names::DEPTH,
            "Current depth of workqueue",
            metrics.depth.clone(),
        );
        register(
            r,
            names::ADDS,
            "Total number of adds handled by workqueue",
            metrics.adds.clone(),
        );
        register(
            r,
            names::QUEUE_DURATION,
            "How long in seconds an item stays in workqueue before being requested",
            metrics.queue_duration.clone(),
        );
        register(
            r,
            names::WORK_DURATION,
            "How long in seconds processing an item from workqueue takes",
            metrics.work_duration.clone(),
        );
        register(
            r,
            names::UNFINISHED_WORK,
            "How many seconds of work has been done that is in progress and hasn't been \
             observed by work_duration. Large values indicate stuck threads. One can deduce the \
             number of stuck threads by observing the rate at which this increases",
            metrics.unfinished_work.clone(),
        );
        register(
            r,
            names::LONGEST_RUNNING_PROCESSOR,
            "How many seconds has the longest running processor for workqueue been running",
            metrics.longest_running_processor.clone(),
        );
        register(
            r,
            names::RETRIES,
            "Total number of retries handled by workqueue",
            metrics.retries.clone(),
        );
        register(
            r,
            informer_names::QUEUED_ITEMS,
            "Number of items currently queued in the FIFO",
            metrics.queued_items.clone(),
        );
        register(
            r,
            informer_names::PROCESSING_LATENCY,
            "Time taken to process events after popping from the queue",
            metrics.processing_latency.clone(),
        );
        register(
            r,
            informer_names::STORE_RESOURCE_VERSION,
            "The 15 least significant digits of the resource version of the store",
            metrics.store_resource_version.clone(),
        );
        metrics
    }
}

fn queue(name: &str) -> QueueLabels {
    QueueLabels {
        name: name.to_owned(),
    }
}

impl MetricsProvider for PrometheusMetrics {
    fn new_depth_metric(&self, q: &str) -> Box<dyn GaugeMetric> {
        Box::new(self.depth.get_or_create_owned(&queue(q)))
    }
    fn new_adds_metric(&self, q: &str) -> Box<dyn CounterMetric> {
        Box::new(self.adds.get_or_create_owned(&queue(q)))
    }
    fn new_latency_metric(&self, q: &str) -> Box<dyn HistogramMetric> {
        Box::new(self.queue_duration.get_or_create_owned(&queue(q)))
    }
    fn new_work_duration_metric(&self, q: &str) -> Box<dyn HistogramMetric> {
        Box::new(self.work_duration.get_or_create_owned(&queue(q)))
    }
    fn new_unfinished_work_seconds_metric(&self, q: &str) -> Box<dyn SettableGaugeMetric> {
        Box::new(self.unfinished_work.get_or_create_owned(&queue(q)))
    }
    fn new_longest_running_processor_seconds_metric(
        &self,
        q: &str,
    ) -> Box<dyn SettableGaugeMetric> {
        Box::new(
            self.longest_running_processor
                .get_or_create_owned(&queue(q)),
        )
    }
    fn new_retries_metric(&self, q: &str) -> Box<dyn CounterMetric> {
        Box::new(self.retries.get_or_create_owned(&queue(q)))
    }
}

impl InformerMetricsProvider for PrometheusMetrics {
    fn new_queued_items_metric(&self, id: &InformerId) -> Box<dyn SettableGaugeMetric> {
        Box::new(self.queued_items.get_or_create_owned(&id.into()))
    }
    fn new_processing_latency_metric(&self, id: &InformerId) -> Box<dyn HistogramMetric> {
        Box::new(self.processing_latency.get_or_create_owned(&id.into()))
    }
    fn new_store_resource_version_metric(&self, id: &InformerId) -> Box<dyn SettableGaugeMetric> {
        Box::new(self.store_resource_version.get_or_create_owned(&id.into()))
    }
}

impl GaugeMetric for Gauge<i64, AtomicI64> {
    fn inc(&self) {
        Gauge::inc(self);
    }
    fn dec(&self) {
        Gauge::dec(self);
    }
}

impl SettableGaugeMetric for Gauge<f64, AtomicU64> {
    fn set(&self, value: f64) {
        Gauge::set(self, value);
    }
}

impl CounterMetric for Counter<u64, AtomicU64> {
    fn inc(&self) {
        Counter::inc(self);
    }
}

impl HistogramMetric for Histogram {
    fn observe(&self, value: f64) {
        Histogram::observe(self, value);
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::text::encode;

    use super::*;

    fn exposition(registry: &Registry) -> String {
        let mut text = String::new();
        encode(&mut text, registry).unwrap();
        text
    }

    #[test]
    fn names_carry_no_doubled_suffix_and_seconds_have_a_unit() {
        let mut registry = Registry::default();
        let m = PrometheusMetrics::new(&mut registry);
        m.new_adds_metric("q").inc();
        m.new_retries_metric("q").inc();
        m.new_latency_metric("q").observe(0.5);
        let text = exposition(&registry);
        assert!(
            text.contains("\nworkqueue_adds_total{name=\"q\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("\nworkqueue_retries_total{name=\"q\"} 1\n"),
            "{text}"
        );
        assert!(!text.contains("_total_total"), "{text}");
        assert!(!text.contains("_seconds_seconds"), "{text}");
        assert!(
            text.contains("# UNIT workqueue_queue_duration_seconds seconds\n"),
            "{text}"
        );
        assert!(
            text.contains("workqueue_queue_duration_seconds_count{name=\"q\"} 1\n"),
            "{text}"
        );
    }

    #[test]
    fn clones_and_same_names_share_series() {
        let mut registry = Registry::default();
        let m = PrometheusMetrics::new(&mut registry);
        let id = InformerId::new("inf", "", "v1", "pods");
        m.new_depth_metric("q").inc();
        m.clone().new_depth_metric("q").inc();
        m.new_store_resource_version_metric(&id).set(42.0);
        let text = exposition(&registry);
        assert!(text.contains("workqueue_depth{name=\"q\"} 2\n"), "{text}");
        assert!(
            text.contains(
                "informer_store_resource_version{name=\"inf\",group=\"\",version=\"v1\",resource=\"pods\"} 42.0\n"
            ),
            "{text}"
        );
    }
}
