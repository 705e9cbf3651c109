//! Restart safety with a high-water file ([`Builder::high_water_file`]): simulated restarts
//! with a clock behind the previous run, a crash between the write and the rename, a
//! second live generator (in this process and in another), damaged files, and the mark
//! always covering every minted ID, borrowed ticks included.

use atomflake::mark::HighWaterError;
use atomflake::{BuildError, Builder, Id, Layout, ManualClock, MintError};
use std::path::{Path, PathBuf};
use std::time::Duration;

const T0: u64 = 1_700_000_000_000;
const LAYOUT: Layout = Layout::TWITTER;

/// A fresh high-water path in a directory of its own, removed when dropped.
struct Scratch {
    dir: PathBuf,
    path: PathBuf,
}

impl Scratch {
    fn new(test: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("atomflake-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("node-1.hw");
        Scratch { dir, path }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn builder(path: &Path, clock: &ManualClock) -> Builder<ManualClock> {
    Builder::with_clock(LAYOUT, clock.clone()).high_water_file(path)
}

/// The mark in the file, read independently of the crate's parser.
fn mark(path: &Path) -> u64 {
    let text = std::fs::read_to_string(path).unwrap();
    let line = text.lines().nth(1).unwrap();
    line.strip_prefix("unix_ms ").unwrap().parse().unwrap()
}

fn time_of(id: Id) -> u64 {
    LAYOUT.decode(id).unix_ms
}

#[test]
fn a_restart_with_the_clock_5_s_behind_mints_past_the_old_maximum() {
    let scratch = Scratch::new("restart");
    let clock = ManualClock::new(T0);
    let mut old_max = Id::new(0);
    {
        let generator = builder(&scratch.path, &clock).build(1).unwrap();
        for _ in 0..3_000 {
            clock.advance(1);
            old_max = old_max.max(generator.next_ids(100).last().unwrap());
        }
    }
    // The same node restarts with its wall clock 5 s behind the last run's.
    clock.set(time_of(old_max) - 5_000);
    let generator = builder(&scratch.path, &clock).build(1).unwrap();
    match generator.try_next_id() {
        Err(MintError::SequenceExhausted { retry_after, .. }) => {
            // A clean stop left the mark just past the last ID (its tick's end): wait the
            // 5 s and that tick.
            assert_eq!(retry_after, Duration::from_millis(5_001));
        }
        other => panic!("minted before the old maximum's time: {other:?}"),
    }
    let mut ids = Vec::new();
    for _ in 0..8_000 {
        clock.advance(1);
        ids.extend(generator.try_next_id().ok());
    }
    assert!(!ids.is_empty());
    assert!(ids.iter().all(|&id| id > old_max), "an id at or below {old_max}");
}

#[test]
fn a_clock_too_far_behind_the_mark_is_refused_with_how_far() {
    let scratch = Scratch::new("too-far");
    let clock = ManualClock::new(T0);
    drop(builder(&scratch.path, &clock).build(1).unwrap());
    let written = mark(&scratch.path);
    clock.set(T0 - 20_000);
    let error = builder(&scratch.path, &clock).build(1).unwrap_err();
    assert_eq!(
        error,
        BuildError::Ahead {
            store: format!("high-water file {}", scratch.path.display()),
            mark_ms: written,
            clock_ms: T0 - 20_000,
            max_wait: Duration::from_secs(10),
        }
    );
    assert_eq!(
        error.to_string(),
        format!(
            "clock is 21.5s behind high-water file {} (mark {written} ms, clock {} ms): a \
             generator waits at most 10s at start-up",
            scratch.path.display(),
            T0 - 20_000
        )
    );
}

#[test]
fn the_mark_always_covers_every_id_borrowed_ticks_included() {
    let scratch = Scratch::new("covers");
    let clock = ManualClock::new(T0);
    let generator = builder(&scratch.path, &clock)
        .borrow_ahead(Duration::from_secs(3))
        .build_sharded([1, 2])
        .unwrap();
    let mut marks = vec![mark(&scratch.path)];
    for round in 0..40 {
        // Bursts that borrow up to 3 s ahead, then the clock moves on.
        let ids: Vec<Id> = generator.next_ids(4_096 * 50).collect();
        let newest = time_of(*ids.last().unwrap());
        let written = mark(&scratch.path);
        assert!(
            written > newest,
            "round {round}: mark {written} <= id time {newest}"
        );
        marks.push(written);
        clock.advance(100);
    }
    marks.dedup();
    // 40 rounds borrowed 8.2 s of ticks in 4 s of clock: a write per second of ids at most.
    assert!(marks.len() <= 10, "{} writes: {marks:?}", marks.len());
}

#[test]
fn minting_within_a_window_writes_nothing() {
    let scratch = Scratch::new("no-write");
    let clock = ManualClock::new(T0);
    let generator = builder(&scratch.path, &clock).build(1).unwrap();
    let written = mark(&scratch.path);
    assert_eq!(written, T0 + 1_500, "built: the clock plus a window and a half");
    let modified = std::fs::metadata(&scratch.path).unwrap().modified().unwrap();
    // Up to half a window before the mark: no write.
    for _ in 0..999 {
        clock.advance(1);
        let _ = generator.next_ids(10).count();
    }
    assert_eq!(mark(&scratch.path), written);
    assert_eq!(
        std::fs::metadata(&scratch.path).unwrap().modified().unwrap(),
        modified
    );
    // Crossing it asks the generator's keeper thread to move the mark a window and a half
    // past the tick that crossed.
    clock.advance(1);
    let _ = generator.next_id();
    assert_eq!(mark_soon(&scratch.path, written), T0 + 1_000 + 1 + 1_500);
}

/// How long a wait that only turns "never" into a failure lasts: the value of
/// `atomflake_test_servers::HANG_GUARD`, kept here because the core crate's tests do not
/// depend on the test servers. A busy machine may take any part of it.
const HANG_GUARD: Duration = Duration::from_secs(90);

/// The mark in the file once it is no longer `old` (the keeper thread writes it), or `old`
/// after a [`HANG_GUARD`].
fn mark_soon(path: &Path, old: u64) -> u64 {
    let deadline = std::time::Instant::now() + HANG_GUARD;
    loop {
        let now = mark(path);
        if now != old || std::time::Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_crash_between_write_and_rename_recovers() {
    let scratch = Scratch::new("crash");
    let clock = ManualClock::new(T0);
    let last = {
        let generator = builder(&scratch.path, &clock).build(1).unwrap();
        generator.next_id()
    };
    let written = mark(&scratch.path);
    // A crash after writing the temporary file, before the rename: a half-written
    // temporary file next to the intact mark.
    let temporary = PathBuf::from(format!("{}.tmp", scratch.path.display()));
    std::fs::write(&temporary, "atomflake high-water 1\nunix_ms 99").unwrap();
    clock.set(written);
    let generator = builder(&scratch.path, &clock).build(1).unwrap();
    let id = generator.next_id();
    assert!(id > last && time_of(id) >= written, "{id} vs {last}");
    assert_eq!(
        mark(&scratch.path),
        written + 1_500,
        "the next write replaced the debris"
    );
    assert!(!temporary.exists());
}

#[test]
fn a_second_live_generator_on_the_file_is_refused() {
    let scratch = Scratch::new("second");
    let clock = ManualClock::new(T0);
    let first = builder(&scratch.path, &clock).build(1).unwrap();
    let error = builder(&scratch.path, &clock).build_local(1).unwrap_err();
    assert_eq!(
        error,
        BuildError::HighWater(HighWaterError::Locked {
            path: scratch.path.clone()
        })
    );
    assert_eq!(
        error.to_string(),
        format!(
            "high-water file {} is in use: another live generator holds its lock",
            scratch.path.display()
        )
    );
    drop(first);
    assert!(
        builder(&scratch.path, &clock).build(1).is_ok(),
        "free once the first is gone"
    );
}

#[test]
fn a_damaged_file_is_an_error_never_ignored() {
    let scratch = Scratch::new("damaged");
    let clock = ManualClock::new(T0);
    drop(builder(&scratch.path, &clock).build(1).unwrap());
    let intact = std::fs::read_to_string(&scratch.path).unwrap();
    for (text, line, found) in [
        ("", 1, "the end of the file"),
        (
            &intact[..intact.len() - 5],
            3,
            &intact.lines().nth(2).unwrap()[..intact.lines().nth(2).unwrap().len() - 4],
        ),
        ("unix_ms 5\n", 1, "unix_ms 5"),
    ] {
        std::fs::write(&scratch.path, text).unwrap();
        let error = builder(&scratch.path, &clock).build(1).unwrap_err();
        assert_eq!(
            error,
            BuildError::HighWater(HighWaterError::Corrupt {
                path: scratch.path.clone(),
                line,
                found: found.to_owned()
            }),
            "{text:?}"
        );
    }
    assert_eq!(
        builder(&scratch.path, &clock).build(1).unwrap_err().to_string(),
        format!(
            "high-water file {} is corrupt: line 1 holds \"unix_ms 5\", not what atomflake writes there",
            scratch.path.display()
        )
    );
    std::fs::write(&scratch.path, [0xff, 0xfe, b'\n']).unwrap();
    assert_eq!(
        builder(&scratch.path, &clock).build(1).unwrap_err(),
        BuildError::HighWater(HighWaterError::Corrupt {
            path: scratch.path.clone(),
            line: 1,
            found: "bytes that are not UTF-8".to_owned()
        })
    );
}

#[test]
fn an_unwritable_directory_is_an_io_error() {
    let missing = std::env::temp_dir()
        .join(format!("atomflake-missing-{}", std::process::id()))
        .join("x.hw");
    let error = builder(&missing, &ManualClock::new(T0)).build(1).unwrap_err();
    assert_eq!(
        error,
        BuildError::HighWater(HighWaterError::Io {
            path: missing.clone(),
            action: "open the lock file of",
            cause: std::io::Error::from(std::io::ErrorKind::NotFound).into(),
        })
    );
    assert_eq!(
        error.to_string(),
        format!(
            "could not open the lock file of high-water file {}: No such file or directory (os error 2)",
            missing.display()
        )
    );
    // The operating system's error is kept as the source.
    let source = std::error::Error::source(&error).expect("the io error");
    let io = source.downcast_ref::<std::io::Error>().expect("an io::Error");
    assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
}

/// Bytes this thread has passed to `write` and its kin (Linux's per-thread I/O counters);
/// `None` where the system does not count them.
fn written_by_this_thread() -> Option<u64> {
    let io = std::fs::read_to_string("/proc/thread-self/io").ok()?;
    io.lines()
        .find_map(|line| line.strip_prefix("wchar: "))?
        .parse()
        .ok()
}

#[test]
fn minting_threads_never_write_the_mark() {
    let Some(before) = written_by_this_thread() else {
        eprintln!("skipped: this system does not count a thread's writes (/proc/thread-self/io)");
        return;
    };
    let scratch = Scratch::new("keeper");
    let clock = ManualClock::new(T0);
    // A local generator: the one thread that mints is this one.
    let generator = builder(&scratch.path, &clock).build_local(1).unwrap();
    let built = written_by_this_thread().unwrap();
    assert!(
        built > before,
        "building stores the first mark, on the building thread"
    );
    // Ten seconds of clock, a mint per ms: the mark moves about ten times.
    for _ in 0..10_000 {
        clock.advance(1);
        let _ = generator.next_id();
    }
    assert_eq!(
        written_by_this_thread().unwrap(),
        built,
        "the minting thread wrote (the mark file, or anything else)"
    );
    assert!(
        mark(&scratch.path) > T0 + 10_000,
        "every minted tick is covered by the stored mark"
    );
}

#[test]
fn a_clean_stop_leaves_the_mark_just_past_the_last_id_and_no_mint_leaves_it_as_stored() {
    let scratch = Scratch::new("clean-stop");
    let clock = ManualClock::new(T0);
    let generator = builder(&scratch.path, &clock).build(1).unwrap();
    clock.advance(300);
    let last = generator.next_ids(10).last().unwrap();
    assert_eq!(mark(&scratch.path), T0 + 1_500, "the stored mark, ahead");
    drop(generator);
    assert_eq!(
        mark(&scratch.path),
        time_of(last) + 1,
        "the end of the last ID's tick"
    );

    // Nothing minted: the stored mark stays (the generator does not know it minted none
    // before it).
    let clock = ManualClock::new(T0 + 10_000);
    drop(builder(&scratch.path, &clock).build(1).unwrap());
    assert_eq!(mark(&scratch.path), T0 + 11_500);
}

#[test]
fn a_mark_in_one_file_per_node_covers_each_node_whatever_its_shards() {
    let scratch = Scratch::new("per-node");
    let file = |node: u64| scratch.dir.join(format!("node-{node}.hw"));
    let clock = ManualClock::new(T0);
    let files = |nodes: &[u64]| {
        Builder::with_clock(LAYOUT, clock.clone()).high_water_files(nodes.iter().map(|&node| file(node)))
    };
    let three = files(&[1, 2, 3]).build_sharded([1, 2, 3]).unwrap();
    clock.advance(2_000);
    let last = three.next_ids(10).last().unwrap();
    drop(three);
    for node in [1, 2, 3] {
        assert_eq!(mark(&file(node)), time_of(last) + 1, "node {node}");
    }

    // Node 2 alone, its clock behind: past the three's IDs.
    clock.set(T0);
    let two = files(&[2]).build_sharded([2]).unwrap();
    match two.try_next_id() {
        Err(MintError::SequenceExhausted { retry_after, .. }) => {
            assert_eq!(retry_after, Duration::from_millis(2_001));
        }
        other => panic!("minted below the three's IDs: {other:?}"),
    }
    clock.set(T0 + 2_001);
    assert!(two.next_id() > last);

    // Node 2 is held: a generator of nodes 1 and 2 is refused, and gives node 1 back.
    let error = files(&[1, 2]).build_sharded([1, 2]).unwrap_err();
    assert_eq!(
        error,
        BuildError::HighWater(HighWaterError::Locked { path: file(2) })
    );
    assert!(files(&[1]).build(1).is_ok(), "node 1 is free again");
    drop(two);

    // A node's file ahead of the others': the greatest mark counts.
    clock.set(T0 + 3_000);
    drop(files(&[4]).build(4).unwrap());
    let mark_4 = mark(&file(4));
    clock.set(T0 + 2_500);
    let generator = files(&[1, 4]).build_sharded([1, 4]).unwrap();
    assert!(generator.try_next_id().is_err(), "minted below node 4's mark");
    clock.set(mark_4);
    assert!(time_of(generator.next_id()) >= mark_4);
}
