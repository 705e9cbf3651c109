#![doc = include_str!("../README.md")]

mod error;
mod list;
mod options;
mod registry;

pub use error::{CallFailed, EngineError, LeaseError};
pub use list::{LeaseRow, list};
pub use options::{LeaseOptions, NodesError};
pub use registry::{Acquired, AnyLease, AnyLeaseError, Driver, Registry, UrlEngine};

use atomflake::mark::{MarkStore, StoreError, Tenure};
use atomflake::{Builder, Layout, MonotonicClock};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::RangeInclusive;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The shortest lease time.
pub const MIN_TTL: Duration = Duration::from_secs(1);

/// The longest lease time.
pub const MAX_TTL: Duration = Duration::from_secs(3600);

/// The longest namespace, in bytes: it names keys, nodes and rows in every engine.
pub const MAX_NAMESPACE_LEN: usize = 63;

/// How long a claim may take, retries over a busy node range included.
pub const CLAIM_TIMEOUT: Duration = Duration::from_secs(10);

/// How many passed-over nodes a claim reports at most.
const MAX_PASSED_OVER: usize = 16;

/// What a lease engine does on its server; [`Lease`] does the rest. An engine implements
/// it the way `parking_lot` implements `lock_api::RawMutex`: the guarantees are argued
/// once, in the [crate docs](crate#why-two-holders-never-mint-the-same-id), on what these
/// calls promise.
///
/// Every call may block; [`Lease`] makes them on a thread of their own, so engines may run
/// a runtime of their own inside.
pub trait Engine: Sized + Send + fmt::Debug + 'static {
    /// Where the engine's server is.
    type Config: ?Sized + Sync;
    /// The engine's own errors.
    type Error: EngineError;
    /// What the engine fences a claim's writes with, beside its generation: the claim's
    /// token, and what a store compares the mark with.
    type Fence: Send + fmt::Debug;

    /// The most nodes one lease may hold: its claim, stores and release are each one
    /// transaction of the engine's, which may cap the operations in one (etcd).
    const MAX_NODES: u64 = u64::MAX;

    /// Connects for a lease as `options` say (already checked: their namespace and lease
    /// time), by `deadline`.
    ///
    /// # Errors
    ///
    /// When the server cannot be reached or refuses.
    fn connect(config: &Self::Config, options: &LeaseOptions, deadline: Instant)
    -> Result<Self, Self::Error>;

    /// One attempt to claim `request.count` nodes of `request.nodes`, all or none, in one
    /// transaction that reads their marks. Nodes whose marks are past `request.reach` are
    /// not taken ([`choose`] does this for an engine that reads the namespace whole).
    ///
    /// # Errors
    ///
    /// When the server cannot be reached or refuses: the claim ends, with [`Engine::close`].
    fn claim(&mut self, request: &ClaimRequest<'_>) -> Result<Attempt<Self::Fence>, Self::Error>;

    /// Sets every claim's mark to `mark`, by `deadline`, and renews the claims. The write
    /// lands only while the engine holds the claim, and never lowers a mark: a copy the
    /// engine applies late changes nothing. Never called with a mark below one stored.
    ///
    /// # Errors
    ///
    /// [`WriteError::Lost`] when a claim is gone for good; [`WriteError::Engine`] when the
    /// store may not have landed (the previous mark is in place).
    fn store(
        &mut self,
        claims: &mut [Claim<Self::Fence>],
        mark: u64,
        deadline: Instant,
    ) -> Written<Self::Error>;

    /// Sets every claim's mark to `release.mark()` and ends the claims, in one fenced
    /// write. A [`Release::Exact`] mark may be below the last one stored.
    ///
    /// # Errors
    ///
    /// As [`store`](Engine::store).
    fn release(
        &mut self,
        claims: &mut [Claim<Self::Fence>],
        release: Release,
        deadline: Instant,
    ) -> Written<Self::Error>;

    /// Every node of `namespace` that is claimed or has a mark, by node ([`list()`] checks the
    /// namespace first).
    ///
    /// # Errors
    ///
    /// When the server cannot be reached or refuses.
    fn list(config: &Self::Config, namespace: &str) -> Result<Vec<LeaseRow>, Self::Error>;

    /// Ends whatever the engine still holds (an etcd lease, a session, a connection): after
    /// the release, or after a claim that failed. Best effort: the engine's expiry ends it
    /// otherwise.
    fn close(&mut self) {}
}

