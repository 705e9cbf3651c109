//! JavaScript numbers checked the way Rust checks its own: a bad value is a `RangeError`
//! that names it and the allowed range, never a mask, a wrap or a rounding. (`index.js`
//! checks the types: a value of the wrong type is its `TypeError`.)

use crate::errors::range;
use std::time::Duration;

/// The largest integer a JavaScript number holds exactly: 2^53 - 1.
const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

/// An integer in `0..=max`, else "WHAT VALUE is out of range: ALLOWED".
pub(crate) fn unsigned(value: f64, what: &str, max: u64, allowed: &str) -> napi::Result<u64> {
    if value.fract() == 0.0 && (0.0..=MAX_SAFE_INTEGER).contains(&value) {
        // An integer at most 2^53 - 1: exact as a u64.
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "checked above"
        )]
        let number = value as u64;
        if number <= max {
            return Ok(number);
        }
    }
    Err(range(format!("{what} {value} is out of range: {allowed}")))
}

/// A duration given in ms (a number, not necessarily whole) in `0..=max`.
pub(crate) fn millis(value: f64, what: &str, max: Duration) -> napi::Result<Duration> {
    match Duration::try_from_secs_f64(value / 1000.0) {
        Ok(duration) if duration <= max => Ok(duration),
        _ => Err(range(format!(
            "{what} {value} ms is out of range: 0..={} ms",
            max.as_millis()
        ))),
    }
}
