//! The connections a server keeps: how many at once, how long a silent or idle one stays
//! open, how old one may grow, the few kept for health checks once the rest are taken, and
//! the open-file limit they live under.

use crate::metrics::{Closed, Metrics};
use crate::streams::Streams;
use axum::body::{Body, Bytes, HttpBody};
use axum::http::HeaderMap;
use hyper::body::{Frame, SizeHint};
use hyper_util::server::graceful::GracefulConnection;
use std::future::Future;
use std::io;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

/// Connections taken beyond [`Limits::max_connections`](crate::Limits::max_connections)
/// for health checks alone (`/healthz`, `/livez`, `/readyz`, the gRPC health service),
/// so that a load balancer's probe gets an answer while every other slot is taken.
pub const HEALTH_CONNECTIONS: u32 = 16;

/// How long a health-check connection has for its one request.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a connection told to close has to finish what it was doing, past a timeout.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// How often each connection's timeouts are checked.
const CHECK_EVERY: Duration = Duration::from_millis(200);

/// Raises this process's soft limit on open files to the hard limit (as Go's runtime does
/// at start), and returns the soft limit in force.
///
/// # Errors
///
/// The operating system's, when the limits cannot be read.
pub fn raise_file_limit() -> io::Result<u64> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let Some(soft) = limit.current else {
        return Ok(u64::MAX);
    };
    if limit.maximum.is_none_or(|hard| hard > soft) {
        let mut raised = limit;
        raised.current = limit.maximum;
        if setrlimit(Resource::Nofile, raised).is_ok() {
            return Ok(limit.maximum.unwrap_or(u64::MAX));
        }
    }
    Ok(soft)
}

/// A connection's place, held while it is open.
#[derive(Debug)]
pub(crate) struct Slot {
    /// Taken past the cap: the connection may ask for health checks alone.
    pub(crate) health_only: bool,
    _permit: OwnedSemaphorePermit,
}

/// The slots connections take: the cap, then the health checks' few.
#[derive(Debug)]
pub(crate) struct Slots {
    full: Arc<Semaphore>,
    health: Arc<Semaphore>,
}

impl Slots {
    pub(crate) fn new(max_connections: u32) -> Slots {
        Slots {
            full: Arc::new(Semaphore::new(max_connections as usize)),
            health: Arc::new(Semaphore::new(HEALTH_CONNECTIONS as usize)),
        }
    }

    /// The next free slot, a full one first; waits while every slot is taken (the
    /// listener's backlog holds new connections meanwhile). Taken before the connection
    /// comes: [`upgrade`](Self::upgrade) it once it does.
    pub(crate) async fn next(&self) -> Slot {
        let slot = |health_only, permit| Slot {
            health_only,
            _permit: permit,
        };
        if let Ok(permit) = Arc::clone(&self.full).try_acquire_owned() {
            return slot(false, permit);
        }
        // Neither semaphore is ever closed.
        tokio::select! {
            biased;
            Ok(permit) = Arc::clone(&self.full).acquire_owned() => slot(false, permit),
            Ok(permit) = Arc::clone(&self.health).acquire_owned() => slot(true, permit),
        }
    }

    /// `slot`, or a full one in its place when it is for health checks alone and a full
    /// one has come free since it was taken.
    pub(crate) fn upgrade(&self, slot: Slot) -> Slot {
        if !slot.health_only {
            return slot;
        }
        match Arc::clone(&self.full).try_acquire_owned() {
            Ok(permit) => Slot {
                health_only: false,
                _permit: permit,
            },
            Err(_) => slot,
        }
    }
}

