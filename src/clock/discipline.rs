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
//! A process-wide thread runs the checks every [`CHECK_INTERVAL`] (see `clock.rs`), so the
//! minting path only ever reads the published piece. Tests drive [`Steering`] with
//! simulated raw counts and wall times.
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
//! clock moving back in any case (IDs never go back, see `state.rs`); this is about the
//! clock's own readings.

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
        let offset_ns = if wall >= clock {
            i64::try_from(ns_from_fixed(wall - clock)).unwrap_or(i64::MAX)
        } else {
            -i64::try_from(ns_from_fixed(clock - wall)).unwrap_or(i64::MAX)
        };
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
    /// [`commit`](Self::commit).
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
        self.commit(plan, bound)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A 3 GHz counter: ms per count `<< 64`.
    fn three_ghz() -> u64 {
        u64::try_from((1_u128 << 64) / 3_000_000).unwrap()
    }

    #[test]
    fn fixed_point_round_trips_nanoseconds() {
        for ns in [0_u128, 1, 999_999, 1_000_000, 1_700_000_000_123_456_789] {
            let back = u128::from(ns_from_fixed(fixed_from_ns(ns)));
            // Truncation in both directions: at most 1 ns lost.
            assert!(ns - back <= 1, "{ns} -> {back}");
        }
        assert_eq!(ns_from_fixed(u128::MAX), u64::MAX);
    }

    #[test]
    fn a_segment_is_flat_before_its_start_and_linear_after() {
        let slow = Discipline::new(three_ghz()).slewing;
        // The calibrated rate for 10 ms (30 M counts), then 1% slow.
        let segment = Segment::new(
            1_000,
            fixed_from_ns(1_700_000_000_000_000_000),
            three_ghz(),
            1_000 + 30_000_000,
            slow,
        );
        assert_eq!(segment.unix_ms_at(0), 1_700_000_000_000);
        assert_eq!(segment.unix_ms_at(1_000 + 2_999_999), 1_700_000_000_000);
        assert_eq!(segment.unix_ms_at(1_000 + 3_000_001), 1_700_000_000_001);
        assert_eq!(segment.at_horizon(), segment.fixed_at(segment.horizon));
        // 10 ms at the calibrated rate, then 1 ms takes 1/0.99 ms.
        assert_eq!(
            segment.unix_ms_at(1_000 + 30_000_000 + 3_030_300),
            1_700_000_000_010
        );
        assert_eq!(
            segment.unix_ms_at(1_000 + 30_000_000 + 3_030_304),
            1_700_000_000_011
        );
        let left = segment.time_until(1_000, 1_700_000_000_002, three_ghz());
        assert!(
            left.abs_diff(Duration::from_millis(2)) <= Duration::from_nanos(1),
            "{left:?}"
        );
        // Across the horizon: 10 ms, then 2 ms at 99%.
        let left = segment.time_until(1_000, 1_700_000_000_012, three_ghz());
        let expected = Duration::from_nanos(10_000_000 + 2_000_000 * 100 / 99);
        assert!(left.abs_diff(expected) <= Duration::from_nanos(2), "{left:?}");
        assert_eq!(segment.time_until(1_000, 5, three_ghz()), Duration::ZERO);
        // Readings never decrease, across the horizon too.
        let mut last = 0;
        for raw in (0..40_000_000).step_by(7_919) {
            let now = segment.fixed_at(raw);
            assert!(now >= last, "back at {raw}");
            last = now;
        }
    }

    #[test]
    fn a_timeline_reads_what_was_published_last() {
        let discipline = Discipline::new(three_ghz());
        let first = discipline.anchor(0, fixed_from_ns(1_000_000_000));
        let timeline: Timeline = Timeline::new(first);
        assert_eq!(timeline.read(|| 7), (first, 7));
        for n in 1..=3_u64 {
            let next = Segment { start: n, ..first };
            timeline.publish(next);
            assert_eq!(timeline.read(|| 9).0, next, "publish {n}");
        }
    }

    #[test]
    fn the_rule_jumps_forward_slews_back_renews_and_leaves_small_offsets() {
        let discipline = Discipline::new(three_ghz());
        let wall = fixed_from_ns(1_700_000_000_000_000_000);
        let current = discipline.anchor(0, wall);
        assert_eq!(current.horizon, 3_000_000_000, "1 s of a 3 GHz counter");
        let raw = 300_000_000; // 100 ms later
        let on_time = wall + fixed_from_ns(100_000_000);

        let plan = discipline.check(current, raw, on_time + fixed_from_ns(50_000));
        assert_eq!(plan.next, None, "50 µs ahead is inside the dead band");
        assert!((49_990..=50_010).contains(&plan.offset_ns), "{plan:?}");

        let ahead = on_time + fixed_from_ns(5_000_000_000);
        let plan = discipline.check(current, raw, ahead);
        assert_eq!(
            plan.next,
            Some(Segment::new(
                raw,
                ahead,
                three_ghz(),
                raw + 3_000_000_000,
                discipline.slewing
            )),
            "the wall clock 5 s ahead: jump"
        );

        let behind = on_time - fixed_from_ns(5_000_000_000);
        let plan = discipline.check(current, raw, behind);
        assert_eq!(
            plan.next, None,
            "behind: the piece runs into its horizon and slews"
        );
        assert!(
            (-5_000_000_010..=-4_999_999_990).contains(&plan.offset_ns),
            "{plan:?}"
        );
        let late = 4_000_000_000; // past the horizon, still ahead
        assert_eq!(discipline.check(current, late, behind).next, None, "slewing on");

        // On time with less than half a horizon left: renewed, seamlessly.
        let raw = 1_600_000_000;
        let plan = discipline.check(current, raw, current.fixed_at(raw));
        let renewed = plan.next.expect("renewed");
        assert_eq!(
            renewed,
            Segment::new(
                raw,
                current.fixed_at(raw),
                three_ghz(),
                raw + 3_000_000_000,
                discipline.slewing
            )
        );
        // Past the horizon (slewed back within the dead band, or a stalled thread): the
        // calibrated rate again, from where the clock is.
        let plan = discipline.check(current, late, current.fixed_at(late));
        let back = plan.next.expect("the calibrated rate again");
        assert_eq!((back.start, back.at), (late, current.fixed_at(late)));
        assert_eq!(back.horizon, late + 3_000_000_000);
    }

    /// Every plan, published late, never reads earlier than the piece before it did before
    /// the publish: a slew planned at a check, a jump, a renewal, and a return from a
    /// stall, each published from 1 µs to 10 s after its check.
    #[test]
    fn a_plan_published_late_never_reads_earlier() {
        let discipline = Discipline::new(three_ghz());
        let first = discipline.anchor(0, fixed_from_ns(1_700_000_000_000_000_000));
        let second = fixed_from_ns(1_000_000_000);
        // (check, wall clock minus clock at the check)
        let checks: [(u64, i128); 4] = [
            (3_000_000, -1),    // 1 ms in, the wall clock 1 s behind: slew
            (3_000_000, 1),     // 1 ms in, 1 s ahead: jump
            (1_800_000_000, 0), // 600 ms in, on time: renew
            (9_000_000_000, 0), // 3 s in, past the horizon: back to the calibrated rate
        ];
        for (check, ahead) in checks {
            let clock = first.fixed_at(check);
            let wall = match ahead {
                -1 => clock - second,
                1 => clock + second,
                _ => clock,
            };
            for late in [3_000, 3_000_000, 300_000_000, 3_000_000_000, 30_000_000_000] {
                let timeline: Timeline = Timeline::new(first);
                let steering = Steering::new(discipline, first);
                let plan = steering.plan(check, wall);
                let raw = check + late;
                let (old, _) = timeline.read(|| raw);
                let before = old.fixed_at(raw);
                if let Some(next) = plan.next {
                    timeline.publish(next);
                }
                for after in [raw, raw + 1, raw + 3_000] {
                    let (new, _) = timeline.read(|| after);
                    assert!(
                        new.fixed_at(after) >= before,
                        "went back by {} ns: {ahead} s ahead, published {late} counts late, read at +{}",
                        ns_from_fixed(before - new.fixed_at(after)),
                        after - raw
                    );
                }
            }
        }
    }

    #[test]
    fn steps_beyond_the_bound_are_reported_once_and_drift_is_not() {
        let discipline = Discipline::new(three_ghz());
        let first = discipline.anchor(0, 0);
        let mut steering = Steering::new(discipline, first);
        let bound = Some(Duration::from_millis(100));
        let plan = |offset_ns: i64| Plan {
            next: None,
            offset_ns,
        };
        assert_eq!(
            steering.commit(plan(-90_000_000), bound),
            None,
            "within the bound"
        );
        assert_eq!(
            steering.commit(plan(-5_090_000_000), bound),
            Some(ClockStep::Back {
                ahead: Duration::from_millis(5_090),
                converges_in: Duration::from_secs(509),
            })
        );
        assert_eq!(
            steering.commit(plan(-5_000_000_000), bound),
            None,
            "slewing is not a step"
        );
        assert_eq!(
            steering.commit(plan(2_000_000_000), bound),
            Some(ClockStep::Forward {
                by: Duration::from_secs(2)
            })
        );
        assert_eq!(
            steering.commit(plan(-9_000_000_000), None),
            None,
            "no hook, no report"
        );
    }

    /// Clock faults, simulated: a 3 GHz counter with a calibration error
    /// (`drift_ppm`), a wall clock that steps, and suspends that stop the counter. Checks
    /// run every [`CHECK_INTERVAL`] of simulated real time; a Twitter generator mints
    /// between checks through the simulated clock.
    mod simulated {
        use super::*;
        use crate::{Clock, Generator, Id, Layout};
        use std::cell::{Cell, RefCell};

        const START_NS: u128 = 1_700_000_000_000_000_000;
        const NS_PER_MS: i128 = 1_000_000;

        struct Sim {
            timeline: Timeline,
            steering: RefCell<Steering>,
            /// Real time since the start, ns.
            real: Cell<u128>,
            /// Counts: `3 × (1 + drift) per real ns`, stopped during a suspend.
            raw: Cell<u64>,
            /// The counter's rate error, parts per million (positive: fast).
            drift_ppm: i128,
            /// The wall clock minus real time, ns.
            wall_offset: Cell<i128>,
            steps: RefCell<Vec<ClockStep>>,
            /// The last clock reading, to check it never goes back.
            last_read: Cell<u128>,
        }

        impl Clock for Sim {
            fn unix_ms(&self) -> u64 {
                u64::try_from(self.read() >> FRAC_BITS).unwrap()
            }
        }

        impl Sim {
            fn new(drift_ppm: i128) -> Sim {
                let discipline = Discipline::new(three_ghz());
                let first = discipline.anchor(0, fixed_from_ns(START_NS));
                Sim {
                    timeline: Timeline::new(first),
                    steering: RefCell::new(Steering::new(discipline, first)),
                    real: Cell::new(0),
                    raw: Cell::new(0),
                    drift_ppm,
                    wall_offset: Cell::new(0),
                    steps: RefCell::new(Vec::new()),
                    last_read: Cell::new(0),
                }
            }

            /// The clock now, fixed-point; checks that it never went back.
            fn read(&self) -> u128 {
                let (segment, raw) = self.timeline.read(|| self.raw.get());
                let now = segment.fixed_at(raw);
                assert!(
                    now >= self.last_read.get(),
                    "the clock went back at {} ns",
                    self.real.get()
                );
                self.last_read.set(now);
                now
            }

            fn wall_ns(&self) -> u128 {
                u128::try_from(i128::try_from(START_NS + self.real.get()).unwrap() + self.wall_offset.get())
                    .unwrap()
            }

            /// The wall clock minus the clock, ms.
            fn offset_ms(&self) -> f64 {
                let wall = i128::try_from(self.wall_ns()).unwrap();
                let clock = i128::try_from(u128::from(ns_from_fixed(self.read()))).unwrap();
                #[allow(clippy::cast_precision_loss)]
                let ms = (wall - clock) as f64 / 1e6;
                ms
            }

            /// Real time passes with the counter running.
            fn run(&self, ns: u128) {
                let counts = i128::try_from(ns).unwrap() * (1_000_000 + self.drift_ppm) * 3 / 1_000_000;
                self.raw.set(self.raw.get() + u64::try_from(counts).unwrap());
                self.real.set(self.real.get() + ns);
            }

            /// Real time passes with the counter stopped (a suspended machine).
            fn suspend(&self, ns: u128) {
                self.real.set(self.real.get() + ns);
            }

            fn step_wall(&self, ms: i128) {
                self.wall_offset.set(self.wall_offset.get() + ms * NS_PER_MS);
            }

            /// One discipline check, as the thread does it.
            fn check(&self) {
                let step = self.steering.borrow_mut().check(
                    &self.timeline,
                    self.raw.get(),
                    fixed_from_ns(self.wall_ns()),
                    Some(Duration::from_secs(1)),
                );
                if let Some(step) = step {
                    self.steps.borrow_mut().push(step);
                }
            }

            /// Runs for `ms` of real time: a check every interval, `mints` IDs in between,
            /// each strictly greater than the one before; calls `each` after every check.
            fn run_checks(
                &self,
                generator: &Generator<&Sim>,
                last: &mut Id,
                ms: u64,
                mints: usize,
                mut each: impl FnMut(&Sim),
            ) {
                let interval = CHECK_INTERVAL.as_nanos();
                for _ in 0..ms / u64::try_from(CHECK_INTERVAL.as_millis()).unwrap() {
                    self.run(interval);
                    self.check();
                    for _ in 0..mints {
                        let id = generator.try_next_id().unwrap();
                        assert!(id > *last, "{id} after {last}");
                        *last = id;
                    }
                    each(self);
                }
            }
        }

        fn generator(sim: &Sim) -> Generator<&Sim> {
            Generator::with_clock(Layout::TWITTER, 1, sim).unwrap()
        }

        #[test]
        fn drift_of_100_ppm_either_way_stays_within_2_ms_for_a_day() {
            for drift_ppm in [100, -100] {
                let sim = Sim::new(drift_ppm);
                let generator = generator(&sim);
                let mut last = Id::new(0);
                let mut worst = 0.0_f64;
                // 24 h, minting 2 IDs per check.
                sim.run_checks(&generator, &mut last, 86_400_000, 2, |sim| {
                    worst = worst.max(sim.offset_ms().abs());
                });
                assert!(worst <= 2.0, "{drift_ppm} ppm: {worst} ms off the wall clock");
                assert!(sim.steps.borrow().is_empty(), "drift is not a step");
                // Left alone, the drift would have been 8.64 s.
                let undisciplined = 86_400.0 * 1e3 * 1e-4;
                assert!(worst < undisciplined / 1000.0, "{worst} ms");
            }
        }

        /// After `fault` puts the wall clock `ms` ahead, the clock is on it one check
        /// later, and the step was reported as a jump of `ms`.
        fn caught_up_at_once(fault: impl Fn(&Sim), ms: u64) {
            let sim = Sim::new(0);
            let generator = generator(&sim);
            let mut last = Id::new(0);
            sim.run_checks(&generator, &mut last, 1_000, 1, |_| {});
            fault(&sim);
            #[allow(clippy::cast_precision_loss)]
            let ahead = ms as f64;
            assert!((sim.offset_ms() - ahead).abs() < 0.2, "{}", sim.offset_ms());
            sim.run_checks(&generator, &mut last, 10, 1, |_| {});
            assert!(
                sim.offset_ms().abs() < 0.2,
                "one check later: {} ms",
                sim.offset_ms()
            );
            assert!(matches!(sim.steps.borrow()[..], [ClockStep::Forward { by }]
                if by.abs_diff(Duration::from_millis(ms)) < Duration::from_millis(1)));
        }

        #[test]
        fn a_step_ahead_is_followed_at_once() {
            caught_up_at_once(|sim| sim.step_wall(5_000), 5_000);
        }

        #[test]
        fn a_suspend_is_caught_up_on_resume() {
            // The machine sleeps 30 s: the counter stops, the wall clock does not.
            caught_up_at_once(|sim| sim.suspend(30_000_000_000), 30_000);
        }

        #[test]
        fn a_step_back_is_slewed_never_back_and_converges() {
            let sim = Sim::new(0);
            let generator = generator(&sim);
            let mut last = Id::new(0);
            sim.run_checks(&generator, &mut last, 1_000, 1, |_| {});
            sim.step_wall(-5_000);
            let before = sim.read();
            // Slewing at 1%: after 100 s of real time the clock has gained 99 s.
            sim.run_checks(&generator, &mut last, 100_000, 3, |_| {});
            let gained = ns_from_fixed(sim.read() - before);
            assert!(
                gained.abs_diff(99_000_000_000) < 20_000_000,
                "gained {gained} ns in 100 s"
            );
            assert!((sim.offset_ms() + 4_000.0).abs() < 20.0, "{} ms", sim.offset_ms());
            // 5 s at 1% is 500 s; a little more for the dead band.
            sim.run_checks(&generator, &mut last, 401_000, 1, |_| {});
            assert!(sim.offset_ms().abs() <= 2.0, "converged: {} ms", sim.offset_ms());
            let mut worst = 0.0_f64;
            sim.run_checks(&generator, &mut last, 60_000, 1, |sim| {
                worst = worst.max(sim.offset_ms().abs());
            });
            assert!(worst <= 2.0, "stays converged: {worst} ms");
            assert!(
                matches!(sim.steps.borrow()[..], [ClockStep::Back { ahead, converges_in }]
                if ahead.abs_diff(Duration::from_secs(5)) < Duration::from_millis(1)
                    && converges_in.abs_diff(Duration::from_secs(500)) < Duration::from_millis(100))
            );
        }

        #[test]
        fn a_healthy_discipline_never_lets_the_clock_run_slow() {
            // On time, and a counter 100 ppm slow (the clock behind: jumps, never slews).
            for drift_ppm in [0, -100] {
                let sim = Sim::new(drift_ppm);
                let generator = generator(&sim);
                let mut last = Id::new(0);
                sim.run_checks(&generator, &mut last, 60_000, 1, |sim| {
                    let horizon = sim.steering.borrow().current().horizon;
                    assert!(
                        horizon >= sim.raw.get() + Model::HORIZON_COUNTS / 2,
                        "{drift_ppm} ppm: the horizon {horizon} is near at {}",
                        sim.raw.get()
                    );
                });
            }
        }

        #[test]
        fn a_stalled_discipline_runs_slow_never_back_and_recovers() {
            let sim = Sim::new(0);
            let generator = generator(&sim);
            let mut last = Id::new(0);
            sim.run_checks(&generator, &mut last, 1_000, 1, |_| {});
            let left = sim.steering.borrow().current().horizon - sim.raw.get();
            // The thread stalls for 3 s: the clock runs on, reads never go back
            // (`Sim::read`), and past the horizon it runs 1% slow.
            let before = sim.read();
            for _ in 0..300 {
                sim.run(CHECK_INTERVAL.as_nanos());
                let id = generator.try_next_id().unwrap();
                assert!(id > last);
                last = id;
            }
            let gained = ns_from_fixed(sim.read() - before);
            let on_time_ns = left / 3;
            let expected = on_time_ns + (3_000_000_000 - on_time_ns) * 99 / 100;
            assert!(
                gained.abs_diff(expected) < 1_000,
                "gained {gained} ns, not {expected}"
            );
            let behind = sim.offset_ms();
            assert!((20.0..=25.0).contains(&behind), "{behind} ms behind");
            // The next check jumps it forward, and it stays on time.
            sim.run_checks(&generator, &mut last, 10, 1, |_| {});
            assert!(sim.offset_ms().abs() < 0.2, "{} ms", sim.offset_ms());
            let mut worst = 0.0_f64;
            sim.run_checks(&generator, &mut last, 10_000, 1, |sim| {
                worst = worst.max(sim.offset_ms().abs());
            });
            assert!(worst < 0.2, "{worst} ms");
            assert!(sim.steps.borrow().is_empty(), "25 ms is within the 1 s bound");
        }

        /// A clock fault between checks.
        #[derive(Debug, Clone)]
        enum Fault {
            /// Real time passes, counter running (ms).
            Run(u16),
            /// The wall clock steps (ms, either way).
            Step(i16),
            /// Real time passes with the counter stopped (ms).
            Suspend(u16),
            /// Real time passes, counter running, with no check: the discipline thread
            /// stalls (ms).
            Stall(u16),
        }

        fn fault() -> impl proptest::strategy::Strategy<Value = Fault> {
            use proptest::prelude::*;
            prop_oneof![
                6 => (1..2_000_u16).prop_map(Fault::Run),
                2 => (-2_000..2_000_i16).prop_map(Fault::Step),
                1 => (1..5_000_u16).prop_map(Fault::Suspend),
                1 => (1..3_000_u16).prop_map(Fault::Stall),
            ]
        }

        /// The discipline's rule restated in plain nanoseconds (no fixed point, no
        /// segments): what the clock should read.
        struct Model {
            /// Counter and clock (ns) where the current piece started.
            base: (u64, i128),
            /// The counter where the current piece starts to run 1% slow.
            horizon: u64,
        }

        impl Model {
            const HORIZON_COUNTS: u64 = 3 * HORIZON_NS;

            /// The clock at `raw`: 3 counts per ns, 1% slower past the horizon.
            fn at(&self, raw: u64) -> i128 {
                let ns = |counts: u64| i128::from(counts) / 3;
                if raw <= self.horizon {
                    self.base.1 + ns(raw.saturating_sub(self.base.0))
                } else {
                    self.base.1 + ns(self.horizon - self.base.0) + ns(raw - self.horizon) * 99 / 100
                }
            }

            /// The rule; `false` when the offset was within 1 µs of the dead band's edge,
            /// where the two rounding schemes may decide differently.
            fn check(&mut self, raw: u64, wall: i128) -> bool {
                let clock = self.at(raw);
                let band = i128::from(DEADBAND_NS);
                let clear = ((wall - clock).abs() - band).abs() > 1_000;
                let horizon = (raw + Model::HORIZON_COUNTS).max(self.horizon);
                if wall > clock + band {
                    // Jump.
                    (self.base, self.horizon) = ((raw, wall), horizon);
                } else if clock > wall + band {
                    // Slew: the piece runs into its horizon.
                } else if self.horizon < raw + Model::HORIZON_COUNTS / 2 {
                    // Renew.
                    (self.base, self.horizon) = ((raw, clock), horizon);
                }
                clear
            }
        }

        proptest::proptest! {
            #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

            /// Invariants, under any run of drift, steps, suspends and stalls of the
            /// discipline thread: the clock never goes back (`Sim::read`), IDs strictly
            /// increase (`run_checks`), the clock agrees with the model to 1 µs before
            /// every check, and once the faults stop it converges to within 2 ms of the
            /// wall clock and stays there.
            #[test]
            fn the_discipline_follows_its_model_and_converges(
                drift_ppm in -200_i128..200,
                faults in proptest::collection::vec(fault(), 1..40),
            ) {
                let sim = Sim::new(drift_ppm);
                let generator = generator(&sim);
                let mut last = Id::new(0);
                let mut model = Model {
                    base: (0, i128::try_from(START_NS).unwrap()),
                    horizon: Model::HORIZON_COUNTS,
                };
                let mut check = |sim: &Sim| {
                    let ours = i128::from(ns_from_fixed(sim.read()));
                    let theirs = model.at(sim.raw.get());
                    assert!((ours - theirs).abs() <= 1_000, "clock {ours} vs model {theirs}");
                    let clear = model.check(sim.raw.get(), i128::try_from(sim.wall_ns()).unwrap());
                    sim.check();
                    if !clear {
                        // On the dead band's edge: follow the implementation's decision.
                        let segment = sim.steering.borrow().current;
                        model.base = (segment.start, i128::from(ns_from_fixed(segment.at)));
                        model.horizon = segment.horizon;
                    }
                };
                for fault in faults {
                    match fault {
                        Fault::Run(ms) => {
                            // `run_checks` checks after running; compare before each.
                            for _ in 0..ms / 10 {
                                sim.run(CHECK_INTERVAL.as_nanos());
                                check(&sim);
                                let id = generator.try_next_id().unwrap();
                                assert!(id > last);
                                last = id;
                            }
                        }
                        Fault::Step(ms) => sim.step_wall(i128::from(ms)),
                        Fault::Suspend(ms) => sim.suspend(u128::from(ms) * 1_000_000),
                        Fault::Stall(ms) => {
                            for _ in 0..ms / 10 {
                                sim.run(CHECK_INTERVAL.as_nanos());
                                sim.read();
                            }
                        }
                    }
                }
                // Quiet from here: a slew of the offset takes |offset| × 100, and up to 2%
                // longer against a counter drifting the same way by 200 ppm, after up to a
                // horizon (1 s) at the calibrated rate.
                let offset = sim.offset_ms().abs();
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let converge_ms = (offset * 102.0) as u64 + 2_000;
                sim.run_checks(&generator, &mut last, converge_ms, 1, |_| {});
                let mut worst = 0.0_f64;
                sim.run_checks(&generator, &mut last, 2_000, 1, |sim| worst = worst.max(sim.offset_ms().abs()));
                assert!(worst <= 2.0, "{worst} ms off after converging from {offset} ms");
            }
        }
    }
}

