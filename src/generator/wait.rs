//! Waiting for a spent tick: the [`Wait`] policy, the sleep before a tick boundary
//! ([`nap`]) and the spin-then-yield between clock reads ([`Backoff`]); how long any
//! wait of a mint may last ([`Until`]); and the timer an async wait sleeps on ([`Sleep`]).
//!
//! Nothing here decides *whether* to wait; the CAS loop in [`minter`](super::minter) does, from
//! the pure transition in [`state`](super::state). This module only spends the time well.

use crate::clock::Clock;
use crate::sync::{self, Ordering, ProcessAtomicU64};
use std::future::Future;
use std::time::{Duration, Instant};

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

/// How long a mint waits for a transient refusal to pass: every waiting mint's one
/// policy, for the time each refusal says ([`MintError::retry_after`](crate::MintError::retry_after)).
///
/// # Examples
///
/// ```
/// use atomflake::Until;
/// use std::time::{Duration, Instant};
///
/// let soon = Until::timeout(Duration::from_millis(5));
/// assert!(matches!(soon, Until::Deadline(Some(at)) if at > Instant::now() - Duration::from_secs(1)));
/// // No deadline `Instant` can represent: none.
/// assert_eq!(Until::timeout(Duration::MAX), Until::Deadline(None));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Until {
    /// As `next_id`: for every spent tick and pending mark; for a failing store, the mark's
    /// patience. Only a permanent refusal, or a store that stays failed, ends the wait.
    Patient,
    /// As the `_timeout` methods: while the refusal is transient, until the deadline
    /// (`None`: no deadline).
    Deadline(Option<Instant>),
}

impl Until {
    /// A wait of at most `timeout` from now. A deadline `Instant` cannot represent
    /// (`Duration::MAX`, say) is none: the wait lasts while the refusal is transient.
    pub fn timeout(timeout: Duration) -> Until {
        Until::Deadline(Instant::now().checked_add(timeout))
    }

    /// Whether the deadline has come.
    pub(crate) fn passed(self) -> bool {
        matches!(self, Until::Deadline(Some(deadline)) if Instant::now() >= deadline)
    }

    /// Whether the deadline comes before something `left` from now can (or at the same
    /// time): waiting for it is in vain. With no time left, whether the deadline has come.
    pub(crate) fn comes_within(self, left: Duration) -> bool {
        match self {
            Until::Deadline(Some(deadline)) => {
                Instant::now().checked_add(left).is_none_or(|at| at >= deadline)
            }
            _ => false,
        }
    }

    /// How long until the deadline, at most `most`.
    pub(crate) fn at_most(self, most: Duration) -> Duration {
        match self {
            Until::Deadline(Some(deadline)) => most.min(deadline.saturating_duration_since(Instant::now())),
            _ => most,
        }
    }
}

/// How long before a tick boundary [`nap`] wakes, in ns: learned from how late sleeps
/// wake. Process-wide, since that lateness belongs to the operating system, not to one
/// generator.
static MARGIN_NS: ProcessAtomicU64 = ProcessAtomicU64::new(200_000);

/// The margin's bounds: a sleep is never planned to end later than 20 µs before the
/// tick, nor earlier than 1 ms before it.
const MARGIN_MIN: Duration = Duration::from_micros(20);
const MARGIN_MAX: Duration = Duration::from_millis(1);

/// Sleeps until shortly before `clock` reads `unix_ms`, when the clock can say how long
/// that is and it is longer than the margin; the caller spins the rest.
///
/// The margin tracks about the 90th percentile of how late sleeps wake (see
/// [`next_margin`]). A late wake costs latency, not IDs: the tick's sequence is still
/// there when the thread wakes, unless it wakes after the whole tick has passed.
#[cold]
pub(crate) fn nap<C: Clock>(clock: &C, unix_ms: u64) {
    nap_with(clock, unix_ms, &MARGIN_NS);
}

/// [`nap`] with the margin kept in `margin_ns`.
fn nap_with<C: Clock>(clock: &C, unix_ms: u64, margin_ns: &ProcessAtomicU64) {
    let Some(left) = clock.time_until(unix_ms) else {
        return;
    };
    // Relaxed: a tuning value, ordering nothing else.
    let margin = Duration::from_nanos(margin_ns.load(Ordering::Relaxed));
    let woke = sleep_time(left, margin).map(|sleep| {
        let start = Instant::now();
        std::thread::sleep(sleep);
        (sleep, start.elapsed())
    });
    let next = next_margin(margin, woke);
    margin_ns.store(
        u64::try_from(next.as_nanos()).unwrap_or(u64::MAX),
        Ordering::Relaxed,
    );
}

