//! The process-wide anchor that [`MonotonicClock`] and [`PreciseClock`] read: quanta's
//! counter converted to Unix time by the disciplined [`Timeline`], the discipline thread
//! that keeps it on the wall clock and stores the time for the minting path, and the hook
//! for clock steps.

#[cfg(not(loom))]
use super::discipline::{CHECK_INTERVAL, Segment, Steering};
use super::discipline::{ClockStep, Discipline, Timeline, fixed_from_ns};
#[cfg(doc)]
use super::{Clock, MonotonicClock, PreciseClock};
use crate::sync::{Ordering, ProcessAtomicBool, ProcessAtomicU64};
use crossbeam_utils::CachePadded;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The process-wide quanta clock, converted to Unix time by the disciplined [`Timeline`].
///
/// Built once per process: quanta's first calibration can take up to ~200 ms.
///
/// Reading the time converts quanta's raw counter to Unix ms with the timeline's current
/// segment, one 64×64-bit multiply: a fixed-point form of quanta's own calibration (read
/// back from quanta at the anchor, see [`Anchor::capture`]), re-anchored to the wall clock
/// by the discipline thread ([`discipline`](super::discipline)). Going through quanta's
/// `Instant`/`Duration` instead costs a non-inlined call, a division of nanoseconds into
/// seconds and a multiplication back, measurably on the minting path.
#[derive(Debug)]
pub(super) struct Anchor {
    clock: quanta::Clock,
    discipline: Discipline,
    timeline: Timeline,
    /// Set in a child of a fork whose parent ran the discipline thread: the child's next
    /// [`Anchor::get`] (a clock being made) or [`Anchor::adopt`] (a clock made before the
    /// fork, read) starts the child's own thread.
    orphaned: ProcessAtomicBool,
}

/// How many forks lie between this process and the first one of its line that ran the
/// crate's fork handler: the child handler adds one ([`after_fork_in_child`]). A generator
/// records it when built, trusts the heartbeat only in the same line ([`heartbeat`]), and
/// is refused in any other (a descendant with a reused process ID included).
static LINEAGE: ProcessAtomicU64 = ProcessAtomicU64::new(0);

/// The clock's time, Unix ms, as the discipline thread read it just after the start of
/// each of the clock's milliseconds: what [`MonotonicClock::unix_ms`] returns. 0 while no
/// discipline thread of this process stores it: before the first clock is made, where the
/// thread could not be started, and in a child of a fork until the child's own thread
/// starts ([`after_fork_in_child`] clears it); a reading of 0 reads the clock precisely
/// instead, and adopts the clock in a child. On a cache line of its own, so that no other
/// static's writes evict it from the minting threads' caches.
pub(super) static RECENT_UNIX_MS: CachePadded<ProcessAtomicU64> = CachePadded::new(ProcessAtomicU64::new(0));

/// How long after a millisecond starts the discipline thread aims to wake, so that the
/// time it stores is that millisecond's and not the one before (a sleep never wakes early,
/// but the counter and the clock's rate are read a few ns apart).
#[cfg(not(loom))]
const WAKE_AFTER: Duration = Duration::from_micros(5);

static ANCHOR: OnceLock<Anchor> = OnceLock::new();

/// A hook for clock steps, shared so that the discipline thread can call it after letting
/// go of [`STEP_HOOK`].
/// The standard `Arc` under loom too: the static lives outside any model.
pub(super) type Hook = std::sync::Arc<dyn Fn(ClockStep) + Send + Sync>;

/// The hook for clock steps, and the offset change that counts as one. Held only to set,
/// clone or clear it, never while a hook runs: a hook may call
/// [`MonotonicClock::on_step`] itself. The discipline thread never waits for it: it keeps
/// its own copy, read again with `try_lock` when [`STEP_HOOK_VERSION`] says it changed. A
/// child forked while a thread of its parent held the lock has a copy that stays locked
/// for good; its discipline thread runs on (with the hook it could read, or none).
static STEP_HOOK: Mutex<Option<(Duration, Hook)>> = Mutex::new(None);

