//! The keeper and its limits against stores that the tests hold, fail, freeze or panic.

use super::*;
use crate::clock::{Clock, ManualClock};
use crate::mark::StoreError;
use std::sync::mpsc;

pub(crate) const T0: u64 = 1_700_000_000_000;

/// A store that reports each mark on a channel and blocks until the test lets it
/// finish, or fails when told to. Held for good, or for [`HOLD`] with a fence.
struct Gate {
    marks: mpsc::Sender<u64>,
    go: mpsc::Receiver<Result<(), StoreError>>,
}

impl MarkStore for Gate {
    fn mark(&self) -> u64 {
        0
    }

    fn store(&mut self, unix_ms: u64) -> Result<(), StoreError> {
        let _ = self.marks.send(unix_ms);
        self.go.recv().unwrap_or(Ok(()))
    }

    fn describe(&self) -> String {
        "the gate".into()
    }
}

pub(crate) fn ms_slots() -> Slots {
    let layout = Layout::builder()
        .timestamp_bits(41)
        .sequence_bits(12)
        .build()
        .unwrap();
    Slots {
        layout,
        word: StateWord::of(&layout),
    }
}

pub(crate) fn slot_at(unix_ms: u64) -> u64 {
    ms_slots().first_from(unix_ms)
}

/// A mark at `T0 + 1.5 s` stored, and the channels of its gate.
pub(crate) fn kept() -> (Mark, mpsc::Receiver<u64>, mpsc::Sender<Result<(), StoreError>>) {
    let (marks, stored) = mpsc::channel();
    let (go, gate) = mpsc::channel();
    go.send(Ok(())).unwrap();
    let mark = Mark::kept(Gate { marks, go: gate }, ms_slots(), T0, None).unwrap();
    assert_eq!(
        stored.recv().unwrap(),
        T0 + 1_500,
        "stored before building returns"
    );
    (mark, stored, go)
}

#[test]
fn slots_before_the_early_limit_need_nothing() {
    let (mark, stored, _go) = kept();
    assert_eq!(mark.early(), slot_at(T0 + 1_000));
    assert!(mark.check(slot_at(T0 + 999)).is_ok());
    assert!(stored.try_recv().is_err(), "nothing asked");
}

#[test]
fn crossing_the_early_limit_asks_the_keeper_and_mints_without_waiting() {
    let (mark, stored, go) = kept();
    // The keeper is held inside its store: the minting thread still mints.
    assert!(mark.check(slot_at(T0 + 1_200)).is_ok());
    assert_eq!(stored.recv().unwrap(), T0 + 1_200 + 1 + 1_500);
    // Past the stored mark while the store is in progress: pending, never minted.
    assert!(matches!(
        mark.check(slot_at(T0 + 1_500)),
        Err(Uncovered::Pending(_))
    ));
    go.send(Ok(())).unwrap();
    mark.wait_covered(slot_at(T0 + 1_500), Until::Patient).unwrap();
    assert_eq!(
        mark.early(),
        slot_at(T0 + 1_200 + 1 + 1_000),
        "moved with the mark"
    );
}

/// Has the gate at `go` fail the keeper's next store with an I/O error of `kind`; returns
/// the failure.
pub(crate) fn fail_next_store(
    go: &mpsc::Sender<Result<(), StoreError>>,
    kind: std::io::ErrorKind,
) -> StoreError {
    let failure = StoreError::failed(std::io::Error::from(kind));
    go.send(Err(failure.clone())).unwrap();
    failure
}

#[test]
fn a_failed_store_is_reported_to_mints_that_need_it_and_retried() {
    let (mark, stored, go) = kept();
    let failure = fail_next_store(&go, std::io::ErrorKind::StorageFull);
    let past = slot_at(T0 + 1_600);
    assert_eq!(
        mark.wait_covered(past, Until::Patient),
        Err(failure.clone().into())
    );
    assert!(matches!(mark.check(past), Err(Uncovered::Failed(e)) if e == failure.clone().into()));
    // Slots the stored mark covers still mint.
    assert!(mark.check(slot_at(T0 + 1_400)).is_ok());
    // The keeper tries again, and a success clears the failure.
    assert_eq!(stored.recv().unwrap(), T0 + 1_601 + 1_500);
    assert_eq!(stored.recv().unwrap(), T0 + 1_601 + 1_500);
    go.send(Ok(())).unwrap();
    mark.wait_covered(past, Until::Patient).unwrap();
    assert!(mark.check(past).is_ok());
}

