//! A generator built before a `fork()` and used on both sides of it: the child is refused
//! with the exact error, never waits for threads it does not have, mints no ID its parent
//! mints, and can drop the generator. A generator the child builds itself mints at the
//! wall clock's time, in a grandchild too.

use atomflake::{
    Builder, Clock, Generator, Id, Layout, LocalGenerator, ManualClock, MintError, PreciseClock,
    ShardedGenerator,
};
use atomflake_fork_tests::{Ended, fork};
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::Write;
use std::time::Duration;

/// One test at a time: a child inherits every file the process has open, another test's
/// high-water file and its lock included.
static ONE_TEST_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_test_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_TEST_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// How long a child may run: far longer than any of these children needs.
const LIMIT: Duration = Duration::from_secs(5);

/// A panic's message.
fn message(panic: &(dyn std::any::Any + Send)) -> String {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(text), _) => (*text).to_owned(),
        (_, Some(text)) => text.clone(),
        _ => "a panic with no message".to_owned(),
    }
}

/// One line for a `try_next_id`: `id N`, or `error E` with the error's `Debug`.
fn tried(result: Result<Id, MintError>) -> String {
    match result {
        Ok(id) => format!("id {id}"),
        Err(error) => format!("error {error:?}"),
    }
}

/// One line for a `next_id`: `id N`, or `panic P` with the panic's message.
fn waited(next_id: impl FnOnce() -> Id) -> String {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(next_id)) {
        Ok(id) => format!("id {id}"),
        Err(panic) => format!("panic {}", message(panic.as_ref())),
    }
}

fn write_lines(out: &mut dyn Write, lines: &[String]) -> i32 {
    let text = lines.iter().fold(String::new(), |mut text, line| {
        let _ = writeln!(text, "{line}");
        text
    });
    i32::from(out.write_all(text.as_bytes()).is_err())
}

/// The IDs of a child's `id N` lines.
fn ids_in(output: &str) -> BTreeSet<u64> {
    output
        .lines()
        .filter_map(|line| line.strip_prefix("id "))
        .map(|id| id.parse().expect("an id"))
        .collect()
}

#[test]
fn a_child_of_a_fork_is_refused_with_both_processes_and_mints_no_id_of_its_parent() {
    let _one = one_test_at_a_time();
    let generator = Generator::new(Layout::TWITTER, 1).unwrap();
    let mut parent_ids: Vec<Id> = (0..1_000).map(|_| generator.next_id()).collect();
    // The fork comes in a tick after the last ID's: the clock's thread has stored a later
    // millisecond, which is the time the child's copy of the clock stands at.
    let last_ms = Layout::TWITTER.decode(parent_ids[999]).unix_ms;
    while generator.clock().unix_ms() <= last_ms {
        std::thread::sleep(Duration::from_micros(100));
    }
    let (after, child) = fork(
        |out| {
            // What a child may mint unchecked is the rest of the tick of the fork, while it
            // lasts (the crate's Guarantees): this child mints once it is over.
            let frozen = generator.clock().unix_ms();
            while generator.clock().precise_unix_ms() <= frozen {
                std::thread::sleep(Duration::from_micros(100));
            }
            let mut lines: Vec<String> = (0..1_000).map(|_| tried(generator.try_next_id())).collect();
            lines.push(waited(|| generator.next_id()));
            write_lines(out, &lines)
        },
        |_| (0..10_000).map(|_| generator.next_id()).collect::<Vec<Id>>(),
        LIMIT,
    );
    parent_ids.extend(after);
    assert_eq!(child.ended, Ended::Exited(0), "{}", child.output);
    let parents: BTreeSet<u64> = parent_ids.iter().map(|id| id.get()).collect();
    let childs = ids_in(&child.output);
    let shared: Vec<&u64> = childs.intersection(&parents).collect();
    assert!(
        shared.is_empty(),
        "{} ids minted by both, from {:?}",
        shared.len(),
        shared.first()
    );
    let forked = MintError::Forked {
        parent: std::process::id(),
        child: child.pid,
    };
    let mut expected = vec![format!("error {forked:?}"); 1_000];
    expected.push(format!("panic atomflake: cannot mint an id: {forked}"));
    let lines: Vec<&str> = child.output.lines().collect();
    assert_eq!(lines, expected);
}

