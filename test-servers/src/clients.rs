//! The clients of `atomflake serve`'s tests, none written here: `curl` over HTTP/1.1, HTTP/2
//! and TLS and for gRPC calls, a raw HTTP/1.1 GET, Python's `requests` and `grpcio`
//! (scripts in `python/`, stubs generated from the proto by `grpcio-tools`), and the
//! certificates of the TLS tests. The server is named by its address (`127.0.0.1:PORT`),
//! whether it runs in the test's process or as the `atomflake` binary.

use crate::pki::Pki;
use std::io::{BufRead, BufReader, Lines};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// Spawns `command` to be spoken to line by line: the child, its stdin, and the lines of
/// its stdout.
pub fn spawn_piped(command: &mut Command) -> (Child, ChildStdin, Lines<BufReader<ChildStdout>>) {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    (child, stdin, lines)
}

/// Calls `attempt` every `every` until it answers `Ok`, for at most `within`; returns how
/// long that took.
///
/// # Panics
///
/// With `attempt`'s last `Err`, how long it tried and `within`, once `within` has passed.
pub fn retry_for(
    within: Duration,
    every: Duration,
    mut attempt: impl FnMut() -> Result<(), String>,
) -> Duration {
    let start = Instant::now();
    loop {
        match attempt() {
            Ok(()) => return start.elapsed(),
            Err(why) => assert!(
                start.elapsed() < within,
                "{why} (still failing after {:?}; the limit {within:?})",
                start.elapsed()
            ),
        }
        std::thread::sleep(every);
    }
}

/// `curl`'s answer to a GET: the status and the body; `None` without curl.
pub fn curl(url: &str) -> Option<(u16, String)> {
    let output = Command::new("curl")
        // A guard against a server that never answers, not a bound on its speed.
        .arg("--max-time")
        .arg(crate::HANG_GUARD.as_secs().to_string())
        .args(["-s", "-w", "\n%{http_code}", url])
        .output()
        .ok()?;
    assert!(output.status.success(), "curl {url}: {output:?}");
    let text = String::from_utf8(output.stdout).unwrap();
    let (body, status) = text.rsplit_once('\n').unwrap();
    Some((status.parse().unwrap(), body.to_owned()))
}

/// The IDs of a `{"ids": ["...", ...]}` body.
pub fn ids_of(body: &str) -> Vec<u64> {
    let value: serde_json::Value = serde_json::from_str(body).unwrap();
    value["ids"]
        .as_array()
        .unwrap_or_else(|| panic!("no ids in {body}"))
        .iter()
        .map(|id| id.as_str().expect("IDs are strings").parse().unwrap())
        .collect()
}

