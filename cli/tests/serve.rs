//! `atomflake serve` as a process: its flags, exit codes and log lines, signals (SIGTERM's
//! drain, SIGHUP's reload, SIGSTOP past a lease), the open-file limit, leases on
//! PostgreSQL and etcd, high-water files and clocks moved back; driven by clients no one
//! here wrote: `curl`, and Python's `grpcio`. The service's behaviour is tested
//! in-process in `serve/tests/serve.rs`.

use atomflake::{Id, Layout};
use atomflake_test_servers::clients::{
    PythonClient, curl, http_get, ids_of, metric, retry_for, spawn_piped, tls_pki,
};
use atomflake_test_servers::files::{modified, replace, replace_keeping_stamp};
use atomflake_test_servers::postgres as pg;
use atomflake_test_servers::{HANG_GUARD, now_ms, skip, wait_for, wait_until};
use atomflake_test_servers::{Killed, etcd};
use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[path = "serve/otlp.rs"]
mod otlp;

/// A running `atomflake serve` on a free loopback port, killed when dropped.
struct Server {
    child: Child,
    address: String,
    /// Its stderr lines after the one that gave the address.
    stderr: mpsc::Receiver<String>,
    /// Its lease time (`--ttl`), on a lease.
    lease_time: Option<Duration>,
    /// Its own directory for high-water files (`ATOMFLAKE_HIGH_WATER`), removed when
    /// dropped; a test that shares one between servers passes `--high-water`.
    _state: StateDir,
}

/// A fresh directory under the target's temporary directory, its own for each call,
/// removed when dropped.
struct StateDir(std::path::PathBuf);

impl StateDir {
    fn new(name: &str) -> StateDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        StateDir(tempdir(&format!("{name}-{n}")))
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("a UTF-8 path")
    }
}

impl Drop for StateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `atomflake serve` on a free loopback port with `args` and `env`, `ATOMFLAKE_NODE` and
/// `ATOMFLAKE_LEASE` unset and `ATOMFLAKE_HIGH_WATER` at `state`.
fn serve_command(args: &[&str], env: &[(&str, &str)], state: &StateDir) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_atomflake"));
    command
        .arg("serve")
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
        .env_remove("ATOMFLAKE_NODE")
        .env_remove("ATOMFLAKE_LEASE")
        .env("ATOMFLAKE_HIGH_WATER", &state.0)
        .envs(env.iter().copied());
    command
}

impl Server {
    fn start(args: &[&str]) -> Server {
        Server::start_with(args, &[])
    }

