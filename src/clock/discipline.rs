//! Clock discipline: keeps [`MonotonicClock`](crate::MonotonicClock) on the wall clock
//! without ever moving it back.
//!
//! The clock is a piecewise-linear function from quanta's raw counter to Unix time:
//!
//! - [`Segment`]: one piece, in 64.64 fixed-point milliseconds: flat before `start`, then
//!   the calibrated rate up to its `horizon`, then [`SLEW_PPM`] slower than that for good.
//! - [`Timeline`]: the current piece, published to readers lock-free: two slots and a
//!   version counter, a seqlock whose writer never makes a reader wait (it writes the slot
//!   no current reader uses).
//! - [`Discipline`]: the pure rule that picks the next piece from the current one, a raw
//!   count and the wall-clock time at that count. Wall clock ahead (by more than
//!   [`DEADBAND_NS`]): jump to it. Wall clock behind: publish nothing, so that the current
//!   piece reaches its horizon and the clock slews, running [`SLEW_PPM`] slower than real
//!   time. Otherwise renew the piece (same value, same rate, a later horizon) when less
//!   than half of [`HORIZON_NS`] is left to its horizon. Never back.
//! - [`Steering`]: the writer's side, which keeps the current piece, publishes the next
//!   one and notices steps to report.
//!
//! A process-wide thread runs the checks every [`CHECK_INTERVAL`] (see
//! [`anchor`](super::anchor)), so the minting path only ever reads the published piece.
//! Tests drive [`Steering`] with simulated raw counts and wall times.
//!
//! # Why a new piece never reads earlier than the old one
//!
//! Every piece is non-decreasing in the raw count, and every piece the rule publishes
//! reads at least as late as the piece before it at *every* raw count, not only at the
//! counts after it was published. A new piece `new` replacing `old` after a check at count
//! `c`:
//!
//! - starts at `c` at a value no lower than `old` reaches there (`old`'s own value for a
//!   renewal, the wall clock, which is ahead, for a jump), and is flat before `c`: at a
//!   count `r ≤ c`, `new(r) = new(c) ≥ old(c) ≥ old(r)`;
//! - after `c` it grows at least as fast as `old`: both run at the calibrated rate up to
//!   their horizons and at the one slow rate past them, and `new`'s horizon is no earlier
//!   than `old`'s. So `new(r) ≥ old(r)` for `r > c` too.
//!
//! A slower piece is never published: the clock slows only when its own piece passes its
//! horizon, which is fixed when the piece is published. So the order of a publish and of
//! the counter does not matter: a reader that read `old` at count `r1` and then `new` (or
//! any later piece) at `r2 ≥ r1` gets `old(r1) ≤ old(r2) ≤ new(r2)`, however late the
//! writer published. A reader never sees pieces out of order (the seqlock, below), and the
//! counter does not go back between two reads. The writer needs no deadline, and the
//! reader never waits for it and writes nothing.
//!
//! The price is that a slew starts at the current piece's horizon, up to [`HORIZON_NS`]
//! after the check that found the wall clock behind; and a discipline thread that stalls
//! for longer than half of [`HORIZON_NS`] lets the clock run 1% slow (never back) until its
//! next check, which jumps it forward as usual. The generators' state word would absorb a
//! clock moving back in any case (IDs never go back, see
//! [`state`](crate::generator::state)); this is about the clock's own readings.

use crate::sync::{Atomic64, Ordering, ProcessAtomicU64};
use std::time::Duration;

/// How often the discipline thread compares the clock with the wall clock.
#[cfg_attr(loom, allow(dead_code))]
pub(crate) const CHECK_INTERVAL: Duration = Duration::from_millis(10);

/// How much slower than real time the clock runs while the wall clock is behind it, in
/// parts per million: 1% (a 5 s step back is absorbed in about 8 minutes, and a tick's
/// sequence then lasts 1% longer).
pub(crate) const SLEW_PPM: u64 = 10_000;

