//! Clients no one on the project wrote, run as processes against a server on loopback:
//! `h2load` (nghttp2, Debian `nghttp2-client`) for gRPC calls over HTTP/2, and `wrk`
//! (Debian `wrk`) for HTTP/1.1. Each row is one run of the tool for a fixed time; what is
//! returned is parsed from the tool's own report, latencies included.

use hdrhistogram::Histogram;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

/// The CPU sets of a pinned run (`--pin SERVER:CLIENT`, in `taskset`'s list form).
#[derive(Debug, Clone)]
pub struct Pin {
    /// The servers' CPUs: `0-7`.
    pub server: String,
    /// The clients' CPUs (this process's too): `8-15`.
    pub client: String,
    /// How many CPUs `client` names: the client tools' threads.
    pub client_cpus: u32,
}

static PIN: OnceLock<Pin> = OnceLock::new();

impl Pin {
    /// `SERVER:CLIENT`, two `taskset` CPU lists (`0-7:8-15`, `0,2:1,3`) that share no CPU,
    /// each of which this machine has.
    ///
    /// # Errors
    ///
    /// A list that is not of that form, names a CPU this machine lacks, or lists a CPU in
    /// both.
    pub fn parse(text: &str) -> Result<Pin, Error> {
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        let (server, client) = text
            .split_once(':')
            .ok_or_else(|| format!("--pin {text:?}: allowed SERVER_CPUS:CLIENT_CPUS, such as 0-7:8-15"))?;
        let list = |part: &str| -> Result<Vec<usize>, Error> {
            let mut listed = Vec::new();
            for range in part.split(',') {
                let (first, last) = range.split_once('-').unwrap_or((range, range));
                let (first, last): (usize, usize) = (first.parse()?, last.parse()?);
                if first > last || last >= cpus {
                    return Err(format!(
                        "--pin {text:?}: CPUs {range:?} out of range: allowed 0..={}",
                        cpus - 1
                    )
                    .into());
                }
                listed.extend(first..=last);
            }
            Ok(listed)
        };
        let (servers, clients) = (list(server)?, list(client)?);
        if let Some(both) = servers.iter().find(|cpu| clients.contains(cpu)) {
            return Err(format!("--pin {text:?}: CPU {both} is in both sets").into());
        }
        Ok(Pin {
            server: server.to_owned(),
            client: client.to_owned(),
            client_cpus: u32::try_from(clients.len())?,
        })
    }

    /// Pins this run: servers started with [`Pin::server_command`] and every client tool
    /// to their sets, and this process (its threads to come included) to the clients'.
    ///
    /// # Errors
    ///
    /// Pinned already, or `taskset` (util-linux) failing.
    pub fn apply(self) -> Result<(), Error> {
        let status = Command::new("taskset")
            .args(["--all-tasks", "--cpu-list", "--pid", &self.client])
            .arg(std::process::id().to_string())
            .stdout(std::process::Stdio::null())
            .status()?;
        if !status.success() {
            return Err(format!("taskset could not pin this process to {}: {status}", self.client).into());
        }
        PIN.set(self).map_err(|_| "pinned already".into())
    }

    /// The pinning in force, if any.
    pub fn get() -> Option<&'static Pin> {
        PIN.get()
    }

    /// `program`, on the servers' CPUs when pinned.
    pub fn server_command(program: impl AsRef<std::ffi::OsStr>) -> Command {
        pinned(program, PIN.get().map(|pin| &pin.server))
    }
}

/// `program`, on the clients' CPUs when pinned.
fn client_command(program: &str) -> Command {
    pinned(program, PIN.get().map(|pin| &pin.client))
}

fn pinned(program: impl AsRef<std::ffi::OsStr>, cpus: Option<&String>) -> Command {
    match cpus {
        Some(cpus) => {
            let mut command = Command::new("taskset");
            command.args(["--cpu-list", cpus]).arg(program);
            command
        }
        None => Command::new(program),
    }
}

type Error = Box<dyn std::error::Error + Send + Sync>;

