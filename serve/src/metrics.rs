//! The service's counters, and their Prometheus text form (`GET /metrics`).
//!
//! The counters every request bumps are kept per shard, a shard for each core: a thread
//! bumps its own shard's, so no cache line moves between cores on a request, and
//! `/metrics` adds the shards up.

use crossbeam_utils::CachePadded;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// Why a connection was closed by the server: the `reason` of
/// `atomflake_connections_closed_total` (a drain is not counted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Closed {
    /// Its first request's head did not come within the header timeout: a silent or
    /// trickling client.
    Header,
    /// Idle past the idle timeout.
    Idle,
    /// A connection taken past the cap, at the end of its time.
    Lifetime,
    /// Its client's certificate is not trusted by the client CA reloaded since it opened.
    Untrusted,
    /// At its maximum age ([`Limits::max_connection_age`](crate::Limits::max_connection_age)).
    MaxAge,
    /// Its client's certificate expired (its `notAfter` passed) while it was open.
    Expired,
    /// The server drains.
    Drain,
}

/// The upper bounds of the latency histogram's buckets, in microseconds.
const BUCKETS_US: [u64; 14] = [
    25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 1_000_000,
];

/// The API a request came through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Api {
    Http,
    Grpc,
}

/// How a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Answered.
    Ok,
    /// Bad input.
    Invalid,
    /// Refused: minting cannot go on now, or the server is draining or stopped.
    Unavailable,
    /// Over the connection's request rate.
    Limited,
    /// Its deadline (gRPC's `grpc-timeout`) passed before its answer.
    DeadlineExceeded,
    /// Without a valid bearer token (`--token-file`).
    Unauthenticated,
}

const APIS: [(Api, &str); 2] = [(Api::Http, "http"), (Api::Grpc, "grpc")];
const OUTCOMES: [(Outcome, &str); 6] = [
    (Outcome::Ok, "ok"),
    (Outcome::Invalid, "invalid"),
    (Outcome::Unavailable, "unavailable"),
    (Outcome::Limited, "limited"),
    (Outcome::DeadlineExceeded, "deadline_exceeded"),
    (Outcome::Unauthenticated, "unauthenticated"),
];

/// One API's counters.
#[derive(Debug, Default)]
struct PerApi {
    ids: AtomicU64,
    requests: [AtomicU64; OUTCOMES.len()],
    /// Requests that took at most each bucket's bound (not cumulative: summed on output).
    buckets: [AtomicU64; BUCKETS_US.len()],
    /// Requests slower than the last bucket.
    slower: AtomicU64,
    latency_us_sum: AtomicU64,
}

/// The counters every request bumps: one shard's.
#[derive(Debug, Default)]
struct Shard {
    apis: [PerApi; APIS.len()],
    spent_tick_waits: AtomicU64,
}

impl Shard {
    fn api(&self, api: Api) -> &PerApi {
        &self.apis[api as usize]
    }
}

/// The most shards: past this many cores, threads share them.
const MAX_SHARDS: usize = 64;

/// This thread's number, given at its first request: threads take shards in turn.
fn thread_number() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static NUMBER: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    NUMBER.with(|number| *number)
}

/// The counters of one service.
#[derive(Debug)]
pub(crate) struct Metrics {
    /// As many as the machine has cores (at most [`MAX_SHARDS`]).
    shards: Box<[CachePadded<Shard>]>,
    /// Fresh claims after a lost lease.
    reclaims: AtomicU64,
    connections_open: AtomicU64,
    /// Connections taken for health checks alone, every other slot being taken.
    health_only_connections: AtomicU64,
    /// Connections the server closed: no first request head within the header timeout, idle.
    closed_header: AtomicU64,
    closed_idle: AtomicU64,
    closed_lifetime: AtomicU64,
    closed_untrusted: AtomicU64,
    closed_max_age: AtomicU64,
    closed_expired: AtomicU64,
    accept_errors: AtomicU64,
    /// TLS handshakes that failed or did not finish within the header timeout.
    failed_handshakes: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Metrics {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        Metrics::with_shards(cores)
    }
}