/// How long a connection may stay open without a request under way.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timeouts {
    /// From the accept to its first request's head, read whole.
    pub(crate) header: Duration,
    /// From the end of its last request to the next one's head, read whole.
    pub(crate) idle: Duration,
    /// From the accept to the close, requests under way or not: for a connection taken
    /// past the cap, which must not keep its place (an HTTP/2 client calling again and
    /// again, a health `Watch`).
    pub(crate) lifetime: Option<Duration>,
    /// From the accept to the start of a graceful close, requests under way or not: the
    /// maximum age, [`jittered`] for this connection.
    pub(crate) age: Option<Duration>,
    /// How long a connection closed at its age, or at its client certificate's expiry, has
    /// to finish the requests under way.
    pub(crate) grace: Duration,
}

impl Timeouts {
    /// A health-check connection's.
    pub(crate) const HEALTH: Timeouts = Timeouts {
        header: HEALTH_TIMEOUT,
        idle: HEALTH_TIMEOUT,
        lifetime: Some(HEALTH_TIMEOUT),
        age: None,
        grace: CLOSE_GRACE,
    };
}

/// `age` give or take a tenth, as grpc-go jitters its `MaxConnectionAge`: `draw` (any
/// number, [`draw`] for a random one) picks the point in `age * 0.9..=age * 1.1`, so that
/// connections opened together do not all close, and reconnect, together.
pub(crate) fn jittered(age: Duration, draw: u64) -> Duration {
    let tenth = age / 10;
    // At most a tenth of the longest age allowed, 30 days: far within a u64 of nanoseconds.
    let tenth_ns = u64::try_from(tenth.as_nanos()).unwrap_or(u64::MAX / 4);
    age.saturating_sub(tenth) + Duration::from_nanos(draw % (2 * tenth_ns + 1))
}

/// A random number for [`jittered`]: std's randomly keyed hasher, drawn once a connection.
pub(crate) fn draw() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(Instant::now())
}

/// A connection's requests: how many are under way, and since when none is.
#[derive(Debug)]
pub(crate) struct Activity {
    opened: Instant,
    in_flight: AtomicU32,
    requests: AtomicU64,
    /// Milliseconds from `opened` to the end of the last request (0: none yet).
    quiet_since_ms: AtomicU64,
}

impl Activity {
    pub(crate) fn new() -> Arc<Activity> {
        Arc::new(Activity {
            opened: Instant::now(),
            in_flight: AtomicU32::new(0),
            requests: AtomicU64::new(0),
            quiet_since_ms: AtomicU64::new(0),
        })
    }

    /// A request begins; it ends when the returned guard is dropped (with the response's
    /// body, for a stream after its last message).
    pub(crate) fn begin(self: &Arc<Activity>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.requests.fetch_add(1, Ordering::Relaxed);
        InFlight(Arc::clone(self))
    }

    /// Why the connection is overdue for closing, if it is: no request under way, and
    /// none begun within the timeout that applies.
    fn overdue(&self, timeouts: Timeouts) -> Option<Closed> {
        if timeouts
            .lifetime
            .is_some_and(|lifetime| self.opened.elapsed() >= lifetime)
        {
            return Some(Closed::Lifetime);
        }
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        let quiet = self
            .opened
            .elapsed()
            .saturating_sub(Duration::from_millis(self.quiet_since_ms.load(Ordering::Acquire)));
        if self.requests.load(Ordering::Relaxed) == 0 {
            (quiet >= timeouts.header).then_some(Closed::Header)
        } else {
            (quiet >= timeouts.idle).then_some(Closed::Idle)
        }
    }
}

/// A request under way on a connection.
#[derive(Debug)]
pub(crate) struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let activity = &self.0;
        let now = u64::try_from(activity.opened.elapsed().as_millis()).unwrap_or(u64::MAX);
        activity.quiet_since_ms.fetch_max(now, Ordering::AcqRel);
        activity.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response's body: fixed bytes and trailers answered without the router (see
/// [`direct`](crate::direct)), or the router's.
pub(crate) enum Reply {
    Fixed {
        data: Option<Bytes>,
        trailers: Option<HeaderMap>,
    },
    Routed(Body),
}

