//! Node-ID leases kept in etcd: one ID space across a fleet of processes, on the
//! coordination store a Kubernetes cluster already runs.
//!
//! A [`Lease`] claims node IDs from etcd, and a generator on it (`Builder::mark_store(lease)`,
//! any generator type) keeps them. The lease is a [`MarkStore`] of [`Tenure::lease`]: the
//! fence and the keeper thread are the core crate's, the same as for every store.
//!
//! # Keys
//!
//! Under `/atomflake/lease/NAMESPACE/`, for each node (20 digits, so that keys sort as
//! numbers):
//!
//! - `holder/NODE`: the claim. Its value is the holder's name; it is attached to the
//!   holder's **etcd lease**, so etcd deletes it when the lease expires.
//! - `mark/NODE`: the node's **high-water mark** (Unix ms, decimal): every ID minted on the
//!   node has an earlier time. It has no etcd lease: it outlives every holder.
//!
//! # How it works
//!
//! - **Claim.** [`Lease::acquire`] grants an etcd lease of the lease time, then claims the
//!   lowest free node of the layout's range (or the one asked for) with one transaction:
//!   *if `holder/NODE` does not exist, create it on this etcd lease and read `mark/NODE`*.
//!   Claimants that race for a node are serialized by etcd; the loser reads again and
//!   tries the next. The transaction's revision is the claim's **revision**: etcd's
//!   cluster-wide counter, so no two claims of a node ever share one. Free nodes whose
//!   marks are further ahead of the claimant's clock than a generator waits for are passed
//!   over ([`Lease::passed_over`]). A claim whose answer was lost is found again by its
//!   etcd lease rather than claimed twice.
//! - **Mark and renewal.** The generator stores each mark ahead of need from its keeper
//!   thread. A store is a transaction that writes `mark/NODE` only if `holder/NODE` still
//!   has this claim's create revision and etcd lease (the **fence**: etcd's own tokens,
//!   never a clock) and `mark/NODE` is still at the mod revision this holder last saw (a
//!   compare-and-swap), followed by one keep-alive of the etcd lease. The client sends a
//!   call that gets no answer in time to the next member, and the copy it gave up on can
//!   still be applied later (a frozen leader resumes): that copy finds the mark moved on
//!   and changes nothing, so a node's mark never goes down while a claim holds it. A store
//!   that finds it moved on reads it back in the same transaction and is done when the
//!   mark is already at or past its own. The keeper stores every
//!   quarter of the lease time, and a store that succeeds lets the generator mint until
//!   its *local deadline*: its clock when the store was sent, plus the lease time less a
//!   fifth. Past it, `try_next_id` returns `MintError::Store` with [`LeaseError::Expired`]
//!   until a store succeeds; a store whose fence fails, or whose keep-alive finds the etcd
//!   lease gone, ends minting for good ([`LeaseError::Lost`]).
//! - **Release.** Dropping the generator writes the mark that covers exactly what it minted
//!   and deletes the claim in one fenced transaction, then revokes the etcd lease: the node
//!   is free at once.
//!
//! A successor's claim reads the mark in the same transaction that creates its claim. Its
//! predecessor's claim key was gone by then (released, or deleted with its etcd lease), and
//! every write of the predecessor's was a transaction that found its claim key and the mark
//! it had last seen: etcd applies transactions in one order, so the successor reads a mark
//! at or past every mark the predecessor was told was stored, and the predecessor never
//! minted past that. Whatever the predecessor sends later finds its claim key gone and
//! changes nothing. So two holders of a node never mint the same ID, whenever etcd ends a
//! claim: an etcd lease that ends early costs its holder the node, never an ID.
//!
//! # What it rests on
//!
//! - **etcd's guarantees.** A transaction that etcd acknowledged is committed by a quorum of
//!   members; a minority failing, the leader included, loses none. Restoring a cluster from
//!   a snapshot older than the last stored marks breaks this, as a point-in-time restore
//!   would for any store.
//! - **Nothing about time, for uniqueness.** etcd's leader expires a lease on its own
//!   monotonic clock, normally the lease time after the last keep-alive it received. etcd
//!   3.4 (Debian ships 3.4.23) can revoke leases early when a paused leader resumes (etcd
//!   issues 12528 and 15247, fixed by pull request 16822 in later releases): the holder
//!   then loses its node, and no ID, since the successor starts past every mark the holder
//!   minted under. The holder's own stop before its lease time (its clock must not run more
//!   than a fifth slower than the leader's; the default clock slews at most 1 %) keeps a
//!   node to one minting holder at a time while etcd's expiry is on time.
//!
//! # Examples
//!
//! ```no_run
//! use atomflake::{Builder, Layout};
//! use atomflake_etcd::Endpoints;
//! use atomflake_etcd::lease::{Lease, LeaseOptions};
//!
//! let cluster: Endpoints = "etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379".parse()?;
//! let lease = Lease::acquire(&cluster, &Layout::TWITTER, &LeaseOptions::new("orders"))?;
//! println!("node {} (revision {})", lease.node(), lease.revision());
//! let node = lease.node();
//! let ids = Builder::new(Layout::TWITTER).mark_store(lease).build(node)?;
//! let id = ids.try_next_id()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod error;

