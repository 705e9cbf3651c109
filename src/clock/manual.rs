//! A clock set by hand.

use super::Clock;
use crate::sync::{Arc, AtomicU64, Ordering};

/// A clock set by hand, for tests and simulations. Clones share one time.
///
/// Under `--cfg loom` its time is a loom atomic, so loom models can advance and rewind it
/// from a model thread.
///
/// # Examples
///
/// ```
/// use atomflake::{Clock, ManualClock};
///
/// let clock = ManualClock::new(1_700_000_000_000);
/// clock.advance(5);
/// clock.rewind(2);
/// assert_eq!(clock.unix_ms(), 1_700_000_000_003);
/// clock.set(7);
/// assert_eq!(clock.unix_ms(), 7);
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock {
    unix_ms: Arc<AtomicU64>,
}

// The clock's value orders nothing else: a generator's uniqueness never depends on which
// time it reads, only on its own state word. So every access is `Relaxed`.
impl ManualClock {
    /// A clock at `unix_ms`.
    pub fn new(unix_ms: u64) -> ManualClock {
        ManualClock {
            unix_ms: Arc::new(AtomicU64::new(unix_ms)),
        }
    }

    /// Sets the time (it may move back).
    pub fn set(&self, unix_ms: u64) {
        self.unix_ms.store(unix_ms, Ordering::Relaxed);
    }

    /// Moves the time forward by `ms`, saturating at `u64::MAX`.
    pub fn advance(&self, ms: u64) {
        // Relaxed RMW: the new value is all that matters.
        let _ = self
            .unix_ms
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                Some(t.saturating_add(ms))
            });
    }

    /// Moves the time back by `ms`, saturating at 0.
    pub fn rewind(&self, ms: u64) {
        // Relaxed RMW: the new value is all that matters.
        let _ = self
            .unix_ms
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                Some(t.saturating_sub(ms))
            });
    }
}

impl Clock for ManualClock {
    #[inline]
    fn unix_ms(&self) -> u64 {
        self.unix_ms.load(Ordering::Relaxed)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_both_ways_and_saturates() {
        let clock = ManualClock::new(10);
        let shared = clock.clone();
        shared.advance(5);
        assert_eq!(clock.unix_ms(), 15);
        clock.rewind(20);
        assert_eq!(shared.unix_ms(), 0);
        clock.set(u64::MAX - 1);
        clock.advance(5);
        assert_eq!(clock.unix_ms(), u64::MAX);
        assert_eq!(clock.precise_unix_ms(), u64::MAX);
    }
}
