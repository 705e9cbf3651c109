//! `atomflake serve`: IDs over HTTP/JSON and gRPC from one port (see `atomflake-serve`).

use super::lease::{self, LeaseArgs};
use super::{LayoutArgs, node_in};
use crate::Failure;
use crate::high_water::HighWaterArgs;
use atomflake::{Builder, Layout, ShardedGenerator};
use atomflake_serve::{Limit, Limits, Service, Watched};
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The options of `atomflake serve`.
#[derive(Args)]
pub(crate) struct ServeArgs {
    #[command(flatten)]
    layout: LayoutArgs,
    /// The node (or nodes, comma-separated) this server mints on. Give every server of the
    /// same IDs nodes of its own, or their IDs collide; or take them with `--lease`.
    #[arg(
        long,
        env = "ATOMFLAKE_NODE",
        value_name = "N[,N...]",
        value_delimiter = ',',
        allow_negative_numbers = true
    )]
    node: Vec<String>,
    /// Take the node from this pod's StatefulSet ordinal: the number after the last `-` of
    /// the hostname (`ids-3`: node 3). Put its high-water file on the pod's volume
    /// (`--high-water`).
    #[arg(long)]
    statefulset: bool,
    #[command(flatten)]
    high_water: HighWaterArgs,
    /// Take the nodes from a lease in this PostgreSQL database, etcd cluster or ZooKeeper
    /// ensemble (as
    /// `mint --lease`): held while serving, released at shutdown with the exact mark. A
    /// lost lease stops serving at once and health goes red.
    #[arg(long, env = "ATOMFLAKE_LEASE", hide_env_values = true, value_name = "URL")]
    lease: Option<String>,
    /// How many nodes to lease (each adds the layout's cap: 4.096 M IDs/s for twitter; at
    /// most 42 on etcd, whose transactions hold 128 operations unless set otherwise).
    #[arg(long, default_value_t = 1, value_name = "K")]
    nodes: u64,
    #[command(flatten)]
    lease_options: LeaseArgs,
    /// The address to listen on, for HTTP and gRPC alike (port 0: any free port; the
    /// address taken is printed on stderr).
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR")]
    listen: SocketAddr,
    /// The most IDs one `GET /v1/ids` or `GetIds` call returns.
    #[arg(long, default_value_t = Limits::default().max_count, value_name = "N")]
    max_count: u32,
    /// The most requests one connection may start per second, on average.
    #[arg(long, default_value_t = Limits::default().requests_per_second, value_name = "N")]
    rate: u32,
    /// The most IDs one connection may take per second, on average (bursts of as many; at
    /// least --max-count): a request for more than are left is refused (429,
    /// `RESOURCE_EXHAUSTED`), and a stream is slowed to it. No limit unless set.
    #[arg(long, value_name = "N")]
    ids_rate: Option<u64>,
    /// The most gRPC calls one connection may have open at once.
    #[arg(long, default_value_t = Limits::default().streams_per_connection, value_name = "N")]
    streams: u32,
    /// The most `StreamIds` calls the whole server serves at once; one more is refused
    /// (`RESOURCE_EXHAUSTED`) until one ends.
    #[arg(long, default_value_t = Limits::default().max_streams, value_name = "N")]
    max_streams: u32,
    /// The most connections open at once (4096 unless set, and never more than the
    /// open-file limit leaves, which is raised to its hard limit at start). Past it new
    /// connections wait in the listener's backlog, but for 16 more that answer health
    /// checks (`/healthz`, `/livez`, `/readyz`, gRPC health) alone.
    #[arg(long, value_name = "N")]
    max_connections: Option<u32>,
    /// How long, in seconds, a new connection has to send its first request's head: a
    /// client that sends nothing, or trickles it, is closed after it. For HTTP/1.1 it also
    /// bounds every later request's head.
    #[arg(long, default_value_t = Limits::default().header_timeout.as_secs(), value_name = "S")]
    header_timeout: u64,
    /// How long, in seconds, a connection with no request under way stays open after its
    /// last one. HTTP/2 connections are also pinged every 20 s, and dropped when a ping
    /// goes unanswered for 20 s.
    #[arg(long, default_value_t = Limits::default().idle_timeout.as_secs(), value_name = "S")]
    idle_timeout: u64,
    /// How long, in seconds, a `StreamIds` waits for its client to read its next message
    /// (the client's flow-control window and the stream's buffer full) before it ends with
    /// `DEADLINE_EXCEEDED`, after the IDs it sent, and frees its place among the
    /// `--max-streams`.
    #[arg(long, default_value_t = Limits::DEFAULT_STALL_TIMEOUT.as_secs(), value_name = "S")]
    stall_timeout: u64,
    /// Close each connection gracefully after this many seconds, give or take a tenth
    /// drawn for each (as gRPC's `MaxConnectionAge`): HTTP/2 `GOAWAY`, the calls under way
    /// finish and clients reconnect; HTTP/1.1 no request after the one under way. Off
    /// unless set: IDs carry no state of their connection; set it to spread long-lived
    /// clients over servers behind a layer-4 balancer.
    #[arg(long, value_name = "S")]
    max_connection_age: Option<u64>,
    /// How long, in seconds, a connection closed at `--max-connection-age`, or when its
    /// client certificate expires (`--tls-client-ca`), has for the requests under way
    /// before it is cut.
    #[arg(long, default_value_t = Limits::DEFAULT_CONNECTION_AGE_GRACE.as_secs(), value_name = "S")]
    max_connection_age_grace: u64,
    /// The runtime's worker threads, which run the connections and the minting: one per
    /// core unless set (or `TOKIO_WORKER_THREADS`), at most 1024. Where the cores are
    /// shared with busy neighbours (a sidecar, the clients), fewer threads than cores can
    /// serve more requests, with a shorter tail.
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// How long, in seconds, shutdown (SIGTERM, SIGINT) waits for the requests under way.
    #[arg(long, default_value_t = 10, value_name = "S")]
    drain: u64,
    /// Let pages of this origin (`https://app.example.com`; `*` for any; repeat or separate
    /// with commas for several) call the HTTP API from a browser (CORS).
    #[arg(long, value_name = "ORIGIN", value_delimiter = ',')]
    cors_origin: Vec<String>,
    #[command(flatten)]
    access: AccessArgs,
    /// When minting ends for good (the lease lost to another server, the layout's span
    /// spent), stay up with health red rather than drain and exit with code 1 (so that a
    /// supervisor restarts the server and it claims a node again).
    #[arg(long)]
    stay_stopped: bool,
    /// When the lease is lost (another server took the node after this one went silent
    /// past the lease time), claim nodes afresh and serve on, rather than stop: requests
    /// wait up to 2 s for them and readiness is red meanwhile; a claim that fails is tried
    /// again every second. The new nodes start past their marks, as at start.
    #[arg(long, requires = "lease")]
    reclaim: bool,
    /// How log lines are written on stderr: `text` (`atomflake serve: listening on …`) or
    /// `json`, one object per line with `timestamp`, `level`, `message`, `event`
    /// (`listening`, `claimed`, `draining`, `stopped_minting`, `released`, …) and the
    /// event's fields.
    #[arg(
        long,
        value_enum,
        default_value_t,
        env = "ATOMFLAKE_LOG_FORMAT",
        value_name = "FORMAT"
    )]
    pub(crate) log_format: crate::log::LogFormat,
}

