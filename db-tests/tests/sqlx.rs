//! `Id` through sqlx on a Tokio runtime: PostgreSQL (feature `sqlx`) against a throwaway
//! server, SQLite (feature `sqlx-sqlite`) in memory. Round trips, an ID above `i64::MAX`, a
//! negative value.
use atomflake_test_servers::postgres as pg;

use atomflake::{Id, RangeError};
use atomflake_db_tests::{
    ABOVE_I64, ROUND_TRIP, assert_sqlx_negative, assert_sqlx_round_trip, block_on, sqlx_bind_above_i64,
};
use sqlx::{Connection, PgConnection, Postgres, Sqlite, SqliteConnection};

async fn postgres(server: &pg::Server) -> PgConnection {
    PgConnection::connect(&server.url()).await.unwrap()
}

async fn sqlite() -> SqliteConnection {
    SqliteConnection::connect("sqlite::memory:").await.unwrap()
}

/// `Query::bind` keeps an encoding error's text only (sqlx formats it into a new message);
/// `Query::try_bind` returns atomflake's error itself.
fn assert_above_i64(bind_err: &sqlx::Error, try_bind_err: &sqlx::error::BoxDynError) {
    assert!(matches!(bind_err, sqlx::Error::Encode(_)), "{bind_err:?}");
    assert!(
        bind_err
            .to_string()
            .contains("argument $1 failed: id 9223372036854775808 is out of range for i64"),
        "{bind_err}"
    );
    assert_eq!(
        try_bind_err.downcast_ref::<RangeError>(),
        Some(&RangeError::IdAboveI64 { id: 1 << 63 })
    );
}

#[test]
fn ids_round_trip_through_a_postgres_bigint_column() {
    let Some(server) = pg::Server::start("sqlx-round-trip") else {
        return;
    };
    block_on(async {
        let mut conn = postgres(&server).await;
        assert_sqlx_round_trip::<Postgres>(&mut conn, "bigint", "$1", &ROUND_TRIP).await;
        // `Vec<Id>` binds as a BIGINT[].
        let found: i64 = sqlx::query_scalar("select count(*) from t where id = any($1)")
            .bind(ROUND_TRIP[1..].to_vec())
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!(found, 2);
    });
    assert_eq!(
        server.psql("select id from t order by id"),
        "0\n1541815603606036480\n9223372036854775807\n"
    );
}

#[test]
fn an_id_above_i64_max_is_an_error_naming_it_in_postgres() {
    let Some(server) = pg::Server::start("sqlx-above-i64") else {
        return;
    };
    let (err, try_bind_err) = block_on(async {
        let mut conn = postgres(&server).await;
        sqlx::query("create table t (id bigint)")
            .execute(&mut conn)
            .await
            .unwrap();
        let err = sqlx_bind_above_i64::<Postgres>(&mut conn, "insert into t values ($1)").await;
        let mut query = sqlx::query::<sqlx::Postgres>("insert into t values ($1)");
        (err, query.try_bind(ABOVE_I64).unwrap_err())
    });
    assert_above_i64(&err, &try_bind_err);
    assert_eq!(server.psql("select count(*) from t"), "0\n");
}

#[test]
fn a_negative_postgres_bigint_is_not_an_id() {
    let Some(server) = pg::Server::start("sqlx-negative") else {
        return;
    };
    let err = block_on(async {
        let mut conn = postgres(&server).await;
        sqlx::query_scalar::<_, Id>("select -5::bigint")
            .fetch_one(&mut conn)
            .await
            .unwrap_err()
    });
    assert_sqlx_negative(&err, -5);
}

#[test]
fn ids_round_trip_through_a_sqlite_integer_column() {
    block_on(async {
        let mut conn = sqlite().await;
        assert_sqlx_round_trip::<Sqlite>(&mut conn, "integer", "?", &ROUND_TRIP).await;
        // SQLite holds the numbers themselves.
        let text: String = sqlx::query_scalar("select group_concat(id, ',') from t")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!(text, "0,1541815603606036480,9223372036854775807");
    });
}

#[test]
fn an_id_above_i64_max_is_an_error_naming_it_in_sqlite() {
    let (err, try_bind_err) = block_on(async {
        let mut conn = sqlite().await;
        let err = sqlx_bind_above_i64::<Sqlite>(&mut conn, "select ?").await;
        let mut query = sqlx::query::<sqlx::Sqlite>("select ?");
        (err, query.try_bind(ABOVE_I64).unwrap_err())
    });
    assert_above_i64(&err, &try_bind_err);
}

#[test]
fn a_negative_sqlite_integer_is_not_an_id() {
    let err = block_on(async {
        let mut conn = sqlite().await;
        sqlx::query_scalar::<_, Id>("select -5")
            .fetch_one(&mut conn)
            .await
            .unwrap_err()
    });
    assert_sqlx_negative(&err, -5);
}