/// What one run of a client tool measured.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    /// Requests answered with success per second, over the run.
    pub per_s: f64,
    /// Requests answered with success.
    pub done: u64,
    /// The median latency of a request, µs.
    pub p50_us: f64,
    /// The 99th percentile, µs.
    pub p99_us: f64,
    /// `None` where the tool does not report it (wrk stops at the 99th percentile).
    pub p999_us: Option<f64>,
}

/// A unary gRPC call to ask for, as h2load sends it: the path and the request message
/// (protobuf, without gRPC's 5-byte frame header).
#[derive(Debug, Clone, Copy)]
pub struct GrpcCall {
    /// `/package.Service/Method`.
    pub path: &'static str,
    /// The request message, encoded.
    pub message: &'static [u8],
}

impl GrpcCall {
    /// `atomflake.v1.Ids/GetIds` for one ID: `GetIdsRequest { count: 1 }`.
    pub const ATOMFLAKE_ONE: GrpcCall = GrpcCall {
        path: "/atomflake.v1.Ids/GetIds",
        message: &[0x08, 0x01],
    };

    /// `ferroid.IdGenerator/StreamIds` for one ID (`StreamIdsRequest { count: 1 }`): the
    /// only call of `ferroid-tonic-server` 2.0.0, a stream that sends one chunk.
    pub const FERROID_ONE: GrpcCall = GrpcCall {
        path: "/ferroid.IdGenerator/StreamIds",
        message: &[0x08, 0x01],
    };

    /// The call's body: the gRPC frame (uncompressed flag, big-endian length) and the
    /// message.
    fn body(&self) -> Vec<u8> {
        let length = u32::try_from(self.message.len()).expect("a short message");
        let mut body = vec![0];
        body.extend(length.to_be_bytes());
        body.extend(self.message);
        body
    }
}

/// A client tool's threads for `connections`: one per client CPU when pinned (at most
/// one per connection), else one, or two from 16 connections.
fn threads(connections: u32) -> u32 {
    match PIN.get() {
        Some(pin) => pin.client_cpus.min(connections).max(1),
        None if connections >= 16 => 2,
        None => 1,
    }
}

/// Whether `tool` runs (`--version`).
pub fn installed(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success() || !output.stdout.is_empty())
}

/// `h2load` making `call` on one HTTP/2 connection with `concurrency` calls at once, for
/// `run`. Latencies come from its per-request log
/// (`--log-file`), written in `scratch`. Calls the server answered with an HTTP status
/// other than 200, or that failed, make it an error; so does a gRPC error, which h2load
/// counts as a success: each call's data must be more than an empty answer's.
///
/// # Errors
///
/// h2load missing or failing, failed calls, or a report that cannot be read.
pub fn h2load(
    base: &str,
    call: GrpcCall,
    (connections, concurrency): (u32, u32),
    run: Duration,
    scratch: &Path,
) -> Result<Load, Error> {
    let log = scratch.join("h2load-log");
    let _ = std::fs::remove_file(&log);
    let (report, succeeded) = h2load_grpc(base, call, scratch, |h2load| {
        h2load
            .arg(format!("--clients={connections}"))
            .arg(format!("--threads={}", threads(connections)))
            .arg(format!("--max-concurrent-streams={concurrency}"))
            .arg(format!("--duration={}", run.as_secs()))
            .arg(format!("--log-file={}", log.display()));
    })?;
    let finished = line_after(&report, "finished in ")?;
    let per_s = finished
        .split(", ")
        .find_map(|part| part.strip_suffix(" req/s"))
        .ok_or_else(|| format!("no req/s in h2load's {finished:?}"))?
        .parse()?;
    let mut latencies = Histogram::<u64>::new(3)?;
    for line in std::fs::read_to_string(&log)?.lines() {
        let fields: Vec<&str> = line.split('\t').collect();
        if fields.get(1) != Some(&"200") {
            return Err(format!("h2load: a call answered {line:?}").into());
        }
        latencies.record(fields.get(2).ok_or("a short log line")?.parse()?)?;
    }
    Ok(Load {
        per_s,
        done: succeeded,
        p50_us: us(latencies.value_at_quantile(0.5)),
        p99_us: us(latencies.value_at_quantile(0.99)),
        p999_us: Some(us(latencies.value_at_quantile(0.999))),
    })
}