/// How many times [`STEP_HOOK`] has been changed: bumped under its lock, after the change.
/// The standard atomic under loom too, as [`STEP_HOOK`].
static STEP_HOOK_VERSION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Anchor {
    /// The process's anchor, made on first use; in a child of a fork whose parent ran the
    /// discipline thread, the child's own thread is started first ([`Anchor::adopt`]).
    /// Called where a clock is made, never on the minting path.
    pub(super) fn get() -> &'static Anchor {
        let anchor = ANCHOR.get_or_init(|| {
            let anchor = Anchor::capture(quanta::Clock::new());
            // Not under loom: the thread would outlive the model, and without it the
            // stored time stays 0, so that clocks read precisely. The thread's own
            // `Anchor::get` waits for this initialisation to finish.
            #[cfg(not(loom))]
            anchor.start_discipline();
            anchor
        });
        anchor.adopt();
        anchor
    }

    /// Starts the discipline thread: once when the anchor is made, and again in each child
    /// of a fork that makes or reads a clock ([`Anchor::adopt`]).
    ///
    /// First a check against the wall clock, as the thread's own ([`Steering::catch_up`]):
    /// in a child, the clock runs on from the time its parent's clock had reached at the
    /// fork, and since then on the parent's last piece, 1% slow from a second after the
    /// fork; it jumps forward to the wall clock here if it is behind, before the time is
    /// stored, so that the child's first reading is on the wall clock. Then the stored time
    /// is fresh before the thread exists, so no store of this thread's can land after one
    /// of the discipline thread's and set the time back.
    #[cfg(not(loom))]
    fn start_discipline(&self) {
        let mut steering = Steering::new(self.discipline, self.timeline.read(|| 0).0);
        let (raw, wall) = wall_at(&self.clock);
        steering.catch_up(&self.timeline, raw, wall);
        self.refresh_recent();
        // A child of a fork gets the handler's care only if it is registered before the
        // fork: a process that makes a clock but no generator forks too.
        #[cfg(unix)]
        crate::generator::atfork::install();
        let started = std::thread::Builder::new()
            .name("atomflake-discipline".into())
            .spawn(move || Anchor::discipline_thread(steering))
            .is_ok();
        if !started {
            // No thread will store the time: clocks read precisely (Relaxed: a reader that
            // still reads the time stored above reads no later than the precise clock).
            RECENT_UNIX_MS.store(0, Ordering::Relaxed);
            // No thread will renew the current piece either: give it no horizon, so that the
            // clock runs on at the calibrated rate, undisciplined, rather than 1% slow
            // after a second. No other writer exists, so no reading can go back (a piece
            // past its horizon runs slower than this one, never faster).
            let current = self.timeline.read(|| 0).0;
            self.timeline.publish(Segment::new(
                current.start,
                current.at,
                current.scale,
                u64::MAX,
                current.slow,
            ));
        }
    }

    /// In a child of a fork whose parent ran the discipline thread: starts the child's
    /// own ([`Anchor::start_discipline`], which first steps a clock that is behind forward
    /// to the wall clock), once, however many threads of the child make or read clocks at
    /// the same time. Without it, the child's clock would stay at the time the parent's had
    /// reached at the fork, then run 1% slow for good. Called where a clock is made
    /// ([`Anchor::get`]) and where a clock made before the fork is read with no time
    /// stored, never on the minting path's common read.
    #[inline]
    pub(super) fn adopt(&self) {
        // Relaxed: set in a child by the fork handler on the child's only thread, before
        // any other thread of the child exists; `adopt_now` settles who starts the thread.
        #[cfg(not(loom))]
        if self.orphaned.load(Ordering::Relaxed) {
            self.adopt_now();
        }
    }

    /// [`Anchor::adopt`]'s work, out of line.
    #[cfg(not(loom))]
    #[cold]
    #[inline(never)]
    fn adopt_now(&self) {
        // Relaxed: the flag is the only thing handed over; the winner starts the thread.
        if self.orphaned.swap(false, Ordering::Relaxed) {
            self.start_discipline();
        }
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
            orphaned: ProcessAtomicBool::new(false),
        }
    }

    /// Stores the clock's time for [`MonotonicClock::unix_ms`] to read.
    #[cfg(not(loom))]
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
    pub(super) fn precise_unix_ms(&self) -> u64 {
        let (segment, raw) = self.timeline.read(|| self.clock.raw());
        segment.unix_ms_at(raw)
    }

    /// How long from now until the clock reads `unix_ms`, to the nanosecond.
    pub(super) fn time_until(&self, unix_ms: u64) -> Duration {
        let (segment, raw) = self.timeline.read(|| self.clock.raw());
        segment.time_until(raw, unix_ms, self.discipline.nominal())
    }

    /// The discipline thread: stores the clock's time at the start of each of its
    /// milliseconds for [`MonotonicClock::unix_ms`], and compares the clock with the wall
    /// clock every [`CHECK_INTERVAL`], publishing the segment the [`Discipline`] asks for,
    /// with `steering` (the writer's side, from [`Anchor::start_discipline`]'s check).
    ///
    /// A thread rather than the minting path: minting then only reads a segment, and no
    /// mint ever pays for a wall-clock read or a publish.
    ///
    /// A check publishes whenever it gets to it: a thread descheduled between reading the
    /// clocks and publishing cannot make the clock go back (see [`discipline`](super::discipline)). The step
    /// hook runs outside [`STEP_HOOK`]'s lock and inside `catch_unwind`, so a hook can
    /// neither deadlock the thread nor end it (see [`MonotonicClock::on_step`]).
    #[cfg(not(loom))]
    fn discipline_thread(mut steering: Steering) {
        let anchor = Anchor::get();
        let mut next_check = std::time::Instant::now() + CHECK_INTERVAL;
        // This thread's copy of the hook, as of `STEP_HOOK_VERSION` `seen` (none read yet).
        let mut hook: Option<(Duration, Hook)> = None;
        let mut seen = None;
        loop {
            anchor.sleep_to_next_ms();
            anchor.refresh_recent();
            let now = std::time::Instant::now();
            if now < next_check {
                continue;
            }
            next_check = now + CHECK_INTERVAL;
            let (raw, wall) = wall_at(&anchor.clock);
            // Acquire: pairs with the Release bump after a change, which the lock then shows.
            let version = STEP_HOOK_VERSION.load(std::sync::atomic::Ordering::Acquire);
            if seen != Some(version)
                && let Some(current) = try_step_hook()
            {
                // A clone, so that the hook runs with the lock released.
                hook.clone_from(&*current);
                seen = Some(version);
            }
            let step = steering.check(
                &anchor.timeline,
                raw,
                wall,
                hook.as_ref().map(|(bound, _)| *bound),
            );
            // A jump forward shows at once.
            anchor.refresh_recent();
            if let (Some(step), Some((_, called))) = (step, &hook) {
                let call = std::panic::AssertUnwindSafe(|| called(step));
                if std::panic::catch_unwind(call).is_err() {
                    // The panic hook has reported it. Drop the hook, unless it was replaced
                    // meanwhile: it would panic again at the next step.
                    if let Some(mut current) = try_step_hook()
                        && current
                            .as_ref()
                            .is_some_and(|(_, set)| std::sync::Arc::ptr_eq(set, called))
                    {
                        *current = None;
                        STEP_HOOK_VERSION.fetch_add(1, std::sync::atomic::Ordering::Release);
                    }
                    hook = None;
                }
            }
        }
    }
}

