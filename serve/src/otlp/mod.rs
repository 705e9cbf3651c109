//! [`Otlp`]: the service's metrics and spans pushed to an OpenTelemetry collector (OTLP over
//! gRPC or HTTP), configured by the standard `OTEL_*` variables.
//!
//! Metrics are a [`Snapshot`](crate::Snapshot) of the counters that `GET /metrics` shows,
//! pushed every interval; no second set of counters is kept. Spans are queued by the
//! request that ends them and sent by a task of their own: a collector that is down, slow
//! or refusing costs a bounded queue and counted drops
//! (`atomflake_otlp_spans_dropped_total`, `atomflake_otlp_export_failures_total`), never a
//! request's time.

mod config;
mod export;
mod metrics;
mod traces;

pub use config::{
    DEFAULT_TRACE_RATIO, OtlpError, Protocol, RootSampling, Sampling, Settings, Target, TlsFiles,
};
pub(crate) use traces::{RequestSpan, Traces};

use crate::service::Service;
use atomflake::Layout;
use export::Exporter;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::resource::v1::Resource as ProtoResource;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SpanData;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::{mpsc, watch};

/// The most spans in one export.
const BATCH: usize = 512;

/// How long spans gather before they are sent, unless a batch fills first.
const BATCH_DELAY: Duration = Duration::from_secs(1);

/// The exporter's own counts, in the service's [`Snapshot`](crate::Snapshot).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) spans_dropped: AtomicU64,
    /// Failed exports: metrics, traces.
    failures: [AtomicU64; 2],
}

impl Counters {
    pub(crate) fn snapshot(&self) -> crate::metrics::OtlpSnapshot {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        crate::metrics::OtlpSnapshot {
            spans_dropped: load(&self.spans_dropped),
            export_failures: [
                ("metrics", load(&self.failures[0])),
                ("traces", load(&self.failures[1])),
            ],
        }
    }

    /// Counts a failed export of `signal` (0: metrics, 1: traces) and says why.
    fn failed(&self, signal: usize, error: &str) {
        self.failures[signal].fetch_add(1, Ordering::Relaxed);
        let signal = ["metrics", "traces"][signal];
        tracing::warn!(
            target: "atomflake serve",
            event = "otlp_export_failed",
            signal,
            error,
            "an OTLP export of {signal} failed: {error}"
        );
    }
}

/// An exporter of a service's metrics and spans to an OpenTelemetry collector; give it to
/// [`Server::export_otlp`](crate::Server::export_otlp).
///
/// # Examples
///
/// ```
/// use atomflake::Layout;
/// use atomflake_serve::otlp::{Otlp, Settings};
///
/// let vars = |name: &str| (name == "OTEL_EXPORTER_OTLP_ENDPOINT").then(|| "http://127.0.0.1:4318".to_owned());
/// let settings = Settings::from_vars(&vars, None).unwrap().unwrap();
/// let otlp = Otlp::new(settings, Layout::TWITTER).unwrap();
/// assert_eq!(otlp.settings().service_name, "atomflake");
/// ```
#[derive(Debug)]
pub struct Otlp {
    settings: Settings,
    resource: Resource,
    counters: Arc<Counters>,
    metrics: Option<Exporter>,
    traces: Option<(Exporter, Arc<Traces>, mpsc::Receiver<SpanData>)>,
}

impl Otlp {
    /// The exporter that the process environment's `OTEL_*` variables set up, `endpoint`
    /// (`--otlp-endpoint`) standing for `OTEL_EXPORTER_OTLP_ENDPOINT`; `None` when nothing
    /// is exported ([`Settings::from_vars`]).
    ///
    /// # Errors
    ///
    /// A variable whose value is not allowed.
    pub fn from_env(endpoint: Option<&str>, layout: Layout) -> Result<Option<Otlp>, OtlpError> {
        let vars = |name: &str| std::env::var(name).ok();
        Settings::from_vars(&vars, endpoint)?
            .map(|settings| Otlp::new(settings, layout))
            .transpose()
    }

    /// The exporter of `settings` for a service of `layout`: its resource is
    /// `service.name`, a fresh `service.instance.id` (a UUID of version 4, unless the
    /// resource attributes set one), `atomflake.layout` and the resource attributes; the
    /// metrics' resource adds the nodes (`atomflake.nodes`) of each moment.
    ///
    /// # Errors
    ///
    /// A header that HTTP does not allow, or TLS files that cannot be read.
    pub fn new(settings: Settings, layout: Layout) -> Result<Otlp, OtlpError> {
        let mut random = [0; 16];
        let id = opentelemetry_sdk::trace::RandomIdGenerator::default();
        random.copy_from_slice(&opentelemetry_sdk::trace::IdGenerator::new_trace_id(&id).to_bytes());
        let instance = uuid::Builder::from_random_bytes(random).into_uuid().to_string();
        let mut attributes = vec![
            opentelemetry::KeyValue::new("service.instance.id", instance),
            opentelemetry::KeyValue::new("atomflake.layout", layout.to_string()),
        ];
        attributes.extend(
            settings
                .attributes
                .iter()
                .map(|(key, value)| opentelemetry::KeyValue::new(key.clone(), value.clone())),
        );
        let resource = Resource::builder_empty()
            .with_attributes(attributes)
            .with_service_name(settings.service_name.clone())
            .build();
        let counters = Arc::new(Counters::default());
        let exporter = |target| Exporter::new(target, &settings.headers, settings.timeout, &settings.tls);
        let metrics = settings.metrics.as_ref().map(exporter).transpose()?;
        let traces = match &settings.traces {
            Some(target) => {
                let (traces, queue) = Traces::new(settings.sampling, &resource, &counters);
                Some((exporter(target)?, Arc::new(traces), queue))
            }
            None => None,
        };
        Ok(Otlp {
            settings,
            resource,
            counters,
            metrics,
            traces,
        })
    }

