//! The minting machinery every generator type shares: the CAS loop over one state word,
//! the wait for a spent tick, and block reservation.
//!
//! The state word lives in a [`Word`]: an atomic for the shared generators, a plain `Cell`
//! for [`LocalGenerator`](crate::LocalGenerator), so both run the same transition code.
//!
//! # Atomic orderings
//!
//! A state word orders nothing but itself: no other memory is published through it, and an
//! ID is built from the value a CAS won. Uniqueness and per-word order follow from the
//! atomic's single modification order, which every ordering (`Relaxed` included) respects:
//! each successful CAS reads the value the previous one wrote and writes a larger one. So
//! every operation here is `Relaxed`.

use crate::clock::Clock;
use crate::error::Error;
use crate::high_water::{HighWater, Limit, WINDOW};
use crate::id::Id;
use crate::layout::{Layout, SlotPacker, Span};
use crate::state::{StateWord, Step};
use crate::sync::{self, AtomicU64, Ordering, ProcessAtomicU64};
use std::cell::Cell;
use std::time::{Duration, Instant};

/// Where a generator's state word lives. Sealed: implemented for the crate's atomic (the
/// shared generators) and for `Cell<u64>` ([`LocalGenerator`](crate::LocalGenerator)).
pub trait Word: sealed::Sealed {
    /// The current state.
    #[doc(hidden)]
    fn load(&self) -> u64;

    /// Replaces `current` with `new`; fails with the state found when it was not `current`.
    #[doc(hidden)]
    fn advance(&self, current: u64, new: u64) -> Result<(), u64>;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for crate::sync::AtomicU64 {}
    impl Sealed for std::cell::Cell<u64> {}
}

// Relaxed throughout: only the word's own modification order matters (see "Atomic
// orderings" in the crate docs). Weak: a spurious failure just goes round the loop again.
impl Word for AtomicU64 {
    #[inline]
    fn load(&self) -> u64 {
        self.load(Ordering::Relaxed)
    }

    #[inline]
    fn advance(&self, current: u64, new: u64) -> Result<(), u64> {
        self.compare_exchange_weak(current, new, Ordering::Relaxed, Ordering::Relaxed)
            .map(drop)
    }
}

// One thread owns the cell, so nothing can change it between `load` and `advance`.
impl Word for Cell<u64> {
    #[inline]
    fn load(&self) -> u64 {
        self.get()
    }

    #[inline]
    fn advance(&self, _current: u64, new: u64) -> Result<(), u64> {
        self.set(new);
        Ok(())
    }
}

/// How a generator waits when the current tick's sequence is spent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Wait {
    /// Sleep until shortly before the next tick starts, then spin the last stretch
    /// (the default). At saturation a thread then uses a fraction of a core instead of a
    /// whole one, and still mints at the sequence cap: the margin before the tick is learned
    /// from how late the operating system's sleeps actually wake.
    ///
    /// Clocks that cannot tell the time to better than a millisecond
    /// ([`Clock::time_until`] returns `None`, as [`ManualClock`](crate::ManualClock)'s does)
    /// are waited for as with [`Wait::Spin`].
    #[default]
    Sleep,
    /// Spin (with the processor's spin hint), then yield the thread, re-reading the clock
    /// each time; never sleep. The lowest latency at a tick boundary, for a whole core.
    Spin,
}

/// A layout's minting arithmetic, precomputed, how to wait, and the high-water mark (if
/// any); the methods take the state word to advance.
#[derive(Debug)]
pub(crate) struct Minter {
    word: StateWord,
    span: Span,
    layout: Layout,
    wait: Wait,
    /// The first state of a new generator: past the high-water mark of a previous run.
    start: u64,
    limit: Limit,
}

/// Why [`Minter::reserve_at`] reserved nothing.
pub(crate) enum Refusal {
    /// The tick of `unix_ms` is spent; the next free slot is in `tick`.
    Spent { tick: u64, unix_ms: u64 },
    /// The clock is outside the layout's span.
    Fatal(Error),
}