/// How long to sleep with `left` until the tick and `margin` to keep: none when the wait
/// is no longer than the margin.
fn sleep_time(left: Duration, margin: Duration) -> Option<Duration> {
    left.checked_sub(margin).filter(|sleep| !sleep.is_zero())
}

/// The margin after a nap: up by 9/64 after a wake later than `margin` past the planned
/// sleep, down by 1/64 otherwise (including no sleep at all, `woke` = `None`), within
/// [`MARGIN_MIN`]..=[`MARGIN_MAX`]. That settles where about one wake in ten is later
/// than the margin. `woke`: the sleep asked for and the time it took.
fn next_margin(margin: Duration, woke: Option<(Duration, Duration)>) -> Duration {
    let late = woke.is_some_and(|(asked, took)| took > asked + margin);
    let next = if late {
        margin + margin * 9 / 64
    } else {
        margin.saturating_sub(margin / 64)
    };
    next.clamp(MARGIN_MIN, MARGIN_MAX)
}

/// Waits between attempts: spin hints doubling up to 64, then yields. Never sleeps.
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    step: u32,
}

impl Backoff {
    /// After this many doublings (1 + 2 + … + 64 spin hints, a few µs), yield instead.
    const SPIN_STEPS: u32 = 7;

    /// How many spin hints the next [`snooze`](Self::snooze) gives; `None`: it yields.
    /// Under loom always `None`: a yield is what lets the other model threads run.
    fn spins(&self) -> Option<u32> {
        (self.step < Backoff::SPIN_STEPS && !cfg!(loom)).then(|| 1 << self.step)
    }

    pub(crate) fn snooze(&mut self) {
        match self.spins() {
            Some(spins) => {
                for _ in 0..spins {
                    sync::spin_loop();
                }
                self.step += 1;
            }
            None => sync::yield_now(),
        }
    }
}

/// The timer an async wait sleeps on: a runtime's. The async mints (`next_id_until`,
/// `fill_until`) wait with it, so they run on any runtime; [`Tokio`] is tokio's, which
/// `next_id_async` uses.
///
/// # Examples
///
/// A timer that only yields the thread, for an executor with none:
///
/// ```
/// use atomflake::{Generator, Layout, Sleep, Until};
/// use std::future::Future;
/// use std::time::Duration;
///
/// struct Yielding;
///
/// impl Sleep for Yielding {
///     fn sleep(&self, _: Duration) -> impl Future<Output = ()> {
///         self.yield_now()
///     }
///
///     fn yield_now(&self) -> impl Future<Output = ()> {
///         std::thread::yield_now();
///         std::future::ready(())
///     }
/// }
///
/// let generator = Generator::new(Layout::TWITTER, 1)?;
/// let id = block_on(generator.next_id_until(Until::Patient, &Yielding))?;
/// assert_eq!(Layout::TWITTER.decode(id).node, 1);
/// # // An executor that polls until done.
/// # fn block_on<F: Future>(future: F) -> F::Output {
/// #     let mut future = std::pin::pin!(future);
/// #     let mut context = std::task::Context::from_waker(std::task::Waker::noop());
/// #     loop {
/// #         if let std::task::Poll::Ready(output) = future.as_mut().poll(&mut context) {
/// #             return output;
/// #         }
/// #     }
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait Sleep {
    /// Completes after `duration`, or somewhat later.
    fn sleep(&self, duration: Duration) -> impl Future<Output = ()>;

    /// Lets the runtime run other tasks once, then completes.
    fn yield_now(&self) -> impl Future<Output = ()>;

    /// How late [`sleep`](Self::sleep) may complete: a wait shorter than twice this yields
    /// between clock reads instead of sleeping (1 ms, tokio's timer's resolution, unless
    /// overridden).
    fn resolution(&self) -> Duration {
        Duration::from_millis(1)
    }

    /// Waits `duration` by the monotonic clock, as the `_async` mints wait out a refusal's
    /// [`retry_after`](crate::MintError::retry_after): on the timer, or, when it is shorter
    /// than twice the [`resolution`](Self::resolution) (a timer that wakes a resolution late
    /// would double it), yielding to the runtime between reads of the clock until it has
    /// passed.
    fn wait(&self, duration: Duration) -> impl Future<Output = ()> {
        async move {
            if duration >= self.resolution().saturating_mul(2) {
                return self.sleep(duration).await;
            }
            let end = Instant::now() + duration;
            while Instant::now() < end {
                self.yield_now().await;
            }
        }
    }
}

/// Tokio's timer (`tokio::time::sleep`, `tokio::task::yield_now`), which
/// `next_id_async` and the other `_async` mints sleep on. Needs a runtime with its time
/// driver enabled.
#[cfg(feature = "tokio")]
#[derive(Debug, Clone, Copy, Default)]
pub struct Tokio;