/// What `clients` new connections measured, each making one call.
#[derive(Debug, Clone, Copy)]
pub struct Connections {
    /// Connections opened and served (one call each) per second, over the run.
    pub per_s: f64,
    /// The mean time from the connect to the connection being ready (the TLS handshake
    /// included), µs, by h2load.
    pub connect_mean_us: f64,
    /// The slowest, µs.
    pub connect_max_us: f64,
}

/// `h2load` opening `clients` connections at once, each making `call` once: how fast
/// connections (with their handshakes, over `https://`) are opened and served.
///
/// # Errors
///
/// h2load missing or failing, failed calls, or a report that cannot be read.
pub fn h2load_connections(
    base: &str,
    call: GrpcCall,
    clients: u32,
    scratch: &Path,
) -> Result<Connections, Error> {
    let (report, succeeded) = h2load_grpc(base, call, scratch, |h2load| {
        h2load
            .arg(format!("--clients={clients}"))
            .arg(format!("--requests={clients}"));
    })?;
    if succeeded != u64::from(clients) {
        return Err(format!("h2load: {succeeded} of {clients} calls succeeded:\n{report}").into());
    }
    let finished = line_after(&report, "finished in ")?;
    let seconds = duration_us(finished.split(',').next().unwrap_or_default().trim())? / 1e6;
    // `time for connect:  MIN  MAX  MEAN  SD  +/- SD`
    let connect: Vec<&str> = line_after(&report, "time for connect:")?
        .split_whitespace()
        .collect();
    let field =
        |i: usize| -> Result<f64, Error> { duration_us(connect.get(i).ok_or("a short connect line")?) };
    Ok(Connections {
        per_s: f64::from(clients) / seconds,
        connect_mean_us: field(2)?,
        connect_max_us: field(1)?,
    })
}

/// `h2load` on one thread making `call` (its body written in `scratch`) with the options
/// `options` adds: its report, and how many calls succeeded with data (see [`h2load`]).
fn h2load_grpc(
    base: &str,
    call: GrpcCall,
    scratch: &Path,
    options: impl FnOnce(&mut Command),
) -> Result<(String, u64), Error> {
    std::fs::create_dir_all(scratch)?;
    let body = scratch.join("h2load-body");
    std::fs::write(&body, call.body())?;
    let mut h2load = client_command("h2load");
    options(&mut h2load);
    let output = h2load
        .arg(format!("--data={}", body.display()))
        .args(["--header", "content-type: application/grpc"])
        .args(["--header", "te: trailers"])
        .arg(format!("{base}{}", call.path))
        .output()?;
    let report = report_of("h2load", &output)?;
    let succeeded = succeeded(&report)?;
    check_data(&report, succeeded)?;
    Ok((report, succeeded))
}

