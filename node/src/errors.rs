//! The errors of the addon. Each is thrown as a plain `Error` whose message carries, ahead
//! of the Rust error's `Display`, what `index.js` needs to throw the package's own class:
//!
//! ```text
//! atomflake␟CLASS␟TRANSIENT␟RETRY_AFTER_MS␟MESSAGE
//! ```
//!
//! (`␟` is U+001F, the unit separator; `RETRY_AFTER_MS` is empty when there is none.) The
//! classes, as `index.js` defines them:
//!
//! ```text
//! TypeError, RangeError       bad input: a node, layout, ID, text, namespace or duration
//! AtomflakeError
//! ├── MintError               no ID now: .transient, .retryAfter (ms, or undefined)
//! │   └── ClosedError         a generator after close() (its lease released)
//! ├── StartError              a generator cannot start: its high-water file or mark store
//! └── LeaseError              no node leased: none free, the engine out of reach or refusing
//! ```

use atomflake::{BuildError, MintError};
use atomflake_lease::AnyLeaseError;
use std::fmt::Display;
use std::time::Duration;

/// The error `index.js` throws as an instance of `class`.
pub(crate) fn thrown(
    class: &str,
    transient: bool,
    retry_after: Option<Duration>,
    message: impl Display,
) -> napi::Error {
    let retry = retry_after.map_or(String::new(), |wait| (wait.as_secs_f64() * 1000.0).to_string());
    napi::Error::from_reason(format!(
        "atomflake\u{1f}{class}\u{1f}{}\u{1f}{retry}\u{1f}{message}",
        u8::from(transient)
    ))
}

/// A `RangeError`: a value out of its range, or text that is no ID.
pub(crate) fn range(message: impl Display) -> napi::Error {
    thrown("RangeError", false, None, message)
}

/// Why a mint gave no ID.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// The generator refused.
    Mint(MintError),
    /// The generator was closed.
    Closed,
}

impl From<Refusal> for napi::Error {
    fn from(refusal: Refusal) -> napi::Error {
        match refusal {
            Refusal::Closed => thrown(
                "ClosedError",
                false,
                None,
                "the generator is closed: its mark is stored and its lease released",
            ),
            Refusal::Mint(error) => thrown("MintError", error.is_transient(), error.retry_after(), &error),
        }
    }
}

/// A build error: bad input is a `RangeError`, the rest a `StartError`.
pub(crate) fn build_error(error: &BuildError) -> napi::Error {
    if error.is_invalid_input() {
        return range(error);
    }
    thrown("StartError", error.is_transient(), error.retry_after(), error)
}

/// A lease error: a bad URL or bad options are a `RangeError`, the rest a `LeaseError`.
pub(crate) fn lease_error(error: &AnyLeaseError) -> napi::Error {
    match error {
        AnyLeaseError::UnknownScheme { .. } | AnyLeaseError::InvalidUrl(_) => {
            range(format!("invalid lease URL: {error}"))
        }
        _ if error.is_invalid_input() => range(error),
        _ => thrown("LeaseError", error.is_transient(), None, error),
    }
}
