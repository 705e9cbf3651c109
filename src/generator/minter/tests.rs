//! The CAS loop against a high-water mark's keeper and in a child of a fork.

use super::*;
use crate::clock::ManualClock;
use crate::generator::keeper::panic_message;
use crate::generator::keeper::tests::{Panics, T0, fail_next_store, kept, ms_slots, slot_at, within};
use crate::mark::StoreError;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

/// A process that is not this one: the parent a test's minter pretends to be copied from.
fn parent() -> u32 {
    std::process::id().wrapping_add(1)
}

fn forked() -> MintError {
    MintError::Forked {
        parent: parent(),
        child: std::process::id(),
    }
}

#[test]
fn try_next_id_reports_a_mark_being_stored_as_pending() {
    let (mark, stored, go) = kept();
    let minter = Minter::new(ms_slots().layout, 0, Wait::Spin).with_mark(mark, 0);
    let state = LocalWord::new(minter.start());
    // The clock jumped past the stored mark (T0 + 1.5 s) while the keeper's store is
    // held: nothing is minted past the mark.
    let clock = ManualClock::new(T0 + 1_600);
    let pending = minter.try_reserve_one(&state, &clock);
    // When the store is due, by the first store's time: at least the 1 ms floor.
    let Err(MintError::MarkPending { retry_after }) = pending else {
        panic!("{pending:?}");
    };
    assert!(retry_after >= Duration::from_millis(1), "{retry_after:?}");
    assert_eq!(
        MintError::MarkPending {
            retry_after: Duration::from_millis(3)
        }
        .to_string(),
        "the clock has passed the high-water mark while the next mark is being stored: \
         ids are available again once it is, expected in 3ms"
    );
    assert_eq!(stored.recv().unwrap(), T0 + 1_601 + 1_500);
    go.send(Ok(())).unwrap();
    minter.reserve(&state, &clock, 1);
    assert_eq!(
        minter.try_reserve_one(&state, &clock),
        Ok(slot_at(T0 + 1_600) + 1)
    );
}

#[test]
fn next_id_panics_and_try_next_id_reports_a_keeper_that_panicked() {
    let mark = Mark::kept(Panics { stores: 0 }, ms_slots(), T0, None).unwrap();
    let minter = Arc::new(Minter::new(ms_slots().layout, 0, Wait::Spin).with_mark(mark, 0));
    let clock = ManualClock::new(T0 + 1_600);
    let waiting = (Arc::clone(&minter), clock.clone());
    let panic = within(Duration::from_secs(10), move || {
        let (minter, clock) = waiting;
        let state = AtomicWord::new(minter.start());
        std::panic::catch_unwind(AssertUnwindSafe(|| minter.reserve(&state, &clock, 1)))
            .map_err(|panic| panic_message(panic.as_ref()))
    });
    let message = format!("disk on fire at {}", T0 + 1_601 + 1_500);
    assert_eq!(
        panic,
        Err(format!(
            "atomflake: cannot mint an id: {}",
            MintError::KeeperPanicked {
                message: message.clone()
            }
        ))
    );
    let state = LocalWord::new(minter.start());
    assert_eq!(
        minter.try_reserve_one(&state, &clock),
        Err(MintError::KeeperPanicked { message })
    );
}

#[test]
fn a_child_is_refused_at_its_first_tick_with_both_processes() {
    let minter = Minter::new(Layout::TWITTER, 0, Wait::Spin).born_in(parent());
    let state = LocalWord::new(minter.start());
    assert_eq!(
        minter.try_reserve_one(&state, &ManualClock::new(T0)),
        Err(forked())
    );
    assert_eq!(Word::load(&state), minter.start(), "nothing minted");
    assert_eq!(
        forked().to_string(),
        format!(
            "generator built in process {} cannot mint in process {}, a child of a fork: \
             both would mint the same ids; build a new generator in the child, on a node of its own",
            parent(),
            std::process::id()
        )
    );
}

