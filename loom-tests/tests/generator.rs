//! Loom models of [`Generator`]: every interleaving of two or three threads, on the real
//! generator code (its atomics come from `atomflake`'s `sync` shim, which is loom's under
//! `--cfg loom`). The clock is a `ManualClock`, whose time is a loom atomic that a model
//! thread moves.
#![cfg(loom)]

use atomflake::{
    Builder, Clock, Generator, Id, Layout, ManualClock, MintError, Parts, ShardedGenerator, Sleep, Until,
};
use loom::sync::Arc;
use loom::thread;
use std::collections::BTreeMap;
use std::future::Future;
use std::task::Poll;
use std::time::Duration;

const T0: u64 = 1_700_000_000_000;

/// A generator for node 5 of `layout`, reading `clock`, to share between model threads.
fn shared(layout: Layout, clock: &ManualClock) -> Arc<Generator<ManualClock>> {
    Arc::new(Generator::with_clock(layout, 5, clock.clone()).unwrap())
}

fn twitter(clock: &ManualClock) -> Arc<Generator<ManualClock>> {
    shared(Layout::TWITTER, clock)
}

/// Spawns the clock thread: one step of 1 ms forward.
fn advance_in_a_thread(clock: &ManualClock) -> thread::JoinHandle<()> {
    let clock = clock.clone();
    thread::spawn(move || clock.advance(1))
}

/// A layout with 2 IDs per tick, so a third mint in a tick must wait.
fn two_per_tick() -> Layout {
    Layout::builder()
        .timestamp_bits(41)
        .node_bits(10)
        .sequence_bits(1)
        .build()
        .unwrap()
}

/// [`two_per_tick`], a clock at `T0` and a generator on both, to share between threads.
fn two_per_tick_at_t0() -> (Layout, ManualClock, Arc<Generator<ManualClock>>) {
    let (layout, clock) = (two_per_tick(), ManualClock::new(T0));
    let generator = shared(layout, &clock);
    (layout, clock, generator)
}

/// Spawns a thread that mints `n` IDs with `next_id`.
fn minter(generator: &Arc<Generator<ManualClock>>, n: usize) -> thread::JoinHandle<Vec<Id>> {
    let generator = Arc::clone(generator);
    thread::spawn(move || (0..n).map(|_| generator.next_id()).collect())
}

/// Checks each thread's IDs strictly increase and no ID repeats across threads; returns
/// them all, sorted.
fn distinct_and_ordered(per_thread: Vec<Vec<Id>>) -> Vec<Id> {
    for ids in &per_thread {
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "not increasing within a thread: {ids:?}"
        );
    }
    let mut all: Vec<Id> = per_thread.into_iter().flatten().collect();
    all.sort_unstable();
    let n = all.len();
    all.dedup();
    assert_eq!(all.len(), n, "duplicate ids: {all:?}");
    all
}

/// Checks every tick's sequence values are exactly 0, 1, …: a new tick starts at 0 and
/// no value is skipped or reused.
fn ticks_start_at_zero(layout: Layout, ids: &[Id]) -> BTreeMap<u64, Vec<u64>> {
    let mut by_tick: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for &id in ids {
        let Parts {
            unix_ms, sequence, ..
        } = layout.decode(id);
        by_tick.entry(unix_ms).or_default().push(sequence);
    }
    for (tick, sequences) in &mut by_tick {
        sequences.sort_unstable();
        let expected: Vec<u64> = (0..sequences.len() as u64).collect();
        assert_eq!(*sequences, expected, "tick {tick}: sequences {sequences:?}");
    }
    by_tick
}

/// Joins the minting threads and then the clock thread, and checks the IDs the minters
/// return with [`distinct_and_ordered`] and [`ticks_start_at_zero`]; returns the ticks.
fn join_and_check(
    layout: Layout,
    minters: impl IntoIterator<Item = thread::JoinHandle<Vec<Id>>>,
    mover: thread::JoinHandle<()>,
) -> BTreeMap<u64, Vec<u64>> {
    let all = distinct_and_ordered(minters.into_iter().map(|t| t.join().unwrap()).collect());
    mover.join().unwrap();
    ticks_start_at_zero(layout, &all)
}

