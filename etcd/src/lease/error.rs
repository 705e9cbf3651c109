//! What etcd itself reports to a lease.

use atomflake_lease::{CallFailed, EngineError};

/// A lease that cannot be taken or kept on etcd ([`atomflake_lease::LeaseError`]
/// with etcd's own errors).
pub type LeaseError = atomflake_lease::LeaseError<EtcdError>;

/// What etcd reported to a lease: [`LeaseError::Engine`](atomflake_lease::LeaseError::Engine).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EtcdError {
    /// A call to etcd failed: no member answered in time, or one refused the call; the
    /// cause names the member tried last and what it said. Transient.
    #[error("etcd {0}")]
    Call(CallFailed),
    /// etcd or this client refused a call for good: a wrong password, a user whose roles
    /// lack the namespace's prefix, a certificate not trusted, TLS files that cannot be
    /// used; the cause says what to fix. Permanent.
    #[error("etcd {0}")]
    Refused(CallFailed),
    /// An answer that a lease's own keys cannot give: a key of the namespace was written by
    /// something else. Permanent.
    #[error("etcd key {key:?} is not a lease's: {problem}")]
    Corrupt {
        /// The key.
        key: String,
        /// What is wrong with it.
        problem: String,
    },
}

impl EtcdError {
    pub(crate) fn call(action: &'static str) -> impl FnOnce(crate::client::CallError) -> EtcdError {
        move |error| {
            let refused = error.refused;
            let call = CallFailed::new(action, error);
            if refused {
                EtcdError::Refused(call)
            } else {
                EtcdError::Call(call)
            }
        }
    }
}

impl EngineError for EtcdError {
    const ENGINE: &'static str = "etcd";

    fn is_transient(&self) -> bool {
        matches!(self, EtcdError::Call { .. })
    }
}
