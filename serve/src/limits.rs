//! [`Limits`]: what one client may ask of a server, every limit's allowed range and the one
//! check of them all ([`Limits::check`]), which a [`Service`](crate::Service) is built only
//! with.

use crate::connections::HEALTH_CONNECTIONS;
use std::fmt;
use std::time::Duration;

/// Open files kept beyond the connections: the listener, the lease's connection to its
/// engine, high-water files, the standard streams and the runtime's own.
pub const RESERVED_FILES: u64 = 64;

/// The most connections a process with `file_limit` open files may serve:
/// [`HEALTH_CONNECTIONS`] and [`RESERVED_FILES`] taken out.
///
/// # Examples
///
/// ```
/// assert_eq!(atomflake_serve::max_connections_within(1024), 944);
/// assert_eq!(atomflake_serve::max_connections_within(80), 0);
/// ```
#[must_use]
pub fn max_connections_within(file_limit: u64) -> u32 {
    let left = file_limit.saturating_sub(RESERVED_FILES + u64::from(HEALTH_CONNECTIONS));
    u32::try_from(left).unwrap_or(u32::MAX)
}

/// The most worker threads a server's runtime may have: far past any machine's cores.
pub const MAX_WORKER_THREADS: usize = 1024;

/// Whether `threads` worker threads are within `1..=`[`MAX_WORKER_THREADS`].
///
/// # Errors
///
/// [`Limit::WorkerThreads`] out of its range.
///
/// # Examples
///
/// ```
/// assert!(atomflake_serve::check_worker_threads(16).is_ok());
/// assert_eq!(
///     atomflake_serve::check_worker_threads(0).unwrap_err().named("--threads").to_string(),
///     "--threads 0 is out of range: allowed 1..=1024"
/// );
/// ```
pub fn check_worker_threads(threads: usize) -> Result<(), LimitsError> {
    let threads = u64::try_from(threads).unwrap_or(u64::MAX);
    within(Limit::WorkerThreads, threads, 1, MAX_WORKER_THREADS as u64)
}

