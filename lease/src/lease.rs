//! A lease: claimed nodes on an engine, and the mark store a generator keeps on them.

use crate::{
    Attempt, CLAIM_TIMEOUT, Claim, ClaimRequest, Claimed, Engine, EngineError, LeaseError, LeaseOptions,
    MAX_TTL, MIN_TTL, NodesError, PassedOver, Release, Shortfall, WriteError, check_namespace,
    default_holder, off_runtime,
};
use atomflake::mark::{MarkStore, StoreError, Tenure};
use atomflake::{Builder, Layout, MonotonicClock};
use std::fmt;
use std::ops::RangeInclusive;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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

/// This process's wall clock, Unix ms (0 before 1970).
pub(crate) fn unix_now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, millis)
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
