//! Clocks: where a generator gets the time, in Unix milliseconds.
//!
//! - [`MonotonicClock`] (the default): quanta's TSC clock, disciplined to the wall clock
//!   by a background thread (`discipline.rs`). Never moves back, whatever happens to the
//!   wall clock.
//! - [`PreciseClock`]: the same time, read from the TSC on every call: never behind.
//! - [`ManualClock`]: set by hand, for tests.

pub(crate) mod discipline;

use crate::sync::{Arc, AtomicU64, Ordering, ProcessAtomicBool, ProcessAtomicU64};
use crossbeam_utils::CachePadded;
#[cfg(not(loom))]
use discipline::{CHECK_INTERVAL, Segment, Steering};
use discipline::{ClockStep, Discipline, Timeline, fixed_from_ns};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of Unix time in milliseconds for a [`Generator`](crate::Generator).
///
/// A clock may move back (a [`ManualClock`] does when told to): the generator then keeps
/// minting in the last tick it used, so IDs still never repeat or decrease.
///
/// # Examples
///
/// ```
/// use atomflake::{Clock, Generator, Layout};
///
/// /// A clock stuck at one instant: fine for a test, the sequence still advances.
/// struct Frozen(u64);
///
/// impl Clock for Frozen {
///     fn unix_ms(&self) -> u64 {
///         self.0
///     }
/// }
///
/// let generator = Generator::with_clock(Layout::TWITTER, 1, Frozen(1_700_000_000_000))?;
/// let (a, b) = (generator.try_next_id()?, generator.try_next_id()?);
/// assert_eq!(Layout::TWITTER.decode(b).sequence, Layout::TWITTER.decode(a).sequence + 1);
/// # Ok::<(), atomflake::Error>(())
/// ```
pub trait Clock {
    /// Milliseconds since 1970-01-01T00:00:00Z. Called once per minted ID: keep it cheap.
    fn unix_ms(&self) -> u64;

    /// An up-to-date read, for the generator's waiting path. A clock whose
    /// [`unix_ms`](Self::unix_ms) may lag (such as [`MonotonicClock`], which reads the time its thread stored) overrides this with a
    /// precise read, so that a generator waiting for the next tick never depends on a
    /// background thread being scheduled.
    fn precise_unix_ms(&self) -> u64 {
        self.unix_ms()
    }

    /// How long until this clock reads `unix_ms` (zero when it already does), to finer than
    /// a millisecond; `None` (the default) when the clock cannot tell.
    ///
    /// A generator whose tick is spent sleeps for most of this time and spins the rest
    /// ([`Wait::Sleep`](crate::Wait::Sleep)); with `None` it spins and yields instead. A
    /// clock that does not advance with real time (a [`ManualClock`]) must return `None`.
    fn time_until(&self, unix_ms: u64) -> Option<Duration> {
        let _ = unix_ms;
        None
    }
}

/// `Clock` for pointers to a clock: each method reads the clock pointed to.
macro_rules! clock_through {
    ($($pointer:ty),*) => {
        $(
            impl<C: Clock + ?Sized> Clock for $pointer {
                #[inline]
                fn unix_ms(&self) -> u64 {
                    (**self).unix_ms()
                }

                #[inline]
                fn precise_unix_ms(&self) -> u64 {
                    (**self).precise_unix_ms()
                }

                fn time_until(&self, unix_ms: u64) -> Option<Duration> {
                    (**self).time_until(unix_ms)
                }
            }
        )*
    };
}

clock_through!(&C, std::sync::Arc<C>, Box<C>);

/// The process-wide quanta clock, converted to Unix time by the disciplined [`Timeline`].
///
/// Built once per process: quanta's first calibration can take up to ~200 ms.
///
/// Reading the time converts quanta's raw counter to Unix ms with the timeline's current
/// segment, one 64×64-bit multiply: a fixed-point form of quanta's own calibration (read
/// back from quanta at the anchor, see [`Anchor::capture`]), re-anchored to the wall clock
/// by the discipline thread ([`discipline`](crate::discipline)). Going through quanta's
/// `Instant`/`Duration` instead costs a non-inlined call, a division of nanoseconds into
/// seconds and a multiplication back, measurably on the minting path.
#[derive(Debug)]
struct Anchor {
    clock: quanta::Clock,
    discipline: Discipline,
    timeline: Timeline,
    /// Whether the discipline thread runs, and so keeps [`RECENT_UNIX_MS`] fresh: set once
    /// the thread is started, cleared in a child of a fork ([`stop_heartbeat`]), which has
    /// no such thread.
    ticking: ProcessAtomicBool,
}

