//! The timed loops, written once for the criterion benches and the `report` bin.
//!
//! Every loop takes the generator as a closure returning the ID as a `u128` (64-bit IDs
//! zero-extended, free), so each generator's call is monomorphised and inlined: no dynamic
//! dispatch inside a timed loop.

use hdrhistogram::Histogram;
use nix::sys::resource::{UsageWho, getrusage};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The Twitter layout's cap: 4,096 IDs per ms.
pub const TWITTER_CAP_PER_S: f64 = 4_096_000.0;

/// IDs per burst in [`paced`] and [`paced_on_threads`] (all threads together).
pub const BURST: u64 = 512;

/// Time between the starts of two bursts in [`paced`] and [`paced_on_threads`].
///
/// A 1 ms tick overlaps at most two bursts that start 1 ms apart and last under 1 ms, so a
/// generator with a 12-bit sequence (4,096 per tick) sees at most 1,024 of its IDs in a
/// tick: it never waits, even if its clock's ticks stretch to 4 ms (a clock updated by a
/// late thread), and the bursts time its unsaturated path only.
pub const PERIOD: Duration = Duration::from_millis(1);

/// One step of the floor every CAS generator with a precise quanta clock pays: one raw
/// clock read, a load and one `compare_exchange` on `word` (uncontended when the word is
/// this thread's). Returns the CAS result for `black_box`.
///
/// # Errors
///
/// The CAS's own: the value found when another thread changed `word` in between.
#[inline]
pub fn floor_step(clock: &quanta::Clock, word: &AtomicU64) -> Result<u64, u64> {
    let raw = clock.raw();
    let current = word.load(Ordering::Relaxed);
    word.compare_exchange(current, current ^ raw, Ordering::Relaxed, Ordering::Relaxed)
}

/// `iters` [`floor_step`]s on this thread: the time they took.
pub fn floor(iters: u64, clock: &quanta::Clock, word: &AtomicU64) -> Duration {
    tight(iters, &mut || {
        let _ = black_box(floor_step(clock, word));
        0
    })
}

/// `iters` [`floor_step`]s shared out over `threads` threads, all on `word`: the wall time
/// (see [`on_threads`]).
pub fn floor_on_threads(threads: u64, iters: u64, clock: &quanta::Clock, word: &AtomicU64) -> Duration {
    on_threads(threads, iters, &|| {
        let _ = black_box(floor_step(clock, word));
        0
    })
}

/// This thread's user + system CPU time so far (`getrusage(RUSAGE_THREAD)`).
///
/// # Panics
///
/// If `getrusage` fails, which it does not for `RUSAGE_THREAD` on Linux.
pub fn thread_cpu() -> Duration {
    let usage = getrusage(UsageWho::RUSAGE_THREAD).expect("getrusage(RUSAGE_THREAD)");
    let to_duration = |t: nix::sys::time::TimeVal| {
        Duration::new(
            u64::try_from(t.tv_sec()).expect("non-negative"),
            u32::try_from(t.tv_usec()).expect("under a second") * 1000,
        )
    };
    to_duration(usage.user_time()) + to_duration(usage.system_time())
}

/// `iters` calls of `mint` back to back on this thread: the time they took.
#[inline]
pub fn tight(iters: u64, mint: &mut impl FnMut() -> u128) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        black_box(mint());
    }
    start.elapsed()
}

/// Waits until `deadline`: sleeps to [`WAKE_MARGIN`] before it, then spins.
///
/// Sleeping between bursts keeps a paced thread mostly off the CPU, so the scheduler does
/// not preempt it for other work at the moment it should be minting (on a shared machine, a
/// thread spinning all the time is likely to be descheduled during a burst, and with two
/// threads one of them usually is).
fn wait_until(deadline: Instant) {
    let left = deadline.saturating_duration_since(Instant::now());
    if let Some(nap) = left.checked_sub(WAKE_MARGIN) {
        std::thread::sleep(nap);
    }
    while Instant::now() < deadline {
        std::hint::spin_loop();
    }
}

/// How long before a burst's deadline a paced thread stops sleeping and spins: longer than
/// the usual lateness of a sleep's wake-up (60–120 µs on the project's VM).
const WAKE_MARGIN: Duration = Duration::from_micros(300);