/// Who may reach the port and take IDs: TLS and bearer tokens.
#[derive(Args)]
struct AccessArgs {
    /// Serve TLS only, with this certificate chain (PEM, the server's certificate first):
    /// HTTPS and gRPC over TLS on the one port, HTTP/2 or HTTP/1.1 chosen by ALPN. Read
    /// again with its key and the client CA, for the connections after, on SIGHUP and when
    /// one of their files changes (looked at every second); connections open keep theirs.
    #[arg(long, requires = "tls_key", value_name = "PEM")]
    tls_cert: Option<PathBuf>,
    /// The private key of `--tls-cert` (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, requires = "tls_cert", value_name = "PEM")]
    tls_key: Option<PathBuf>,
    /// Require client certificates signed by this CA (PEM); a client without one is
    /// refused in the handshake. When the file is read again, an open connection whose
    /// client certificate it no longer trusts is closed; one whose certificate expires is
    /// closed then (no request after; `--max-connection-age-grace` for those under way).
    #[arg(long, requires = "tls_cert", value_name = "PEM")]
    tls_client_ca: Option<PathBuf>,
    /// Ask every request but health checks for a bearer token (`Authorization: Bearer
    /// TOKEN`, over HTTP and as gRPC metadata) from this file: one per line, at least 16
    /// visible ASCII characters each, blank lines and `#` lines left out; compared in
    /// constant time. Without one: HTTP 401, gRPC `UNAUTHENTICATED`. Read again on SIGHUP
    /// and when the file changes. No token is logged or counted by value.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Ask `/metrics` for a token too (it is open by default, as health checks are).
    #[arg(long, requires = "token_file")]
    metrics_token: bool,
}

