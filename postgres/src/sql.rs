//! Minting inside PostgreSQL: the SQL script that [`PgScript`] writes.
//!
//! The script creates a sequence holding the state and PL/pgSQL functions that mint and
//! decode IDs of one [`Layout`] for one node, so that a table can take its keys from the
//! database itself:
//!
//! ```sql
//! CREATE TABLE message (id bigint PRIMARY KEY DEFAULT atomflake_next_id(), body text);
//! ```
//!
//! # The state and why no two calls mint the same ID
//!
//! The state is one sequence, `atomflake_state`, whose value is a *slot*
//! `tick · 2^k + n`: the high bits a tick of the layout, the low `k` bits a counter within
//! that tick, where `k` ([`PgScript::counter_bits`]) is wider than the layout's sequence
//! field. A call reads the clock's tick `now` and the sequence's next slot
//! (`pg_sequence_last_value(state) + 1`), and:
//!
//! 1. if that slot is an ID at `now` (`tick >= now` and `n < 2^sequence_bits`), takes a
//!    slot with `nextval` and, if it is still inside the sequence field, returns the ID
//!    `(tick(slot), node, n(slot))`: the fast path, one read and one `nextval`, no lock. A
//!    slot past the field (other calls spent the tick between the read and the `nextval`)
//!    is dropped, and the call starts again;
//! 2. if the slot's tick is *spent* (`n` past the sequence field), waits, holding nothing,
//!    until the clock passes that tick (at most the script's `max_wait`; at a given time it
//!    raises an error instead);
//! 3. if the slot is *stale* (`tick < now`, also after such a wait), takes an advisory
//!    lock, reads the sequence again and, if its next slot is still in a tick before
//!    `now`, *jumps*: `setval` to the first slot of `now`. Then it releases the lock and
//!    starts again.
//!
//! Uniqueness follows from the sequence alone: every value it hands out is used at most
//! once, and an ID is a one-to-one function of its value. What must hold is that the
//! sequence never hands out a usable value twice, although `setval` is not a
//! compare-and-set:
//!
//! - the only `setval` is the jump, made under the lock after a read under the lock, to a
//!   later tick than the read saw: the sequence only grows;
//! - a call takes a value past the sequence field only when its read came before the
//!   tick's first such value was handed out and its `nextval` after, and then takes no
//!   other in that tick (its next read finds the tick spent, and the sequence never comes
//!   back to it). So a tick's counter runs past the field by at most one value per call
//!   under way when the tick was spent: one per session, as a session runs one call at a
//!   time. Nothing else takes a value: a call waiting for the clock holds nothing, so
//!   however a call ends (an error, a cancel or statement timeout, a killed session) it
//!   leaves nothing to undo, and the lock is released on every way out;
//! - the counter has room for `2^k - 2^sequence_bits` values past the field
//!   ([`PgScript::headroom`]: 4,190,208 for Twitter, 65,536 for Mastodon), so with no more
//!   sessions than that it never carries into the next tick, and between a jump's read and
//!   its `setval` the other sessions' `nextval`s stay inside the tick the read saw. Every
//!   value handed out before a jump is therefore below its target, and every value after
//!   it above.
//!
//! The sessions are every server process that can run a call at once: client backends
//! (`max_connections`, which holds `superuser_reserved_connections` and
//! `reserved_connections`), background and parallel workers (`max_worker_processes`), WAL
//! senders (`max_wal_senders`: a logical replication connection runs SQL) and autovacuum
//! workers (`autovacuum_max_workers`); 121 with PostgreSQL's default settings. A layout
//! whose headroom is below that is refused when the script is written
//! ([`SqlError::TooLittleHeadroom`]), and the script raises an error (SQLSTATE `53400`)
//! naming the settings and the headroom when it is applied, and before every jump, on a
//! server whose settings add up to more than the headroom: a server restarted with more
//! sessions stops minting instead of risking a duplicate.
//!
//! `tests/loom_sql_protocol.rs` checks this protocol under every interleaving of two
//! and three sessions, and finds the duplicates when the headroom is missing or when calls
//! take a value before they look at it.
//!
//! The sequence is not transactional (a rolled-back transaction does not give its IDs
//! back), `nextval` never waits for another transaction, and the lock is held for one read
//! and one `setval`, never until commit. After a crash the sequence restarts at or past
//! every value handed out to a committed transaction (PostgreSQL logs a sequence ahead of
//! use and flushes that log before any commit that used it), so every new ID is past
//! every committed one.
//!
//! # Times ahead of the clock
//!
//! `next_id_at(unix_ms)` mints from the same state as `next_id()`: its IDs share the node's
//! ID space, so they must come from the one sequence that keeps them apart. A time ahead of
//! the server's clock therefore moves that state ahead, and every later `next_id()`
//! continues its tick: stamped ahead of its time and, once the tick is spent, waiting for
//! the clock to reach it. So `next_id_at` mints at most [`PgScript::max_ahead`] ahead of
//! the clock, as the extension does: half the max wait, and at most 5 s. A later
//! `next_id()` is then stamped at most that far ahead, and waits for such a tick at most
//! that long, which leaves the other half of its wait to a clock stepped back. A time
//! further ahead is an error (SQLSTATE `22008`) naming the time, how far ahead of the
//! clock it is, and the bound; a time behind the clock continues the last tick, as a
//! clock stepped back does.
//!
//! # Adopting a column
//!
//! A table whose key is a `bigserial` or a `bigint` identity switches over to atomflake
//! without a rewrite: [`PgScript::adopt`] adds to the script one statement per column
//! that, under an `ACCESS EXCLUSIVE` lock on the table taken before anything is read,
//! checks that the column and every foreign key referencing it are `bigint`, mints one
//! ID and checks that every value in the column is below the first ID of that ID's tick
//! (node 0, sequence 0: the smallest ID *any* node of the layout mints from then on, not
//! only this node's, so that the old values stay below the IDs of every minter of the
//! layout; the two differ by less than one tick), then sets the default to `next_id()` and
//! drops the identity or the sequence's ownership. The state only grows, so every later
//! `next_id()` is above the minted ID and so above every old value, also after the
//! server's clock moves back. Inserts waiting for the lock take their default from the
//! new one once it is committed (PostgreSQL reads the table's definition again after the
//! lock); inserts under way finish first. The check reads the rows with a snapshot taken
//! after the lock, which holds only under `READ COMMITTED`: another isolation level is
//! refused. A column whose default already calls `next_id()` (the script applied again;
//! known by the function the default depends on, not by its text) is left alone, without
//! a lock. The maximum is read with `row_security` off, so a policy that would hide rows
//! from the caller makes the adoption fail instead of passing over them; a relation that
//! is not a table (a view) is refused; the caller's `lock_timeout` bounds the wait for
//! the lock.
//!
//! The script is one transaction: a refusal anywhere (another layout's state, a column)
//! changes nothing, however `psql` runs it. [`PgScript::to_extension`] writes the move
//! from the script to the extension.
//!
//! # Examples
//!
//! ```
//! use atomflake::Layout;
//! use atomflake_postgres::sql::PgScript;
//!
//! let script = PgScript::new(Layout::INSTAGRAM, 5)?.to_string();
//! assert!(script.contains("CREATE OR REPLACE FUNCTION atomflake_next_id()"));
//! // Every object is named with the prefix.
//! let script = PgScript::new(Layout::TWITTER, 7)?.prefix("shard7")?.to_string();
//! assert!(script.contains("shard7_next_id()") && !script.contains("atomflake_next_id"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use atomflake::{Field, FieldOrder, Layout, RangeError};
use atomflake_sql as templates;
use core::fmt;
use std::time::Duration;

