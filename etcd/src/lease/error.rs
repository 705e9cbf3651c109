//! The errors of taking and keeping a lease on etcd.

use crate::client::CallError;
use core::fmt;
use std::time::Duration;

/// The longest namespace: it is part of every key of the lease.
pub const MAX_NAMESPACE_LEN: usize = 128;

/// A node-ID lease on etcd that cannot be taken or kept.
///
/// The namespace and the node are in every variant that concerns one node, so that a
/// message in a fleet's logs says which.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseError {
    /// Every node of the layout's range is held by a live lease. Transient: a node is free
    /// again once its holder releases it or its etcd lease expires.
    NoFreeNode {
        /// The namespace.
        namespace: String,
        /// The largest node of the layout: the range searched was `0..=max`.
        max: u64,
    },
    /// The node asked for is held by a live lease. Transient.
    NodeTaken {
        /// The namespace.
        namespace: String,
        /// The node.
        node: u64,
    },
    /// Fewer nodes are free than a lease of several asked for. Transient.
    TooFewFreeNodes {
        /// The namespace.
        namespace: String,
        /// How many were asked for.
        count: u64,
        /// How many were free.
        free: u64,
    },
    /// Every free node's high-water mark is further ahead of this process's clock than a
    /// generator waits for at start-up: the clock that minted there ran ahead of this one.
    Ahead {
        /// The namespace.
        namespace: String,
        /// The lowest such node.
        node: u64,
        /// Its mark, Unix ms.
        mark_ms: u64,
        /// This process's clock, Unix ms.
        clock_ms: u64,
        /// How long a generator waits for its clock at start-up.
        max_wait: Duration,
    },
    /// The namespace is empty, longer than [`MAX_NAMESPACE_LEN`] bytes, or has a
    /// character other than ASCII letters, digits, `-`, `_` and `.`.
    InvalidNamespace {
        /// The namespace given.
        namespace: String,
    },
    /// The lease time is not a whole number of seconds in `min..=max` (etcd counts lease
    /// times in seconds).
    TtlOutOfRange {
        /// The lease time given.
        ttl: Duration,
        /// The shortest allowed.
        min: Duration,
        /// The longest allowed.
        max: Duration,
    },
    /// The node asked for is outside the layout's range.
    NodeOutOfRange {
        /// The node asked for.
        node: u64,
        /// The largest node of the layout.
        max: u64,
    },
    /// The number of nodes asked for is not in `1..=max`.
    CountOutOfRange {
        /// The number asked for.
        count: u64,
        /// The most a claim can take: the layout's node count, or 1 for a node asked for.
        max: u64,
    },
    /// The holder's last renewal began more than the lease time less a fifth ago (by its
    /// own clock): it stops minting before etcd can give the node to another holder.
    /// Transient: a renewal that succeeds lifts it.
    Expired {
        /// The namespace.
        namespace: String,
        /// The node.
        node: u64,
        /// The claim's revision.
        revision: i64,
    },
    /// etcd no longer holds this claim: its lease expired or was revoked (and perhaps
    /// another holder has the node). Minting on it has ended for good.
    Lost {
        /// The namespace.
        namespace: String,
        /// The node.
        node: u64,
        /// The claim's revision.
        revision: i64,
    },
    /// A call to etcd failed: no member answered in time, or one refused the call.
    /// Transient.
    Etcd {
        /// What the lease was doing.
        action: &'static str,
        /// The member tried last and what it said.
        cause: String,
    },
    /// An answer that a lease's own keys cannot give: a key of the namespace was written by
    /// something else.
    Corrupt {
        /// The key.
        key: String,
        /// What is wrong with it.
        problem: String,
    },
}

impl LeaseError {
    /// Whether trying again later can succeed: a busy node range, a lapsed renewal or etcd
    /// out of reach.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            LeaseError::NoFreeNode { .. }
                | LeaseError::NodeTaken { .. }
                | LeaseError::TooFewFreeNodes { .. }
                | LeaseError::Ahead { .. }
                | LeaseError::Expired { .. }
                | LeaseError::Etcd { .. }
        )
    }

    pub(crate) fn etcd(action: &'static str) -> impl FnOnce(CallError) -> LeaseError {
        move |error| LeaseError::Etcd {
            action,
            cause: error.to_string(),
        }
    }
}

impl fmt::Display for LeaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeaseError::NoFreeNode { namespace, max } => write!(
                f,
                "no free node in etcd lease namespace {namespace:?}: every node of 0..={max} is held by a live lease"
            ),
            LeaseError::NodeTaken { namespace, node } => write!(
                f,
                "node {node} of etcd lease namespace {namespace:?} is held by a live lease"
            ),
            LeaseError::TooFewFreeNodes {
                namespace,
                count,
                free,
            } => write!(
                f,
                "{count} nodes asked for in etcd lease namespace {namespace:?}, {free} free"
            ),
            LeaseError::Ahead {
                namespace,
                node,
                mark_ms,
                clock_ms,
                max_wait,
            } => write!(
                f,
                "every free node of etcd lease namespace {namespace:?} has a high-water mark past this \
                 clock: node {node}'s is {mark_ms} ms, {} ms ahead of this clock ({clock_ms} ms), more \
                 than a generator waits ({} ms)",
                mark_ms.saturating_sub(*clock_ms),
                max_wait.as_millis()
            ),
            LeaseError::InvalidNamespace { namespace } => write!(
                f,
                "invalid etcd lease namespace {namespace:?}: allowed 1..={MAX_NAMESPACE_LEN} bytes of \
                 ASCII letters, digits, '-', '_' and '.'"
            ),
            LeaseError::TtlOutOfRange { ttl, min, max } => write!(
                f,
                "etcd lease time {ttl:?} is out of range: allowed whole seconds in {min:?}..={max:?}"
            ),
            LeaseError::NodeOutOfRange { node, max } => {
                write!(f, "node {node} is out of range: the layout allows 0..={max}")
            }
            LeaseError::CountOutOfRange { count, max } => {
                write!(f, "{count} nodes asked for: allowed 1..={max}")
            }
            LeaseError::Expired {
                namespace,
                node,
                revision,
            } => write!(
                f,
                "etcd lease on node {node} of namespace {namespace:?} (revision {revision}) has passed its \
                 local deadline without a renewal; minting waits for one"
            ),
            LeaseError::Lost {
                namespace,
                node,
                revision,
            } => write!(
                f,
                "etcd lease on node {node} of namespace {namespace:?} is lost: etcd no longer holds this \
                 holder's claim (revision {revision}); minting has ended"
            ),
            LeaseError::Etcd { action, cause } => {
                write!(f, "etcd lease operation {action:?} failed: {cause}")
            }
            LeaseError::Corrupt { key, problem } => {
                write!(f, "etcd key {key:?} is not a lease's: {problem}")
            }
        }
    }
}

impl std::error::Error for LeaseError {}