#[cfg(feature = "tokio")]
impl Sleep for Tokio {
    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> {
        tokio::time::sleep(duration)
    }

    fn yield_now(&self) -> impl Future<Output = ()> {
        tokio::task::yield_now()
    }
}

/// The async wait for `clock` to read `unix_ms`, one round of it, at most until `until`:
/// waits longer than twice `sleep`'s resolution sleep (to within that of the tick, with
/// [`Wait::Sleep`]), shorter ones yield to the runtime, since a timer that wakes a
/// resolution late would oversleep a whole tick. The caller reads the clock again and
/// loops.
pub(crate) async fn nap_async<C: Clock, S: Sleep>(
    clock: &C,
    unix_ms: u64,
    wait: Wait,
    until: Until,
    sleep: &S,
) {
    let over = sleep.resolution().saturating_mul(2);
    let left = clock.time_until(unix_ms);
    match left.and_then(|left| left.checked_sub(over)) {
        Some(nap) if wait == Wait::Sleep && !nap.is_zero() => sleep.sleep(until.at_most(nap)).await,
        _ => sleep.yield_now().await,
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::clock::{ManualClock, MonotonicClock};

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn backoff_doubles_its_spins_then_yields() {
        let mut backoff = Backoff::default();
        let mut seen = Vec::new();
        for _ in 0..9 {
            seen.push(backoff.spins());
            backoff.snooze();
        }
        assert_eq!(
            seen,
            [
                Some(1),
                Some(2),
                Some(4),
                Some(8),
                Some(16),
                Some(32),
                Some(64),
                None,
                None
            ]
        );
    }

    #[test]
    fn a_wait_no_longer_than_the_margin_is_not_slept() {
        let margin = Duration::from_micros(200);
        assert_eq!(sleep_time(Duration::from_micros(150), margin), None);
        assert_eq!(sleep_time(margin, margin), None);
        assert_eq!(sleep_time(3 * MS, margin), Some(Duration::from_micros(2_800)));
    }

    #[test]
    fn the_margin_grows_after_late_wakes_and_shrinks_otherwise() {
        let margin = Duration::from_micros(640);
        let on_time = Some((MS, MS + Duration::from_micros(640)));
        let late = Some((MS, MS + Duration::from_micros(641)));
        assert_eq!(next_margin(margin, on_time), Duration::from_micros(630));
        assert_eq!(next_margin(margin, None), Duration::from_micros(630));
        assert_eq!(next_margin(margin, late), Duration::from_micros(730));
        // Bounded both ways.
        assert_eq!(next_margin(MARGIN_MIN, None), MARGIN_MIN);
        assert_eq!(next_margin(MARGIN_MAX, Some((MS, 3 * MS))), MARGIN_MAX);
    }

    #[test]
    fn nine_on_time_wakes_in_ten_hold_the_margin_steady() {
        // The 90th-percentile rule: one late wake undoes about nine on-time ones.
        let start = Duration::from_micros(500);
        let mut margin = start;
        for round in 0..100 {
            let took = if round % 10 == 0 { 2 * MS } else { MS };
            margin = next_margin(margin, Some((MS, took)));
        }
        let drift = margin.abs_diff(start);
        assert!(drift < Duration::from_micros(100), "{margin:?}");
    }

    #[test]
    fn a_nap_sleeps_until_the_margin_before_the_tick() {
        let clock = MonotonicClock::new();
        let margin_ns = ProcessAtomicU64::new(500_000);
        let target = clock.precise_unix_ms() + 5;
        nap_with(&clock, target, &margin_ns);
        // Woken no earlier than the margin before the tick (a late wake is possible on a
        // busy machine, and then the margin grows).
        let left = clock.time_until(target).unwrap();
        assert!(
            left <= Duration::from_micros(500),
            "woke {left:?} before the tick"
        );
        let margin = margin_ns.load(Ordering::Relaxed);
        assert!(margin == 492_188 || margin == 570_312, "{margin}");
    }

    #[test]
    fn a_clock_that_cannot_tell_is_not_slept_for() {
        let margin_ns = ProcessAtomicU64::new(300_000);
        let start = Instant::now();
        nap_with(&ManualClock::new(0), 10_000, &margin_ns);
        // A nap would last until 10 s: a second is far from that, and far beyond any
        // descheduling on a loaded machine.
        assert!(start.elapsed() < Duration::from_secs(1), "{:?}", start.elapsed());
        assert_eq!(margin_ns.load(Ordering::Relaxed), 300_000, "nothing learned");
    }
}
