//! What the three generator types share: a node's state word and ID packing ([`Shard`]),
//! the minting arithmetic with its clock ([`Core`]), the iterators of `next_ids`
//! ([`Ids`], [`LocalIds`]), and the public minting methods with their docs, written once
//! (`minting_methods!`).

use crate::clock::{Clock, MonotonicClock};
use crate::format::id::Id;
use crate::format::layout::Layout;
use crate::generator::atfork::Home;
use crate::generator::error::{FillError, MintError};
use crate::generator::keeper::Finish;
use crate::generator::minter::{AtomicWord, LocalWord, Minter, Windowed, Word};
use crate::generator::run::Run;
use crate::generator::state::SlotPacker;
use crate::generator::wait::Until;
use crossbeam_utils::CachePadded;
use std::time::Duration;

/// One node's state word, the packing of its slots into IDs, and its node ID.
#[derive(Debug)]
pub(crate) struct Shard<W: Word> {
    /// The next free slot (see [`state`](super::state)).
    pub(crate) state: W,
    pub(crate) packer: SlotPacker,
    pub(crate) id: u64,
    /// Tells the high-water store how far this node minted, when it is dropped.
    finish: Option<Finish>,
}

impl<W: Word> Drop for Shard<W> {
    fn drop(&mut self) {
        if let Some(finish) = &self.finish {
            finish.finish(self.state.load());
        }
    }
}

/// A shared state word on a cache line of its own, so that neighbouring data (another
/// generator in a `Vec`, say) does not share its cache traffic.
pub(crate) type SharedWord = CachePadded<AtomicWord>;

impl Shard<SharedWord> {
    /// A node whose state word starts where `minter` says.
    pub(crate) fn shared(minter: &Minter, packer: SlotPacker, id: u64) -> Shard<SharedWord> {
        Shard {
            state: CachePadded::new(AtomicWord::new(minter.start())),
            packer,
            id,
            finish: minter.finisher(),
        }
    }
}

impl Shard<LocalWord> {
    /// A node whose state word starts where `minter` says.
    pub(crate) fn local(minter: &Minter, packer: SlotPacker, id: u64) -> Shard<LocalWord> {
        Shard {
            state: LocalWord::new(minter.start()),
            packer,
            id,
            finish: minter.finisher(),
        }
    }
}

impl Word for SharedWord {
    #[inline]
    fn load(&self) -> u64 {
        Word::load(&**self)
    }

    #[inline]
    fn advance(&self, current: u64, new: u64) -> Result<(), u64> {
        Word::advance(&**self, current, new)
    }
}

impl Windowed for SharedWord {
    #[inline]
    fn window(&self) -> crate::generator::minter::Window {
        Windowed::window(&**self)
    }

    #[inline]
    fn open(&self, window: crate::generator::minter::Window) {
        Windowed::open(&**self, window);
    }

    fn limit_address(&self) -> *mut u64 {
        Windowed::limit_address(&**self)
    }
}

/// A generator's nodes (one [`Shard`], or a sharded generator's slice of them) and its
/// [`Core`], in one heap allocation whose limits a child of a fork closes ([`Home`]).
#[derive(Debug)]
pub(crate) struct Body<N, C> {
    pub(crate) nodes: N,
    pub(crate) core: Core<C>,
}

impl<N: Nodes, C> Body<N, C> {
    /// `nodes` and `core` on the heap, their limits registered for a child of a fork.
    pub(crate) fn home(nodes: N, core: Core<C>) -> Home<Body<N, C>> {
        Home::new(Body { nodes, core }, |body| {
            let mut limits = body.nodes.limit_addresses();
            limits.extend(body.core.minter.limit_addresses());
            limits
        })
    }
}

/// A generator's state words: their window limits' addresses.
pub(crate) trait Nodes {
    fn limit_addresses(&self) -> Vec<*mut u64>;
}

impl<W: Windowed> Nodes for Shard<W> {
    fn limit_addresses(&self) -> Vec<*mut u64> {
        vec![self.state.limit_address()]
    }
}

impl<W: Windowed> Nodes for Box<[Shard<W>]> {
    fn limit_addresses(&self) -> Vec<*mut u64> {
        self.iter().map(|shard| shard.state.limit_address()).collect()
    }
}

