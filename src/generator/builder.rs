//! [`Builder`]: the options every generator type shares (clock, borrow-ahead, waiting, the
//! mark store).

use super::BuildError;
use super::ids::Core;
use super::minter::Minter;
use super::wait::Wait;
use crate::clock::{Clock, MonotonicClock};
use crate::format::layout::Layout;
use crate::generator::keeper::{Fence, Mark};
use crate::generator::state::SlotPacker;
use crate::mark::{HighWater, MarkStore, Tenure};
use std::fmt;
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
/// | [`high_water_file`](Self::high_water_file) or [`mark_store`](Self::mark_store) | none: restarts are not covered |
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
#[derive(Debug)]
#[must_use = "a builder does nothing until it builds a generator"]
pub struct Builder<C = MonotonicClock> {
    layout: Layout,
    clock: C,
    lead: Duration,
    wait: Wait,
    mark: MarkSource,
}

/// Where a builder's generator keeps its high-water mark.
enum MarkSource {
    None,
    /// High-water files (one, or one per node), opened when building.
    Files(Vec<PathBuf>),
    /// A store of the caller's, and the generator's clock read precisely (for its fence).
    Store {
        store: Box<dyn MarkStore>,
        clock: Box<dyn Fn() -> u64 + Send>,
    },
}

impl fmt::Debug for MarkSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MarkSource::None => f.write_str("None"),
            MarkSource::Files(paths) => f.debug_tuple("Files").field(paths).finish(),
            MarkSource::Store { store, .. } => f.debug_tuple("Store").field(&store.describe()).finish(),
        }
    }
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
    /// building fails ([`BuildError::Ahead`]).
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
            mark: MarkSource::None,
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
    ///   generator on it, in any process, gets [`HighWaterError::Locked`](crate::mark::HighWaterError::Locked)) and read. New
    ///   IDs start at the mark: if the clock is behind it, minting waits (`try_next_id`
    ///   reports how long) for at most [`MAX_RESTART_WAIT`](Self::MAX_RESTART_WAIT);
    ///   further behind, building fails with [`BuildError::Ahead`], which says by how
    ///   much. A missing file is a first run; a damaged one is [`HighWaterError::Corrupt`](crate::mark::HighWaterError::Corrupt).
    /// - While minting, the mark is kept half a second to a second and a half ahead of the
    ///   IDs: one durable write (temporary file, fsync, rename) per second at most, made by
    ///   a thread of the generator's own (`atomflake-mark`), asked half a second before any
    ///   mint needs it. So a minting thread never writes the file; it waits only when the
    ///   clock has run past the stored mark before the write finished (a clock jump, a disk
    ///   slower than half a second), and `try_next_id` then returns
    ///   [`MintError::MarkPending`](crate::MintError::MarkPending). A restart within that time of the last mint waits for
    ///   the rest of it. If that thread panics, minting stops at the stored mark
    ///   ([`MintError::KeeperPanicked`](crate::MintError::KeeperPanicked)).
    /// - Dropping the generator stops that thread, which writes the mark that covers
    ///   exactly the IDs minted (so a process started again at once does not wait out the
    ///   lead), and waits for that write and the unlock, so the file is free to build on
    ///   again once the drop returns. A write still unfinished after 10 s (a hung disk) is
    ///   left to finish on its own, and the file stays locked until it has.
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
    ///
    /// The file is one [`MarkStore`]: this is [`mark_store`](Self::mark_store) with a
    /// store this crate writes, and replaces any store set before.
    pub fn high_water_file(mut self, path: impl Into<PathBuf>) -> Builder<C> {
        self.mark = MarkSource::Files(vec![path.into()]);
        self
    }

    /// [`high_water_file`](Self::high_water_file) with the mark kept alike in several
    /// files: for a [`ShardedGenerator`](crate::ShardedGenerator), one file per node, so
    /// that each node's file covers its IDs whichever nodes it is built with next (nodes
    /// 1, 2 and 3 today, node 2 alone tomorrow).
    ///
    /// When building, every file is locked (a file held by another live generator, or
    /// given twice, is [`HighWaterError::Locked`](crate::mark::HighWaterError::Locked),
    /// and the locks taken are given back) and read; the generator starts past the
    /// greatest mark. Every store writes each file, one after another. No files at all is
    /// no mark store, as without this call.
    ///
    /// # Examples
    ///
    /// ```
    /// use atomflake::{Builder, Layout};
    ///
    /// let dir = std::env::temp_dir().join(format!("atomflake-doc-files-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir)?;
    /// let file = |node: u64| dir.join(format!("twitter-node-{node}.hw"));
    /// let three = Builder::new(Layout::TWITTER)
    ///     .high_water_files([1, 2, 3].map(file))
    ///     .build_sharded([1, 2, 3])?;
    /// let last = three.next_id();
    /// drop(three);
    ///
    /// // Node 2 alone, restarted: past every ID the three nodes minted.
    /// let two = Builder::new(Layout::TWITTER).high_water_files([file(2)]).build_sharded([2])?;
    /// assert!(Layout::TWITTER.decode(two.next_id()).unix_ms > Layout::TWITTER.decode(last).unix_ms);
    /// # drop(two);
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn high_water_files<P: Into<PathBuf>>(mut self, paths: impl IntoIterator<Item = P>) -> Builder<C> {
        self.mark = MarkSource::Files(paths.into_iter().map(Into::into).collect());
        self
    }

    /// The layout the generators will have.
    pub(crate) fn layout(&self) -> Layout {
        self.layout
    }

    /// The minting arithmetic and the clock for generators of `nodes` (already checked
    /// against the layout): the lead checked, and the mark store, if any, opened, checked
    /// and moved ahead.
    pub(crate) fn into_core(mut self, nodes: &[u64]) -> Result<Core<C>, BuildError> {
        let mark = std::mem::replace(&mut self.mark, MarkSource::None);
        let (store, fence_clock): (Box<dyn MarkStore>, _) = match mark {
            MarkSource::None => {
                let minter = self.minter(Self::MAX_LEAD)?;
                return Ok(Core {
                    minter,
                    clock: self.clock,
                });
            }
            MarkSource::Files(paths) if paths.is_empty() => {
                let minter = self.minter(Self::MAX_LEAD)?;
                return Ok(Core {
                    minter,
                    clock: self.clock,
                });
            }
            MarkSource::Files(paths) => (Box::new(HighWater::open(&paths)?), None),
            MarkSource::Store { store, clock } => (store, Some(clock)),
        };
        let held = store.nodes();
        if !held.is_empty()
            && let Some(&node) = nodes.iter().find(|node| !held.contains(node))
        {
            return Err(BuildError::NodeNotHeld {
                node,
                held: held.to_vec(),
            });
        }
        // A lead past the renewal interval would run into the hold.
        let max_lead = match store.tenure() {
            Tenure::Leased { renew_every, .. } => Self::MAX_LEAD.min(renew_every),
            Tenure::Owned => Self::MAX_LEAD,
        };
        let minter = self.minter(max_lead)?;
        let mark = store.mark();
        let now = self.clock.precise_unix_ms();
        if too_far_ahead(mark, now) {
            return Err(BuildError::Ahead {
                store: store.describe(),
                mark_ms: mark,
                clock_ms: now,
                max_wait: Self::MAX_RESTART_WAIT,
            });
        }
        // The file has no clock here: it is held for good, so it needs no fence.
        let fence = fence_clock.and_then(|clock| Fence::of(&store, clock));
        let kept = Mark::kept(store, minter.slots(), now, fence)?;
        Ok(Core {
            minter: minter.with_mark(kept, mark),
            clock: self.clock,
        })
    }

    /// [`into_core`](Self::into_core) for generators of one node, with the node checked
    /// first (before a mark store is opened): the core and the node's packing.
    pub(crate) fn into_node_core(self, node: u64) -> Result<(Core<C>, SlotPacker), BuildError> {
        let packer = SlotPacker::new(&self.layout, node)?;
        Ok((self.into_core(&[node])?, packer))
    }

    /// The minter for the layout, lead and wait, with no mark yet.
    fn minter(&self, max_lead: Duration) -> Result<Minter, BuildError> {
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
}

