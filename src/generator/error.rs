//! The errors of building a generator and of minting.

use crate::error::holds;
use crate::format::{FieldOutOfRange, OutOfSpan, RangeError};
use crate::io::IoCause;
use crate::mark::{HighWaterError, StoreError};
use core::fmt;
use std::time::Duration;

/// A generator that cannot be built.
///
/// # Examples
///
/// ```
/// use atomflake::{BuildError, Generator, Layout};
///
/// let err = Generator::new(Layout::TWITTER, 1024).unwrap_err();
/// assert_eq!(err, BuildError::NodeOutOfRange { node: 1024, max: 1023 });
/// assert_eq!(err.to_string(), "node 1024 is out of range: the layout allows 0..=1023");
/// assert!(!err.is_transient());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// A node that does not fit the layout's node field. Permanent.
    #[error("node {node} is out of range: the layout allows 0..={max}")]
    NodeOutOfRange {
        /// The node given.
        node: u64,
        /// The largest node the layout holds.
        max: u64,
    },
    /// A [`ShardedGenerator`](crate::ShardedGenerator) given no node IDs. Permanent.
    #[error("no node ids: a sharded generator needs at least one")]
    NoNodes,
    /// A [`ShardedGenerator`](crate::ShardedGenerator) given one node ID twice: its two
    /// shards would mint the same IDs. Permanent.
    #[error("node {node} is given twice: each shard needs its own node id")]
    DuplicateNode {
        /// The repeated node ID.
        node: u64,
    },
    /// A generator on a [`MarkStore`](crate::mark::MarkStore) that holds nodes (a lease)
    /// built for a node it does not hold. Permanent: two processes could mint on that node
    /// without a fence between them.
    #[error("node {node} is not held by the mark store, which holds {}", nodes(held))]
    NodeNotHeld {
        /// The node asked for.
        node: u64,
        /// The nodes the store holds.
        held: Vec<u64>,
    },
    /// A borrow-ahead lead ([`Builder::borrow_ahead`](crate::Builder::borrow_ahead)) that is
    /// not a whole number of the layout's ticks, or longer than the longest allowed (for a
    /// store whose hold ends, at most its renewal interval). Permanent.
    #[error(
        "borrow-ahead lead {lead:?} is out of range: allowed whole multiples of the {tick_ms} ms tick, up to {max:?}"
    )]
    LeadOutOfRange {
        /// The lead asked for.
        lead: Duration,
        /// The layout's tick, which the lead must be a multiple of.
        tick_ms: u64,
        /// The longest lead allowed.
        max: Duration,
    },
    /// The high-water file cannot be opened: locked, damaged, or an I/O error.
    #[error(transparent)]
    HighWater(HighWaterError),
    /// The mark store failed to store the generator's first mark.
    #[error(transparent)]
    Store(StoreError),
    /// The clock is further behind the store's mark than a generator waits for at start-up
    /// ([`Builder::MAX_RESTART_WAIT`](crate::Builder::MAX_RESTART_WAIT)): the previous
    /// holder's clock was ahead, or this one's is behind. Transient: building again once
    /// the clock has passed the mark succeeds.
    #[error(
        "clock is {:?} behind {store} (mark {mark_ms} ms, clock {clock_ms} ms): a generator waits at most \
         {max_wait:?} at start-up",
        Duration::from_millis(mark_ms.saturating_sub(*clock_ms))
    )]
    Ahead {
        /// The store, as it describes itself ([`MarkStore::describe`](crate::mark::MarkStore::describe)).
        store: String,
        /// The mark, Unix ms: IDs minted before all have earlier times.
        mark_ms: u64,
        /// The clock's time, Unix ms.
        clock_ms: u64,
        /// The longest start-up wait allowed.
        max_wait: Duration,
    },
    /// The thread that keeps the mark (`atomflake-mark`) could not be spawned. Transient
    /// when the system was out of threads.
    #[error("could not spawn the thread that keeps the high-water mark: {cause}")]
    KeeperSpawn {
        /// What the operating system reported.
        #[source]
        cause: IoCause,
    },
}

