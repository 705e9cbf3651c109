//! [`Service`]: one ID space's generator, how requests wait on it, and whether it serves.

use crate::limits::{Limits, LimitsError};
use crate::metrics::Metrics;
use crate::rate::IdBudget;
use crate::watch::StoreWatch;
use atomflake::mark::StoreErrorKind;
use atomflake::{Layout, MintError, Run, ShardedGenerator, Sleep, Tokio};
use crossbeam_utils::sync::{ShardedLock, ShardedLockReadGuard};
use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// How often [`Service::stopped`] and [`reclaim`](crate::reclaim()) look at the state.
pub(crate) const WATCH_EVERY: Duration = Duration::from_millis(250);

/// How often a request waiting for nodes claimed afresh looks again.
const RECLAIM_POLL: Duration = Duration::from_millis(10);

/// Why a request got no IDs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Bad input: the message names the value and the allowed range.
    Invalid(String),
    /// Minting cannot go on now (a lease being renewed, a mark not yet stored), or the
    /// server is draining or has stopped for good.
    Unavailable(String),
    /// Over a limit of the connection's (its ID rate): try again later.
    Limited(String),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Invalid(message) | Refusal::Unavailable(message) | Refusal::Limited(message) => {
                f.write_str(message)
            }
        }
    }
}

/// Whether the service hands out IDs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// IDs are handed out.
    Serving,
    /// Shutting down: requests under way finish, new ones are refused.
    Draining,
    /// The lease was lost (the reason) and the service claims nodes afresh
    /// ([`reclaim`](crate::reclaim())): requests wait for the new nodes, for at most the
    /// patience.
    Reclaiming(String),
    /// Minting has ended for good (a lease lost, the layout's span used up): the reason.
    Stopped(String),
}

const SERVING: u8 = 0;
const DRAINING: u8 = 1;
const STOPPED: u8 = 2;

/// One ID space served: the generator, its nodes, the limits and the metrics.
#[derive(Debug)]
pub struct Service {
    /// Replaced whole when a lost lease is claimed afresh. Read by every request: a
    /// sharded lock, whose readers on different cores touch different cache lines.
    minting: ShardedLock<Minting>,
    /// Whether a lost lease is claimed afresh ([`reclaim`](crate::reclaim())) rather than
    /// the end of minting.
    reclaims: bool,
    limits: Limits,
    /// [`SERVING`], [`DRAINING`] or [`STOPPED`]: read by every request, so an atomic.
    phase: AtomicU8,
    /// Why the service stopped; set before `phase` becomes [`STOPPED`].
    stopped: OnceLock<String>,
    /// A permit for each `StreamIds` under way, of [`Limits::max_streams`].
    streams: Arc<tokio::sync::Semaphore>,
    pub(crate) cors: crate::cors::Cors,
    pub(crate) metrics: Metrics,
    /// TLS on the port, when served with it.
    tls: Option<crate::Tls>,
    /// The bearer tokens the ID endpoints ask for, if any.
    tokens: Option<Arc<crate::Tokens>>,
    /// The mask of `GET /v1/ids?as=masked`, if any.
    mask: Option<atomflake::Mask>,
    /// The tracers of the OTLP exporter, once it runs.
    traces: OnceLock<Arc<crate::otlp::Traces>>,
}

impl Service {
    /// Serves `generator`'s IDs under `limits`. `store` is the watch on its mark store
    /// ([`Watched::new`](crate::Watched::new)), when it has one: health goes red when the
    /// store is lost, and the metrics count its stores.
    ///
    /// # Errors
    ///
    /// A limit out of its range ([`Limits::check`]): nothing is served under limits the
    /// `atomflake` command would refuse.
    ///
    /// # Examples
    ///
    /// ```
    /// use atomflake::{Layout, ShardedGenerator};
    /// use atomflake_serve::{Limits, Service};
    ///
    /// let generator = ShardedGenerator::new(Layout::TWITTER, [1]).unwrap();
    /// let service = Service::new(generator, Limits::default(), None).unwrap();
    /// assert_eq!(service.nodes(), [1]);
    ///
    /// let generator = ShardedGenerator::new(Layout::TWITTER, [1]).unwrap();
    /// let none = Limits { max_count: 0, ..Limits::default() };
    /// assert_eq!(
    ///     Service::new(generator, none, None).unwrap_err().to_string(),
    ///     "max_count 0 is out of range: allowed 1..=1048576"
    /// );
    /// ```
    pub fn new(
        generator: ShardedGenerator,
        limits: Limits,
        store: Option<Arc<StoreWatch>>,
    ) -> Result<Service, LimitsError> {
        limits.check()?;
        Ok(Service {
            minting: ShardedLock::new(Minting::new(generator, store)),
            reclaims: false,
            limits,
            phase: AtomicU8::new(SERVING),
            stopped: OnceLock::new(),
            streams: Arc::new(tokio::sync::Semaphore::new(limits.max_streams as usize)),
            cors: crate::cors::Cors::default(),
            metrics: Metrics::default(),
            tls: None,
            tokens: None,
            mask: None,
            traces: OnceLock::new(),
        })
    }

