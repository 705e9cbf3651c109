//! Errors: one type per kind of operation, each with only the variants that operation can
//! return, and [`Error`], which any of them converts into (for `?` in code that mixes
//! them).
//!
//! | error | returned by |
//! |---|---|
//! | [`ParseIdError`] | `Id`'s `FromStr`, [`Id::from_base32`](crate::Id::from_base32) |
//! | [`LayoutError`] | [`LayoutBuilder::build`](crate::LayoutBuilder::build) |
//! | [`RangeError`] | [`Layout::encode`](crate::Layout::encode) and the other conversions of times, fields and IDs |
//! | [`BuildError`] | the generators' constructors and [`Builder`](crate::Builder)'s `build*` |
//! | [`MintError`] | `try_next_id` |
//! | [`HighWaterError`] | inside [`BuildError`] and [`MintError`]: a high-water file |
//! | [`LeaseError`] | acquiring a node-ID lease; inside [`BuildError`] and [`MintError`]: keeping it |
//! | [`ClockError`] | [`CoarseClock`](crate::CoarseClock)'s constructors |
//! | [`SqlError`] | [`sql::PgScript`](crate::sql::PgScript) |
//! | [`NodeSourceError`] | the [`node`](crate::node) sources: `from_env`, `from_statefulset*` |
//!
//! Every message names the bad value and the range it had to be in. Whether an error is
//! *transient* (the same call can succeed later) or *permanent* (it never will, for the
//! same input) is said on each variant.

use crate::base32::Base32;
use crate::layout::Layout;
use core::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// A field of an ID, as named in the `FieldOutOfRange` errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    /// The node (machine, worker, shard) field.
    Node,
    /// The per-tick sequence field.
    Sequence,
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Field::Node => "node",
            Field::Sequence => "sequence",
        })
    }
}

/// An operating-system error kept as the [`source`](std::error::Error::source) of an
/// atomflake error. Shared, so that the error stays `Clone`; two compare equal when their
/// [`kind`](Self::kind)s do.
#[derive(Debug, Clone)]
pub struct IoCause(Arc<io::Error>);

impl IoCause {
    /// What kind of failure the operating system reported.
    pub fn kind(&self) -> io::ErrorKind {
        self.0.kind()
    }

    /// The operating system's error.
    pub fn get(&self) -> &io::Error {
        &self.0
    }
}

impl From<io::Error> for IoCause {
    fn from(error: io::Error) -> IoCause {
        IoCause(Arc::new(error))
    }
}

impl PartialEq for IoCause {
    fn eq(&self, other: &IoCause) -> bool {
        self.kind() == other.kind()
    }
}

impl Eq for IoCause {}

impl fmt::Display for IoCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// Text that is not an ID. Permanent.
///
/// # Examples
///
/// ```
/// use atomflake::{Id, ParseIdError};
///
/// assert_eq!("12x".parse::<Id>(), Err(ParseIdError::InvalidDigit { found: 'x', index: 2 }));
/// assert_eq!(Id::from_base32("12"), Err(ParseIdError::Base32Length { length: 2 }));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParseIdError {
    /// The text was empty.
    EmptyId,
    /// The text held something other than the digits 0-9.
    InvalidDigit {
        /// The character found.
        found: char,
        /// Its byte offset in the text.
        index: usize,
    },
    /// The text started with a sign; IDs are unsigned and written bare.
    SignedId {
        /// The sign, `+` or `-`.
        sign: char,
    },
    /// The text holds a number above `u64::MAX`.
    IdOverflow,
    /// Base32 text that is not 13 characters long.
    Base32Length {
        /// The number of characters given.
        length: usize,
    },
    /// Base32 text holding a character outside Crockford's alphabet (`U`, punctuation,
    /// non-ASCII).
    InvalidBase32 {
        /// The character found.
        found: char,
        /// Its byte offset in the text.
        index: usize,
    },
    /// A base32 ID above `u64::MAX`: 13 characters hold 65 bits, so the first may only be
    /// `0`..=`F`.
    Base32Overflow {
        /// The text given.
        text: Base32,
    },
}

impl fmt::Display for ParseIdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ParseIdError::EmptyId => f.write_str("cannot parse an id from empty text"),
            ParseIdError::InvalidDigit { found, index } => write!(
                f,
                "invalid character {found:?} at byte {index} in id: ids are written with \
                 the digits 0-9 only"
            ),
            ParseIdError::SignedId { sign } => write!(
                f,
                "sign {sign:?} in id: ids are unsigned, written with the digits 0-9 only"
            ),
            ParseIdError::IdOverflow => write!(f, "id is out of range: ids allow 0..={}", u64::MAX),
            ParseIdError::Base32Length { length } => write!(
                f,
                "base32 id has {length} characters: a base32 id has exactly {}",
                Base32::LEN
            ),
            ParseIdError::InvalidBase32 { found, index } => write!(
                f,
                "invalid character {found:?} at byte {index} in base32 id: base32 ids use \
                 Crockford's digits 0-9 and A-Z without U (I and L read as 1, O as 0)"
            ),
            ParseIdError::Base32Overflow { text } => write!(
                f,
                "base32 id \"{text}\" is out of range: ids allow {}..={}",
                Base32::encode(0),
                Base32::encode(u64::MAX)
            ),
        }
    }
}

