//! The default clock.

use super::Clock;
#[cfg(doc)]
use super::PreciseClock;
use super::anchor::{Anchor, RECENT_UNIX_MS, set_step_hook};
use super::discipline::ClockStep;
use crate::sync::Ordering;
use std::time::Duration;

/// The default clock: quanta's monotonic TSC clock, disciplined to the wall clock, never
/// moving back, read on the minting path with one atomic load.
///
/// The first `MonotonicClock` in a process calibrates quanta (up to ~200 ms), reads
/// `SystemTime` once and starts the process's discipline thread (`atomflake-discipline`,
/// awake for a few µs every millisecond; `benches/README.md` has its cost); later ones
/// share all of that, so creating one is cheap and every generator in the process agrees
/// on the time.
///
/// A child of `fork()` has none of its parent's threads: its clock stands at the time its
/// parent's had reached at the fork, then runs 1% slow. The child's first clock made
/// (`MonotonicClock`, [`PreciseClock`], a generator) or first reading of a clock made
/// before the fork (a `MonotonicClock` copied from the parent, a generator or a builder
/// holding one) adopts the clock: it starts the child's own thread, and a clock behind the
/// wall clock first jumps forward to it, so that the child's first reading is on the wall
/// clock however long it waited. A clock ahead of the wall clock slews from there, as
/// below: never back, so no reading in the child is earlier than one in the parent.
///
/// - [`unix_ms`](Clock::unix_ms), what a mint reads, is one `Relaxed` load of the time the
///   discipline thread stored just after the clock's current millisecond started (it wakes
///   for each one). So an ID's timestamp can lag the clock by the thread's wake-up
///   latency: a tick late while the thread has not yet run in this millisecond, more
///   when it is descheduled longer. `benches/README.md` has the measured lag. Where no
///   thread stores the time (it could not be started, or in a child of a fork before the
///   clock is adopted there), the load finds none, and the reading is precise instead.
/// - [`precise_unix_ms`](Clock::precise_unix_ms), what a generator reads when its tick's
///   sequence is spent (and [`time_until`](Clock::time_until), for its sleep), is the TSC
///   itself: one raw read and a multiply-add on the segment the thread publishes. A
///   spent tick never waits for the thread.
/// - [`PreciseClock`] is the same clock read precisely on every mint, for a timestamp that
///   is never late, at the cost of a TSC read per ID.
///
/// The discipline thread compares the clock with the wall clock every 10 ms:
///
/// - wall clock ahead (by more than 100 µs): the clock jumps forward to it at once;
/// - wall clock behind: the clock *slews*, running 1% slower than real time (never
///   backward) from within a second until it is within 100 µs again; a 5 s step back
///   takes about 8 minutes;
/// - otherwise (the TSC's own drift from the wall clock included) it stays within about
///   100 µs of the wall clock.
///
/// So quanta's calibration error (10 ppm is ~0.9 s a day), a wall clock stepped after
/// start-up (NTP after a VM boots), and a suspend and resume are all corrected while the
/// process runs. A step is not slewed silently: [`on_step`](Self::on_step) sets a hook
/// that hears of every step larger than a bound.
///
/// The thread renews the clock's current piece twice a second; a thread that does not
/// run for more than half a second (a machine too loaded to schedule it) lets the clock
/// run 1% slow, never back, until its next check jumps it forward. A process that cannot
/// start the thread at all (the system refuses a new thread) gets an undisciplined clock:
/// the wall-clock time read at start-up, advanced at quanta's calibrated rate, never
/// back, never corrected, and no step reported.
///
/// # Examples
///
/// ```
/// use atomflake::{Clock, MonotonicClock};
///
/// let clock = MonotonicClock::new();
/// let (a, b) = (clock.unix_ms(), clock.unix_ms());
/// assert!(b >= a);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock {
    /// Read only where no time is stored, and for precise readings.
    anchor: &'static Anchor,
}

impl MonotonicClock {
    /// The process's monotonic clock (anchored on first use).
    pub fn new() -> MonotonicClock {
        MonotonicClock {
            anchor: Anchor::get(),
        }
    }