    /// Serves over TLS only ([`Tls`](crate::Tls)): HTTP/2 and HTTP/1.1 chosen by ALPN.
    #[must_use]
    pub fn with_tls(mut self, tls: crate::Tls) -> Service {
        self.tls = Some(tls);
        self
    }

    /// Asks every request but health checks (and `/metrics`, unless
    /// [`Tokens::guard_metrics`](crate::Tokens::guard_metrics)) for one of `tokens` as
    /// `Authorization: Bearer TOKEN`: HTTP 401, gRPC `UNAUTHENTICATED` without it.
    #[must_use]
    pub fn require_tokens(mut self, tokens: Arc<crate::Tokens>) -> Service {
        self.tokens = Some(tokens);
        self
    }

    /// Answers `GET /v1/ids?as=masked` with the IDs masked by `mask`, and decodes masked
    /// IDs (`GET /v1/ids/{id}?as=masked`).
    #[must_use]
    pub fn with_mask(mut self, mask: atomflake::Mask) -> Service {
        self.mask = Some(mask);
        self
    }

    /// The mask of `as=masked`, if any.
    pub fn mask(&self) -> Option<&atomflake::Mask> {
        self.mask.as_ref()
    }

    /// The TLS it serves with, if any.
    pub fn tls(&self) -> Option<&crate::Tls> {
        self.tls.as_ref()
    }

    /// Every counter now, for an exporter: [`prometheus`](crate::prometheus()) writes
    /// `GET /metrics` from it.
    pub fn metrics(&self) -> crate::Snapshot {
        let serving = self.state() == State::Serving;
        let store = self.store().map(|store| (store.stored(), store.failed()));
        self.metrics.snapshot(serving, store)
    }

    /// The bearer tokens it asks for, if any.
    pub fn tokens(&self) -> Option<&Arc<crate::Tokens>> {
        self.tokens.as_ref()
    }

    /// Whether a request for `path` with these `headers` may be answered: its
    /// `Authorization` header is read only when tokens are asked for.
    pub(crate) fn admits(&self, path: &str, headers: &axum::http::HeaderMap) -> bool {
        let Some(tokens) = &self.tokens else {
            return true;
        };
        if crate::connections::is_health_check(path) || (path == "/metrics" && !tokens.guard_metrics()) {
            return true;
        }
        tokens.admits(
            headers
                .get(axum::http::header::AUTHORIZATION)
                .map(axum::http::HeaderValue::as_bytes),
        )
    }

    /// Lets pages of `origins` (`https://app.example.com`, or `*` for any) call the HTTP
    /// API from a browser (CORS): preflights are answered and answers carry
    /// `Access-Control-Allow-Origin`.
    ///
    /// # Errors
    ///
    /// An origin that is neither `*` nor `http(s)://HOST[:PORT]`, named.
    pub fn allow_origins(mut self, origins: &[String]) -> Result<Service, String> {
        self.cors = crate::cors::Cors::new(origins)?;
        Ok(self)
    }

    /// Claims nodes afresh when the lease is lost, rather than stop minting for good: the
    /// state is then [`State::Reclaiming`] until [`reclaim`](crate::reclaim()) (which must
    /// run beside the service) puts a generator on new nodes in.
    #[must_use]
    pub fn reclaiming(mut self) -> Service {
        self.reclaims = true;
        self
    }

    /// The layout IDs are minted in.
    pub fn layout(&self) -> Layout {
        self.minting().generator.layout()
    }

    /// The nodes IDs are minted on now.
    pub fn nodes(&self) -> Vec<u64> {
        self.minting().nodes.clone()
    }

