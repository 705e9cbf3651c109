//! atomflake on ZooKeeper: node-ID leases for a fleet, kept in the ensemble Twitter's
//! Snowflake registered its workers in, each node's high-water mark beside its claim,
//! fenced by ZooKeeper's sessions and versions.
//!
//! - [`lease`]: the ZooKeeper engine of [`atomflake_lease`]. Its [`lease::Lease`] holds
//!   node IDs claimed in the ensemble and is the [`MarkStore`](atomflake::mark::MarkStore)
//!   of any generator type built on them.
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