impl Minter {
    /// A minter that waits for spent ticks as `wait` says and mints up to `lead` ticks ahead
    /// of the clock (borrow-ahead; 0: never).
    pub(crate) fn new(layout: Layout, lead: u64, wait: Wait) -> Minter {
        Minter {
            word: StateWord::new(layout.timestamp_bits(), layout.sequence_bits()).with_lead(lead),
            span: layout.span(),
            layout,
            wait,
            start: 0,
            limit: Limit::none(),
        }
    }

    /// This minter with the high-water mark `file`, whose mark was `mark` (Unix ms) when
    /// opened, at the clock time `now` (Unix ms): new generators start past the mark, and
    /// the mark is moved ahead of the clock now, once, before any mint.
    ///
    /// # Errors
    ///
    /// [`Error::HighWaterIo`] when the mark cannot be written.
    pub(crate) fn with_high_water(mut self, file: HighWater, mark: u64, now: u64) -> Result<Minter, Error> {
        self.start = self.first_slot_from(mark);
        self.limit = Limit::file(file);
        self.raise_mark(mark.max(now), true)?;
        Ok(self)
    }

    /// The state a new generator starts from.
    pub(crate) fn start(&self) -> u64 {
        self.start
    }

    /// The first slot whose tick starts at or after `unix_ms` (the end of the span when
    /// there is none).
    fn first_slot_from(&self, unix_ms: u64) -> u64 {
        let Some(since_epoch) = unix_ms.checked_sub(self.layout.epoch_ms()) else {
            return 0;
        };
        let tick = since_epoch.div_ceil(self.layout.tick_ms());
        if tick > self.layout.max_tick() {
            return u64::MAX;
        }
        self.word.first_slot(tick)
    }

    /// Moves the mark file to cover the time `unix_ms` with a window and a half beyond it,
    /// and the minting limits with it. `wait`: wait for a write in progress in another
    /// thread (else leave the mark to it).
    fn raise_mark(&self, unix_ms: u64, wait: bool) -> Result<(), Error> {
        let Some(file) = &self.limit.file else {
            return Ok(());
        };
        let window = u64::try_from(WINDOW.as_millis()).unwrap_or(u64::MAX);
        let needed = unix_ms.saturating_add(window + window / 2);
        if let Some(mark) = file.raise(needed, wait)? {
            // fetch_max: writers may finish out of order; a limit only grows. Relaxed: the
            // file write these follow is done (returned) before they are stored.
            self.limit
                .covered
                .fetch_max(self.first_slot_from(mark), Ordering::Relaxed);
            self.limit
                .early
                .fetch_max(self.first_slot_from(mark - window / 2), Ordering::Relaxed);
        }
        Ok(())
    }

    /// The slow path of a mint at `slot` past the early limit: move the mark, waiting for
    /// the disk only when `slot` is not covered yet.
    #[cold]
    #[inline(never)]
    fn past_early_limit(&self, slot: u64) -> Result<(), Error> {
        let tick_end = self
            .layout
            .unix_ms_of_tick(self.word.tick(slot))
            .saturating_add(self.layout.tick_ms());
        // Relaxed: see `raise_mark`.
        let covered = slot < self.limit.covered.load(Ordering::Relaxed);
        self.raise_mark(tick_end, !covered)
    }

    /// The layout this minter serves.
    pub(crate) fn layout(&self) -> Layout {
        self.layout
    }

