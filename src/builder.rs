//! [`Builder`]: the options every generator type shares (clock, borrow-ahead, waiting).

use crate::clock::{Clock, MonotonicClock};
#[cfg(feature = "lease-postgres")]
use crate::error::LeaseError;
use crate::error::{BuildError, HighWaterError};
use crate::high_water::HighWater;
use crate::ids::Core;
use crate::layout::{Layout, SlotPacker};
#[cfg(feature = "lease-postgres")]
use crate::lease::Lease;
use crate::mark::Mark;
use crate::mint::Minter;
use crate::wait::Wait;
use std::path::PathBuf;
use std::time::Duration;

/// Builds any of the generator types with options beyond a layout and a node.
///
/// Start from [`Builder::new`] (or `Generator::builder`), or [`Builder::with_clock`] for a
/// clock of your own, set what differs from the defaults, then finish with
/// [`build`](Self::build) (a [`Generator`](crate::Generator)),
/// [`build_local`](Self::build_local) (a [`LocalGenerator`](crate::LocalGenerator)) or
/// [`build_sharded`](Self::build_sharded) (a
/// [`ShardedGenerator`](crate::ShardedGenerator)).
///
/// | option | default |
/// |---|---|
/// | clock ([`with_clock`](Self::with_clock)) | [`MonotonicClock`] |
/// | [`borrow_ahead`](Self::borrow_ahead) | off: a spent tick waits for the clock |
/// | [`wait`](Self::wait) | [`Wait::Sleep`] |
/// | [`high_water_file`](Self::high_water_file) | none: restarts are not covered |
///
/// # Examples
///
/// ```
/// use atomflake::{Builder, Layout, Wait};
/// use std::time::Duration;
///
/// let generator = Builder::new(Layout::TWITTER)
///     .borrow_ahead(Duration::from_millis(5))
///     .wait(Wait::Spin)
///     .build(7)?;
/// // Six ticks' worth at once: the current tick and five borrowed ones, without waiting.
/// let ids: Vec<_> = generator.next_ids(6 * 4096).collect();
/// assert!(ids.windows(2).all(|w| w[0] < w[1]));
/// # Ok::<(), atomflake::Error>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until it builds a generator"]
pub struct Builder<C = MonotonicClock> {
    layout: Layout,
    clock: C,
    lead: Duration,
    wait: Wait,
    high_water: Option<PathBuf>,
}

impl Builder<MonotonicClock> {
    /// A builder for generators of `layout` with the default options, reading the
    /// process's [`MonotonicClock`].
    pub fn new(layout: Layout) -> Builder<MonotonicClock> {
        Builder::with_clock(layout, MonotonicClock::new())
    }
}

impl<C: Clock> Builder<C> {
    /// The longest borrow-ahead lead: one minute of IDs stamped in the future.
    pub const MAX_LEAD: Duration = Duration::from_secs(60);

    /// How far the clock may be behind a [`high_water_file`](Self::high_water_file)'s mark
    /// when building: minting waits for the clock to reach the mark. Further behind,
    /// building fails ([`HighWaterError::Ahead`]).
    pub const MAX_RESTART_WAIT: Duration = Duration::from_secs(10);

    /// A builder for generators of `layout` that read `clock`; nothing else is built (no
    /// [`MonotonicClock`] is anchored for it).
    ///
    /// # Examples
    ///
    /// ```
    /// use atomflake::{Builder, Layout, ManualClock};
    ///
    /// let clock = ManualClock::new(1_700_000_000_000);
    /// let generator = Builder::with_clock(Layout::TWITTER, clock.clone()).build(7)?;
    /// assert_eq!(Layout::TWITTER.decode(generator.next_id()).unix_ms, 1_700_000_000_000);
    /// # Ok::<(), atomflake::Error>(())
    /// ```
    pub fn with_clock(layout: Layout, clock: C) -> Builder<C> {
        Builder {
            layout,
            clock,
            lead: Duration::ZERO,
            wait: Wait::default(),
            high_water: None,
        }
    }

    /// Borrow-ahead: when the current tick's sequence is spent, mint in later ticks, up to
    /// `lead` ahead of the clock, instead of waiting; past that, wait as usual.
    ///
    /// The trade-off: a burst larger than a tick's sequence does not stall, but its IDs
    /// carry timestamps up to `lead` in the future. They still strictly increase and never
    /// repeat. When the clock catches up, the lead is used up: the generator continues from
    /// the last borrowed tick until the clock passes it, then follows the clock again, so
    /// borrowed time is paid back by minting in those ticks later, never by going back. A
    /// restarted process that reuses the node must not start before the last borrowed tick
    /// (see the crate docs' Guarantees).
    ///
    /// `lead` must be a whole number of the layout's ticks, at most [`Self::MAX_LEAD`];
    /// zero (the default) turns borrow-ahead off. Checked when building:
    /// [`BuildError::LeadOutOfRange`].
    pub fn borrow_ahead(mut self, lead: Duration) -> Builder<C> {
        self.lead = lead;
        self
    }

