//! [`ShardedGenerator`]: a generator per node, one state word each, a shard per thread.

use crate::BuildError;
use crate::clock::{Clock, MonotonicClock};
use crate::format::layout::Layout;
use crate::generator::atfork::Home;
use crate::generator::builder::Builder;
use crate::generator::ids::{Body, Shard, SharedWord, minting_methods};
use crate::generator::state::SlotPacker;
use crate::sync::{Ordering, ProcessAtomicUsize};
use std::cell::Cell;

/// Minting threads numbered in the order they first mint from any `ShardedGenerator`.
/// A process-wide counter outside any loom model: the number only spreads threads over
/// shards, and any shard is safe for any thread.
static NEXT_THREAD: ProcessAtomicUsize = ProcessAtomicUsize::new(0);

thread_local! {
    /// This thread's number, taken from `NEXT_THREAD` on its first mint.
    static THREAD_NUMBER: Cell<Option<usize>> = const { Cell::new(None) };
}

#[inline]
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

/// Several generators of one layout, one per node ID, each on its own cache line: threads
/// mint from different nodes, so they do not contend on one atomic and each node has its
/// own per-tick sequence.
///
/// Each thread is given a shard on its first mint, round robin (thread `k`, counted across
/// the process, uses shard `k % shards`). More threads than shards share shards safely: a
/// shard is the same lock-free CAS loop as [`Generator`](crate::Generator)'s. IDs are unique
/// across all shards (distinct node IDs) and strictly increasing per shard. Every minting
/// method mints from the calling thread's shard, so a thread's IDs strictly increase too;
/// an async call takes the shard of the thread it starts on and keeps it across its
/// awaits, so the IDs of one call strictly increase even when the task moves between
/// threads. [`try_next_run_any`](Self::try_next_run_any) alone moves on to the next shard
/// when this one's tick is spent, for a caller that wants every node's IDs.
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
    /// Picks a thread's shard without a division.
    pick: ShardPick,
    home: Home<Body<Box<[Shard<SharedWord>]>, C>>,
}

/// `n % shards` by multiplication (Lemire, Kaser and Kurz, "Faster remainder by direct
/// computation", 2019): exact for `n` and `shards` below 2^32; a thread number past that
/// is cut to its low 32 bits, which still picks a valid shard.
#[derive(Debug, Clone, Copy)]
struct ShardPick {
    shards: u64,
    /// `⌈2^64 / shards⌉`, wrapped: 0 for one shard, which then always gives shard 0.
    magic: u64,
}

impl ShardPick {
    fn new(shards: usize) -> ShardPick {
        let shards = u64::try_from(shards).unwrap_or(u64::MAX);
        ShardPick {
            shards,
            magic: (u64::MAX / shards).wrapping_add(1),
        }
    }

    #[inline]
    fn of(self, thread: usize) -> usize {
        let low = self.magic.wrapping_mul(thread as u64 & u64::from(u32::MAX));
        let shard = (u128::from(low) * u128::from(self.shards)) >> 64;
        // Below `shards`, which came from a `usize`.
        usize::try_from(shard).unwrap_or(0)
    }
}

impl ShardedGenerator<MonotonicClock> {
    /// A sharded generator over `nodes` with the process's [`MonotonicClock`].
    ///
    /// # Errors
    ///
    /// As [`with_clock`](Self::with_clock).
    pub fn new(layout: Layout, nodes: impl IntoIterator<Item = u64>) -> Result<ShardedGenerator, BuildError> {
        Builder::new(layout).build_sharded(nodes)
    }
}

impl<C: Clock> ShardedGenerator<C> {
    /// A sharded generator over `nodes` that reads `clock`.
    ///
    /// # Errors
    ///
    /// [`BuildError::NoNodes`] for an empty set, [`BuildError::NodeOutOfRange`] for a node that does
    /// not fit the layout, [`BuildError::DuplicateNode`] for a node given twice (two shards with
    /// one node ID would mint the same IDs).
    ///
    /// ```
    /// use atomflake::{BuildError, Layout, ShardedGenerator};
    ///
    /// assert_eq!(
    ///     ShardedGenerator::new(Layout::TWITTER, [1, 2, 1]).unwrap_err(),
    ///     BuildError::DuplicateNode { node: 1 },
    /// );
    /// ```
    pub fn with_clock(
        layout: Layout,
        nodes: impl IntoIterator<Item = u64>,
        clock: C,
    ) -> Result<Self, BuildError> {
        Builder::with_clock(layout, clock).build_sharded(nodes)
    }