/// Loom models of the [`Timeline`]: re-anchoring racing with reads. Run by
/// `loom-tests/run.sh` (`cargo test -p atomflake --lib` under `--cfg loom`).
#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::sync::Arc;
    use loom::sync::atomic::{AtomicU64, Ordering::SeqCst};
    use loom::thread;

    /// A counter of one count per 10 µs.
    fn ten_us() -> u64 {
        u64::try_from(fixed_from_ns(10_000)).unwrap()
    }

    /// Invariant: a reader racing three checks of the discipline (the wall clock behind,
    /// then ahead twice: a slew, then two jumps), each published whenever the writer gets
    /// to it, and a counter ticking past the checks and past the first piece's horizon,
    /// only ever sees whole published segments, and its readings never go back.
    #[test]
    fn reanchoring_racing_with_reads_never_tears_or_goes_back() {
        loom::model(|| {
            // A horizon of 1 count: the ticker passes it.
            let discipline = Discipline::with_horizon(ten_us(), 1);
            let first = discipline.anchor(0, fixed_from_ns(1_700_000_000_000_000_000));
            let timeline = Arc::new(Timeline::<AtomicU64>::new(first));
            let raw = Arc::new(AtomicU64::new(0));

            let writer = {
                let (timeline, raw) = (Arc::clone(&timeline), Arc::clone(&raw));
                thread::spawn(move || {
                    let mut steering = Steering::new(discipline, first);
                    let mut published = vec![first];
                    // The wall clock 1 s behind the clock (slew), then 1 s ahead (jump), twice.
                    for ahead in [false, true, true] {
                        let now = raw.load(SeqCst);
                        let clock = steering.current.fixed_at(now);
                        let second = fixed_from_ns(1_000_000_000);
                        let wall = if ahead { clock + second } else { clock - second };
                        // As the discipline thread.
                        steering.check(&*timeline, now, wall, None);
                        if steering.current != *published.last().unwrap() {
                            published.push(steering.current);
                        }
                    }
                    published
                })
            };
            let ticker = {
                let raw = Arc::clone(&raw);
                thread::spawn(move || {
                    for _ in 0..2 {
                        raw.fetch_add(1, SeqCst);
                    }
                })
            };
            let reads: Vec<(Segment, u64)> = (0..2).map(|_| timeline.read(|| raw.load(SeqCst))).collect();
            let published = writer.join().unwrap();
            ticker.join().unwrap();
            for (segment, _) in &reads {
                assert!(
                    published.contains(segment),
                    "torn read {segment:?} of {published:?}"
                );
            }
            let [(s0, r0), (s1, r1)] = reads[..] else {
                unreachable!()
            };
            assert!(
                s0.fixed_at(r0) <= s1.fixed_at(r1),
                "went back: {s0:?} at {r0}, then {s1:?} at {r1}"
            );
        });
    }
}
