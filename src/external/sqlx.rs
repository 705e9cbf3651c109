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

/// `Type`, `Encode` and `Decode` for [`Id`] on the database given, whose integer column
/// (named in the docs) sqlx reads as `i64`, through [`to_bigint`] and [`from_bigint`].
#[cfg(any(feature = "sqlx-postgres", feature = "sqlx-sqlite"))]
macro_rules! signed_bigint {
    ($db:ty, $type_info:ty, $column:literal) => {
        #[doc = concat!("`", $column, "`, as `i64`.")]
        impl Type<$db> for Id {
            fn type_info() -> $type_info {
                <i64 as Type<$db>>::type_info()
            }

            fn compatible(ty: &$type_info) -> bool {
                <i64 as Type<$db>>::compatible(ty)
            }
        }

        #[doc = concat!("Writes the ID as a `", $column, "` (an `i64`).")]
        ///
        /// # Errors
        ///
        /// An ID above `i64::MAX` is not written: `Query::try_bind` returns
        /// [`RangeError::IdAboveI64`](crate::RangeError::IdAboveI64) boxed; `Query::bind` defers
        /// it to the query's `sqlx::Error::Encode`, which keeps its text only (sqlx formats it
        /// into a message of its own).
        impl Encode<'_, $db> for Id {
            fn encode_by_ref(
                &self,
                buf: &mut <$db as Database>::ArgumentBuffer<'_>,
            ) -> Result<IsNull, BoxDynError> {
                <i64 as Encode<$db>>::encode(to_bigint(*self)?, buf)
            }

            fn size_hint(&self) -> usize {
                size_of::<i64>()
            }
        }

        #[doc = concat!("Reads an ID from a `", $column, "`.")]
        ///
        /// # Errors
        ///
        /// A negative value is not an ID: `sqlx::Error::ColumnDecode` holds
        /// [`RangeError::NegativeId`](crate::RangeError::NegativeId).
        impl<'r> Decode<'r, $db> for Id {
            fn decode(value: <$db as Database>::ValueRef<'r>) -> Result<Id, BoxDynError> {
                from_bigint(<i64 as Decode<$db>>::decode(value)?)
            }
        }
    };
}

#[cfg(feature = "sqlx-postgres")]
use ::sqlx::postgres::{PgHasArrayType, PgTypeInfo, Postgres};

#[cfg(feature = "sqlx-postgres")]
signed_bigint!(Postgres, PgTypeInfo, "BIGINT");

/// `BIGINT[]`, so that a `Vec<Id>` or `&[Id]` binds as one array (`WHERE id = ANY($1)`).
#[cfg(feature = "sqlx-postgres")]
impl PgHasArrayType for Id {
    fn array_type_info() -> PgTypeInfo {
        <i64 as PgHasArrayType>::array_type_info()
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

// SQLite's integers are `i64`.
#[cfg(feature = "sqlx-sqlite")]
signed_bigint!(Sqlite, SqliteTypeInfo, "INTEGER");
