//! The requests nearly every client makes, `GET /v1/ids?count=N` and gRPC `GetIds`,
//! answered without the router: the same status, headers and bytes as the router's
//! handlers give, with none of the routing, boxing and message framing around them.
//!
//! Only the plain form is answered here: `GET /v1/ids` with no query or `count=DIGITS`
//! alone, and a gRPC (not gRPC-Web) `GetIds` whose body is one uncompressed message of at most
//! [`MAX_REQUEST_BYTES`], whose answer is sent uncompressed (below
//! [`COMPRESS_FROM_BYTES`](grpc::COMPRESS_FROM_BYTES), or to a client that takes no gzip or
//! zstd), and a `GET /v1/ids` whose answer stays below that size or goes to a client that
//! takes nothing compressed. Anything else (another parameter, percent-encoding, a
//! compressed or oversized message, more than one) goes to the router, which answers as it
//! does for every other request; a `GetIds` body, up to 16 KiB, is read to its end first.
//! Limits, tokens, rates, deadlines, CORS and metrics are the same either way: the
//! connection's service applies them around both.

use crate::connections::Reply;
use crate::grpc::{self, MAX_REQUEST_BYTES};
use crate::http;
use crate::proto::GetIdsRequest;
use crate::rate::IdBudget;
use crate::service::Service;
use axum::body::{Body, Bytes, HttpBody};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode, header};
use hyper::body::{Frame, Incoming, SizeHint};
use prost::Message as _;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The path of `GetIds`.
const GET_IDS: &str = "/atomflake.v1.Ids/GetIds";

/// `grpc-encoding`, the header's name.
static GRPC_ENCODING: HeaderName = HeaderName::from_static("grpc-encoding");

/// `grpc-status`, the trailer's name.
static GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");

/// The bytes of an ID in a `GetIdsResponse` (packed `fixed64`).
const ID_BYTES: usize = 8;

/// The most IDs whose JSON answer, `{"ids":["<20 digits>",...]}`, is sure to stay below
/// [`COMPRESS_FROM_BYTES`](grpc::COMPRESS_FROM_BYTES): 10 bytes around 23 for each ID.
const SMALL_JSON_IDS: u64 = ((grpc::COMPRESS_FROM_BYTES - 10) / 23) as u64;

/// A gRPC message's prefix: the compressed flag, then the length in 4 bytes.
const PREFIX: usize = 5;

/// The most of a `GetIds` body read here; the router reads the rest.
const READ_BYTES: usize = 16 * 1024;

/// What [`answer`] did with a request.
pub(crate) enum Direct {
    /// Answered it.
    Answered(Response<Reply>),
    /// Left it to the router: its body is [`Unread::body`] of what is left in the request.
    Route(Unread),
}

/// What was read of a request's body before it was left to the router.
pub(crate) struct Unread {
    /// The bytes read.
    read: Option<Bytes>,
    /// Whether the body ended within them.
    ended: bool,
}

impl Unread {
    /// Nothing read.
    const NONE: Unread = Unread {
        read: None,
        ended: false,
    };

    /// The whole body, given what is left of it (`rest`).
    pub(crate) fn body(self, rest: Incoming) -> Body {
        match self.read {
            None => Body::new(rest),
            Some(read) => Body::new(Replayed {
                read: Some(read),
                rest: (!self.ended).then_some(rest),
            }),
        }
    }
}

/// `request`'s answer when it is one of the plain ID requests, else what was read of its
/// body, for the router to answer it. The request is borrowed, so that the futures that
/// answer it hold no copy of it.
pub(crate) async fn answer(service: &Service, request: &mut Request<Incoming>) -> Direct {
    if request.uri().path() == "/v1/ids" && request.method() == Method::GET {
        let Some(count) = plain_count(request.uri().query()) else {
            return Direct::Route(Unread::NONE);
        };
        // An answer that may reach a KiB, for a client that takes it compressed: the
        // router's.
        if !count.parse().is_ok_and(|count: u64| count <= SMALL_JSON_IDS)
            && http::accepts_any(request.headers(), "accept-encoding", &["gzip", "zstd", "br"])
        {
            return Direct::Route(Unread::NONE);
        }
        let max = u64::from(service.limits().max_count);
        let budget = request.extensions().get::<IdBudget>();
        let asked = http::count_in(Some(count), max).map(|count| (count, http::Written::Strings));
        let (status, body) = http::ids_answer(service, asked, budget).await;
        let mut response = Response::new(Reply::fixed(Bytes::from(body), None));
        *response.status_mut() = status;
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        return Direct::Answered(response);
    }
    if request.uri().path() == GET_IDS
        && request.method() == Method::POST
        && request
            .headers()
            .get(header::CONTENT_TYPE)
            .is_some_and(|kind| matches!(kind.as_bytes(), b"application/grpc" | b"application/grpc+proto"))
    {
        return get_ids(service, request).await;
    }
    Direct::Route(Unread::NONE)
}

/// The count of a plain `GET /v1/ids`: `DIGITS` of a query `count=DIGITS` alone, or `1`
/// with no query (as the router's handler reads a missing count); `None` for any other.
fn plain_count(query: Option<&str>) -> Option<&str> {
    let Some(query) = query else {
        return Some("1");
    };
    let digits = query.strip_prefix("count=")?;
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())).then_some(digits)
}

/// Whether a call's messages are sent uncompressed: no `grpc-encoding`, or `identity`.
fn uncompressed(headers: &HeaderMap) -> bool {
    headers
        .get(&GRPC_ENCODING)
        .is_none_or(|encoding| encoding.as_bytes() == b"identity")
}

