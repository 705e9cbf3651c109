//! A generator built before a `fork()` and used on both sides of it: the child is refused
//! with the exact error, never waits for threads it does not have, mints no ID its parent
//! mints, and can drop the generator. A generator the child builds itself mints at the
//! wall clock's time from its first ID, in a grandchild too, and so do a builder and a
//! clock made before the fork, however far the wall clock moved on meanwhile (the tests
//! of that step it, on a stepped clock).

use atomflake::{
    Builder, Clock, Generator, Id, Layout, LocalGenerator, ManualClock, MintError, MonotonicClock,
    PreciseClock, ShardedGenerator,
};
use atomflake_fork_tests::{Ended, fork};
use atomflake_test_servers::HANG_GUARD;
use atomflake_test_servers::clock::{self as stepped, step_clock};
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// One test at a time: a child inherits every file the process has open, another test's
/// high-water file and its lock included.
static ONE_TEST_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_test_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_TEST_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// How long a child may run: a hang guard, not a bound on its speed (a busy machine may
/// keep it waiting any part of it). A child that reports on a process or a wait of its own
/// gives that half, so that its report comes back before its own limit ends.
const LIMIT: Duration = HANG_GUARD;

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

/// The wall clock, in Unix ms: on a stepped clock, as stepped.
fn wall_ms() -> i64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    i64::try_from(now.expect("after 1970").as_millis()).expect("ms fit an i64")
}

/// How far a time (Unix ms) read by `read` is from the wall clock, in ms, as a line
/// `offset N`: behind the wall clock read before it (negative), ahead of the one read after
/// it (positive), or 0 in between.
fn offset_of(read: impl FnOnce() -> u64) -> String {
    let before = wall_ms();
    let read = i64::try_from(read()).expect("ms fit an i64");
    let after = wall_ms();
    let offset = if read < before {
        read - before
    } else {
        (read - after).max(0)
    };
    format!("offset {offset}")
}

/// A generator that `build` builds, and how far its first ID is from the wall clock read
/// before the build and after the mint, as a line `offset N` ([`offset_of`]).
fn built_and_first_id(build: impl FnOnce() -> Generator) -> (Generator, String) {
    let mut generator = None;
    let offset = offset_of(|| {
        let generator = generator.insert(build());
        Layout::TWITTER.decode(generator.next_id()).unix_ms
    });
    (generator.expect("built"), offset)
}

/// The number in a child's line `{prefix} N`.
fn number_in(line: &str, prefix: &str) -> i64 {
    line.strip_prefix(prefix)
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("not `{prefix}N`: {line:?}"))
}

/// How far `generator`'s IDs lag the wall clock after minting for `run`, in ms: the
/// least lag of the mints in the last half second (one every 5 ms), as a line `lag N`. The
/// least, because the default clock's time is what its thread stored, late by however long
/// a busy machine keeps that thread waiting; a clock that runs slow lags at every mint.
fn lag_after(generator: &Generator, run: Duration) -> String {
    lag_of(|| Layout::TWITTER.decode(generator.next_id()).unix_ms, run)
}

/// How far the times `read` returns lag the wall clock over `run`, as [`lag_after`].
fn lag_of(read: impl Fn() -> u64, run: Duration) -> String {
    let started = std::time::Instant::now();
    let mut least = i64::MAX;
    while started.elapsed() < run {
        std::thread::sleep(Duration::from_millis(5));
        let offset = number_in(&offset_of(&read), "offset ");
        if started.elapsed() + Duration::from_millis(500) >= run {
            least = least.min(offset.abs());
        }
    }
    format!("lag {least}")
}

/// The environment variable that makes a run of this test binary the run of one test on a
/// stepped clock: the path of the clock's file.
const STEPPED_CLOCK: &str = "ATOMFLAKE_FORK_TEST_STEPPED_CLOCK";

