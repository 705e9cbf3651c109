//! What a lease engine is asked to claim: the same options for every engine.

use atomflake::Layout;
use core::fmt;
use std::ops::RangeInclusive;
use std::time::Duration;

/// What to claim from a node-ID lease engine ([`Lease::acquire`](super::Lease::acquire)):
/// the namespace, the lease time, and optionally the node, how many nodes, and the holder's
/// name. The same for every engine: a namespace of 1 to
/// [`MAX_NAMESPACE_LEN`](super::MAX_NAMESPACE_LEN) bytes, a lease time of whole seconds
/// in [`MIN_TTL`](super::MIN_TTL)`..=`[`MAX_TTL`](super::MAX_TTL), nodes that fit the
/// layout ([`claimable`](LeaseOptions::claimable)).
///
/// # Examples
///
/// ```
/// use atomflake_lease::LeaseOptions;
/// use std::time::Duration;
///
/// let options = LeaseOptions::new("orders").ttl(Duration::from_secs(30)).nodes(4);
/// assert_eq!((options.namespace.as_str(), options.count), ("orders", 4));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseOptions {
    /// One ID space, one layout: every process minting IDs of the same layout into the
    /// same place (a table, a topic) shares one namespace; two namespaces are independent
    /// node spaces.
    pub namespace: String,
    /// How long after its last renewal the engine keeps a silent holder's node.
    pub ttl: Duration,
    /// The node asked for; the lowest free one when `None`.
    pub node: Option<u64>,
    /// How many nodes to claim, all or none.
    pub count: u64,
    /// The holder's name, for people reading the leases; [`default_holder`](crate::default_holder)
    /// when `None`.
    pub holder: Option<String>,
}

/// Why a [`LeaseOptions`]' nodes cannot be claimed for a layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodesError {
    /// The node asked for is outside the layout's range, `0..=max`.
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
}

impl fmt::Display for NodesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodesError::NodeOutOfRange { node, max } => {
                write!(f, "node {node} is out of range: the layout allows 0..={max}")
            }
            NodesError::CountOutOfRange { count, max } => {
                write!(f, "{count} nodes asked for: allowed 1..={max}")
            }
        }
    }
}

impl std::error::Error for NodesError {}

impl LeaseOptions {
    /// The lease time unless one is given.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(10);

    /// A lease of one node in `namespace`, for [`DEFAULT_TTL`](Self::DEFAULT_TTL).
    pub fn new(namespace: impl Into<String>) -> LeaseOptions {
        LeaseOptions {
            namespace: namespace.into(),
            ttl: Self::DEFAULT_TTL,
            node: None,
            count: 1,
            holder: None,
        }
    }

    /// The lease time: how long after its last renewal the engine keeps a silent holder's
    /// node. A holder stops minting a fifth of it earlier ([`Tenure::lease`](atomflake::mark::Tenure::lease)).
    /// Shorter frees a crashed holder's node sooner. It is also how long `next_id` waits
    /// out a failing engine before it panics; minting itself pauses sooner, once the clock
    /// reaches the last mark stored (1 to 1.5 s after the engine became unreachable).
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> LeaseOptions {
        self.ttl = ttl;
        self
    }

    /// Claims this node, instead of the lowest free one.
    #[must_use]
    pub fn node(mut self, node: u64) -> LeaseOptions {
        self.node = Some(node);
        self
    }

    /// Claims the `count` lowest free nodes (1 unless set), for a
    /// [`ShardedGenerator`](atomflake::ShardedGenerator) with a shard per node: all of them or
    /// none. Every renewal stores the mark of every node, and a release frees them all.
    #[must_use]
    pub fn nodes(mut self, count: u64) -> LeaseOptions {
        self.count = count;
        self
    }

    /// The holder's name (`hostname:pid` unless set), for people reading the leases.
    #[must_use]
    pub fn holder(mut self, holder: impl Into<String>) -> LeaseOptions {
        self.holder = Some(holder.into());
        self
    }

    /// The nodes of `layout` a claim may take: the node asked for, else all of them.
    ///
    /// # Errors
    ///
    /// A node asked for outside the layout, or a count outside `1..=` the nodes the claim
    /// may take.
    ///
    /// # Examples
    ///
    /// ```
    /// use atomflake::Layout;
    /// use atomflake_lease::{LeaseOptions, NodesError};
    ///
    /// assert_eq!(LeaseOptions::new("ns").claimable(&Layout::TWITTER), Ok(0..=1023));
    /// assert_eq!(LeaseOptions::new("ns").node(5).claimable(&Layout::TWITTER), Ok(5..=5));
    /// assert_eq!(
    ///     LeaseOptions::new("ns").node(5).nodes(2).claimable(&Layout::TWITTER),
    ///     Err(NodesError::CountOutOfRange { count: 2, max: 1 }),
    /// );
    /// ```
    pub fn claimable(&self, layout: &Layout) -> Result<RangeInclusive<u64>, NodesError> {
        let max = layout.max_node();
        let range = match self.node {
            Some(node) if node > max => return Err(NodesError::NodeOutOfRange { node, max }),
            Some(node) => node..=node,
            None => 0..=max,
        };
        let max_count = (range.end() - range.start()).saturating_add(1);
        if !(1..=max_count).contains(&self.count) {
            return Err(NodesError::CountOutOfRange {
                count: self.count,
                max: max_count,
            });
        }
        Ok(range)
    }
}
