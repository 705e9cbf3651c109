//! [`Id`], the 64-bit ID, and [`Parts`], its decoded fields.

use super::error::{ParseIdError, RangeError};
use crate::format::base32::{self, Base32};
use crate::format::base62::{self, Base62};
use core::fmt;
use core::str::FromStr;

/// A Snowflake ID: a `u64` whose high bits are a timestamp.
///
/// IDs from one [`Layout`](crate::Layout) order by time. `Display` and `FromStr` use plain
/// decimal digits; [`Id::to_base32`] and [`Id::from_base32`] a fixed-width 13-character
/// Crockford base32 form that sorts like the number; a database `BIGINT` takes
/// [`Id::to_i64`].
///
/// # Examples
///
/// ```
/// use atomflake::Id;
///
/// let id: Id = "175928847299117063".parse()?;
/// assert_eq!(id.get(), 175928847299117063);
/// assert_eq!(id.to_string(), "175928847299117063");
/// assert_eq!(u64::from(id), 175928847299117063);
/// assert_eq!(id.to_i64()?, 175928847299117063_i64);
/// # Ok::<(), atomflake::Error>(())
/// ```
///
/// # Databases
///
/// With these features an `Id` is a column value in the Rust database libraries:
///
/// | feature | client | SQL type |
/// |---|---|---|
/// | `postgres` | `postgres`, `tokio-postgres` (`ToSql`, `FromSql`) | `BIGINT`; `Vec<Id>` as `BIGINT[]` |
/// | `sqlx` (alias `sqlx-postgres`) | sqlx with PostgreSQL (`Type`, `Encode`, `Decode`) | `BIGINT`; `Vec<Id>` as `BIGINT[]` |
/// | `sqlx-mysql` | sqlx with MySQL | `BIGINT UNSIGNED`, and reads signed `BIGINT` |
/// | `sqlx-sqlite` | sqlx with SQLite | `INTEGER` |
/// | `diesel` | diesel with `Pg` (`ToSql`, `FromSql`, `AsExpression`, `FromSqlRow`) | `BigInt` |
/// | `diesel-mysql` | diesel with `Mysql` | `Unsigned<BigInt>`, `BigInt` |
///
/// A signed `BIGINT` holds the IDs `0..=i64::MAX`: every ID of the Twitter and Sonyflake
/// layouts, but not the late IDs of layouts that use all 64 bits. Nothing wraps: writing an
/// ID above `i64::MAX` to a signed column fails with [`RangeError::IdAboveI64`], and reading a
/// negative value fails with [`RangeError::NegativeId`], boxed into the client's error (sqlx's
/// `Query::bind` keeps only its text; `Query::try_bind` returns it whole). MySQL's
/// `BIGINT UNSIGNED` holds every ID.
///
/// With `diesel`, an `Id` field stands in `Queryable`, `Selectable` and `Insertable`
/// structs:
///
/// ```
/// # #[cfg(feature = "diesel")]
/// # mod example {
/// use atomflake::Id;
/// use diesel::prelude::*;
///
/// diesel::table! {
///     messages (id) {
///         id -> BigInt,
///         reply_to -> Nullable<BigInt>,
///     }
/// }
///
/// #[derive(Queryable, Selectable, Insertable)]
/// #[diesel(table_name = messages, check_for_backend(diesel::pg::Pg))]
/// struct Message {
///     id: Id,
///     reply_to: Option<Id>,
/// }
/// # }
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
// diesel's `AsExpression` and `FromSqlRow` are derived rather than written out: the derive
// covers `Id`, `&Id` and `Nullable` columns; the `ToSql`/`FromSql` impls are in `crate::external::diesel`.
#[cfg_attr(
    any(feature = "diesel", feature = "diesel-mysql"),
    derive(diesel::expression::AsExpression, diesel::deserialize::FromSqlRow),
    diesel(sql_type = diesel::sql_types::BigInt)
)]
#[cfg_attr(
    feature = "diesel-mysql",
    diesel(sql_type = diesel::sql_types::Unsigned<diesel::sql_types::BigInt>)
)]
#[repr(transparent)]
#[must_use]
pub struct Id(u64);