impl std::error::Error for ParseIdError {}

/// A layout that cannot be built. Permanent.
///
/// # Examples
///
/// ```
/// use atomflake::{Layout, LayoutError};
///
/// assert_eq!(Layout::builder().timestamp_bits(41).tick_ms(0).build(), Err(LayoutError::ZeroTick));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LayoutError {
    /// The fields need more than the 64 bits of an ID.
    LayoutTooWide {
        /// Width of the timestamp field.
        timestamp_bits: u32,
        /// Width of the node field.
        node_bits: u32,
        /// Width of the sequence field.
        sequence_bits: u32,
    },
    /// A 0-bit timestamp: every ID would carry the same time.
    NoTimestampBits,
    /// A tick of 0 ms.
    ZeroTick,
    /// The last tick ends beyond `u64::MAX` Unix milliseconds.
    SpanOverflow {
        /// The layout's epoch, Unix ms.
        epoch_ms: u64,
        /// The layout's tick length, ms.
        tick_ms: u64,
        /// The layout's timestamp width: the span is `2^timestamp_bits` ticks.
        timestamp_bits: u32,
    },
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            LayoutError::LayoutTooWide {
                timestamp_bits,
                node_bits,
                sequence_bits,
            } => write!(
                f,
                "layout needs {} bits ({timestamp_bits} timestamp + {node_bits} node + \
                 {sequence_bits} sequence): an id holds at most 64",
                u64::from(timestamp_bits) + u64::from(node_bits) + u64::from(sequence_bits),
            ),
            LayoutError::NoTimestampBits => {
                f.write_str("timestamp width 0 is out of range: a layout needs 1..=64 timestamp bits")
            }
            LayoutError::ZeroTick => f.write_str("tick length 0 ms is out of range: a tick is at least 1 ms"),
            LayoutError::SpanOverflow {
                epoch_ms,
                tick_ms,
                timestamp_bits,
            } => write!(
                f,
                "layout span overflows: epoch {epoch_ms} ms + 2^{timestamp_bits} ticks of \
                 {tick_ms} ms is past u64::MAX ms"
            ),
        }
    }
}

impl std::error::Error for LayoutError {}

/// A value outside what a layout, an integer type or a time type can hold. Permanent.
///
/// # Examples
///
/// ```
/// use atomflake::{Field, Layout, Parts, RangeError};
///
/// let parts = Parts { unix_ms: 1_700_000_000_000, node: 1024, sequence: 0 };
/// assert_eq!(
///     Layout::TWITTER.encode(parts),
///     Err(RangeError::FieldOutOfRange { field: Field::Node, value: 1024, max: 1023 }),
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RangeError {
    /// A node or sequence value that does not fit its field.
    FieldOutOfRange {
        /// Which field.
        field: Field,
        /// The value given.
        value: u64,
        /// The largest value the field holds.
        max: u64,
    },
    /// A time before the layout's epoch.
    TimeBeforeEpoch {
        /// The time, Unix ms.
        unix_ms: u64,
        /// The layout's epoch, Unix ms.
        epoch_ms: u64,
    },
    /// A time at or after the end of the layout's timestamp span.
    TimePastEnd {
        /// The time, Unix ms.
        unix_ms: u64,
        /// The first Unix ms the layout cannot express.
        end_ms: u64,
    },
    /// A raw ID with bits set above the layout's width (for example Twitter's always-zero
    /// top bit).
    IdOutOfLayout {
        /// The raw ID.
        id: u64,
        /// The largest ID the layout can hold.
        max: u64,
    },
    /// An ID above `i64::MAX` does not fit a signed `BIGINT`.
    IdAboveI64 {
        /// The ID.
        id: u64,
    },
    /// A negative `i64` is not an ID.
    NegativeId {
        /// The value given.
        value: i64,
    },
    /// An ID's time that the target time type cannot hold (a custom layout whose span runs
    /// past that type's last date).
    TimeOutOfRange {
        /// The time, Unix ms.
        unix_ms: u64,
        /// The time type, such as `SystemTime`.
        target: &'static str,
    },
}

impl fmt::Display for RangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RangeError::FieldOutOfRange { field, value, max } => field_out_of_range(f, field, value, max),
            RangeError::TimeBeforeEpoch { unix_ms, epoch_ms } => write!(
                f,
                "time {unix_ms} ms is before the layout's epoch: the layout allows {epoch_ms} ms and later"
            ),
            RangeError::TimePastEnd { unix_ms, end_ms } => write!(
                f,
                "time {unix_ms} ms is past the layout's end: the layout allows times before {end_ms} ms"
            ),
            RangeError::IdOutOfLayout { id, max } => {
                write!(f, "id {id} is out of range: the layout allows 0..={max}")
            }
            RangeError::IdAboveI64 { id } => {
                write!(f, "id {id} is out of range for i64: i64 allows 0..={}", i64::MAX)
            }
            RangeError::NegativeId { value } => {
                write!(f, "{value} is out of range for an id: ids allow 0..={}", u64::MAX)
            }
            RangeError::TimeOutOfRange { unix_ms, target } => {
                write!(f, "time {unix_ms} ms is out of range for {target}")
            }
        }
    }
}

