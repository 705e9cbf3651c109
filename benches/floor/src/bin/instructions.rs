//! The instructions `atomflake serve` spends per request, beside the hyper floor's
//! ([`atomflake_floor`]), counted by callgrind: a count that does not move with the
//! machine's load, unlike a time.
//!
//! ```sh
//! cargo build --release -p atomflake-cli -p atomflake-floor
//! target/release/instructions [--requests N] [--max-ratio R] [--keep DIR] [--otlp]
//! ```
//!
//! Each server runs under `valgrind --tool=callgrind`. For each row, h2load (Debian
//! `nghttp2-client`) first makes 1,000 requests to warm the server's buffers and its
//! allocator; then, counted alone (`callgrind_control --zero`, then `--dump`), a run of `N`
//! requests (5,000 unless told) and a run of `2N`. Each run opens its 16 connections
//! afresh, so the difference of the two over `N` is what a request costs, the connections'
//! opening and closing aside. Every request must succeed with a 2xx. The rows:
//!
//! - gRPC `GetIds{count: 1}` over 16 connections, 16 calls at once on each;
//! - HTTP/1.1 `GET /v1/ids?count=1` over 16 keep-alive connections.
//!
//! `atomflake serve --node 1` runs with its defaults (limits, metrics, the high-water file
//! in a temporary directory); the floor answers each request with fixed bytes of the same
//! shape. The table gives instructions per request and their ratio. With `--max-ratio R`,
//! a row whose ratio is above `R` fails the run (exit status 1). With `--keep DIR`, the
//! callgrind files stay in `DIR` for `callgrind_annotate`.
//!
//! With `--otlp`, `atomflake serve` is counted twice more, exporting to a collector (a
//! second floor, which answers each OTLP/HTTP post with a 200): with metrics pushed every
//! second (`OTEL_METRIC_EXPORT_INTERVAL=1000`, no traces) and with traces at the default
//! ratio of 1 % (no metrics); a second table gives each beside the server without it.
//! Under callgrind a run lasts many times longer than it would, so the pushes of metrics,
//! one a second, weigh on each request many times more than they would.
//!
//! `--floor-server ADDR` makes this binary the floor itself (the child it starts).

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

type Error = Box<dyn std::error::Error>;

/// The requests made before the counts are cleared.
const WARM_UP: u64 = 1_000;

/// A row: what h2load asks, and how.
struct Row {
    name: &'static str,
    /// h2load's arguments past the request count.
    args: &'static [&'static str],
    /// The path on the server.
    path: &'static str,
}

const ROWS: [Row; 2] = [
    Row {
        name: "gRPC GetIds{1}, 16 connections x 16 calls",
        args: &[
            "-c",
            "16",
            "-m",
            "16",
            "-H",
            "content-type: application/grpc",
            "-H",
            "te: trailers",
        ],
        path: "/atomflake.v1.Ids/GetIds",
    },
    Row {
        name: "HTTP/1.1 GET /v1/ids?count=1, 16 connections",
        args: &["--h1", "-c", "16"],
        path: "/v1/ids?count=1",
    },
];

/// `GetIdsRequest { count: 1 }` as a gRPC message: uncompressed, 2 bytes.
const GET_IDS_BODY: [u8; 7] = [0, 0, 0, 0, 2, 0x08, 0x01];

/// A server under callgrind; killed when dropped.
struct Counted {
    child: Child,
    address: String,
}

