//! Clock discipline: keeps [`MonotonicClock`](crate::MonotonicClock) on the wall clock
//! without ever moving it back.
//!
//! The clock is a piecewise-linear function from quanta's raw counter to Unix time:
//!
//! - [`Segment`]: one linear piece, `unix_ms(raw) = at + (raw - start) × scale` in 64.64
//!   fixed-point milliseconds, flat before `start`.
//! - [`Timeline`]: the current piece, published to readers lock-free: two slots and a
//!   version counter, a seqlock whose writer never makes a reader wait (it writes the slot
//!   no current reader uses).
//! - [`Discipline`]: the pure rule that picks the next piece from the current one, a raw
//!   count and the wall-clock time at that count. Wall clock ahead (by more than
//!   [`DEADBAND_NS`]): jump to it. Wall clock behind: slew, running [`SLEW_PPM`] slower
//!   than real time until within the dead band again. Never back.
//! - [`Steering`]: the writer's side, which keeps the current piece and notices steps to
//!   report.
//!
//! A process-wide thread runs the checks every [`CHECK_INTERVAL`] (see `clock.rs`), so the
//! minting path only ever reads the published piece. Tests drive [`Steering`] with
//! simulated raw counts and wall times.
//!
//! # Why a new piece never reads earlier than the old one
//!
//! Every piece starts [`Discipline::guard`] raw counts after the check that made it, at
//! a value no lower than the old piece reaches there, and is flat before its start. So
//! a read of the old piece at any count up to the new start is at most the new piece's
//! lowest value. The writer publishes only if the counter has not reached the new start
//! yet, and a reader keeps the old piece only if the version did not change by the time it
//! had read the counter: so no read of the old piece happens past the new start, except
//! by the nanoseconds a processor may run the counter read ahead of the version check
//! (far less than the guard). Within a piece time grows with the counter. The
//! generators' state word would absorb a clock moving back in any case (IDs never go
//! back, see `state.rs`); this is about the clock's own readings.

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

/// How far after a check a new piece starts, in ns (converted to raw counts): the time the
/// writer has to publish it.
const GUARD_NS: u64 = 20_000;

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

/// One linear piece of the clock: Unix time as a function of the raw counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Segment {
    /// The raw count where the piece starts; earlier counts read as its start.
    pub(crate) start: u64,
    /// Unix ms at `start`, `<< FRAC_BITS`.
    pub(crate) at: u128,
    /// Milliseconds per raw count, `<< FRAC_BITS`.
    pub(crate) scale: u64,
}

impl Segment {
    /// Unix ms `<< FRAC_BITS` at the raw count `raw`.
    #[inline]
    pub(crate) fn fixed_at(self, raw: u64) -> u128 {
        let counts = u128::from(raw.saturating_sub(self.start));
        // `counts × scale` < 2^128: two u64 factors.
        self.at.saturating_add(counts * u128::from(self.scale))
    }

    /// Whole Unix ms at the raw count `raw`.
    #[inline]
    pub(crate) fn unix_ms_at(self, raw: u64) -> u64 {
        u64::try_from(self.fixed_at(raw) >> FRAC_BITS).unwrap_or(u64::MAX)
    }

    /// How long from the raw count `raw` until this piece reads `unix_ms`, to the ns, at
    /// the piece's rate (zero when it already does).
    pub(crate) fn time_until(self, raw: u64, unix_ms: u64, nominal: u64) -> Duration {
        let left = (u128::from(unix_ms) << FRAC_BITS).saturating_sub(self.fixed_at(raw));
        // Clock time left, in real time: a slewing piece takes longer by nominal / scale.
        let left = if self.scale == nominal || self.scale == 0 {
            left
        } else {
            left / u128::from(self.scale) * u128::from(nominal)
        };
        Duration::from_nanos(ns_from_fixed(left))
    }
}

/// A [`Segment`] in atomics (one of the [`Timeline`]'s two slots).
#[derive(Debug)]
struct Slot<A> {
    start: A,
    at_high: A,
    at_low: A,
    scale: A,
}

impl<A: Atomic64> Slot<A> {
    fn new(segment: Segment) -> Slot<A> {
        let (high, low) = split(segment.at);
        Slot {
            start: A::new(segment.start),
            at_high: A::new(high),
            at_low: A::new(low),
            scale: A::new(segment.scale),
        }
    }