/// The SQL script that mints and decodes IDs of one layout inside PostgreSQL.
///
/// `Display` writes the script: one idempotent file (apply it again, or with another node,
/// at any time; the state is kept) that creates, in the current schema and named with the
/// prefix (default `atomflake`):
///
/// | object | what |
/// |---|---|
/// | `atomflake_state` | the sequence holding the state (see the [module docs](self)) |
/// | `atomflake_next_id() RETURNS bigint` | mints an ID; usable as a column default |
/// | `atomflake_next_id_at(unix_ms bigint) RETURNS bigint` | mints an ID for a given time (tests, replays), at most [`max_ahead`](Self::max_ahead) ahead of the server's clock; never waits |
/// | `atomflake_unix_ms(bigint)`, `atomflake_node(bigint)`, `atomflake_sequence(bigint)` | the fields, as `bigint` |
/// | `atomflake_time(bigint) RETURNS timestamptz` | the ID's time |
/// | `atomflake_first_id_at(timestamptz)`, `atomflake_last_id_at(timestamptz)` | the smallest and largest ID of a time's tick, for paging with the primary key |
///
/// Roles that insert need `GRANT USAGE, UPDATE ON SEQUENCE atomflake_state`. With
/// [`adopt`](Self::adopt) the script also switches existing `bigserial` or identity
/// columns over to `atomflake_next_id()`.
///
/// # Examples
///
/// ```
/// use atomflake::Layout;
/// use atomflake_postgres::sql::PgScript;
/// use std::time::Duration;
///
/// let script = PgScript::new(Layout::TWITTER, 7)?.max_wait(Duration::from_secs(2))?;
/// println!("{script}");
/// assert_eq!(script.counter_bits(), 22);
/// assert_eq!(
///     PgScript::new(Layout::TWITTER, 7)?.prefix("7up").unwrap_err().to_string(),
///     "sql prefix \"7up\" is not allowed: a prefix is 1..=40 characters of a-z, 0-9 and _, \
///      starting with a letter or _",
/// );
/// # Ok::<(), atomflake_postgres::sql::SqlError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgScript {
    layout: Layout,
    node: u64,
    prefix: String,
    max_wait: Duration,
    /// `k`: the low bits of a slot, the counter within a tick.
    counter_bits: u32,
    /// The last tick the state can hold whose IDs fit a `bigint`.
    last_tick: u64,
    /// The columns the script switches over to the mint, in the order given.
    adopt: Vec<AdoptColumn>,
}

/// A column that the script switches over to `next_id()`: `table` is `table` or
/// `schema.table`, names that need no quoting.
#[derive(Debug, Clone, PartialEq, Eq)]
struct AdoptColumn {
    table: String,
    column: String,
}

impl PgScript {
    /// The default prefix of every object the script creates.
    pub const DEFAULT_PREFIX: &'static str = "atomflake";
    /// The longest a call waits for a spent tick by default.
    pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(10);
    /// The longest [`max_wait`](Self::max_wait) allowed.
    pub const MAX_WAIT: Duration = Duration::from_secs(600);
    /// The furthest ahead of the server's clock `next_id_at` ever mints: the extension's
    /// bound. See [`max_ahead`](Self::max_ahead).
    pub const MAX_AHEAD: Duration = Duration::from_secs(5);
    /// The least [`headroom`](Self::headroom) a layout must leave: the sessions of a server
    /// with PostgreSQL's default settings, 100 (`max_connections`) + 8
    /// (`max_worker_processes`) + 10 (`max_wal_senders`) + 3 (`autovacuum_max_workers`).
    /// The script checks the server's own settings when it is applied and when a call
    /// jumps to a new tick.
    pub const MIN_HEADROOM: u64 = 121;
    /// The longest prefix allowed (PostgreSQL names hold 63 bytes).
    pub const MAX_PREFIX_LEN: usize = 40;
    /// The longest name of a schema, table or column that [`adopt`](Self::adopt) takes
    /// (PostgreSQL's limit).
    pub const MAX_NAME_LEN: usize = 63;