impl std::error::Error for RangeError {}

fn field_out_of_range(f: &mut fmt::Formatter<'_>, field: Field, value: u64, max: u64) -> fmt::Result {
    write!(f, "{field} {value} is out of range: the layout allows 0..={max}")
}

/// A node value that does not fit the node field: what the packing of IDs checks, turned
/// into each operation's own error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FieldOutOfRange {
    pub(crate) field: Field,
    pub(crate) value: u64,
    pub(crate) max: u64,
}

impl From<FieldOutOfRange> for RangeError {
    fn from(FieldOutOfRange { field, value, max }: FieldOutOfRange) -> RangeError {
        RangeError::FieldOutOfRange { field, value, max }
    }
}

// Only a node is checked when building a generator or a script.
impl From<FieldOutOfRange> for BuildError {
    fn from(FieldOutOfRange { value, max, .. }: FieldOutOfRange) -> BuildError {
        BuildError::NodeOutOfRange { node: value, max }
    }
}

impl From<FieldOutOfRange> for SqlError {
    fn from(FieldOutOfRange { value, max, .. }: FieldOutOfRange) -> SqlError {
        SqlError::NodeOutOfRange { node: value, max }
    }
}

/// A time outside a layout's span: what the clock check of minting and of the time
/// conversions finds, turned into each operation's own error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OutOfSpan {
    Before { unix_ms: u64, epoch_ms: u64 },
    Past { unix_ms: u64, end_ms: u64 },
}

impl From<OutOfSpan> for RangeError {
    fn from(out: OutOfSpan) -> RangeError {
        match out {
            OutOfSpan::Before { unix_ms, epoch_ms } => RangeError::TimeBeforeEpoch { unix_ms, epoch_ms },
            OutOfSpan::Past { unix_ms, end_ms } => RangeError::TimePastEnd { unix_ms, end_ms },
        }
    }
}

impl From<OutOfSpan> for MintError {
    fn from(out: OutOfSpan) -> MintError {
        MintError::ClockOutOfSpan(out.into())
    }
}

/// A high-water file ([`Builder::high_water_file`](crate::Builder::high_water_file)) that
/// cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HighWaterError {
    /// Another live generator holds this file, in this process or another. Permanent while
    /// that generator lives: two would mint the same IDs.
    Locked {
        /// The high-water file.
        path: PathBuf,
    },
    /// A file that is not one atomflake wrote, or that was damaged: its mark cannot be
    /// trusted, so nothing is minted. Permanent until the file is repaired or removed (by
    /// someone who knows no ID past its mark was minted).
    Corrupt {
        /// The high-water file.
        path: PathBuf,
        /// The line found wrong (1 to 3; 4 for text after the last line).
        line: usize,
        /// What that line held (at most 60 characters of it).
        found: String,
    },
    /// A file operation failed. Transient or permanent as the operating system's error is
    /// (a full disk, missing permissions); the error is the [`source`](std::error::Error::source).
    Io {
        /// The high-water file.
        path: PathBuf,
        /// What was being done: "open", "lock", "read", "write", ...
        action: &'static str,
        /// What the operating system reported.
        cause: IoCause,
    },
    /// The clock is further behind the file's mark than a generator waits for at start-up
    /// ([`Builder::MAX_RESTART_WAIT`](crate::Builder::MAX_RESTART_WAIT)): the previous
    /// run's clock was ahead, or this one's is behind. Transient: building again once the
    /// clock has passed the mark succeeds.
    Ahead {
        /// The high-water file.
        path: PathBuf,
        /// The mark, Unix ms: IDs minted before all have earlier times.
        mark_ms: u64,
        /// The clock's time, Unix ms.
        clock_ms: u64,
        /// The longest start-up wait allowed.
        max_wait: Duration,
    },
    /// The thread that keeps the mark could not be spawned. Transient if the system was
    /// out of threads.
    KeeperSpawn {
        /// What the operating system reported.
        cause: IoCause,
    },
}

impl fmt::Display for HighWaterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HighWaterError::Locked { path } => write!(
                f,
                "high-water file {} is in use: another live generator holds its lock",
                path.display()
            ),
            HighWaterError::Corrupt { path, line, found } => write!(
                f,
                "high-water file {} is corrupt: line {line} holds {found:?}, not what \
                 atomflake writes there",
                path.display()
            ),
            HighWaterError::Io { path, action, cause } => {
                write!(
                    f,
                    "could not {action} high-water file {}: {cause}",
                    path.display()
                )
            }
            HighWaterError::Ahead {
                path,
                mark_ms,
                clock_ms,
                max_wait,
            } => clock_behind(
                f,
                format_args!("high-water file {}", path.display()),
                *mark_ms,
                *clock_ms,
                *max_wait,
            ),
            HighWaterError::KeeperSpawn { cause } => {
                write!(
                    f,
                    "could not spawn the thread that keeps the high-water mark: {cause}"
                )
            }
        }
    }
}