impl BuildError {
    /// How long a transient error's caller waits before building again when nothing says
    /// when it may succeed: a store or file out of reach for now, a thread not spawned.
    pub const RETRY_AFTER_UNKNOWN: Duration = Duration::from_secs(1);

    /// Whether building again can succeed: a store that failed for now, a clock that has
    /// yet to pass the mark, a thread that could not be spawned. Bad input is permanent.
    pub fn is_transient(&self) -> bool {
        match self {
            BuildError::HighWater(error) => error.is_transient(),
            BuildError::Store(error) => error.is_transient(),
            BuildError::Ahead { .. } | BuildError::KeeperSpawn { .. } => true,
            BuildError::NodeOutOfRange { .. }
            | BuildError::NoNodes
            | BuildError::DuplicateNode { .. }
            | BuildError::NodeNotHeld { .. }
            | BuildError::LeadOutOfRange { .. } => false,
        }
    }

    /// Whether the error is the caller's input (a node, the nodes of a sharded generator,
    /// a borrow-ahead lead), rather than the world's: the file, the store, the clock or
    /// the system. Bad input is permanent; bindings report it as their own kind of bad
    /// argument.
    ///
    /// # Examples
    ///
    /// ```
    /// use atomflake::{Generator, Layout};
    ///
    /// assert!(Generator::new(Layout::TWITTER, 1024).unwrap_err().is_invalid_input());
    /// ```
    pub fn is_invalid_input(&self) -> bool {
        match self {
            BuildError::NodeOutOfRange { .. }
            | BuildError::NoNodes
            | BuildError::DuplicateNode { .. }
            | BuildError::NodeNotHeld { .. }
            | BuildError::LeadOutOfRange { .. } => true,
            BuildError::HighWater(_)
            | BuildError::Store(_)
            | BuildError::Ahead { .. }
            | BuildError::KeeperSpawn { .. } => false,
        }
    }

    /// When to build again, for every transient error: for [`Ahead`](BuildError::Ahead),
    /// the time until the clock passes the mark; for the others, which say nothing of when
    /// they may end, [`RETRY_AFTER_UNKNOWN`](BuildError::RETRY_AFTER_UNKNOWN). `None` for
    /// a permanent one.
    ///
    /// # Examples
    ///
    /// ```
    /// use atomflake::BuildError;
    /// use std::time::Duration;
    ///
    /// let ahead = BuildError::Ahead {
    ///     store: "high-water file ids.mark".into(),
    ///     mark_ms: 1_700_000_030_000,
    ///     clock_ms: 1_700_000_000_000,
    ///     max_wait: Duration::from_secs(10),
    /// };
    /// assert_eq!(ahead.retry_after(), Some(Duration::from_secs(30)));
    /// assert_eq!(BuildError::NoNodes.retry_after(), None);
    /// ```
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            BuildError::Ahead {
                mark_ms, clock_ms, ..
            } => Some(Duration::from_millis(mark_ms.saturating_sub(*clock_ms))),
            _ if self.is_transient() => Some(BuildError::RETRY_AFTER_UNKNOWN),
            _ => None,
        }
    }
}

/// `node 1, 2, 3`: the nodes of [`BuildError::NodeNotHeld`].
fn nodes(held: &[u64]) -> String {
    let list: Vec<String> = held.iter().map(u64::to_string).collect();
    if list.is_empty() {
        String::new()
    } else {
        format!("node {}", list.join(", "))
    }
}

holds!(
    BuildError::HighWater(HighWaterError),
    BuildError::Store(StoreError),
    MintError::Store(StoreError),
);

// Only a node is checked when building a generator.
impl From<FieldOutOfRange> for BuildError {
    fn from(FieldOutOfRange { value, max, .. }: FieldOutOfRange) -> BuildError {
        BuildError::NodeOutOfRange { node: value, max }
    }
}

