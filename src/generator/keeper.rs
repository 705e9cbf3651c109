//! The high-water mark on the minting path: two limits, read with one load, and a keeper
//! thread that moves the mark in its store ahead of need.
//!
//! What a mark is, what the generator does with a store and what a store must promise:
//! [`mark`](crate::mark). This module is how the minting path does it:
//!
//! - Slots before the **early** limit (half a [`WINDOW_MS`] before the mark) mint with no
//!   other work: one `Relaxed` load and a compare.
//! - A slot at or past it asks the keeper to move the mark a window and a half past the
//!   slot's tick, and mints: the mark still covers it.
//! - A slot at or past the **covered** limit (the mark itself) waits for the keeper to
//!   store a mark past it (`try_next_id` reports it instead), so no ID ever passes a mark
//!   that is not durably stored.
//!
//! The keeper is a thread of the generator's own, so the durable write (a file's fsync, a
//! lease row's update) never runs on a minting thread: minting waits for it only when the
//! clock has run more than half a window past the last stored mark before the write
//! finished.
//!
//! The store is any [`MarkStore`]. A store with a [`Tenure::Leased`] holds the mark only
//! for a while after each store began: the keeper stores again before that, and the
//! **fence**, the first slot past the hold, caps both limits. So a lease's deadline costs
//! the minting path nothing: it is part of the one limit already loaded.
//!
//! The keeper thread ends the store when it panics: the panic is caught, the store is
//! marked ended with [`MintError::KeeperPanicked`], and every thread waiting for a mark is
//! woken, so `next_id` panics and `try_next_id` reports it instead of waiting for a mark
//! that no thread stores. Slots the stored mark covers still mint. (A child of a fork has
//! no keeper thread at all: it is refused before it could wait for one, see [`fork`](super::fork).)
//!
//! Dropping the mark stops the keeper and waits for it to finish a store in progress and
//! [`MarkStore::finish`] and drop the store (a lease's release, a file's lock), for at most
//! the lease's patience ([`Fence::patience`]), or [`RELEASE_PATIENCE`] for a store held for
//! good. Past that the thread is left to finish on its own: a store blocked for good (a
//! server stopped with `SIGSTOP`, on a Unix socket, where no TCP timeout applies; a hung
//! disk) does not block the drop for good.

use super::state::StateWord;
use super::wait::Until;
use super::{BuildError, MintError};
use crate::format::Layout;
use crate::mark::{MarkStore, StoreErrorKind, Tenure};
use crate::sync::{Ordering, ProcessAtomicU64};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How far past the tick that needs it the mark is moved: at most one store per window
/// while the clock runs normally.
pub(crate) const WINDOW_MS: u64 = 1_000;

/// How long the keeper waits before it tries a failed store again.
const RETRY: Duration = Duration::from_millis(100);

/// The least time a refusal for the mark says to wait ([`MintError::retry_after`]): a
/// store overdue by its last time is looked at again this often.
const RETRY_MIN: Duration = Duration::from_millis(1);

/// How long `next_id` waits for a failing store with no [`Fence`]: about one more attempt.
const PATIENCE: Duration = Duration::from_millis(200);

/// How long a drop waits for the keeper of a store with no [`Fence`] (a high-water file)
/// to finish its store, the last mark and the store's drop. Long enough for a slow disk's
/// sync: a generator built again on the same file right after the drop finds it unlocked,
/// not [`HighWaterError::Locked`](crate::mark::HighWaterError::Locked).
const RELEASE_PATIENCE: Duration = Duration::from_secs(10);

/// A store whose hold ends ([`Tenure::Leased`]): how the keeper reads time, what to report
/// past the hold, and how often to store again.
pub(crate) struct Fence {
    /// The generator's clock, read precisely (Unix ms).
    pub(crate) clock: Box<dyn Fn() -> u64 + Send>,
    /// How long after a store is sent the holder may mint on it.
    pub(crate) hold: Duration,
    /// What a slot past the hold reports while the store is not lost.
    pub(crate) lapsed: MintError,
    /// How often the keeper stores again while no new mark is wanted.
    pub(crate) renew_every: Duration,
    /// How long `next_id` waits for failing stores before it panics, and dropping the
    /// generator waits for the keeper to finish a store in progress and the release.
    pub(crate) patience: Duration,
}