/// Offsets between the clock and the wall clock up to this are left alone, in ns: reading
/// the wall clock is itself that noisy, and re-publishing costs every reader a cache miss.
pub(crate) const DEADBAND_NS: u64 = 100_000;

/// How long a piece runs at the calibrated rate, in ns from its start (converted to raw
/// counts): past its horizon it runs [`SLEW_PPM`] slow. The rule renews the piece when less
/// than half of this is left, so the discipline thread may stall for 500 ms (50 checks)
/// before the clock runs slow, and renews twice a second (a cache miss for every reader
/// each time). The cost: a slew starts 0.5 to 1 s after the check that asked for it, which
/// lengthens a 5 s slew of 500 s by at most 1 s.
pub(crate) const HORIZON_NS: u64 = 1_000_000_000;

/// Fixed-point fraction bits: times are Unix ms `<< FRAC_BITS`.
const FRAC_BITS: u32 = 64;

/// `ns` nanoseconds in fixed-point milliseconds.
pub(crate) fn fixed_from_ns(ns: u128) -> u128 {
    // Split so that nothing overflows: whole ms, then the rest (< 10^6 ns).
    ((ns / 1_000_000) << FRAC_BITS) | (((ns % 1_000_000) << FRAC_BITS) / 1_000_000)
}

/// Fixed-point milliseconds in nanoseconds, saturating at `u64::MAX`.
pub(crate) fn ns_from_fixed(fixed: u128) -> u64 {
    let whole = (fixed >> FRAC_BITS).saturating_mul(1_000_000);
    // The fraction is below 2^64: times 10^6 fits a u128.
    let part = ((fixed & u128::from(u64::MAX)) * 1_000_000) >> FRAC_BITS;
    u64::try_from(whole.saturating_add(part)).unwrap_or(u64::MAX)
}

/// One piece of the clock: Unix time as a function of the raw counter.
///
/// ```text
/// unix ms `<< FRAC_BITS`
///   │                       at_horizon() + (raw − horizon) × slow
///   │                  ╱‾‾‾‾‾‾‾
///   │           ╱‾‾‾‾‾  at + (raw − start) × scale
///   │ at ‾‾‾‾‾‾‾
///   └──────────┬────────┬──────── raw
///            start   horizon
/// ```
///
/// `slow ≤ scale`, so the piece never decreases. Build one with [`Segment::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Segment {
    /// The raw count where the piece starts; earlier counts read as its start.
    pub(crate) start: u64,
    /// Unix ms at `start`, `<< FRAC_BITS`.
    pub(crate) at: u128,
    /// Milliseconds per raw count up to `horizon`, `<< FRAC_BITS`: the calibrated rate.
    pub(crate) scale: u64,
    /// The raw count past which the piece runs at `slow`; at least `start`.
    pub(crate) horizon: u64,
    /// Milliseconds per raw count past `horizon`, `<< FRAC_BITS`: the slewing rate.
    pub(crate) slow: u64,
}

impl Segment {
    /// The piece that reads `at` at `start`, runs at `scale` up to `horizon` (no earlier
    /// than `start`) and at `slow` (no faster than `scale`) after it.
    pub(crate) fn new(start: u64, at: u128, scale: u64, horizon: u64, slow: u64) -> Segment {
        Segment {
            start,
            at,
            scale,
            horizon: horizon.max(start),
            slow: slow.min(scale),
        }
    }

    /// Unix ms `<< FRAC_BITS` at the horizon.
    #[inline]
    pub(crate) fn at_horizon(self) -> u128 {
        // Two u64 factors: the product fits a u128.
        let counts = u128::from(self.horizon.saturating_sub(self.start));
        self.at.saturating_add(counts * u128::from(self.scale))
    }

    /// Unix ms `<< FRAC_BITS` at the raw count `raw`.
    #[inline]
    pub(crate) fn fixed_at(self, raw: u64) -> u128 {
        // Up to the horizon (every read while the discipline thread runs): one compare
        // and one multiply, flat before `start`. Past it, the slow line from the value at
        // the horizon.
        if raw <= self.horizon {
            // `counts × scale` < 2^128: two u64 factors.
            self.at
                .saturating_add(u128::from(raw.saturating_sub(self.start)) * u128::from(self.scale))
        } else {
            self.at_horizon()
                .saturating_add(u128::from(raw - self.horizon) * u128::from(self.slow))
        }
    }