pub use error::{LeaseError, MAX_NAMESPACE_LEN};

use crate::Endpoints;
use crate::client::proto::{
    Compare, DeleteRangeRequest, KeyValue, PutRequest, RangeRequest, Request, RequestOp, Response,
    ResponseOp, Target, TxnRequest,
};
use crate::client::{Client, off_runtime};
use atomflake::mark::{MarkStore, NodesError, StoreError, Tenure, default_holder};
use atomflake::{Builder, Layout, MonotonicClock};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The shortest lease time.
pub const MIN_TTL: Duration = Duration::from_secs(1);

/// The longest lease time.
pub const MAX_TTL: Duration = Duration::from_secs(3600);

/// The lease time unless one is given.
pub const DEFAULT_TTL: Duration = LeaseOptions::DEFAULT_TTL;

/// How long a claim may take, retries over a busy node range and a cluster electing a
/// leader included.
const CLAIM_TIMEOUT: Duration = Duration::from_secs(10);

/// What to claim: the same options for every lease engine. The lease time must be within
/// [`MIN_TTL`]`..=`[`MAX_TTL`] in whole seconds (etcd counts lease times in seconds).
pub use atomflake::mark::LeaseOptions;

/// Checks `options` for `layout`: the namespace, the lease time and the nodes.
fn validate(options: &LeaseOptions, layout: &Layout) -> Result<(), LeaseError> {
    check_namespace(&options.namespace)?;
    if !(MIN_TTL..=MAX_TTL).contains(&options.ttl) || options.ttl.subsec_nanos() != 0 {
        return Err(LeaseError::TtlOutOfRange {
            ttl: options.ttl,
            min: MIN_TTL,
            max: MAX_TTL,
        });
    }
    match options.claimable(layout) {
        Ok(_) => Ok(()),
        Err(NodesError::NodeOutOfRange { node, max }) => Err(LeaseError::NodeOutOfRange { node, max }),
        Err(NodesError::CountOutOfRange { count, max }) => Err(LeaseError::CountOutOfRange { count, max }),
    }
}

fn check_namespace(namespace: &str) -> Result<(), LeaseError> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if namespace.is_empty() || namespace.len() > MAX_NAMESPACE_LEN || !namespace.chars().all(allowed) {
        return Err(LeaseError::InvalidNamespace {
            namespace: namespace.to_owned(),
        });
    }
    Ok(())
}

/// The keys of one namespace.
#[derive(Debug, Clone)]
struct Keys {
    holders: String,
    marks: String,
}

impl Keys {
    fn new(namespace: &str) -> Keys {
        Keys {
            holders: format!("/atomflake/lease/{namespace}/holder/"),
            marks: format!("/atomflake/lease/{namespace}/mark/"),
        }
    }

    fn holder(&self, node: u64) -> Vec<u8> {
        format!("{}{node:020}", self.holders).into_bytes()
    }

    fn mark(&self, node: u64) -> Vec<u8> {
        format!("{}{node:020}", self.marks).into_bytes()
    }

    /// Every key under `prefix`.
    fn under(prefix: &str) -> RangeRequest {
        let mut range_end = prefix.as_bytes().to_vec();
        // The prefix ends in '/': the first key past every key that starts with it.
        *range_end.last_mut().expect("a prefix is not empty") += 1;
        RangeRequest {
            key: prefix.as_bytes().to_vec(),
            range_end,
        }
    }

    /// The node of a key under `prefix`.
    fn node(prefix: &str, kv: &KeyValue) -> Result<u64, LeaseError> {
        let key = String::from_utf8_lossy(&kv.key);
        key.strip_prefix(prefix)
            .filter(|digits| digits.len() == 20)
            .and_then(|digits| digits.parse().ok())
            .ok_or_else(|| LeaseError::Corrupt {
                key: key.clone().into_owned(),
                problem: "the key does not end in a node number of 20 digits".to_owned(),
            })
    }