#[test]
fn a_child_of_a_fork_never_waits_for_the_keeper_and_can_drop_the_generator() {
    let _one = one_test_at_a_time();
    let path = std::env::temp_dir().join(format!("atomflake-fork-test-{}.hw", std::process::id()));
    let clock = ManualClock::new(1_700_000_000_000);
    let generator = Builder::with_clock(Layout::TWITTER, clock.clone())
        .high_water_file(&path)
        .build(2)
        .unwrap();
    let first = generator.next_id();
    // Both sides use it; the child also drops it.
    let generator = RefCell::new(Some(generator));
    let (second, child) = fork(
        |out| {
            let generator = generator.take().expect("the generator");
            // Past the stored mark (1.5 s ahead): a mint must wait for the keeper thread,
            // which is the parent's.
            clock.advance(10_000);
            let mut lines = vec![waited(|| generator.next_id()), tried(generator.try_next_id())];
            drop(generator);
            lines.push("dropped".into());
            write_lines(out, &lines)
        },
        |_| {
            clock.advance(1);
            generator.borrow().as_ref().expect("the generator").next_id()
        },
        LIMIT,
    );
    assert!(second > first);
    drop(generator);
    assert_eq!(child.ended, Ended::Exited(0), "{}", child.output);
    let forked = MintError::Forked {
        parent: std::process::id(),
        child: child.pid,
    };
    let lines: Vec<&str> = child.output.lines().collect();
    assert_eq!(
        lines,
        [
            format!("panic atomflake: cannot mint an id: {forked}"),
            format!("error {forked:?}"),
            "dropped".into(),
        ]
    );
    // The parent's generator let go of the file, and a new one starts past its IDs.
    let again = Builder::with_clock(Layout::TWITTER, clock.clone())
        .high_water_file(&path)
        .build(2)
        .unwrap();
    // Within the mark `build` stored (a second and a half ahead): no wait for the keeper.
    clock.advance(1_000);
    assert!(again.try_next_id().unwrap() > second);
    drop(again);
    for suffix in ["", ".lock"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}

/// Every way to mint, tried in a child on `$generator` (any generator type): one line each,
/// `id N`, `ids N N ...`, `run N` or the refusal (`error E`, `panic P`).
macro_rules! every_mint {
    ($generator:expr) => {{
        let generator = &$generator;
        let mut lines: Vec<String> = (0..100).map(|_| tried(generator.try_next_id())).collect();
        lines.push(match generator.try_next_run(10) {
            Ok(run) => run.into_iter().fold("ids".to_owned(), |mut line, id| {
                let _ = write!(line, " {id}");
                line
            }),
            Err(error) => format!("error {error:?}"),
        });
        lines.push(waited(|| generator.next_id()));
        lines.push(many(|| generator.next_ids(10).collect()));
        lines.push(many(|| {
            let mut ids = [Id::new(0); 10];
            generator.fill(&mut ids);
            ids.to_vec()
        }));
        lines
    }};
}

/// One line for a call that mints several IDs: `ids N N ...`, or `panic P`.
fn many(mint: impl FnOnce() -> Vec<Id>) -> String {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(mint)) {
        Ok(ids) => ids.iter().fold("ids".to_owned(), |mut line, id| {
            let _ = write!(line, " {id}");
            line
        }),
        Err(panic) => format!("panic {}", message(panic.as_ref())),
    }
}

/// What `every_mint!` writes in a child that is refused every time, as it must be.
fn every_mint_refused(child: u32) -> Vec<String> {
    let forked = MintError::Forked {
        parent: std::process::id(),
        child,
    };
    let mut lines = vec![format!("error {forked:?}"); 101];
    lines.extend(vec![format!("panic atomflake: cannot mint an id: {forked}"); 3]);
    lines
}

