//! Node-ID leases kept in PostgreSQL: one ID space across a fleet of processes.
//!
//! Snowflake IDs are unique only while every live generator of a layout has its own node
//! ID. A [`Lease`] claims one from a table in the fleet's own PostgreSQL, and a generator
//! on it (`Builder::mark_store(lease)`, any generator type) keeps it. The lease is a
//! [`MarkStore`] of [`Tenure::lease`]: the fence and the keeper are the core crate's, the
//! same for every store.
//!
//!
//! - **Claim.** [`Lease::acquire`] takes the lowest node of the layout's range that no
//!   live lease holds (or the one asked for). Claimants of one namespace take turns on an
//!   advisory lock for the few milliseconds a claim takes, so a fleet that starts at once
//!   claims one node each without colliding, and a claim reads only the namespace's rows,
//!   never the whole node range. The claim is an `INSERT ... ON CONFLICT DO UPDATE` whose
//!   update only takes an expired row, so even a claimant that skips the turn serializes
//!   on the row and finds it live. Every claim draws a **token**, a random UUID that no
//!   other claim has: the lease's fence. Expiry is decided by the server's clock
//!   (`clock_timestamp()`), never the claimant's. Free nodes whose marks are further
//!   ahead of the claimant's clock than a generator waits for are passed over
//!   ([`Lease::passed_over`]): a host whose clock ran ahead cannot block the others.
//! - **Mark.** The row holds the node's **high-water mark** (Unix ms): every ID minted on
//!   the node has an earlier time. A generator on the lease starts past it, and moves it
//!   ahead of its IDs the way `Builder::high_water_file` moves the file's: the same keeper thread, one write a second at most, ahead of need,
//!   never on a minting thread. Storing the mark renews the lease, and succeeds only while
//!   the row still has this claim's token.
//! - **Fence.** Every store is also a renewal: the keeper stores every quarter of the
//!   lease time, and a store that succeeds lets the generator mint until its *local
//!   deadline*: the generator's clock when the store was sent, plus the lease time, less a
//!   fifth of it (the margin for clock rates and the discipline's slew). The deadline is
//!   part of the limit the minting path already loads, so it costs no extra load. Past
//!   it, `try_next_id` returns `MintError::Store` with [`LeaseError::Expired`] inside until
//!   a renewal succeeds; a renewal that finds another token, or no row, ends renewals for
//!   good ([`LeaseError::Lost`]),
//!   so nothing more is minted past the deadline or the last stored mark, whichever is
//!   first.
//! - **Release.** Dropping the generator writes the mark that covers exactly what it
//!   minted (the end of its last ID's tick, below the mark stored ahead of need) and
//!   expires the row, so the node is free at once and a successor's first ID need not
//!   wait for its clock. An unused [`Lease`] is released when dropped too.
//!
//! Two fences protect the IDs. The deadline stops a holder before the server can expire
//! its lease; and whatever a holder's clock does, it never mints past the last mark it
//! stored, while a successor starts past every mark stored before its claim. So even a
//! holder whose deadline failed it (a clock that stood still) never repeats a successor's
//! ID.
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
//! A connection that fails is made again by the next renewal.
//!
//! # Statements that commit late
//!
//! A statement can commit after its holder gave up on it: the connection broke with the
//! statement sent (a reset link, a TCP user timeout), the lease sent it again on a new
//! connection, and the server, which had received it and does not notice a closed client
//! while a statement runs, commits it later: after the statement sent again, after newer
//! stores, after the release, after a successor's claim. (A statement the server cancels,
//! at its `statement_timeout` of a quarter of the lease time, commits nothing.) A generator
//! dropped while a store hangs leaves its keeper to finish that store and the release
//! whenever the server answers: late too. Every write is safe at any later point:
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
//! A lease needs `SELECT, INSERT, UPDATE` on `public.atomflake_lease` (table-level
//! grants), `USAGE` on schema `public`, and `EXECUTE` on `gen_random_uuid()` and
//! `pg_advisory_xact_lock()` (PostgreSQL grants both to everyone). It deletes nothing and
//! needs no `CREATE` once the table exists: a migration role creates it ([`DDL`], or
//! `atomflake lease ddl`), then
//!
//! ```sql
//! GRANT SELECT, INSERT, UPDATE ON public.atomflake_lease TO app;
//! ```
//!
//! [`list`] needs `SELECT` alone. A role without the table, or without a privilege, gets
//! [`LeaseError::NoLeaseTable`] or [`LeaseError::MissingGrant`], which name what to
//! grant. A role that may create in schema `public` creates the table itself when it is
//! missing.
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

mod error;

pub use error::{DbCause, LeaseError, MAX_NAMESPACE_LEN};

use crate::database::{ConnectError, Database};
use atomflake::mark::{MarkStore, NodesError, StoreError, Tenure, default_holder};
use atomflake::{Builder, Layout, MonotonicClock};
use std::time::Duration;

/// The PostgreSQL client the lease connects with (the `postgres` crate), for its
/// [`Config`](postgres::Config).
pub use postgres;

/// The shortest lease time.
pub const MIN_TTL: Duration = Duration::from_secs(1);

/// The longest lease time.
pub const MAX_TTL: Duration = Duration::from_secs(3600);

/// The lease time unless one is given.
pub const DEFAULT_TTL: Duration = LeaseOptions::DEFAULT_TTL;