    /// A mark key's value.
    fn mark_value(kv: &KeyValue) -> Result<u64, LeaseError> {
        std::str::from_utf8(&kv.value)
            .ok()
            .and_then(|text| text.parse().ok())
            .ok_or_else(|| LeaseError::Corrupt {
                key: String::from_utf8_lossy(&kv.key).into_owned(),
                problem: "the value is not a mark in decimal Unix ms".to_owned(),
            })
    }
}

/// One claimed node.
#[derive(Debug, Clone, Copy)]
struct Claim {
    node: u64,
    /// The create revision of the node's claim key: the fence, with the etcd lease.
    revision: i64,
    /// The mod revision of the node's mark key as this holder last read or wrote it (0
    /// while the key does not exist). Every write of the mark compares it: a write that
    /// etcd applies after a later one finds the mark moved on and changes nothing.
    mark_revision: i64,
}

/// Claimed node IDs (one unless [`LeaseOptions::nodes`] asks for more), on one etcd lease:
/// held until the lease is dropped, or kept by the generator built on it.
pub struct Lease {
    client: Client,
    keys: Keys,
    namespace: String,
    /// The etcd lease every claim key is attached to.
    etcd_id: i64,
    /// The claims, lowest node first.
    claims: Vec<Claim>,
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

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("namespace", &self.namespace)
            .field("nodes", &self.nodes)
            .field("revision", &self.revision())
            .field("lease_id", &self.etcd_id)
            .field("holder", &self.holder)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

/// A free node that [`Lease::acquire`] passed over because its high-water mark is further
/// ahead of this process's clock than a generator waits for at start-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PassedOver {
    /// The node.
    pub node: u64,
    /// Its high-water mark, Unix ms.
    pub high_water_ms: u64,
}

/// One node of a namespace ([`list`]): claimed now, or claimed once (its mark remains).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseRow {
    /// The node.
    pub node: u64,
    /// Whether a live etcd lease holds it.
    pub live: bool,
    /// The holder's name, while live.
    pub holder: Option<String>,
    /// The claim's revision, while live.
    pub revision: Option<i64>,
    /// The etcd lease holding it, while live.
    pub lease_id: Option<i64>,
    /// The node's high-water mark, Unix ms (0 when none was stored).
    pub high_water_ms: u64,
}

/// How long one call on one member may take for a lease of `ttl`: a quarter of it, within
/// a quarter of a second to five seconds.
fn attempt_time(ttl: Duration) -> Duration {
    (ttl / 4).clamp(Duration::from_millis(250), Duration::from_secs(5))
}

impl Lease {
    /// Claims a node of `layout`'s range in `options`' namespace on the cluster of
    /// `endpoints`: the lowest node no live lease holds, or the one asked for.
    ///
    /// # Errors
    ///
    /// [`LeaseError::NoFreeNode`] (or [`NodeTaken`](LeaseError::NodeTaken) for a node
    /// asked for) when live leases hold them all; [`LeaseError::InvalidNamespace`],
    /// [`TtlOutOfRange`](LeaseError::TtlOutOfRange),
    /// [`NodeOutOfRange`](LeaseError::NodeOutOfRange) and
    /// [`CountOutOfRange`](LeaseError::CountOutOfRange) for bad options;
    /// [`LeaseError::Etcd`] when no member answers.
    pub fn acquire(
        endpoints: &Endpoints,
        layout: &Layout,
        options: &LeaseOptions,
    ) -> Result<Lease, LeaseError> {
        validate(options, layout)?;
        off_runtime(|| {
            let mut client = Client::new(endpoints, attempt_time(options.ttl));
            let deadline = Instant::now() + CLAIM_TIMEOUT;
            let ttl_s = i64::try_from(options.ttl.as_secs()).unwrap_or(i64::MAX);
            let grant = client
                .grant(ttl_s, left(deadline))
                .map_err(LeaseError::etcd("grant an etcd lease"))?;
            if !grant.error.is_empty() {
                return Err(LeaseError::Etcd {
                    action: "grant an etcd lease",
                    cause: grant.error,
                });
            }
            let claimed = claim(&mut client, grant.id, layout, options, deadline);
            match claimed {
                Ok(claimed) => Ok(Lease {
                    client,
                    keys: Keys::new(&options.namespace),
                    namespace: options.namespace.clone(),
                    etcd_id: grant.id,
                    nodes: claimed.claims.iter().map(|claim| claim.node).collect(),
                    claims: claimed.claims,
                    holder: claimed.holder,
                    ttl: options.ttl,
                    passed_over: claimed.passed_over,
                    claimed_mark: claimed.mark,
                    stored: Some(claimed.mark),
                    finished: None,
                }),
                Err(error) => {
                    // Whatever a claim whose answer was lost took goes with the etcd lease.
                    let _ = client.revoke(grant.id, attempt_time(options.ttl));
                    Err(error)
                }
            }
        })
    }