#[test]
fn a_child_mints_the_rest_of_a_checked_tick_and_is_refused_the_next() {
    let layout = Layout::builder()
        .timestamp_bits(41)
        .sequence_bits(3)
        .build()
        .unwrap();
    let clock = ManualClock::new(T0);
    let minter = Minter::new(layout, 0, Wait::Spin);
    let state = LocalWord::new(minter.start());
    let first = minter.try_reserve_one(&state, &clock).unwrap();
    // The fork: the child has the parent's state and limits.
    let child = minter.born_in(parent());
    for sequence in 1..layout.ids_per_tick() {
        assert_eq!(child.try_reserve_one(&state, &clock), Ok(first + sequence));
    }
    // The tick spent: the wait for the next is refused, and so is the next tick.
    assert_eq!(child.try_reserve_one(&state, &clock), Err(forked()));
    clock.advance(1);
    assert_eq!(child.try_reserve_one(&state, &clock), Err(forked()));
}

#[test]
fn next_id_in_a_child_panics_instead_of_waiting_for_a_clock_that_stands_still() {
    let one_per_tick = Layout::builder().timestamp_bits(41).build().unwrap();
    let clock = ManualClock::new(T0);
    let minter = Minter::new(one_per_tick, 0, Wait::Spin);
    let state = AtomicWord::new(minter.start());
    minter.reserve(&state, &clock, 1);
    // The child's clock stands still (the thread that moved it was the parent's): its
    // tick is spent, and a wait would never end.
    let child = minter.born_in(parent());
    let panic = within(Duration::from_secs(10), move || {
        std::panic::catch_unwind(AssertUnwindSafe(|| child.reserve(&state, &clock, 1)))
            .map_err(|panic| panic_message(panic.as_ref()))
    });
    assert_eq!(panic, Err(format!("atomflake: cannot mint an id: {}", forked())));
}

/// A timeout that the waits below never reach when they end as they should: a test that
/// waits it out fails on its elapsed time.
const LONG: Duration = Duration::from_secs(10);

/// Longer than any wait that ends at once, even on a loaded machine; far short of [`LONG`].
const AT_ONCE: Duration = Duration::from_secs(2);

/// A timeout that the waits below wait out.
const SHORT: Duration = Duration::from_millis(60);

/// The refusal of a tick spent at `T0` (1 ms ticks): the next tick, 1 ms away.
const SPENT_AT_T0: MintError = MintError::SequenceExhausted {
    tick: T0 + 1,
    retry_after: Duration::from_millis(1),
};

/// `work`'s answer and how long it took.
fn timed<T>(work: impl FnOnce() -> T) -> (T, Duration) {
    let start = std::time::Instant::now();
    let answer = work();
    (answer, start.elapsed())
}

/// A layout of one ID per tick of `tick_ms`, a minter on it that waits as `wait` says, a
/// clock at `T0` and a state word whose tick is spent.
fn spent(tick_ms: u64, wait: Wait) -> (Minter, ManualClock, AtomicWord) {
    let layout = Layout::builder()
        .timestamp_bits(41)
        .tick_ms(tick_ms)
        .build()
        .unwrap();
    let minter = Minter::new(layout, 0, wait);
    let clock = ManualClock::new(T0);
    let state = AtomicWord::new(minter.start());
    minter.reserve(&state, &clock, 1);
    (minter, clock, state)
}

/// Moves `clock` on by `ms` after 20 ms, on a thread of its own.
fn advance_soon(clock: &ManualClock, ms: u64) -> std::thread::JoinHandle<()> {
    let clock = clock.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        clock.advance(ms);
    })
}

#[test]
fn a_spent_tick_is_waited_for_until_the_deadline_then_refused() {
    for wait in [Wait::Sleep, Wait::Spin] {
        let (minter, clock, state) = spent(1, wait);
        let before = Word::load(&state);
        let (answer, took) = timed(|| minter.reserve_for(&state, &clock, 1, SHORT));
        assert_eq!(answer, Err(SPENT_AT_T0));
        // Refused once the next tick could not start before the deadline: in its last
        // millisecond, by the clock's reckoning (the tick starts 1 ms after its time).
        assert!(took + Duration::from_millis(1) >= SHORT, "refused after {took:?}");
        assert_eq!(Word::load(&state), before, "nothing minted");
    }
}

#[test]
fn a_spent_tick_is_minted_in_once_the_clock_passes_it_before_the_deadline() {
    for wait in [Wait::Sleep, Wait::Spin] {
        let (minter, clock, state) = spent(1, wait);
        let mover = advance_soon(&clock, 1);
        let answer = minter.reserve_for(&state, &clock, 3, LONG);
        mover.join().unwrap();
        assert_eq!(answer, Ok((minter.slots().first_from(T0 + 1), 1)));
    }
}