/// The current [`LINEAGE`]: what a generator records when it is built, for [`heartbeat`].
pub(crate) fn lineage() -> u64 {
    // Relaxed: changed only by the fork handler, in a child, before the child has a second
    // thread.
    LINEAGE.load(Ordering::Relaxed)
}

/// The time the default clock's thread last stored for [`MonotonicClock::unix_ms`], then
/// the clock's precise time (Unix ms), for a generator built in `lineage` ([`lineage`]);
/// `None` while no thread stores it (no default clock in this process yet, or its thread
/// did not start, or not yet in a child of a fork: [`RECENT_UNIX_MS`] is 0) and in any
/// other line.
///
/// The stored time is the process's heartbeat: a child of a fork has no discipline thread
/// until it makes or reads a clock, so its copy would stand at the last time stored before
/// the fork while its precise clock goes on ([`Birth`](crate::generator::fork::Birth)); the
/// child handler clears it ([`after_fork_in_child`]). Once the
/// child has started its own thread, the heartbeat beats again, but only for the
/// generators built in the child: the line tells them from the ones copied from the
/// parent, which must check the process.
pub(crate) fn heartbeat(lineage: u64) -> Option<(u64, u64)> {
    if self::lineage() != lineage {
        return None;
    }
    let anchor = ANCHOR.get()?;
    // Relaxed: see `Anchor::refresh_recent`. Cleared only in a child
    // (`after_fork_in_child`), on the one thread the child has: a time stored is one this
    // process stored.
    let stored = RECENT_UNIX_MS.load(Ordering::Relaxed);
    (stored != 0).then(|| (stored, anchor.precise_unix_ms()))
}

/// Called in a child of a fork ([`atfork`](crate::generator::atfork)), whose copy of the
/// stored time stands still: starts a new [`LINEAGE`], clears the stored time, which tells
/// [`heartbeat`] and every default clock (made before the fork or after) that no
/// discipline thread stores it, and leaves the child's first clock made or read to start
/// its own ([`Anchor::adopt`]). Takes no lock and allocates nothing.
#[cfg_attr(any(loom, not(unix)), allow(dead_code))]
pub(crate) fn after_fork_in_child() {
    // Relaxed: see `lineage`.
    LINEAGE.fetch_add(1, Ordering::Relaxed);
    // Relaxed: see `heartbeat` and `Anchor::adopt`. A time stored means the parent's
    // thread ran (it is stored before the thread starts, and cleared where it fails to).
    if RECENT_UNIX_MS.swap(0, Ordering::Relaxed) != 0
        && let Some(anchor) = ANCHOR.get()
    {
        anchor.orphaned.store(true, Ordering::Relaxed);
    }
}

/// Sets [`STEP_HOOK`] to `hook` ([`MonotonicClock::on_step`]), and drops the one it
/// replaces once the lock is released.
pub(super) fn set_step_hook(hook: Option<(Duration, Hook)>) {
    let mut current = STEP_HOOK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let replaced = std::mem::replace(&mut *current, hook);
    // Release: see the Acquire load in the discipline thread.
    STEP_HOOK_VERSION.fetch_add(1, std::sync::atomic::Ordering::Release);
    drop(current);
    drop(replaced);
}

/// [`STEP_HOOK`], locked, unless another thread holds it (`None`): the discipline thread
/// never waits for it. A poisoned lock only means a thread panicked while holding it
/// (never inside a hook, which runs unlocked); the value inside is still right.
#[cfg_attr(loom, allow(dead_code))]
fn try_step_hook() -> Option<std::sync::MutexGuard<'static, Option<(Duration, Hook)>>> {
    match STEP_HOOK.try_lock() {
        Ok(guard) => Some(guard),
        Err(std::sync::TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

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
                let start_ns = u128::from(super::super::discipline::ns_from_fixed(first.at));
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
}
