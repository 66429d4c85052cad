//! Informer metrics, with client-go 1.36's names and labels (client-go `informer_metrics.go`;
//! the Prometheus adapter in `k8s.io/component-base/metrics/prometheus/clientgo/fifo`).
//!
//! As in client-go, an informer reports only when it has a name ([`InformerId`], set with
//! [`InformerConfig::identity`](super::InformerConfig::identity) or the factory's
//! [`FactoryConfig::informer_name`](crate::FactoryConfig::informer_name)), and only the
//! in-order FIFO reports (client-go's DeltaFIFO has no queue metrics and never sets the store's
//! resourceVersion).

use std::sync::Arc;

use crate::workqueue::{HistogramMetric, NoopMetric, SettableGaugeMetric};

/// Metric names and histogram buckets as client-go's Prometheus adapter registers them, each
/// with the labels `name`, `group`, `version` and `resource` ([`InformerId`]).
pub mod names {
    /// Gauge: entries queued in the FIFO.
    pub const QUEUED_ITEMS: &str = "informer_queued_items";
    /// Histogram: seconds taken to process what was popped from the FIFO.
    pub const PROCESSING_LATENCY: &str = "informer_processing_latency_seconds";
    /// Gauge: the 15 least significant digits of the store's resourceVersion.
    pub const STORE_RESOURCE_VERSION: &str = "informer_store_resource_version";
    /// Buckets of [`PROCESSING_LATENCY`], in seconds.
    pub const PROCESSING_LATENCY_BUCKETS: [f64; 12] = [
        0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ];
}

/// Who an informer is in metrics and logs (client-go `InformerNameAndResource`): a name chosen
/// by the program (client-go `WithInformerName`), and the group, version and resource (plural)
/// it watches.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct InformerId {
    /// The informer's name; metrics are reported only when it is not empty.
    pub name: String,
    /// API group (`""` for the core group).
    pub group: String,
    /// API version.
    pub version: String,
    /// Resource, plural (`pods`).
    pub resource: String,
}

impl InformerId {
    /// An identity.
    pub fn new(
        name: impl Into<String>,
        group: impl Into<String>,
        version: impl Into<String>,
        resource: impl Into<String>,
    ) -> Self {
        Self {
            name: name.into(),
            group: group.into(),
            version: version.into(),
            resource: resource.into(),
        }
    }

    /// The identity of an informer named `name` over `K` (a type with static type information,
    /// such as every `k8s-openapi` type).
    pub fn of<K: kube::Resource<DynamicType = ()>>(name: impl Into<String>) -> Self {
        Self::new(name, K::group(&()), K::version(&()), K::plural(&()))
    }
}

/// Creates an informer's metric handles (client-go `InformerMetricsProvider`). Every method
/// defaults to a no-op, so a provider implements what it exports. Unlike client-go there is no
/// process-wide provider: it is given per informer
/// ([`InformerConfig::metrics_provider`](super::InformerConfig::metrics_provider)) or per
/// factory.
pub trait InformerMetricsProvider: Send + Sync {
    /// [`names::QUEUED_ITEMS`].
    fn new_queued_items_metric(&self, _id: &InformerId) -> Box<dyn SettableGaugeMetric> {
        Box::new(NoopMetric)
    }
    /// [`names::PROCESSING_LATENCY`].
    fn new_processing_latency_metric(&self, _id: &InformerId) -> Box<dyn HistogramMetric> {
        Box::new(NoopMetric)
    }
    /// [`names::STORE_RESOURCE_VERSION`].
    fn new_store_resource_version_metric(&self, _id: &InformerId) -> Box<dyn SettableGaugeMetric> {
        Box::new(NoopMetric)
    }
}

/// The FIFO's metric handles.
pub(crate) struct FifoMetrics {
    pub(crate) queued_items: Box<dyn SettableGaugeMetric>,
    pub(crate) processing_latency: Box<dyn HistogramMetric>,
}

impl FifoMetrics {
    pub(crate) fn new(id: &InformerId, provider: &dyn InformerMetricsProvider) -> Self {
        Self {
            queued_items: provider.new_queued_items_metric(id),
            processing_latency: provider.new_processing_latency_metric(id),
        }
    }
}

/// The value client-go reports for a resourceVersion: its 15 least significant decimal digits
/// (so it fits a float exactly), or nothing when it is not a number.
pub(crate) fn resource_version_metric_value(rv: &str) -> Option<f64> {
    if rv.is_empty() || !rv.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let tail = &rv[rv.len().saturating_sub(15)..];
    tail.parse::<u64>().ok().map(|v| v as f64)
}

/// Handles shared by everything that reports for one informer.
#[derive(Clone)]
pub(crate) struct InformerMetrics {
    pub(crate) id: InformerId,
    pub(crate) provider: Arc<dyn InformerMetricsProvider>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_versions_are_reported_by_their_last_fifteen_digits() {
        assert_eq!(resource_version_metric_value("12345"), Some(12345.0));
        assert_eq!(
            resource_version_metric_value("9876543210123456789"),
            Some(543_210_123_456_789.0)
        );
        assert_eq!(resource_version_metric_value(""), None);
        assert_eq!(resource_version_metric_value("abc"), None);
    }
}