/// The message of a stored mark too far ahead of the clock: `what` names the store.
fn clock_behind(
    f: &mut fmt::Formatter<'_>,
    what: fmt::Arguments<'_>,
    mark_ms: u64,
    clock_ms: u64,
    max_wait: Duration,
) -> fmt::Result {
    write!(
        f,
        "clock is {:?} behind {what} (mark {mark_ms} ms, clock {clock_ms} ms): a generator \
         waits at most {max_wait:?} at start-up",
        Duration::from_millis(mark_ms.saturating_sub(clock_ms)),
    )
}

impl std::error::Error for HighWaterError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            HighWaterError::Io { cause, .. } | HighWaterError::KeeperSpawn { cause } => Some(cause.get()),
            _ => None,
        }
    }
}

/// What a database client reported, kept whole: the error's [`source`](std::error::Error::source)
/// is the client's own error (for the `lease-postgres` feature, a `postgres::Error`).
///
/// Its text is the server's message and SQLSTATE when the server reported the error. Two
/// causes are equal when their texts are.
#[derive(Debug, Clone)]
pub struct DbCause {
    error: Arc<dyn std::error::Error + Send + Sync>,
    text: String,
}

impl DbCause {
    /// The client's error.
    pub fn get(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.error
    }

    #[cfg_attr(
        not(any(all(test, not(loom)), feature = "lease-postgres")),
        allow(dead_code, reason = "made only by the database clients")
    )]
    pub(crate) fn new(error: impl std::error::Error + Send + Sync + 'static, text: String) -> DbCause {
        DbCause {
            error: Arc::new(error),
            text,
        }
    }
}

impl PartialEq for DbCause {
    fn eq(&self, other: &DbCause) -> bool {
        self.text == other.text
    }
}

impl Eq for DbCause {}

impl fmt::Display for DbCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A node-ID lease that cannot be taken or kept (the `lease-postgres` feature).
///
/// The lease's namespace and node are in every variant that concerns one node, so that a
/// message in a fleet's logs says which.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseError {
    /// Every node of the layout's range is held by a lease that has not expired.
    /// Transient: a node is free again once its holder releases it or its lease expires.
    NoFreeNode {
        /// The namespace the lease was asked in.
        namespace: String,
        /// The largest node of the layout: the range searched was `0..=max`.
        max: u64,
    },
    /// The node asked for is held by a lease that has not expired. Transient, as
    /// [`NoFreeNode`](Self::NoFreeNode).
    NodeTaken {
        /// The namespace the lease was asked in.
        namespace: String,
        /// The node asked for.
        node: u64,
    },
    /// A node asked for that the layout cannot hold. Permanent.
    NodeOutOfRange {
        /// The node asked for.
        node: u64,
        /// The largest node the layout holds.
        max: u64,
    },
    /// A namespace that is empty or longer than 63 bytes. Permanent.
    InvalidNamespace {
        /// The namespace given.
        namespace: String,
    },
    /// A lease time out of the allowed range. Permanent.
    TtlOutOfRange {
        /// The time given.
        ttl: Duration,
        /// The shortest allowed.
        min: Duration,
        /// The longest allowed.
        max: Duration,
    },
    /// The node's stored high-water mark is further ahead of this process's clock than a
    /// generator waits for at start-up ([`Builder::MAX_RESTART_WAIT`](crate::Builder::MAX_RESTART_WAIT)):
    /// the previous holder's clock was ahead, or this one's is behind. From
    /// [`Lease::acquire`](crate::lease::Lease::acquire): every free node's mark is, and this
    /// names the lowest such node. Transient: once the clock has passed the mark, building
    /// (or claiming) again succeeds.
    Ahead {
        /// The lease's namespace.
        namespace: String,
        /// The leased node.
        node: u64,
        /// The stored mark, Unix ms.
        mark_ms: u64,
        /// This process's clock, Unix ms.
        clock_ms: u64,
        /// The longest start-up wait allowed.
        max_wait: Duration,
    },
    /// No renewal succeeded before the lease's local deadline (the time the last
    /// successful renewal was sent, plus the lease time, less a margin), so the generator
    /// stopped minting on its own, before the server could give the node to another
    /// process. Transient: a renewal that finds the lease still this holder's resumes
    /// minting; one that finds it taken ends in [`Lost`](Self::Lost).
    Expired {
        /// The lease's namespace.
        namespace: String,
        /// The leased node.
        node: u64,
        /// The lease's generation (how many times the node was claimed).
        generation: i64,
    },
    /// The table no longer holds this holder's claim: another process claimed the node
    /// after the lease expired, or the server lost the claim (a failover, a deleted row).
    /// Permanent: the generator stores no mark and renews nothing
    /// more, so it mints nothing past its deadline or its last stored mark.
    Lost {
        /// The lease's namespace.
        namespace: String,
        /// The node that was leased.
        node: u64,
        /// This holder's generation.
        generation: i64,
    },
    /// A database operation failed (no connection, a server restart, a failed
    /// statement). Transient or permanent as the client's error is; the error is the
    /// [`source`](std::error::Error::source). A lease being renewed is tried again.
    Database {
        /// What was being done: "connect", "acquire", "renew", ...
        action: &'static str,
        /// What the client reported.
        cause: DbCause,
    },
}