/// The table every lease lives in, always in schema `public` (never found through the
/// session's `search_path`, so that every process of a fleet uses one table whatever its
/// role's settings): created by [`Lease::acquire`] when missing, and printed by
/// `atomflake lease ddl` for migration tools. One row per `(namespace, node)` ever
/// claimed.
///
/// `generation` counts a node's claims, for people reading the table; `token` is the
/// fence: a random UUID drawn by the server for each claim, never reused, so a holder
/// whose claim was lost (a deleted row, a commit the server lost) can never renew or
/// store a mark on its successor's claim.
///
/// Never delete a row of a namespace in use: it holds the node's high-water mark, and a
/// node claimed without its row starts from the claimant's clock.
pub const DDL: &str = "\
CREATE TABLE IF NOT EXISTS public.atomflake_lease (
    namespace     text        NOT NULL,
    node          bigint      NOT NULL CHECK (node >= 0),
    holder        text        NOT NULL,
    generation    bigint      NOT NULL,
    token         uuid        NOT NULL,
    expires_at    timestamptz NOT NULL,
    high_water_ms bigint      NOT NULL CHECK (high_water_ms >= 0),
    PRIMARY KEY (namespace, node)
);
";

/// Makes claimants of one namespace take turns, until their transaction ends. `$1`
/// namespace. (A key pair of its own: the one-number key that `create_table` takes is
/// another lock space.)
const CLAIM_TURN: &str = "SELECT pg_advisory_xact_lock(hashtext('atomflake_lease'), hashtext($1))";

/// Claims the lowest node of `$2..=$3` that no live lease holds and whose mark is at most
/// `$6` (Unix ms). `$1` namespace, `$4` holder, `$5` lease time in ms. Reads only the
/// namespace's rows (an expired row, or the first node without a row), never the whole
/// node range: as cheap on 65,536 nodes as on 16.
const CLAIM: &str = "
WITH candidate AS (
    SELECT min(n) AS node FROM (
        (SELECT node AS n FROM public.atomflake_lease
         WHERE namespace = $1 AND node BETWEEN $2 AND $3
           AND expires_at <= clock_timestamp() AND high_water_ms <= $6
         ORDER BY node LIMIT 1)
        UNION ALL
        (SELECT g.n FROM (
             SELECT $2::bigint AS n
             UNION ALL
             SELECT node + 1 FROM public.atomflake_lease
             WHERE namespace = $1 AND node >= $2 AND node < $3) AS g
         WHERE NOT EXISTS (
             SELECT 1 FROM public.atomflake_lease l WHERE l.namespace = $1 AND l.node = g.n)
         ORDER BY g.n LIMIT 1)
    ) AS free
)
INSERT INTO public.atomflake_lease AS l
    (namespace, node, holder, generation, token, expires_at, high_water_ms)
SELECT $1, node, $4, 1, gen_random_uuid(), clock_timestamp() + $5::bigint * interval '1 millisecond', 0
FROM candidate
WHERE node IS NOT NULL
ON CONFLICT (namespace, node) DO UPDATE
    SET holder = excluded.holder,
        generation = l.generation + 1,
        token = excluded.token,
        expires_at = excluded.expires_at
    WHERE l.expires_at <= clock_timestamp()
RETURNING l.node, l.generation, l.token::text, l.high_water_ms";

/// After a claim that found nothing: how many nodes of `$2..=$3` live leases hold, and
/// the lowest free node whose mark is past `$4`, with that mark. `$1` namespace.
const NOTHING_CLAIMED: &str = "
SELECT count(*) FILTER (WHERE expires_at > clock_timestamp()),
       min(node) FILTER (WHERE expires_at <= clock_timestamp() AND high_water_ms > $4),
       min(high_water_ms) FILTER (WHERE expires_at <= clock_timestamp() AND high_water_ms > $4)
FROM public.atomflake_lease
WHERE namespace = $1 AND node BETWEEN $2 AND $3";

/// The free nodes of `$2..=$3` whose marks are past `$4`: passed over by a claim. `$1`
/// namespace.
const PASSED_OVER: &str = "
SELECT node, high_water_ms FROM public.atomflake_lease
WHERE namespace = $1 AND node BETWEEN $2 AND $3
  AND expires_at <= clock_timestamp() AND high_water_ms > $4
ORDER BY node
LIMIT 16";

/// Stores a mark and renews: only while the claim is the holder's. `$1` namespace, `$2`
/// node, `$3` token, `$4` lease time in ms, `$5` mark.
const RENEW: &str = "
UPDATE public.atomflake_lease
SET expires_at = clock_timestamp() + $4::bigint * interval '1 millisecond',
    high_water_ms = GREATEST(high_water_ms, $5::bigint)
WHERE namespace = $1 AND node = $2 AND token = $3::text::uuid";

/// Stores the last mark and expires the row. `$1` namespace, `$2` node, `$3` token, `$4`
/// mark.
const RELEASE: &str = "
UPDATE public.atomflake_lease
SET expires_at = clock_timestamp(),
    high_water_ms = GREATEST(high_water_ms, $4::bigint)
WHERE namespace = $1 AND node = $2 AND token = $3::text::uuid";

/// Stores the mark that covers exactly what the holder minted, which may be below the
/// stored one, and expires the row. `$1` namespace, `$2` node, `$3` token, `$4` mark.
const RELEASE_FINISHED: &str = "
UPDATE public.atomflake_lease
SET expires_at = clock_timestamp(),
    high_water_ms = $4::bigint
WHERE namespace = $1 AND node = $2 AND token = $3::text::uuid";