/// The race for the next tick after a spent one: on [`two_per_tick_at_t0`] with `T0`'s two
/// IDs minted, a thread that waits for the next tick (`wait`), one that does not (`try_`:
/// an ID, or exhaustion until `T0 + 1`) and the clock thread's step, each minted ID that
/// opens a tick checked with [`opener_check`]. Returns the layout and the IDs of each
/// thread, `T0`'s first, for [`distinct_and_ordered`].
///
/// Only one thread waits: loom has no fairness, so two spinning threads could hand the
/// processor to each other forever without the clock thread running. (Only the opener
/// is checked against the clock: a thread that continues a tick another thread opened may
/// not have seen the clock's new value yet, which is fine: the tick was current when
/// opened.)
fn race_for_the_next_tick(
    wait: fn(&Generator<ManualClock>) -> Id,
    try_: fn(&Generator<ManualClock>) -> Result<Id, MintError>,
) -> (Layout, Vec<Vec<Id>>) {
    let (layout, clock, generator) = two_per_tick_at_t0();
    let spent = vec![generator.next_id(), generator.next_id()];
    let opened_by_a_thread_that_saw_the_clock = opener_check(layout, &clock);
    let mover = advance_in_a_thread(&clock);
    let waiter = {
        let (generator, check) = (
            Arc::clone(&generator),
            opened_by_a_thread_that_saw_the_clock.clone(),
        );
        thread::spawn(move || vec![check(wait(&generator))])
    };
    let trier = {
        let (generator, check) = (Arc::clone(&generator), opened_by_a_thread_that_saw_the_clock);
        thread::spawn(move || try_(&generator).map(check))
    };
    let mut per_thread = vec![spent, waiter.join().unwrap()];
    match trier.join().unwrap() {
        Ok(id) => per_thread.push(vec![id]),
        Err(error) => assert_eq!(
            error,
            MintError::SequenceExhausted {
                tick: T0 + 1,
                retry_after: Duration::from_millis(1)
            }
        ),
    }
    mover.join().unwrap();
    (layout, per_thread)
}

/// A check for a minting thread: an ID that opens a tick (sequence 0) was minted by a
/// thread that had read the clock at that tick or later.
fn opener_check(layout: Layout, clock: &ManualClock) -> impl Fn(Id) -> Id + Clone + use<> {
    opener_check_with_lead(layout, clock, 0)
}

/// [`opener_check`] for borrow-ahead: the opener's clock was at most `lead_ms` behind the
/// tick it opened. (Later IDs of the tick may be minted by a thread whose clock reads
/// further behind: it continues the tick, as with a clock that moved back.)
fn opener_check_with_lead(
    layout: Layout,
    clock: &ManualClock,
    lead_ms: u64,
) -> impl Fn(Id) -> Id + Clone + use<> {
    let clock = clock.clone();
    move |id: Id| {
        let Parts {
            unix_ms, sequence, ..
        } = layout.decode(id);
        if sequence == 0 {
            assert!(
                clock.unix_ms() + lead_ms >= unix_ms,
                "opened tick {unix_ms} more than {lead_ms} ms before the clock got there"
            );
        }
        id
    }
}

/// Invariant: two threads × two mints in one tick give four distinct IDs, each thread's
/// increasing, with sequences 0..4.
#[test]
fn two_threads_two_mints_one_tick() {
    loom::model(|| {
        let clock = ManualClock::new(T0);
        let generator = twitter(&clock);
        let threads = [minter(&generator, 2), minter(&generator, 2)];
        let all = distinct_and_ordered(threads.into_iter().map(|t| t.join().unwrap()).collect());
        let ticks = ticks_start_at_zero(Layout::TWITTER, &all);
        assert_eq!(ticks.keys().copied().collect::<Vec<_>>(), [T0]);
    });
}

/// Invariant: with a third thread advancing the clock during the mints, IDs are distinct
/// and per-thread increasing, and the new tick starts at sequence 0.
#[test]
fn clock_advances_during_mints() {
    loom::model(|| {
        let clock = ManualClock::new(T0);
        let generator = twitter(&clock);
        let mover = advance_in_a_thread(&clock);
        let threads = [minter(&generator, 2), minter(&generator, 2)];
        let ticks = join_and_check(Layout::TWITTER, threads, mover);
        assert!(ticks.keys().all(|&t| t == T0 || t == T0 + 1), "{ticks:?}");
    });
}

