//! [`Builder`]: the options every generator type shares (clock, borrow-ahead, waiting).

use crate::clock::{Clock, MonotonicClock};
use crate::error::Error;
use crate::generator::Generator;
use crate::layout::Layout;
use crate::local::LocalGenerator;
use crate::mint::{Minter, Wait};
use crate::sharded::ShardedGenerator;
use std::time::Duration;

/// Builds any of the generator types with options beyond a layout and a node.
///
/// Start from [`Builder::new`] (or `Generator::builder`), set what differs from the
/// defaults, then finish with [`build`](Self::build) (a [`Generator`]),
/// [`build_local`](Self::build_local) (a [`LocalGenerator`]) or
/// [`build_sharded`](Self::build_sharded) (a [`ShardedGenerator`]).
///
/// | option | default |
/// |---|---|
/// | [`clock`](Self::clock) | [`MonotonicClock`] |
/// | [`borrow_ahead`](Self::borrow_ahead) | off: a spent tick waits for the clock |
/// | [`wait`](Self::wait) | [`Wait::Sleep`] |
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
}

impl Builder<MonotonicClock> {
    /// A builder for generators of `layout` with the default options.
    pub fn new(layout: Layout) -> Builder<MonotonicClock> {
        Builder {
            layout,
            clock: MonotonicClock::new(),
            lead: Duration::ZERO,
            wait: Wait::default(),
        }
    }
}

impl<C: Clock> Builder<C> {
    /// The longest borrow-ahead lead: one minute of IDs stamped in the future.
    pub const MAX_LEAD: Duration = Duration::from_secs(60);

    /// Reads `clock` instead of the [`MonotonicClock`].
    pub fn clock<D: Clock>(self, clock: D) -> Builder<D> {
        Builder {
            layout: self.layout,
            clock,
            lead: self.lead,
            wait: self.wait,
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
    /// [`Error::LeadOutOfRange`].
    pub fn borrow_ahead(mut self, lead: Duration) -> Builder<C> {
        self.lead = lead;
        self
    }

    /// How to wait when the current tick's sequence is spent (default [`Wait::Sleep`]).
    pub fn wait(mut self, wait: Wait) -> Builder<C> {
        self.wait = wait;
        self
    }

    /// A [`Generator`] for `node`.
    ///
    /// # Errors
    ///
    /// [`Error::FieldOutOfRange`] when `node` does not fit the layout's node field;
    /// [`Error::LeadOutOfRange`] for a bad [`borrow_ahead`](Self::borrow_ahead) lead.
    pub fn build(self, node: u64) -> Result<Generator<C>, Error> {
        Generator::from_parts(self.minter()?, node, self.clock)
    }

    /// A [`LocalGenerator`] for `node`.
    ///
    /// # Errors
    ///
    /// As [`build`](Self::build).
    pub fn build_local(self, node: u64) -> Result<LocalGenerator<C>, Error> {
        LocalGenerator::from_parts(self.minter()?, node, self.clock)
    }

    /// A [`ShardedGenerator`] over `nodes`.
    ///
    /// # Errors
    ///
    /// As [`ShardedGenerator::with_clock`]; [`Error::LeadOutOfRange`] for a bad
    /// [`borrow_ahead`](Self::borrow_ahead) lead.
    pub fn build_sharded(self, nodes: impl IntoIterator<Item = u64>) -> Result<ShardedGenerator<C>, Error> {
        ShardedGenerator::from_parts(self.minter()?, nodes, self.clock)
    }

    /// The minting arithmetic for these options, with the lead checked.
    fn minter(&self) -> Result<Minter, Error> {
        let tick_ms = self.layout.tick_ms();
        let out_of_range = Error::LeadOutOfRange {
            lead: self.lead,
            tick_ms,
            max: Self::MAX_LEAD,
        };
        let lead_ms = u64::try_from(self.lead.as_millis()).map_err(|_| out_of_range.clone())?;
        let whole_ticks =
            self.lead.subsec_nanos().is_multiple_of(1_000_000) && lead_ms.is_multiple_of(tick_ms);
        if self.lead > Self::MAX_LEAD || !whole_ticks {
            return Err(out_of_range);
        }
        Ok(Minter::new(self.layout, lead_ms / tick_ms, self.wait))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn leads_that_are_not_whole_ticks_or_too_long_are_refused() {
        let refused = |layout: Layout, lead: Duration| Error::LeadOutOfRange {
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
