//! Lock-free Snowflake-style 64-bit IDs.
//!
//! ```
//! use atomflake::{Generator, Layout};
//!
//! let generator = Generator::new(Layout::TWITTER, 7)?;   // node 7 of 0..=1023
//! let id = generator.next_id();                            // waits only if this ms is spent
//! let parts = Layout::TWITTER.decode(id);
//! assert_eq!(parts.node, 7);
//! println!("{id} was minted at {} ms since 1970", parts.unix_ms);
//! # Ok::<(), atomflake::Error>(())
//! ```
//!
//! An ID is a `u64`: ticks since an epoch in the high bits, then a node ID and a per-tick
//! sequence. IDs are unique without coordination (as long as each live generator of a
//! layout has its own node ID), sort by time, decode back to `(time, node, sequence)` and
//! fit a `BIGINT`. [`Layout`] has the Twitter, Discord, Instagram, Sonyflake and Mastodon
//! layouts and builds custom ones.
//!
//! # Design
//!
//! - [`Generator`] keeps one `AtomicU64`, the next free `(tick, sequence)` slot, and
//!   advances it with a compare-and-swap loop. Every minted ID is a won CAS on that word,
//!   so a generator never mints an ID twice and its IDs strictly increase.
//! - The transition from `(state, now)` to the next state is a pure function (`state.rs`)
//!   that tests, loom models and fuzzers drive directly; only the generator reads a clock.
//! - [`MonotonicClock`], the default clock, is quanta's TSC clock disciplined to the wall
//!   clock by a background thread: it jumps forward to a wall clock that is ahead and slews
//!   towards one that is behind, so it never moves back. A mint reads it with one load of
//!   the time that thread stores at the start of each millisecond; a generator whose tick
//!   is spent reads the TSC itself, so it never waits for the thread ([`PreciseClock`]
//!   reads the TSC on every mint). Any clock may still move
//!   back ([`ManualClock`], a custom [`Clock`]): the generator then continues the last
//!   tick's sequence, and IDs still never repeat or decrease.
//! - All atomics come from one shim (`sync.rs`) that switches to loom under `--cfg loom`,
//!   so the loom models check this very code.
//!
//! # Choosing a generator
//!
//! | type | for | state |
//! |---|---|---|
//! | [`Generator`] | one node shared by `&`/`Arc` across threads | one `AtomicU64`, CAS loop |
//! | [`ShardedGenerator`] | many threads of one process, a node per shard, no contention | one `AtomicU64` per node, a shard per thread |
//! | [`LocalGenerator`] | one thread (`thread_local!`, a per-core worker) | a `Cell<u64>`, no atomics |
//!
//! All three mint through the same code: `next_id`, `try_next_id`, `next_ids(n)` (a tick's
//! block per CAS, as an iterator), `fill(&mut [Id])`, and with the `tokio` feature
//! `next_id_async`, `next_ids_async` and `fill_async`. [`Builder`] sets the options they
//! share: the clock, borrow-ahead, and how to [`Wait`] for a spent tick (by default: sleep
//! until shortly before the next tick, then spin).
//!
//! IDs can also be minted inside PostgreSQL, from the same [`Layout`]: [`sql::PgScript`]
//! (and `atomflake sql`) writes the SQL that creates `atomflake_next_id()`, a column default
//! that keeps the same rules as the state word here, and its decoders.
//!
//! # Guarantees
//!
//! Within a process:
//!
//! - From one generator: IDs are unique and strictly increasing, under any number of
//!   threads and any clock behaviour (including a clock that moves back).
//! - Timestamps: an ID's time is the clock's tick when it was minted, or (after the clock
//!   moved back) the last tick already used, never later than the clock. With
//!   [`Builder::borrow_ahead`], up to the configured lead later than the clock. With the
//!   default clock, "the clock's tick" is the millisecond its thread last stored: usually
//!   the current one, a tick or a few behind while the thread waits to be scheduled
//!   (`benches/README.md` has the measured lag); [`PreciseClock`] is never behind.
//!
//! Across clock steps and drift, with the default [`MonotonicClock`]:
//!
//! - The clock never moves back, and minting never reads the wall clock: a background
//!   thread compares the two every 10 ms and publishes a new anchor lock-free. Wall clock
//!   ahead: the clock jumps to it. Behind: it slews, 1% slower than real time (starting
//!   within a second), until within 100 µs. Each published piece of the clock reads no
//!   earlier than the one before at every instant, however late the thread publishes it;
//!   a thread that does not run for over half a second lets the clock run 1% slow, never
//!   back, until its next check. So drift, a wall clock stepped after start-up and a suspend are corrected
//!   while the process runs, and after convergence the clock stays within 2 ms of the wall
//!   clock. [`MonotonicClock::on_step`] reports steps instead of slewing them silently.
//!
//! Across restarts:
//!
//! - Without a high-water file, only as long as the restarted process's clock is past the
//!   previous run's last ID: a clock that ran ahead, or borrow-ahead, followed by a restart
//!   with the same node ID can repeat IDs.
//! - With [`Builder::high_water_file`], never: minted time is persisted (durably, before
//!   any ID passes the mark, at most once a second) and a restarted generator starts past
//!   it, waiting up to [`Builder::MAX_RESTART_WAIT`] for its clock and refusing to start
//!   further behind. Damaged files and a second live generator on a file are errors.
//!
//! Across a `fork()`:
//!
//! - A child process has a copy of every generator and none of its threads. A generator
//!   checks the process at the first mint of each tick, before any wait and before
//!   `try_next_id` reports a refusal, so a child is refused with [`MintError::Forked`]
//!   (`next_id` panics) instead of minting its parent's IDs or waiting for threads it does
//!   not have. Not detected: the rest of the tick the generator had reached before the
//!   fork, and the tick in which the fork happened while it lasts: at most about one tick's
//!   sequence per node (details in `fork.rs`).
//!
//! What the user provides: a distinct node ID for each live generator of a layout (and a
//! high-water file of its own), and a wall clock that is right eventually. [`node`] reads
//! a node ID from an environment variable or a Kubernetes StatefulSet pod's ordinal, and
//! says how far each of those is unique.
//!
//! # Feature flags
//!
//! - `tokio`: async minting (`next_id_async` and friends) that waits for a spent tick
//!   without blocking the runtime thread.
//! - `serde`: `Serialize`/`Deserialize` for [`Id`], a decimal string by default (JavaScript
//!   rounds numbers above 2^53); `atomflake::serde::{integer, base32}` for
//!   `#[serde(with = ...)]`.
//! - `chrono`, `time`: an ID's time as `chrono::DateTime<Utc>` (`Layout::chrono_utc`) or
//!   `time::OffsetDateTime` (`Layout::offset_date_time`).
//!
//! - `postgres`: [`Id`] as a `BIGINT` for the `postgres` and `tokio-postgres` clients
//!   (`ToSql`/`FromSql` from `postgres-types`).
//! - `sqlx` (the same as `sqlx-postgres`): [`Id`] as a PostgreSQL `BIGINT` in sqlx
//!   (`Type`/`Encode`/`Decode`), and `Vec<Id>` as `BIGINT[]`.
//! - `sqlx-mysql`: [`Id`] as a MySQL `BIGINT UNSIGNED` in sqlx (signed `BIGINT` columns
//!   read too).
//! - `sqlx-sqlite`: [`Id`] as a SQLite `INTEGER` in sqlx. It turns on `sqlx/sqlite`, which
//!   compiles the bundled SQLite C library.
//! - `diesel`: [`Id`] as `BigInt` on diesel's `Pg` backend, usable as a field of
//!   `Queryable`/`Insertable` structs; needs no libpq to build.
//! - `diesel-mysql`: [`Id`] as `Unsigned<BigInt>` and `BigInt` on diesel's `Mysql` backend;
//!   needs no libmysqlclient to build.
//!
//! - `lease-postgres`: node-ID leases kept in PostgreSQL ([`lease`]): a fleet of processes
//!   shares one ID space, each on its own node, fenced, with the node's high-water mark in
//!   the lease row. Connects with the `postgres` client crate.
//!
//! The database features never wrap: an ID above `i64::MAX` is an error to write to a
//! signed `BIGINT` and a negative value an error to read (see [`Id`], `# Databases`).
//!
//! All are off by default; without them the crate depends on `quanta` and
//! `crossbeam-utils` only.
//!
//! # Caveats
//!
//! - [`Generator::next_id`] panics when the clock is outside the layout's span (before the
//!   epoch, or after the span ran out), or when a high-water file cannot be written and
//!   the clock has passed its mark, or when a lease has expired and its next renewal fails
//!   too, or is lost, or when the thread that stores the mark has panicked and the clock
//!   has passed the mark, or in a child of a fork; [`Generator::try_next_id`] returns
//!   those errors.
//! - One generator mints at most [`Layout::ids_per_tick`] IDs per tick (4,096 per ms for
//!   Twitter): 4.096 M IDs/s, about 244 ns per ID at saturation, however fast a single
//!   mint is.
//! - A generator with a [high-water file](Builder::high_water_file) has a thread of its
//!   own (`atomflake-mark`) that writes the file, so that minting threads never do.
//!   Dropping the generator waits for a write in progress for at most 200 ms, then leaves
//!   the thread to finish it (the file stays locked until it has).
//! - A generator checks the process it mints in once per tick (see Guarantees): one
//!   `getpid` system call (about 170 ns on the project's VM) at the first mint of a tick,
//!   skipped while the default clock's thread runs in that tick. `benches/README.md` has
//!   the cost per mint.
//! - The first [`MonotonicClock`] in a process calibrates quanta, which can take up to
//!   ~200 ms, and starts the discipline thread (`atomflake-discipline`, awake for a few µs
//!   every millisecond: about 2.5% of a core on a 2-vCPU VM); later ones are free.
//!
//! # Performance
//!
//! Below the sequence cap a mint is one clock read, one uncontended CAS and a few shifts;
//! [`Generator::next_ids`] serves a whole tick's block with one CAS. At the cap, one
//! generator mints the layout's [`Layout::ids_per_tick`] per tick, and [`Wait::Sleep`] (the
//! default) spends a fraction of a core waiting instead of a whole one. The figures,
//! measured against the peer crates in one run, with the commands, the machine and the
//! caveats, are in `benches/README.md` in the repository, the one place that keeps them.
//!
//! # Atomic orderings
//!
//! - A generator's state word is only ever `Relaxed`: it publishes no other memory, and
//!   uniqueness rests only on the word's modification order (see [`Generator`] and the
//!   CAS loop in `mint.rs`). [`ManualClock`]'s value likewise orders nothing else.
//! - The default clock's current segment is published by the discipline thread through a
//!   seqlock: the version is stored with `Release` and loaded with `Acquire`, with a
//!   `Release` fence before the writer's field stores and an `Acquire` fence after the
//!   reader's field loads (`discipline.rs`, `Timeline`).
//! - The coarse clock's time, a high-water mark's limits, the ticks checked for a fork and
//!   the one limit a mint compares (the lower of those) are `Relaxed` hints: a stale value
//!   makes a read late or sends a mint down the slow path, never wrong; the mark's keeper
//!   and the threads waiting for it meet under a mutex (`mark.rs`, `mint.rs`, `fork.rs`).
#![forbid(unsafe_code)]