impl fmt::Display for LeaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeaseError::NoFreeNode { namespace, max } => write!(
                f,
                "no free node in lease namespace {namespace:?}: every node of 0..={max} is \
                 held by a live lease"
            ),
            LeaseError::NodeTaken { namespace, node } => write!(
                f,
                "node {node} of lease namespace {namespace:?} is held by a live lease"
            ),
            LeaseError::NodeOutOfRange { node, max } => field_out_of_range(f, Field::Node, *node, *max),
            LeaseError::InvalidNamespace { namespace } => write!(
                f,
                "lease namespace {namespace:?} is invalid: allowed 1 to {LEASE_NAMESPACE_MAX_LEN} bytes"
            ),
            LeaseError::TtlOutOfRange { ttl, min, max } => {
                write!(
                    f,
                    "lease time {ttl:?} is out of range: allowed {min:?} to {max:?}"
                )
            }
            LeaseError::Ahead {
                namespace,
                node,
                mark_ms,
                clock_ms,
                max_wait,
            } => clock_behind(
                f,
                format_args!("the high-water mark of node {node} in lease namespace {namespace:?}"),
                *mark_ms,
                *clock_ms,
                *max_wait,
            ),
            LeaseError::Expired {
                namespace,
                node,
                generation,
            } => write!(
                f,
                "lease on node {node} of namespace {namespace:?} (generation {generation}) \
                 passed its local deadline without a renewal: minting stops until a renewal \
                 succeeds"
            ),
            LeaseError::Lost {
                namespace,
                node,
                generation,
            } => write!(
                f,
                "lease on node {node} of namespace {namespace:?} is lost: the table no \
                 longer holds this holder's claim (generation {generation}); minting has ended"
            ),
            LeaseError::Database { action, cause } => {
                write!(f, "lease database operation {action:?} failed: {cause}")
            }
        }
    }
}

impl std::error::Error for LeaseError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LeaseError::Database { cause, .. } => Some(cause.get()),
            _ => None,
        }
    }
}

/// A generator that cannot be built.
///
/// # Examples
///
/// ```
/// use atomflake::{BuildError, Generator, Layout};
///
/// let err = Generator::new(Layout::TWITTER, 1024).unwrap_err();
/// assert_eq!(err, BuildError::NodeOutOfRange { node: 1024, max: 1023 });
/// assert_eq!(err.to_string(), "node 1024 is out of range: the layout allows 0..=1023");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BuildError {
    /// A node that does not fit the layout's node field. Permanent.
    NodeOutOfRange {
        /// The node given.
        node: u64,
        /// The largest node the layout holds.
        max: u64,
    },
    /// A [`ShardedGenerator`](crate::ShardedGenerator) given no node IDs. Permanent.
    NoNodes,
    /// A [`ShardedGenerator`](crate::ShardedGenerator) given one node ID twice: its two
    /// shards would mint the same IDs. Permanent.
    DuplicateNode {
        /// The repeated node ID.
        node: u64,
    },
    /// A borrow-ahead lead ([`Builder::borrow_ahead`](crate::Builder::borrow_ahead)) that is
    /// not a whole number of the layout's ticks, or longer than the longest allowed.
    /// Permanent.
    LeadOutOfRange {
        /// The lead asked for.
        lead: Duration,
        /// The layout's tick, which the lead must be a multiple of.
        tick_ms: u64,
        /// The longest lead allowed.
        max: Duration,
    },
    /// The high-water file cannot be used.
    HighWater(HighWaterError),
    /// The node-ID lease cannot be used (the `lease-postgres` feature).
    Lease(LeaseError),
    /// A builder given both a high-water file and a lease, which keeps the mark itself.
    /// Permanent.
    TwoMarks {
        /// The high-water file given.
        path: PathBuf,
    },
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::NodeOutOfRange { node, max } => field_out_of_range(f, Field::Node, *node, *max),
            BuildError::NoNodes => f.write_str("no node ids: a sharded generator needs at least one"),
            BuildError::DuplicateNode { node } => {
                write!(f, "node {node} is given twice: each shard needs its own node id")
            }
            BuildError::LeadOutOfRange { lead, tick_ms, max } => write!(
                f,
                "borrow-ahead lead {lead:?} is out of range: allowed whole multiples of the \
                 {tick_ms} ms tick, up to {max:?}"
            ),
            BuildError::HighWater(error) => fmt::Display::fmt(error, f),
            BuildError::Lease(error) => fmt::Display::fmt(error, f),
            BuildError::TwoMarks { path } => write!(
                f,
                "a generator on a lease keeps its high-water mark in the lease: the                  high-water file {} is not used with it",
                path.display()
            ),
        }
    }
}

