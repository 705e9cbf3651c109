//! `atomflake serve`: Snowflake IDs for any language, over HTTP/JSON and gRPC from one port.
//!
//! A [`Service`] holds a [`ShardedGenerator`](atomflake::ShardedGenerator) (on fixed nodes,
//! or on nodes leased with their high-water marks) and a [`Server`] answers on a TCP
//! listener, from serving to the drain at shutdown:
//!
//! - HTTP: `GET /v1/ids?count=N` → `{"ids": ["<decimal>", ...]}` (`&as=number`: JSON
//!   numbers, for a layout of at most 53 bits; `&as=uuid`: UUIDs of version 7; `&as=base62`;
//!   `&as=masked`: masked by [`Service::with_mask`]'s mask), `GET /v1/ids/{id}` (the ID,
//!   its base62 or its UUID decoded; `?as=masked`: a masked ID), `GET /v1/layout`, `GET /readyz` and `GET /healthz` (200 only while IDs
//!   can be handed out), `GET /livez` (200 unless minting has ended for good) and
//!   `GET /metrics` (Prometheus' text format, [`prometheus()`] of a [`Snapshot`]);
//! - gRPC: `atomflake.v1.Ids` (`proto/atomflake/v1/ids.proto`): `GetIds`, `StreamIds`
//!   (IDs as runs: first, step, count), `GetLayout` and `Decode`; the standard health
//!   service and reflection.
//!
//! Requests are held to [`Limits`], each limit within its allowed range ([`Limits::check`],
//! which a [`Service`] is built only with); bad input is refused with the value and the
//! allowed range (HTTP 400 with `{"error": "..."}`, gRPC `INVALID_ARGUMENT`).

mod auth;
mod connections;
mod cors;
mod deadline;
mod direct;
mod grpc;
mod http;
mod lifecycle;
mod limits;
mod metrics;
mod openapi;
pub mod otlp;
mod prometheus;
mod rate;
mod reclaim;
mod reload;
mod server;
mod service;
mod streams;
mod tls;
mod watch;

// The README's examples, doctested.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// The messages and service of `proto/atomflake/v1/ids.proto`, compiled by prost and tonic.
#[allow(missing_docs, clippy::pedantic)]
pub mod proto {
    tonic::include_proto!("atomflake.v1");
}

pub use auth::{MIN_TOKEN_LEN, Tokens};
pub use connections::{HEALTH_CONNECTIONS, raise_file_limit};
pub use lifecycle::{DrainCause, Ended, Server};
pub use limits::{
    Limit, Limits, LimitsError, MAX_WORKER_THREADS, RESERVED_FILES, check_worker_threads,
    max_connections_within,
};
pub use metrics::{ApiSnapshot, ConnectionsSnapshot, OtlpSnapshot, Snapshot, StoreSnapshot};
pub use otlp::Otlp;
pub use prometheus::prometheus;
pub use reclaim::reclaim;
pub use server::{Drained, serve};
pub use service::{Refusal, Service, State};
pub use streams::Streams;
pub use tls::{Tls, TlsFiles};
pub use watch::{StoreWatch, Watched};