    /// The free nodes this claim passed over because their high-water marks are further
    /// ahead of this process's clock than a generator waits for at start-up (at most 16,
    /// the lowest first). Empty for a node asked for with [`LeaseOptions::node`].
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

    /// The claim's revision: etcd's revision when the claim was made, which no other claim
    /// of the node has, and which grows from claim to claim. The fence, with the etcd lease.
    pub fn revision(&self) -> i64 {
        self.claims[0].revision
    }

    /// The etcd lease that holds the claim.
    pub fn lease_id(&self) -> i64 {
        self.etcd_id
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The holder's name in etcd.
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

    /// Frees the nodes now: stores the last mark, deletes the claims and revokes the etcd
    /// lease. Dropping the lease (or the generator built on it) does the same, and
    /// reports nothing.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Lost`] when etcd no longer holds the claim; [`LeaseError::Etcd`] when
    /// no member answers (the etcd lease then expires by itself).
    pub fn release(mut self) -> Result<(), LeaseError> {
        off_runtime(|| self.release_now())
    }

    fn release_now(&mut self) -> Result<(), LeaseError> {
        let Some(stored) = self.stored.take() else {
            return Ok(());
        };
        // The exact mark of what was minted, when known: below the stored mark, so that a
        // successor does not wait for its clock to reach a mark stored ahead of need.
        // Never below the mark claimed: the generator started past it.
        let mark = self
            .finished
            .map_or(stored, |finished| finished.max(self.claimed_mark));
        let released = self.write_marks(mark, Write::Release, Instant::now() + self.ttl / 2);
        // The claims are gone either way once the etcd lease is: revoke it whatever the
        // transaction said.
        let _ = self.client.revoke(self.etcd_id, self.ttl / 2);
        released
    }

    /// Sets every node's mark to `mark` (and for a [`Write::Release`] deletes the claims)
    /// in one transaction that compares both what this holder holds and what it last saw:
    /// each claim key's create revision and etcd lease, and each mark key's mod revision.
    ///
    /// A store sent before this one and applied by etcd only now (an attempt the client
    /// gave up on, on a member that was slow or frozen) finds the mark moved on, and
    /// changes nothing: so the mark never goes down while the claim holds, whatever order
    /// etcd applies this holder's writes in. When this transaction is the one that finds
    /// the mark moved on (such a store of this holder's landed first), it reads the keys
    /// back in the same transaction: a claim gone is [`LeaseError::Lost`]; otherwise it
    /// takes the mark's new revision, and a store is done if every mark is already at or
    /// past `mark`, or tries again.
    fn write_marks(&mut self, mark: u64, write: Write, deadline: Instant) -> Result<(), LeaseError> {
        let action = match write {
            Write::Store => "store the mark",
            Write::Release => "release",
        };
        loop {
            let answer = self
                .client
                .txn(self.fenced(mark, write), left(deadline))
                .map_err(LeaseError::etcd(action))?;
            if answer.succeeded {
                let revision = answer.header.map_or(0, |header| header.revision);
                for claim in &mut self.claims {
                    claim.mark_revision = revision;
                }
                return Ok(());
            }
            let read = ranges(answer.responses);
            let mut past = true;
            for i in 0..self.claims.len() {
                let Claim { node, revision, .. } = self.claims[i];
                let holder = self.keys.holder(node);
                let held = read
                    .iter()
                    .any(|kv| kv.key == holder && kv.create_revision == revision && kv.lease == self.etcd_id);
                if !held {
                    return Err(self.lost());
                }
                let key = self.keys.mark(node);
                let found = read.iter().find(|kv| kv.key == key);
                self.claims[i].mark_revision = found.map_or(0, |kv| kv.mod_revision);
                past &= match found {
                    Some(kv) => Keys::mark_value(kv)? >= mark,
                    None => false,
                };
            }
            if past && write == Write::Store {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(LeaseError::Etcd {
                    action,
                    cause: "the mark kept moving under this holder's own late writes".to_owned(),
                });
            }
        }
    }

    /// The transaction of [`write_marks`](Lease::write_marks): if etcd holds every claim
    /// of this lease and every mark is at the revision this holder last saw, set the marks
    /// (and delete the claims, for a release); otherwise read the claim and mark keys.
    fn fenced(&self, mark: u64, write: Write) -> TxnRequest {
        let compare = self
            .claims
            .iter()
            .flat_map(|claim| {
                let holder = self.keys.holder(claim.node);
                [
                    Compare {
                        result: Compare::EQUAL,
                        target: Compare::CREATE,
                        key: holder.clone(),
                        target_union: Some(Target::CreateRevision(claim.revision)),
                    },
                    Compare {
                        result: Compare::EQUAL,
                        target: Compare::LEASE,
                        key: holder,
                        target_union: Some(Target::Lease(self.etcd_id)),
                    },
                    Compare {
                        result: Compare::EQUAL,
                        target: Compare::MOD,
                        key: self.keys.mark(claim.node),
                        target_union: Some(Target::ModRevision(claim.mark_revision)),
                    },
                ]
            })
            .collect();
        let op = |request| RequestOp {
            request: Some(request),
        };
        let mut success: Vec<RequestOp> = self
            .claims
            .iter()
            .map(|claim| {
                op(Request::Put(PutRequest {
                    key: self.keys.mark(claim.node),
                    value: mark.to_string().into_bytes(),
                    lease: 0,
                }))
            })
            .collect();
        if write == Write::Release {
            success.extend(self.claims.iter().map(|claim| {
                op(Request::DeleteRange(DeleteRangeRequest {
                    key: self.keys.holder(claim.node),
                }))
            }));
        }
        let failure = self
            .claims
            .iter()
            .flat_map(|claim| [self.keys.holder(claim.node), self.keys.mark(claim.node)])
            .map(|key| {
                op(Request::Range(RangeRequest {
                    key,
                    range_end: Vec::new(),
                }))
            })
            .collect();
        TxnRequest {
            compare,
            success,
            failure,
        }
    }

    fn lost(&self) -> LeaseError {
        LeaseError::Lost {
            namespace: self.namespace.clone(),
            node: self.node(),
            revision: self.revision(),
        }
    }
}

/// What [`Lease::write_marks`] writes: a mark, or a mark and the end of the claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Write {
    Store,
    Release,
}

