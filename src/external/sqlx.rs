//! sqlx (features `sqlx` = `sqlx-postgres`, `sqlx-mysql`, `sqlx-sqlite`): [`Id`] as a
//! `BIGINT` (PostgreSQL), `BIGINT UNSIGNED` (MySQL) or `INTEGER` (SQLite).
//!
//! Each impl delegates to sqlx's own for `i64` (or `u64` on MySQL), so the wire formats and
//! the column types sqlx accepts are exactly sqlx's.

use super::bigint::{from_bigint, to_bigint};
use crate::format::id::Id;
use ::sqlx::encode::IsNull;
use ::sqlx::error::BoxDynError;
use ::sqlx::{Database, Decode, Encode, Type};

#[cfg(feature = "sqlx-postgres")]
use ::sqlx::postgres::{PgHasArrayType, PgTypeInfo, Postgres};

/// `BIGINT` (`INT8`), as `i64`.
#[cfg(feature = "sqlx-postgres")]
impl Type<Postgres> for Id {
    fn type_info() -> PgTypeInfo {
        <i64 as Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <i64 as Type<Postgres>>::compatible(ty)
    }
}

/// `BIGINT[]`, so that a `Vec<Id>` or `&[Id]` binds as one array (`WHERE id = ANY($1)`).
#[cfg(feature = "sqlx-postgres")]
impl PgHasArrayType for Id {
    fn array_type_info() -> PgTypeInfo {
        <i64 as PgHasArrayType>::array_type_info()
    }
}

/// Writes the ID as a `BIGINT`.
///
/// # Errors
///
/// An ID above `i64::MAX` is not written: `Query::try_bind` returns
/// [`RangeError::IdAboveI64`](crate::RangeError::IdAboveI64) boxed; `Query::bind` defers it to the
/// query's `sqlx::Error::Encode`, which keeps its text only (sqlx formats it into a message
/// of its own).
#[cfg(feature = "sqlx-postgres")]
impl Encode<'_, Postgres> for Id {
    fn encode_by_ref(
        &self,
        buf: &mut <Postgres as Database>::ArgumentBuffer<'_>,
    ) -> Result<IsNull, BoxDynError> {
        <i64 as Encode<Postgres>>::encode(to_bigint(*self)?, buf)
    }

    fn size_hint(&self) -> usize {
        size_of::<i64>()
    }
}

/// Reads an ID from a `BIGINT`.
///
/// # Errors
///
/// A negative value is not an ID: `sqlx::Error::ColumnDecode` holds
/// [`RangeError::NegativeId`](crate::RangeError::NegativeId).
#[cfg(feature = "sqlx-postgres")]
impl<'r> Decode<'r, Postgres> for Id {
    fn decode(value: <Postgres as Database>::ValueRef<'r>) -> Result<Id, BoxDynError> {
        from_bigint(<i64 as Decode<Postgres>>::decode(value)?)
    }
}

#[cfg(feature = "sqlx-mysql")]
use ::sqlx::mysql::{MySql, MySqlTypeInfo};

/// `BIGINT UNSIGNED`, which holds every ID; signed integer columns are accepted too (see
/// the `Decode` impl).
#[cfg(feature = "sqlx-mysql")]
impl Type<MySql> for Id {
    fn type_info() -> MySqlTypeInfo {
        <u64 as Type<MySql>>::type_info()
    }

    fn compatible(ty: &MySqlTypeInfo) -> bool {
        <u64 as Type<MySql>>::compatible(ty) || <i64 as Type<MySql>>::compatible(ty)
    }
}

/// Writes the ID as a `BIGINT UNSIGNED`: every `u64`, no `i64` limit. (A signed `BIGINT`
/// column then refuses IDs above `i64::MAX` on the server side, in strict SQL mode.)
#[cfg(feature = "sqlx-mysql")]
impl Encode<'_, MySql> for Id {
    fn encode_by_ref(
        &self,
        buf: &mut <MySql as Database>::ArgumentBuffer<'_>,
    ) -> Result<IsNull, BoxDynError> {
        <u64 as Encode<MySql>>::encode(self.get(), buf)
    }

    fn size_hint(&self) -> usize {
        size_of::<u64>()
    }
}

/// Reads an ID from an unsigned integer column as a `u64`, or from a signed one as an
/// `i64`.
///
/// # Errors
///
/// A negative value in a signed column is not an ID: `sqlx::Error::ColumnDecode` holds
/// [`RangeError::NegativeId`](crate::RangeError::NegativeId).
#[cfg(feature = "sqlx-mysql")]
impl<'r> Decode<'r, MySql> for Id {
    fn decode(value: <MySql as Database>::ValueRef<'r>) -> Result<Id, BoxDynError> {
        use ::sqlx::ValueRef;
        // Decoding a signed column as `u64` would read -1 as `u64::MAX`: ask the column.
        if <u64 as Type<MySql>>::compatible(&value.type_info()) {
            Ok(Id::new(<u64 as Decode<MySql>>::decode(value)?))
        } else {
            from_bigint(<i64 as Decode<MySql>>::decode(value)?)
        }
    }
}

#[cfg(feature = "sqlx-sqlite")]
use ::sqlx::sqlite::{Sqlite, SqliteTypeInfo};

/// `INTEGER`, as `i64`.
#[cfg(feature = "sqlx-sqlite")]
impl Type<Sqlite> for Id {
    fn type_info() -> SqliteTypeInfo {
        <i64 as Type<Sqlite>>::type_info()
    }

    fn compatible(ty: &SqliteTypeInfo) -> bool {
        <i64 as Type<Sqlite>>::compatible(ty)
    }
}

/// Writes the ID as an `INTEGER` (SQLite's integers are `i64`).
///
/// # Errors
///
/// An ID above `i64::MAX` is not written: `Query::try_bind` returns
/// [`RangeError::IdAboveI64`](crate::RangeError::IdAboveI64) boxed; `Query::bind` defers it to the
/// query's `sqlx::Error::Encode`, which keeps its text only (sqlx formats it into a message
/// of its own).
#[cfg(feature = "sqlx-sqlite")]
impl<'q> Encode<'q, Sqlite> for Id {
    fn encode_by_ref(
        &self,
        buf: &mut <Sqlite as Database>::ArgumentBuffer<'q>,
    ) -> Result<IsNull, BoxDynError> {
        <i64 as Encode<'q, Sqlite>>::encode(to_bigint(*self)?, buf)
    }
}

/// Reads an ID from an `INTEGER`.
///
/// # Errors
///
/// A negative value is not an ID: `sqlx::Error::ColumnDecode` holds
/// [`RangeError::NegativeId`](crate::RangeError::NegativeId).
#[cfg(feature = "sqlx-sqlite")]
impl<'r> Decode<'r, Sqlite> for Id {
    fn decode(value: <Sqlite as Database>::ValueRef<'r>) -> Result<Id, BoxDynError> {
        from_bigint(<i64 as Decode<Sqlite>>::decode(value)?)
    }
}
