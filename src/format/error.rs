//! The errors of the format: text that is not an ID, a layout that cannot be built, and a
//! value outside a layout's fields or span. A UUID's and a mask key's errors stand beside
//! the conversions that return them, in `uuid.rs` and `mask.rs`.

use super::base32::Base32;
use super::base62::Base62;
use super::field::Field;

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
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseIdError {
    /// The text was empty.
    #[error("cannot parse an id from empty text")]
    EmptyId,
    /// The text held something other than the digits 0-9.
    #[error("invalid character {found:?} at byte {index} in id: ids are written with the digits 0-9 only")]
    InvalidDigit {
        /// The character found.
        found: char,
        /// Its byte offset in the text.
        index: usize,
    },
    /// The text started with a sign; IDs are unsigned and written bare.
    #[error("sign {sign:?} in id: ids are unsigned, written with the digits 0-9 only")]
    SignedId {
        /// The sign, `+` or `-`.
        sign: char,
    },
    /// The text holds a number above `u64::MAX`.
    #[error("id is out of range: ids allow 0..={}", u64::MAX)]
    IdOverflow,
    /// Base32 text that is not 13 characters long.
    #[error("base32 id has {length} characters: a base32 id has exactly {}", Base32::LEN)]
    Base32Length {
        /// The number of characters given.
        length: usize,
    },
    /// Base32 text holding a character outside Crockford's alphabet (`U`, punctuation,
    /// non-ASCII).
    #[error(
        "invalid character {found:?} at byte {index} in base32 id: base32 ids use Crockford's digits 0-9 and \
         A-Z without U (I and L read as 1, O as 0)"
    )]
    InvalidBase32 {
        /// The character found.
        found: char,
        /// Its byte offset in the text.
        index: usize,
    },
    /// A base32 ID above `u64::MAX`: 13 characters hold 65 bits, so the first may only be
    /// `0`..=`F`.
    #[error(
        "base32 id \"{text}\" is out of range: ids allow {}..={}",
        Base32::encode(0),
        Base32::encode(u64::MAX)
    )]
    Base32Overflow {
        /// The text given.
        text: Base32,
    },
    /// Base62 text that is not 11 bytes long.
    #[error("base62 id has {length} bytes: a base62 id has exactly {}", Base62::LEN)]
    Base62Length {
        /// The number of bytes given.
        length: usize,
    },
    /// Base62 text holding a character other than `0-9`, `A-Z` and `a-z`.
    #[error(
        "invalid character {found:?} at byte {index} in base62 id: base62 ids use the digits 0-9, A-Z and a-z"
    )]
    InvalidBase62 {
        /// The character found.
        found: char,
        /// Its byte offset in the text.
        index: usize,
    },
    /// A base62 ID above `u64::MAX`.
    #[error(
        "base62 id \"{text}\" is out of range: ids allow {}..={}",
        Base62::encode(0),
        Base62::encode(u64::MAX)
    )]
    Base62Overflow {
        /// The text given.
        text: Base62,
    },
}

/// A layout that cannot be built. Permanent.
///
/// # Examples
///
/// ```
/// use atomflake::{Layout, LayoutError};
///
/// assert_eq!(Layout::builder().timestamp_bits(41).tick_ms(0).build(), Err(LayoutError::ZeroTick));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LayoutError {
    /// The fields need more than the 64 bits of an ID.
    #[error(
        "layout needs {} bits ({timestamp_bits} timestamp + {node_bits} node + {sequence_bits} sequence): an id \
         holds at most 64",
        u64::from(*timestamp_bits) + u64::from(*node_bits) + u64::from(*sequence_bits)
    )]
    LayoutTooWide {
        /// Width of the timestamp field.
        timestamp_bits: u32,
        /// Width of the node field.
        node_bits: u32,
        /// Width of the sequence field.
        sequence_bits: u32,
    },
    /// A 0-bit timestamp: every ID would carry the same time.
    #[error("timestamp width 0 is out of range: a layout needs 1..=64 timestamp bits")]
    NoTimestampBits,
    /// A tick of 0 ms.
    #[error("tick length 0 ms is out of range: a tick is at least 1 ms")]
    ZeroTick,
    /// The last tick ends beyond `u64::MAX` Unix milliseconds.
    #[error(
        "layout span overflows: epoch {epoch_ms} ms + 2^{timestamp_bits} ticks of {tick_ms} ms is past u64::MAX ms"
    )]
    SpanOverflow {
        /// The layout's epoch, Unix ms.
        epoch_ms: u64,
        /// The layout's tick length, ms.
        tick_ms: u64,
        /// The layout's timestamp width: the span is `2^timestamp_bits` ticks.
        timestamp_bits: u32,
    },
    /// A preset name that is none of [`Layout::PRESETS`](crate::Layout::PRESETS)'
    /// ([`Layout::preset_named`](crate::Layout::preset_named)).
    #[error("unknown layout {name:?}: the presets are {}", preset_names())]
    UnknownPreset {
        /// The name given.
        name: String,
    },
}

/// The presets' names, comma-separated.
fn preset_names() -> String {
    let names: Vec<&str> = crate::Layout::PRESETS.iter().map(|(name, _)| *name).collect();
    names.join(", ")
}

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
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RangeError {
    /// A node or sequence value that does not fit its field.
    #[error("{field} {value} is out of range: the layout allows 0..={max}")]
    FieldOutOfRange {
        /// Which field.
        field: Field,
        /// The value given.
        value: u64,
        /// The largest value the field holds.
        max: u64,
    },
    /// A time before the layout's epoch.
    #[error("time {unix_ms} ms is before the layout's epoch: the layout allows {epoch_ms} ms and later")]
    TimeBeforeEpoch {
        /// The time, Unix ms.
        unix_ms: u64,
        /// The layout's epoch, Unix ms.
        epoch_ms: u64,
    },
    /// A time at or after the end of the layout's timestamp span.
    #[error("time {unix_ms} ms is past the layout's end: the layout allows times before {end_ms} ms")]
    TimePastEnd {
        /// The time, Unix ms.
        unix_ms: u64,
        /// The first Unix ms the layout cannot express.
        end_ms: u64,
    },
    /// A raw ID with bits set above the layout's width (for example Twitter's always-zero
    /// top bit).
    #[error("id {id} is out of range: the layout allows 0..={max}")]
    IdOutOfLayout {
        /// The raw ID.
        id: u64,
        /// The largest ID the layout can hold.
        max: u64,
    },
    /// An ID above `i64::MAX` does not fit a signed `BIGINT`.
    #[error("id {id} is out of range for i64: i64 allows 0..={}", i64::MAX)]
    IdAboveI64 {
        /// The ID.
        id: u64,
    },
    /// A negative `i64` is not an ID.
    #[error("{value} is out of range for an id: ids allow 0..={}", u64::MAX)]
    NegativeId {
        /// The value given.
        value: i64,
    },
    /// An ID's time that the target time type cannot hold (a custom layout whose span runs
    /// past that type's last date).
    #[error("time {unix_ms} ms is out of range for {target}")]
    TimeOutOfRange {
        /// The time, Unix ms.
        unix_ms: u64,
        /// The time type, such as `SystemTime`.
        target: &'static str,
    },
}