    /// The script for `layout` and `node`, with the default prefix and wait.
    ///
    /// # Errors
    ///
    /// [`SqlError::NodeOutOfRange`] for a node that does not fit the layout;
    /// [`SqlError::SqlOutOfRange`] for a layout the state cannot hold: a sequence field of
    /// more than 61 bits, or times past `i64::MAX` ms; [`SqlError::TooLittleHeadroom`] for
    /// a layout that leaves a [`headroom`](Self::headroom) below
    /// [`PgScript::MIN_HEADROOM`] (a sequence field of a few bits with a timestamp of
    /// nearly all the others).
    pub fn new(layout: Layout, node: u64) -> Result<PgScript, SqlError> {
        const MAX_SEQUENCE_BITS: u32 = 61;
        if node > layout.max_node() {
            return Err(SqlError::NodeOutOfRange {
                node,
                max: layout.max_node(),
            });
        }
        if layout.sequence_bits() > MAX_SEQUENCE_BITS {
            return Err(SqlError::SqlOutOfRange {
                what: "sequence width (bits)",
                value: u64::from(layout.sequence_bits()),
                max: u64::from(MAX_SEQUENCE_BITS),
            });
        }
        // Give the counter every bit the ticks whose IDs fit a bigint leave free, but at
        // least one more than the sequence field.
        let usable = layout.last_i64_tick();
        let tick_bits = u64::BITS - usable.leading_zeros();
        let counter_bits = (63 - tick_bits).max(layout.sequence_bits() + 1);
        let last_tick = usable.min((1 << (63 - counter_bits)) - 1);
        let end_ms = u128::from(layout.epoch_ms()) + u128::from(last_tick + 1) * u128::from(layout.tick_ms());
        if end_ms > i64::MAX as u128 {
            return Err(SqlError::SqlOutOfRange {
                what: "end of the layout's span (ms)",
                value: u64::try_from(end_ms).unwrap_or(u64::MAX),
                max: i64::MAX as u64,
            });
        }
        let script = PgScript {
            layout,
            node,
            prefix: PgScript::DEFAULT_PREFIX.to_owned(),
            max_wait: PgScript::DEFAULT_MAX_WAIT,
            counter_bits,
            last_tick,
            adopt: Vec::new(),
        };
        if script.headroom() < PgScript::MIN_HEADROOM {
            return Err(SqlError::TooLittleHeadroom {
                layout,
                headroom: script.headroom(),
                min: PgScript::MIN_HEADROOM,
            });
        }
        Ok(script)
    }

    /// Names every object `{prefix}_state`, `{prefix}_next_id` and so on.
    ///
    /// # Errors
    ///
    /// [`SqlError::InvalidSqlPrefix`] unless the prefix is 1 to 40 characters of `a-z`,
    /// `0-9` and `_`, starting with a letter or `_` (a name that needs no quoting).
    pub fn prefix(mut self, prefix: &str) -> Result<PgScript, SqlError> {
        let valid = !prefix.is_empty()
            && prefix.len() <= PgScript::MAX_PREFIX_LEN
            && !prefix.starts_with(|c: char| c.is_ascii_digit())
            && prefix
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !valid {
            return Err(SqlError::InvalidSqlPrefix {
                prefix: prefix.to_owned(),
            });
        }
        prefix.clone_into(&mut self.prefix);
        Ok(self)
    }

    /// Adds to the script what switches `column` (`TABLE.COLUMN` or
    /// `SCHEMA.TABLE.COLUMN`), a `bigint` key filled by a `bigserial` sequence or an
    /// identity, over to `next_id()`: in one statement (one transaction), under an `ACCESS
    /// EXCLUSIVE` lock on the table, it checks the column and its values, moves the
    /// column's default to `next_id()` and drops the identity (with its sequence) or the
    /// sequence's ownership (the sequence stays). A column whose default is already
    /// `next_id()` is left as it is. Refused, with an error naming the column and what to
    /// do: a column that is not `bigint`, a foreign key of another type that references it,
    /// a value at or above the first ID of the tick that `next_id()` mints at (the smallest
    /// ID any node mints from then on), and a transaction that is not `READ COMMITTED` (its
    /// snapshot could miss rows inserted before the lock). See the
    /// [module docs](self#adopting-a-column).
    ///
    /// # Errors
    ///
    /// [`SqlError::InvalidAdoptColumn`] unless `column` is two or three names joined by
    /// `.`, each 1 to 63 characters of `a-z`, `0-9` and `_`, starting with a letter or `_`
    /// (names that need no quoting).
    pub fn adopt(mut self, column: &str) -> Result<PgScript, SqlError> {
        let valid_name = |name: &str| {
            !name.is_empty()
                && name.len() <= PgScript::MAX_NAME_LEN
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        };
        let names: Vec<&str> = column.split('.').collect();
        if !(2..=3).contains(&names.len()) || !names.iter().all(|name| valid_name(name)) {
            return Err(SqlError::InvalidAdoptColumn {
                column: column.to_owned(),
            });
        }
        let (table, column) = column.rsplit_once('.').unwrap_or_default();
        self.adopt.push(AdoptColumn {
            table: table.to_owned(),
            column: column.to_owned(),
        });
        Ok(self)
    }

    /// The longest `next_id()` waits for a spent tick (a clock that moved back while the
    /// state's tick is spent) before it raises an error instead.
    ///
    /// # Errors
    ///
    /// [`SqlError::SqlOutOfRange`] above [`PgScript::MAX_WAIT`] or for a wait that is not a
    /// whole number of milliseconds.
    pub fn max_wait(mut self, wait: Duration) -> Result<PgScript, SqlError> {
        if wait > PgScript::MAX_WAIT || !wait.subsec_nanos().is_multiple_of(1_000_000) {
            return Err(SqlError::SqlOutOfRange {
                what: "max wait (ms)",
                value: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                max: u64::try_from(PgScript::MAX_WAIT.as_millis()).unwrap_or(u64::MAX),
            });
        }
        self.max_wait = wait;
        Ok(self)
    }