pub(crate) fn run(args: &ServeArgs) -> Result<(), Failure> {
    let layout = args.layout.preset()?;
    let file_limit = atomflake_serve::raise_file_limit()
        .map_err(|err| Failure::Other(format!("cannot read the open-file limit: {err}")))?;
    let limits = limits(args, file_limit)?;
    // Read before anything is claimed: a bad file is refused with nothing to release.
    let tls = tls(&args.access)?;
    let tokens = match &args.access.token_file {
        Some(file) => Some(Arc::new(
            atomflake_serve::Tokens::from_file(file, args.access.metrics_token).map_err(Failure::Usage)?,
        )),
        None => None,
    };
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = args.threads {
        if !(1..=MAX_THREADS).contains(&threads) {
            return Err(Failure::Usage(format!(
                "--threads {threads} is out of range: allowed 1..={MAX_THREADS}"
            )));
        }
        runtime.worker_threads(threads);
    }
    let runtime = runtime
        .enable_all()
        .thread_name("atomflake-serve")
        .build()
        .map_err(|err| Failure::Other(format!("cannot start the runtime: {err}")))?;
    // Watched before the claim: a signal during start-up is not lost, nor fatal.
    let signals = {
        let _context = runtime.enter();
        count_signals()
    };
    let (generator, store) = generator(layout, args)?;
    let nodes: Vec<String> = generator.nodes().map(|node| node.to_string()).collect();
    let nodes = nodes.join(",");
    let leased = store.is_some();
    if *signals.borrow() > 0 {
        // Dropping the generator releases a lease at once, with the mark it started at.
        drop(generator);
        tracing::info!(
            target: "atomflake serve",
            event = if leased { "released" } else { "stopped" },
            nodes = %nodes,
            "a signal during start-up: stopped before serving{}",
            if leased { format!("; node {nodes} released") } else { String::new() }
        );
        return Ok(());
    }
    let marks = if leased {
        "the mark in the lease".to_owned()
    } else {
        args.high_water.describe()
    };
    // The limits are checked already: no error here.
    let mut service = Service::new(generator, limits, store)
        .map_err(|error| Failure::Other(error.to_string()))?
        .allow_origins(&args.cors_origin)
        .map_err(Failure::Usage)?;
    if args.reclaim {
        service = service.reclaiming();
    }
    if let Some(tls) = tls {
        service = service.with_tls(tls);
    }
    if let Some(tokens) = &tokens {
        service = service.require_tokens(Arc::clone(tokens));
    }
    let service = Arc::new(service);
    {
        let _context = runtime.enter();
        if let Some(tls) = service.tls() {
            tls.watch_files();
        }
        if let Some(tokens) = &tokens {
            tokens.watch_file();
        }
        reload_on_sighup(service.tls().cloned(), tokens);
    }
    let listening = Listening {
        nodes: nodes.clone(),
        marks,
        file_limit,
    };
    let result = runtime.block_on(serve_until_stopped(args, service, signals, listening));
    // Connections still open after the drain hold the service: dropping their tasks drops
    // it, and with it the generator, which releases its nodes.
    runtime.shutdown_timeout(Duration::from_secs(1));
    if let (true, Ok(nodes)) = (leased, &result) {
        tracing::info!(
            target: "atomflake serve",
            event = "released",
            nodes = %nodes,
            "stopped; node {nodes} released"
        );
    } else {
        tracing::info!(target: "atomflake serve", event = "stopped", "stopped");
    }
    result.map(drop)
}