/// The minting arithmetic and the clock of a generator: everything but its state words.
#[derive(Debug)]
pub(crate) struct Core<C> {
    pub(crate) minter: Minter,
    pub(crate) clock: C,
}

impl<C: Clock> Core<C> {
    #[inline]
    pub(crate) fn next_id<W: Windowed>(&self, node: &Shard<W>) -> Id {
        let (slot, _) = self.minter.reserve(&node.state, &self.clock, 1);
        node.packer.id(slot)
    }

    #[inline]
    pub(crate) fn try_next_id<W: Windowed>(&self, node: &Shard<W>) -> Result<Id, MintError> {
        self.minter
            .try_reserve_one(&node.state, &self.clock)
            .map(|slot| node.packer.id(slot))
    }

    /// Up to `max` IDs of the current tick now, or why none can be minted now.
    pub(crate) fn try_run<W: Windowed>(&self, node: &Shard<W>, max: u64) -> Result<Run, MintError> {
        if max == 0 {
            return Ok(Run::new(node.packer.id(0), 0, self.minter.unit()));
        }
        let (slot, count) = self.minter.try_reserve(&node.state, &self.clock, max)?;
        Ok(Run::new(node.packer.id(slot), count, self.minter.unit()))
    }

    /// The next ID, waiting while the refusal is transient for at most `timeout` (see
    /// [`Minter::reserve_for`]).
    #[inline]
    pub(crate) fn next_id_timeout<W: Windowed>(
        &self,
        node: &Shard<W>,
        timeout: Duration,
    ) -> Result<Id, MintError> {
        self.minter
            .reserve_for(&node.state, &self.clock, 1, timeout)
            .map(|(slot, _)| node.packer.id(slot))
    }

    /// Up to `max` IDs of one tick, waiting as [`next_id_timeout`](Self::next_id_timeout)
    /// does.
    pub(crate) fn run_timeout<W: Windowed>(
        &self,
        node: &Shard<W>,
        max: u64,
        timeout: Duration,
    ) -> Result<Run, MintError> {
        if max == 0 {
            return Ok(Run::new(node.packer.id(0), 0, self.minter.unit()));
        }
        let (slot, count) = self.minter.reserve_for(&node.state, &self.clock, max, timeout)?;
        Ok(Run::new(node.packer.id(slot), count, self.minter.unit()))
    }

    /// Fills `ids` a tick's block at a time, each block waiting as
    /// [`next_id_timeout`](Self::next_id_timeout) does, all by one deadline; a refusal
    /// stops it, with how many it filled.
    pub(crate) fn fill_timeout<W: Windowed>(
        &self,
        node: &Shard<W>,
        ids: &mut [Id],
        timeout: Duration,
    ) -> Result<(), FillError> {
        let until = Until::timeout(timeout);
        let len = ids.len();
        let mut rest = ids;
        while !rest.is_empty() {
            match self
                .minter
                .reserve_until(&node.state, &self.clock, rest.len() as u64, until)
            {
                Ok(block) => rest = write_block(node.packer, self.minter.unit(), block, rest),
                Err(error) => return Err(FillError::new(len - rest.len(), error)),
            }
        }
        Ok(())
    }

    /// What [`try_run`](Self::try_run) would answer now, without taking an ID.
    pub(crate) fn probe<W: Windowed>(&self, node: &Shard<W>) -> Result<(), MintError> {
        self.minter.probe(&node.state, &self.clock)
    }

    /// `n` IDs as blocks; the first block is reserved now.
    pub(crate) fn blocks<'a, W: Windowed>(&'a self, node: &'a Shard<W>, n: u64) -> Blocks<'a, C, W> {
        let (slot, count) = if n == 0 {
            (0, 0)
        } else {
            self.minter.reserve(&node.state, &self.clock, n)
        };
        Blocks {
            core: self,
            node,
            next: node.packer.id(slot).get(),
            unit: self.minter.unit(),
            in_block: count,
            after_block: n - count,
        }
    }

    pub(crate) fn fill<W: Windowed>(&self, node: &Shard<W>, ids: &mut [Id]) {
        let mut rest = ids;
        while !rest.is_empty() {
            let block = self.minter.reserve(&node.state, &self.clock, rest.len() as u64);
            rest = write_block(node.packer, self.minter.unit(), block, rest);
        }
    }
}