/// Invariant: with 2 IDs per tick and the tick already spent, a `next_id` waits until
/// the clock thread advances, while a racing `try_next_id` either reports exhaustion until
/// that tick or mints in it; whoever opens the new tick (sequence 0) has read the clock
/// there; no duplicates ([`race_for_the_next_tick`]).
#[test]
fn spent_tick_waits_for_the_clock() {
    loom::model(|| {
        let (layout, per_thread) = race_for_the_next_tick(|g| g.next_id(), |g| g.try_next_id());
        let all = distinct_and_ordered(per_thread);
        let ticks = ticks_start_at_zero(layout, &all);
        assert_eq!(
            ticks.keys().copied().collect::<Vec<_>>(),
            [T0, T0 + 1],
            "{ticks:?}"
        );
        assert_eq!(ticks[&T0].len(), 2);
    });
}

/// Invariant: the bounded-wait twin, in the same race: with no deadline (`Duration::MAX`)
/// `next_id_timeout` waits for the clock thread as `next_id` does, and with a zero timeout
/// it answers as `try_next_id`, exhaustion until the next tick or a mint in it; whoever
/// opens the new tick has read the clock there; no duplicates.
#[test]
fn bounded_wait_waits_for_the_clock_or_reports_exhaustion() {
    loom::model(|| {
        let (layout, per_thread) = race_for_the_next_tick(
            |g| g.next_id_timeout(Duration::MAX).unwrap(),
            |g| g.next_id_timeout(Duration::ZERO),
        );
        let ticks = ticks_start_at_zero(layout, &distinct_and_ordered(per_thread));
        assert_eq!(
            ticks.keys().copied().collect::<Vec<_>>(),
            [T0, T0 + 1],
            "{ticks:?}"
        );
    });
}

/// A timer for the async waits that yields the model thread at each sleep and yield, so
/// that loom runs the others (the clock thread among them) while a task waits.
struct YieldingTimer;

impl Sleep for YieldingTimer {
    fn sleep(&self, _: Duration) -> impl Future<Output = ()> {
        self.yield_now()
    }

    fn yield_now(&self) -> impl Future<Output = ()> {
        std::future::poll_fn(|_| {
            thread::yield_now();
            Poll::Ready(())
        })
    }
}

/// Polls `future` until it is ready: with [`YieldingTimer`] it never waits on a waker.
fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
    }
}

/// Invariant: the async wait (`next_id_until`, the one every async mint uses), in the
/// same race: with [`Until::Patient`] it waits for the clock thread as `next_id` does,
/// and with a zero timeout it answers as `try_next_id`, exhaustion until the next tick or a
/// mint in it; whoever opens the new tick has read the clock there; no duplicates.
#[test]
fn async_wait_waits_for_the_clock_or_reports_exhaustion() {
    loom::model(|| {
        let (layout, per_thread) = race_for_the_next_tick(
            |g| block_on(g.next_id_until(Until::Patient, &YieldingTimer)).unwrap(),
            |g| block_on(g.next_id_until(Until::timeout(Duration::ZERO), &YieldingTimer)),
        );
        let ticks = ticks_start_at_zero(layout, &distinct_and_ordered(per_thread));
        assert_eq!(
            ticks.keys().copied().collect::<Vec<_>>(),
            [T0, T0 + 1],
            "{ticks:?}"
        );
    });
}

/// Invariant: `try_next_id` never waits: of four attempts in a 2-ID tick, exactly two
/// succeed (distinct) and two report exhaustion until the next tick.
#[test]
fn try_next_id_reports_exhaustion() {
    loom::model(|| {
        let (_, _, generator) = two_per_tick_at_t0();
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let generator = Arc::clone(&generator);
                thread::spawn(move || [generator.try_next_id(), generator.try_next_id()])
            })
            .collect();
        let results: Vec<Result<Id, MintError>> =
            threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
        let mut minted: Vec<Id> = results.iter().filter_map(|r| r.clone().ok()).collect();
        let exhausted = MintError::SequenceExhausted {
            tick: T0 + 1,
            retry_after: Duration::from_millis(1),
        };
        assert_eq!(
            results.iter().filter(|r| **r == Err(exhausted.clone())).count(),
            2,
            "{results:?}"
        );
        minted.sort_unstable();
        minted.dedup();
        assert_eq!(minted.len(), 2, "{results:?}");
    });
}

/// Invariant: with the clock stepping forward and then back during the mints, no ID
/// repeats or decreases within a thread, every tick's sequence starts at 0, and no ID is
/// later than the latest time the clock showed.
#[test]
fn clock_moves_back_during_mints() {
    loom::model(|| {
        let clock = ManualClock::new(T0);
        let generator = twitter(&clock);
        let mover = {
            let clock = clock.clone();
            thread::spawn(move || {
                clock.advance(1);
                clock.rewind(2);
            })
        };
        let threads = [minter(&generator, 2), minter(&generator, 2)];
        let ticks = join_and_check(Layout::TWITTER, threads, mover);
        assert!(ticks.keys().all(|&t| t <= T0 + 1), "{ticks:?}");
    });
}

