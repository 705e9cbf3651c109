//! The seam between the kernel and an engine: what an engine does on its server.

use crate::{EngineError, LeaseOptions, LeaseRow};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::RangeInclusive;
use std::time::{Duration, Instant};

/// How many passed-over nodes a claim reports at most.
const MAX_PASSED_OVER: usize = 16;

/// What a lease engine does on its server; [`Lease`](crate::Lease) does the rest. An engine implements
/// it the way `parking_lot` implements `lock_api::RawMutex`: the guarantees are argued
/// once, in the [crate docs](crate#why-two-holders-never-mint-the-same-id), on what these
/// calls promise.
///
/// Every call may block; [`Lease`](crate::Lease) makes them on a thread of their own, so engines may run
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

    /// Every node of `namespace` that is claimed or has a mark, by node ([`list()`](crate::list()) checks the
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
    /// 16 at most.
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

/// A free node that [`Lease::acquire`](crate::Lease::acquire) passed over because its high-water mark is further
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
