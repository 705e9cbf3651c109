//! atomflake on etcd: node-ID leases for a fleet, kept in the etcd cluster it already runs
//! (Kubernetes' own store), each node's high-water mark with its claim, fenced by etcd's own
//! lease IDs and revisions.
//!
//! - [`lease`]: the etcd engine of [`atomflake_lease`]: claim node IDs, keep their marks,
//!   release them; the lease goes under any generator type as its
//!   [`MarkStore`](atomflake::mark::MarkStore).
//! - [`Endpoints`]: the cluster's members, `etcd://HOST:PORT[,HOST:PORT...]`.
//!
//! The client speaks etcd's v3 gRPC API itself (tonic, prost): building needs no protobuf
//! compiler.

#[cfg(not(loom))]
mod client;
#[cfg(not(loom))]
pub mod lease;

#[cfg(not(loom))]
pub use client::{Endpoints, EndpointsError};