    /// Whole Unix ms at the raw count `raw`.
    #[inline]
    pub(crate) fn unix_ms_at(self, raw: u64) -> u64 {
        u64::try_from(self.fixed_at(raw) >> FRAC_BITS).unwrap_or(u64::MAX)
    }

    /// How long from the raw count `raw` until this piece reads `unix_ms`, to the ns, at
    /// the piece's rates (zero when it already does); a counter of `nominal` ms per count
    /// `<< FRAC_BITS` in real time. A flat stretch before `start` is not counted: the
    /// answer may be early, never late.
    pub(crate) fn time_until(self, raw: u64, unix_ms: u64, nominal: u64) -> Duration {
        let target = u128::from(unix_ms) << FRAC_BITS;
        let now = self.fixed_at(raw);
        if target <= now || self.slow == 0 {
            return Duration::ZERO;
        }
        // Counts to go: at `scale` up to the horizon (if not past it), then at `slow`.
        let mut counts = 0;
        let mut from = now;
        if raw <= self.horizon && self.scale > 0 {
            let upto = target.min(self.at_horizon());
            counts += (upto.saturating_sub(from)) / u128::from(self.scale);
            from = upto.max(from);
        }
        counts += target.saturating_sub(from) / u128::from(self.slow);
        Duration::from_nanos(ns_from_fixed(counts.saturating_mul(u128::from(nominal))))
    }
}

/// A [`Segment`] in atomics (one of the [`Timeline`]'s two slots), without its rates,
/// which are the timeline's.
#[derive(Debug)]
struct Slot<A> {
    start: A,
    at_high: A,
    at_low: A,
    horizon: A,
}

impl<A: Atomic64> Slot<A> {
    fn new(segment: Segment) -> Slot<A> {
        let (high, low) = split(segment.at);
        Slot {
            start: A::new(segment.start),
            at_high: A::new(high),
            at_low: A::new(low),
            horizon: A::new(segment.horizon),
        }
    }

    // Relaxed field accesses: the version counter's Release/Acquire and the fences in
    // `Timeline` order them (see there).
    #[inline]
    fn load(&self, scale: u64, slow: u64) -> Segment {
        Segment {
            start: self.start.load(Ordering::Relaxed),
            at: join(
                self.at_high.load(Ordering::Relaxed),
                self.at_low.load(Ordering::Relaxed),
            ),
            scale,
            horizon: self.horizon.load(Ordering::Relaxed),
            slow,
        }
    }

    fn store(&self, segment: Segment) {
        let (high, low) = split(segment.at);
        self.start.store(segment.start, Ordering::Relaxed);
        self.at_high.store(high, Ordering::Relaxed);
        self.at_low.store(low, Ordering::Relaxed);
        self.horizon.store(segment.horizon, Ordering::Relaxed);
    }
}

/// The high and low halves of a u128.
fn split(value: u128) -> (u64, u64) {
    let low = u64::try_from(value & u128::from(u64::MAX)).unwrap_or(u64::MAX);
    (u64::try_from(value >> 64).unwrap_or(u64::MAX), low)
}

/// The u128 of a high and a low half.
#[inline]
fn join(high: u64, low: u64) -> u128 {
    u128::from(high) << 64 | u128::from(low)
}