/// One node claimed by an [`Engine`], fenced by `F`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim<F> {
    /// The node.
    pub node: u64,
    /// A number that grows from claim to claim of the node, for people and messages:
    /// PostgreSQL's generation, etcd's revision, ZooKeeper's zxid of the claim.
    pub generation: i64,
    /// What the engine fences the claim's writes with ([`Engine::Fence`]).
    pub fence: F,
}

/// What an [`Engine::claim`] is asked for.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ClaimRequest<'a> {
    /// The namespace.
    pub namespace: &'a str,
    /// The holder's name, for people reading the claims.
    pub holder: &'a str,
    /// The nodes that may be claimed.
    pub nodes: RangeInclusive<u64>,
    /// How many to claim, all or none.
    pub count: u64,
    /// Free nodes whose marks are past this (Unix ms) are passed over.
    pub reach: u64,
    /// The lease time.
    pub ttl: Duration,
    /// When the claim gives up.
    pub deadline: Instant,
}

/// What one [`Engine::claim`] came to.
#[derive(Debug)]
pub enum Attempt<F> {
    /// The nodes are claimed.
    Claimed(Claimed<F>),
    /// Fewer nodes are free, or reachable, than asked for: nothing was claimed.
    Short(Shortfall),
    /// Another claimant took a node this one found free, or the answer was lost on the
    /// way (the engine finds such a claim of its own on the next attempt): try again.
    Raced,
}

/// The nodes an [`Engine::claim`] took.
#[derive(Debug)]
pub struct Claimed<F> {
    /// The claims, lowest node first.
    pub claims: Vec<Claim<F>>,
    /// The highest of their marks, Unix ms (0 for none).
    pub mark: u64,
    /// The free nodes passed over because their marks are past the reach: the lowest
    /// [`MAX_PASSED_OVER`](self) at most.
    pub passed_over: Vec<PassedOver>,
}

/// Why an [`Engine::claim`] took nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shortfall {
    /// How many nodes of the range live claims hold (others than this claim's own).
    pub held: u64,
    /// The lowest free node whose mark is past the reach, if any.
    pub ahead: Option<PassedOver>,
}

/// What [`Engine::release`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// The last mark stored: the generator's exact mark is not known.
    Stored(u64),
    /// The mark that covers exactly what the generator minted, never below the mark
    /// claimed: it can be below the last mark stored.
    Exact(u64),
}

impl Release {
    /// The mark to write.
    pub fn mark(self) -> u64 {
        match self {
            Release::Stored(mark) | Release::Exact(mark) => mark,
        }
    }
}

/// Which fenced write an engine makes, for an engine that writes stores and releases through
/// one path: a store of the mark ([`Engine::store`]), or the mark and the end of the claims
/// ([`Engine::release`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    /// The mark.
    Store,
    /// The mark and the end of the claims.
    Release,
}

impl Write {
    /// What the write does, as errors name it: `"store the mark"`, `"release"`.
    pub fn action(self) -> &'static str {
        match self {
            Write::Store => "store the mark",
            Write::Release => "release",
        }
    }
}

/// What an [`Engine::store`] or [`Engine::release`] returns.
pub type Written<E> = Result<(), WriteError<E>>;

/// Why an [`Engine::store`] or [`Engine::release`] failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteError<E> {
    /// The engine no longer holds the claim at this index: gone for good.
    Lost {
        /// The claim's index.
        claim: usize,
    },
    /// The write may not have landed: the engine's error.
    Engine(E),
}

impl<E> From<E> for WriteError<E> {
    fn from(error: E) -> WriteError<E> {
        WriteError::Engine(error)
    }
}

/// A free node that [`Lease::acquire`] passed over because its high-water mark is further
/// ahead of this process's clock than a generator waits for at start-up: a previous
/// holder's clock ran ahead. It is free for a claimant whose clock has reached its mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PassedOver {
    /// The node.
    pub node: u64,
    /// Its high-water mark, Unix ms.
    pub high_water_ms: u64,
}