impl Fence {
    /// The fence of `store`, measured with `clock` (the generator's, read precisely);
    /// `None` for a store held for good.
    pub(crate) fn of(store: &impl MarkStore, clock: Box<dyn Fn() -> u64 + Send>) -> Option<Fence> {
        match store.tenure() {
            Tenure::Owned => None,
            Tenure::Leased {
                hold,
                renew_every,
                patience,
            } => Some(Fence {
                clock,
                hold,
                lapsed: store.lapsed().into(),
                renew_every,
                patience,
            }),
        }
    }
}

impl std::fmt::Debug for Fence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fence")
            .field("hold", &self.hold)
            .field("lapsed", &self.lapsed)
            .field("renew_every", &self.renew_every)
            .field("patience", &self.patience)
            .finish_non_exhaustive()
    }
}

/// The slot arithmetic of a layout that the limits are kept in.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Slots {
    pub(crate) layout: Layout,
    pub(crate) word: StateWord,
}

impl Slots {
    /// The opening (the lowest state, see [`state`](super::state)) of the first tick that starts at or
    /// after `unix_ms` (`u64::MAX` when there is none): below it lie exactly the slots of
    /// earlier ticks.
    pub(crate) fn first_from(self, unix_ms: u64) -> u64 {
        let Some(since_epoch) = unix_ms.checked_sub(self.layout.epoch_ms()) else {
            return 0;
        };
        let tick = since_epoch.div_ceil(self.layout.tick_ms());
        if tick > self.layout.max_tick() {
            return u64::MAX;
        }
        self.word.opening(tick)
    }

    /// The Unix ms at which `slot`'s tick starts.
    pub(crate) fn tick_start(self, slot: u64) -> u64 {
        self.layout.unix_ms_of_tick(self.word.tick(slot))
    }

    /// The Unix ms at which the tick after `slot`'s starts.
    fn tick_end(self, slot: u64) -> u64 {
        self.tick_start(slot).saturating_add(self.layout.tick_ms())
    }
}

/// A generator's high-water mark: none, or limits kept by a keeper thread.
#[derive(Debug)]
pub(crate) struct Mark {
    keeper: Option<Keeper>,
}

/// Why a slot may not be minted yet, each with the error a mint that does not wait
/// reports, which says when to try again ([`MintError::retry_after`]).
#[derive(Debug)]
pub(crate) enum Uncovered {
    /// The keeper is storing a mark past the slot ([`MintError::MarkPending`]): transient.
    Pending(MintError),
    /// The store failed (the keeper tries again), or the slot is past the store's hold.
    Failed(MintError),
    /// The store failed for good ([`StoreErrorKind::Lost`]).
    Ended(MintError),
}

impl Mark {
    /// No mark: no slot is ever limited.
    pub(crate) fn none() -> Mark {
        Mark { keeper: None }
    }