/// The clock's current [`Segment`], published by one writer to any number of readers.
///
/// A seqlock over two slots: publish number `v` writes slot `v % 2` and then sets the
/// version to `v`, so the slot a reader of version `v - 1` uses is left alone until the
/// publish after next. A reader loads the version, the slot's fields and the raw counter,
/// then checks the version again; it retries only when a publish completed in between
/// (never while one is in progress), so a writer that is descheduled mid-publish delays
/// nobody. A reader writes nothing.
///
/// The two rates are fixed when the timeline is made (every piece the rule makes runs at
/// the calibrated rate up to its horizon and at the slewing rate after), so only a piece's
/// raw counts and values are published.
///
/// # Atomic orderings
///
/// - `publish` stores the version with `Release` after the slot's fields: a reader whose
///   `Acquire` load sees that version sees those fields (or newer ones, caught below).
/// - `publish` starts with a `Release` fence, and a reader has an `Acquire` fence after
///   its field loads: if a field load read a store of a later publish, the fences
///   synchronise, so the version store that came before that publish (at least
///   `version + 1`) happens before the reader's second version load, which then differs.
///   That is the standard seqlock argument, with the previous publish's version store in
///   the role of the "odd" version.
/// - A later read never returns an earlier piece: its first version load reads the same
///   or a later version than an earlier read's (coherence, and the `Acquire` chain between
///   threads), and the check above makes the piece that version's. That and the counter
///   are all the module's argument needs.
#[derive(Debug)]
pub(crate) struct Timeline<A = ProcessAtomicU64> {
    /// How many segments were published after the first; the current one is in
    /// `slots[version % 2]`.
    version: A,
    /// Every piece's [`Segment::scale`].
    scale: u64,
    /// Every piece's [`Segment::slow`].
    slow: u64,
    slots: [Slot<A>; 2],
}

impl<A: Atomic64> Timeline<A> {
    /// A timeline that starts with `first`, at its rates.
    pub(crate) fn new(first: Segment) -> Timeline<A> {
        Timeline {
            version: A::new(0),
            scale: first.scale,
            slow: first.slow,
            slots: [Slot::new(first), Slot::new(first)],
        }
    }

    /// The current segment and the raw count `raw()` returned while it was current.
    #[inline]
    pub(crate) fn read(&self, raw: impl Fn() -> u64) -> (Segment, u64) {
        loop {
            // Acquire: pairs with `publish`'s Release store of this version.
            let version = self.version.load(Ordering::Acquire);
            let segment = self.slots[usize::from(version % 2 == 1)].load(self.scale, self.slow);
            // Acquire fence: see "Atomic orderings" above.
            A::fence(Ordering::Acquire);
            let now = raw();
            // Relaxed: ordered after the field loads by the fence.
            if self.version.load(Ordering::Relaxed) == version {
                return (segment, now);
            }
        }
    }

    /// Publishes `segment`, which must have the timeline's rates. One writer at a time:
    /// the caller makes sure of it.
    pub(crate) fn publish(&self, segment: Segment) {
        debug_assert_eq!(
            (segment.scale, segment.slow),
            (self.scale, self.slow),
            "a piece at other rates"
        );
        // Relaxed: only the single writer stores the version.
        let version = self.version.load(Ordering::Relaxed).wrapping_add(1);
        // Release fence: orders the previous publish's version store before this one's
        // field stores (see "Atomic orderings").
        A::fence(Ordering::Release);
        self.slots[usize::from(version % 2 == 1)].store(segment);
        // Release: readers that see this version see the fields above.
        self.version.store(version, Ordering::Release);
    }
}

/// The pure rule of the discipline for one raw counter: which segment follows a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Discipline {
    /// Milliseconds per raw count `<< FRAC_BITS`, as calibrated: the rate on time.
    nominal: u64,
    /// The rate while slewing: `nominal × (1 − SLEW_PPM / 10^6)`.
    slewing: u64,
    /// [`HORIZON_NS`] in raw counts.
    horizon: u64,
    /// [`DEADBAND_NS`] in fixed-point ms.
    deadband: u128,
}

/// What a check found and decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The segment to publish, if the current one should change.
    pub(crate) next: Option<Segment>,
    /// The wall clock minus the clock at the check, ns (positive: the wall clock is ahead).
    pub(crate) offset_ns: i64,
}