impl<C: Clock + Clone + Send + 'static> Builder<C> {
    /// Keep the generator's high-water mark in `store`: a high-water file, a node lease
    /// (the `atomflake-postgres` crate's `Lease`), or a store of your own. Works for every
    /// generator type; replaces a [`high_water_file`](Self::high_water_file) or a store
    /// set before.
    ///
    /// The generator starts past the store's mark, keeps the mark ahead of its IDs from a
    /// thread of its own, stops minting on its own before a leased store's hold can end,
    /// and tells the store what it minted when dropped (a lease then releases its node).
    /// What a store must promise, and what the generator does with it, is in
    /// [`mark`](crate::mark).
    ///
    /// A store that holds nodes ([`MarkStore::nodes`], a lease) builds generators of those
    /// nodes only: for a lease of one node, `build(node)`, `build_local(node)` or
    /// `build_sharded([node])`.
    ///
    /// # Examples
    ///
    /// See [`mark`](crate::mark) for a store; with a lease:
    ///
    /// ```ignore
    /// let lease = Lease::acquire(&config, Layout::TWITTER, LeaseOptions::new("orders"))?;
    /// let node = lease.node();
    /// let generator = Builder::new(Layout::TWITTER).mark_store(lease).build(node)?;
    /// ```
    pub fn mark_store(mut self, store: impl MarkStore) -> Builder<C> {
        let clock = self.clock.clone();
        self.mark = MarkSource::Store {
            store: Box::new(store),
            clock: Box::new(move || clock.precise_unix_ms()),
        };
        self
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