/// The limits that keep one client from starving the others.
///
/// Each field has an allowed range, said in its docs and checked by [`check`](Self::check):
/// a [`Service`](crate::Service) refuses limits outside them. [`Limits::default`] is within
/// every range.
///
/// # Examples
///
/// ```
/// use atomflake_serve::{Limit, Limits};
///
/// let limits = Limits { max_streams: 64, ..Limits::default() };
/// assert_eq!(limits.check(), Ok(()));
///
/// let error = Limits { max_streams: 0, ..Limits::default() }.check().unwrap_err();
/// assert_eq!(error.limit(), Limit::MaxStreams);
/// assert_eq!(error.to_string(), "max_streams 0 is out of range: allowed 1..=1048576");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The most IDs one `GET /v1/ids` or `GetIds` call returns: 1..=[`MAX_COUNT`](Self::MAX_COUNT).
    pub max_count: u32,
    /// The most requests (HTTP requests and gRPC calls) one connection may start per
    /// second, on average; bursts of as many are let through. At least 1.
    pub requests_per_second: u32,
    /// The most IDs one connection may take per second, on average, when set: a request for
    /// more than are left now is refused, and a stream is slowed to it. At least
    /// [`max_count`](Self::max_count) (a request of as many IDs must be able to pass), at
    /// most [`MAX_IDS_RATE`](Self::MAX_IDS_RATE).
    pub ids_per_second: Option<u64>,
    /// The most gRPC calls one HTTP/2 connection may have open at once. At least 1.
    pub streams_per_connection: u32,
    /// The most `StreamIds` calls the whole server serves at once: one more is refused
    /// (`RESOURCE_EXHAUSTED`) until one ends. 1..=[`MAX_STREAMS`](Self::MAX_STREAMS).
    pub max_streams: u32,
    /// How long a request waits for minting to resume (a mark being stored, a lease being
    /// renewed) before it is refused as unavailable. At most
    /// [`MAX_TIMEOUT`](Self::MAX_TIMEOUT); zero refuses at once.
    pub patience: Duration,
    /// The most connections open at once; past them the listener's backlog holds new ones,
    /// but for [`HEALTH_CONNECTIONS`] more that answer health
    /// checks alone. At least 1; within an open-file limit, see
    /// [`check_open_files`](Self::check_open_files).
    pub max_connections: u32,
    /// How long a new connection has to send its first request's head, whole (a silent or
    /// trickling client is closed after it); for HTTP/1.1 also every later request's head
    /// once it begins. [`MIN_TIMEOUT`](Self::MIN_TIMEOUT)..=[`MAX_TIMEOUT`](Self::MAX_TIMEOUT).
    pub header_timeout: Duration,
    /// How long a connection with no request under way stays open after its last one.
    /// [`MIN_TIMEOUT`](Self::MIN_TIMEOUT)..=[`MAX_TIMEOUT`](Self::MAX_TIMEOUT).
    pub idle_timeout: Duration,
    /// How long a `StreamIds` waits for its client to take its next message (the stream's
    /// buffer and flow-control window full: a client that stopped reading) before it ends
    /// with `DEADLINE_EXCEEDED` and frees its place among the server's streams.
    /// [`MIN_TIMEOUT`](Self::MIN_TIMEOUT)..=[`MAX_TIMEOUT`](Self::MAX_TIMEOUT).
    pub stall_timeout: Duration,
    /// How long a connection may stay open, requests under way or not, when set: at that
    /// age, give or take a tenth drawn for each connection (as grpc-go's
    /// `MaxConnectionAge`, so that connections opened together do not all end together),
    /// the server closes it gracefully: HTTP/2 `GOAWAY`, the calls under way finish and
    /// the client opens a new connection for the next; HTTP/1.1 reads no request after the
    /// one under way, whose answer says `Connection: close` when its head is still to be
    /// written. [`max_connection_age_grace`](Self::max_connection_age_grace) later, what
    /// is still open is cut. [`MIN_TIMEOUT`](Self::MIN_TIMEOUT)..=[`MAX_CONNECTION_AGE`](Self::MAX_CONNECTION_AGE).
    ///
    /// `None` unless set: an ID carries no state of the connection it was minted on, so
    /// age alone is no reason to close one. Set it to spread long-lived clients (gRPC
    /// channels) over the servers behind a layer-4 balancer, which places a connection only
    /// when it opens.
    pub max_connection_age: Option<Duration>,
    /// How long a connection closed gracefully at its
    /// [`max_connection_age`](Self::max_connection_age), or when its client certificate's
    /// `notAfter` passes (mTLS), has to finish the requests under way before it is cut.
    /// [`MIN_TIMEOUT`](Self::MIN_TIMEOUT)..=[`MAX_TIMEOUT`](Self::MAX_TIMEOUT).
    pub max_connection_age_grace: Duration,
}