    /// One slot now, or the error `try_next_id` reports: never waits.
    #[inline]
    pub(crate) fn try_reserve_one<W: Word, C: Clock>(&self, state: &W, clock: &C) -> Result<u64, Error> {
        let refusal = match self.reserve_at(state, clock.unix_ms(), 1) {
            Ok((slot, _)) => return Ok(slot),
            Err(refusal) => refusal,
        };
        // The clock may lag (a coarse clock): ask again with a precise read before
        // reporting exhaustion.
        let refusal = match refusal {
            Refusal::Spent { .. } => match self.reserve_at(state, clock.precise_unix_ms(), 1) {
                Ok((slot, _)) => return Ok(slot),
                Err(refusal) => refusal,
            },
            fatal @ Refusal::Fatal(_) => fatal,
        };
        Err(match refusal {
            Refusal::Spent { tick, unix_ms } => Error::SequenceExhausted {
                tick,
                retry_after: Duration::from_millis(self.layout.unix_ms_of_tick(tick).saturating_sub(unix_ms)),
            },
            Refusal::Fatal(error) => error,
        })
    }

    /// Reserves `1..=want` slots, waiting while the current tick is spent: the first slot
    /// and how many.
    ///
    /// Panics when the clock is outside the layout's span (the generators' `# Panics`).
    #[inline]
    pub(crate) fn reserve<W: Word, C: Clock>(&self, state: &W, clock: &C, want: u64) -> (u64, u64) {
        match self.reserve_at(state, clock.unix_ms(), want) {
            Ok(block) => block,
            Err(refusal) => self.wait_for_block(state, clock, refusal, want),
        }
    }

    /// One attempt at the time `unix_ms`: the CAS loop. Reserves `1..=want` slots of one
    /// tick (`want` ≥ 1).
    #[inline]
    pub(crate) fn reserve_at<W: Word>(
        &self,
        state_word: &W,
        unix_ms: u64,
        want: u64,
    ) -> Result<(u64, u64), Refusal> {
        let now_tick = self.span.tick_at(unix_ms).map_err(Refusal::Fatal)?;
        let mut state = state_word.load();
        loop {
            match self.word.step(state, now_tick) {
                Step::Mint { slot } => {
                    if slot >= self.limit.early() {
                        self.past_early_limit(slot).map_err(Refusal::Fatal)?;
                    }
                    let count = self.word.block(slot, want);
                    // Winning the CAS is what makes the slots ours; on failure `actual` is
                    // a newer state to step from.
                    match state_word.advance(state, slot + count) {
                        Ok(()) => return Ok((slot, count)),
                        Err(actual) => state = actual,
                    }
                }
                Step::Wait { tick } => return Err(Refusal::Spent { tick, unix_ms }),
                Step::End => {
                    // Every slot is used: the next ID would need a time past the end.
                    let end_ms = self.layout.end_unix_ms();
                    return Err(Refusal::Fatal(Error::TimePastEnd {
                        unix_ms: end_ms,
                        end_ms,
                    }));
                }
            }
        }
    }

    /// The slow path of [`reserve`](Self::reserve): wait for a free slot.
    #[cold]
    #[inline(never)]
    fn wait_for_block<W: Word, C: Clock>(
        &self,
        state: &W,
        clock: &C,
        mut refusal: Refusal,
        want: u64,
    ) -> (u64, u64) {
        let mut backoff = Backoff::default();
        // The tick last slept for: sleep once per tick waited for, then spin.
        let mut napped = None;
        loop {
            match refusal {
                Refusal::Fatal(error) => panic!("atomflake: cannot mint an id: {error}"),
                Refusal::Spent { tick, .. } => {
                    if self.wait == Wait::Sleep && napped != Some(tick) {
                        nap(clock, self.layout.unix_ms_of_tick(tick));
                        napped = Some(tick);
                    }
                }
            }
            backoff.snooze();
            match self.reserve_at(state, clock.precise_unix_ms(), want) {
                Ok(block) => return block,
                Err(again) => refusal = again,
            }
        }
    }

    /// Fills `ids` with new IDs, reserved a tick's block at a time.
    pub(crate) fn fill<W: Word, C: Clock>(&self, state: &W, clock: &C, packer: SlotPacker, ids: &mut [Id]) {
        let mut rest = ids;
        while !rest.is_empty() {
            let block = self.reserve(state, clock, rest.len() as u64);
            rest = write_block(packer, block, rest);
        }
    }

