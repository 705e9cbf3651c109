//! The flags of `atomflake serve`.

use super::super::LayoutArgs;
use super::super::lease::LeaseArgs;
use crate::Failure;
use crate::high_water::HighWaterArgs;
use atomflake_serve::{Limit, Limits, Server};
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The options of `atomflake serve`.
#[derive(Args)]
pub(crate) struct ServeArgs {
    #[command(flatten)]
    pub(super) layout: LayoutArgs,
    /// The node (or nodes, comma-separated) this server mints on. Give every server of the
    /// same IDs nodes of its own, or their IDs collide; or take them with `--lease`.
    #[arg(
        long,
        env = "ATOMFLAKE_NODE",
        value_name = "N[,N...]",
        value_delimiter = ',',
        allow_negative_numbers = true
    )]
    pub(super) node: Vec<String>,
    /// Take the node from this pod's StatefulSet ordinal: the number after the last `-` of
    /// the hostname (`ids-3`: node 3). Put its high-water file on the pod's volume
    /// (`--high-water`).
    #[arg(long)]
    pub(super) statefulset: bool,
    #[command(flatten)]
    pub(super) high_water: HighWaterArgs,
    /// Take the nodes from a lease in this PostgreSQL database, etcd cluster, Redis server or
    /// ZooKeeper ensemble (as `mint --lease`): held while serving, released at shutdown with the exact mark. A
    /// lost lease stops serving at once and health goes red.
    #[arg(long, env = "ATOMFLAKE_LEASE", hide_env_values = true, value_name = "URL")]
    pub(super) lease: Option<String>,
    /// How many nodes to lease (each adds the layout's cap: 4.096 M IDs/s for twitter; at
    /// most 42 on etcd, whose transactions hold 128 operations unless set otherwise).
    #[arg(long, default_value_t = 1, value_name = "K")]
    pub(super) nodes: u64,
    #[command(flatten)]
    pub(super) lease_options: LeaseArgs,
    /// The address to listen on, for HTTP and gRPC alike (port 0: any free port; the
    /// address taken is printed on stderr).
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR")]
    pub(super) listen: SocketAddr,
    /// The most IDs one `GET /v1/ids` or `GetIds` call returns.
    #[arg(long, default_value_t = Limits::default().max_count, value_name = "N")]
    pub(super) max_count: u32,
    /// The most requests one connection may start per second, on average.
    #[arg(long, default_value_t = Limits::default().requests_per_second, value_name = "N")]
    pub(super) rate: u32,
    /// The most IDs one connection may take per second, on average (bursts of as many; at
    /// least --max-count): a request for more than are left is refused (429,
    /// `RESOURCE_EXHAUSTED`), and a stream is slowed to it. No limit unless set.
    #[arg(long, value_name = "N")]
    pub(super) ids_rate: Option<u64>,
    /// The most gRPC calls one connection may have open at once.
    #[arg(long, default_value_t = Limits::default().streams_per_connection, value_name = "N")]
    pub(super) streams: u32,
    /// The most `StreamIds` calls the whole server serves at once; one more is refused
    /// (`RESOURCE_EXHAUSTED`) until one ends.
    #[arg(long, default_value_t = Limits::default().max_streams, value_name = "N")]
    pub(super) max_streams: u32,
    /// The most connections open at once (4096 unless set, and never more than the
    /// open-file limit leaves, which is raised to its hard limit at start). Past it new
    /// connections wait in the listener's backlog, but for 16 more that answer health
    /// checks (`/healthz`, `/livez`, `/readyz`, gRPC health) alone.
    #[arg(long, value_name = "N")]
    pub(super) max_connections: Option<u32>,
    /// How long, in seconds, a new connection has to send its first request's head: a
    /// client that sends nothing, or trickles it, is closed after it. For HTTP/1.1 it also
    /// bounds every later request's head.
    #[arg(long, default_value_t = Limits::default().header_timeout.as_secs(), value_name = "S")]
    pub(super) header_timeout: u64,
    /// How long, in seconds, a connection with no request under way stays open after its
    /// last one. HTTP/2 connections are also pinged every 20 s, and dropped when a ping
    /// goes unanswered for 20 s.
    #[arg(long, default_value_t = Limits::default().idle_timeout.as_secs(), value_name = "S")]
    pub(super) idle_timeout: u64,
    /// How long, in seconds, a `StreamIds` waits for its client to read its next message
    /// (the client's flow-control window and the stream's buffer full) before it ends with
    /// `DEADLINE_EXCEEDED`, after the IDs it sent, and frees its place among the
    /// `--max-streams`.
    #[arg(long, default_value_t = Limits::DEFAULT_STALL_TIMEOUT.as_secs(), value_name = "S")]
    pub(super) stall_timeout: u64,
    /// Close each connection gracefully after this many seconds, give or take a tenth
    /// drawn for each (as gRPC's `MaxConnectionAge`): HTTP/2 `GOAWAY`, the calls under way
    /// finish and clients reconnect; HTTP/1.1 no request after the one under way. Off
    /// unless set: IDs carry no state of their connection; set it to spread long-lived
    /// clients over servers behind a layer-4 balancer.
    #[arg(long, value_name = "S")]
    pub(super) max_connection_age: Option<u64>,
    /// How long, in seconds, a connection closed at `--max-connection-age`, or when its
    /// client certificate expires (`--tls-client-ca`), has for the requests under way
    /// before it is cut.
    #[arg(long, default_value_t = Limits::DEFAULT_CONNECTION_AGE_GRACE.as_secs(), value_name = "S")]
    pub(super) max_connection_age_grace: u64,
    /// The runtime's worker threads, which run the connections and the minting: one per
    /// core unless set (or `TOKIO_WORKER_THREADS`), at most 1024. Where the cores are
    /// shared with busy neighbours (a sidecar, the clients), fewer threads than cores can
    /// serve more requests, with a shorter tail.
    #[arg(long, value_name = "N")]
    pub(super) threads: Option<usize>,
    /// How long, in seconds, shutdown (SIGTERM, SIGINT) waits for the requests under way.
    #[arg(long, default_value_t = Server::DEFAULT_DRAIN.as_secs(), value_name = "S")]
    pub(super) drain: u64,
    /// Let pages of this origin (`https://app.example.com`; `*` for any; repeat or separate
    /// with commas for several) call the HTTP API from a browser (CORS).
    #[arg(long, value_name = "ORIGIN", value_delimiter = ',')]
    pub(super) cors_origin: Vec<String>,
    /// Answer `GET /v1/ids?as=masked` with IDs masked by the key in this file (16 raw bytes
    /// or 32 hex digits, readable by its owner alone; see `atomflake mask`), and decode
    /// masked IDs (`GET /v1/ids/{id}?as=masked`). The key is never logged.
    #[arg(long, value_name = "PATH")]
    pub(super) mask_key_file: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub(super) access: AccessArgs,
    /// When minting ends for good (the lease lost to another server, the layout's span
    /// spent), stay up with health red rather than drain and exit with code 1 (so that a
    /// supervisor restarts the server and it claims a node again).
    #[arg(long)]
    pub(super) stay_stopped: bool,
    /// When the lease is lost (another server took the node after this one went silent
    /// past the lease time), claim nodes afresh and serve on, rather than stop: requests
    /// wait up to 2 s for them and readiness is red meanwhile; a claim that fails is tried
    /// again every second. The new nodes start past their marks, as at start.
    #[arg(long, requires = "lease")]
    pub(super) reclaim: bool,
    /// Push metrics and spans to the OpenTelemetry collector at this URL (OTLP; as
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`, which it overrides). The other `OTEL_*` variables
    /// set the protocol (`grpc`, `http/protobuf`), the interval, the sampler and the
    /// resource; `OTEL_SDK_DISABLED=true` turns the export off.
    #[arg(long, value_name = "URL")]
    pub(super) otlp_endpoint: Option<String>,
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
pub(super) struct AccessArgs {
    /// Serve TLS only, with this certificate chain (PEM, the server's certificate first):
    /// HTTPS and gRPC over TLS on the one port, HTTP/2 or HTTP/1.1 chosen by ALPN. Read
    /// again with its key and the client CA, for the connections after, on SIGHUP and when
    /// one of their files changes (looked at every second); connections open keep theirs.
    #[arg(long, requires = "tls_key", value_name = "PEM")]
    pub(super) tls_cert: Option<PathBuf>,
    /// The private key of `--tls-cert` (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, requires = "tls_cert", value_name = "PEM")]
    pub(super) tls_key: Option<PathBuf>,
    /// Require client certificates signed by this CA (PEM); a client without one is
    /// refused in the handshake. When the file is read again, an open connection whose
    /// client certificate it no longer trusts is closed; one whose certificate expires is
    /// closed then (no request after; `--max-connection-age-grace` for those under way).
    #[arg(long, requires = "tls_cert", value_name = "PEM")]
    pub(super) tls_client_ca: Option<PathBuf>,
    /// Ask every request but health checks for a bearer token (`Authorization: Bearer
    /// TOKEN`, over HTTP and as gRPC metadata) from this file: one per line, at least 16
    /// visible ASCII characters each, blank lines and `#` lines left out; compared in
    /// constant time. Without one: HTTP 401, gRPC `UNAUTHENTICATED`. Read again on SIGHUP
    /// and when the file changes. No token is logged or counted by value.
    #[arg(long, value_name = "FILE")]
    pub(super) token_file: Option<PathBuf>,
    /// Ask `/metrics` for a token too (it is open by default, as health checks are).
    #[arg(long, requires = "token_file")]
    pub(super) metrics_token: bool,
}

