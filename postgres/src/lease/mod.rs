//! Node-ID leases kept in PostgreSQL: one ID space across a fleet of processes.
//!
//! In PostgreSQL a lease is a row per node in one table ([`DDL`]). The type, [`Lease`], is
//! [`atomflake_lease::Lease`] over the [`Postgres`] engine: see [`atomflake_lease`] for
//! what it does on every engine.
//!
//! # The engine's part
//!
//! - **Claim.** Claimants of one namespace take turns on an advisory lock for the few
//!   milliseconds a claim takes, so a fleet that starts at once claims one node each
//!   without colliding, and a claim reads only the namespace's rows, never the whole node
//!   range. A claimant frozen within its turn (`SIGSTOP`, a paused VM) keeps it for half a
//!   claim's time ([`CLAIM_TIMEOUT`]) at most: the server ends a session idle that long
//!   inside the claim's transaction (`idle_in_transaction_session_timeout`), which rolls
//!   its claims back and frees the turn, and a claimant waiting for the turn waits a
//!   claim's time. The claim is an `INSERT ... ON CONFLICT DO UPDATE` whose update only takes an
//!   expired row, so even a claimant that skips the turn serializes on the row and finds
//!   it live. Every claim draws a **token**, a random UUID that no other claim has: the
//!   fence. `generation` counts the node's claims, for people. Expiry is decided by the
//!   server's clock (`clock_timestamp()`), never the claimant's.
//! - **Store.** One `UPDATE` per node that matches only this claim's token, renews the
//!   row's expiry and keeps the higher of the row's mark and its own (`GREATEST`).
//! - **Release.** The same `UPDATE` that expires the row at once; with the exact mark of
//!   what was minted, it writes that mark as it is.
//!
//! # What it rests on
//!
//! The table is the truth: a claim or a mark is relied on only once the server has
//! committed it. The lease's session commits with `synchronous_commit = on` (unless the
//! server's is `remote_apply`), so a crash of the server loses nothing it acknowledged,
//! whatever the server's default. What the server can still lose:
//!
//! - **A failover to an asynchronous standby, or a point-in-time restore**, loses the
//!   last commits: a claim (its node looks free, or an older claim's), a mark (the row's
//!   mark is older than the IDs minted under it). The holder finds its token gone at its
//!   next store (a quarter of the lease time at most) and stops; until then it and a
//!   successor that claimed the node on the new server can mint in the same milliseconds,
//!   and a successor starting past the older mark can repeat IDs minted under the lost
//!   one. Synchronous replication (`synchronous_standby_names` with the standby promoted
//!   on failover) loses no acknowledged commit and closes this.
//! - **A deleted row** is the same loss: never delete rows of a namespace in use.
//!
//! The lease's connection is its own, made from the [`Database`] given, with TLS as its
//! `sslmode` says ([`database`](crate::database): libpq's modes, `verify-full` included).
//! A connection that fails is made again by the next renewal. It runs on a thread of its
//! own, so every call has a deadline on the client's side too: a claim (its connection
//! included) twice its time ([`CLAIM_TIMEOUT`]), a store or a release half the lease time
//! and a second. A server that answers nothing (frozen, its host paused with TCP still up,
//! a link that drops packets one way) costs a call that long, never a holder for good: the
//! call fails as a broken connection does, and the next one connects afresh.
//!
//! # Statements that commit late
//!
//! A statement can commit after its holder gave up on it: the connection broke with the
//! statement sent (a reset link, a TCP user timeout) or went unanswered past the call's
//! deadline, the lease sent it again on a new connection, and the server, which had
//! received it and does not notice a closed client while a statement runs, commits it
//! later: after the statement sent again, after newer stores, after the release, after a
//! successor's claim. (A statement the server cancels, at its `statement_timeout` of a
//! quarter of the lease time, commits nothing.) A generator dropped while a store hangs
//! leaves its keeper to finish that store and the release whenever the server answers:
//! late too. Every write is safe at any later point:
//!
//! | write | committed late, it |
//! |---|---|
//! | the claim (`CLAIM`) | holds the row lock from its `INSERT ... ON CONFLICT` until it commits, and took the row only if it had expired then: a late claim is still the only claim of the row, and leaves its mark as it was. A claimant that gave up holds no [`Lease`]: the row is held by nobody until it expires (a node unavailable for a lease time, never two holders) |
//! | a store and renewal (`RENEW`) | matches only its own claim's token: after a successor's claim it changes nothing. On its own claim it keeps the higher of the row's mark and its own (`GREATEST`), so a store sent before a newer one cannot lower it; after the release it raises the released mark at most, and holds the node until its expiry (a node unavailable for a lease time) |
//! | the release with the stored mark (`RELEASE`) | as a store, with `GREATEST`; expiring its own claim frees only a node whose holder stopped minting |
//! | the release with the exact mark (`RELEASE_FINISHED`) | stores the one mark that may be below the row's: the end of the last tick its generator minted, never below the mark claimed, so still past every ID minted on the node under this claim and every earlier one. It is the claim's last write, sent once the generator has stopped; sent again on a new connection, both copies write the same. Its token keeps it off a successor's claim: it can neither lower a successor's mark nor free its node |
//! | the table ([`DDL`]) | `CREATE TABLE IF NOT EXISTS`, under an advisory lock: creates an empty table or nothing |
//!
//! So a mark goes down only by its own claim's last write, to a mark that still covers
//! every ID minted on the node; a write of one claim never lands on another's.
//!
//! # Privileges
//!
//! A lease deletes nothing and needs no `CREATE` once the table exists ([`DDL`]); the grants
//! it needs are in the crate's README. A role without the table, or without a privilege,
//! gets [`PostgresError::NoLeaseTable`] or [`PostgresError::MissingGrant`], which name what
//! to grant; [`list`] needs `SELECT` alone.
//!
//! # Examples
//!
//! ```no_run
//! use atomflake::{Builder, Layout};
//! use atomflake_postgres::Database;
//! use atomflake_postgres::lease::{Lease, LeaseOptions};
//!
//! let database: Database = "host=db.internal user=app dbname=app sslmode=verify-full".parse()?;
//! let lease = Lease::acquire(&database, &Layout::TWITTER, &LeaseOptions::new("orders"))?;
//! println!("node {} (generation {})", lease.node(), lease.generation());
//! let node = lease.node();
//! let ids = Builder::new(Layout::TWITTER).mark_store(lease).build(node)?;
//! let id = ids.try_next_id()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod connection;
mod error;
#[cfg(all(test, not(loom)))]
mod model;
mod session;
mod statements;

