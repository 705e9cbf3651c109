//! atomflake's own types, one run, one machine (issues 2 and 4). The comparisons with the
//! peers (`unsaturated`, `saturated`, `tail`, `contended`) are in `peers.rs`.
//!
//! - `blocks`: `next_ids(4096)` on the wide layout, so one CAS and one clock read serve
//!   4,096 IDs; criterion's throughput line gives the cost per ID.
//! - `local`: `LocalGenerator::next_id` on the wide layout against one quanta
//!   `Clock::raw()` read, the one cost it cannot avoid.
//! - `threads`: aggregate time per ID with 1 and 2 threads, for a `ShardedGenerator`
//!   (41/1/21: two nodes, each thread its own) and for one shared `Generator` (wide).
//! - `forms`: an ID's other forms, per ID, beside `Generator::next_id` (Twitter's layout):
//!   base32 and base62 text, a UUID of version 7, and `Mask::mask`/`unmask`, on
//!   consecutive IDs.
//!
//! Before timing, each generator's IDs are checked (`atomflake_benches::sanity`): one that
//! fails is reported as broken and not timed.
//!
//! `cargo bench -p atomflake-benches --bench generator`

use atomflake::{Generator, Layout, LocalGenerator, Mask, MonotonicClock, ShardedGenerator};
use atomflake_benches::measure::{floor_step, on_threads};
use atomflake_benches::peers::{two_nodes, wide};
use atomflake_benches::sanity;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

/// Whether `mint`'s IDs pass the sanity check (printed if not).
fn sane(name: &str, mut mint: impl FnMut() -> u64, layout: Layout) -> bool {
    let decode = |id: u128| {
        layout
            .decode(u64::try_from(id).expect("a 64-bit ID").into())
            .unix_ms
    };
    sanity::check(|| mint().into(), decode)
        .map_err(|broken| eprintln!("BROKEN, not timed: {name}: {broken}"))
        .is_ok()
}

/// Block reservation: 4,096 IDs per `next_ids` call on the wide layout, cost per ID.
fn blocks(c: &mut Criterion) {
    const BLOCK: u64 = 4096;
    let layout = wide();
    let generator = Generator::new(layout, 0).expect("node 0");
    let mut group = c.benchmark_group("blocks");
    group.throughput(Throughput::Elements(BLOCK));
    if sane(
        "atomflake next_ids",
        {
            let mut ids = std::iter::from_fn(|| Some(generator.next_ids(BLOCK))).flatten();
            move || ids.next().expect("endless").get()
        },
        layout,
    ) {
        group.bench_function("atomflake Generator::next_ids(4096), per block", |b| {
            b.iter(|| {
                for id in generator.next_ids(BLOCK) {
                    let _ = black_box(id);
                }
            });
        });
    }
    group.finish();
}

/// `LocalGenerator` against the clock reads: the raw counter, the default clock's load and
/// its precise read.
fn local(c: &mut Criterion) {
    let layout = wide();
    let mut group = c.benchmark_group("local");
    group.throughput(Throughput::Elements(1));
    let clock = quanta::Clock::new();
    group.bench_function("quanta Clock::raw()", |b| b.iter(|| clock.raw()));
    let monotonic = MonotonicClock::new();
    group.bench_function("atomflake MonotonicClock::unix_ms()", |b| {
        b.iter(|| atomflake::Clock::unix_ms(&monotonic));
    });
    group.bench_function("atomflake MonotonicClock::precise_unix_ms()", |b| {
        b.iter(|| atomflake::Clock::precise_unix_ms(&monotonic));
    });
    let local = LocalGenerator::new(layout, 0).expect("node 0");
    if sane("atomflake LocalGenerator", || local.next_id().get(), layout) {
        group.bench_function("atomflake LocalGenerator", |b| b.iter(|| local.next_id()));
    }
    group.finish();
}

/// Aggregate time per ID with 1 and 2 threads: sharded (a node per thread) and shared.
fn threads(c: &mut Criterion) {
    let mut group = c.benchmark_group("threads");
    group.throughput(Throughput::Elements(1));
    // 41/1/21: two nodes, 2,097,152 IDs per ms each, a cap no thread reaches.
    let two_nodes = two_nodes();
    // The floor: each thread reads quanta's raw clock and CASes a word of its own.
    let clock = quanta::Clock::new();
    for n in [1, 2] {
        group.bench_function(format!("floor: quanta raw + private CAS, {n} threads"), |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                std::thread::scope(|s| {
                    for _ in 0..n {
                        s.spawn(|| {
                            let word = crossbeam_utils::CachePadded::new(AtomicU64::new(0));
                            for _ in 0..iters / n {
                                let _ = black_box(floor_step(&clock, &word));
                            }
                        });
                    }
                });
                start.elapsed()
            });
        });
    }
    let sharded = ShardedGenerator::new(two_nodes, [0, 1]).expect("nodes 0 and 1");
    if sane(
        "atomflake ShardedGenerator",
        || sharded.next_id().get(),
        two_nodes,
    ) {
        for n in [1, 2] {
            group.bench_function(format!("atomflake ShardedGenerator, {n} threads"), |b| {
                b.iter_custom(|iters| on_threads(n, iters, &|| sharded.next_id().get().into()));
            });
        }
    }
    let layout = wide();
    let one_word = Generator::new(layout, 0).expect("node 0");
    if sane("atomflake Generator", || one_word.next_id().get(), layout) {
        for n in [1, 2] {
            group.bench_function(format!("atomflake Generator shared, {n} threads"), |b| {
                b.iter_custom(|iters| on_threads(n, iters, &|| one_word.next_id().get().into()));
            });
        }
    }
    group.finish();
}

/// The other forms of an ID, per ID, beside minting one: each on consecutive Twitter IDs
/// (as a generator hands them out), so that the input changes as it does in use.
fn forms(c: &mut Criterion) {
    let mut group = c.benchmark_group("forms");
    group.throughput(Throughput::Elements(1));
    let generator = Generator::new(Layout::TWITTER, 1).expect("node 1");
    group.bench_function("atomflake Generator::next_id (twitter)", |b| {
        b.iter(|| generator.next_id());
    });
    let first = generator.next_id().get();
    let mut next = first;
    let mut consecutive = move || {
        next += 1;
        atomflake::Id::new(black_box(next))
    };
    group.bench_function("Id::to_base32", |b| b.iter(|| consecutive().to_base32()));
    group.bench_function("Id::to_base62", |b| b.iter(|| consecutive().to_base62()));
    group.bench_function("Id::to_uuid_u128 (twitter)", |b| {
        b.iter(|| consecutive().to_uuid_u128(Layout::TWITTER));
    });
    let mask = Mask::new(*b"a bench's key...");
    group.bench_function("Mask::mask", |b| b.iter(|| mask.mask(consecutive())));
    group.bench_function("Mask::unmask", |b| b.iter(|| mask.unmask(consecutive())));
    let mut block: Vec<atomflake::Id> = (first..first + 4096).map(atomflake::Id::new).collect();
    group.throughput(Throughput::Elements(4096));
    group.bench_function("Mask::mask_all(4096 IDs), per block", |b| {
        b.iter(|| mask.mask_all(black_box(&mut block)));
    });
    group.bench_function("Mask::unmask_all(4096 IDs), per block", |b| {
        b.iter(|| mask.unmask_all(black_box(&mut block)));
    });
    group.finish();
}

criterion_group!(benches, blocks, local, threads, forms);
criterion_main!(benches);
