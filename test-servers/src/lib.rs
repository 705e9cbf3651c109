//! Throwaway servers for atomflake's tests: PostgreSQL ([`postgres::Server`]) and MariaDB
//! ([`mariadb::Server`]), each started in a fresh temporary directory on a Unix socket, and
//! etcd clusters ([`etcd::Cluster`]) and ZooKeeper ensembles ([`zookeeper::Ensemble`]) on
//! loopback ports; each is stopped and removed when dropped, also when the test panics (and
//! what a test process killed by a signal leaves, the next one to start a server sweeps away). A
//! [`proxy::Proxy`] cuts a client's connections, and a [`tls_proxy::TlsProxy`] (`haproxy`)
//! terminates TLS in front of a server; [`fleet`] runs lease holders as processes
//! for every lease engine. [`clients`] are the clients of `atomflake serve`'s tests, and
//! [`files`] replace the files its servers watch.
//!
//! A test that finds no server installed prints `SKIPPED <test>: <why>` and returns; with
//! `CI=true` a skip is a failure instead ([`skip`]).
//!
//! # Panics
//!
//! Every function panics, with the server's output, when a server does not do what it is
//! asked: in a test that is the failure to report.
#![allow(
    clippy::missing_panics_doc,
    clippy::missing_errors_doc,
    reason = "a test harness: each failure is a panic, said once in the crate docs"
)]

pub mod clients;
pub mod clock;
pub mod engines;
pub mod etcd;
pub mod files;
pub mod fleet;
pub mod mariadb;
mod member;
mod orphans;
pub mod pki;
pub mod postgres;
pub mod proxy;
pub mod python;
pub mod redis;
pub mod tls_proxy;
pub mod uuids;
pub mod zookeeper;

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long a test waits for something that must happen, but whose time nothing in the
/// test sets (a server to start, stop or answer, a leader to be elected, a process to
/// print a line or exit), before it fails: a guard against a hang, which turns "never" into
/// a failure that shows what was seen so far. It is no bound on speed: a loaded machine
/// (two cores, other servers starting, `yes` beside) may take any part of it, so a wait
/// that returns within it says nothing about how fast anything is. The longest of the
/// waits it replaced (a JVM's start on a busy machine).
pub const HANG_GUARD: Duration = Duration::from_secs(90);

/// Polls `attempt` every `poll` until it gives a value, for [`HANG_GUARD`] at most.
///
/// # Panics
///
/// When it gives none within the guard: the message says what did not happen (`what`),
/// after how long, and `detail()` (a log, the last state seen).
pub fn wait_for<T>(
    what: &str,
    poll: Duration,
    mut attempt: impl FnMut() -> Option<T>,
    detail: impl Fn() -> String,
) -> T {
    let start = std::time::Instant::now();
    loop {
        if let Some(value) = attempt() {
            return value;
        }
        assert!(
            start.elapsed() < HANG_GUARD,
            "{what} after {:?} (the hang guard):\n{}",
            start.elapsed(),
            detail()
        );
        std::thread::sleep(poll);
    }
}

/// [`wait_for`] a condition.
pub fn wait_until(what: &str, poll: Duration, mut ready: impl FnMut() -> bool, detail: impl Fn() -> String) {
    wait_for(what, poll, || ready().then_some(()), detail);
}

/// A child process killed (and waited for) when dropped: a test that fails leaves none
/// behind.
pub struct Killed(pub std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Sends `signal` (`-STOP`, `-CONT`, `-KILL`...) to process `pid` with `kill`. `-STOP`
/// returns once every thread of the process has stopped (or it has exited): `kill(2)` only
/// queues the signal, and until each thread is scheduled and stops, it may still answer a
/// request, write, or commit.
///
/// # Panics
///
/// When `kill` fails (no such process), or a thread has not stopped within [`HANG_GUARD`].
pub fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {signal} {pid}: {status}");
    if signal == "-STOP" {
        wait_stopped(pid);
    }
}

/// Waits until no thread of process `pid` can run: each is stopped (`T`, `t`) or dead
/// (`Z`, `X`), or the process has gone.
fn wait_stopped(pid: u32) {
    wait_until(
        &format!("process {pid} had a thread not stopped"),
        Duration::from_millis(5),
        || {
            thread_states(pid)
                .into_iter()
                .all(|state| matches!(state, 'T' | 't' | 'Z' | 'X'))
        },
        || format!("its threads' states: {:?}", thread_states(pid)),
    );
}