impl std::error::Error for BuildError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BuildError::HighWater(error) => std::error::Error::source(error),
            BuildError::Lease(error) => std::error::Error::source(error),
            _ => None,
        }
    }
}

impl From<LeaseError> for BuildError {
    fn from(error: LeaseError) -> BuildError {
        BuildError::Lease(error)
    }
}

impl From<HighWaterError> for BuildError {
    fn from(error: HighWaterError) -> BuildError {
        BuildError::HighWater(error)
    }
}

/// Why `try_next_id` minted nothing.
///
/// # Examples
///
/// ```
/// use atomflake::{Generator, Layout, ManualClock, MintError, RangeError};
///
/// let generator = Generator::with_clock(Layout::TWITTER, 1, ManualClock::new(5))?;
/// assert_eq!(
///     generator.try_next_id(),
///     Err(MintError::ClockOutOfSpan(RangeError::TimeBeforeEpoch {
///         unix_ms: 5,
///         epoch_ms: Layout::TWITTER.epoch_ms(),
///     })),
/// );
/// # Ok::<(), atomflake::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MintError {
    /// Every sequence value of the current tick is taken. **Transient**: IDs are available
    /// again after `retry_after`.
    SequenceExhausted {
        /// The tick (since the epoch) at which IDs are available again.
        tick: u64,
        /// How long until that tick starts, by the generator's clock.
        retry_after: Duration,
    },
    /// The clock has passed the stored high-water mark while a thread of the generator's
    /// own is storing the next one (a clock that jumped ahead, a disk slower than half a
    /// second). **Transient**: minting resumes as soon as the mark is stored.
    HighWaterPending,
    /// The clock reads outside the layout's span: [`RangeError::TimeBeforeEpoch`] (the
    /// clock is set before the epoch; permanent until it is set right) or
    /// [`RangeError::TimePastEnd`] (the layout has run out of timestamps; permanent).
    ClockOutOfSpan(RangeError),
    /// Every slot of the layout's span is used: the next ID would need a time at or past
    /// the end of the span, which the clock has not reached. Permanent for this generator.
    SpanSpent {
        /// The first Unix ms the layout cannot express.
        end_ms: u64,
    },
    /// The high-water mark cannot be stored past the clock. Transient or permanent as the
    /// file's error is; the generator's keeper thread tries again.
    HighWater(HighWaterError),
    /// The generator's node-ID lease has passed its local deadline without a renewal
    /// ([`LeaseError::Expired`], transient), or another process holds the node now
    /// ([`LeaseError::Lost`], permanent).
    Lease(LeaseError),
    /// The generator was built in another process and copied into this one by `fork()`:
    /// parent and child would mint the same IDs. **Permanent** for this generator in this
    /// process: build a new generator in the child, on a node of its own. A child is
    /// refused when it mints in a tick past the tick of the fork and past the ticks its
    /// generator had reached, and before any wait; what it mints in those ticks is not
    /// detected (see the crate docs' Guarantees).
    Forked {
        /// The process the generator was built in (the child's parent, or an earlier
        /// ancestor).
        parent: u32,
        /// This process.
        child: u32,
    },
    /// The thread that stores the generator's high-water mark (`atomflake-mark`) panicked,
    /// so the mark no longer moves. IDs the stored mark covers still mint; past it,
    /// **permanent** for this generator: build a new one.
    KeeperPanicked {
        /// The panic's message.
        message: String,
    },
}

impl fmt::Display for MintError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MintError::SequenceExhausted { tick, retry_after } => write!(
                f,
                "sequence exhausted: ids are available again at tick {tick}, in {retry_after:?}"
            ),
            MintError::HighWaterPending => f.write_str(
                "the clock has passed the high-water mark while the next mark is being \
                 stored: ids are available again once it is",
            ),
            MintError::ClockOutOfSpan(error) => fmt::Display::fmt(error, f),
            MintError::SpanSpent { end_ms } => write!(
                f,
                "every id of the layout's span is used: the next id would need a time at or \
                 past the layout's end, {end_ms} ms"
            ),
            MintError::HighWater(error) => fmt::Display::fmt(error, f),
            MintError::Lease(error) => fmt::Display::fmt(error, f),
            MintError::Forked { parent, child } => write!(
                f,
                "generator built in process {parent} cannot mint in process {child}, a child of \
                 a fork: both would mint the same ids; build a new generator in the child, on a \
                 node of its own"
            ),
            MintError::KeeperPanicked { message } => write!(
                f,
                "the thread that stores the high-water mark panicked ({message}): no id past \
                 the stored mark can be minted; build a new generator"
            ),
        }
    }
}

impl std::error::Error for MintError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            MintError::HighWater(error) => std::error::Error::source(error),
            MintError::Lease(error) => std::error::Error::source(error),
            MintError::ClockOutOfSpan(error) => Some(error),
            _ => None,
        }
    }
}

impl From<LeaseError> for MintError {
    fn from(error: LeaseError) -> MintError {
        MintError::Lease(error)
    }
}