impl PassedOver {
    /// A node and its mark.
    pub fn new(node: u64, high_water_ms: u64) -> PassedOver {
        PassedOver { node, high_water_ms }
    }
}

/// For an engine that reads the namespace whole: the `request.count` lowest nodes of the
/// range that are not `live` and whose marks (`marks`, none for 0) are within the reach,
/// with the free nodes passed over; or the shortfall.
///
/// # Errors
///
/// The [`Shortfall`] when fewer nodes are free and within reach.
///
pub fn choose(
    request: &ClaimRequest<'_>,
    live: &BTreeSet<u64>,
    marks: &BTreeMap<u64, u64>,
) -> Result<(Vec<u64>, Vec<PassedOver>), Shortfall> {
    let wanted = usize::try_from(request.count).unwrap_or(usize::MAX);
    let mut chosen = Vec::new();
    let mut passed_over = Vec::new();
    for node in request.nodes.clone() {
        if chosen.len() == wanted {
            return Ok((chosen, passed_over));
        }
        if live.contains(&node) {
            continue;
        }
        let mark = marks.get(&node).copied().unwrap_or(0);
        if mark <= request.reach {
            chosen.push(node);
        } else if passed_over.len() < MAX_PASSED_OVER {
            passed_over.push(PassedOver::new(node, mark));
        }
    }
    if chosen.len() == wanted {
        return Ok((chosen, passed_over));
    }
    Err(Shortfall {
        held: live.range(request.nodes.clone()).count() as u64,
        ahead: passed_over.first().copied(),
    })
}

/// The holder's name and what its claim took.
type Taken<E> = (String, Claimed<<E as Engine>::Fence>);

/// Claimed node IDs (one unless [`LeaseOptions::nodes`] asks for more), on engine `E`:
/// held until the lease is dropped, or kept by the generator built on it.
pub struct Lease<E: Engine> {
    engine: E,
    namespace: String,
    /// The claims, lowest node first.
    claims: Vec<Claim<E::Fence>>,
    /// The claims' nodes, in the same order.
    nodes: Vec<u64>,
    holder: String,
    ttl: Duration,
    passed_over: Vec<PassedOver>,
    /// The highest of the nodes' marks when claimed.
    claimed_mark: u64,
    /// The last mark stored; `None` once released.
    stored: Option<u64>,
    /// The mark that covers exactly what the generator on the lease minted, once it
    /// stopped: what the release stores.
    finished: Option<u64>,
}

impl<E: Engine> fmt::Debug for Lease<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("namespace", &self.namespace)
            .field("nodes", &self.nodes)
            .field("generation", &self.generation())
            .field("holder", &self.holder)
            .field("ttl", &self.ttl)
            .field("engine", &self.engine)
            .finish_non_exhaustive()
    }
}

impl<E: Engine> Lease<E> {
    /// Claims nodes of `layout`'s range in `options`' namespace on the engine at `config`:
    /// the lowest nodes no live claim holds, or the one asked for.
    ///
    /// # Errors
    ///
    /// [`LeaseError::NoFreeNode`] (or [`NodeTaken`](LeaseError::NodeTaken) for a node
    /// asked for, [`TooFewFreeNodes`](LeaseError::TooFewFreeNodes) for several) when live
    /// claims hold them; [`LeaseError::Ahead`] when every free node's mark is too far
    /// ahead; [`LeaseError::InvalidNamespace`], [`TtlOutOfRange`](LeaseError::TtlOutOfRange)
    /// and [`Nodes`](LeaseError::Nodes) for bad options; [`LeaseError::Engine`] when the
    /// engine cannot be reached or refuses.
    pub fn acquire(
        config: &E::Config,
        layout: &Layout,
        options: &LeaseOptions,
    ) -> Result<Lease<E>, LeaseError<E::Error>> {
        check_namespace(&options.namespace)?;
        if !(MIN_TTL..=MAX_TTL).contains(&options.ttl) || options.ttl.subsec_nanos() != 0 {
            return Err(LeaseError::TtlOutOfRange { ttl: options.ttl });
        }
        let nodes = options.claimable(layout).map_err(LeaseError::Nodes)?;
        if options.count > E::MAX_NODES {
            return Err(LeaseError::Nodes(NodesError::CountOutOfRange {
                count: options.count,
                max: E::MAX_NODES,
            }));
        }
        off_runtime(|| {
            let deadline = Instant::now() + CLAIM_TIMEOUT;
            let mut engine = E::connect(config, options, deadline)?;
            let claimed = Lease::claim(&mut engine, nodes, layout, options, deadline);
            if claimed.is_err() {
                engine.close();
            }
            claimed.map(|(holder, claimed)| Lease {
                engine,
                namespace: options.namespace.clone(),
                nodes: claimed.claims.iter().map(|claim| claim.node).collect(),
                claims: claimed.claims,
                holder,
                ttl: options.ttl,
                passed_over: claimed.passed_over,
                claimed_mark: claimed.mark,
                stored: Some(claimed.mark),
                finished: None,
            })
        })
    }