/// Why `try_next_id` minted nothing.
///
/// # Examples
///
/// ```
/// use atomflake::{Generator, Layout, ManualClock, MintError, RangeError};
///
/// let generator = Generator::with_clock(Layout::TWITTER, 1, ManualClock::new(5))?;
/// let error = generator.try_next_id().unwrap_err();
/// assert_eq!(
///     error,
///     MintError::ClockOutOfSpan(RangeError::TimeBeforeEpoch {
///         unix_ms: 5,
///         epoch_ms: Layout::TWITTER.epoch_ms(),
///     }),
/// );
/// assert!(!error.is_transient());
/// # Ok::<(), atomflake::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MintError {
    /// Every sequence value of the current tick is taken. Transient: IDs are available
    /// again after `retry_after`.
    #[error("sequence exhausted: ids are available again at tick {tick}, in {retry_after:?}")]
    SequenceExhausted {
        /// The tick (since the epoch) at which IDs are available again.
        tick: u64,
        /// How long until that tick starts, by the generator's clock.
        retry_after: Duration,
    },
    /// The clock has passed the stored high-water mark while a thread of the generator's
    /// own is storing the next one (a clock that jumped ahead, a store slower than half a
    /// second). Transient: minting resumes as soon as the mark is stored.
    #[error(
        "the clock has passed the high-water mark while the next mark is being stored: ids are available again \
         once it is, expected in {retry_after:?}"
    )]
    MarkPending {
        /// How long until that store is expected to have finished: the last store's
        /// time, counted from when this one was sent (at least 1 ms).
        retry_after: Duration,
    },
    /// The clock reads outside the layout's span: [`RangeError::TimeBeforeEpoch`] (the
    /// clock is set before the epoch) or [`RangeError::TimePastEnd`] (the layout has run
    /// out of timestamps). Permanent for this clock.
    #[error("{0}")]
    ClockOutOfSpan(#[source] RangeError),
    /// Every slot of the layout's span is used: the next ID would need a time at or past
    /// the end of the span, which the clock has not reached. Permanent for this generator.
    #[error(
        "every id of the layout's span is used: the next id would need a time at or past the layout's end, \
         {end_ms} ms"
    )]
    SpanSpent {
        /// The first Unix ms the layout cannot express.
        end_ms: u64,
    },
    /// The high-water mark cannot be stored past the clock, or the store's hold on it has
    /// lapsed, or the store is lost: [`StoreError::is_transient`] says which. The
    /// generator's keeper thread tries again until the store is lost.
    #[error(transparent)]
    Store(StoreError),
    /// The generator was built in another process and copied into this one by `fork()`:
    /// parent and child would mint the same IDs. Permanent for this generator in this
    /// process: build a new generator in the child, on a node of its own. A child is
    /// refused from its first mint, in the tick of the fork too (on Unix: see
    /// [the guarantees](crate::docs::guarantees)).
    #[error(
        "generator built in process {parent} cannot mint in process {child}, a child of a fork: both would \
         mint the same ids; build a new generator in the child, on a node of its own"
    )]
    Forked {
        /// The process the generator was built in (the child's parent, or an earlier
        /// ancestor): the same number as `child` where the system gave the child its
        /// ancestor's process ID, once the ancestor exited.
        parent: u32,
        /// This process.
        child: u32,
    },
    /// The thread that stores the generator's high-water mark (`atomflake-mark`) panicked,
    /// so the mark no longer moves. IDs the stored mark covers still mint; past it,
    /// permanent for this generator: build a new one.
    #[error(
        "the thread that stores the high-water mark panicked ({message}): no id past the stored mark can be \
         minted; build a new generator"
    )]
    KeeperPanicked {
        /// The panic's message.
        message: String,
    },
}

