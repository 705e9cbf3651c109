//! [`serve`]: the accept loop, the per-connection limits and the drain at shutdown.

use crate::connections::{self, Activity, Reply, Slots, Timeouts, Tracked};
use crate::cors::Cors;
use crate::deadline;
use crate::direct::{self, Direct, Unread};
use crate::limits::Limits;
use crate::metrics::{Api, Outcome};
use crate::rate::{Bucket, IdBudget};
use crate::service::Service;
use crate::streams::Streams;
use crate::tls::Tls;
use crate::{grpc, http};
use axum::body::Body;
use axum::http::{HeaderValue, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tower::ServiceExt as _;

/// How often an HTTP/2 connection is pinged while open, and how long the answer may take
/// before the connection is dropped (a peer gone without closing it).
const KEEP_ALIVE: Duration = Duration::from_secs(20);

/// The longest pause after failed accepts (out of open files): they double from 10 ms.
const MAX_ACCEPT_PAUSE: Duration = Duration::from_secs(1);

/// How a drain ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drained {
    /// Every connection closed by itself: the requests under way finished.
    Finished,
    /// The drain's end came first: the connections still open were closed.
    Cut,
}

/// Serves `service` on `listener` (HTTP/1.1 and HTTP/2, gRPC included) until `shutdown`
/// completes; then refuses new requests (health goes red), stops accepting, and waits
/// for the requests under way until the future `drain()` returns completes (a drain time,
/// a second signal). Returns once every connection is closed or the drain has ended;
/// dropping the last `Arc` of the service then releases its nodes.
///
/// Connections are held to the service's [`Limits`]: at most `max_connections` at once
/// (and [`HEALTH_CONNECTIONS`](crate::HEALTH_CONNECTIONS) more for health checks alone),
/// closed when their first request's head is not in within `header_timeout` or when
/// idle past `idle_timeout`, and gracefully at `max_connection_age` (jittered) or when
/// their client certificate expires, cut `max_connection_age_grace` later; HTTP/2
/// connections are pinged every 20 s.
///
/// # Errors
///
/// None yet: a failed accept (too many open files) is retried after a pause. The result
/// leaves room for errors of listeners to come.
pub async fn serve<D: Future<Output = ()>>(
    listener: TcpListener,
    service: Arc<Service>,
    shutdown: impl Future<Output = ()>,
    drain: impl FnOnce() -> D,
) -> io::Result<Drained> {
    let (grpc, health_task) = grpc::router(&service);
    let router = http::router(Arc::clone(&service)).merge(grpc);
    let limits = service.limits();
    let slots = Slots::new(limits.max_connections);
    let (closing, closed) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    let mut accept = Accept::default();
    loop {
        while connections.try_join_next().is_some() {}
        let slot = tokio::select! {
            slot = slots.next() => slot,
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            stream = accept.next(&listener, &service) => stream,
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let slot = slots.upgrade(slot);
        let health_only = slot.health_only;
        let timeouts = if health_only {
            Timeouts::HEALTH
        } else {
            Timeouts::of(&limits)
        };
        let streams = Streams::new();
        let builder = builder(&limits, timeouts, health_only, streams.clone());
        let activity = Activity::new();
        let per_connection = per_connection(&router, &service, &activity, health_only);
        let open = OpenConnection::new(Arc::clone(&service), health_only, slot);
        let (closed, tls) = (closed.clone(), service.tls().map(Tls::acceptor));
        connections.spawn(async move {
            let service = TowerToHyperService::new(per_connection);
            let metrics = &open.service.metrics;
            match tls {
                None => {
                    let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
                    let client = std::future::pending();
                    connections::keep(connection, &streams, &activity, timeouts, closed, client, metrics)
                        .await;
                }
                // The handshake within the header timeout: a client that never finishes
                // one holds its slot no longer than one that never sends a head.
                Some((acceptor, trust)) => {
                    match tokio::time::timeout(timeouts.header, acceptor.accept(stream)).await {
                        Ok(Ok(stream)) => {
                            let chain =
                                stream.get_ref().1.peer_certificates().map(|chain| {
                                    chain.iter().map(|cert| cert.clone().into_owned()).collect()
                                });
                            let connection =
                                builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
                            let client = trust.ended(chain);
                            connections::keep(
                                connection, &streams, &activity, timeouts, closed, client, metrics,
                            )
                            .await;
                        }
                        Ok(Err(_)) | Err(_) => metrics.count_failed_handshake(),
                    }
                }
            }
            drop(open);
        });
    }
    service.drain();
    drop(listener);
    let _ = closing.send(true);
    let drained = tokio::select! {
        () = async { while connections.join_next().await.is_some() {} } => Drained::Finished,
        () = drain() => {
            connections.abort_all();
            Drained::Cut
        }
    };
    health_task.abort();
    Ok(drained)
}

/// A connection's builder: HTTP/1.1 heads read within the header timeout (of `timeouts`), HTTP/2
/// connections pinged and their calls run by `streams`; for `health_only` connections,
/// one request each.
fn builder(limits: &Limits, timeouts: Timeouts, health_only: bool, streams: Streams) -> Builder<Streams> {
    let mut builder = Builder::new(streams);
    // Each connection's watch closes it at its header or idle timeout. hyper's own timer
    // is a backstop a second past the longer: it also runs while a connection waits idle
    // for its next request.
    let header_timeout = timeouts.header.max(timeouts.idle) + Duration::from_secs(1);
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .keep_alive(!health_only);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(KEEP_ALIVE)
        .keep_alive_timeout(KEEP_ALIVE)
        .max_concurrent_streams(limits.streams_per_connection);
    builder
}

/// One connection's service: its request rate, its requests counted while under way,
/// and, on a `health_only` connection, health checks alone.
fn per_connection(
    router: &axum::Router,
    service: &Arc<Service>,
    activity: &Arc<Activity>,
    health_only: bool,
) -> impl tower::Service<
    Request<Incoming>,
    Response = Response<Tracked>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<Tracked>, Infallible>> + Send,
> + Clone
+ Send
+ 'static {
    let bucket = Arc::new(Mutex::new(Bucket::new(f64::from(
        service.limits().requests_per_second,
    ))));
    let ids = service.limits().ids_per_second.map(IdBudget::new);
    // Each request takes the router and the service from here: a count the connection's
    // own, not one every core's requests bump.
    let local = Arc::new((router.clone(), Arc::clone(service)));
    let activity = Arc::clone(activity);
    tower::service_fn(move |mut request: Request<Incoming>| {
        let in_flight = activity.begin();
        let allowed = bucket.lock().unwrap_or_else(PoisonError::into_inner).take(1.0);
        if let Some(ids) = &ids {
            request.extensions_mut().insert(ids.clone());
        }
        let local = Arc::clone(&local);
        let service = &local.1;
        let mut span = service
            .traces()
            .and_then(|traces| traces.request(&request, service.tls().is_some()));
        // The log lines of a traced request carry its trace ID.
        let log = span
            .as_ref()
            .map_or_else(tracing::Span::none, |span| span.log_span());
        let answer = async move {
            let (router, service) = &*local;
            let grpc = grpc_type(&request);
            let deadline = if grpc.is_some() {
                deadline::of(request.headers())
            } else {
                None
            };
            let origin = service.cors.origin_of(&request);
            let mut response: Response<Reply> = if let Some(preflight) = service.cors.preflight(&request) {
                preflight.map(Reply::from)
            } else {
                match admit(service, &request, health_only, allowed, deadline) {
                    Err(refused) => refuse(service, request, grpc, refused).await,
                    Ok(Some(timeout)) => within(router, service, request, timeout).await,
                    // `respond` inline, with the request borrowed: the future holds
                    // one copy of it.
                    Ok(None) => match direct::answer(service, &mut request).await {
                        Direct::Answered(response) => response,
                        Direct::Route(unread) => route(router, request, unread).await,
                    },
                }
            };
            Cors::allow(origin, &mut response);
            if let Some(span) = &mut span {
                span.answered(response.status(), response.headers());
            }
            Ok::<_, Infallible>(response.map(|reply| Tracked::new(reply, in_flight, span)))
        };
        tracing::Instrument::instrument(answer, log)
    })
}