/// The keys read by the range operations of a transaction's answer, in order.
fn ranges(responses: Vec<ResponseOp>) -> Vec<KeyValue> {
    responses
        .into_iter()
        .filter_map(|response| match response.response {
            Some(Response::Range(range)) => Some(range.kvs),
            None => None,
        })
        .flatten()
        .collect()
}

/// What a claim took.
struct Claimed {
    claims: Vec<Claim>,
    holder: String,
    passed_over: Vec<PassedOver>,
    mark: u64,
}

/// Claims `options.count` nodes on etcd lease `lease_id`, trying again while claimants race
/// for the same nodes, until `deadline`.
fn claim(
    client: &mut Client,
    lease_id: i64,
    layout: &Layout,
    options: &LeaseOptions,
    deadline: Instant,
) -> Result<Claimed, LeaseError> {
    let keys = Keys::new(&options.namespace);
    let holder = options.holder.clone().unwrap_or_else(default_holder);
    let (low, high) = match options.node {
        Some(node) => (node, node),
        None => (0, layout.max_node()),
    };
    // A node asked for is claimed whatever its mark: the generator built on it says how far
    // ahead the mark is. Otherwise nodes whose marks this clock cannot reach within the
    // start-up wait are passed over, so that one host whose clock ran ahead cannot make
    // every claimant take and give back the same node.
    let clock_ms = unix_now_ms();
    let reach = match options.node {
        Some(_) => u64::MAX,
        None => clock_ms.saturating_add(millis(Builder::<MonotonicClock>::MAX_RESTART_WAIT)),
    };
    let action = "claim a node";
    loop {
        let holders = client
            .range(Keys::under(&keys.holders), left(deadline))
            .map_err(LeaseError::etcd(action))?;
        let marks = client
            .range(Keys::under(&keys.marks), left(deadline))
            .map_err(LeaseError::etcd(action))?;
        let mut mark_of = BTreeMap::new();
        let mut mark_revision_of = BTreeMap::new();
        for kv in &marks.kvs {
            let node = Keys::node(&keys.marks, kv)?;
            mark_of.insert(node, Keys::mark_value(kv)?);
            mark_revision_of.insert(node, kv.mod_revision);
        }
        let mut live = BTreeSet::new();
        let mut ours = Vec::new();
        for kv in &holders.kvs {
            let node = Keys::node(&keys.holders, kv)?;
            live.insert(node);
            if kv.lease == lease_id {
                // A claim of this lease whose answer was lost on the way.
                ours.push(Claim {
                    node,
                    revision: kv.create_revision,
                    mark_revision: mark_revision_of.get(&node).copied().unwrap_or(0),
                });
            }
        }
        if !ours.is_empty() {
            let mark = ours
                .iter()
                .map(|claim| mark_of.get(&claim.node).copied().unwrap_or(0))
                .max();
            return Ok(Claimed {
                claims: ours,
                holder,
                passed_over: Vec::new(),
                mark: mark.unwrap_or(0),
            });
        }
        let wanted = usize::try_from(options.count).unwrap_or(usize::MAX);
        let (chosen, passed_over) = choose(low..=high, wanted, &live, &mark_of, reach);
        if chosen.len() < wanted {
            return Err(refusal(options, layout, low, high, &live, &passed_over, clock_ms));
        }
        let txn = claim_txn(&keys, &chosen, &holder, lease_id);
        match client.txn(txn, left(deadline)) {
            Ok(answer) if answer.succeeded => {
                let revision = answer.header.map_or(0, |header| header.revision);
                let mut mark = 0;
                let mut mark_revision_of = BTreeMap::new();
                for kv in ranges(answer.responses) {
                    mark = mark.max(Keys::mark_value(&kv)?);
                    mark_revision_of.insert(Keys::node(&keys.marks, &kv)?, kv.mod_revision);
                }
                let claims = chosen
                    .iter()
                    .map(|&node| Claim {
                        node,
                        revision,
                        mark_revision: mark_revision_of.get(&node).copied().unwrap_or(0),
                    })
                    .collect();
                return Ok(Claimed {
                    claims,
                    holder,
                    passed_over,
                    mark,
                });
            }
            Err(error) if Instant::now() >= deadline => return Err(LeaseError::etcd(action)(error)),
            // Another claimant took a node this one found free, or the answer was lost
            // after etcd applied the claim (the next read finds it by its etcd lease): read
            // again.
            Ok(_) | Err(_) => {}
        }
        if Instant::now() >= deadline {
            return Err(LeaseError::Etcd {
                action,
                cause: format!("claimants kept taking the free nodes first for {CLAIM_TIMEOUT:?}"),
            });
        }
    }
}