/// The clock's time, Unix ms, as the discipline thread read it just after the start of
/// each of the clock's milliseconds: what [`MonotonicClock::unix_ms`] returns. On a cache
/// line of its own, so that no other static's writes evict it from the minting threads'
/// caches.
static RECENT_UNIX_MS: CachePadded<ProcessAtomicU64> = CachePadded::new(ProcessAtomicU64::new(0));

/// How long after a millisecond starts the discipline thread aims to wake, so that the
/// time it stores is that millisecond's and not the one before (a sleep never wakes early,
/// but the counter and the clock's rate are read a few ns apart).
#[cfg(not(loom))]
const WAKE_AFTER: Duration = Duration::from_micros(5);

static ANCHOR: OnceLock<Anchor> = OnceLock::new();

/// A hook for clock steps, shared so that the discipline thread can call it after letting
/// go of [`STEP_HOOK`].
/// The standard `Arc` under loom too: the static lives outside any model.
type Hook = std::sync::Arc<dyn Fn(ClockStep) + Send + Sync>;

/// The hook for clock steps, and the offset change that counts as one. Held only to set,
/// clone or clear it, never while a hook runs: a hook may call
/// [`MonotonicClock::on_step`] itself.
static STEP_HOOK: Mutex<Option<(Duration, Hook)>> = Mutex::new(None);

impl Anchor {
    fn get() -> &'static Anchor {
        ANCHOR.get_or_init(|| {
            let anchor = Anchor::capture(quanta::Clock::new());
            anchor.refresh_recent();
            // Not under loom: the thread would outlive the model. The thread's own
            // `Anchor::get` waits for this initialisation to finish.
            #[cfg(not(loom))]
            {
                let started = std::thread::Builder::new()
                    .name("atomflake-discipline".into())
                    .spawn(Anchor::discipline_thread)
                    .is_ok();
                // Relaxed: published with the anchor itself, by the `OnceLock`.
                anchor.ticking.store(started, Ordering::Relaxed);
            }
            #[cfg(not(loom))]
            if !anchor.ticking.load(Ordering::Relaxed) {
                // No thread will ever renew the first piece: give it no horizon, so that
                // the clock runs on at the calibrated rate, undisciplined, rather than 1%
                // slow after a second. No other writer exists, so no reading can go back.
                let first = anchor.timeline.read(|| 0).0;
                anchor.timeline.publish(Segment::new(
                    first.start,
                    first.at,
                    first.scale,
                    u64::MAX,
                    first.slow,
                ));
            }
            anchor
        })
    }

    fn capture(clock: quanta::Clock) -> Anchor {
        // quanta's calibration, read back: nanoseconds per 2^50 raw counts (about four
        // days of a 3 GHz TSC; exact to quanta's own precision, a few parts in 10^15).
        const PROBE_BITS: u32 = 50;
        let nanos_per_probe = u128::from(clock.delta_as_nanos(0, 1 << PROBE_BITS));
        // ms per count `<< 64`: fits a u64 for any counter faster than 1 kHz.
        let nominal = u64::try_from(fixed_from_ns(nanos_per_probe) >> PROBE_BITS).unwrap_or(u64::MAX);
        let discipline = Discipline::new(nominal);
        let (raw, wall) = wall_at(&clock);
        Anchor {
            clock,
            discipline,
            timeline: Timeline::new(discipline.anchor(raw, wall)),
            ticking: ProcessAtomicBool::new(false),
        }
    }

    /// Stores the clock's time for [`MonotonicClock::unix_ms`] to read.
    fn refresh_recent(&self) {
        // Relaxed: the value orders nothing; a single writer's stores are seen in order,
        // and the time only grows.
        RECENT_UNIX_MS.store(self.precise_unix_ms(), Ordering::Relaxed);
    }

    /// Sleeps until just after the clock's next millisecond starts.
    #[cfg(not(loom))]
    fn sleep_to_next_ms(&self) {
        let next = self.precise_unix_ms().saturating_add(1);
        loop {
            let left = self.time_until(next);
            if left.is_zero() {
                return;
            }
            std::thread::sleep(left + WAKE_AFTER);
        }
    }

    #[inline]
    fn precise_unix_ms(&self) -> u64 {
        let (segment, raw) = self.timeline.read(|| self.clock.raw());
        segment.unix_ms_at(raw)
    }

    /// How long from now until the clock reads `unix_ms`, to the nanosecond.
    fn time_until(&self, unix_ms: u64) -> Duration {
        let (segment, raw) = self.timeline.read(|| self.clock.raw());
        segment.time_until(raw, unix_ms, self.discipline.nominal())
    }

    /// The discipline thread: stores the clock's time at the start of each of its
    /// milliseconds for [`MonotonicClock::unix_ms`], and compares the clock with the wall
    /// clock every [`CHECK_INTERVAL`], publishing the segment the [`Discipline`] asks for.
    ///
    /// A thread rather than the minting path: minting then only reads a segment, and no
    /// mint ever pays for a wall-clock read or a publish.
    ///
    /// A check publishes whenever it gets to it: a thread descheduled between reading the
    /// clocks and publishing cannot make the clock go back (see `discipline.rs`). The step
    /// hook runs outside [`STEP_HOOK`]'s lock and inside `catch_unwind`, so a hook can
    /// neither deadlock the thread nor end it (see [`MonotonicClock::on_step`]).
    #[cfg(not(loom))]
    fn discipline_thread() {
        let anchor = Anchor::get();
        let mut steering = Steering::new(anchor.discipline, anchor.timeline.read(|| 0).0);
        let mut next_check = std::time::Instant::now() + CHECK_INTERVAL;
        loop {
            anchor.sleep_to_next_ms();
            anchor.refresh_recent();
            let now = std::time::Instant::now();
            if now < next_check {
                continue;
            }
            next_check = now + CHECK_INTERVAL;
            let (raw, wall) = wall_at(&anchor.clock);
            // A clone, so that the hook runs with the lock released.
            let hook = step_hook().clone();
            let step = steering.check(
                &anchor.timeline,
                raw,
                wall,
                hook.as_ref().map(|(bound, _)| *bound),
            );
            // A jump forward shows at once.
            anchor.refresh_recent();
            if let (Some(step), Some((_, hook))) = (step, hook) {
                let call = std::panic::AssertUnwindSafe(|| hook(step));
                if std::panic::catch_unwind(call).is_err() {
                    // The panic hook has reported it. Drop the hook, unless it was replaced
                    // meanwhile: it would panic again at the next step.
                    let mut current = step_hook();
                    if current
                        .as_ref()
                        .is_some_and(|(_, set)| std::sync::Arc::ptr_eq(set, &hook))
                    {
                        *current = None;
                    }
                }
            }
        }
    }
}

