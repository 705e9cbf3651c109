//! The CAS loop every generator type runs over its state word.
//!
//! A mint loads the state, reads the clock, asks the pure transition ([`state`](super::state)) for the
//! next step and, for a slot, tries to move the state past it with one compare-and-swap;
//! a failed CAS steps again from the value it found. Waiting for a spent tick is in
//! [`wait`], the high-water limit in [`keeper`](super::keeper), the check for
//! a child of a fork in [`fork`](super::fork).
//!
//! Both limits are folded into one slot, the minter's **limit**: below it a mint needs no
//! other work. A slot at or past it takes the cold path ([`Minter::pass`]), which checks
//! the process when the slot's tick is one not checked yet, asks the mark's keeper when
//! the slot is past the mark's early limit, and moves the limit to the lower of the two.
//!
//! # The fast path and the window
//!
//! Each state word carries a [`Window`]: the end of the tick the cold path last minted in,
//! and a limit no higher than the minter's limit and the next tick's opening. While the
//! clock reads a time before that end, a mint is the fast path: one compare of the time,
//! one load and compare of the state, one CAS (a store for a `LocalGenerator`), and the ID
//! is the state XOR the node's key. Neither the tick of the time nor a step of the
//! transition is computed, and for a sharded generator nothing outside the shard's own
//! cache line is read. What the fast path mints is what the transition would mint: the
//! window's opener left the state past the tick's first slot and the limit stops it
//! before the tick's end, so the state is an unused slot of the window's tick, and the
//! clock is in that tick or behind it, where the transition continues the state. A lost
//! CAS pauses and checks the state again. Everything else (a new tick, a spent one, a
//! slot at a limit) is the full loop, which opens the window on the tick of each slot it
//! mints.
//!
//! # Atomic orderings
//!
//! A state word orders nothing but itself: no other memory is published through it, and an
//! ID is built from the value a CAS won. Uniqueness and per-word order follow from the
//! atomic's single modification order, which every ordering (`Relaxed` included) respects:
//! each successful CAS reads the value the previous one wrote and writes a larger one. So
//! every operation on it is `Relaxed`.
//!
//! The limit is a `Relaxed` hint too: it only grows, and it is never past either limit it
//! stands for (each only grows, so the lower of two values read is never past what both
//! allow now). A stale value sends a mint to the cold path, which decides.
//!
//! A window's end and limit are each stored with `Release` after its opener's CAS and
//! loaded with `Acquire` before the state: a thread that sees either value of a window
//! sees a state past that window's first slot, so the fast path never mints a slot of an
//! earlier tick than the window's, nor an opening (a CAS from a stale state fails anyway
//! on every machine; what the pairs exclude is a load-buffering cycle that the language's
//! memory model allows and no x86 or ARM core performs). The two values may come from
//! different windows: each is one that some opener computed, safe on its own (see
//! [`Window`]). Uniqueness never rests on the window: every slot is still won by the CAS
//! on the state. The window's atomics, like the limit, are the standard ones under loom
//! too (see [`AtomicWord`]).

use crate::MintError;
use crate::clock::Clock;
use crate::format::layout::{Layout, Span};
use crate::generator::fork::Birth;
use crate::generator::keeper::{Finish, Mark, Slots, Uncovered};
use crate::generator::state::{StateWord, Step};
use crate::generator::wait::{self, Backoff, Sleep, Until, Wait};
pub(crate) use crate::generator::word::{AtomicWord, LocalWord, Window, Windowed, Word};
use crate::sync::{Ordering, ProcessAtomicU64};
use std::time::Duration;

/// A layout's minting arithmetic, precomputed, how to wait, and the high-water mark; the
/// methods take the state word to advance and the clock to read.
#[derive(Debug)]
pub(crate) struct Minter {
    word: StateWord,
    span: Span,
    layout: Layout,
    wait: Wait,
    /// The first state of a new state word: past the high-water mark of a previous run.
    start: u64,
    mark: Mark,
    /// The process the minter was built in, and the ticks checked against it.
    birth: Birth,
    /// Slots at or past this take the cold path ([`pass`](Self::pass)): the lower of the
    /// mark's early limit and the first slot of a tick not checked for a fork. Only grows.
    limit: ProcessAtomicU64,
}

