//! The exceptions, and the Rust errors each becomes. Every message is the Rust error's
//! `Display`.
//!
//! ```text
//! ValueError                  bad input: a node, layout, ID, text, namespace or lease time
//! AtomflakeError
//! ├── MintError               no ID now: .transient, .retry_after (seconds, or None)
//! │   ├── ForkedError         a generator built in a parent of this process
//! │   └── ClosedError         a generator after close() (its lease released)
//! ├── StartError              a generator cannot start: its high-water file or mark store
//! └── LeaseError              no node leased: none free, the engine out of reach or refusing
//! ```

use atomflake::{BuildError, MintError as RustMintError};
use atomflake_lease::AnyLeaseError;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use std::time::Duration;

pyo3::create_exception!(
    atomflake,
    AtomflakeError,
    PyException,
    "The base of every atomflake error but bad input (ValueError)."
);
pyo3::create_exception!(
    atomflake,
    MintError,
    AtomflakeError,
    "No ID can be minted now. `transient` says whether the same generator can mint again, \
     `retry_after` how many seconds until it may (None when it cannot)."
);
pyo3::create_exception!(
    atomflake,
    ForkedError,
    MintError,
    "The generator was built in another process and copied into this one by fork(): parent \
     and child would mint the same IDs. Build a new generator in the child, on a node of its own."
);
pyo3::create_exception!(
    atomflake,
    ClosedError,
    MintError,
    "The generator was closed: its mark is stored and its lease, if any, released."
);
pyo3::create_exception!(
    atomflake,
    StartError,
    AtomflakeError,
    "A generator cannot start: its high-water file is locked or damaged, its clock is too far \
     behind the stored mark, or its mark store failed. `transient` and `retry_after` as for \
     MintError."
);
pyo3::create_exception!(
    atomflake,
    LeaseError,
    AtomflakeError,
    "No node could be leased: none is free, or the engine is out of reach or refuses. \
     `transient` says whether trying again may succeed."
);

/// Adds the exception types to the module.
pub(crate) fn register(py: Python<'_>, module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add("AtomflakeError", py.get_type::<AtomflakeError>())?;
    module.add("MintError", py.get_type::<MintError>())?;
    module.add("ForkedError", py.get_type::<ForkedError>())?;
    module.add("ClosedError", py.get_type::<ClosedError>())?;
    module.add("StartError", py.get_type::<StartError>())?;
    module.add("LeaseError", py.get_type::<LeaseError>())?;
    Ok(())
}

/// `error` with the attributes `transient` and `retry_after` set.
fn with_retry(error: PyErr, transient: bool, retry_after: Option<Duration>) -> PyErr {
    Python::attach(|py| {
        let value = error.value(py);
        // Setting an attribute on a fresh exception instance cannot fail.
        let _ = value.setattr("transient", transient);
        let _ = value.setattr("retry_after", retry_after.map(|wait| wait.as_secs_f64()));
    });
    error
}

/// Why a mint gave no ID.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// The generator refused.
    Mint(RustMintError),
    /// The generator was closed.
    Closed,
}

impl From<Refusal> for PyErr {
    fn from(refusal: Refusal) -> PyErr {
        match refusal {
            Refusal::Closed => with_retry(
                ClosedError::new_err("the generator is closed: its mark is stored and its lease released"),
                false,
                None,
            ),
            Refusal::Mint(error) => {
                let message = error.to_string();
                let raised = match error {
                    RustMintError::Forked { .. } => ForkedError::new_err(message),
                    _ => MintError::new_err(message),
                };
                with_retry(raised, error.is_transient(), error.retry_after())
            }
        }
    }
}

/// A build error: bad input is a `ValueError`, the rest a `StartError`.
pub(crate) fn build_error(error: &BuildError) -> PyErr {
    let message = error.to_string();
    if error.is_invalid_input() {
        return PyValueError::new_err(message);
    }
    with_retry(
        StartError::new_err(message),
        error.is_transient(),
        error.retry_after(),
    )
}

/// A lease error: a bad URL or bad options are a `ValueError`, the rest a `LeaseError`.
pub(crate) fn lease_error(error: &AnyLeaseError) -> PyErr {
    match error {
        AnyLeaseError::UnknownScheme { .. } | AnyLeaseError::InvalidUrl(_) => {
            PyValueError::new_err(format!("invalid lease URL: {error}"))
        }
        _ if error.is_invalid_input() => PyValueError::new_err(error.to_string()),
        _ => with_retry(LeaseError::new_err(error.to_string()), error.is_transient(), None),
    }
}