/// The time a refusal for the mark says to wait: while a store is in progress, the last
/// store's time counted from when it was sent; after a failure, the retry's time plus
/// the last store's. Each bound below follows from when the test let the stores finish.
#[test]
fn a_refusal_for_the_mark_says_when_the_keepers_store_is_due() {
    const FIRST: Duration = Duration::from_millis(200);
    let (marks, stored) = mpsc::channel();
    let (go, gate) = mpsc::channel();
    // The first store is let through FIRST after it began: it takes at least that, and at
    // most the build.
    let letting_through = std::thread::spawn({
        let go = go.clone();
        move || {
            assert_eq!(stored.recv().unwrap(), T0 + 1_500);
            std::thread::sleep(FIRST);
            go.send(Ok(())).unwrap();
            stored
        }
    });
    let building = Instant::now();
    let mark = Mark::kept(Gate { marks, go: gate }, ms_slots(), T0, None).unwrap();
    let built_in = building.elapsed();
    let stored = letting_through.join().unwrap();

    let past = slot_at(T0 + 1_600);
    let asked = Instant::now();
    assert!(matches!(mark.check(past), Err(Uncovered::Pending(_))));
    assert_eq!(
        stored.recv().unwrap(),
        T0 + 1_601 + 1_500,
        "the next store is sent"
    );
    let Err(Uncovered::Pending(MintError::MarkPending { retry_after })) = mark.check(past) else {
        panic!("not pending");
    };
    // Sent after `asked`, due the first store's time after it.
    let since_asked = asked.elapsed();
    assert!(retry_after <= built_in, "{retry_after:?} > {built_in:?}");
    assert!(
        retry_after + since_asked >= FIRST,
        "{retry_after:?} + {since_asked:?} < {FIRST:?}"
    );

    let failing = Instant::now();
    let failure = fail_next_store(&go, std::io::ErrorKind::StorageFull);
    let error = loop {
        match mark.check(past) {
            Err(Uncovered::Failed(MintError::Store(error))) => break error,
            Err(Uncovered::Pending(_)) => std::thread::yield_now(),
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(error, failure);
    // Retried RETRY after the failure (or being retried, sent then), each store taking at
    // most the time since `asked`.
    let since_failing = failing.elapsed();
    let took_at_most = asked.elapsed();
    let retry_after = error.retry_after().expect("a transient failure says when");
    assert!(retry_after <= RETRY + took_at_most, "{retry_after:?}");
    assert!(
        retry_after + since_failing >= RETRY,
        "{retry_after:?} + {since_failing:?}"
    );
    assert_eq!(MintError::Store(error.clone()).retry_after(), Some(retry_after));
    assert_eq!(failure.retry_after(), None, "a store's own error says nothing");
    go.send(Ok(())).unwrap();
}

const HOLD: Duration = Duration::from_secs(3);

pub(crate) fn lapsed() -> MintError {
    StoreError::lapsed("lease on node 1 has expired").into()
}

/// A fence held for `HOLD`, measured with `clock`.
fn fence(clock: &ManualClock, renew_every: Duration, patience: Duration) -> Fence {
    let clock = clock.clone();
    Fence {
        clock: Box::new(move || clock.precise_unix_ms()),
        hold: HOLD,
        lapsed: lapsed(),
        renew_every,
        patience,
    }
}

/// A mark kept in a [`Gate`] store held for [`HOLD`] from `T0`, the clock that measures the hold,
/// and the channels.
pub(crate) fn leased(
    renew_every: Duration,
) -> (
    Mark,
    ManualClock,
    mpsc::Receiver<u64>,
    mpsc::Sender<Result<(), StoreError>>,
) {
    let (marks, stored) = mpsc::channel();
    let (go, gate) = mpsc::channel();
    go.send(Ok(())).unwrap();
    let clock = ManualClock::new(T0);
    let fence = fence(&clock, renew_every, Duration::from_secs(1));
    let mark = Mark::kept(Gate { marks, go: gate }, ms_slots(), T0, Some(fence)).unwrap();
    assert_eq!(stored.recv().unwrap(), T0 + 1_500);
    (mark, clock, stored, go)
}

pub(crate) const NO_RENEWAL: Duration = Duration::from_secs(3600);

#[test]
fn the_hold_caps_the_limits_and_a_renewal_moves_it() {
    let (mark, clock, stored, go) = leased(NO_RENEWAL);
    // The store failing from now on: the hold that began at T0 ends at T0 + 3 s.
    clock.set(T0 + 2_900);
    let unavailable = fail_next_store(&go, std::io::ErrorKind::ConnectionRefused);
    let last_in_hold = slot_at(T0 + 2_999);
    assert_eq!(
        mark.wait_covered(last_in_hold, Until::Patient),
        Err(unavailable.clone().into())
    );
    assert_eq!(stored.recv().unwrap(), T0 + 3_000 + 1_500);
    assert!(matches!(mark.check(last_in_hold), Err(Uncovered::Failed(e)) if e == unavailable.clone().into()));
    // Past the hold: the lapsed error, whatever the store reports.
    assert!(matches!(mark.check(slot_at(T0 + 3_000)), Err(Uncovered::Failed(e)) if e == lapsed()));
    // `next_id`'s wait ends once the store has failed for longer than the patience.
    go.send(Err(unavailable.clone())).unwrap();
    assert_eq!(
        mark.wait_covered(slot_at(T0 + 3_000), Until::Patient),
        Err(lapsed())
    );
    assert_eq!(stored.recv().unwrap(), T0 + 3_000 + 1_500, "retried");
    // Slots the mark and the hold cover still mint.
    assert!(mark.check(slot_at(T0 + 1_400)).is_ok());
    // A renewal sent at T0 + 2.9 s holds until T0 + 5.9 s.
    go.send(Ok(())).unwrap();
    mark.wait_covered(slot_at(T0 + 3_000), Until::Patient).unwrap();
    assert!(mark.check(slot_at(T0 + 4_400)).is_ok());
    assert!(mark.check(slot_at(T0 + 5_900)).is_err());
}

#[test]
fn a_lost_store_ends_minting_and_is_not_tried_again() {
    let (mark, clock, stored, go) = leased(Duration::from_millis(20));
    clock.set(T0 + 1_000);
    let lost = StoreError::lost("lease on node 1 is lost");
    go.send(Err(lost.clone())).unwrap();
    // The renewal, due within 20 ms, finds the lease lost.
    assert_eq!(stored.recv().unwrap(), T0 + 1_500);
    let past = slot_at(T0 + 1_500);
    assert_eq!(mark.wait_covered(past, Until::Patient), Err(lost.clone().into()));
    assert!(matches!(mark.check(past), Err(Uncovered::Ended(e)) if e == lost.clone().into()));
    assert!(
        stored.recv_timeout(Duration::from_millis(200)).is_err(),
        "no store after a final failure"
    );
}

#[test]
fn the_keeper_renews_while_no_mark_is_asked_for() {
    let (_mark, _clock, stored, go) = leased(Duration::from_millis(20));
    for _ in 0..3 {
        go.send(Ok(())).unwrap();
        assert_eq!(
            stored.recv_timeout(Duration::from_secs(5)).unwrap(),
            T0 + 1_500,
            "the same mark, stored again"
        );
    }
}

/// One renewal of a simulated lease: sent `gap` after the one before (real ms; a
/// pause of the holder is a long gap), run by the server `to_server` later, and
/// answered (whenever: the fence counts every answer, which only makes the check
/// stricter) or lost on the way.
#[derive(Debug, Clone)]
struct Renewal {
    gap: u64,
    to_server: u64,
    answered: bool,
}

fn renewals(ttl: u64) -> impl proptest::strategy::Strategy<Value = Vec<Renewal>> {
    use proptest::prelude::*;
    // Edges often: answers that come at once, renewals run the moment they are sent.
    let delay = prop_oneof![Just(0u64), 0u64..=50, 0..=2 * ttl];
    let renewal =
        (0..=ttl, delay, proptest::bool::weighted(0.8)).prop_map(|(gap, to_server, answered)| Renewal {
            gap,
            to_server,
            answered,
        });
    proptest::collection::vec(renewal, 1..20)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2_000))]

    /// The fencing rule against a simulated server, for any timing of renewals,
    /// answers, lost answers and pauses (gaps between renewals): once the server's
    /// clock has passed the expiry of every renewal it ran, and a successor claims the
    /// node, the holder's clock is past its deadline for every slot, so the two never
    /// mint at the same time. The holder's clock runs up to 15 % slow or 10 % fast
    /// (the discipline slews at most 1 %; the margin is a fifth of the lease time),
    /// the server's up to 0.1 %, each from its own offset.
    #[test]
    fn a_holder_never_mints_once_a_successor_may_claim(
        ttl in 1_000u64..=20_000,
        plan in renewals(20_000),
        holder_ppm in proptest::prop_oneof![proptest::strategy::Just(850_000u64), 850_000u64..=1_100_000],
        server_ppm in proptest::prop_oneof![proptest::strategy::Just(1_001_000u64), 999_000u64..=1_001_000],
        offset in 0u64..=10_000_000,
    ) {
        let slots = ms_slots();
        let Tenure::Leased { hold, .. } = Tenure::lease(Duration::from_millis(ttl)) else {
            unreachable!("a lease's tenure is leased");
        };
        let clock = ManualClock::new(T0);
        let fence = fence(&clock, NO_RENEWAL, NO_RENEWAL);
        let fence = Fence { hold, ..fence };
        // Real time 0 is T0 on the holder's clock.
        let local = |real: u64| T0 + offset + real * holder_ppm / 1_000_000;
        let server = |real: u64| real * server_ppm / 1_000_000;
        let mut sent = 0;
        let mut expiry = 0; // server time
        let mut fence_at = 0; // slot, as the keeper keeps it
        for renewal in &plan {
            sent += renewal.gap % (ttl + 1);
            let ran = sent + renewal.to_server;
            expiry = expiry.max(server(ran) + ttl);
            if renewal.answered {
                fence_at = fence_at.max(fence_slot(slots, Some(local(sent)), Some(&fence)));
            }
        }
        // The first real time at which the server lets a successor claim.
        let mut claim = 0;
        while server(claim) < expiry {
            claim += 1;
        }
        let minting = slots.first_from(local(claim));
        proptest::prop_assert!(
            minting >= fence_at,
            "at the claim ({claim} ms) the holder's clock is at slot {minting}, fence {fence_at}"
        );
    }
}

