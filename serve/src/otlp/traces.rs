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
    /// Spans of requests with a parent, as the sampler decides.
    requests: SdkTracer,
    /// Spans kept whatever their parent: root requests that [`roots`](Self::roots) drew,
    /// and lease spans (a few a minute); unless sampling is off.
    always: SdkTracer,
    /// How root requests (no `traceparent`) are sampled: drawn here, so that the many a
    /// ratio leaves out cost a header lookup and a draw, not a span of the SDK's.
    roots: RootSampling,
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
        let always = if sampling.is_off() {
            Sampler::AlwaysOff
        } else {
            Sampler::AlwaysOn
        };
        let roots = match sampling {
            Sampling::Always(on) => RootSampling::Always(on),
            Sampling::Ratio(ratio) => RootSampling::Ratio(ratio),
            Sampling::ParentBased(root) => root,
        };
        let providers = [provider(sampler), provider(always)];
        let scope = || {
            opentelemetry::InstrumentationScope::builder("atomflake-serve")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build()
        };
        let traces = Traces {
            requests: providers[0].tracer_with_scope(scope()),
            always: providers[1].tracer_with_scope(scope()),
            roots,
            providers,
        };
        (traces, receiver)
    }

    /// The span of `request` when it is recorded or its caller sent a trace, else `None`
    /// (at the cost of reading `traceparent` and asking the sampler).
    pub(crate) fn request<B>(&self, request: &http::Request<B>, tls: bool) -> Option<Box<RequestSpan>> {
        let headers = request.headers();
        let parent = if headers.contains_key("traceparent") {
            TraceContextPropagator::new().extract(&Headers(headers))
        } else {
            Context::new()
        };
        let remote = parent.span().span_context().is_valid();
        let tracer = if remote {
            &self.requests
        } else if self.draw_root() {
            &self.always
        } else {
            return None;
        };
        let mut span = tracer
            .span_builder("request")
            .with_kind(SpanKind::Server)
            .start_with_context(tracer, &parent);
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

    /// Whether a root request is traced: as the sampler's ratio of them, drawn at random
    /// (as `traceidratio` draws by the random trace ID).
    fn draw_root(&self) -> bool {
        match self.roots {
            RootSampling::Always(on) => on,
            RootSampling::Ratio(ratio) => ratio >= 1.0 || rand::random::<f64>() < ratio,
        }
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
            .always
            .span_builder(name)
            .with_kind(SpanKind::Internal)
            .start_with_context(&self.always, &Context::new());
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

    /// The `tracing` span that the request is answered in: its log lines carry its trace
    /// ID.
    pub(crate) fn log_span(&self) -> tracing::Span {
        tracing::info_span!(target: "atomflake serve", "request", trace_id = %self.trace_id())
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

    /// Log lines written into a buffer.
    #[derive(Clone, Default)]
    struct Lines(Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn traces(sampling: Sampling) -> Traces {
        let (traces, _queue) = Traces::new(sampling, &Resource::builder_empty().build(), &Arc::default());
        traces
    }

    fn with_traceparent(flags: &str) -> http::Request<()> {
        http::Request::get("/v1/ids")
            .header(
                "traceparent",
                format!("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-{flags}"),
            )
            .body(())
            .unwrap()
    }

    #[test]
    fn a_requests_log_lines_carry_the_trace_id_its_caller_sent() {
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_current_span(true)
            .with_writer(move || writer.clone())
            .finish();
        let span = traces(Sampling::ParentBased(RootSampling::Ratio(0.0)))
            .request(&with_traceparent("01"), false)
            .expect("a sampled caller's request is traced");
        tracing::subscriber::with_default(subscriber, || {
            let _in = span.log_span().entered();
            tracing::error!(target: "atomflake serve", "a line while answering");
        });
        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        assert!(
            text.contains(r#""span":{"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","name":"request"}"#),
            "{text}"
        );
    }

    #[test]
    fn roots_are_drawn_at_the_ratio_and_callers_are_followed() {
        let sampled = |span: Option<Box<RequestSpan>>| span.expect("a span").span.span_context().is_sampled();
        let ratio = traces(Sampling::ParentBased(RootSampling::Ratio(0.25)));
        let root = http::Request::get("/v1/ids").body(()).unwrap();
        let drawn = (0..4000)
            .filter(|_| ratio.request(&root, false).is_some())
            .count();
        assert!((800..1200).contains(&drawn), "{drawn} of 4000 at 0.25");
        // A caller's trace is followed as its flag says: logged either way, recorded if
        // sampled.
        assert!(sampled(ratio.request(&with_traceparent("01"), false)));
        assert!(!sampled(ratio.request(&with_traceparent("00"), false)));
        let off = traces(Sampling::Always(false));
        assert!(off.request(&root, false).is_none());
        assert!(!sampled(off.request(&with_traceparent("01"), false)));
        assert!(sampled(traces(Sampling::Always(true)).request(&root, false)));
    }

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
