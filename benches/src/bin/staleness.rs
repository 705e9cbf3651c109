//! How late an ID's timestamp is: the wall clock (`SystemTime`) just after each mint minus
//! the ID's time, for the default clock (`MonotonicClock`, a value the discipline thread
//! stores each millisecond) and for `PreciseClock` (a TSC read per mint), Twitter layout,
//! one ID every ~20 µs (never at the cap, so every ID follows the clock).
//!
//! `cargo run --release -p atomflake-benches --bin staleness [SECONDS] [--busy]`
//! (default 5 s per clock). `--busy` keeps every core busy with spinning threads meanwhile.
//!
//! The lag in ticks is `wall ms - ID ms`: 0 when the ID carries the current millisecond.
//! The lag in µs also counts the part of the millisecond already gone, so it is below
//! 1,000 µs for an ID that is not late at all.

use atomflake::{Clock, Generator, Layout, MonotonicClock, PreciseClock};
use hdrhistogram::Histogram;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Wall-clock µs since 1970.
fn wall_us() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970");
    u64::try_from(since.as_micros()).expect("µs fit a u64")
}

/// The lag of every ID minted for `run` by a generator on `clock`, in µs.
fn lags<C: Clock>(clock: C, run: Duration) -> Histogram<u64> {
    let generator = Generator::with_clock(Layout::TWITTER, 1, clock).expect("node 1");
    let mut histogram = Histogram::new(3).expect("a histogram");
    let until = Instant::now() + run;
    while Instant::now() < until {
        let id = generator.next_id();
        let wall = wall_us();
        let minted_us = Layout::TWITTER.decode(id).unix_ms * 1_000;
        // An ID ahead of the wall clock (the disciplined clock is within ~100 µs of it,
        // either way) counts as no lag.
        histogram.saturating_record(wall.saturating_sub(minted_us));
        let paced = Instant::now() + Duration::from_micros(20);
        while Instant::now() < paced {
            std::hint::spin_loop();
        }
    }
    histogram
}

fn row(name: &str, histogram: &Histogram<u64>) {
    let ticks = |q: f64| histogram.value_at_quantile(q) / 1_000;
    println!(
        "| {name} | {} | {} µs / {} | {} µs / {} | {} µs / {} |",
        histogram.len(),
        histogram.value_at_quantile(0.5),
        ticks(0.5),
        histogram.value_at_quantile(0.999),
        ticks(0.999),
        histogram.max(),
        histogram.max() / 1_000,
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let busy = args.iter().any(|arg| arg == "--busy");
    let seconds: u64 = args
        .iter()
        .find(|arg| !arg.starts_with("--"))
        .map_or(5, |s| s.parse().expect("SECONDS: a whole number"));
    let run = Duration::from_secs(seconds);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        if busy {
            let cores = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
            for _ in 0..cores {
                s.spawn(|| {
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                });
            }
        }
        println!(
            "{}: lag of an ID's time behind the wall clock at mint (µs / whole ticks of 1 ms)",
            if busy { "every core busy" } else { "quiet" }
        );
        println!();
        println!("| clock | IDs | p50 | p99.9 | max |");
        println!("|---|---|---|---|---|");
        row("`MonotonicClock` (default)", &lags(MonotonicClock::new(), run));
        row("`PreciseClock`", &lags(PreciseClock::new(), run));
        stop.store(true, Ordering::Relaxed);
    });
}