    /// How far ahead of the server's clock `next_id_at(unix_ms)` mints: half the
    /// [`max_wait`](Self::max_wait) (in whole ms), and at most [`PgScript::MAX_AHEAD`]. A
    /// time further ahead is an error naming it and this bound. See the
    /// [module docs](self#times-ahead-of-the-clock).
    ///
    /// # Examples
    ///
    /// ```
    /// use atomflake::Layout;
    /// use atomflake_postgres::sql::PgScript;
    /// use std::time::Duration;
    ///
    /// let script = PgScript::new(Layout::TWITTER, 7)?;
    /// assert_eq!(script.max_ahead(), Duration::from_secs(5));
    /// assert_eq!(script.max_wait(Duration::from_secs(2))?.max_ahead(), Duration::from_secs(1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn max_ahead(&self) -> Duration {
        let half_ms = u64::try_from(self.max_wait.as_millis() / 2).unwrap_or(u64::MAX);
        Duration::from_millis(half_ms).min(PgScript::MAX_AHEAD)
    }

    /// `k`: how many low bits of the state's slot count within a tick.
    pub const fn counter_bits(&self) -> u32 {
        self.counter_bits
    }

    /// How many values past the sequence field a tick's counter has room for: one per
    /// session of the server, so the server may have at most this many (see the
    /// [module docs](self)). 4,190,208 for Twitter, 65,536 for Mastodon, at least
    /// [`PgScript::MIN_HEADROOM`].
    pub const fn headroom(&self) -> u64 {
        (1 << self.counter_bits) - self.layout.ids_per_tick()
    }

    /// The first Unix ms the script cannot mint for: the layout's end, the time its IDs
    /// pass `i64::MAX` ([`Layout::i64_end_unix_ms`]), or the end of what the state holds,
    /// whichever comes first. Past it, `next_id()` raises an error naming the time.
    pub const fn end_unix_ms(&self) -> u64 {
        self.layout.epoch_ms() + (self.last_tick + 1) * self.layout.tick_ms()
    }

    /// The text stored as the state sequence's comment: the layout the state belongs to.
    /// The script refuses to run over a state made for another layout.
    fn fingerprint(&self) -> String {
        let layout = self.layout;
        format!(
            "atomflake state: timestamp {} bits, node {} bits, sequence {} bits, {}, epoch {} ms, tick {} ms, counter {} bits",
            layout.timestamp_bits(),
            layout.node_bits(),
            layout.sequence_bits(),
            match layout.order() {
                FieldOrder::NodeSequence => "time|node|sequence",
                FieldOrder::SequenceNode => "time|sequence|node",
            },
            layout.epoch_ms(),
            layout.tick_ms(),
            self.counter_bits,
        )
    }
}

impl PgScript {
    /// The statement that switches `target` over to `next_id()` (see [`PgScript::adopt`]):
    /// [`ADOPTION`](templates::ADOPTION) around [`ADOPT`](templates::ADOPT).
    fn adoption(&self, target: &AdoptColumn) -> String {
        let p = self.prefix.as_str();
        let layout = self.layout;
        let ts_shift = layout.timestamp_shift();
        let (epoch, tick_ms) = (layout.epoch_ms().to_string(), layout.tick_ms().to_string());
        let AdoptColumn { table, column } = target;
        // The UTC time an id decodes to in this layout, in ms when past what a timestamp
        // holds.
        let time_of = |id: &str| {
            filled(
                templates::SCRIPT_DECODED_TIME,
                &[
                    ("ticks", &unshifted(id, ts_shift)),
                    ("tick_ms", &tick_ms),
                    ("epoch", &epoch),
                ],
            )
        };
        let names = [("table", table.as_str()), ("column", column.as_str()), ("p", p)];
        let body = filled(
            templates::ADOPT,
            &[
                ("variables", &filled(templates::SCRIPT_ADOPT_VARIABLES, &names)),
                ("checks", &filled(templates::SCRIPT_ADOPT_CHECKS, &names[..1])),
                ("mint_call", &format!("{p}_next_id()")),
                (
                    "first_of_tick",
                    &shifted(&unshifted("minted", ts_shift), ts_shift),
                ),
                ("newest_time", &time_of("newest")),
                ("first_time", &time_of("first_id")),
            ],
        );
        // A blank line before and after each.
        format!(
            "\n{}\n",
            filled(
                templates::ADOPTION,
                &[names[0], names[1], names[2], ("body", &body)]
            )
        )
    }
}

impl PgScript {
    /// The SQL that moves a database from this script (its prefix, in the current schema)
    /// to the extension `atomflake` (`extension/`), in one transaction that changes nothing
    /// when any step is refused:
    ///
    /// 1. checks that the server has the extension's library preloaded with this script's
    ///    layout (`atomflake.layout`) and that the current schema holds this script's
    ///    state, of this layout;
    /// 2. moves the script's functions and state to the schema `PREFIX_retired` and reads
    ///    the script's mark: the end of the tick of its state's last slot, past every ID
    ///    the script minted, also ahead of the clock;
    /// 3. creates the extension in the current schema and raises its mark to the script's
    ///    (`atomflake_raise_mark`), so every node's IDs start past the script's;
    /// 4. switches every column whose default calls the script's `next_id()` over to the
    ///    extension's with `atomflake_adopt` (each checked under its lock, as
    ///    [`adopt`](Self::adopt) does);
    /// 5. drops the retired functions, the state and the schema, without `CASCADE`: an
    ///    object of the database's own that uses one of them (a view that decodes IDs)
    ///    stops the move, naming it.
    ///
    /// Run it as a role that may create the extension (a superuser), with
    /// `psql -v ON_ERROR_STOP=1`. The extension mints for the server's `atomflake.node`,
    /// which need not be the script's node.
    ///
    /// # Errors
    ///
    /// [`SqlError::NoExtensionPreset`] when the script's layout is none of the presets the
    /// extension mints ([`Layout::PRESETS`]).
    pub fn to_extension(&self) -> Result<String, SqlError> {
        let Some((preset, _)) = Layout::PRESETS.iter().find(|(_, layout)| *layout == self.layout) else {
            return Err(SqlError::NoExtensionPreset { layout: self.layout });
        };
        let p = &self.prefix;
        let k = self.counter_bits;
        let (epoch, tick_ms) = (self.layout.epoch_ms(), self.layout.tick_ms());
        let fingerprint = self.fingerprint();
        let functions = [
            "advance(bigint, bigint, boolean)",
            "next_id()",
            "next_id_at(bigint)",
            "check(bigint)",
            "unix_ms(bigint)",
            "node(bigint)",
            "sequence(bigint)",
            "time(bigint)",
            "first_id_at(timestamptz)",
            "last_id_at(timestamptz)",
            "to_uuid(bigint)",
            "from_uuid(uuid)",
        ]
        .map(|function| format!("'{p}_{function}'"));
        // Dropped in the reverse order: a function whose body is SQL depends on those it
        // calls, made before it.
        let dropped = functions.iter().rev().cloned().collect::<Vec<_>>().join(", ");
        let functions = functions.join(", ");
        let (k, epoch, tick_ms) = (k.to_string(), epoch.to_string(), tick_ms.to_string());
        let mut sql = filled(
            templates::TO_EXTENSION,
            &[
                ("p", p),
                ("preset", preset),
                ("fingerprint", &fingerprint),
                ("k", &k),
                ("tick_ms", &tick_ms),
                ("epoch", &epoch),
                ("functions", &functions),
                ("dropped", &dropped),
            ],
        );
        sql.push('\n');
        Ok(sql)
    }
}