    // Relaxed field accesses: the version counter's Release/Acquire and the fences in
    // `Timeline` order them (see there).
    #[inline]
    fn load(&self) -> Segment {
        Segment {
            start: self.start.load(Ordering::Relaxed),
            at: u128::from(self.at_high.load(Ordering::Relaxed)) << 64
                | u128::from(self.at_low.load(Ordering::Relaxed)),
            scale: self.scale.load(Ordering::Relaxed),
        }
    }

    fn store(&self, segment: Segment) {
        let (high, low) = split(segment.at);
        self.start.store(segment.start, Ordering::Relaxed);
        self.at_high.store(high, Ordering::Relaxed);
        self.at_low.store(low, Ordering::Relaxed);
        self.scale.store(segment.scale, Ordering::Relaxed);
    }
}

/// The high and low halves of a u128.
fn split(value: u128) -> (u64, u64) {
    let low = u64::try_from(value & u128::from(u64::MAX)).unwrap_or(u64::MAX);
    (u64::try_from(value >> 64).unwrap_or(u64::MAX), low)
}

/// The clock's current [`Segment`], published by one writer to any number of readers.
///
/// A seqlock over two slots: publish number `v` writes slot `v % 2` and then sets the
/// version to `v`, so the slot a reader of version `v - 1` uses is left alone until the
/// publish after next. A reader loads the version, the slot's fields and the raw counter,
/// then checks the version again; it retries only when a publish completed in between
/// (never while one is in progress), so a writer that is descheduled mid-publish delays
/// nobody.
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
#[derive(Debug)]
pub(crate) struct Timeline<A = ProcessAtomicU64> {
    /// How many segments were published after the first; the current one is in
    /// `slots[version % 2]`.
    version: A,
    slots: [Slot<A>; 2],
}

impl<A: Atomic64> Timeline<A> {
    /// A timeline that starts with `first`.
    pub(crate) fn new(first: Segment) -> Timeline<A> {
        Timeline {
            version: A::new(0),
            slots: [Slot::new(first), Slot::new(first)],
        }
    }

    /// The current segment and the raw count `raw()` returned while it was current.
    #[inline]
    pub(crate) fn read(&self, raw: impl Fn() -> u64) -> (Segment, u64) {
        loop {
            // Acquire: pairs with `publish`'s Release store of this version.
            let version = self.version.load(Ordering::Acquire);
            let segment = self.slots[usize::from(version % 2 == 1)].load();
            // Acquire fence: see "Atomic orderings" above.
            A::fence(Ordering::Acquire);
            let now = raw();
            // Relaxed: ordered after the field loads by the fence.
            if self.version.load(Ordering::Relaxed) == version {
                return (segment, now);
            }
        }
    }

    /// Publishes `segment`. One writer at a time: the caller makes sure of it.
    pub(crate) fn publish(&self, segment: Segment) {
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
    /// [`GUARD_NS`] in raw counts.
    guard: u64,
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
        let slewing = u128::from(nominal) * u128::from(1_000_000 - SLEW_PPM) / 1_000_000;
        // Counts per GUARD_NS: GUARD_NS ms-fixed / scale.
        let guard = fixed_from_ns(u128::from(GUARD_NS)) / u128::from(nominal.max(1));
        Discipline {
            nominal,
            slewing: u64::try_from(slewing).unwrap_or(nominal),
            guard: u64::try_from(guard).unwrap_or(u64::MAX),
            deadband: fixed_from_ns(u128::from(DEADBAND_NS)),
        }
    }

    /// The calibrated rate, ms per raw count `<< FRAC_BITS`.
    pub(crate) fn nominal(&self) -> u64 {
        self.nominal
    }

