//! `Id` through sqlx on MariaDB (feature `sqlx-mysql`): every `u64` round-trips through
//! `BIGINT UNSIGNED`; a signed `BIGINT` reads back, its negative values are an error.
//!
//! Skipped (printed) without a MariaDB server: Debian's `mariadb-server`.
use atomflake_test_servers::mariadb as mysql;

use atomflake::Id;
use atomflake_db_tests::{
    ABOVE_I64, ROUND_TRIP, assert_sqlx_negative, assert_sqlx_round_trip, block_on, sqlx_bind_above_i64,
};
use sqlx::{Connection, MySql, MySqlConnection};

#[test]
fn every_id_round_trips_through_bigint_unsigned() {
    let Some(server) = mysql::Server::start("sqlx-mysql-unsigned") else {
        return;
    };
    let all: Vec<Id> = ROUND_TRIP
        .into_iter()
        .chain([ABOVE_I64, Id::new(u64::MAX)])
        .collect();
    block_on(async {
        let mut conn = MySqlConnection::connect(&server.url()).await.unwrap();
        assert_sqlx_round_trip::<MySql>(&mut conn, "bigint unsigned", "?", &all).await;
    });
    assert_eq!(
        server.sql("select id from atomflake.t order by id").unwrap(),
        "0\n1541815603606036480\n9223372036854775807\n9223372036854775808\n18446744073709551615\n"
    );
}

#[test]
fn a_signed_bigint_reads_back_and_its_negative_values_are_not_ids() {
    let Some(server) = mysql::Server::start("sqlx-mysql-signed") else {
        return;
    };
    server
        .sql("create table atomflake.s (id bigint primary key); insert into atomflake.s values (9223372036854775807), (7), (-5)")
        .unwrap();
    let (max, err, refused) = block_on(async {
        let mut conn = MySqlConnection::connect(&server.url()).await.unwrap();
        let max: Id = sqlx::query_scalar("select id from s where id > 7")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        let err = sqlx::query_scalar::<_, Id>("select id from s where id < 0")
            .fetch_one(&mut conn)
            .await
            .unwrap_err();
        // `Id` writes BIGINT UNSIGNED; the server refuses one that a signed column cannot hold.
        let refused = sqlx_bind_above_i64::<MySql>(&mut conn, "insert into s values (?)").await;
        (max, err, refused)
    });
    assert_eq!(max, Id::new(i64::MAX as u64));
    assert_sqlx_negative(&err, -5);
    assert!(refused.to_string().contains("Out of range value"), "{refused}");
}