/// A tool's report on stdout, or its failure with both outputs.
fn report_of(tool: &str, output: &std::process::Output) -> Result<String, Error> {
    let report = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        return Err(format!(
            "{tool} failed: {report}{}",
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    Ok(report)
}

/// The calls h2load reports succeeded; an error if none did or any failed.
fn succeeded(report: &str) -> Result<u64, Error> {
    let requests = line_after(report, "requests: ")?;
    let number_before = |text: &str, word: &str| -> Result<u64, Error> {
        let words: Vec<&str> = text.split_whitespace().collect();
        let at = words
            .iter()
            .position(|w| w.trim_end_matches(',') == word)
            .ok_or_else(|| format!("no {word:?} in h2load's {text:?}"))?;
        Ok(words[at.checked_sub(1).ok_or("nothing before")?].parse()?)
    };
    let succeeded = number_before(requests, "succeeded")?;
    let failed = number_before(requests, "failed")?;
    let errored = number_before(requests, "errored")?;
    if succeeded == 0 || failed + errored > 0 {
        return Err(
            format!("h2load: {succeeded} succeeded, {failed} failed, {errored} errored:\n{report}").into(),
        );
    }
    Ok(succeeded)
}

/// Checks that `succeeded` calls carried IDs: an answer with a gRPC error carries no
/// message, 5 bytes of frame at most.
fn check_data(report: &str, succeeded: u64) -> Result<(), Error> {
    let traffic = line_after(report, "traffic: ")?;
    let data = traffic
        .split(", ")
        .find_map(|part| part.strip_suffix(" data"))
        .and_then(|part| part.split_whitespace().last())
        .and_then(|bytes| {
            bytes
                .trim_start_matches('(')
                .trim_end_matches(')')
                .parse::<u64>()
                .ok()
        })
        .ok_or_else(|| format!("no data bytes in h2load's {traffic:?}"))?;
    if data <= succeeded * 5 {
        return Err(format!("h2load: {data} bytes of data for {succeeded} calls: errors, not IDs").into());
    }
    Ok(())
}

/// `wrk` getting `path` over `connections` keep-alive HTTP/1.1 connections (on one thread,
/// two from 16 connections) for `run`. Any answer other than 2xx makes it an error.
///
/// # Errors
///
/// wrk missing or failing, answers other than 2xx, or a report that cannot be read.
pub fn wrk(base: &str, path: &str, connections: u32, run: Duration) -> Result<Load, Error> {
    let output = client_command("wrk")
        .arg(format!("--threads={}", threads(connections)))
        .arg(format!("--connections={connections}"))
        .arg(format!("--duration={}s", run.as_secs()))
        .arg("--latency")
        .arg(format!("{base}{path}"))
        .output()?;
    let report = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        return Err(format!("wrk failed: {report}{}", String::from_utf8_lossy(&output.stderr)).into());
    }
    if report.contains("Non-2xx or 3xx responses") || report.contains("Socket errors") {
        return Err(format!("wrk saw errors:\n{report}").into());
    }
    let per_s: f64 = line_after(&report, "Requests/sec:")?.trim().parse()?;
    let done = report
        .lines()
        .find_map(|line| line.trim().split_once(" requests in "))
        .ok_or("no request count in wrk's report")?
        .0
        .parse()?;
    let percentile = |label: &str| -> Result<f64, Error> {
        let value = report
            .lines()
            .find_map(|line| line.trim().strip_prefix(label))
            .ok_or_else(|| format!("no {label} in wrk's report"))?;
        duration_us(value.trim())
    };
    Ok(Load {
        per_s,
        done,
        p50_us: percentile("50%")?,
        p99_us: percentile("99%")?,
        p999_us: None,
    })
}

/// The rest of the first line of `report` that starts with `prefix` (spaces before it
/// ignored).
fn line_after<'a>(report: &'a str, prefix: &str) -> Result<&'a str, Error> {
    report
        .lines()
        .find_map(|line| line.trim_start().strip_prefix(prefix))
        .ok_or_else(|| format!("no {prefix:?} line in:\n{report}").into())
}

/// wrk's `123.45us`, `1.23ms`, `2.00s` in µs.
fn duration_us(text: &str) -> Result<f64, Error> {
    let (number, scale) = if let Some(number) = text.strip_suffix("us") {
        (number, 1.0)
    } else if let Some(number) = text.strip_suffix("ms") {
        (number, 1e3)
    } else if let Some(number) = text.strip_suffix('s') {
        (number, 1e6)
    } else {
        return Err(format!("no unit in wrk's {text:?}").into());
    };
    Ok(number.parse::<f64>()? * scale)
}

#[expect(clippy::cast_precision_loss, reason = "µs counts far below 2^52")]
fn us(value: u64) -> f64 {
    value as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grpc_body_is_framed_with_its_length() {
        assert_eq!(GrpcCall::ATOMFLAKE_ONE.body(), [0, 0, 0, 0, 2, 0x08, 0x01]);
    }

    #[test]
    fn wrk_durations_are_read_in_their_units() {
        let close = |text: &str, us: f64| (duration_us(text).unwrap() - us).abs() < 1e-9;
        assert!(close("123.50us", 123.5));
        assert!(close("1.25ms", 1250.0));
        assert!(close("2.00s", 2_000_000.0));
        assert!(duration_us("12").is_err());
    }
}