impl Limits {
    /// The largest [`max_count`](Self::max_count) allowed.
    pub const MAX_COUNT: u32 = 1 << 20;
    /// The most IDs one `StreamIds` call may ask for.
    pub const MAX_STREAM_COUNT: u64 = 1 << 32;
    /// The largest [`max_streams`](Self::max_streams) allowed: tokio's semaphores hold at
    /// most 2^61 permits, and a million streams is far past any server's memory.
    pub const MAX_STREAMS: u32 = 1 << 20;
    /// The largest [`ids_per_second`](Self::ids_per_second) allowed: 2^53, which the rate's
    /// bucket counts exactly.
    pub const MAX_IDS_RATE: u64 = 1 << 53;
    /// The shortest header, idle and stall timeout allowed.
    pub const MIN_TIMEOUT: Duration = Duration::from_secs(1);
    /// The longest header, idle and stall timeout, and the longest patience, allowed.
    pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);
    /// The [`stall_timeout`](Self::stall_timeout) unless set: far past a client's pause to
    /// collect garbage or a congested link's, short enough that clients that stop reading
    /// cannot keep every place among the streams for long.
    pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(30);
    /// The longest [`max_connection_age`](Self::max_connection_age) allowed: 30 days, past
    /// any use of it to spread connections over servers.
    pub const MAX_CONNECTION_AGE: Duration = Duration::from_secs(30 * 24 * 3600);
    /// The [`max_connection_age_grace`](Self::max_connection_age_grace) unless set: far
    /// past a call's time (its wait for minting included, 2 s unless set), short enough
    /// that a connection whose client certificate has expired is gone seconds after.
    pub const DEFAULT_CONNECTION_AGE_GRACE: Duration = Duration::from_secs(10);

    /// The limits unless set: 4096 IDs a call, 100,000 requests per second on a connection
    /// and no ID rate, 64 calls on a connection, 1024 streams, a patience of 2 s, 4096
    /// connections, header, idle and stall timeouts of 10 s, 60 s and 30 s, no maximum
    /// connection age and a grace of 10 s.
    pub const DEFAULT: Limits = Limits {
        max_count: 4096,
        requests_per_second: 100_000,
        ids_per_second: None,
        streams_per_connection: 64,
        max_streams: 1024,
        patience: Duration::from_secs(2),
        max_connections: 4096,
        header_timeout: Duration::from_secs(10),
        idle_timeout: Duration::from_secs(60),
        stall_timeout: Limits::DEFAULT_STALL_TIMEOUT,
        max_connection_age: None,
        max_connection_age_grace: Limits::DEFAULT_CONNECTION_AGE_GRACE,
    };

    /// Checks every limit against its allowed range, in the order of the fields.
    ///
    /// # Errors
    ///
    /// The first limit out of its range, with its value and the range: permanent, the
    /// limits must change.
    ///
    /// # Examples
    ///
    /// ```
    /// use atomflake_serve::Limits;
    /// use std::time::Duration;
    ///
    /// assert_eq!(Limits::default().check(), Ok(()));
    /// let slow = Limits { idle_timeout: Duration::from_secs(3601), ..Limits::default() };
    /// assert_eq!(
    ///     slow.check().unwrap_err().to_string(),
    ///     "idle_timeout 3601s is out of range: allowed 1s..=3600s"
    /// );
    /// ```
    pub fn check(&self) -> Result<(), LimitsError> {
        let max_count = u64::from(self.max_count);
        within(Limit::MaxCount, max_count, 1, u64::from(Limits::MAX_COUNT))?;
        within_u32(Limit::RequestsPerSecond, self.requests_per_second, u32::MAX)?;
        if let Some(rate) = self.ids_per_second {
            within(Limit::IdsPerSecond, rate, max_count.max(1), Limits::MAX_IDS_RATE)?;
        }
        within_u32(Limit::StreamsPerConnection, self.streams_per_connection, u32::MAX)?;
        within_u32(Limit::MaxStreams, self.max_streams, Limits::MAX_STREAMS)?;
        within_time(Limit::Patience, self.patience, Duration::ZERO)?;
        within_u32(Limit::MaxConnections, self.max_connections, u32::MAX)?;
        within_time(Limit::HeaderTimeout, self.header_timeout, Limits::MIN_TIMEOUT)?;
        within_time(Limit::IdleTimeout, self.idle_timeout, Limits::MIN_TIMEOUT)?;
        within_time(Limit::StallTimeout, self.stall_timeout, Limits::MIN_TIMEOUT)?;
        if let Some(age) = self.max_connection_age {
            within(
                Limit::MaxConnectionAge,
                age,
                Limits::MIN_TIMEOUT,
                Limits::MAX_CONNECTION_AGE,
            )?;
        }
        within_time(
            Limit::MaxConnectionAgeGrace,
            self.max_connection_age_grace,
            Limits::MIN_TIMEOUT,
        )
    }

    /// [`check`](Self::check), and that [`max_connections`](Self::max_connections) fits
    /// in a process's `file_limit` open files ([`max_connections_within`]), as returned by
    /// [`raise_file_limit`](crate::raise_file_limit).
    ///
    /// # Errors
    ///
    /// What [`check`](Self::check) finds; then `max_connections` past the files left,
    /// naming the file limit, or a file limit that leaves no room for a connection at all.
    ///
    /// # Examples
    ///
    /// ```
    /// use atomflake_serve::Limits;
    ///
    /// let limits = Limits { max_connections: 500, ..Limits::default() };
    /// assert_eq!(limits.check_open_files(1024), Ok(()));
    /// assert_eq!(
    ///     limits.check_open_files(200).unwrap_err().to_string(),
    ///     "max_connections 500 is out of range: allowed 1..=120 (the open-file limit is 200, \
    ///      less 16 for health checks and 64 for the server's own files)"
    /// );
    /// ```
    pub fn check_open_files(&self, file_limit: u64) -> Result<(), LimitsError> {
        self.check()?;
        let most = max_connections_within(file_limit);
        if most == 0 {
            return Err(LimitsError(Kind::NoRoom { file_limit }));
        }
        if self.max_connections > most {
            return Err(LimitsError(Kind::OutOfRange {
                limit: Limit::MaxConnections,
                value: Amount::Number(self.max_connections.into()),
                min: Amount::Number(1),
                max: Amount::Number(most.into()),
                file_limit: Some(file_limit),
            }));
        }
        Ok(())
    }
}