    fn minting(&self) -> ShardedLockReadGuard<'_, Minting> {
        // Poisoned only by a panic while held, which nothing does between updates.
        self.minting.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Mints on `generator`, whose store `store` watches, from now on: the nodes of a fresh
    /// claim. Returns the generator before, to be dropped off the runtime (its drop waits
    /// for its keeper thread).
    pub(crate) fn replace(&self, generator: ShardedGenerator, store: Arc<StoreWatch>) -> ShardedGenerator {
        let mut minting = self.minting.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(before) = &minting.store {
            store.count_on_from(before);
        }
        if let Some(traces) = self.traces.get() {
            store.trace_with(Arc::clone(traces));
        }
        std::mem::replace(&mut *minting, Minting::new(generator, Some(store))).generator
    }

    /// Traces requests and lease operations with `traces` from now on.
    pub(crate) fn trace_with(&self, traces: Arc<crate::otlp::Traces>) {
        if let Some(store) = self.store() {
            store.trace_with(Arc::clone(&traces));
        }
        let _ = self.traces.set(traces);
    }

    /// The tracers of the OTLP exporter, when it runs.
    pub(crate) fn traces(&self) -> Option<&Arc<crate::otlp::Traces>> {
        self.traces.get()
    }

    /// The limits requests are held to, [checked](Limits::check).
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Whether IDs are handed out now. A lost mark store stops the service for good, or,
    /// [`reclaiming`](Self::reclaiming), until nodes are claimed afresh.
    pub fn state(&self) -> State {
        self.state_of(&self.minting())
    }

    /// [`state`](Self::state), with `minting` read.
    fn state_of(&self, minting: &Minting) -> State {
        let lost = minting.lost();
        if let Some(lost) = &lost
            && !self.reclaims
        {
            self.stop(lost);
        }
        match (self.phase.load(Ordering::Acquire), lost) {
            (SERVING, Some(lost)) => State::Reclaiming(lost),
            (SERVING, None) => State::Serving,
            (DRAINING, _) => State::Draining,
            _ => State::Stopped(self.stopped.get().cloned().unwrap_or_default()),
        }
    }

    /// Whether IDs can be handed out now, within the patience, or why not: the state, then
    /// what minting would answer, asked of the generator without taking an ID
    /// ([`probe_any`](atomflake::ShardedGenerator::probe_any)), so that health checks,
    /// which need no token, never spend the IDs of the clients that hold one. A lease
    /// whose renewal is overdue, a mark not stored, a clock further behind the node's mark
    /// than the patience: not ready. (`/readyz`, `/healthz`, gRPC health.)
    ///
    /// # Errors
    ///
    /// Why no ID can be handed out now: draining, stopped (and why), a wait for the clock
    /// longer than the patience, or what minting answered.
    pub fn health(&self) -> Result<(), String> {
        match self.state() {
            State::Serving => {}
            State::Draining => return Err("draining".into()),
            State::Reclaiming(reason) => return Err(format!("claiming fresh nodes: {reason}")),
            State::Stopped(reason) => return Err(format!("stopped: {reason}")),
        }
        let probe = self.minting().generator.probe_any();
        match probe {
            Ok(()) => Ok(()),
            Err(spent @ MintError::SequenceExhausted { .. }) => {
                let waiting = spent.retry_after().unwrap_or_default();
                if waiting <= self.limits.patience {
                    Ok(())
                } else {
                    Err(format!(
                        "waiting {waiting:?} for this clock to pass the nodes' high-water mark: longer \
                         than the patience of {:?}",
                        self.limits.patience
                    ))
                }
            }
            // Lost before the store's watch says so: with `--reclaim`, fresh nodes are
            // claimed (as `turn` does), so not ready, but not stopped.
            Err(MintError::Store(store)) if self.reclaims && store.kind() == StoreErrorKind::Lost => {
                Err(format!("claiming fresh nodes: {store}"))
            }
            Err(error) if error.is_transient() => Err(format!("cannot mint now: {error}")),
            Err(error) => {
                let reason = format!("cannot mint: {error}");
                self.stop(&reason);
                Err(format!("stopped: {reason}"))
            }
        }
    }