impl Reply {
    /// `data` in one frame, then `trailers` if any.
    pub(crate) fn fixed(data: Bytes, trailers: Option<HeaderMap>) -> Reply {
        Reply::Fixed {
            data: Some(data),
            trailers,
        }
    }
}

/// No bytes: a gRPC trailers-only answer's.
impl Default for Reply {
    fn default() -> Reply {
        Reply::Fixed {
            data: None,
            trailers: None,
        }
    }
}

impl From<Body> for Reply {
    fn from(body: Body) -> Reply {
        Reply::Routed(body)
    }
}

impl HttpBody for Reply {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        match self.get_mut() {
            Reply::Fixed { data, trailers } => Poll::Ready(
                data.take()
                    .map(Frame::data)
                    .or_else(|| trailers.take().map(Frame::trailers))
                    .map(Ok),
            ),
            Reply::Routed(body) => Pin::new(body).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Reply::Fixed { data, trailers } => data.is_none() && trailers.is_none(),
            Reply::Routed(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Reply::Fixed { data, trailers } => {
                let length = data.as_ref().map_or(0, Bytes::len) as u64;
                if trailers.is_some() {
                    let mut hint = SizeHint::new();
                    hint.set_lower(length);
                    hint
                } else {
                    SizeHint::with_exact(length)
                }
            }
            Reply::Routed(body) => body.size_hint(),
        }
    }
}

/// A response body that holds its request's [`InFlight`] until it is done.
pub(crate) struct Tracked {
    reply: Reply,
    _in_flight: InFlight,
    /// The request's span, when it is traced: ended with the answer.
    span: Option<Box<crate::otlp::RequestSpan>>,
}

impl Tracked {
    pub(crate) fn new(
        reply: Reply,
        in_flight: InFlight,
        span: Option<Box<crate::otlp::RequestSpan>>,
    ) -> Tracked {
        Tracked {
            reply,
            _in_flight: in_flight,
            span,
        }
    }
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.reply).poll_frame(cx);
        if let (Some(span), Poll::Ready(Some(Ok(frame)))) = (&mut self.span, &polled)
            && let Some(trailers) = frame.trailers_ref()
        {
            span.grpc_status(trailers);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.reply.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.reply.size_hint()
    }
}

/// Drives `connection` and its HTTP/2 `streams` until it ends, the server drains
/// (`closing` turns true), `client` completes (its client's certificate no longer
/// authenticates it: why), it reaches its age, or it has no request under way past its
/// `timeouts`: then closes it gracefully (HTTP/2 `GOAWAY`; HTTP/1.1 no request read after
/// the one under way), and but for a drain drops it after the grace of `timeouts` (at its
/// age or its certificate's expiry) or [`CLOSE_GRACE`] (a request head still trickling
/// in, a stream under way).
pub(crate) async fn keep<C: GracefulConnection>(
    connection: C,
    streams: &Streams,
    activity: &Activity,
    timeouts: Timeouts,
    mut closing: watch::Receiver<bool>,
    client: impl Future<Output = Closed>,
    metrics: &Metrics,
) {
    let mut connection = pin!(connection);
    let mut streams = pin!(streams.run());
    let mut client = pin!(client);
    // One timer for the connection's life, when it has an age.
    let aged = timeouts.age.map(|age| activity.opened + age);
    let mut aged = pin!(async move {
        match aged {
            Some(at) => tokio::time::sleep_until(at.into()).await,
            None => std::future::pending().await,
        }
    });
    let mut check = tokio::time::interval(CHECK_EVERY);
    let why = loop {
        tokio::select! {
            // The connection first: the calls it reads are then run in the same pass.
            biased;
            // A connection that fails (a client that went away) ends alone.
            _ = connection.as_mut() => return,
            never = streams.as_mut() => match never {},
            _ = closing.wait_for(|closing| *closing) => break Closed::Drain,
            why = client.as_mut() => break why,
            () = aged.as_mut() => break Closed::MaxAge,
            _ = check.tick() => {
                if let Some(why) = activity.overdue(timeouts) {
                    break why;
                }
            }
        }
    };
    connection.as_mut().graceful_shutdown();
    let closed = async {
        tokio::select! {
            biased;
            _ = connection => {}
            never = streams => match never {},
        }
    };
    if why == Closed::Drain {
        // The server bounds the drain.
        closed.await;
    } else {
        metrics.count_closed(why);
        let grace = match why {
            Closed::MaxAge | Closed::Expired => timeouts.grace,
            _ => CLOSE_GRACE,
        };
        let _ = tokio::time::timeout(grace, closed).await;
    }
}

