//! Files read again when they change: the TLS certificate, its key and client CA, and the
//! bearer tokens.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// How often [`watch_files`] looks at its files.
const WATCH_EVERY: Duration = Duration::from_secs(1);

/// Calls `on_change` whenever one of `files` changes (its modification time, looked at
/// every second; a file that appears or goes counts), on a task of the current runtime.
pub(crate) fn watch_files(
    files: Vec<PathBuf>,
    on_change: impl Fn() + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let stamps = || files.iter().map(|file| modified(file)).collect::<Vec<_>>();
        let mut seen = stamps();
        let mut every = tokio::time::interval(WATCH_EVERY);
        loop {
            every.tick().await;
            let now = stamps();
            if now != seen {
                seen = now;
                on_change();
            }
        }
    })
}

/// When `path` was last changed; `None` when it cannot be read.
fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|meta| meta.modified()).ok()
}
