//! [`Server`]: a service's whole life on a listener: serving, the drain at shutdown and
//! its cut, reloads of the TLS certificate and tokens, fresh claims of a lost lease.

use crate::server::{Drained, serve};
use crate::service::Service;
use crate::watch::StoreWatch;
use atomflake::ShardedGenerator;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_stream::{Stream, StreamExt as _};

/// Why a [`Server`]'s drain began.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DrainCause {
    /// The shutdown future ([`Server::with_graceful_shutdown`]) completed.
    Shutdown,
    /// Minting ended for good (the lease lost to another server, the layout's span
    /// spent), with the reason; not with [`Server::stay_stopped`].
    Stopped(String),
}

/// How a [`Server`] ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ended {
    /// Why it drained.
    pub cause: DrainCause,
    /// How the drain ended: the requests under way finished, or were cut.
    pub drained: Drained,
    /// The nodes it minted on last (others than at start when a lost lease was claimed
    /// afresh).
    pub nodes: Vec<u64>,
}

type Boxed<T> = Pin<Box<dyn Future<Output = T> + Send>>;
type Claim = Box<dyn Fn() -> Result<(ShardedGenerator, Arc<StoreWatch>), String> + Send + Sync>;
type Triggers = Pin<Box<dyn Stream<Item = ()> + Send>>;
type Cut = Box<dyn FnOnce(&DrainCause) -> Boxed<()> + Send>;

/// A [`Service`] served on a listener for its whole life, in the shape of
/// `axum::serve(..).with_graceful_shutdown(..)`:
///
/// - it serves until the shutdown future completes or minting ends for good (unless
///   [`stay_stopped`](Self::stay_stopped)): then new requests are refused, health goes
///   red and the requests under way finish, for at most the [drain time](Self::drain_time)
///   or until the [cut](Self::cut_drain_when) comes;
/// - the TLS certificate and the tokens are read again when their files change and at
///   each [reload trigger](Self::reload_on);
/// - with [`reclaim_with`](Self::reclaim_with), a lost lease is claimed afresh.
///
/// Dropping the service once [`run`](Self::run) returns (its last `Arc`) releases its
/// nodes.
///
/// # Examples
///
/// ```no_run
/// use atomflake::{Layout, ShardedGenerator};
/// use atomflake_serve::{Limits, Server, Service};
///
/// # async fn run() -> std::io::Result<()> {
/// let generator = ShardedGenerator::new(Layout::TWITTER, [1]).unwrap();
/// let service = Service::new(generator, Limits::default(), None).unwrap();
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
/// let ended = Server::new(listener, service)
///     .with_graceful_shutdown(async { tokio::signal::ctrl_c().await.unwrap() })
///     .run()
///     .await?;
/// println!("drained: {:?}", ended.drained);
/// # Ok(())
/// # }
/// ```
pub struct Server {
    listener: TcpListener,
    service: Service,
    drain: Duration,
    shutdown: Boxed<()>,
    cut: Cut,
    stay_stopped: bool,
    claim: Option<Claim>,
    reloads: Option<(Triggers, &'static str)>,
    otlp: Option<crate::Otlp>,
}

impl Server {
    /// The default [drain time](Self::drain_time).
    pub const DEFAULT_DRAIN: Duration = Duration::from_secs(10);

    /// `service` on `listener`: serving until minting ends for good, a drain of
    /// [`DEFAULT_DRAIN`](Self::DEFAULT_DRAIN) at most.
    pub fn new(listener: TcpListener, service: Service) -> Server {
        Server {
            listener,
            service,
            drain: Server::DEFAULT_DRAIN,
            shutdown: Box::pin(std::future::pending::<()>()),
            cut: Box::new(|_: &DrainCause| -> Boxed<()> { Box::pin(std::future::pending::<()>()) }),
            stay_stopped: false,
            claim: None,
            reloads: None,
            otlp: None,
        }
    }

    /// Drains once `shutdown` completes.
    #[must_use]
    pub fn with_graceful_shutdown(mut self, shutdown: impl Future<Output = ()> + Send + 'static) -> Server {
        self.shutdown = Box::pin(shutdown);
        self
    }

    /// How long the drain waits for the requests under way before it closes their
    /// connections.
    #[must_use]
    pub fn drain_time(mut self, drain: Duration) -> Server {
        self.drain = drain;
        self
    }

    /// Ends the drain early, closing the connections still open, once the future `cut`
    /// returns completes; `cut` is called when the drain begins, with its cause (for a
    /// command: the next signal after the one that began it).
    #[must_use]
    pub fn cut_drain_when<F, C>(mut self, cut: C) -> Server
    where
        C: FnOnce(&DrainCause) -> F + Send + 'static,
        F: Future<Output = ()> + Send + 'static,
    {
        self.cut = Box::new(move |cause: &DrainCause| -> Boxed<()> { Box::pin(cut(cause)) });
        self
    }

    /// When minting ends for good, stays up with health red rather than drain (so that a
    /// supervisor that restarts the process on it sees the red and not an exit).
    #[must_use]
    pub fn stay_stopped(mut self) -> Server {
        self.stay_stopped = true;
        self
    }

