//! Spans: one per request that its sampler keeps (the caller's `traceparent` as its
//! parent), and one per lease claim, renewal and reclaim; queued without blocking, and
//! dropped and counted when the queue is full.

use super::Counters;
use super::config::{RootSampling, Sampling};
use opentelemetry::propagation::{Extractor, TextMapPropagator as _};
use opentelemetry::trace::Span as _;
use opentelemetry::trace::{
    SpanKind, Status, TraceContextExt as _, TraceId, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider, Span, SpanData, SpanProcessor};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::mpsc;

/// The most spans waiting for export; past it, spans are dropped (and counted). The
/// specification's default (`OTEL_BSP_MAX_QUEUE_SIZE`).
pub(crate) const QUEUE: usize = 2048;

/// The span processor: each ended span into the queue, or counted as dropped.
#[derive(Debug)]
struct Queue {
    spans: mpsc::Sender<SpanData>,
    counters: Arc<Counters>,
}

impl SpanProcessor for Queue {
    fn on_start(&self, _: &mut Span, _: &Context) {}

    fn on_end(&self, span: SpanData) {
        if self.spans.try_send(span).is_err() {
            self.counters.spans_dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _: Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// The tracers of one exporter.
#[derive(Debug)]
pub(crate) struct Traces {
    /// Request spans, as the sampler decides.
    requests: SdkTracer,
    /// Lease spans: a few a minute, kept unless sampling is off.
    lease: SdkTracer,
    providers: [SdkTracerProvider; 2],
}

impl Traces {
    /// Tracers whose spans go to the returned queue, of at most [`QUEUE`] spans.
    pub(crate) fn new(
        sampling: Sampling,
        resource: &Resource,
        counters: &Arc<Counters>,
    ) -> (Traces, mpsc::Receiver<SpanData>) {
        let (sender, receiver) = mpsc::channel(QUEUE);
        let provider = |sampler: Sampler| {
            SdkTracerProvider::builder()
                .with_sampler(sampler)
                .with_span_processor(Queue {
                    spans: sender.clone(),
                    counters: Arc::clone(counters),
                })
                .with_resource(resource.clone())
                .build()
        };
        let root = |root: RootSampling| match root {
            RootSampling::Always(true) => Sampler::AlwaysOn,
            RootSampling::Always(false) => Sampler::AlwaysOff,
            RootSampling::Ratio(ratio) => Sampler::TraceIdRatioBased(ratio),
        };
        let sampler = match sampling {
            Sampling::Always(true) => Sampler::AlwaysOn,
            Sampling::Always(false) => Sampler::AlwaysOff,
            Sampling::Ratio(ratio) => Sampler::TraceIdRatioBased(ratio),
            Sampling::ParentBased(inner) => Sampler::ParentBased(Box::new(root(inner))),
        };
        let lease = if sampling.is_off() {
            Sampler::AlwaysOff
        } else {
            Sampler::AlwaysOn
        };
        let providers = [provider(sampler), provider(lease)];
        let scope = || {
            opentelemetry::InstrumentationScope::builder("atomflake-serve")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build()
        };
        let traces = Traces {
            requests: providers[0].tracer_with_scope(scope()),
            lease: providers[1].tracer_with_scope(scope()),
            providers,
        };
        (traces, receiver)
    }

    /// The span of `request` when it is recorded or its caller sent a trace, else `None`
    /// (at the cost of reading `traceparent` and asking the sampler).
    pub(crate) fn request<B>(&self, request: &http::Request<B>, tls: bool) -> Option<Box<RequestSpan>> {
        let parent = TraceContextPropagator::new().extract(&Headers(request.headers()));
        let remote = parent.span().span_context().is_valid();
        let mut span = self
            .requests
            .span_builder("request")
            .with_kind(SpanKind::Server)
            .start_with_context(&self.requests, &parent);
        let sampled = span.span_context().is_sampled();
        if !sampled && !remote {
            return None;
        }
        let path = request.uri().path();
        let grpc = crate::server::grpc_type(request).is_some();
        let version = if request.version() == http::Version::HTTP_2 {
            "2"
        } else {
            "1.1"
        };
        if sampled {
            if grpc {
                let method = path.trim_start_matches('/').to_owned();
                span.update_name(method.clone());
                span.set_attributes([
                    KeyValue::new("rpc.system.name", "grpc"),
                    KeyValue::new("rpc.method", method),
                ]);
            } else {
                let method = request.method().as_str().to_owned();
                let route = route(path);
                span.update_name(match route {
                    Some(route) => format!("{method} {route}"),
                    None => method.clone(),
                });
                span.set_attributes([
                    KeyValue::new("http.request.method", method),
                    KeyValue::new("url.scheme", if tls { "https" } else { "http" }),
                ]);
                if let Some(route) = route {
                    span.set_attribute(KeyValue::new("http.route", route));
                }
            }
            span.set_attribute(KeyValue::new("network.protocol.version", version));
        }
        Some(Box::new(RequestSpan { span, grpc }))
    }

    /// Runs `operation` (named `lease.claim`, `lease.renew`, `lease.reclaim`) in a span of
    /// its own, its error the span's status.
    pub(crate) fn lease<T, E: std::fmt::Display>(
        &self,
        name: &'static str,
        nodes: &str,
        operation: impl FnOnce() -> Result<T, E>,
    ) -> Result<T, E> {
        let mut span = self
            .lease
            .span_builder(name)
            .with_kind(SpanKind::Internal)
            .start_with_context(&self.lease, &Context::new());
        let result = operation();
        if !nodes.is_empty() {
            span.set_attribute(KeyValue::new("atomflake.nodes", nodes.to_owned()));
        }
        if let Err(error) = &result {
            span.set_status(Status::error(error.to_string()));
        }
        span.end();
        result
    }
}

impl Drop for Traces {
    fn drop(&mut self) {
        for provider in &self.providers {
            let _ = provider.shutdown();
        }
    }
}

/// The HTTP route of `path`, among the server's.
fn route(path: &str) -> Option<&'static str> {
    Some(match path {
        "/v1/ids" => "/v1/ids",
        "/v1/layout" => "/v1/layout",
        "/readyz" => "/readyz",
        "/healthz" => "/healthz",
        "/livez" => "/livez",
        "/metrics" => "/metrics",
        "/v1/openapi.json" => "/v1/openapi.json",
        _ if path
            .strip_prefix("/v1/ids/")
            .is_some_and(|id| !id.is_empty() && !id.contains('/')) =>
        {
            "/v1/ids/{id}"
        }
        _ => return None,
    })
}

/// A request's span while it is answered: ended when its answer's body is (dropped).
#[derive(Debug)]
pub(crate) struct RequestSpan {
    span: Span,
    grpc: bool,
}

impl RequestSpan {
    /// The trace the request is in.
    pub(crate) fn trace_id(&self) -> TraceId {
        self.span.span_context().trace_id()
    }

    /// Records the answer's head: the HTTP status, or a gRPC status sent in the head.
    pub(crate) fn answered(&mut self, status: http::StatusCode, headers: &http::HeaderMap) {
        if self.grpc {
            self.grpc_status(headers);
        } else {
            self.span.set_attribute(KeyValue::new(
                "http.response.status_code",
                i64::from(status.as_u16()),
            ));
            if status.is_server_error() {
                self.span.set_status(Status::error(""));
            }
        }
    }

    /// Records the gRPC status of `trailers` (or of a head that ends the call).
    pub(crate) fn grpc_status(&mut self, trailers: &http::HeaderMap) {
        let Some(code) = trailers
            .get("grpc-status")
            .and_then(|code| code.to_str().ok()?.parse::<i32>().ok())
        else {
            return;
        };
        let code = tonic::Code::from_i32(code);
        let name = format!("{code:?}");
        self.span
            .set_attribute(KeyValue::new("rpc.response.status_code", screaming(&name)));
        // The codes that the semantic conventions count as a server's errors.
        if matches!(
            code,
            tonic::Code::Unknown
                | tonic::Code::DeadlineExceeded
                | tonic::Code::Unimplemented
                | tonic::Code::Internal
                | tonic::Code::Unavailable
                | tonic::Code::DataLoss
        ) {
            self.span.set_status(Status::error(screaming(&name)));
        }
    }
}

/// `DeadlineExceeded` as `DEADLINE_EXCEEDED`.
fn screaming(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 4);
    for (index, char) in camel.char_indices() {
        if char.is_uppercase() && index > 0 {
            out.push('_');
        }
        out.push(char.to_ascii_uppercase());
    }
    out
}

/// A request's headers, read by the W3C Trace Context propagator.
struct Headers<'a>(&'a http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key)?.to_str().ok()
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_and_status_names() {
        assert_eq!(route("/v1/ids/123"), Some("/v1/ids/{id}"));
        assert_eq!(route("/v1/ids/"), None);
        assert_eq!(route("/v1/ids/1/2"), None);
        assert_eq!(route("/v1/ids"), Some("/v1/ids"));
        assert_eq!(route("/nowhere"), None);
        assert_eq!(screaming("DeadlineExceeded"), "DEADLINE_EXCEEDED");
        assert_eq!(screaming("Ok"), "OK");
    }
}