/// `iters` calls of `mint` on this thread in bursts of [`BURST`], one burst per
/// [`PERIOD`]: the time `iters` IDs take at the median burst's rate (the waits between
/// bursts are not counted).
///
/// For generators whose sequence is too short for a tight loop (12 bits: a tight loop
/// would wait at every tick, timing the cap instead of the call): see [`PERIOD`]. The
/// median, not the sum: a burst lasts ~10–50 µs, so one preemption (a millisecond or more)
/// would multiply a burst's time, where it adds a few per cent to a tight loop's sample.
pub fn paced(iters: u64, mint: &mut impl FnMut() -> u128) -> Duration {
    let mut bursts = Vec::new();
    let mut left = iters;
    let mut next = Instant::now();
    while left > 0 {
        wait_until(next);
        let n = left.min(BURST);
        let start = Instant::now();
        for _ in 0..n {
            black_box(mint());
        }
        bursts.push((n, start.elapsed()));
        left -= n;
        next = start + PERIOD;
    }
    at_median_rate(iters, &bursts)
}

/// The time `iters` IDs take at the median rate of `bursts` (IDs, time).
fn at_median_rate(iters: u64, bursts: &[(u64, Duration)]) -> Duration {
    if bursts.is_empty() {
        return Duration::ZERO;
    }
    // Exact below 2^52 ns and IDs.
    #[allow(clippy::cast_precision_loss)]
    let mut per_id: Vec<f64> = bursts.iter().map(|(n, d)| d.as_secs_f64() / *n as f64).collect();
    #[allow(clippy::cast_precision_loss)]
    Duration::from_secs_f64(median(&mut per_id) * iters as f64)
}

/// `iters` calls of `mint` shared out over `threads` threads started together: the wall
/// time until the last finished (aggregate time, so `time / iters` is ns per ID of the
/// whole group).
pub fn on_threads(threads: u64, iters: u64, mint: &(impl Fn() -> u128 + Sync)) -> Duration {
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for _ in 0..iters / threads {
                    black_box(mint());
                }
            });
        }
    });
    start.elapsed()
}

/// [`paced`] with `threads` threads: every [`PERIOD`] all threads start a burst at the
/// same deadline, [`BURST`] IDs between them; each burst counts from the first thread's
/// start (a thread scheduled late does not count the deadline it missed) until the last
/// thread finished it, and the result is the time `iters` IDs take at the median burst's
/// rate (as in [`paced`]).
///
/// # Panics
///
/// If a minting thread panics, or the bursts would take more than `u32::MAX` periods.
pub fn paced_on_threads(threads: u64, iters: u64, mint: &(impl Fn() -> u128 + Sync)) -> Duration {
    let per_burst = (BURST / threads).max(1);
    let share = iters / threads;
    let bursts = share.div_ceil(per_burst);
    // Leave time for the threads to start before the first deadline.
    let first = Instant::now() + Duration::from_millis(2);
    let deadline = |k: u64| first + PERIOD * u32::try_from(k).expect("bursts fit u32");
    let spans: Vec<Vec<(Instant, Instant)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(move || {
                    (0..bursts)
                        .map(|k| {
                            wait_until(deadline(k));
                            let start = Instant::now();
                            for _ in 0..per_burst.min(share - k * per_burst) {
                                black_box(mint());
                            }
                            (start, Instant::now())
                        })
                        .collect()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a minting thread"))
            .collect()
    });
    let timed: Vec<(u64, Duration)> = (0..bursts)
        .map(|k| {
            let index = usize::try_from(k).expect("fits");
            let start = spans
                .iter()
                .map(|t| t[index].0)
                .min()
                .expect("one thread or more");
            let end = spans
                .iter()
                .map(|t| t[index].1)
                .max()
                .expect("one thread or more");
            (threads * per_burst.min(share - k * per_burst), end - start)
        })
        .collect();
    at_median_rate(iters, &timed)
}

/// The median over `samples` runs of `sample(iters)` (which returns the time `iters` IDs
/// took), in ns per ID, with `iters` chosen so that the runs take about `budget` of wall
/// time in all (waits included, as criterion plans `iter_custom`).
///
/// # Panics
///
/// If a sample takes longer than `u64::MAX` ns.
pub fn per_id_ns(budget: Duration, samples: u32, mut sample: impl FnMut(u64) -> Duration) -> f64 {
    const PROBE: u64 = 2048;
    // Warm up and estimate the wall time per ID (waits included).
    let start = Instant::now();
    let _ = sample(PROBE);
    let _ = sample(PROBE);
    let wall_per_id = start.elapsed() / (2 * u32::try_from(PROBE).expect("fits"));
    let wall_ns = u64::try_from(wall_per_id.as_nanos()).expect("fits").max(1);
    let per_sample = budget / samples;
    let iters = (u64::try_from(per_sample.as_nanos()).expect("fits") / wall_ns).max(PROBE);
    let mut ns: Vec<f64> = (0..samples)
        .map(|_| {
            // Exact below 2^52 ns and IDs.
            #[allow(clippy::cast_precision_loss)]
            let per = sample(iters).as_nanos() as f64 / iters as f64;
            per
        })
        .collect();
    median(&mut ns)
}