    /// Claims until a claim succeeds, a refusal says why it cannot, or `deadline`.
    fn claim(
        engine: &mut E,
        nodes: RangeInclusive<u64>,
        layout: &Layout,
        options: &LeaseOptions,
        deadline: Instant,
    ) -> Result<Taken<E>, LeaseError<E::Error>> {
        let holder = options.holder.clone().unwrap_or_else(default_holder);
        // A node asked for is claimed whatever its mark: the generator built on it says how
        // far ahead the mark is.
        let clock_ms = unix_now_ms();
        let reach = match options.node {
            Some(_) => u64::MAX,
            None => clock_ms.saturating_add(millis(Builder::<MonotonicClock>::MAX_RESTART_WAIT)),
        };
        let request = ClaimRequest {
            namespace: &options.namespace,
            holder: &holder,
            nodes,
            count: options.count,
            reach,
            ttl: options.ttl,
            deadline,
        };
        loop {
            match engine.claim(&request)? {
                Attempt::Claimed(claimed) => return Ok((holder, claimed)),
                Attempt::Short(shortfall) => {
                    if let Some(refusal) = refusal(options, layout, shortfall, clock_ms) {
                        return Err(refusal);
                    }
                }
                Attempt::Raced => {}
            }
            // A claimant took a node this one found free: read again.
            if Instant::now() >= deadline {
                return Err(LeaseError::Crowded {
                    namespace: options.namespace.clone(),
                    waited: CLAIM_TIMEOUT,
                });
            }
        }
    }

    /// The free nodes this claim passed over because their high-water marks are further
    /// ahead of this process's clock than a generator waits for at start-up (at most 16,
    /// the lowest first): a sign that a previous holder's clock ran ahead. Empty for a
    /// node asked for with [`LeaseOptions::node`].
    pub fn passed_over(&self) -> &[PassedOver] {
        &self.passed_over
    }

    /// The leased node ID (the lowest, for a lease of several).
    pub fn node(&self) -> u64 {
        self.nodes[0]
    }

    /// Every leased node ID, lowest first.
    pub fn nodes(&self) -> &[u64] {
        &self.nodes
    }

    /// The claim's generation (of its lowest node, for a lease of several): a number that
    /// grows from claim to claim of the node ([`Claim::generation`](Claim#structfield.generation)). For people: the fence
    /// is the claim's token.
    pub fn generation(&self) -> i64 {
        self.claims[0].generation
    }

    /// The claims, lowest node first, as the engine keeps them.
    pub fn claims(&self) -> &[Claim<E::Fence>] {
        &self.claims
    }