/// Why a request is refused before it is read.
enum Refused {
    /// No token, or not one of the server's.
    Unauthenticated,
    /// Not a health check, on a connection taken past the cap.
    AtCapacity,
    /// A `grpc-timeout` that is not one: why.
    Deadline(String),
    /// Over the connection's request rate.
    Limited,
}

/// Whether `request` may be answered, and within what time (its `deadline`, read from
/// `grpc-timeout`); `allowed`: whether the connection's request rate let it through.
fn admit(
    service: &Service,
    request: &Request<Incoming>,
    health_only: bool,
    allowed: bool,
    deadline: Option<Result<Duration, String>>,
) -> Result<Option<Duration>, Refused> {
    if !service.admits(request.uri().path(), request.headers()) {
        return Err(Refused::Unauthenticated);
    }
    if health_only && !connections::is_health_check(request.uri().path()) {
        return Err(Refused::AtCapacity);
    }
    let timeout = deadline.transpose().map_err(Refused::Deadline)?;
    if allowed {
        Ok(timeout)
    } else {
        Err(Refused::Limited)
    }
}

/// The answer to a request refused, once what it sends is read: out of line, and boxed,
/// so that the answering of the requests admitted, which holds it, stays small and
/// compact.
#[cold]
#[inline(never)]
fn refuse<'a>(
    service: &'a Service,
    request: Request<Incoming>,
    grpc: Option<&'static str>,
    refused: Refused,
) -> Pin<Box<dyn Future<Output = Response<Reply>> + Send + 'a>> {
    Box::pin(async move {
        drain(request.into_body()).await;
        let api = if grpc.is_some() { Api::Grpc } else { Api::Http };
        let metrics = &service.metrics;
        match refused {
            Refused::Unauthenticated => {
                metrics.count(api, Outcome::Unauthenticated, 0, Duration::ZERO);
                unauthenticated(grpc)
            }
            Refused::AtCapacity => at_capacity(grpc, service.limits().max_connections),
            Refused::Deadline(invalid) => {
                metrics.count(Api::Grpc, Outcome::Invalid, 0, Duration::ZERO);
                refusal(
                    grpc,
                    tonic::Code::InvalidArgument,
                    StatusCode::BAD_REQUEST,
                    &invalid,
                )
            }
            Refused::Limited => {
                metrics.count(api, Outcome::Limited, 0, Duration::ZERO);
                limited(grpc, service.limits().requests_per_second)
            }
        }
        .map(Reply::from)
    })
}

