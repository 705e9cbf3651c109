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

/// Counts IDs and the ticks that passed with no ID minted in them (a thread that woke or
/// was scheduled too late), checking that IDs increase.
#[derive(Default)]
struct Tally {
    minted: u64,
    skipped: u64,
    last: u64,
}

impl Tally {
    fn add(&mut self, id: atomflake::Id) {
        let id = id.get();
        assert!(id > self.last, "ids must increase");
        // Ticks (the bits above node and sequence) skipped since the last ID.
        let gap = (id >> 22).saturating_sub(self.last >> 22);
        if self.last != 0 && gap > 1 {
            self.skipped += gap - 1;
        }
        self.last = id;
        self.minted += 1;
    }
}

/// One row: IDs/s, the CPU share of one core, and the ticks with no ID.
struct Row {
    rate: f64,
    cpu: f64,
    skipped: u64,
}

/// Times `mint_until(deadline)`, which mints on this thread and returns its tally.
fn measure(run: Duration, mint_until: impl FnOnce(Instant) -> Tally) -> Row {
    let (start, cpu_start) = (Instant::now(), thread_cpu());
    let tally = mint_until(start + run);
    let (wall, cpu) = (start.elapsed(), thread_cpu().saturating_sub(cpu_start));
    Row {
        // Exact below 2^52 IDs.
        #[allow(clippy::cast_precision_loss)]
        rate: tally.minted as f64 / wall.as_secs_f64(),
        cpu: cpu.as_secs_f64() / wall.as_secs_f64(),
        skipped: tally.skipped,
    }
}

/// Blocking `next_id` with `wait`.
fn saturate(wait: Wait, run: Duration) -> Row {
    let generator = Builder::new(Layout::TWITTER).wait(wait).build(1).expect("node 1");
    // Warm up: the clock's anchor, the first ticks.
    for _ in 0..100_000 {
        let _ = black_box(generator.next_id());
    }
    measure(run, |until| {
        let mut tally = Tally::default();
        while Instant::now() < until {
            for _ in 0..4096 {
                tally.add(generator.next_id());
            }
        }
        tally
    })
}

/// `next_id_async` in one task of a current-thread runtime (the runtime runs on this
/// thread, so its CPU time is this thread's).
fn saturate_async(run: Duration) -> Row {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    let generator = Builder::new(Layout::TWITTER).build(1).expect("node 1");
    measure(run, |until| {
        runtime.block_on(async {
            let mut tally = Tally::default();
            while Instant::now() < until {
                for _ in 0..4096 {
                    tally.add(generator.next_id_async().await);
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