#[test]
fn a_tick_that_starts_after_the_deadline_is_refused_at_once() {
    // A 1 s tick, spent: the next starts in 1 s, after a 500 ms deadline.
    let (minter, clock, state) = spent(1_000, Wait::Sleep);
    let timeout = Duration::from_millis(500);
    let (answer, took) = timed(|| minter.reserve_for(&state, &clock, 1, timeout));
    assert_eq!(
        answer,
        Err(MintError::SequenceExhausted {
            tick: T0 / 1_000 + 1,
            retry_after: Duration::from_secs(1)
        })
    );
    assert!(took < timeout, "refused after {took:?}");
    // With time for it, the same tick is waited for.
    let mover = advance_soon(&clock, 1_000);
    assert!(
        minter
            .reserve_for(&state, &clock, 1, Duration::from_secs(2))
            .is_ok()
    );
    mover.join().unwrap();
}

#[test]
fn a_zero_timeout_answers_as_try_reserve() {
    let (minter, clock, state) = spent(1, Wait::Sleep);
    let tried = minter.try_reserve(&state, &clock, 1);
    assert!(matches!(tried, Err(MintError::SequenceExhausted { .. })));
    assert_eq!(minter.reserve_for(&state, &clock, 1, Duration::ZERO), tried);
    clock.advance(1);
    assert_eq!(
        minter.reserve_for(&state, &clock, 1, Duration::ZERO),
        Ok((minter.slots().first_from(T0 + 1), 1))
    );
}

#[test]
fn a_timeout_too_long_for_an_instant_is_no_deadline() {
    let (minter, clock, state) = spent(1, Wait::Sleep);
    let mover = advance_soon(&clock, 1);
    assert_eq!(
        minter.reserve_for(&state, &clock, 1, Duration::MAX),
        Ok((minter.slots().first_from(T0 + 1), 1))
    );
    mover.join().unwrap();
}

/// A minter whose mark is kept in the keeper tests' gate (stored up to `T0 + 1.5 s`), a
/// clock past the mark, and the gate's channels.
fn past_the_mark() -> (
    Minter,
    ManualClock,
    LocalWord,
    std::sync::mpsc::Receiver<u64>,
    std::sync::mpsc::Sender<Result<(), StoreError>>,
) {
    let (mark, stored, go) = kept();
    let minter = Minter::new(ms_slots().layout, 0, Wait::Spin).with_mark(mark, 0);
    let state = LocalWord::new(minter.start());
    (minter, ManualClock::new(T0 + 1_600), state, stored, go)
}

/// A call of [`SHORT`] refused with `refusal` after its deadline; then, the keeper's store
/// of `mark` (held at `go`) let through 20 ms into a call of [`LONG`], that call mints the
/// first slot at `unix_ms`.
fn refused_then_minted_once_stored(
    (minter, clock, state): (&Minter, &ManualClock, &LocalWord),
    refusal: MintError,
    (stored, go, mark): (
        &std::sync::mpsc::Receiver<u64>,
        std::sync::mpsc::Sender<Result<(), StoreError>>,
        u64,
    ),
    unix_ms: u64,
) {
    let (answer, took) = timed(|| minter.reserve_for(state, clock, 1, SHORT));
    // A pending mark's time depends on when the store was sent: any is the same refusal.
    match (answer, refusal) {
        (Err(MintError::MarkPending { .. }), MintError::MarkPending { .. }) => {}
        (answer, refusal) => assert_eq!(answer, Err(refusal)),
    }
    assert!(took >= SHORT, "refused after {took:?}");
    assert_eq!(stored.recv().unwrap(), mark);
    let letting_through = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        go.send(Ok(())).unwrap();
        go
    });
    assert_eq!(
        minter.reserve_for(state, clock, 1, LONG),
        Ok((slot_at(unix_ms), 1))
    );
    letting_through.join().unwrap();
}

#[test]
fn a_pending_mark_is_waited_for_until_the_deadline_then_refused() {
    let (minter, clock, state, stored, go) = past_the_mark();
    // Stored while the next call waits: it mints.
    refused_then_minted_once_stored(
        (&minter, &clock, &state),
        MintError::MarkPending {
            retry_after: Duration::ZERO,
        },
        (&stored, go, T0 + 1_601 + 1_500),
        T0 + 1_600,
    );
}