impl Id {
    /// Wraps a raw `u64`.
    pub const fn new(raw: u64) -> Id {
        Id(raw)
    }

    /// The raw `u64`.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The ID as an `i64`, for signed `BIGINT` columns.
    ///
    /// # Errors
    ///
    /// [`RangeError::IdAboveI64`] for IDs above `i64::MAX` (possible only for layouts that use
    /// all 64 bits, such as Discord, Instagram and Mastodon late in their spans).
    ///
    /// ```
    /// use atomflake::{Id, RangeError};
    /// assert_eq!(Id::new(u64::MAX).to_i64(), Err(RangeError::IdAboveI64 { id: u64::MAX }));
    /// ```
    pub const fn to_i64(self) -> Result<i64, RangeError> {
        if self.0 > i64::MAX as u64 {
            return Err(RangeError::IdAboveI64 { id: self.0 });
        }
        #[expect(clippy::cast_possible_wrap, reason = "checked against i64::MAX above")]
        Ok(self.0 as i64)
    }
}

/// The base62 text form (see [`Base62`]).
impl Id {
    /// The ID as 11 characters of base62, `0-9A-Za-z` in ASCII order (see [`Base62`]).
    ///
    /// ```
    /// use atomflake::Id;
    ///
    /// assert_eq!(Id::new(u64::MAX).to_base62().to_string(), "LygHa16AHYF");
    /// assert!(Id::new(61).to_base62() < Id::new(62).to_base62()); // sorts like the number
    /// ```
    pub const fn to_base62(self) -> Base62 {
        Base62::encode(self.0)
    }

    /// Parses 11 characters of base62, case-sensitive.
    ///
    /// # Errors
    ///
    /// [`ParseIdError::Base62Length`] unless the text is 11 bytes long,
    /// [`ParseIdError::InvalidBase62`] naming the first character outside `0-9A-Za-z` and
    /// its byte offset, [`ParseIdError::Base62Overflow`] for a value above `u64::MAX`
    /// (above `LygHa16AHYF`).
    ///
    /// ```
    /// use atomflake::{Id, ParseIdError};
    ///
    /// assert_eq!(Id::from_base62("0000000000z")?, Id::new(61));
    /// assert_eq!(Id::from_base62("12"), Err(ParseIdError::Base62Length { length: 2 }));
    /// # Ok::<(), atomflake::Error>(())
    /// ```
    pub fn from_base62(text: &str) -> Result<Id, ParseIdError> {
        if text.len() != Base62::LEN {
            return Err(ParseIdError::Base62Length { length: text.len() });
        }
        let mut value: u128 = 0;
        for (index, found) in text.char_indices() {
            let Some(digit) = base62::digit(found) else {
                return Err(ParseIdError::InvalidBase62 { found, index });
            };
            value = value * 62 + u128::from(digit);
        }
        u64::try_from(value)
            .map(Id)
            .map_err(|_| ParseIdError::Base62Overflow {
                text: Base62::from_checked(text.as_bytes()),
            })
    }
}

/// The base32 text form (see [`Base32`]).
impl Id {
    /// The ID as 13 characters of Crockford base32, upper-case (see [`Base32`]).
    ///
    /// ```
    /// use atomflake::Id;
    ///
    /// assert_eq!(Id::new(0).to_base32().to_string(), "0000000000000");
    /// assert_eq!(Id::new(u64::MAX).to_base32().to_string(), "FZZZZZZZZZZZZ");
    /// assert!(Id::new(31).to_base32() < Id::new(32).to_base32()); // sorts like the number
    /// ```
    pub const fn to_base32(self) -> Base32 {
        Base32::encode(self.0)
    }

