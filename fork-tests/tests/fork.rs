//! A generator built before a `fork()` and used on both sides of it: the child is refused
//! with the exact error, never waits for threads it does not have, mints no ID its parent
//! mints, and can drop the generator.

use atomflake::{Builder, Clock, Generator, Id, Layout, ManualClock, MintError};
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
    clock.advance(2_000);
    assert!(again.try_next_id().unwrap() > second);
    drop(again);
    for suffix in ["", ".lock"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}