/// Writes the IDs of the reserved `(first slot, count)` to the start of `ids`; returns the
/// rest of `ids`.
pub(crate) fn write_block(
    packer: SlotPacker,
    unit: u64,
    (mut slot, count): (u64, u64),
    ids: &mut [Id],
) -> &mut [Id] {
    let (block, rest) = ids.split_at_mut(usize::try_from(count).unwrap_or(usize::MAX));
    for id in block {
        *id = packer.id(slot);
        slot += unit;
    }
    rest
}

/// IDs reserved a tick's block at a time from one state word: the iterator inside [`Ids`]
/// and [`LocalIds`].
#[derive(Debug)]
pub(crate) struct Blocks<'a, C, W: Windowed> {
    core: &'a Core<C>,
    node: &'a Shard<W>,
    /// The next ID of the current block: the block's slots are consecutive in one tick,
    /// so their IDs are too, `unit` apart (no carry leaves the sequence field).
    next: u64,
    unit: u64,
    /// IDs left in the current block.
    in_block: u64,
    /// IDs still to reserve after it.
    after_block: u64,
}

impl<C: Clock, W: Windowed> Blocks<'_, C, W> {
    #[inline]
    fn next(&mut self) -> Option<Id> {
        if self.in_block == 0 {
            if self.after_block == 0 {
                return None;
            }
            let slot;
            (slot, self.in_block) =
                self.core
                    .minter
                    .reserve(&self.node.state, &self.core.clock, self.after_block);
            self.next = self.node.packer.id(slot).get();
            self.after_block -= self.in_block;
        }
        let id = Id::new(self.next);
        self.next += self.unit;
        self.in_block -= 1;
        Some(id)
    }

    fn len(&self) -> usize {
        usize::try_from(self.in_block + self.after_block).unwrap_or(usize::MAX)
    }
}

/// An iterator over [`Blocks`], named for the generators it serves.
macro_rules! blocks_iterator {
    ($(#[$doc:meta])* $name:ident, $word:ty) => {
        $(#[$doc])*
        #[derive(Debug)]
        #[must_use = "the IDs of the first block are reserved: use them or they are lost"]
        pub struct $name<'a, C = MonotonicClock>(pub(crate) Blocks<'a, C, $word>);

        impl<C: Clock> Iterator for $name<'_, C> {
            type Item = Id;

            #[inline]
            fn next(&mut self) -> Option<Id> {
                self.0.next()
            }

            fn size_hint(&self) -> (usize, Option<usize>) {
                (self.0.len(), Some(self.0.len()))
            }
        }

        impl<C: Clock> ExactSizeIterator for $name<'_, C> {}

        impl<C: Clock> core::iter::FusedIterator for $name<'_, C> {}
    };
}

blocks_iterator!(
    /// The IDs of [`Generator::next_ids`](crate::Generator::next_ids) and
    /// [`ShardedGenerator::next_ids`](crate::ShardedGenerator::next_ids), reserved a
    /// tick's block at a time.
    Ids,
    SharedWord
);

blocks_iterator!(
    /// The IDs of [`LocalGenerator::next_ids`](crate::LocalGenerator::next_ids), reserved
    /// a tick's block at a time.
    LocalIds,
    LocalWord
);