    /// The engine the lease is held on.
    pub fn engine(&self) -> &E {
        &self.engine
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The holder's name, as the engine records it.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// The lease time.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The node's high-water mark when it was claimed (Unix ms; the highest of them, for a
    /// lease of several): every ID a previous holder minted has an earlier time.
    pub fn high_water_ms(&self) -> u64 {
        self.claimed_mark
    }

    /// Frees the nodes now: stores the last mark and ends the claims. Dropping the lease
    /// (or the generator built on it) does the same, and reports nothing.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Lost`] when the engine no longer holds a claim;
    /// [`LeaseError::Engine`] when the engine cannot be reached (the claims then expire by
    /// themselves).
    pub fn release(mut self) -> Result<(), LeaseError<E::Error>> {
        self.release_now()
    }

    fn release_now(&mut self) -> Result<(), LeaseError<E::Error>> {
        let Some(stored) = self.stored.take() else {
            return Ok(());
        };
        // The exact mark of what was minted, when known: below the stored mark, so that a
        // successor does not wait for its clock to reach a mark stored ahead of need.
        // Never below the mark claimed: the generator started past it.
        let release = match self.finished {
            Some(finished) => Release::Exact(finished.max(self.claimed_mark)),
            None => Release::Stored(stored),
        };
        let deadline = Instant::now() + self.ttl / 2;
        let released = off_runtime(|| {
            let released = self.engine.release(&mut self.claims, release, deadline);
            self.engine.close();
            released
        });
        released.map_err(|error| self.written(error))
    }

    /// The [`LeaseError`] of a failed write.
    fn written(&self, error: WriteError<E::Error>) -> LeaseError<E::Error> {
        match error {
            WriteError::Lost { claim } => LeaseError::Lost {
                namespace: self.namespace.clone(),
                node: self.claims[claim].node,
                generation: self.claims[claim].generation,
            },
            WriteError::Engine(error) => LeaseError::Engine(error),
        }
    }
}

/// The nodes' marks live in the engine; every store renews the claims.
impl<E: Engine> MarkStore for Lease<E> {
    fn mark(&self) -> u64 {
        self.claimed_mark
    }

    fn store(&mut self, unix_ms: u64) -> Result<(), StoreError> {
        let deadline = Instant::now() + self.ttl / 2;
        off_runtime(|| self.engine.store(&mut self.claims, unix_ms, deadline)).map_err(|error| match self
            .written(error)
        {
            lost @ LeaseError::Lost { .. } => StoreError::lost(lost),
            error => StoreError::failed(error),
        })?;
        self.stored = self.stored.map(|stored| stored.max(unix_ms));
        Ok(())
    }

    fn describe(&self) -> String {
        let nodes: Vec<String> = self.nodes.iter().map(u64::to_string).collect();
        format!(
            "the high-water mark of node {} in {} lease namespace {:?}",
            nodes.join(", "),
            <E::Error as EngineError>::ENGINE,
            self.namespace
        )
    }

    fn nodes(&self) -> &[u64] {
        &self.nodes
    }

    fn tenure(&self) -> Tenure {
        Tenure::lease(self.ttl)
    }

    fn lapsed(&self) -> StoreError {
        StoreError::lapsed(LeaseError::<E::Error>::Expired {
            namespace: self.namespace.clone(),
            node: self.node(),
            generation: self.generation(),
        })
    }

    fn finish(&mut self, unix_ms: u64) {
        self.finished = Some(unix_ms);
    }
}

impl<E: Engine> Drop for Lease<E> {
    fn drop(&mut self) {
        // Nothing to report to: a lease not released expires by itself.
        let _ = self.release_now();
    }
}

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

/// Why a claim found fewer free nodes than it asked for; `None` when nothing refuses it (a
/// claimant took a node this one found free: try again).
fn refusal<E>(
    options: &LeaseOptions,
    layout: &Layout,
    shortfall: Shortfall,
    clock_ms: u64,
) -> Option<LeaseError<E>> {
    let namespace = options.namespace.clone();
    let range = match options.node {
        Some(_) => 1,
        None => layout.max_node().saturating_add(1),
    };
    let free = range.saturating_sub(shortfall.held);
    if free == 0 {
        return Some(match options.node {
            Some(node) => LeaseError::NodeTaken { namespace, node },
            None => LeaseError::NoFreeNode {
                namespace,
                max: layout.max_node(),
            },
        });
    }
    if free < options.count {
        return Some(LeaseError::TooFewFreeNodes {
            namespace,
            count: options.count,
            free,
        });
    }
    shortfall.ahead.map(|ahead| LeaseError::Ahead {
        namespace,
        node: ahead.node,
        mark_ms: ahead.high_water_ms,
        clock_ms,
        max_wait: Builder::<MonotonicClock>::MAX_RESTART_WAIT,
    })
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

/// This process's wall clock, Unix ms (0 before 1970).
fn unix_now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, millis)
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