impl From<HighWaterError> for MintError {
    fn from(error: HighWaterError) -> MintError {
        MintError::HighWater(error)
    }
}

/// A [`CoarseClock`](crate::CoarseClock) that cannot be made.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClockError {
    /// An upkeep interval outside the allowed range. Permanent.
    UpkeepIntervalOutOfRange {
        /// The interval asked for.
        interval: Duration,
        /// The shortest interval allowed.
        min: Duration,
        /// The longest interval allowed.
        max: Duration,
    },
    /// An upkeep interval other than the one the process's running upkeep thread uses
    /// (there is one per process). Permanent while that clock lives.
    UpkeepIntervalConflict {
        /// The interval of the running upkeep thread.
        running: Duration,
        /// The interval asked for.
        requested: Duration,
    },
    /// The upkeep thread could not be spawned. Transient if the system was out of threads.
    UpkeepSpawn {
        /// What the operating system reported.
        cause: IoCause,
    },
}

impl fmt::Display for ClockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClockError::UpkeepIntervalOutOfRange { interval, min, max } => write!(
                f,
                "upkeep interval {interval:?} is out of range: allowed {min:?}..={max:?}"
            ),
            ClockError::UpkeepIntervalConflict { running, requested } => write!(
                f,
                "upkeep interval {requested:?} conflicts with the running upkeep thread's \
                 {running:?}: one upkeep thread serves the whole process"
            ),
            ClockError::UpkeepSpawn { cause } => write!(f, "could not spawn the upkeep thread: {cause}"),
        }
    }
}

impl std::error::Error for ClockError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClockError::UpkeepSpawn { cause } => Some(cause.get()),
            _ => None,
        }
    }
}

/// A layout or setting that in-database minting ([`PgScript`](crate::sql::PgScript))
/// cannot hold. Permanent.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SqlError {
    /// A node that does not fit the layout's node field.
    NodeOutOfRange {
        /// The node given.
        node: u64,
        /// The largest node the layout holds.
        max: u64,
    },
    /// A layout or setting out of the script's range.
    SqlOutOfRange {
        /// What is out of range, with its unit.
        what: &'static str,
        /// The value given.
        value: u64,
        /// The largest value allowed.
        max: u64,
    },
    /// A prefix for the script's object names that is not 1 to 40 characters of `a-z`,
    /// `0-9` and `_` starting with a letter or `_`.
    InvalidSqlPrefix {
        /// The prefix given.
        prefix: String,
    },
    /// A layout whose state has room for fewer values past the sequence field than a
    /// server with PostgreSQL's default settings has sessions (see
    /// [`PgScript::headroom`](crate::sql::PgScript::headroom)).
    TooLittleHeadroom {
        /// The layout given.
        layout: Layout,
        /// Its headroom.
        headroom: u64,
        /// The least headroom allowed, [`PgScript::MIN_HEADROOM`](crate::sql::PgScript::MIN_HEADROOM).
        min: u64,
    },
}

impl fmt::Display for SqlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SqlError::NodeOutOfRange { node, max } => field_out_of_range(f, Field::Node, *node, *max),
            SqlError::SqlOutOfRange { what, value, max } => write!(
                f,
                "{what} {value} is out of range for in-database minting: allowed 0..={max}"
            ),
            SqlError::InvalidSqlPrefix { prefix } => write!(
                f,
                "sql prefix {prefix:?} is not allowed: a prefix is 1..={SQL_PREFIX_MAX_LEN} \
                 characters of a-z, 0-9 and _, starting with a letter or _"
            ),
            SqlError::TooLittleHeadroom {
                layout,
                headroom,
                min,
            } => write!(
                f,
                "layout {layout} leaves in-database minting a headroom of {headroom} sessions: \
                 allowed {min} and more, the sessions of a server with PostgreSQL's default settings"
            ),
        }
    }
}

impl std::error::Error for SqlError {}