/// The median of `values` (the mean of the middle two for an even count); NaN if empty.
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => f64::midpoint(values[n / 2 - 1], values[n / 2]),
    }
}

/// The bits below the tick in every layout minted at saturation here (Twitter's 10 node +
/// 12 sequence bits; snowflaked's and rs-snowflake's fixed layouts put the tick there too).
pub const TICK_SHIFT: u32 = 22;

/// Counts IDs and the ticks that passed with no ID minted in them (a thread that woke or
/// was scheduled too late), checking that IDs increase.
#[derive(Debug, Default)]
pub struct Tally {
    /// IDs counted.
    pub minted: u64,
    /// Ticks with no ID between two consecutive IDs.
    pub skipped: u64,
    last: u128,
}

impl Tally {
    /// Counts `id`.
    ///
    /// # Panics
    ///
    /// If `id` is not greater than the previous one: a generator broke its order.
    #[inline]
    pub fn add(&mut self, id: u128) {
        assert!(id > self.last, "ids must increase");
        // Ticks (the bits above node and sequence) skipped since the last ID.
        let gap = (id >> TICK_SHIFT).saturating_sub(self.last >> TICK_SHIFT);
        if self.last != 0 && gap > 1 {
            self.skipped += u64::try_from(gap - 1).unwrap_or(u64::MAX);
        }
        self.last = id;
        self.minted += 1;
    }
}

/// IDs minted over one window at saturation, and what it cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Saturation {
    /// IDs minted in the window.
    pub minted: u64,
    /// The window's wall time.
    pub wall: Duration,
    /// The minting thread's CPU time (user + system) over the window.
    pub cpu: Duration,
    /// Ticks in which no ID was minted.
    pub skipped: u64,
}

// Exact below 2^52 IDs.
#[allow(clippy::cast_precision_loss)]
impl Saturation {
    /// IDs per second.
    pub fn rate(&self) -> f64 {
        self.minted as f64 / self.wall.as_secs_f64()
    }

    /// The share of `cap` (IDs per second) reached, in percent.
    pub fn percent_of(&self, cap: f64) -> f64 {
        100.0 * self.rate() / cap
    }

    /// The thread's CPU time over the wall time, in percent of one core.
    pub fn cpu_percent(&self) -> f64 {
        100.0 * self.cpu.as_secs_f64() / self.wall.as_secs_f64()
    }

    /// CPU seconds spent per million IDs minted.
    pub fn cpu_s_per_million(&self) -> f64 {
        self.cpu.as_secs_f64() / (self.minted as f64 / 1e6)
    }
}

/// Times `mint_until(deadline)`, which mints on this thread for `window` and returns its
/// tally.
pub fn saturate(window: Duration, mint_until: impl FnOnce(Instant) -> Tally) -> Saturation {
    let (start, cpu_start) = (Instant::now(), thread_cpu());
    let tally = mint_until(start + window);
    let (wall, cpu) = (start.elapsed(), thread_cpu().saturating_sub(cpu_start));
    Saturation {
        minted: tally.minted,
        wall,
        cpu,
        skipped: tally.skipped,
    }
}

/// [`saturate`] with `mint` called back to back, after 50 ms of the same untimed.
pub fn saturate_with(window: Duration, mint: &mut impl FnMut() -> u128) -> Saturation {
    let warm = Instant::now() + Duration::from_millis(50);
    while Instant::now() < warm {
        black_box(mint());
    }
    saturate(window, |until| {
        let mut tally = Tally::default();
        while Instant::now() < until {
            for _ in 0..4096 {
                tally.add(mint());
            }
        }
        tally
    })
}

/// Percentiles of the time one call took, in ns, the timer's own cost included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Latency {
    /// Calls recorded.
    pub calls: u64,
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// 99.99th percentile.
    pub p9999: u64,
    /// The slowest call.
    pub max: u64,
}

/// Records the time of single calls (two quanta raw reads around each) in an HDR
/// histogram (1 ns to 60 s, 3 significant digits).
pub struct Recorder {
    clock: quanta::Clock,
    histogram: Histogram<u64>,
}

impl Default for Recorder {
    fn default() -> Recorder {
        Recorder::new()
    }
}

