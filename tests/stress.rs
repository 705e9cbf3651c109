//! Many threads: zero duplicates, per-thread strict order, for each generator type.

use atomflake::{Builder, Clock, Generator, Id, Layout, LocalGenerator, ManualClock, ShardedGenerator};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

const THREADS: usize = 4;
const PER_THREAD: usize = 1_000_000;

/// Runs `mint(thread)` on `THREADS` threads and returns each thread's IDs.
fn on_threads(mint: impl Fn(usize) -> Vec<Id> + Sync) -> Vec<Vec<Id>> {
    thread::scope(|s| {
        let mint = &mint;
        let handles: Vec<_> = (0..THREADS).map(|t| s.spawn(move || mint(t))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Checks each thread's IDs strictly increase and no ID repeats across threads; returns
/// them all, sorted.
fn distinct_and_ordered(per_thread: Vec<Vec<Id>>) -> Vec<Id> {
    for ids in &per_thread {
        if let Some(i) = ids.windows(2).position(|w| w[0] >= w[1]) {
            panic!(
                "ids out of order within a thread: {:?} then {:?}",
                ids[i],
                ids[i + 1]
            );
        }
    }
    let mut all: Vec<Id> = per_thread.into_iter().flatten().collect();
    all.sort_unstable();
    if let Some(i) = all.windows(2).position(|w| w[0] == w[1]) {
        panic!("duplicate id {:?}", all[i]);
    }
    all
}

/// `PER_THREAD` IDs on each of `THREADS` threads sharing `generator`, checked and sorted.
fn mint_from_threads<C: Clock + Sync>(generator: &Generator<C>) -> Vec<Id> {
    let all = distinct_and_ordered(on_threads(|_| {
        (0..PER_THREAD).map(|_| generator.next_id()).collect()
    }));
    assert_eq!(all.len(), THREADS * PER_THREAD);
    all
}

#[test]
fn shared_generator_mints_no_duplicates() {
    let generator = Generator::new(Layout::TWITTER, 513).unwrap();
    let all = mint_from_threads(&generator);
    for id in [all[0], all[all.len() - 1]] {
        assert_eq!(Layout::TWITTER.decode(id).node, 513);
    }
    // 4M ids at 4,096 per ms span at least 977 ms of timestamps.
    let span = Layout::TWITTER.decode(all[all.len() - 1]).unix_ms - Layout::TWITTER.decode(all[0]).unix_ms;
    assert!(span >= 976, "4M ids in {span} ms: more than 4,096 per ms");
}

#[test]
fn shared_generator_survives_a_clock_moving_both_ways() {
    const T0: u64 = 1_700_000_000_000;
    let clock = ManualClock::new(T0);
    let generator = Generator::with_clock(Layout::TWITTER, 1, clock.clone()).unwrap();
    let done = AtomicBool::new(false);
    let (all, highest_time) = thread::scope(|s| {
        let mover = s.spawn(|| {
            let mut highest = T0;
            let mut step = 0_u64;
            while !done.load(Ordering::Relaxed) {
                step += 1;
                // Two steps forward, one step of 3 ms back.
                if step.is_multiple_of(3) {
                    clock.rewind(3);
                } else {
                    clock.advance(2);
                }
                highest = highest.max(clock.unix_ms());
                thread::yield_now();
            }
            highest
        });
        let all = mint_from_threads(&generator);
        done.store(true, Ordering::Relaxed);
        (all, mover.join().unwrap())
    });
    let first = Layout::TWITTER.decode(all[0]).unix_ms;
    let last = Layout::TWITTER.decode(all[all.len() - 1]).unix_ms;
    assert!(
        first >= T0 && last <= highest_time,
        "{first}..{last} outside {T0}..={highest_time}"
    );
}

#[test]
fn blocks_runs_and_single_mints_share_a_generator_without_duplicates() {
    let generator = Generator::new(Layout::TWITTER, 9).unwrap();
    let per_thread: Vec<Vec<Id>> = thread::scope(|s| {
        let blocks = s.spawn(|| {
            let mut ids = Vec::with_capacity(PER_THREAD);
            let mut n = 0;
            while ids.len() < PER_THREAD {
                n = n % 5000 + 1;
                ids.extend(generator.next_ids(n));
            }
            ids
        });
        let filled = s.spawn(|| {
            let mut ids = vec![Id::new(0); PER_THREAD];
            for chunk in ids.chunks_mut(3000) {
                generator.fill(chunk);
            }
            ids
        });
        let singles = s.spawn(|| (0..PER_THREAD).map(|_| generator.next_id()).collect::<Vec<_>>());
        let runs = s.spawn(|| {
            let mut ids = Vec::with_capacity(PER_THREAD);
            let mut max = 0;
            while ids.len() < PER_THREAD {
                max = max % 700 + 1;
                match generator.try_next_run(max) {
                    Ok(run) => {
                        assert!((1..=max).contains(&run.len()), "{run:?} for at most {max}");
                        ids.extend(run);
                    }
                    Err(error) => assert!(error.is_transient(), "{error}"),
                }
            }
            ids
        });
        [blocks, filled, singles, runs].map(|h| h.join().unwrap()).into()
    });
    distinct_and_ordered(per_thread);
}

#[test]
fn sharded_generator_mints_no_duplicates_with_more_threads_than_shards() {
    let generator = ShardedGenerator::new(Layout::TWITTER, [3, 700]).unwrap();
    let per_thread = on_threads(|_| (0..PER_THREAD).map(|_| generator.next_id()).collect());
    for ids in &per_thread {
        let node = Layout::TWITTER.decode(ids[0]).node;
        assert!(node == 3 || node == 700, "node {node}");
        assert!(
            ids.iter().all(|&id| Layout::TWITTER.decode(id).node == node),
            "a thread changed shards"
        );
    }
    assert_eq!(distinct_and_ordered(per_thread).len(), THREADS * PER_THREAD);
}

#[test]
fn local_generators_one_per_thread_mint_no_duplicates() {
    let per_thread = on_threads(|t| {
        let generator = LocalGenerator::new(Layout::TWITTER, t as u64).unwrap();
        let mut ids: Vec<Id> = (0..PER_THREAD / 2).map(|_| generator.next_id()).collect();
        ids.extend(generator.next_ids(PER_THREAD as u64 / 2));
        ids
    });
    assert_eq!(distinct_and_ordered(per_thread).len(), THREADS * PER_THREAD);
}

#[test]
fn borrow_ahead_stays_within_its_lead_under_threads() {
    const LEAD_MS: u64 = 3;
    let generator = Builder::new(Layout::TWITTER)
        .borrow_ahead(Duration::from_millis(LEAD_MS))
        .build(77)
        .unwrap();
    let clock = *generator.clock();
    let per_thread = on_threads(|_| {
        (0..PER_THREAD)
            .map(|_| {
                let id = generator.next_id();
                let parts = Layout::TWITTER.decode(id);
                // Read after the mint: the clock only moves forward, so an ID opened
                // within the lead of an earlier read is within the lead of this one. The
                // precise read: the default clock's `unix_ms` may lag it.
                if parts.sequence == 0 {
                    let now = clock.precise_unix_ms();
                    assert!(
                        parts.unix_ms <= now + LEAD_MS,
                        "opened {} at {now}",
                        parts.unix_ms
                    );
                }
                id
            })
            .collect()
    });
    let all = distinct_and_ordered(per_thread);
    assert_eq!(all.len(), THREADS * PER_THREAD);
}