/// A node ID that a [`node`](crate::node) source could not read, or that does not fit the
/// layout's node field.
///
/// # Examples
///
/// ```
/// use atomflake::{Layout, NodeSourceError};
/// use atomflake::node::from_statefulset_ordinal;
///
/// let err = from_statefulset_ordinal("orders", &Layout::TWITTER).unwrap_err();
/// assert_eq!(err, NodeSourceError::NoOrdinal { hostname: "orders".into(), max: 1023 });
/// assert_eq!(
///     err.to_string(),
///     "hostname \"orders\" has no statefulset ordinal: expected <name>-<N> with N in 0..=1023, \
///      written without leading zeros",
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeSourceError {
    /// The environment variable is not set. Permanent for this process: its environment
    /// does not change.
    Missing {
        /// The variable's name.
        var: String,
        /// The largest node the layout holds.
        max: u64,
    },
    /// The environment variable holds bytes that are not valid Unicode. Permanent for this
    /// process.
    NotUnicode {
        /// The variable's name.
        var: String,
        /// The largest node the layout holds.
        max: u64,
    },
    /// The value is not a decimal number that fits a `u64`: empty, a sign, hex, other
    /// characters, or more digits than a `u64` holds. Permanent.
    NotANumber {
        /// Where the value came from: the environment variable's name, or
        /// `hostname "<hostname>"` for a StatefulSet ordinal.
        source_name: String,
        /// The value found (for an environment variable, before trimming).
        value: String,
        /// The largest node the layout holds.
        max: u64,
    },
    /// The hostname does not end in a StatefulSet ordinal `-<N>`: it has no `-`, nothing
    /// before or after the last one, something other than the digits 0-9 after it, or
    /// leading zeros. Permanent.
    NoOrdinal {
        /// The hostname.
        hostname: String,
        /// The largest node the layout holds.
        max: u64,
    },
    /// A node above the layout's node field. Permanent for this layout.
    OutOfRange {
        /// Where the node came from: the environment variable's name, or
        /// `hostname "<hostname>"` for a StatefulSet ordinal.
        source_name: String,
        /// The node found.
        node: u64,
        /// The largest node the layout holds.
        max: u64,
    },
    /// No hostname: `HOSTNAME` is not set (or empty) and `/etc/hostname` could not be read.
    /// Transient or permanent as the operating system's error is; the error is the
    /// [`source`](std::error::Error::source).
    Hostname {
        /// What the operating system reported for `/etc/hostname`.
        cause: IoCause,
    },
}

impl fmt::Display for NodeSourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeSourceError::Missing { var, max } => write!(
                f,
                "environment variable {var} is not set: it should hold this process's node id, \
                 a decimal number in 0..={max}"
            ),
            NodeSourceError::NotUnicode { var, max } => write!(
                f,
                "environment variable {var} is not valid unicode: expected a decimal node id \
                 in 0..={max}"
            ),
            NodeSourceError::NotANumber {
                source_name,
                value,
                max,
            } => write!(
                f,
                "{value:?} from {source_name} is not a node id: expected a decimal number in 0..={max}"
            ),
            NodeSourceError::NoOrdinal { hostname, max } => write!(
                f,
                "hostname {hostname:?} has no statefulset ordinal: expected <name>-<N> with N in \
                 0..={max}, written without leading zeros"
            ),
            NodeSourceError::OutOfRange {
                source_name,
                node,
                max,
            } => write!(
                f,
                "node {node} from {source_name} is out of range: the layout allows 0..={max}"
            ),
            NodeSourceError::Hostname { cause } => write!(
                f,
                "could not find the hostname: HOSTNAME is unset or empty and /etc/hostname could not \
                 be read: {cause}"
            ),
        }
    }
}

impl std::error::Error for NodeSourceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            NodeSourceError::Hostname { cause } => Some(cause.get()),
            _ => None,
        }
    }
}

/// The longest prefix of the SQL script's object names
/// ([`PgScript::MAX_PREFIX_LEN`](crate::sql::PgScript::MAX_PREFIX_LEN)), here so that the
/// error's message needs nothing from the script.
pub(crate) const SQL_PREFIX_MAX_LEN: usize = 40;

/// The longest lease namespace, in bytes (PostgreSQL's identifier length, so that a
/// namespace can name things in the database too).
pub(crate) const LEASE_NAMESPACE_MAX_LEN: usize = 63;

/// Declares [`Error`] with one variant per error type, its `From` conversions, and the
/// inner error that its `Display` and `source` pass through to.
macro_rules! umbrella {
    ($(#[$doc:meta])* $($variant:ident($error:ident)),* $(,)?) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        #[non_exhaustive]
        pub enum Error {
            $(
                #[doc = concat!("See [`", stringify!($error), "`].")]
                $variant($error),
            )*
        }

        impl Error {
            fn inner(&self) -> &(dyn std::error::Error + 'static) {
                match self {
                    $(Error::$variant(error) => error,)*
                }
            }
        }

        $(
            impl From<$error> for Error {
                fn from(error: $error) -> Error {
                    Error::$variant(error)
                }
            }
        )*
    };
}

umbrella! {
    /// Any atomflake error: each operation's own error converts into it, so that `?` works in
    /// code that mixes operations. Its `Display` and `source` are the inner error's.
    ///
    /// # Examples
    ///
    /// ```
    /// use atomflake::{Error, Generator, Id, Layout};
    ///
    /// fn first_id(node: &str) -> Result<Id, Error> {
    ///     let node: Id = node.parse()?;                         // ParseIdError
    ///     let generator = Generator::new(Layout::TWITTER, node.get())?; // BuildError
    ///     Ok(generator.try_next_id()?)                            // MintError
    /// }
    /// assert!(matches!(first_id("7"), Ok(_)));
    /// assert_eq!(
    ///     first_id("1024").unwrap_err().to_string(),
    ///     "node 1024 is out of range: the layout allows 0..=1023",
    /// );
    /// ```
    Parse(ParseIdError),
    Layout(LayoutError),
    Range(RangeError),
    Build(BuildError),
    Mint(MintError),
    Clock(ClockError),
    Sql(SqlError),
    Lease(LeaseError),
    Node(NodeSourceError),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.inner(), f)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.inner().source()
    }
}