    /// [`Server::start`] with `env` added to its environment.
    fn start_with(args: &[&str], env: &[(&str, &str)]) -> Server {
        let state = StateDir::new("serve-state");
        let mut child = serve_command(args, env, &state)
            .stderr(Stdio::piped())
            .spawn()
            .expect("the atomflake binary runs");
        let (lines, stderr) = mpsc::channel();
        let reader = BufReader::new(child.stderr.take().unwrap());
        std::thread::spawn(move || {
            for line in reader.lines().map_while(Result::ok) {
                let _ = lines.send(line);
            }
        });
        // A leased server says what it claimed first.
        let first = std::iter::from_fn(|| stderr.recv_timeout(HANG_GUARD).ok())
            .find(|line| line.contains("listening on"))
            .expect("atomflake serve says where it listens");
        let address = first
            .split_whitespace()
            .find(|word| word.starts_with("127.0.0.1:"))
            .unwrap_or_else(|| panic!("no address in {first:?}"))
            .to_owned();
        let lease_time = args
            .iter()
            .position(|&arg| arg == "--ttl")
            .filter(|_| args.contains(&"--lease"))
            .map(|at| Duration::from_secs(args[at + 1].parse().expect("--ttl in seconds")));
        Server {
            child,
            address,
            stderr,
            lease_time,
            _state: state,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    /// Sends SIGTERM and waits for the exit: its status and the rest of its stderr.
    fn stop(self) -> (ExitStatus, String) {
        signal(&self, "-TERM");
        self.exit()
    }

    /// Waits for the exit: its status and the rest of its stderr. Panics (and the drop
    /// kills it) if it is still running a [`HANG_GUARD`] after its last line.
    fn exit(mut self) -> (ExitStatus, String) {
        let mut rest = Vec::new();
        while let Ok(line) = self.stderr.recv_timeout(HANG_GUARD) {
            rest.push(line);
        }
        let rest = rest.join("\n");
        // Its stderr closes as it exits, a moment before it can be waited for.
        let deadline = Instant::now() + HANG_GUARD;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return (status, rest);
            }
            assert!(
                Instant::now() < deadline,
                "still running {HANG_GUARD:?} after its last line: {rest}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How far before a request's start its IDs' times may lie: the server's default clock is
/// read on the minting path as the time its discipline thread stored, a tick late while
/// that thread has not run in this millisecond, more while a loaded machine keeps it from
/// running. A second: still the time of the request, never another clock's or epoch's.
const CLOCK_LAG_MS: u64 = 1_000;

/// Checks that every ID decodes, by `atomflake decode`, to `node` and a time in
/// `from..=to` (Unix ms).
fn assert_decode(ids: &[u64], layout: &str, node: u64, from: u64, to: u64) {
    let output = Command::new(env!("CARGO_BIN_EXE_atomflake"))
        .args(["decode", "--json", "--layout", layout])
        .args(ids.iter().map(u64::to_string))
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let lines = String::from_utf8(output.stdout).unwrap();
    assert_eq!(lines.lines().count(), ids.len());
    for line in lines.lines() {
        let decoded: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(decoded["node"], node, "{line}");
        let unix_ms = decoded["unix_ms"].as_u64().unwrap();
        assert!(
            (from..=to).contains(&unix_ms),
            "{line}: not minted in {from}..={to}"
        );
    }
}

#[test]
fn threads_sets_the_runtimes_worker_threads() {
    let test = "threads_sets_the_runtimes_worker_threads";
    for threads in [1, 3] {
        let server = Server::start(&["--node", "5", "--threads", &threads.to_string()]);
        let Some((status, body)) = curl(&server.url("/v1/ids?count=2")) else {
            skip(test, "no curl");
            return;
        };
        assert_eq!(status, 200, "{body}");
        // The workers are named for the server; the other threads have names of their own.
        let tasks = format!("/proc/{}/task", server.child.id());
        let workers = std::fs::read_dir(&tasks)
            .unwrap()
            .filter(|task| {
                let comm = std::fs::read_to_string(task.as_ref().unwrap().path().join("comm")).unwrap();
                comm.trim_end() == "atomflake-serve"
            })
            .count();
        assert_eq!(workers, threads, "worker threads in {tasks}");
        let (status, _) = server.stop();
        assert!(status.success());
    }
}

/// Each log line of `lines` as a JSON object: its `event`, having checked that it has a
/// timestamp, a level and a message, and that no line is anything else.
fn json_events(lines: &str) -> Vec<String> {
    lines
        .lines()
        .map(|line| {
            let object: serde_json::Value =
                serde_json::from_str(line).unwrap_or_else(|err| panic!("{err}: not JSON: {line}"));
            for field in ["timestamp", "level", "message", "target"] {
                assert!(object[field].is_string(), "no {field} in {line}");
            }
            object["event"]
                .as_str()
                .unwrap_or_else(|| panic!("no event in {line}"))
                .to_owned()
        })
        .collect()
}

#[test]
fn log_format_json_writes_one_object_per_line_for_each_event() {
    // The first line (where it listens) is read by `start`.
    let server = Server::start(&["--node", "6", "--log-format", "json"]);
    let (status, rest) = server.stop();
    assert!(status.success(), "{status}: {rest}");
    assert_eq!(json_events(&rest), ["draining", "stopped"]);

    // The first line, and a start that fails: its error is a JSON line too.
    let state = StateDir::new("serve-json");
    let output = serve_command(
        &["--node", "6", "--log-format", "json", "--max-count", "0"],
        &[],
        &state,
    )
    .output()
    .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(json_events(&stderr), ["failed"], "{stderr}");
    assert!(stderr.contains("--max-count 0 is out of range"), "{stderr}");

    let first = first_line(serve_command(
        &["--node", "6"],
        &[("ATOMFLAKE_LOG_FORMAT", "json")],
        &state,
    ));
    assert_eq!(json_events(&first), ["listening"]);
    let object: serde_json::Value = serde_json::from_str(&first).unwrap();
    assert_eq!(
        (&object["nodes"], &object["layout"]),
        (&"6".into(), &"twitter".into())
    );
    assert!(
        object["address"].as_str().unwrap().starts_with("127.0.0.1:"),
        "{first}"
    );
}

#[test]
fn a_server_without_one_node_source_is_refused() {
    for (args, error) in [
        (
            &[][..],
            "atomflake: give exactly one of --node (or ATOMFLAKE_NODE), --statefulset and --lease: servers of one ID space must not share a node\n",
        ),
        (
            &["--node", "1", "--statefulset"][..],
            "atomflake: give exactly one of --node (or ATOMFLAKE_NODE), --statefulset and --lease: servers of one ID space must not share a node\n",
        ),
        (
            &["--node", "1024"][..],
            "atomflake: node 1024 is out of range: the layout allows 0..=1023\n",
        ),
        (
            &["--node", "1", "--max-count", "0"][..],
            "atomflake: --max-count 0 is out of range: allowed 1..=1048576\n",
        ),
        (
            &["--node", "1", "--header-timeout", "0"][..],
            "atomflake: --header-timeout 0 is out of range: allowed 1..=3600\n",
        ),
        (
            &["--node", "1", "--idle-timeout", "3601"][..],
            "atomflake: --idle-timeout 3601 is out of range: allowed 1..=3600\n",
        ),
        (
            &["--node", "1", "--stall-timeout", "0"][..],
            "atomflake: --stall-timeout 0 is out of range: allowed 1..=3600\n",
        ),
        (
            &["--node", "1", "--stall-timeout", "3601"][..],
            "atomflake: --stall-timeout 3601 is out of range: allowed 1..=3600\n",
        ),
        (
            &["--node", "1", "--max-connection-age", "0"][..],
            "atomflake: --max-connection-age 0 is out of range: allowed 1..=2592000\n",
        ),
        (
            &["--node", "1", "--max-connection-age", "2592001"][..],
            "atomflake: --max-connection-age 2592001 is out of range: allowed 1..=2592000\n",
        ),
        (
            &["--node", "1", "--max-connection-age-grace", "0"][..],
            "atomflake: --max-connection-age-grace 0 is out of range: allowed 1..=3600\n",
        ),
        (
            &["--node", "1", "--max-connection-age-grace", "3601"][..],
            "atomflake: --max-connection-age-grace 3601 is out of range: allowed 1..=3600\n",
        ),
        (
            &["--node", "1", "--max-connections", "0"][..],
            "atomflake: --max-connections 0 is out of range: allowed 1..=",
        ),
        (
            &["--node", "1", "--threads", "0"][..],
            "atomflake: --threads 0 is out of range: allowed 1..=1024\n",
        ),
        (
            &["--node", "1", "--threads", "1025"][..],
            "atomflake: --threads 1025 is out of range: allowed 1..=1024\n",
        ),
        (
            &["--node", "1", "--ids-rate", "100"][..],
            "atomflake: --ids-rate 100 is out of range: allowed 4096..=9007199254740992\n",
        ),
        (
            &["--node", "1", "--cors-origin", "app.example.com"][..],
            "atomflake: CORS origin \"app.example.com\" is invalid: allowed * or SCHEME://HOST[:PORT] (http or https, no path)\n",
        ),
        (
            &["--node", "1", "--layout", "nope"][..],
            "atomflake: unknown layout \"nope\": the presets are twitter, discord, instagram, sonyflake, mastodon, javascript\n",
        ),
        // Only a leased node can be claimed afresh.
        (
            &["--node", "1", "--reclaim"][..],
            "error: the following required arguments were not provided:\n  --lease <URL>\n\n\
             Usage: atomflake serve --lease <URL> --listen <ADDR> --node <N[,N...]> --reclaim\n\n\
             For more information, try '--help'.\n",
        ),
    ] {
        let state = StateDir::new("serve-refused");
        let output = serve_command(args, &[], &state).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        // The allowed range of --max-connections depends on this machine's file limit.
        let stderr = if error.ends_with("..=") {
            stderr
                .split_inclusive("..=")
                .next()
                .unwrap_or_default()
                .to_owned()
        } else {
            stderr
        };
        assert_eq!(
            (output.status.code(), stderr),
            (Some(2), error.to_owned()),
            "{args:?}"
        );
    }
}

/// The first node of a server, from `GET /v1/layout`.
fn node_of(server: &Server) -> u64 {
    let (status, body) = curl(&server.url("/v1/layout")).expect("curl");
    assert_eq!(status, 200, "{body}");
    let layout: serde_json::Value = serde_json::from_str(&body).unwrap();
    layout["nodes"][0].as_u64().unwrap()
}

/// The flags of a server on a lease in `namespace` of the store at `url`, with a lease
/// time of 2 s.
fn lease_flags<'a>(url: &'a str, namespace: &'a str) -> [&'a str; 6] {
    ["--lease", url, "--namespace", namespace, "--ttl", "2"]
}

/// The refusals a server may answer in a row: `503 cannot mint now`, while the store of
/// its next mark is overdue, as on a busy machine whose database or disk answers late. On
/// a lease, the lease is kept or lost within its lease time of the last renewal, so such
/// refusals end within the lease time: the server decided the first no earlier than it
/// was asked and the last no later than it answered, so the last refused request sent
/// more than a lease time after the first refused answer came back is a refusal too many.
/// Off a lease (a high-water file) nothing bounds them but the hang guard. Counts them
/// for the report.
struct Refusals {
    /// How long after the first refused answer of a run a request may still be refused:
    /// the server's lease time (`--ttl`), or the [`HANG_GUARD`] off a lease.
    within: Duration,
    /// When the first refused answer of this run came back.
    first_answered: Option<Instant>,
    /// Refused answers in all.
    count: u32,
}

impl Refusals {
    /// For the answers of `server`.
    fn of(server: &Server) -> Refusals {
        Refusals {
            within: server.lease_time.unwrap_or(HANG_GUARD),
            first_answered: None,
            count: 0,
        }
    }

    /// Takes the answer to a request sent at `sent`: whether it is a transient refusal
    /// (ask again); 200 ends a run of refusals. Any other answer fails.
    fn refused(&mut self, sent: Instant, status: u16, body: &str) -> bool {
        if status != 503 || !body.contains("cannot mint now") {
            assert_eq!(status, 200, "{body}");
            self.first_answered = None;
            return false;
        }
        self.count += 1;
        let first = *self.first_answered.get_or_insert_with(Instant::now);
        let (since, within) = (sent.saturating_duration_since(first), self.within);
        assert!(
            since <= within,
            "refused {since:?} after the first refusal of the run, past {within:?} (the lease \
             time, or the hang guard off a lease), {} in all: {body}",
            self.count
        );
        true
    }
}

/// `count` IDs from `server` over HTTP, asking again after a transient refusal
/// ([`Refusals`]).
fn get_ids(server: &Server, count: u32) -> Vec<u64> {
    let mut refusals = Refusals::of(server);
    loop {
        let sent = Instant::now();
        let (status, body) = curl(&server.url(&format!("/v1/ids?count={count}"))).expect("curl");
        if !refusals.refused(sent, status, &body) {
            if refusals.count > 0 {
                println!("{} transient refusals before an answer", refusals.count);
            }
            return ids_of(&body);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn signal(server: &Server, signal: &str) {
    atomflake_test_servers::signal(server.child.id(), signal);
}

/// The first line `command` writes on stderr; then it is killed.
fn first_line(mut command: Command) -> String {
    let mut child = Killed(command.stderr(Stdio::piped()).spawn().unwrap());
    let mut first = String::new();
    BufReader::new(child.0.stderr.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    first
}

/// A frozen database, thawed (`SIGCONT`) when dropped.
struct Thawed<'a>(&'a pg::Server);

impl Drop for Thawed<'_> {
    fn drop(&mut self) {
        self.0.signal_all("-CONT");
    }
}

/// Whether process `pid` catches `SIGTERM` (bit 14 of `SigCgt` in its status).
fn catches_sigterm(pid: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << 14) != 0)
}

#[test]
fn a_sigterm_during_the_claim_releases_the_node_once_claimed_and_serves_nothing() {
    let Some(database) = pg::Server::start("serve-start-term") else {
        return;
    };
    let url = database.url();
    let lease = ["--lease", url.as_str(), "--namespace", "start", "--ttl", "60"];
    // The database frozen: the claim waits for it. Thawed however the test ends, so that
    // the server's own drop can stop it.
    database.signal_all("-STOP");
    let thawed = Thawed(&database);
    let state = StateDir::new("serve-start-term");
    let mut child = Killed(
        serve_command(&lease, &[], &state)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let child = &mut child.0;
    let deadline = Instant::now() + HANG_GUARD;
    while !catches_sigterm(child.id()) {
        assert!(Instant::now() < deadline, "SIGTERM never caught");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(300));
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    drop(thawed);
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}: {stderr}");
    assert!(
        stderr.contains("atomflake serve: claimed node 0 of lease namespace \"start\""),
        "{stderr}"
    );
    assert!(
        stderr.ends_with(
            "atomflake serve: a signal during start-up: stopped before serving; node 0 released\n"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("listening"), "{stderr}");
    // Released: the next server gets node 0 at once, within a lease time of 60 s.
    let next = Server::start(&lease);
    assert_eq!(node_of(&next), 0);
    let (status, stderr) = next.stop();
    assert!(status.success(), "{status}: {stderr}");
}

/// Freezes `server` (`SIGSTOP`) past its lease time of 2 s and starts a successor on
/// `lease`: it gets `node`, the lapsed one, and its first 4096 IDs start past `last`, the
/// last ID the frozen server handed out (the mark in the lease). The successor and its IDs.
fn frozen_past_its_lease(server: &Server, lease: &[&str], node: u64, last: u64) -> (Server, Vec<u64>) {
    signal(server, "-STOP");
    std::thread::sleep(Duration::from_millis(4_500));
    let successor = Server::start(lease);
    assert_eq!(
        node_of(&successor),
        node,
        "the lapsed node is the lowest free one"
    );
    let ids = get_ids(&successor, 4096);
    assert!(ids[0] > last, "the successor started below the mark");
    (successor, ids)
}

#[test]
fn servers_on_one_lease_namespace_never_hand_out_an_id_twice_and_a_frozen_one_stops() {
    let Some(database) = pg::Server::start("serve-lease") else {
        return;
    };
    let url = database.url();
    let lease = lease_flags(&url, "serve");
    // It stays up once its lease is lost, so that its answers can be seen.
    let first = Server::start(&[&lease[..], &["--stay-stopped"]].concat());
    let second = Server::start(&lease);
    let (first_node, second_node) = (node_of(&first), node_of(&second));
    assert_ne!(first_node, second_node, "two servers got one node");
    let mut all = Vec::new();
    let before_freeze = get_ids(&first, 4096);
    all.extend(&before_freeze);
    all.extend(get_ids(&second, 4096));

    // Frozen past its lease time: its node is free for a third server, which starts past
    // every ID the first minted (the mark in the lease).
    let (third, successor) =
        frozen_past_its_lease(&first, &lease, first_node, *before_freeze.last().unwrap());
    all.extend(&successor);

    // Woken, the first hands out nothing more: its health is red and requests get 503.
    // Once it has found its lease lost, it is not alive either: only a restart helps.
    signal(&first, "-CONT");
    let (status, body) = curl(&first.url("/healthz")).unwrap();
    assert_eq!(status, 503, "a frozen server past its lease is healthy: {body}");
    let (status, body) = curl(&first.url("/v1/ids?count=10")).unwrap();
    assert_eq!(status, 503, "a frozen server past its lease answered: {body}");
    // It finds its lease lost at its next renewal, however late a busy machine runs it.
    let deadline = Instant::now() + HANG_GUARD;
    let (status, body) = loop {
        let (status, body) = curl(&first.url("/livez")).unwrap();
        if status != 200 || Instant::now() > deadline {
            break (status, body);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(status, 503, "a server that lost its lease is alive: {body}");
    assert!(
        body.starts_with("stopped: ") && body.contains("is lost"),
        "{body}"
    );
    all.extend(get_ids(&second, 10));
    all.extend(get_ids(&third, 10));

    let distinct: HashSet<u64> = all.iter().copied().collect();
    assert_eq!(distinct.len(), all.len(), "an ID was handed out twice");

    // SIGTERM releases the node with the exact mark: the list shows it free.
    let (status, stderr) = third.stop();
    assert!(status.success(), "{status}: {stderr}");
    assert!(
        stderr.ends_with(&format!("stopped; node {first_node} released")),
        "{stderr}"
    );
    let list = Command::new(env!("CARGO_BIN_EXE_atomflake"))
        .args(["lease", "list", "--lease", &url, "--namespace", "serve"])
        .output()
        .unwrap();
    let listed = String::from_utf8(list.stdout).unwrap();
    let row = listed
        .lines()
        .find(|line| line.split_whitespace().next() == Some(&first_node.to_string()))
        .unwrap_or_else(|| panic!("no node {first_node} in\n{listed}"));
    assert_eq!(row.split_whitespace().nth(2), Some("no"), "{listed}");
}

#[test]
fn with_reclaim_a_server_that_lost_its_lease_claims_a_fresh_node_and_serves_on() {
    let test = "with_reclaim_a_server_that_lost_its_lease_claims_a_fresh_node_and_serves_on";
    let Some(database) = pg::Server::start("serve-reclaim") else {
        return;
    };
    let url = database.url();
    let lease = lease_flags(&url, "reclaim");
    let first = Server::start(&[&lease[..], &["--reclaim"]].concat());
    let lost_node = node_of(&first);
    let mut all = get_ids(&first, 4096);
    let before_freeze = *all.last().unwrap();

    // Frozen past its lease time: a successor takes its node, past every ID it minted.
    let (successor, taken) = frozen_past_its_lease(&first, &lease, lost_node, before_freeze);
    all.extend(&taken);

    // Woken, it finds its lease lost at its next renewal and claims a fresh node (the
    // lowest free one: its own is the successor's), alive all the while.
    signal(&first, "-CONT");
    let deadline = Instant::now() + HANG_GUARD;
    let fresh = loop {
        let (status, body) = curl(&first.url("/livez")).unwrap();
        assert_eq!(status, 200, "{test}: not alive while claiming afresh: {body}");
        let node = node_of(&first);
        if node != lost_node {
            break node;
        }
        assert!(Instant::now() < deadline, "{test}: still on node {node}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(fresh, lost_node + 1, "{test}: the lowest free node");
    wait_serving(test, &first);
    let (from, after, to) = (now_ms(), get_ids(&first, 4096), now_ms());
    assert_decode(&after, "twitter", fresh, from - CLOCK_LAG_MS, to + CLOCK_LAG_MS);
    all.extend(&after);
    all.extend(get_ids(&successor, 10));
    let distinct: HashSet<u64> = all.iter().copied().collect();
    assert_eq!(distinct.len(), all.len(), "{test}: an ID was handed out twice");
    assert_eq!(metric(&first.address, "atomflake_lease_reclaims_total"), 1);

    // A SIGTERM releases the fresh node; the log says what happened in between.
    let (status, stderr) = first.stop();
    assert!(status.success(), "{test}: {status}: {stderr}");
    assert!(
        stderr.contains("the lease is lost: claiming fresh nodes")
            && stderr.contains(&format!("claimed node {fresh} afresh: serving on it")),
        "{test}: {stderr}"
    );
    assert!(
        stderr.ends_with(&format!("stopped; node {fresh} released")),
        "{test}: {stderr}"
    );
}

/// The venv of the Python clients, shared with `serve/tests/serve.rs`.
fn venv() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("serve-venv")
}

/// A fresh directory under the target's temporary directory.
fn tempdir(name: &str) -> std::path::PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Where a fleet's leases are.
enum Engine {
    Postgres(pg::Server),
    Etcd(etcd::Cluster),
}

impl Engine {
    fn url(&self) -> String {
        match self {
            Engine::Postgres(server) => server.url(),
            Engine::Etcd(cluster) => cluster.url(),
        }
    }

    /// Every database process killed at once, then started again on its data.
    fn crash_and_restart(&mut self) {
        match self {
            Engine::Postgres(server) => {
                server.stop("immediate");
                server.start_again();
            }
            Engine::Etcd(cluster) => {
                for member in 0..cluster.size() {
                    cluster.kill(member);
                }
                for member in 0..cluster.size() {
                    cluster.start_member(member);
                }
                cluster.wait_healthy();
            }
        }
    }
}

/// Waits for `server`'s health to be green, for a [`HANG_GUARD`] at most.
fn wait_serving(test: &str, server: &Server) {
    let deadline = Instant::now() + HANG_GUARD;
    loop {
        let answer = http_get(&server.address, "/healthz", HANG_GUARD);
        if matches!(answer, Ok((200, _))) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{test}: {} not serving after {HANG_GUARD:?}: {answer:?}",
            server.address
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// What one client got from one server: the IDs of each answer with status 200.
#[derive(Default)]
struct History {
    by_server: std::collections::BTreeMap<usize, Vec<u64>>,
    refused: u64,
}

/// A client thread asking the servers in `targets` (index, address) in turn for 64 IDs at
/// a time until `stop`; what it got from each.
fn spread_client(
    client: usize,
    targets: std::sync::Arc<std::sync::Mutex<Vec<(usize, String)>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<History> {
    std::thread::spawn(move || {
        let mut history = History::default();
        let mut turn = client;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let (server, address) = {
                let targets = targets.lock().unwrap();
                turn += 1;
                targets[turn % targets.len()].clone()
            };
            // A client's own patience, not a bound on the server: a frozen server stays
            // among the targets, and its clients give up on it after a second and go on.
            if let Ok((200, body)) = http_get(&address, "/v1/ids?count=64", Duration::from_secs(1)) {
                history.by_server.entry(server).or_default().extend(ids_of(&body));
            } else {
                history.refused += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        history
    })
}

/// Checks every client's history: each server's IDs in order and on its node, none twice
/// anywhere. Returns every server's IDs.
fn check_histories(test: &str, histories: &[History], nodes: &[u64]) -> Vec<Vec<u64>> {
    let mut all = Vec::new();
    let mut per_server = vec![Vec::new(); nodes.len()];
    for history in histories {
        for (&server, ids) in &history.by_server {
            assert!(
                ids.windows(2).all(|pair| pair[0] < pair[1]),
                "{test}: server {server}'s IDs out of order for one client"
            );
            for &id in ids {
                assert_eq!(
                    Layout::TWITTER.decode(Id::new(id)).node,
                    nodes[server],
                    "{test}: {id}"
                );
            }
            all.extend(ids);
            per_server[server].extend(ids);
        }
    }
    let distinct: HashSet<u64> = all.iter().copied().collect();
    assert_eq!(distinct.len(), all.len(), "{test}: an ID was handed out twice");
    per_server
}

/// Wakes `server`, frozen past its lease: it hands out nothing more, answering 503 until
/// it finds its lease lost, then drains and exits with code 1.
fn woken_past_its_lease(test: &str, server: Server) {
    signal(&server, "-CONT");
    std::thread::sleep(Duration::from_millis(500));
    for path in ["/healthz", "/v1/ids?count=1"] {
        // Refused once it has exited.
        if let Ok((status, body)) = http_get(&server.address, path, HANG_GUARD) {
            assert_eq!(
                status, 503,
                "{test}: the server frozen past its lease answered {path}: {body}"
            );
        }
    }
    let (status, stderr) = server.exit();
    assert_eq!(status.code(), Some(1), "{test}: {stderr}");
    assert!(
        stderr.contains("minting has ended for good") && stderr.contains("is lost"),
        "{test}: {stderr}"
    );
}

/// A fleet of servers in one lease namespace, with clients spread over them, through a
/// server killed (`SIGKILL`), one frozen past its lease (`SIGSTOP`) and the database
/// crashed and restarted: no ID twice in every client's history, each server's IDs in order and on
/// the node it holds, and a node taken over only past every ID handed out on it.
fn fleet(test: &str, mut engine: Engine) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    let url = engine.url();
    let lease = lease_flags(&url, "fleet");
    let mut servers: Vec<Option<Server>> = Vec::new();
    let mut nodes = Vec::new();
    // The servers clients may call: index and address.
    let targets: Arc<Mutex<Vec<(usize, String)>>> = Arc::default();
    let add = |servers: &mut Vec<Option<Server>>, nodes: &mut Vec<u64>| {
        let server = Server::start(&lease);
        nodes.push(node_of(&server));
        targets
            .lock()
            .unwrap()
            .push((servers.len(), server.address.clone()));
        servers.push(Some(server));
        servers.len() - 1
    };
    for _ in 0..3 {
        add(&mut servers, &mut nodes);
    }
    let distinct_nodes: HashSet<u64> = nodes.iter().copied().collect();
    assert_eq!(
        distinct_nodes.len(),
        3,
        "{test}: two servers got one node: {nodes:?}"
    );

    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..6)
        .map(|client| spread_client(client, Arc::clone(&targets), Arc::clone(&stop)))
        .collect();
    let pause = |ms| std::thread::sleep(Duration::from_millis(ms));
    pause(1_000);

    // SIGKILL: no release. Its node lapses after the lease time and goes to a newcomer.
    let killed = 0;
    targets.lock().unwrap().retain(|(server, _)| *server != killed);
    servers[killed].take();
    pause(3_000);
    let heir = add(&mut servers, &mut nodes);
    assert_eq!(
        nodes[heir], nodes[killed],
        "{test}: the killed server's node is the lowest free"
    );
    pause(1_000);

    // SIGSTOP past the lease: its node goes to another newcomer; woken, it serves nothing.
    let frozen = 1;
    signal(servers[frozen].as_ref().unwrap(), "-STOP");
    pause(4_500);
    let successor = add(&mut servers, &mut nodes);
    assert_eq!(
        nodes[successor], nodes[frozen],
        "{test}: the frozen server's node is the lowest free"
    );
    woken_past_its_lease(test, servers[frozen].take().unwrap());

    // The database crashes and comes back: the leases are on disk, the servers go on.
    engine.crash_and_restart();
    let live = [2, heir, successor];
    for &server in &live {
        wait_serving(test, servers[server].as_ref().unwrap());
    }
    let restarted_at = now_ms();
    pause(1_500);
    stop.store(true, Ordering::Relaxed);
    let histories: Vec<History> = clients.into_iter().map(|client| client.join().unwrap()).collect();

    let per_server = check_histories(test, &histories, &nodes);
    for (before, after) in [(killed, heir), (frozen, successor)] {
        let (last, first) = (per_server[before].iter().max(), per_server[after].iter().min());
        assert!(
            last < first,
            "{test}: server {after} minted below server {before}'s IDs on their node"
        );
    }
    for (server, ids) in per_server.iter().enumerate() {
        assert!(!ids.is_empty(), "{test}: no client got IDs from server {server}");
    }
    let after_restart = per_server
        .iter()
        .flatten()
        .filter(|&&id| Layout::TWITTER.decode(Id::new(id)).unix_ms >= restarted_at)
        .count();
    assert!(after_restart > 0, "{test}: no IDs after the database restarted");
    let refused: u64 = histories.iter().map(|history| history.refused).sum();
    println!(
        "{test}: {} IDs to 6 clients from {} servers, {refused} requests refused or cut off, {after_restart} IDs after the restart",
        per_server.iter().map(Vec::len).sum::<usize>(),
        servers.len()
    );
    for server in live {
        let (status, stderr) = servers[server].take().unwrap().stop();
        assert!(status.success(), "{test}: {status}: {stderr}");
        assert!(stderr.contains("released"), "{test}: {stderr}");
    }
}

#[test]
fn a_fleet_on_a_postgres_lease_hands_out_no_id_twice_through_a_kill_a_freeze_and_a_database_crash() {
    let test =
        "a_fleet_on_a_postgres_lease_hands_out_no_id_twice_through_a_kill_a_freeze_and_a_database_crash";
    if let Some(database) = pg::Server::start("serve-fleet") {
        fleet(test, Engine::Postgres(database));
    }
}

#[test]
fn a_fleet_on_an_etcd_lease_hands_out_no_id_twice_through_a_kill_a_freeze_and_a_cluster_crash() {
    let test = "a_fleet_on_an_etcd_lease_hands_out_no_id_twice_through_a_kill_a_freeze_and_a_cluster_crash";
    if let Some(cluster) = etcd::Cluster::start("serve-fleet", 3) {
        fleet(test, Engine::Etcd(cluster));
    }
}

/// Two clients, each asking its own server for 4,096 IDs at a time for `run`: every ID
/// they got and how many of them the other also got.
fn two_clients(first: &Server, second: &Server, run: Duration) -> (usize, usize) {
    let fetch = |address: String| {
        std::thread::spawn(move || {
            let until = std::time::Instant::now() + run;
            let mut ids = Vec::new();
            while std::time::Instant::now() < until {
                let (status, body) = http_get(&address, "/v1/ids?count=4096", HANG_GUARD).unwrap();
                assert_eq!(status, 200, "{body}");
                ids.extend(ids_of(&body));
            }
            ids
        })
    };
    let (a, b) = (fetch(first.address.clone()), fetch(second.address.clone()));
    let (a, b) = (a.join().unwrap(), b.join().unwrap());
    let seen: HashSet<u64> = a.iter().copied().collect();
    let twice = b.iter().filter(|id| seen.contains(id)).count();
    (a.len() + b.len(), twice)
}

#[test]
fn two_servers_on_one_fixed_node_hand_out_the_same_ids_and_two_on_a_lease_never_do() {
    // Started like ferroid-tonic-server's instances, each with worker 0: the same node.
    // Each keeps its high-water file in a directory of its own, as on two machines: a
    // file's lock sees only its own machine (one directory: the second is refused, see
    // `a_second_server_on_a_node_and_its_high_water_file_is_refused`).
    //
    // On Sonyflake's layout (256 IDs a 10 ms tick) a request of 4,096 IDs mints through 16
    // ticks, 160 ms of the clock at least, from each tick's first sequence: two clients
    // that ask at once make the two servers mint the same ticks, however busy the machine
    // (on Twitter's, a tick's 4,096 IDs go in one request, and two servers met in the same
    // millisecond only as often as a loaded machine let them).
    let fixed = ["--layout", "sonyflake", "--node", "0"];
    let (first, second) = (Server::start(&fixed), Server::start(&fixed));
    // Two seconds of both clients; up to five rounds.
    let mut rounds = 0;
    let (ids, twice) = loop {
        rounds += 1;
        let (ids, twice) = two_clients(&first, &second, Duration::from_secs(2));
        if twice > 0 || rounds == 5 {
            break (ids, twice);
        }
    };
    println!("fixed node 0 on both: {twice} of {ids} IDs handed out twice (round {rounds} of 2 s)");
    assert!(twice > 0, "two servers on one node minted no common ID in {ids}");
    drop((first, second));

    let Some(database) = pg::Server::start("serve-fixed-or-leased") else {
        return;
    };
    let url = database.url();
    let lease = lease_flags(&url, "pair");
    let (first, second) = (Server::start(&lease), Server::start(&lease));
    assert_ne!(
        node_of(&first),
        node_of(&second),
        "--lease handed out one node twice"
    );
    let (ids, twice) = two_clients(&first, &second, Duration::from_secs(2));
    println!("on a lease: {twice} of {ids} IDs handed out twice");
    assert_eq!(twice, 0, "servers on a lease handed out an ID twice");
    assert!(ids > 0);
}

#[test]
fn sigterm_drains_a_stream_under_way_until_the_drain_time_or_a_second_signal() {
    let test = "sigterm_drains_a_stream_under_way_until_the_drain_time_or_a_second_signal";
    let Some(streamer) = PythonClient::new(test, &venv(), "serve_stream.py") else {
        return;
    };
    // 12 M IDs take about 3 s at one Twitter node's cap, longer on a busy machine: past a
    // 1 s drain and past a second signal 0.3 s into a 60 s one however fast it runs. (A
    // drain the stream finishes within: serve/tests/serve/lifecycle.rs.)
    for drain in ["1", "60"] {
        let server = Server::start(&["--node", "5", "--drain", drain]);
        let stubs = tempdir(&format!("stream-stubs-{drain}"));
        let (mut client, mut lines) = streamer.stream(&server.address, &stubs, "12000000");
        let address = server.address.clone();
        signal(&server, "-TERM");
        std::thread::sleep(Duration::from_millis(300));
        let refused = http_get(&address, "/healthz", HANG_GUARD);
        assert!(
            matches!(&refused, Err(error) if error.kind() == std::io::ErrorKind::ConnectionRefused),
            "drain {drain}: a new connection was taken after SIGTERM: {refused:?}"
        );
        if drain == "60" {
            signal(&server, "-TERM");
        }
        let last = lines.next().unwrap().unwrap();
        let exit = client.wait().unwrap();
        let (status, stderr) = server.exit();
        assert!(status.success(), "drain {drain}: {status}: {stderr}");
        assert!(
            stderr.ends_with("atomflake serve: stopped"),
            "drain {drain}: {stderr}"
        );
        assert!(
            last.starts_with("ended ") && !exit.success(),
            "drain {drain} s: {last}"
        );
        let cut = if drain == "1" {
            "requests still under way after the drain time of 1s: closing"
        } else {
            "a second signal: closing the connections now"
        };
        assert!(stderr.contains(cut), "{stderr}");
        let _ = std::fs::remove_dir_all(stubs);
    }
}

/// What the first request of [`ids_for`] took: how long, and when it was answered (Unix
/// ms).
struct FirstAnswer {
    took: Duration,
    at_ms: u64,
}

/// IDs from `server`, 4,096 a request, for `run` after the first answer: the IDs, and the
/// first answer's timing.
fn ids_for(server: &Server, run: Duration) -> (Vec<u64>, FirstAnswer) {
    let asked = Instant::now();
    let (status, body) = http_get(&server.address, "/v1/ids?count=4096", HANG_GUARD).unwrap();
    let first = FirstAnswer {
        took: asked.elapsed(),
        at_ms: now_ms(),
    };
    assert_eq!(status, 200, "{body}");
    let mut ids = ids_of(&body);
    let until = Instant::now() + run;
    let mut refusals = Refusals::of(server);
    while Instant::now() < until {
        let sent = Instant::now();
        let (status, body) = http_get(&server.address, "/v1/ids?count=4096", HANG_GUARD).unwrap();
        if refusals.refused(sent, status, &body) {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        ids.extend(ids_of(&body));
    }
    if refusals.count > 0 {
        println!("{} transient refusals in {run:?}", refusals.count);
    }
    (ids, first)
}

/// libfaketime with this process's clock `offset` (`-3s`) in a child's environment; the
/// monotonic clocks are left alone.
fn clock_behind(offset: &str) -> [(&'static str, &str); 3] {
    [
        ("LD_PRELOAD", pg::LIBFAKETIME),
        ("FAKETIME", offset),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ]
}

/// Runs a server of node 1 whose high-water mark is kept in a fresh state directory `dir`,
/// does `before` with it and stops it cleanly, then starts it again at once with its clock
/// `behind` ([`clock_behind`]): what `before` returned, the restarted server and its state
/// directory. `None` after a skip of `test` where clocks cannot be moved.
fn restarted_behind<T>(
    test: &str,
    dir: &str,
    behind: &str,
    before: impl FnOnce(&Server) -> T,
) -> Option<(T, Server, StateDir)> {
    if !pg::can_move_clocks(test) {
        return None;
    }
    let state = StateDir::new(dir);
    let args = ["--node", "1", "--high-water", state.path()];
    let first = Server::start(&args);
    let answer = before(&first);
    let (status, stderr) = first.stop();
    assert!(status.success(), "{status}: {stderr}");
    let second = Server::start_with(&args, &clock_behind(behind));
    Some((answer, second, state))
}

#[test]
fn a_server_restarted_on_its_node_with_its_clock_3_s_behind_hands_out_no_id_twice() {
    let test = "a_server_restarted_on_its_node_with_its_clock_3_s_behind_hands_out_no_id_twice";
    // Started again at once, as after NTP stepped its clock back at boot or a VM restored
    // from a snapshot: 3 s behind, within the 10 s a restart waits for its clock.
    let behind_ms = 3_000;
    let behind = format!("-{}s", behind_ms / 1_000);
    let Some((before, second, _state)) = restarted_behind(test, "serve-restart", &behind, |first| {
        ids_for(first, Duration::from_secs(2)).0
    }) else {
        return;
    };
    let last = *before.iter().max().unwrap();
    let last_ms = Layout::TWITTER.decode(Id::new(last)).unix_ms;
    let (after, first) = ids_for(&second, Duration::from_secs(2));
    let seen: HashSet<u64> = before.iter().copied().collect();
    let twice = after.iter().filter(|id| seen.contains(id)).count();
    println!(
        "{} IDs before the restart, {} after; {twice} handed out twice; the first request after \
         the restart took {:?}",
        before.len(),
        after.len(),
        first.took
    );
    assert_eq!(
        twice,
        0,
        "{twice} of {} IDs after the restart were handed out before it",
        after.len()
    );
    assert!(after.iter().all(|&id| id > last), "an ID at or below {last}");
    // Its clock was 3 s behind: the first ID it handed out was answered 3 s after the time
    // it bears. So the restart handed out nothing until 3 s after the first run's last ID:
    // it waited for its clock to pass the mark the first run left (a restart waits at most
    // 10 s).
    let first_ms = Layout::TWITTER
        .decode(Id::new(*after.iter().min().unwrap()))
        .unix_ms;
    // That it waited, not for good, is the first request's hang guard (`ids_for`); how long
    // a restart waits, the core's tests bound.
    atomflake_test_servers::assert_restarted_from_the_mark(last_ms, first_ms, first.at_ms, behind_ms);
    let (status, stderr) = second.stop();
    assert!(status.success(), "{status}: {stderr}");
}

/// Runs `atomflake serve args…` that must refuse to start: its exit code and stderr. One
/// that serves is killed after a [`HANG_GUARD`], and the test fails.
fn refused(args: &[&str], state: &StateDir) -> (Option<i32>, String) {
    let mut child = serve_command(args, &[], state)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = Instant::now() + HANG_GUARD;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            panic!("atomflake serve {args:?} started");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn a_second_server_on_a_node_and_its_high_water_file_is_refused() {
    let state = StateDir::new("serve-locked");
    let dir = state.path();
    let first = Server::start(&["--node", "2,3", "--high-water", dir]);
    // Node 3 of twitter is held (with node 2) by the first: refused whatever else it has.
    let file = format!("{dir}/twitter-node-3.hw");
    assert_eq!(
        refused(&["--node", "3,4", "--high-water", dir], &state),
        (
            Some(1),
            format!(
                "atomflake: high-water file {file} is in use: another live generator holds its \
                 lock: another process mints on this node of this layout now, and two would \
                 hand out the same IDs\n"
            )
        )
    );
    // Node 3 of another layout is another ID space, and ATOMFLAKE_HIGH_WATER is the
    // directory unless --high-water says.
    let other = Server::start_with(
        &["--node", "3", "--layout", "sonyflake"],
        &[("ATOMFLAKE_HIGH_WATER", dir)],
    );
    assert!(Path::new(&format!("{dir}/sonyflake-node-3.hw")).exists());
    for node in [2, 3] {
        assert!(Path::new(&format!("{dir}/twitter-node-{node}.hw")).exists());
    }
    drop((first, other));

    // A directory that cannot be made: the path and the operating system's error.
    let file = format!("{dir}/a-file");
    std::fs::write(&file, "").unwrap();
    assert_eq!(
        refused(&["--node", "1", "--high-water", &format!("{file}/state")], &state),
        (
            Some(1),
            format!(
                "atomflake: cannot create the high-water directory {file}/state: Not a directory \
                 (os error 20); pass --high-water DIR (or set ATOMFLAKE_HIGH_WATER) for a \
                 writable directory, or --no-high-water to accept that a restart with the clock \
                 behind repeats IDs\n"
            )
        )
    );
    // The lease keeps the mark.
    let (code, stderr) = refused(
        &["--lease", "postgres://nobody@127.0.0.1:1/x", "--no-high-water"],
        &state,
    );
    assert_eq!(
        (code, stderr.as_str()),
        (
            Some(2),
            "atomflake: --no-high-water and --lease: the lease keeps the node's mark \
             (ATOMFLAKE_HIGH_WATER is ignored with a lease)\n"
        )
    );
}

/// `atomflake serve args…` under a shell's open-file limits `soft` and `hard`.
fn serve_under_file_limits(soft: u64, hard: u64, args: &[&str], state: &StateDir) -> Command {
    let serve = serve_command(args, &[], state);
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(format!(
            "ulimit -Sn {soft} && ulimit -Hn {hard} && exec \"$0\" \"$@\""
        ))
        .arg(serve.get_program())
        .args(serve.get_args())
        .envs(serve.get_envs().filter_map(|(key, value)| Some((key, value?))))
        .env_remove("ATOMFLAKE_NODE")
        .env_remove("ATOMFLAKE_LEASE");
    command
}

#[test]
fn the_open_file_limit_is_raised_to_the_hard_one_and_bounds_the_connections() {
    let state = StateDir::new("serve-files");
    let output = serve_under_file_limits(100, 200, &["--node", "1", "--max-connections", "500"], &state)
        .output()
        .unwrap();
    assert_eq!(
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).into_owned()
        ),
        (
            Some(2),
            "atomflake: --max-connections 500 is out of range: allowed 1..=120 (the open-file limit is 200, \
             less 16 for health checks and 64 for the server's own files)\n"
                .to_owned()
        )
    );
    let first = first_line(serve_under_file_limits(100, 200, &["--node", "1"], &state));
    assert!(
        first
            .trim_end()
            .ends_with("at most 120 connections (open-file limit 200)"),
        "{first:?}"
    );
}

#[test]
fn readyz_is_red_while_the_clock_is_behind_the_nodes_mark_and_livez_stays_green() {
    let test = "readyz_is_red_while_the_clock_is_behind_the_nodes_mark_and_livez_stays_green";
    // Restarted with its clock 8 s behind its mark: it waits for the clock (up to 10 s),
    // longer than a request waits (the server's default patience, 2 s), so it is not
    // ready, but alive.
    let (behind_ms, patience_ms) = (8_000, 2_000);
    let behind = format!("-{}s", behind_ms / 1_000);
    // The time of the first run's last ID: the mark is at or past it.
    let Some((last_ms, second, _state)) = restarted_behind(test, "serve-ready", &behind, |first| {
        for path in ["/readyz", "/healthz", "/livez"] {
            let (status, body) = http_get(&first.address, path, HANG_GUARD).unwrap();
            assert_eq!(status, 200, "{path}: {body}");
        }
        let last = *get_ids(first, 10).iter().max().unwrap();
        Layout::TWITTER.decode(Id::new(last)).unix_ms
    }) else {
        return;
    };
    let (status, body) = http_get(&second.address, "/readyz", HANG_GUARD).unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(
        body.starts_with("waiting ")
            && body.ends_with(
                "for this clock to pass the nodes' high-water mark: longer than the patience of 2s\n"
            ),
        "{body}"
    );
    let (status, body) = http_get(&second.address, "/livez", HANG_GUARD).unwrap();
    assert_eq!((status, body.as_str()), (200, "alive\n"));
    // Ready once the wait is within the patience: once its clock, `behind_ms` behind the
    // wall clock, is within `patience_ms` of the mark, which is at or past `last_ms`. A
    // lower bound in wall-clock time, from the first run's last ID, so that however late
    // a busy machine started the second server, it cannot be ready too early.
    let ready_ms = wait_for(
        "never ready",
        Duration::from_millis(100),
        || {
            let (status, _) = http_get(&second.address, "/readyz", HANG_GUARD).unwrap();
            (status == 200).then(now_ms)
        },
        String::new,
    );
    let earliest_ms = last_ms + behind_ms - patience_ms;
    assert!(
        ready_ms >= earliest_ms,
        "ready at {ready_ms} ms, before {earliest_ms} ms: the first run's last ID at {last_ms} ms, \
         plus {behind_ms} ms behind, less a patience of {patience_ms} ms"
    );
    assert_eq!(get_ids(&second, 1).len(), 1);
    println!(
        "ready {} ms after the first run's last ID, with the clock {behind_ms} ms behind",
        ready_ms - last_ms
    );
}

/// The serial number of the certificate the server at `address` shows a new connection,
/// by `openssl s_client`.
fn served_serial(address: &str, ca: &Path) -> String {
    let mut client = Command::new("openssl")
        .args(["s_client", "-connect", address, "-CAfile"])
        .arg(ca)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut pem = String::new();
    std::io::Read::read_to_string(client.stdout.as_mut().unwrap(), &mut pem).unwrap();
    let _ = client.wait();
    let mut x509 = Command::new("openssl")
        .args(["x509", "-noout", "-serial"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(x509.stdin.as_mut().unwrap(), pem.as_bytes()).unwrap();
    let output = x509.wait_with_output().unwrap();
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

/// Waits for new connections to be shown a certificate of serial `serial`, for a
/// [`HANG_GUARD`] at most (`retry_for` names the time waited).
fn wait_for_serial(address: &str, ca: &Path, serial: &str) {
    retry_for(HANG_GUARD, Duration::from_millis(100), || {
        match served_serial(address, ca) {
            served if served == serial => Ok(()),
            served => Err(format!("still {served}, not {serial}")),
        }
    });
}

/// The certificate is read again when its file changes and on SIGHUP (here with its
/// time stamp put back, so that only the signal can tell); new connections get the new
/// one, and a keep-alive connection opened before goes on with the old.
#[test]
fn the_certificate_reloads_on_a_file_change_and_on_sighup_and_open_connections_stay() {
    let test = "the_certificate_reloads_on_a_file_change_and_on_sighup_and_open_connections_stay";
    let Some(pki) = tls_pki(test) else {
        return;
    };
    let (cert, key, ca) = (pki.path("live.crt"), pki.path("live.key"), pki.path("ca.pem"));
    let serial = |name: &str| {
        let output = Command::new("openssl")
            .args(["x509", "-noout", "-serial", "-in"])
            .arg(pki.path(&format!("{name}.crt")))
            .output()
            .unwrap();
        String::from_utf8(output.stdout).unwrap().trim().to_owned()
    };
    // Put in place by rename, the key first, as a certificate manager does; with `stamps`,
    // the files keep those modification times (set before the rename).
    let install_stamped = |name: &str, stamps: Option<[std::time::SystemTime; 2]>| {
        for (i, (from, to)) in [(format!("{name}.key"), &key), (format!("{name}.crt"), &cert)]
            .into_iter()
            .enumerate()
        {
            let contents = std::fs::read(pki.path(&from)).unwrap();
            replace(to, contents, stamps.map(|stamps| stamps[i]));
        }
    };
    let install = |name: &str| install_stamped(name, None);
    install("server");
    let first = serial("server");
    let server = Server::start(&[
        "--node",
        "2",
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ]);
    assert_eq!(served_serial(&server.address, &ca), first);

    // A keep-alive HTTP/1.1 connection, opened on the first certificate.
    let script = r#"
import http.client, ssl, sys
context = ssl.create_default_context(cafile=sys.argv[2])
host, port = sys.argv[1].rsplit(":", 1)
connection = http.client.HTTPSConnection(host, int(port), context=context)
for line in sys.stdin:
    connection.request("GET", "/v1/ids?count=1")
    answer = connection.getresponse()
    body = answer.read()
    socket = connection.sock
    print(answer.status, id(socket), socket.getpeercert()["serialNumber"], flush=True)
"#;
    let (mut keeper, mut asks, mut answers) = spawn_piped(
        Command::new("python3")
            .args(["-c", script, &server.address])
            .arg(&ca),
    );
    let mut ask = || {
        std::io::Write::write_all(&mut asks, b"go\n").unwrap();
        answers.next().unwrap().unwrap()
    };
    let opened = ask();

    pki.leaf("renewed", "ca", "127.0.0.1", "IP:127.0.0.1");
    install("renewed");
    wait_for_serial(&server.address, &ca, &serial("renewed"));

    let stamps = [modified(&key), modified(&cert)];
    pki.leaf("signalled", "ca", "127.0.0.1", "IP:127.0.0.1");
    install_stamped("signalled", Some(stamps));
    std::thread::sleep(Duration::from_millis(2_500));
    assert_eq!(
        served_serial(&server.address, &ca),
        serial("renewed"),
        "reloaded without a change the watch could see"
    );
    signal(&server, "-HUP");
    wait_for_serial(&server.address, &ca, &serial("signalled"));

    // The connection opened first is the same socket, still on the first certificate.
    let later = ask();
    assert_eq!(opened, later, "the keep-alive connection was dropped or changed");
    let first_hex = first.trim_start_matches("serial=").to_ascii_uppercase();
    assert!(
        opened.starts_with("200 ") && opened.ends_with(&first_hex),
        "{opened} vs {first}"
    );
    drop(asks);
    let _ = keeper.wait();
    let (status, stderr) = server.stop();
    assert!(status.success(), "{status}: {stderr}");
    assert_eq!(
        stderr.matches("TLS certificate reloaded").count(),
        2,
        "one reload for the change, one for SIGHUP: {stderr}"
    );
}

/// With `--token-file`, SIGHUP reads the file again (here with its time stamp kept, so that
/// only the signal can tell), and no token shows in the log. What the tokens guard, and a
/// reload by a change of the file, are the service's (`serve/tests/serve.rs`).
#[test]
fn sighup_reloads_the_tokens_and_no_token_is_logged() {
    let (first, second) = ("first-token-0123456789", "second-token-0123456789");
    let state = StateDir::new("tokens");
    let file = Path::new(state.path()).join("tokens");
    std::fs::write(&file, format!("# the ops team\n{first}\n")).unwrap();
    let server = Server::start(&["--node", "4", "--token-file", file.to_str().unwrap()]);
    let get = |token: &str| {
        let output = Command::new("curl")
            .args(["-s", "--max-time", &HANG_GUARD.as_secs().to_string()])
            .args(["-o", "/dev/null", "-w", "%{http_code}"])
            .args(["-H", &format!("Authorization: Bearer {token}")])
            .arg(server.url("/v1/ids?count=1"))
            .output()
            .expect("curl runs");
        String::from_utf8(output.stdout).unwrap()
    };
    assert_eq!((get(first), get(second)), ("200".into(), "401".into()));
    replace_keeping_stamp(&file, format!("{second}\n"));
    std::thread::sleep(Duration::from_millis(2_500));
    assert_eq!(get(second), "401", "reloaded without SIGHUP");
    signal(&server, "-HUP");
    // The reload must happen; how soon is the machine's business.
    wait_until(
        &format!("{second} is not taken after SIGHUP"),
        Duration::from_millis(50),
        || get(second) == "200",
        String::new,
    );
    assert_eq!(get(first), "401");
    let (status, stderr) = server.stop();
    assert!(status.success(), "{status}: {stderr}");
    for token in [first, second] {
        assert!(!stderr.contains(token), "{token} shown: {stderr}");
    }
    assert!(stderr.contains("tokens reloaded (SIGHUP): 1"), "{stderr}");
}

/// TLS and token files that cannot be used are usage errors naming the file, before
/// anything is bound or claimed.
#[test]
fn bad_tls_and_token_files_are_usage_errors_naming_the_file() {
    let test = "bad_tls_and_token_files_are_usage_errors_naming_the_file";
    let Some(pki) = tls_pki(test) else {
        return;
    };
    let path = |name: &str| pki.path(name).display().to_string();
    let (missing, server_crt, server_key, client_key) = (
        path("missing.crt"),
        path("server.crt"),
        path("server.key"),
        path("client.key"),
    );
    let short = pki.path("short-tokens");
    std::fs::write(&short, "0123456789abcdef\nshort\n").unwrap();
    let cases = [
        (
            vec!["--tls-cert", &missing, "--tls-key", &server_key],
            format!("--tls-cert {missing}: I/O error: No such file or directory (os error 2)"),
        ),
        (
            vec!["--tls-cert", &server_crt, "--tls-key", &client_key],
            format!("--tls-key {client_key} is not the key of --tls-cert {server_crt}"),
        ),
        (
            vec!["--tls-cert", &server_key, "--tls-key", &server_key],
            format!("--tls-cert {server_key}: no PEM certificate in it"),
        ),
        (
            vec!["--tls-cert", &server_crt, "--tls-key", &server_crt],
            format!("--tls-key {server_crt}: no PEM private key in it"),
        ),
        (
            vec!["--token-file", short.to_str().unwrap()],
            format!(
                "--token-file {}: the token on line 2 has 5 characters: at least 16",
                short.display()
            ),
        ),
    ];
    for (args, expected) in cases {
        let state = StateDir::new("bad-tls");
        let output = serve_command(&[&["--node", "1"][..], &args].concat(), &[], &state)
            .output()
            .unwrap();
        assert_eq!(
            (
                output.status.code(),
                String::from_utf8_lossy(&output.stderr).into_owned()
            ),
            (Some(2), format!("atomflake: {expected}\n")),
            "{args:?}"
        );
    }
}
