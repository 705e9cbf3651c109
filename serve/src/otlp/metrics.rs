//! A [`Snapshot`] as an OTLP metrics export: the series of `GET /metrics`, with
//! OpenTelemetry's semantic-convention names for the request durations
//! (`http.server.request.duration`, `rpc.server.call.duration`, in seconds) and
//! `atomflake.*` names for the rest; cumulative, from the exporter's start.

use crate::metrics::{ApiSnapshot, Snapshot};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics,
    ScopeMetrics, Sum, metric, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;

/// A string attribute.
pub(crate) fn attribute(key: &str, value: impl Into<String>) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        ..KeyValue::default()
    }
}

/// The metrics of one export.
struct Series {
    metrics: Vec<Metric>,
    /// When counting began and the snapshot's time, ns since the Unix epoch.
    start: u64,
    now: u64,
}

impl Series {
    fn point(&self, attributes: Vec<KeyValue>, value: u64) -> NumberDataPoint {
        NumberDataPoint {
            attributes,
            start_time_unix_nano: self.start,
            time_unix_nano: self.now,
            value: Some(number_data_point::Value::AsInt(
                i64::try_from(value).unwrap_or(i64::MAX),
            )),
            ..NumberDataPoint::default()
        }
    }

    fn push(&mut self, name: &str, unit: &str, description: &str, data: metric::Data) {
        self.metrics.push(Metric {
            name: name.to_owned(),
            description: description.to_owned(),
            unit: unit.to_owned(),
            data: Some(data),
            ..Metric::default()
        });
    }

    /// A counter (`monotonic`) or an up-down counter, one point for each attribute set.
    fn sum(
        &mut self,
        name: &str,
        unit: &str,
        description: &str,
        monotonic: bool,
        points: Vec<(Vec<KeyValue>, u64)>,
    ) {
        let data_points = points
            .into_iter()
            .map(|(attributes, value)| self.point(attributes, value))
            .collect();
        let sum = Sum {
            data_points,
            aggregation_temporality: AggregationTemporality::Cumulative.into(),
            is_monotonic: monotonic,
        };
        self.push(name, unit, description, metric::Data::Sum(sum));
    }

    fn counter(&mut self, name: &str, unit: &str, description: &str, value: u64) {
        self.sum(name, unit, description, true, vec![(Vec::new(), value)]);
    }

    /// A request-duration histogram in seconds: the snapshot's cumulative buckets as
    /// OTLP's counts per bucket, the last one past the last bound.
    fn durations(&mut self, name: &str, attributes: Vec<KeyValue>, api: &ApiSnapshot) {
        let mut below = 0;
        let mut bucket_counts: Vec<u64> = api
            .latency
            .iter()
            .map(|&(_, cumulative)| {
                let in_bucket = cumulative - below;
                below = cumulative;
                in_bucket
            })
            .collect();
        bucket_counts.push(api.count - below);
        let point = HistogramDataPoint {
            attributes,
            start_time_unix_nano: self.start,
            time_unix_nano: self.now,
            count: api.count,
            sum: Some(api.latency_sum.as_secs_f64()),
            bucket_counts,
            explicit_bounds: api.latency.iter().map(|(bound, _)| bound.as_secs_f64()).collect(),
            ..HistogramDataPoint::default()
        };
        let histogram = Histogram {
            data_points: vec![point],
            aggregation_temporality: AggregationTemporality::Cumulative.into(),
        };
        self.push(
            name,
            "s",
            "How long requests took, streams until their last message.",
            metric::Data::Histogram(histogram),
        );
    }
}

/// `snapshot`, taken at `now` (ns since the Unix epoch) of counts begun at `start`, as an
/// export for `resource`; `scheme`: `http` or `https`, the `url.scheme` of HTTP requests.
pub(crate) fn export(
    snapshot: &Snapshot,
    resource: Resource,
    start: u64,
    now: u64,
    scheme: &str,
) -> ExportMetricsServiceRequest {
    let mut series = Series {
        metrics: Vec::new(),
        start,
        now,
    };
    write_requests(&mut series, snapshot, scheme);
    write_connections(&mut series, snapshot);
    let serving = series.point(Vec::new(), u64::from(snapshot.serving));
    series.push(
        "atomflake.serving",
        "1",
        "1 while IDs are handed out, else 0.",
        metric::Data::Gauge(Gauge {
            data_points: vec![serving],
        }),
    );
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(resource),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: "atomflake-serve".to_owned(),
                    version: env!("CARGO_PKG_VERSION").to_owned(),
                    ..InstrumentationScope::default()
                }),
                metrics: series.metrics,
                ..ScopeMetrics::default()
            }],
            ..ResourceMetrics::default()
        }],
    }
}