/// Whether `path` is a health check's: what a connection taken past the cap may ask.
pub(crate) fn is_health_check(path: &str) -> bool {
    matches!(path, "/healthz" | "/livez" | "/readyz") || path.starts_with("/grpc.health.v1.Health/")
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Timeouts = Timeouts {
        header: Duration::ZERO,
        idle: Duration::ZERO,
        lifetime: None,
        age: None,
        grace: CLOSE_GRACE,
    };
    const LATER: Timeouts = Timeouts {
        header: Duration::from_secs(3600),
        idle: Duration::from_secs(3600),
        lifetime: None,
        age: None,
        grace: CLOSE_GRACE,
    };

    #[test]
    fn a_connection_is_overdue_only_with_no_request_under_way() {
        let activity = Activity::new();
        assert_eq!(activity.overdue(NOW), Some(Closed::Header));
        assert_eq!(activity.overdue(LATER), None);
        let first = activity.begin();
        let second = activity.begin();
        assert_eq!(activity.overdue(NOW), None);
        drop(first);
        assert_eq!(activity.overdue(NOW), None, "one still under way");
        drop(second);
        assert_eq!(activity.overdue(NOW), Some(Closed::Idle));
        assert_eq!(activity.overdue(LATER), None);
    }

    #[test]
    fn a_connection_past_its_lifetime_is_overdue_even_with_a_request_under_way() {
        let activity = Activity::new();
        let _under_way = activity.begin();
        let ended = Timeouts {
            lifetime: Some(Duration::ZERO),
            ..LATER
        };
        assert_eq!(activity.overdue(ended), Some(Closed::Lifetime));
        assert_eq!(activity.overdue(LATER), None);
    }

    #[test]
    fn a_jittered_age_is_within_a_tenth_of_the_age_and_reaches_both_ends() {
        let age = Duration::from_secs(10);
        let (least, most) = (Duration::from_secs(9), Duration::from_secs(11));
        let span = 2 * 1_000_000_000 + 1;
        assert_eq!(jittered(age, 0), least);
        assert_eq!(jittered(age, span - 1), most);
        assert_eq!(jittered(age, span), least);
        assert_eq!(jittered(age, span / 2), age);
        for draw in [1, 12_345, u64::MAX, draw(), draw()] {
            let jittered = jittered(age, draw);
            assert!((least..=most).contains(&jittered), "{draw}: {jittered:?}");
        }
        let longest = crate::Limits::MAX_CONNECTION_AGE;
        let (far, tenth) = (jittered(longest, u64::MAX), longest / 10);
        assert!(
            (longest.saturating_sub(tenth)..=longest + tenth).contains(&far),
            "{far:?}"
        );
        assert_eq!(jittered(Duration::from_secs(1), 0), Duration::from_millis(900));
    }

    #[test]
    fn health_checks_are_the_health_paths_alone() {
        for path in ["/healthz", "/livez", "/readyz", "/grpc.health.v1.Health/Check"] {
            assert!(is_health_check(path), "{path}");
        }
        for path in ["/v1/ids", "/metrics", "/healthz/x", "/atomflake.v1.Ids/GetIds"] {
            assert!(!is_health_check(path), "{path}");
        }
    }
}