    /// This thread's shard.
    #[inline]
    fn shard(&self) -> &Shard<SharedWord> {
        &self.home.nodes[self.pick.of(thread_number())]
    }

    /// The node ID this thread mints with.
    pub fn current_node(&self) -> u64 {
        self.shard().id
    }

    /// The node IDs, in shard order.
    pub fn nodes(&self) -> impl ExactSizeIterator<Item = u64> + '_ {
        self.home.nodes.iter().map(|shard| shard.id)
    }

    /// Up to `max` IDs of one tick as a [`Run`](crate::Run), as
    /// [`try_next_run`](Self::try_next_run), from this thread's shard or, when its tick is
    /// spent, from the next shard in [`nodes`](Self::nodes) order (wrapping) whose tick is
    /// not. So one caller, one stream of a service, draws on every node: as many IDs per
    /// tick as the layout's sequence holds, times the number of nodes. Never waits.
    ///
    /// Each run's IDs increase, and so do the runs of one node; runs of different nodes
    /// interleave by node and tick as the layout orders its fields.
    ///
    /// # Errors
    ///
    /// [`MintError::SequenceExhausted`](crate::MintError::SequenceExhausted) only when
    /// every shard's tick is spent, with the soonest of their waits; any other error of
    /// [`try_next_run`](Self::try_next_run) at once.
    ///
    /// # Examples
    ///
    /// ```
    /// use atomflake::{Layout, ShardedGenerator};
    ///
    /// let generator = ShardedGenerator::new(Layout::TWITTER, [1, 2])?;
    /// // One caller, two runs in a row that spend a tick's sequence each: the second comes
    /// // from the other node when the first spent its tick.
    /// let first = generator.try_next_run_any(4096)?;
    /// let second = generator.try_next_run_any(4096)?;
    /// let [a, b] = [first, second].map(|run| Layout::TWITTER.decode(run.first()));
    /// assert!(a.node != b.node || a.unix_ms < b.unix_ms);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_next_run_any(&self, max: u64) -> Result<crate::Run, crate::MintError> {
        use crate::MintError::SequenceExhausted;
        let shards = &self.home.nodes;
        let own = self.pick.of(thread_number());
        let mut soonest = match self.home.core.try_run(&shards[own], max) {
            Err(spent @ SequenceExhausted { retry_after, .. }) => (spent, retry_after),
            minted => return minted,
        };
        for index in (own + 1..shards.len()).chain(0..own) {
            match self.home.core.try_run(&shards[index], max) {
                Err(spent @ SequenceExhausted { retry_after, .. }) => {
                    if retry_after < soonest.1 {
                        soonest = (spent, retry_after);
                    }
                }
                minted => return minted,
            }
        }
        Err(soonest.0)
    }

    /// What [`try_next_run_any`](Self::try_next_run_any) would answer now, without taking
    /// an ID: `Ok` when some node has an ID free in the current tick, else the error it
    /// would report. For a readiness check, which must not spend the IDs it asks about.
    /// Never waits.
    ///
    /// The answer is of the moment it was asked: a mint right after may find the tick
    /// spent by others, or a new tick begun.
    ///
    /// # Errors
    ///
    /// As [`try_next_run_any`](Self::try_next_run_any).
    ///
    /// # Examples
    ///
    /// ```
    /// use atomflake::{Layout, ManualClock, MintError, ShardedGenerator};
    ///
    /// // Sonyflake: 256 IDs a tick on each node; the clock stands still.
    /// let generator = ShardedGenerator::with_clock(Layout::SONYFLAKE, [1], ManualClock::new(1_700_000_000_000))?;
    /// for _ in 0..1000 {
    ///     generator.probe_any()?;
    /// }
    /// // The probes took nothing: the whole tick is left.
    /// assert_eq!(generator.try_next_run_any(1000)?.len(), 256);
    /// assert!(matches!(generator.probe_any(), Err(MintError::SequenceExhausted { .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn probe_any(&self) -> Result<(), crate::MintError> {
        use crate::MintError::SequenceExhausted;
        let shards = &self.home.nodes;
        let own = self.pick.of(thread_number());
        let mut soonest = match self.home.core.probe(&shards[own]) {
            Err(spent @ SequenceExhausted { retry_after, .. }) => (spent, retry_after),
            answer => return answer,
        };
        for index in (own + 1..shards.len()).chain(0..own) {
            match self.home.core.probe(&shards[index]) {
                Err(spent @ SequenceExhausted { retry_after, .. }) => {
                    if retry_after < soonest.1 {
                        soonest = (spent, retry_after);
                    }
                }
                answer => return answer,
            }
        }
        Err(soonest.0)
    }
}

