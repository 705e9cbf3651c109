//! What Redis itself reports to a lease.

use atomflake_lease::{CallFailed, EngineError};
use std::time::Duration;

/// A lease that cannot be taken or kept on Redis ([`atomflake_lease::LeaseError`] with
/// Redis's own errors).
pub type LeaseError = atomflake_lease::LeaseError<RedisError>;

/// What Redis reported to a lease: [`LeaseError::Engine`](atomflake_lease::LeaseError::Engine).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RedisError {
    /// A call to Redis failed: it did not answer in time, the connection was lost, or it
    /// cannot take writes now (loading its data, a replica, busy). Transient.
    #[error("Redis {0}")]
    Call(CallFailed),
    /// Redis or this client refused a call for good: a wrong password, a user whose ACL
    /// lacks the lease's keys or commands, TLS files that cannot be used, a server without
    /// what the scripts need (Redis 7). Permanent.
    #[error("Redis {0}")]
    Refused(CallFailed),
    /// The server started (or restarted, or a replica took over) so recently that a
    /// holder from before may still mint on a node whose claim the server does not have:
    /// claims wait until every such holder has stopped, the namespace's longest lease time
    /// and 11 s after the start. A claim sits out a wait of up to a minute; this is a
    /// longer one (a namespace whose lease time is over a minute). Transient.
    #[error(
        "the Redis server started, restarted or failed over less than a lease time ago: claims wait {wait:?} more, until every holder from before it has stopped"
    )]
    Restarted {
        /// How much longer claims wait.
        wait: Duration,
    },
    /// A write was made but fewer replicas than the URL's `replicas=N` acknowledged it in
    /// time: a failover could lose it. Transient.
    #[error("Redis: {acknowledged} of the {asked} replicas asked for acknowledged the write in time")]
    Unreplicated {
        /// The replicas that acknowledged it.
        acknowledged: u32,
        /// The replicas the URL asks for.
        asked: u32,
    },
    /// An answer that a lease's own keys cannot give: a key of the namespace was written
    /// by something else. Permanent.
    #[error("Redis key {key:?} is not a lease's: {problem}")]
    Corrupt {
        /// The key.
        key: String,
        /// What is wrong with it.
        problem: String,
    },
}

impl RedisError {
    /// `error` of the call `action`, transient or permanent as what Redis said.
    pub(crate) fn call(action: &'static str) -> impl FnOnce(redis::RedisError) -> RedisError {
        move |error| {
            let transient = error.is_io_error()
                || error.is_timeout()
                || error.is_connection_dropped()
                || error.is_connection_refusal()
                || matches!(
                    error.code(),
                    Some("BUSY" | "LOADING" | "READONLY" | "MASTERDOWN" | "TRYAGAIN" | "NOREPLICAS")
                );
            let call = CallFailed::new(action, &error);
            if transient {
                RedisError::Call(call)
            } else {
                RedisError::Refused(call)
            }
        }
    }
}

impl EngineError for RedisError {
    const ENGINE: &'static str = "Redis";

    fn is_transient(&self) -> bool {
        matches!(
            self,
            RedisError::Call(_) | RedisError::Restarted { .. } | RedisError::Unreplicated { .. }
        )
    }
}
