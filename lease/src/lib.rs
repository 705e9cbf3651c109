#![doc = include_str!("../README.md")]

mod engine;
mod error;
mod lease;
mod list;
mod options;
mod registry;

pub use engine::{
    Attempt, Claim, ClaimRequest, Claimed, Engine, PassedOver, Release, Shortfall, Write, WriteError,
    Written, choose,
};
pub use error::{CallFailed, EngineError, LeaseError};
pub use lease::Lease;
pub use list::{LeaseRow, list};
pub use options::{LeaseOptions, NodesError};
pub use registry::{Acquired, AnyLease, AnyLeaseError, Driver, Registry, UrlEngine};

use std::time::Duration;

/// The shortest lease time.
pub const MIN_TTL: Duration = Duration::from_secs(1);

/// The longest lease time.
pub const MAX_TTL: Duration = Duration::from_secs(3600);

/// The longest namespace, in bytes: it names keys, nodes and rows in every engine.
pub const MAX_NAMESPACE_LEN: usize = 63;

/// How long a claim may take, retries over a busy node range included.
pub const CLAIM_TIMEOUT: Duration = Duration::from_secs(10);

/// `namespace`, unless it is empty, longer than [`MAX_NAMESPACE_LEN`] bytes, or has a
/// character other than ASCII letters, digits, `-`, `_` and `.`.
///
/// # Errors
///
/// [`LeaseError::InvalidNamespace`].
///
/// # Examples
///
/// ```
/// use atomflake_lease::{LeaseError, check_namespace};
///
/// assert!(check_namespace::<()>("orders-eu.1").is_ok());
/// assert_eq!(
///     check_namespace::<()>("a/b"),
///     Err(LeaseError::InvalidNamespace { namespace: "a/b".to_owned() })
/// );
/// ```
pub fn check_namespace<E>(namespace: &str) -> Result<(), LeaseError<E>> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if namespace.is_empty() || namespace.len() > MAX_NAMESPACE_LEN || !namespace.chars().all(allowed) {
        return Err(LeaseError::InvalidNamespace {
            namespace: namespace.to_owned(),
        });
    }
    Ok(())
}

/// The name a lease engine records for its holder unless given one, for people reading the
/// leases: `HOST:PID`, the host from `HOSTNAME` or else `/etc/hostname`.
pub fn default_holder() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown-host".to_owned());
    format!("{host}:{}", std::process::id())
}

/// Runs `work` on a thread of its own and waits for it: engines' clients run a Tokio
/// runtime of their own inside their calls, which panics on a thread already running one.
/// It is what lets a lease work from async code ([crate docs](crate#how-a-lease-works)).
pub fn off_runtime<T: Send>(work: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|scope| match scope.spawn(work).join() {
        Ok(value) => value,
        Err(panic) => std::panic::resume_unwind(panic),
    })
}

#[cfg(test)]
mod tests;