#[test]
fn a_failing_store_is_waited_for_past_the_patience_until_the_deadline() {
    let (minter, clock, state, stored, go) = past_the_mark();
    let failure = fail_next_store(&go, std::io::ErrorKind::StorageFull);
    // `next_id` would give up after the patience, 200 ms; the deadline is later.
    let timeout = Duration::from_millis(500);
    let (answer, took) = timed(|| minter.reserve_for(&state, &clock, 1, timeout));
    assert_eq!(answer, Err(MintError::Store(failure)));
    assert!(took >= timeout, "refused after {took:?}");
    // The keeper's next attempt succeeds while the next call waits.
    assert_eq!(stored.recv().unwrap(), T0 + 1_601 + 1_500);
    go.send(Ok(())).unwrap();
    assert_eq!(
        minter.reserve_for(&state, &clock, 1, LONG),
        Ok((slot_at(T0 + 1_600), 1))
    );
}

#[test]
fn a_lapsed_lease_is_waited_for_until_the_deadline_and_minted_on_once_renewed() {
    use crate::generator::keeper::tests::{NO_RENEWAL, lapsed, leased};
    // Held from T0 for 3 s; a renewal sent at T0 + 2.9 s holds until T0 + 5.9 s.
    let (mark, lease_clock, stored, go) = leased(NO_RENEWAL);
    lease_clock.set(T0 + 2_900);
    let minter = Minter::new(ms_slots().layout, 0, Wait::Spin).with_mark(mark, 0);
    let state = LocalWord::new(minter.start());
    let clock = ManualClock::new(T0 + 3_000);
    refused_then_minted_once_stored(
        (&minter, &clock, &state),
        lapsed(),
        (&stored, go, T0 + 3_001 + 1_500),
        T0 + 3_000,
    );
}

#[test]
fn a_lost_store_is_refused_at_once() {
    let (minter, clock, state, _stored, go) = past_the_mark();
    let lost = StoreError::lost("lease on node 1 is lost");
    go.send(Err(lost.clone())).unwrap();
    let (answer, took) = timed(|| minter.reserve_for(&state, &clock, 1, LONG));
    assert_eq!(answer, Err(MintError::Store(lost)));
    assert!(took < AT_ONCE, "refused after {took:?}");
}

#[test]
fn a_store_failing_for_good_is_refused_at_once_while_the_keeper_tries_again() {
    let (minter, clock, state, stored, go) = past_the_mark();
    let denied = StoreError::failed(crate::mark::HighWaterError::Io {
        path: "mark".into(),
        action: "write",
        cause: std::io::Error::from(std::io::ErrorKind::PermissionDenied).into(),
    });
    assert!(!denied.is_transient());
    go.send(Err(denied.clone())).unwrap();
    let (answer, took) = timed(|| minter.reserve_for(&state, &clock, 1, LONG));
    assert_eq!(answer, Err(MintError::Store(denied)));
    assert!(took < AT_ONCE, "refused after {took:?}");
    assert_eq!(stored.recv().unwrap(), T0 + 1_601 + 1_500, "tried");
    assert_eq!(stored.recv().unwrap(), T0 + 1_601 + 1_500, "tried again");
}

#[test]
fn a_keeper_that_panicked_is_refused_at_once() {
    let mark = Mark::kept(Panics { stores: 0 }, ms_slots(), T0, None).unwrap();
    let minter = Minter::new(ms_slots().layout, 0, Wait::Spin).with_mark(mark, 0);
    let state = LocalWord::new(minter.start());
    let clock = ManualClock::new(T0 + 1_600);
    let (answer, took) = timed(|| minter.reserve_for(&state, &clock, 1, LONG));
    assert_eq!(
        answer,
        Err(MintError::KeeperPanicked {
            message: format!("disk on fire at {}", T0 + 1_601 + 1_500)
        })
    );
    assert!(took < AT_ONCE, "refused after {took:?}");
}

#[test]
fn a_child_of_a_fork_and_a_clock_out_of_span_are_refused_at_once() {
    // The child's clock stands still on a spent tick: a wait would never end.
    let (minter, clock, state) = spent(1, Wait::Sleep);
    let child = minter.born_in(parent());
    let (answer, took) = timed(|| child.reserve_for(&state, &clock, 1, LONG));
    assert_eq!(answer, Err(forked()));
    assert!(took < AT_ONCE, "refused after {took:?}");

    let minter = Minter::new(Layout::TWITTER, 0, Wait::Sleep);
    let state = LocalWord::new(minter.start());
    let (answer, took) = timed(|| minter.reserve_for(&state, &ManualClock::new(5), 1, LONG));
    assert_eq!(
        answer,
        Err(MintError::ClockOutOfSpan(crate::RangeError::TimeBeforeEpoch {
            unix_ms: 5,
            epoch_ms: Layout::TWITTER.epoch_ms()
        }))
    );
    assert!(took < AT_ONCE, "refused after {took:?}");
}

