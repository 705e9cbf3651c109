//! Instructions per mint, counted by callgrind (repeatable where wall-clock figures move
//! with the neighbours): each generator on the wide layout 41/0/22 mints `N` IDs inside
//! `run_mints`, and callgrind counts only what runs inside that function.
//!
//! ```sh
//! cargo build --release -p atomflake-benches --example instructions
//! for g in generator precise local sharded ferroid-atomic ferroid-basic; do
//!   valgrind --tool=callgrind --toggle-collect='*run_mints*' --callgrind-out-file=/dev/null \
//!     target/release/examples/instructions $g 200000 2>&1 | grep 'Collected'
//! done
//! ```
//!
//! Instructions per mint: the collected count over `N` (the loop and `black_box` included,
//! the same for every generator).

use atomflake::{Generator, Id, Layout, LocalGenerator, PreciseClock, ShardedGenerator};
use atomflake_benches::peers::{FerroidWide, TWITTER_EPOCH_MS, ferroid_clock};
use ferroid::generator::{AtomicSnowflakeGenerator, BasicSnowflakeGenerator};
use std::hint::black_box;

/// Mints `n` IDs with `mint`; the only code callgrind counts.
#[inline(never)]
fn run_mints(n: u64, mint: &mut dyn FnMut() -> u64) -> u64 {
    let mut last = 0;
    for _ in 0..n {
        last = black_box(mint());
    }
    last
}

/// Mints a warm-up round (the clocks' first reads, the first tick), then the counted one.
fn count(n: u64, mut mint: impl FnMut() -> u64) -> u64 {
    run_mints_warm(&mut mint);
    run_mints(n, &mut mint)
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
        "sharded" => {
            let generator = ShardedGenerator::new(wide, [0]).expect("node 0");
            count(n, || id(generator.next_id()))
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