impl Metrics {
    /// Counters kept in `shards` shards (1 to [`MAX_SHARDS`]).
    fn with_shards(shards: usize) -> Metrics {
        Metrics {
            shards: (0..shards.clamp(1, MAX_SHARDS))
                .map(|_| CachePadded::default())
                .collect(),
            reclaims: AtomicU64::default(),
            connections_open: AtomicU64::default(),
            health_only_connections: AtomicU64::default(),
            closed_header: AtomicU64::default(),
            closed_idle: AtomicU64::default(),
            closed_lifetime: AtomicU64::default(),
            closed_untrusted: AtomicU64::default(),
            closed_max_age: AtomicU64::default(),
            closed_expired: AtomicU64::default(),
            accept_errors: AtomicU64::default(),
            failed_handshakes: AtomicU64::default(),
        }
    }

    /// The calling thread's shard.
    fn shard(&self) -> &Shard {
        &self.shards[thread_number() % self.shards.len()]
    }

    /// A counter of every shard, added up.
    fn total(&self, counter: impl Fn(&Shard) -> &AtomicU64) -> u64 {
        self.shards
            .iter()
            .map(|shard| counter(shard).load(Ordering::Relaxed))
            .fold(0, u64::wrapping_add)
    }

    /// Counts a request that handed out `ids` IDs and took `latency`.
    pub(crate) fn count(&self, api: Api, outcome: Outcome, ids: u64, latency: Duration) {
        let per = self.shard().api(api);
        per.ids.fetch_add(ids, Ordering::Relaxed);
        per.requests[outcome as usize].fetch_add(1, Ordering::Relaxed);
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        per.latency_us_sum.fetch_add(us, Ordering::Relaxed);
        match BUCKETS_US.iter().position(|&bound| us <= bound) {
            Some(bucket) => per.buckets[bucket].fetch_add(1, Ordering::Relaxed),
            None => per.slower.fetch_add(1, Ordering::Relaxed),
        };
    }

    /// Counts IDs handed out by a stream (counted as they are sent).
    pub(crate) fn count_ids(&self, api: Api, ids: u64) {
        self.shard().api(api).ids.fetch_add(ids, Ordering::Relaxed);
    }

    pub(crate) fn count_spent_tick_wait(&self) {
        self.shard().spent_tick_waits.fetch_add(1, Ordering::Relaxed);
    }

    /// Nodes claimed afresh after a lost lease.
    pub(crate) fn count_reclaim(&self) {
        self.reclaims.fetch_add(1, Ordering::Relaxed);
    }