/// A timer that blocks the thread for each sleep and records it, for the async wait
/// driven by [`block_on`].
#[derive(Default)]
struct RecordingTimer {
    slept: std::sync::Mutex<Vec<Duration>>,
    yields: std::sync::atomic::AtomicUsize,
}

impl Sleep for RecordingTimer {
    fn sleep(&self, duration: Duration) -> impl std::future::Future<Output = ()> {
        self.slept.lock().unwrap().push(duration);
        std::thread::sleep(duration);
        std::future::ready(())
    }

    fn yield_now(&self) -> impl std::future::Future<Output = ()> {
        self.yields.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        std::thread::yield_now();
        std::future::ready(())
    }
}

/// Polls `future` until it is ready (the timers above never leave it pending).
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
    }
}

#[test]
fn a_wait_shorter_than_twice_the_timers_resolution_yields_and_a_longer_one_sleeps() {
    let timer = RecordingTimer::default();
    let ((), took) = timed(|| block_on(timer.wait(Duration::from_micros(1_500))));
    assert!(took >= Duration::from_micros(1_500), "ended after {took:?}");
    assert!(timer.slept.lock().unwrap().is_empty());
    assert!(timer.yields.load(std::sync::atomic::Ordering::Relaxed) > 0);

    let timer = RecordingTimer::default();
    block_on(timer.wait(Duration::from_millis(2)));
    assert_eq!(*timer.slept.lock().unwrap(), [Duration::from_millis(2)]);
    assert_eq!(timer.yields.load(std::sync::atomic::Ordering::Relaxed), 0);
}

#[test]
fn the_async_wait_refuses_a_spent_tick_at_the_deadline_and_mints_once_the_clock_moves() {
    let (minter, clock, state) = spent(1, Wait::Sleep);
    let timer = RecordingTimer::default();
    let (answer, took) =
        timed(|| block_on(minter.reserve_async(&state, &clock, 1, Until::timeout(SHORT), &timer)));
    assert_eq!(answer, Err(SPENT_AT_T0));
    assert!(took + Duration::from_millis(1) >= SHORT, "refused after {took:?}");
    // A clock that cannot tell how far the tick is: yielded for, never slept.
    assert!(timer.slept.lock().unwrap().is_empty());
    assert!(timer.yields.load(std::sync::atomic::Ordering::Relaxed) > 0);
    let mover = advance_soon(&clock, 1);
    let answer = block_on(minter.reserve_async(&state, &clock, 1, Until::Patient, &timer));
    assert!(answer.is_ok(), "{answer:?}");
    mover.join().unwrap();
}

#[test]
fn the_async_wait_looks_at_a_pending_mark_when_its_store_is_due_until_the_deadline() {
    let (minter, clock, state, stored, go) = past_the_mark();
    let timer = RecordingTimer::default();
    let (answer, took) =
        timed(|| block_on(minter.reserve_async(&state, &clock, 1, Until::timeout(SHORT), &timer)));
    assert!(matches!(answer, Err(MintError::MarkPending { .. })), "{answer:?}");
    assert!(took >= SHORT, "refused after {took:?}");
    // Each look waited what the refusal said (at least 1 ms), the last one cut at the
    // deadline.
    let slept = timer.slept.lock().unwrap().clone();
    assert!(!slept.is_empty());
    let (last, looks) = slept.split_last().unwrap();
    assert!(
        looks
            .iter()
            .all(|&wait| wait >= Duration::from_millis(1) && wait <= SHORT),
        "{slept:?}"
    );
    assert!(*last <= SHORT, "{slept:?}");
    assert_eq!(stored.recv().unwrap(), T0 + 1_601 + 1_500);
    // Stored 20 ms into a patient wait: it mints.
    let letting_through = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        go.send(Ok(())).unwrap();
        go
    });
    let answer = block_on(minter.reserve_async(&state, &clock, 1, Until::Patient, &timer));
    assert_eq!(answer, Ok((slot_at(T0 + 1_600), 1)));
    letting_through.join().unwrap();
}