    /// [`reserve`](Self::reserve) for async code: waits for a spent tick without blocking
    /// the runtime thread. Waits longer than [`ASYNC_SLEEP_OVER`] sleep on Tokio's timer
    /// (to within that of the tick); shorter ones yield to the runtime between clock reads,
    /// since Tokio's timer has a 1 ms resolution and would oversleep a whole tick.
    #[cfg(feature = "tokio")]
    pub(crate) async fn reserve_async<W: Word, C: Clock>(
        &self,
        state: &W,
        clock: &C,
        want: u64,
    ) -> (u64, u64) {
        let mut unix_ms = clock.unix_ms();
        loop {
            match self.reserve_at(state, unix_ms, want) {
                Ok(block) => return block,
                Err(Refusal::Fatal(error)) => panic!("atomflake: cannot mint an id: {error}"),
                Err(Refusal::Spent { tick, .. }) => {
                    let left = clock.time_until(self.layout.unix_ms_of_tick(tick));
                    match left.and_then(|left| left.checked_sub(ASYNC_SLEEP_OVER)) {
                        Some(sleep) if self.wait == Wait::Sleep => tokio::time::sleep(sleep).await,
                        _ => tokio::task::yield_now().await,
                    }
                }
            }
            unix_ms = clock.precise_unix_ms();
        }
    }

    /// `n` new IDs in one `Vec`, as [`fill_async`](Self::fill_async) writes them.
    #[cfg(feature = "tokio")]
    pub(crate) async fn ids_async<W: Word, C: Clock>(
        &self,
        state: &W,
        clock: &C,
        packer: SlotPacker,
        n: usize,
    ) -> Vec<Id> {
        let mut ids = vec![Id::new(0); n];
        self.fill_async(state, clock, packer, &mut ids).await;
        ids
    }

    /// [`fill`](Self::fill) with [`reserve_async`](Self::reserve_async).
    #[cfg(feature = "tokio")]
    pub(crate) async fn fill_async<W: Word, C: Clock>(
        &self,
        state: &W,
        clock: &C,
        packer: SlotPacker,
        ids: &mut [Id],
    ) {
        let mut rest = ids;
        while !rest.is_empty() {
            let block = self.reserve_async(state, clock, rest.len() as u64).await;
            rest = write_block(packer, block, rest);
        }
    }

    /// `n` IDs as an iterator; the first block is reserved now.
    pub(crate) fn ids<'a, W: Word, C: Clock>(
        &'a self,
        state: &'a W,
        clock: &'a C,
        packer: SlotPacker,
        n: u64,
    ) -> Ids<'a, C, W> {
        let (slot, count) = if n == 0 {
            (0, 0)
        } else {
            self.reserve(state, clock, n)
        };
        Ids {
            minter: self,
            state,
            clock,
            packer,
            slot,
            in_block: count,
            after_block: n - count,
        }
    }
}

/// Writes the IDs of the reserved `(first slot, count)` to the start of `ids`; returns the
/// rest of `ids`.
fn write_block(packer: SlotPacker, (mut slot, count): (u64, u64), ids: &mut [Id]) -> &mut [Id] {
    let (block, rest) = ids.split_at_mut(usize::try_from(count).unwrap_or(usize::MAX));
    for id in block {
        *id = packer.id(slot);
        slot += 1;
    }
    rest
}

/// Async waits longer than this sleep on Tokio's timer, which wakes up to 1 ms late; this
/// much before the tick is left to yielding.
#[cfg(feature = "tokio")]
const ASYNC_SLEEP_OVER: Duration = Duration::from_millis(2);