impl MintError {
    /// Whether the same generator can mint again: after a spent tick, a mark being stored,
    /// a store that failed for now or a hold that lapsed and may be renewed.
    pub fn is_transient(&self) -> bool {
        match self {
            MintError::SequenceExhausted { .. } | MintError::MarkPending { .. } => true,
            MintError::Store(error) => error.is_transient(),
            MintError::ClockOutOfSpan(_)
            | MintError::SpanSpent { .. }
            | MintError::Forked { .. }
            | MintError::KeeperPanicked { .. } => false,
        }
    }

    /// When to try again, for every transient refusal: the time until a spent tick ends
    /// ([`SequenceExhausted`](MintError::SequenceExhausted)), or until the keeper's store
    /// of the mark is expected to have finished ([`MarkPending`](MintError::MarkPending),
    /// and a transient [`Store`](MintError::Store) error: [`StoreError::retry_after`]).
    /// `None` for a permanent one. What every waiting mint waits for, and what a caller
    /// of `try_next_id` should.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            MintError::SequenceExhausted { retry_after, .. } | MintError::MarkPending { retry_after } => {
                Some(*retry_after)
            }
            MintError::Store(error) => error.retry_after(),
            MintError::ClockOutOfSpan(_)
            | MintError::SpanSpent { .. }
            | MintError::Forked { .. }
            | MintError::KeeperPanicked { .. } => None,
        }
    }
}

/// Why `fill_timeout` filled only the start of its buffer: how many IDs it minted there,
/// and the refusal that stopped it.
///
/// The IDs in `ids[..filled()]` are minted and belong to the caller; the rest of the
/// buffer is left as it was. Converting into [`Error`](crate::Error) keeps both.
///
/// # Examples
///
/// ```
/// use atomflake::{FillError, Generator, Id, Layout, ManualClock, MintError};
/// use std::time::Duration;
///
/// // Two IDs a tick, and a clock that stands still.
/// let layout = Layout::builder().timestamp_bits(41).node_bits(10).sequence_bits(1).build()?;
/// let generator = Generator::with_clock(layout, 7, ManualClock::new(1_700_000_000_000))?;
/// let mut ids = [Id::new(0); 3];
/// let error: FillError = generator.fill_timeout(&mut ids, Duration::ZERO).unwrap_err();
/// assert_eq!(error.filled(), 2);
/// assert_eq!(
///     error.error(),
///     &MintError::SequenceExhausted { tick: 1_700_000_000_001, retry_after: Duration::from_millis(1) },
/// );
/// assert_eq!(
///     error.to_string(),
///     "2 ids filled, then: sequence exhausted: ids are available again at tick 1700000000001, in 1ms",
/// );
/// assert!(error.is_transient());
/// assert!(ids[0] < ids[1] && ids[2] == Id::new(0));
/// # Ok::<(), atomflake::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FillError {
    filled: usize,
    error: MintError,
}

impl FillError {
    /// `filled` IDs minted, then `error`.
    pub(crate) fn new(filled: usize, error: MintError) -> FillError {
        FillError { filled, error }
    }

    /// How many IDs were minted, at the start of the buffer.
    pub fn filled(&self) -> usize {
        self.filled
    }

    /// Why no more could be minted.
    pub fn error(&self) -> &MintError {
        &self.error
    }

    /// Why no more could be minted, for code that has taken the [`filled`](Self::filled)
    /// IDs already.
    pub fn into_error(self) -> MintError {
        self.error
    }

    /// Whether filling the rest can succeed later: as [`MintError::is_transient`].
    pub fn is_transient(&self) -> bool {
        self.error.is_transient()
    }
}

impl fmt::Display for FillError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ids filled, then: {}", self.filled, self.error)
    }
}

// The message includes the refusal's, so the source is the refusal's own source, as
// `Error`'s is.
impl std::error::Error for FillError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.error)
    }
}

impl From<OutOfSpan> for MintError {
    fn from(out: OutOfSpan) -> MintError {
        MintError::ClockOutOfSpan(out.into())
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
