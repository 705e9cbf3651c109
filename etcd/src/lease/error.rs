//! What etcd itself reports to a lease.

use atomflake::mark::lease::EngineError;
use core::fmt;

/// A lease that cannot be taken or kept on etcd ([`atomflake::mark::lease::LeaseError`]
/// with etcd's own errors).
pub type LeaseError = atomflake::mark::lease::LeaseError<EtcdError>;

/// What etcd reported to a lease: [`LeaseError::Engine`](atomflake::mark::lease::LeaseError::Engine).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EtcdError {
    /// A call to etcd failed: no member answered in time, or one refused the call.
    /// Transient.
    Call {
        /// What the lease was doing.
        action: &'static str,
        /// The member tried last and what it said.
        cause: String,
    },
    /// An answer that a lease's own keys cannot give: a key of the namespace was written by
    /// something else. Permanent.
    Corrupt {
        /// The key.
        key: String,
        /// What is wrong with it.
        problem: String,
    },
}

impl EtcdError {
    pub(crate) fn call(action: &'static str) -> impl FnOnce(crate::client::CallError) -> EtcdError {
        move |error| EtcdError::Call {
            action,
            cause: error.to_string(),
        }
    }
}

impl EngineError for EtcdError {
    const ENGINE: &'static str = "etcd";

    fn is_transient(&self) -> bool {
        matches!(self, EtcdError::Call { .. })
    }
}

impl fmt::Display for EtcdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EtcdError::Call { action, cause } => {
                write!(f, "etcd lease operation {action:?} failed: {cause}")
            }
            EtcdError::Corrupt { key, problem } => {
                write!(f, "etcd key {key:?} is not a lease's: {problem}")
            }
        }
    }
}

impl std::error::Error for EtcdError {}