impl Recorder {
    /// An empty recorder.
    ///
    /// # Panics
    ///
    /// Never: the bounds are valid.
    pub fn new() -> Recorder {
        Recorder {
            clock: quanta::Clock::new(),
            histogram: Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds"),
        }
    }

    /// Times `iters` single calls of `mint`, recording each; returns their total.
    #[inline]
    pub fn time_calls(&mut self, iters: u64, mint: &mut impl FnMut() -> u128) -> Duration {
        let mut total = 0;
        for _ in 0..iters {
            let start = self.clock.raw();
            black_box(mint());
            let ns = self.clock.delta_as_nanos(start, self.clock.raw());
            self.histogram.saturating_record(ns.max(1));
            total += ns;
        }
        Duration::from_nanos(total)
    }

    /// Every call recorded so far.
    pub fn histogram(&self) -> Histogram<u64> {
        self.histogram.clone()
    }

    /// The percentiles recorded so far.
    pub fn latency(&self) -> Latency {
        let h = &self.histogram;
        Latency {
            calls: h.len(),
            p50: h.value_at_quantile(0.5),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            p9999: h.value_at_quantile(0.9999),
            max: h.max(),
        }
    }
}

/// Single-call latencies of `mint` over `window` (after 50 ms untimed).
pub fn latency(window: Duration, mint: &mut impl FnMut() -> u128) -> Latency {
    let warm = Instant::now() + Duration::from_millis(50);
    while Instant::now() < warm {
        black_box(mint());
    }
    let mut recorder = Recorder::new();
    let until = Instant::now() + window;
    while Instant::now() < until {
        recorder.time_calls(4096, mint);
    }
    recorder.latency()
}

/// The timer's own cost in [`Recorder`]: the median of an empty call timed the same way.
pub fn timer_overhead_ns() -> u64 {
    let mut recorder = Recorder::new();
    recorder.time_calls(100_000, &mut || 0);
    recorder.latency().p50
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_even_and_empty() {
        assert!((median(&mut [3.0, 1.0, 2.0]) - 2.0).abs() < 1e-12);
        assert!((median(&mut [4.0, 1.0, 3.0, 2.0]) - 2.5).abs() < 1e-12);
        assert!(median(&mut []).is_nan());
    }

    #[test]
    fn tally_counts_skipped_ticks() {
        let mut tally = Tally::default();
        tally.add(1 << TICK_SHIFT);
        tally.add((1 << TICK_SHIFT) + 1);
        // Ticks 2 and 3 had no ID.
        tally.add(4 << TICK_SHIFT);
        assert_eq!((tally.minted, tally.skipped), (3, 2));
    }

    #[test]
    #[should_panic(expected = "ids must increase")]
    fn tally_rejects_a_repeat() {
        let mut tally = Tally::default();
        tally.add(5);
        tally.add(5);
    }

    #[test]
    fn paced_bursts_wait_between_bursts_and_do_not_count_it() {
        let start = Instant::now();
        let mut calls = 0;
        let timed = paced(3 * BURST, &mut || {
            calls += 1;
            calls
        });
        assert_eq!(calls, u128::from(3 * BURST));
        // Three bursts start 1 ms apart: at least 2 ms of wall time, little of it timed.
        assert!(start.elapsed() >= 2 * PERIOD);
        assert!(timed < start.elapsed());
    }

    #[test]
    fn a_preempted_burst_does_not_count() {
        let ms = Duration::from_millis;
        let bursts = [(10, ms(10)), (10, ms(1000)), (10, ms(12))];
        // The median rate is 1.2 ms per ID (the 1000 ms burst is the outlier).
        assert_eq!(at_median_rate(100, &bursts), ms(120));
        assert_eq!(at_median_rate(5, &[]), Duration::ZERO);
    }

    #[test]
    fn paced_threads_mint_every_id() {
        let count = AtomicU64::new(0);
        let _ = paced_on_threads(2, 4 * BURST, &|| {
            u128::from(count.fetch_add(1, Ordering::Relaxed))
        });
        assert_eq!(count.load(Ordering::Relaxed), 4 * BURST);
    }

    #[test]
    fn recorder_sees_a_slow_call() {
        let mut recorder = Recorder::new();
        let mut n = 0;
        recorder.time_calls(1000, &mut || {
            n += 1;
            if n == 500 {
                std::thread::sleep(Duration::from_millis(2));
            }
            n
        });
        let latency = recorder.latency();
        assert_eq!(latency.calls, 1000);
        assert!(latency.max >= 2_000_000, "{latency:?}");
        assert!(latency.p50 < 1_000_000, "{latency:?}");
    }
}