    /// Parses 13 characters of Crockford base32: case-insensitive, `I` and `L` read as `1`,
    /// `O` as `0`.
    ///
    /// # Errors
    ///
    /// [`ParseIdError::Base32Length`] unless the text is 13 characters long,
    /// [`ParseIdError::InvalidBase32`] naming the first character outside the alphabet and
    /// its byte offset, [`ParseIdError::Base32Overflow`] when the first character is above
    /// `F` (the value would pass `u64::MAX`).
    ///
    /// # Examples
    ///
    /// ```
    /// use atomflake::{Id, ParseIdError};
    ///
    /// assert_eq!(Id::from_base32("0000000000O1L")?, Id::new(33));
    /// assert_eq!(Id::from_base32("12"), Err(ParseIdError::Base32Length { length: 2 }));
    /// assert_eq!(
    ///     Id::from_base32("000000000000U"),
    ///     Err(ParseIdError::InvalidBase32 { found: 'U', index: 12 }),
    /// );
    /// assert_eq!(
    ///     Id::from_base32("G000000000000").unwrap_err().to_string(),
    ///     "base32 id \"G000000000000\" is out of range: ids allow 0000000000000..=FZZZZZZZZZZZZ",
    /// );
    /// # Ok::<(), atomflake::Error>(())
    /// ```
    pub fn from_base32(text: &str) -> Result<Id, ParseIdError> {
        let length = text.chars().count();
        if length != Base32::LEN {
            return Err(ParseIdError::Base32Length { length });
        }
        let mut value: u64 = 0;
        let mut first = 0;
        for (index, found) in text.char_indices() {
            let Some(digit) = base32::digit(found) else {
                return Err(ParseIdError::InvalidBase32 { found, index });
            };
            if index == 0 {
                first = digit;
            }
            value = value << base32::BITS | u64::from(digit);
        }
        if first > base32::MAX_FIRST {
            // Every character is an ASCII digit, so the text is 13 bytes.
            return Err(ParseIdError::Base32Overflow {
                text: Base32::from_checked(text.as_bytes()),
            });
        }
        Ok(Id(value))
    }
}

impl From<u64> for Id {
    fn from(raw: u64) -> Id {
        Id(raw)
    }
}

impl From<Id> for u64 {
    fn from(id: Id) -> u64 {
        id.0
    }
}

impl TryFrom<Id> for i64 {
    type Error = RangeError;

    /// See [`Id::to_i64`].
    fn try_from(id: Id) -> Result<i64, RangeError> {
        id.to_i64()
    }
}

impl TryFrom<i64> for Id {
    type Error = RangeError;

    /// An `i64` read back from a `BIGINT` column.
    ///
    /// # Errors
    ///
    /// [`RangeError::NegativeId`] for values below 0.
    fn try_from(value: i64) -> Result<Id, RangeError> {
        u64::try_from(value)
            .map(Id)
            .map_err(|_| RangeError::NegativeId { value })
    }
}

impl fmt::Debug for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Id({})", self.0)
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl FromStr for Id {
    type Err = ParseIdError;

    /// Parses plain decimal digits.
    ///
    /// Unlike `u64::from_str` this refuses a leading `+`: an ID is written one way only.
    ///
    /// # Errors
    ///
    /// [`ParseIdError::EmptyId`], [`ParseIdError::SignedId`] for a leading `+` or `-`,
    /// [`ParseIdError::InvalidDigit`] naming the first non-digit and its byte offset,
    /// [`ParseIdError::IdOverflow`] above `u64::MAX`.
    fn from_str(text: &str) -> Result<Id, ParseIdError> {
        if text.is_empty() {
            return Err(ParseIdError::EmptyId);
        }
        let mut value: u64 = 0;
        let mut overflowed = false;
        for (index, found) in text.char_indices() {
            let Some(digit) = found.to_digit(10) else {
                if index == 0 && (found == '+' || found == '-') {
                    return Err(ParseIdError::SignedId { sign: found });
                }
                return Err(ParseIdError::InvalidDigit { found, index });
            };
            // Keep scanning after an overflow so that a bad character later in the text is
            // reported as such rather than as an overflow.
            match value
                .checked_mul(10)
                .and_then(|v| v.checked_add(u64::from(digit)))
            {
                Some(next) => value = next,
                None => overflowed = true,
            }
        }
        if overflowed {
            return Err(ParseIdError::IdOverflow);
        }
        Ok(Id(value))
    }
}

