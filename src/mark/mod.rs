//! The high-water mark and the stores that keep it: the seam that the high-water file and
//! every node-lease engine implement.
//!
//! A **mark** is a Unix time (ms) that no ID minted on a node has reached: every minted
//! ID's tick starts before it. A generator that starts past its node's stored mark never
//! mints an ID its predecessor on the node minted, whatever its clock says. A
//! [`MarkStore`] keeps one node's mark durably: the high-water file
//! ([`Builder::high_water_file`](crate::Builder::high_water_file)) is one, a node-ID lease
//! another (the `atomflake-lease` crate's `Lease`, on PostgreSQL, etcd or ZooKeeper). Any
//! store puts any generator type on it: [`Builder::mark_store`](crate::Builder::mark_store).
//!
//! # What the generator does with a store
//!
//! Written once, here, for every store:
//!
//! - When building, it checks that the store holds the generator's nodes
//!   ([`MarkStore::nodes`]), and starts minting past [`MarkStore::mark`], waiting for its clock for
//!   at most [`Builder::MAX_RESTART_WAIT`](crate::Builder::MAX_RESTART_WAIT) and refusing
//!   to build further behind ([`BuildError::Ahead`](crate::BuildError::Ahead)). It stores
//!   a first mark a second and a half past the clock before it returns.
//! - A thread of the generator's own (`atomflake-mark`) stores each later mark, a second
//!   and a half ahead, asked half a second before any mint needs it: minting threads never
//!   wait for a store unless the clock outruns it. No ID passes a mark before
//!   [`MarkStore::store`] has returned `Ok` for it.
//! - For a store held for a while at a time ([`Tenure::Leased`]), the generator stops
//!   minting on its own, before the hold can end (the **fence**): every slot past
//!   `hold` after the start of the last successful store is refused
//!   ([`MarkStore::lapsed`]), measured with the generator's clock from before the store
//!   was sent. The keeper stores again every `renew_every`. A store that reports the hold
//!   lost ([`StoreError::lost`]) ends minting for good.
//! - When the generator is dropped, [`MarkStore::finish`] is told the mark that covers
//!   exactly what it minted, and the store is dropped (a lease releases its node).
//!
//! # What a store must promise
//!
//! 1. [`store`](MarkStore::store) returns `Ok` only once the mark is durable: a restart, a
//!    crash or a failover of whatever keeps it cannot bring back a smaller mark.
//! 2. [`mark`](MarkStore::mark) is at or past every mark a previous holder of the node
//!    was told was stored, whatever order the store's server applied that holder's writes
//!    in: a write the holder gave up on and the server applied late must not lower the
//!    mark (compare it with the mark it replaces), and a write after another holder took
//!    the node must fail with [`StoreError::lost`] (the fence: a token per claim, never a
//!    clock).
//! 3. For [`Tenure::Leased`]: no other holder is normally given the node before `hold` has
//!    passed since the start of the last successful `store`, by the clock of whoever gives
//!    it out.
//!
//! Under the first two, two generators never mint the same ID on one node: a successor
//! starts past the stored mark (2), which covers every ID the predecessor minted (1). That
//! rests on the store's writes alone, never on a clock or on when a hold ends. The third
//! keeps a node to one minting holder at a time, all but one tick: the predecessor takes
//! no new tick once its hold has passed, which is before the successor can start. A mint
//! already under way may still finish after that: a thread preempted, or a process stopped
//! (`SIGSTOP`, a frozen VM), between its clock read and the compare-and-swap that takes a
//! slot hands out, when it resumes, an ID of the tick it read, and a batch reserved
//! before then the rest of its tick. Those IDs are below the stored mark, so the successor
//! never mints them, but they may sort before IDs the successor has already handed out. A
//! store that breaks the third promise (a lease its server ends early) costs its holder the
//! node, never an ID.
//!
//! # Examples
//!
//! A store that keeps the mark in memory: enough to see the calls (a real one writes
//! durably).
//!
//! ```
//! use atomflake::mark::{MarkStore, StoreError};
//! use atomflake::{Builder, Layout, ManualClock};
//! use std::sync::{Arc, Mutex};
//!
//! struct InMemory(Arc<Mutex<u64>>);
//!
//! impl MarkStore for InMemory {
//!     fn mark(&self) -> u64 {
//!         *self.0.lock().unwrap()
//!     }
//!     fn store(&mut self, unix_ms: u64) -> Result<(), StoreError> {
//!         *self.0.lock().unwrap() = unix_ms;
//!         Ok(())
//!     }
//!     fn describe(&self) -> String {
//!         "the in-memory mark".to_owned()
//!     }
//! }
//!
//! let stored = Arc::new(Mutex::new(0));
//! let clock = ManualClock::new(1_700_000_000_000);
//! let generator = Builder::with_clock(Layout::TWITTER, clock)
//!     .mark_store(InMemory(Arc::clone(&stored)))
//!     .build(7)?;
//! let id = generator.next_id();
//! // Stored before `build` returned: a second and a half past the clock.
//! assert_eq!(*stored.lock().unwrap(), 1_700_000_001_500);
//! assert!(Layout::TWITTER.decode(id).unix_ms < *stored.lock().unwrap());
//! # Ok::<(), atomflake::Error>(())
//! ```