/// A GET over a fresh connection, with a deadline for the whole answer: the status and the
/// body, or why there was none (refused, timed out).
pub fn http_get(address: &str, path: &str, within: Duration) -> std::io::Result<(u16, String)> {
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

/// The value of the unlabelled or labelled metric line `name` in `GET /metrics` of the
/// server at `address`.
pub fn metric(address: &str, name: &str) -> u64 {
    let (status, body) = http_get(address, "/metrics", crate::HANG_GUARD).unwrap();
    assert_eq!(status, 200);
    body.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{body}"))
}

/// `curl` sending the requests of `urls` one after another over one keep-alive
/// connection (a config read from its stdin), each answer's body and status on a line of
/// its own; `headers` go with every request. `None` without curl.
pub fn curl_sequence(urls: &[String], headers: &[&str]) -> Option<Child> {
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

/// The message of `GetIds` or `StreamIds` for `count` IDs: field 1 as a varint.
pub fn count_message(count: u64) -> Vec<u8> {
    let mut message = vec![0x08];
    let mut rest = count;
    while rest >= 0x80 {
        message.push(u8::try_from(rest & 0x7f).unwrap() | 0x80);
        rest >>= 7;
    }
    message.push(u8::try_from(rest).unwrap());
    message
}

/// A gRPC call of `method` (`GetIds`, `StreamIds`: a request of one field, `count`) to the
/// server at `address`, sent by curl over HTTP/2, with `grpc-timeout: timeout` when given
/// (curl keeps no deadline of its own), its answer discarded. The request's body is
/// written under `scratch`.
pub fn grpc_over_curl(
    address: &str,
    scratch: &Path,
    method: &str,
    count: u64,
    timeout: Option<&str>,
) -> Command {
    // The message, in gRPC's frame (uncompressed, length).
    let message = count_message(count);
    let mut frame = vec![0];
    frame.extend(u32::try_from(message.len()).unwrap().to_be_bytes());
    frame.extend(message);
    let body = scratch.join(format!("grpc-{method}-{count}.bin"));
    std::fs::write(&body, frame).unwrap();
    let headers: Vec<String> = timeout
        .map(|timeout| format!("grpc-timeout: {timeout}"))
        .into_iter()
        .collect();
    grpc_body_over_curl(address, &body, method, &headers)
}

/// A gRPC call of `method` to the server at `address` whose body is the file `body`
/// (its messages framed by the caller, as they are sent), with the extra `headers`
/// (`name: value`), sent by curl over HTTP/2, its answer discarded.
pub fn grpc_body_over_curl(address: &str, body: &Path, method: &str, headers: &[String]) -> Command {
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
        .arg(format!("http://{address}/atomflake.v1.Ids/{method}"));
    for header in headers {
        command.args(["-H", header]);
    }
    command
}

/// Runs a [`grpc_over_curl`] call: its `grpc-status` and `grpc-message` (empty when there
/// is none) and how long it took; `None` after a [`skip`](crate::skip) (no curl).
pub fn grpc_status(test: &str, mut call: Command) -> Option<(String, String, Duration)> {
    let start = Instant::now();
    let Ok(output) = call.output() else {
        crate::skip(test, "no curl");
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

/// curl's answer over HTTPS from the server at `address`: its exit code, the HTTP status
/// and version, and the body.
pub fn curl_https(address: &str, path: &str, args: &[&str]) -> (i32, String, String) {
    let output = Command::new("curl")
        .args(["-sS", "--max-time", "10", "-w", "\n%{http_code} %{http_version}"])
        .args(args)
        .arg(format!("https://{address}{path}"))
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

/// Certificates for the TLS tests: CAs `ca` and `other-ca`, the server's for 127.0.0.1
/// (`server`), and client certificates `client` (signed by `ca`), `stranger` (by
/// `other-ca`) and `expired` (by `ca`, expired); `None` (a skip) without openssl.
pub fn tls_pki(test: &str) -> Option<Pki> {
    if !crate::pki::has_openssl(test) {
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

/// A client script of `python/`, run by the Python of a venv with the clients' packages
/// from `PyPI`.
pub struct PythonClient {
    python: PathBuf,
    script: PathBuf,
}

impl PythonClient {
    /// `python/NAME`, run by the Python of the venv at `venv`, made once per run of a test
    /// binary (its tests run on threads of one process and share it); `None` after a
    /// [`skip`](crate::skip).
    pub fn new(test: &str, venv: &Path, name: &str) -> Option<PythonClient> {
        static VENV: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
        let mut made_here = false;
        let python = VENV.get_or_init(|| {
            made_here = true;
            crate::python::venv(
                test,
                venv,
                &[
                    "requests",
                    "grpcio",
                    "grpcio-tools",
                    "grpcio-health-checking",
                    "grpcio-reflection",
                    "openapi-spec-validator",
                    "opentelemetry-proto",
                ],
            )
        });
        if python.is_none() && !made_here {
            crate::skip(
                test,
                "no venv with the Python clients (see the first test's skip)",
            );
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python").join(name);
        python.clone().map(|python| PythonClient { python, script })
    }

    /// The script with `args` alone.
    pub fn plain(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.python);
        command.arg(&self.script).args(args);
        command
    }

    /// `SCRIPT ADDRESS PROTO STUBS ARG`: the script against the server at `address`, its
    /// gRPC stubs compiled from the protocol's directory into `stubs`.
    pub fn command(&self, address: &str, stubs: &Path, arg: &str) -> Command {
        let proto = Path::new(env!("CARGO_MANIFEST_DIR")).join("../proto");
        let mut command = Command::new(&self.python);
        command
            .arg(&self.script)
            .arg(address)
            .args([proto, stubs.to_owned()])
            .arg(arg);
        command
    }

    /// `serve_stream.py` streaming `count` IDs from the server at `address`, once it has
    /// printed that the stream began: the client, and its output's lines after that one.
    pub fn stream(
        &self,
        address: &str,
        stubs: &Path,
        count: &str,
    ) -> (
        std::process::Child,
        std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
    ) {
        use std::io::BufRead as _;
        let mut client = self
            .command(address, stubs, count)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(client.stdout.take().unwrap()).lines();
        assert_eq!(lines.next().unwrap().unwrap(), "streaming");
        (client, lines)
    }

    /// Runs `command` (of [`PythonClient::command`]): the IDs it printed, one per line.
    /// Panics with `what` and its stderr if it fails.
    pub fn ids(mut command: Command, what: &str) -> Vec<u64> {
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
