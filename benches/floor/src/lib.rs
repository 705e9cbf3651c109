//! The floors `atomflake serve` is measured against, by the `serve` bench
//! (`atomflake-benches`) and by this crate's `instructions` bin, which counts the
//! instructions each spends per request under callgrind.
//!
//! This module: a hyper server that does no work. It answers every
//! request with fixed bytes, on the stack `atomflake serve` stands on: tokio's
//! multi-thread runtime, hyper-util's HTTP/1.1 and HTTP/2 builder with the same timer and
//! keep-alive, HTTP/2 calls run on their connection's task ([`atomflake_serve::Streams`]),
//! and `TCP_NODELAY`. What a client gets from it is what hyper and the loopback
//! give on this machine. The gap to `atomflake serve` is the cost of the routing, the
//! limits, the metrics and the mint.
//!
//! - Each request's body is read to its end first.
//! - A `POST` (a gRPC call) gets one ID as `GetIdsResponse` does: a 5-byte gRPC frame
//!   header and a packed `fixed64`, then the trailer `grpc-status: 0`.
//! - Anything else (`GET /v1/ids?count=1`) gets `{"ids":["…"]}` with 19 digits, as a
//!   JSON answer for one ID is.

pub mod raw;

use atomflake_serve::Streams;
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use hyper::{Method, Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpStream;

/// A fixed ID, 19 digits as today's Twitter-layout IDs are.
const ID: u64 = 1_999_999_999_999_999_999;

/// An answer's body: its bytes, then its trailers if any, each once.
struct Fixed {
    data: Option<Bytes>,
    trailers: Option<HeaderMap>,
}

impl Body for Fixed {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        let frame = match this.data.take() {
            Some(data) => Frame::data(data),
            None => match this.trailers.take() {
                Some(trailers) => Frame::trailers(trailers),
                None => return Poll::Ready(None),
            },
        };
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none() && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        let length = self.data.as_ref().map_or(0, Bytes::len) as u64;
        if self.trailers.is_some() {
            let mut hint = SizeHint::new();
            hint.set_lower(length);
            hint
        } else {
            SizeHint::with_exact(length)
        }
    }
}

async fn answer(request: Request<Incoming>) -> Result<Response<Fixed>, hyper::Error> {
    let post = request.method() == Method::POST;
    // Read to its end, as a real answer would be.
    request.into_body().collect().await?;
    Ok(if post {
        // gRPC frame: uncompressed, 10 bytes; field 1 (packed, length-delimited), 8 bytes.
        let mut message = vec![0, 0, 0, 0, 10, 0x0a, 8];
        message.extend(ID.to_le_bytes());
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static("0"));
        let mut response = Response::new(Fixed {
            data: Some(Bytes::from(message)),
            trailers: Some(trailers),
        });
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
        response
    } else {
        let mut response = Response::new(Fixed {
            data: Some(Bytes::from(format!("{{\"ids\":[\"{ID}\"]}}"))),
            trailers: None,
        });
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        response
    })
}

/// Serves on `address` until the process is killed, printing `listening on ADDR` on
/// stdout once bound.
///
/// # Errors
///
/// The runtime or the bind failing.
pub fn serve(address: SocketAddr) -> std::io::Result<()> {
    listen(address, |stream| async move {
        let streams = Streams::new();
        let mut builder = Builder::new(streams.clone());
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(Duration::from_secs(31));
        builder
            .http2()
            .timer(TokioTimer::new())
            .keep_alive_interval(Duration::from_secs(20))
            .keep_alive_timeout(Duration::from_secs(20));
        let service = hyper::service::service_fn(answer);
        // A client going away ends its connection; nothing to report.
        tokio::select! {
            biased;
            _ = builder.serve_connection(TokioIo::new(stream), service) => {}
            never = streams.run() => match never {},
        }
    })
}

/// A floor's accept loop, on tokio's multi-thread runtime: binds `address`, prints
/// `listening on ADDR` on stdout, and runs `connection` as a task of its own for each
/// connection accepted, with `TCP_NODELAY` set, until the process is killed.
fn listen<F, C>(address: SocketAddr, connection: F) -> std::io::Result<()>
where
    F: Fn(TcpStream) -> C,
    C: Future<Output = ()> + Send + 'static,
{
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(address).await?;
        println!("listening on {}", listener.local_addr()?);
        loop {
            let (stream, _) = listener.accept().await?;
            stream.set_nodelay(true)?;
            tokio::spawn(connection(stream));
        }
    })
}