/// The state letter (`R`, `S`, `T`, `Z`...) of each thread of process `pid` in
/// `/proc/PID/task/*/stat`; none when it has gone.
fn thread_states(pid: u32) -> Vec<char> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("stat")).ok())
        // `TID (COMM) STATE ...`, and COMM may hold spaces and parentheses.
        .filter_map(|stat| stat.rsplit_once(')')?.1.trim_start().chars().next())
        .collect()
}

/// `program` in a directory of `PATH`, if there is one.
fn on_path(program: &str) -> Option<std::path::PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|path| path.is_file())
}

/// This machine's clock, Unix ms.
///
/// # Panics
///
/// When the clock reads before 1970.
pub fn now_ms() -> u64 {
    u64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

/// Asserts that a process restarted with its clock `behind_ms` behind went on from the
/// high-water mark its first run left, from when its first ID was seen: that ID (its time
/// `first_ms`) was seen at `first_seen_ms` (by [`now_ms`]), no earlier than the restart's
/// clock passed the ID's time (the time plus `behind_ms`, less 50 ms of slack between the
/// two processes' clock readings): it waited for its clock to pass the mark. And the ID is
/// just past the first run's last one (its time `last_ms`) after a clean stop, up to 1.5 s
/// past it where the stop could not store the exact mark within the 200 ms a generator's
/// drop waits (a slow disk), a second more for a late wake-up; or from the restart's
/// clock, if a loaded machine started it so late that its clock had passed the mark.
///
/// # Panics
///
/// When it did not.
pub fn assert_restarted_from_the_mark(last_ms: u64, first_ms: u64, first_seen_ms: u64, behind_ms: u64) {
    let earliest_ms = first_ms + behind_ms - 50;
    assert!(
        first_seen_ms >= earliest_ms,
        "the first ID after the restart, at {first_ms} ms, was seen at {first_seen_ms} ms, \
         before {earliest_ms} ms"
    );
    let from_clock = first_seen_ms - behind_ms + 50;
    let latest_ms = (last_ms + 2_500).max(from_clock);
    assert!(
        first_ms > last_ms && first_ms <= latest_ms,
        "the first ID after the restart is at {first_ms} ms, the last before at {last_ms} ms: \
         not in {}..={latest_ms}",
        last_ms + 1
    );
}

/// Runs `command` with `stdin` on its standard input, to its end: its status and output.
///
/// # Panics
///
/// When `command` cannot start or its output cannot be read (`what` names it).
pub fn output_with_stdin(command: &mut Command, stdin: &[u8], what: &str) -> std::process::Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| panic!("{what} does not start: {error}"));
    let mut input = child.stdin.take().expect("stdin is piped");
    input
        .write_all(stdin)
        .unwrap_or_else(|error| panic!("{what} does not take its input: {error}"));
    drop(input);
    child
        .wait_with_output()
        .unwrap_or_else(|error| panic!("{what} cannot be read: {error}"))
}

/// Whether `program version_arg` runs and succeeds; when not, [`skip`]s `test`, saying
/// `why_needed` (a failure under `CI=true`).
pub fn has_command(test: &str, program: &str, version_arg: &str, why_needed: &str) -> bool {
    let found = Command::new(program)
        .arg(version_arg)
        .output()
        .is_ok_and(|out| out.status.success());
    if !found {
        skip(test, &format!("no {program} command {why_needed}"));
    }
    found
}

/// Says loudly that `test` did not run, and why; under `CI=true` that is a failure.
///
/// # Panics
///
/// When the environment has `CI=true`.
pub fn skip(test: &str, why: &str) {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{test}: {why}, and CI=true makes a skip a failure"
    );
    eprintln!("SKIPPED {test}: {why}");
}

