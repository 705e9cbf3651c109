//! `atomflake serve` side by side with `ferroid-tonic-server` 2.0.0, each a process of its
//! own on loopback, driven by the same client in this process.
//!
//! ```sh
//! cargo build --release -p atomflake-cli
//! cargo install ferroid-tonic-server --version 2.0.0 --locked   # its build runs protoc
//! cargo run --release -p atomflake-benches --bin serve [-- --quick] [--ferroid PATH] [--pin 0-7:8-15]
//! ```
//!
//! With `--pin SERVER_CPUS:CLIENT_CPUS` (`taskset` lists), every server runs on the first
//! set and the clients (this process, h2load, wrk) on the second, each tool with a thread
//! per client CPU, and the outside clients' rows add h2load over 16 and 64 connections
//! (16 calls at once on each) and wrk over 128 connections.
//!
//! Both servers mint the Twitter layout (41/10/12, 4.096 M IDs/s per node) on one node:
//! `atomflake serve --node 1` with its default limits, `ferroid-tonic-server --num-workers 1`
//! with its defaults. ferroid's server is looked for with `--ferroid`, then on `PATH`, then
//! in `~/.cargo/bin`; without it its rows are left out. The bulk rows also run on
//! `atomflake serve --node 2,3,4,5`, whose every stream draws on all four nodes.
//!
//! - **Bulk:** one `StreamIds` call for 10 M IDs per node, then 4 concurrent calls for a
//!   quarter each, on one connection. The client expands every ID (atomflake's runs,
//!   ferroid's packed little-endian `u64`s) into one vector, timed from the call to the
//!   last ID; after the clock stops, each node's IDs in each stream must be strictly
//!   increasing and all IDs distinct.
//! - **Single IDs:** for a fixed time, `concurrency` tasks each ask for one ID, wait for
//!   it and ask again: gRPC on one connection (atomflake `GetIds`, ferroid `StreamIds` with
//!   count 1, its only call), and HTTP/1.1 `GET /v1/ids?count=1` on a keep-alive connection
//!   per task. Requests/s and latency percentiles from an HDR histogram.
//! - **CPU:** the server's CPU time over each row (the sum of its threads' run time in
//!   `/proc/PID/task/*/schedstat`), per million IDs streamed and per single-ID request.
//! - **Outside clients:** when installed, h2load (Debian `nghttp2-client`) makes gRPC calls
//!   for one ID on one connection, 1, 16 and 64 at once, and wrk gets `/v1/ids?count=1`
//!   over 1, 16 and 64 keep-alive HTTP/1.1 connections; rates and latencies from their own
//!   reports (see `atomflake_benches::clients`). The same rows run against two floors,
//!   each in a process of its own (this binary): `atomflake_floor`, a hyper
//!   server on the same runtime and settings that answers with fixed bytes
//!   (`--floor-server`), what hyper and the loopback allow on the machine; and
//!   `atomflake_floor::raw`, the same answers written with no HTTP library
//!   (`--raw-floor-server`), what any HTTP server and the loopback allow. And against
//!   `atomflake serve --threads 1` (node 7), which leaves the other core to the client. They also run
//!   against `atomflake serve --tls-cert ... --tls-key ...` (node 6; a P-256 certificate
//!   made with openssl), over `https://`: the cost of TLS per request.
//! - **New connections:** h2load opens 100 connections at once, each making one gRPC
//!   call, with and without TLS: connections per second, h2load's connect time (the
//!   handshake included) and the server's CPU per connection, the median of 5 rounds.
//! - **Memory:** the server's resident set (`VmRSS`) before, and its peak sampled every
//!   10 ms while 64 concurrent streams of 200,000 IDs each are read.
//!
//! The client and the server share the machine's cores: on a 2-core machine every figure
//! is the pair's, and the same for both servers.

use atomflake::{Id, Layout};
use atomflake_benches::clients;
use atomflake_test_servers::Killed;
use atomflake_test_servers::pki::Pki;
use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Empty};
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;

