//! The async minting methods (feature `tokio`): they wait without blocking the runtime
//! thread, and mint the same unique, increasing IDs as the blocking ones.
#![cfg(feature = "tokio")]

use atomflake::{
    Clock, Generator, Id, Layout, LocalGenerator, ManualClock, MintError, ShardedGenerator, Tokio, Until,
};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

const T0: u64 = 1_700_000_000_000;

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

fn increasing(ids: &[Id]) -> bool {
    ids.windows(2).all(|w| w[0] < w[1])
}

/// How long a wait that only turns "never" into a failure lasts: the value of
/// `atomflake_test_servers::HANG_GUARD`, kept here because the core crate's tests do not
/// depend on the test servers. A busy machine may take any part of it.
const HANG_GUARD: Duration = Duration::from_secs(90);

/// Runs `f` on its own thread and fails if it takes longer than [`HANG_GUARD`]: a future
/// that blocks its runtime thread would hang these tests instead of failing them.
fn within_hang_guard<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, result) = mpsc::channel();
    std::thread::spawn(move || done.send(f()).unwrap());
    result
        .recv_timeout(HANG_GUARD)
        .expect("the runtime thread was blocked")
}

#[test]
fn a_spent_tick_does_not_block_the_runtime_thread() {
    // One runtime thread: the task that advances the clock only runs if the waiting
    // mint yields the thread.
    let one_per_tick = Layout::builder().timestamp_bits(41).build().unwrap();
    let (first, second, clock_at_second) = within_hang_guard(move || {
        let clock = ManualClock::new(T0);
        let generator = Generator::with_clock(one_per_tick, 0, clock.clone()).unwrap();
        current_thread().block_on(async {
            let first = generator.next_id_async().await;
            let mover = tokio::spawn(async move {
                for _ in 0..100 {
                    tokio::task::yield_now().await;
                }
                clock.advance(1);
                clock
            });
            let second = generator.next_id_async().await;
            (first, second, mover.await.unwrap().unix_ms())
        })
    });
    assert_eq!(one_per_tick.decode(first).unix_ms, T0);
    assert_eq!(one_per_tick.decode(second).unix_ms, T0 + 1);
    assert_eq!(clock_at_second, T0 + 1);
}

#[test]
fn tasks_on_a_multi_thread_runtime_mint_distinct_ids() {
    let per_task = within_hang_guard(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()
            .unwrap();
        let generator = Arc::new(Generator::new(Layout::TWITTER, 1).unwrap());
        let sharded = Arc::new(ShardedGenerator::new(Layout::TWITTER, [2, 3]).unwrap());
        runtime.block_on(async {
            let mut tasks = Vec::new();
            for task in 0..8 {
                let (generator, sharded) = (Arc::clone(&generator), Arc::clone(&sharded));
                tasks.push(tokio::spawn(async move {
                    let mut ids = Vec::new();
                    for _ in 0..2_000 {
                        ids.push(if task % 2 == 0 {
                            generator.next_id_async().await
                        } else {
                            sharded.next_id_async().await
                        });
                    }
                    ids.extend(if task % 2 == 0 {
                        generator.next_ids_async(10_000).await
                    } else {
                        sharded.next_ids_async(10_000).await
                    });
                    ids
                }));
            }
            let mut per_task = Vec::new();
            for task in tasks {
                per_task.push(task.await.unwrap());
            }
            per_task
        })
    });
    let mut all = Vec::new();
    for ids in per_task {
        // Single IDs may come from different shards as the task moves between threads;
        // each `next_ids_async` call keeps one shard, so its IDs increase.
        assert!(
            increasing(&ids[2_000..]),
            "a next_ids_async block is not increasing"
        );
        all.extend(ids);
    }
    let n = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), n, "duplicate ids");
}

#[test]
fn long_waits_sleep_on_the_timer_and_mint_in_order() {
    // 10 ms ticks with 2 IDs each: 9 IDs span at least 4 tick boundaries, each a wait of
    // up to 10 ms, longer than the 2 ms left to yielding.
    let slow = Layout::builder()
        .timestamp_bits(39)
        .sequence_bits(1)
        .tick_ms(10)
        .build()
        .unwrap();
    let ids = within_hang_guard(move || {
        let generator = LocalGenerator::new(slow, 0).unwrap();
        current_thread().block_on(async {
            let mut ids = vec![generator.next_id_async().await];
            ids.extend(generator.next_ids_async(8).await);
            ids
        })
    });
    assert!(increasing(&ids));
    let ticks: std::collections::BTreeSet<u64> = ids.iter().map(|&id| slow.decode(id).unix_ms).collect();
    assert!(ticks.len() >= 5, "{ticks:?}");
}

#[test]
fn async_futures_of_shared_generators_are_send() {
    fn send<T: Send>(_: &T) {}
    let generator = Generator::new(Layout::TWITTER, 1).unwrap();
    let sharded = ShardedGenerator::new(Layout::TWITTER, [1]).unwrap();
    send(&generator.next_id_async());
    send(&generator.next_ids_async(3));
    send(&sharded.next_id_async());
}

#[test]
fn a_deadline_ends_the_async_wait_with_the_refusal_a_try_reports() {
    // One ID a tick and a clock that stands still: the second mint waits in vain.
    let one_per_tick = Layout::builder().timestamp_bits(41).build().unwrap();
    let generator = Generator::with_clock(one_per_tick, 0, ManualClock::new(T0)).unwrap();
    let timeout = Duration::from_millis(30);
    let (first, refused, filled) = current_thread().block_on(async {
        let first = generator.next_id_until(Until::Patient, &Tokio).await;
        let started = std::time::Instant::now();
        let refused = generator.next_id_until(Until::timeout(timeout), &Tokio).await;
        // Refused once the next tick could not start before the deadline: in its last
        // millisecond, by the clock's reckoning.
        assert!(
            started.elapsed() + Duration::from_millis(1) >= timeout,
            "{:?}",
            started.elapsed()
        );
        let mut ids = [Id::new(0); 2];
        let filled = generator
            .fill_until(&mut ids, Until::timeout(Duration::ZERO), &Tokio)
            .await;
        (first, refused, filled)
    });
    assert_eq!(one_per_tick.decode(first.unwrap()).unix_ms, T0);
    let spent = MintError::SequenceExhausted {
        tick: T0 + 1,
        retry_after: Duration::from_millis(1),
    };
    assert_eq!(refused, Err(spent.clone()));
    let filled = filled.unwrap_err();
    assert_eq!((filled.filled(), filled.error()), (0, &spent));
}
