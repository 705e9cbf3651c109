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
//! | layer | items |
//! |---|---|
//! | the format | [`Id`], [`Parts`], [`Layout`] (presets, custom layouts), [`Base32`], and their errors |
//! | the core | [`Generator`], [`ShardedGenerator`], [`LocalGenerator`], [`Builder`], [`Wait`], [`Until`], [`Sleep`], [`BuildError`], [`MintError`]: one state word per node, its pure transition and a CAS loop |
//! | time | [`Clock`], [`MonotonicClock`] (the default, disciplined to the wall clock), [`PreciseClock`], [`ManualClock`], [`ClockStep`] |
//! | the mark | [`mark`]: the seam [`mark::MarkStore`], what a store must promise, the high-water file |
//! | node IDs | [`node`]: from the environment, a Kubernetes StatefulSet ordinal |
//! | integrations | serde, chrono and time, `Id` as a `BIGINT`, behind [features](docs::features); `atomflake::raw` (feature `raw`): minting over a caller's word |
//! | the reference | [guarantees](docs::guarantees), [formats](docs::formats), [fleets](docs::fleets), [design](docs::design), [features](docs::features) |
//!
//! Node-ID leases are crates of their own over this one's public API: `atomflake-lease`
//! holds the lease (a [`mark::MarkStore`], for any generator through
//! [`Builder::mark_store`]), the seam its engines implement and the registry from a lease
//! URL to its engine; `atomflake-postgres`, `atomflake-etcd` and `atomflake-zookeeper` are
//! the engines, each only what talks to its server. Every layer, these crates' and the
//! programs' included: [design](docs::design#layers).
//!
//! # Choosing a generator
//!
//! | type | for | state |
//! |---|---|---|
//! | [`Generator`] | one node shared by `&`/`Arc` across threads | one `AtomicU64`, CAS loop |
//! | [`ShardedGenerator`] | many threads of one process, a node per shard, no contention | one `AtomicU64` per node, each on its own cache line, a shard per thread |
//! | [`LocalGenerator`] | one thread (`thread_local!`, a per-core worker) | a `Cell<u64>`, no atomics |
//!
//! All three mint through the same code: `next_id`, `try_next_id` (never waits), `next_ids(n)`
//! and `fill(&mut [Id])` (a tick's block per CAS), and with the `tokio` feature
//! `next_id_async` and friends. [`Builder`] sets what they share: the clock, borrow-ahead,
//! how to [`Wait`] for a spent tick, and a [mark store](mark) for restarts.
//!
//! # Feature flags
//!
//! All off by default, each additive: [features](docs::features).
//!
//! # Caveats
//!
//! - [`Generator::next_id`] panics where [`Generator::try_next_id`] returns an error (the
//!   clock outside the layout's span, a mark that cannot be stored, a child of a fork):
//!   [guarantees](docs::guarantees). The default clock and a generator with a mark store
//!   each run a thread of their own ([`MonotonicClock`], [`mark`]).
//! - One generator mints at most [`Layout::ids_per_tick`] IDs per tick.
//!
//! # Performance
//!
//! What a mint does and the atomic orderings it rests on: [design](docs::design#what-a-mint-does);
//! the measured figures: `benches/README.md` in the repository, the one place that keeps them.
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
pub use format::*;
#[cfg(feature = "tokio")]
pub use generator::Tokio;
pub use generator::{
    BuildError, Builder, FillError, Generator, Ids, LocalGenerator, LocalIds, MintError, Run, RunIter,
    ShardedGenerator, Sleep, Until, Wait,
};
pub use io::IoCause;

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
