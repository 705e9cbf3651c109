//! A generator refuses to mint in a child of a `fork()`.
//!
//! `fork()` copies a generator into the child as it stands: its state words, its limits,
//! the default clock's last stored time, but none of its threads (the default clock's
//! discipline thread, a high-water mark's keeper). Left alone, parent and child would
//! mint the same slots, and a child waiting for a mark would wait forever. So a generator
//! records the process it is built in ([`Birth`]): its ID and its fork line
//! ([`clock::lineage`], which tells apart a descendant that the system gave the same ID once
//! its ancestor exited), and checks the process it mints in:
//!
//! - **once per tick**: the first slot of the tick after the latest one checked is one of
//!   the limits that the minting path's one load already compares ([`Minter`](super::minter::Minter)), so the
//!   first mint of every later tick takes the cold path, which checks and moves that limit
//!   one tick on;
//! - **before any wait or refusal**: `next_id` checks before it waits (for a spent tick, a
//!   mark being stored), `try_next_id` before it reports a refusal, so a child never waits
//!   for threads it does not have, nor is told to retry;
//! - **at a child's first mint**: the ticks a child copied as checked are not checked for
//!   it. A `pthread_atfork` handler ([`atfork`](super::atfork)) sets, in every child, the
//!   limits of every generator alive at the fork to 0 (its state words' windows, its
//!   minter's limit, its ticks checked) and starts a new line of the heartbeat (below), so
//!   the child's first mint on any of them takes the cold path and checks the process with
//!   the system call.
//!
//! A child is refused with [`MintError::Forked`] (`next_id` panics with it).
//!
//! # The check of a tick, without a system call
//!
//! The process is `std::process::id()`, a system call, which costs many mints. A tick's
//! check skips it when the default clock's thread has stored a time in that tick, and the
//! precise clock is still in it ([`spares`]): then a thread of this process's clock ran
//! during the tick being minted. A child's copy of the stored time stands still at the
//! last time stored before the fork, so the child handler stops the heartbeat
//! ([`clock::after_fork_in_child`]). The child's first clock made or read starts a
//! discipline thread of the child's own, and the heartbeat beats again, but only for the generators built
//! in the child: a generator records the fork line it is built in ([`clock::lineage`]),
//! and one copied from a parent is of an older line, so its mints in the child never skip
//! the system call, however long the child runs. Everywhere else too
//! (no default clock in the process, a clock whose ticks are not the wall clock's, a
//! borrowed tick, a thread late by a tick) the check makes the system call. So a
//! generator that mints once a tick or less takes the cold path at every mint, but makes
//! no system call; one that mints more pays the cold path once per tick, and nothing for
//! the other mints of the tick (`benches/README.md` has the figures).
//!
//! # What is not detected
//!
//! - **IDs already reserved.** The rest of a [`next_ids`](crate::Generator::next_ids)
//!   iterator's current block (at most one tick's sequence) is handed out by the iterator
//!   alone, which reads no generator until its next block: a copy of the iterator in a
//!   child hands out the IDs the original hands out in the parent, then is refused at its
//!   next block. A check per ID would add a load and a compare to every ID's path.
//! - **A failed registration.** Where `pthread_atfork` fails (out of memory) a child is
//!   checked once per tick only, and mints the rest of the ticks its generators had
//!   reached before the fork.
//! - **Minting over a caller's word** (`atomflake::raw`): the word is shared by forked
//!   processes on purpose, so nothing is checked there.

use crate::MintError;
use crate::clock;
use crate::sync::{Ordering, ProcessAtomicU64};
use std::ops::Range;

/// The process a generator is built in, and the ticks its mints have checked it in.
#[derive(Debug)]
pub(crate) struct Birth {
    pid: u32,
    /// The fork line the generator is built in ([`clock::lineage`]): the heartbeat spares
    /// the system call only in it, and [`Birth::check`] refuses any other.
    lineage: u64,
    /// The first slot of the tick after the latest one a mint checked the process in:
    /// slots before it need no check. Only grows.
    checked: ProcessAtomicU64,
}

impl Birth {
    /// The current process, with no tick checked yet.
    pub(crate) fn here() -> Birth {
        Birth::checked_until(0)
    }

    /// The current process, with the slots before `next` checked: those of the tick a
    /// generator's clock reads when it is built here, and earlier ones.
    pub(crate) fn checked_until(next: u64) -> Birth {
        Birth {
            pid: std::process::id(),
            lineage: clock::lineage(),
            checked: ProcessAtomicU64::new(next),
        }
    }