/// The answer to a gRPC call with a deadline: the call's own, or `DEADLINE_EXCEEDED` once
/// `timeout` has passed. Boxed: the timer is large, and most calls carry no deadline.
#[inline(never)]
fn within<'a>(
    router: &'a axum::Router,
    service: &'a Service,
    request: Request<Incoming>,
    timeout: Duration,
) -> Pin<Box<dyn Future<Output = Response<Reply>> + Send + 'a>> {
    Box::pin(async move {
        let grpc = grpc_type(&request);
        match tokio::time::timeout(timeout, respond(router, service, request)).await {
            Ok(response) => response,
            Err(_elapsed) => {
                service
                    .metrics
                    .count(Api::Grpc, Outcome::DeadlineExceeded, 0, Duration::ZERO);
                let message = "the call's deadline (grpc-timeout) passed before its answer";
                refusal(
                    grpc,
                    tonic::Code::DeadlineExceeded,
                    StatusCode::GATEWAY_TIMEOUT,
                    message,
                )
                .map(Reply::from)
            }
        }
    })
}

/// The answer to a request admitted: the plain ID requests directly
/// ([`direct`]), the rest through the router.
async fn respond(
    router: &axum::Router,
    service: &Service,
    mut request: Request<Incoming>,
) -> Response<Reply> {
    match direct::answer(service, &mut request).await {
        Direct::Answered(response) => response,
        Direct::Route(unread) => route(router, request, unread).await,
    }
}

/// The router's answer to `request`, whose body's first bytes are `unread`. Its future
/// is boxed here, so that the futures of the plain requests, which hold this one, stay
/// small: they are moved whole, from the service into its HTTP/2 stream's task.
fn route(
    router: &axum::Router,
    request: Request<Incoming>,
    unread: Unread,
) -> impl Future<Output = Response<Reply>> + Send + use<> {
    let answer = Box::pin(router.clone().oneshot(request.map(|rest| unread.body(rest))));
    async move {
        match answer.await {
            Ok(response) => response.map(Reply::from),
            Err(never) => match never {},
        }
    }
}

/// The most of a refused request's body [`drain`] reads, and for how long.
const DRAIN_BYTES: usize = 16 * 1024;
const DRAIN_TIME: Duration = Duration::from_millis(100);

/// Reads what is left of the body of a request refused from its headers alone, up to
/// [`DRAIN_BYTES`] and for [`DRAIN_TIME`] at most: over HTTP/2 an answer sent before the
/// request's end resets the stream, and a client still sending its body (curl) may then
/// report the reset rather than the answer.
async fn drain(mut body: Incoming) {
    use hyper::body::Body as _;
    let mut read = 0;
    let _ = tokio::time::timeout(DRAIN_TIME, async {
        while read <= DRAIN_BYTES {
            let frame = std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await;
            match frame {
                Some(Ok(frame)) => read += frame.data_ref().map_or(0, axum::body::Bytes::len),
                Some(Err(_)) | None => return,
            }
        }
    })
    .await;
}

/// A connection counted open, holding its slot, until dropped (with its task, also when
/// the drain's end aborts it).
struct OpenConnection {
    service: Arc<Service>,
    _slot: connections::Slot,
}

