//! The test's side of a holder process: starting one ([`Holders`], [`Spawn`]), reading
//! what it prints, signalling it and ending it ([`Holder`]).

use super::child::{self, HolderClock};
use super::lines::{count_ids, tail};
use atomflake::Layout;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Where one engine's holders claim: the engine's holder test, its address, and the lease
/// time of a holder not given one.
#[derive(Debug, Clone)]
pub struct Holders {
    child: &'static str,
    target: String,
    ttl: Duration,
}

impl Holders {
    /// Holders at `target` (what the engine's config parses), run by the test named
    /// `child` (which calls [`holder()`](super::holder())), on lease time `ttl` unless given
    /// one.
    pub fn new(target: impl Into<String>, child: &'static str, ttl: Duration) -> Holders {
        Holders {
            child,
            target: target.into(),
            ttl,
        }
    }

    /// The lease time of a holder not given one.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// A holder that claims a node in `namespace` and holds it until [`Holder::close`].
    pub fn hold(&self, namespace: &str) -> Spawn {
        self.spawn("hold", namespace)
    }

    /// A holder that claims a node in `namespace` and mints on it, printing each ID, until
    /// its [`count`](Spawn::count) or until the lease is lost.
    pub fn mint(&self, namespace: &str) -> Spawn {
        self.spawn("mint", namespace)
    }

    fn spawn(&self, mode: &str, namespace: &str) -> Spawn {
        let env = [
            (child::MODE, mode),
            (child::TARGET, &self.target),
            (child::NAMESPACE, namespace),
        ];
        Spawn {
            child: self.child,
            env: env.map(|(name, value)| (name, value.to_owned())).to_vec(),
            ttl: self.ttl,
            layout: super::layout(),
        }
    }
}

/// A holder to start: what it is asked to do, set with the methods below.
#[derive(Debug, Clone)]
#[must_use = "a holder starts on spawn()"]
pub struct Spawn {
    child: &'static str,
    env: Vec<(&'static str, String)>,
    ttl: Duration,
    layout: Layout,
}

impl Spawn {
    /// Claims node `node` (waiting up to 20 s for its holder's lease to expire), not the
    /// lowest free one.
    pub fn node(self, node: u64) -> Spawn {
        self.env(child::NODE, node.to_string())
    }

    /// Mints `count` IDs, then exits.
    pub fn count(self, count: usize) -> Spawn {
        self.env(child::COUNT, count.to_string())
    }

    /// The lease time.
    pub fn ttl(mut self, ttl: Duration) -> Spawn {
        self.ttl = ttl;
        self
    }

    /// The layout to claim and mint with; [`layout`](super::layout) (16 nodes) otherwise.
    pub fn layout(mut self, layout: Layout) -> Spawn {
        self.layout = layout;
        self
    }

    /// The clock to mint on.
    pub fn clock(self, clock: HolderClock) -> Spawn {
        match clock {
            HolderClock::Monotonic => self,
            HolderClock::Precise => self.env(child::CLOCK, "precise".to_owned()),
        }
    }

    /// Waits up to 30 s for a node when none is free or the engine does not answer.
    pub fn wait(self) -> Spawn {
        self.env(child::WAIT, "1".to_owned())
    }

    /// Runs on the stepped clock in `file` ([`crate::clock`]: `+0`, `-3`; see
    /// [`step_clock`](crate::clock::step_clock)), read at every call.
    pub fn faketime(self, file: &Path) -> Spawn {
        let [preload, clock] = crate::clock::environment(file);
        self.env(preload.0, preload.1).env(clock.0, clock.1)
    }

    fn env(mut self, name: &'static str, value: String) -> Spawn {
        self.env.push((name, value));
        self
    }

    /// Starts it.
    pub fn spawn(self) -> Holder {
        let ttl = self.ttl.as_millis().to_string();
        let layout = child::encode_layout(&self.layout);
        let mut env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(name, value)| (*name, value.as_str()))
            .collect();
        env.extend([(child::TTL_MS, ttl.as_str()), (child::LAYOUT, layout.as_str())]);
        Holder::spawn(self.child, &env)
    }
}

/// A running holder and the lines it printed so far.
pub struct Holder {
    /// The process.
    pub child: Child,
    /// Its lines not read yet.
    pub lines: mpsc::Receiver<String>,
    /// Its lines read so far.
    pub seen: Vec<String>,
}

impl Holder {
    /// Runs this test binary again as a holder: only its test `child` (which reads what to
    /// do from `env`), with stdin and stdout piped to this process.
    fn spawn(child: &str, env: &[(&str, &str)]) -> Holder {
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .args(["--exact", child, "--nocapture", "--test-threads=1"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = send.send(line);
            }
        });
        Holder {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Reads lines until one satisfies `done`, for at most `timeout`.
    pub fn wait_for(&mut self, timeout: Duration, done: impl Fn(&[String]) -> bool) {
        let start = Instant::now();
        while !done(&self.seen) {
            let left = timeout.saturating_sub(start.elapsed());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(mpsc::RecvTimeoutError::Timeout | mpsc::RecvTimeoutError::Disconnected) => panic!(
                    "waited {:?} (the limit {timeout:?}); lines so far: {:?}",
                    start.elapsed(),
                    tail(&self.seen)
                ),
            }
        }
    }