    /// Calls `hook` on the discipline thread for every step of the wall clock larger than
    /// `bound` (a change of the offset between the wall clock and this clock from one
    /// check to the next; drift is never one). Replaces the hook set before, for the whole
    /// process.
    ///
    /// The hook runs on the discipline thread, so it should return quickly (log, count,
    /// alert): while it runs there are no checks, and after half a second without one the
    /// clock runs 1% slow (never back) until the next. The clock has already acted when it
    /// runs: jumped forward, or decided to slew. It runs with no lock held, so it may call
    /// `on_step` itself, to replace or clear itself; the next step calls the hook set last
    /// (one met while an `on_step` call is under way may call the hook before it). The
    /// discipline thread never waits for `on_step`'s lock, so a child forked while another
    /// thread was in `on_step` keeps a running clock (its discipline thread calls no hook
    /// then; an `on_step` in such a child would wait for good, as for any lock held at a
    /// fork).
    ///
    /// A hook that panics does not stop the discipline: the panic is caught (the panic
    /// hook still reports it) and the hook is dropped, as if `on_step` had never been
    /// called, unless it had already been replaced. A panic that aborts the process
    /// (`panic = "abort"`) cannot be caught.
    ///
    /// # Examples
    ///
    /// ```
    /// use atomflake::{ClockStep, MonotonicClock};
    /// use std::time::Duration;
    ///
    /// MonotonicClock::on_step(Duration::from_secs(1), |step| match step {
    ///     ClockStep::Forward { by } => eprintln!("wall clock stepped forward by {by:?}"),
    ///     ClockStep::Back { ahead, converges_in } => {
    ///         eprintln!("ids run {ahead:?} ahead of the wall clock for {converges_in:?}")
    ///     }
    ///     _ => {}
    /// });
    /// ```
    pub fn on_step(bound: Duration, hook: impl Fn(ClockStep) + Send + Sync + 'static) {
        set_step_hook(Some((bound, std::sync::Arc::new(hook))));
    }
}

impl MonotonicClock {
    /// The read where no discipline thread stores the time (its stored time is 0): adopts
    /// the clock in a child of a fork, then reads the time stored there, or precisely where
    /// none is (no thread). Never the precise time where a time is stored: a later reading
    /// of the stored time could be earlier. Out of line, so that the common read inlines
    /// as one load.
    #[cold]
    #[inline(never)]
    fn unstored_unix_ms(self) -> u64 {
        self.anchor.adopt();
        // Relaxed: see `Anchor::refresh_recent`.
        match RECENT_UNIX_MS.load(Ordering::Relaxed) {
            0 => self.anchor.precise_unix_ms(),
            stored => stored,
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> MonotonicClock {
        MonotonicClock::new()
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn unix_ms(&self) -> u64 {
        // Relaxed: see `Anchor::refresh_recent`.
        match RECENT_UNIX_MS.load(Ordering::Relaxed) {
            0 => self.unstored_unix_ms(),
            stored => stored,
        }
    }

    #[inline]
    fn precise_unix_ms(&self) -> u64 {
        self.anchor.adopt();
        self.anchor.precise_unix_ms()
    }

    fn time_until(&self, unix_ms: u64) -> Option<Duration> {
        self.anchor.adopt();
        Some(self.anchor.time_until(unix_ms))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::clock::PreciseClock;
    use std::time::{SystemTime, UNIX_EPOCH};

    fn wall_ms() -> u64 {
        u64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap()
    }

    #[test]
    fn monotonic_clock_tracks_the_wall_clock() {
        let before = wall_ms();
        let t = MonotonicClock::new().precise_unix_ms();
        let after = wall_ms();
        // Anchored once, then advanced by the TSC: within a few ms of the wall clock. Read
        // precisely: `unix_ms` is what the discipline thread stored, late by however long
        // a loaded machine keeps that thread from running.
        assert!(t + 50 >= before && t <= after + 50, "{before} <= {t} <= {after}");
    }

    #[test]
    fn monotonic_clock_reads_the_millisecond_the_thread_stored() {
        let clock = MonotonicClock::new();
        assert_ne!(
            RECENT_UNIX_MS.load(Ordering::Relaxed),
            0,
            "the discipline thread runs"
        );
        let before = clock.precise_unix_ms();
        let recent = clock.unix_ms();
        assert!(
            recent <= clock.precise_unix_ms(),
            "never ahead of the precise read"
        );
        // Generous: the thread may be descheduled on a busy machine.
        assert!(recent + 200 >= before, "{recent} lags {before}");
        std::thread::sleep(Duration::from_millis(20));
        assert!(clock.unix_ms() > recent, "the thread moves it on");
        let precise = PreciseClock::new();
        let (a, b) = (precise.unix_ms(), clock.precise_unix_ms());
        assert!(a <= b && b <= precise.unix_ms(), "one clock, read two ways");
    }

    #[test]
    fn monotonic_clock_never_moves_back() {
        let clock = MonotonicClock::new();
        let mut last = clock.unix_ms();
        for _ in 0..100_000 {
            let now = clock.unix_ms();
            assert!(now >= last);
            last = now;
        }
    }

    #[test]
    fn monotonic_clocks_share_one_anchor() {
        assert!(core::ptr::eq(
            MonotonicClock::new().anchor,
            MonotonicClock::default().anchor
        ));
    }
}