    /// Whether the server is alive: it is unless minting has ended for good (a lost lease,
    /// the layout's span spent), when only a restart helps. Draining and claiming fresh
    /// nodes are alive. (`/livez`.)
    ///
    /// # Errors
    ///
    /// Why minting has ended.
    pub fn liveness(&self) -> Result<(), String> {
        match self.state() {
            State::Stopped(reason) => Err(format!("stopped: {reason}")),
            State::Serving | State::Draining | State::Reclaiming(_) => Ok(()),
        }
    }

    /// Completes once minting has ended for good, with the reason: looked at every 250 ms
    /// (with [`health`](Self::health)'s probe, which takes no ID).
    pub async fn stopped(&self) -> String {
        loop {
            if let State::Stopped(reason) = self.state() {
                return reason;
            }
            // A lease is lost at a renewal; the probe also finds a span spent.
            let _ = self.health();
            tokio::time::sleep(WATCH_EVERY).await;
        }
    }

    /// Refuses new requests from now on (health goes red); requests under way finish, and
    /// no nodes are claimed afresh.
    pub fn drain(&self) {
        let _ = self
            .phase
            .compare_exchange(SERVING, DRAINING, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Ends minting for good, with `reason`.
    pub(crate) fn stop(&self, reason: &str) {
        if self.stopped.set(reason.to_owned()).is_ok() {
            tracing::error!(
                target: "atomflake serve",
                event = "stopped_minting",
                reason,
                "stopped serving: {reason}"
            );
        }
        self.phase.store(STOPPED, Ordering::Release);
    }

    /// The mark store's watch, when the generator has a store.
    pub(crate) fn store(&self) -> Option<Arc<StoreWatch>> {
        self.minting().store.clone()
    }

    /// Checks `count` against `1..=max`.
    pub(crate) fn check_count(count: u64, max: u64) -> Result<u64, Refusal> {
        if (1..=max).contains(&count) {
            Ok(count)
        } else {
            Err(Refusal::Invalid(format!(
                "count {count} is out of range: allowed 1..={max}"
            )))
        }
    }

    /// A place for one more `StreamIds`, held until it ends, or a refusal naming the cap.
    pub(crate) fn admit_stream(&self) -> Result<tokio::sync::OwnedSemaphorePermit, String> {
        Arc::clone(&self.streams).try_acquire_owned().map_err(|_| {
            format!(
                "the server has its most streams under way ({}): try again once one ends",
                self.limits.max_streams
            )
        })
    }

    /// Takes a new request, or refuses it: while draining, and once stopped.
    pub(crate) fn admit(&self) -> Result<(), Refusal> {
        match self.state() {
            State::Serving | State::Reclaiming(_) => Ok(()),
            State::Draining => Err(Refusal::Unavailable("the server is shutting down".into())),
            State::Stopped(reason) => Err(Refusal::Unavailable(format!("the server has stopped: {reason}"))),
        }
    }

    /// Up to `max` IDs (`max` ≥ 1) of one tick and node for a request already admitted:
    /// from the worker thread's node or, when its tick is spent, from any other node with
    /// IDs left in the tick, so one request or stream draws on every node. Waits out a
    /// tick spent on every node and, for at most the limits' patience, a mark being
    /// stored or nodes being claimed afresh. A drain lets it finish; a stop ends it.
    pub(crate) async fn next_run(&self, max: u64) -> Result<Run, Refusal> {
        let mut unavailable_since = None;
        match self.turn(max, &mut unavailable_since) {
            Turn::Done(result) => result,
            // Waits are rare (a tick spent, a mark being stored): their timers live in a
            // future of their own, so that every request's future stays small.
            wait => {
                // Bound first: a temporary of the arm would keep its storage, the whole
                // unboxed future, in this future across the `await`.
                let waited = Box::pin(self.next_run_after(wait, max, unavailable_since));
                waited.await
            }
        }
    }

    /// [`next_run`](Self::next_run) from a `wait` on: waits, then takes turns until one
    /// is done.
    async fn next_run_after(
        &self,
        mut wait: Turn,
        max: u64,
        mut unavailable_since: Option<Instant>,
    ) -> Result<Run, Refusal> {
        loop {
            match wait {
                Turn::Done(result) => return result,
                // The core's wait: a short one (a spent tick's) yields, reading only the
                // clock, since a mint before it ends would be refused the same way.
                Turn::Wait(time) => Tokio.wait(time).await,
                Turn::Sleep(time) => tokio::time::sleep(time).await,
                Turn::Again => {}
            }
            wait = self.turn(max, &mut unavailable_since);
        }
    }

    /// One try of [`next_run`](Self::next_run): its answer, or what to wait for before
    /// the next. `unavailable_since` is when minting was first found unavailable, for the
    /// patience.
    fn turn(&self, max: u64, unavailable_since: &mut Option<Instant>) -> Turn {
        let mut out_of_patience = |why: String| {
            let since = *unavailable_since.get_or_insert_with(Instant::now);
            (since.elapsed() >= self.limits.patience).then_some(Turn::Done(Err(Refusal::Unavailable(why))))
        };
        // One read of the generator for the state and the mint.
        let minted = {
            let minting = self.minting();
            match self.state_of(&minting) {
                State::Stopped(reason) => {
                    return Turn::Done(Err(Refusal::Unavailable(format!(
                        "the server has stopped: {reason}"
                    ))));
                }
                State::Reclaiming(reason) => {
                    return out_of_patience(format!("cannot mint now: claiming fresh nodes: {reason}"))
                        .unwrap_or(Turn::Sleep(RECLAIM_POLL));
                }
                State::Serving | State::Draining => minting.generator.try_next_run_any(max),
            }
        };
        match minted {
            Ok(run) => Turn::Done(Ok(run)),
            Err(spent @ MintError::SequenceExhausted { .. }) => {
                self.metrics.count_spent_tick_wait();
                Turn::after(&spent)
            }
            // Lost, and claimed afresh: the next turn waits for the new nodes (or mints on
            // them, put in meanwhile). A drain claims nothing.
            Err(MintError::Store(store)) if self.reclaims && store.kind() == StoreErrorKind::Lost => {
                if self.state() == State::Draining {
                    Turn::Done(Err(Refusal::Unavailable(format!("cannot mint: {store}"))))
                } else {
                    Turn::Again
                }
            }
            Err(error) if error.is_transient() => {
                out_of_patience(format!("cannot mint now: {error}")).unwrap_or_else(|| Turn::after(&error))
            }
            Err(error) => {
                let reason = format!("cannot mint: {error}");
                self.stop(&reason);
                Turn::Done(Err(Refusal::Unavailable(reason)))
            }
        }
    }

    /// `count` IDs (`count` ≥ 1), in increasing order, within the connection's ID
    /// `budget` when it has one.
    pub(crate) async fn next_ids(&self, count: u64, budget: Option<&IdBudget>) -> Result<Vec<u64>, Refusal> {
        self.admit()?;
        if let Some(budget) = budget
            && !budget.take(count)
        {
            return Err(Refusal::Limited(format!(
                "over this connection's ID rate: allowed {} IDs per second",
                budget.rate()
            )));
        }
        let mut ids = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
        while (ids.len() as u64) < count {
            let run = self.next_run(count - ids.len() as u64).await?;
            ids.extend(run.into_iter().map(atomflake::Id::get));
        }
        // Runs of several nodes (or of nodes claimed afresh) interleave; one node's are in
        // order already.
        if !ids.is_sorted() {
            ids.sort_unstable();
        }
        Ok(ids)
    }
}

/// One try of [`Service::next_run`]: its answer, or what to wait for before the next.
#[derive(Debug)]
enum Turn {
    Done(Result<Run, Refusal>),
    /// The wait after a transient refusal, the time the generator gives
    /// ([`MintError::retry_after`]), waited as the core's `_async` mints wait
    /// ([`Sleep::wait`]).
    Wait(Duration),
    /// A poll's sleep (the state, while nodes are claimed afresh).
    Sleep(Duration),
    /// Try again at once.
    Again,
}

impl Turn {
    /// The wait after a transient `refusal`.
    fn after(refusal: &MintError) -> Turn {
        Turn::Wait(refusal.retry_after().unwrap_or_default())
    }
}

/// The generator minted on, its nodes and the watch on its store.
#[derive(Debug)]
struct Minting {
    generator: ShardedGenerator,
    nodes: Vec<u64>,
    store: Option<Arc<StoreWatch>>,
}

impl Minting {
    fn new(generator: ShardedGenerator, store: Option<Arc<StoreWatch>>) -> Minting {
        let nodes = generator.nodes().collect();
        Minting {
            generator,
            nodes,
            store,
        }
    }

    /// Why the store was lost, once it was.
    fn lost(&self) -> Option<String> {
        self.store.as_ref()?.lost().map(str::to_owned)
    }
}