mod atomflake_v1 {
    tonic::include_proto!("atomflake.v1");
}

/// ferroid's wire messages, from `proto/ferroid.proto` in `ferroid-tonic-core` 2.0.0
/// (service `ferroid.IdGenerator`, method `StreamIds`).
mod ferroid_v2 {
    /// `StreamIdsRequest { uint64 count = 1; }`
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct StreamIdsRequest {
        #[prost(uint64, tag = "1")]
        pub count: u64,
    }

    /// `IdChunk { bytes packed_ids = 1; }`: little-endian IDs, 8 bytes each.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct IdChunk {
        #[prost(bytes = "bytes", tag = "1")]
        pub packed_ids: bytes::Bytes,
    }

    pub const STREAM_IDS: &str = "/ferroid.IdGenerator/StreamIds";
}

type Error = Box<dyn std::error::Error + Send + Sync>;

/// A server process under test; killed when dropped.
struct Server {
    name: &'static str,
    /// How many nodes it mints on.
    nodes: u64,
    child: Killed,
    address: SocketAddr,
    http: bool,
    /// Whether it serves TLS (`https://`).
    tls: bool,
}

impl Server {
    /// `atomflake serve --node NODES` (`1`, `2,3,4,5`) next to this bench's binary
    /// (`target/release/`), its high-water files in `target/release/bench-serve-state/`.
    fn atomflake(name: &'static str, nodes: &str) -> Result<Server, Error> {
        Server::atomflake_with(name, nodes, &[])
    }

    /// [`Server::atomflake`] with TLS: `pki`'s certificate `server`, for 127.0.0.1.
    fn atomflake_tls(name: &'static str, nodes: &str, pki: &Pki) -> Result<Server, Error> {
        let (cert, key) = (pki.path("server.crt"), pki.path("server.key"));
        let args = ["--tls-cert", path_str(&cert)?, "--tls-key", path_str(&key)?];
        let mut server = Server::atomflake_with(name, nodes, &args)?;
        server.tls = true;
        Ok(server)
    }