pub use atomflake_lease::{
    CLAIM_TIMEOUT, LeaseOptions, LeaseRow, MAX_NAMESPACE_LEN, MAX_TTL, MIN_TTL, PassedOver,
};
pub use error::{DbCause, LeaseError, PostgresError};
pub use statements::DDL;

use crate::database::Database;
use atomflake_lease::{
    Attempt, Claim, ClaimRequest, Claimed, Engine, Release, Shortfall, WriteError, Written,
};
use connection::{
    check_grants, column, connect, create_table, current_user, failed, table_exists, unsigned, with_timeouts,
};
use session::{Connection, Session, on_live_connection};
use statements::{CLAIM, CLAIM_TURN, LIST, NOTHING_CLAIMED, PASSED_OVER, RELEASE, RELEASE_FINISHED, RENEW};
use std::time::{Duration, Instant};

/// How much longer than the server's own bound on a store or a release (a quarter of the
/// lease time per statement) the client waits for its answer.
const ANSWER_MARGIN: Duration = Duration::from_secs(1);

/// The PostgreSQL client the lease connects with (the `postgres` crate), for its
/// [`Config`](postgres::Config).
pub use postgres;

/// An [`atomflake_lease::Lease`] on a PostgreSQL table.
pub type Lease = atomflake_lease::Lease<Postgres>;

/// The [`atomflake_lease::Registry`] entry for PostgreSQL: a URL (`postgres://`, `postgresql://`) or libpq `key=value` settings.
pub const DRIVER: atomflake_lease::Driver = atomflake_lease::Driver::of::<Postgres>();

impl atomflake_lease::UrlEngine for Postgres {
    const SCHEMES: &'static [&'static str] = &["postgres", "postgresql"];
    const SETTINGS: bool = true;
}