impl Default for Limits {
    /// [`Limits::DEFAULT`].
    fn default() -> Limits {
        Limits::DEFAULT
    }
}

/// `value` of `limit` within `min..=max`: a number, or a time.
fn within<V: PartialOrd + Into<Amount>>(limit: Limit, value: V, min: V, max: V) -> Result<(), LimitsError> {
    if min <= value && value <= max {
        return Ok(());
    }
    Err(LimitsError(Kind::OutOfRange {
        limit,
        value: value.into(),
        min: min.into(),
        max: max.into(),
        file_limit: None,
    }))
}

/// [`within`] `1..=max`, for the limits held as a `u32`.
fn within_u32(limit: Limit, value: u32, max: u32) -> Result<(), LimitsError> {
    within(limit, value.into(), 1, max.into())
}

/// `value` of `limit` within `min..=`[`Limits::MAX_TIMEOUT`].
fn within_time(limit: Limit, value: Duration, min: Duration) -> Result<(), LimitsError> {
    within(limit, value, min, Limits::MAX_TIMEOUT)
}

/// One of the [`Limits`], as a [`LimitsError`] names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Limit {
    /// [`Limits::max_count`].
    MaxCount,
    /// [`Limits::requests_per_second`].
    RequestsPerSecond,
    /// [`Limits::ids_per_second`].
    IdsPerSecond,
    /// [`Limits::streams_per_connection`].
    StreamsPerConnection,
    /// [`Limits::max_streams`].
    MaxStreams,
    /// [`Limits::patience`].
    Patience,
    /// [`Limits::max_connections`].
    MaxConnections,
    /// [`Limits::header_timeout`].
    HeaderTimeout,
    /// [`Limits::idle_timeout`].
    IdleTimeout,
    /// [`Limits::stall_timeout`].
    StallTimeout,
    /// [`Limits::max_connection_age`].
    MaxConnectionAge,
    /// [`Limits::max_connection_age_grace`].
    MaxConnectionAgeGrace,
    /// The runtime's worker threads ([`check_worker_threads`]), not one of the [`Limits`].
    WorkerThreads,
}

impl Limit {
    /// The field's name in [`Limits`] (`max_streams`).
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(atomflake_serve::Limit::HeaderTimeout.name(), "header_timeout");
    /// ```
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Limit::MaxCount => "max_count",
            Limit::RequestsPerSecond => "requests_per_second",
            Limit::IdsPerSecond => "ids_per_second",
            Limit::StreamsPerConnection => "streams_per_connection",
            Limit::MaxStreams => "max_streams",
            Limit::Patience => "patience",
            Limit::MaxConnections => "max_connections",
            Limit::HeaderTimeout => "header_timeout",
            Limit::IdleTimeout => "idle_timeout",
            Limit::StallTimeout => "stall_timeout",
            Limit::MaxConnectionAge => "max_connection_age",
            Limit::MaxConnectionAgeGrace => "max_connection_age_grace",
            Limit::WorkerThreads => "worker_threads",
        }
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// [`Limits`] that a [`Service`](crate::Service) refuses: one limit out of its allowed
/// range, named with its value and the range (times in seconds). Permanent: the limits
/// must change.
///
/// # Examples
///
/// ```
/// use atomflake_serve::Limits;
///
/// let error = Limits { ids_per_second: Some(100), ..Limits::default() }.check().unwrap_err();
/// assert_eq!(
///     error.to_string(),
///     "ids_per_second 100 is out of range: allowed 4096..=9007199254740992"
/// );
/// // A front end names the limit its own way: `--ids-rate` here.
/// assert_eq!(
///     error.named("--ids-rate").to_string(),
///     "--ids-rate 100 is out of range: allowed 4096..=9007199254740992"
/// );
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitsError(Kind);

#[derive(Clone, Debug, PartialEq, Eq)]
enum Kind {
    /// `limit`'s `value` outside `min..=max`; for `max_connections`, past what
    /// `file_limit` leaves.
    OutOfRange {
        limit: Limit,
        value: Amount,
        min: Amount,
        max: Amount,
        file_limit: Option<u64>,
    },
    /// An open-file limit that leaves no room for one connection.
    NoRoom { file_limit: u64 },
}

