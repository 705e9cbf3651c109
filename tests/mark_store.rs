//! The mark store seam ([`atomflake::mark::MarkStore`]) with a store of the test's own: every
//! generator type on it, restarts past its mark, a store that holds one node, a mark too
//! far ahead, a store that fails, is lost, or whose hold lapses, and what each error says
//! about retrying.

use atomflake::mark::{MarkStore, StoreError, StoreErrorKind, Tenure};
use atomflake::{BuildError, Builder, Id, Layout, ManualClock, MintError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

const T0: u64 = 1_700_000_000_000;
const LAYOUT: Layout = Layout::TWITTER;

/// What the test sees of, and tells, a [`Memory`] store.
#[derive(Debug, Default)]
struct Shared {
    /// The stored mark.
    mark: u64,
    /// Every mark stored, in order.
    stores: Vec<u64>,
    /// What `finish` was told.
    finished: Option<u64>,
    /// The next stores fail with this.
    failing: Option<StoreError>,
}

/// A store that keeps its mark in memory (as durably as the test needs): optionally
/// holding one node, optionally leased.
#[derive(Clone)]
struct Memory {
    shared: Arc<Mutex<Shared>>,
    nodes: Vec<u64>,
    tenure: Tenure,
}

impl Memory {
    fn new() -> Memory {
        Memory {
            shared: Arc::default(),
            nodes: Vec::new(),
            tenure: Tenure::Owned,
        }
    }

    fn state(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap()
    }
}

impl MarkStore for Memory {
    fn mark(&self) -> u64 {
        self.state().mark
    }

    fn store(&mut self, unix_ms: u64) -> Result<(), StoreError> {
        let mut state = self.state();
        if let Some(error) = state.failing.clone() {
            return Err(error);
        }
        state.mark = unix_ms;
        state.stores.push(unix_ms);
        Ok(())
    }

    fn describe(&self) -> String {
        "the memory store".to_owned()
    }

    fn nodes(&self) -> &[u64] {
        &self.nodes
    }

    fn tenure(&self) -> Tenure {
        self.tenure
    }

    fn finish(&mut self, unix_ms: u64) {
        self.state().finished = Some(unix_ms);
    }
}

fn builder(store: &Memory, clock: &ManualClock) -> Builder<ManualClock> {
    Builder::with_clock(LAYOUT, clock.clone()).mark_store(store.clone())
}

/// Mints 3,000 IDs (one tick's worth: the clock stands still) from each generator type on
/// `store`, one run after the other, the clock put back 5 s behind the previous run's last
/// ID before each restart: a restarted generator mints nothing until its clock reaches the
/// stored mark, then starts past every ID of the runs before; each run tells the store the
/// mark that covers exactly its IDs.
#[test]
fn every_generator_type_goes_on_a_store_and_a_restart_starts_past_its_mark() {
    let store = Memory::new();
    let clock = ManualClock::new(T0);
    let mut last: Option<Id> = None;
    for run in 0..3 {
        let restart = last.is_some();
        // The mark the previous run left: where this run's IDs start.
        let left = store.state().mark;
        if let Some(last) = last {
            clock.set(LAYOUT.decode(last).unix_ms - 5_000);
        }
        // Behind the mark: refused (how long to wait), then minting at the mark.
        let mint = |try_next_id: &dyn Fn() -> Result<Id, MintError>| -> Vec<Id> {
            if restart {
                let refused = try_next_id().unwrap_err();
                assert!(refused.is_transient(), "{refused}");
                clock.set(left);
            }
            (0..3_000).map(|_| try_next_id().unwrap()).collect()
        };
        let ids: Vec<Id> = match run {
            0 => {
                let generator = builder(&store, &clock).build(1).unwrap();
                mint(&|| generator.try_next_id())
            }
            1 => {
                let generator = builder(&store, &clock).build_local(1).unwrap();
                mint(&|| generator.try_next_id())
            }
            _ => {
                let generator = builder(&store, &clock).build_sharded([1, 2]).unwrap();
                mint(&|| generator.try_next_id())
            }
        };
        let first = ids[0];
        if let Some(last) = last {
            assert_eq!(LAYOUT.decode(first).unix_ms, left, "run {run} starts at the mark");
            assert!(
                LAYOUT.decode(first).unix_ms > LAYOUT.decode(last).unix_ms,
                "run {run}: {first} does not start past {last}"
            );
        }
        let newest = *ids.iter().max().unwrap();
        let state = store.state();
        assert!(
            state.mark > LAYOUT.decode(newest).unix_ms,
            "run {run}: the stored mark {} does not cover {newest}",
            state.mark
        );
        // Dropped: the exact mark of what was minted, the end of the last ID's tick.
        assert_eq!(
            state.finished,
            Some(LAYOUT.decode(newest).unix_ms + 1),
            "run {run}"
        );
        drop(state);
        last = Some(newest);
    }
}

#[test]
fn a_store_that_holds_nodes_builds_generators_of_those_nodes_only() {
    let store = Memory {
        nodes: vec![6],
        ..Memory::new()
    };
    let clock = ManualClock::new(T0);
    let refused = BuildError::NodeNotHeld {
        node: 7,
        held: vec![6],
    };
    assert_eq!(builder(&store, &clock).build(7).unwrap_err(), refused);
    assert_eq!(builder(&store, &clock).build_local(7).unwrap_err(), refused);
    assert_eq!(
        builder(&store, &clock).build_sharded([6, 7]).unwrap_err(),
        refused
    );
    assert_eq!(
        refused.to_string(),
        "node 7 is not held by the mark store, which holds node 6"
    );
    assert!(!refused.is_transient());
    // Refused before anything is stored.
    assert!(store.state().stores.is_empty());
    let generator = builder(&store, &clock).build_sharded([6]).unwrap();
    assert_eq!(LAYOUT.decode(generator.next_id()).node, 6);
    drop(generator);
    // A store of several nodes: a sharded generator over them, and no other.
    let store = Memory {
        nodes: vec![6, 8, 9],
        ..Memory::new()
    };
    let refused = builder(&store, &clock).build_sharded([8, 7]).unwrap_err();
    assert_eq!(
        refused.to_string(),
        "node 7 is not held by the mark store, which holds node 6, 8, 9"
    );
    let generator = builder(&store, &clock).build_sharded([9, 6]).unwrap();
    assert_eq!(generator.nodes().collect::<Vec<_>>(), [9, 6]);
}

#[test]
fn a_mark_too_far_ahead_of_the_clock_is_refused_naming_the_store() {
    let store = Memory::new();
    store.state().mark = T0 + 10_001;
    let clock = ManualClock::new(T0);
    let error = builder(&store, &clock).build(1).unwrap_err();
    assert_eq!(
        error,
        BuildError::Ahead {
            store: "the memory store".into(),
            mark_ms: T0 + 10_001,
            clock_ms: T0,
            max_wait: Duration::from_secs(10),
        }
    );
    assert_eq!(
        error.to_string(),
        format!(
            "clock is 10.001s behind the memory store (mark {} ms, clock {T0} ms): a generator \
             waits at most 10s at start-up",
            T0 + 10_001
        )
    );
    assert!(error.is_transient());
    // At the longest wait, the generator builds and mints past the mark.
    store.state().mark = T0 + 10_000;
    let generator = builder(&store, &clock).build(1).unwrap();
    clock.set(T0 + 10_000);
    assert_eq!(LAYOUT.decode(generator.next_id()).unix_ms, T0 + 10_000);
}

#[test]
fn a_first_store_that_fails_fails_the_build_and_a_lost_store_ends_minting() {
    let store = Memory::new();
    let clock = ManualClock::new(T0);
    let full = StoreError::failed(std::io::Error::from(std::io::ErrorKind::StorageFull));
    store.state().failing = Some(full.clone());
    let error = builder(&store, &clock).build(1).unwrap_err();
    assert_eq!(error, BuildError::Store(full));
    assert!(error.is_transient());

    store.state().failing = None;
    let generator = builder(&store, &clock).build(1).unwrap();
    assert_eq!(store.state().stores, [T0 + 1_500]);
    let lost = StoreError::lost("node 1 was taken by another holder");
    store.state().failing = Some(lost.clone());
    // Past the stored mark: the keeper finds the store lost, and minting ends.
    clock.set(T0 + 1_500);
    let error = loop {
        match generator.try_next_id() {
            Err(MintError::MarkPending { .. }) => std::thread::yield_now(),
            other => break other.unwrap_err(),
        }
    };
    assert_eq!(error, MintError::Store(lost));
    assert_eq!(error.to_string(), "node 1 was taken by another holder");
    assert!(!error.is_transient());
    // For good: the store working again changes nothing.
    store.state().failing = None;
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(generator.try_next_id().unwrap_err(), error);
    assert_eq!(store.state().stores, [T0 + 1_500]);
}

#[test]
fn a_leased_store_stops_minting_past_its_hold_and_resumes_when_a_store_succeeds() {
    let hold = Duration::from_secs(2);
    let store = Memory {
        tenure: Tenure::Leased {
            hold,
            renew_every: Duration::from_millis(20),
            patience: Duration::from_secs(1),
        },
        ..Memory::new()
    };
    let clock = ManualClock::new(T0);
    // A lead past the renewal interval would run into the hold.
    assert_eq!(
        builder(&store, &clock)
            .borrow_ahead(Duration::from_millis(21))
            .build(1)
            .unwrap_err(),
        BuildError::LeadOutOfRange {
            lead: Duration::from_millis(21),
            tick_ms: 1,
            max: Duration::from_millis(20),
        }
    );
    let generator = builder(&store, &clock).build(1).unwrap();
    let unavailable = StoreError::failed("the server is away");
    store.state().failing = Some(unavailable.clone());
    std::thread::sleep(Duration::from_millis(100));
    // Within the hold that began at T0: minting goes on, under the stored mark.
    clock.set(T0 + 1_000);
    assert!(generator.try_next_id().is_ok());
    // Past it: the store's lapsed error, transient.
    clock.set(T0 + 2_000);
    let error = generator.try_next_id().unwrap_err();
    assert_eq!(
        error,
        MintError::Store(StoreError::lapsed(
            "the memory store: the hold on the mark has lapsed"
        ))
    );
    assert!(matches!(&error, MintError::Store(e) if e.kind() == StoreErrorKind::Lapsed));
    assert!(error.is_transient());
    // A renewal that gets through moves the hold: minting resumes.
    store.state().failing = None;
    let resumed = (0..1_000).find_map(|_| {
        std::thread::sleep(Duration::from_millis(5));
        generator.try_next_id().ok()
    });
    assert_eq!(resumed.map(|id| LAYOUT.decode(id).unix_ms), Some(T0 + 2_000));
}