/// The PostgreSQL lease engine: the lease's own connection to the database.
pub struct Postgres {
    /// The database, with the lease's timeouts.
    database: Database,
    /// The connection, on a thread of its own: made again by the next write when it broke
    /// or did not answer in time.
    session: Session,
    namespace: String,
    ttl: Duration,
}

impl std::fmt::Debug for Postgres {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Postgres")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

/// How long the connection and claim of a claim whose deadline is `deadline` are waited
/// for: a claim's time past it, for a database that load slows to connect and answer. A
/// server that answers nothing costs a claim twice its time, never the claimant for good.
fn until(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now()) + CLAIM_TIMEOUT
}

impl Engine for Postgres {
    type Config = Database;
    type Error = PostgresError;
    /// The claim's token: a random UUID drawn by the server for this claim, which every write
    /// of the row matches. The claim's generation counts the node's claims, for people.
    type Fence = String;

    /// Connects, and creates the table when missing.
    fn connect(database: &Database, options: &LeaseOptions, deadline: Instant) -> Result<Self, Self::Error> {
        let (namespace, ttl) = (options.namespace.as_str(), options.ttl);
        let database = with_timeouts(database, ttl);
        let mut session = Session::default();
        let config = database.clone();
        session.call("connect", until(deadline), move |connection| {
            let mut client = connect(&config, ttl)?;
            create_table(&mut client)?;
            check_grants(&mut client, &["SELECT", "INSERT", "UPDATE"])?;
            *connection = Some(client);
            Ok(())
        })?;
        Ok(Postgres {
            database,
            session,
            namespace: namespace.to_owned(),
            ttl,
        })
    }

    fn claim(&mut self, request: &ClaimRequest<'_>) -> Result<Attempt<String>, PostgresError> {
        let (database, ttl) = (self.database.clone(), self.ttl);
        let asked = Asked {
            namespace: request.namespace.to_owned(),
            holder: request.holder.to_owned(),
            low: to_i64(*request.nodes.start()),
            high: to_i64(*request.nodes.end()),
            count: request.count,
            ttl_ms: to_i64(millis(request.ttl)),
            reach: request.reach,
        };
        // A claim is one transaction: one broken with its connection either committed, and
        // its node stays claimed by a token no generator knows until its lease time
        // passes, or left nothing. So it may be tried again on a new connection.
        self.session
            .call("claim a node", until(request.deadline), move |connection| {
                on_live_connection(connection, &database, ttl, |client| claim(client, &asked))
            })
    }

    fn store(&mut self, claims: &mut [Claim<String>], mark: u64, _: Instant) -> Written<PostgresError> {
        let ttl_ms = to_i64(millis(self.ttl));
        self.update_all(claims, "renew", RENEW, Some(ttl_ms), mark)
    }

    fn release(
        &mut self,
        claims: &mut [Claim<String>],
        release: Release,
        _: Instant,
    ) -> Written<PostgresError> {
        let sql = match release {
            Release::Exact(_) => RELEASE_FINISHED,
            Release::Stored(_) => RELEASE,
        };
        self.update_all(claims, "release", sql, None, release.mark())
    }

    fn list(database: &Database, namespace: &str) -> Result<Vec<LeaseRow>, PostgresError> {
        let action = "list leases";
        let ttl = LeaseOptions::DEFAULT_TTL;
        let database = with_timeouts(database, ttl);
        let namespace = namespace.to_owned();
        Session::default().call(action, 2 * CLAIM_TIMEOUT, move |_| {
            let mut client = connect(&database, ttl)?;
            if !table_exists(&mut client)? {
                return Err(PostgresError::NoLeaseTable {
                    role: current_user(&mut client)?,
                });
            }
            check_grants(&mut client, &["SELECT"])?;
            let rows = client.query(LIST, &[&namespace]).map_err(failed(action))?;
            rows.iter()
                .map(|row| {
                    Ok(
                        LeaseRow::new(unsigned(row, 0, action)?, unsigned(row, 5, action)?)
                            .held(column(row, 1, action)?, column(row, 2, action)?)
                            .expires(column(row, 3, action)?, column(row, 4, action)?),
                    )
                })
                .collect()
        })
    }