impl<C: Clock> Builder<C> {
    /// A [`ShardedGenerator`] over `nodes`.
    ///
    /// # Errors
    ///
    /// As [`ShardedGenerator::with_clock`]; [`BuildError::LeadOutOfRange`] for a bad
    /// [`borrow_ahead`](Self::borrow_ahead) lead; the high-water errors of
    /// [`high_water_file`](Self::high_water_file).
    pub fn build_sharded(
        self,
        nodes: impl IntoIterator<Item = u64>,
    ) -> Result<ShardedGenerator<C>, BuildError> {
        let layout = self.layout();
        let mut seen = std::collections::BTreeSet::new();
        let mut packers = Vec::new();
        for node in nodes {
            let packer = SlotPacker::new(&layout, node)?;
            if !seen.insert(node) {
                return Err(BuildError::DuplicateNode { node });
            }
            packers.push((packer, node));
        }
        if packers.is_empty() {
            return Err(BuildError::NoNodes);
        }
        let packers_len = packers.len();
        let nodes: Vec<u64> = packers.iter().map(|&(_, node)| node).collect();
        let core = self.into_core(&nodes)?;
        let shards = packers
            .into_iter()
            .map(|(packer, node)| Shard::shared(&core.minter, packer, node))
            .collect();
        let pick = ShardPick::new(packers_len);
        Ok(ShardedGenerator {
            pick,
            home: Body::home(shards, core),
        })
    }
}

