//! [`Streams`]: hyper's executor for one connection's HTTP/2 streams, which runs each
//! stream on the connection's own task rather than as a task of its own.
//!
//! hyper hands every HTTP/2 stream (a gRPC call) to its executor. With tokio's, each call
//! is a task spawned on the runtime: its answer wakes the connection's task, often on the
//! other worker thread, and both contend for the lock on h2's stream store. Run on the
//! connection's task, a batch of calls that came in one read is answered in one pass and
//! written out together: one gRPC call for one ID costs less CPU, and its latency varies
//! less.
//!
//! The work a call starts that may take long (a `StreamIds`' minting) is a task of its
//! own still, so one connection's calls never wait on each other's minting.

use futures_util::stream::{FuturesUnordered, StreamExt as _};
use futures_util::task::AtomicWaker;
use std::convert::Infallible;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

type Task = Pin<Box<dyn Future<Output = ()> + Send>>;

/// One connection's streams: handed to hyper as its executor (a clone), and run by
/// [`Streams::run`] beside the connection.
#[derive(Clone, Default)]
pub struct Streams {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    /// Streams handed over and not yet taken by [`Streams::run`].
    new: Mutex<Vec<Task>>,
    /// The task of [`Streams::run`], woken when a stream is handed over.
    runner: AtomicWaker,
}

impl Streams {
    /// A connection's executor, with no streams yet.
    #[must_use]
    pub fn new() -> Streams {
        Streams::default()
    }

    /// Runs the streams handed over, as they are and as they come. Never completes: poll
    /// it beside the connection (with `select!`) and drop it once the connection ends,
    /// which drops the streams left.
    ///
    /// A stream that panics ends alone, as a spawned task would.
    pub async fn run(&self) -> Infallible {
        let mut running = FuturesUnordered::<Task>::new();
        std::future::poll_fn(|cx| {
            self.shared.runner.register(cx.waker());
            loop {
                let new =
                    std::mem::take(&mut *self.shared.new.lock().unwrap_or_else(PoisonError::into_inner));
                if new.is_empty() && running.is_empty() {
                    return Poll::Pending;
                }
                let had_new = !new.is_empty();
                running.extend(new);
                // Ready(None) once every stream is done; Pending while any waits.
                while let Poll::Ready(Some(())) = running.poll_next_unpin(cx) {}
                if !had_new {
                    return Poll::Pending;
                }
            }
        })
        .await
    }
}

impl<F: Future<Output = ()> + Send + 'static> hyper::rt::Executor<F> for Streams {
    fn execute(&self, stream: F) {
        // Moved once, into its box: a stream's future holds its call's, which is large.
        let stream: Task = Box::pin(Guarded { stream });
        self.shared
            .new
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(stream);
        self.shared.runner.wake();
    }
}

pin_project_lite::pin_project! {
    /// A stream's future, whose panic ends that stream alone (hyper then resets it).
    struct Guarded<F> {
        #[pin]
        stream: F,
    }
}

impl<F: Future<Output = ()>> Future for Guarded<F> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let stream = self.project().stream;
        std::panic::catch_unwind(AssertUnwindSafe(|| stream.poll(cx))).unwrap_or(Poll::Ready(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::rt::Executor as _;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    /// Runs `streams` while `work` runs, for at most 5 s: `Err` when `work` did not finish.
    async fn run_while(
        streams: &Streams,
        work: impl Future<Output = ()>,
    ) -> Result<(), tokio::time::error::Elapsed> {
        tokio::time::timeout(Duration::from_secs(5), async {
            tokio::select! {
                never = streams.run() => match never {},
                () = work => {}
            }
        })
        .await
    }

    /// Waits, yielding, until `done` reads `count`.
    async fn done_reaches(done: &AtomicU32, count: u32) {
        while done.load(Ordering::SeqCst) != count {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn streams_run_as_they_come_and_wait_without_blocking_each_other() {
        let streams = Streams::new();
        let done = Arc::new(AtomicU32::new(0));
        let (tell, told) = tokio::sync::oneshot::channel::<()>();
        let waiting = Arc::clone(&done);
        streams.execute(async move {
            let _ = told.await;
            waiting.fetch_add(10, Ordering::SeqCst);
        });
        let runner = streams.clone();
        let handed = streams.clone();
        let quick = Arc::clone(&done);
        let outcome = run_while(&runner, async {
            // Handed over while the runner runs: it runs though the first waits.
            handed.execute(async move {
                quick.fetch_add(1, Ordering::SeqCst);
            });
            done_reaches(&done, 1).await;
            tell.send(()).unwrap();
            done_reaches(&done, 11).await;
        })
        .await;
        assert!(
            outcome.is_ok(),
            "streams not run: done = {}",
            done.load(Ordering::SeqCst)
        );
    }

    #[tokio::test]
    async fn a_stream_that_panics_ends_alone() {
        let streams = Streams::new();
        let done = Arc::new(AtomicU32::new(0));
        streams.execute(async { panic!("a stream's own panic, caught by Streams::run") });
        let after = Arc::clone(&done);
        streams.execute(async move {
            tokio::task::yield_now().await;
            after.fetch_add(1, Ordering::SeqCst);
        });
        let outcome = run_while(&streams, done_reaches(&done, 1)).await;
        assert!(
            outcome.is_ok(),
            "the stream after the panicking one did not finish"
        );
    }
}
