//! Clocks: where a generator gets the time, in Unix milliseconds. The [`Clock`] trait here,
//! each clock in a module of its own:
//!
//! - [`MonotonicClock`] (the default, [`monotonic`]): quanta's TSC clock, disciplined to the
//!   wall clock by a background thread ([`discipline`]). Never moves back, whatever happens
//!   to the wall clock.
//! - [`PreciseClock`] ([`precise`]): the same time, read from the TSC on every call: never
//!   behind.
//! - [`ManualClock`] ([`manual`]): set by hand, for tests.
//!
//! The first two read one process-wide [`anchor`].

mod anchor;
pub(crate) mod discipline;
mod manual;
mod monotonic;
mod precise;

pub(crate) use anchor::{heartbeat, lineage};
// For the child-of-a-fork handler, which exists on Unix and not under loom.
#[cfg_attr(any(loom, not(unix)), allow(unused_imports))]
pub(crate) use anchor::after_fork_in_child;
pub use manual::ManualClock;
pub use monotonic::MonotonicClock;
pub use precise::PreciseClock;

use std::time::Duration;

/// A source of Unix time in milliseconds for a [`Generator`](crate::Generator).
///
/// A clock may move back (a [`ManualClock`] does when told to): the generator then keeps
/// minting in the last tick it used, so IDs still never repeat or decrease.
///
/// # Examples
///
/// ```
/// use atomflake::{Clock, Generator, Layout};
///
/// /// A clock stuck at one instant: fine for a test, the sequence still advances.
/// struct Frozen(u64);
///
/// impl Clock for Frozen {
///     fn unix_ms(&self) -> u64 {
///         self.0
///     }
/// }
///
/// let generator = Generator::with_clock(Layout::TWITTER, 1, Frozen(1_700_000_000_000))?;
/// let (a, b) = (generator.try_next_id()?, generator.try_next_id()?);
/// assert_eq!(Layout::TWITTER.decode(b).sequence, Layout::TWITTER.decode(a).sequence + 1);
/// # Ok::<(), atomflake::Error>(())
/// ```
pub trait Clock {
    /// Milliseconds since 1970-01-01T00:00:00Z. Called once per minted ID: keep it cheap.
    fn unix_ms(&self) -> u64;

    /// An up-to-date read, for the generator's waiting path. A clock whose
    /// [`unix_ms`](Self::unix_ms) may lag (such as [`MonotonicClock`], which reads the time its thread stored) overrides this with a
    /// precise read, so that a generator waiting for the next tick never depends on a
    /// background thread being scheduled.
    fn precise_unix_ms(&self) -> u64 {
        self.unix_ms()
    }

    /// How long until this clock reads `unix_ms` (zero when it already does), to finer than
    /// a millisecond; `None` (the default) when the clock cannot tell.
    ///
    /// A generator whose tick is spent sleeps for most of this time and spins the rest
    /// ([`Wait::Sleep`](crate::Wait::Sleep)); with `None` it spins and yields instead. A
    /// clock that does not advance with real time (a [`ManualClock`]) must return `None`.
    fn time_until(&self, unix_ms: u64) -> Option<Duration> {
        let _ = unix_ms;
        None
    }
}

/// `Clock` for pointers to a clock: each method reads the clock pointed to.
macro_rules! clock_through {
    ($($pointer:ty),*) => {
        $(
            impl<C: Clock + ?Sized> Clock for $pointer {
                #[inline]
                fn unix_ms(&self) -> u64 {
                    (**self).unix_ms()
                }

                #[inline]
                fn precise_unix_ms(&self) -> u64 {
                    (**self).precise_unix_ms()
                }

                fn time_until(&self, unix_ms: u64) -> Option<Duration> {
                    (**self).time_until(unix_ms)
                }
            }
        )*
    };
}

clock_through!(&C, std::sync::Arc<C>, Box<C>);

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn time_until_counts_down_to_the_millisecond() {
        for clock in [&MonotonicClock::new() as &dyn Clock, &PreciseClock::new()] {
            let start = std::time::Instant::now();
            let target = clock.precise_unix_ms() + 5;
            let left = clock.time_until(target).unwrap();
            // 4 to 5 ms before `target` when it was read, less what passed since (which a
            // loaded machine can stretch), and a millisecond for rounding.
            let spent = start.elapsed();
            assert!(
                left + spent > Duration::from_millis(3) && left <= Duration::from_millis(5),
                "{left:?} left, {spent:?} spent"
            );
            std::thread::sleep(left);
            assert!(clock.precise_unix_ms() >= target, "woke before {target}");
            assert_eq!(clock.time_until(target), Some(Duration::ZERO));
            assert_eq!(clock.time_until(0), Some(Duration::ZERO));
        }
        assert_eq!(
            ManualClock::new(5).time_until(10),
            None,
            "a manual clock cannot tell"
        );
    }
}
