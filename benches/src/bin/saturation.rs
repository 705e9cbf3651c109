//! Saturated minting on the Twitter layout with each wait strategy, and with
//! `next_id_async` on a current-thread Tokio runtime: throughput against the 4.096 M IDs/s
//! cap, and the CPU time the minting thread used (user + system, from
//! `getrusage(RUSAGE_THREAD)`).
//!
//! `cargo run --release -p atomflake-benches --bin saturation [SECONDS]` (default 3 s per run)

use atomflake::{Builder, Layout, Wait};
use nix::sys::resource::{UsageWho, getrusage};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// The Twitter layout's cap: 4,096 IDs per ms.
const CAP_PER_S: f64 = 4_096_000.0;

/// This thread's user + system CPU time so far.
fn thread_cpu() -> Duration {
    let usage = getrusage(UsageWho::RUSAGE_THREAD).expect("getrusage(RUSAGE_THREAD)");
    let to_duration = |t: nix::sys::time::TimeVal| {
        Duration::new(
            u64::try_from(t.tv_sec()).expect("non-negative"),
            u32::try_from(t.tv_usec()).expect("under a second") * 1000,
        )
    };
    to_duration(usage.user_time()) + to_duration(usage.system_time())
}

/// Mints for `run` on one thread with `wait`: IDs/s, CPU share of one core, and how many
/// ticks passed with no ID minted in them (a thread that woke or was scheduled too late).
fn saturate(wait: Wait, run: Duration) -> (f64, f64, u64) {
    let generator = Builder::new(Layout::TWITTER).wait(wait).build(1).expect("node 1");
    // Warm up: the clock's anchor, the first ticks.
    for _ in 0..100_000 {
        let _ = black_box(generator.next_id());
    }
    let (start, cpu_start) = (Instant::now(), thread_cpu());
    let mut minted = 0u64;
    let mut last = 0u64;
    let mut skipped = 0u64;
    while start.elapsed() < run {
        for _ in 0..4096 {
            let id = generator.next_id().get();
            assert!(id > last, "ids must increase");
            // Ticks (the bits above node and sequence) skipped since the last ID.
            let gap = (id >> 22).saturating_sub(last >> 22);
            if last != 0 && gap > 1 {
                skipped += gap - 1;
            }
            last = id;
        }
        minted += 4096;
    }
    let (wall, cpu) = (start.elapsed(), thread_cpu() - cpu_start);
    (
        minted as f64 / wall.as_secs_f64(),
        cpu.as_secs_f64() / wall.as_secs_f64(),
        skipped,
    )
}

fn main() {
    let seconds: u64 = std::env::args()
        .nth(1)
        .map_or(3, |s| s.parse().expect("SECONDS: a whole number"));
    let run = Duration::from_secs(seconds);
    println!("| mint | IDs/s | share of the cap | CPU (user+sys) / wall | ticks with no ID |");
    println!("|---|---|---|---|---|");
    let rows = [
        ("`next_id`, `Wait::Spin`", saturate(Wait::Spin, run)),
        ("`next_id`, `Wait::Sleep` (default)", saturate(Wait::Sleep, run)),
        ("`next_id_async`, current-thread runtime", saturate_async(run)),
    ];
    for (name, row) in rows {
        println!(
            "| {name} | {:.4} M/s | {:.2}% | {:.1}% | {} |",
            row.rate / 1e6,
            100.0 * row.rate / CAP_PER_S,
            100.0 * row.cpu,
            row.skipped
        );
    }
}