/// `count` distinct loopback ports that are free now, all held open while they are chosen
/// so that none is handed out twice, and all below the kernel's range of ephemeral ports
/// (`net.ipv4.ip_local_port_range`). A server stopped and started again on its ports (a
/// member restarted in a fault test) then finds them free: a port from the ephemeral range
/// may meanwhile have become the local end of any outgoing connection, another member's
/// connection to a peer say, and the server would fail to bind it.
///
/// # Panics
///
/// When no `count` such ports are free.
fn free_ports(count: usize) -> Vec<u16> {
    const LOWEST: u16 = 10_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768)
        .max(LOWEST + 1_000);
    // Each test process, and each call in it, starts its search elsewhere, so that two
    // rarely try the same ports in the instant between one choosing and its server binding.
    let span = u32::from(ephemeral - LOWEST);
    let mut at = std::process::id()
        .wrapping_mul(7_919)
        .wrapping_add(NEXT.fetch_add(1_009, Ordering::Relaxed));
    let mut held = Vec::with_capacity(count);
    for _ in 0..span {
        if held.len() == count {
            break;
        }
        at = at.wrapping_add(1);
        let port = LOWEST + u16::try_from(at % span).expect("the span is below 65,536");
        if let Ok(listener) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            held.push(listener);
        }
    }
    assert_eq!(
        held.len(),
        count,
        "no {count} free loopback ports in {LOWEST}..{ephemeral}"
    );
    held.iter()
        .map(|listener| listener.local_addr().unwrap().port())
        .collect()
}

/// An empty directory `atomflake-NAME` in the system's temporary directory, this process's
/// ID after `atomflake-`: whatever an earlier run left there is removed. The first one a
/// process makes sweeps away what killed test processes left (`orphans`).
///
/// # Panics
///
/// When the directory cannot be made.
fn fresh_dir(name: &str) -> std::path::PathBuf {
    orphans::sweep_once();
    let dir = std::env::temp_dir().join(format!("atomflake-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|error| panic!("{}: {error}", dir.display()));
    dir
}

/// Whether this process runs as root (`initdb`, `postgres` and `mariadbd` need another user
/// then).
fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout.trim_ascii() == b"0")
}

#[cfg(test)]
mod tests {
    use super::{Killed, free_ports, has_command, signal, thread_states};
    use std::collections::HashSet;
    use std::process::Command;

    /// `-STOP` returns with every thread stopped, though `kill(2)` returns before: a
    /// process of 16 threads that spin, on a machine of fewer cores, has some not yet
    /// scheduled to stop (a JVM frozen so answered a request after `kill` returned).
    #[test]
    fn a_stopped_process_has_every_thread_stopped_when_the_signal_returns() {
        let test = "a_stopped_process_has_every_thread_stopped_when_the_signal_returns";
        if !has_command(test, "python3", "--version", "to run a process of many threads") {
            return;
        }
        let spin = "import threading\n\
                    def spin():\n    while True: pass\n\
                    [threading.Thread(target=spin).start() for _ in range(16)]\n";
        let child = Killed(Command::new("python3").args(["-c", spin]).spawn().unwrap());
        let pid = child.0.id();
        super::wait_until(
            "the spinning threads did not start",
            std::time::Duration::from_millis(10),
            || thread_states(pid).len() == 17,
            || format!("{:?}", thread_states(pid)),
        );
        for _ in 0..30 {
            signal(pid, "-STOP");
            let states = thread_states(pid);
            signal(pid, "-CONT");
            assert!(
                states.len() == 17 && states.iter().all(|&state| state == 'T'),
                "{states:?}"
            );
        }
    }

    /// The ports are distinct, below the ephemeral range (where no outgoing connection takes
    /// them), and free: each can be bound once chosen.
    #[test]
    fn free_ports_are_distinct_bindable_and_below_the_ephemeral_range() {
        let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap();
        let ephemeral: u16 = range.split_whitespace().next().unwrap().parse().unwrap();
        let ports: Vec<u16> = (0..20).flat_map(|_| free_ports(15)).collect();
        assert!(
            ports.iter().all(|&port| (10_000..ephemeral).contains(&port)),
            "{ports:?}"
        );
        for call in ports.chunks(15) {
            assert_eq!(call.iter().collect::<HashSet<_>>().len(), 15, "{call:?}");
            let _held: Vec<_> = call
                .iter()
                .map(|&port| std::net::TcpListener::bind(("127.0.0.1", port)).unwrap())
                .collect();
        }
    }
}
