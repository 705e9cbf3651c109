//! The default clock, read precisely on every call.

use super::Clock;
#[cfg(doc)]
use super::MonotonicClock;
use super::anchor::Anchor;
use std::time::Duration;

/// [`MonotonicClock`] read precisely on every call: one TSC read and a multiply-add per
/// ID, for timestamps that are never late (the default clock's can lag by the discipline
/// thread's wake-up latency). In a child of a fork, a `PreciseClock` made before the fork
/// adopts the clock at its first reading, as a `MonotonicClock` does.
///
/// # Examples
///
/// ```
/// use atomflake::{Clock, Generator, Layout, PreciseClock};
///
/// let generator = Generator::with_clock(Layout::TWITTER, 7, PreciseClock::new())?;
/// let before = generator.clock().unix_ms();
/// assert!(Layout::TWITTER.decode(generator.next_id()).unix_ms >= before);
/// # Ok::<(), atomflake::Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct PreciseClock {
    anchor: &'static Anchor,
}

impl PreciseClock {
    /// The process's monotonic clock, read precisely (anchored on first use, as
    /// [`MonotonicClock::new`]).
    pub fn new() -> PreciseClock {
        PreciseClock {
            anchor: Anchor::get(),
        }
    }
}

impl Default for PreciseClock {
    fn default() -> PreciseClock {
        PreciseClock::new()
    }
}

impl Clock for PreciseClock {
    #[inline]
    fn unix_ms(&self) -> u64 {
        self.anchor.adopt();
        self.anchor.precise_unix_ms()
    }

    fn time_until(&self, unix_ms: u64) -> Option<Duration> {
        self.anchor.adopt();
        Some(self.anchor.time_until(unix_ms))
    }
}