/// `template` filled with `values` ([`atomflake_sql::fill`]).
///
/// # Panics
///
/// When the template and its values are out of step: a placeholder without a value, or a
/// value without a placeholder. The unit tests write every template.
fn filled(template: &str, values: &[(&str, &str)]) -> String {
    atomflake_sql::fill(template, values).unwrap_or_else(|error| panic!("the script's SQL: {error}"))
}

/// `value << shift` in SQL, or `value` alone for a shift of 0.
fn shifted(value: &str, shift: u32) -> String {
    if shift == 0 {
        value.to_owned()
    } else {
        format!("({value} << {shift})")
    }
}

/// `value >> shift` in SQL, or `value` alone for a shift of 0.
fn unshifted(value: &str, shift: u32) -> String {
    if shift == 0 {
        value.to_owned()
    } else {
        format!("({value} >> {shift})")
    }
}

/// The server's wall clock in Unix ms, exact (numeric arithmetic) and fresh on every read
/// (`clock_timestamp()`, not the transaction's `now()`).
const CLOCK: &str = "floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

/// The advisory lock key of the jump: "atom" in the high half, the sequence's OID in the
/// low half, so each installed state has its own lock.
const LOCK_CLASS: u32 = u32::from_be_bytes(*b"atom");

impl fmt::Display for PgScript {
    /// [`SCRIPT`](templates::SCRIPT) filled with the layout's numbers and the expressions
    /// computed from them.
    #[expect(
        clippy::too_many_lines,
        reason = "the value of each of the script's placeholders, listed once"
    )]
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let layout = self.layout;
        let p = self.prefix.as_str();
        let k = self.counter_bits;
        let (epoch, tick_ms) = (layout.epoch_ms(), layout.tick_ms());
        let ts_shift = layout.timestamp_shift();
        let counter_mask = (1_u64 << k) - 1;
        let tick_of = |ms: &str| {
            if tick_ms == 1 {
                format!("({ms} - {epoch})")
            } else {
                format!("(({ms} - {epoch}) / {tick_ms})")
            }
        };
        let id = format!(
            "({} | {} | {})",
            shifted(&unshifted("slot", k), ts_shift),
            self.node << layout.node_shift(),
            shifted(&format!("(slot & {counter_mask})"), layout.sequence_shift()),
        );
        let decoded = |shift: u32| unshifted(&format!("{p}_check(id)"), shift);
        let number = |value: u64| value.to_string();
        let headroom = number(self.headroom());
        let max_ahead_ms = self.max_ahead().as_millis().to_string();
        let (epoch_text, tick_ms_text) = (number(epoch), number(tick_ms));
        let (now_tick, next_tick) = (tick_of("now_ms"), unshifted("next_free", k));
        let (counter_mask, per_tick) = (number(counter_mask), number(layout.ids_per_tick()));
        let mint = |now: &str, may_wait: &str, guard: &str| {
            filled(
                templates::MINT,
                &[
                    ("guard", guard),
                    ("now", now),
                    ("epoch", &epoch_text),
                    ("next_tick", &next_tick),
                    ("now_tick", &now_tick),
                    ("counter_mask", &counter_mask),
                    ("per_tick", &per_tick),
                    ("id", &id),
                    ("may_wait", may_wait),
                ],
            )
        };
        // A time ahead of the clock moves the state that next_id() continues: at most
        // max_ahead_ms (see the module docs).
        let guard = filled(
            templates::MINT_AT_GUARD,
            &[("clock", CLOCK), ("max_ahead_ms", &max_ahead_ms), ("p", p)],
        );
        let adoptions: String = self.adopt.iter().map(|target| self.adoption(target)).collect();
        let script = filled(
            templates::SCRIPT,
            &[
                ("version", env!("CARGO_PKG_VERSION")),
                ("ts_bits", &layout.timestamp_bits().to_string()),
                ("node_bits", &layout.node_bits().to_string()),
                ("seq_bits", &layout.sequence_bits().to_string()),
                (
                    "order",
                    match layout.order() {
                        FieldOrder::NodeSequence => "time | node | sequence",
                        FieldOrder::SequenceNode => "time | sequence | node",
                    },
                ),
                ("tick_ms", &tick_ms_text),
                ("epoch", &epoch_text),
                ("node", &number(self.node)),
                ("p", p),
                ("end_ms", &number(self.end_unix_ms())),
                ("k", &k.to_string()),
                ("per_tick", &per_tick),
                ("max_wait_ms", &self.max_wait.as_millis().to_string()),
                ("headroom", &headroom),
                ("max_ahead_ms", &max_ahead_ms),
                (
                    "room_check",
                    &filled(
                        templates::ROOM_CHECK,
                        &[("headroom", &headroom), ("p", p), ("layout", &layout.to_string())],
                    ),
                ),
                ("fingerprint", &self.fingerprint()),
                ("now_tick", &now_tick),
                ("last_tick", &number(self.last_tick)),
                ("next_tick", &next_tick),
                ("clock", CLOCK),
                ("lock_class", &LOCK_CLASS.to_string()),
                ("mint_now", &mint(CLOCK, "true", "")),
                ("mint_at", &mint("unix_ms", "false", &guard)),
                ("max_id", &number(layout.max_id().min(i64::MAX as u64))),
                (
                    "unix_ms_of_id",
                    &format!("{} * {tick_ms} + {epoch}", decoded(ts_shift)),
                ),
                (
                    "node_of_id",
                    &format!("{} & {}", decoded(layout.node_shift()), layout.max_node()),
                ),
                (
                    "sequence_of_id",
                    &format!("{} & {}", decoded(layout.sequence_shift()), layout.max_sequence()),
                ),
                ("i64_end_ms", &number(layout.i64_end_unix_ms())),
                ("first_of_ms", &shifted(&tick_of("ms"), ts_shift)),
                ("below_ts", &number((1_u64 << ts_shift) - 1)),
                ("uuid_fingerprint", &number(layout.uuid_fingerprint().into())),
                (
                    "uuid_version_and_fingerprint",
                    &number(7 << 12 | u64::from(layout.uuid_fingerprint()) << 2),
                ),
                // An ID at or past 2^63: past the layout, or (all 64 bits) past a bigint.
                (
                    "uuid_past_bigint",
                    &if layout.max_id() > i64::MAX as u64 {
                        format!(
                            "'uuid % holds id %, out of range for bigint: allowed 0..={}'",
                            i64::MAX
                        )
                    } else {
                        format!(
                            "'uuid % is not an id''s: id % is out of range: the layout allows 0..={}'",
                            layout.max_id()
                        )
                    },
                ),
                (
                    "uuid_past_bigint_code",
                    if layout.max_id() > i64::MAX as u64 {
                        "'22003'"
                    } else {
                        "'22023'"
                    },
                ),
                ("adoptions", &adoptions),
            ],
        );
        f.write_str(&script)?;
        f.write_str("\n")
    }
}