#[test]
fn dropping_the_mark_stops_the_keeper() {
    let (mark, _stored, _go) = kept();
    drop(mark);
}

/// `work`'s result, on a thread of its own; fails the test when it takes longer than
/// `limit` (the thread is left behind).
pub(crate) fn within<T: Send + 'static>(limit: Duration, work: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, result) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(work());
    });
    result
        .recv_timeout(limit)
        .unwrap_or_else(|_| panic!("still waiting after {limit:?}"))
}

/// A store that stores the first mark and panics at the next.
pub(crate) struct Panics {
    pub(crate) stores: u32,
}

impl MarkStore for Panics {
    fn mark(&self) -> u64 {
        0
    }

    fn store(&mut self, unix_ms: u64) -> Result<(), StoreError> {
        self.stores += 1;
        assert!(self.stores == 1, "disk on fire at {unix_ms}");
        Ok(())
    }

    fn describe(&self) -> String {
        "the disk on fire".into()
    }
}

#[test]
fn a_keeper_that_panics_ends_the_store_and_wakes_its_waiters() {
    let mark = Arc::new(Mark::kept(Panics { stores: 0 }, ms_slots(), T0, None).unwrap());
    let past = slot_at(T0 + 1_600);
    // The keeper is asked for T0 + 1.6 s + 1.5 s, and panics storing it.
    let panicked = MintError::KeeperPanicked {
        message: format!("disk on fire at {}", T0 + 1_601 + 1_500),
    };
    let waiting = Arc::clone(&mark);
    let waited = within(Duration::from_secs(10), move || {
        waiting.wait_covered(past, Until::Patient)
    });
    assert_eq!(waited, Err(panicked.clone()));
    assert!(matches!(mark.check(past), Err(Uncovered::Ended(e)) if e == panicked));
    assert_eq!(
        panicked.to_string(),
        format!(
            "the thread that stores the high-water mark panicked (disk on fire at {}): no id \
             past the stored mark can be minted; build a new generator",
            T0 + 3_101
        )
    );
    // The stored mark still covers what it covered.
    assert!(mark.check(slot_at(T0 + 1_400)).is_ok());
    within(Duration::from_secs(10), move || drop(mark));
}

