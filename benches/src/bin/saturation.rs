//! Saturated minting on the Twitter layout with each wait strategy, and with
//! `next_id_async` on a current-thread Tokio runtime: throughput against the 4.096 M IDs/s
//! cap, and the CPU time the minting thread used (user + system, from
//! `getrusage(RUSAGE_THREAD)`).
//!
//! `cargo run --release -p atomflake-benches --bin saturation [SECONDS]` (default 3 s per run)

use atomflake::{Builder, Layout, Wait};
use atomflake_benches::measure::{Saturation, TWITTER_CAP_PER_S, Tally, saturate};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// Blocking `next_id` with `wait`.
fn blocking(wait: Wait, run: Duration) -> Saturation {
    let generator = Builder::new(Layout::TWITTER).wait(wait).build(1).expect("node 1");
    // Warm up: the clock's anchor, the first ticks.
    for _ in 0..100_000 {
        let _ = black_box(generator.next_id());
    }
    saturate(run, |until| {
        let mut tally = Tally::default();
        while Instant::now() < until {
            for _ in 0..4096 {
                tally.add(generator.next_id().get().into());
            }
        }
        tally
    })
}

/// `next_id_async` in one task of a current-thread runtime (the runtime runs on this
/// thread, so its CPU time is this thread's).
fn in_runtime(run: Duration) -> Saturation {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    let generator = Builder::new(Layout::TWITTER).build(1).expect("node 1");
    saturate(run, |until| {
        runtime.block_on(async {
            let mut tally = Tally::default();
            while Instant::now() < until {
                for _ in 0..4096 {
                    tally.add(generator.next_id_async().await.get().into());
                }
            }
            tally
        })
    })
}

fn main() {
    let seconds: u64 = std::env::args()
        .nth(1)
        .map_or(3, |s| s.parse().expect("SECONDS: a whole number"));
    let run = Duration::from_secs(seconds);
    println!("| mint | IDs/s | share of the cap | CPU (user+sys) / wall | ticks with no ID |");
    println!("|---|---|---|---|---|");
    let rows = [
        ("`next_id`, `Wait::Spin`", blocking(Wait::Spin, run)),
        ("`next_id`, `Wait::Sleep` (default)", blocking(Wait::Sleep, run)),
        ("`next_id_async`, current-thread runtime", in_runtime(run)),
    ];
    for (name, row) in rows {
        println!(
            "| {name} | {:.4} M/s | {:.2}% | {:.1}% | {} |",
            row.rate() / 1e6,
            row.percent_of(TWITTER_CAP_PER_S),
            row.cpu_percent(),
            row.skipped
        );
    }
}
