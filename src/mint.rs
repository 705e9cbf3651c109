//! The minting machinery every generator type shares: the CAS loop over one state word,
//! the wait for a spent tick, and block reservation.
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
use crate::id::Id;
use crate::layout::{Layout, SlotPacker, Span};
use crate::state::{StateWord, Step};
use crate::sync::{self, AtomicU64, Ordering};
use std::time::Duration;

/// A layout's minting arithmetic, precomputed; the methods take the state word to advance.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Minter {
    word: StateWord,
    span: Span,
    layout: Layout,
}

/// Why [`Minter::reserve_at`] reserved nothing.
pub(crate) enum Refusal {
    /// The tick of `unix_ms` is spent; the next free slot is in `tick`.
    Spent { tick: u64, unix_ms: u64 },
    /// The clock is outside the layout's span.
    Fatal(Error),
}

impl Minter {
    pub(crate) fn new(layout: Layout) -> Minter {
        Minter {
            word: StateWord::new(layout.timestamp_bits(), layout.sequence_bits()),
            span: layout.span(),
            layout,
        }
    }

    /// The layout this minter serves.
    pub(crate) fn layout(&self) -> Layout {
        self.layout
    }

    /// One slot now, or the error `try_next_id` reports: never waits.
    #[inline]
    pub(crate) fn try_reserve_one<C: Clock>(&self, state: &AtomicU64, clock: &C) -> Result<u64, Error> {
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
    pub(crate) fn reserve<C: Clock>(&self, state: &AtomicU64, clock: &C, want: u64) -> (u64, u64) {
        match self.reserve_at(state, clock.unix_ms(), want) {
            Ok(block) => block,
            Err(refusal) => self.wait_for_block(state, clock, refusal, want),
        }
    }

    /// One attempt at the time `unix_ms`: the CAS loop. Reserves `1..=want` slots of one
    /// tick (`want` ≥ 1).
    #[inline]
    pub(crate) fn reserve_at(
        &self,
        state_word: &AtomicU64,
        unix_ms: u64,
        want: u64,
    ) -> Result<(u64, u64), Refusal> {
        let now_tick = self.span.tick_at(unix_ms).map_err(Refusal::Fatal)?;
        // Relaxed: only this word's modification order matters (see "Atomic orderings").
        let mut state = state_word.load(Ordering::Relaxed);
        loop {
            match self.word.step(state, now_tick) {
                Step::Mint { slot } => {
                    let count = self.word.block(slot, want);
                    // Relaxed on success and failure: winning the CAS is what makes the
                    // slots ours; on failure `actual` is a newer state to step from.
                    match state_word.compare_exchange_weak(
                        state,
                        slot + count,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => return Ok((slot, count)),
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
    fn wait_for_block<C: Clock>(
        &self,
        state: &AtomicU64,
        clock: &C,
        mut refusal: Refusal,
        want: u64,
    ) -> (u64, u64) {
        let mut backoff = Backoff::default();
        loop {
            if let Refusal::Fatal(error) = refusal {
                panic!("atomflake: cannot mint an id: {error}");
            }
            backoff.snooze();
            match self.reserve_at(state, clock.precise_unix_ms(), want) {
                Ok(block) => return block,
                Err(again) => refusal = again,
            }
        }
    }

    /// Fills `ids` with new IDs, reserved a tick's block at a time.
    pub(crate) fn fill<C: Clock>(&self, state: &AtomicU64, clock: &C, packer: SlotPacker, ids: &mut [Id]) {
        let mut rest = ids;
        while !rest.is_empty() {
            let (mut slot, count) = self.reserve(state, clock, rest.len() as u64);
            let (block, tail) = rest.split_at_mut(usize::try_from(count).unwrap_or(usize::MAX));
            for id in block {
                *id = packer.id(slot);
                slot += 1;
            }
            rest = tail;
        }
    }

    /// `n` IDs as an iterator; the first block is reserved now.
    pub(crate) fn ids<'a, C: Clock>(
        &'a self,
        state: &'a AtomicU64,
        clock: &'a C,
        packer: SlotPacker,
        n: u64,
    ) -> Ids<'a, C> {
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

/// IDs reserved by `next_ids` ([`Generator::next_ids`](crate::Generator::next_ids) and the
/// other generators'), a tick's block at a time.
#[derive(Debug)]
#[must_use = "the IDs of the first block are reserved: use them or they are lost"]
pub struct Ids<'a, C> {
    minter: &'a Minter,
    state: &'a AtomicU64,
    clock: &'a C,
    packer: SlotPacker,
    /// The next slot of the current block.
    slot: u64,
    /// IDs left in the current block.
    in_block: u64,
    /// IDs still to reserve after it.
    after_block: u64,
}

impl<C: Clock> Iterator for Ids<'_, C> {
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

impl<C: Clock> ExactSizeIterator for Ids<'_, C> {}

impl<C: Clock> core::iter::FusedIterator for Ids<'_, C> {}

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