impl OpenConnection {
    fn new(service: Arc<Service>, health_only: bool, slot: connections::Slot) -> OpenConnection {
        service.metrics.connection_opened(health_only);
        OpenConnection { service, _slot: slot }
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.service.metrics.connection_closed();
    }
}

/// Accepts connections, pausing after failures (out of open files: the pause lets
/// connections close), and says so once for each run of failures.
#[derive(Debug, Default)]
struct Accept {
    pause: Option<Duration>,
}

impl Accept {
    async fn next(&mut self, listener: &TcpListener, service: &Service) -> TcpStream {
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    if self.pause.take().is_some() {
                        tracing::info!(
                            target: "atomflake serve",
                            event = "accepting",
                            "accepting connections again"
                        );
                    }
                    return stream;
                }
                Err(error) => {
                    service.metrics.count_accept_error();
                    let pause = match self.pause {
                        None => {
                            tracing::warn!(
                                target: "atomflake serve",
                                event = "accept_failed",
                                %error,
                                "accept failed: {error}; trying again after pauses of up to {MAX_ACCEPT_PAUSE:?}"
                            );
                            Duration::from_millis(10)
                        }
                        Some(pause) => (pause * 2).min(MAX_ACCEPT_PAUSE),
                    };
                    self.pause = Some(pause);
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }
}

impl Timeouts {
    fn of(limits: &Limits) -> Timeouts {
        Timeouts {
            header: limits.header_timeout,
            idle: limits.idle_timeout,
            lifetime: None,
            age: limits
                .max_connection_age
                .map(|age| connections::jittered(age, connections::draw())),
            grace: limits.max_connection_age_grace,
        }
    }
}

/// The content type that a gRPC refusal of `request` is sent with: that of its own
/// protocol (gRPC, gRPC-Web, or gRPC-Web's base64 text), whose client reads the status from
/// the headers of a trailers-only answer; `None` for HTTP/JSON.
pub(crate) fn grpc_type<B>(request: &Request<B>) -> Option<&'static str> {
    let kind = request.headers().get(header::CONTENT_TYPE)?.as_bytes();
    if kind.starts_with(b"application/grpc-web-text") {
        Some("application/grpc-web-text+proto")
    } else if kind.starts_with(b"application/grpc-web") {
        Some("application/grpc-web+proto")
    } else if kind.starts_with(b"application/grpc") {
        Some("application/grpc")
    } else {
        None
    }
}

/// The answer over a connection's request rate: HTTP 429, gRPC `RESOURCE_EXHAUSTED`.
fn limited(grpc: Option<&'static str>, per_second: u32) -> Response<Body> {
    let message = format!("over this connection's request rate: allowed {per_second} requests per second");
    let mut response = refusal(
        grpc,
        tonic::Code::ResourceExhausted,
        StatusCode::TOO_MANY_REQUESTS,
        &message,
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// The answer to a request without a valid bearer token: HTTP 401 with
/// `WWW-Authenticate: Bearer`, gRPC `UNAUTHENTICATED`.
fn unauthenticated(grpc: Option<&'static str>) -> Response<Body> {
    let message = "a bearer token is required: Authorization: Bearer TOKEN, one of the server's --token-file";
    let mut response = refusal(
        grpc,
        tonic::Code::Unauthenticated,
        StatusCode::UNAUTHORIZED,
        message,
    );
    if grpc.is_none() {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    response
}

/// The answer to anything but a health check on a connection taken past the cap: HTTP
/// 503, gRPC `UNAVAILABLE`.
fn at_capacity(grpc: Option<&'static str>, max_connections: u32) -> Response<Body> {
    let message = format!(
        "the server has its most connections open ({max_connections}): this one answers health checks alone"
    );
    refusal(
        grpc,
        tonic::Code::Unavailable,
        StatusCode::SERVICE_UNAVAILABLE,
        &message,
    )
}

/// A refusal: for gRPC (of content type `grpc`) a `code` and the message in the
/// trailers-only answer, for HTTP a `status` and `{"error": message}`.
fn refusal(
    grpc: Option<&'static str>,
    code: tonic::Code,
    status: StatusCode,
    message: &str,
) -> Response<Body> {
    if let Some(kind) = grpc {
        let mut response = Response::new(Body::empty());
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
        headers.insert("grpc-status", HeaderValue::from(code as i32));
        if let Ok(value) = HeaderValue::from_str(message) {
            headers.insert("grpc-message", value);
        }
        response
    } else {
        let body = serde_json::json!({ "error": message }).to_string();
        let mut response = Response::new(Body::from(body));
        *response.status_mut() = status;
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        response
    }
}