/// The TLS of `--tls-cert`, `--tls-key` and `--tls-client-ca`, their files read.
fn tls(args: &AccessArgs) -> Result<Option<atomflake_serve::Tls>, Failure> {
    let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) else {
        return Ok(None);
    };
    let files = atomflake_serve::TlsFiles {
        cert: cert.clone(),
        key: key.clone(),
        client_ca: args.tls_client_ca.clone(),
    };
    atomflake_serve::Tls::new(files).map(Some).map_err(Failure::Usage)
}

/// On each SIGHUP, reads the TLS certificate and the tokens again, on a task of the
/// current runtime.
fn reload_on_sighup(tls: Option<atomflake_serve::Tls>, tokens: Option<Arc<atomflake_serve::Tokens>>) {
    use tokio::signal::unix::{SignalKind, signal};
    if tls.is_none() && tokens.is_none() {
        return;
    }
    let Ok(mut hangups) = signal(SignalKind::hangup()) else {
        tracing::error!(
            target: "atomflake serve",
            event = "no_signals",
            "cannot watch for SIGHUP: the certificate and tokens are not reloaded by it"
        );
        return;
    };
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            if let Some(tls) = &tls {
                tls.reload_logged("SIGHUP");
            }
            if let Some(tokens) = &tokens {
                tokens.reload_logged("SIGHUP");
            }
        }
    });
}

/// What the listening line says besides the address.
struct Listening {
    nodes: String,
    marks: String,
    file_limit: u64,
}

/// Binds, serves `service` and drains it at the first signal (or once minting ends for
/// good, unless `--stay-stopped`), for at most the drain time or until a second signal.
/// The nodes it minted on last (other than at start once claimed afresh).
async fn serve_until_stopped(
    args: &ServeArgs,
    service: Arc<Service>,
    signals: tokio::sync::watch::Receiver<u32>,
    listening: Listening,
) -> Result<String, Failure> {
    let Listening {
        nodes,
        marks,
        file_limit,
    } = listening;
    let limits = service.limits();
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|err| Failure::Other(format!("cannot listen on {}: {err}", args.listen)))?;
    let address = listener
        .local_addr()
        .map_err(|err| Failure::Other(format!("cannot listen on {}: {err}", args.listen)))?;
    tracing::info!(
        target: "atomflake serve",
        event = "listening",
        %address,
        layout = %args.layout.layout,
        nodes = %nodes,
        max_connections = limits.max_connections,
        file_limit,
        tls = service.tls().is_some(),
        "listening on {address} ({}), layout {}, node {}; {marks}; \
         at most {} connections (open-file limit {file_limit})",
        if service.tls().is_some() { "HTTPS and gRPC over TLS" } else { "HTTP and gRPC" },
        args.layout.layout,
        nodes,
        limits.max_connections
    );
    if args.reclaim {
        spawn_reclaim(args, &service);
    }
    let stopped = Arc::new(std::sync::OnceLock::new());
    let shutdown = {
        let (service, stopped) = (Arc::clone(&service), Arc::clone(&stopped));
        let stay = args.stay_stopped;
        let mut signals = signals.clone();
        async move {
            tokio::select! {
                () = signal_number(&mut signals, 1) => {
                    tracing::info!(
                        target: "atomflake serve",
                        event = "draining",
                        "shutting down: refusing new requests, finishing those under way"
                    );
                }
                reason = service.stopped(), if !stay => {
                    tracing::error!(
                        target: "atomflake serve",
                        event = "draining",
                        "minting has ended for good: draining, then exiting with code 1"
                    );
                    let _ = stopped.set(reason);
                }
            }
        }
    };
    let drain = Duration::from_secs(args.drain);
    let mut signals = signals.clone();
    let last = Arc::clone(&service);
    let ended = Arc::clone(&stopped);
    let drained = atomflake_serve::serve(listener, service, shutdown, || async move {
        // The second signal; the next one when the drain began because minting ended.
        let cut_at = if ended.get().is_some() {
            *signals.borrow() + 1
        } else {
            2
        };
        tokio::select! {
            () = tokio::time::sleep(drain) => {
                tracing::warn!(
                    target: "atomflake serve",
                    event = "drain_cut",
                    "requests still under way after the drain time of {drain:?}: closing"
                );
            }
            () = signal_number(&mut signals, cut_at) => {
                tracing::warn!(
                    target: "atomflake serve",
                    event = "drain_cut",
                    "a second signal: closing the connections now"
                );
            }
        }
    })
    .await;
    drained.map_err(|err| Failure::Other(format!("serving failed: {err}")))?;
    let nodes: Vec<String> = last.nodes().iter().map(u64::to_string).collect();
    match stopped.get() {
        Some(reason) => Err(Failure::Other(format!("serve stopped: {reason}"))),
        None => Ok(nodes.join(",")),
    }
}