impl ServeArgs {
    /// The limits the flags set, the connections within `file_limit` open files; the service's
    /// own check ([`Limits::check_open_files`]), its error naming the flag.
    pub(super) fn limits(&self, file_limit: u64) -> Result<Limits, Failure> {
        let within = atomflake_serve::max_connections_within(file_limit);
        let limits = Limits {
            max_count: self.max_count,
            requests_per_second: self.rate,
            ids_per_second: self.ids_rate,
            streams_per_connection: self.streams,
            max_streams: self.max_streams,
            // Unless set, the default within the file limit (none left: refused by the check).
            max_connections: self
                .max_connections
                .unwrap_or_else(|| Limits::default().max_connections.min(within.max(1))),
            header_timeout: Duration::from_secs(self.header_timeout),
            idle_timeout: Duration::from_secs(self.idle_timeout),
            stall_timeout: Duration::from_secs(self.stall_timeout),
            max_connection_age: self.max_connection_age.map(Duration::from_secs),
            max_connection_age_grace: Duration::from_secs(self.max_connection_age_grace),
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
                Limit::WorkerThreads => "--threads",
                // Not a flag: the default is within its range.
                _ => return Failure::Other(error.to_string()),
            };
            Failure::Usage(error.named(flag).to_string())
        })?;
        Ok(limits)
    }
}

impl AccessArgs {
    /// The TLS of `--tls-cert`, `--tls-key` and `--tls-client-ca`, their files read.
    pub(super) fn tls(&self) -> Result<Option<atomflake_serve::Tls>, Failure> {
        let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) else {
            return Ok(None);
        };
        let files = atomflake_serve::TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: self.tls_client_ca.clone(),
        };
        atomflake_serve::Tls::new(files).map(Some).map_err(Failure::Usage)
    }
}
