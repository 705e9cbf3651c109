//! `atomflake serve` as a process, driven by clients no one here wrote: `curl`, and
//! Python's `requests` and `grpcio` (stubs generated from the proto by `grpcio-tools`).

use atomflake::{Id, Layout};
use atomflake_test_servers::etcd;
use atomflake_test_servers::postgres as pg;
use atomflake_test_servers::{now_ms, python, skip};
use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A running `atomflake serve` on a free loopback port, killed when dropped.
struct Server {
    child: Child,
    address: String,
    /// Its stderr lines after the one that gave the address.
    stderr: mpsc::Receiver<String>,
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
        let first = std::iter::from_fn(|| stderr.recv_timeout(Duration::from_secs(30)).ok())
            .find(|line| line.contains("listening on"))
            .expect("atomflake serve says where it listens");
        let address = first
            .split_whitespace()
            .find(|word| word.starts_with("127.0.0.1:"))
            .unwrap_or_else(|| panic!("no address in {first:?}"))
            .to_owned();
        Server {
            child,
            address,
            stderr,
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
    /// kills it) if it is still running 30 s after its last line.
    fn exit(mut self) -> (ExitStatus, String) {
        let mut rest = Vec::new();
        while let Ok(line) = self.stderr.recv_timeout(Duration::from_secs(30)) {
            rest.push(line);
        }
        let rest = rest.join("\n");
        // Its stderr closes as it exits, a moment before it can be waited for.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return (status, rest);
            }
            assert!(
                Instant::now() < deadline,
                "still running 30 s after its last line: {rest}"
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

/// `curl`'s answer to a GET: the status and the body; `None` without curl.
fn curl(url: &str) -> Option<(u16, String)> {
    let output = Command::new("curl")
        .args(["-s", "--max-time", "10", "-w", "\n%{http_code}", url])
        .output()
        .ok()?;
    assert!(output.status.success(), "curl {url}: {output:?}");
    let text = String::from_utf8(output.stdout).unwrap();
    let (body, status) = text.rsplit_once('\n').unwrap();
    Some((status.parse().unwrap(), body.to_owned()))
}

/// The IDs of a `{"ids": ["...", ...]}` body.
fn ids_of(body: &str) -> Vec<u64> {
    let value: serde_json::Value = serde_json::from_str(body).unwrap();
    value["ids"]
        .as_array()
        .unwrap_or_else(|| panic!("no ids in {body}"))
        .iter()
        .map(|id| id.as_str().expect("IDs are strings").parse().unwrap())
        .collect()
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

#[test]
fn curl_gets_ids_that_decode_to_the_servers_node_and_the_time_of_the_request() {
    let test = "curl_gets_ids_that_decode_to_the_servers_node_and_the_time_of_the_request";
    let server = Server::start(&["--node", "5", "--max-count", "1000"]);
    let before = now_ms() - CLOCK_LAG_MS;
    let Some((status, body)) = curl(&server.url("/v1/ids?count=1000")) else {
        skip(test, "no curl");
        return;
    };
    let after = now_ms();
    assert_eq!(status, 200, "{body}");
    let ids = ids_of(&body);
    assert_eq!(ids.len(), 1000);
    assert!(ids.windows(2).all(|pair| pair[0] < pair[1]), "not in order");
    assert_decode(&ids, "twitter", 5, before, after);
    let (status, body) = curl(&server.url("/v1/ids")).unwrap();
    assert_eq!((status, ids_of(&body).len()), (200, 1), "count defaults to 1");

    for (query, error) in [
        ("count=0", "count 0 is out of range: allowed 1..=1000"),
        ("count=1001", "count 1001 is out of range: allowed 1..=1000"),
        (
            "count=-1",
            r#"count \"-1\" is not a whole number: allowed 1..=1000"#,
        ),
        (
            "count=99999999999999999999",
            r#"count \"99999999999999999999\" is not a whole number: allowed 1..=1000"#,
        ),
        ("size=2", r#"unknown parameter \"size\": allowed count"#),
    ] {
        let answer = curl(&server.url(&format!("/v1/ids?{query}"))).unwrap();
        assert_eq!(answer, (400, format!(r#"{{"error":"{error}"}}"#)), "{query}");
    }

    let id = ids[0];
    let (status, body) = curl(&server.url(&format!("/v1/ids/{id}"))).unwrap();
    assert_eq!(status, 200, "{body}");
    let decoded: serde_json::Value = serde_json::from_str(&body).unwrap();
    let parts = Layout::TWITTER.decode(Id::new(id));
    assert_eq!(
        (
            &decoded["id"],
            &decoded["node"],
            &decoded["sequence"],
            &decoded["unix_ms"]
        ),
        (
            &id.to_string().into(),
            &5.into(),
            &parts.sequence.into(),
            &parts.unix_ms.into()
        )
    );
    for (text, error) in [
        ("x1", r#"invalid ID \"x1\": "#),
        ("9223372036854775808", r#"invalid ID \"9223372036854775808\": "#),
    ] {
        let (status, body) = curl(&server.url(&format!("/v1/ids/{text}"))).unwrap();
        assert_eq!(status, 400, "{body}");
        assert!(body.starts_with(&format!(r#"{{"error":"{error}"#)), "{body}");
    }

    assert_eq!(curl(&server.url("/healthz")).unwrap(), (200, "serving\n".into()));
    let (status, metrics) = curl(&server.url("/metrics")).unwrap();
    assert_eq!(status, 200);
    for line in [
        "atomflake_ids_served_total{api=\"http\"} 1001",
        "atomflake_requests_total{api=\"http\",outcome=\"invalid\"} 7",
        "atomflake_serving 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "no {line:?} in\n{metrics}");
    }
    let (status, stderr) = server.stop();
    assert!(status.success(), "{status}: {stderr}");
    assert!(stderr.ends_with("atomflake serve: stopped"), "{stderr}");
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

/// The Python of a venv with the clients' packages from `PyPI`, made once per run of
/// these tests (they run on threads of one process and share it); `None` after a skip.
fn python_clients(test: &str) -> Option<std::path::PathBuf> {
    static VENV: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    let mut made_here = false;
    let python = VENV.get_or_init(|| {
        made_here = true;
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("serve-venv");
        python::venv(
            test,
            &dir,
            &[
                "requests",
                "grpcio",
                "grpcio-tools",
                "grpcio-health-checking",
                "grpcio-reflection",
                "openapi-spec-validator",
            ],
        )
    });
    if python.is_none() && !made_here {
        skip(
            test,
            "no venv with the Python clients (see the first test's skip)",
        );
    }
    python.clone()
}

/// A client script of `tests/`, run by [`python_clients`]' Python.
struct PythonClient {
    python: PathBuf,
    script: PathBuf,
}

impl PythonClient {
    /// `tests/NAME`; `None` after a skip.
    fn new(test: &str, name: &str) -> Option<PythonClient> {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join(name);
        python_clients(test).map(|python| PythonClient { python, script })
    }

    /// `SCRIPT ADDRESS PROTO STUBS ARG`: the script against `server`, its gRPC stubs
    /// compiled from the protocol's directory into `stubs`.
    fn command(&self, server: &Server, stubs: &Path, arg: &str) -> Command {
        let proto = Path::new(env!("CARGO_MANIFEST_DIR")).join("../proto");
        let mut command = Command::new(&self.python);
        command
            .arg(&self.script)
            .arg(&server.address)
            .args([proto, stubs.to_owned()])
            .arg(arg);
        command
    }

    /// Runs `command` (of [`PythonClient::command`]): the IDs it printed, one per line.
    /// Panics with `what` and its stderr if it fails.
    fn ids(mut command: Command, what: &str) -> Vec<u64> {
        let output = command.output().unwrap();
        assert!(
            output.status.success(),
            "{what}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout)
            .unwrap()
            .lines()
            .map(|line| line.parse().unwrap())
            .collect()
    }
}

#[test]
fn python_clients_over_http_and_grpc_get_distinct_ids_of_the_servers_nodes() {
    let test = "python_clients_over_http_and_grpc_get_distinct_ids_of_the_servers_nodes";
    let Some(client) = PythonClient::new(test, "serve_client.py") else {
        return;
    };
    // Sonyflake puts the machine ID below the sequence: its runs step by 1 << 16.
    for (layout, node) in [("twitter", "5"), ("sonyflake", "300")] {
        let server = Server::start(&["--layout", layout, "--node", node]);
        let stubs = tempdir(&format!("stubs-{layout}"));
        let before = now_ms() - CLOCK_LAG_MS;
        let ids = PythonClient::ids(client.command(&server, &stubs, "4096"), layout);
        let after = now_ms();
        assert_eq!(ids.len(), 50 + 7 + 100_000, "{layout}");
        let distinct: HashSet<u64> = ids.iter().copied().collect();
        assert_eq!(distinct.len(), ids.len(), "{layout}: an ID twice");
        assert!(
            ids.windows(2).all(|pair| pair[0] < pair[1]),
            "{layout}: out of order"
        );
        let layout_of = if layout == "twitter" {
            Layout::TWITTER
        } else {
            Layout::SONYFLAKE
        };
        for &id in &ids {
            let parts = layout_of.decode(Id::new(id));
            assert_eq!(parts.node, node.parse::<u64>().unwrap(), "{layout}: {id}");
            assert!(
                (before..=after).contains(&parts.unix_ms),
                "{layout}: {id} at {}",
                parts.unix_ms
            );
        }
        let (status, stderr) = server.stop();
        assert!(status.success(), "{status}: {stderr}");
        let _ = std::fs::remove_dir_all(stubs);
    }
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
            "atomflake: unknown layout \"nope\": the presets are twitter, discord, instagram, sonyflake, mastodon\n",
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

/// `count` IDs from `server` over HTTP.
fn get_ids(server: &Server, count: u32) -> Vec<u64> {
    let (status, body) = curl(&server.url(&format!("/v1/ids?count={count}"))).expect("curl");
    assert_eq!(status, 200, "{body}");
    ids_of(&body)
}

fn signal(server: &Server, signal: &str) {
    let pid = server.child.id().to_string();
    assert!(
        Command::new("kill")
            .args([signal, &pid])
            .status()
            .unwrap()
            .success()
    );
}

/// A child process killed when dropped (a test that fails leaves none behind).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
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
    let deadline = Instant::now() + Duration::from_secs(30);
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
    let lease = ["--lease", url.as_str(), "--namespace", "serve", "--ttl", "2"];
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
    let deadline = Instant::now() + Duration::from_secs(10);
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
    let lease = ["--lease", url.as_str(), "--namespace", "reclaim", "--ttl", "2"];
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
    let deadline = Instant::now() + Duration::from_secs(30);
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
    wait_serving(test, &first, Duration::from_secs(10));
    let (from, after, to) = (now_ms(), get_ids(&first, 4096), now_ms());
    assert_decode(&after, "twitter", fresh, from - CLOCK_LAG_MS, to + CLOCK_LAG_MS);
    all.extend(&after);
    all.extend(get_ids(&successor, 10));
    let distinct: HashSet<u64> = all.iter().copied().collect();
    assert_eq!(distinct.len(), all.len(), "{test}: an ID was handed out twice");
    assert_eq!(metric(&first, "atomflake_lease_reclaims_total"), 1);

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

/// A fresh directory under the target's temporary directory.
fn tempdir(name: &str) -> std::path::PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A GET over a fresh connection, with a deadline for the whole answer: the status and the
/// body, or why there was none (refused, timed out).
fn http_get(address: &str, path: &str, within: Duration) -> std::io::Result<(u16, String)> {
    use std::io::{Read, Write};
    let address: std::net::SocketAddr = address.parse().expect("an IP address and port");
    let mut stream = std::net::TcpStream::connect_timeout(&address, within)?;
    stream.set_read_timeout(Some(within))?;
    stream.set_write_timeout(Some(within))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    let invalid = || std::io::Error::new(std::io::ErrorKind::InvalidData, answer.clone());
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(invalid)?;
    let (_, body) = answer.split_once("\r\n\r\n").ok_or_else(invalid)?;
    Ok((status, body.to_owned()))
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

/// Waits up to `within` for `server`'s health to be green.
fn wait_serving(test: &str, server: &Server, within: Duration) {
    let deadline = std::time::Instant::now() + within;
    loop {
        let answer = http_get(&server.address, "/healthz", Duration::from_secs(2));
        if matches!(answer, Ok((200, _))) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{test}: {} not serving after {within:?}: {answer:?}",
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
        if let Ok((status, body)) = http_get(&server.address, path, Duration::from_secs(5)) {
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
    let lease = ["--lease", url.as_str(), "--namespace", "fleet", "--ttl", "2"];
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
        wait_serving(test, servers[server].as_ref().unwrap(), Duration::from_secs(20));
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
                let (status, body) =
                    http_get(&address, "/v1/ids?count=4096", Duration::from_secs(5)).unwrap();
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
    let (first, second) = (Server::start(&["--node", "0"]), Server::start(&["--node", "0"]));
    // Two seconds are enough on an idle machine; under load (the other tests of this
    // binary) the servers may mint in different milliseconds for longer: up to five rounds.
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
    let lease = ["--lease", url.as_str(), "--namespace", "pair", "--ttl", "2"];
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
fn sigterm_lets_a_stream_under_way_finish_and_cuts_it_at_the_drain_time_or_a_second_signal() {
    let test = "sigterm_lets_a_stream_under_way_finish_and_cuts_it_at_the_drain_time_or_a_second_signal";
    let Some(streamer) = PythonClient::new(test, "serve_stream.py") else {
        return;
    };
    // 12 M IDs take about 3 s at one Twitter node's cap: within a 10 s drain, past a 1 s one,
    // and past a second signal 0.3 s into a 60 s one.
    for (drain, whole) in [("10", true), ("1", false), ("60", false)] {
        let server = Server::start(&["--node", "5", "--drain", drain]);
        let stubs = tempdir(&format!("stream-stubs-{drain}"));
        let mut client = streamer
            .command(&server, &stubs, "12000000")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(client.stdout.take().unwrap()).lines();
        assert_eq!(lines.next().unwrap().unwrap(), "streaming");
        let address = server.address.clone();
        signal(&server, "-TERM");
        std::thread::sleep(Duration::from_millis(300));
        let refused = http_get(&address, "/healthz", Duration::from_secs(2));
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
        if whole {
            assert_eq!((last.as_str(), exit.success()), ("received 12000000", true));
        } else {
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
        }
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
    let (status, body) = http_get(&server.address, "/v1/ids?count=4096", Duration::from_secs(30)).unwrap();
    let first = FirstAnswer {
        took: asked.elapsed(),
        at_ms: now_ms(),
    };
    assert_eq!(status, 200, "{body}");
    let mut ids = ids_of(&body);
    let until = Instant::now() + run;
    while Instant::now() < until {
        let (status, body) = http_get(&server.address, "/v1/ids?count=4096", Duration::from_secs(5)).unwrap();
        assert_eq!(status, 200, "{body}");
        ids.extend(ids_of(&body));
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

#[test]
fn a_server_restarted_on_its_node_with_its_clock_3_s_behind_hands_out_no_id_twice() {
    let test = "a_server_restarted_on_its_node_with_its_clock_3_s_behind_hands_out_no_id_twice";
    if !pg::can_move_clocks(test) {
        return;
    }
    let state = StateDir::new("serve-restart");
    let args = ["--node", "1", "--high-water", state.path()];
    let first = Server::start(&args);
    let (before, _) = ids_for(&first, Duration::from_secs(2));
    let (status, stderr) = first.stop();
    assert!(status.success(), "{status}: {stderr}");
    let last = *before.iter().max().unwrap();
    let last_ms = Layout::TWITTER.decode(Id::new(last)).unix_ms;

    // Started again at once, as after NTP stepped its clock back at boot or a VM restored
    // from a snapshot: 3 s behind, within the 10 s a restart waits for its clock.
    let second = Server::start_with(&args, &clock_behind("-3s"));
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
    assert!(
        first.at_ms >= first_ms + 3_000 - 50,
        "the first ID after the restart, at {first_ms} ms, was answered at {} ms",
        first.at_ms
    );
    // It waited seconds, not for good (the wait itself is bounded by the core's tests).
    assert!(first.took < Duration::from_secs(60), "{:?}", first.took);
    // It went on from its mark: just past the first run's last ID after a clean stop, up
    // to 1.5 s past it where the stop could not store the exact mark within the 200 ms a
    // generator's drop waits (a slow disk), a second more for a late wake-up; or from its
    // clock, if a loaded machine started it so late that its clock had passed the mark.
    let from_clock = first.at_ms - 3_000 + 50;
    assert!(
        first_ms > last_ms && first_ms <= (last_ms + 2_500).max(from_clock),
        "the first ID after the restart is at {first_ms} ms, the last before at {last_ms} ms"
    );
    let (status, stderr) = second.stop();
    assert!(status.success(), "{status}: {stderr}");
}

/// Runs `atomflake serve args…` that must refuse to start: its exit code and stderr. One
/// that serves is killed after 30 s, and the test fails.
fn refused(args: &[&str], state: &StateDir) -> (Option<i32>, String) {
    let mut child = serve_command(args, &[], state)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(30);
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

/// A raw connection to `server` that sends `head` (perhaps nothing) and no more.
fn partial_request(server: &Server, head: &str) -> std::net::TcpStream {
    use std::io::Write;
    let mut stream = std::net::TcpStream::connect(&server.address).unwrap();
    stream.write_all(head.as_bytes()).unwrap();
    stream
}

/// Whether the server closed `stream` within `within`: a read ends (EOF or reset) rather
/// than timing out.
fn closed_within(stream: &mut std::net::TcpStream, within: Duration) -> bool {
    use std::io::Read;
    let deadline = Instant::now() + within;
    let mut buffer = [0; 512];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        stream.set_read_timeout(Some(left)).unwrap();
        match stream.read(&mut buffer) {
            Ok(0) => return true,
            // An answer (a 408 or 503, say) before the close.
            Ok(_) => {}
            Err(error)
                if matches!(
                    error.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return false;
            }
            Err(_) => return true,
        }
    }
}

/// The value of the unlabelled or labelled metric line `name` in `GET /metrics`.
fn metric(server: &Server, name: &str) -> u64 {
    let (status, body) = http_get(&server.address, "/metrics", Duration::from_secs(5)).unwrap();
    assert_eq!(status, 200);
    body.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{body}"))
}

#[test]
fn silent_and_trickling_clients_are_closed_and_health_checks_still_get_in() {
    let server = Server::start(&[
        "--node",
        "1",
        "--max-connections",
        "24",
        "--header-timeout",
        "3",
        "--idle-timeout",
        "3",
    ]);
    let opened = Instant::now();
    // 24 clients that trickle a request head take every slot; 20 that send nothing take
    // the 16 kept for health checks, and 4 wait in the listener's backlog.
    let mut trickling: Vec<_> = (0..24)
        .map(|_| partial_request(&server, "GET /v1/ids HTTP/1.1\r\nHost: atomflake\r\n"))
        .collect();
    let mut silent: Vec<_> = (0..20).map(|_| partial_request(&server, "")).collect();
    let trickler = {
        let mut streams: Vec<_> = trickling
            .iter()
            .map(|stream| stream.try_clone().unwrap())
            .collect();
        std::thread::spawn(move || {
            use std::io::Write;
            for _ in 0..40 {
                std::thread::sleep(Duration::from_millis(200));
                for stream in &mut streams {
                    let _ = stream.write_all(b"X");
                }
            }
        })
    };
    // A health check behind them all gets in once the health checks' slots turn over
    // (2 s each), well before the trickling clients' header timeout.
    let (status, body) = http_get(&server.address, "/healthz", Duration::from_secs(8)).unwrap();
    assert_eq!((status, body.as_str()), (200, "serving\n"));
    let health_took = opened.elapsed();
    // An ID request on a connection taken past the cap is refused, naming the cap.
    let (status, body) = http_get(&server.address, "/v1/ids", Duration::from_secs(8)).unwrap();
    assert_eq!(
        (status, body.as_str()),
        (
            503,
            "{\"error\":\"the server has its most connections open (24): this one answers health checks alone\"}"
        )
    );
    // Every one of them is closed by the server: the trickling ones at the header timeout
    // (3 s), the silent ones at theirs.
    for stream in trickling.iter_mut().chain(&mut silent) {
        let within = Duration::from_secs(12).saturating_sub(opened.elapsed());
        assert!(
            closed_within(stream, within),
            "a connection still open after {:?}",
            opened.elapsed()
        );
    }
    trickler.join().unwrap();
    // The slots are free again: IDs over a fresh connection.
    let (status, body) = http_get(&server.address, "/v1/ids?count=2", Duration::from_secs(5)).unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(
        metric(
            &server,
            "atomflake_connections_closed_total{reason=\"header_timeout\"}"
        ) >= 24
    );
    assert!(metric(&server, "atomflake_health_only_connections_total") >= 17);
    println!("health check answered after {health_took:?} with every slot taken");
}

#[test]
fn a_keep_alive_connection_idle_past_the_idle_timeout_is_closed() {
    use std::io::{Read, Write};
    let server = Server::start(&["--node", "1", "--idle-timeout", "2"]);
    let mut stream = std::net::TcpStream::connect(&server.address).unwrap();
    let request = "GET /v1/ids?count=1 HTTP/1.1\r\nHost: atomflake\r\n\r\n";
    stream.write_all(request.as_bytes()).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut answer = [0; 512];
    let read = stream.read(&mut answer).unwrap();
    assert!(
        answer[..read].starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer[..read])
    );
    let answered = Instant::now();
    // Still open within the idle timeout: a second request on it is answered.
    std::thread::sleep(Duration::from_millis(500));
    stream.write_all(request.as_bytes()).unwrap();
    let read = stream.read(&mut answer).unwrap();
    assert!(answer[..read].starts_with(b"HTTP/1.1 200"));
    assert!(closed_within(&mut stream, Duration::from_secs(6)));
    let idle = answered.elapsed();
    assert!(idle >= Duration::from_secs(2), "closed after {idle:?}");
    assert_eq!(
        metric(
            &server,
            "atomflake_connections_closed_total{reason=\"idle_timeout\"}"
        ),
        1
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
    if !pg::can_move_clocks(test) {
        return;
    }
    let state = StateDir::new("serve-ready");
    let args = ["--node", "1", "--high-water", state.path()];
    let first = Server::start(&args);
    for path in ["/readyz", "/healthz", "/livez"] {
        let (status, body) = http_get(&first.address, path, Duration::from_secs(5)).unwrap();
        assert_eq!(status, 200, "{path}: {body}");
    }
    get_ids(&first, 10);
    let (status, stderr) = first.stop();
    assert!(status.success(), "{status}: {stderr}");
    // Restarted with its clock 8 s behind its mark: it waits for the clock (up to 10 s),
    // longer than a request waits (2 s), so it is not ready, but alive.
    let second = Server::start_with(&args, &clock_behind("-8s"));
    let started = Instant::now();
    let (status, body) = http_get(&second.address, "/readyz", Duration::from_secs(5)).unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(
        body.starts_with("waiting ")
            && body.ends_with(
                "for this clock to pass the nodes' high-water mark: longer than the patience of 2s\n"
            ),
        "{body}"
    );
    let (status, body) = http_get(&second.address, "/livez", Duration::from_secs(5)).unwrap();
    assert_eq!((status, body.as_str()), (200, "alive\n"));
    // Ready once the wait is within the patience: 6 s on, or a little more.
    let ready = loop {
        let (status, _) = http_get(&second.address, "/readyz", Duration::from_secs(5)).unwrap();
        if status == 200 {
            break started.elapsed();
        }
        assert!(started.elapsed() < Duration::from_secs(20), "never ready");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(ready > Duration::from_secs(3), "ready after {ready:?}");
    assert_eq!(get_ids(&second, 1).len(), 1);
    println!("ready {ready:?} after the restart with the clock 8 s behind");
}

/// `curl` sending the requests of `urls` one after another over one keep-alive
/// connection (a config read from its stdin), each answer's body and status on a line of
/// its own; `headers` go with every request.
fn curl_sequence(urls: &[String], headers: &[&str]) -> Option<Child> {
    let mut command = Command::new("curl");
    command.args([
        "-sS",
        "--max-time",
        "60",
        "-w",
        "\n%{http_code}\n",
        "--config",
        "-",
    ]);
    for header in headers {
        command.args(["-H", header]);
    }
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .ok()?;
    let config: String = urls.iter().flat_map(|url| ["url = \"", url, "\"\n"]).collect();
    let mut stdin = child.stdin.take().unwrap();
    std::thread::spawn(move || std::io::Write::write_all(&mut stdin, config.as_bytes()));
    Some(child)
}

/// Health checks need no token and take no ID: a flood of them, unauthenticated, beside a
/// client with a token minting one ID a request, takes none of its IDs. Only that client
/// mints, so each tick's IDs are sequences 0, 1, 2, ... with none missing; a probe that
/// took an ID would leave a hole (or a tick not starting at 0). Sonyflake: 256 IDs a
/// 10 ms tick, the layout where a probe's ID costs most.
#[test]
fn health_checks_take_no_id_from_the_clients_that_mint() {
    let test = "health_checks_take_no_id_from_the_clients_that_mint";
    let token = "minting-client-token-0123456789";
    let state = StateDir::new("health-probes");
    let tokens = Path::new(state.path()).join("tokens");
    std::fs::write(&tokens, format!("{token}\n")).unwrap();
    let server = Server::start(&[
        "--layout",
        "sonyflake",
        "--node",
        "7",
        "--token-file",
        tokens.to_str().unwrap(),
    ]);
    let health_urls: Vec<String> = (0..20_000)
        .map(|n| server.url(if n % 2 == 0 { "/readyz" } else { "/healthz" }))
        .collect();
    let Some(mut prober) = curl_sequence(&health_urls, &[]) else {
        skip(test, "no curl");
        return;
    };
    // The flood is under way before the minting starts.
    let mut health_lines = BufReader::new(prober.stdout.take().unwrap()).lines();
    assert_eq!(health_lines.next().unwrap().unwrap(), "serving");
    let mints = vec![server.url("/v1/ids?count=1"); 3_000];
    let bearer = format!("Authorization: Bearer {token}");
    let minter = curl_sequence(&mints, &[&bearer]).unwrap();
    let output = minter.wait_with_output().unwrap();
    let _ = prober.kill();
    let answers: Vec<String> = health_lines.map_while(Result::ok).collect();
    let _ = prober.wait();
    let bodies = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<&str> = bodies.lines().collect();
    let mut ids = Vec::new();
    for answer in lines.chunks(2) {
        assert_eq!(answer.get(1), Some(&"200"), "{answer:?}");
        ids.extend(ids_of(answer[0]));
    }
    assert_eq!(ids.len(), 3_000);
    // Every probe answered while the minting went on was a ready one ("serving\n", then
    // the status line curl adds); the last line may be cut by the kill.
    let answered = answers.len().saturating_sub(1);
    let unready: Vec<&String> = answers[..answered]
        .iter()
        .filter(|line| !matches!(line.as_str(), "serving" | "" | "200"))
        .collect();
    assert!(unready.is_empty(), "{unready:?}");
    let answered_ready = answers[..answered].iter().filter(|line| *line == "200").count();
    let mut ticks = std::collections::BTreeMap::<u64, Vec<u64>>::new();
    for &id in &ids {
        let parts = Layout::SONYFLAKE.decode(Id::new(id));
        assert_eq!(parts.node, 7);
        ticks.entry(parts.unix_ms).or_default().push(parts.sequence);
    }
    for (tick, sequences) in &ticks {
        let expected: Vec<u64> = (0..sequences.len() as u64).collect();
        assert_eq!(
            sequences, &expected,
            "the IDs of the tick at {tick} ms: sequences taken by someone else"
        );
    }
    println!(
        "{} IDs in {} ticks beside {answered_ready} probes, none taken",
        ids.len(),
        ticks.len(),
    );
}

/// A gRPC call of `method` (`GetIds`, `StreamIds`: a request of one field, `count`) sent by
/// curl over HTTP/2, with `grpc-timeout: timeout` when given (curl keeps no deadline of its
/// own), its answer discarded.
fn grpc_over_curl(server: &Server, method: &str, count: u64, timeout: Option<&str>) -> Command {
    // The message: field 1 (count) as a varint, in gRPC's frame (uncompressed, length).
    let mut message = vec![0x08];
    let mut rest = count;
    while rest >= 0x80 {
        message.push(u8::try_from(rest & 0x7f).unwrap() | 0x80);
        rest >>= 7;
    }
    message.push(u8::try_from(rest).unwrap());
    let mut frame = vec![0];
    frame.extend(u32::try_from(message.len()).unwrap().to_be_bytes());
    frame.extend(message);
    let body = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("grpc-{method}-{count}.bin"));
    std::fs::write(&body, frame).unwrap();
    let mut command = Command::new("curl");
    command
        .args([
            "-sS",
            "--http2-prior-knowledge",
            "--max-time",
            "20",
            "-D",
            "-",
            "-o",
            "/dev/null",
        ])
        .args(["-H", "content-type: application/grpc", "-H", "te: trailers"])
        .arg("--data-binary")
        .arg(format!("@{}", body.display()))
        .arg(server.url(&format!("/atomflake.v1.Ids/{method}")));
    if let Some(timeout) = timeout {
        command.args(["-H", &format!("grpc-timeout: {timeout}")]);
    }
    command
}

/// Runs a [`grpc_over_curl`] call: its `grpc-status` and `grpc-message` (empty when there
/// is none) and how long it took; `None` after a skip (no curl).
fn grpc_status(test: &str, mut call: Command) -> Option<(String, String, Duration)> {
    let start = Instant::now();
    let Ok(output) = call.output() else {
        skip(test, "no curl");
        return None;
    };
    let took = start.elapsed();
    let headers = String::from_utf8_lossy(&output.stdout).into_owned();
    let header = |name: &str| {
        headers
            .lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(": "))
            .map(|value| value.trim_end().to_owned())
    };
    let status = header("grpc-status").unwrap_or_else(|| {
        panic!(
            "no grpc-status in {headers:?} after {took:?}: curl {}, {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )
    });
    Some((
        status,
        percent_decoded(&header("grpc-message").unwrap_or_default()),
        took,
    ))
}

/// `text` with its `%XX` escapes decoded (gRPC's `grpc-message`).
fn percent_decoded(text: &str) -> String {
    let mut bytes = Vec::new();
    let mut rest = text.as_bytes();
    while let Some((&byte, tail)) = rest.split_first() {
        let escaped = (byte == b'%')
            .then(|| tail.get(..2))
            .flatten()
            .and_then(|hex| u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok());
        if let Some(decoded) = escaped {
            bytes.push(decoded);
            rest = &tail[2..];
        } else {
            bytes.push(byte);
            rest = tail;
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `GetIds(count)` with `grpc-timeout: timeout`, as [`grpc_status`] says it ended.
fn get_ids_with_grpc_timeout(
    test: &str,
    server: &Server,
    count: u32,
    timeout: &str,
) -> Option<(String, String, Duration)> {
    grpc_status(
        test,
        grpc_over_curl(server, "GetIds", count.into(), Some(timeout)),
    )
}

#[test]
fn a_grpc_call_past_its_grpc_timeout_is_ended_by_the_server() {
    let test = "a_grpc_call_past_its_grpc_timeout_is_ended_by_the_server";
    // A million Sonyflake IDs take 39 s on one node (256 a 10 ms tick).
    let server = Server::start(&["--layout", "sonyflake", "--node", "3", "--max-count", "1048576"]);
    let Some((status, message, took)) = get_ids_with_grpc_timeout(test, &server, 1_000_000, "300m") else {
        return;
    };
    // DEADLINE_EXCEEDED, from the server: curl keeps no deadline.
    assert_eq!(
        (status.as_str(), message.as_str()),
        ("4", "the call's deadline (grpc-timeout) passed before its answer")
    );
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert_eq!(
        metric(
            &server,
            "atomflake_requests_total{api=\"grpc\",outcome=\"deadline_exceeded\"}"
        ),
        1
    );
    let (status, message, _) = get_ids_with_grpc_timeout(test, &server, 1, "soon").unwrap();
    assert_eq!(
        (status.as_str(), message.as_str()),
        (
            "3",
            "grpc-timeout \"soon\" is invalid: allowed 1 to 8 digits and a unit of H, M, S, m, u or n"
        )
    );
    // Within its deadline, a call is answered.
    let (status, _, _) = get_ids_with_grpc_timeout(test, &server, 100, "10S").unwrap();
    assert_eq!(status, "0");
}

#[test]
fn a_stream_past_the_servers_most_is_refused_until_one_ends() {
    let test = "a_stream_past_the_servers_most_is_refused_until_one_ends";
    let server = Server::start(&["--node", "3", "--max-streams", "1"]);
    // One stream that would take 17 minutes holds the only place.
    let Ok(mut first) = grpc_over_curl(&server, "StreamIds", 1 << 32, None)
        .stdout(Stdio::null())
        .spawn()
    else {
        skip(test, "no curl");
        return;
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(&server, "atomflake_ids_served_total{api=\"grpc\"}") == 0 {
        assert!(Instant::now() < deadline, "the first stream never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (status, message, _) = grpc_status(test, grpc_over_curl(&server, "StreamIds", 10, None)).unwrap();
    assert_eq!(
        (status.as_str(), message.as_str()),
        (
            "8",
            "the server has its most streams under way (1): try again once one ends"
        )
    );
    // The first client goes away: its stream stops, and the place is free again.
    let _ = first.kill();
    let _ = first.wait();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, message, _) = grpc_status(test, grpc_over_curl(&server, "StreamIds", 10, None)).unwrap();
        if status == "0" {
            break;
        }
        assert!(Instant::now() < deadline, "still refused: {status} {message}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A `StreamIds` whose client (grpcio) stops reading without cancelling holds its place
/// among the server's streams for the stall timeout at most: then the stream ends, and
/// another is admitted. The client, reading again, gets the IDs sent before, then
/// `DEADLINE_EXCEEDED`.
#[test]
fn a_stream_whose_client_stops_reading_ends_at_the_stall_timeout_and_frees_its_place() {
    let test = "a_stream_whose_client_stops_reading_ends_at_the_stall_timeout_and_frees_its_place";
    let Some(client) = PythonClient::new(test, "serve_stall.py") else {
        return;
    };
    let server = Server::start(&["--node", "3", "--max-streams", "1", "--stall-timeout", "3"]);
    let stubs = tempdir("stubs-stall");
    let mut reader = client
        .command(&server, &stubs, &(1u64 << 32).to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut resume = reader.stdin.take().unwrap();
    let mut said = BufReader::new(reader.stdout.take().unwrap()).lines();
    assert_eq!(said.next().unwrap().unwrap(), "streaming");
    // Its stream holds the only place: for the stall timeout (3 s) at least, as it
    // cannot be waited out before the buffers fill.
    let (status, message, _) = grpc_status(test, grpc_over_curl(&server, "StreamIds", 10, None)).unwrap();
    assert_eq!(
        (status.as_str(), message.as_str()),
        (
            "8",
            "the server has its most streams under way (1): try again once one ends"
        )
    );
    // Reading nothing, it loses the place: a new stream is served.
    let start = Instant::now();
    loop {
        let (status, message, _) = grpc_status(test, grpc_over_curl(&server, "StreamIds", 10, None)).unwrap();
        if status == "0" {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the stream that is not read still holds its place: {status} {message}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    println!(
        "a new stream served {:?} after the first one's client stopped reading",
        start.elapsed()
    );
    std::io::Write::write_all(&mut resume, b"go\n").unwrap();
    let ended = said.next().unwrap().unwrap();
    let _ = reader.wait();
    let received: u64 = ended
        .strip_prefix("ended DEADLINE_EXCEEDED after ")
        .and_then(|rest| rest.split(':').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{ended}"));
    assert!(
        ended.ends_with(
            ": this stream's client read nothing for 3s: the stream ended after the IDs it sent, freeing its place"
        ),
        "{ended}"
    );
    assert!(received > 0, "{ended}");
    assert_eq!(
        metric(
            &server,
            "atomflake_requests_total{api=\"grpc\",outcome=\"deadline_exceeded\"}"
        ),
        1
    );
    let _ = std::fs::remove_dir_all(stubs);
}

#[test]
fn a_browser_page_of_an_allowed_origin_may_call_the_http_api() {
    let test = "a_browser_page_of_an_allowed_origin_may_call_the_http_api";
    let server = Server::start(&["--node", "1", "--cors-origin", "https://app.example.com"]);
    let headers_of = |args: &[&str]| -> Option<String> {
        let output = Command::new("curl")
            .args(["-s", "--max-time", "10", "-D", "-", "-o", "/dev/null"])
            .args(args)
            .arg(server.url("/v1/ids?count=2"))
            .output()
            .ok()?;
        Some(String::from_utf8_lossy(&output.stdout).to_ascii_lowercase())
    };
    let preflight = ["-X", "OPTIONS", "-H", "access-control-request-method: GET", "-H"];
    let Some(allowed) = headers_of(&[&preflight[..], &["origin: https://app.example.com"]].concat()) else {
        skip(test, "no curl");
        return;
    };
    assert!(allowed.starts_with("http/1.1 204"), "{allowed}");
    assert!(
        allowed.contains("access-control-allow-origin: https://app.example.com\r\n"),
        "{allowed}"
    );
    assert!(
        allowed.contains("access-control-allow-methods: get\r\n"),
        "{allowed}"
    );
    let get = headers_of(&["-H", "origin: https://app.example.com"]).unwrap();
    assert!(get.starts_with("http/1.1 200"), "{get}");
    assert!(
        get.contains("access-control-allow-origin: https://app.example.com\r\n"),
        "{get}"
    );
    // Another origin's page is not let read the answer, nor is a preflight answered.
    let other = headers_of(&["-H", "origin: https://other.example.com"]).unwrap();
    assert!(
        other.starts_with("http/1.1 200") && !other.contains("access-control-allow-origin"),
        "{other}"
    );
    let other = headers_of(&[&preflight[..], &["origin: https://other.example.com"]].concat()).unwrap();
    assert!(!other.contains("access-control-allow-origin"), "{other}");
}

#[test]
fn a_connection_is_held_to_its_id_rate_over_http_and_in_a_stream() {
    let test = "a_connection_is_held_to_its_id_rate_over_http_and_in_a_stream";
    let server = Server::start(&["--node", "2", "--ids-rate", "5000"]);
    // Two requests of 4,096 IDs on one connection (curl keeps it): the second is over the
    // 5,000 a second.
    let url = server.url("/v1/ids?count=4096");
    let Ok(output) = Command::new("curl")
        .args(["-s", "--max-time", "10", "-w", "\n%{http_code}\n"])
        .args([&url, &url])
        .output()
    else {
        skip(test, "no curl");
        return;
    };
    let answers = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<&str> = answers.lines().collect();
    assert_eq!(lines.len(), 4, "{answers}");
    assert_eq!(lines[1], "200");
    assert_eq!(ids_of(lines[0]).len(), 4096);
    assert_eq!(
        (lines[3], lines[2]),
        (
            "429",
            "{\"error\":\"over this connection's ID rate: allowed 5000 IDs per second\"}"
        )
    );
    // A stream of 20,000 IDs is slowed to it: a burst of 5,000, then 15,000 over 3 s.
    let (status, message, took) =
        grpc_status(test, grpc_over_curl(&server, "StreamIds", 20_000, None)).unwrap();
    assert_eq!((status.as_str(), message.as_str()), ("0", ""));
    assert!(took >= Duration::from_millis(2_500), "20,000 IDs in {took:?}");
    assert_eq!(
        metric(&server, "atomflake_ids_served_total{api=\"grpc\"}"),
        20_000
    );
}

/// Certificates for the TLS tests: CAs `ca` and `other-ca`, the server's for 127.0.0.1
/// (`server`), and client certificates `client` (signed by `ca`), `stranger` (by
/// `other-ca`) and `expired` (by `ca`, expired); `None` (a skip) without openssl.
fn tls_pki(test: &str) -> Option<atomflake_test_servers::pki::Pki> {
    use atomflake_test_servers::pki::{Pki, has_openssl};
    if !has_openssl(test) {
        return None;
    }
    let pki = Pki::temporary(test);
    pki.ca("ca");
    pki.ca("other-ca");
    pki.leaf("server", "ca", "127.0.0.1", "IP:127.0.0.1");
    pki.leaf("client", "ca", "client", "");
    pki.leaf("stranger", "other-ca", "stranger", "");
    pki.expired_leaf("expired", "ca", "expired", "");
    Some(pki)
}

/// `--tls-cert` and `--tls-key` of `pki`'s `server` certificate.
fn tls_args(pki: &atomflake_test_servers::pki::Pki) -> Vec<String> {
    vec![
        "--tls-cert".to_owned(),
        pki.path("server.crt").display().to_string(),
        "--tls-key".to_owned(),
        pki.path("server.key").display().to_string(),
    ]
}

/// curl's answer over HTTPS: its exit code, the HTTP status and version, and the body.
fn curl_https(server: &Server, path: &str, args: &[&str]) -> (i32, String, String) {
    let output = Command::new("curl")
        .args(["-sS", "--max-time", "10", "-w", "\n%{http_code} %{http_version}"])
        .args(args)
        .arg(format!("https://{}{path}", server.address))
        .output()
        .expect("curl runs");
    let text = String::from_utf8(output.stdout).unwrap();
    let (body, status) = text.rsplit_once('\n').unwrap_or(("", &text));
    (
        output.status.code().unwrap_or(-1),
        status.to_owned(),
        format!("{body}{}", String::from_utf8_lossy(&output.stderr)),
    )
}

/// One `--tls-cert` port serves HTTP/2 and HTTP/1.1 by ALPN to curl and HTTPS and gRPC to
/// Python's `requests` and `grpcio`, each verifying the server against its CA; a client
/// that trusts another CA, or speaks plain HTTP, gets nothing.
#[test]
fn over_tls_curl_requests_and_grpcio_get_ids_by_alpn_and_a_wrong_ca_is_refused() {
    let test = "over_tls_curl_requests_and_grpcio_get_ids_by_alpn_and_a_wrong_ca_is_refused";
    let Some(pki) = tls_pki(test) else {
        return;
    };
    let token = "python-client-token-0123456789";
    let tokens = pki.path("tokens");
    std::fs::write(&tokens, format!("{token}\n")).unwrap();
    let mut args = tls_args(&pki);
    args.extend(["--node".to_owned(), "9".to_owned(), "--token-file".to_owned()]);
    args.push(tokens.display().to_string());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = Server::start(&args);
    let ca = pki.path("ca.pem").display().to_string();
    let bearer = format!("Authorization: Bearer {token}");
    let before = now_ms() - CLOCK_LAG_MS;
    let mut ids = Vec::new();
    for (version, expected) in [("--http2", "200 2"), ("--http1.1", "200 1.1")] {
        let (code, status, body) = curl_https(
            &server,
            "/v1/ids?count=3",
            &[version, "--cacert", &ca, "-H", &bearer],
        );
        assert_eq!((code, status.as_str()), (0, expected), "{body}");
        ids.extend(ids_of(&body));
    }
    let (code, _, body) = curl_https(
        &server,
        "/readyz",
        &["--cacert", &pki.path("other-ca.pem").display().to_string()],
    );
    assert_eq!(
        code, 60,
        "curl: the server's certificate cannot be verified: {body}"
    );
    let plain = Command::new("curl")
        .args(["-sS", "--max-time", "10", &server.url("/readyz")])
        .output()
        .unwrap();
    assert!(!plain.status.success(), "plain HTTP on the TLS port: {plain:?}");

    if let Some(client) = PythonClient::new(test, "serve_tls_client.py") {
        let stubs = tempdir("stubs-tls");
        let mut command = client.command(&server, &stubs, &ca);
        command.arg(pki.path("other-ca.pem")).arg(token);
        let python = PythonClient::ids(command, "serve_tls_client.py");
        assert_eq!(python.len(), 5 + 7);
        ids.extend(python);
        let _ = std::fs::remove_dir_all(stubs);
    }
    let distinct: HashSet<u64> = ids.iter().copied().collect();
    assert_eq!(distinct.len(), ids.len(), "an ID twice: {ids:?}");
    assert_decode(&ids, "twitter", 9, before, now_ms());
    let (status, stderr) = server.stop();
    assert!(status.success(), "{status}: {stderr}");
    assert!(!stderr.contains(token), "the token is logged: {stderr}");
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

/// Waits up to 5 s for new connections to be shown a certificate of serial `serial`.
fn wait_for_serial(address: &str, ca: &Path, serial: &str) {
    let start = Instant::now();
    loop {
        let served = served_serial(address, ca);
        if served == serial {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "still {served} after 5 s, not {serial}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
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
            let staged = pki.path("staged");
            std::fs::copy(pki.path(&from), &staged).unwrap();
            if let Some(stamps) = stamps {
                std::fs::File::options()
                    .write(true)
                    .open(&staged)
                    .unwrap()
                    .set_modified(stamps[i])
                    .unwrap();
            }
            std::fs::rename(&staged, to).unwrap();
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
    let mut keeper = Command::new("python3")
        .args(["-c", script, &server.address])
        .arg(&ca)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut asks = keeper.stdin.take().unwrap();
    let mut answers = BufReader::new(keeper.stdout.take().unwrap()).lines();
    let mut ask = || {
        std::io::Write::write_all(&mut asks, b"go\n").unwrap();
        answers.next().unwrap().unwrap()
    };
    let opened = ask();

    pki.leaf("renewed", "ca", "127.0.0.1", "IP:127.0.0.1");
    install("renewed");
    wait_for_serial(&server.address, &ca, &serial("renewed"));

    let stamp = |file: &Path| std::fs::metadata(file).unwrap().modified().unwrap();
    let stamps = [stamp(&key), stamp(&cert)];
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

/// With `--tls-client-ca`, a client without a certificate, with one another CA signed,
/// or with an expired one is refused in the handshake; one the CA signed is served. A new
/// CA in the file is taken for the connections after.
#[test]
fn client_certificates_of_the_ca_alone_are_served_and_expired_ones_are_refused() {
    let test = "client_certificates_of_the_ca_alone_are_served_and_expired_ones_are_refused";
    let Some(pki) = tls_pki(test) else {
        return;
    };
    let ca = pki.path("ca.pem").display().to_string();
    let client_ca = pki.path("client-ca.pem");
    std::fs::copy(pki.path("ca.pem"), &client_ca).unwrap();
    let mut args = tls_args(&pki);
    args.extend([
        "--node".to_owned(),
        "3".to_owned(),
        "--tls-client-ca".to_owned(),
        client_ca.display().to_string(),
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = Server::start(&args);
    let with = |name: &str| {
        let (cert, key) = (pki.path(&format!("{name}.crt")), pki.path(&format!("{name}.key")));
        curl_https(
            &server,
            "/v1/ids?count=2",
            &[
                "--cacert",
                &ca,
                "--cert",
                cert.to_str().unwrap(),
                "--key",
                key.to_str().unwrap(),
            ],
        )
    };
    let (code, status, body) = with("client");
    assert_eq!((code, status.as_str()), (0, "200 2"), "{body}");
    assert_eq!(ids_of(&body).len(), 2);
    for refused in ["stranger", "expired"] {
        let (code, _, body) = with(refused);
        assert_ne!(code, 0, "{refused}: {body}");
    }
    let (code, _, body) = curl_https(&server, "/v1/ids?count=2", &["--cacert", &ca]);
    assert_ne!(code, 0, "no client certificate: {body}");
    let client_cert = pki.path("client.crt").display().to_string();
    let client_key = pki.path("client.key").display().to_string();
    let (_, _, metrics) = curl_https(
        &server,
        "/metrics",
        &["--cacert", &ca, "--cert", &client_cert, "--key", &client_key],
    );
    assert!(
        metrics.contains("atomflake_tls_handshake_failures_total 3"),
        "{metrics}"
    );

    // The other CA put in place by rename: its client is served, and the first CA's not.
    let staged = pki.path("staged-ca.pem");
    std::fs::copy(pki.path("other-ca.pem"), &staged).unwrap();
    std::fs::rename(&staged, &client_ca).unwrap();
    let start = Instant::now();
    while with("stranger").0 != 0 {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the new client CA is not taken"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_ne!(with("client").0, 0, "the old client CA is still trusted");
    let (status, stderr) = server.stop();
    assert!(status.success(), "{status}: {stderr}");
}

/// A client whose CA is taken out of `--tls-client-ca` stops minting on the connection it
/// holds open: the reload closes that connection, and the next call on the same grpcio
/// channel fails (its new handshake is refused). A client of the CA still trusted keeps its
/// connection and mints on.
#[test]
fn a_client_ca_taken_out_of_trust_closes_its_clients_open_connections() {
    let test = "a_client_ca_taken_out_of_trust_closes_its_clients_open_connections";
    let Some(pki) = tls_pki(test) else {
        return;
    };
    let Some(client) = PythonClient::new(test, "serve_mtls_client.py") else {
        return;
    };
    // Both CAs trusted at first.
    let client_ca = pki.path("client-ca.pem");
    let both = [pki.path("ca.pem"), pki.path("other-ca.pem")].map(|ca| std::fs::read_to_string(ca).unwrap());
    std::fs::write(&client_ca, both.concat()).unwrap();
    let mut args = tls_args(&pki);
    args.extend([
        "--node".to_owned(),
        "6".to_owned(),
        "--tls-client-ca".to_owned(),
        client_ca.display().to_string(),
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = Server::start(&args);
    let stubs = tempdir("stubs-mtls");
    let mut clients = client.command(&server, &stubs, pki.path("ca.pem").to_str().unwrap());
    for name in ["client.crt", "client.key", "stranger.crt", "stranger.key"] {
        clients.arg(pki.path(name));
    }
    let mut clients = clients
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut go = clients.stdin.take().unwrap();
    let mut said = BufReader::new(clients.stdout.take().unwrap()).lines();
    assert_eq!(said.next().unwrap().unwrap(), "minted 12");

    // The first CA taken out (the file replaced by rename), and the reload seen.
    let staged = pki.path("staged-ca.pem");
    std::fs::copy(pki.path("other-ca.pem"), &staged).unwrap();
    std::fs::rename(&staged, &client_ca).unwrap();
    let reloaded = std::iter::from_fn(|| server.stderr.recv_timeout(Duration::from_secs(10)).ok())
        .find(|line| line.contains("TLS certificate reloaded"));
    assert!(reloaded.is_some(), "no reload of the client CA");
    std::io::Write::write_all(&mut go, b"go\n").unwrap();
    let first = said.next().unwrap().unwrap();
    let second = said.next().unwrap().unwrap();
    let _ = clients.wait();
    assert_eq!(
        (first.as_str(), second.as_str()),
        ("first: closed UNAVAILABLE", "second: open ok")
    );
    let (code, _, metrics) = curl_https(
        &server,
        "/metrics",
        &[
            "--cacert",
            pki.path("ca.pem").to_str().unwrap(),
            "--cert",
            pki.path("stranger.crt").to_str().unwrap(),
            "--key",
            pki.path("stranger.key").to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{metrics}");
    assert!(
        metrics
            .lines()
            .any(|line| line == "atomflake_connections_closed_total{reason=\"client_untrusted\"} 1"),
        "{metrics}"
    );
    let (status, stderr) = server.stop();
    assert!(status.success(), "{status}: {stderr}");
    let _ = std::fs::remove_dir_all(stubs);
}

/// With `--token-file`, the ID endpoints over HTTP and gRPC ask for one of its tokens;
/// health checks and (unless `--metrics-token`) `/metrics` do not; SIGHUP, and a change of
/// the file, read it again; no token shows in the log or the metrics.
#[test]
fn tokens_guard_the_id_endpoints_reload_on_sighup_and_are_never_shown() {
    let test = "tokens_guard_the_id_endpoints_reload_on_sighup_and_are_never_shown";
    let (first, second, third) = (
        "first-token-0123456789",
        "second-token-0123456789",
        "third-token-0123456789",
    );
    let state = StateDir::new("tokens");
    let file = Path::new(state.path()).join("tokens");
    std::fs::write(&file, format!("# the ops team\n{first}\n{second}\n")).unwrap();
    let server = Server::start(&["--node", "4", "--token-file", file.to_str().unwrap()]);
    let get = |path: &str, token: Option<&str>| {
        let mut command = Command::new("curl");
        command.args(["-sS", "--max-time", "10", "-D", "-", "-w", "\n%{http_code}"]);
        if let Some(token) = token {
            command.args(["-H", &format!("Authorization: Bearer {token}")]);
        }
        let output = command.arg(server.url(path)).output().expect("curl runs");
        let answer = String::from_utf8(output.stdout).unwrap();
        let (rest, status) = answer.rsplit_once('\n').unwrap();
        (status.parse::<u16>().unwrap(), rest.to_owned())
    };
    for token in [first, second] {
        assert_eq!(get("/v1/ids?count=1", Some(token)).0, 200, "{token}");
    }
    for token in [None, Some("first-token-012345678"), Some(third)] {
        let (status, answer) = get("/v1/ids?count=1", token);
        assert_eq!(status, 401, "{token:?}: {answer}");
        assert!(answer.contains("www-authenticate: Bearer"), "{answer}");
        assert!(
            answer.ends_with(
                r#"{"error":"a bearer token is required: Authorization: Bearer TOKEN, one of the server's --token-file"}"#
            ),
            "{answer}"
        );
    }
    for path in ["/healthz", "/livez", "/readyz", "/metrics"] {
        assert_eq!(get(path, None).0, 200, "{path}");
    }
    let Some((status, message, _)) = grpc_status(test, grpc_over_curl(&server, "GetIds", 1, None)) else {
        return;
    };
    assert_eq!(
        (status.as_str(), message.as_str()),
        (
            "16",
            "a bearer token is required: Authorization: Bearer TOKEN, one of the server's --token-file"
        )
    );
    let mut call = grpc_over_curl(&server, "GetIds", 1, None);
    call.args(["-H", &format!("authorization: Bearer {second}")]);
    assert_eq!(grpc_status(test, call).unwrap().0, "0");

    // SIGHUP, with the file's time stamp kept so that only the signal can tell.
    let stamp = std::fs::metadata(&file).unwrap().modified().unwrap();
    let staged = file.with_extension("staged");
    std::fs::write(&staged, format!("{third}\n")).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&staged)
        .unwrap()
        .set_modified(stamp)
        .unwrap();
    std::fs::rename(&staged, &file).unwrap();
    std::thread::sleep(Duration::from_millis(2_500));
    assert_eq!(
        get("/v1/ids?count=1", Some(third)).0,
        401,
        "reloaded without SIGHUP"
    );
    // Each request refused while waiting for a reload is counted below.
    let mut refused = 4;
    let mut wait_for = |token: &str| {
        let start = Instant::now();
        while get("/v1/ids?count=1", Some(token)).0 != 200 {
            refused += 1;
            assert!(start.elapsed() < Duration::from_secs(5), "{token} is not taken");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    signal(&server, "-HUP");
    wait_for(third);
    // A change of the file is enough.
    let fourth = "fourth-token-0123456789";
    std::fs::write(&staged, format!("{fourth}\n")).unwrap();
    std::fs::rename(&staged, &file).unwrap();
    wait_for(fourth);
    let refused = refused + 1;
    assert_eq!(get("/v1/ids?count=1", Some(third)).0, 401);
    let (_, metrics) = get("/metrics", None);
    assert!(
        metrics.contains(&format!(
            r#"atomflake_requests_total{{api="http",outcome="unauthenticated"}} {refused}"#
        )) && metrics.contains(r#"atomflake_requests_total{api="grpc",outcome="unauthenticated"} 1"#),
        "{metrics}"
    );
    let (status, stderr) = server.stop();
    assert!(status.success(), "{status}: {stderr}");
    for token in [first, second, third] {
        assert!(
            !stderr.contains(token) && !metrics.contains(token),
            "{token} shown: {stderr}"
        );
    }
    assert!(stderr.contains("tokens reloaded (SIGHUP): 1"), "{stderr}");
}

/// With `--metrics-token`, `/metrics` asks for a token too; health checks stay open.
#[test]
fn metrics_token_guards_metrics_and_leaves_health_open() {
    let token = "metrics-token-0123456789";
    let state = StateDir::new("metrics-token");
    let file = Path::new(state.path()).join("tokens");
    std::fs::write(&file, format!("{token}\n")).unwrap();
    let guarded = Server::start(&[
        "--node",
        "4",
        "--token-file",
        file.to_str().unwrap(),
        "--metrics-token",
    ]);
    let get = |path: &str, token: Option<&str>| {
        let mut command = Command::new("curl");
        command.args(["-s", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}"]);
        if let Some(token) = token {
            command.args(["-H", &format!("Authorization: Bearer {token}")]);
        }
        let output = command.arg(guarded.url(path)).output().expect("curl runs");
        String::from_utf8(output.stdout).unwrap()
    };
    assert_eq!(
        (
            get("/metrics", None),
            get("/metrics", Some(token)),
            get("/readyz", None)
        ),
        ("401".to_owned(), "200".to_owned(), "200".to_owned())
    );
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
