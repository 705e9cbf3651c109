//! The floor (quanta raw read + CAS) and `Generator::next_id` on the wide layout, timed in
//! alternation on one generator for a few seconds: shows whether a slow figure comes from
//! the generator's placement (it would stay slow) or from the machine over time.
//!
//! `cargo run --release -p atomflake-benches --example over_time`

use atomflake::{Generator, Layout};
use atomflake_benches::floor_step;
use std::hint::black_box;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

/// The best of five runs of 2 M calls of `f`, in ns per call.
fn best_ns(mut f: impl FnMut()) -> f64 {
    const CALLS: u32 = 2_000_000;
    (0..5)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..CALLS {
                f();
            }
            start.elapsed().as_secs_f64() * 1e9 / f64::from(CALLS)
        })
        .fold(f64::MAX, f64::min)
}

fn main() {
    let layout = Layout::builder()
        .timestamp_bits(41)
        .sequence_bits(22)
        .epoch_ms(1_288_834_974_657)
        .build()
        .expect("41/0/22 fits");
    let generator = Generator::new(layout, 0).expect("node 0");
    let clock = quanta::Clock::new();
    let word = AtomicU64::new(0);
    let start = Instant::now();
    println!("| s | floor ns | next_id ns | ratio |");
    println!("|---|---|---|---|");
    for _ in 0..12 {
        let floor = best_ns(|| {
            let _ = black_box(floor_step(&clock, &word));
        });
        let mint = best_ns(|| {
            let _ = black_box(generator.next_id());
        });
        println!(
            "| {:.1} | {floor:.2} | {mint:.2} | {:.2} |",
            start.elapsed().as_secs_f64(),
            mint / floor
        );
    }
}