/// The minting methods of a generator type, with their docs: `$node` is the expression
/// (over `self`) of the [`Shard`] a call mints from, `$ids` the iterator of `next_ids`, and
/// the literals are the type's name and how its examples build one for node 7 (`new`) and
/// for node 7 with a clock named `clock` and a layout named `layout` (`with_clock`).
macro_rules! minting_methods {
    (
        $ty:ident, $ids:ident,
        node: |$self:ident| $node:expr,
        debug: [$($field:literal: $value:expr),* $(,)?],
        new: $new:literal,
        with_clock: $with_clock:literal $(,)?
    ) => {
        impl<C> core::fmt::Debug for $ty<C> {
            fn fmt(&$self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.debug_struct(stringify!($ty))
                    .field("layout", &$self.home.core.layout())
                    $(.field($field, &$value))*
                    .finish_non_exhaustive()
            }
        }

        impl<C: $crate::clock::Clock> $ty<C> {
            /// The next ID, waiting only while the current tick's sequence is spent.
            ///
            /// How it waits is the generator's [`Wait`](crate::Wait): by default it sleeps
            /// until shortly before the next tick, then spins, re-reading the clock.
            ///
            /// # Panics
            ///
            /// When the clock reads before the layout's epoch, or the layout's span is
            /// used up (see [`Layout::end_unix_ms`](crate::Layout::end_unix_ms)): no
            /// correct ID can be minted. With the default clock this means the system
            /// clock was set before the epoch at start-up. Also when a
            /// [high-water file](crate::Builder::high_water_file) cannot be written (a
            /// full disk, say) and the clock has passed its mark: minting on would risk
            /// duplicates after a restart; or when the thread that stores the mark has
            /// panicked and the clock has passed it. And in a child of a `fork()` (the
            /// generator was built in its parent), from its first mint there: parent and
            /// child would mint the same IDs, and a child has none of the generator's
            /// threads. [`try_next_id`](Self::try_next_id) returns these as
            /// errors.
            ///
            /// # Examples
            ///
            /// ```
            #[doc = concat!("use atomflake::{Layout, ", stringify!($ty), "};")]
            ///
            #[doc = concat!("let generator = ", $new, "?;")]
            /// let (a, b) = (generator.next_id(), generator.next_id());
            /// assert!(b > a);
            /// # Ok::<(), atomflake::Error>(())
            /// ```
            #[inline]
            pub fn next_id(&$self) -> $crate::Id {
                $self.home.core.next_id($node)
            }

            /// The next ID, or an error at once when none can be minted now.
            ///
            /// # Errors
            ///
            /// [`MintError::SequenceExhausted`](crate::MintError::SequenceExhausted) (transient)
            /// when the current tick's sequence is spent, with how long until the next
            /// free tick starts; [`MintError::MarkPending`](crate::MintError::MarkPending)
            /// (transient) when the clock has passed the high-water mark while it is being
            /// moved; [`MintError::ClockOutOfSpan`](crate::MintError::ClockOutOfSpan) and
            /// [`MintError::SpanSpent`](crate::MintError::SpanSpent) when the clock is outside the
            /// layout's span or the span is used up; the high-water file's error when its
            /// mark cannot be moved; [`MintError::KeeperPanicked`](crate::MintError::KeeperPanicked)
            /// (permanent) past the mark once the thread that stores it has panicked;
            /// [`MintError::Forked`](crate::MintError::Forked) (permanent) in a child of a
            /// `fork()`, from its first mint there, instead of any other refusal.
            ///
            /// # Examples
            ///
            /// ```
            #[doc = concat!("use atomflake::{Layout, ManualClock, MintError, ", stringify!($ty), "};")]
            /// use std::time::Duration;
            ///
            /// let layout = Layout::builder().timestamp_bits(41).node_bits(10).sequence_bits(0).build()?;
            /// let clock = ManualClock::new(1_700_000_000_000);
            #[doc = concat!("let generator = ", $with_clock, "?;")]
            /// generator.try_next_id()?;
            /// assert_eq!(
            ///     generator.try_next_id(),
            ///     Err(MintError::SequenceExhausted { tick: 1_700_000_000_001, retry_after: Duration::from_millis(1) }),
            /// );
            /// clock.advance(1);
            /// assert!(generator.try_next_id().is_ok());
            /// # Ok::<(), atomflake::Error>(())
            /// ```
            #[inline]
            pub fn try_next_id(&$self) -> Result<$crate::Id, $crate::MintError> {
                $self.home.core.try_next_id($node)
            }

            /// The next ID, waiting at most `timeout` while none can be minted for now:
            /// the bounded-wait twin of [`next_id`](Self::next_id) and
            /// [`try_next_id`](Self::try_next_id).
            ///
            /// Waits out transient refusals ([`MintError::is_transient`](crate::MintError::is_transient)):
            /// a spent tick as [`next_id`](Self::next_id) waits for it (the generator's
            /// [`Wait`](crate::Wait)), a mark being stored for the thread that stores it, a
            /// failing [`MarkStore`](crate::mark::MarkStore) (a lease being renewed, say)
            /// for its next attempt. A permanent refusal is returned at once, and so is a
            /// spent tick whose successor starts after the deadline (by the generator's
            /// clock): a caller with a deadline learns now what it would learn at the
            /// deadline, rather than sleeping for it. After each wait the mint is tried
            /// again, the last time at the deadline.
            ///
            /// The wait starts when no ID is free at once: a free ID costs no more than
            /// with [`try_next_id`](Self::try_next_id), and a `timeout` of zero is
            /// [`try_next_id`](Self::try_next_id). A `timeout` too long to add to
            /// [`Instant::now`](std::time::Instant::now) (`Duration::MAX`) means no deadline:
            /// the wait lasts while the refusal is transient, unlike `next_id`'s, which
            /// gives a failing store only its patience.
            ///
            /// # Errors
            ///
            /// As [`try_next_id`](Self::try_next_id): the last refusal once `timeout` has
            /// passed (or a spent tick, at once, when the next starts after it), or a
            /// permanent refusal at once.
            ///
            /// # Examples
            ///
            /// ```
            #[doc = concat!("use atomflake::{Layout, ManualClock, MintError, ", stringify!($ty), "};")]
            /// use std::time::Duration;
            ///
            /// // One ID a tick.
            /// let layout = Layout::builder().timestamp_bits(41).node_bits(10).sequence_bits(0).build()?;
            /// let clock = ManualClock::new(1_700_000_000_000);
            #[doc = concat!("let generator = ", $with_clock, "?;")]
            /// let first = generator.next_id_timeout(Duration::ZERO)?;
            /// // The tick is spent and the clock stands still: refused when the time is up.
            /// assert_eq!(
            ///     generator.next_id_timeout(Duration::from_millis(20)),
            ///     Err(MintError::SequenceExhausted { tick: 1_700_000_000_001, retry_after: Duration::from_millis(1) }),
            /// );
            /// // Another thread moves the clock on while this one waits.
            /// let second = std::thread::scope(|s| {
            ///     s.spawn(|| {
            ///         std::thread::sleep(Duration::from_millis(20));
            ///         clock.advance(1);
            ///     });
            ///     generator.next_id_timeout(Duration::from_secs(60))
            /// })?;
            /// assert!(second > first);
            /// # Ok::<(), atomflake::Error>(())
            /// ```
            #[inline]
            pub fn next_id_timeout(&$self, timeout: core::time::Duration) -> Result<$crate::Id, $crate::MintError> {
                $self.home.core.next_id_timeout($node, timeout)
            }

            /// Up to `max` IDs at once, with one CAS, as a [`Run`](crate::Run): those left
            /// in the current tick's sequence, never waiting. For services that hand out
            /// IDs in bulk (a run travels as three numbers) and for callers that wait in
            /// their own way (an async runtime's timer).
            ///
            /// A `max` of 0 reserves nothing and returns an empty run.
            ///
            /// # Errors
            ///
            /// As [`try_next_id`](Self::try_next_id).
            ///
            /// # Examples
            ///
            /// ```
            #[doc = concat!("use atomflake::{Layout, ", stringify!($ty), "};")]
            ///
            #[doc = concat!("let generator = ", $new, "?;")]
            /// let run = generator.try_next_run(10_000)?;
            /// // At most one tick's sequence: 4096 for Twitter.
            /// assert!((1..=4096).contains(&run.len()));
            /// assert!(generator.next_id() > run.last().unwrap());
            /// # Ok::<(), Box<dyn std::error::Error>>(())
            /// ```
            #[inline]
            pub fn try_next_run(&$self, max: u64) -> Result<$crate::Run, $crate::MintError> {
                $self.home.core.try_run($node, max)
            }

            /// Up to `max` IDs of one tick as a [`Run`](crate::Run), as
            /// [`try_next_run`](Self::try_next_run), waiting at most `timeout` as
            /// [`next_id_timeout`](Self::next_id_timeout) does while none is free.
            ///
            /// A `max` of 0 reserves nothing and returns an empty run.
            ///
            /// # Errors
            ///
            /// As [`next_id_timeout`](Self::next_id_timeout).
            ///
            /// # Examples
            ///
            /// ```
            #[doc = concat!("use atomflake::{Layout, ManualClock, MintError, ", stringify!($ty), "};")]
            /// use std::time::Duration;
            ///
            /// // Four IDs a tick.
            /// let layout = Layout::builder().timestamp_bits(41).node_bits(10).sequence_bits(2).build()?;
            /// let clock = ManualClock::new(1_700_000_000_000);
            #[doc = concat!("let generator = ", $with_clock, "?;")]
            /// assert_eq!(generator.next_run_timeout(10, Duration::ZERO)?.len(), 4);
            /// assert!(matches!(
            ///     generator.next_run_timeout(10, Duration::from_millis(20)),
            ///     Err(MintError::SequenceExhausted { .. }),
            /// ));
            /// let run = std::thread::scope(|s| {
            ///     s.spawn(|| {
            ///         std::thread::sleep(Duration::from_millis(20));
            ///         clock.advance(1);
            ///     });
            ///     generator.next_run_timeout(10, Duration::from_secs(60))
            /// })?;
            /// assert_eq!(run.len(), 4);
            /// # Ok::<(), Box<dyn std::error::Error>>(())
            /// ```
            #[inline]
            pub fn next_run_timeout(
                &$self,
                max: u64,
                timeout: core::time::Duration,
            ) -> Result<$crate::Run, $crate::MintError> {
                $self.home.core.run_timeout($node, max, timeout)
            }

            /// `n` IDs, reserved a tick at a time with one CAS each, as an iterator that
            /// allocates nothing.
            ///
            /// The first block (up to the rest of the current tick's sequence) is reserved
            /// before this returns; each later block when the iterator reaches it, waiting
            /// for the next tick as [`next_id`](Self::next_id) does. So every ID's
            /// timestamp is the tick in which it was reserved. IDs of a dropped iterator's
            /// current block are never minted by anyone (a gap, not a duplicate); later
            /// blocks are not reserved at all.
            ///
            /// # Panics
            ///
            /// As [`next_id`](Self::next_id).
            ///
            /// # Examples
            ///
            /// ```
            #[doc = concat!("use atomflake::{Layout, ", stringify!($ty), "};")]
            ///
            #[doc = concat!("let generator = ", $new, "?;")]
            /// let ids: Vec<_> = generator.next_ids(10_000).collect(); // spans at least 3 ms
            /// assert_eq!(ids.len(), 10_000);
            /// assert!(ids.windows(2).all(|w| w[0] < w[1]));
            /// # Ok::<(), atomflake::Error>(())
            /// ```
            pub fn next_ids(&$self, n: u64) -> $crate::generator::ids::$ids<'_, C> {
                $crate::generator::ids::$ids($self.home.core.blocks($node, n))
            }

            /// Fills `ids` with new IDs, reserved a tick at a time (see
            /// [`next_ids`](Self::next_ids)).
            ///
            /// # Panics
            ///
            /// As [`next_id`](Self::next_id).
            ///
            /// # Examples
            ///
            /// ```
            #[doc = concat!("use atomflake::{Id, Layout, ", stringify!($ty), "};")]
            ///
            #[doc = concat!("let generator = ", $new, "?;")]
            /// let mut buffer = [Id::new(0); 512];
            /// generator.fill(&mut buffer);
            /// assert!(buffer.windows(2).all(|w| w[0] < w[1]));
            /// # Ok::<(), atomflake::Error>(())
            /// ```
            pub fn fill(&$self, ids: &mut [$crate::Id]) {
                $self.home.core.fill($node, ids);
            }

            /// Fills `ids` with new IDs, reserved a tick at a time as [`fill`](Self::fill)
            /// does, waiting as [`next_id_timeout`](Self::next_id_timeout) does, all by
            /// one deadline `timeout` from now.
            ///
            /// IDs are written from the start of `ids`; a refusal stops the fill and says
            /// how many were written ([`FillError::filled`](crate::FillError::filled)), so
            /// none is lost: `ids[..filled]` are minted, the rest is left as it was. A
            /// `timeout` of zero fills what is free now (the rest of the current tick's
            /// sequence), then refuses.
            ///
            /// # Errors
            ///
            /// [`FillError`](crate::FillError) with how many IDs were written and the
            /// refusal of [`next_id_timeout`](Self::next_id_timeout) that stopped it.
            ///
            /// # Examples
            ///
            /// ```
            #[doc = concat!("use atomflake::{Id, Layout, ManualClock, MintError, ", stringify!($ty), "};")]
            /// use std::time::Duration;
            ///
            /// // Four IDs a tick.
            /// let layout = Layout::builder().timestamp_bits(41).node_bits(10).sequence_bits(2).build()?;
            /// let clock = ManualClock::new(1_700_000_000_000);
            #[doc = concat!("let generator = ", $with_clock, "?;")]
            /// let mut ids = [Id::new(0); 6];
            /// // The clock stands still: the tick's four, then the refusal.
            /// let error = generator.fill_timeout(&mut ids, Duration::from_millis(20)).unwrap_err();
            /// assert_eq!(error.filled(), 4);
            /// assert!(matches!(error.error(), MintError::SequenceExhausted { .. }));
            /// // The rest, while another thread moves the clock on.
            /// std::thread::scope(|s| {
            ///     s.spawn(|| {
            ///         std::thread::sleep(Duration::from_millis(20));
            ///         clock.advance(1);
            ///     });
            ///     generator.fill_timeout(&mut ids[4..], Duration::from_secs(60))
            /// })?;
            /// assert!(ids.windows(2).all(|w| w[0] < w[1]));
            /// # Ok::<(), Box<dyn std::error::Error>>(())
            /// ```
            pub fn fill_timeout(
                &$self,
                ids: &mut [$crate::Id],
                timeout: core::time::Duration,
            ) -> Result<(), $crate::FillError> {
                $self.home.core.fill_timeout($node, ids, timeout)
            }

            /// The generator's layout.
            pub fn layout(&self) -> $crate::Layout {
                self.home.core.minter.layout()
            }

            /// The generator's clock.
            pub fn clock(&self) -> &C {
                &self.home.core.clock
            }
        }

        $crate::generator::ids_async::async_minting_methods!($ty, node: |$self| $node, new: $new);
    };
}