impl Discipline {
    /// The rule for a counter of `nominal` ms per count `<< FRAC_BITS`.
    pub(crate) fn new(nominal: u64) -> Discipline {
        // Counts per HORIZON_NS: HORIZON_NS ms-fixed / scale.
        let horizon = fixed_from_ns(u128::from(HORIZON_NS)) / u128::from(nominal.max(1));
        Discipline::with_horizon(nominal, u64::try_from(horizon).unwrap_or(u64::MAX))
    }

    /// The rule with a horizon of `horizon` raw counts (for models with a few counts).
    pub(crate) fn with_horizon(nominal: u64, horizon: u64) -> Discipline {
        let slewing = u128::from(nominal) * u128::from(1_000_000 - SLEW_PPM) / 1_000_000;
        Discipline {
            nominal,
            slewing: u64::try_from(slewing).unwrap_or(nominal),
            horizon,
            deadband: fixed_from_ns(u128::from(DEADBAND_NS)),
        }
    }

    /// The calibrated rate, ms per raw count `<< FRAC_BITS`.
    pub(crate) fn nominal(&self) -> u64 {
        self.nominal
    }

    /// A piece from `start` at `at`, at the calibrated rate for a horizon from `start`
    /// (and no earlier than `not_before`).
    fn piece(&self, start: u64, at: u128, not_before: u64) -> Segment {
        let horizon = start.saturating_add(self.horizon).max(not_before);
        Segment::new(start, at, self.nominal, horizon, self.slewing)
    }

    /// The first segment: the wall-clock time `wall` (fixed-point Unix ms) at raw count
    /// `raw`, at the calibrated rate.
    pub(crate) fn anchor(&self, raw: u64, wall: u128) -> Segment {
        self.piece(raw, wall, raw)
    }

    /// The plan after reading the wall-clock time `wall` (fixed-point Unix ms) at raw count
    /// `raw`, while `current` is the clock.
    ///
    /// Every piece it plans starts at `raw`, at least as late as `current` reads there, at
    /// the calibrated rate, with a horizon no earlier than `current`'s: see the module's
    /// argument.
    pub(crate) fn check(&self, current: Segment, raw: u64, wall: u128) -> Plan {
        let clock = current.fixed_at(raw);
        let offset_ns = offset_ns(clock, wall);
        let next = if wall > clock.saturating_add(self.deadband) {
            // The wall clock is ahead: jump to it.
            Some(self.piece(raw, wall, current.horizon))
        } else if clock > wall.saturating_add(self.deadband) {
            // Behind: leave the piece to run into its horizon and slew (or slew on).
            None
        } else if current.horizon < raw.saturating_add(self.horizon / 2) {
            // On time, and less than half a horizon left (or the clock slewed back within
            // the dead band, or the thread stalled past the horizon): renew, from where
            // the clock is.
            Some(self.piece(raw, clock, current.horizon))
        } else {
            None
        };
        Plan { next, offset_ns }
    }
}

/// The wall-clock time `wall` minus the clock's `clock` (both fixed-point Unix ms), ns,
/// saturating: positive when the wall clock is ahead.
fn offset_ns(clock: u128, wall: u128) -> i64 {
    if wall >= clock {
        i64::try_from(ns_from_fixed(wall - clock)).unwrap_or(i64::MAX)
    } else {
        -i64::try_from(ns_from_fixed(clock - wall)).unwrap_or(i64::MAX)
    }
}

/// A step of the wall clock against the [`MonotonicClock`](crate::MonotonicClock),
/// reported to the hook set with
/// [`MonotonicClock::on_step`](crate::MonotonicClock::on_step).
///
/// A step is a change of the wall clock's offset between two checks larger than the
/// hook's bound: an NTP step, a manual change, a resume from suspend. Slow drift is not a
/// step; it is corrected silently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClockStep {
    /// The wall clock moved ahead: the clock jumped forward by `by` at once.
    Forward {
        /// How far the clock jumped.
        by: Duration,
    },
    /// The wall clock moved back: the clock is `ahead` of it and slews, running 1% slower
    /// than real time from within a second, until it is on time again in about
    /// `converges_in`. IDs minted meanwhile carry times up to `ahead` in the future, and
    /// never repeat.
    Back {
        /// How far the clock is ahead of the wall clock.
        ahead: Duration,
        /// About how long until the clock is on time again.
        converges_in: Duration,
    },
}