/// Why [`Minter::reserve_at`] reserved nothing.
#[derive(Debug)]
pub(crate) enum Blocked {
    /// The tick of `unix_ms` is spent; the next free slot is in `tick`.
    Spent { tick: u64, unix_ms: u64 },
    /// `slot` is past the stored high-water mark (or the store's hold), and the keeper is
    /// moving it; `refusal` is what a mint that does not wait reports: the store in
    /// progress ([`MintError::MarkPending`]), or what its last attempt reported, if it
    /// failed.
    Uncovered { slot: u64, refusal: MintError },
    /// Nothing can be minted: the clock is outside the layout's span, or the mark cannot
    /// be stored.
    Fatal(MintError),
}

impl Minter {
    /// A minter that waits for spent ticks as `wait` says and mints up to `lead` ticks ahead
    /// of the clock (borrow-ahead; 0: never).
    pub(crate) fn new(layout: Layout, lead: u64, wait: Wait) -> Minter {
        Minter {
            word: StateWord::of(&layout).with_lead(lead),
            span: layout.span(),
            layout,
            wait,
            start: 0,
            mark: Mark::none(),
            birth: Birth::here(),
            limit: ProcessAtomicU64::new(0),
        }
    }

    /// The step from one slot to the next of the same tick.
    #[inline]
    pub(crate) fn unit(&self) -> u64 {
        self.word.unit()
    }

    /// The slot arithmetic a [`Mark`] is kept in.
    pub(crate) fn slots(&self) -> Slots {
        Slots {
            layout: self.layout,
            word: self.word,
        }
    }

    /// This minter with a high-water mark that stood at `stored` (Unix ms) in its store:
    /// state words start past it.
    pub(crate) fn with_mark(mut self, mark: Mark, stored: u64) -> Minter {
        self.start = self.slots().first_from(stored);
        self.mark = mark;
        self.limit = ProcessAtomicU64::new(self.birth.limit().min(self.mark.early()));
        self
    }

    /// This minter, built in this process while its clock read `unix_ms`: the slots of
    /// that tick and earlier ones need no check for a fork.
    pub(crate) fn built_at(mut self, unix_ms: u64) -> Minter {
        if let Ok(tick) = self.span.tick_at(unix_ms) {
            self.birth = Birth::checked_until(self.word.next_tick(self.word.first_slot(tick)));
        }
        self.limit = ProcessAtomicU64::new(self.birth.limit().min(self.mark.early()));
        self
    }

    /// What a node's state word tells the high-water store when it is dropped.
    pub(crate) fn finisher(&self) -> Option<Finish> {
        self.mark.finisher(self.start)
    }

    /// The state a new state word starts from.
    pub(crate) fn start(&self) -> u64 {
        self.start
    }

    /// The layout this minter serves.
    pub(crate) fn layout(&self) -> Layout {
        self.layout
    }

