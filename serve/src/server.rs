//! [`serve`]: the accept loop, the per-connection limits and the drain at shutdown.

use crate::metrics::{Api, Outcome};
use crate::service::Service;
use crate::{grpc, http};
use axum::body::Body;
use axum::http::{HeaderValue, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tower::ServiceExt as _;

/// Serves `service` on `listener` (HTTP/1.1 and HTTP/2, gRPC included) until `shutdown`
/// completes; then refuses new requests (health goes red), stops accepting, and waits up
/// to `drain` for the requests under way. Returns once every connection is closed or the
/// drain time is up; dropping the last `Arc` of the service then releases its nodes.
///
/// # Errors
///
/// None yet: a failed accept (too many open files) is retried after a pause. The result
/// leaves room for errors of listeners to come.
pub async fn serve(
    listener: TcpListener,
    service: Arc<Service>,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) -> io::Result<()> {
    let (grpc, health_task) = grpc::router(&service);
    let router = http::router(Arc::clone(&service)).merge(grpc);
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http2()
        .max_concurrent_streams(service.limits().streams_per_connection);
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    eprintln!("atomflake serve: accept failed: {error}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let bucket = Arc::new(Mutex::new(Bucket::new(service.limits().requests_per_second)));
        let router = router.clone();
        let service = Arc::clone(&service);
        let per_connection = tower::service_fn(move |request: Request<Incoming>| {
            let allowed = bucket.lock().unwrap_or_else(PoisonError::into_inner).take();
            let router = router.clone();
            let service = Arc::clone(&service);
            async move {
                if allowed {
                    router.oneshot(request).await
                } else {
                    let grpc = is_grpc(&request);
                    let api = if grpc { Api::Grpc } else { Api::Http };
                    service.metrics.count(api, Outcome::Limited, 0, Duration::ZERO);
                    Ok::<_, Infallible>(limited(grpc, service.limits().requests_per_second))
                }
            }
        });
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), TowerToHyperService::new(per_connection))
            .into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            // A connection that fails (a client that went away) ends alone.
            let _ = connection.await;
        });
    }
    service.drain();
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(drain) => {
            eprintln!("atomflake serve: requests still under way after the drain time of {drain:?}: closing");
        }
    }
    health_task.abort();
    Ok(())
}

fn is_grpc<B>(request: &Request<B>) -> bool {
    request
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|kind| kind.as_bytes().starts_with(b"application/grpc"))
}

/// The answer over a connection's request rate: HTTP 429, gRPC `RESOURCE_EXHAUSTED`.
fn limited(grpc: bool, per_second: u32) -> Response<Body> {
    let message = format!("over this connection's request rate: allowed {per_second} requests per second");
    let mut response = if grpc {
        let mut response = Response::new(Body::empty());
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
        headers.insert(
            "grpc-status",
            HeaderValue::from(tonic::Code::ResourceExhausted as i32),
        );
        if let Ok(value) = HeaderValue::from_str(&message) {
            headers.insert("grpc-message", value);
        }
        response
    } else {
        let body = serde_json::json!({ "error": message }).to_string();
        let mut response = Response::new(Body::from(body));
        *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        response
    };
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// A token bucket: `rate` requests a second on average, bursts of `rate`.
#[derive(Debug)]
struct Bucket {
    rate: f64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    fn new(rate: u32) -> Bucket {
        Bucket {
            rate: f64::from(rate),
            tokens: f64::from(rate),
            last: Instant::now(),
        }
    }

    /// Whether a request may start now (and takes its token).
    fn take(&mut self) -> bool {
        let now = Instant::now();
        let refill = now.duration_since(self.last).as_secs_f64() * self.rate;
        self.tokens = (self.tokens + refill).min(self.rate);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}
