//! Pieces the benches, the bins and the examples share.

use std::sync::atomic::{AtomicU64, Ordering};

/// One step of the floor every CAS generator with a precise quanta clock pays: one raw
/// clock read, a load and one `compare_exchange` on `word` (uncontended when the word is
/// this thread's). Returns the CAS result for `black_box`.
///
/// # Errors
///
/// The CAS's own: the value found when another thread changed `word` in between.
#[inline]
pub fn floor_step(clock: &quanta::Clock, word: &AtomicU64) -> Result<u64, u64> {
    let raw = clock.raw();
    let current = word.load(Ordering::Relaxed);
    word.compare_exchange(current, current ^ raw, Ordering::Relaxed, Ordering::Relaxed)
}