/// A limit's value: a number, or a time shown in seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Amount {
    Number(u64),
    Time(Duration),
}

impl From<u64> for Amount {
    fn from(number: u64) -> Amount {
        Amount::Number(number)
    }
}

impl From<Duration> for Amount {
    fn from(time: Duration) -> Amount {
        Amount::Time(time)
    }
}

impl Amount {
    /// Writes the amount; a time in seconds, followed by `s` unless `bare`.
    fn write(self, f: &mut fmt::Formatter<'_>, bare: bool) -> fmt::Result {
        match self {
            Amount::Number(number) => write!(f, "{number}"),
            Amount::Time(time) => {
                if time.subsec_nanos() == 0 {
                    write!(f, "{}", time.as_secs())?;
                } else {
                    write!(f, "{}", time.as_secs_f64())?;
                }
                if bare { Ok(()) } else { f.write_str("s") }
            }
        }
    }
}

impl LimitsError {
    /// The limit out of its range. For an open-file limit that leaves no room for a
    /// connection, [`Limit::MaxConnections`].
    #[must_use]
    pub fn limit(&self) -> Limit {
        match self.0 {
            Kind::OutOfRange { limit, .. } => limit,
            Kind::NoRoom { .. } => Limit::MaxConnections,
        }
    }

    /// Whether the open-file limit, not the limits, is at fault: it leaves no room for a
    /// connection at all, whatever [`Limits::max_connections`] is.
    #[must_use]
    pub fn is_file_limit(&self) -> bool {
        matches!(self.0, Kind::NoRoom { .. })
    }

    /// The same message with the limit called `name` (a command-line flag, a
    /// configuration key) rather than by its field's name, and times as a bare number of
    /// seconds, as such a setting in seconds takes them.
    #[must_use]
    pub fn named<'a>(&'a self, name: &'a str) -> impl fmt::Display + 'a {
        Named { error: self, name }
    }

    /// The message, the limit called `name`; times followed by `s` unless `bare`.
    fn write(&self, f: &mut fmt::Formatter<'_>, name: &str, bare: bool) -> fmt::Result {
        match &self.0 {
            Kind::OutOfRange {
                value,
                min,
                max,
                file_limit,
                ..
            } => {
                write!(f, "{name} ")?;
                value.write(f, bare)?;
                f.write_str(" is out of range: allowed ")?;
                min.write(f, bare)?;
                f.write_str("..=")?;
                max.write(f, bare)?;
                if let Some(file_limit) = file_limit {
                    write!(
                        f,
                        " (the open-file limit is {file_limit}, less {HEALTH_CONNECTIONS} for health \
                         checks and {RESERVED_FILES} for the server's own files)"
                    )?;
                }
                Ok(())
            }
            Kind::NoRoom { file_limit } => write!(
                f,
                "the open-file limit of {file_limit} leaves no room for connections: allowed at least {}",
                u64::from(HEALTH_CONNECTIONS) + RESERVED_FILES + 1
            ),
        }
    }
}

impl fmt::Display for LimitsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write(f, self.limit().name(), false)
    }
}

impl std::error::Error for LimitsError {}

/// [`LimitsError::named`].
struct Named<'a> {
    error: &'a LimitsError,
    name: &'a str,
}