/// The time the default clock's thread last stored for [`MonotonicClock::unix_ms`], then
/// the clock's precise time (Unix ms); `None` while no thread stores it (no default clock
/// in this process yet, or its thread did not start).
///
/// The stored time is the process's heartbeat: a child of a fork has no discipline thread,
/// so its copy stands at the last time stored before the fork, while its precise clock
/// goes on (`fork.rs`).
pub(crate) fn heartbeat() -> Option<(u64, u64)> {
    // Relaxed: a flag that only goes from set to clear, in a child (`stop_heartbeat`), on
    // the one thread the child has.
    let anchor = ANCHOR
        .get()
        .filter(|anchor| anchor.ticking.load(Ordering::Relaxed))?;
    // Relaxed: see `Anchor::refresh_recent`.
    let stored = RECENT_UNIX_MS.load(Ordering::Relaxed);
    Some((stored, anchor.precise_unix_ms()))
}

/// Tells [`heartbeat`], and the default clocks made from now on, that no discipline thread
/// stores the time any more: called in a child of a fork, whose copy of the stored time
/// stands still (`generator/atfork.rs`). Takes no lock and allocates nothing.
#[cfg_attr(any(loom, not(unix)), allow(dead_code))]
pub(crate) fn stop_heartbeat() {
    if let Some(anchor) = ANCHOR.get() {
        // Relaxed: see `heartbeat`.
        anchor.ticking.store(false, Ordering::Relaxed);
    }
}

/// [`STEP_HOOK`], locked. A poisoned lock only means a thread panicked while holding it
/// (never inside a hook, which runs unlocked); the value inside is still right.
#[cfg_attr(loom, allow(dead_code))]
fn step_hook() -> std::sync::MutexGuard<'static, Option<(Duration, Hook)>> {
    STEP_HOOK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A raw count and the wall-clock time at it (fixed-point Unix ms): the wall clock read
/// between two counter reads, retried while a read takes longer than 20 µs (a preempted
/// read would misplace the wall clock against the counter).
fn wall_at(clock: &quanta::Clock) -> (u64, u128) {
    let sample = || {
        let before = clock.raw();
        // A system clock set before 1970 reads as 1970: generators then report the clock
        // as before their layout's epoch instead of panicking here.
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        let after = clock.raw();
        let spread = clock.delta_as_nanos(before, after);
        (
            before + (after.saturating_sub(before)) / 2,
            fixed_from_ns(wall.as_nanos()),
            spread,
        )
    };
    let mut best = sample();
    for _ in 0..4 {
        if best.2 <= 20_000 {
            break;
        }
        let next = sample();
        if next.2 < best.2 {
            best = next;
        }
    }
    (best.0, best.1)
}