    /// A mark kept in `store`. Stores a mark a window and a half past `now` (or past the
    /// store's mark, if later) before returning, then hands the store to a keeper thread.
    /// A store whose hold ends needs a `fence` ([`Fence::of`]).
    ///
    /// # Errors
    ///
    /// The store's error when that first mark cannot be stored.
    pub(crate) fn kept<S: MarkStore>(
        mut store: S,
        slots: Slots,
        now: u64,
        fence: Option<Fence>,
    ) -> Result<Mark, BuildError> {
        let first = ahead(store.mark().max(now));
        let sent = fence.as_ref().map(|fence| (fence.clock)());
        let started = Instant::now();
        store.store(first)?;
        let took = started.elapsed();
        let fence_slot = fence_slot(slots, sent, fence.as_ref());
        let early = early_slot(slots, first).min(fence_slot);
        let shared = Arc::new(Shared {
            slots,
            covered: ProcessAtomicU64::new(slots.first_from(first).min(fence_slot)),
            early: ProcessAtomicU64::new(early),
            fence: ProcessAtomicU64::new(fence_slot),
            requested: ProcessAtomicU64::new(first),
            lapsed: fence.as_ref().map(|fence| fence.lapsed.clone()),
            patience: fence.as_ref().map_or(PATIENCE, |fence| fence.patience),
            release_patience: fence.as_ref().map_or(RELEASE_PATIENCE, |fence| fence.patience),
            pid: std::process::id(),
            state: Mutex::new(KeeperState {
                wanted: first,
                stored: first,
                failure: None,
                attempts: 0,
                sending: None,
                took,
                next_at: None,
                ended: false,
                finished: None,
                stop: false,
                exited: false,
            }),
            asked: Condvar::new(),
            moved: Condvar::new(),
        });
        let thread = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("atomflake-mark".into())
                .spawn(move || {
                    // Unwind safety: the keeper changes the shared state only under its
                    // lock, never panics while holding it, and `exit` marks the store
                    // ended after a panic, so nothing half-done is relied on.
                    let kept = std::panic::catch_unwind(AssertUnwindSafe(|| {
                        shared.keep(store, fence.as_ref());
                    }));
                    shared.exit(kept.err().map(|panic| panic_message(panic.as_ref())));
                })
                .map_err(|source| BuildError::KeeperSpawn { cause: source.into() })?
        };
        Ok(Mark {
            keeper: Some(Keeper {
                shared,
                thread: Some(thread),
            }),
        })
    }

    /// The slot at or past which [`check`](Self::check) must be called before minting;
    /// `u64::MAX` without a store.
    pub(crate) fn early(&self) -> u64 {
        // Relaxed: a hint that only grows; `check` reads the limits that decide.
        self.keeper
            .as_ref()
            .map_or(u64::MAX, |keeper| keeper.shared.early.load(Ordering::Relaxed))
    }

    /// For a slot at or past [`early`](Self::early): asks the keeper to move the mark past
    /// it, and says whether it may be minted now. Never waits for the store.
    #[cold]
    #[inline(never)]
    pub(crate) fn check(&self, slot: u64) -> Result<(), Uncovered> {
        let Some(keeper) = &self.keeper else {
            return Ok(());
        };
        let shared = &keeper.shared;
        shared.ask(slot);
        // Relaxed: the keeper stores `covered` after its store returned; a stale value
        // only sends this mint the slow way.
        if slot < shared.covered.load(Ordering::Relaxed) {
            return Ok(());
        }
        Err(shared.refusal(slot, &shared.lock()))
    }

    /// What a node whose state word started at `start` tells the keeper when it is
    /// dropped ([`Finish`]); `None` without a store.
    pub(crate) fn finisher(&self, start: u64) -> Option<Finish> {
        let keeper = self.keeper.as_ref()?;
        Some(Finish {
            shared: Arc::clone(&keeper.shared),
            start,
        })
    }

    /// One look of an async wait for `slot`, which began at `since`: `Ok(None)` when the
    /// slot is covered now, `Ok(Some(time))` to look again after that time (when the
    /// refusal says the keeper's store is due, at most until `until`'s deadline), or the
    /// error that ends the wait, as [`wait_covered`](Self::wait_covered) decides it.
    pub(crate) fn look(
        &self,
        slot: u64,
        until: Until,
        since: Instant,
    ) -> Result<Option<Duration>, MintError> {
        let Some(keeper) = &self.keeper else {
            return Ok(None);
        };
        let shared = &keeper.shared;
        shared.ask(slot);
        let state = shared.lock();
        if slot < shared.covered.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let refusal = shared.refusal(slot, &state);
        let wait = match &refusal {
            Uncovered::Pending(error) | Uncovered::Failed(error) => error.retry_after(),
            Uncovered::Ended(_) => None,
        };
        match shared.ends(&state, refusal, until, since) {
            Some(error) => Err(error),
            None => Ok(Some(until.at_most(wait.unwrap_or(RETRY_MIN)))),
        }
    }

    /// Waits until `slot` is covered by a stored mark, for as long as `until` says. Gives
    /// up when the store has ended; with [`Until::Patient`] also when it has failed with
    /// the wait older than the patience (a lease's time; about one more attempt for a
    /// file); with [`Until::Deadline`] when the refusal is permanent, or at the deadline.
    ///
    /// # Errors
    ///
    /// The store's error, or what a slot past the store's hold reports, or
    /// [`MintError::MarkPending`] at a deadline while a store is in progress.
    #[cold]
    pub(crate) fn wait_covered(&self, slot: u64, until: Until) -> Result<(), MintError> {
        let Some(keeper) = &self.keeper else {
            return Ok(());
        };
        let shared = &keeper.shared;
        shared.ask(slot);
        let since = Instant::now();
        let mut state = shared.lock();
        loop {
            if slot < shared.covered.load(Ordering::Relaxed) {
                return Ok(());
            }
            if let Some(error) = shared.ends(&state, shared.refusal(slot, &state), until, since) {
                return Err(error);
            }
            // Woken by every store that finishes; the timeout measures the patience or
            // the time left until the deadline.
            state = shared
                .moved
                .wait_timeout(state, until.at_most(RETRY))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

/// What a node tells the keeper when it is dropped: how far it minted, so that the store
/// can be released with the mark that covers exactly that ([`MarkStore::finish`]).
#[derive(Debug)]
pub(crate) struct Finish {
    shared: Arc<Shared>,
    /// The node's first state.
    start: u64,
}

impl Finish {
    /// The node stopped minting, its state word at `next_free`. Nodes sharing one mark
    /// (a sharded generator's) each tell; the keeper keeps the latest end. A child of a
    /// fork tells nothing: the keeper is its parent's, and the lock may have been copied
    /// held.
    pub(crate) fn finish(&self, next_free: u64) {
        if next_free > self.start && std::process::id() == self.shared.pid {
            let end = self.shared.slots.tick_end(next_free - 1);
            let mut state = self.shared.lock();
            state.finished = Some(state.finished.map_or(end, |finished| finished.max(end)));
        }
    }
}

/// The mark that covers `unix_ms` with a window and a half to spare.
pub(crate) fn ahead(unix_ms: u64) -> u64 {
    unix_ms.saturating_add(WINDOW_MS + WINDOW_MS / 2)
}

/// The early limit of a stored `mark`: half a window before it.
fn early_slot(slots: Slots, mark: u64) -> u64 {
    slots.first_from(mark.saturating_sub(WINDOW_MS / 2))
}

/// The first slot past the hold of a store that began at `sent` (Unix ms): `u64::MAX`
/// without a fence. A slot counts as within the hold only if its whole tick is.
fn fence_slot(slots: Slots, sent: Option<u64>, fence: Option<&Fence>) -> u64 {
    match (sent, fence.map(|fence| fence.hold)) {
        (Some(sent), Some(hold)) => {
            let hold_ms = u64::try_from(hold.as_millis()).unwrap_or(u64::MAX);
            let end = sent.saturating_add(hold_ms);
            // The first slot whose tick ends past `end`: the tick that starts at or
            // before `end - tick` is the last one wholly inside.
            slots.first_from(end.saturating_sub(slots.layout.tick_ms()).saturating_add(1))
        }
        // A hold without a clock to measure it cannot be trusted at all.
        (None, Some(_)) => 0,
        (_, None) => u64::MAX,
    }
}

/// A panic's message: its payload when that is text (as `panic!` makes it).
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(text), _) => (*text).to_owned(),
        (_, Some(text)) => text.clone(),
        _ => "a panic with no message".to_owned(),
    }
}

