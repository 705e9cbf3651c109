//! `Id` through the `postgres` client (feature `postgres`): round trips, an ID above
//! `i64::MAX`, a negative `BIGINT`.
use atomflake_test_servers::postgres as pg;

use atomflake::{Id, RangeError};
use atomflake_db_tests::{ABOVE_I64, ROUND_TRIP, atomflake_error, chain_text};

/// A throwaway server named `name` and a client connected to it; `None` after a skip.
fn connected(name: &str) -> Option<(pg::Server, postgres::Client)> {
    let server = pg::Server::start(name)?;
    let client = postgres::Client::connect(&server.conninfo(), postgres::NoTls).unwrap();
    Some((server, client))
}

#[test]
fn ids_round_trip_through_a_bigint_column() {
    let Some((server, mut client)) = connected("postgres-round-trip") else {
        return;
    };
    client
        .batch_execute("create table t (id bigint primary key)")
        .unwrap();
    for id in ROUND_TRIP {
        client.execute("insert into t values ($1)", &[&id]).unwrap();
    }
    let back: Vec<Id> = client
        .query("select id from t order by id", &[])
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(back, ROUND_TRIP);
    // The server holds the numbers themselves, not some other encoding of them.
    assert_eq!(
        server.psql("select id from t order by id"),
        "0\n1541815603606036480\n9223372036854775807\n"
    );
    // `Vec<Id>` binds as a BIGINT[].
    let found: i64 = client
        .query_one(
            "select count(*) from t where id = any($1)",
            &[&ROUND_TRIP[1..].to_vec()],
        )
        .unwrap()
        .get(0);
    assert_eq!(found, 2);
}

#[test]
fn an_id_above_i64_max_is_an_error_naming_it() {
    let Some((server, mut client)) = connected("postgres-above-i64") else {
        return;
    };
    client.batch_execute("create table t (id bigint)").unwrap();
    let err = client
        .execute("insert into t values ($1)", &[&ABOVE_I64])
        .unwrap_err();
    // postgres::Error's own text is "error serializing parameter 0"; its source names the ID.
    let text = chain_text(&err);
    assert!(
        text.contains("parameter 0: id 9223372036854775808 is out of range for i64"),
        "{text}"
    );
    assert_eq!(
        atomflake_error(&err),
        Some(&RangeError::IdAboveI64 { id: 1 << 63 })
    );
    assert_eq!(server.psql("select count(*) from t"), "0\n");
}

#[test]
fn a_negative_bigint_is_not_an_id() {
    let Some((_server, mut client)) = connected("postgres-negative") else {
        return;
    };
    let row = client.query_one("select -5::bigint", &[]).unwrap();
    let err = row.try_get::<_, Id>(0).unwrap_err();
    let text = chain_text(&err);
    assert!(text.contains("column 0: -5 is out of range for an id"), "{text}");
    assert_eq!(atomflake_error(&err), Some(&RangeError::NegativeId { value: -5 }));
}