/// A store that stores the first mark, and never returns from the next: a renewal to a
/// server stopped with `SIGSTOP`, over a Unix socket. Tells `entered` when it blocks.
struct Frozen {
    entered: mpsc::Sender<u64>,
    stores: u32,
}

impl MarkStore for Frozen {
    fn mark(&self) -> u64 {
        0
    }

    fn describe(&self) -> String {
        "the frozen server".into()
    }

    fn store(&mut self, unix_ms: u64) -> Result<(), StoreError> {
        self.stores += 1;
        if self.stores > 1 {
            let _ = self.entered.send(unix_ms);
            loop {
                std::thread::park();
            }
        }
        Ok(())
    }
}

/// A store held for good whose stores take [`Slow::TAKES`], as a disk's sync can on a busy
/// machine; `released` is set when it is dropped (a file's lock).
struct Slow {
    released: Arc<std::sync::atomic::AtomicBool>,
}

impl Slow {
    const TAKES: Duration = Duration::from_millis(700);
}

impl MarkStore for Slow {
    fn mark(&self) -> u64 {
        0
    }

    fn store(&mut self, _unix_ms: u64) -> Result<(), StoreError> {
        std::thread::sleep(Slow::TAKES);
        Ok(())
    }

    fn describe(&self) -> String {
        "the slow disk".into()
    }
}