/// Every row of a namespace. `$1` namespace.
const LIST: &str = "
SELECT node, holder, generation,
       (extract(epoch FROM expires_at) * 1000)::bigint,
       expires_at > clock_timestamp(),
       high_water_ms
FROM public.atomflake_lease
WHERE namespace = $1
ORDER BY node";

/// Raises the session's `synchronous_commit` to `on` unless it is `remote_apply`: a claim
/// or a renewal is on disk (and on a synchronous standby, where there is one) before the
/// holder relies on it, whatever the server's default.
const DURABLE: &str = "
SELECT set_config('synchronous_commit', 'on', false)
WHERE current_setting('synchronous_commit') <> 'remote_apply'";

/// How long a claimant waits for its turn and its claim: claims of a fleet starting at
/// once take turns, each a few milliseconds.
const CLAIM_TIMEOUT: Duration = Duration::from_secs(10);

/// What to claim: the same options for every lease engine. The lease time must be within
/// [`MIN_TTL`]`..=`[`MAX_TTL`].
pub use atomflake::mark::LeaseOptions;

/// Checks `options` for `layout`: the namespace, the lease time and the nodes.
fn validate(options: &LeaseOptions, layout: &Layout) -> Result<(), LeaseError> {
    check_namespace(&options.namespace)?;
    if !(MIN_TTL..=MAX_TTL).contains(&options.ttl) {
        return Err(LeaseError::TtlOutOfRange {
            ttl: options.ttl,
            min: MIN_TTL,
            max: MAX_TTL,
        });
    }
    match options.claimable(layout) {
        Ok(_) => Ok(()),
        Err(NodesError::NodeOutOfRange { node, max }) => Err(LeaseError::NodeOutOfRange { node, max }),
        Err(NodesError::CountOutOfRange { count, max }) => Err(LeaseError::CountOutOfRange { count, max }),
    }
}

/// One claimed row.
#[derive(Debug, Clone)]
struct Claim {
    node: u64,
    generation: i64,
    /// The claim's fence: renewals and releases touch the row only while it has this.
    token: String,
}

/// Claimed node IDs (one unless [`LeaseOptions::nodes`] asks for more): held until the
/// lease is dropped, or kept by the generator built on it.
pub struct Lease {
    database: Database,
    client: Option<postgres::Client>,
    namespace: String,
    /// The claimed rows, lowest node first.
    claims: Vec<Claim>,
    /// The claims' nodes, in the same order.
    nodes: Vec<u64>,
    holder: String,
    ttl: Duration,
    /// Free nodes the claim passed over: their marks are too far ahead of this clock.
    passed_over: Vec<PassedOver>,
    /// The highest of the rows' marks when claimed.
    claimed_mark: u64,
    /// The last mark stored; `None` once released.
    stored: Option<u64>,
    /// The mark that covers exactly what the generator on the lease minted, once it
    /// stopped: what the release stores.
    finished: Option<u64>,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("namespace", &self.namespace)
            .field("nodes", &self.nodes)
            .field("generation", &self.generation())
            .field("holder", &self.holder)
            .field("ttl", &self.ttl)
            .field("connected", &self.client.is_some())
            .finish_non_exhaustive()
    }
}

/// A free node that [`Lease::acquire`] passed over because its high-water mark is further
/// ahead of this process's clock than a generator waits for at start-up: a previous
/// holder's clock ran ahead. It is free for a claimant whose clock has reached its mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PassedOver {
    /// The node.
    pub node: u64,
    /// Its high-water mark, Unix ms.
    pub high_water_ms: u64,
}

/// One row of the lease table ([`list`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseRow {
    /// The node.
    pub node: u64,
    /// Who claimed it last.
    pub holder: String,
    /// How many times it has been claimed (for people: the fence is a random token per
    /// claim, which the table keeps and this row does not show).
    pub generation: i64,
    /// When the lease expires (or expired), Unix ms, by the server's clock.
    pub expires_unix_ms: i64,
    /// Whether it has not expired yet, by the server's clock.
    pub live: bool,
    /// The node's high-water mark, Unix ms: every ID minted on it has an earlier time.
    pub high_water_ms: u64,
}

impl Lease {
    /// Claims a node of `layout`'s range in `options`' namespace: creates the table when
    /// missing, then takes the lowest node no live lease holds (or the one asked for).
    ///
    /// # Errors
    ///
    /// [`LeaseError::NoFreeNode`] (or [`NodeTaken`](LeaseError::NodeTaken) for a node
    /// asked for) when live leases hold them all; [`LeaseError::InvalidNamespace`],
    /// [`TtlOutOfRange`](LeaseError::TtlOutOfRange) and
    /// [`NodeOutOfRange`](LeaseError::NodeOutOfRange) for bad options;
    /// [`LeaseError::Database`] when the server cannot be reached or a statement fails.
    pub fn acquire(
        database: &Database,
        layout: &Layout,
        options: &LeaseOptions,
    ) -> Result<Lease, LeaseError> {
        validate(options, layout)?;
        off_runtime(|| Lease::claim(database, layout, options))
    }