mod file;

pub(crate) use file::HighWater;
pub use file::HighWaterError;
#[cfg(all(feature = "raw", not(loom)))]
pub(crate) use file::{read, write};

use crate::io::io_is_transient;
use std::error::Error;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Where one node's high-water mark is kept durably. See the [module docs](self) for what
/// a store must promise and what the generator does with it.
pub trait MarkStore: Send + 'static {
    /// The mark the store holds now (Unix ms), 0 when it holds none: a generator on the
    /// store starts past it.
    fn mark(&self) -> u64;

    /// Stores `unix_ms` as the mark, durably, before it returns. Called from the
    /// generator's keeper thread, never from a minting thread; never with a mark below one
    /// stored before.
    ///
    /// # Errors
    ///
    /// When the mark could not be stored; the previous mark is then still in place.
    /// [`StoreError::lost`] when the store can never be written again (another holder
    /// took the node): minting then ends for good.
    fn store(&mut self, unix_ms: u64) -> Result<(), StoreError>;

    /// Names the store in errors: "high-water file /var/lib/app/ids.hw", "lease on node 3
    /// of namespace \"orders\"".
    fn describe(&self) -> String;

    /// The nodes the store holds, for a store that holds some (a lease): generators on the
    /// store are built for those nodes only ([`BuildError::NodeNotHeld`](crate::BuildError::NodeNotHeld)).
    /// Empty (the default) for a store that any node may use (a file).
    fn nodes(&self) -> &[u64] {
        &[]
    }

    /// How long a stored mark may be relied on: for good (the default), or for a while
    /// after each store began.
    fn tenure(&self) -> Tenure {
        Tenure::Owned
    }

    /// What minting reports for a slot past the hold of a [`Tenure::Leased`] store, while
    /// the store is not lost.
    fn lapsed(&self) -> StoreError {
        StoreError::lapsed(format!("{}: the hold on the mark has lapsed", self.describe()))
    }

    /// The generator has stopped minting, and no ID it minted reaches `unix_ms`: a store
    /// that is released when dropped may release with this mark, which can be below the
    /// last one stored. Called once, from the keeper thread, before the store is dropped.
    fn finish(&mut self, unix_ms: u64) {
        let _ = unix_ms;
    }
}

impl<S: MarkStore + ?Sized> MarkStore for Box<S> {
    fn mark(&self) -> u64 {
        (**self).mark()
    }
    fn store(&mut self, unix_ms: u64) -> Result<(), StoreError> {
        (**self).store(unix_ms)
    }
    fn describe(&self) -> String {
        (**self).describe()
    }
    fn nodes(&self) -> &[u64] {
        (**self).nodes()
    }
    fn tenure(&self) -> Tenure {
        (**self).tenure()
    }
    fn lapsed(&self) -> StoreError {
        (**self).lapsed()
    }
    fn finish(&mut self, unix_ms: u64) {
        (**self).finish(unix_ms);
    }
}

/// How long a [`MarkStore`]'s holder may rely on what it stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Tenure {
    /// For as long as the store lives (a file locked by this process).
    Owned,
    /// For `hold` after each successful store began, by the generator's clock (a lease).
    Leased {
        /// How long after a store is sent the holder may mint on it. Less than the time
        /// after which anyone else may be given the node, by a margin for clock rates.
        hold: Duration,
        /// How often the keeper stores again while no new mark is needed. Also the longest
        /// borrow-ahead lead a generator on the store may have.
        renew_every: Duration,
        /// How long `next_id` waits for failing stores before it panics, and dropping the
        /// generator waits for the keeper to finish.
        patience: Duration,
    },
}

