//! The lease's connection: its timeouts, its durability, the table and the grants it needs.

use super::error::{DbCause, PostgresError};
use super::statements::{DDL, DURABLE};
use crate::database::{ConnectError, Database};
use atomflake_lease::CLAIM_TIMEOUT;
use std::time::Duration;

/// `config` with a connect timeout and a TCP user timeout (a quarter of the lease time)
/// unless it has them, and TCP keepalives: a renewal never waits long for a server that
/// is gone. Its
/// `application_name` is `atomflake-lease` unless set, so that `pg_stat_activity` shows
/// which connections hold leases.
pub(super) fn with_timeouts(database: &Database, ttl: Duration) -> Database {
    let mut database = database.clone();
    let config = database.config_mut();
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(ttl / 4);
    }
    if config.get_application_name().is_none() {
        config.application_name("atomflake-lease");
    }
    // A server that vanished without closing the connection (a partition, a dead host):
    // a statement sent stays unacknowledged, and the connection fails after this long.
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(ttl / 4);
    }
    config
        .keepalives(true)
        // Linux takes the idle time in whole seconds and refuses 0.
        .keepalives_idle((ttl / 4).max(Duration::from_secs(1)))
        .keepalives_interval(Duration::from_secs(1))
        .keepalives_retries(3);
    database
}

/// A connection whose statements time out after a quarter of the lease time, and whose
/// commits are durable ([`DURABLE`]).
///
/// A connection that cannot be made is a [`PostgresError::Database`] naming the database
/// (user, hosts, ports, database name and TLS mode: never the password).
pub(super) fn connect(database: &Database, ttl: Duration) -> Result<postgres::Client, PostgresError> {
    let action = "connect";
    let mut client = database.connect().map_err(|error| {
        let cause = match error {
            ConnectError::Config(error) => {
                let text = format!("{database}: {error}");
                DbCause::new(error, text)
            }
            ConnectError::Client(error) => {
                let text = format!("{database}: {}", describe(&error));
                DbCause::new(error, text)
            }
        };
        PostgresError::Database { action, cause }
    })?;
    client
        .batch_execute(&format!("SET statement_timeout = {}; {DURABLE}", millis(ttl / 4)))
        .map_err(failed(action))?;
    Ok(client)
}

/// Creates the table when missing. `CREATE TABLE IF NOT EXISTS` run by two sessions at
/// once can fail in one of them (both insert the new type), so creators take turns on a
/// transaction-level advisory lock, and a table already there takes no lock. A creation
/// writes the catalogs and flushes them: it may take the time a claim may
/// ([`CLAIM_TIMEOUT`]), not just a quarter of the lease time as other statements.
pub(super) fn create_table(client: &mut postgres::Client) -> Result<(), PostgresError> {
    if table_exists(client)? {
        return Ok(());
    }
    let may_create: bool = client
        .query_one("SELECT has_schema_privilege('public', 'CREATE')", &[])
        .map_err(failed("create the lease table"))?
        .get(0);
    if !may_create {
        return Err(PostgresError::NoLeaseTable {
            role: current_user(client)?,
        });
    }
    client
        .batch_execute(&format!(
            "BEGIN; SET LOCAL statement_timeout = {}; \
             SELECT pg_advisory_xact_lock(hashtext('atomflake_lease')); {DDL} COMMIT;",
            CLAIM_TIMEOUT.as_millis()
        ))
        .map_err(failed("create the lease table"))
}

/// Whether `public.atomflake_lease` exists.
pub(super) fn table_exists(client: &mut postgres::Client) -> Result<bool, PostgresError> {
    Ok(client
        .query_one("SELECT to_regclass('public.atomflake_lease') IS NOT NULL", &[])
        .map_err(failed("find the lease table"))?
        .get(0))
}

/// The role connected.
pub(super) fn current_user(client: &mut postgres::Client) -> Result<String, PostgresError> {
    Ok(client
        .query_one("SELECT current_user::text", &[])
        .map_err(failed("read the role"))?
        .get(0))
}

/// [`PostgresError::MissingGrant`] unless the role connected has each of `privileges` on the
/// lease table (as table-level grants).
pub(super) fn check_grants(
    client: &mut postgres::Client,
    privileges: &[&'static str],
) -> Result<(), PostgresError> {
    let action = "check the lease table's grants";
    let mut missing = Vec::new();
    for &privilege in privileges {
        let held: bool = client
            .query_one(
                "SELECT has_table_privilege('public.atomflake_lease', $1)",
                &[&privilege],
            )
            .map_err(failed(action))?
            .get(0);
        if !held {
            missing.push(privilege);
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(PostgresError::MissingGrant {
        role: current_user(client)?,
        missing,
    })
}

/// A client error's text: the server's message and SQLSTATE when the server reported it
/// (the client's own text says only "db error"), else the client's text and its source.
pub(super) fn describe(error: &postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => match std::error::Error::source(error) {
            Some(source) => format!("{error}: {source}"),
            None => error.to_string(),
        },
    }
}

/// Wraps a client error as [`PostgresError::Database`]. A server's error is described by its
/// SQLSTATE and message (the client's own text says only "db error").
pub(super) fn failed(action: &'static str) -> impl Fn(postgres::Error) -> PostgresError {
    move |error| {
        let text = describe(&error);
        PostgresError::Database {
            action,
            cause: DbCause::new(error, text),
        }
    }
}

/// A column of a lease row, or [`PostgresError::Database`] when the table's column does not
/// have the type the DDL gives it.
pub(super) fn column<'a, T: postgres::types::FromSql<'a>>(
    row: &'a postgres::Row,
    index: usize,
    action: &'static str,
) -> Result<T, PostgresError> {
    row.try_get(index).map_err(failed(action))
}

/// A `bigint` column that is a node or a mark: never negative in a table the DDL made.
pub(super) fn unsigned(
    row: &postgres::Row,
    index: usize,
    action: &'static str,
) -> Result<u64, PostgresError> {
    let value: i64 = column(row, index, action)?;
    u64::try_from(value).map_err(|_| {
        let text = format!("column {index} of atomflake_lease holds {value}, below 0");
        PostgresError::Database {
            action,
            cause: DbCause::new(std::io::Error::other(text.clone()), text),
        }
    })
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
