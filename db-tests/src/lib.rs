//! Helpers shared by the tests in `tests/`: the IDs they round-trip, the search for
//! atomflake's error inside a client's error, and the round trip and checks every sqlx
//! database shares.
//!
//! The tests start a throwaway PostgreSQL server, and the sqlx MySQL tests a MariaDB one,
//! from `atomflake-test-servers`; without one installed they print `SKIPPED` (a failure
//! under `CI=true`).

use atomflake::{Id, RangeError};
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Type};

/// IDs every signed `BIGINT` column holds: 0, a Twitter ID, and `i64::MAX`.
pub const ROUND_TRIP: [Id; 3] = [
    Id::new(0),
    Id::new(1_541_815_603_606_036_480),
    Id::new(i64::MAX as u64),
];

/// The smallest ID a signed `BIGINT` cannot hold.
pub const ABOVE_I64: Id = Id::new(1 << 63);

/// `err` and its sources, in order.
fn chain<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(err), |err| err.source())
}

/// The first atomflake [`RangeError`] in `err`'s chain of sources (`err` itself included).
pub fn atomflake_error<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a RangeError> {
    chain(err).find_map(|err| err.downcast_ref::<RangeError>())
}

/// The text of `err` and all its sources, joined with `: `; a source whose text is already
/// there is left out.
pub fn chain_text(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    for source in chain(err).skip(1) {
        let source = source.to_string();
        if !text.contains(&source) {
            text.push_str(": ");
            text.push_str(&source);
        }
    }
    text
}

/// Runs `future` to its end on a new single-threaded Tokio runtime.
///
/// # Panics
///
/// If the runtime cannot be built.
pub fn block_on<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// Through sqlx: creates table `t (id COLUMN primary key)` with `column` the database's type
/// for the column, inserts each of `ids` (ascending) with `placeholder` bound to it, and
/// checks that `select id from t order by id` reads them back.
///
/// # Panics
///
/// If a statement fails, or other IDs come back.
pub async fn assert_sqlx_round_trip<DB>(
    conn: &mut DB::Connection,
    column: &str,
    placeholder: &str,
    ids: &[Id],
) where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'v> Id: Encode<'v, DB> + Decode<'v, DB> + Type<DB>,
    usize: ColumnIndex<DB::Row>,
{
    let create = format!("create table t (id {column} primary key)");
    sqlx::query(&create).execute(&mut *conn).await.unwrap();
    let insert = format!("insert into t values ({placeholder})");
    for &id in ids {
        sqlx::query(&insert).bind(id).execute(&mut *conn).await.unwrap();
    }
    let back: Vec<Id> = sqlx::query_scalar("select id from t order by id")
        .fetch_all(&mut *conn)
        .await
        .unwrap();
    assert_eq!(back, ids);
}

/// Through sqlx: runs `sql` with [`ABOVE_I64`] bound to its one placeholder, and returns
/// the error it fails with.
///
/// # Panics
///
/// If the statement succeeds.
pub async fn sqlx_bind_above_i64<DB>(conn: &mut DB::Connection, sql: &str) -> sqlx::Error
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'v> Id: Encode<'v, DB> + Type<DB>,
{
    match sqlx::query(sql).bind(ABOVE_I64).execute(&mut *conn).await {
        Ok(_) => panic!("{sql} took an id above i64::MAX"),
        Err(error) => error,
    }
}

/// Checks that sqlx failed to decode the value `value` as an ID: a `ColumnDecode` error
/// that names it and holds atomflake's [`RangeError::NegativeId`].
///
/// # Panics
///
/// If `err` is not that error.
pub fn assert_sqlx_negative(err: &sqlx::Error, value: i64) {
    assert!(matches!(err, sqlx::Error::ColumnDecode { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains(&format!("{value} is out of range for an id")),
        "{err}"
    );
    assert_eq!(atomflake_error(err), Some(&RangeError::NegativeId { value }));
}
