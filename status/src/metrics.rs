//! What the status writer counts: writes by kind, failures by kind, refusals for want of a valid
//! leadership, and the time from becoming leader to the first write. The caller decides where
//! they are served: [`StatusMetrics::register`] puts them in its `prometheus_client` registry
//! (or a sub-registry, which prefixes their names).

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::key::Kind;

/// `kind`: the Gateway API kind a status write was for.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    /// GatewayClass, Gateway or HTTPRoute.
    pub kind: &'static str,
}

/// The status writer's metrics.
#[derive(Debug)]
pub struct StatusMetrics {
    /// Statuses written, by kind (`status_writes_total`).
    pub status_writes: Family<KindLabel, Counter>,
    /// Status writes that failed (after retries), by kind (`status_write_errors_total`).
    pub status_write_errors: Family<KindLabel, Counter>,
    /// Status writes not made because this replica was not (or no longer) a valid leader
    /// (`status_writes_not_leader_total`).
    pub status_writes_not_leader: Counter,
    /// Seconds from becoming leader to the first status write of that leadership
    /// (`first_status_write_seconds`).
    pub first_write_seconds: Histogram,
}

impl Default for StatusMetrics {
    /// Metrics that count but are served nowhere, until [`StatusMetrics::register`]ed.
    fn default() -> Self {
        StatusMetrics {
            status_writes: Family::default(),
            status_write_errors: Family::default(),
            status_writes_not_leader: Counter::default(),
            // 1 ms to about 16 s.
            first_write_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 15)),
        }
    }
}

impl StatusMetrics {
    /// Creates every kind's series of `status_writes` and `status_write_errors` at 0. A series
    /// that first appears at 1 hides its first increment from Prometheus' `rate` and `increase`,
    /// so an alert on a kind's first failed write would never see it; shown at 0 from the start,
    /// every increment counts.
    ///
    /// # Examples
    ///
    /// ```
    /// use prometheus_client::registry::Registry;
    /// use gateway_leader_status::StatusMetrics;
    ///
    /// let mut registry = Registry::default();
    /// let metrics = StatusMetrics::register(&mut registry);
    /// metrics.zero_every_kind();
    /// let mut text = String::new();
    /// prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    /// assert!(text.contains("status_write_errors_total{kind=\"HTTPRoute\"} 0"));
    /// ```
    pub fn zero_every_kind(&self) {
        for kind in Kind::ALL {
            let label = KindLabel {
                kind: kind.as_str(),
            };
            self.status_writes.get_or_create(&label).inc_by(0);
            self.status_write_errors.get_or_create(&label).inc_by(0);
        }
    }

    /// New metrics, registered in `registry` under the names given on each field.
    ///
    /// # Examples
    ///
    /// ```
    /// use prometheus_client::registry::Registry;
    /// use gateway_leader_status::StatusMetrics;
    ///
    /// let mut registry = Registry::default();
    /// let metrics = StatusMetrics::register(registry.sub_registry_with_prefix("my_controller"));
    /// metrics.status_writes_not_leader.inc();
    /// let mut text = String::new();
    /// prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    /// assert!(text.contains("my_controller_status_writes_not_leader_total 1"));
    /// ```
    pub fn register(registry: &mut Registry) -> Arc<Self> {
        let m = StatusMetrics::default();
        registry.register(
            "status_writes",
            "Gateway API statuses written, by kind",
            m.status_writes.clone(),
        );
        registry.register(
            "status_write_errors",
            "Gateway API status writes that failed after retries, by kind",
            m.status_write_errors.clone(),
        );
        registry.register(
            "status_writes_not_leader",
            "Status writes not made because this replica was not a valid leader",
            m.status_writes_not_leader.clone(),
        );
        registry.register(
            "first_status_write_seconds",
            "Seconds from becoming leader to the first status write of that leadership",
            m.first_write_seconds.clone(),
        );
        Arc::new(m)
    }
}
