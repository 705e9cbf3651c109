//! [`prometheus()`]: a [`Snapshot`] in Prometheus' text exposition format, as `GET /metrics`
//! answers.

use crate::metrics::{ApiSnapshot, ConnectionsSnapshot, Snapshot, StoreSnapshot};
use std::fmt::Write as _;
use std::time::Duration;

/// `snapshot` in Prometheus' text exposition format (version 0.0.4): `atomflake_*`
/// counters, gauges and the request-duration histogram, each with its `# HELP` and
/// `# TYPE`.
///
/// # Examples
///
/// ```
/// use atomflake::{Layout, ShardedGenerator};
/// use atomflake_serve::{Limits, Service, prometheus};
///
/// let service = Service::new(ShardedGenerator::new(Layout::TWITTER, [1]).unwrap(), Limits::default(), None)
///     .unwrap();
/// let text = prometheus(&service.metrics());
/// assert!(text.lines().any(|line| line == "atomflake_ids_served_total{api=\"http\"} 0"));
/// assert!(text.lines().any(|line| line == "atomflake_serving 1"));
/// ```
#[must_use]
pub fn prometheus(snapshot: &Snapshot) -> String {
    let mut out = String::with_capacity(4096);
    header(
        &mut out,
        "atomflake_ids_served_total",
        "counter",
        "IDs handed out.",
    );
    for (name, api) in &snapshot.apis {
        let _ = writeln!(out, "atomflake_ids_served_total{{api=\"{name}\"}} {}", api.ids);
    }
    header(
        &mut out,
        "atomflake_requests_total",
        "counter",
        "Requests (HTTP requests and gRPC calls), by how they ended.",
    );
    for (name, api) in &snapshot.apis {
        for (outcome, count) in api.requests {
            let _ = writeln!(
                out,
                "atomflake_requests_total{{api=\"{name}\",outcome=\"{outcome}\"}} {count}"
            );
        }
    }
    header(
        &mut out,
        "atomflake_request_duration_seconds",
        "histogram",
        "How long requests took, streams until their last message.",
    );
    for (name, api) in &snapshot.apis {
        histogram(&mut out, name, api);
    }
    single(
        &mut out,
        "atomflake_spent_tick_waits_total",
        "counter",
        "Waits for the next tick because the current one's sequence was spent.",
        snapshot.spent_tick_waits,
    );
    if let Some(store) = &snapshot.store {
        write_store(&mut out, store);
    }
    write_connections(&mut out, &snapshot.connections);
    if let Some(otlp) = &snapshot.otlp {
        single(
            &mut out,
            "atomflake_otlp_spans_dropped_total",
            "counter",
            "Spans dropped because the OTLP export queue was full.",
            otlp.spans_dropped,
        );
        labelled(
            &mut out,
            "atomflake_otlp_export_failures_total",
            "OTLP exports that failed or did not finish within the export timeout, by signal.",
            "signal",
            &otlp.export_failures,
        );
    }
    single(
        &mut out,
        "atomflake_serving",
        "gauge",
        "1 while IDs are handed out, else 0.",
        u64::from(snapshot.serving),
    );
    out
}

/// One API's buckets, sum and count.
fn histogram(out: &mut String, name: &str, api: &ApiSnapshot) {
    for (bound, count) in api.latency {
        let le = seconds(bound);
        let _ = writeln!(
            out,
            "atomflake_request_duration_seconds_bucket{{api=\"{name}\",le=\"{le}\"}} {count}"
        );
    }
    let count = api.count;
    let _ = writeln!(
        out,
        "atomflake_request_duration_seconds_bucket{{api=\"{name}\",le=\"+Inf\"}} {count}"
    );
    let sum = seconds(api.latency_sum);
    let _ = writeln!(
        out,
        "atomflake_request_duration_seconds_sum{{api=\"{name}\"}} {sum}"
    );
    let _ = writeln!(
        out,
        "atomflake_request_duration_seconds_count{{api=\"{name}\"}} {count}"
    );
}

/// The mark store's counts and the fresh claims.
fn write_store(out: &mut String, store: &StoreSnapshot) {
    single(
        out,
        "atomflake_mark_stores_total",
        "counter",
        "High-water mark stores that succeeded (each renews a lease).",
        store.stored,
    );
    single(
        out,
        "atomflake_mark_store_failures_total",
        "counter",
        "High-water mark stores that failed.",
        store.failed,
    );
    single(
        out,
        "atomflake_lease_reclaims_total",
        "counter",
        "Nodes claimed afresh after the lease was lost (--reclaim).",
        store.reclaims,
    );
}

fn write_connections(out: &mut String, connections: &ConnectionsSnapshot) {
    single(
        out,
        "atomflake_connections_open",
        "gauge",
        "Connections open now.",
        connections.open,
    );
    single(
        out,
        "atomflake_health_only_connections_total",
        "counter",
        "Connections taken for health checks alone, every other slot being taken.",
        connections.health_only,
    );
    labelled(
        out,
        "atomflake_connections_closed_total",
        "Connections the server closed: no first request head within the header timeout, idle past the idle timeout, taken past the cap for health checks and at the end of their 2 s, a client certificate the client CA reloaded no longer trusts, at the maximum connection age, or a client certificate that expired while open.",
        "reason",
        &connections.closed,
    );
    single(
        out,
        "atomflake_accept_errors_total",
        "counter",
        "Failed accepts (out of open files, say), each followed by a pause.",
        connections.accept_errors,
    );
    single(
        out,
        "atomflake_tls_handshake_failures_total",
        "counter",
        "TLS handshakes that failed (a certificate refused, not TLS) or did not finish within the header timeout.",
        connections.failed_handshakes,
    );
}

/// A time as decimal seconds to the microsecond, exactly: `0.000025`.
fn seconds(time: Duration) -> String {
    let us = time.as_micros();
    format!("{}.{:06}", us / 1_000_000, us % 1_000_000)
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// A counter of one value for each value of its one label.
fn labelled(out: &mut String, name: &str, help: &str, label: &str, counts: &[(&str, u64)]) {
    header(out, name, "counter", help);
    for (value, count) in counts {
        let _ = writeln!(out, "{name}{{{label}=\"{value}\"}} {count}");
    }
}

/// A metric of one value, without labels.
fn single(out: &mut String, name: &str, kind: &str, help: &str, value: u64) {
    header(out, name, kind, help);
    let _ = writeln!(out, "{name} {value}");
}
