//! atomflake and its peers side by side, one run, one machine, the same layouts.
//! The generators are listed once in `atomflake_benches::peers`; this file times them with
//! criterion, the `report` bin with shorter windows in one process.
//!
//! - `unsaturated`: one thread, wide layout 41/0/22 (no generator reaches its cap), ns per
//!   ID: the floor (one quanta raw read + one uncontended CAS), atomflake's types, ferroid's
//!   three generators, snowdon, and the 128-bit `uuid::Uuid::now_v7` and ulid's monotonic
//!   generator. The fixed 12-bit layouts (snowflaked, rs-snowflake) in paced bursts that
//!   never reach the cap, beside atomflake and ferroid on the Twitter layout timed the same way.
//! - `saturated`: one thread, Twitter layout, 10 samples of ≥ 1 s, each generator with the
//!   wait its docs recommend and with a plain spin (the cap is 4.096 M IDs/s).
//! - `tail`: the same generators at saturation, each `next_id` timed (two quanta raw reads)
//!   into an HDR histogram; p50, p99, p99.9, p99.99 and max are printed after each.
//! - `contended`: 2 threads sharing one generator (`iter_custom` inside `thread::scope`),
//!   aggregate ns per ID.
//!
//! Before timing, each generator's IDs are checked (`atomflake_benches::sanity`): one that
//! fails is printed as `BROKEN, not timed` and left out.
//!
//! `cargo bench -p atomflake-benches --bench peers` (`-- --test` runs each once)

use atomflake_benches::measure::{self, Recorder};
use atomflake_benches::peers::{self, Entry, How, Visit, VisitShared};
use atomflake_benches::sanity;
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use crossbeam_utils::CachePadded;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

const THREADS: u64 = 2;

/// The bench's name: generator, layout, and the wait or note.
fn id(entry: &Entry) -> String {
    let paced = if entry.how == How::Paced { ", paced" } else { "" };
    let wait = if entry.wait.is_empty() {
        String::new()
    } else {
        format!(", {}", entry.wait)
    };
    format!("{} ({}{paced}{wait})", entry.name, entry.layout)
}

/// Whether the generator passed the sanity check (printed if not).
fn sane(entry: &Entry, mint: impl FnMut() -> u128, unix_ms: impl Fn(u128) -> u64) -> bool {
    sanity::check(mint, unix_ms)
        .map_err(|broken| eprintln!("BROKEN, not timed: {}: {broken}", id(entry)))
        .is_ok()
}

/// One thread: back to back, or in paced bursts.
struct OneThread<'a, 'c>(&'a mut BenchmarkGroup<'c, WallTime>);

impl Visit for OneThread<'_, '_> {
    fn visit(&mut self, entry: Entry, mut mint: impl FnMut() -> u128, unix_ms: impl Fn(u128) -> u64) {
        if sane(&entry, &mut mint, unix_ms) {
            self.0.bench_function(id(&entry), |b| {
                b.iter_custom(|iters| match entry.how {
                    How::Tight => measure::tight(iters, &mut mint),
                    How::Paced => measure::paced(iters, &mut mint),
                });
            });
        }
    }
}

/// One thread, each call timed into a histogram; the percentiles are printed after.
struct Tail<'a, 'c>(&'a mut BenchmarkGroup<'c, WallTime>);

impl Visit for Tail<'_, '_> {
    fn visit(&mut self, entry: Entry, mut mint: impl FnMut() -> u128, unix_ms: impl Fn(u128) -> u64) {
        if sane(&entry, &mut mint, unix_ms) {
            let mut recorder = Recorder::new();
            self.0.bench_function(id(&entry), |b| {
                b.iter_custom(|iters| recorder.time_calls(iters, &mut mint));
            });
            let l = recorder.latency();
            println!(
                "tail/{}: {} calls, p50 {} ns, p99 {} ns, p99.9 {} ns, p99.99 {} ns, max {} ns",
                id(&entry),
                l.calls,
                l.p50,
                l.p99,
                l.p999,
                l.p9999,
                l.max
            );
        }
    }
}

/// [`THREADS`] threads sharing the generator.
struct Shared<'a, 'c>(&'a mut BenchmarkGroup<'c, WallTime>);

impl VisitShared for Shared<'_, '_> {
    fn visit(&mut self, entry: Entry, mint: impl Fn() -> u128 + Sync, unix_ms: impl Fn(u128) -> u64) {
        if sane(&entry, &mint, unix_ms) {
            self.0
                .bench_function(format!("{}, {THREADS} threads", id(&entry)), |b| {
                    b.iter_custom(|iters| match entry.how {
                        How::Tight => measure::on_threads(THREADS, iters, &mint),
                        How::Paced => measure::paced_on_threads(THREADS, iters, &mint),
                    });
                });
        }
    }
}

fn unsaturated(c: &mut Criterion) {
    let mut group = c.benchmark_group("unsaturated");
    group.throughput(Throughput::Elements(1));
    // The floor: what any CAS-based generator with a precise quanta clock must pay.
    let clock = quanta::Clock::new();
    let word = AtomicU64::new(0);
    group.bench_function("floor: quanta raw + CAS", |b| {
        b.iter_custom(|iters| measure::floor(iters, &clock, &word));
    });
    peers::unsaturated(&mut OneThread(&mut group));
    group.finish();
}

/// Flat sampling: every sample mints the same number of IDs, each sample at least 1 s
/// (11 s over 10 samples).
fn at_saturation<'c>(c: &'c mut Criterion, name: &str) -> BenchmarkGroup<'c, WallTime> {
    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Elements(1));
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .measurement_time(Duration::from_secs(11));
    group
}

fn saturated(c: &mut Criterion) {
    let mut group = at_saturation(c, "saturated");
    peers::saturated(&mut OneThread(&mut group));
    group.finish();
}

fn tail(c: &mut Criterion) {
    let mut group = at_saturation(c, "tail");
    peers::saturated(&mut Tail(&mut group));
    group.finish();
}

fn contended(c: &mut Criterion) {
    let mut group = c.benchmark_group("contended");
    group.throughput(Throughput::Elements(1));
    let clock = quanta::Clock::new();
    let word = CachePadded::new(AtomicU64::new(0));
    group.bench_function(
        format!("floor: quanta raw + CAS on one shared word, {THREADS} threads"),
        |b| {
            b.iter_custom(|iters| measure::floor_on_threads(THREADS, iters, &clock, &word));
        },
    );
    peers::contended(&mut Shared(&mut group));
    group.finish();
}

criterion_group!(benches, unsaturated, saturated, tail, contended);
criterion_main!(benches);
