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
//! fit a `BIGINT`.
//!
//! # The map
//!
//! | layer | items | module |
//! |---|---|---|
//! | the format | [`Id`], [`Parts`], [`Layout`] (presets, custom layouts), [`Base32`], and their errors | `format/` |
//! | the core | the state word and its pure transition (`state.rs`), the CAS loop (`minter.rs`), [`Generator`], [`ShardedGenerator`], [`LocalGenerator`], [`Builder`], [`Wait`], [`BuildError`], [`MintError`] | `generator/` |
//! | time | [`Clock`], [`MonotonicClock`] (the default, disciplined to the wall clock), [`PreciseClock`], [`ManualClock`] | `clock/` |
//! | the mark | the seam [`mark::MarkStore`] with what a store must promise, the keeper thread and its fence, the high-water file | [`mark`] |
//! | node IDs | from the environment, a Kubernetes StatefulSet ordinal | [`node`] |
//! | integrations | serde, chrono and time, `Id` as a `BIGINT` (postgres-types, sqlx, diesel), behind features; `raw` (feature `raw`): minting over a caller's word | `external/`, `raw.rs` |
//! | the reference | [guarantees](docs::guarantees), [formats](docs::formats), [fleets](docs::fleets) | [`docs`] |
//!
//! Leases on PostgreSQL and the SQL script that mints inside PostgreSQL are the
//! `atomflake-postgres` crate: a lease is a [`mark::MarkStore`], so any generator type goes
//! on it with [`Builder::mark_store`].
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
//! `next_id_async`, `next_ids_async` and `fill_async`.
//!
//! # Design
//!
//! - A generator keeps one `AtomicU64`, the next free slot: the ID itself with the node
//!   field held constant, so that an ID is the slot XOR a per-node key and the next slot is
//!   one add. It advances the word with a compare-and-swap loop. Every minted ID is a won
//!   CAS on that word, so a generator never mints an ID twice and its IDs strictly
//!   increase. Within a tick the common case reads no more than the clock's stored time
//!   and the word's cache line (the window, in `minter.rs`).
//! - The transition from `(state, now)` to the next state is a pure function that tests,
//!   loom models and fuzzers drive directly; only the generator reads a clock.
//! - All atomics come from one shim (`sync.rs`) that switches to loom under `--cfg loom`,
//!   so the loom models check this very code.
//! - What the guarantees rest on, and what breaks them: [`docs::guarantees`].
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
//! - `utoipa`, `schemars`: [`Id`]'s schema in OpenAPI documents (`utoipa::ToSchema`) and
//!   JSON Schemas (`schemars::JsonSchema`): its serde form, a string of 1 to 20 decimal
//!   digits.
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
//! The database features never wrap: an ID above `i64::MAX` is an error to write to a
//! signed `BIGINT` and a negative value an error to read (see [`Id`], `# Databases`).
//!
//! All are off by default; without them the crate depends on `quanta` and
//! `crossbeam-utils` only.
//!
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
//! - A generator with a [mark store](mark) has a thread of its own (`atomflake-mark`)
//!   that stores the mark, so that minting threads never do.
//!   Dropping the generator waits for a write in progress for at most 200 ms, then leaves
//!   the thread to finish it (the file stays locked until it has).
//! - A generator checks the process it mints in once per tick (see Guarantees): one
//!   `getpid` system call (about 170 ns on the project's VM) at the first mint of a tick,
//!   skipped while the default clock's thread runs in that tick. `benches/README.md` has
//!   the cost per mint.
//! - On Unix, the first generator a process builds registers a `pthread_atfork` handler
//!   that closes, in a child, the limits of every generator alive at the fork (see
//!   Guarantees). That module (`generator/atfork.rs`) is the crate's only `unsafe` code: a
//!   C call, and stores through the addresses registered, in a child with one thread.
//!   Each generator keeps its state words and limits in a heap allocation of its own, so
//!   that their addresses do not move with it: one more load per mint.
//! - The first [`MonotonicClock`] in a process calibrates quanta, which can take up to
//!   ~200 ms, and starts the discipline thread (`atomflake-discipline`, awake for a few µs
//!   every millisecond: about 2.5% of a core on a 2-vCPU VM); later ones are free.
//!
//!
//! # Performance
//!
//! Below the sequence cap, within a tick already minted in, a mint is one load of the
//! clock's stored time, one compare, one load and compare of the state, one CAS (a store
//! for [`LocalGenerator`]) and one XOR; a tick's first mint also computes the tick;
//! [`Generator::next_ids`] serves a whole tick's block with one CAS. At the cap, one
//! generator mints the layout's [`Layout::ids_per_tick`] per tick, and [`Wait::Sleep`] (the
//! default) spends a fraction of a core waiting instead of a whole one. The figures,
//! measured against the peer crates in one run, with the commands, the machine and the
//! caveats, are in `benches/README.md` in the repository, the one place that keeps them.
//!
//!
//! # Atomic orderings
//!
//! - A generator's state word is only ever `Relaxed`: it publishes no other memory, and
//!   uniqueness rests only on the word's modification order (see [`Generator`] and the
//!   CAS loop in `minter.rs`). [`ManualClock`]'s value likewise orders nothing else.
//! - The default clock's current segment is published by the discipline thread through a
//!   seqlock: the version is stored with `Release` and loaded with `Acquire`, with a
//!   `Release` fence before the writer's field stores and an `Acquire` fence after the
//!   reader's field loads (`discipline.rs`, `Timeline`).
//! - The default clock's stored time, a high-water mark's limits, the ticks checked for a fork and
//!   the one limit a mint compares (the lower of those) are `Relaxed` hints: a stale value
//!   makes a read late or sends a mint down the slow path, never wrong; the mark's keeper
//!   and the threads waiting for it meet under a mutex (`generator/keeper.rs`, `generator/minter.rs`, `generator/fork.rs`).
//! - A state word's window (the tick its fast path mints in) is opened with `Release`
//!   stores of its end and limit after the opener's CAS and read with `Acquire` loads
//!   before the state, so the state read is past the window's first slot. Like the limits
//!   above, these are the standard atomics under loom too (`generator/minter.rs`,
//!   `AtomicWord`). Uniqueness never rests on them.
//! - The registry of limits a child of a fork closes is filled and emptied with `Release`
//!   and read with `Acquire` (`generator/atfork.rs`): a child sees a slot filled only for
//!   memory built and not yet freed at the fork.
#![deny(unsafe_code)]

mod clock;
pub mod docs;
mod error;
mod external;
mod format;
mod generator;
mod io;
pub mod mark;
pub mod node;
#[cfg(all(feature = "raw", not(loom)))]
pub mod raw;
mod sync;

pub use clock::discipline::ClockStep;
pub use clock::{Clock, ManualClock, MonotonicClock, PreciseClock};
pub use error::Error;
#[cfg(feature = "serde")]
pub use external::serde;
pub use format::{
    Base32, Field, FieldOrder, Id, Layout, LayoutBuilder, LayoutError, ParseIdError, Parts, RangeError,
};
pub use generator::{
    BuildError, Builder, Generator, Ids, LocalGenerator, LocalIds, MintError, Run, RunIter, ShardedGenerator,
    Wait,
};
pub use io::IoCause;

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
