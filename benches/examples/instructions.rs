//! Instructions per mint, counted by callgrind (repeatable where wall-clock figures move
//! with the neighbours): each generator on the wide layout 41/0/22 mints `N` IDs inside
//! `run_mints`, and callgrind counts only what runs inside that function.
//!
//! ```sh
//! cargo build --release -p atomflake-benches --example instructions
//! for g in generator precise local sharded blocks ferroid-atomic ferroid-basic; do
//!   valgrind --tool=callgrind --toggle-collect='*run_mints*' --callgrind-out-file=/dev/null \
//!     target/release/examples/instructions $g 200000 2>&1 | grep 'Collected'
//! done
//! for g in paced paced-manual; do
//!   valgrind --tool=callgrind --toggle-collect='*run_mints*' --callgrind-out-file=/dev/null \
//!     target/release/examples/instructions $g 2000 2>&1 | grep 'Collected'
//! done
//! ```
//!
//! Instructions per mint: the collected count over `N` + 1,000 (the warm-up is counted
//! too; the loop and `black_box` included, the same for every generator).
//!
//! Two rows mint one ID per tick, so that every mint is the first of its tick, as when a
//! service mints less than one ID per millisecond:
//!
//! - `paced`: the default `Generator`; before each mint the loop waits, outside what
//!   callgrind counts, until the default clock's time moves on. Instructions per mint: the
//!   count over `N` + 10 (a warm-up of 10).
//! - `paced-manual`: a `Generator` whose `ManualClock`, set in 2010, the loop moves one tick
//!   forward before each mint (the move is counted too): a clock whose ticks are not the
//!   wall clock's.
//!
//! Outside callgrind the same run prints the wall-clock time per ID.

use atomflake::{Clock, Generator, Id, Layout, LocalGenerator, ManualClock, PreciseClock, ShardedGenerator};
use atomflake_benches::peers::{FerroidWide, TWITTER_EPOCH_MS, ferroid_clock};
use ferroid::generator::{AtomicSnowflakeGenerator, BasicSnowflakeGenerator};
use std::hint::black_box;
use std::time::Instant;

/// Mints `n` IDs with `mint`; the only code callgrind counts.
#[inline(never)]
fn run_mints(n: u64, mint: &mut dyn FnMut() -> u64) -> u64 {
    let mut last = 0;
    for _ in 0..n {
        last = black_box(mint());
    }
    last
}

/// Mints a warm-up round (the clocks' first reads, the first tick), then the counted one;
/// prints the counted round's wall-clock time per ID.
fn count(n: u64, mut mint: impl FnMut() -> u64) -> u64 {
    run_mints_warm(&mut mint);
    let start = Instant::now();
    let last = run_mints(n, &mut mint);
    let elapsed = start.elapsed();
    #[expect(clippy::cast_precision_loss, reason = "a printed figure")]
    let per_id = elapsed.as_nanos() as f64 / n as f64;
    println!("{per_id:.2} ns per ID (wall clock)");
    last
}

/// Mints `n` IDs (after 10 for a warm-up) one at a time, calling `next_tick` before each,
/// outside what callgrind counts; prints the median wall-clock time of a mint, less the
/// median of the timer's own (a mint that another thread preempts is an outlier the median
/// leaves out).
fn count_paced(n: u64, mut next_tick: impl FnMut(), mut mint: impl FnMut() -> u64) -> u64 {
    let mut median_of = |call: fn(&mut dyn FnMut() -> u64) -> u64, mint: &mut dyn FnMut() -> u64| {
        let mut last = 0;
        let mut times = Vec::new();
        for round in 0..n + 10 {
            next_tick();
            let start = Instant::now();
            last = call(mint);
            if round >= 10 {
                times.push(start.elapsed());
            }
        }
        times.sort_unstable();
        (last, times[times.len() / 2])
    };
    let (_, timer) = median_of(call_once, &mut || 0);
    let (last, median) = median_of(|mint| run_mints(1, mint), &mut mint);
    println!(
        "{:.2?} per ID, median (wall clock, less the timer's {timer:.2?})",
        median.saturating_sub(timer)
    );
    last
}

/// One call of `mint`: the timer's own cost, which callgrind does not count.
#[inline(never)]
fn call_once(mint: &mut dyn FnMut() -> u64) -> u64 {
    black_box(mint())
}

#[inline(never)]
fn run_mints_warm(mint: &mut dyn FnMut() -> u64) {
    for _ in 0..1_000 {
        black_box(mint());
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let which = args.next().expect("a generator name");
    let n: u64 = args.next().map_or(200_000, |s| s.parse().expect("N: a number"));
    let wide = Layout::builder()
        .timestamp_bits(41)
        .sequence_bits(22)
        .epoch_ms(TWITTER_EPOCH_MS)
        .build()
        .expect("the wide layout");
    let id = |id: Id| id.get();
    let last = match which.as_str() {
        "generator" => {
            let generator = Generator::new(wide, 0).expect("node 0");
            count(n, || id(generator.next_id()))
        }
        "precise" => {
            let generator = Generator::with_clock(wide, 0, PreciseClock::new()).expect("node 0");
            count(n, || id(generator.next_id()))
        }
        "local" => {
            let generator = LocalGenerator::new(wide, 0).expect("node 0");
            count(n, || id(generator.next_id()))
        }
        "blocks" => {
            let generator = Generator::new(wide, 0).expect("node 0");
            let mut ids = std::iter::from_fn(|| Some(generator.next_ids(4096))).flatten();
            count(n, || id(ids.next().expect("endless")))
        }
        "sharded" => {
            let generator = ShardedGenerator::new(wide, [0]).expect("node 0");
            count(n, || id(generator.next_id()))
        }
        "paced" => {
            let generator = Generator::new(wide, 0).expect("node 0");
            let clock = *generator.clock();
            let next_tick = || {
                let now = clock.unix_ms();
                while clock.unix_ms() == now {
                    std::hint::spin_loop();
                }
            };
            count_paced(n, next_tick, || id(generator.next_id()))
        }
        "paced-manual" => {
            let clock = ManualClock::new(TWITTER_EPOCH_MS + 1_000);
            let generator = Generator::with_clock(wide, 0, clock.clone()).expect("node 0");
            count(n, || {
                clock.advance(1);
                id(generator.next_id())
            })
        }
        "ferroid-atomic" => {
            let generator = AtomicSnowflakeGenerator::<FerroidWide, _>::new(0, ferroid_clock());
            count(n, || generator.next_id(|_| std::hint::spin_loop()).to_raw())
        }
        "ferroid-basic" => {
            let generator = BasicSnowflakeGenerator::<FerroidWide, _>::new(0, ferroid_clock());
            count(n, || generator.next_id(|_| std::hint::spin_loop()).to_raw())
        }
        other => panic!("unknown generator {other:?}"),
    };
    println!("{which}: {n} IDs, last {last}");
}