    /// A connection opened (`health_only`: for health checks alone).
    pub(crate) fn connection_opened(&self, health_only: bool) {
        self.connections_open.fetch_add(1, Ordering::Relaxed);
        if health_only {
            self.health_only_connections.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A connection closed.
    pub(crate) fn connection_closed(&self) {
        self.connections_open.fetch_sub(1, Ordering::Relaxed);
    }

    /// A connection the server closed, and why.
    pub(crate) fn count_closed(&self, why: Closed) {
        let counter = match why {
            Closed::Header => &self.closed_header,
            Closed::Idle => &self.closed_idle,
            Closed::Lifetime => &self.closed_lifetime,
            Closed::Untrusted => &self.closed_untrusted,
            Closed::MaxAge => &self.closed_max_age,
            Closed::Expired => &self.closed_expired,
            Closed::Drain => return,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_accept_error(&self) {
        self.accept_errors.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_failed_handshake(&self) {
        self.failed_handshakes.fetch_add(1, Ordering::Relaxed);
    }

    /// The Prometheus text exposition of every counter, with the service's `serving`
    /// state and its mark store's counts (when it has a store).
    pub(crate) fn render(&self, serving: bool, store: Option<(u64, u64)>) -> String {
        let mut out = String::with_capacity(4096);
        header(
            &mut out,
            "atomflake_ids_served_total",
            "counter",
            "IDs handed out.",
        );
        for (api, name) in APIS {
            let _ = writeln!(
                out,
                "atomflake_ids_served_total{{api=\"{name}\"}} {}",
                self.total(|shard| &shard.api(api).ids)
            );
        }
        header(
            &mut out,
            "atomflake_requests_total",
            "counter",
            "Requests (HTTP requests and gRPC calls), by how they ended.",
        );
        for (api, name) in APIS {
            for (outcome, label) in OUTCOMES {
                let count = self.total(|shard| &shard.api(api).requests[outcome as usize]);
                let _ = writeln!(
                    out,
                    "atomflake_requests_total{{api=\"{name}\",outcome=\"{label}\"}} {count}"
                );
            }
        }
        header(
            &mut out,
            "atomflake_request_duration_seconds",
            "histogram",
            "How long requests took, streams until their last message.",
        );
        for (api, name) in APIS {
            let mut cumulative = 0;
            for (index, bound) in BUCKETS_US.iter().enumerate() {
                cumulative += self.total(|shard| &shard.api(api).buckets[index]);
                let le = seconds(*bound);
                let _ = writeln!(
                    out,
                    "atomflake_request_duration_seconds_bucket{{api=\"{name}\",le=\"{le}\"}} {cumulative}"
                );
            }
            let count = cumulative + self.total(|shard| &shard.api(api).slower);
            let _ = writeln!(
                out,
                "atomflake_request_duration_seconds_bucket{{api=\"{name}\",le=\"+Inf\"}} {count}"
            );
            let sum = seconds(self.total(|shard| &shard.api(api).latency_us_sum));
            let _ = writeln!(
                out,
                "atomflake_request_duration_seconds_sum{{api=\"{name}\"}} {sum}"
            );
            let _ = writeln!(
                out,
                "atomflake_request_duration_seconds_count{{api=\"{name}\"}} {count}"
            );
        }
        single(
            &mut out,
            "atomflake_spent_tick_waits_total",
            "counter",
            "Waits for the next tick because the current one's sequence was spent.",
            self.total(|shard| &shard.spent_tick_waits),
        );
        if let Some(store) = store {
            self.render_store(&mut out, store);
        }
        self.render_connections(&mut out);
        single(
            &mut out,
            "atomflake_serving",
            "gauge",
            "1 while IDs are handed out, else 0.",
            u64::from(serving),
        );
        out
    }
}

impl Metrics {
    /// The mark store's counts (stores made, failed) and the fresh claims.
    fn render_store(&self, out: &mut String, (stored, failed): (u64, u64)) {
        single(
            out,
            "atomflake_mark_stores_total",
            "counter",
            "High-water mark stores that succeeded (each renews a lease).",
            stored,
        );
        single(
            out,
            "atomflake_mark_store_failures_total",
            "counter",
            "High-water mark stores that failed.",
            failed,
        );
        single(
            out,
            "atomflake_lease_reclaims_total",
            "counter",
            "Nodes claimed afresh after the lease was lost (--reclaim).",
            self.reclaims.load(Ordering::Relaxed),
        );
    }

    fn render_connections(&self, out: &mut String) {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        single(
            out,
            "atomflake_connections_open",
            "gauge",
            "Connections open now.",
            load(&self.connections_open),
        );
        single(
            out,
            "atomflake_health_only_connections_total",
            "counter",
            "Connections taken for health checks alone, every other slot being taken.",
            load(&self.health_only_connections),
        );
        header(
            out,
            "atomflake_connections_closed_total",
            "counter",
            "Connections the server closed: no first request head within the header timeout, idle past the idle timeout, taken past the cap for health checks and at the end of their 2 s, a client certificate the client CA reloaded no longer trusts, at the maximum connection age, or a client certificate that expired while open.",
        );
        for (reason, counter) in [
            ("header_timeout", &self.closed_header),
            ("idle_timeout", &self.closed_idle),
            ("health_only_lifetime", &self.closed_lifetime),
            ("client_untrusted", &self.closed_untrusted),
            ("max_connection_age", &self.closed_max_age),
            ("client_certificate_expired", &self.closed_expired),
        ] {
            let _ = writeln!(
                out,
                "atomflake_connections_closed_total{{reason=\"{reason}\"}} {}",
                load(counter)
            );
        }
        single(
            out,
            "atomflake_accept_errors_total",
            "counter",
            "Failed accepts (out of open files, say), each followed by a pause.",
            load(&self.accept_errors),
        );
        single(
            out,
            "atomflake_tls_handshake_failures_total",
            "counter",
            "TLS handshakes that failed (a certificate refused, not TLS) or did not finish within the header timeout.",
            load(&self.failed_handshakes),
        );
    }
}

/// Microseconds as decimal seconds, exactly: `0.000025`.
fn seconds(us: u64) -> String {
    format!("{}.{:06}", us / 1_000_000, us % 1_000_000)
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// A metric of one value, without labels.
fn single(out: &mut String, name: &str, kind: &str, help: &str, value: u64) {
    header(out, name, kind, help);
    let _ = writeln!(out, "{name} {value}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_from_threads_on_every_shard_add_up() {
        for shards in [1, 3, MAX_SHARDS, MAX_SHARDS + 1] {
            let metrics = Metrics::with_shards(shards);
            assert_eq!(metrics.shards.len(), shards.min(MAX_SHARDS));
            std::thread::scope(|scope| {
                for _ in 0..8 {
                    scope.spawn(|| {
                        for _ in 0..1_000 {
                            metrics.count(Api::Grpc, Outcome::Ok, 2, Duration::from_micros(30));
                            metrics.count_spent_tick_wait();
                        }
                    });
                }
            });
            let text = metrics.render(true, None);
            for line in [
                "atomflake_ids_served_total{api=\"grpc\"} 16000",
                "atomflake_requests_total{api=\"grpc\",outcome=\"ok\"} 8000",
                "atomflake_request_duration_seconds_bucket{api=\"grpc\",le=\"0.000025\"} 0",
                "atomflake_request_duration_seconds_bucket{api=\"grpc\",le=\"0.000050\"} 8000",
                "atomflake_request_duration_seconds_sum{api=\"grpc\"} 0.240000",
                "atomflake_spent_tick_waits_total 8000",
            ] {
                assert!(
                    text.lines().any(|l| l == line),
                    "{shards} shards: no {line:?} in\n{text}"
                );
            }
        }
    }

    #[test]
    fn the_histogram_is_cumulative_and_counts_every_request() {
        let metrics = Metrics::default();
        metrics.count(Api::Http, Outcome::Ok, 3, Duration::from_micros(30));
        metrics.count(Api::Http, Outcome::Invalid, 0, Duration::from_micros(30));
        metrics.count(Api::Http, Outcome::Ok, 1, Duration::from_secs(2));
        metrics.count(Api::Grpc, Outcome::Ok, 5, Duration::from_micros(10));
        let text = metrics.render(true, Some((4, 1)));
        for line in [
            "atomflake_ids_served_total{api=\"http\"} 4",
            "atomflake_ids_served_total{api=\"grpc\"} 5",
            "atomflake_requests_total{api=\"http\",outcome=\"invalid\"} 1",
            "atomflake_request_duration_seconds_bucket{api=\"http\",le=\"0.000050\"} 2",
            "atomflake_request_duration_seconds_bucket{api=\"http\",le=\"1.000000\"} 2",
            "atomflake_request_duration_seconds_bucket{api=\"http\",le=\"+Inf\"} 3",
            "atomflake_request_duration_seconds_count{api=\"grpc\"} 1",
            "atomflake_mark_stores_total 4",
            "atomflake_serving 1",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
        }
    }
}
