//! The CAS loop against a high-water mark's keeper and in a child of a fork.

use super::*;
use crate::clock::ManualClock;
use crate::generator::keeper::panic_message;
use crate::generator::keeper::tests::{Panics, T0, kept, ms_slots, slot_at, within};
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
    assert_eq!(pending, Err(MintError::MarkPending));
    assert_eq!(
        MintError::MarkPending.to_string(),
        "the clock has passed the high-water mark while the next mark is being stored: \
         ids are available again once it is"
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