pub(crate) use minting_methods;

impl<C> Core<C> {
    /// The layout, for `Debug` output.
    pub(crate) fn layout(&self) -> Layout {
        self.minter.layout()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::{
        FillError, Generator, Id, Layout, LocalGenerator, ManualClock, MintError, Parts, ShardedGenerator,
    };
    use std::sync::Arc;
    use std::time::Duration;

    const T0: u64 = 1_700_000_000_000;

    /// Two IDs a tick.
    fn two_per_tick() -> Layout {
        Layout::builder()
            .timestamp_bits(41)
            .node_bits(10)
            .sequence_bits(1)
            .build()
            .unwrap()
    }

    /// Runs `check` on each generator type, node 7, with a clock at `T0`.
    macro_rules! on_each_type {
        (|$generator:ident, $clock:ident| $check:block) => {{
            {
                let $clock = ManualClock::new(T0);
                let $generator = Generator::with_clock(two_per_tick(), 7, $clock.clone()).unwrap();
                $check
            }
            {
                let $clock = ManualClock::new(T0);
                let $generator = LocalGenerator::with_clock(two_per_tick(), 7, $clock.clone()).unwrap();
                $check
            }
            {
                let $clock = ManualClock::new(T0);
                let $generator = ShardedGenerator::with_clock(two_per_tick(), [7], $clock.clone()).unwrap();
                $check
            }
        }};
    }

    /// Spawns a thread that moves `clock` on by 1 ms `steps` times, 10 ms apart, the first
    /// 10 ms from now.
    fn advance_later(clock: &ManualClock, steps: u32) -> std::thread::JoinHandle<()> {
        let clock = clock.clone();
        std::thread::spawn(move || {
            for _ in 0..steps {
                std::thread::sleep(Duration::from_millis(10));
                clock.advance(1);
            }
        })
    }

    fn id(unix_ms: u64, sequence: u64) -> Id {
        two_per_tick()
            .encode(Parts {
                unix_ms,
                node: 7,
                sequence,
            })
            .unwrap()
    }

    #[test]
    fn a_fill_stopped_by_a_refusal_says_how_many_it_filled_and_leaves_the_rest() {
        on_each_type!(|generator, clock| {
            let mut ids = [Id::new(1); 5];
            let error = generator.fill_timeout(&mut ids, Duration::ZERO).unwrap_err();
            let exhausted = MintError::SequenceExhausted {
                tick: T0 + 1,
                retry_after: Duration::from_millis(1),
            };
            assert_eq!(error, FillError::new(2, exhausted.clone()));
            assert_eq!(ids, [id(T0, 0), id(T0, 1), Id::new(1), Id::new(1), Id::new(1)]);
            assert_eq!(
                crate::Error::from(error.clone()),
                crate::Error::Fill(error.clone())
            );
            assert_eq!(error.into_error(), exhausted);
            // The next fill goes on from there, a tick at a time.
            clock.advance(1);
            let error = generator.fill_timeout(&mut ids[2..], Duration::ZERO).unwrap_err();
            assert_eq!(error.filled(), 2);
            assert_eq!(ids[2..4], [id(T0 + 1, 0), id(T0 + 1, 1)]);
        });
    }

    #[test]
    fn a_fill_waits_for_each_tick_by_one_deadline() {
        on_each_type!(|generator, clock| {
            let mut ids = [Id::new(0); 6];
            // The clock moves on every 10 ms until the fill is done: a fill held up for
            // longer (a loaded machine) finds a later tick, never a spent one.
            let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let mover = {
                let (clock, done) = (clock.clone(), Arc::clone(&done));
                std::thread::spawn(move || {
                    while !done.load(std::sync::atomic::Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(10));
                        clock.advance(1);
                    }
                })
            };
            generator.fill_timeout(&mut ids, Duration::from_secs(60)).unwrap();
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            mover.join().unwrap();
            // Three ticks, each waited for, the first the clock's; both IDs of each.
            let ticks = [ids[0], ids[2], ids[4]].map(|first| two_per_tick().decode(first).unix_ms);
            assert_eq!(ticks[0], T0);
            assert!(ticks[0] < ticks[1] && ticks[1] < ticks[2], "{ticks:?}");
            let expected = ticks.map(|tick| [id(tick, 0), id(tick, 1)]).concat();
            assert_eq!(ids[..], expected[..]);
        });
    }