impl Drop for Counted {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Counted {
    /// Starts `command` under callgrind, its counts written to `out` (callgrind adds
    /// `.1`, `.2`, ... for each dump), and waits for the line `listening on ADDR` it
    /// prints on `stdout` or `stderr`.
    fn start(command: &Command, out: &Path) -> Result<Counted, Error> {
        let program = command.get_program().to_owned();
        let args: Vec<_> = command.get_args().map(ToOwned::to_owned).collect();
        let envs = command
            .get_envs()
            .filter_map(|(name, value)| Some((name, value?)));
        let mut child = Command::new("valgrind")
            .envs(envs)
            .arg("--tool=callgrind")
            .arg(format!("--callgrind-out-file={}", out.display()))
            .args(["--dump-instr=no", "--dump-line=no"])
            .arg(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|error| format!("valgrind could not start ({error}): install Debian's valgrind"))?;
        let (sender, lines) = std::sync::mpsc::channel();
        for pipe in [
            Box::new(child.stdout.take().expect("piped")) as Box<dyn Read + Send>,
            Box::new(child.stderr.take().expect("piped")),
        ] {
            let sender = sender.clone();
            // Read to the end, so that the server never blocks on a full pipe.
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    let _ = sender.send(line);
                }
            });
        }
        drop(sender);
        let until = Instant::now() + Duration::from_secs(120);
        let mut seen = Vec::new();
        let address = loop {
            let left = until.saturating_duration_since(Instant::now());
            let Ok(line) = lines.recv_timeout(left) else {
                let _ = child.kill();
                return Err(format!(
                    "the server did not listen within 120 s; it wrote:\n{}",
                    seen.join("\n")
                )
                .into());
            };
            if let Some((_, rest)) = line.split_once("listening on ") {
                break rest.split_whitespace().next().unwrap_or_default().to_owned();
            }
            seen.push(line);
        };
        std::thread::spawn(move || lines.into_iter().for_each(drop));
        Ok(Counted { child, address })
    }

    /// `callgrind_control ACTION` on this server.
    fn control(&self, action: &str) -> Result<(), Error> {
        let output = Command::new("callgrind_control")
            .arg(action)
            .arg(self.child.id().to_string())
            .output()?;
        if !output.status.success() {
            return Err(format!(
                "callgrind_control {action} failed ({}): {}{}",
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            )
            .into());
        }
        Ok(())
    }

    /// Runs `row` with `requests` requests, every one of which must succeed.
    fn h2load(&self, row: &Row, requests: u64, body: &Path) -> Result<(), Error> {
        let mut command = Command::new("h2load");
        command.arg("-n").arg(requests.to_string()).args(row.args);
        if row.path.starts_with("/atomflake") {
            command.arg("-d").arg(body);
        }
        let output = command
            .arg(format!("http://{}{}", self.address, row.path))
            .output()
            .map_err(|error| format!("h2load could not start ({error}): install Debian's nghttp2-client"))?;
        let report = String::from_utf8_lossy(&output.stdout);
        let succeeded = format!("{requests} succeeded, 0 failed, 0 errored");
        let all_2xx = format!("status codes: {requests} 2xx");
        if !output.status.success() || !report.contains(&succeeded) || !report.contains(&all_2xx) {
            return Err(format!("h2load: not every request succeeded:\n{report}").into());
        }
        Ok(())
    }
}

/// The instructions of a callgrind dump (its `summary:` line).
fn instructions(dump: &Path) -> Result<u64, Error> {
    let text = std::fs::read_to_string(dump).map_err(|error| format!("{}: {error}", dump.display()))?;
    text.lines()
        .find_map(|line| line.strip_prefix("summary:"))
        .and_then(|count| count.trim().parse().ok())
        .ok_or_else(|| format!("{} has no summary line", dump.display()).into())
}

/// The instructions per request of each row on the server `command` starts.
fn per_request(
    command: &Command,
    dir: &Path,
    name: &str,
    requests: u64,
    body: &Path,
) -> Result<Vec<u64>, Error> {
    let out = dir.join(format!("{name}.callgrind"));
    let server = Counted::start(command, &out)?;
    let mut dumps = 0;
    let mut counted = |requests: u64, row: &Row| -> Result<u64, Error> {
        server.control("--zero")?;
        server.h2load(row, requests, body)?;
        server.control("--dump")?;
        dumps += 1;
        instructions(&PathBuf::from(format!("{}.{dumps}", out.display())))
    };
    let mut costs = Vec::new();
    for row in &ROWS {
        server.h2load(row, WARM_UP, body)?;
        let short = counted(requests, row)?;
        let long = counted(2 * requests, row)?;
        costs.push(long.saturating_sub(short) / requests);
    }
    Ok(costs)
}

fn main() {
    if let Err(error) = start() {
        eprintln!("instructions: {error}");
        std::process::exit(1);
    }
}

fn start() -> Result<(), Error> {
    let mut args = std::env::args().skip(1);
    let mut requests = 5_000;
    let mut max_ratio = None;
    let mut keep = None;
    let mut otlp = false;
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--floor-server" => return Ok(atomflake_floor::serve(value("--floor-server")?.parse()?)?),
            "--requests" => requests = value("--requests")?.parse()?,
            "--max-ratio" => max_ratio = Some(value("--max-ratio")?.parse::<f64>()?),
            "--keep" => keep = Some(PathBuf::from(value("--keep")?)),
            "--otlp" => otlp = true,
            other => {
                return Err(format!(
                    "unknown argument {other:?}: allowed --requests N, --max-ratio R, --keep DIR, --otlp"
                )
                .into());
            }
        }
    }
    if requests == 0 {
        return Err("--requests 0: allowed 1 or more".into());
    }
    let scratch = std::env::temp_dir().join(format!("atomflake-instructions-{}", std::process::id()));
    let dir = keep.clone().unwrap_or_else(|| scratch.clone());
    std::fs::create_dir_all(&dir)?;
    let body = dir.join("get-ids.bin");
    std::fs::write(&body, GET_IDS_BODY)?;
    let result = run(&dir, requests, &body, max_ratio, otlp);
    if keep.is_none() {
        let _ = std::fs::remove_dir_all(&scratch);
    }
    result
}

