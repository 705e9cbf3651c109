//! The fleet tests' harness, for every lease engine: the test binary runs itself again as
//! lease holders ([`Holder`]), which the test freezes, kills and resumes, and whose printed
//! history it checks.
//!
//! Every holder prints one line per event, stamped with its wall clock at the time:
//! `node N R` once claimed (node, and the claim's generation or revision: larger for each
//! later claim of the node), `id ID MS` per minted ID, `lease MS TEXT` when a mint is
//! refused for the lease (each distinct text once), `refused TEXT` when no lease could be
//! taken, `clock MS` with its generator's clock at start.

use crate::now_ms;
use atomflake::mark::StoreErrorKind;
use atomflake::{Clock, Generator, MintError};
use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

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
    pub fn spawn(child: &str, env: &[(&str, &str)]) -> Holder {
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
                Err(mpsc::RecvTimeoutError::Timeout | mpsc::RecvTimeoutError::Disconnected) => {
                    panic!("waited {timeout:?}; lines so far: {:?}", tail(&self.seen))
                }
            }
        }
    }

    /// The node it claimed.
    pub fn node(&mut self) -> u64 {
        self.wait_for(Duration::from_secs(20), |seen| {
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

    /// Sends it `signal` (`-STOP`, `-CONT`, `-KILL`).
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
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
                    "holder did not exit in {timeout:?}: {} lines, {} ids, the last {:?}",
                    self.seen.len(),
                    count_ids(&self.seen),
                    tail(&self.seen)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.seen.push(line);
        }
        std::mem::take(&mut self.seen)
    }

    /// Kills it and returns every line.
    pub fn finish_killed(mut self) -> Vec<String> {
        // Also for a holder that has exited and been waited for already.
        let _ = self.child.kill();
        // A loaded machine can take seconds to tear a process down.
        self.finish(Duration::from_secs(30))
    }

    /// Ends a `hold` child: closes its stdin, so it drops its lease and exits.
    pub fn close(mut self) -> Vec<String> {
        drop(self.child.stdin.take());
        self.finish(Duration::from_secs(20))
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The rest of the first line that starts with `prefix`.
pub fn field<'a>(lines: &'a [String], prefix: &str) -> &'a str {
    lines
        .iter()
        .find_map(|line| line.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} line: {:?}", tail(lines)))
}

/// The last 8 lines, for messages.
pub fn tail(lines: &[String]) -> &[String] {
    &lines[lines.len().saturating_sub(8)..]
}

/// The `(id, stamp)` of every `id` line.
pub fn ids(lines: &[String]) -> Vec<(u64, u64)> {
    lines
        .iter()
        .filter_map(|line| line.strip_prefix("id "))
        .map(|rest| {
            let (id, stamp) = rest.split_once(' ').unwrap();
            (id.parse().unwrap(), stamp.parse().unwrap())
        })
        .collect()
}

/// The `(stamp, text)` of every `lease` line.
pub fn lease_lines(lines: &[String]) -> Vec<(u64, &str)> {
    lines
        .iter()
        .filter_map(|line| line.strip_prefix("lease "))
        .map(|rest| {
            let (stamp, text) = rest.split_once(' ').unwrap();
            (stamp.parse().unwrap(), text)
        })
        .collect()
}

/// How many `id` lines.
pub fn count_ids(seen: &[String]) -> usize {
    seen.iter().filter(|l| l.starts_with("id ")).count()
}

/// Panics when an ID is there twice.
pub fn assert_unique(all: &[u64]) {
    let unique: HashSet<u64> = all.iter().copied().collect();
    assert_eq!(unique.len(), all.len(), "duplicate ids");
}

/// Mints `count` IDs, one a millisecond, printing each; stops when the lease is lost.
pub fn mint<C: Clock>(generator: &Generator<C>, count: usize) {
    println!("clock {}", generator.clock().precise_unix_ms());
    let mut out = std::io::stdout().lock();
    let mut minted = 0;
    let mut last_refusal = String::new();
    while minted < count {
        match generator.try_next_id() {
            Ok(id) => {
                writeln!(out, "id {} {}", id.get(), now_ms()).unwrap();
                minted += 1;
            }
            Err(MintError::Store(store)) => {
                let text = store.to_string();
                if text != last_refusal {
                    writeln!(out, "lease {} {text}", now_ms()).unwrap();
                    last_refusal = text;
                }
                if store.kind() == StoreErrorKind::Lost {
                    return;
                }
            }
            Err(MintError::MarkPending | MintError::SequenceExhausted { .. }) => {}
            Err(other) => panic!("{other}"),
        }
        out.flush().unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A small seeded generator for the nemesis's choices (xorshift64*).
pub struct Dice(pub u64);

impl Dice {
    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) % n
    }
}

/// Checks a fleet's history (every process's lines, in spawn order): no ID twice, each
/// process's IDs strictly increasing, and on each node every holder's IDs past every
/// earlier holder's. The number of IDs.
pub fn check_fleet_history(seed: u64, schedule: &[String], histories: &[Vec<String>]) -> usize {
    let mut owner = std::collections::HashMap::new();
    // node -> (generation, process, ids)
    let mut tenures: Vec<(u64, i64, usize, Vec<u64>)> = Vec::new();
    let mut total = 0;
    for (process, lines) in histories.iter().enumerate() {
        let minted: Vec<u64> = ids(lines).into_iter().map(|(id, _)| id).collect();
        total += minted.len();
        assert!(
            minted.windows(2).all(|pair| pair[0] < pair[1]),
            "seed {seed}: process {process}'s ids do not strictly increase"
        );
        for &id in &minted {
            if let Some(other) = owner.insert(id, process) {
                panic!(
                    "seed {seed}: id {id} minted by processes {other} and {process}; schedule {schedule:?}"
                );
            }
        }
        if let Some(claim) = lines.iter().find_map(|line| line.strip_prefix("node ")) {
            let (node, generation) = claim.split_once(' ').unwrap();
            tenures.push((
                node.parse().unwrap(),
                generation.parse().unwrap(),
                process,
                minted,
            ));
        }
    }
    tenures.sort_by_key(|&(node, generation, ..)| (node, generation));
    // Per node, in claim order: the largest id of the earlier holders, and which.
    let mut before: std::collections::HashMap<u64, (i64, usize, u64)> = std::collections::HashMap::new();
    for (node, generation, process, minted) in &tenures {
        if let (Some(&(earlier, holder, last)), Some(first)) = (before.get(node), minted.first()) {
            assert!(
                earlier < *generation,
                "seed {seed}: node {node} claimed twice as generation {generation}"
            );
            assert!(
                first > &last,
                "seed {seed}: on node {node}, process {process} (generation {generation}) started at {first}, \
                 not past process {holder}'s (generation {earlier}) last id {last}; schedule {schedule:?}"
            );
        }
        if let Some(&last) = minted.iter().max() {
            before.insert(*node, (*generation, *process, last));
        }
    }
    let nodes: HashSet<u64> = tenures.iter().map(|&(node, ..)| node).collect();
    println!(
        "seed {seed}: {total} ids from {} processes in {} tenures on nodes {nodes:?}, none twice",
        histories.len(),
        tenures.len()
    );
    total
}