/// A transaction that creates the claim keys of `chosen` on etcd lease `lease_id`, only
/// if none of them exists, and reads the nodes' marks.
fn claim_txn(keys: &Keys, chosen: &[u64], holder: &str, lease_id: i64) -> TxnRequest {
    let compare = chosen
        .iter()
        .map(|&node| Compare {
            result: Compare::EQUAL,
            target: Compare::CREATE,
            key: keys.holder(node),
            target_union: Some(Target::CreateRevision(0)),
        })
        .collect();
    let puts = chosen.iter().map(|&node| RequestOp {
        request: Some(Request::Put(PutRequest {
            key: keys.holder(node),
            value: holder.as_bytes().to_vec(),
            lease: lease_id,
        })),
    });
    let reads = chosen.iter().map(|&node| RequestOp {
        request: Some(Request::Range(RangeRequest {
            key: keys.mark(node),
            range_end: Vec::new(),
        })),
    });
    TxnRequest {
        compare,
        success: puts.chain(reads).collect(),
        failure: Vec::new(),
    }
}

/// The `wanted` lowest nodes of `range` that are not `live` and whose marks are at most
/// `reach` (fewer when there are not enough), and the free nodes passed over because their
/// marks are past it (the lowest 16).
fn choose(
    range: std::ops::RangeInclusive<u64>,
    wanted: usize,
    live: &BTreeSet<u64>,
    mark_of: &BTreeMap<u64, u64>,
    reach: u64,
) -> (Vec<u64>, Vec<PassedOver>) {
    let mut chosen = Vec::new();
    let mut passed_over = Vec::new();
    for node in range {
        if chosen.len() == wanted {
            break;
        }
        if live.contains(&node) {
            continue;
        }
        let mark = mark_of.get(&node).copied().unwrap_or(0);
        if mark <= reach {
            chosen.push(node);
        } else if passed_over.len() < 16 {
            passed_over.push(PassedOver {
                node,
                high_water_ms: mark,
            });
        }
    }
    (chosen, passed_over)
}