/// IDs reserved by `next_ids` ([`Generator::next_ids`](crate::Generator::next_ids) and the
/// other generators'), a tick's block at a time.
///
/// `W` is where the generator keeps its state: the default for the shared generators,
/// `Cell<u64>` for [`LocalGenerator`](crate::LocalGenerator).
#[derive(Debug)]
#[must_use = "the IDs of the first block are reserved: use them or they are lost"]
pub struct Ids<'a, C, W = AtomicU64> {
    minter: &'a Minter,
    state: &'a W,
    clock: &'a C,
    packer: SlotPacker,
    /// The next slot of the current block.
    slot: u64,
    /// IDs left in the current block.
    in_block: u64,
    /// IDs still to reserve after it.
    after_block: u64,
}

impl<C: Clock, W: Word> Iterator for Ids<'_, C, W> {
    type Item = Id;

    #[inline]
    fn next(&mut self) -> Option<Id> {
        if self.in_block == 0 {
            if self.after_block == 0 {
                return None;
            }
            (self.slot, self.in_block) = self.minter.reserve(self.state, self.clock, self.after_block);
            self.after_block -= self.in_block;
        }
        let id = self.packer.id(self.slot);
        self.slot += 1;
        self.in_block -= 1;
        Some(id)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = usize::try_from(self.in_block + self.after_block).unwrap_or(usize::MAX);
        (left, Some(left))
    }
}

impl<C: Clock, W: Word> ExactSizeIterator for Ids<'_, C, W> {}

impl<C: Clock, W: Word> core::iter::FusedIterator for Ids<'_, C, W> {}

/// How long before a tick boundary [`nap`] wakes, in ns: learned from how late sleeps
/// wake. Process-wide, since that lateness belongs to the operating system, not to one
/// generator.
static MARGIN_NS: ProcessAtomicU64 = ProcessAtomicU64::new(200_000);
const MARGIN_MIN: Duration = Duration::from_micros(20);
const MARGIN_MAX: Duration = Duration::from_millis(1);

/// Sleeps until shortly before `clock` reads `unix_ms`, when the clock can say how long
/// that is and it is longer than the margin; the caller spins the rest.
///
/// The margin tracks about the 90th percentile of how late sleeps wake: up by 9/64 after a
/// wake later than the margin, down by 1/64 otherwise (including when the wait was too
/// short to sleep), which settles where one wake in ten is later. A late wake costs
/// latency, not IDs: the tick's sequence is still there when the thread wakes, unless it
/// wakes after the whole tick has passed.
#[cold]
fn nap<C: Clock>(clock: &C, unix_ms: u64) {
    let Some(left) = clock.time_until(unix_ms) else {
        return;
    };
    // Relaxed: a tuning value, ordering nothing else.
    let margin = Duration::from_nanos(MARGIN_NS.load(Ordering::Relaxed));
    let mut next = margin.saturating_sub(margin / 64);
    if let Some(sleep) = left.checked_sub(margin).filter(|sleep| !sleep.is_zero()) {
        let start = Instant::now();
        std::thread::sleep(sleep);
        if start.elapsed() > sleep + margin {
            next = margin + margin * 9 / 64;
        }
    }
    let next = next.clamp(MARGIN_MIN, MARGIN_MAX);
    MARGIN_NS.store(
        u64::try_from(next.as_nanos()).unwrap_or(u64::MAX),
        Ordering::Relaxed,
    );
}

/// Waits between attempts: spin hints doubling up to 64, then yields. Never sleeps.
#[derive(Debug, Default)]
struct Backoff {
    step: u32,
}

impl Backoff {
    /// After this many doublings (1 + 2 + … + 64 spin hints, a few µs), yield instead.
    const SPIN_STEPS: u32 = 7;

    fn snooze(&mut self) {
        if self.step < Backoff::SPIN_STEPS && !cfg!(loom) {
            for _ in 0..1u32 << self.step {
                sync::spin_loop();
            }
            self.step += 1;
        } else {
            sync::yield_now();
        }
    }
}