    /// How many raw counts after a check its new segment starts.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn guard(&self) -> u64 {
        self.guard
    }

    /// The first segment: the wall-clock time `wall` (fixed-point Unix ms) at raw count
    /// `raw`, at the calibrated rate.
    pub(crate) fn anchor(&self, raw: u64, wall: u128) -> Segment {
        Segment {
            start: raw,
            at: wall,
            scale: self.nominal,
        }
    }

    /// The plan after reading the wall-clock time `wall` (fixed-point Unix ms) at raw count
    /// `raw`, while `current` is the clock.
    pub(crate) fn check(&self, current: Segment, raw: u64, wall: u128) -> Plan {
        let start = raw.saturating_add(self.guard);
        let clock = current.fixed_at(start);
        // The wall clock carried to `start` at the calibrated rate.
        let wall = wall.saturating_add(u128::from(self.guard) * u128::from(self.nominal));
        let offset_ns = if wall >= clock {
            i64::try_from(ns_from_fixed(wall - clock)).unwrap_or(i64::MAX)
        } else {
            -i64::try_from(ns_from_fixed(clock - wall)).unwrap_or(i64::MAX)
        };
        let piece = |at, scale| Some(Segment { start, at, scale });
        let next = if wall > clock.saturating_add(self.deadband) {
            // The wall clock is ahead: jump to it.
            piece(wall, self.nominal)
        } else if clock > wall.saturating_add(self.deadband) {
            // Behind: slew from where the clock is (unless already slewing).
            if current.scale == self.slewing {
                None
            } else {
                piece(clock, self.slewing)
            }
        } else if current.scale == self.nominal {
            None
        } else {
            // Within the dead band again: back to the calibrated rate.
            piece(clock, self.nominal)
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
    /// than real time, until it is on time again in about `converges_in`. IDs minted
    /// meanwhile carry times up to `ahead` in the future, and never repeat.
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
        let segment = Segment {
            start: 1_000,
            at: fixed_from_ns(1_700_000_000_000_000_000),
            scale: three_ghz(),
        };
        assert_eq!(segment.unix_ms_at(0), 1_700_000_000_000);
        assert_eq!(segment.unix_ms_at(1_000 + 2_999_999), 1_700_000_000_000);
        assert_eq!(segment.unix_ms_at(1_000 + 3_000_001), 1_700_000_000_001);
        let left = segment.time_until(1_000, 1_700_000_000_002, three_ghz());
        assert!(
            left.abs_diff(Duration::from_millis(2)) <= Duration::from_nanos(1),
            "{left:?}"
        );
        assert_eq!(segment.time_until(1_000, 5, three_ghz()), Duration::ZERO);
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
    fn the_rule_jumps_forward_slews_back_and_leaves_small_offsets() {
        let discipline = Discipline::new(three_ghz());
        let wall = fixed_from_ns(1_700_000_000_000_000_000);
        let current = discipline.anchor(0, wall);
        let raw = 3_000_000_000; // 1 s later
        let on_time = wall + fixed_from_ns(1_000_000_000);
        let start = raw + discipline.guard();
        let guard_ms = u128::from(discipline.guard()) * u128::from(three_ghz());

        let plan = discipline.check(current, raw, on_time + fixed_from_ns(50_000));
        assert_eq!(plan.next, None, "50 µs ahead is inside the dead band");
        assert!((49_990..=50_010).contains(&plan.offset_ns), "{plan:?}");

        let ahead = on_time + fixed_from_ns(5_000_000_000);
        let plan = discipline.check(current, raw, ahead);
        assert_eq!(
            plan.next,
            Some(Segment {
                start,
                at: ahead + guard_ms,
                scale: three_ghz()
            }),
            "the wall clock 5 s ahead: jump"
        );

        let behind = on_time - fixed_from_ns(5_000_000_000);
        let plan = discipline.check(current, raw, behind);
        let slewing = plan.next.unwrap();
        assert_eq!(slewing.start, start);
        assert_eq!(
            slewing.at,
            current.fixed_at(start),
            "slewing starts where the clock is"
        );
        assert_eq!(
            slewing.scale,
            u64::try_from(u128::from(three_ghz()) * 99 / 100).unwrap()
        );
        assert!(
            (-5_000_000_010..=-4_999_999_990).contains(&plan.offset_ns),
            "{plan:?}"
        );
        assert_eq!(
            discipline.check(slewing, raw + 3_000, behind).next,
            None,
            "still slewing"
        );

        // Back within the dead band while slewing: the calibrated rate again.
        let plan = discipline.check(slewing, raw, slewing.fixed_at(raw));
        assert_eq!(plan.next.map(|s| s.scale), Some(three_ghz()));
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

    /// The clock faults of issue 7, simulated: a 3 GHz counter with a calibration error
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
                let mut steering = self.steering.borrow_mut();
                let plan = steering.plan(self.raw.get(), fixed_from_ns(self.wall_ns()));
                if let Some(next) = plan.next {
                    self.timeline.publish(next);
                }
                if let Some(step) = steering.commit(plan, Some(Duration::from_secs(1))) {
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

        /// A clock fault between checks.
        #[derive(Debug, Clone)]
        enum Fault {
            /// Real time passes, counter running (ms).
            Run(u16),
            /// The wall clock steps (ms, either way).
            Step(i16),
            /// Real time passes with the counter stopped (ms).
            Suspend(u16),
        }

        fn fault() -> impl proptest::strategy::Strategy<Value = Fault> {
            use proptest::prelude::*;
            prop_oneof![
                6 => (1..2_000_u16).prop_map(Fault::Run),
                2 => (-2_000..2_000_i16).prop_map(Fault::Step),
                1 => (1..5_000_u16).prop_map(Fault::Suspend),
            ]
        }

        /// The discipline's rule restated in plain nanoseconds (no fixed point, no
        /// segments): what the clock should read.
        struct Model {
            /// Counter and clock (ns) where the current rate started.
            base: (u64, i128),
            slewing: bool,
        }

        impl Model {
            const GUARD_COUNTS: u64 = 3 * GUARD_NS;

            /// The clock at `raw` (3 counts per ns, 1% slower while slewing).
            fn at(&self, raw: u64) -> i128 {
                let ns = i128::from(raw.saturating_sub(self.base.0)) / 3;
                self.base.1 + if self.slewing { ns * 99 / 100 } else { ns }
            }

            /// The rule; `false` when the offset was within 1 µs of the dead band's edge,
            /// where the two rounding schemes may decide differently.
            fn check(&mut self, raw: u64, wall: i128) -> bool {
                let start = raw + Model::GUARD_COUNTS;
                let (clock, wall) = (self.at(start), wall + i128::from(GUARD_NS));
                let band = i128::from(DEADBAND_NS);
                let clear = ((wall - clock).abs() - band).abs() > 1_000;
                if wall > clock + band {
                    (self.base, self.slewing) = ((start, wall), false);
                } else if clock > wall + band {
                    if !self.slewing {
                        (self.base, self.slewing) = ((start, clock), true);
                    }
                } else if self.slewing {
                    (self.base, self.slewing) = ((start, clock), false);
                }
                clear
            }
        }

        proptest::proptest! {
            #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

            /// Invariants, under any run of drift, steps and suspends: the clock never
            /// goes back (`Sim::read`), IDs strictly increase (`run_checks`), the clock
            /// agrees with the model to 1 µs before every check, and once the faults stop
            /// it converges to within 2 ms of the wall clock and stays there.
            #[test]
            fn the_discipline_follows_its_model_and_converges(
                drift_ppm in -200_i128..200,
                faults in proptest::collection::vec(fault(), 1..40),
            ) {
                let sim = Sim::new(drift_ppm);
                let generator = generator(&sim);
                let mut last = Id::new(0);
                let mut model = Model { base: (0, i128::try_from(START_NS).unwrap()), slewing: false };
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
                        model.slewing = segment.scale != three_ghz();
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
                    }
                }
                // Quiet from here: a slew of the offset takes |offset| × 100, and up to 2%
                // longer against a counter drifting the same way by 200 ppm.
                let offset = sim.offset_ms().abs();
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let converge_ms = (offset * 102.0) as u64 + 1_000;
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

    /// A counter of one count per 10 µs, so that a new segment starts 2 counts after its
    /// check.
    fn ten_us() -> u64 {
        u64::try_from(fixed_from_ns(10_000)).unwrap()
    }

    /// Invariant: a reader racing two re-anchorings (a slew, then a jump) and a ticking
    /// counter only ever sees whole published segments, and its readings never go back.
    #[test]
    fn reanchoring_racing_with_reads_never_tears_or_goes_back() {
        loom::model(|| {
            let discipline = Discipline::new(ten_us());
            assert_eq!(discipline.guard, 2);
            let first = discipline.anchor(0, fixed_from_ns(1_700_000_000_000_000_000));
            let timeline = Arc::new(Timeline::<AtomicU64>::new(first));
            let raw = Arc::new(AtomicU64::new(0));

            let writer = {
                let (timeline, raw) = (Arc::clone(&timeline), Arc::clone(&raw));
                thread::spawn(move || {
                    let mut steering = Steering::new(discipline, first);
                    let mut published = vec![first];
                    // The wall clock 1 s behind the clock (slew), then 1 s ahead (jump).
                    for ahead in [false, true] {
                        let now = raw.load(SeqCst);
                        let clock = steering.current.fixed_at(now);
                        let second = fixed_from_ns(1_000_000_000);
                        let wall = if ahead { clock + second } else { clock - second };
                        let plan = steering.plan(now, wall);
                        let next = plan.next.expect("both checks change the segment");
                        // As the discipline thread: publish only before the start.
                        if raw.load(SeqCst) < next.start {
                            timeline.publish(next);
                            steering.commit(plan, None);
                            published.push(next);
                        }
                    }
                    published
                })
            };
            let ticker = {
                let raw = Arc::clone(&raw);
                thread::spawn(move || {
                    raw.fetch_add(1, SeqCst);
                    raw.fetch_add(1, SeqCst);
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
