//! The errors of taking and keeping a lease.

use atomflake::{BuildError, Field, RangeError};
use core::fmt;
use std::sync::Arc;
use std::time::Duration;

/// What the database client reported, kept whole: the error's
/// [`source`](std::error::Error::source) is the client's own `postgres::Error`.
///
/// Its text is the server's message and SQLSTATE when the server reported the error. Two
/// causes are equal when their texts are.
#[derive(Debug, Clone)]
pub struct DbCause {
    error: Arc<dyn std::error::Error + Send + Sync>,
    text: String,
}

impl DbCause {
    /// The client's error.
    pub fn get(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.error
    }

    pub(crate) fn new(error: impl std::error::Error + Send + Sync + 'static, text: String) -> DbCause {
        DbCause {
            error: Arc::new(error),
            text,
        }
    }
}

impl DbCause {
    /// Whether trying again can help: no SQLSTATE (the connection failed or closed), or a
    /// class that says so: `08` connection, `40` transaction rollback, `53` insufficient
    /// resources, `57` operator intervention (a cancel, a shutdown), `55P03` lock not
    /// available.
    pub fn is_transient(&self) -> bool {
        let Some(code) = self
            .error
            .downcast_ref::<postgres::Error>()
            .and_then(postgres::Error::code)
        else {
            return true;
        };
        let code = code.code();
        ["08", "40", "53", "57"]
            .iter()
            .any(|class| code.starts_with(class))
            || code == "55P03"
    }
}

impl PartialEq for DbCause {
    fn eq(&self, other: &DbCause) -> bool {
        self.text == other.text
    }
}

impl Eq for DbCause {}

impl fmt::Display for DbCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A node-ID lease that cannot be taken or kept .
///
/// The lease's namespace and node are in every variant that concerns one node, so that a
/// message in a fleet's logs says which.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseError {
    /// Every node of the layout's range is held by a lease that has not expired.
    /// Transient: a node is free again once its holder releases it or its lease expires.
    NoFreeNode {
        /// The namespace the lease was asked in.
        namespace: String,
        /// The largest node of the layout: the range searched was `0..=max`.
        max: u64,
    },
    /// The node asked for is held by a lease that has not expired. Transient, as
    /// [`NoFreeNode`](Self::NoFreeNode).
    NodeTaken {
        /// The namespace the lease was asked in.
        namespace: String,
        /// The node asked for.
        node: u64,
    },
    /// Fewer nodes than [`LeaseOptions::nodes`](crate::lease::LeaseOptions::nodes) asked for
    /// are free: none was claimed. Transient, as [`NoFreeNode`](Self::NoFreeNode).
    TooFewFreeNodes {
        /// The namespace the lease was asked in.
        namespace: String,
        /// How many nodes were asked for.
        count: u64,
        /// How many were free.
        free: u64,
    },
    /// A node count that is zero, more than the layout's nodes, or more than one with a
    /// node asked for ([`LeaseOptions::node`](crate::lease::LeaseOptions::node)).
    /// Permanent.
    CountOutOfRange {
        /// The count asked for.
        count: u64,
        /// The largest count allowed.
        max: u64,
    },
    /// A node asked for that the layout cannot hold. Permanent.
    NodeOutOfRange {
        /// The node asked for.
        node: u64,
        /// The largest node the layout holds.
        max: u64,
    },
    /// A namespace that is empty or longer than 63 bytes. Permanent.
    InvalidNamespace {
        /// The namespace given.
        namespace: String,
    },
    /// A lease time out of the allowed range. Permanent.
    TtlOutOfRange {
        /// The time given.
        ttl: Duration,
        /// The shortest allowed.
        min: Duration,
        /// The longest allowed.
        max: Duration,
    },
    /// The node's stored high-water mark is further ahead of this process's clock than a
    /// generator waits for at start-up (`atomflake::Builder::MAX_RESTART_WAIT`):
    /// the previous holder's clock was ahead, or this one's is behind. From
    /// [`Lease::acquire`](crate::lease::Lease::acquire): every free node's mark is, and this
    /// names the lowest such node. Transient: once the clock has passed the mark, claiming
    /// again succeeds.
    Ahead {
        /// The lease's namespace.
        namespace: String,
        /// The leased node.
        node: u64,
        /// The stored mark, Unix ms.
        mark_ms: u64,
        /// This process's clock, Unix ms.
        clock_ms: u64,
        /// The longest start-up wait allowed.
        max_wait: Duration,
    },
    /// No renewal succeeded before the lease's local deadline (the time the last
    /// successful renewal was sent, plus the lease time, less a margin), so the generator
    /// stopped minting on its own, before the server could give the node to another
    /// process. Transient: a renewal that finds the lease still this holder's resumes
    /// minting; one that finds it taken ends in [`Lost`](Self::Lost).
    Expired {
        /// The lease's namespace.
        namespace: String,
        /// The leased node.
        node: u64,
        /// The lease's generation (how many times the node was claimed).
        generation: i64,
    },
    /// The table no longer holds this holder's claim: another process claimed the node
    /// after the lease expired, or the server lost the claim (a failover, a deleted row).
    /// Permanent: the generator stores no mark and renews nothing
    /// more, so it mints nothing past its deadline or its last stored mark.
    Lost {
        /// The lease's namespace.
        namespace: String,
        /// The node that was leased.
        node: u64,
        /// This holder's generation.
        generation: i64,
    },
    /// The lease table `public.atomflake_lease` does not exist, and the role connected
    /// may not create it (no `CREATE` on schema `public`). Permanent: a migration role
    /// creates it (`DDL`, `atomflake lease ddl`) and grants the lease role its privileges.
    NoLeaseTable {
        /// The role connected.
        role: String,
    },
    /// The role connected lacks privileges a lease needs on `public.atomflake_lease`
    /// (`SELECT, INSERT, UPDATE` to claim and renew, `SELECT` to list). Permanent.
    MissingGrant {
        /// The role connected.
        role: String,
        /// The privileges it lacks, of `SELECT`, `INSERT`, `UPDATE`.
        missing: Vec<&'static str>,
    },
    /// A database operation failed (no connection, a server restart, a failed
    /// statement). Transient or permanent as the client's error is; the error is the
    /// [`source`](std::error::Error::source). A lease being renewed is tried again.
    Database {
        /// What was being done: "connect", "acquire", "renew", ...
        action: &'static str,
        /// What the client reported.
        cause: DbCause,
    },
}