impl ClockStep {
    /// The step for an offset (wall clock minus clock, ns).
    fn from_offset(offset_ns: i64) -> ClockStep {
        let magnitude = Duration::from_nanos(offset_ns.unsigned_abs());
        if offset_ns >= 0 {
            ClockStep::Forward { by: magnitude }
        } else {
            ClockStep::Back {
                ahead: magnitude,
                converges_in: magnitude.saturating_mul(1_000_000 / u32::try_from(SLEW_PPM).unwrap_or(1)),
            }
        }
    }
}

/// The writer's side of the discipline: the current segment, and the offset at the last
/// check (to tell a step from drift).
#[derive(Debug, Clone)]
pub(crate) struct Steering {
    discipline: Discipline,
    current: Segment,
    last_offset_ns: i64,
}

impl Steering {
    /// Steering that starts from `first`.
    pub(crate) fn new(discipline: Discipline, first: Segment) -> Steering {
        Steering {
            discipline,
            current: first,
            last_offset_ns: 0,
        }
    }

    /// The segment the clock reads now (the last one published).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn current(&self) -> Segment {
        self.current
    }

    /// Plans a check at `raw` with the wall clock at `wall`.
    pub(crate) fn plan(&self, raw: u64, wall: u128) -> Plan {
        self.discipline.check(self.current, raw, wall)
    }

    /// Records `plan` as done (its segment published), and returns the step to report if
    /// the offset moved by more than `bound` since the last check.
    pub(crate) fn commit(&mut self, plan: Plan, bound: Option<Duration>) -> Option<ClockStep> {
        if let Some(next) = plan.next {
            self.current = next;
        }
        let moved = plan.offset_ns.abs_diff(self.last_offset_ns);
        self.last_offset_ns = plan.offset_ns;
        let bound = bound?;
        (u128::from(moved) > bound.as_nanos()).then(|| ClockStep::from_offset(plan.offset_ns))
    }

    /// One check, as the discipline thread makes it: plans at `raw` with the wall clock at
    /// `wall`, publishes the new segment on `timeline` if there is one (whenever this runs:
    /// no deadline, see the module docs), and commits. Returns the step to report, as
    /// [`commit`](Self::commit). The next check measures steps from the offset the clock
    /// is left at: after a jump forward, the wall clock it jumped to, so that the jump is
    /// reported once.
    pub(crate) fn check<A: Atomic64>(
        &mut self,
        timeline: &Timeline<A>,
        raw: u64,
        wall: u128,
        bound: Option<Duration>,
    ) -> Option<ClockStep> {
        let plan = self.plan(raw, wall);
        if let Some(next) = plan.next {
            timeline.publish(next);
        }
        let step = self.commit(plan, bound);
        self.last_offset_ns = offset_ns(self.current.fixed_at(raw), wall);
        step
    }

    /// Where a discipline thread starts from a clock it did not keep (in a child of a
    /// fork, the piece its parent's thread published last, from the time the parent's
    /// clock had reached): a check at `raw` with the wall clock at `wall` that publishes
    /// its segment on `timeline` as [`check`](Self::check) does, so a clock behind the wall
    /// clock jumps forward to it and one ahead is left to slew, never back. It reports no
    /// step: the clock was behind for want of a thread, not because the wall clock moved,
    /// and the next check measures steps from the offset it leaves.
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn catch_up<A: Atomic64>(&mut self, timeline: &Timeline<A>, raw: u64, wall: u128) {
        let plan = self.plan(raw, wall);
        if let Some(next) = plan.next {
            timeline.publish(next);
            self.current = next;
        }
        self.last_offset_ns = offset_ns(self.current.fixed_at(raw), wall);
    }
}

#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, loom))]
mod loom_models;