    fn claim(database: &Database, layout: &Layout, options: &LeaseOptions) -> Result<Lease, LeaseError> {
        let database = with_timeouts(database, options.ttl);
        let mut client = connect(&database, options.ttl)?;
        create_table(&mut client)?;
        check_grants(&mut client, &["SELECT", "INSERT", "UPDATE"])?;
        let (low, high) = match options.node {
            Some(node) => (node, node),
            None => (0, layout.max_node()),
        };
        let holder = options.holder.clone().unwrap_or_else(default_holder);
        let namespace = options.namespace.as_str();
        let (low, high) = (to_i64(low), to_i64(high));
        let ttl_ms = to_i64(millis(options.ttl));
        // A node asked for is claimed whatever its mark: the generator built on it says
        // how far ahead the mark is. Otherwise nodes whose marks this clock cannot reach
        // within the start-up wait are passed over, so one host whose clock ran ahead
        // cannot make every claimant take and give back the same node.
        let clock_ms = unix_now_ms();
        let reach = match options.node {
            Some(_) => i64::MAX,
            None => to_i64(clock_ms.saturating_add(millis(Builder::<MonotonicClock>::MAX_RESTART_WAIT))),
        };
        loop {
            let action = "claim a node";
            let mut turn = client.transaction().map_err(failed(action))?;
            turn.batch_execute(&format!(
                "SET LOCAL statement_timeout = {}",
                millis(CLAIM_TIMEOUT)
            ))
            .map_err(failed(action))?;
            turn.execute(CLAIM_TURN, &[&namespace]).map_err(failed(action))?;
            let mut claims = Vec::new();
            let mut mark = 0;
            while claims.len() < usize::try_from(options.count).unwrap_or(usize::MAX) {
                let params: [&(dyn postgres::types::ToSql + Sync); 6] =
                    [&namespace, &low, &high, &holder, &ttl_ms, &reach];
                let Some(row) = turn.query_opt(CLAIM, &params).map_err(failed(action))? else {
                    break;
                };
                mark = mark.max(unsigned(&row, 3, action)?);
                claims.push(Claim {
                    node: unsigned(&row, 0, action)?,
                    generation: column(&row, 1, action)?,
                    token: column(&row, 2, action)?,
                });
            }
            if claims.len() as u64 == options.count {
                let passed_over = match options.node {
                    Some(_) => Vec::new(),
                    None => turn
                        .query(PASSED_OVER, &[&namespace, &low, &high, &reach])
                        .map_err(failed(action))?
                        .iter()
                        .map(|row| {
                            Ok(PassedOver {
                                node: unsigned(row, 0, action)?,
                                high_water_ms: unsigned(row, 1, action)?,
                            })
                        })
                        .collect::<Result<_, LeaseError>>()?,
                };
                turn.commit().map_err(failed(action))?;
                return Ok(Lease {
                    database,
                    namespace: options.namespace.clone(),
                    nodes: claims.iter().map(|claim| claim.node).collect(),
                    claims,
                    client: Some(client),
                    holder,
                    ttl: options.ttl,
                    passed_over,
                    claimed_mark: mark,
                    stored: Some(mark),
                    finished: None,
                });
            }
            let row = turn
                .query_one(NOTHING_CLAIMED, &[&namespace, &low, &high, &reach])
                .map_err(failed(action))?;
            // All or none: the rollback gives back what this attempt claimed.
            turn.rollback().map_err(failed(action))?;
            if let Some(refusal) = refusal(&row, claims.len(), options, layout, clock_ms)? {
                return Err(refusal);
            }
            // A claimant that does not take turns took the node this one found free: try
            // again.
        }
    }

    /// The free nodes this claim passed over because their high-water marks are further
    /// ahead of this process's clock than a generator waits for at start-up (at most 16,
    /// the lowest first): a sign that a previous holder's clock ran ahead. Empty for a
    /// node asked for with [`LeaseOptions::node`].
    pub fn passed_over(&self) -> &[PassedOver] {
        &self.passed_over
    }

    /// The leased node ID (the lowest, for a lease of several).
    pub fn node(&self) -> u64 {
        self.nodes[0]
    }

    /// Every leased node ID, lowest first: one unless [`LeaseOptions::nodes`] asked for
    /// more.
    pub fn nodes(&self) -> &[u64] {
        &self.nodes
    }

