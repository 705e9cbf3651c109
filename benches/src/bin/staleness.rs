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

/// The lag of every ID minted for `run` by a generator on `clock`: in µs, and in whole
/// ticks (the wall clock's millisecond minus the ID's).
fn lags<C: Clock>(clock: C, run: Duration) -> (Histogram<u64>, Histogram<u64>) {
    let generator = Generator::with_clock(Layout::TWITTER, 1, clock).expect("node 1");
    // Up to a minute, in µs, to 3 significant digits.
    let new = || Histogram::new_with_bounds(1, 60_000_000, 3).expect("a histogram");
    let (mut histogram, mut ticks) = (new(), new());
    let until = Instant::now() + run;
    while Instant::now() < until {
        let id = generator.next_id();
        let wall = wall_us();
        let minted_us = Layout::TWITTER.decode(id).unix_ms * 1_000;
        // An ID ahead of the wall clock (the disciplined clock is within ~100 µs of it,
        // either way) counts as no lag.
        histogram.saturating_record(wall.saturating_sub(minted_us));
        ticks.saturating_record((wall / 1_000).saturating_sub(minted_us / 1_000));
        let paced = Instant::now() + Duration::from_micros(20);
        while Instant::now() < paced {
            std::hint::spin_loop();
        }
    }
    (histogram, ticks)
}

fn row(name: &str, (us, ticks): &(Histogram<u64>, Histogram<u64>)) {
    println!(
        "| {name} | {} | {} µs / {} | {} µs / {} | {} µs / {} |",
        us.len(),
        us.value_at_quantile(0.5),
        ticks.value_at_quantile(0.5),
        us.value_at_quantile(0.999),
        ticks.value_at_quantile(0.999),
        us.max(),
        ticks.max(),
    );
}

/// CPU time (user + system) of this process's thread named `name`, from
/// `/proc/self/task/*/stat` (Linux; in clock ticks of 10 ms); `None` elsewhere.
fn thread_cpu(name: &str) -> Option<Duration> {
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let path = task.ok()?.path();
        if std::fs::read_to_string(path.join("comm")).ok()?.trim_end() != name {
            continue;
        }
        let stat = std::fs::read_to_string(path.join("stat")).ok()?;
        // Fields after the `(comm)`: state is the 3rd field, utime the 14th, stime the 15th.
        let rest = &stat[stat.rfind(')')? + 2..];
        let fields: Vec<&str> = rest.split(' ').collect();
        let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        return Some(Duration::from_millis(ticks * 10));
    }
    None
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
    let started = Instant::now();
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
        // The clock's thread (15 characters of its name is what Linux keeps).
        if let Some(cpu) = thread_cpu("atomflake-disci") {
            let up = started.elapsed().as_secs_f64();
            println!();
            println!(
                "the discipline thread used {:.2} s of CPU in {up:.1} s: {:.2}% of a core",
                cpu.as_secs_f64(),
                cpu.as_secs_f64() / up * 100.0
            );
        }
    });
}
