//! [`IoCause`]: an operating-system error inside an atomflake error.

use core::fmt;
use std::io;
use std::sync::Arc;

/// An operating-system error kept as the [`source`](std::error::Error::source) of an
/// atomflake error. Shared, so that the error stays `Clone`; two compare equal when their
/// [`kind`](Self::kind)s do.
#[derive(Debug, Clone)]
pub struct IoCause(Arc<io::Error>);

impl IoCause {
    /// What kind of failure the operating system reported.
    pub fn kind(&self) -> io::ErrorKind {
        self.0.kind()
    }

    /// The operating system's error.
    pub fn get(&self) -> &io::Error {
        &self.0
    }
}

impl From<io::Error> for IoCause {
    fn from(error: io::Error) -> IoCause {
        IoCause(Arc::new(error))
    }
}

impl PartialEq for IoCause {
    fn eq(&self, other: &IoCause) -> bool {
        self.kind() == other.kind()
    }
}

impl Eq for IoCause {}

impl fmt::Display for IoCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for IoCause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// Whether an operating-system error is one that trying again can get past (an
/// interrupted call, a full disk, a timeout): what a high-water file's or a store's I/O
/// error says about retrying, for the errors that
/// carry one.
pub(crate) fn io_is_transient(cause: &IoCause) -> bool {
    use io::ErrorKind::{Interrupted, OutOfMemory, StorageFull, TimedOut, WouldBlock};
    matches!(
        cause.kind(),
        Interrupted | OutOfMemory | StorageFull | TimedOut | WouldBlock
    )
}