mod base32;
mod builder;
mod clock;
mod datetime;
#[cfg(any(
    feature = "postgres",
    feature = "sqlx-postgres",
    feature = "sqlx-mysql",
    feature = "sqlx-sqlite",
    feature = "diesel",
    feature = "diesel-mysql"
))]
mod db;
mod discipline;
mod error;
mod fork;
mod generator;
mod high_water;
mod id;
mod ids;
mod layout;
#[cfg(feature = "lease-postgres")]
pub mod lease;
mod local;
mod mark;
mod mint;
pub mod node;
#[cfg(all(feature = "raw", not(loom)))]
pub mod raw;
#[cfg(feature = "serde")]
pub mod serde;
mod sharded;
pub mod sql;
mod state;
mod sync;
mod wait;

pub use base32::Base32;
pub use builder::Builder;
pub use clock::{Clock, CoarseClock, ManualClock, MonotonicClock, PreciseClock};
pub use discipline::ClockStep;
pub use error::{
    BuildError, ClockError, DbCause, Error, Field, HighWaterError, IoCause, LayoutError, LeaseError,
    MintError, NodeSourceError, ParseIdError, RangeError, SqlError,
};
pub use generator::Generator;
pub use id::{Id, Parts};
pub use ids::{Ids, LocalIds};
pub use layout::{FieldOrder, Layout, LayoutBuilder};
pub use local::LocalGenerator;
pub use sharded::ShardedGenerator;
pub use wait::Wait;

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