// `next_id`, `next_ids`, `fill`, their bounded and async twins and `Debug`: written once
// for the three generator types by `minting_methods!` in `src/generator/ids.rs`.
minting_methods!(
    ShardedGenerator, Ids,
    node: |self| self.shard(),
    debug: ["nodes": self.home.nodes.iter().map(|shard| shard.id).collect::<Vec<_>>()],
    new: "ShardedGenerator::new(Layout::TWITTER, [7])",
    with_clock: "ShardedGenerator::with_clock(layout, [7], clock.clone())",
);

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::{Id, ManualClock};

    const T0: u64 = 1_700_000_000_000;

    #[test]
    fn a_spent_shard_waits_while_another_shard_mints_in_the_next_tick() {
        // 1-bit node and sequence fields: a shard's tick is spent after two IDs, and the
        // state's carry into the next tick passes through the node field.
        let layout = Layout::builder()
            .timestamp_bits(41)
            .node_bits(1)
            .sequence_bits(1)
            .build()
            .unwrap();
        let clock = ManualClock::new(T0);
        let generator = ShardedGenerator::with_clock(layout, [0, 1], clock.clone()).unwrap();
        let (zero, one) = (&generator.home.nodes[0], &generator.home.nodes[1]);
        let core = &generator.home.core;
        // The other shard mints in the next tick first, which moves the generator's limits
        // on; then shard 0 spends the tick before it (a thread whose clock read is older).
        clock.advance(1);
        let next = core.try_next_id(one).unwrap();
        clock.rewind(1);
        let spent = [core.try_next_id(zero), core.try_next_id(zero)].map(Result::unwrap);
        assert_eq!(
            core.try_next_id(zero),
            Err(crate::MintError::SequenceExhausted {
                tick: T0 + 1,
                retry_after: std::time::Duration::from_millis(1)
            })
        );
        clock.advance(1);
        let after = core.try_next_id(zero).unwrap();
        assert_ne!(after, next, "two shards minted one ID");
        let parts = [spent[0], spent[1], next, after].map(|id| layout.decode(id));
        let nodes_and_ticks = parts.map(|parts| (parts.node, parts.unix_ms - T0));
        assert_eq!(nodes_and_ticks, [(0, 0), (0, 0), (1, 1), (0, 1)]);
    }

    /// 2-bit sequences: four IDs per node and tick, on nodes 0..=3.
    fn four_ids_a_tick() -> Layout {
        Layout::builder()
            .timestamp_bits(41)
            .node_bits(2)
            .sequence_bits(2)
            .build()
            .unwrap()
    }

    #[test]
    fn one_caller_draws_on_every_shard_before_it_waits_for_the_next_tick() {
        let layout = four_ids_a_tick();
        let clock = ManualClock::new(T0);
        let generator = ShardedGenerator::with_clock(layout, [3, 1, 2], clock.clone()).unwrap();
        let own = generator.current_node();
        let mut runs = Vec::new();
        let spent = loop {
            match generator.try_next_run_any(3) {
                Ok(run) => runs.push(run),
                Err(error) => break error,
            }
        };
        assert_eq!(
            spent,
            crate::MintError::SequenceExhausted {
                tick: T0 + 1,
                retry_after: std::time::Duration::from_millis(1)
            }
        );
        let nodes_and_lengths: Vec<(u64, u64)> = runs
            .iter()
            .map(|run| (layout.decode(run.first()).node, run.len()))
            .collect();
        // This thread's shard first, then the others in order, wrapping: each node's tick
        // whole, in a run of three and a run of one.
        let order = [3, 1, 2];
        let at = order.iter().position(|&node| node == own).unwrap();
        let expected: Vec<(u64, u64)> = (0..3)
            .map(|k| order[(at + k) % 3])
            .flat_map(|node| [(node, 3), (node, 1)])
            .collect();
        assert_eq!(nodes_and_lengths, expected);
        let ids: std::collections::BTreeSet<Id> = runs.iter().copied().flatten().collect();
        assert_eq!(ids.len(), 12, "every ID of the tick, once");
        // The next tick starts at this thread's shard again.
        clock.advance(1);
        let next = generator.try_next_run_any(3).unwrap();
        assert_eq!(layout.decode(next.first()).node, own);
        assert_eq!(layout.decode(next.first()).unix_ms, T0 + 1);
    }

    #[test]
    fn a_probe_answers_as_a_mint_would_and_takes_no_id() {
        let layout = four_ids_a_tick();
        let clock = ManualClock::new(T0);
        let generator = ShardedGenerator::with_clock(layout, [3, 1], clock.clone()).unwrap();
        for _ in 0..100 {
            assert_eq!(generator.probe_any(), Ok(()));
        }
        // A probe before each mint answers as the mint does; both nodes' ticks are left
        // whole for the mints: four IDs each, sequences 0 to 3.
        let mut sequences = std::collections::BTreeMap::<u64, Vec<u64>>::new();
        loop {
            let probed = generator.probe_any();
            match generator.try_next_run_any(1) {
                Ok(run) => {
                    assert_eq!(probed, Ok(()));
                    let parts = layout.decode(run.first());
                    sequences.entry(parts.node).or_default().push(parts.sequence);
                }
                Err(spent) => {
                    assert_eq!(probed, Err(spent));
                    break;
                }
            }
        }
        let whole = vec![0, 1, 2, 3];
        assert_eq!(sequences, [(1, whole.clone()), (3, whole)].into());
        clock.advance(1);
        assert_eq!(generator.probe_any(), Ok(()));
        assert_eq!(layout.decode(generator.try_next_id().unwrap()).sequence, 0);
    }

    #[test]
    fn construction_errors_are_exact() {
        let clock = ManualClock::new(T0);
        let build = |nodes: &[u64]| {
            ShardedGenerator::with_clock(Layout::TWITTER, nodes.iter().copied(), clock.clone())
        };
        assert_eq!(build(&[]).unwrap_err(), BuildError::NoNodes);
        assert_eq!(
            build(&[4, 5, 4]).unwrap_err(),
            BuildError::DuplicateNode { node: 4 }
        );
        assert_eq!(
            build(&[1, 1024]).unwrap_err(),
            BuildError::NodeOutOfRange {
                node: 1024,
                max: 1023
            }
        );
        assert_eq!(
            BuildError::NoNodes.to_string(),
            "no node ids: a sharded generator needs at least one"
        );
        assert_eq!(
            BuildError::DuplicateNode { node: 4 }.to_string(),
            "node 4 is given twice: each shard needs its own node id"
        );
        let ok = build(&[7, 3]).unwrap();
        assert_eq!(ok.nodes().collect::<Vec<_>>(), [7, 3]);
    }

    #[test]
    fn a_shard_is_picked_as_the_remainder() {
        for shards in [1_usize, 2, 3, 7, 32, 1000, 1023, 1024] {
            let pick = ShardPick::new(shards);
            for thread in (0..5_000).chain([u32::MAX as usize - 1, u32::MAX as usize]) {
                assert_eq!(pick.of(thread), thread % shards, "{thread} % {shards}");
            }
            assert!(pick.of(usize::MAX) < shards);
        }
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
