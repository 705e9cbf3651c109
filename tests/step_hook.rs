//! The step hook cannot break the discipline thread: a hook that panics, or that replaces
//! itself with `on_step`, leaves the thread running and the next hook called.
//!
//! The hook is process-wide, so these tests live in a process of their own and take turns
//! (`TURN`). With `on_step(Duration::ZERO, ..)` the hook hears of almost every 10 ms check
//! (the offset moves by a few ns between checks), so a running thread calls it within
//! milliseconds; a wait of a few seconds that times out means the thread is gone or stuck.

use atomflake::MonotonicClock;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// Held by each test while it owns the process's hook.
static TURN: Mutex<()> = Mutex::new(());

/// How long a live discipline thread may take to call a hook: a hang guard, the value of
/// `atomflake_test_servers::HANG_GUARD`, kept here because the core crate's tests do not
/// depend on the test servers. A busy machine may keep the thread waiting any part of it.
const HANG_GUARD: Duration = Duration::from_secs(90);

/// This test's turn with the process's hook, and a clock, so that a discipline thread runs.
fn take_turn() -> (MutexGuard<'static, ()>, MonotonicClock) {
    let turn = TURN.lock().unwrap_or_else(PoisonError::into_inner);
    (turn, MonotonicClock::new())
}

fn wait(receiver: &mpsc::Receiver<()>, what: &str) {
    match receiver.recv_timeout(HANG_GUARD) {
        Ok(()) => {}
        Err(RecvTimeoutError::Timeout) => {
            panic!("{what}: not called within {HANG_GUARD:?}: the discipline thread is gone or stuck")
        }
        Err(RecvTimeoutError::Disconnected) => panic!("{what}: dropped without being called"),
    }
}

#[test]
fn a_hook_that_panics_does_not_stop_the_discipline() {
    let _turn = take_turn();
    let (sender, panicked) = mpsc::sync_channel(1);
    MonotonicClock::on_step(Duration::ZERO, move |_| {
        let _ = sender.try_send(());
        panic!("a hook that panics");
    });
    wait(&panicked, "the panicking hook");
    let (sender, called) = mpsc::sync_channel(1);
    MonotonicClock::on_step(Duration::ZERO, move |_| {
        let _ = sender.try_send(());
    });
    wait(&called, "the hook set after a panic");
}

#[test]
fn a_hook_can_replace_itself() {
    let _turn = take_turn();
    let (sender, replaced) = mpsc::sync_channel(1);
    MonotonicClock::on_step(Duration::ZERO, move |_| {
        let sender = sender.clone();
        MonotonicClock::on_step(Duration::ZERO, move |_| {
            let _ = sender.try_send(());
        });
    });
    wait(&replaced, "the replacement hook");
}
