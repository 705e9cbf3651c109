//! diesel (features `diesel`, `diesel-mysql`): [`Id`] as `BigInt` on `Pg` and `Mysql`, and
//! as `Unsigned<BigInt>` on `Mysql`.
//!
//! `AsExpression` and `FromSqlRow` are derived on [`Id`] itself (on its definition, under the same
//! features): they let an `Id` field stand in `Insertable`, `Queryable` and `Selectable`
//! structs and in `.eq(id)` filters. Each impl here delegates to diesel's own for `i64` (or
//! `u64`), after the checked conversion.

use super::bigint::{from_bigint, to_bigint};
use crate::format::id::Id;
use ::diesel::backend::Backend;
use ::diesel::deserialize::{self, FromSql};
use ::diesel::serialize::{self, Output, ToSql};
use ::diesel::sql_types::BigInt;

/// `ToSql` and `FromSql` for [`Id`] as a signed `BigInt` on the backend given, through
/// [`to_bigint`] and [`from_bigint`].
macro_rules! signed_bigint {
    ($backend:ty) => {
        /// Writes the ID as a signed `BIGINT`.
        ///
        /// # Errors
        ///
        /// An ID above `i64::MAX` is not written: `diesel::result::Error::SerializationError`
        /// holds [`RangeError::IdAboveI64`](crate::RangeError::IdAboveI64) (diesel's
        /// `Error::source` looks past it: downcast the variant's box).
        impl ToSql<BigInt, $backend> for Id {
            fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, $backend>) -> serialize::Result {
                let value = to_bigint(*self)?;
                <i64 as ToSql<BigInt, $backend>>::to_sql(&value, &mut out.reborrow())
            }
        }

        /// Reads an ID from a signed `BIGINT`.
        ///
        /// # Errors
        ///
        /// A negative value is not an ID: `diesel::result::Error::DeserializationError` holds
        /// [`RangeError::NegativeId`](crate::RangeError::NegativeId).
        impl FromSql<BigInt, $backend> for Id {
            fn from_sql(value: <$backend as Backend>::RawValue<'_>) -> deserialize::Result<Id> {
                from_bigint(<i64 as FromSql<BigInt, $backend>>::from_sql(value)?)
            }
        }
    };
}

#[cfg(feature = "diesel")]
signed_bigint!(::diesel::pg::Pg);

#[cfg(feature = "diesel-mysql")]
use ::diesel::mysql::Mysql;
#[cfg(feature = "diesel-mysql")]
use ::diesel::sql_types::Unsigned;

/// Writes the ID as a `BIGINT UNSIGNED`: every `u64`, no `i64` limit.
#[cfg(feature = "diesel-mysql")]
impl ToSql<Unsigned<BigInt>, Mysql> for Id {
    fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, Mysql>) -> serialize::Result {
        let value = self.get();
        <u64 as ToSql<Unsigned<BigInt>, Mysql>>::to_sql(&value, &mut out.reborrow())
    }
}

/// Reads an ID from a `BIGINT UNSIGNED`.
#[cfg(feature = "diesel-mysql")]
impl FromSql<Unsigned<BigInt>, Mysql> for Id {
    fn from_sql(value: <Mysql as Backend>::RawValue<'_>) -> deserialize::Result<Id> {
        Ok(Id::new(<u64 as FromSql<Unsigned<BigInt>, Mysql>>::from_sql(
            value,
        )?))
    }
}

#[cfg(feature = "diesel-mysql")]
signed_bigint!(Mysql);
