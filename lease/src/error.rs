//! The errors of taking and keeping a lease: the same for every engine, but for the
//! engine's own ([`LeaseError::Engine`]).

use super::{MAX_NAMESPACE_LEN, MAX_TTL, MIN_TTL, NodesError};
use atomflake::BuildError;
use core::fmt;
use std::time::Duration;

/// What a lease engine reports of its own: its server out of reach, a key or row that no
/// lease wrote, a privilege missing. The engine's name goes into every [`LeaseError`]'s
/// text.
pub trait EngineError: std::error::Error + Clone + Eq + Send + Sync + 'static {
    /// The engine's name in messages: `"etcd"`, `"PostgreSQL"`, `"ZooKeeper"`.
    const ENGINE: &'static str;

    /// Whether trying again later can succeed.
    fn is_transient(&self) -> bool;
}

/// A call to an engine's servers that failed, and may succeed when tried again: no server
/// answered in time, the connection was lost, or a server refused the call. Engines hold it
/// in a variant of their error that is transient.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallFailed {
    /// What the lease was doing.
    pub action: &'static str,
    /// What the engine's client reported.
    pub cause: String,
}

impl CallFailed {
    /// `action` failed for `cause`.
    pub fn new(action: &'static str, cause: impl fmt::Display) -> CallFailed {
        CallFailed {
            action,
            cause: cause.to_string(),
        }
    }
}

impl fmt::Display for CallFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "lease operation {:?} failed: {}", self.action, self.cause)
    }
}

/// A node-ID lease that cannot be taken or kept.
///
/// The namespace and the node are in every variant that concerns one node, so that a
/// message in a fleet's logs says which. `E` is the engine's own error.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseError<E> {
    /// Every node of the layout's range is held by a live lease. Transient: a node is free
    /// again once its holder releases it or its lease expires.
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
    /// Fewer nodes are free than a lease of several asked for: none was claimed.
    /// Transient.
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
    /// Transient: once the clock has passed the mark, claiming again succeeds.
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
    /// Claimants of the namespace kept taking the nodes this one found free until the claim
    /// timed out. Transient.
    Crowded {
        /// The namespace.
        namespace: String,
        /// How long the claim tried.
        waited: Duration,
    },
    /// The namespace is empty, longer than [`MAX_NAMESPACE_LEN`] bytes, or has a
    /// character other than ASCII letters, digits, `-`, `_` and `.`. Permanent.
    InvalidNamespace {
        /// The namespace given.
        namespace: String,
    },
    /// The lease time is not a whole number of seconds in [`MIN_TTL`]`..=`[`MAX_TTL`].
    /// Permanent.
    TtlOutOfRange {
        /// The lease time given.
        ttl: Duration,
    },
    /// The node or the node count asked for does not fit the layout. Permanent.
    Nodes(NodesError),
    /// The holder's last renewal began more than the lease time less a fifth ago, by its
    /// own clock: it stops minting before the engine can give the node to another holder.
    /// Transient: a renewal that succeeds lifts it.
    Expired {
        /// The namespace.
        namespace: String,
        /// The node.
        node: u64,
        /// The claim's generation ([`Lease::generation`](crate::Lease::generation)).
        generation: i64,
    },
    /// The engine no longer holds this claim: its lease expired or was ended (and perhaps
    /// another holder has the node). Permanent: minting on it has ended for good.
    Lost {
        /// The namespace.
        namespace: String,
        /// The node.
        node: u64,
        /// The claim's generation.
        generation: i64,
    },
    /// The engine's own error: its server out of reach, a privilege missing.
    Engine(E),
}

impl<E: EngineError> LeaseError<E> {
    /// Whether trying again later can succeed: a busy node range, a clock behind a mark, a
    /// lapsed renewal, or whatever the engine's error says.
    pub fn is_transient(&self) -> bool {
        match self {
            LeaseError::NoFreeNode { .. }
            | LeaseError::NodeTaken { .. }
            | LeaseError::TooFewFreeNodes { .. }
            | LeaseError::Ahead { .. }
            | LeaseError::Crowded { .. }
            | LeaseError::Expired { .. } => true,
            LeaseError::InvalidNamespace { .. }
            | LeaseError::TtlOutOfRange { .. }
            | LeaseError::Nodes(_)
            | LeaseError::Lost { .. } => false,
            LeaseError::Engine(error) => error.is_transient(),
        }
    }
}

impl<E> LeaseError<E> {
    /// Whether the options were bad (the namespace, the lease time, the nodes): the
    /// caller's input, never the engine's state.
    pub fn is_invalid_input(&self) -> bool {
        matches!(
            self,
            LeaseError::InvalidNamespace { .. } | LeaseError::TtlOutOfRange { .. } | LeaseError::Nodes(_)
        )
    }
}

impl<E> From<E> for LeaseError<E> {
    fn from(error: E) -> LeaseError<E> {
        LeaseError::Engine(error)
    }
}

impl<E: EngineError> fmt::Display for LeaseError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let engine = E::ENGINE;
        match self {
            LeaseError::NoFreeNode { namespace, max } => write!(
                f,
                "no free node in {engine} lease namespace {namespace:?}: every node of 0..={max} is \
                 held by a live lease"
            ),
            LeaseError::NodeTaken { namespace, node } => write!(
                f,
                "node {node} of {engine} lease namespace {namespace:?} is held by a live lease"
            ),
            LeaseError::TooFewFreeNodes {
                namespace,
                count,
                free,
            } => write!(
                f,
                "{count} nodes asked for in {engine} lease namespace {namespace:?}, but only {free} \
                 are free: none was claimed"
            ),
            LeaseError::Ahead {
                namespace,
                node,
                mark_ms,
                clock_ms,
                max_wait,
            } => fmt::Display::fmt(
                &BuildError::Ahead {
                    store: format!(
                        "the high-water mark of node {node} in {engine} lease namespace {namespace:?}"
                    ),
                    mark_ms: *mark_ms,
                    clock_ms: *clock_ms,
                    max_wait: *max_wait,
                },
                f,
            ),
            LeaseError::Crowded { namespace, waited } => write!(
                f,
                "claimants of {engine} lease namespace {namespace:?} kept taking the free nodes first \
                 for {waited:?}"
            ),
            LeaseError::InvalidNamespace { namespace } => write!(
                f,
                "invalid lease namespace {namespace:?}: allowed 1..={MAX_NAMESPACE_LEN} bytes of ASCII \
                 letters, digits, '-', '_' and '.'"
            ),
            LeaseError::TtlOutOfRange { ttl } => write!(
                f,
                "lease time {ttl:?} is out of range: allowed whole seconds in {MIN_TTL:?}..={MAX_TTL:?}"
            ),
            LeaseError::Nodes(error) => fmt::Display::fmt(error, f),
            LeaseError::Expired {
                namespace,
                node,
                generation,
            } => write!(
                f,
                "{engine} lease on node {node} of namespace {namespace:?} (generation {generation}) \
                 passed its local deadline without a renewal: minting stops until a renewal succeeds"
            ),
            LeaseError::Lost {
                namespace,
                node,
                generation,
            } => write!(
                f,
                "{engine} lease on node {node} of namespace {namespace:?} is lost: {engine} no longer \
                 holds this holder's claim (generation {generation}); minting has ended"
            ),
            LeaseError::Engine(error) => fmt::Display::fmt(error, f),
        }
    }
}

impl<E: EngineError> std::error::Error for LeaseError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LeaseError::Nodes(error) => Some(error),
            LeaseError::Engine(error) => error.source(),
            _ => None,
        }
    }
}