impl Drop for Slow {
    fn drop(&mut self) {
        self.released.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

#[test]
fn dropping_a_mark_held_for_good_waits_for_a_slow_store_and_the_release() {
    let released = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let store = Slow {
        released: Arc::clone(&released),
    };
    let mark = Mark::kept(store, ms_slots(), T0, None).unwrap();
    // Past the early limit: the keeper stores a new mark, slowly.
    assert!(mark.check(slot_at(T0 + 1_200)).is_ok());
    std::thread::sleep(Duration::from_millis(50));
    let start = Instant::now();
    drop(mark);
    assert!(
        released.load(std::sync::atomic::Ordering::SeqCst),
        "the store was still held when the drop returned, after {:?}",
        start.elapsed()
    );
}

#[test]
fn dropping_the_mark_waits_for_a_store_that_never_returns_at_most_the_patience() {
    let (entered, blocked) = mpsc::channel();
    let clock = ManualClock::new(T0);
    let patience = Duration::from_millis(300);
    let fence = fence(&clock, NO_RENEWAL, patience);
    let store = Frozen { entered, stores: 0 };
    let mark = Mark::kept(store, ms_slots(), T0, Some(fence)).unwrap();
    // Past the early limit: the keeper is asked for a mark, and blocks storing it.
    assert!(mark.check(slot_at(T0 + 1_200)).is_ok());
    assert_eq!(blocked.recv().unwrap(), T0 + 1_201 + 1_500);
    let start = Instant::now();
    within(Duration::from_secs(10), move || drop(mark));
    let took = start.elapsed();
    assert!(
        took >= patience && took < patience + Duration::from_secs(2),
        "the drop took {took:?}"
    );
}