/// The fields of an ID, as [`Layout::decode`](crate::Layout::decode) returns them and
/// [`Layout::encode`](crate::Layout::encode) takes them.
///
/// For Discord, `node` is `worker << 5 | process`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Parts {
    /// Start of the ID's tick, in milliseconds since 1970-01-01T00:00:00Z.
    pub unix_ms: u64,
    /// The node (machine, worker, shard) that minted it.
    pub node: u64,
    /// The ID's place within its tick on that node.
    pub sequence: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_decimal() {
        assert_eq!("0".parse(), Ok(Id(0)));
        assert_eq!("007".parse(), Ok(Id(7)));
        assert_eq!("18446744073709551615".parse(), Ok(Id(u64::MAX)));
    }

    #[test]
    fn parse_errors_are_exact() {
        assert_eq!("".parse::<Id>(), Err(ParseIdError::EmptyId));
        assert_eq!("+1".parse::<Id>(), Err(ParseIdError::SignedId { sign: '+' }));
        assert_eq!("-1".parse::<Id>(), Err(ParseIdError::SignedId { sign: '-' }));
        assert_eq!(
            "1-".parse::<Id>(),
            Err(ParseIdError::InvalidDigit { found: '-', index: 1 })
        );
        assert_eq!(
            " 1".parse::<Id>(),
            Err(ParseIdError::InvalidDigit { found: ' ', index: 0 })
        );
        assert_eq!(
            "12x".parse::<Id>(),
            Err(ParseIdError::InvalidDigit { found: 'x', index: 2 })
        );
        assert_eq!(
            "1é".parse::<Id>(),
            Err(ParseIdError::InvalidDigit {
                found: 'é', index: 1
            })
        );
        // Non-ASCII digits are not decimal digits here.
        assert_eq!(
            "١".parse::<Id>(),
            Err(ParseIdError::InvalidDigit {
                found: '١', index: 0
            })
        );
        assert_eq!(
            "18446744073709551616".parse::<Id>(),
            Err(ParseIdError::IdOverflow)
        );
        assert_eq!(
            "99999999999999999999999".parse::<Id>(),
            Err(ParseIdError::IdOverflow)
        );
        assert_eq!(
            "99999999999999999999999z".parse::<Id>(),
            Err(ParseIdError::InvalidDigit {
                found: 'z',
                index: 23
            })
        );
    }

    #[test]
    fn error_messages_name_the_value() {
        assert_eq!(
            "12x".parse::<Id>().unwrap_err().to_string(),
            "invalid character 'x' at byte 2 in id: ids are written with the digits 0-9 only"
        );
        assert_eq!(
            "18446744073709551616".parse::<Id>().unwrap_err().to_string(),
            "id is out of range: ids allow 0..=18446744073709551615"
        );
    }

    #[test]
    fn display_and_debug() {
        assert_eq!(Id(42).to_string(), "42");
        assert_eq!(format!("{:?}", Id(42)), "Id(42)");
        assert_eq!(format!("{:>5}", Id(42)), "   42");
    }

    #[test]
    fn i64_conversions() {
        assert_eq!(Id(i64::MAX as u64).to_i64(), Ok(i64::MAX));
        assert_eq!(Id(1 << 63).to_i64(), Err(RangeError::IdAboveI64 { id: 1 << 63 }));
        assert_eq!(i64::try_from(Id(5)), Ok(5));
        assert_eq!(Id::try_from(5_i64), Ok(Id(5)));
        assert_eq!(Id::try_from(-1_i64), Err(RangeError::NegativeId { value: -1 }));
        assert_eq!(Id::from(9_u64), Id(9));
        assert_eq!(u64::from(Id(9)), 9);
    }

    #[test]
    fn orders_as_the_number() {
        assert!(Id(2) > Id(1));
        assert!(Id(u64::MAX) > Id(i64::MAX as u64));
    }
}