    /// How to wait when the current tick's sequence is spent (default [`Wait::Sleep`]).
    pub fn wait(mut self, wait: Wait) -> Builder<C> {
        self.wait = wait;
        self
    }

    /// Restart safety: keep a high-water mark of minted time in the file at `path`, so that
    /// a restarted process (with the same node IDs) never mints an ID its predecessor
    /// minted, even when its clock is behind the predecessor's.
    ///
    /// - When building, the file is locked for the generator's life (a second live
    ///   generator on it, in any process, gets [`HighWaterError::Locked`]) and read. New
    ///   IDs start at the mark: if the clock is behind it, minting waits (`try_next_id`
    ///   reports how long) for at most [`MAX_RESTART_WAIT`](Self::MAX_RESTART_WAIT);
    ///   further behind, building fails with [`HighWaterError::Ahead`], which says by how
    ///   much. A missing file is a first run; a damaged one is [`HighWaterError::Corrupt`].
    /// - While minting, the mark is kept half a second to a second and a half ahead of the
    ///   IDs: one durable write (temporary file, fsync, rename) per second at most, made by
    ///   a thread of the generator's own (`atomflake-mark`), asked half a second before any
    ///   mint needs it. So a minting thread never writes the file; it waits only when the
    ///   clock has run past the stored mark before the write finished (a clock jump, a disk
    ///   slower than half a second), and `try_next_id` then returns
    ///   [`MintError::HighWaterPending`](crate::MintError::HighWaterPending). A restart within that time of the last mint waits for
    ///   the rest of it. If that thread panics, minting stops at the stored mark
    ///   ([`MintError::KeeperPanicked`](crate::MintError::KeeperPanicked)).
    /// - Dropping the generator stops that thread and waits for a write in progress for at
    ///   most 200 ms; a slower write finishes on its own, and the file stays locked until
    ///   it has.
    ///
    /// Give each generator (each node ID, or each
    /// [`ShardedGenerator`](crate::ShardedGenerator)) a file of its own.
    /// The mark is in Unix ms, so it also survives a change of layout.
    ///
    /// # Examples
    ///
    /// ```
    /// use atomflake::{Builder, Layout};
    ///
    /// let path = std::env::temp_dir().join(format!("atomflake-doc-{}.hw", std::process::id()));
    /// let first_run = Builder::new(Layout::TWITTER).high_water_file(&path).build(7)?;
    /// let last = first_run.next_id();
    /// drop(first_run);
    ///
    /// // Restarted (same node): every new ID is past every ID of the first run.
    /// let second_run = Builder::new(Layout::TWITTER).high_water_file(&path).build(7)?;
    /// assert!(second_run.next_id() > last);
    /// # drop(second_run);
    /// # for suffix in ["", ".lock"] { std::fs::remove_file(format!("{}{suffix}", path.display())).unwrap(); }
    /// # Ok::<(), atomflake::Error>(())
    /// ```
    pub fn high_water_file(mut self, path: impl Into<PathBuf>) -> Builder<C> {
        self.high_water = Some(path.into());
        self
    }

    /// The layout the generators will have.
    pub(crate) fn layout(&self) -> Layout {
        self.layout
    }

    /// [`into_core`](Self::into_core) for generators of one node, with the node checked
    /// first (before a high-water file is opened): the core and the node's packing.
    pub(crate) fn into_node_core(self, node: u64) -> Result<(Core<C>, SlotPacker), BuildError> {
        let packer = SlotPacker::new(&self.layout, node)?;
        Ok((self.into_core()?, packer))
    }

    /// The minting arithmetic and the clock for these options, with the lead checked and
    /// the high-water mark, if any, read and moved ahead.
    pub(crate) fn into_core(self) -> Result<Core<C>, BuildError> {
        let minter = self.minter()?;
        Ok(Core {
            minter,
            clock: self.clock,
        })
    }

