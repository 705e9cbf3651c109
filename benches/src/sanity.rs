//! The check every generator passes before it is timed: a generator that fails is reported
//! as broken, with the reason, and never timed.
//!
//! A sample of [`SAMPLE`] IDs, minted back to back, must be strictly increasing (so
//! distinct) and each must decode, with the generator's own layout and epoch, to a Unix
//! time within [`TOLERANCE_MS`] of the wall clock while the sample was minted. This catches
//! what a figure must never come from: a generator returning a constant (a 0-bit
//! timestamp layout, for instance), repeating or reordering IDs, or a layout and epoch that
//! do not give the time.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

/// IDs checked per generator.
pub const SAMPLE: usize = 10_000;

/// How far (ms) a decoded time may lie outside the wall-clock interval of the sample. A
/// clock that a thread keeps (atomflake's discipline thread, ferroid's ticker) lags the
/// wall clock for as long as that thread waits for a core: a few ms, and tens of ms on a
/// busy two-core machine (a `cargo test` there saw 67 ms). What the check is for is off by
/// far more: a wrong epoch or tick by years, a constant by ever more.
pub const TOLERANCE_MS: u64 = 1_000;

/// Why a generator failed the check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Broken {
    /// ID `index` of the sample equals the one before it.
    Repeats {
        /// Position in the sample.
        index: usize,
    },
    /// ID `index` of the sample is smaller than the one before it.
    Decreases {
        /// Position in the sample.
        index: usize,
    },
    /// ID `index` decodes to `unix_ms`, outside `from..=to`.
    OutOfTime {
        /// Position in the sample.
        index: usize,
        /// The decoded time, Unix ms.
        unix_ms: u64,
        /// The earliest accepted time, Unix ms.
        from: u64,
        /// The latest accepted time, Unix ms.
        to: u64,
    },
}

impl fmt::Display for Broken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Broken::Repeats { index } => write!(f, "ID {index} of the sample repeats the one before"),
            Broken::Decreases { index } => {
                write!(f, "ID {index} of the sample is smaller than the one before")
            }
            Broken::OutOfTime {
                index,
                unix_ms,
                from,
                to,
            } => write!(
                f,
                "ID {index} decodes to Unix ms {unix_ms}, outside the wall clock's {from}..={to}"
            ),
        }
    }
}

impl std::error::Error for Broken {}

/// The wall clock, Unix ms.
///
/// # Panics
///
/// If the system clock is before 1970.
pub fn wall_ms() -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970");
    u64::try_from(now.as_millis()).expect("ms fit u64")
}

/// Mints [`SAMPLE`] IDs with `mint` and checks them, decoding each with `unix_ms`.
///
/// # Errors
///
/// The first problem found: [`Broken`].
pub fn check(mint: impl FnMut() -> u128, unix_ms: impl Fn(u128) -> u64) -> Result<(), Broken> {
    check_against(SAMPLE, mint, unix_ms, wall_ms)
}

/// [`check`] with `n` IDs and the wall clock `now` (Unix ms), for tests.
///
/// # Errors
///
/// As [`check`].
pub fn check_against(
    n: usize,
    mut mint: impl FnMut() -> u128,
    unix_ms: impl Fn(u128) -> u64,
    now: impl Fn() -> u64,
) -> Result<(), Broken> {
    let before = now();
    let ids: Vec<u128> = (0..n).map(|_| mint()).collect();
    let after = now();
    for (index, pair) in ids.windows(2).enumerate() {
        if pair[1] == pair[0] {
            return Err(Broken::Repeats { index: index + 1 });
        }
        if pair[1] < pair[0] {
            return Err(Broken::Decreases { index: index + 1 });
        }
    }
    let (from, to) = (before.saturating_sub(TOLERANCE_MS), after + TOLERANCE_MS);
    for (index, &id) in ids.iter().enumerate() {
        let unix_ms = unix_ms(id);
        if !(from..=to).contains(&unix_ms) {
            return Err(Broken::OutOfTime {
                index,
                unix_ms,
                from,
                to,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use atomflake::{Generator, Layout};

    const NOW: u64 = 1_700_000_000_000;

    /// A degenerate generator: a 0-bit timestamp, ID 0 every call.
    #[test]
    fn a_constant_generator_is_broken() {
        assert_eq!(
            check_against(100, || 0, |_| NOW, || NOW),
            Err(Broken::Repeats { index: 1 })
        );
    }

    #[test]
    fn a_generator_going_back_is_broken() {
        let mut next = 10u128;
        let mint = move || {
            next = if next == 12 { 3 } else { next + 1 };
            next
        };
        assert_eq!(
            check_against(100, mint, |_| NOW, || NOW),
            Err(Broken::Decreases { index: 2 })
        );
    }

    /// Distinct and increasing, but with an epoch 1970 instead of 2010: the time is wrong.
    #[test]
    fn a_generator_with_the_wrong_epoch_is_broken() {
        let mut next = 0u128;
        let mint = move || {
            next += 1;
            next
        };
        let decode_as_if_unix = |id: u128| u64::try_from(id).expect("small");
        assert!(matches!(
            check_against(100, mint, decode_as_if_unix, || NOW),
            Err(Broken::OutOfTime {
                index: 0,
                unix_ms: 1,
                ..
            })
        ));
    }

    #[test]
    fn a_time_just_inside_the_tolerance_passes_and_just_outside_fails() {
        let mut next = 0u128;
        let mut mint = move || {
            next += 1;
            next
        };
        assert_eq!(
            check_against(10, &mut mint, |_| NOW - TOLERANCE_MS, || NOW),
            Ok(())
        );
        assert_eq!(
            check_against(10, &mut mint, |_| NOW + TOLERANCE_MS, || NOW),
            Ok(())
        );
        assert!(check_against(10, &mut mint, |_| NOW + TOLERANCE_MS + 1, || NOW).is_err());
    }

    #[test]
    fn atomflake_passes() {
        let generator = Generator::new(Layout::TWITTER, 3).expect("node 3");
        let decode = |id: u128| {
            Layout::TWITTER
                .decode(u64::try_from(id).expect("64-bit").into())
                .unix_ms
        };
        assert_eq!(check(|| u128::from(generator.next_id().get()), decode), Ok(()));
    }

    #[test]
    fn the_reason_names_the_index() {
        let reason = Broken::Repeats { index: 7 }.to_string();
        assert_eq!(reason, "ID 7 of the sample repeats the one before");
    }
}