    /// Gives up the connection: its thread closes it once a call under way has ended.
    fn close(&mut self) {
        self.session.close();
    }
}

impl Postgres {
    /// Runs `sql` for every claim, on the session's thread, waiting for at most half the
    /// lease time (and a margin): `Err(Lost)` naming the first claim whose row was not this
    /// lease's any more (the others ran all the same).
    fn update_all(
        &mut self,
        claims: &[Claim<String>],
        action: &'static str,
        sql: &'static str,
        ttl_ms: Option<i64>,
        mark: u64,
    ) -> Written<PostgresError> {
        let key = Key {
            database: self.database.clone(),
            ttl: self.ttl,
            namespace: self.namespace.clone(),
        };
        let claims = claims.to_vec();
        let within = self.ttl / 2 + ANSWER_MARGIN;
        let lost = self.session.call(action, within, move |connection| {
            let mut lost = None;
            for (i, claim) in claims.iter().enumerate() {
                if update(connection, &key, claim, action, sql, ttl_ms, mark)? == 0 {
                    lost = lost.or(Some(i));
                }
            }
            Ok(lost)
        })?;
        match lost {
            Some(claim) => Err(WriteError::Lost { claim }),
            None => Ok(()),
        }
    }
}

/// What a write of the lease's rows needs besides the claim.
struct Key {
    database: Database,
    ttl: Duration,
    namespace: String,
}

/// Runs `sql` with the key of `claim`, connecting first when there is no connection: the
/// number of rows it changed. A connection found broken (the server restarted, the
/// connection was killed) is made again once at once: every statement here can run twice
/// to the same effect.
fn update(
    connection: &mut Connection,
    key: &Key,
    claim: &Claim<String>,
    action: &'static str,
    sql: &str,
    ttl_ms: Option<i64>,
    mark: u64,
) -> Result<u64, PostgresError> {
    let (namespace, node, mark) = (key.namespace.as_str(), to_i64(claim.node), to_i64(mark));
    on_live_connection(connection, &key.database, key.ttl, |client| {
        match ttl_ms {
            Some(ttl_ms) => client.execute(sql, &[&namespace, &node, &claim.fence, &ttl_ms, &mark]),
            None => client.execute(sql, &[&namespace, &node, &claim.fence, &mark]),
        }
        .map_err(failed(action))
    })
}

/// A claim asked for, owned, for the session's thread.
struct Asked {
    namespace: String,
    holder: String,
    low: i64,
    high: i64,
    count: u64,
    ttl_ms: i64,
    /// The reach (Unix ms): a free node with a mark past it is passed over; `u64::MAX`: none.
    reach: u64,
}

