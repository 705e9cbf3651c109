//! [`ShardedGenerator`]: a generator per node, one state word each, a shard per thread.

use crate::builder::Builder;
use crate::clock::{Clock, MonotonicClock};
use crate::error::Error;
use crate::id::Id;
use crate::layout::{Layout, SlotPacker};
use crate::mint::{Ids, Minter};
use crate::sync::{AtomicU64, Ordering};
use core::fmt;
use crossbeam_utils::CachePadded;
use std::cell::Cell;
use std::sync::atomic::AtomicUsize;

/// Minting threads numbered in the order they first mint from any `ShardedGenerator`.
/// A process-wide counter outside any loom model: the number only spreads threads over
/// shards, and any shard is safe for any thread.
static NEXT_THREAD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's number, taken from `NEXT_THREAD` on its first mint.
    static THREAD_NUMBER: Cell<Option<usize>> = const { Cell::new(None) };
}

fn thread_number() -> usize {
    THREAD_NUMBER.with(|number| {
        number.get().unwrap_or_else(|| {
            // Relaxed: a ticket, ordering nothing else.
            let taken = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
            number.set(Some(taken));
            taken
        })
    })
}

/// One node's state word and ID packing.
struct Shard {
    state: CachePadded<AtomicU64>,
    packer: SlotPacker,
    node: u64,
}

/// Several generators of one layout, one per node ID, each on its own cache line: threads
/// mint from different nodes, so they do not contend on one atomic and each node has its
/// own per-tick sequence.
///
/// Each thread is given a shard on its first mint, round robin (thread `k`, counted across
/// the process, uses shard `k % shards`). More threads than shards share shards safely: a
/// shard is the same lock-free CAS loop as [`Generator`](crate::Generator)'s. IDs are unique
/// across all shards (distinct node IDs) and strictly increasing per shard, so also per
/// thread.
///
/// # Examples
///
/// ```
/// use atomflake::{Layout, ShardedGenerator};
///
/// // Discord: worker 3, processes 0..32 (node = worker << 5 | process).
/// let generator = ShardedGenerator::new(Layout::DISCORD, (0..32).map(|process| 3 << 5 | process))?;
/// let ids: Vec<_> = std::thread::scope(|s| {
///     let handles: Vec<_> = (0..4).map(|_| s.spawn(|| generator.next_id())).collect();
///     handles.into_iter().map(|h| h.join().unwrap()).collect()
/// });
/// assert!(ids.iter().all(|&id| Layout::DISCORD.decode(id).node >> 5 == 3));
/// # Ok::<(), atomflake::Error>(())
/// ```
pub struct ShardedGenerator<C = MonotonicClock> {
    shards: Box<[Shard]>,
    minter: Minter,
    clock: C,
}

impl ShardedGenerator<MonotonicClock> {
    /// A sharded generator over `nodes` with the process's [`MonotonicClock`].
    ///
    /// # Errors
    ///
    /// As [`with_clock`](Self::with_clock).
    pub fn new(layout: Layout, nodes: impl IntoIterator<Item = u64>) -> Result<ShardedGenerator, Error> {
        ShardedGenerator::with_clock(layout, nodes, MonotonicClock::new())
    }
}

impl<C: Clock> ShardedGenerator<C> {
    /// A sharded generator over `nodes` that reads `clock`.
    ///
    /// # Errors
    ///
    /// [`Error::NoNodes`] for an empty set, [`Error::FieldOutOfRange`] for a node that does
    /// not fit the layout, [`Error::DuplicateNode`] for a node given twice (two shards with
    /// one node ID would mint the same IDs).
    ///
    /// ```
    /// use atomflake::{Error, Layout, ShardedGenerator};
    ///
    /// assert_eq!(
    ///     ShardedGenerator::new(Layout::TWITTER, [1, 2, 1]).unwrap_err(),
    ///     Error::DuplicateNode { node: 1 },
    /// );
    /// ```
    pub fn with_clock(layout: Layout, nodes: impl IntoIterator<Item = u64>, clock: C) -> Result<Self, Error> {
        Builder::new(layout).clock(clock).build_sharded(nodes)
    }

    pub(crate) fn from_parts(
        minter: Minter,
        nodes: impl IntoIterator<Item = u64>,
        clock: C,
    ) -> Result<Self, Error> {
        let layout = minter.layout();
        let mut seen = std::collections::BTreeSet::new();
        let mut shards = Vec::new();
        for node in nodes {
            let packer = SlotPacker::new(&layout, node)?;
            if !seen.insert(node) {
                return Err(Error::DuplicateNode { node });
            }
            shards.push(Shard {
                state: CachePadded::new(AtomicU64::new(minter.start())),
                packer,
                node,
            });
        }
        if shards.is_empty() {
            return Err(Error::NoNodes);
        }
        Ok(ShardedGenerator {
            shards: shards.into_boxed_slice(),
            minter,
            clock,
        })
    }

    /// This thread's shard.
    #[inline]
    fn shard(&self) -> &Shard {
        &self.shards[thread_number() % self.shards.len()]
    }

    /// The next ID from this thread's shard; waits only while that shard's tick is spent.
    ///
    /// # Panics
    ///
    /// As [`Generator::next_id`](crate::Generator::next_id): when the clock is outside the
    /// layout's span.
    #[inline]
    pub fn next_id(&self) -> Id {
        let shard = self.shard();
        let (slot, _) = self.minter.reserve(&*shard.state, &self.clock, 1);
        shard.packer.id(slot)
    }