/// Why a claim found fewer free nodes than it asked for.
fn refusal(
    options: &LeaseOptions,
    layout: &Layout,
    low: u64,
    high: u64,
    live: &BTreeSet<u64>,
    passed_over: &[PassedOver],
    clock_ms: u64,
) -> LeaseError {
    let namespace = options.namespace.clone();
    let held = live.range(low..=high).count() as u64;
    let free = (high - low).saturating_add(1).saturating_sub(held);
    if free == 0 {
        return match options.node {
            Some(node) => LeaseError::NodeTaken { namespace, node },
            None => LeaseError::NoFreeNode {
                namespace,
                max: layout.max_node(),
            },
        };
    }
    match passed_over.first() {
        // Enough free nodes, but too many of them with marks ahead of this clock.
        Some(ahead) if free >= options.count => LeaseError::Ahead {
            namespace,
            node: ahead.node,
            mark_ms: ahead.high_water_ms,
            clock_ms,
            max_wait: Builder::<MonotonicClock>::MAX_RESTART_WAIT,
        },
        _ => LeaseError::TooFewFreeNodes {
            namespace,
            count: options.count,
            free,
        },
    }
}

/// The node's mark lives in `mark/NODE`; every store renews the etcd lease.
impl MarkStore for Lease {
    fn mark(&self) -> u64 {
        self.claimed_mark
    }

    fn store(&mut self, unix_ms: u64) -> Result<(), StoreError> {
        off_runtime(|| {
            let deadline = Instant::now() + self.ttl / 2;
            self.write_marks(unix_ms, Write::Store, deadline)
                .map_err(|error| match error {
                    LeaseError::Lost { .. } => StoreError::lost(error),
                    error => StoreError::failed(error),
                })?;
            let alive = self
                .client
                .keep_alive(self.etcd_id, left(deadline))
                .map_err(|error| StoreError::failed(LeaseError::etcd("renew the etcd lease")(error)))?;
            if alive.ttl <= 0 {
                return Err(StoreError::lost(self.lost()));
            }
            self.stored = self.stored.map(|stored| stored.max(unix_ms));
            Ok(())
        })
    }

    fn describe(&self) -> String {
        let nodes: Vec<String> = self.nodes.iter().map(u64::to_string).collect();
        format!(
            "the high-water mark of node {} in etcd lease namespace {:?}",
            nodes.join(", "),
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
        StoreError::lapsed(LeaseError::Expired {
            namespace: self.namespace.clone(),
            node: self.node(),
            revision: self.revision(),
        })
    }

    fn finish(&mut self, unix_ms: u64) {
        self.finished = Some(unix_ms);
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // Nothing to report to: a lease not released expires by itself.
        let _ = off_runtime(|| self.release_now());
    }
}

/// Every node of `namespace` that is claimed or has a mark, by node.
///
/// # Errors
///
/// [`LeaseError::InvalidNamespace`]; [`LeaseError::Etcd`] when no member answers;
/// [`LeaseError::Corrupt`] for a key of the namespace that no lease wrote.
pub fn list(endpoints: &Endpoints, namespace: &str) -> Result<Vec<LeaseRow>, LeaseError> {
    check_namespace(namespace)?;
    off_runtime(|| {
        let action = "list leases";
        let keys = Keys::new(namespace);
        let mut client = Client::new(endpoints, attempt_time(DEFAULT_TTL));
        let within = CLAIM_TIMEOUT;
        let holders = client
            .range(Keys::under(&keys.holders), within)
            .map_err(LeaseError::etcd(action))?;
        let marks = client
            .range(Keys::under(&keys.marks), within)
            .map_err(LeaseError::etcd(action))?;
        let mut rows: BTreeMap<u64, LeaseRow> = BTreeMap::new();
        let row = |node| LeaseRow {
            node,
            live: false,
            holder: None,
            revision: None,
            lease_id: None,
            high_water_ms: 0,
        };
        for kv in &marks.kvs {
            let node = Keys::node(&keys.marks, kv)?;
            rows.entry(node).or_insert_with(|| row(node)).high_water_ms = Keys::mark_value(kv)?;
        }
        for kv in &holders.kvs {
            let node = Keys::node(&keys.holders, kv)?;
            let entry = rows.entry(node).or_insert_with(|| row(node));
            entry.live = true;
            entry.holder = Some(String::from_utf8_lossy(&kv.value).into_owned());
            entry.revision = Some(kv.create_revision);
            entry.lease_id = Some(kv.lease);
        }
        Ok(rows.into_values().collect())
    })
}

/// The time left until `deadline` (zero once past).
fn left(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

/// This process's wall clock, Unix ms (0 before 1970).
fn unix_now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, millis)
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nothing listens on port 9 (discard) of loopback: bad options are refused before any
    /// call.
    fn nowhere() -> Endpoints {
        "etcd://127.0.0.1:9".parse().unwrap()
    }