/// The connections' series, and the exporter's own.
fn write_connections(series: &mut Series, snapshot: &Snapshot) {
    let connections = &snapshot.connections;
    series.sum(
        "atomflake.connections.open",
        "{connection}",
        "Connections open now.",
        false,
        vec![(Vec::new(), connections.open)],
    );
    series.counter(
        "atomflake.connections.health_only",
        "{connection}",
        "Connections taken for health checks alone.",
        connections.health_only,
    );
    let closed = connections
        .closed
        .iter()
        .map(|(reason, count)| (vec![attribute("reason", *reason)], *count))
        .collect();
    series.sum(
        "atomflake.connections.closed",
        "{connection}",
        "Connections the server closed.",
        true,
        closed,
    );
    series.counter(
        "atomflake.accept_errors",
        "{error}",
        "Failed accepts.",
        connections.accept_errors,
    );
    series.counter(
        "atomflake.tls.handshake_failures",
        "{handshake}",
        "TLS handshakes that failed or did not finish in time.",
        connections.failed_handshakes,
    );
    if let Some(otlp) = &snapshot.otlp {
        series.counter(
            "atomflake.otlp.spans_dropped",
            "{span}",
            "Spans dropped because the export queue was full.",
            otlp.spans_dropped,
        );
        let failures = otlp
            .export_failures
            .iter()
            .map(|(signal, count)| (vec![attribute("signal", *signal)], *count))
            .collect();
        series.sum(
            "atomflake.otlp.export_failures",
            "{export}",
            "Exports that failed or timed out.",
            true,
            failures,
        );
    }
}

/// The requests' series (their durations, IDs and outcomes), the waits and the store's.
fn write_requests(series: &mut Series, snapshot: &Snapshot, scheme: &str) {
    for (name, api) in &snapshot.apis {
        let (metric, attributes) = if *name == "grpc" {
            (
                "rpc.server.call.duration",
                vec![attribute("rpc.system.name", "grpc")],
            )
        } else {
            (
                "http.server.request.duration",
                vec![attribute("url.scheme", scheme)],
            )
        };
        series.durations(metric, attributes, api);
    }
    let by_api = |value: &dyn Fn(&ApiSnapshot) -> u64| {
        snapshot
            .apis
            .iter()
            .map(|(name, api)| (vec![attribute("api", *name)], value(api)))
            .collect()
    };
    series.sum(
        "atomflake.ids.served",
        "{id}",
        "IDs handed out.",
        true,
        by_api(&|api| api.ids),
    );
    let requests = snapshot
        .apis
        .iter()
        .flat_map(|(name, api)| {
            api.requests.iter().map(|(outcome, count)| {
                (
                    vec![attribute("api", *name), attribute("outcome", *outcome)],
                    *count,
                )
            })
        })
        .collect();
    series.sum(
        "atomflake.requests",
        "{request}",
        "Requests, by how they ended.",
        true,
        requests,
    );
    series.counter(
        "atomflake.spent_tick_waits",
        "{wait}",
        "Waits for the next tick because the current one's sequence was spent.",
        snapshot.spent_tick_waits,
    );
    if let Some(store) = &snapshot.store {
        series.counter(
            "atomflake.mark.stores",
            "{store}",
            "High-water mark stores that succeeded.",
            store.stored,
        );
        series.counter(
            "atomflake.mark.store_failures",
            "{store}",
            "High-water mark stores that failed.",
            store.failed,
        );
        series.counter(
            "atomflake.lease.reclaims",
            "{claim}",
            "Nodes claimed afresh after a lost lease.",
            store.reclaims,
        );
    }
}
