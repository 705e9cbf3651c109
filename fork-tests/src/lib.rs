//! Runs code in a child of `fork()`, for the tests of what atomflake's generators do
//! there (`tests/fork.rs`).
//!
//! [`fork`] is the one place with `unsafe` code: the calls into libc (`fork`, `_exit`,
//! `waitpid`, `kill`). One fork at a time runs in this process, so that a child never
//! holds a copy of another test's pipe.

use std::io::{Read, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What a child wrote and how it ended.
#[derive(Debug)]
pub struct Child {
    /// The child's process ID.
    pub pid: u32,
    /// Everything the child wrote to its writer.
    pub output: String,
    /// How it ended.
    pub ended: Ended,
}

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// It exited with this code.
    Exited(i32),
    /// A signal ended it.
    Signalled(i32),
    /// It was still running after the time limit, and was killed.
    Hung(Duration),
}

/// Held from the pipe's creation until the child is reaped, in the test process.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The test process: the first process to call [`fork`]. Its children may fork too (a
/// grandchild), without the lock: a child runs only the thread that forked it, which holds
/// the child's copy of the lock.
static TEST_PROCESS: std::sync::OnceLock<u32> = std::sync::OnceLock::new();

/// Forks, in the test process or in a child of it. The child runs `child` with a writer to the parent and exits with the code it
/// returns (101 when it panics) at once, running no destructor and no exit handler. The
/// parent runs `parent` with the child's process ID meanwhile, then waits for the child for
/// at most `limit` from the fork, and kills it after that.
///
/// # Panics
///
/// When the pipe, the fork or the wait fails.
#[expect(unsafe_code, reason = "fork, _exit, waitpid and kill are libc calls")]
pub fn fork<T>(
    child: impl FnOnce(&mut dyn Write) -> i32,
    parent: impl FnOnce(u32) -> T,
    limit: Duration,
) -> (T, Child) {
    let _one = (*TEST_PROCESS.get_or_init(std::process::id) == std::process::id()).then(|| {
        ONE_AT_A_TIME
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    });
    let (mut reader, mut writer) = std::io::pipe().expect("a pipe");
    let started = Instant::now();
    // SAFETY: `fork` has no preconditions. The child runs only this thread; it goes on
    // with memory as the fork found it, which the code under test is about, and leaves
    // through `_exit`.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        drop(reader);
        let code =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| child(&mut writer))).unwrap_or(101);
        drop(writer);
        // SAFETY: `_exit` ends the process without running anything of the parent's.
        unsafe { libc::_exit(code) }
    }
    assert!(pid > 0, "fork failed: {}", std::io::Error::last_os_error());
    drop(writer);
    // Read while the child runs, so that a child that writes more than the pipe holds does
    // not block.
    let read = std::thread::spawn(move || {
        let mut output = String::new();
        let _ = reader.read_to_string(&mut output);
        output
    });
    let value = parent(pid.unsigned_abs());
    let mut status = 0;
    let ended = loop {
        // SAFETY: `status` is a valid place for the child's status.
        let reaped = unsafe { libc::waitpid(pid, &raw mut status, libc::WNOHANG) };
        assert!(reaped >= 0, "waitpid failed: {}", std::io::Error::last_os_error());
        if reaped == pid {
            break if libc::WIFEXITED(status) {
                Ended::Exited(libc::WEXITSTATUS(status))
            } else {
                Ended::Signalled(libc::WTERMSIG(status))
            };
        }
        if started.elapsed() >= limit {
            // SAFETY: `pid` is this process's unreaped child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &raw mut status, 0);
            }
            break Ended::Hung(limit);
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let output = read.join().expect("the reading thread");
    let child = Child {
        pid: pid.unsigned_abs(),
        output,
        ended,
    };
    (value, child)
}