impl Tenure {
    /// The tenure of a lease that its server lets another holder claim `ttl` after the
    /// server ran the last renewal: held for the lease time less a fifth after each
    /// renewal is sent, renewed every quarter of the lease time, and waited for by
    /// `next_id` for one lease time.
    ///
    /// The fifth is the margin for the holder's clock running slower than the server's
    /// (the default clock's discipline slews at most 1 %) and for the moment the server
    /// reads its clock, which is after the renewal was sent. The property test of the
    /// keeper checks the rule against a simulated server, for any timing of renewals,
    /// answers, lost answers and pauses.
    ///
    /// # Examples
    ///
    /// ```
    /// use atomflake::mark::Tenure;
    /// use std::time::Duration;
    ///
    /// assert_eq!(
    ///     Tenure::lease(Duration::from_secs(10)),
    ///     Tenure::Leased {
    ///         hold: Duration::from_secs(8),
    ///         renew_every: Duration::from_millis(2_500),
    ///         patience: Duration::from_secs(10),
    ///     }
    /// );
    /// ```
    pub fn lease(ttl: Duration) -> Tenure {
        Tenure::Leased {
            hold: ttl.saturating_sub(ttl / 5),
            renew_every: ttl / 4,
            patience: ttl,
        }
    }
}

/// A [`MarkStore`] that failed: for now, past its hold, or for good. Its `Display` and
/// `source` are the store's own error's.
///
/// # Examples
///
/// ```
/// use atomflake::mark::StoreError;
/// use std::io;
///
/// let error = StoreError::failed(io::Error::from(io::ErrorKind::StorageFull));
/// assert!(error.is_transient());
/// assert!(error.downcast_ref::<io::Error>().is_some());
/// assert!(!StoreError::lost("node 3 was taken by another holder").is_transient());
/// ```
#[derive(Debug, Clone)]
pub struct StoreError {
    kind: StoreErrorKind,
    error: Arc<dyn Error + Send + Sync>,
    retry_after: Option<Duration>,
}

/// What a [`StoreError`] says about the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// The mark could not be stored now; the previous mark is in place and the keeper
    /// tries again. Transient.
    Failed,
    /// The hold of a [`Tenure::Leased`] store has ended without a renewal: nothing past it
    /// is minted until a store succeeds. Transient.
    Lapsed,
    /// The store can never be written again (another holder has the node). Permanent.
    Lost,
}

impl StoreError {
    /// A store that failed for now.
    pub fn failed(error: impl Into<Box<dyn Error + Send + Sync>>) -> StoreError {
        StoreError::new(StoreErrorKind::Failed, error)
    }

    /// A hold that has lapsed ([`MarkStore::lapsed`]).
    pub fn lapsed(error: impl Into<Box<dyn Error + Send + Sync>>) -> StoreError {
        StoreError::new(StoreErrorKind::Lapsed, error)
    }

    /// A store lost for good: the keeper stops storing, and minting past the stored mark
    /// ends.
    pub fn lost(error: impl Into<Box<dyn Error + Send + Sync>>) -> StoreError {
        StoreError::new(StoreErrorKind::Lost, error)
    }

    fn new(kind: StoreErrorKind, error: impl Into<Box<dyn Error + Send + Sync>>) -> StoreError {
        StoreError {
            kind,
            error: Arc::from(error.into()),
            retry_after: None,
        }
    }

    /// The error with `retry_after` set: the keeper's, when it refuses a mint.
    pub(crate) fn retrying_in(self, retry_after: Duration) -> StoreError {
        StoreError {
            retry_after: Some(retry_after),
            ..self
        }
    }

    /// When a mint refused with this error may succeed, if the store's next attempt
    /// does: the time until the generator's keeper expects its next store to have
    /// finished. Set on the errors a generator's mints report
    /// ([`MintError::Store`](crate::MintError::Store)) while the error is transient;
    /// `None` on a store's own errors and on a store lost.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after.filter(|_| self.is_transient())
    }

    /// What the error says about the store.
    pub fn kind(&self) -> StoreErrorKind {
        self.kind
    }

    /// Whether storing can succeed later: every kind but [`StoreErrorKind::Lost`], unless
    /// the store's error is a [`HighWaterError`] that says otherwise.
    pub fn is_transient(&self) -> bool {
        match (self.kind, self.downcast_ref::<HighWaterError>()) {
            (StoreErrorKind::Lost, _) => false,
            (_, Some(HighWaterError::Io { cause, .. })) => io_is_transient(cause),
            _ => true,
        }
    }

    /// The store's own error.
    pub fn get_ref(&self) -> &(dyn Error + Send + Sync + 'static) {
        &*self.error
    }

    /// The store's own error, if it is an `E`.
    pub fn downcast_ref<E: Error + 'static>(&self) -> Option<&E> {
        self.error.downcast_ref()
    }
}

/// Two store errors are equal when their kinds and messages are (whatever their
/// [`retry_after`](StoreError::retry_after)).
impl PartialEq for StoreError {
    fn eq(&self, other: &StoreError) -> bool {
        self.kind == other.kind && self.error.to_string() == other.error.to_string()
    }
}

impl Eq for StoreError {}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl Error for StoreError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.error.source()
    }
}
