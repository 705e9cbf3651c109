//! What ZooKeeper itself reports to a lease.

use atomflake_lease::{CallFailed, EngineError};
use std::time::Duration;

/// A lease that cannot be taken or kept on ZooKeeper
/// ([`atomflake_lease::LeaseError`] with ZooKeeper's own errors).
pub type LeaseError = atomflake_lease::LeaseError<ZooKeeperError>;

/// What ZooKeeper reported to a lease:
/// [`LeaseError::Engine`](atomflake_lease::LeaseError::Engine).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ZooKeeperError {
    /// A call failed: no server answered in time, the connection was lost, or a server
    /// refused the call. Transient.
    #[error("ZooKeeper {0}")]
    Call(CallFailed),
    /// The ensemble gave the session a shorter timeout than the lease time (its
    /// `maxSessionTimeout` is lower): the ensemble would end a claim before its holder
    /// stops minting. Permanent: lower the lease time, or raise `maxSessionTimeout`.
    #[error(
        "the ZooKeeper ensemble gave a session timeout of {negotiated:?}, shorter than the lease time {ttl:?}: \
         lower the lease time or raise the servers' maxSessionTimeout"
    )]
    SessionTimeout {
        /// The lease time asked for.
        ttl: Duration,
        /// The session timeout the ensemble gave.
        negotiated: Duration,
    },
    /// A node of the namespace that no lease wrote. Permanent.
    #[error("ZooKeeper node {path:?} is not a lease's: {problem}")]
    Corrupt {
        /// The node's path.
        path: String,
        /// What is wrong with it.
        problem: String,
    },
}

impl ZooKeeperError {
    pub(crate) fn call(action: &'static str) -> impl FnOnce(zookeeper_client::Error) -> ZooKeeperError {
        move |error| ZooKeeperError::Call(CallFailed::new(action, error))
    }
}

impl EngineError for ZooKeeperError {
    const ENGINE: &'static str = "ZooKeeper";

    fn is_transient(&self) -> bool {
        matches!(self, ZooKeeperError::Call { .. })
    }
}
