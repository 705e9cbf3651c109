//! `Id` through diesel's `PgConnection` (feature `diesel`): an `Id` field in `Insertable`
//! and `Queryable` structs and in filters, an ID above `i64::MAX`, a negative `BIGINT`.
use atomflake_test_servers::postgres as pg;

use atomflake::{Id, RangeError};
use atomflake_db_tests::{ABOVE_I64, ROUND_TRIP, atomflake_error, chain_text};
use diesel::dsl::sql;
use diesel::prelude::*;
use diesel::result::Error as DieselError;
use diesel::sql_types::BigInt;

// `table!` writes undocumented items.
#[allow(missing_docs)]
mod schema {
    diesel::table! {
        messages (id) {
            id -> BigInt,
            reply_to -> Nullable<BigInt>,
        }
    }
}
use schema::messages;

#[derive(Debug, PartialEq, Queryable, Selectable, Insertable)]
#[diesel(table_name = messages, check_for_backend(diesel::pg::Pg))]
struct Message {
    id: Id,
    reply_to: Option<Id>,
}

/// A throwaway server named `name` and a connection to it with table `messages` created;
/// `None` after a skip.
fn connected(name: &str) -> Option<(pg::Server, PgConnection)> {
    let server = pg::Server::start(name)?;
    let mut conn = PgConnection::establish(&server.conninfo()).unwrap();
    diesel::sql_query("create table messages (id bigint primary key, reply_to bigint)")
        .execute(&mut conn)
        .unwrap();
    Some((server, conn))
}

#[test]
fn ids_round_trip_through_a_bigint_column() {
    let Some((server, mut conn)) = connected("diesel-round-trip") else {
        return;
    };
    let rows: Vec<Message> = ROUND_TRIP
        .iter()
        .map(|&id| Message {
            id,
            reply_to: (id != ROUND_TRIP[0]).then_some(ROUND_TRIP[0]),
        })
        .collect();
    diesel::insert_into(messages::table)
        .values(&rows)
        .execute(&mut conn)
        .unwrap();
    let back: Vec<Message> = messages::table
        .order(messages::id)
        .select(Message::as_select())
        .load(&mut conn)
        .unwrap();
    assert_eq!(back, rows);
    let found: Id = messages::table
        .filter(messages::id.eq(ROUND_TRIP[2]))
        .select(messages::id)
        .first(&mut conn)
        .unwrap();
    assert_eq!(found, ROUND_TRIP[2]);
    assert_eq!(
        server.psql("select id, reply_to from messages order by id"),
        "0|\n1541815603606036480|0\n9223372036854775807|0\n"
    );
}

#[test]
fn an_id_above_i64_max_is_an_error_naming_it() {
    let Some((server, mut conn)) = connected("diesel-above-i64") else {
        return;
    };
    let err = diesel::insert_into(messages::table)
        .values(&Message {
            id: ABOVE_I64,
            reply_to: None,
        })
        .execute(&mut conn)
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("id 9223372036854775808 is out of range for i64"),
        "{err}"
    );
    // diesel's `Error::source` skips the boxed error itself and answers its source: look in
    // the box.
    let DieselError::SerializationError(inner) = &err else {
        panic!("{err:?}");
    };
    assert_eq!(
        atomflake_error(&**inner),
        Some(&RangeError::IdAboveI64 { id: 1 << 63 })
    );
    assert_eq!(server.psql("select count(*) from messages"), "0\n");
}

#[test]
fn a_negative_bigint_is_not_an_id() {
    let Some((_server, mut conn)) = connected("diesel-negative") else {
        return;
    };
    let err = diesel::select(sql::<BigInt>("-5::bigint"))
        .get_result::<Id>(&mut conn)
        .unwrap_err();
    // "Error deserializing field '?column?'", then atomflake's error as its source.
    let text = chain_text(&err);
    assert!(
        text.contains("'?column?': -5 is out of range for an id"),
        "{text}"
    );
    let DieselError::DeserializationError(inner) = &err else {
        panic!("{err:?}");
    };
    assert_eq!(
        atomflake_error(&**inner),
        Some(&RangeError::NegativeId { value: -5 })
    );
}