/// With `--lease`, claims nodes afresh for `service` each time its lease is lost, on a task
/// of the current runtime (`--reclaim`).
fn spawn_reclaim(args: &ServeArgs, service: &Arc<Service>) {
    let Some(url) = &args.lease else {
        return;
    };
    let (layout, url, options, count) = (
        service.layout(),
        url.clone(),
        args.lease_options.clone(),
        args.nodes,
    );
    let claim = move || {
        leased(layout, &url, &options, count).map_err(|failure| match failure {
            Failure::Usage(error) | Failure::Other(error) => error,
            Failure::BadInput | Failure::Closed => "the claim failed".to_owned(),
        })
    };
    tokio::spawn(atomflake_serve::reclaim(Arc::clone(service), claim));
}

/// The most `--threads`: far past any machine's cores.
const MAX_THREADS: usize = 1024;

/// The limits `args` set, the connections within `file_limit` open files; the service's
/// own check ([`Limits::check_open_files`]), its error naming the flag.
fn limits(args: &ServeArgs, file_limit: u64) -> Result<Limits, Failure> {
    let within = atomflake_serve::max_connections_within(file_limit);
    let limits = Limits {
        max_count: args.max_count,
        requests_per_second: args.rate,
        ids_per_second: args.ids_rate,
        streams_per_connection: args.streams,
        max_streams: args.max_streams,
        // Unless set, the default within the file limit (none left: refused by the check).
        max_connections: args
            .max_connections
            .unwrap_or_else(|| Limits::default().max_connections.min(within.max(1))),
        header_timeout: Duration::from_secs(args.header_timeout),
        idle_timeout: Duration::from_secs(args.idle_timeout),
        stall_timeout: Duration::from_secs(args.stall_timeout),
        max_connection_age: args.max_connection_age.map(Duration::from_secs),
        max_connection_age_grace: Duration::from_secs(args.max_connection_age_grace),
        ..Limits::default()
    };
    limits.check_open_files(file_limit).map_err(|error| {
        if error.is_file_limit() {
            return Failure::Other(error.to_string());
        }
        let flag = match error.limit() {
            Limit::MaxCount => "--max-count",
            Limit::RequestsPerSecond => "--rate",
            Limit::IdsPerSecond => "--ids-rate",
            Limit::StreamsPerConnection => "--streams",
            Limit::MaxStreams => "--max-streams",
            Limit::MaxConnections => "--max-connections",
            Limit::HeaderTimeout => "--header-timeout",
            Limit::IdleTimeout => "--idle-timeout",
            Limit::StallTimeout => "--stall-timeout",
            Limit::MaxConnectionAge => "--max-connection-age",
            Limit::MaxConnectionAgeGrace => "--max-connection-age-grace",
            // Not a flag: the default is within its range.
            _ => return Failure::Other(error.to_string()),
        };
        Failure::Usage(error.named(flag).to_string())
    })?;
    Ok(limits)
}