/// One claim attempt on `client`: all of `asked.count` nodes in one transaction, or none.
fn claim(client: &mut postgres::Client, asked: &Asked) -> Result<Attempt<String>, PostgresError> {
    let action = "claim a node";
    let namespace = asked.namespace.as_str();
    let (low, high, ttl_ms) = (asked.low, asked.high, asked.ttl_ms);
    let reach = to_i64(asked.reach);
    let mut turn = client.transaction().map_err(failed(action))?;
    // A claimant frozen (or gone silent) within its turn would hold the namespace's
    // turn for good: the server ends its session once it has been idle in the claim for
    // half a claim's time, which rolls its claims back and frees the turn well before a
    // claimant waiting for it gives up.
    turn.batch_execute(&format!(
        "SET LOCAL statement_timeout = {}; SET LOCAL idle_in_transaction_session_timeout = {}",
        millis(CLAIM_TIMEOUT),
        millis(CLAIM_TIMEOUT / 2)
    ))
    .map_err(failed(action))?;
    turn.execute(CLAIM_TURN, &[&namespace]).map_err(failed(action))?;
    let mut claims = Vec::new();
    let mut mark = 0;
    while (claims.len() as u64) < asked.count {
        let params: [&(dyn postgres::types::ToSql + Sync); 6] =
            [&namespace, &low, &high, &asked.holder, &ttl_ms, &reach];
        let Some(row) = turn.query_opt(CLAIM, &params).map_err(failed(action))? else {
            break;
        };
        mark = mark.max(unsigned(&row, 3, action)?);
        claims.push(Claim {
            node: unsigned(&row, 0, action)?,
            generation: column(&row, 1, action)?,
            fence: column(&row, 2, action)?,
        });
    }
    if claims.len() as u64 == asked.count {
        // A node asked for is claimed whatever its mark: nothing is passed over.
        let passed_over = if asked.reach == u64::MAX {
            Vec::new()
        } else {
            turn.query(PASSED_OVER, &[&namespace, &low, &high, &reach])
                .map_err(failed(action))?
                .iter()
                .map(|row| {
                    Ok(PassedOver::new(
                        unsigned(row, 0, action)?,
                        unsigned(row, 1, action)?,
                    ))
                })
                .collect::<Result<_, PostgresError>>()?
        };
        turn.commit().map_err(failed(action))?;
        return Ok(Attempt::Claimed(Claimed {
            claims,
            mark,
            passed_over,
        }));
    }
    let row = turn
        .query_one(NOTHING_CLAIMED, &[&namespace, &low, &high, &reach])
        .map_err(failed(action))?;
    // All or none: the rollback gives back what this attempt claimed.
    turn.rollback().map_err(failed(action))?;
    // The query counted this transaction's claims as live.
    let held = unsigned(&row, 0, action)?.saturating_sub(claims.len() as u64);
    let lowest_ahead: Option<i64> = column(&row, 1, action)?;
    let ahead_mark: Option<i64> = column(&row, 2, action)?;
    let ahead = lowest_ahead
        .zip(ahead_mark)
        .map(|(node, mark)| PassedOver::new(node.unsigned_abs(), mark.unsigned_abs()));
    Ok(Attempt::Short(Shortfall { held, ahead }))
}

/// Every lease row of `namespace`, by node: holder, generation and expiry are kept in the
/// row when it is no longer live.
///
/// # Errors
///
/// [`LeaseError::InvalidNamespace`](atomflake_lease::LeaseError::InvalidNamespace);
/// [`PostgresError::Database`] when the server cannot be reached, and
/// [`PostgresError::NoLeaseTable`] when the table is missing.
pub fn list(database: &Database, namespace: &str) -> Result<Vec<LeaseRow>, LeaseError> {
    atomflake_lease::list::<Postgres>(database, namespace)
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A node, mark or time as a `bigint`: every one here is far below `i64::MAX`.
fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use atomflake::Layout;
    use atomflake_lease::NodesError;

    /// A server that is never reached: bad options are refused before connecting.
    fn nowhere() -> Database {
        "host=/nonexistent-atomflake port=1 user=nobody".parse().unwrap()
    }

    #[test]
    fn bad_options_are_refused_before_connecting_and_list_checks_the_namespace_too() {
        let refused =
            |options: LeaseOptions| Lease::acquire(&nowhere(), &Layout::TWITTER, &options).unwrap_err();
        let long = "n".repeat(64);
        for namespace in ["", long.as_str()] {
            let error = refused(LeaseOptions::new(namespace));
            assert_eq!(
                error,
                LeaseError::InvalidNamespace {
                    namespace: namespace.into()
                }
            );
            assert_eq!(list(&nowhere(), namespace).unwrap_err(), error);
        }
        let ttl = Duration::from_millis(999);
        assert_eq!(
            refused(LeaseOptions::new("n").ttl(ttl)),
            LeaseError::TtlOutOfRange { ttl }
        );
        assert_eq!(
            refused(LeaseOptions::new("n").nodes(0)),
            LeaseError::Nodes(NodesError::CountOutOfRange { count: 0, max: 1024 })
        );
    }

    #[test]
    fn a_server_that_is_not_there_is_a_transient_database_error_naming_it() {
        let error = Lease::acquire(&nowhere(), &Layout::TWITTER, &LeaseOptions::new("n")).unwrap_err();
        let LeaseError::Engine(PostgresError::Database {
            action: "connect",
            cause,
        }) = &error
        else {
            panic!("{error:?}");
        };
        assert!(cause.to_string().contains("/nonexistent-atomflake"), "{cause}");
        assert!(error.is_transient());
    }
}