/// A `GetIds`: its body read (up to [`READ_BYTES`]), and when that is one plain message,
/// the IDs minted and sent as tonic sends them (the message, then `grpc-status: 0` in the
/// trailers; a refusal as a trailers-only answer). Any other body goes to the router with
/// the bytes read: read to its end, so that a refusal is not sent while the client still
/// sends (HTTP/2 would then reset the stream, and some clients report the reset instead).
async fn get_ids(service: &Service, request: &mut Request<Incoming>) -> Direct {
    let plain = uncompressed(request.headers());
    let mut read = Vec::new();
    let mut ended = false;
    while read.len() <= READ_BYTES {
        match std::future::poll_fn(|cx| Pin::new(request.body_mut()).poll_frame(cx)).await {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    read.extend_from_slice(data);
                }
            }
            // The router's reading of the body meets the same end or error.
            Some(Err(_)) => break,
            None => {
                ended = true;
                break;
            }
        }
    }
    let message = (plain && ended).then(|| one_message(&read)).flatten();
    // An answer worth compressing for a client that takes it compressed: the router's.
    let message = message.filter(|message| {
        message.count as usize * ID_BYTES < grpc::COMPRESS_FROM_BYTES
            || !grpc::accepts_compression(request.headers())
    });
    let Some(message) = message else {
        return Direct::Route(Unread {
            read: Some(Bytes::from(read)),
            ended,
        });
    };
    let budget = request.extensions().get::<IdBudget>();
    Direct::Answered(match grpc::get_ids(service, message.count, budget).await {
        Ok(answer) => {
            let length = answer.encoded_len();
            let mut data = Vec::with_capacity(PREFIX + length);
            data.push(0);
            data.extend_from_slice(
                &u32::try_from(length)
                    .expect("an answer of at most Limits::MAX_COUNT IDs")
                    .to_be_bytes(),
            );
            answer.encode(&mut data).expect("a Vec grows to hold the message");
            let mut trailers = HeaderMap::new();
            trailers.insert(GRPC_STATUS.clone(), HeaderValue::from_static("0"));
            let mut response = Response::new(Reply::fixed(Bytes::from(data), Some(trailers)));
            response
                .headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
            debug_assert_eq!(response.status(), StatusCode::OK);
            response
        }
        Err(status) => status.into_http(),
    })
}

/// The one uncompressed `GetIdsRequest` that `body` holds, when it holds exactly that.
fn one_message(body: &[u8]) -> Option<GetIdsRequest> {
    let (prefix, message) = body.split_at_checked(PREFIX)?;
    let length = u32::from_be_bytes(prefix[1..].try_into().ok()?);
    if prefix[0] != 0 || usize::try_from(length).ok()? != message.len() || message.len() > MAX_REQUEST_BYTES {
        return None;
    }
    GetIdsRequest::decode(message).ok()
}

/// A request body given to the router after its first bytes were read: those bytes, then
/// the rest as it comes.
struct Replayed {
    read: Option<Bytes>,
    rest: Option<Incoming>,
}

impl HttpBody for Replayed {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        if let Some(read) = self.read.take()
            && !read.is_empty()
        {
            return Poll::Ready(Some(Ok(Frame::data(read))));
        }
        match &mut self.rest {
            Some(rest) => Pin::new(rest).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.read.as_ref().is_none_or(Bytes::is_empty)
            && self.rest.as_ref().is_none_or(Incoming::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        let read = self.read.as_ref().map_or(0, Bytes::len) as u64;
        let mut hint = self
            .rest
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Incoming::size_hint);
        hint.set_lower(hint.lower() + read);
        if let Some(upper) = hint.upper() {
            hint.set_upper(upper + read);
        }
        hint
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_no_query_or_count_digits_alone_is_plain() {
        assert_eq!(plain_count(None), Some("1"));
        assert_eq!(plain_count(Some("count=12")), Some("12"));
        assert_eq!(
            plain_count(Some("count=99999999999999999999999")),
            Some("99999999999999999999999")
        );
        for routed in [
            "",
            "count=",
            "count=%31",
            "count=1&count=2",
            "count=1&x=2",
            "x=1",
            "count=+1",
            "count=-1",
        ] {
            assert_eq!(plain_count(Some(routed)), None, "{routed:?}");
        }
    }

    #[test]
    fn one_message_is_one_uncompressed_message_of_at_most_the_limit() {
        let frame = |flag: u8, message: &[u8]| {
            let mut body = vec![flag];
            body.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
            body.extend_from_slice(message);
            body
        };
        assert_eq!(
            one_message(&frame(0, &[0x08, 0x07])),
            Some(GetIdsRequest { count: 7 })
        );
        assert_eq!(one_message(&frame(0, &[])), Some(GetIdsRequest { count: 0 }));
        assert_eq!(one_message(&frame(1, &[0x08, 0x07])), None, "compressed");
        let mut two = frame(0, &[0x08, 0x07]);
        two.extend(frame(0, &[0x08, 0x07]));
        assert_eq!(one_message(&two), None, "two messages");
        assert_eq!(one_message(&frame(0, &[0x08, 0x07])[..6]), None, "cut short");
        assert_eq!(one_message(&[0, 0, 0]), None, "no prefix");
        assert_eq!(one_message(&frame(0, &[0x08])), None, "not a message");
        let mut large = vec![0x08, 0x07, 0x12, 0xff, 0x07];
        large.resize(MAX_REQUEST_BYTES + 1, 0);
        assert_eq!(one_message(&frame(0, &large)), None, "over the limit");
    }
}