    /// The minter for the layout, lead and wait, with no mark yet.
    fn plain_minter(&self, max_lead: Duration) -> Result<Minter, BuildError> {
        let tick_ms = self.layout.tick_ms();
        let out_of_range = BuildError::LeadOutOfRange {
            lead: self.lead,
            tick_ms,
            max: max_lead,
        };
        let lead_ms = u64::try_from(self.lead.as_millis()).map_err(|_| out_of_range.clone())?;
        let whole_ticks =
            self.lead.subsec_nanos().is_multiple_of(1_000_000) && lead_ms.is_multiple_of(tick_ms);
        if self.lead > max_lead || !whole_ticks {
            return Err(out_of_range);
        }
        Ok(Minter::new(self.layout, lead_ms / tick_ms, self.wait).built_at(self.clock.unix_ms()))
    }

    fn minter(&self) -> Result<Minter, BuildError> {
        let minter = self.plain_minter(Self::MAX_LEAD)?;
        let Some(path) = &self.high_water else {
            return Ok(minter);
        };
        let (file, mark) = HighWater::open(path)?;
        let mark = mark.unwrap_or(0);
        let now = self.clock.precise_unix_ms();
        if too_far_ahead(mark, now) {
            return Err(HighWaterError::Ahead {
                path: path.clone(),
                mark_ms: mark,
                clock_ms: now,
                max_wait: Self::MAX_RESTART_WAIT,
            }
            .into());
        }
        let kept = Mark::kept(file, minter.slots(), mark, now, None)?;
        Ok(minter.with_mark(kept, mark))
    }
}

#[cfg(feature = "lease-postgres")]
impl<C: Clock + Clone + Send + 'static> Builder<C> {
    /// The core and node of a generator on `lease`: starts past the lease's mark, keeps
    /// the mark in the lease row, and stops minting at the lease's local deadline.
    pub(crate) fn into_leased_core(self, lease: Lease) -> Result<(Core<C>, SlotPacker), BuildError> {
        if let Some(path) = self.high_water {
            return Err(BuildError::TwoMarks { path });
        }
        let packer = SlotPacker::new(&self.layout, lease.node())?;
        // A lead past a quarter of the lease time would run into the deadline.
        let minter = self.plain_minter(Self::MAX_LEAD.min(lease.ttl() / 4))?;
        let mark = lease.high_water_ms();
        let now = self.clock.precise_unix_ms();
        if too_far_ahead(mark, now) {
            return Err(LeaseError::Ahead {
                namespace: lease.namespace().to_owned(),
                node: lease.node(),
                mark_ms: mark,
                clock_ms: now,
                max_wait: Self::MAX_RESTART_WAIT,
            }
            .into());
        }
        let clock = self.clock.clone();
        let fence = lease.fence(Box::new(move || clock.precise_unix_ms()));
        let kept = Mark::kept(lease, minter.slots(), mark, now, Some(fence))?;
        let core = Core {
            minter: minter.with_mark(kept, mark),
            clock: self.clock,
        };
        Ok((core, packer))
    }
}

/// Whether a stored `mark` is further ahead of the clock's `now` than a generator waits
/// for at start-up.
fn too_far_ahead(mark: u64, now: u64) -> bool {
    let max_wait = u64::try_from(Builder::<MonotonicClock>::MAX_RESTART_WAIT.as_millis()).unwrap_or(u64::MAX);
    mark > now.saturating_add(max_wait)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn leads_that_are_not_whole_ticks_or_too_long_are_refused() {
        let refused = |layout: Layout, lead: Duration| BuildError::LeadOutOfRange {
            lead,
            tick_ms: layout.tick_ms(),
            max: Duration::from_secs(60),
        };
        for (layout, lead) in [
            (Layout::TWITTER, Duration::from_micros(1500)),
            (Layout::TWITTER, Duration::from_millis(60_001)),
            (Layout::SONYFLAKE, Duration::from_millis(15)),
            (Layout::SONYFLAKE, Duration::from_nanos(1)),
        ] {
            assert_eq!(
                Builder::new(layout).borrow_ahead(lead).build(1).unwrap_err(),
                refused(layout, lead),
                "{lead:?}"
            );
        }
        let error = Builder::new(Layout::SONYFLAKE)
            .borrow_ahead(Duration::from_millis(15))
            .build_local(1)
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "borrow-ahead lead 15ms is out of range: allowed whole multiples of the 10 ms tick, up to 60s"
        );
        assert!(
            Builder::new(Layout::SONYFLAKE)
                .borrow_ahead(Duration::from_millis(20))
                .build(1)
                .is_ok()
        );
        assert!(
            Builder::new(Layout::TWITTER)
                .borrow_ahead(Duration::from_secs(60))
                .build(1)
                .is_ok()
        );
        assert!(
            Builder::new(Layout::TWITTER)
                .borrow_ahead(Duration::ZERO)
                .build(1)
                .is_ok()
        );
    }
}