fn run(dir: &Path, requests: u64, body: &Path, max_ratio: Option<f64>, otlp: bool) -> Result<(), Error> {
    let here = std::env::current_exe()?;
    let atomflake = here.with_file_name("atomflake");
    if !atomflake.exists() {
        return Err(format!(
            "{} is missing: build it with `cargo build --release -p atomflake-cli -p atomflake-floor`",
            atomflake.display()
        )
        .into());
    }
    let mut floor = Command::new(&here);
    floor.args(["--floor-server", "127.0.0.1:0"]);
    let floor = per_request(&floor, dir, "floor", requests, body)?;
    let mut serve = Command::new(&atomflake);
    serve
        .args(["serve", "--node", "1", "--listen", "127.0.0.1:0", "--high-water"])
        .arg(dir.join("high-water"));
    let exporting = if otlp {
        Some(with_otlp(&serve, dir, requests, body)?)
    } else {
        None
    };
    let serve = per_request(&serve, dir, "serve", requests, body)?;

    println!(
        "instructions per request under callgrind: the difference of runs of {requests} and {} requests, over {requests}\n",
        2 * requests
    );
    println!("| row | atomflake serve | hyper floor | ratio |");
    println!("|---|---:|---:|---:|");
    let mut over = Vec::new();
    for ((row, serve), floor) in ROWS.iter().zip(&serve).zip(floor) {
        let serve = *serve;
        #[allow(clippy::cast_precision_loss)]
        let ratio = serve as f64 / floor as f64;
        println!("| {} | {serve} | {floor} | {ratio:.2} |", row.name);
        if max_ratio.is_some_and(|max| ratio > max) {
            over.push(format!("{}: {ratio:.2}", row.name));
        }
    }
    if let Some([metrics, traces]) = exporting {
        println!("\n| row | OpenTelemetry off | metrics every 1 s | ratio | traces at 1 % | ratio |");
        println!("|---|---:|---:|---:|---:|---:|");
        for (((row, off), metrics), traces) in ROWS.iter().zip(&serve).zip(metrics).zip(traces) {
            #[allow(clippy::cast_precision_loss)]
            let ratio = |on: u64| on as f64 / *off as f64;
            println!(
                "| {} | {off} | {metrics} | {:.3} | {traces} | {:.3} |",
                row.name,
                ratio(metrics),
                ratio(traces)
            );
        }
    }
    if let Some(max) = max_ratio
        && !over.is_empty()
    {
        return Err(format!(
            "atomflake serve spends more than {max} times the floor's instructions per request: {}",
            over.join("; ")
        )
        .into());
    }
    Ok(())
}

/// The instructions per request of `serve` exporting to a collector: with metrics every
/// second, and with traces at 1 %. The collector is a floor (not counted), which answers
/// OTLP/HTTP's posts with a 200.
fn with_otlp(serve: &Command, dir: &Path, requests: u64, body: &Path) -> Result<[Vec<u64>; 2], Error> {
    let mut sink = Command::new(std::env::current_exe()?)
        .args(["--floor-server", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .spawn()?;
    let mut line = String::new();
    BufReader::new(sink.stdout.take().expect("piped")).read_line(&mut line)?;
    let address = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_default()
        .to_owned();
    let endpoint = format!("http://{address}");
    let variant = |name: &str, env: &[(&str, &str)]| {
        let mut command = Command::new(serve.get_program());
        command
            .args(serve.get_args())
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
            .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
            .envs(env.iter().copied());
        per_request(&command, dir, name, requests, body)
    };
    let result = (|| {
        Ok([
            variant(
                "serve-metrics",
                &[
                    ("OTEL_METRIC_EXPORT_INTERVAL", "1000"),
                    ("OTEL_TRACES_EXPORTER", "none"),
                ],
            )?,
            variant("serve-traces", &[("OTEL_METRICS_EXPORTER", "none")])?,
        ])
    })();
    let _ = sink.kill();
    let _ = sink.wait();
    result
}