/// The generator on the nodes `args` name, and the watch on its lease when it has one.
fn generator(
    layout: Layout,
    args: &ServeArgs,
) -> Result<(ShardedGenerator, Option<Arc<atomflake_serve::StoreWatch>>), Failure> {
    let usage = |err: &dyn std::fmt::Display| Failure::Usage(err.to_string());
    let sources = usize::from(!args.node.is_empty())
        + usize::from(args.statefulset)
        + usize::from(args.lease.is_some());
    if sources != 1 {
        return Err(Failure::Usage(
            "give exactly one of --node (or ATOMFLAKE_NODE), --statefulset and --lease: \
             servers of one ID space must not share a node"
                .into(),
        ));
    }
    if let Some(url) = &args.lease {
        args.high_water.check_lease()?;
        if !(1..=layout.max_node() + 1).contains(&args.nodes) {
            return Err(Failure::Usage(format!(
                "--nodes {} is out of range: allowed 1..={}",
                args.nodes,
                layout.max_node() + 1
            )));
        }
        let (generator, watch) = leased(layout, url, &args.lease_options, args.nodes)?;
        return Ok((generator, Some(watch)));
    }
    let nodes = if args.statefulset {
        vec![atomflake::node::from_statefulset(&layout).map_err(|err| usage(&err))?]
    } else {
        args.node
            .iter()
            .map(|node| node_in(layout, node))
            .collect::<Result<Vec<_>, _>>()?
    };
    let generator = args.high_water.sharded(layout, &args.layout.layout, nodes)?;
    Ok((generator, None))
}

/// A generator on `count` nodes claimed from the lease engine of `url`, and the watch on
/// its lease.
fn leased(
    layout: Layout,
    url: &str,
    options: &LeaseArgs,
    count: u64,
) -> Result<(ShardedGenerator, Arc<atomflake_serve::StoreWatch>), Failure> {
    let (nodes, store) = lease::acquire(layout, url, options, count)?;
    let listed: Vec<String> = nodes.iter().map(u64::to_string).collect();
    tracing::info!(
        target: "atomflake serve",
        event = "claimed",
        nodes = %listed.join(","),
        namespace = %options.namespace,
        store = %store.describe(),
        "claimed node {} of lease namespace {:?}",
        listed.join(","),
        options.namespace,
    );
    let (store, watch) = Watched::new(store);
    let generator = Builder::new(layout)
        .mark_store(store)
        .build_sharded(nodes)
        .map_err(|err| Failure::Other(err.to_string()))?;
    Ok((generator, watch))
}

/// A count of the SIGTERMs and SIGINTs received from now on, kept by a task of the current
/// runtime. Without them (they cannot be watched), it stays at 0: the server serves until
/// killed.
fn count_signals() -> tokio::sync::watch::Receiver<u32> {
    use tokio::signal::unix::{SignalKind, signal};
    let (count, counted) = tokio::sync::watch::channel(0);
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
    else {
        tracing::error!(
            target: "atomflake serve",
            event = "no_signals",
            "cannot watch for SIGTERM: serving until killed"
        );
        return counted;
    };
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            count.send_modify(|count| *count += 1);
        }
    });
    counted
}

/// Completes once `number` signals have been received.
async fn signal_number(signals: &mut tokio::sync::watch::Receiver<u32>, number: u32) {
    if signals.wait_for(|count| *count >= number).await.is_err() {
        // The counting task is gone with the runtime: no signal will come.
        std::future::pending::<()>().await;
    }
}
