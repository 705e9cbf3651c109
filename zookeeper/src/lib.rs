//! atomflake on ZooKeeper: node-ID leases for a fleet, kept in the ensemble Twitter's
//! Snowflake registered its workers in, each node's high-water mark beside its claim,
//! fenced by ZooKeeper's sessions and versions.
//!
//! - [`lease`]: claim a node ID, keep its mark, release it. A [`lease::Lease`] is a
//!   [`MarkStore`](atomflake::mark::MarkStore): any generator type runs on it.
//! - [`Ensemble`]: the ensemble's servers, `zk://HOST:PORT[,HOST:PORT...][/CHROOT]`.
//!
//! The client is the `zookeeper-client` crate, on a Tokio runtime of the lease's own.

#[cfg(not(loom))]
mod ensemble;
#[cfg(not(loom))]
pub mod lease;

#[cfg(not(loom))]
pub use ensemble::{Ensemble, EnsembleError};

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