/// The keeper thread and what it shares with the minting threads.
#[derive(Debug)]
struct Keeper {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Keeper {
    /// Stops the keeper, and waits for it to finish (its store in progress, the store's
    /// `finish` and drop) for at most the release patience; then leaves it to finish on its
    /// own.
    fn drop(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        if std::process::id() != self.shared.pid {
            // A child of a fork: the thread is its parent's, and the lock may have been
            // copied held. Touch neither.
            std::mem::forget(thread);
            return;
        }
        let deadline = Instant::now() + self.shared.release_patience;
        let mut state = self.shared.lock();
        state.stop = true;
        self.shared.asked.notify_one();
        while !state.exited {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            // Woken by `exit`; the timeout measures the release patience.
            state = self
                .shared
                .moved
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        let exited = state.exited;
        drop(state);
        if exited {
            // Its work is done (a panic was caught and reported by `exit`): the join only
            // waits for the thread to end.
            let _ = thread.join();
        }
        // Otherwise the handle is dropped: the thread is detached, and finishes its store,
        // the release and the drop of the store whenever the store returns.
    }
}

#[derive(Debug)]
struct Shared {
    slots: Slots,
    /// Slots before this are covered by the stored mark and within the store's hold.
    /// Only grows.
    covered: ProcessAtomicU64,
    /// Half a window before the stored mark, and never past the fence. Only grows.
    early: ProcessAtomicU64,
    /// The first slot past the store's hold; `u64::MAX` for a store held for good. Only
    /// grows.
    fence: ProcessAtomicU64,
    /// The largest mark asked for so far (Unix ms), so that a mint asks at most once per
    /// window instead of taking the lock.
    requested: ProcessAtomicU64,
    /// What a slot past the fence reports while the store has not ended.
    lapsed: Option<MintError>,
    /// How long `next_id` waits for failing stores.
    patience: Duration,
    /// How long a drop waits for the keeper to finish.
    release_patience: Duration,
    /// The process the keeper thread runs in.
    pid: u32,
    state: Mutex<KeeperState>,
    /// Signalled when a mark is asked for, or the keeper should stop.
    asked: Condvar,
    /// Signalled when a store finished, well or not, and when the keeper exits.
    moved: Condvar,
}

#[derive(Debug)]
struct KeeperState {
    /// The mark asked for.
    wanted: u64,
    /// The mark in the store.
    stored: u64,
    /// The error of the last store, until one succeeds.
    failure: Option<MintError>,
    /// How many stores have finished, well or not.
    attempts: u64,
    /// When the store in progress was sent; `None` between stores.
    sending: Option<Instant>,
    /// How long the last store took.
    took: Duration,
    /// When the keeper stores next unless asked sooner: a failed store's retry, a fenced
    /// store's renewal; `None` when it waits only to be asked.
    next_at: Option<Instant>,
    /// A store failed for good ([`StoreErrorKind::Lost`]): nothing is stored again.
    ended: bool,
    /// The mark that covers exactly what the generator minted, once it stopped.
    finished: Option<u64>,
    stop: bool,
    /// The keeper thread has finished its work (returned, or panicked and was caught).
    exited: bool,
}

impl KeeperState {
    /// How long until the keeper's next store is expected to have finished, at least
    /// [`RETRY_MIN`]: the store in progress, else the next one (the retry after a
    /// failure; at once for a mark asked for; the renewal of a fenced store), each taking
    /// as long as the last store took.
    fn due(&self) -> Duration {
        let now = Instant::now();
        let start = match self.sending {
            Some(sent) => sent,
            None if self.failure.is_none() && self.wanted > self.stored => now,
            None => self.next_at.unwrap_or(now),
        };
        start
            .checked_add(self.took)
            .map_or(Duration::MAX, |done| done.saturating_duration_since(now))
            .max(RETRY_MIN)
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, KeeperState> {
        // Poisoned only by a panic while held, which nothing here does between updates.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a wait for a covering mark that began at `since` ends, refused with
    /// `refusal`, and with what: when the store has ended; with [`Until::Patient`] when it
    /// is failing and the wait has lasted the patience; with [`Until::Deadline`] when the
    /// refusal is permanent, or at the deadline. The sync and the async waits' one rule.
    fn ends(
        &self,
        state: &KeeperState,
        refusal: Uncovered,
        until: Until,
        since: Instant,
    ) -> Option<MintError> {
        let out_of_patience = state.ended || (state.failure.is_some() && since.elapsed() >= self.patience);
        match (until, refusal) {
            (_, Uncovered::Ended(error)) => Some(error),
            (Until::Patient, Uncovered::Failed(error)) => out_of_patience.then_some(error),
            (Until::Deadline(_), Uncovered::Failed(error)) => {
                (!error.is_transient() || until.passed()).then_some(error)
            }
            (Until::Deadline(_), Uncovered::Pending(pending)) => until.passed().then_some(pending),
            (Until::Patient, Uncovered::Pending(_)) => None,
        }
    }

    /// Why `slot`, not covered, may not be minted now.
    fn refusal(&self, slot: u64, state: &KeeperState) -> Uncovered {
        let past_fence = slot >= self.fence.load(Ordering::Relaxed);
        let retrying = |error: &MintError| match error {
            MintError::Store(error) => MintError::Store(error.clone().retrying_in(state.due())),
            other => other.clone(),
        };
        match (&state.failure, &self.lapsed) {
            (Some(failure), _) if state.ended => Uncovered::Ended(failure.clone()),
            (_, Some(lapsed)) if past_fence => Uncovered::Failed(retrying(lapsed)),
            (Some(failure), _) => Uncovered::Failed(retrying(failure)),
            (None, _) => Uncovered::Pending(MintError::MarkPending {
                retry_after: state.due(),
            }),
        }
    }

    /// The keeper thread has finished: returned, or panicked with `panicked` (its message).
    /// A panic ends the store; every waiter is woken either way.
    fn exit(&self, panicked: Option<String>) {
        let mut state = self.lock();
        state.exited = true;
        if let Some(message) = panicked {
            state.ended = true;
            state.failure = Some(MintError::KeeperPanicked { message });
        }
        self.moved.notify_all();
    }

    /// Asks for a mark a window and a half past `slot`'s tick, unless one at least a window
    /// past it is asked for already.
    fn ask(&self, slot: u64) {
        let tick_end = self.slots.tick_end(slot);
        // Relaxed: `requested` only saves lock traffic; the state under the lock decides.
        if self.requested.load(Ordering::Relaxed) >= tick_end.saturating_add(WINDOW_MS) {
            return;
        }
        let wanted = ahead(tick_end);
        self.requested.fetch_max(wanted, Ordering::Relaxed);
        let mut state = self.lock();
        if state.wanted < wanted {
            state.wanted = wanted;
            self.asked.notify_one();
        }
    }

    /// The keeper thread: stores each mark asked for, and with a fence stores again
    /// within every `renew_every`; then moves the limits.
    fn keep<S: MarkStore>(&self, mut store: S, fence: Option<&Fence>) {
        let renew_every = fence.map(|fence| fence.renew_every);
        let mut last_sent = Instant::now();
        let mut state = self.lock();
        loop {
            if state.stop {
                if let Some(finished) = state.finished {
                    drop(state);
                    store.finish(finished);
                }
                return;
            }
            let due = renew_every.map(|every| last_sent + every);
            let renew = due.is_some_and(|due| Instant::now() >= due);
            let idle = state.wanted <= state.stored && state.failure.is_none() && !renew;
            if state.ended || idle {
                state.next_at = if state.ended { None } else { due };
                state = match due {
                    Some(due) if !state.ended => {
                        let timeout = due.saturating_duration_since(Instant::now());
                        self.asked
                            .wait_timeout(state, timeout)
                            .unwrap_or_else(PoisonError::into_inner)
                            .0
                    }
                    _ => self.asked.wait(state).unwrap_or_else(PoisonError::into_inner),
                };
                continue;
            }
            let target = state.wanted.max(state.stored);
            last_sent = Instant::now();
            state.sending = Some(last_sent);
            drop(state);
            let sent = fence.map(|fence| (fence.clock)());
            let result = store.store(target);
            state = self.lock();
            state.attempts += 1;
            state.sending = None;
            state.took = last_sent.elapsed();
            match result {
                Ok(()) => {
                    state.stored = target;
                    state.failure = None;
                    let fence = fence_slot(self.slots, sent, fence);
                    self.fence.fetch_max(fence, Ordering::Relaxed);
                    // Relaxed: a minting thread that sees the new limit mints a slot the
                    // stored mark covers; the store finished before these stores.
                    self.covered
                        .fetch_max(self.slots.first_from(target).min(fence), Ordering::Relaxed);
                    self.early
                        .fetch_max(early_slot(self.slots, target).min(fence), Ordering::Relaxed);
                    self.moved.notify_all();
                }
                Err(error) => {
                    state.ended = error.kind() == StoreErrorKind::Lost;
                    state.failure = Some(error.into());
                    self.moved.notify_all();
                    if !state.ended {
                        state.next_at = Some(Instant::now() + RETRY);
                        state = self
                            .asked
                            .wait_timeout(state, RETRY)
                            .unwrap_or_else(PoisonError::into_inner)
                            .0;
                    }
                }
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
pub(crate) mod tests;