    fn refused(options: &LeaseOptions) -> LeaseError {
        Lease::acquire(&nowhere(), &Layout::TWITTER, options).unwrap_err()
    }

    #[test]
    fn bad_options_are_exact_errors() {
        for namespace in ["", "a/b", "ns with space", &"n".repeat(MAX_NAMESPACE_LEN + 1)] {
            assert_eq!(
                refused(&LeaseOptions::new(namespace)),
                LeaseError::InvalidNamespace {
                    namespace: namespace.to_owned()
                }
            );
        }
        for ttl in [
            Duration::ZERO,
            Duration::from_millis(1_500),
            Duration::from_secs(3601),
        ] {
            assert_eq!(
                refused(&LeaseOptions::new("ns").ttl(ttl)),
                LeaseError::TtlOutOfRange {
                    ttl,
                    min: MIN_TTL,
                    max: MAX_TTL
                }
            );
        }
        assert_eq!(
            refused(&LeaseOptions::new("ns").node(1024)),
            LeaseError::NodeOutOfRange {
                node: 1024,
                max: 1023
            }
        );
        assert_eq!(
            refused(&LeaseOptions::new("ns").nodes(1025)),
            LeaseError::CountOutOfRange {
                count: 1025,
                max: 1024
            }
        );
        assert_eq!(
            refused(&LeaseOptions::new("ns").node(3).nodes(2)),
            LeaseError::CountOutOfRange { count: 2, max: 1 }
        );
        assert_eq!(
            LeaseError::TtlOutOfRange {
                ttl: Duration::from_millis(1_500),
                min: MIN_TTL,
                max: MAX_TTL
            }
            .to_string(),
            "etcd lease time 1.5s is out of range: allowed whole seconds in 1s..=3600s"
        );
    }

    #[test]
    fn a_cluster_that_is_not_there_is_an_etcd_error_naming_the_member() {
        let error = Lease::acquire(
            &nowhere(),
            &Layout::TWITTER,
            &LeaseOptions::new("ns").ttl(MIN_TTL),
        )
        .unwrap_err();
        let LeaseError::Etcd { action, cause } = &error else {
            panic!("{error}");
        };
        assert_eq!(*action, "grant an etcd lease");
        assert!(cause.starts_with("127.0.0.1:9: Unavailable: "), "{cause}");
        assert!(error.is_transient());
    }

    #[test]
    fn keys_sort_as_numbers_and_read_back() {
        let keys = Keys::new("ns");
        assert_eq!(keys.holder(7), b"/atomflake/lease/ns/holder/00000000000000000007");
        assert!(keys.mark(9) < keys.mark(10));
        let range = Keys::under(&keys.marks);
        assert_eq!(range.range_end, b"/atomflake/lease/ns/mark0");
        let kv = |key: &[u8], value: &[u8]| KeyValue {
            key: key.to_vec(),
            value: value.to_vec(),
            ..KeyValue::default()
        };
        assert_eq!(
            Keys::node(&keys.marks, &kv(&keys.mark(u64::MAX), b"")).unwrap(),
            u64::MAX
        );
        assert_eq!(
            Keys::mark_value(&kv(&keys.mark(1), b"1700000000000")).unwrap(),
            1_700_000_000_000
        );
        assert_eq!(
            Keys::mark_value(&kv(&keys.mark(1), b"-1")).unwrap_err(),
            LeaseError::Corrupt {
                key: "/atomflake/lease/ns/mark/00000000000000000001".to_owned(),
                problem: "the value is not a mark in decimal Unix ms".to_owned()
            }
        );
        assert!(matches!(
            Keys::node(&keys.marks, &kv(b"/atomflake/lease/ns/mark/7", b"1")),
            Err(LeaseError::Corrupt { .. })
        ));
    }
}
