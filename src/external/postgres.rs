//! `postgres-types` (feature `postgres`): [`Id`] as `BIGINT` for the `postgres` and
//! `tokio-postgres` clients.

use super::bigint::{BoxError, from_bigint, to_bigint};
use crate::format::id::Id;
use bytes::BytesMut;
use postgres_types::{FromSql, IsNull, ToSql, Type, accepts, to_sql_checked};

/// Writes the ID as a `BIGINT` (`INT8`); `Vec<Id>` and `&[Id]` write a `BIGINT[]`.
///
/// # Errors
///
/// An ID above `i64::MAX` is not written: the client's error (`postgres::Error`,
/// "error serializing parameter N") has [`RangeError::IdAboveI64`](crate::RangeError::IdAboveI64)
/// as its source.
///
/// ```
/// use atomflake::{Id, RangeError};
/// use postgres_types::{ToSql, Type};
///
/// let mut buf = bytes::BytesMut::new();
/// let Err(err) = Id::new(1 << 63).to_sql_checked(&Type::INT8, &mut buf) else {
///     panic!("wrapped");
/// };
/// assert_eq!(err.downcast_ref::<RangeError>(), Some(&RangeError::IdAboveI64 { id: 1 << 63 }));
/// assert!(Id::new(7).to_sql_checked(&Type::INT8, &mut buf).is_ok());
/// assert_eq!(buf[..], 7_i64.to_be_bytes());
/// ```
impl ToSql for Id {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> Result<IsNull, BoxError> {
        to_bigint(*self)?.to_sql(ty, out)
    }

    accepts!(INT8);

    to_sql_checked!();
}

/// Reads an ID from a `BIGINT` (`INT8`).
///
/// # Errors
///
/// A negative value is not an ID: the client's error has
/// [`RangeError::NegativeId`](crate::RangeError::NegativeId) as its source.
impl<'a> FromSql<'a> for Id {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<Id, BoxError> {
        from_bigint(i64::from_sql(ty, raw)?)
    }

    accepts!(INT8);
}
