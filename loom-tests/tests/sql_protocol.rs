//! A model of the in-database mint that `atomflake::sql::PgScript` writes, under every
//! interleaving of two or three sessions.
//!
//! The SQL runs in PostgreSQL, so loom cannot run it; this file restates its protocol with
//! the same steps on loom's primitives and checks the uniqueness argument of the script's
//! header. PostgreSQL takes the sequence's buffer lock for each sequence operation, so the
//! sequence is a value behind a `Mutex` here (loom's atomics would also allow stale reads,
//! which the buffer lock rules out):
//!
//! | SQL | here |
//! |---|---|
//! | `nextval(state)` | take `next`, add 1 (`next` is the next value to hand out) |
//! | `pg_sequence_last_value(state) + 1` | read `next` |
//! | `setval(state, x - 1)` | set `next` to `x` |
//! | `pg_advisory_lock` / `unlock` | a second `Mutex` |
//!
//! Time is an input, as in `atomflake_next_id_at(unix_ms)`: a spent tick is an error, and
//! a call that drops its slot (stale or spent) passes the lock before it goes on or fails:
//! it jumps to its tick, or sets a spent tick's counter back to the first spent value.
//! The invariant: no two calls return the same ID, whatever their times and interleaving,
//! as long as the counter has room for one dropped value per session past the sequence
//! field.
#![cfg(loom)]

use loom::sync::{Arc, Mutex};
use loom::thread;

/// The sequence, and what happened to it in order (for the failure message).
struct Sequence {
    next: u64,
    log: Vec<String>,
}

/// The state of one installed script: the sequence and the jump lock.
struct Db {
    sequence: Mutex<Sequence>,
    lock: Mutex<()>,
    /// `k`: the counter's bits.
    counter_bits: u32,
    /// `2^sequence_bits`.
    per_tick: u64,
}

impl Db {
    fn new(sequence_bits: u32, counter_bits: u32) -> Db {
        Db {
            sequence: Mutex::new(Sequence {
                next: 0,
                log: Vec::new(),
            }),
            lock: Mutex::new(()),
            counter_bits,
            per_tick: 1 << sequence_bits,
        }
    }

    /// One sequence operation under the sequence's lock: `set` is `setval`, else
    /// `nextval` (`take`) or a read. Returns the value taken or read, or the one set.
    fn sequence(&self, now: u64, what: &str, set: Option<u64>) -> u64 {
        let mut sequence = self.sequence.lock().unwrap();
        let value = match (what, set) {
            (_, Some(value)) => {
                sequence.next = value;
                value
            }
            ("nextval", None) => {
                sequence.next += 1;
                sequence.next - 1
            }
            _ => sequence.next,
        };
        let line = format!("{:?} now {now}: {what} {value}", thread::current().id());
        sequence.log.push(line);
        value
    }

    /// `atomflake_next_id_at(now)`: `Ok((tick, n))` or `Err(())` for a spent tick.
    fn next_id_at(&self, now: u64) -> Result<(u64, u64), ()> {
        let mask = (1 << self.counter_bits) - 1;
        loop {
            let slot = self.sequence(now, "nextval", None);
            let (tick, n) = (slot >> self.counter_bits, slot & mask);
            if tick >= now && n < self.per_tick {
                return Ok((tick, n));
            }
            // advance(): a slot spent at this time is an error, a stale one jumps; either
            // way the dropped slot passes the lock first.
            let failed = tick >= now;
            {
                let _held = self.lock.lock().unwrap();
                let next_free = self.sequence(now, "locked read", None);
                if !failed && next_free >> self.counter_bits < now {
                    self.sequence(now, "jump to", Some(now << self.counter_bits));
                } else if next_free >> self.counter_bits == tick && next_free & mask > self.per_tick {
                    let first_spent = (tick << self.counter_bits) + self.per_tick;
                    self.sequence(now, "back to", Some(first_spent));
                }
            }
            if failed {
                return Err(());
            }
        }
    }
}

/// Each session mints at its given times; every minted ID must be distinct.
fn check<const CALLS: usize, const SESSIONS: usize>(
    sequence_bits: u32,
    counter_bits: u32,
    times: [[u64; CALLS]; SESSIONS],
) {
    let mut model = loom::model::Builder::new();
    // Three sessions are explored with at most 3 preemptions (about half a minute on the
    // project's 2-core machine); two with run.sh's bound.
    if SESSIONS > 2 {
        model.preemption_bound = Some(model.preemption_bound.unwrap_or(3).min(3));
    }
    model.check(move || {
        let db = Arc::new(Db::new(sequence_bits, counter_bits));
        let sessions: Vec<_> = times
            .into_iter()
            .map(|times| {
                let db = Arc::clone(&db);
                thread::spawn(move || {
                    times
                        .into_iter()
                        .filter(|&now| now != 0)
                        .filter_map(|now| db.next_id_at(now).ok())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut ids: Vec<(u64, u64)> = sessions
            .into_iter()
            .flat_map(|session| session.join().unwrap())
            .collect();
        let minted = ids.len();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(
            ids.len(),
            minted,
            "a duplicate ID: {ids:?}\n{}",
            db.sequence.lock().unwrap().log.join("\n")
        );
    });
}

/// One-value ticks (a 0-bit sequence), headroom 3: every call past the first
/// of a tick drops a slot, and jumps race with drops and with each other.
#[test]
fn sql_mint_never_repeats_an_id_with_times_racing_and_going_back() {
    check(0, 2, [[1, 2, 1], [2, 1, 3]]);
}

/// A two-value sequence, the clock moving on under both sessions.
#[test]
fn sql_mint_never_repeats_an_id_across_ticks() {
    check(1, 2, [[1, 1, 2], [1, 2, 2]]);
}

/// Three sessions, one failing on a spent tick again and again while another jumps and a
/// third mints: the failing calls set the counter back, so it never carries into the
/// tick being jumped to. (A time of 0 stands for no call.)
#[test]
fn sql_mint_failing_calls_leave_the_headroom_to_the_sessions() {
    check(0, 2, [[1, 1, 1, 1], [2, 0, 0, 0], [2, 0, 0, 0]]);
}

/// The headroom is needed: with room for fewer dropped slots than there are sessions, a
/// tick's counter can carry into the next tick while a jump to that tick is under way.
#[test]
#[should_panic(expected = "a duplicate ID")]
fn sql_mint_repeats_ids_without_headroom() {
    check(0, 0, [[1, 2, 1], [2, 1, 3]]);
}