    /// Its settings.
    #[must_use]
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Runs `claim` (a claim of nodes on a lease) in a `lease.claim` span; the span is sent
    /// once the server runs.
    ///
    /// # Errors
    ///
    /// `claim`'s.
    pub fn claim<T, E: std::fmt::Display>(&self, claim: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
        match &self.traces {
            Some((_, traces, _)) => traces.lease("lease.claim", "", claim),
            None => claim(),
        }
    }

    /// Starts the export of `service`'s metrics and spans on `tasks`, until `stop` turns
    /// true: then each sends what it has once more, within the export timeout.
    pub(crate) fn start(
        self,
        service: &Arc<Service>,
        tasks: &mut tokio::task::JoinSet<()>,
        stop: &watch::Receiver<bool>,
    ) {
        let Otlp {
            settings,
            resource,
            counters,
            metrics,
            traces,
        } = self;
        service.metrics.export_counts(Arc::clone(&counters));
        if let Some(exporter) = metrics {
            let resource = proto_resource(&resource);
            let pushed = push_metrics(
                Arc::clone(service),
                exporter,
                settings.interval,
                resource,
                Arc::clone(&counters),
                stop.clone(),
            );
            tasks.spawn(pushed);
        }
        if let Some((exporter, traces, queue)) = traces {
            service.trace_with(traces);
            let resource = ResourceAttributesWithSchema::from(&resource);
            tasks.spawn(send_spans(queue, exporter, resource, counters, stop.clone()));
        }
    }

    /// How long the last exports may take at the end.
    pub(crate) fn timeout(&self) -> Duration {
        self.settings.timeout
    }
}

fn proto_resource(resource: &Resource) -> ProtoResource {
    ProtoResource {
        attributes: ResourceAttributesWithSchema::from(resource).attributes.0,
        ..ProtoResource::default()
    }
}

fn unix_ns(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |since| u64::try_from(since.as_nanos()).unwrap_or(u64::MAX))
}

/// Pushes a snapshot of `service`'s metrics every `interval`, and once more when `stop`
/// turns true.
async fn push_metrics(
    service: Arc<Service>,
    exporter: Exporter,
    interval: Duration,
    resource: ProtoResource,
    counters: Arc<Counters>,
    mut stop: watch::Receiver<bool>,
) {
    let start = unix_ns(SystemTime::now());
    let scheme = if service.tls().is_some() { "https" } else { "http" };
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let last = tokio::select! {
            _ = ticks.tick() => false,
            _ = stop.wait_for(|stop| *stop) => true,
        };
        let mut resource = resource.clone();
        let nodes = service
            .nodes()
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(",");
        resource
            .attributes
            .push(metrics::attribute("atomflake.nodes", nodes));
        let export = metrics::export(
            &service.metrics(),
            resource,
            start,
            unix_ns(SystemTime::now()),
            scheme,
        );
        if let Err(error) = exporter.metrics(export).await {
            counters.failed(0, &error);
        }
        if last {
            return;
        }
    }
}

/// Sends the spans of `queue` in batches of at most [`BATCH`], gathered for at most
/// [`BATCH_DELAY`]; what is queued when `stop` turns true is sent before it ends.
async fn send_spans(
    mut queue: mpsc::Receiver<SpanData>,
    exporter: Exporter,
    resource: ResourceAttributesWithSchema,
    counters: Arc<Counters>,
    mut stop: watch::Receiver<bool>,
) {
    let mut batch = Vec::with_capacity(BATCH);
    let send = async |spans: Vec<SpanData>| {
        let export = ExportTraceServiceRequest {
            resource_spans: group_spans_by_resource_and_scope(spans, &resource),
        };
        if let Err(error) = exporter.traces(export).await {
            counters.failed(1, &error);
        }
    };
    loop {
        let last = tokio::select! {
            received = queue.recv_many(&mut batch, BATCH) => received == 0,
            _ = stop.wait_for(|stop| *stop) => true,
        };
        if last {
            queue.close();
            loop {
                let room = BATCH - batch.len();
                if queue.recv_many(&mut batch, room).await == 0 && batch.is_empty() {
                    break;
                }
                send(std::mem::replace(&mut batch, Vec::with_capacity(BATCH))).await;
            }
            return;
        }
        let until = tokio::time::Instant::now() + BATCH_DELAY;
        while batch.len() < BATCH {
            let room = BATCH - batch.len();
            match tokio::time::timeout_at(until, queue.recv_many(&mut batch, room)).await {
                Ok(received) if received > 0 => {}
                _ => break,
            }
        }
        send(std::mem::replace(&mut batch, Vec::with_capacity(BATCH))).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exporters_debug_never_shows_its_headers_values() {
        let vars = |name: &str| match name {
            "OTEL_EXPORTER_OTLP_ENDPOINT" => Some("http://127.0.0.1:4318".to_owned()),
            "OTEL_EXPORTER_OTLP_HEADERS" => Some("authorization=Bearer%20s3cr3t".to_owned()),
            _ => None,
        };
        let settings = Settings::from_vars(&vars, None).unwrap().unwrap();
        let otlp = Otlp::new(settings, Layout::TWITTER).unwrap();
        let shown = format!("{otlp:?}");
        assert!(
            shown.contains("authorization") && !shown.contains("s3cr3t"),
            "{shown}"
        );
    }
}
