//! [`Watched`]: a mark store whose stores the service counts and whose loss it sees.

use atomflake::mark::{MarkStore, StoreError, StoreErrorKind, Tenure};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// What a [`Watched`] store has seen: stores made and failed, and a loss.
#[derive(Debug, Default)]
pub struct StoreWatch {
    stored: AtomicU64,
    failed: AtomicU64,
    lost: OnceLock<String>,
    /// The tracers of the OTLP exporter, which make each store a `lease.renew` span.
    traces: OnceLock<Arc<crate::otlp::Traces>>,
}

impl StoreWatch {
    /// Stores that succeeded (each renews a lease).
    pub fn stored(&self) -> u64 {
        self.stored.load(Ordering::Relaxed)
    }

    /// Stores that failed, lost ones included.
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }

    /// Why the store was lost (another holder has its node), once it was.
    pub fn lost(&self) -> Option<&str> {
        self.lost.get().map(String::as_str)
    }

    /// Makes each store from now on a `lease.renew` span of `traces`.
    pub(crate) fn trace_with(&self, traces: Arc<crate::otlp::Traces>) {
        let _ = self.traces.set(traces);
    }

    /// Adds the counts of the watch on the store before (a lease lost, claimed afresh):
    /// the counts go on from there.
    pub(crate) fn count_on_from(&self, before: &StoreWatch) {
        self.stored.fetch_add(before.stored(), Ordering::Relaxed);
        self.failed.fetch_add(before.failed(), Ordering::Relaxed);
    }
}

/// A mark store that reports its stores to a [`StoreWatch`], and is otherwise `S`.
#[derive(Debug)]
pub struct Watched<S> {
    inner: S,
    watch: Arc<StoreWatch>,
}

impl<S: MarkStore> Watched<S> {
    /// `inner`, watched: build the generator on the first, give the second to
    /// [`Service::new`](crate::Service::new).
    pub fn new(inner: S) -> (Watched<S>, Arc<StoreWatch>) {
        let watch = Arc::new(StoreWatch::default());
        (
            Watched {
                inner,
                watch: Arc::clone(&watch),
            },
            watch,
        )
    }
}

impl<S: MarkStore> MarkStore for Watched<S> {
    fn mark(&self) -> u64 {
        self.inner.mark()
    }

    fn store(&mut self, unix_ms: u64) -> Result<(), StoreError> {
        let result = match self.watch.traces.get() {
            Some(traces) => {
                let nodes = self
                    .inner
                    .nodes()
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(",");
                traces.lease("lease.renew", &nodes, || self.inner.store(unix_ms))
            }
            None => self.inner.store(unix_ms),
        };
        match &result {
            Ok(()) => self.watch.stored.fetch_add(1, Ordering::Relaxed),
            Err(error) => {
                if error.kind() == StoreErrorKind::Lost {
                    let _ = self.watch.lost.set(error.to_string());
                }
                self.watch.failed.fetch_add(1, Ordering::Relaxed)
            }
        };
        result
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn nodes(&self) -> &[u64] {
        self.inner.nodes()
    }

    fn tenure(&self) -> Tenure {
        self.inner.tenure()
    }

    fn lapsed(&self) -> StoreError {
        self.inner.lapsed()
    }

    fn finish(&mut self, unix_ms: u64) {
        self.inner.finish(unix_ms);
    }
}