    /// The lease's generation (of its lowest node, for a lease of several): how many times
    /// the node has been claimed, this claim included, as far as the table remembers (a
    /// row lost with the server's last commits counts again from where it was). For
    /// people: the lease is fenced by a random token drawn for this claim, which no other
    /// claim has.
    pub fn generation(&self) -> i64 {
        self.claims[0].generation
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The holder's name in the table.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// The lease time.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The node's high-water mark when it was claimed (Unix ms; the highest of them, for a
    /// lease of several): every ID a previous holder minted has an earlier time.
    pub fn high_water_ms(&self) -> u64 {
        self.claimed_mark
    }

    /// The error for a store that finds the `claim`th claim gone.
    fn lost(&self, claim: usize) -> LeaseError {
        LeaseError::Lost {
            namespace: self.namespace.clone(),
            node: self.claims[claim].node,
            generation: self.claims[claim].generation,
        }
    }

    /// Runs `sql` for every claim: `Ok(None)` when every row was still this lease's,
    /// `Ok(Some(i))` naming the first claim whose row was not (the others ran all the
    /// same).
    fn update_all(
        &mut self,
        action: &'static str,
        sql: &str,
        ttl_ms: Option<i64>,
        mark: u64,
    ) -> Result<Option<usize>, LeaseError> {
        let mut lost = None;
        for claim in 0..self.claims.len() {
            if self.update(action, sql, ttl_ms, mark, claim)? == 0 {
                lost = lost.or(Some(claim));
            }
        }
        Ok(lost)
    }

    /// Runs `sql` with the key of the `claim`th claim, connecting first when there is no
    /// connection: the number of rows it changed. A connection found broken (the server
    /// restarted, the connection was killed) is made again once at once: every statement
    /// here can run twice to the same effect.
    fn update(
        &mut self,
        action: &'static str,
        sql: &str,
        ttl_ms: Option<i64>,
        mark: u64,
        claim: usize,
    ) -> Result<u64, LeaseError> {
        off_runtime(|| {
            let claim = &self.claims[claim];
            let (namespace, node, mark) = (self.namespace.as_str(), to_i64(claim.node), to_i64(mark));
            let mut fresh = false;
            loop {
                let client = match &mut self.client {
                    Some(client) if !client.is_closed() => client,
                    slot => {
                        fresh = true;
                        slot.insert(connect(&self.database, self.ttl)?)
                    }
                };
                let result = match ttl_ms {
                    Some(ttl_ms) => client.execute(sql, &[&namespace, &node, &claim.token, &ttl_ms, &mark]),
                    None => client.execute(sql, &[&namespace, &node, &claim.token, &mark]),
                };
                if result.is_err() && client.is_closed() {
                    self.client = None;
                    if !fresh {
                        continue;
                    }
                }
                return result.map_err(failed(action));
            }
        })
    }

    /// Frees the nodes now: stores the last mark and expires the rows. Dropping the lease
    /// (or the generator built on it) does the same, and reports nothing.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Lost`] when another process holds the node already;
    /// [`LeaseError::Database`] when the statement fails (the lease then expires by
    /// itself).
    pub fn release(mut self) -> Result<(), LeaseError> {
        self.release_now()
    }

    fn release_now(&mut self) -> Result<(), LeaseError> {
        let Some(stored) = self.stored.take() else {
            return Ok(());
        };
        // The exact mark of what was minted, when known: below the stored mark, so that a
        // successor does not wait for its clock to reach a mark stored ahead of need.
        // Never below the mark claimed: the generator started past it.
        let (sql, mark) = match self.finished {
            Some(finished) => (RELEASE_FINISHED, finished.max(self.claimed_mark)),
            None => (RELEASE, stored),
        };
        match self.update_all("release", sql, None, mark)? {
            Some(claim) => Err(self.lost(claim)),
            None => Ok(()),
        }
    }
}

/// The node's mark lives in the lease row; every store renews the lease.
impl MarkStore for Lease {
    fn mark(&self) -> u64 {
        self.claimed_mark
    }

    fn store(&mut self, unix_ms: u64) -> Result<(), StoreError> {
        let ttl_ms = to_i64(millis(self.ttl));
        let lost = self
            .update_all("renew", RENEW, Some(ttl_ms), unix_ms)
            .map_err(StoreError::failed)?;
        if let Some(claim) = lost {
            return Err(StoreError::lost(self.lost(claim)));
        }
        self.stored = self.stored.map(|stored| stored.max(unix_ms));
        Ok(())
    }

    fn describe(&self) -> String {
        let nodes: Vec<String> = self.nodes.iter().map(u64::to_string).collect();
        format!(
            "the high-water mark of node {} in lease namespace {:?}",
            nodes.join(", "),
            self.namespace
        )
    }

    fn nodes(&self) -> &[u64] {
        &self.nodes
    }

    fn tenure(&self) -> Tenure {
        Tenure::lease(self.ttl)
    }

    fn lapsed(&self) -> StoreError {
        StoreError::lapsed(LeaseError::Expired {
            namespace: self.namespace.clone(),
            node: self.node(),
            generation: self.generation(),
        })
    }

    fn finish(&mut self, unix_ms: u64) {
        self.finished = Some(unix_ms);
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // Nothing to report to: a lease not released expires by itself.
        let _ = self.release_now();
        // Closing the connection blocks on the client's runtime too.
        let client = self.client.take();
        off_runtime(move || drop(client));
    }
}

/// Why a claim found fewer free nodes than it asked for, from the [`NOTHING_CLAIMED`] row
/// of a transaction in which it claimed `ours`; `None` when nothing refuses it (a claimant
/// that does not take turns took a node this one found free: try again).
fn refusal(
    row: &postgres::Row,
    ours: usize,
    options: &LeaseOptions,
    layout: &Layout,
    clock_ms: u64,
) -> Result<Option<LeaseError>, LeaseError> {
    let action = "claim a node";
    let namespace = options.namespace.clone();
    // The query counted this transaction's claims as live.
    let live = unsigned(row, 0, action)?.saturating_sub(ours as u64);
    let range = match options.node {
        Some(_) => 1,
        None => layout.max_node().saturating_add(1),
    };
    let free = range.saturating_sub(live);
    if free == 0 {
        return Ok(Some(match options.node {
            Some(node) => LeaseError::NodeTaken { namespace, node },
            None => LeaseError::NoFreeNode {
                namespace,
                max: layout.max_node(),
            },
        }));
    }
    if free < options.count {
        return Ok(Some(LeaseError::TooFewFreeNodes {
            namespace,
            count: options.count,
            free,
        }));
    }
    let lowest_ahead: Option<i64> = column(row, 1, action)?;
    let mark: Option<i64> = column(row, 2, action)?;
    // Free nodes, but every one of them ahead of this clock: under the turn lock no
    // claimant took one meanwhile.
    Ok(lowest_ahead.zip(mark).map(|(node, mark)| LeaseError::Ahead {
        namespace,
        node: node.unsigned_abs(),
        mark_ms: mark.unsigned_abs(),
        clock_ms,
        max_wait: Builder::<MonotonicClock>::MAX_RESTART_WAIT,
    }))
}

/// Every lease row of `namespace`, by node.
///
/// # Errors
///
/// [`LeaseError::InvalidNamespace`]; [`LeaseError::Database`] when the server cannot be
/// reached or the table is missing.
pub fn list(database: &Database, namespace: &str) -> Result<Vec<LeaseRow>, LeaseError> {
    check_namespace(namespace)?;
    let database = with_timeouts(database, DEFAULT_TTL);
    off_runtime(|| {
        let action = "list leases";
        let mut client = connect(&database, DEFAULT_TTL)?;
        if !table_exists(&mut client)? {
            return Err(LeaseError::NoLeaseTable {
                role: current_user(&mut client)?,
            });
        }
        check_grants(&mut client, &["SELECT"])?;
        let rows = client.query(LIST, &[&namespace]).map_err(failed(action))?;
        rows.iter()
            .map(|row| {
                Ok(LeaseRow {
                    node: unsigned(row, 0, action)?,
                    holder: column(row, 1, action)?,
                    generation: column(row, 2, action)?,
                    expires_unix_ms: column(row, 3, action)?,
                    live: column(row, 4, action)?,
                    high_water_ms: unsigned(row, 5, action)?,
                })
            })
            .collect()
    })
}

/// `namespace`, unless it is empty or longer than [`MAX_NAMESPACE_LEN`] bytes.
fn check_namespace(namespace: &str) -> Result<(), LeaseError> {
    if namespace.is_empty() || namespace.len() > MAX_NAMESPACE_LEN {
        return Err(LeaseError::InvalidNamespace {
            namespace: namespace.to_owned(),
        });
    }
    Ok(())
}

/// `config` with a connect timeout and a TCP user timeout (a quarter of the lease time)
/// unless it has them, and TCP keepalives: a renewal never waits long for a server that
/// is gone. Its
/// `application_name` is `atomflake-lease` unless set, so that `pg_stat_activity` shows
/// which connections hold leases.
fn with_timeouts(database: &Database, ttl: Duration) -> Database {
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
/// A connection that cannot be made is a [`LeaseError::Database`] naming the database
/// (user, hosts, ports, database name and TLS mode: never the password).
fn connect(database: &Database, ttl: Duration) -> Result<postgres::Client, LeaseError> {
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
        LeaseError::Database { action, cause }
    })?;
    client
        .batch_execute(&format!("SET statement_timeout = {}; {DURABLE}", millis(ttl / 4)))
        .map_err(failed(action))?;
    Ok(client)
}

/// Creates the table when missing. `CREATE TABLE IF NOT EXISTS` run by two sessions at
/// once can fail in one of them (both insert the new type), so creators take turns on a
/// transaction-level advisory lock, and a table already there takes no lock.
fn create_table(client: &mut postgres::Client) -> Result<(), LeaseError> {
    if table_exists(client)? {
        return Ok(());
    }
    let may_create: bool = client
        .query_one("SELECT has_schema_privilege('public', 'CREATE')", &[])
        .map_err(failed("create the lease table"))?
        .get(0);
    if !may_create {
        return Err(LeaseError::NoLeaseTable {
            role: current_user(client)?,
        });
    }
    client
        .batch_execute(&format!(
            "BEGIN; SELECT pg_advisory_xact_lock(hashtext('atomflake_lease')); {DDL} COMMIT;"
        ))
        .map_err(failed("create the lease table"))
}

/// Whether `public.atomflake_lease` exists.
fn table_exists(client: &mut postgres::Client) -> Result<bool, LeaseError> {
    Ok(client
        .query_one("SELECT to_regclass('public.atomflake_lease') IS NOT NULL", &[])
        .map_err(failed("find the lease table"))?
        .get(0))
}

/// The role connected.
fn current_user(client: &mut postgres::Client) -> Result<String, LeaseError> {
    Ok(client
        .query_one("SELECT current_user::text", &[])
        .map_err(failed("read the role"))?
        .get(0))
}

/// [`LeaseError::MissingGrant`] unless the role connected has each of `privileges` on the
/// lease table (as table-level grants).
fn check_grants(client: &mut postgres::Client, privileges: &[&'static str]) -> Result<(), LeaseError> {
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
    Err(LeaseError::MissingGrant {
        role: current_user(client)?,
        missing,
    })
}

/// A client error's text: the server's message and SQLSTATE when the server reported it
/// (the client's own text says only "db error"), else the client's text and its source.
fn describe(error: &postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => match std::error::Error::source(error) {
            Some(source) => format!("{error}: {source}"),
            None => error.to_string(),
        },
    }
}

/// Wraps a client error as [`LeaseError::Database`]. A server's error is described by its
/// SQLSTATE and message (the client's own text says only "db error").
fn failed(action: &'static str) -> impl Fn(postgres::Error) -> LeaseError {
    move |error| {
        let text = describe(&error);
        LeaseError::Database {
            action,
            cause: DbCause::new(error, text),
        }
    }
}

/// Runs `work` on a thread of its own and waits for it. The `postgres` client runs a
/// Tokio runtime of its own inside every call, which panics on a thread that is already
/// running one: so a lease can be taken, kept and released from async code too (the
/// calling thread still blocks; use `spawn_blocking` to spare the runtime).
fn off_runtime<T: Send>(work: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|scope| match scope.spawn(work).join() {
        Ok(value) => value,
        Err(panic) => std::panic::resume_unwind(panic),
    })
}