/// The default clock: quanta's monotonic TSC clock, disciplined to the wall clock, never
/// moving back, read on the minting path with one atomic load.
///
/// The first `MonotonicClock` in a process calibrates quanta, reads `SystemTime` once and
/// starts the process's discipline thread; later ones share all of that, so creating one
/// is cheap and every generator in the process agrees on the time.
///
/// - [`unix_ms`](Clock::unix_ms), what a mint reads, is one `Relaxed` load of the time the
///   discipline thread stored just after the clock's current millisecond started (it wakes
///   for each one). So an ID's timestamp can lag the clock by the thread's wake-up
///   latency: a tick late while the thread has not yet run in this millisecond, more
///   when it is descheduled longer. `benches/README.md` has the measured lag.
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
    anchor: &'static Anchor,
    /// The anchor's `ticking`, kept beside the pointer so that a read needs no
    /// dereference: when no discipline thread runs, reads are precise.
    ticking: bool,
}

impl MonotonicClock {
    /// The process's monotonic clock (anchored on first use).
    pub fn new() -> MonotonicClock {
        let anchor = Anchor::get();
        MonotonicClock {
            anchor,
            // Relaxed: see `heartbeat`.
            ticking: anchor.ticking.load(Ordering::Relaxed),
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
    /// `on_step` itself, to replace or clear itself; the next step calls the hook set last.
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
        *step_hook() = Some((bound, std::sync::Arc::new(hook)));
    }
}

impl MonotonicClock {
    /// The read of a clock whose discipline thread did not start: out of line, so that the
    /// common read inlines as one load.
    #[cold]
    #[inline(never)]
    fn unticked_unix_ms(&self) -> u64 {
        self.anchor.precise_unix_ms()
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
        if self.ticking {
            // Relaxed: see `Anchor::refresh_recent`.
            RECENT_UNIX_MS.load(Ordering::Relaxed)
        } else {
            self.unticked_unix_ms()
        }
    }

    #[inline]
    fn precise_unix_ms(&self) -> u64 {
        self.anchor.precise_unix_ms()
    }

    fn time_until(&self, unix_ms: u64) -> Option<Duration> {
        Some(self.anchor.time_until(unix_ms))
    }
}

/// [`MonotonicClock`] read precisely on every call: one TSC read and a multiply-add per
/// ID, for timestamps that are never late (the default clock's can lag by the discipline
/// thread's wake-up latency).
///
/// # Examples
///
/// ```
/// use atomflake::{Clock, Generator, Layout, PreciseClock};
///
/// let generator = Generator::with_clock(Layout::TWITTER, 7, PreciseClock::new())?;
/// let before = generator.clock().unix_ms();
/// assert!(Layout::TWITTER.decode(generator.next_id()).unix_ms >= before);
/// # Ok::<(), atomflake::Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct PreciseClock {
    anchor: &'static Anchor,
}

impl PreciseClock {
    /// The process's monotonic clock, read precisely (anchored on first use, as
    /// [`MonotonicClock::new`]).
    pub fn new() -> PreciseClock {
        PreciseClock {
            anchor: Anchor::get(),
        }
    }
}

impl Default for PreciseClock {
    fn default() -> PreciseClock {
        PreciseClock::new()
    }
}

impl Clock for PreciseClock {
    #[inline]
    fn unix_ms(&self) -> u64 {
        self.anchor.precise_unix_ms()
    }

    fn time_until(&self, unix_ms: u64) -> Option<Duration> {
        Some(self.anchor.time_until(unix_ms))
    }
}

/// A clock set by hand, for tests and simulations. Clones share one time.
///
/// Under `--cfg loom` its time is a loom atomic, so loom models can advance and rewind it
/// from a model thread.
///
/// # Examples
///
/// ```
/// use atomflake::{Clock, ManualClock};
///
/// let clock = ManualClock::new(1_700_000_000_000);
/// clock.advance(5);
/// clock.rewind(2);
/// assert_eq!(clock.unix_ms(), 1_700_000_000_003);
/// clock.set(7);
/// assert_eq!(clock.unix_ms(), 7);
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock {
    unix_ms: Arc<AtomicU64>,
}

