//! A generator given a clock builds no other: no [`MonotonicClock`] is anchored (no quanta
//! calibration) and no discipline thread starts. Its own process, since the anchor and
//! the thread are process-wide.

use atomflake::{Builder, Generator, Layout, LocalGenerator, ManualClock, ShardedGenerator};

/// The names of this process's threads (Linux); `None` where they cannot be listed.
fn thread_names() -> Option<Vec<String>> {
    let tasks = std::fs::read_dir("/proc/self/task").ok()?;
    Some(
        tasks
            .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
            .map(|name| name.trim_end().to_owned())
            .collect(),
    )
}

#[test]
fn injected_clocks_start_no_default_clock() {
    let Some(names) = thread_names() else {
        eprintln!("skipped: this system does not list a process's threads (/proc/self/task)");
        return;
    };
    assert!(
        !names.iter().any(|name| name.starts_with("atomflake")),
        "{names:?}"
    );
    let clock = ManualClock::new(1_700_000_000_000);
    let generator = Generator::with_clock(Layout::TWITTER, 1, clock.clone()).unwrap();
    let local = LocalGenerator::with_clock(Layout::TWITTER, 2, clock.clone()).unwrap();
    let shards = ShardedGenerator::with_clock(Layout::TWITTER, [3, 4], clock.clone()).unwrap();
    let built = Builder::with_clock(Layout::TWITTER, clock.clone())
        .build(5)
        .unwrap();
    let ids = [
        generator.next_id(),
        local.next_id(),
        shards.next_id(),
        built.next_id(),
    ];
    assert!(
        ids.iter()
            .all(|&id| Layout::TWITTER.decode(id).unix_ms == 1_700_000_000_000)
    );
    // A thread names itself once it runs: give one that was spawned the time to.
    std::thread::sleep(std::time::Duration::from_millis(100));
    let names = thread_names().unwrap();
    assert!(
        !names.iter().any(|name| name == "atomflake-disci"),
        "the discipline thread started: {names:?}"
    );
}
