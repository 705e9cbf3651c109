//! What a test process killed by a signal left behind. A server is stopped and its
//! directory removed when it is dropped, also when a test panics; a process killed by a
//! signal (a runner's SIGKILL, a timeout's SIGTERM) drops nothing, so its servers run on
//! and their directories stay. The next test process to make a server directory sweeps
//! them ([`sweep_once`]): each `atomflake-PID-NAME` directory in the temporary directory
//! whose process PID is gone, and every process that runs in one.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long the processes of one directory get to end after each signal.
const GRACE: Duration = Duration::from_secs(10);

/// [`sweep`] of the temporary directory, once in this process.
pub(crate) fn sweep_once() {
    static SWEPT: std::sync::Once = std::sync::Once::new();
    SWEPT.call_once(|| {
        sweep(&std::env::temp_dir());
    });
}

/// In `dir`, each directory `atomflake-PID-NAME` whose process PID is gone: the processes
/// that run in it are stopped, then it is removed. A directory of a live process is left
/// alone. Returns the directories removed.
pub(crate) fn sweep(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let orphans: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_dir()))
        .map(|entry| entry.path())
        .filter(|path| owner(path).is_some_and(|pid| !alive(pid)))
        .collect();
    for orphan in &orphans {
        stop_processes_in(orphan);
        let _ = std::fs::remove_dir_all(orphan);
    }
    orphans
}

/// The PID in a directory's name `atomflake-PID-NAME`.
fn owner(path: &Path) -> Option<u32> {
    let rest = path.file_name()?.to_str()?.strip_prefix("atomflake-")?;
    let (pid, name) = rest.split_once('-')?;
    if name.is_empty() || pid.is_empty() || !pid.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok()
}

/// Whether process `pid` exists (a zombie does: its parent has yet to reap it).
fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Stops the processes that run in `dir`: a PostgreSQL postmaster with SIGQUIT first (an
/// immediate shutdown, which ends its backends and frees its shared memory), then
/// whatever is left with SIGKILL.
fn stop_processes_in(dir: &Path) {
    let postmasters: Vec<u32> = processes_in(dir)
        .into_iter()
        .filter(|&pid| is_postmaster(pid))
        .collect();
    for &pid in &postmasters {
        send(pid, "-QUIT");
    }
    ended(|| postmasters.iter().all(|&pid| !alive(pid)));
    for pid in processes_in(dir) {
        send(pid, "-KILL");
    }
    ended(|| processes_in(dir).is_empty());
}

/// Waits at most [`GRACE`] for `done`.
fn ended(mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() && started.elapsed() < GRACE {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends `signal` to `pid`, which may have gone meanwhile.
fn send(pid: u32, signal: &str) {
    let _ = Command::new("kill")
        .args([signal, &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

/// Whether `pid` is a PostgreSQL postmaster: `postgres -D DIR`, as `pg_ctl` starts it (a
/// backend's command line is its title).
fn is_postmaster(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
        let mut args = cmdline.split(|&byte| byte == 0);
        args.next().is_some_and(|program| program.ends_with(b"postgres")) && args.any(|arg| arg == b"-D")
    })
}

/// The processes other than this one whose working directory is in `dir`, or whose
/// command line names `dir` or a path in it.
fn processes_in(dir: &Path) -> Vec<u32> {
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me && runs_in(pid, dir))
        .collect()
}

/// Whether process `pid` works in `dir` or names it in its command line.
fn runs_in(pid: u32, dir: &Path) -> bool {
    let proc = PathBuf::from(format!("/proc/{pid}"));
    if std::fs::read_link(proc.join("cwd")).is_ok_and(|cwd| cwd.starts_with(dir)) {
        return true;
    }
    let Ok(cmdline) = std::fs::read(proc.join("cmdline")) else {
        return false;
    };
    let dir = dir.as_os_str().as_bytes();
    cmdline.split(|&byte| byte == 0).any(|arg| names(arg, dir))
}

/// Whether `arg` holds the path `dir`, or a path in it: `dir` followed by `/` or by the
/// argument's end (`/tmp/d` is not named by `/tmp/d2`).
fn names(arg: &[u8], dir: &[u8]) -> bool {
    (0..arg.len())
        .filter(|&at| arg[at..].starts_with(dir))
        .any(|at| matches!(arg.get(at + dir.len()), None | Some(b'/')))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Killed;

    #[test]
    fn a_directory_is_named_by_a_path_in_it_not_by_a_longer_name() {
        let dir = b"/tmp/atomflake-12-pg";
        assert!(names(b"/tmp/atomflake-12-pg", dir));
        assert!(names(b"/tmp/atomflake-12-pg/data", dir));
        assert!(names(b"--data-dir=/tmp/atomflake-12-pg/etcd", dir));
        assert!(!names(b"/tmp/atomflake-12-pg2", dir));
        assert!(!names(b"/tmp/atomflake-123-pg", dir));
        assert!(!names(b"", dir));
        let owners: Vec<Option<u32>> = [
            "atomflake-12-pg",
            "atomflake-12-",
            "atomflake--pg",
            "atomflake-x1-pg",
            "atomflake-12",
        ]
        .iter()
        .map(|name| owner(Path::new(name)))
        .collect();
        assert_eq!(owners, [Some(12), None, None, None, None]);
    }

    /// A process gone: the PID of a child that has exited and been reaped.
    fn gone() -> u32 {
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    /// A process that waits, working in `dir`.
    fn working_in(dir: &Path) -> Killed {
        Killed(Command::new("sleep").arg("600").current_dir(dir).spawn().unwrap())
    }

    /// A process that waits, naming a file in `dir` in its arguments (and working elsewhere).
    fn naming(dir: &Path) -> Killed {
        let log = dir.join("log");
        std::fs::write(&log, "").unwrap();
        Killed(
            Command::new("tail")
                .arg("-f")
                .arg(log)
                .current_dir("/")
                .spawn()
                .unwrap(),
        )
    }

    #[test]
    fn the_processes_and_directory_of_a_process_gone_are_swept_and_a_live_ones_kept() {
        let scratch = std::env::temp_dir().join(format!("atomflake-sweep-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&scratch);
        let orphan = scratch.join(format!("atomflake-{}-server", gone()));
        let live = scratch.join(format!("atomflake-{}-server", std::process::id()));
        let other = scratch.join("atomflake-tokens-x");
        for dir in [&orphan, &live, &other] {
            std::fs::create_dir_all(dir.join("data")).unwrap();
        }
        let mut working = working_in(&orphan.join("data"));
        let mut named = naming(&orphan);
        let mut kept = working_in(&live);
        crate::wait_until(
            "the two processes of the orphaned directory did not start",
            Duration::from_millis(10),
            || processes_in(&orphan).len() == 2,
            || format!("{:?}", processes_in(&orphan)),
        );

        assert_eq!(sweep(&scratch), std::slice::from_ref(&orphan));
        for child in [&mut working, &mut named] {
            let status = child.0.wait().unwrap();
            assert!(!status.success(), "{status}");
        }
        assert!(!orphan.exists());
        assert!(
            kept.0.try_wait().unwrap().is_none(),
            "a live process's server was stopped"
        );
        assert!(live.exists() && other.exists());
        drop(kept);
        std::fs::remove_dir_all(&scratch).unwrap();
    }
}
