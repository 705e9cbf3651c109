//! A model of the in-database mint that `atomflake_postgres::sql::PgScript` writes, under every
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
//! Time is an input, as in `atomflake_next_id_at(unix_ms)`. A call reads the sequence's
//! next value and takes it (`nextval`) only when it is an ID at the call's time; a value
//! before the call's tick makes it jump, under the lock, to its tick; a spent tick makes it
//! leave, as a call leaves when it raises, when it is cancelled while it waits for the
//! clock, or when its session is killed: with nothing taken, there is nothing to undo. The
//! invariant: no two calls return the same ID, whatever their times and interleaving, as
//! long as the counter has room for one value per session past the sequence field.
#![cfg(loom)]

use loom::sync::{Arc, Mutex};
use loom::thread;

/// When a call takes a value from the sequence.
#[derive(Clone, Copy, Debug)]
enum Protocol {
    /// The script's: only after reading that the next value is an ID at the call's time.
    LookFirst,
    /// At once, then it looks at the value it took: a call that takes a spent value
    /// leaves without giving it back, as a call cancelled while it waits would.
    TakeFirst,
}

/// The sequence, and what happened to it in order (for the failure message).
struct Sequence {
    next: u64,
    log: Vec<String>,
}

/// The state of one installed script: the sequence and the jump lock.
struct Db {
    sequence: Mutex<Sequence>,
    lock: Mutex<()>,
    protocol: Protocol,
    /// `k`: the counter's bits.
    counter_bits: u32,
    /// `2^sequence_bits`.
    per_tick: u64,
}

impl Db {
    fn new(protocol: Protocol, sequence_bits: u32, counter_bits: u32) -> Db {
        Db {
            sequence: Mutex::new(Sequence {
                next: 0,
                log: Vec::new(),
            }),
            lock: Mutex::new(()),
            protocol,
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

    /// `{p}_advance`'s jump: under the lock, to the first slot of `now` unless the sequence
    /// is there or past already.
    fn jump(&self, now: u64) {
        let _held = self.lock.lock().unwrap();
        let next_free = self.sequence(now, "locked read", None);
        if next_free >> self.counter_bits < now {
            self.sequence(now, "jump to", Some(now << self.counter_bits));
        }
    }

    /// `atomflake_next_id_at(now)`: `Ok((tick, n))`, or `Err(())` when the call leaves on
    /// a spent tick.
    fn next_id_at(&self, now: u64) -> Result<(u64, u64), ()> {
        let mask = (1 << self.counter_bits) - 1;
        loop {
            let next = match self.protocol {
                Protocol::LookFirst => self.sequence(now, "read", None),
                Protocol::TakeFirst => self.sequence(now, "nextval", None),
            };
            let (tick, n) = (next >> self.counter_bits, next & mask);
            if tick < now {
                self.jump(now);
                continue;
            }
            if n >= self.per_tick {
                return Err(());
            }
            let slot = match self.protocol {
                Protocol::LookFirst => self.sequence(now, "nextval", None),
                Protocol::TakeFirst => next,
            };
            // At or past `next`: never before the call's tick.
            if slot & mask < self.per_tick {
                return Ok((slot >> self.counter_bits, slot & mask));
            }
            // Other sessions spent the tick between the read and the nextval: dropped.
        }
    }
}

/// Each session mints at its given times; every minted ID must be distinct and inside the
/// sequence field.
fn check<const CALLS: usize, const SESSIONS: usize>(
    protocol: Protocol,
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
        let db = Arc::new(Db::new(protocol, sequence_bits, counter_bits));
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
        let log = || db.sequence.lock().unwrap().log.join("\n");
        assert!(
            ids.iter().all(|&(_, n)| n < db.per_tick),
            "an ID past the sequence field: {ids:?}\n{}",
            log()
        );
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), minted, "a duplicate ID: {ids:?}\n{}", log());
    });
}

/// One-value ticks (a 0-bit sequence), headroom 3: every call past the first of a tick
/// finds it spent, and jumps race with takes and with each other.
#[test]
fn sql_mint_never_repeats_an_id_with_times_racing_and_going_back() {
    check(Protocol::LookFirst, 0, 2, [[1, 2, 1], [2, 1, 3]]);
}

/// A two-value sequence, the clock moving on under both sessions.
#[test]
fn sql_mint_never_repeats_an_id_across_ticks() {
    check(Protocol::LookFirst, 1, 2, [[1, 1, 2], [1, 2, 2]]);
}

/// One session leaves on a spent tick again and again (errors, or cancels while it
/// waits) while the other jumps: those calls take nothing, so the counter never carries
/// into the tick being jumped to. (A time of 0 stands for no call.)
#[test]
fn sql_mint_calls_leaving_on_a_spent_tick_take_nothing() {
    check(Protocol::LookFirst, 0, 2, [[1, 1, 1, 1, 1], [2, 0, 0, 0, 0]]);
}

/// Three sessions: one leaving on a spent tick again and again while another jumps and a
/// third mints.
#[test]
fn sql_mint_three_sessions_leaving_jumping_and_minting_never_repeat_an_id() {
    check(
        Protocol::LookFirst,
        0,
        2,
        [[1, 1, 1, 1], [2, 0, 0, 0], [2, 0, 0, 0]],
    );
}

/// Looking first is needed: calls that take a value before they look, and leave on a
/// spent tick without giving it back, run the counter into the next tick while a jump to
/// that tick is under way.
#[test]
#[should_panic(expected = "a duplicate ID")]
fn sql_mint_repeats_ids_when_calls_take_before_they_look() {
    check(Protocol::TakeFirst, 0, 2, [[1, 1, 1, 1, 1], [2, 0, 0, 0, 0]]);
}

/// The headroom is needed: with room for fewer values past the sequence field than there
/// are sessions, a tick's counter can carry into the next tick while a jump to that tick
/// is under way.
#[test]
#[should_panic(expected = "a duplicate ID")]
fn sql_mint_repeats_ids_without_headroom() {
    check(Protocol::LookFirst, 0, 0, [[1, 2, 1], [2, 1, 3]]);
}