impl fmt::Display for Named<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.write(f, self.name, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn secs(seconds: u64) -> Duration {
        Duration::from_secs(seconds)
    }

    /// Every limit just past each end of its range (where its type has room past the end:
    /// `requests_per_second`, `streams_per_connection` and `max_connections` allow every
    /// `u32` but 0, `patience` any time up to the longest), with the error it gets.
    const PAST_THE_ENDS: [(Limits, Limit, &str); 21] = [
        (
            Limits {
                max_count: 0,
                ..Limits::DEFAULT
            },
            Limit::MaxCount,
            "max_count 0 is out of range: allowed 1..=1048576",
        ),
        (
            Limits {
                max_count: (1 << 20) + 1,
                ids_per_second: None,
                ..Limits::DEFAULT
            },
            Limit::MaxCount,
            "max_count 1048577 is out of range: allowed 1..=1048576",
        ),
        (
            Limits {
                requests_per_second: 0,
                ..Limits::DEFAULT
            },
            Limit::RequestsPerSecond,
            "requests_per_second 0 is out of range: allowed 1..=4294967295",
        ),
        (
            Limits {
                ids_per_second: Some(4095),
                ..Limits::DEFAULT
            },
            Limit::IdsPerSecond,
            "ids_per_second 4095 is out of range: allowed 4096..=9007199254740992",
        ),
        (
            Limits {
                ids_per_second: Some(99),
                max_count: 100,
                ..Limits::DEFAULT
            },
            Limit::IdsPerSecond,
            "ids_per_second 99 is out of range: allowed 100..=9007199254740992",
        ),
        (
            Limits {
                ids_per_second: Some((1 << 53) + 1),
                ..Limits::DEFAULT
            },
            Limit::IdsPerSecond,
            "ids_per_second 9007199254740993 is out of range: allowed 4096..=9007199254740992",
        ),
        (
            Limits {
                streams_per_connection: 0,
                ..Limits::DEFAULT
            },
            Limit::StreamsPerConnection,
            "streams_per_connection 0 is out of range: allowed 1..=4294967295",
        ),
        (
            Limits {
                max_streams: 0,
                ..Limits::DEFAULT
            },
            Limit::MaxStreams,
            "max_streams 0 is out of range: allowed 1..=1048576",
        ),
        (
            Limits {
                max_streams: (1 << 20) + 1,
                ..Limits::DEFAULT
            },
            Limit::MaxStreams,
            "max_streams 1048577 is out of range: allowed 1..=1048576",
        ),
        (
            Limits {
                patience: secs(3601),
                ..Limits::DEFAULT
            },
            Limit::Patience,
            "patience 3601s is out of range: allowed 0s..=3600s",
        ),
        (
            Limits {
                max_connections: 0,
                ..Limits::DEFAULT
            },
            Limit::MaxConnections,
            "max_connections 0 is out of range: allowed 1..=4294967295",
        ),
        (
            Limits {
                header_timeout: Duration::from_millis(500),
                ..Limits::DEFAULT
            },
            Limit::HeaderTimeout,
            "header_timeout 0.5s is out of range: allowed 1s..=3600s",
        ),
        (
            Limits {
                header_timeout: secs(3601),
                ..Limits::DEFAULT
            },
            Limit::HeaderTimeout,
            "header_timeout 3601s is out of range: allowed 1s..=3600s",
        ),
        (
            Limits {
                idle_timeout: Duration::ZERO,
                ..Limits::DEFAULT
            },
            Limit::IdleTimeout,
            "idle_timeout 0s is out of range: allowed 1s..=3600s",
        ),
        (
            Limits {
                idle_timeout: Duration::from_millis(3_600_001),
                ..Limits::DEFAULT
            },
            Limit::IdleTimeout,
            "idle_timeout 3600.001s is out of range: allowed 1s..=3600s",
        ),
        (
            Limits {
                stall_timeout: Duration::ZERO,
                ..Limits::DEFAULT
            },
            Limit::StallTimeout,
            "stall_timeout 0s is out of range: allowed 1s..=3600s",
        ),
        (
            Limits {
                stall_timeout: secs(3601),
                ..Limits::DEFAULT
            },
            Limit::StallTimeout,
            "stall_timeout 3601s is out of range: allowed 1s..=3600s",
        ),
        (
            Limits {
                max_connection_age: Some(Duration::ZERO),
                ..Limits::DEFAULT
            },
            Limit::MaxConnectionAge,
            "max_connection_age 0s is out of range: allowed 1s..=2592000s",
        ),
        (
            Limits {
                max_connection_age: Some(secs(2_592_001)),
                ..Limits::DEFAULT
            },
            Limit::MaxConnectionAge,
            "max_connection_age 2592001s is out of range: allowed 1s..=2592000s",
        ),
        (
            Limits {
                max_connection_age_grace: Duration::ZERO,
                ..Limits::DEFAULT
            },
            Limit::MaxConnectionAgeGrace,
            "max_connection_age_grace 0s is out of range: allowed 1s..=3600s",
        ),
        (
            Limits {
                max_connection_age_grace: secs(3601),
                ..Limits::DEFAULT
            },
            Limit::MaxConnectionAgeGrace,
            "max_connection_age_grace 3601s is out of range: allowed 1s..=3600s",
        ),
    ];

    #[test]
    fn each_limit_past_either_end_of_its_range_is_refused_with_the_value_and_the_range() {
        for (limits, limit, message) in PAST_THE_ENDS {
            let error = limits.check().unwrap_err();
            assert_eq!((error.limit(), error.to_string().as_str()), (limit, message));
            assert!(!error.is_file_limit(), "{message}");
            assert_eq!(limits.check_open_files(u64::MAX), Err(error), "{message}");
        }
    }

    #[test]
    fn each_end_of_each_range_is_allowed() {
        let least = Limits {
            max_count: 1,
            requests_per_second: 1,
            ids_per_second: Some(1),
            streams_per_connection: 1,
            max_streams: 1,
            patience: Duration::ZERO,
            max_connections: 1,
            header_timeout: secs(1),
            idle_timeout: secs(1),
            stall_timeout: secs(1),
            max_connection_age: Some(secs(1)),
            max_connection_age_grace: secs(1),
        };
        let most = Limits {
            max_count: 1 << 20,
            requests_per_second: u32::MAX,
            ids_per_second: Some(1 << 53),
            streams_per_connection: u32::MAX,
            max_streams: 1 << 20,
            patience: secs(3600),
            max_connections: u32::MAX,
            header_timeout: secs(3600),
            idle_timeout: secs(3600),
            stall_timeout: secs(3600),
            max_connection_age: Some(secs(2_592_000)),
            max_connection_age_grace: secs(3600),
        };
        for limits in [
            least,
            most,
            Limits::default(),
            Limits {
                ids_per_second: Some(4096),
                ..Limits::DEFAULT
            },
        ] {
            assert_eq!(limits.check(), Ok(()), "{limits:?}");
        }
        assert_eq!(most.check_open_files(u64::MAX), Ok(()));
    }

    #[test]
    fn the_connections_must_fit_in_the_open_file_limit() {
        let limits = Limits {
            max_connections: 121,
            ..Limits::DEFAULT
        };
        let error = limits.check_open_files(200).unwrap_err();
        assert_eq!(
            (error.limit(), error.is_file_limit(), error.to_string().as_str()),
            (
                Limit::MaxConnections,
                false,
                "max_connections 121 is out of range: allowed 1..=120 (the open-file limit is 200, \
                 less 16 for health checks and 64 for the server's own files)"
            )
        );
        assert_eq!(
            Limits {
                max_connections: 120,
                ..limits
            }
            .check_open_files(200),
            Ok(())
        );
        // 80 files leave none; 81 leave one.
        let error = Limits {
            max_connections: 1,
            ..limits
        }
        .check_open_files(80)
        .unwrap_err();
        assert_eq!(
            (error.limit(), error.is_file_limit(), error.to_string().as_str()),
            (
                Limit::MaxConnections,
                true,
                "the open-file limit of 80 leaves no room for connections: allowed at least 81"
            )
        );
        assert_eq!(
            Limits {
                max_connections: 1,
                ..limits
            }
            .check_open_files(81),
            Ok(())
        );
        // The other limits come first.
        let both = Limits {
            max_streams: 0,
            ..limits
        };
        assert_eq!(both.check_open_files(200).unwrap_err().limit(), Limit::MaxStreams);
    }

    #[test]
    fn a_front_end_names_a_limit_its_own_way_with_times_in_bare_seconds() {
        let cases = [
            (
                Limits {
                    max_streams: 0,
                    ..Limits::DEFAULT
                },
                "--max-streams",
                "--max-streams 0 is out of range: allowed 1..=1048576",
            ),
            (
                Limits {
                    idle_timeout: secs(3601),
                    ..Limits::DEFAULT
                },
                "--idle-timeout",
                "--idle-timeout 3601 is out of range: allowed 1..=3600",
            ),
            (
                Limits {
                    max_connection_age: Some(Duration::ZERO),
                    ..Limits::DEFAULT
                },
                "--max-connection-age",
                "--max-connection-age 0 is out of range: allowed 1..=2592000",
            ),
        ];
        for (limits, name, message) in cases {
            assert_eq!(limits.check().unwrap_err().named(name).to_string(), message);
        }
        let error = Limits::DEFAULT.check_open_files(80).unwrap_err();
        assert_eq!(error.named("--max-connections").to_string(), error.to_string());
    }

    #[test]
    fn the_connections_leave_room_for_health_checks_and_the_servers_own_files() {
        assert_eq!(max_connections_within(200), 120);
        assert_eq!(max_connections_within(80), 0);
        assert_eq!(max_connections_within(u64::MAX), u32::MAX);
    }
}
