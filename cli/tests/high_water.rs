//! `atomflake mint` on a fixed node restarted with its wall clock behind (libfaketime, as
//! the server tests step a server's clock): the high-water file keeps it past every ID it
//! minted before, or refuses it.

use atomflake::{Id, Layout};
use atomflake_test_servers::postgres as pg;
use atomflake_test_servers::{Killed, now_ms};
use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The layout of these tests: Sonyflake's 256 IDs per 10 ms tick make a run of IDs at the
/// layout's cap last long without being large (25,600 IDs a second).
const LAYOUT: Layout = Layout::SONYFLAKE;

/// A directory of the test's own for its high-water files, removed when dropped.
struct StateDir(PathBuf);

impl StateDir {
    fn new(name: &str) -> StateDir {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        StateDir(dir)
    }
}

/// A state directory named for `test`, or `None` after a skip where libfaketime is missing.
fn faked_state(test: &str) -> Option<StateDir> {
    pg::can_move_clocks(test).then(|| StateDir::new(test))
}

impl Drop for StateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `atomflake mint --layout sonyflake --node 7 --high-water DIR args…`, with the clock
/// `offset` behind (libfaketime; the monotonic clocks left alone) when given.
fn mint(state: &StateDir, args: &[&str], offset: Option<&str>) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_atomflake"));
    command
        .args(["mint", "--layout", "sonyflake", "--node", "7", "--high-water"])
        .arg(&state.0)
        .args(args)
        .env_remove("ATOMFLAKE_NODE")
        .env_remove("ATOMFLAKE_HIGH_WATER");
    if let Some(offset) = offset {
        command
            .env("LD_PRELOAD", pg::LIBFAKETIME)
            .env("FAKETIME", offset)
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    }
    command
}

fn ids(output: &Output) -> Vec<u64> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| line.parse().unwrap())
        .collect()
}

/// The mark in a high-water file (its second line, `unix_ms <mark>`).
fn mark_in(path: &Path) -> u64 {
    let text = std::fs::read_to_string(path).unwrap();
    let line = text.lines().nth(1).unwrap();
    line.strip_prefix("unix_ms ").unwrap().parse().unwrap()
}

fn unix_ms(id: u64) -> u64 {
    LAYOUT.decode(Id::new(id)).unix_ms
}

#[test]
fn a_mint_restarted_on_its_node_with_its_clock_3_s_behind_mints_no_id_twice() {
    let Some(state) = faked_state("a_mint_restarted_on_its_node_with_its_clock_3_s_behind_mints_no_id_twice")
    else {
        return;
    };
    // 2 s of IDs at the layout's cap.
    let count = "51200";
    let first = mint(&state, &["-n", count], None).output().unwrap();
    assert!(first.status.success(), "{first:?}");
    let before = ids(&first);
    let last = *before.iter().max().unwrap();

    // Started again at once, its clock 3 s behind (NTP stepping it back at boot, a VM
    // restored from a snapshot): within the 10 s a restart waits for its clock.
    let behind_ms = 3_000;
    let behind = format!("-{}s", behind_ms / 1_000);
    let started = Instant::now();
    let mut second = mint(&state, &["-n", count], Some(&behind))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(second.stdout.take().unwrap());
    let mut errors = second.stderr.take().unwrap();
    let mut second = Killed(second);
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let (first_after, first_seen_ms) = (started.elapsed(), now_ms());
    let mut after = vec![line.trim().parse::<u64>().unwrap_or_else(|_| panic!("{line:?}"))];
    after.extend(out.lines().map(|line| line.unwrap().parse::<u64>().unwrap()));
    let status = second.0.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut errors, &mut stderr).unwrap();
    assert!(status.success(), "{status}: {stderr}");

    let seen: HashSet<u64> = before.iter().copied().collect();
    let twice = after.iter().filter(|id| seen.contains(id)).count();
    println!(
        "{} IDs before the restart, {} after; {twice} minted twice; the first ID after the \
         restart came after {first_after:?}",
        before.len(),
        after.len()
    );
    assert_eq!(
        twice,
        0,
        "{twice} of {} IDs after the restart were minted before it",
        after.len()
    );
    assert!(after.iter().all(|&id| id > last), "an ID at or below {last}");
    // Its clock was 3 s behind: the first ID it minted came 3 s after the time it bears
    // (later still: the output is buffered). So the restart minted nothing until 3 s
    // after the first run's last ID: it waited for its clock to pass the mark the first
    // run left.
    let (last_ms, first_ms) = (unix_ms(last), unix_ms(after[0]));
    atomflake_test_servers::assert_restarted_from_the_mark(last_ms, first_ms, first_seen_ms, behind_ms);
}

#[test]
fn a_mint_restarted_with_its_clock_20_s_behind_is_refused_naming_the_mark() {
    let Some(state) = faked_state("a_mint_restarted_with_its_clock_20_s_behind_is_refused_naming_the_mark")
    else {
        return;
    };
    let first = mint(&state, &[], None).output().unwrap();
    assert!(first.status.success(), "{first:?}");
    let file = state.0.join("sonyflake-node-7.hw");
    let mark = mark_in(&file);
    assert!(
        mark > unix_ms(ids(&first)[0]),
        "the mark {mark} does not cover the ID"
    );

    let behind_ms = 20_000;
    let asked = now_ms();
    let second = mint(&state, &[], Some(&format!("-{}s", behind_ms / 1_000)))
        .output()
        .unwrap();
    let answered = now_ms();
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert_eq!(
        (second.status.code(), second.stdout.len()),
        (Some(1), 0),
        "{stderr}"
    );
    // "… (mark M ms, clock C ms): …": the clock is what the second run read, 20 s behind.
    let clock: u64 = stderr
        .split_once(", clock ")
        .and_then(|(_, rest)| rest.split_once(" ms)"))
        .and_then(|(clock, _)| clock.parse().ok())
        .unwrap_or_else(|| panic!("{stderr}"));
    // Read between `asked` and `answered`, `behind_ms` behind, give or take a second of
    // the clocks' precision: no bound on how long a busy machine takes to run it.
    let read_from = asked - behind_ms - 1_000;
    let read_to = answered - behind_ms + 1_000;
    assert!(
        (read_from..=read_to).contains(&clock),
        "the clock read {clock} ms, not in {read_from}..={read_to} (asked at {asked} ms, answered at \
         {answered} ms): {stderr}"
    );
    assert_eq!(
        stderr,
        format!(
            "atomflake: clock is {:?} behind high-water file {} (mark {mark} ms, clock {clock} \
             ms): a generator waits at most 10s at start-up\n",
            Duration::from_millis(mark - clock),
            file.display()
        )
    );
}
