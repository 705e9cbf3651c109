//! [`Id`] as a database `BIGINT`: one module per client library, and the two conversions
//! they all share.
//!
//! The features and SQL types are listed in [`Id`]'s docs (`# Databases`).
//!
//! A signed `BIGINT` holds the IDs `0..=i64::MAX`. Nothing wraps: every impl for a signed
//! column converts through [`to_bigint`] and [`from_bigint`], so writing an ID above
//! `i64::MAX` fails with [`RangeError::IdAboveI64`] and reading a negative value fails with
//! [`RangeError::NegativeId`], boxed into the client's own error (`postgres::Error`'s source,
//! `sqlx::Error::ColumnDecode`, `diesel::result::Error::SerializationError`, ...). Two
//! clients blur that: sqlx's `Query::bind` keeps only the error's text (`try_bind` returns
//! it whole), and diesel's `Error::source` skips the boxed error (match the variant and
//! downcast the box). MySQL's `BIGINT UNSIGNED` holds every ID and needs neither check.

use crate::RangeError;
use crate::format::id::Id;

/// The error type every client library takes from a conversion (sqlx calls it
/// `BoxDynError`).
pub(super) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// `id` as a signed `BIGINT` value, or [`RangeError::IdAboveI64`] naming it.
#[cfg_attr(
    not(any(
        feature = "postgres",
        feature = "sqlx-postgres",
        feature = "sqlx-sqlite",
        feature = "diesel",
        feature = "diesel-mysql"
    )),
    allow(
        dead_code,
        reason = "sqlx-mysql alone writes BIGINT UNSIGNED, which needs no check"
    )
)]
pub(super) fn to_bigint(id: Id) -> Result<i64, BoxError> {
    id.to_i64().map_err(|err: RangeError| err.into())
}

/// A signed `BIGINT` value as an ID, or [`RangeError::NegativeId`] naming the value.
pub(super) fn from_bigint(value: i64) -> Result<Id, BoxError> {
    Id::try_from(value).map_err(|err: RangeError| err.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_are_checked_and_the_error_is_the_crates() {
        assert_eq!(to_bigint(Id::new(0)).unwrap(), 0);
        assert_eq!(to_bigint(Id::new(i64::MAX as u64)).unwrap(), i64::MAX);
        let err = to_bigint(Id::new(1 << 63)).unwrap_err();
        assert_eq!(
            err.downcast_ref::<RangeError>(),
            Some(&RangeError::IdAboveI64 { id: 1 << 63 })
        );
        assert_eq!(from_bigint(i64::MAX).unwrap(), Id::new(i64::MAX as u64));
        let err = from_bigint(-1).unwrap_err();
        assert_eq!(
            err.downcast_ref::<RangeError>(),
            Some(&RangeError::NegativeId { value: -1 })
        );
    }
}