    /// The node it claimed, once it has.
    ///
    /// # Panics
    ///
    /// When it was refused, or said neither within [`CLAIM_GUARD`](super::CLAIM_GUARD)
    /// (longer than a holder tries).
    pub fn node(&mut self) -> u64 {
        self.wait_for(super::CLAIM_GUARD, |seen| {
            seen.iter()
                .any(|l| l.starts_with("node ") || l.starts_with("refused "))
        });
        let line = self
            .seen
            .iter()
            .find(|l| l.starts_with("node "))
            .unwrap_or_else(|| panic!("no lease: {:?}", self.seen));
        line.split(' ').nth(1).unwrap().parse().unwrap()
    }

    /// Waits until it has claimed a node and minted `count` IDs, for
    /// [`HANG_GUARD`](crate::HANG_GUARD) at most once it has claimed.
    ///
    /// # Panics
    ///
    /// When it was refused, or has not minted them by then.
    pub fn wait_for_ids(&mut self, count: usize) {
        self.node();
        self.wait_for(crate::HANG_GUARD, |seen| count_ids(seen) >= count);
    }

    /// The number of its claim (`node N C`: a generation, a revision), once it has one.
    pub fn claim(&mut self) -> i64 {
        self.node();
        super::lines::claim(&self.seen)
    }

    /// Reads the lines it has printed, without waiting.
    pub fn read(&mut self) {
        self.seen.extend(self.lines.try_iter());
    }

    /// Whether it has not exited yet.
    pub fn runs(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Sends it `signal` (`-STOP`, `-CONT`, `-KILL`), unless it has exited: a holder can
    /// exit (its claim lost) as it is frozen, and once it is waited for, its process ID may
    /// be another process's. Whether it was sent.
    pub fn signal(&mut self, signal: &str) -> bool {
        if !self.runs() {
            return false;
        }
        crate::signal(self.child.id(), signal);
        true
    }

    /// Waits for it to exit, then returns every line.
    pub fn finish(mut self, timeout: Duration) -> Vec<String> {
        let start = Instant::now();
        loop {
            if self.child.try_wait().unwrap().is_some() {
                break;
            }
            if start.elapsed() >= timeout {
                self.seen.extend(self.lines.try_iter());
                panic!(
                    "holder did not exit in {timeout:?}: {} lines, {} ids, the last {:?}; its threads:\n{}",
                    self.seen.len(),
                    count_ids(&self.seen),
                    tail(&self.seen),
                    threads(self.child.id())
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // The reader thread ends at the pipe's end, which the exit closed: the guard is
        // for a pipe some other process holds open.
        while let Ok(line) = self.lines.recv_timeout(crate::HANG_GUARD) {
            self.seen.push(line);
        }
        std::mem::take(&mut self.seen)
    }

    /// Kills it and returns every line.
    pub fn finish_killed(mut self) -> Vec<String> {
        // Also for a holder that has exited and been waited for already.
        let _ = self.child.kill();
        // A loaded machine can take seconds to tear a process down.
        self.finish(crate::HANG_GUARD)
    }

    /// Ends a `hold` child: closes its stdin, so it drops its lease and exits.
    pub fn close(mut self) -> Vec<String> {
        drop(self.child.stdin.take());
        self.finish(crate::HANG_GUARD)
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What each thread of process `pid` is doing, a line each, from `/proc/PID/task/*`: its
/// name, its state, the kernel function it waits in (`wchan`) and its system call
/// (`syscall`: the number and its arguments, or `running`); for a holder that hangs.
fn threads(pid: u32) -> String {
    let read = |path: &Path| {
        std::fs::read_to_string(path).map_or_else(|error| format!("({error})"), |text| text.trim().to_owned())
    };
    let tasks = Path::new("/proc").join(pid.to_string()).join("task");
    let Ok(entries) = std::fs::read_dir(&tasks) else {
        return format!("  (no {}: the process has gone)", tasks.display());
    };
    let mut lines: Vec<String> = entries
        .filter_map(Result::ok)
        .map(|task| {
            let dir = task.path();
            let status = read(&dir.join("status"));
            let state = status
                .lines()
                .find_map(|line| line.strip_prefix("State:"))
                .unwrap_or("?")
                .trim()
                .to_owned();
            format!(
                "  {} {}: state {state}, wchan {}, syscall {}",
                task.file_name().to_string_lossy(),
                read(&dir.join("comm")),
                read(&dir.join("wchan")),
                read(&dir.join("syscall")),
            )
        })
        .collect();
    lines.sort();
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::threads;

    #[test]
    fn threads_names_each_thread_with_its_state_and_system_call() {
        let spawned = std::thread::Builder::new()
            .name("parked-thread".into())
            .spawn(std::thread::park)
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let text = threads(std::process::id());
        let parked = text
            .lines()
            .find(|line| line.contains(" parked-thread: "))
            .unwrap_or_else(|| panic!("{text}"));
        assert!(parked.contains("state S (sleeping)"), "{parked}");
        // futex(2) is system call 202 on x86_64.
        #[cfg(target_arch = "x86_64")]
        assert!(parked.contains("syscall 202 "), "{parked}");
        spawned.thread().unpark();
        spawned.join().unwrap();
        assert_eq!(
            threads(u32::MAX),
            "  (no /proc/4294967295/task: the process has gone)"
        );
    }
}