    fn atomflake_with(name: &'static str, nodes: &str, extra: &[&str]) -> Result<Server, Error> {
        let binary = std::env::current_exe()?.with_file_name("atomflake");
        if !binary.exists() {
            return Err(format!(
                "{} is missing: build it first with `cargo build --release -p atomflake-cli`",
                binary.display()
            )
            .into());
        }
        // Its high-water file (kept by default on a fixed node) next to the binary, not in
        // the user's home: what is measured is the default, the mark kept.
        let state = binary.with_file_name("bench-serve-state");
        let mut child = clients::Pin::server_command(&binary)
            .args([
                "serve",
                "--node",
                nodes,
                "--listen",
                "127.0.0.1:0",
                "--high-water",
            ])
            .arg(&state)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        let stderr = child.stderr.take().expect("stderr is piped");
        let mut lines = BufReader::new(stderr).lines();
        let address = loop {
            let Some(line) = lines.next().transpose()? else {
                let _ = child.kill();
                return Err("atomflake serve exited before listening".into());
            };
            if let Some(rest) = line.strip_prefix("atomflake serve: listening on ") {
                let word = rest.split_whitespace().next().unwrap_or_default();
                break word.parse()?;
            }
        };
        // Keep reading its stderr so that it never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        Ok(Server {
            name,
            nodes: nodes.split(',').count() as u64,
            child: Killed(child),
            address,
            http: true,
            tls: false,
        })
    }

    /// The floor ([`atomflake_floor`]): this bench's binary with `--floor-server`,
    /// a hyper server that answers with fixed bytes and mints nothing; with `raw`, the
    /// lower floor ([`atomflake_floor::raw`], `--raw-floor-server`) that writes
    /// them with no HTTP library.
    fn floor(raw: bool) -> Result<Server, Error> {
        let (flag, name) = if raw {
            ("--raw-floor-server", "floor: no HTTP library, fixed answers")
        } else {
            ("--floor-server", "floor: hyper, fixed answers")
        };
        let mut child = clients::Pin::server_command(std::env::current_exe()?)
            .args([flag, "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let Some(address) = line.trim().strip_prefix("listening on ") else {
            let _ = child.kill();
            return Err(format!("the floor server did not start: {line:?}").into());
        };
        Ok(Server {
            name,
            nodes: 0,
            address: address.parse()?,
            child: Killed(child),
            http: true,
            tls: false,
        })
    }

    /// `ferroid-tonic-server --num-workers 1` on a free loopback port.
    fn ferroid(binary: &Path) -> Result<Server, Error> {
        let address = TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        let child = clients::Pin::server_command(binary)
            .args(["--num-workers", "1", "--server-addr", &address.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let server = Server {
            name: "ferroid-tonic-server",
            nodes: 1,
            child: Killed(child),
            address,
            http: false,
            tls: false,
        };
        let until = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(address).is_err() {
            if Instant::now() > until {
                return Err(format!("ferroid-tonic-server is not listening on {address} after 10 s").into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(server)
    }

    /// `http://ADDRESS` or `https://ADDRESS`.
    fn base(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.address)
    }

    fn pid(&self) -> u32 {
        self.child.0.id()
    }

    /// The CPU time the server's threads have run, from the scheduler's statistics.
    fn cpu(&self) -> Duration {
        let mut nanos = 0u64;
        if let Ok(tasks) = std::fs::read_dir(format!("/proc/{}/task", self.pid())) {
            for task in tasks.flatten() {
                let stat = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
                nanos += stat
                    .split_whitespace()
                    .next()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
            }
        }
        Duration::from_nanos(nanos)
    }

    /// The server's resident set in bytes.
    fn rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|kib| kib.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kib| kib * 1024)
    }

    async fn channel(&self) -> Result<Channel, Error> {
        let endpoint = Channel::from_shared(format!("http://{}", self.address))?;
        Ok(endpoint.connect().await?)
    }

    fn is_ferroid(&self) -> bool {
        !self.http
    }
}

/// One `StreamIds` call for `count` IDs, each expanded into `into`.
async fn stream(server: &Server, channel: Channel, count: u64, into: &mut Vec<u64>) -> Result<(), Error> {
    if server.is_ferroid() {
        let mut grpc = tonic::client::Grpc::new(channel);
        grpc.ready().await?;
        let request = tonic::Request::new(ferroid_v2::StreamIdsRequest { count });
        let path = PathAndQuery::from_static(ferroid_v2::STREAM_IDS);
        let mut chunks = grpc
            .server_streaming::<_, ferroid_v2::IdChunk, _>(request, path, tonic_prost::ProstCodec::default())
            .await?
            .into_inner();
        while let Some(chunk) = chunks.message().await? {
            let bytes: &Bytes = &chunk.packed_ids;
            into.extend(
                bytes
                    .chunks_exact(8)
                    .map(|id| u64::from_le_bytes(id.try_into().expect("8 bytes"))),
            );
        }
    } else {
        let mut client = atomflake_v1::ids_client::IdsClient::new(channel);
        let mut messages = client
            .stream_ids(atomflake_v1::StreamIdsRequest { count })
            .await?
            .into_inner();
        while let Some(message) = messages.message().await? {
            for run in message.runs {
                into.extend((0..u64::from(run.count)).map(|k| run.first + k * run.step));
            }
        }
    }
    Ok(())
}

/// Checks that each node's IDs in each stream increase (one node's are all of them for
/// one node) and that no ID appears twice across them.
fn check(streams: &[Vec<u64>], expected: u64) -> Result<(), Error> {
    let mut all = Vec::with_capacity(streams.iter().map(Vec::len).sum());
    for ids in streams {
        let mut last = std::collections::HashMap::new();
        for &id in ids {
            let node = Layout::TWITTER.try_decode(Id::new(id))?.node;
            if let Some(before) = last.insert(node, id)
                && before >= id
            {
                return Err(format!("a stream goes from {before} to {id} on node {node}").into());
            }
        }
        all.extend_from_slice(ids);
    }
    if all.len() as u64 != expected {
        return Err(format!("{} IDs received, {expected} asked for", all.len()).into());
    }
    all.sort_unstable();
    if let Some(at) = all.windows(2).position(|pair| pair[0] == pair[1]) {
        return Err(format!("ID {} was received twice", all[at]).into());
    }
    Ok(())
}

/// `streams` concurrent `StreamIds` calls for `per_stream` IDs each on `channel`: the IDs
/// of each.
async fn concurrent_streams(
    server: &Arc<Server>,
    channel: &Channel,
    streams: u64,
    per_stream: u64,
) -> Result<Vec<Vec<u64>>, Error> {
    let calls: Vec<_> = (0..streams)
        .map(|_| {
            let (server, channel) = (Arc::clone(server), channel.clone());
            tokio::spawn(async move {
                let mut ids = Vec::with_capacity(usize::try_from(per_stream).unwrap_or(0));
                stream(&server, channel, per_stream, &mut ids).await.map(|()| ids)
            })
        })
        .collect();
    let mut received = Vec::new();
    for call in calls {
        received.push(call.await??);
    }
    Ok(received)
}

/// A bulk row: `streams` concurrent calls for `total` IDs in all, on one connection.
struct Bulk {
    ids_per_s: f64,
    cpu_ms_per_million: f64,
}

async fn bulk(server: &Arc<Server>, streams: u64, total: u64) -> Result<Bulk, Error> {
    let channel = server.channel().await?;
    let per_stream = total / streams;
    let cpu = server.cpu();
    let start = Instant::now();
    let received = concurrent_streams(server, &channel, streams, per_stream).await?;
    let elapsed = start.elapsed();
    let cpu = server.cpu().saturating_sub(cpu);
    check(&received, per_stream * streams)?;
    let ids = float(per_stream * streams);
    Ok(Bulk {
        ids_per_s: ids / elapsed.as_secs_f64(),
        cpu_ms_per_million: cpu.as_secs_f64() * 1e3 / (ids / 1e6),
    })
}

/// How single-ID requests are made.
#[derive(Clone, Copy, PartialEq)]
enum Api {
    Grpc,
    Http,
}

/// A single-ID row.
struct Single {
    per_s: f64,
    p50_us: f64,
    p99_us: f64,
    p999_us: f64,
    cpu_us_per_request: f64,
}

/// One ID over HTTP/1.1 on `sender`'s connection.
async fn http_one(
    sender: &mut hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
    address: SocketAddr,
) -> Result<u64, Error> {
    let request = hyper::Request::get("/v1/ids?count=1")
        .header("host", address.to_string())
        .body(Empty::new())?;
    let response = sender.send_request(request).await?;
    if response.status() != 200 {
        return Err(format!("GET /v1/ids answered {}", response.status()).into());
    }
    let body = response.into_body().collect().await?.to_bytes();
    let text = std::str::from_utf8(&body)?;
    let digits = text
        .strip_prefix(r#"{"ids":[""#)
        .and_then(|rest| rest.strip_suffix(r#""]}"#))
        .ok_or_else(|| format!("unexpected body {text}"))?;
    Ok(digits.parse()?)
}

async fn grpc_one(server: &Server, channel: Channel) -> Result<u64, Error> {
    let mut ids = Vec::with_capacity(1);
    if server.is_ferroid() {
        stream(server, channel, 1, &mut ids).await?;
    } else {
        let mut client = atomflake_v1::ids_client::IdsClient::new(channel);
        ids = client
            .get_ids(atomflake_v1::GetIdsRequest { count: 1 })
            .await?
            .into_inner()
            .ids;
    }
    match ids.as_slice() {
        [id] => Ok(*id),
        _ => Err(format!("{} IDs for a request of one", ids.len()).into()),
    }
}

async fn single(server: &Arc<Server>, api: Api, concurrency: usize, run: Duration) -> Result<Single, Error> {
    let channel = server.channel().await?;
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    let cpu = server.cpu();
    let start = Instant::now();
    for _ in 0..concurrency {
        let channel = channel.clone();
        let stop = Arc::clone(&stop);
        let answered = Arc::clone(&answered);
        let server = Arc::clone(server);
        let mut sender = if api == Api::Http {
            let tcp = tokio::net::TcpStream::connect(server.address).await?;
            tcp.set_nodelay(true)?;
            let (sender, connection) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp)).await?;
            tokio::spawn(connection);
            Some(sender)
        } else {
            None
        };
        tasks.push(tokio::spawn(async move {
            let mut histogram =
                Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds");
            let mut last = 0;
            while !stop.load(Ordering::Relaxed) {
                let asked = Instant::now();
                let id = match &mut sender {
                    Some(sender) => http_one(sender, server.address).await?,
                    None => grpc_one(&server, channel.clone()).await?,
                };
                histogram.saturating_record(u64::try_from(asked.elapsed().as_nanos()).unwrap_or(u64::MAX));
                if id <= last {
                    return Err(Error::from(format!("one task got {id} after {last}")));
                }
                last = id;
                answered.fetch_add(1, Ordering::Relaxed);
            }
            Ok(histogram)
        }));
    }
    tokio::time::sleep(run).await;
    stop.store(true, Ordering::Relaxed);
    let mut histogram = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds");
    for task in tasks {
        histogram.add(task.await??)?;
    }
    let elapsed = start.elapsed();
    let cpu = server.cpu().saturating_sub(cpu);
    let requests = float(answered.load(Ordering::Relaxed));
    let us = |q: f64| float(histogram.value_at_quantile(q)) / 1e3;
    Ok(Single {
        per_s: requests / elapsed.as_secs_f64(),
        p50_us: us(0.5),
        p99_us: us(0.99),
        p999_us: us(0.999),
        cpu_us_per_request: cpu.as_secs_f64() * 1e6 / requests,
    })
}

/// The server's resident set before, and its peak while 64 streams of 200,000 IDs run.
async fn memory(server: &Arc<Server>) -> Result<(u64, u64), Error> {
    let before = server.rss();
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let done = Arc::clone(&done);
        let server = Arc::clone(server);
        std::thread::spawn(move || {
            let mut peak = 0;
            while !done.load(Ordering::Relaxed) {
                peak = peak.max(server.rss());
                std::thread::sleep(Duration::from_millis(10));
            }
            peak
        })
    };
    let channel = server.channel().await?;
    let received = concurrent_streams(server, &channel, 64, 200_000).await;
    done.store(true, Ordering::Relaxed);
    let peak = sampler.join().expect("the sampler does not panic");
    check(&received?, 64 * 200_000)?;
    Ok((before, peak))
}

/// The rows of the clients no one here wrote, when they are installed: h2load's gRPC
/// calls for one ID (atomflake `GetIds`, ferroid `StreamIds`) on one connection, and wrk's
/// `GET /v1/ids?count=1` over keep-alive connections. Runs of whole seconds, at least one.
fn outside_clients(servers: &[Arc<Server>], window: Duration) -> Result<(), Error> {
    let run = Duration::from_secs(window.as_secs().max(1));
    let (h2load, wrk) = (clients::installed("h2load"), clients::installed("wrk"));
    if !h2load && !wrk {
        eprintln!("neither h2load (Debian nghttp2-client) nor wrk is installed: their rows are left out");
        return Ok(());
    }
    let scratch = std::env::temp_dir().join(format!("atomflake-bench-clients-{}", std::process::id()));
    match clients::Pin::get() {
        Some(pin) => println!(
            "\n## Single IDs from outside clients: h2load (gRPC; connections x calls at once) and wrk \
             (HTTP/1.1; connections), {run:?} per row, servers on CPUs {}, clients on {}\n",
            pin.server, pin.client
        ),
        None => println!(
            "\n## Single IDs from outside clients: h2load (gRPC, one connection) and wrk (HTTP/1.1), {run:?} per row\n"
        ),
    }
    println!(
        "| server | client | API | concurrency | requests/s | p50 µs | p99 µs | p99.9 µs | server CPU µs per request |"
    );
    println!("|---|---|---|---:|---:|---:|---:|---:|---:|");
    let row =
        |server: &Server, client: &str, api: &str, concurrency: &str, load: clients::Load, cpu: Duration| {
            println!(
                "| {} | {client} | {api} | {concurrency} | {:.0} | {:.1} | {:.1} | {} | {:.1} |",
                server.name,
                load.per_s,
                load.p50_us,
                load.p99_us,
                load.p999_us
                    .map_or_else(|| "–".to_owned(), |us| format!("{us:.1}")),
                cpu.as_secs_f64() * 1e6 / float(load.done.max(1)),
            );
        };
    // Pinned, the cores to spare take more connections.
    let pinned = clients::Pin::get().is_some();
    let mut shapes = vec![(1, 1), (1, 16), (1, 64)];
    if pinned {
        shapes.extend([(16, 16), (64, 16)]);
    }
    for (connections, concurrency) in shapes {
        for server in servers.iter().filter(|_| h2load) {
            let call = if server.is_ferroid() {
                clients::GrpcCall::FERROID_ONE
            } else {
                clients::GrpcCall::ATOMFLAKE_ONE
            };
            let before = server.cpu();
            let load = clients::h2load(&server.base(), call, (connections, concurrency), run, &scratch)?;
            let shape = if connections == 1 {
                concurrency.to_string()
            } else {
                format!("{connections} x {concurrency}")
            };
            row(
                server,
                "h2load",
                "gRPC",
                &shape,
                load,
                server.cpu().saturating_sub(before),
            );
        }
    }
    let mut http_connections = vec![1, 16, 64];
    if pinned {
        http_connections.push(128);
    }
    for connections in http_connections {
        for server in servers.iter().filter(|server| wrk && server.http) {
            let before = server.cpu();
            let load = clients::wrk(&server.base(), "/v1/ids?count=1", connections, run)?;
            row(
                server,
                "wrk",
                "HTTP/1.1",
                &connections.to_string(),
                load,
                server.cpu().saturating_sub(before),
            );
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}

/// The memory section: each server's resident set before and during 64 streams.
async fn memory_rows(servers: &[Arc<Server>]) -> Result<(), Error> {
    println!("\n## Memory: 64 concurrent streams of 200,000 IDs\n");
    println!("| server | resident before | peak resident during |");
    println!("|---|---:|---:|");
    for server in servers {
        let (before, peak) = memory(server).await?;
        println!(
            "| {} | {:.1} MiB | {:.1} MiB |",
            server.name,
            float(before) / 1_048_576.0,
            float(peak) / 1_048_576.0
        );
    }
    Ok(())
}

/// New connections, one call each, with and without TLS: what a handshake costs. Each row
/// is the median of 5 rounds (by connections/s), the server's CPU over all 5.
fn connections(servers: &[Arc<Server>], clients: u32) -> Result<(), Error> {
    const ROUNDS: u32 = 5;
    if !clients::installed("h2load") {
        return Ok(());
    }
    let scratch = std::env::temp_dir().join(format!("atomflake-bench-connections-{}", std::process::id()));
    println!(
        "\n## New connections: {clients} at once, one gRPC call each (h2load), median of {ROUNDS} rounds\n"
    );
    println!("| server | connections/s | connect mean µs | connect max µs | server CPU µs per connection |");
    println!("|---|---:|---:|---:|---:|");
    for server in servers {
        let before = server.cpu();
        let mut rounds = (0..ROUNDS)
            .map(|_| {
                clients::h2load_connections(
                    &server.base(),
                    clients::GrpcCall::ATOMFLAKE_ONE,
                    clients,
                    &scratch,
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        let cpu = server.cpu().saturating_sub(before) / ROUNDS;
        rounds.sort_by(|a, b| a.per_s.total_cmp(&b.per_s));
        let load = rounds[rounds.len() / 2];
        println!(
            "| {} | {:.0} | {:.0} | {:.0} | {:.1} |",
            server.name,
            load.per_s,
            load.connect_mean_us,
            load.connect_max_us,
            cpu.as_secs_f64() * 1e6 / f64::from(clients)
        );
    }
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}

/// `path` as UTF-8, for a command line.
fn path_str(path: &Path) -> Result<&str, Error> {
    path.to_str()
        .ok_or_else(|| format!("{} is not UTF-8", path.display()).into())
}

/// The certificates of the TLS server, made with openssl; `None` without it.
fn tls_pki() -> Option<Pki> {
    if !atomflake_test_servers::pki::has_openssl("bench-serve") {
        eprintln!("no openssl: the TLS rows are left out");
        return None;
    }
    let pki = Pki::temporary("bench-serve");
    pki.ca("ca");
    pki.leaf("server", "ca", "127.0.0.1", "IP:127.0.0.1");
    Some(pki)
}

#[allow(clippy::cast_precision_loss, reason = "counts and sizes far below 2^52")]
fn float(value: u64) -> f64 {
    value as f64
}

fn find_ferroid(explicit: Option<PathBuf>) -> Option<PathBuf> {
    if let Some(path) = explicit {
        return Some(path);
    }
    let name = "ferroid-tonic-server";
    let mut places: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect())
        .unwrap_or_default();
    if let Some(home) = std::env::var_os("HOME") {
        places.push(Path::new(&home).join(".cargo/bin"));
    }
    places
        .into_iter()
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
}

/// The IDs a server hands out must decode to its node and to now.
async fn sanity(server: &Server) -> Result<(), Error> {
    let mut ids = Vec::new();
    stream(server, server.channel().await?, 1, &mut ids).await?;
    let parts = Layout::TWITTER.try_decode(Id::new(ids[0]))?;
    let now = u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis(),
    )?;
    if now.abs_diff(parts.unix_ms) > 1_000 {
        return Err(format!(
            "{}'s ID {} decodes to {} ms, {} ms from now: not the Twitter layout",
            server.name, ids[0], parts.unix_ms, now
        )
        .into());
    }
    Ok(())
}

/// What the command line asks for: the bench (`--quick`, `--ferroid PATH`, `--pin`), or
/// a floor server.
enum Run {
    Bench { quick: bool, ferroid: Option<PathBuf> },
    Floor { raw: bool, address: SocketAddr },
}

fn arguments() -> Result<Run, Error> {
    let mut quick = false;
    let mut ferroid = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |what: &str| args.next().ok_or_else(|| format!("{arg} needs {what}"));
        match arg.as_str() {
            "--quick" => quick = true,
            "--ferroid" => ferroid = Some(PathBuf::from(value("a path")?)),
            "--pin" => clients::Pin::parse(&value("SERVER_CPUS:CLIENT_CPUS")?)?.apply()?,
            "--floor-server" | "--raw-floor-server" => {
                let raw = arg == "--raw-floor-server";
                let address = value("an address")?.parse()?;
                return Ok(Run::Floor { raw, address });
            }
            other => {
                return Err(
                    format!("unknown argument {other}: expected --quick, --pin SERVER_CPUS:CLIENT_CPUS or --ferroid PATH")
                        .into(),
                );
            }
        }
    }
    Ok(Run::Bench { quick, ferroid })
}

fn main() -> Result<(), Error> {
    let (quick, ferroid) = match arguments()? {
        Run::Bench { quick, ferroid } => (quick, ferroid),
        Run::Floor { raw: false, address } => return Ok(atomflake_floor::serve(address)?),
        Run::Floor { raw: true, address } => return Ok(atomflake_floor::raw::serve(address)?),
    };
    let (bulk_ids, window) = if quick {
        (1_000_000, Duration::from_millis(500))
    } else {
        (10_000_000, Duration::from_secs(3))
    };

    let mut servers = vec![Arc::new(Server::atomflake("atomflake serve", "1")?)];
    match find_ferroid(ferroid) {
        Some(path) => servers.push(Arc::new(Server::ferroid(&path)?)),
        None => eprintln!(
            "ferroid-tonic-server not found (`cargo install ferroid-tonic-server --version 2.0.0 --locked`, \
             or --ferroid PATH): its rows are left out"
        ),
    }
    // Bulk rows alone: one stream on four nodes draws on all four.
    let four_nodes = [Arc::new(Server::atomflake("atomflake serve", "2,3,4,5")?)];
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let result = runtime.block_on(async {
        for server in servers.iter().chain(&four_nodes) {
            sanity(server).await?;
        }
        println!("## Bulk: {bulk_ids} IDs over StreamIds, one connection\n");
        println!("| server | nodes | streams | IDs/s | share of the nodes' cap (4.096 M/s each) | server CPU ms per M IDs |");
        println!("|---|---:|---:|---:|---:|---:|");
        for streams in [1, 4] {
            for server in servers.iter().chain(&four_nodes) {
                let row = bulk(server, streams, bulk_ids * server.nodes).await?;
                println!(
                    "| {} | {} | {streams} | {:.3} M | {:.1} % | {:.1} |",
                    server.name,
                    server.nodes,
                    row.ids_per_s / 1e6,
                    row.ids_per_s / (4_096_000.0 * float(server.nodes)) * 100.0,
                    row.cpu_ms_per_million
                );
            }
        }
        println!("\n## Single IDs: {window:?} per row\n");
        println!("| server | API | concurrency | requests/s | p50 µs | p99 µs | p99.9 µs | server CPU µs per request |");
        println!("|---|---|---:|---:|---:|---:|---:|---:|");
        for api in [Api::Grpc, Api::Http] {
            for concurrency in [1, 16, 64] {
                for server in servers.iter().filter(|server| api == Api::Grpc || server.http) {
                    let row = single(server, api, concurrency, window).await?;
                    println!(
                        "| {} | {} | {concurrency} | {:.0} | {:.1} | {:.1} | {:.1} | {:.1} |",
                        server.name,
                        if api == Api::Grpc { "gRPC" } else { "HTTP/1.1" },
                        row.per_s,
                        row.p50_us,
                        row.p99_us,
                        row.p999_us,
                        row.cpu_us_per_request
                    );
                }
            }
        }
        let floors = [Arc::new(Server::floor(false)?), Arc::new(Server::floor(true)?)];
        // One worker thread leaves the other core to the client.
        let one_thread = Arc::new(Server::atomflake_with("atomflake serve --threads 1", "7", &["--threads", "1"])?);
        let pki = tls_pki();
        let tls = match &pki {
            Some(pki) => vec![Arc::new(Server::atomflake_tls("atomflake serve, TLS", "6", pki)?)],
            None => Vec::new(),
        };
        let outside: Vec<Arc<Server>> = servers.iter().cloned().chain([one_thread]).chain(tls.iter().cloned()).chain(floors).collect();
        outside_clients(&outside, window)?;
        memory_rows(&servers).await?;
        let atomflake_only: Vec<Arc<Server>> = servers.iter().take(1).cloned().chain(tls).collect();
        connections(&atomflake_only, 100)?;
        Ok::<(), Error>(())
    });
    // The tasks are done; the servers are killed as their last references drop.
    drop(runtime);
    drop(servers);
    result
}