impl fmt::Display for LeaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeaseError::NoFreeNode { namespace, max } => write!(
                f,
                "no free node in lease namespace {namespace:?}: every node of 0..={max} is \
                 held by a live lease"
            ),
            LeaseError::NodeTaken { namespace, node } => write!(
                f,
                "node {node} of lease namespace {namespace:?} is held by a live lease"
            ),
            LeaseError::TooFewFreeNodes {
                namespace,
                count,
                free,
            } => write!(
                f,
                "{count} nodes asked for in lease namespace {namespace:?}, but only {free} are \
                 free: none was claimed"
            ),
            LeaseError::CountOutOfRange { count, max } => {
                write!(f, "lease node count {count} is out of range: allowed 1..={max}")
            }
            LeaseError::NodeOutOfRange { node, max } => fmt::Display::fmt(
                &RangeError::FieldOutOfRange {
                    field: Field::Node,
                    value: *node,
                    max: *max,
                },
                f,
            ),
            LeaseError::InvalidNamespace { namespace } => write!(
                f,
                "lease namespace {namespace:?} is invalid: allowed 1 to {MAX_NAMESPACE_LEN} bytes"
            ),
            LeaseError::TtlOutOfRange { ttl, min, max } => {
                write!(
                    f,
                    "lease time {ttl:?} is out of range: allowed {min:?} to {max:?}"
                )
            }
            LeaseError::Ahead {
                namespace,
                node,
                mark_ms,
                clock_ms,
                max_wait,
            } => fmt::Display::fmt(
                &BuildError::Ahead {
                    store: format!("the high-water mark of node {node} in lease namespace {namespace:?}"),
                    mark_ms: *mark_ms,
                    clock_ms: *clock_ms,
                    max_wait: *max_wait,
                },
                f,
            ),
            LeaseError::Expired {
                namespace,
                node,
                generation,
            } => write!(
                f,
                "lease on node {node} of namespace {namespace:?} (generation {generation}) \
                 passed its local deadline without a renewal: minting stops until a renewal \
                 succeeds"
            ),
            LeaseError::Lost {
                namespace,
                node,
                generation,
            } => write!(
                f,
                "lease on node {node} of namespace {namespace:?} is lost: the table no \
                 longer holds this holder's claim (generation {generation}); minting has ended"
            ),
            LeaseError::NoLeaseTable { role } => write!(
                f,
                "the lease table public.atomflake_lease does not exist and role {role:?} may not \
                 create it (no CREATE on schema public): create it as a migration role \
                 (`atomflake lease ddl`), then GRANT SELECT, INSERT, UPDATE ON \
                 public.atomflake_lease TO {role}"
            ),
            LeaseError::MissingGrant { role, missing } => write!(
                f,
                "role {role:?} lacks {} on public.atomflake_lease: a lease needs GRANT SELECT, \
                 INSERT, UPDATE ON public.atomflake_lease TO {role}",
                missing.join(", ")
            ),
            LeaseError::Database { action, cause } => {
                write!(f, "lease database operation {action:?} failed: {cause}")
            }
        }
    }
}