    /// This minter in a process that it was built in `pid` for: a test's child of a fork.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn born_in(mut self, pid: u32) -> Minter {
        self.birth.born_in(pid);
        self
    }

    /// The addresses of the limits that spare a mint the check for a fork: its own and its
    /// [`Birth`]'s, which a child of a fork sets to 0 ([`atfork`](super::atfork)).
    pub(crate) fn limit_addresses(&self) -> [*mut u64; 2] {
        [self.limit.as_ptr(), self.birth.limit_address()]
    }

    /// The slot at or past which a mint takes the cold path.
    #[inline]
    fn limit(&self) -> u64 {
        // Relaxed: see "Atomic orderings" above.
        self.limit.load(Ordering::Relaxed)
    }

    /// For a slot at or past the limit: checks the process if the slot's tick is not
    /// checked yet, and asks the mark's keeper if the slot is past the mark's early limit
    /// (the process first: a child's keeper is its parent's); then moves the limit to the
    /// lower of the two.
    #[cold]
    #[inline(never)]
    fn pass(&self, slot: u64) -> Result<(), Blocked> {
        if slot >= self.birth.limit() {
            let start = self.layout.unix_ms_of_tick(self.word.tick(slot));
            let tick = start..start.saturating_add(self.layout.tick_ms());
            self.birth
                .check_tick(tick, self.word.next_tick(slot))
                .map_err(Blocked::Fatal)?;
        }
        if slot >= self.mark.early() {
            self.mark.check(slot).map_err(|uncovered| match uncovered {
                Uncovered::Pending(refusal) | Uncovered::Failed(refusal) => {
                    Blocked::Uncovered { slot, refusal }
                }
                Uncovered::Ended(error) => Blocked::Fatal(error),
            })?;
        }
        // Relaxed: see "Atomic orderings" above.
        self.limit
            .fetch_max(self.birth.limit().min(self.mark.early()), Ordering::Relaxed);
        Ok(())
    }

    /// The common case of a mint, small enough to inline: while the clock reads a time in
    /// the state word's [`Window`], the state itself, if it is below the window's limit,
    /// with one CAS. No arithmetic on the time, no step of the transition: the window
    /// stands for both (see [`Window`]). `None` for everything else (a new tick, a spent
    /// tick, a slot at a limit), which the callers hand to the full loop,
    /// [`reserve_at`](Self::reserve_at), from a fresh load.
    #[inline]
    fn reserve_fast<W: Windowed>(&self, state_word: &W, unix_ms: u64, want: u64) -> Option<(u64, u64)> {
        let window = state_word.window();
        if unix_ms >= window.end_ms {
            return None;
        }
        let mut state = state_word.load();
        loop {
            if state >= window.limit {
                return None;
            }
            let count = if want == 1 {
                1
            } else {
                self.word.below(state, window.limit, want)
            };
            // A lost CAS means another mint moved the state on, still past the window's
            // first slot: the same checks decide for the state after a pause, which lets the
            // winner's core (or sibling hyperthread) get on rather than fight it for the
            // cache line at once, read fresh, as the value the CAS found is likely stale by
            // then.
            if state_word
                .advance(state, state + count * self.word.unit())
                .is_ok()
            {
                return Some((state, count));
            }
            crate::sync::spin_loop();
            state = state_word.load();
        }
    }

    /// One slot now, or the error `try_next_id` reports: never waits.
    #[inline]
    pub(crate) fn try_reserve_one<W: Windowed, C: Clock>(
        &self,
        state: &W,
        clock: &C,
    ) -> Result<u64, MintError> {
        self.try_reserve(state, clock, 1).map(|(slot, _)| slot)
    }

    /// `1..=want` slots of the current tick now (the first slot and how many), or the
    /// error `try_next_id` reports: never waits. `want` ≥ 1.
    #[inline]
    pub(crate) fn try_reserve<W: Windowed, C: Clock>(
        &self,
        state: &W,
        clock: &C,
        want: u64,
    ) -> Result<(u64, u64), MintError> {
        match self.reserve_fast(state, clock.unix_ms(), want) {
            Some(block) => Ok(block),
            None => self
                .try_reserve_full(state, clock, want)
                .map_err(|refusal| self.error_of(refusal)),
        }
    }

    /// The full loop, and for a spent tick once more with a precise read: what
    /// [`try_reserve`](Self::try_reserve) decides past its fast path, before the refusal
    /// becomes an error. Out of line, for the fast path's sake.
    #[cold]
    #[inline(never)]
    fn try_reserve_full<W: Windowed, C: Clock>(
        &self,
        state: &W,
        clock: &C,
        want: u64,
    ) -> Result<(u64, u64), Blocked> {
        match self.reserve_at(state, clock.unix_ms(), want) {
            // The clock may lag (a coarse clock): ask again with a precise read before
            // reporting exhaustion.
            Err(Blocked::Spent { .. }) => self.reserve_at(state, clock.precise_unix_ms(), want),
            answer => answer,
        }
    }

    /// Reserves `1..=want` slots (`want` ≥ 1), waiting while the refusal is transient for
    /// at most `timeout`: [`reserve_until`](Self::reserve_until) with the deadline taken
    /// when the fast path finds no slot.
    #[inline]
    pub(crate) fn reserve_for<W: Windowed, C: Clock>(
        &self,
        state: &W,
        clock: &C,
        want: u64,
        timeout: Duration,
    ) -> Result<(u64, u64), MintError> {
        self.reserve_until_with(state, clock, want, || Until::timeout(timeout))
    }

    /// Reserves `1..=want` slots (`want` ≥ 1), waiting while the refusal is transient
    /// until `until`'s deadline ([`Until::Deadline`]); then, or at once for a permanent
    /// refusal, the error [`try_reserve`](Self::try_reserve) would report.
    #[inline]
    pub(crate) fn reserve_until<W: Windowed, C: Clock>(
        &self,
        state: &W,
        clock: &C,
        want: u64,
        until: Until,
    ) -> Result<(u64, u64), MintError> {
        self.reserve_until_with(state, clock, want, || until)
    }

    /// [`reserve_until`](Self::reserve_until) with the deadline made by `until` only when
    /// the fast path finds no slot: a mint that gets one reads no `Instant`.
    #[inline]
    fn reserve_until_with<W: Windowed, C: Clock>(
        &self,
        state: &W,
        clock: &C,
        want: u64,
        until: impl FnOnce() -> Until,
    ) -> Result<(u64, u64), MintError> {
        match self.reserve_fast(state, clock.unix_ms(), want) {
            Some(block) => Ok(block),
            None => self.reserve_until_slow(state, clock, want, until()),
        }
    }

    /// [`reserve_until`](Self::reserve_until) past its fast path.
    #[cold]
    #[inline(never)]
    fn reserve_until_slow<W: Windowed, C: Clock>(
        &self,
        state: &W,
        clock: &C,
        want: u64,
        until: Until,
    ) -> Result<(u64, u64), MintError> {
        match self.try_reserve_full(state, clock, want) {
            Ok(block) => Ok(block),
            Err(refusal) => self.wait_for_block(state, clock, refusal, want, until),
        }
    }

    /// The error `try_next_id` reports for `refusal`.
    #[cold]
    fn error_of(&self, refusal: Blocked) -> MintError {
        // A child of a fork is told so rather than asked to retry.
        if !matches!(refusal, Blocked::Fatal(_))
            && let Err(error) = self.birth.check()
        {
            return error;
        }
        match refusal {
            Blocked::Spent { tick, unix_ms } => MintError::SequenceExhausted {
                tick,
                retry_after: Duration::from_millis(self.layout.unix_ms_of_tick(tick).saturating_sub(unix_ms)),
            },
            Blocked::Uncovered { refusal, .. } => refusal,
            Blocked::Fatal(error) => error,
        }
    }

    /// What [`try_reserve`](Self::try_reserve) would answer now, without reserving a slot:
    /// `Ok` when a slot is free, else the error it would report. The state word is read,
    /// never advanced. A free slot at or past the limit is passed as a mint passes it (the
    /// process checked, the keeper asked to move the mark past it), which takes no slot.
    #[cold]
    pub(crate) fn probe<W: Word, C: Clock>(&self, state: &W, clock: &C) -> Result<(), MintError> {
        let refusal = match self.probe_at(state, clock.unix_ms()) {
            Ok(()) => return Ok(()),
            Err(refusal) => refusal,
        };
        // As `try_reserve_full`: a lagging clock is read precisely before a spent tick is
        // reported.
        let refusal = match refusal {
            Blocked::Spent { .. } => match self.probe_at(state, clock.precise_unix_ms()) {
                Ok(()) => return Ok(()),
                Err(refusal) => refusal,
            },
            other => other,
        };
        Err(self.error_of(refusal))
    }

    /// [`probe`](Self::probe) at the time `unix_ms`: the step the CAS loop would take from
    /// the state as it is, without the CAS.
    fn probe_at<W: Word>(&self, state_word: &W, unix_ms: u64) -> Result<(), Blocked> {
        let now_tick = self.tick_at(unix_ms)?;
        match self.word.step(state_word.load(), now_tick) {
            Step::Mint { slot } if slot < self.limit() => Ok(()),
            Step::Mint { slot } => self.pass(slot),
            Step::Wait { tick } => Err(Blocked::Spent { tick, unix_ms }),
            Step::End => Err(Blocked::Fatal(MintError::SpanSpent {
                end_ms: self.layout.end_unix_ms(),
            })),
        }
    }

    /// Reserves `1..=want` slots, waiting while the current tick is spent: the first slot
    /// and how many.
    ///
    /// Panics when nothing can be minted ([`Blocked::Fatal`], the generators' `# Panics`).
    #[inline]
    pub(crate) fn reserve<W: Windowed, C: Clock>(&self, state: &W, clock: &C, want: u64) -> (u64, u64) {
        match self.reserve_fast(state, clock.unix_ms(), want) {
            Some(block) => block,
            None => self.reserve_slow(state, clock, want),
        }
    }

    /// [`reserve`](Self::reserve) past its fast path: the full loop, then the wait.
    #[cold]
    #[inline(never)]
    fn reserve_slow<W: Windowed, C: Clock>(&self, state: &W, clock: &C, want: u64) -> (u64, u64) {
        self.reserve_at(state, clock.unix_ms(), want)
            .or_else(|refusal| self.wait_for_block(state, clock, refusal, want, Until::Patient))
            .unwrap_or_else(|error| panic!("atomflake: cannot mint an id: {error}"))
    }

    /// One attempt at the time `unix_ms`: the CAS loop. Reserves `1..=want` slots of one
    /// tick (`want` ≥ 1), then opens the word's window on that tick. Always inlined into
    /// the cold paths that call it, so that a tick's first mint makes one call, not two.
    #[expect(
        clippy::inline_always,
        reason = "measured: a tick's first mint makes 25 instructions fewer inlined"
    )]
    #[inline(always)]
    pub(crate) fn reserve_at<W: Windowed>(
        &self,
        state_word: &W,
        unix_ms: u64,
        want: u64,
    ) -> Result<(u64, u64), Blocked> {
        let now_tick = self.tick_at(unix_ms)?;
        let (slot, count) = self.reserve_in(state_word, now_tick, unix_ms, want, |slot| {
            if slot < self.limit() {
                return Ok(());
            }
            self.pass(slot)
        })?;
        // The state is past `slot` now: the window of its tick may open (see `Window`).
        state_word.open(Window {
            end_ms: self.layout.unix_ms_of_tick(self.word.tick(slot) + 1),
            limit: self.limit().min(self.word.next_tick(slot)),
        });
        Ok((slot, count))
    }

    /// [`reserve_at`](Self::reserve_at) with the high-water limit decided by `covered`,
    /// which says whether a slot may be minted, and no window.
    #[cfg(feature = "raw")]
    #[inline]
    pub(crate) fn reserve_within<W: Word>(
        &self,
        state_word: &W,
        unix_ms: u64,
        want: u64,
        covered: impl Fn(u64) -> Result<(), Blocked>,
    ) -> Result<(u64, u64), Blocked> {
        let now_tick = self.tick_at(unix_ms)?;
        self.reserve_in(state_word, now_tick, unix_ms, want, covered)
    }

    /// The tick of `unix_ms`, or why nothing can be minted at that time.
    #[inline]
    fn tick_at(&self, unix_ms: u64) -> Result<u64, Blocked> {
        self.span
            .tick_at(unix_ms)
            .map_err(|out| Blocked::Fatal(out.into()))
    }

    /// The CAS loop itself, with the clock at `now_tick` (the tick of `unix_ms`).
    #[inline]
    fn reserve_in<W: Word>(
        &self,
        state_word: &W,
        now_tick: u64,
        unix_ms: u64,
        want: u64,
        covered: impl Fn(u64) -> Result<(), Blocked>,
    ) -> Result<(u64, u64), Blocked> {
        let mut state = state_word.load();
        loop {
            match self.word.step(state, now_tick) {
                Step::Mint { slot } => {
                    covered(slot)?;
                    let count = self.word.block(slot, want);
                    // Winning the CAS is what makes the slots ours; on failure `actual` is
                    // a newer state to step from.
                    match state_word.advance(state, slot + count * self.word.unit()) {
                        Ok(()) => return Ok((slot, count)),
                        Err(actual) => state = actual,
                    }
                }
                Step::Wait { tick } => return Err(Blocked::Spent { tick, unix_ms }),
                Step::End => {
                    return Err(Blocked::Fatal(MintError::SpanSpent {
                        end_ms: self.layout.end_unix_ms(),
                    }));
                }
            }
        }
    }

    /// For a tick spent at `unix_ms` whose successor is `tick`: when that starts (Unix ms),
    /// or `None` when `until`'s deadline comes first, and waiting for it is in vain.
    fn next_tick_within<C: Clock>(&self, clock: &C, tick: u64, unix_ms: u64, until: Until) -> Option<u64> {
        let start = self.layout.unix_ms_of_tick(tick);
        let left = clock
            .time_until(start)
            .unwrap_or(Duration::from_millis(start.saturating_sub(unix_ms)));
        (!until.comes_within(left)).then_some(start)
    }

    /// The wait for a free slot after `refusal`, the one loop of every waiting mint: the
    /// slow path of [`reserve`](Self::reserve) ([`Until::Patient`]) and of
    /// [`reserve_until`](Self::reserve_until) ([`Until::Deadline`]).
    ///
    /// A spent tick is waited for as the minter's [`Wait`] says: one [`nap`](wait::nap)
    /// per tick waited for, then [`Backoff`] between clock reads. A slot past the mark
    /// waits for the keeper to store one past it ([`Mark::wait_covered`]). With a deadline,
    /// a spent tick whose successor starts after the deadline is refused at once rather
    /// than slept for in vain, and a mint is tried once more after each wait, the last one
    /// ending at the deadline.
    ///
    /// # Errors
    ///
    /// A permanent refusal at once ([`MintError::Forked`] for any other than
    /// [`Blocked::Fatal`], in a child of a fork, which could wait there for threads it does
    /// not have). With a deadline, a transient one once the deadline has come or cannot be
    /// met: the error
    /// [`try_reserve`](Self::try_reserve) reports for the last refusal. Without, a store
    /// that stays failed past the mark's patience. [`reserve`](Self::reserve) panics with
    /// these.
    #[cold]
    #[inline(never)]
    fn wait_for_block<W: Windowed, C: Clock>(
        &self,
        state: &W,
        clock: &C,
        mut refusal: Blocked,
        want: u64,
        until: Until,
    ) -> Result<(u64, u64), MintError> {
        // A child of a fork is told so rather than asked to wait (as `error_of` tells it).
        if !matches!(refusal, Blocked::Fatal(_)) {
            self.birth.check()?;
        }
        let mut backoff = Backoff::default();
        // The tick last slept for: sleep once per tick waited for, then spin.
        let mut napped = None;
        loop {
            match refusal {
                Blocked::Fatal(error) => return Err(error),
                Blocked::Uncovered { slot, .. } => self.mark.wait_covered(slot, until)?,
                Blocked::Spent { tick, unix_ms } => {
                    let Some(start) = self.next_tick_within(clock, tick, unix_ms, until) else {
                        return Err(self.error_of(refusal));
                    };
                    if self.wait == Wait::Sleep && napped != Some(tick) {
                        wait::nap(clock, start);
                        napped = Some(tick);
                    }
                    backoff.snooze();
                }
            }
            refusal = match self.reserve_at(state, clock.precise_unix_ms(), want) {
                Ok(block) => return Ok(block),
                Err(again) => again,
            };
        }
    }

    /// [`reserve_until`](Self::reserve_until) for async code, sleeping on `sleep`, the
    /// runtime's timer: the one async wait, by the same rules. A spent tick is waited for
    /// with [`nap_async`](wait::nap_async), and the wait for it refused at once when its
    /// successor starts after the deadline; a slot past the mark is looked at again when
    /// the refusal says the keeper's store is due ([`Mark::look`]), which ends the wait as
    /// the sync one ends. Nothing is reserved while it waits.
    ///
    /// # Errors
    ///
    /// As [`wait_for_block`](Self::wait_for_block)'s.
    pub(crate) async fn reserve_async<W: Windowed, C: Clock, S: Sleep>(
        &self,
        state: &W,
        clock: &C,
        want: u64,
        until: Until,
        sleep: &S,
    ) -> Result<(u64, u64), MintError> {
        let mut refusal = match self.try_reserve_full(state, clock, want) {
            Ok(block) => return Ok(block),
            Err(refusal) => refusal,
        };
        // A child of a fork is told so rather than asked to wait (as `error_of` tells it).
        if !matches!(refusal, Blocked::Fatal(_)) {
            self.birth.check()?;
        }
        // When the first refusal for the mark came: a failing store is waited for as
        // `wait_for_block` waits for it.
        let mut uncovered_since = None;
        loop {
            match refusal {
                Blocked::Fatal(error) => return Err(error),
                Blocked::Spent { tick, unix_ms } => {
                    let Some(start) = self.next_tick_within(clock, tick, unix_ms, until) else {
                        return Err(self.error_of(refusal));
                    };
                    wait::nap_async(clock, start, self.wait, until, sleep).await;
                }
                Blocked::Uncovered { slot, .. } => {
                    let since = *uncovered_since.get_or_insert_with(std::time::Instant::now);
                    if let Some(wait) = self.mark.look(slot, until, since)? {
                        sleep.sleep(wait).await;
                    }
                }
            }
            refusal = match self.reserve_at(state, clock.precise_unix_ms(), want) {
                Ok(block) => return Ok(block),
                Err(again) => again,
            };
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
