//! The service's counters, and a [`Snapshot`] of them all that exporters write out
//! (`prometheus.rs`: the text of `GET /metrics`).
//!
//! The counters every request bumps are kept per shard, a shard for each core: a thread
//! bumps its own shard's, so no cache line moves between cores on a request, and
//! `/metrics` adds the shards up.

use crossbeam_utils::CachePadded;
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
    /// The OTLP exporter's counts, once it runs.
    otlp: std::sync::OnceLock<std::sync::Arc<crate::otlp::Counters>>,
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
            otlp: std::sync::OnceLock::new(),
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

    /// Shows `counters`, an OTLP exporter's, in each snapshot from now on.
    pub(crate) fn export_counts(&self, counters: std::sync::Arc<crate::otlp::Counters>) {
        let _ = self.otlp.set(counters);
    }

    /// Every counter added up, with the service's `serving` state and its mark store's
    /// counts `(stored, failed)` when it has a store.
    pub(crate) fn snapshot(&self, serving: bool, store: Option<(u64, u64)>) -> Snapshot {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let api = |api: Api| {
            let mut count = 0;
            let latency = std::array::from_fn(|index| {
                count += self.total(|shard| &shard.api(api).buckets[index]);
                (Duration::from_micros(BUCKETS_US[index]), count)
            });
            ApiSnapshot {
                ids: self.total(|shard| &shard.api(api).ids),
                requests: OUTCOMES.map(|(outcome, label)| {
                    (
                        label,
                        self.total(|shard| &shard.api(api).requests[outcome as usize]),
                    )
                }),
                latency,
                count: count + self.total(|shard| &shard.api(api).slower),
                latency_sum: Duration::from_micros(self.total(|shard| &shard.api(api).latency_us_sum)),
            }
        };
        Snapshot {
            apis: APIS.map(|(which, name)| (name, api(which))),
            spent_tick_waits: self.total(|shard| &shard.spent_tick_waits),
            store: store.map(|(stored, failed)| StoreSnapshot {
                stored,
                failed,
                reclaims: load(&self.reclaims),
            }),
            connections: ConnectionsSnapshot {
                open: load(&self.connections_open),
                health_only: load(&self.health_only_connections),
                closed: [
                    ("header_timeout", load(&self.closed_header)),
                    ("idle_timeout", load(&self.closed_idle)),
                    ("health_only_lifetime", load(&self.closed_lifetime)),
                    ("client_untrusted", load(&self.closed_untrusted)),
                    ("max_connection_age", load(&self.closed_max_age)),
                    ("client_certificate_expired", load(&self.closed_expired)),
                ],
                accept_errors: load(&self.accept_errors),
                failed_handshakes: load(&self.failed_handshakes),
            },
            serving,
            otlp: self.otlp.get().map(|counters| counters.snapshot()),
        }
    }
}

/// Every counter of a service at one moment, added up over its shards: what an exporter
/// writes out. [`Service::metrics`](crate::Service::metrics) takes one;
/// [`prometheus`](crate::prometheus()) is the exporter of `GET /metrics`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Snapshot {
    /// Each API's requests, by its name: `http` (HTTP/JSON) and `grpc`.
    pub apis: [(&'static str, ApiSnapshot); 2],
    /// Waits for the next tick because the current one's sequence was spent.
    pub spent_tick_waits: u64,
    /// The mark store's counts, when the service has a store (a lease, a high-water file).
    pub store: Option<StoreSnapshot>,
    /// The connections.
    pub connections: ConnectionsSnapshot,
    /// Whether IDs are handed out now.
    pub serving: bool,
    /// The OTLP exporter's counts, when it runs.
    pub otlp: Option<OtlpSnapshot>,
}

/// An OTLP exporter's counts in a [`Snapshot`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct OtlpSnapshot {
    /// Spans dropped because the export queue was full (a collector down or slow).
    pub spans_dropped: u64,
    /// Exports that failed or did not finish within the timeout, by signal: `metrics`,
    /// `traces`.
    pub export_failures: [(&'static str, u64); 2],
}

/// One API's requests in a [`Snapshot`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ApiSnapshot {
    /// IDs handed out (a stream's as they are sent).
    pub ids: u64,
    /// Requests (HTTP requests, gRPC calls) by how they ended: `ok`, `invalid`,
    /// `unavailable`, `limited`, `deadline_exceeded`, `unauthenticated`.
    pub requests: [(&'static str, u64); 6],
    /// How long requests took (streams until their last message): for each bound, the
    /// requests that took at most that long (cumulative, as Prometheus' buckets are).
    pub latency: [(Duration, u64); 14],
    /// Every request counted in the histogram, the slower than its last bound too.
    pub count: u64,
    /// The time all of them took, to the microsecond.
    pub latency_sum: Duration,
}

/// The mark store's counts in a [`Snapshot`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreSnapshot {
    /// Stores of the high-water mark that succeeded (each renews a lease).
    pub stored: u64,
    /// Stores that failed.
    pub failed: u64,
    /// Nodes claimed afresh after the lease was lost.
    pub reclaims: u64,
}

/// The connections in a [`Snapshot`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectionsSnapshot {
    /// Open now.
    pub open: u64,
    /// Taken for health checks alone, every other slot being taken.
    pub health_only: u64,
    /// Closed by the server, by reason: `header_timeout`, `idle_timeout`,
    /// `health_only_lifetime`, `client_untrusted`, `max_connection_age`,
    /// `client_certificate_expired` (a drain's are not counted).
    pub closed: [(&'static str, u64); 6],
    /// Failed accepts (out of open files, say), each followed by a pause.
    pub accept_errors: u64,
    /// TLS handshakes that failed or did not finish within the header timeout.
    pub failed_handshakes: u64,
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
            let text = crate::prometheus(&metrics.snapshot(true, None));
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
        let text = crate::prometheus(&metrics.snapshot(true, Some((4, 1))));
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