/// A column of a lease row, or [`LeaseError::Database`] when the table's column does not
/// have the type the DDL gives it.
fn column<'a, T: postgres::types::FromSql<'a>>(
    row: &'a postgres::Row,
    index: usize,
    action: &'static str,
) -> Result<T, LeaseError> {
    row.try_get(index).map_err(failed(action))
}

/// A `bigint` column that is a node or a mark: never negative in a table the DDL made.
fn unsigned(row: &postgres::Row, index: usize, action: &'static str) -> Result<u64, LeaseError> {
    let value: i64 = column(row, index, action)?;
    u64::try_from(value).map_err(|_| {
        let text = format!("column {index} of atomflake_lease holds {value}, below 0");
        LeaseError::Database {
            action,
            cause: DbCause::new(std::io::Error::other(text.clone()), text),
        }
    })
}

/// This process's wall clock, Unix ms (0 before 1970).
fn unix_now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, millis)
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

    /// A server that is never reached: bad options are refused before connecting.
    fn nowhere() -> Database {
        "host=/nonexistent-atomflake port=1 user=nobody".parse().unwrap()
    }

    #[test]
    fn bad_options_are_refused_with_the_value_and_the_range() {
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
            assert_eq!(
                error.to_string(),
                format!("lease namespace {namespace:?} is invalid: allowed 1 to 63 bytes")
            );
            assert_eq!(list(&nowhere(), namespace).unwrap_err(), error);
        }
        assert!(validate(&LeaseOptions::new("n".repeat(63)), &Layout::TWITTER).is_ok());
        for ttl in [Duration::from_millis(999), Duration::from_secs(3601)] {
            let error = refused(LeaseOptions::new("n").ttl(ttl));
            assert_eq!(
                error,
                LeaseError::TtlOutOfRange {
                    ttl,
                    min: MIN_TTL,
                    max: MAX_TTL
                }
            );
        }
        for (options, count, max) in [
            (LeaseOptions::new("n").nodes(0), 0, 1024),
            (LeaseOptions::new("n").nodes(1025), 1025, 1024),
            (LeaseOptions::new("n").node(5).nodes(2), 2, 1),
        ] {
            assert_eq!(refused(options), LeaseError::CountOutOfRange { count, max });
        }
        assert_eq!(
            LeaseError::CountOutOfRange { count: 0, max: 1024 }.to_string(),
            "lease node count 0 is out of range: allowed 1..=1024"
        );
        let error = refused(LeaseOptions::new("n").node(1024));
        assert_eq!(
            error,
            LeaseError::NodeOutOfRange {
                node: 1024,
                max: 1023
            }
        );
        assert_eq!(
            error.to_string(),
            "node 1024 is out of range: the layout allows 0..=1023"
        );
    }
}