/// Invariant: a block reservation racing single mints (and a clock step) hands out every
/// slot once: distinct IDs, each thread's increasing, each tick's sequences 0, 1, ….
#[test]
fn block_reservation_races_single_mints() {
    loom::model(|| {
        // 8 IDs per tick: all five fit in whichever tick they land, so nothing waits.
        let layout = Layout::builder()
            .timestamp_bits(41)
            .node_bits(10)
            .sequence_bits(3)
            .build()
            .unwrap();
        let clock = ManualClock::new(T0);
        let generator = shared(layout, &clock);
        let mover = advance_in_a_thread(&clock);
        let block = {
            let generator = Arc::clone(&generator);
            thread::spawn(move || generator.next_ids(3).collect::<Vec<_>>())
        };
        let single = minter(&generator, 2);
        let ticks = join_and_check(layout, [block, single], mover);
        assert!(ticks.keys().all(|&t| t == T0 || t == T0 + 1), "{ticks:?}");
    });
}

/// Invariant: a block that reaches the end of its tick stops there and reserves the rest
/// in the next tick only once the clock is there (the opener has read the clock); no
/// duplicates.
#[test]
fn block_stops_at_the_end_of_the_tick() {
    loom::model(|| {
        let (layout, clock, generator) = two_per_tick_at_t0();
        let first = vec![generator.next_id()];
        let mover = advance_in_a_thread(&clock);
        let block = {
            let (generator, check) = (Arc::clone(&generator), opener_check(layout, &clock));
            thread::spawn(move || generator.next_ids(2).map(check).collect::<Vec<_>>())
        };
        let all = distinct_and_ordered(vec![first, block.join().unwrap()]);
        mover.join().unwrap();
        ticks_start_at_zero(layout, &all);
    });
}

/// Invariant: two threads sharing a shard of a `ShardedGenerator` (loom runs model threads
/// on one OS thread, so both get the same shard), with a clock step: distinct IDs, each
/// thread's increasing, all from one node, each tick's sequences 0, 1, ….
#[test]
fn sharded_shard_shared_by_two_threads() {
    loom::model(|| {
        let clock = ManualClock::new(T0);
        let generator =
            Arc::new(ShardedGenerator::with_clock(Layout::TWITTER, [1, 2], clock.clone()).unwrap());
        let mover = advance_in_a_thread(&clock);
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let generator = Arc::clone(&generator);
                thread::spawn(move || vec![generator.next_id(), generator.next_id()])
            })
            .collect();
        join_and_check(Layout::TWITTER, threads, mover);
    });
}

/// Invariant: with borrow-ahead of one tick and the clock's tick spent, two threads (two
/// mints and one) on a 2-ID tick borrow the next tick instead of waiting, and the fifth
/// ID, two ticks ahead, waits
/// until the clock is one tick behind it (the opener of each tick read a clock at most one
/// tick behind it); no duplicates, each tick's sequences 0, 1, ….
#[test]
fn borrow_ahead_mints_one_tick_ahead_then_waits() {
    loom::model(|| {
        let layout = two_per_tick();
        let clock = ManualClock::new(T0);
        let generator = Arc::new(
            Builder::with_clock(layout, clock.clone())
                .borrow_ahead(Duration::from_millis(1))
                .build(5)
                .unwrap(),
        );
        let spent = vec![generator.next_id(), generator.next_id()];
        let mover = advance_in_a_thread(&clock);
        // One mint only waits (loom has no fairness: two waiters could spin forever).
        let threads: Vec<_> = [2, 1]
            .into_iter()
            .map(|n| {
                let (generator, check) = (Arc::clone(&generator), opener_check_with_lead(layout, &clock, 1));
                thread::spawn(move || (0..n).map(|_| check(generator.next_id())).collect::<Vec<_>>())
            })
            .collect();
        let mut per_thread = vec![spent];
        per_thread.extend(threads.into_iter().map(|t| t.join().unwrap()));
        let all = distinct_and_ordered(per_thread);
        mover.join().unwrap();
        let ticks = ticks_start_at_zero(layout, &all);
        assert_eq!(ticks.keys().copied().collect::<Vec<_>>(), [T0, T0 + 1, T0 + 2]);
    });
}