    /// The next ID from this thread's shard, or an error at once.
    ///
    /// # Errors
    ///
    /// As [`Generator::try_next_id`](crate::Generator::try_next_id).
    #[inline]
    pub fn try_next_id(&self) -> Result<Id, Error> {
        let shard = self.shard();
        self.minter
            .try_reserve_one(&*shard.state, &self.clock)
            .map(|slot| shard.packer.id(slot))
    }

    /// `n` IDs from this thread's shard, a tick's block per CAS; see
    /// [`Generator::next_ids`](crate::Generator::next_ids).
    ///
    /// # Panics
    ///
    /// As [`next_id`](Self::next_id).
    pub fn next_ids(&self, n: u64) -> Ids<'_, C> {
        let shard = self.shard();
        self.minter.ids(&*shard.state, &self.clock, shard.packer, n)
    }

    /// Fills `ids` from this thread's shard; see [`Generator::fill`](crate::Generator::fill).
    ///
    /// # Panics
    ///
    /// As [`next_id`](Self::next_id).
    pub fn fill(&self, ids: &mut [Id]) {
        let shard = self.shard();
        self.minter.fill(&*shard.state, &self.clock, shard.packer, ids);
    }

    /// The node ID this thread mints with.
    pub fn current_node(&self) -> u64 {
        self.shard().node
    }

    /// The node IDs, in shard order.
    pub fn nodes(&self) -> impl ExactSizeIterator<Item = u64> + '_ {
        self.shards.iter().map(|shard| shard.node)
    }

    /// The layout.
    pub fn layout(&self) -> Layout {
        self.minter.layout()
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

/// Async minting (feature `tokio`), as [`Generator`](crate::Generator)'s. A call takes
/// the shard of the thread it starts on and keeps it across its awaits, so the IDs of one
/// call strictly increase even when the task moves between threads.
#[cfg(feature = "tokio")]
impl<C: Clock> ShardedGenerator<C> {
    /// The next ID, waiting as [`Generator::next_id_async`](crate::Generator::next_id_async)
    /// does.
    ///
    /// # Panics
    ///
    /// As [`next_id`](Self::next_id).
    pub async fn next_id_async(&self) -> Id {
        let shard = self.shard();
        let (slot, _) = self.minter.reserve_async(&*shard.state, &self.clock, 1).await;
        shard.packer.id(slot)
    }

    /// `n` IDs, as [`Generator::next_ids_async`](crate::Generator::next_ids_async).
    ///
    /// # Panics
    ///
    /// As [`next_id`](Self::next_id).
    pub async fn next_ids_async(&self, n: usize) -> Vec<Id> {
        let shard = self.shard();
        self.minter
            .ids_async(&*shard.state, &self.clock, shard.packer, n)
            .await
    }

    /// Fills `ids`, as [`Generator::fill_async`](crate::Generator::fill_async).
    ///
    /// # Panics
    ///
    /// As [`next_id`](Self::next_id).
    pub async fn fill_async(&self, ids: &mut [Id]) {
        let shard = self.shard();
        self.minter
            .fill_async(&*shard.state, &self.clock, shard.packer, ids)
            .await;
    }
}

impl<C> fmt::Debug for ShardedGenerator<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardedGenerator")
            .field("layout", &self.minter.layout())
            .field(
                "nodes",
                &self.shards.iter().map(|shard| shard.node).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::{Field, ManualClock};

    const T0: u64 = 1_700_000_000_000;

    #[test]
    fn construction_errors_are_exact() {
        let clock = ManualClock::new(T0);
        let build = |nodes: &[u64]| {
            ShardedGenerator::with_clock(Layout::TWITTER, nodes.iter().copied(), clock.clone())
        };
        assert_eq!(build(&[]).unwrap_err(), Error::NoNodes);
        assert_eq!(build(&[4, 5, 4]).unwrap_err(), Error::DuplicateNode { node: 4 });
        assert_eq!(
            build(&[1, 1024]).unwrap_err(),
            Error::FieldOutOfRange {
                field: Field::Node,
                value: 1024,
                max: 1023
            }
        );
        assert_eq!(
            Error::NoNodes.to_string(),
            "no node ids: a sharded generator needs at least one"
        );
        assert_eq!(
            Error::DuplicateNode { node: 4 }.to_string(),
            "node 4 is given twice: each shard needs its own node id"
        );
        let ok = build(&[7, 3]).unwrap();
        assert_eq!(ok.nodes().collect::<Vec<_>>(), [7, 3]);
    }

    #[test]
    fn threads_spread_round_robin_over_the_shards() {
        let generator = ShardedGenerator::with_clock(Layout::TWITTER, 0..4, ManualClock::new(T0)).unwrap();
        let nodes: std::collections::BTreeSet<u64> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4).map(|_| s.spawn(|| generator.current_node())).collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        // Four threads numbered consecutively or not, round robin gives at least two
        // shards; all four when no other thread took a number in between.
        assert!(nodes.len() >= 2, "{nodes:?}");
    }

    #[test]
    fn each_shard_has_its_own_sequence() {
        let generator = ShardedGenerator::with_clock(Layout::TWITTER, [9], ManualClock::new(T0)).unwrap();
        let first = Layout::TWITTER.decode(generator.next_id());
        assert_eq!((first.node, first.sequence), (9, 0));
        let mut block = [Id::new(0); 3];
        generator.fill(&mut block);
        let sequences: Vec<u64> = block
            .iter()
            .map(|&id| Layout::TWITTER.decode(id).sequence)
            .collect();
        assert_eq!(sequences, [1, 2, 3]);
        assert_eq!(generator.next_ids(2).count(), 2);
        assert_eq!(
            Layout::TWITTER.decode(generator.try_next_id().unwrap()).sequence,
            6
        );
    }
}
