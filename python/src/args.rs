//! Python arguments checked the way Rust checks its own: a bad value is a `ValueError` that
//! names it and the allowed range, never a mask, a wrap or an `OverflowError`.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyInt;
use std::time::Duration;

/// An `int` in `0..=max`, else "WHAT VALUE is out of range: ALLOWED".
pub(crate) fn unsigned(value: &Bound<'_, PyAny>, what: &str, max: u64, allowed: &str) -> PyResult<u64> {
    if let Ok(number) = value.extract::<u64>()
        && number <= max
    {
        return Ok(number);
    }
    if !value.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be an int, not {}",
            value.get_type().name()?
        )));
    }
    Err(PyValueError::new_err(format!(
        "{what} {value} is out of range: {allowed}"
    )))
}

/// An ID: an `int` in `0..=2**64-1`.
pub(crate) fn id(value: &Bound<'_, PyAny>) -> PyResult<u64> {
    unsigned(value, "id", u64::MAX, "an id is 0..=18446744073709551615")
}

/// A duration given in seconds (an `int` or a `float`) in `0..=max`.
pub(crate) fn seconds(value: f64, what: &str, max: Duration) -> PyResult<Duration> {
    match Duration::try_from_secs_f64(value) {
        Ok(duration) if duration <= max => Ok(duration),
        _ => Err(PyValueError::new_err(format!(
            "{what} {value} s is out of range: 0..={} s",
            max.as_secs_f64()
        ))),
    }
}