/// The IDs of a child's `id N` and `ids N ...` lines, counted with repeats.
fn ids_minted(output: &str) -> Vec<u64> {
    output
        .lines()
        .filter_map(|line| line.strip_prefix("id ").or_else(|| line.strip_prefix("ids")))
        .flat_map(|ids| ids.split_whitespace().map(|id| id.parse::<u64>().expect("an id")))
        .collect()
}

/// Forks right after the parent minted one ID with `$generator`, so that the fork comes in
/// the tick of that ID, then has the child try every way to mint. Asserts that the child
/// minted nothing and was refused each time with both processes named.
macro_rules! refused_in_the_tick_of_the_fork {
    ($generator:expr) => {{
        let _one = one_test_at_a_time();
        let generator = $generator;
        let first = generator.next_id();
        let ((), child) = fork(|out| write_lines(out, &every_mint!(generator)), |_| (), LIMIT);
        assert_eq!(child.ended, Ended::Exited(0), "{}", child.output);
        let minted = ids_minted(&child.output);
        assert!(
            minted.is_empty(),
            "the child minted {} ids in the tick of the fork (the parent's first: {first}), from {:?}",
            minted.len(),
            minted.first()
        );
        let lines: Vec<&str> = child.output.lines().collect();
        assert_eq!(lines, every_mint_refused(child.pid));
    }};
}

#[test]
fn a_child_forked_in_the_tick_of_a_mint_mints_no_id() {
    refused_in_the_tick_of_the_fork!(Generator::new(Layout::TWITTER, 3).unwrap());
}

#[test]
fn a_child_forked_in_the_tick_of_a_mint_mints_no_id_whatever_the_clock() {
    // A clock that stands still: the child stays in the tick of the fork for good.
    let clock = ManualClock::new(1_700_000_000_000);
    refused_in_the_tick_of_the_fork!(Generator::with_clock(Layout::TWITTER, 4, clock).unwrap());
    refused_in_the_tick_of_the_fork!(Generator::with_clock(Layout::TWITTER, 5, PreciseClock::new()).unwrap());
}

#[test]
fn a_child_forked_in_the_tick_of_a_mint_mints_no_id_from_a_sharded_or_local_generator() {
    refused_in_the_tick_of_the_fork!(ShardedGenerator::new(Layout::TWITTER, [6, 7, 8]).unwrap());
    refused_in_the_tick_of_the_fork!(LocalGenerator::new(Layout::TWITTER, 9).unwrap());
    let clock = ManualClock::new(1_700_000_000_000);
    refused_in_the_tick_of_the_fork!(LocalGenerator::with_clock(Layout::TWITTER, 10, clock).unwrap());
}

#[test]
fn a_child_forked_while_another_thread_mints_mints_no_id() {
    let _one = one_test_at_a_time();
    let generator = Generator::new(Layout::TWITTER, 11).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        let minting = scope.spawn(|| {
            let mut ids = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                ids.push(generator.next_id());
            }
            ids
        });
        // Fork while the other thread mints, right after a mint of this thread's, in its tick.
        std::thread::sleep(Duration::from_millis(5));
        let _ = generator.next_id();
        let ((), child) = fork(|out| write_lines(out, &every_mint!(generator)), |_| (), LIMIT);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let parents = minting.join().expect("the minting thread");
        assert!(!parents.is_empty());
        assert_eq!(child.ended, Ended::Exited(0), "{}", child.output);
        let minted = ids_minted(&child.output);
        assert!(minted.is_empty(), "the child minted {} ids", minted.len());
        let lines: Vec<&str> = child.output.lines().collect();
        assert_eq!(lines, every_mint_refused(child.pid));
    });
}