/// A layout or setting that in-database minting ([`PgScript`])
/// cannot hold. Permanent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SqlError {
    /// A node that does not fit the layout's node field.
    #[error("{}", RangeError::FieldOutOfRange { field: Field::Node, value: *node, max: *max })]
    NodeOutOfRange {
        /// The node given.
        node: u64,
        /// The largest node the layout holds.
        max: u64,
    },
    /// A layout or setting out of the script's range.
    #[error("{what} {value} is out of range for in-database minting: allowed 0..={max}")]
    SqlOutOfRange {
        /// What is out of range, with its unit.
        what: &'static str,
        /// The value given.
        value: u64,
        /// The largest value allowed.
        max: u64,
    },
    /// A prefix for the script's object names that is not 1 to 40 characters of `a-z`,
    /// `0-9` and `_` starting with a letter or `_`.
    #[error(
        "sql prefix {prefix:?} is not allowed: a prefix is 1..={} characters of a-z, 0-9 and _, starting with a \
         letter or _",
        PgScript::MAX_PREFIX_LEN
    )]
    InvalidSqlPrefix {
        /// The prefix given.
        prefix: String,
    },
    /// A layout whose state has room for fewer values past the sequence field than a
    /// server with PostgreSQL's default settings has sessions (see
    /// [`PgScript::headroom`](crate::sql::PgScript::headroom)).
    #[error(
        "layout {layout} leaves in-database minting a headroom of {headroom} sessions: allowed {min} and more, the \
         sessions of a server with PostgreSQL's default settings"
    )]
    TooLittleHeadroom {
        /// The layout given.
        layout: Layout,
        /// Its headroom.
        headroom: u64,
        /// The least headroom allowed, [`PgScript::MIN_HEADROOM`](crate::sql::PgScript::MIN_HEADROOM).
        min: u64,
    },
    /// A layout the extension does not mint (it mints the presets alone, by name), given
    /// to [`PgScript::to_extension`](crate::sql::PgScript::to_extension).
    #[error(
        "layout {layout} is none of the extension's presets ({}): the extension cannot take over this script's IDs",
        Layout::PRESETS.map(|(name, _)| name).join(", ")
    )]
    NoExtensionPreset {
        /// The script's layout.
        layout: Layout,
    },
    /// A column to adopt ([`PgScript::adopt`](crate::sql::PgScript::adopt)) that is not
    /// `TABLE.COLUMN` or `SCHEMA.TABLE.COLUMN` of names that need no quoting.
    #[error(
        "column {column:?} cannot be adopted: give TABLE.COLUMN or SCHEMA.TABLE.COLUMN, each name 1..={} characters \
         of a-z, 0-9 and _, starting with a letter or _",
        PgScript::MAX_NAME_LEN
    )]
    InvalidAdoptColumn {
        /// The column given.
        column: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The SHA-256 of each preset's script as the hand-written SQL produced it before the
    /// templates held it, the version set apart: the default script; one with another
    /// prefix, wait and two adopted columns; the move to the extension. A script that
    /// differs is written to a temporary file whose path the failure names, to diff.
    #[test]
    fn every_presets_script_is_the_text_written_before_byte_for_byte() {
        use sha2::{Digest, Sha256};
        let expected = [
            (
                "twitter",
                [
                    "d5f89aca2a6cefe5ce04df09cdb6be333ee8cf13654cffc1e7da39fe4615a902",
                    "66799616cfabaec541a0d2efa990b47958757e6bab8b1d0b895c197ded7cbdf1",
                    "1a28d457abd80c80d52cd356718ea94eb635cec7aa396a35f430324cc62cd9e3",
                ],
            ),
            (
                "discord",
                [
                    "09493e7313707b66ae92e92aa4a2d74a34fe77916f73b7e38ef20db709123681",
                    "2dead1b2c0da724c181368f132d0f336bb983b3446fce472bd1c6ac3e62e6185",
                    "47563970055cd58cef95e7a33570cebb43f39a01bd7e4ba323a32ab995e55d61",
                ],
            ),
            (
                "instagram",
                [
                    "e656df1831b46cacd2d4094b29f578fa67b94d69b1929ff7fb3a425c32a485b6",
                    "429a7f0f2701564517610246c2385c10e9286bc16d10fbb67e37c0a352703694",
                    "a4a3c300461b008061fdc1d72b45f06713a483d3dc2feecf281be17327a6b379",
                ],
            ),
            (
                "sonyflake",
                [
                    "491f7601119b3393b0896be5c760fe402bc867638d81e4605499614b0e758b4f",
                    "86df131ce039172a825c613cdd7aa82b74a910c8693e1d1b8bdcab39ea0cde90",
                    "8c116cc9e3f0843fb421e59a8e08ff8027b8c48a5663d297709dfd3ccdacb8a5",
                ],
            ),
            (
                "mastodon",
                [
                    "39880e6c15fef36e31d174aef1252487a2763a6ab076bf71bfb5ee92b2a3a889",
                    "51a8b9a3f8a8a05fb7080978ce8a736c031b4945d54875cc3aac2e8379a2926e",
                    "9180d17cca5c6afee7a7776585edd676cfdd602ad65e2001754e1b5f8e35055a",
                ],
            ),
            (
                "javascript",
                [
                    "689bc4c7272e61d1ed15414daf3b8f279661ac441f50ddb224b6516a1036a0bc",
                    "373519bd7079356dde72f90454a2f84fb427cbefb5d4fff55c4f3bd45005dcf4",
                    "ad4a7d3c0c49c19cdad16504eea0c1963ff5eba2227d35da061edd1712b88f46",
                ],
            ),
        ];
        assert_eq!(expected.len(), Layout::PRESETS.len());
        let check = |name: &str, what: &str, script: String, digest: &str| {
            let script = script.replacen(
                &format!("-- atomflake {}: ", env!("CARGO_PKG_VERSION")),
                "-- atomflake VERSION: ",
                1,
            );
            let found = format!("{:x}", Sha256::digest(script.as_bytes()));
            if found != digest {
                let path =
                    std::env::temp_dir().join(format!("atomflake-{name}-{}.sql", what.replace(' ', "-")));
                std::fs::write(&path, &script).unwrap();
                panic!(
                    "{name}: {what} differs from the text written before (SHA-256 {found}, \
                     expected {digest}): it is in {}",
                    path.display()
                );
            }
        };
        for ((name, layout), (name_again, [plain, adopting, moving])) in
            Layout::PRESETS.into_iter().zip(expected)
        {
            assert_eq!(name, name_again);
            let node = layout.max_node().min(1);
            let script = PgScript::new(layout, node).unwrap();
            check(name, "the script", script.to_string(), plain);
            let other = PgScript::new(layout, node)
                .unwrap()
                .prefix("idz")
                .unwrap()
                .max_wait(Duration::from_millis(2_500))
                .unwrap()
                .adopt("public.orders.id")
                .unwrap()
                .adopt("t.c")
                .unwrap();
            check(name, "the script with --adopt", other.to_string(), adopting);
            check(
                name,
                "the move to the extension",
                script.to_extension().unwrap(),
                moving,
            );
        }
    }

    #[test]
    fn counter_bits_leave_headroom_for_every_preset() {
        let expected = [
            ("twitter", 22, 4_190_208),
            ("discord", 22, 4_190_208),
            ("instagram", 23, 8_387_584),
            ("sonyflake", 24, 16_776_960),
            ("mastodon", 17, 65_536),
            ("javascript", 25, 33_554_176),
        ];
        assert_eq!(expected.len(), Layout::PRESETS.len());
        for ((name, layout), (want_name, bits, headroom)) in Layout::PRESETS.into_iter().zip(expected) {
            assert_eq!(name, want_name);
            let script = PgScript::new(layout, 0).unwrap();
            assert_eq!(
                (script.counter_bits(), script.headroom()),
                (bits, headroom),
                "{name}"
            );
            // The last tick's last slot still fits the sequence's bigint.
            assert!(script.last_tick < 1 << (63 - bits), "{name}");
        }
    }

    #[test]
    fn the_script_ends_where_bigint_ids_or_the_state_end() {
        for (name, layout) in Layout::PRESETS {
            let script = PgScript::new(layout, 0).unwrap();
            assert!(script.end_unix_ms() <= layout.i64_end_unix_ms(), "{name}");
        }
        // Mastodon's counter takes one bit of tick: its state ends in the year 4199.
        let mastodon = PgScript::new(Layout::MASTODON, 0).unwrap();
        assert_eq!(mastodon.end_unix_ms(), 1 << 46);
        assert_eq!(
            PgScript::new(Layout::INSTAGRAM, 0).unwrap().end_unix_ms(),
            Layout::INSTAGRAM.i64_end_unix_ms()
        );
    }

    #[test]
    fn only_a_presets_script_moves_to_the_extension() {
        for (name, layout) in Layout::PRESETS {
            let moved = PgScript::new(layout, 0).unwrap().to_extension().unwrap();
            assert!(moved.contains(&format!("set atomflake.layout = {name} and restart")));
            assert!(moved.starts_with("-- Moves") && moved.ends_with("COMMIT;\n"));
        }
        let layout = Layout::builder()
            .timestamp_bits(41)
            .node_bits(10)
            .sequence_bits(12)
            .epoch_ms(0)
            .tick_ms(1)
            .build()
            .unwrap();
        let refused = PgScript::new(layout, 0).unwrap().to_extension().unwrap_err();
        assert_eq!(refused, SqlError::NoExtensionPreset { layout });
        assert_eq!(
            refused.to_string(),
            format!(
                "layout {layout} is none of the extension's presets (twitter, discord, \
                 instagram, sonyflake, mastodon, javascript): the extension cannot take over \
                 this script's IDs"
            )
        );
    }

    #[test]
    fn bad_input_is_an_exact_error() {
        assert_eq!(
            PgScript::new(Layout::TWITTER, 1024),
            Err(SqlError::NodeOutOfRange {
                node: 1024,
                max: 1023
            })
        );
        for bad in ["", "7up", "Atom", "a-b", "a b", "ä", &"a".repeat(41)] {
            assert_eq!(
                PgScript::new(Layout::TWITTER, 0).unwrap().prefix(bad),
                Err(SqlError::InvalidSqlPrefix {
                    prefix: bad.to_owned()
                }),
                "{bad:?}"
            );
        }
        assert!(
            PgScript::new(Layout::TWITTER, 0)
                .unwrap()
                .prefix(&"a".repeat(40))
                .is_ok()
        );
        assert!(PgScript::new(Layout::TWITTER, 0).unwrap().prefix("_x9").is_ok());
        let wide = Layout::builder()
            .timestamp_bits(1)
            .node_bits(0)
            .sequence_bits(62)
            .epoch_ms(0)
            .tick_ms(1)
            .build()
            .unwrap();
        assert_eq!(
            PgScript::new(wide, 0).unwrap_err().to_string(),
            "sequence width (bits) 62 is out of range for in-database minting: allowed 0..=61"
        );
        let late = Layout::builder()
            .timestamp_bits(41)
            .node_bits(10)
            .sequence_bits(12)
            .epoch_ms(i64::MAX as u64 - 1000)
            .tick_ms(1)
            .build()
            .unwrap();
        assert!(matches!(
            PgScript::new(late, 0),
            Err(SqlError::SqlOutOfRange {
                what: "end of the layout's span (ms)",
                ..
            })
        ));
        let script = PgScript::new(Layout::TWITTER, 0).unwrap();
        assert_eq!(
            script.clone().max_wait(Duration::from_secs(601)),
            Err(SqlError::SqlOutOfRange {
                what: "max wait (ms)",
                value: 601_000,
                max: 600_000
            })
        );
        assert!(script.clone().max_wait(Duration::from_micros(1500)).is_err());
        // A 56-bit timestamp leaves the counter 7 bits: 2^7 - 2^3 values past a 3-bit
        // sequence field, 2^7 - 1 past a 0-bit one.
        let narrow = |sequence_bits| {
            Layout::builder()
                .timestamp_bits(56)
                .node_bits(0)
                .sequence_bits(sequence_bits)
                .epoch_ms(0)
                .tick_ms(1)
                .build()
                .unwrap()
        };
        let error = PgScript::new(narrow(3), 0).unwrap_err();
        assert_eq!(
            error,
            SqlError::TooLittleHeadroom {
                layout: narrow(3),
                headroom: 120,
                min: 121
            }
        );
        assert_eq!(
            error.to_string(),
            "layout 56/0/3 bits, 1 ms ticks, epoch 0 ms leaves in-database minting a headroom of \
             120 sessions: allowed 121 and more, the sessions of a server with PostgreSQL's \
             default settings"
        );
        assert_eq!(PgScript::new(narrow(0), 0).unwrap().headroom(), 127);
        assert!(script.max_wait(Duration::ZERO).is_ok());
    }

    #[test]
    fn adopt_takes_two_or_three_plain_names() {
        let script = PgScript::new(Layout::TWITTER, 0).unwrap();
        let adopted = script
            .clone()
            .adopt("orders.id")
            .and_then(|script| script.adopt("shop.line_items.id"))
            .unwrap()
            .to_string();
        assert!(adopted.contains("what text := 'orders.id';"));
        assert!(adopted.contains("tbl regclass := to_regclass('shop.line_items');"));
        assert!(adopted.contains("col name := 'id';"));
        assert!(!script.to_string().contains("$adopt$"));
        let long = "a".repeat(64);
        for bad in [
            "id",
            "a.b.c.d",
            ".id",
            "t.",
            "T.id",
            "t.1d",
            "t.i-d",
            "t.id'; drop table t; --",
            &format!("t.{long}"),
        ] {
            assert_eq!(
                script.clone().adopt(bad),
                Err(SqlError::InvalidAdoptColumn {
                    column: bad.to_owned()
                }),
                "{bad:?}"
            );
        }
        assert!(script.clone().adopt(&format!("t.{}", &long[1..])).is_ok());
        assert_eq!(
            script.adopt("T.id").unwrap_err().to_string(),
            "column \"T.id\" cannot be adopted: give TABLE.COLUMN or SCHEMA.TABLE.COLUMN, each \
             name 1..=63 characters of a-z, 0-9 and _, starting with a letter or _"
        );
    }

    #[test]
    fn next_id_at_mints_at_most_half_the_wait_and_5_s_ahead() {
        let script = PgScript::new(Layout::TWITTER, 0).unwrap();
        for (wait_ms, ahead_ms) in [
            (10_000, 5_000),
            (600_000, 5_000),
            (2_000, 1_000),
            (3, 1),
            (1, 0),
            (0, 0),
        ] {
            let script = script.clone().max_wait(Duration::from_millis(wait_ms)).unwrap();
            assert_eq!(script.max_ahead(), Duration::from_millis(ahead_ms), "{wait_ms}");
            assert!(
                script
                    .to_string()
                    .contains(&format!("IF unix_ms > now_ms + {ahead_ms} THEN")),
                "{wait_ms}"
            );
        }
    }

    #[test]
    fn the_script_names_everything_with_the_prefix() {
        let script = PgScript::new(Layout::SONYFLAKE, 3)
            .unwrap()
            .prefix("sf")
            .unwrap()
            .to_string();
        for object in [
            "SEQUENCE IF NOT EXISTS sf_state",
            "FUNCTION sf_next_id()",
            "FUNCTION sf_next_id_at(unix_ms bigint)",
            "FUNCTION sf_unix_ms(id bigint)",
            "FUNCTION sf_node(id bigint)",
            "FUNCTION sf_sequence(id bigint)",
            "FUNCTION sf_time(id bigint)",
            "FUNCTION sf_first_id_at(at timestamptz)",
            "FUNCTION sf_last_id_at(at timestamptz)",
        ] {
            assert!(script.contains(object), "{object}");
        }
        assert!(!script.contains("atomflake_"));
        // Sonyflake's 10 ms ticks divide; no placeholder is left unreplaced but @state@.
        assert!(script.contains("/ 10)"));
        assert!(!script.contains('{'));
    }
}