// The clock's value orders nothing else: a generator's uniqueness never depends on which
// time it reads, only on its own state word. So every access is `Relaxed`.
impl ManualClock {
    /// A clock at `unix_ms`.
    pub fn new(unix_ms: u64) -> ManualClock {
        ManualClock {
            unix_ms: Arc::new(AtomicU64::new(unix_ms)),
        }
    }

    /// Sets the time (it may move back).
    pub fn set(&self, unix_ms: u64) {
        self.unix_ms.store(unix_ms, Ordering::Relaxed);
    }

    /// Moves the time forward by `ms`, saturating at `u64::MAX`.
    pub fn advance(&self, ms: u64) {
        // Relaxed RMW: the new value is all that matters.
        let _ = self
            .unix_ms
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                Some(t.saturating_add(ms))
            });
    }

    /// Moves the time back by `ms`, saturating at 0.
    pub fn rewind(&self, ms: u64) {
        // Relaxed RMW: the new value is all that matters.
        let _ = self
            .unix_ms
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                Some(t.saturating_sub(ms))
            });
    }
}

impl Clock for ManualClock {
    #[inline]
    fn unix_ms(&self) -> u64 {
        self.unix_ms.load(Ordering::Relaxed)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

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
    fn time_until_counts_down_to_the_millisecond() {
        for clock in [&MonotonicClock::new() as &dyn Clock, &PreciseClock::new()] {
            let start = std::time::Instant::now();
            let target = clock.precise_unix_ms() + 5;
            let left = clock.time_until(target).unwrap();
            // 4 to 5 ms before `target` when it was read, less what passed since (which a
            // loaded machine can stretch), and a millisecond for rounding.
            let spent = start.elapsed();
            assert!(
                left + spent > Duration::from_millis(3) && left <= Duration::from_millis(5),
                "{left:?} left, {spent:?} spent"
            );
            std::thread::sleep(left);
            assert!(clock.precise_unix_ms() >= target, "woke before {target}");
            assert_eq!(clock.time_until(target), Some(Duration::ZERO));
            assert_eq!(clock.time_until(0), Some(Duration::ZERO));
        }
        assert_eq!(
            ManualClock::new(5).time_until(10),
            None,
            "a manual clock cannot tell"
        );
    }

    #[test]
    fn monotonic_clock_reads_the_millisecond_the_thread_stored() {
        let clock = MonotonicClock::new();
        assert!(clock.ticking, "the discipline thread runs");
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
    fn fixed_point_conversion_agrees_with_quanta() {
        let anchor = Anchor::capture(quanta::Clock::new());
        let clock = &anchor.clock;
        let first = anchor.timeline.read(|| 0).0;
        // The calibrated rate all along (the first piece's horizon is 1 s away).
        let first = Segment::new(first.start, first.at, first.scale, u64::MAX, first.slow);
        for seconds in [0_u64, 1, 59, 3_600, 86_400, 365 * 86_400, 50 * 365 * 86_400] {
            for extra_ns in [0_u64, 1, 999_999, 123_456_789] {
                let ns = seconds * 1_000_000_000 + extra_ns;
                // The raw count quanta scales to `ns` after the anchor (found by bisection).
                let (mut low, mut high) = (first.start, u64::MAX);
                while low < high {
                    let mid = low + (high - low) / 2;
                    if clock.delta_as_nanos(first.start, mid) < ns {
                        low = mid + 1;
                    } else {
                        high = mid;
                    }
                }
                let quanta_ns = clock.delta_as_nanos(first.start, low);
                let start_ns = u128::from(crate::clock::discipline::ns_from_fixed(first.at));
                let expected = (start_ns + u128::from(quanta_ns)) / 1_000_000;
                let ours = u128::from(first.unix_ms_at(low));
                // Equal, but for rounding right at a millisecond boundary.
                assert!(
                    ours.abs_diff(expected) <= 1,
                    "{seconds}s+{extra_ns}ns: {ours} vs {expected}"
                );
            }
        }
    }

    #[test]
    fn monotonic_clocks_share_one_anchor() {
        assert!(core::ptr::eq(
            MonotonicClock::new().anchor,
            MonotonicClock::default().anchor
        ));
    }

    #[test]
    fn manual_clock_moves_both_ways_and_saturates() {
        let clock = ManualClock::new(10);
        let shared = clock.clone();
        shared.advance(5);
        assert_eq!(clock.unix_ms(), 15);
        clock.rewind(20);
        assert_eq!(shared.unix_ms(), 0);
        clock.set(u64::MAX - 1);
        clock.advance(5);
        assert_eq!(clock.unix_ms(), u64::MAX);
        assert_eq!(clock.precise_unix_ms(), u64::MAX);
    }
}