#[test]
fn a_next_ids_iterator_reserved_before_a_fork_hands_out_only_its_current_block_in_the_child() {
    let _one = one_test_at_a_time();
    // A clock that stands still: the first block is the whole tick's sequence.
    let clock = ManualClock::new(1_700_000_000_000);
    let generator = Generator::with_clock(Layout::TWITTER, 12, clock).unwrap();
    let mut ids = generator.next_ids(10_000);
    let first = ids.next().expect("an id");
    let ((), child) = fork(
        |out| {
            let mut lines = vec![];
            let rest = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                for id in ids.by_ref() {
                    lines.push(format!("id {id}"));
                }
            }));
            if let Err(panic) = rest {
                lines.push(format!("panic {}", message(panic.as_ref())));
            }
            write_lines(out, &lines)
        },
        |_| (),
        LIMIT,
    );
    assert_eq!(child.ended, Ended::Exited(0), "{}", child.output);
    // What the child hands out is the rest of the block reserved before the fork (the
    // parent's copy of the iterator holds the same IDs): then it is refused.
    let forked = MintError::Forked {
        parent: std::process::id(),
        child: child.pid,
    };
    let mut expected: Vec<String> = (1..4096).map(|k| format!("id {}", first.get() + k)).collect();
    expected.push(format!("panic atomflake: cannot mint an id: {forked}"));
    let lines: Vec<&str> = child.output.lines().collect();
    assert_eq!(lines, expected);
}

/// How far `generator`'s IDs lag the wall clock after minting for `run`, in ms: the
/// least lag of the mints in the last half second (one every 5 ms), as a line `lag N`. The
/// least, because the default clock's time is what its thread stored, late by however long
/// a busy machine keeps that thread waiting; a clock that runs slow lags at every mint.
fn lag_after(generator: &Generator, run: Duration) -> String {
    let wall_ms = || {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        i64::try_from(now.expect("after 1970").as_millis()).expect("ms fit an i64")
    };
    let started = std::time::Instant::now();
    let mut least = i64::MAX;
    while started.elapsed() < run {
        std::thread::sleep(Duration::from_millis(5));
        let before = wall_ms();
        let minted = Layout::TWITTER.decode(generator.next_id()).unix_ms;
        let after = wall_ms();
        let minted = i64::try_from(minted).expect("ms fit an i64");
        if started.elapsed() + Duration::from_millis(500) >= run {
            // Behind the wall clock read before, or ahead of the one read after.
            least = least.min((before - minted).max(minted - after).max(0));
        }
    }
    format!("lag {least}")
}

#[test]
fn a_generator_built_in_a_child_or_a_grandchild_mints_at_the_wall_clocks_time() {
    let _one = one_test_at_a_time();
    let generator = Generator::new(Layout::TWITTER, 13).unwrap();
    let _ = generator.next_id();
    // A child's default clock runs on the piece its parent's thread published last, which
    // runs at the calibrated rate for a second at most and then 1% slow: 3 s after the
    // fork, a child without a thread of its own lags the wall clock by 20 ms or more.
    let run = Duration::from_secs(3);
    let ((), child) = fork(
        |out| {
            let own = Generator::new(Layout::TWITTER, 14).unwrap();
            // The child measures its own lag while the grandchild measures its.
            let (lag, grandchild) = fork(
                |out| {
                    write_lines(
                        out,
                        &[lag_after(&Generator::new(Layout::TWITTER, 15).unwrap(), run)],
                    )
                },
                |_| lag_after(&own, run),
                LIMIT,
            );
            let mut lines = vec![lag];
            // The child's clock has a thread again: the parent's generator is still refused.
            lines.push(tried(generator.try_next_id()));
            lines.push(format!("grandchild {:?}", grandchild.ended));
            lines.extend(grandchild.output.lines().map(str::to_owned));
            write_lines(out, &lines)
        },
        |_| (),
        LIMIT,
    );
    assert_eq!(child.ended, Ended::Exited(0), "{}", child.output);
    let lines: Vec<&str> = child.output.lines().collect();
    assert_eq!(lines.len(), 4, "{lines:?}");
    let forked = MintError::Forked {
        parent: std::process::id(),
        child: child.pid,
    };
    assert_eq!(lines[1], format!("error {forked:?}"));
    assert_eq!(lines[2], "grandchild Exited(0)");
    for (who, line) in [("child", lines[0]), ("grandchild", lines[3])] {
        let lag: i64 = line
            .strip_prefix("lag ")
            .and_then(|n| n.parse().ok())
            .expect(line);
        assert!(lag <= 5, "the {who}'s ids lag the wall clock by {lag} ms");
    }
}