/// A model of the lease table and its holders: what the server can lose (its last commits,
/// a row) and what a claim can reuse (a generation), against the fence the statements
/// keep (`CLAIM`, `RENEW`: a store succeeds only while the row has the holder's token).
/// One node; a holder mints at most one ID a tick, so two holders sharing a tick stands
/// for a repeated ID.
#[cfg(all(test, not(loom)))]
mod model {
    use atomflake::mark::Tenure;
    use proptest::prelude::*;
    use std::time::Duration;

    const TTL: u64 = 2_000;

    /// The mark the generator's keeper stores to cover `unix_ms`: a window and a half
    /// (1.5 s) past it.
    fn ahead(unix_ms: u64) -> u64 {
        unix_ms + 1_500
    }

    /// What a store checks the row against.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Fence {
        /// The claim's own random token: what the statements do.
        Token,
        /// The row's claim counter, which a lost commit or a lost row lets a claim reuse.
        Generation,
    }

    #[derive(Debug, Clone, Copy)]
    struct Row {
        generation: i64,
        token: u64,
        expires: u64,
        mark: u64,
    }

    /// A committed state of the row, and the holder whose claim or store wrote it.
    type Commit = (Option<Row>, Option<usize>);

    #[derive(Debug, Default)]
    struct Holder {
        generation: i64,
        token: u64,
        /// The first tick it may mint (past the mark it claimed).
        start: u64,
        stored: u64,
        deadline: u64,
        lost: bool,
        /// The largest mark of this holder's that the server lost after acknowledging it.
        lost_cover: u64,
        minted: Vec<u64>,
    }

    #[derive(Debug, Clone)]
    enum Op {
        Wait(u64),
        Claim,
        Store(usize),
        Mint(usize),
        /// The server loses its last `n` commits (a failover to a lagging standby).
        Lose(usize),
        /// The row is deleted.
        Delete,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (1u64..=1_500).prop_map(Op::Wait),
            2 => Just(Op::Claim),
            4 => (0usize..4).prop_map(Op::Store),
            8 => (0usize..4).prop_map(Op::Mint),
            1 => (1usize..=3).prop_map(Op::Lose),
            1 => Just(Op::Delete),
        ]
    }

    /// Runs `ops` on one node: the holders at the end.
    fn run(fence: Fence, ops: &[Op]) -> Vec<Holder> {
        let Tenure::Leased { hold, .. } = Tenure::lease(Duration::from_millis(TTL)) else {
            unreachable!("a lease's tenure is leased");
        };
        let hold = u64::try_from(hold.as_millis()).unwrap();
        let mut now = 1_000_000;
        let mut history: Vec<Commit> = vec![(None, None)];
        let mut holders: Vec<Holder> = Vec::new();
        for op in ops {
            let row = history.last().unwrap().0;
            match *op {
                Op::Wait(ms) => now += ms,
                Op::Claim => {
                    if row.is_some_and(|row| row.expires > now) {
                        continue;
                    }
                    let claimed = Row {
                        generation: row.map_or(1, |row| row.generation + 1),
                        // Random and never reused: a new number per claim.
                        token: holders.len() as u64 + 1,
                        expires: now + TTL,
                        mark: row.map_or(0, |row| row.mark),
                    };
                    history.push((Some(claimed), Some(holders.len())));
                    let start = claimed.mark.max(now);
                    holders.push(Holder {
                        generation: claimed.generation,
                        token: claimed.token,
                        start,
                        stored: claimed.mark,
                        ..Holder::default()
                    });
                    // The generator's first store follows at once, as `Mark::kept` does.
                    let last = holders.len() - 1;
                    store(fence, &mut history, &mut holders, last, now, hold, ahead(start));
                }
                Op::Store(i) if i < holders.len() => {
                    let target = ahead(now).max(holders[i].stored);
                    store(fence, &mut history, &mut holders, i, now, hold, target);
                }
                Op::Mint(i) if i < holders.len() => {
                    let holder = &mut holders[i];
                    let last = holder.minted.last().copied().unwrap_or(0);
                    if now >= holder.start && now < holder.stored && now < holder.deadline && now > last {
                        holder.minted.push(now);
                    }
                }
                Op::Lose(n) => {
                    let keep = history.len().saturating_sub(n).max(1);
                    for (row, writer) in history.drain(keep..) {
                        if let (Some(row), Some(writer)) = (row, writer) {
                            let holder = &mut holders[writer];
                            holder.lost_cover = holder.lost_cover.max(row.mark);
                        }
                    }
                }
                Op::Delete => {
                    for holder in &mut holders {
                        holder.lost_cover = holder.lost_cover.max(holder.stored);
                    }
                    history.push((None, None));
                }
                Op::Store(_) | Op::Mint(_) => {}
            }
        }
        holders
    }

    /// One store of `target` by holder `i`, as `RENEW` runs it under `fence`.
    fn store(
        fence: Fence,
        history: &mut Vec<Commit>,
        holders: &mut [Holder],
        i: usize,
        now: u64,
        hold: u64,
        target: u64,
    ) {
        let holder = &mut holders[i];
        if holder.lost {
            return;
        }
        let ours = history.last().unwrap().0.filter(|row| match fence {
            Fence::Token => row.token == holder.token,
            Fence::Generation => row.generation == holder.generation,
        });
        let Some(row) = ours else {
            holder.lost = true;
            return;
        };
        let mark = row.mark.max(target);
        history.push((
            Some(Row {
                expires: now + TTL,
                mark,
                ..row
            }),
            Some(i),
        ));
        holder.stored = holder.stored.max(target);
        holder.deadline = now + hold;
    }

    /// Every tick two holders minted, with the two.
    fn shared_ticks(holders: &[Holder]) -> Vec<(u64, usize, usize)> {
        let mut seen = std::collections::HashMap::new();
        let mut shared = Vec::new();
        for (i, holder) in holders.iter().enumerate() {
            for &tick in &holder.minted {
                if let Some(other) = seen.insert(tick, i) {
                    shared.push((tick, other, i));
                }
            }
        }
        shared
    }

    /// Whether every tick two holders share lies below a mark of theirs that the server
    /// lost after acknowledging it: the only way two holders meet.
    fn only_lost_marks_let_holders_meet(holders: &[Holder]) -> bool {
        shared_ticks(holders)
            .iter()
            .all(|&(tick, a, b)| tick < holders[a].lost_cover.max(holders[b].lost_cover))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4_000))]

        /// With the token, whatever the server loses and whatever generation a claim
        /// reuses: two holders mint in the same tick only below a mark the server lost
        /// (so never when it loses nothing, as with synchronous replication).
        #[test]
        fn with_the_token_holders_meet_only_below_a_lost_mark(ops in proptest::collection::vec(op(), 1..80)) {
            let holders = run(Fence::Token, &ops);
            prop_assert!(only_lost_marks_let_holders_meet(&holders), "{:?}", shared_ticks(&holders));
            if !ops.iter().any(|op| matches!(op, Op::Lose(_) | Op::Delete)) {
                prop_assert_eq!(shared_ticks(&holders), vec![]);
            }
        }
    }

    /// The counter as the fence: a claim lost with the server's last commits is made
    /// again with the same generation, the first holder renews the second's claim, and
    /// both mint past every mark the server lost. The token ends the first at its store.
    #[test]
    fn with_the_generation_as_fence_two_holders_mint_past_every_lost_mark() {
        let ops = [
            Op::Claim,
            Op::Lose(2),
            Op::Claim,
            Op::Wait(1_600),
            Op::Store(0),
            Op::Store(1),
            Op::Mint(0),
            Op::Mint(1),
        ];
        let holders = run(Fence::Generation, &ops);
        assert!(!only_lost_marks_let_holders_meet(&holders), "{holders:?}");
        let holders = run(Fence::Token, &ops);
        assert!(holders[0].lost && holders[0].minted.is_empty(), "{holders:?}");
        assert_eq!(holders[1].minted.len(), 1);
    }
}