/// Runs `body` with the file that steps the wall clock of this process and of its children
/// ([`step_clock`]): in a run of this test binary of its own, on the stepped clock, which
/// runs the test `name` alone. The test passes when that run does.
fn on_a_stepped_clock(name: &str, body: impl FnOnce(&Path)) {
    if let Some(file) = std::env::var_os(STEPPED_CLOCK) {
        body(Path::new(&file));
        return;
    }
    if let Err(why) = stepped::library() {
        atomflake_test_servers::skip(name, why);
        return;
    }
    let _one = one_test_at_a_time();
    let file = std::env::temp_dir().join(format!("atomflake-fork-clock-{}-{name}", std::process::id()));
    step_clock(&file, "+0");
    let run = Command::new(std::env::current_exe().expect("the test binary"))
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .envs(stepped::environment(&file))
        .env(STEPPED_CLOCK, &file)
        .output()
        .expect("the test binary runs");
    let _ = std::fs::remove_file(&file);
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success() && stdout.contains("test result: ok. 1 passed"),
        "on a stepped clock: {}\n{stdout}{}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
}

#[test]
fn a_generator_built_in_a_child_or_a_grandchild_mints_at_the_wall_clocks_time() {
    let name = "a_generator_built_in_a_child_or_a_grandchild_mints_at_the_wall_clocks_time";
    on_a_stepped_clock(name, |file| {
        let generator = Generator::new(Layout::TWITTER, 13).unwrap();
        let _ = generator.next_id();
        // A child's default clock runs on the piece its parent's thread published last, from
        // the time the parent's clock had at the fork: it is behind by however far the wall
        // clock moved on meanwhile (here a step of a minute), and 1% slow from a second
        // after the fork without a thread of its own (20 ms behind after 3 s).
        let run = Duration::from_secs(3);
        let ((), child) = fork(
            |out| {
                step_clock(file, "+60");
                let (own, first) = built_and_first_id(|| Generator::new(Layout::TWITTER, 14).unwrap());
                let mut lines = vec![first];
                // The child measures its own lag while the grandchild measures its.
                let (lag, grandchild) = fork(
                    |out| {
                        step_clock(file, "+120");
                        let (own, first) =
                            built_and_first_id(|| Generator::new(Layout::TWITTER, 15).unwrap());
                        write_lines(out, &[first, lag_after(&own, run)])
                    },
                    |_| lag_after(&own, run),
                    LIMIT / 2,
                );
                lines.push(lag);
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
        eprintln!("the child and the grandchild: {lines:?}");
        assert_eq!(lines.len(), 6, "{lines:?}");
        let forked = MintError::Forked {
            parent: std::process::id(),
            child: child.pid,
        };
        assert_eq!(lines[2], format!("error {forked:?}"));
        assert_eq!(lines[3], "grandchild Exited(0)");
        for (who, line) in [("child", lines[0]), ("grandchild", lines[4])] {
            let offset = number_in(line, "offset ");
            assert!(
                offset.abs() <= 5,
                "the {who}'s first id is {offset} ms off the wall clock: {lines:?}"
            );
        }
        for (who, line) in [("child", lines[1]), ("grandchild", lines[5])] {
            let lag = number_in(line, "lag ");
            assert!(
                lag <= 5,
                "the {who}'s ids lag the wall clock by {lag} ms: {lines:?}"
            );
        }
    });
}

#[test]
fn a_builder_or_a_clock_made_before_a_fork_keeps_the_wall_clocks_time_in_the_child() {
    let name = "a_builder_or_a_clock_made_before_a_fork_keeps_the_wall_clocks_time_in_the_child";
    on_a_stepped_clock(name, |file| {
        let builder = Builder::new(Layout::TWITTER);
        let clock = MonotonicClock::new();
        let run = Duration::from_secs(1);
        // The clock, read first in the child, from the first reading on and for good.
        let ((), reader) = fork(
            |out| {
                step_clock(file, "+60");
                write_lines(
                    out,
                    &[offset_of(|| clock.unix_ms()), lag_of(|| clock.unix_ms(), run)],
                )
            },
            |_| (),
            LIMIT,
        );
        // The builder, built in the child, from its first id on.
        let ((), builder_child) = fork(
            |out| {
                step_clock(file, "+120");
                let (generator, first) = built_and_first_id(|| builder.build(16).unwrap());
                write_lines(out, &[first, lag_after(&generator, run)])
            },
            |_| (),
            LIMIT,
        );
        // A wall clock behind the parent's clock: the clock copied from the parent never
        // reads earlier than it did there, and neither do the ids the child mints.
        let last = clock.precise_unix_ms();
        let ((), behind) = fork(
            |out| {
                step_clock(file, "+0");
                let first = clock.unix_ms();
                let id = Generator::new(Layout::TWITTER, 17).unwrap().next_id();
                write_lines(
                    out,
                    &[
                        format!("clock {first}"),
                        format!("id {}", Layout::TWITTER.decode(id).unix_ms),
                    ],
                )
            },
            |_| (),
            LIMIT,
        );
        eprintln!(
            "the children of the clock, the builder, the step back: {:?}",
            [&reader, &builder_child, &behind].map(|child| &child.output)
        );
        for (who, child) in [
            ("the clock's child", &reader),
            ("the builder's child", &builder_child),
        ] {
            assert_eq!(child.ended, Ended::Exited(0), "{who}: {}", child.output);
            let lines: Vec<&str> = child.output.lines().collect();
            assert_eq!(lines.len(), 2, "{who}: {lines:?}");
            let offset = number_in(lines[0], "offset ");
            assert!(
                offset.abs() <= 5,
                "{who}: the first reading is {offset} ms off the wall clock: {lines:?}, the \
                 other child's: {:?}",
                [&reader, &builder_child].map(|child| &child.output)
            );
            let lag = number_in(lines[1], "lag ");
            assert!(
                lag <= 5,
                "{who}: the readings lag the wall clock by {lag} ms: {lines:?}"
            );
        }
        assert_eq!(behind.ended, Ended::Exited(0), "{}", behind.output);
        let lines: Vec<&str> = behind.output.lines().collect();
        assert_eq!(lines.len(), 2, "{lines:?}");
        let (first, id) = (number_in(lines[0], "clock "), number_in(lines[1], "id "));
        let last = i64::try_from(last).expect("ms fit an i64");
        assert!(
            first >= last && id >= first,
            "back from {last}: the clock {first}, then the id {id}"
        );
    });
}

/// A fork while another thread is in `MonotonicClock::on_step` (holding the hook's lock,
/// which in the child no thread will ever release) leaves the child's clock running: its
/// discipline thread never waits for that lock. Each child makes a clock and waits for it
/// to pass 200 ms after its first reading; a thread stuck on the lock stores no time, and
/// the clock stands still.
#[test]
fn a_child_forked_while_a_thread_sets_the_step_hook_has_a_running_clock() {
    let _one = one_test_at_a_time();
    let parent_clock = MonotonicClock::new();
    let _ = parent_clock.unix_ms();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let setter = {
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut calls = 0_u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                MonotonicClock::on_step(Duration::from_secs(3600), |_| {});
                calls += 1;
            }
            calls
        })
    };
    let mut failures = Vec::new();
    for round in 0..20 {
        let ((), child) = fork(
            |out| {
                let clock = MonotonicClock::new();
                let first = clock.unix_ms();
                // A clock that stands still; one that a busy machine reads late has moved on.
                let deadline = std::time::Instant::now() + LIMIT / 2;
                while clock.unix_ms() < first + 200 {
                    if std::time::Instant::now() > deadline {
                        let _ = writeln!(
                            out,
                            "the clock stands at {} ms, {first} ms at first",
                            clock.unix_ms()
                        );
                        return 1;
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                0
            },
            |_| (),
            LIMIT,
        );
        if child.ended != Ended::Exited(0) {
            failures.push(format!(
                "round {round}: {:?} {}",
                child.ended,
                child.output.trim()
            ));
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let calls = setter.join().expect("the setter ends");
    assert!(calls > 0, "the hook was never set");
    assert!(
        failures.is_empty(),
        "{} of 20 children: {failures:#?}",
        failures.len()
    );
}