    /// Each time the lease is lost, claims nodes afresh with `claim` and serves on
    /// ([`reclaim`](crate::reclaim())): the service is made
    /// [`reclaiming`](Service::reclaiming).
    #[must_use]
    pub fn reclaim_with<F>(mut self, claim: F) -> Server
    where
        F: Fn() -> Result<(ShardedGenerator, Arc<StoreWatch>), String> + Send + Sync + 'static,
    {
        let claim: Claim = Box::new(claim);
        self.claim = Some(claim);
        self
    }

    /// Reads the TLS certificate and the tokens again at each item of `triggers` (for a
    /// command: SIGHUP), besides when their files change; the log line of each reload
    /// names it `why`.
    #[must_use]
    pub fn reload_on(
        mut self,
        triggers: impl Stream<Item = ()> + Send + 'static,
        why: &'static str,
    ) -> Server {
        let triggers: Triggers = Box::pin(triggers);
        self.reloads = Some((triggers, why));
        self
    }

    /// Pushes the service's metrics and spans to an OpenTelemetry collector with `otlp`
    /// while it serves, and once more when the drain has ended (within the export
    /// timeout); requests are traced as its sampler decides.
    #[must_use]
    pub fn export_otlp(mut self, otlp: crate::Otlp) -> Server {
        self.otlp = Some(otlp);
        self
    }

    /// The address it listens on.
    ///
    /// # Errors
    ///
    /// The listener's, when it has no local address.
    pub fn local_addr(&self) -> io::Result<std::net::SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until the drain has ended; on the current tokio runtime, which must have its
    /// IO and time drivers enabled.
    ///
    /// # Errors
    ///
    /// None today: a failed accept (too many open files) is logged and retried after a
    /// pause, and the drain always ends. The `io::Result` leaves room for listeners whose
    /// failures cannot be retried.
    pub async fn run(self) -> io::Result<Ended> {
        let Server {
            listener,
            mut service,
            drain,
            shutdown,
            cut,
            stay_stopped,
            claim,
            reloads,
            otlp,
        } = self;
        if claim.is_some() {
            service = service.reclaiming();
        }
        let service = Arc::new(service);
        let mut background = tokio::task::JoinSet::new();
        background.spawn(reload(Arc::clone(&service), reloads));
        if let Some(claim) = claim {
            background.spawn(crate::reclaim(Arc::clone(&service), claim));
        }
        let (stop_exports, exports_stop) = tokio::sync::watch::channel(false);
        let mut exports = tokio::task::JoinSet::new();
        let last_exports = otlp.as_ref().map(crate::Otlp::timeout);
        if let Some(otlp) = otlp {
            otlp.start(&service, &mut exports, &exports_stop);
        }
        // Set when the drain begins, before the drain's end is asked for.
        let cause = Arc::new(OnceLock::new());
        let began = {
            let (service, cause_is) = (Arc::clone(&service), Arc::clone(&cause));
            async move {
                let cause = tokio::select! {
                    () = shutdown => DrainCause::Shutdown,
                    reason = service.stopped(), if !stay_stopped => DrainCause::Stopped(reason),
                };
                match &cause {
                    DrainCause::Shutdown => tracing::info!(
                        target: "atomflake serve",
                        event = "draining",
                        "shutting down: refusing new requests, finishing those under way"
                    ),
                    DrainCause::Stopped(reason) => tracing::error!(
                        target: "atomflake serve",
                        event = "draining",
                        %reason,
                        "minting has ended for good: draining ({reason})"
                    ),
                }
                let _ = cause_is.set(cause);
            }
        };
        let drain_cause = Arc::clone(&cause);
        let drained = serve(listener, Arc::clone(&service), began, move || async move {
            let cause = drain_cause.get().cloned().unwrap_or(DrainCause::Shutdown);
            tokio::select! {
                () = tokio::time::sleep(drain) => tracing::warn!(
                    target: "atomflake serve",
                    event = "drain_cut",
                    "requests still under way after the drain time of {drain:?}: closing"
                ),
                // Its caller knows, and logs, why.
                () = cut(&cause) => {}
            }
        })
        .await?;
        background.abort_all();
        if let Some(timeout) = last_exports {
            let _ = stop_exports.send(true);
            // Each last export is held to the timeout; this bound is a backstop.
            let _ = tokio::time::timeout(timeout + Duration::from_secs(1), exports.join_all()).await;
        }
        Ok(Ended {
            cause: cause.get().cloned().unwrap_or(DrainCause::Shutdown),
            drained,
            nodes: service.nodes(),
        })
    }
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("listener", &self.listener)
            .field("drain", &self.drain)
            .field("stay_stopped", &self.stay_stopped)
            .field("reclaims", &self.claim.is_some())
            .finish_non_exhaustive()
    }
}

/// Watches the files of the service's TLS and tokens, and reads both again at each of
/// `triggers`, until the server ends.
async fn reload(service: Arc<Service>, triggers: Option<(Triggers, &'static str)>) {
    let (tls, tokens) = (service.tls().cloned(), service.tokens().cloned());
    let _watches = (
        tls.as_ref().map(crate::Tls::watch_files).map(AbortOnDrop),
        tokens.as_ref().map(crate::Tokens::watch_file).map(AbortOnDrop),
    );
    let Some((mut triggers, why)) = triggers else {
        return std::future::pending().await;
    };
    while triggers.next().await.is_some() {
        if let Some(tls) = &tls {
            tls.reload_logged(why);
        }
        if let Some(tokens) = &tokens {
            tokens.reload_logged(why);
        }
    }
    std::future::pending::<()>().await;
}

/// A task aborted when this is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