    #[test]
    fn a_fill_refused_for_good_fills_nothing_and_an_empty_fill_succeeds() {
        let generator = Generator::with_clock(Layout::TWITTER, 7, ManualClock::new(5)).unwrap();
        let mut ids = [Id::new(1); 2];
        let error = generator
            .fill_timeout(&mut ids, Duration::from_secs(60))
            .unwrap_err();
        assert_eq!(error.filled(), 0);
        assert_eq!(
            error.error(),
            &MintError::ClockOutOfSpan(crate::RangeError::TimeBeforeEpoch {
                unix_ms: 5,
                epoch_ms: Layout::TWITTER.epoch_ms()
            })
        );
        assert!(!error.is_transient());
        assert_eq!(ids, [Id::new(1); 2]);
        assert_eq!(generator.fill_timeout(&mut [], Duration::ZERO), Ok(()));
    }

    #[test]
    fn a_run_waits_for_the_next_tick_and_an_empty_run_never_waits() {
        on_each_type!(|generator, clock| {
            assert_eq!(generator.next_run_timeout(5, Duration::ZERO).unwrap().len(), 2);
            // Spent: an empty run is still free.
            assert_eq!(
                generator
                    .next_run_timeout(0, Duration::from_secs(60))
                    .map(|run| run.len()),
                Ok(0)
            );
            assert_eq!(
                generator.next_run_timeout(5, Duration::ZERO),
                Err(MintError::SequenceExhausted {
                    tick: T0 + 1,
                    retry_after: Duration::from_millis(1)
                })
            );
            let mover = advance_later(&clock, 1);
            let run = generator.next_run_timeout(5, Duration::from_secs(60)).unwrap();
            mover.join().unwrap();
            assert_eq!((run.first(), run.len()), (id(T0 + 1, 0), 2));
        });
    }

    #[test]
    fn next_id_timeout_answers_as_try_next_id_with_no_time_and_waits_with_some() {
        on_each_type!(|generator, clock| {
            assert_eq!(generator.next_id_timeout(Duration::ZERO), Ok(id(T0, 0)));
            assert_eq!(
                generator.next_id_timeout(Duration::from_millis(10)),
                Ok(id(T0, 1))
            );
            let refused = generator.next_id_timeout(Duration::ZERO);
            assert_eq!(refused, generator.try_next_id());
            assert_eq!(
                refused,
                Err(MintError::SequenceExhausted {
                    tick: T0 + 1,
                    retry_after: Duration::from_millis(1)
                })
            );
            let mover = advance_later(&clock, 1);
            assert_eq!(generator.next_id_timeout(Duration::MAX), Ok(id(T0 + 1, 0)));
            mover.join().unwrap();
        });
    }
}