    /// The first slot whose mint must check the process.
    #[inline]
    pub(crate) fn limit(&self) -> u64 {
        // Relaxed: a limit that only grows, read as a hint. A stale value sends a mint to
        // `check_tick` again; a value stored in a parent before a fork is one the child
        // may use, which is what "the ticks checked" are (see the module docs).
        self.checked.load(Ordering::Relaxed)
    }

    /// The address of the ticks checked, which a child of a fork sets to 0
    /// ([`atfork`](super::atfork)).
    pub(crate) fn limit_address(&self) -> *mut u64 {
        self.checked.as_ptr()
    }

    /// Checks the process for a mint in the tick of Unix ms `tick` (by the generator's
    /// clock), then spares the mints of slots before `next` (the first slot of the tick
    /// after it) the check.
    ///
    /// # Errors
    ///
    /// [`MintError::Forked`] in a child of a fork.
    #[cold]
    pub(crate) fn check_tick(&self, tick: Range<u64>, next: u64) -> Result<(), MintError> {
        if !spares(&tick, clock::heartbeat(self.lineage)) {
            self.check()?;
        }
        // Relaxed: see `limit`.
        self.checked.fetch_max(next, Ordering::Relaxed);
        Ok(())
    }

    /// Whether this is the process the generator was built in: a system call for the
    /// process ID, and the fork line ([`clock::lineage`]), which tells a descendant that the
    /// system gave the same process ID (reused once the ancestor exited) from the ancestor.
    ///
    /// # Errors
    ///
    /// [`MintError::Forked`] in a child of a fork, naming both processes (the same number
    /// where the ID was reused).
    #[cold]
    pub(crate) fn check(&self) -> Result<(), MintError> {
        let here = std::process::id();
        if here == self.pid && clock::lineage() == self.lineage {
            Ok(())
        } else {
            Err(MintError::Forked {
                parent: self.pid,
                child: here,
            })
        }
    }
}

/// Whether a mint in the tick of Unix ms `tick` may skip the system call: the default
/// clock's thread stored a time in it, and the precise clock is still in it (`heartbeat`:
/// the stored time and the precise time, see [`clock::heartbeat`]).
fn spares(tick: &Range<u64>, heartbeat: Option<(u64, u64)>) -> bool {
    heartbeat.is_some_and(|(stored, now)| tick.contains(&stored) && tick.contains(&now))
}

#[cfg(all(test, not(loom)))]
impl Birth {
    /// This record, for a process that was built in `pid`: what a test stands in a child
    /// of `pid` with, the ticks checked unchanged (a fork copies them).
    pub(crate) fn born_in(&mut self, pid: u32) {
        self.pid = pid;
    }

    /// This record, for a generator built in the fork line `lineage`: what a test stands in
    /// a descendant that the system gave its ancestor's process ID with.
    pub(crate) fn born_in_line(&mut self, lineage: u64) {
        self.lineage = lineage;
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_tick_skips_the_system_call_only_while_the_clocks_thread_and_the_clock_are_in_it() {
        let tick = 1_000..1_010;
        // Minting once a tick: the thread stored a time in this tick, which is not over.
        assert!(spares(&tick, Some((1_000, 1_000))));
        assert!(spares(&tick, Some((1_003, 1_009))));
        // The thread is late (it stored the tick before), or no thread stores at all.
        assert!(!spares(&tick, Some((999, 1_001))));
        assert!(!spares(&tick, None));
        // A child: its stored time stands still in the tick of the fork, and the clock has
        // left that tick.
        assert!(!spares(&tick, Some((1_005, 1_010))));
        // A tick the clock has not reached (borrowed), or one long past.
        assert!(!spares(&tick, Some((995, 998))));
        assert!(!spares(&tick, Some((1_020, 1_020))));
    }

    #[test]
    fn a_descendant_given_its_ancestors_process_id_is_refused() {
        let here = std::process::id();
        assert_eq!(Birth::here().check(), Ok(()));
        // A generator built in another line (up this process's, by a process whose ID the
        // system has given this one once it exited): the same ID, another process.
        let mut birth = Birth::here();
        birth.born_in_line(clock::lineage().wrapping_sub(1));
        let forked = Err(MintError::Forked {
            parent: here,
            child: here,
        });
        assert_eq!(birth.check(), forked);
        assert_eq!(birth.check_tick(0..1, 1), forked, "at a tick's check too");
    }
}
