//! Many threads, one generator: zero duplicates, per-thread strict order.

use atomflake::{Clock, Generator, Id, Layout, ManualClock, ShardedGenerator};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

const THREADS: usize = 4;
const PER_THREAD: usize = 1_000_000;

/// Mints `PER_THREAD` IDs on each of `THREADS` threads sharing `generator`, checks each
/// thread's IDs strictly increase, and returns them all sorted.
fn mint_from_threads<C: Clock + Sync>(generator: &Generator<C>) -> Vec<Id> {
    let per_thread: Vec<Vec<Id>> = thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|_| s.spawn(|| (0..PER_THREAD).map(|_| generator.next_id()).collect::<Vec<_>>()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for ids in &per_thread {
        assert_eq!(ids.len(), PER_THREAD);
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
    all
}

fn assert_no_duplicates(all: &[Id]) {
    assert_eq!(all.len(), THREADS * PER_THREAD);
    if let Some(i) = all.windows(2).position(|w| w[0] == w[1]) {
        panic!("duplicate id {:?}", all[i]);
    }
}

#[test]
fn shared_generator_mints_no_duplicates() {
    let generator = Generator::new(Layout::TWITTER, 513).unwrap();
    let all = mint_from_threads(&generator);
    assert_no_duplicates(&all);
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
    assert_no_duplicates(&all);
    let first = Layout::TWITTER.decode(all[0]).unix_ms;
    let last = Layout::TWITTER.decode(all[all.len() - 1]).unix_ms;
    assert!(
        first >= T0 && last <= highest_time,
        "{first}..{last} outside {T0}..={highest_time}"
    );
}

#[test]
fn blocks_and_single_mints_share_a_generator_without_duplicates() {
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
        [blocks, filled, singles].map(|h| h.join().unwrap()).into()
    });
    let mut all = Vec::new();
    for ids in per_thread {
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "a thread's ids are not increasing"
        );
        all.extend(ids);
    }
    let n = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), n, "duplicate ids");
}

#[test]
fn sharded_generator_mints_no_duplicates_with_more_threads_than_shards() {
    let generator = ShardedGenerator::new(Layout::TWITTER, [3, 700]).unwrap();
    let per_thread: Vec<Vec<Id>> = thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|_| s.spawn(|| (0..PER_THREAD).map(|_| generator.next_id()).collect::<Vec<_>>()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut all = Vec::new();
    for ids in per_thread {
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "a thread's ids are not increasing"
        );
        let node = Layout::TWITTER.decode(ids[0]).node;
        assert!(node == 3 || node == 700, "node {node}");
        assert!(
            ids.iter().all(|&id| Layout::TWITTER.decode(id).node == node),
            "a thread changed shards"
        );
        all.extend(ids);
    }
    all.sort_unstable();
    assert_no_duplicates(&all);
}