impl LeaseError {
    /// Whether the same call can succeed later: a node frees up, a clock catches up with a
    /// mark, a renewal gets through, a connection comes back. Bad options and a lost
    /// lease are permanent; a statement the server refused is permanent unless its
    /// SQLSTATE says otherwise (connection, resources, cancel, lock, serialization).
    pub fn is_transient(&self) -> bool {
        match self {
            LeaseError::NoFreeNode { .. }
            | LeaseError::NodeTaken { .. }
            | LeaseError::TooFewFreeNodes { .. }
            | LeaseError::Ahead { .. }
            | LeaseError::Expired { .. } => true,
            LeaseError::Database { cause, .. } => cause.is_transient(),
            LeaseError::NodeOutOfRange { .. }
            | LeaseError::CountOutOfRange { .. }
            | LeaseError::InvalidNamespace { .. }
            | LeaseError::TtlOutOfRange { .. }
            | LeaseError::NoLeaseTable { .. }
            | LeaseError::MissingGrant { .. }
            | LeaseError::Lost { .. } => false,
        }
    }
}

impl std::error::Error for LeaseError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LeaseError::Database { cause, .. } => Some(cause.get()),
            _ => None,
        }
    }
}

/// The longest lease namespace, in bytes (PostgreSQL's identifier length, so that a
/// namespace can name things in the database too).
pub const MAX_NAMESPACE_LEN: usize = 63;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_lease_error_says_whether_retrying_can_help() {
        let key = || ("n".to_owned(), 1, 2);
        let (namespace, node, generation) = key();
        let refused = DbCause::new(
            std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
            "refused".into(),
        );
        assert!(refused.is_transient(), "no SQLSTATE: the connection");
        for transient in [
            LeaseError::NoFreeNode {
                namespace: namespace.clone(),
                max: 1023,
            },
            LeaseError::NodeTaken {
                namespace: namespace.clone(),
                node,
            },
            LeaseError::TooFewFreeNodes {
                namespace: namespace.clone(),
                count: 3,
                free: 2,
            },
            LeaseError::Ahead {
                namespace: namespace.clone(),
                node,
                mark_ms: 2,
                clock_ms: 1,
                max_wait: Duration::from_secs(10),
            },
            LeaseError::Expired {
                namespace: namespace.clone(),
                node,
                generation,
            },
            LeaseError::Database {
                action: "renew",
                cause: refused,
            },
        ] {
            assert!(transient.is_transient(), "{transient:?}");
        }
        for permanent in [
            LeaseError::NodeOutOfRange {
                node: 1024,
                max: 1023,
            },
            LeaseError::CountOutOfRange { count: 0, max: 1024 },
            LeaseError::InvalidNamespace {
                namespace: String::new(),
            },
            LeaseError::TtlOutOfRange {
                ttl: Duration::ZERO,
                min: Duration::from_secs(1),
                max: Duration::from_secs(3600),
            },
            LeaseError::Lost {
                namespace,
                node,
                generation,
            },
        ] {
            assert!(!permanent.is_transient(), "{permanent:?}");
        }
    }
}
