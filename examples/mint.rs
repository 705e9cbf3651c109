//! Mints IDs from every core for a moment, prints a few decoded, and the throughput.
//!
//! `cargo run --release --example mint`
//!
//! Each thread has its own generator with its own node ID (the usual way to scale: one
//! node per thread), on the Twitter layout, so each is capped at 4,096 IDs per ms.

#![allow(clippy::cast_precision_loss, reason = "rates printed with 3 digits")]

use atomflake::{Generator, Layout};
use std::time::{Duration, Instant};

const RUN_FOR: Duration = Duration::from_secs(1);

fn main() -> Result<(), atomflake::Error> {
    let layout = Layout::TWITTER;
    let threads = std::thread::available_parallelism().map_or(2, usize::from);
    let generators = (0..threads)
        .map(|node| Generator::new(layout, node as u64))
        .collect::<Result<Vec<_>, _>>()?;
    println!("minting on {threads} threads for {RUN_FOR:?}, layout {layout}");

    let started = Instant::now();
    let results: Vec<(u64, Vec<atomflake::Id>)> = std::thread::scope(|s| {
        let handles: Vec<_> = generators
            .iter()
            .map(|generator| {
                s.spawn(move || {
                    let mut samples = Vec::new();
                    let mut count = 0_u64;
                    while started.elapsed() < RUN_FOR {
                        // Check the time once per 4,096 ids, not per id.
                        for _ in 0..4096 {
                            let id = generator.next_id();
                            if count.is_multiple_of(1_000_000) && samples.len() < 2 {
                                samples.push(id);
                            }
                            count += 1;
                        }
                    }
                    (count, samples)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("minting thread panicked"))
            .collect()
    });
    let elapsed = started.elapsed();

    println!(
        "{:>20}  {:<24}  {:>5}  {:>8}",
        "id", "time (unix ms)", "node", "sequence"
    );
    for (_, samples) in &results {
        for &id in samples {
            let parts = layout.decode(id);
            println!(
                "{id:>20}  {:<24}  {:>5}  {:>8}",
                parts.unix_ms, parts.node, parts.sequence
            );
        }
    }
    let total: u64 = results.iter().map(|(count, _)| count).sum();
    let per_second = total as f64 / elapsed.as_secs_f64();
    let cap = layout.ids_per_tick() as f64 * 1000.0 / layout.tick_ms() as f64;
    println!(
        "{total} ids in {elapsed:.2?}: {:.2} M ids/s in all, {:.2} M ids/s per thread \
         ({:.1}% of the {:.3} M/s cap of one node)",
        per_second / 1e6,
        per_second / threads as f64 / 1e6,
        100.0 * per_second / threads as f64 / cap,
        cap / 1e6,
    );
    Ok(())
}
