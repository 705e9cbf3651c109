//! The one error type of the crate.
//!
//! Every variant names the bad value and the range it had to be in. Whether an error is
//! *transient* (the same call can succeed later) or *permanent* (it never will, for the
//! same input) is said on each variant; only [`Error::SequenceExhausted`] is transient.

use crate::base32::Base32;
use crate::id::Id;
use core::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// A field of an ID, as named in [`Error::FieldOutOfRange`].
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

/// Everything that can go wrong in atomflake.
///
/// # Examples
///
/// ```
/// use atomflake::{Error, Field, Generator, Layout};
///
/// let err = Generator::new(Layout::TWITTER, 1024).unwrap_err();
/// assert_eq!(err, Error::FieldOutOfRange { field: Field::Node, value: 1024, max: 1023 });
/// assert_eq!(err.to_string(), "node 1024 is out of range: the layout allows 0..=1023");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// A layout's fields need more than the 64 bits of an ID. Permanent.
    LayoutTooWide {
        /// Width of the timestamp field.
        timestamp_bits: u32,
        /// Width of the node field.
        node_bits: u32,
        /// Width of the sequence field.
        sequence_bits: u32,
    },
    /// A layout with a 0-bit timestamp: every ID would carry the same time. Permanent.
    NoTimestampBits,
    /// A layout with a tick of 0 ms. Permanent.
    ZeroTick,
    /// A layout whose last tick ends beyond `u64::MAX` Unix milliseconds. Permanent.
    SpanOverflow {
        /// The layout's epoch, Unix ms.
        epoch_ms: u64,
        /// The layout's tick length, ms.
        tick_ms: u64,
        /// The layout's timestamp width: the span is `2^timestamp_bits` ticks.
        timestamp_bits: u32,
    },
    /// A node or sequence value that does not fit its field. Permanent.
    FieldOutOfRange {
        /// Which field.
        field: Field,
        /// The value given.
        value: u64,
        /// The largest value the field holds.
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
    /// A time (from a clock or given to `encode`) before the layout's epoch. Permanent for
    /// `encode`; from a generator it means the clock is set before the epoch.
    TimeBeforeEpoch {
        /// The time, Unix ms.
        unix_ms: u64,
        /// The layout's epoch, Unix ms.
        epoch_ms: u64,
    },
    /// A time at or after the end of the layout's timestamp span. Permanent: the layout has
    /// run out of timestamps.
    TimePastEnd {
        /// The time, Unix ms.
        unix_ms: u64,
        /// The first Unix ms the layout cannot express.
        end_ms: u64,
    },
    /// A raw ID with bits set above the layout's width (for example Twitter's always-zero
    /// top bit). Permanent.
    IdOutOfLayout {
        /// The raw ID.
        id: u64,
        /// The largest ID the layout can hold.
        max: u64,
    },
    /// Every sequence value of the current tick is taken. **Transient**: IDs are available
    /// again after `retry_after`.
    SequenceExhausted {
        /// The tick (since the epoch) at which IDs are available again.
        tick: u64,
        /// How long until that tick starts, by the generator's clock.
        retry_after: Duration,
    },
    /// Text to parse as an ID was empty. Permanent.
    EmptyId,
    /// Text to parse as an ID held something other than the digits 0-9. Permanent.
    InvalidDigit {
        /// The character found.
        found: char,
        /// Its byte offset in the text.
        index: usize,
    },
    /// Text to parse as an ID started with a sign; IDs are unsigned and written bare. Permanent.
    SignedId {
        /// The sign, `+` or `-`.
        sign: char,
    },
    /// Text to parse as an ID holds a number above `u64::MAX`. Permanent.
    IdOverflow,
    /// An ID above `i64::MAX` does not fit a signed `BIGINT`. Permanent.
    IdAboveI64 {
        /// The ID.
        id: u64,
    },
    /// A negative `i64` is not an ID. Permanent.
    NegativeId {
        /// The value given.
        value: i64,
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
    /// A [`CoarseClock`](crate::CoarseClock) upkeep interval outside the allowed range. Permanent.
    UpkeepIntervalOutOfRange {
        /// The interval asked for.
        interval: Duration,
        /// The shortest interval allowed.
        min: Duration,
        /// The longest interval allowed.
        max: Duration,
    },
    /// A [`CoarseClock`](crate::CoarseClock) asked for an upkeep interval other than the one the
    /// process's running upkeep thread uses (there is one per process). Permanent while that
    /// clock lives.
    UpkeepIntervalConflict {
        /// The interval of the running upkeep thread.
        running: Duration,
        /// The interval asked for.
        requested: Duration,
    },
    /// The upkeep thread of a [`CoarseClock`](crate::CoarseClock) could not be spawned.
    /// Transient if the system was out of threads.
    UpkeepSpawn {
        /// What the operating system reported.
        kind: std::io::ErrorKind,
    },
    /// Another live generator holds this high-water file
    /// ([`Builder::high_water_file`](crate::Builder::high_water_file)), in this process or
    /// another. Permanent while that generator lives: two would mint the same IDs.
    HighWaterLocked {
        /// The high-water file.
        path: PathBuf,
    },
    /// A high-water file that is not one atomflake wrote, or that was damaged: its mark
    /// cannot be trusted, so nothing is minted. Permanent until the file is repaired or
    /// removed (by someone who knows no ID past its mark was minted).
    HighWaterCorrupt {
        /// The high-water file.
        path: PathBuf,
        /// The line found wrong (1 to 3; 4 for text after the last line).
        line: usize,
        /// What that line held (at most 60 characters of it).
        found: String,
    },
    /// A file operation on a high-water file failed. Transient or permanent as the
    /// operating system's error is (a full disk, missing permissions).
    HighWaterIo {
        /// The high-water file.
        path: PathBuf,
        /// What was being done: "open", "lock", "read", "write", ...
        action: &'static str,
        /// What the operating system reported.
        kind: std::io::ErrorKind,
    },
    /// The clock has passed the stored high-water mark while a thread of the generator's
    /// own is storing the next one (a clock that jumped ahead, a disk slower than half a
    /// second). **Transient**: minting resumes as soon as the mark is stored.
    HighWaterPending,
    /// The thread that keeps a high-water mark could not be spawned. Transient if the
    /// system was out of threads.
    KeeperSpawn {
        /// What the operating system reported.
        kind: std::io::ErrorKind,
    },
    /// Every slot of the layout's span is used: the next ID would need a time at or past
    /// the end of the span, which the clock has not reached. Permanent for this generator.
    SpanSpent {
        /// The first Unix ms the layout cannot express.
        end_ms: u64,
    },
    /// The clock is further behind a high-water file's mark than a generator waits for at
    /// start-up ([`Builder::MAX_RESTART_WAIT`](crate::Builder::MAX_RESTART_WAIT)): the
    /// previous run's clock was ahead, or this one's is behind. Transient: building again
    /// once the clock has passed the mark succeeds.
    HighWaterAhead {
        /// The high-water file.
        path: PathBuf,
        /// The mark, Unix ms: IDs minted before all have earlier times.
        mark_ms: u64,
        /// The clock's time, Unix ms.
        clock_ms: u64,
        /// The longest start-up wait allowed.
        max_wait: Duration,
    },
    /// Text to parse as a base32 ID ([`Id::from_base32`](crate::Id::from_base32)) that is not
    /// 13 characters long. Permanent.
    Base32Length {
        /// The number of characters given.
        length: usize,
    },
    /// Text to parse as a base32 ID holding a character outside Crockford's alphabet (`U`,
    /// punctuation, non-ASCII). Permanent.
    InvalidBase32 {
        /// The character found.
        found: char,
        /// Its byte offset in the text.
        index: usize,
    },
    /// A base32 ID above `u64::MAX`: 13 characters hold 65 bits, so the first may only be
    /// `0`..=`F`. Permanent.
    Base32Overflow {
        /// The text given.
        text: Base32,
    },
    /// A layout or setting that in-database minting ([`PgScript`](crate::sql::PgScript))
    /// cannot hold. Permanent.
    SqlOutOfRange {
        /// What is out of range, with its unit.
        what: &'static str,
        /// The value given.
        value: u64,
        /// The largest value allowed.
        max: u64,
    },
    /// A prefix for the SQL script's object names that is not 1 to 40 characters of
    /// `a-z`, `0-9` and `_` starting with a letter or `_`. Permanent.
    InvalidSqlPrefix {
        /// The prefix given.
        prefix: String,
    },
    /// An ID's time that the target time type cannot hold (a custom layout whose span runs
    /// past that type's last date). Permanent.
    TimeOutOfRange {
        /// The time, Unix ms.
        unix_ms: u64,
        /// The time type, such as `SystemTime`.
        target: &'static str,
    },
}

impl fmt::Display for Error {
    #[expect(clippy::too_many_lines, reason = "one arm per variant")]
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::LayoutTooWide {
                timestamp_bits,
                node_bits,
                sequence_bits,
            } => write!(
                f,
                "layout needs {} bits ({timestamp_bits} timestamp + {node_bits} node + \
                 {sequence_bits} sequence): an id holds at most 64",
                u64::from(timestamp_bits) + u64::from(node_bits) + u64::from(sequence_bits),
            ),
            Error::NoTimestampBits => {
                f.write_str("timestamp width 0 is out of range: a layout needs 1..=64 timestamp bits")
            }
            Error::ZeroTick => f.write_str("tick length 0 ms is out of range: a tick is at least 1 ms"),
            Error::SpanOverflow {
                epoch_ms,
                tick_ms,
                timestamp_bits,
            } => write!(
                f,
                "layout span overflows: epoch {epoch_ms} ms + 2^{timestamp_bits} ticks of \
                 {tick_ms} ms is past u64::MAX ms"
            ),
            Error::FieldOutOfRange { field, value, max } => {
                write!(f, "{field} {value} is out of range: the layout allows 0..={max}")
            }
            Error::NoNodes => f.write_str("no node ids: a sharded generator needs at least one"),
            Error::DuplicateNode { node } => {
                write!(f, "node {node} is given twice: each shard needs its own node id")
            }
            Error::TimeBeforeEpoch { unix_ms, epoch_ms } => write!(
                f,
                "time {unix_ms} ms is before the layout's epoch: the layout allows \
                 {epoch_ms} ms and later"
            ),
            Error::TimePastEnd { unix_ms, end_ms } => write!(
                f,
                "time {unix_ms} ms is past the layout's end: the layout allows times \
                 before {end_ms} ms"
            ),
            Error::IdOutOfLayout { id, max } => {
                write!(f, "id {id} is out of range: the layout allows 0..={max}")
            }
            Error::SequenceExhausted { tick, retry_after } => write!(
                f,
                "sequence exhausted: ids are available again at tick {tick}, in {retry_after:?}"
            ),
            Error::EmptyId => f.write_str("cannot parse an id from empty text"),
            Error::InvalidDigit { found, index } => write!(
                f,
                "invalid character {found:?} at byte {index} in id: ids are written with \
                 the digits 0-9 only"
            ),
            Error::SignedId { sign } => {
                write!(
                    f,
                    "sign {sign:?} in id: ids are unsigned, written with the digits 0-9 only"
                )
            }
            Error::IdOverflow => write!(f, "id is out of range: ids allow 0..={}", u64::MAX),
            Error::IdAboveI64 { id } => {
                write!(f, "id {id} is out of range for i64: i64 allows 0..={}", i64::MAX)
            }
            Error::NegativeId { value } => {
                write!(f, "{value} is out of range for an id: ids allow 0..={}", u64::MAX)
            }
            Error::LeadOutOfRange { lead, tick_ms, max } => write!(
                f,
                "borrow-ahead lead {lead:?} is out of range: allowed whole multiples of the \
                 {tick_ms} ms tick, up to {max:?}"
            ),
            Error::UpkeepIntervalOutOfRange { interval, min, max } => write!(
                f,
                "upkeep interval {interval:?} is out of range: allowed {min:?}..={max:?}"
            ),
            Error::UpkeepIntervalConflict { running, requested } => write!(
                f,
                "upkeep interval {requested:?} conflicts with the running upkeep thread's \
                 {running:?}: one upkeep thread serves the whole process"
            ),
            Error::UpkeepSpawn { kind } => write!(f, "could not spawn the upkeep thread: {kind}"),
            Error::HighWaterLocked { ref path } => write!(
                f,
                "high-water file {} is in use: another live generator holds its lock",
                path.display()
            ),
            Error::HighWaterCorrupt {
                ref path,
                line,
                ref found,
            } => write!(
                f,
                "high-water file {} is corrupt: line {line} holds {found:?}, not what \
                 atomflake writes there",
                path.display()
            ),
            Error::HighWaterIo {
                ref path,
                action,
                kind,
            } => write!(f, "could not {action} high-water file {}: {kind}", path.display()),
            Error::HighWaterPending => f.write_str(
                "the clock has passed the high-water mark while the next mark is being \
                 stored: ids are available again once it is",
            ),
            Error::KeeperSpawn { kind } => {
                write!(
                    f,
                    "could not spawn the thread that keeps the high-water mark: {kind}"
                )
            }
            Error::SpanSpent { end_ms } => write!(
                f,
                "every id of the layout's span is used: the next id would need a time at or \
                 past the layout's end, {end_ms} ms"
            ),
            Error::HighWaterAhead {
                ref path,
                mark_ms,
                clock_ms,
                max_wait,
            } => write!(
                f,
                "clock is {:?} behind high-water file {} (mark {mark_ms} ms, clock \
                 {clock_ms} ms): a generator waits at most {max_wait:?} at start-up",
                Duration::from_millis(mark_ms.saturating_sub(clock_ms)),
                path.display()
            ),
            Error::Base32Length { length } => write!(
                f,
                "base32 id has {length} characters: a base32 id has exactly {}",
                Base32::LEN
            ),
            Error::InvalidBase32 { found, index } => write!(
                f,
                "invalid character {found:?} at byte {index} in base32 id: base32 ids use \
                 Crockford's digits 0-9 and A-Z without U (I and L read as 1, O as 0)"
            ),
            Error::Base32Overflow { text } => write!(
                f,
                "base32 id \"{text}\" is out of range: ids allow {}..={}",
                Id::new(0).to_base32(),
                Id::new(u64::MAX).to_base32()
            ),
            Error::SqlOutOfRange { what, value, max } => write!(
                f,
                "{what} {value} is out of range for in-database minting: allowed 0..={max}"
            ),
            Error::InvalidSqlPrefix { ref prefix } => write!(
                f,
                "sql prefix {prefix:?} is not allowed: a prefix is 1..={} characters of a-z, \
                 0-9 and _, starting with a letter or _",
                crate::sql::PgScript::MAX_PREFIX_LEN
            ),
            Error::TimeOutOfRange { unix_ms, target } => {
                write!(f, "time {unix_ms} ms is out of range for {target}")
            }
        }
    }
}

impl std::error::Error for Error {}
