//! Node-ID leases kept in etcd: one ID space across a fleet of processes, on the
//! coordination store a Kubernetes cluster already runs.
//!
//! What every lease does is told in [`atomflake_lease`]; [`Lease`] here is its lease on the
//! [`Etcd`] engine. Here is how etcd keeps a claim: the key `holder/NODE` on the
//! holder's **etcd lease**, which etcd deletes when that lease expires, and the node's mark
//! in `mark/NODE`, on no etcd lease, so that it outlives every holder (both under
//! `/atomflake/lease/NAMESPACE/`; the crate's README draws the layout).
//!
//! # The engine's part
//!
//! - **Claim.** An etcd lease of the lease time is granted, then one transaction: *if no
//!   `holder/NODE` of the chosen nodes exists, create them on this etcd lease and read
//!   their `mark/NODE`*. Claimants that race are serialized by etcd; a loser reads again
//!   and tries the next nodes. The transaction's revision is the claim's generation; the
//!   claim key's create revision and etcd lease are its token. A claim whose answer was
//!   lost (a member died mid-call) is found again by its etcd lease rather than claimed
//!   twice.
//! - **Store.** A transaction that writes every `mark/NODE` only if each `holder/NODE`
//!   still has this claim's create revision and etcd lease and each `mark/NODE` is still
//!   at the mod revision this holder last saw (a compare-and-swap), then one keep-alive of
//!   the etcd lease. The client sends a call that gets no answer in time to the next member,
//!   and the copy it gave up on can still be applied later (a frozen leader resumes): that
//!   copy finds the mark moved on and changes nothing. A store that finds the mark moved on
//!   reads the keys back in the same transaction: a claim gone is lost; otherwise one of
//!   this holder's own late stores landed, and the store is done when the mark is at or
//!   past its own, or tries again. A keep-alive that finds the etcd lease gone is lost.
//! - **Release.** The same transaction, which also deletes the claim keys; then the etcd
//!   lease is revoked.
//!
//! # What it rests on
//!
//! - **etcd's guarantees.** A transaction that etcd acknowledged is committed by a quorum of
//!   members; a minority failing, the leader included, loses none. Transactions are
//!   linearizable: etcd applies them in one order.
//! - **Nothing about time, for uniqueness.** etcd's leader expires a lease on its own
//!   monotonic clock, normally the lease time after the last keep-alive it received; a
//!   lease it revokes early costs its holder the node, never an ID.
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
//! println!("node {} (generation {})", lease.node(), lease.generation());
//! let node = lease.node();
//! let ids = Builder::new(Layout::TWITTER).mark_store(lease).build(node)?;
//! let id = ids.try_next_id()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod error;
mod keys;

pub use atomflake_lease::{
    CLAIM_TIMEOUT, LeaseOptions, LeaseRow, MAX_NAMESPACE_LEN, MAX_TTL, MIN_TTL, PassedOver,
};
pub use error::{EtcdError, LeaseError};

use crate::Endpoints;
use crate::client::Client;
use crate::client::proto::{
    Compare, DeleteRangeRequest, PutRequest, RangeRequest, Request, RequestOp, Target, TxnRequest,
};
use atomflake_lease::{
    Attempt, CallFailed, Claim, ClaimRequest, Claimed, Engine, Release, Write, WriteError, Written, choose,
};
use keys::{Keys, ranges};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// An [`atomflake_lease::Lease`] on etcd keys.
pub type Lease = atomflake_lease::Lease<Etcd>;

/// This engine's entry in an [`atomflake_lease::Registry`]: `etcd://` and, over TLS, `etcds://`.
pub const DRIVER: atomflake_lease::Driver = atomflake_lease::Driver::of::<Etcd>();

impl atomflake_lease::UrlEngine for Etcd {
    const SCHEMES: &'static [&'static str] = &["etcd", "etcds"];
}

/// The etcd lease engine: a client of the cluster, and the etcd lease every claim key of a
/// [`Lease`] is attached to.
pub struct Etcd {
    client: Client,
    keys: Keys,
    /// The etcd lease.
    lease_id: i64,
    ttl: Duration,
}

impl std::fmt::Debug for Etcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Etcd")
            .field("lease_id", &self.lease_id)
            .finish_non_exhaustive()
    }
}

impl Etcd {
    /// The etcd lease that holds the claims.
    pub fn lease_id(&self) -> i64 {
        self.lease_id
    }
}

/// How long one call on one member may take for a lease of `ttl`: a quarter of it, within
/// a quarter of a second to five seconds.
fn attempt_time(ttl: Duration) -> Duration {
    (ttl / 4).clamp(Duration::from_millis(250), Duration::from_secs(5))
}

impl Engine for Etcd {
    type Config = Endpoints;
    type Error = EtcdError;
    /// The mod revision of the node's mark key as this holder last read or wrote it (0 while
    /// the key does not exist): every write of the mark compares it. The claim's generation
    /// is the create revision of its claim key: the token, with the etcd lease.
    type Fence = i64;

    /// A store compares three things per node (the claim key's create revision and etcd
    /// lease, the mark's mod revision) in one transaction, and etcd refuses a transaction of
    /// more than 128 compares (its default `--max-txn-ops`).
    const MAX_NODES: u64 = 42;

    fn connect(
        endpoints: &Endpoints,
        options: &LeaseOptions,
        deadline: Instant,
    ) -> Result<Self, Self::Error> {
        let (namespace, ttl) = (options.namespace.as_str(), options.ttl);
        let action = "grant an etcd lease";
        let mut client = Client::new(endpoints, attempt_time(ttl), &Keys::prefix(namespace))
            .map_err(EtcdError::call(action))?;
        let ttl_s = i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX);
        let grant = client
            .grant(ttl_s, left(deadline))
            .map_err(EtcdError::call(action))?;
        if !grant.error.is_empty() {
            return Err(EtcdError::Call(CallFailed::new(action, grant.error)));
        }
        Ok(Etcd {
            client,
            keys: Keys::new(namespace),
            lease_id: grant.id,
            ttl,
        })
    }

    fn claim(&mut self, request: &ClaimRequest<'_>) -> Result<Attempt<i64>, EtcdError> {
        let action = "claim a node";
        let deadline = request.deadline;
        let keys = &self.keys;
        let holders = self
            .client
            .range(Keys::under(&keys.holders), left(deadline))
            .map_err(EtcdError::call(action))?;
        let marks = self
            .client
            .range(Keys::under(&keys.marks), left(deadline))
            .map_err(EtcdError::call(action))?;
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
            if kv.lease == self.lease_id {
                // A claim of this lease whose answer was lost on the way.
                ours.push(Claim {
                    node,
                    generation: kv.create_revision,
                    fence: mark_revision_of.get(&node).copied().unwrap_or(0),
                });
            }
        }
        if !ours.is_empty() {
            let mark = ours
                .iter()
                .map(|claim| mark_of.get(&claim.node).copied().unwrap_or(0));
            return Ok(Attempt::Claimed(Claimed {
                mark: mark.max().unwrap_or(0),
                claims: ours,
                passed_over: Vec::new(),
            }));
        }
        let (chosen, passed_over) = match choose(request, &live, &mark_of) {
            Ok(chosen) => chosen,
            Err(shortfall) => return Ok(Attempt::Short(shortfall)),
        };
        let txn = claim_txn(keys, &chosen, request.holder, self.lease_id);
        match self.client.txn(txn, left(deadline)) {
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
                        generation: revision,
                        fence: mark_revision_of.get(&node).copied().unwrap_or(0),
                    })
                    .collect();
                Ok(Attempt::Claimed(Claimed {
                    claims,
                    mark,
                    passed_over,
                }))
            }
            Err(error) if Instant::now() >= deadline => Err(EtcdError::call(action)(error)),
            // Another claimant took a node this one found free, or the answer was lost
            // after etcd applied the claim (the next read finds it by its etcd lease).
            Ok(_) | Err(_) => Ok(Attempt::Raced),
        }
    }

    fn store(&mut self, claims: &mut [Claim<i64>], mark: u64, deadline: Instant) -> Written<EtcdError> {
        self.write_marks(claims, mark, Write::Store, deadline)?;
        let alive = self
            .client
            .keep_alive(self.lease_id, left(deadline))
            .map_err(EtcdError::call("renew the etcd lease"))?;
        if alive.ttl <= 0 {
            return Err(WriteError::Lost { claim: 0 });
        }
        Ok(())
    }

    fn release(
        &mut self,
        claims: &mut [Claim<i64>],
        release: Release,
        deadline: Instant,
    ) -> Written<EtcdError> {
        self.write_marks(claims, release.mark(), Write::Release, deadline)
    }

    fn list(endpoints: &Endpoints, namespace: &str) -> Result<Vec<LeaseRow>, EtcdError> {
        let action = "list leases";
        let keys = Keys::new(namespace);
        let mut client = Client::new(
            endpoints,
            attempt_time(LeaseOptions::DEFAULT_TTL),
            &Keys::prefix(namespace),
        )
        .map_err(EtcdError::call(action))?;
        let holders = client
            .range(Keys::under(&keys.holders), CLAIM_TIMEOUT)
            .map_err(EtcdError::call(action))?;
        let marks = client
            .range(Keys::under(&keys.marks), CLAIM_TIMEOUT)
            .map_err(EtcdError::call(action))?;
        let marks = marks
            .kvs
            .iter()
            .map(|kv| Ok((Keys::node(&keys.marks, kv)?, Keys::mark_value(kv)?)))
            .collect::<Result<Vec<_>, EtcdError>>()?;
        let claims = holders
            .kvs
            .iter()
            .map(|kv| {
                let holder = String::from_utf8_lossy(&kv.value).into_owned();
                Ok((Keys::node(&keys.holders, kv)?, holder, kv.create_revision))
            })
            .collect::<Result<Vec<_>, EtcdError>>()?;
        Ok(LeaseRow::merge(marks, claims))
    }

    /// Revokes the etcd lease: whatever a claim whose answer was lost took goes with it.
    fn close(&mut self) {
        let _ = self.client.revoke(self.lease_id, self.ttl / 2);
    }
}

impl Etcd {
    /// Sets every node's mark to `mark` (and for a [`Write::Release`] deletes the claims)
    /// in one transaction that compares both what this holder holds and what it last saw:
    /// each claim key's create revision and etcd lease, and each mark key's mod revision.
    /// When it finds the mark moved on (a late store of this holder's landed first), it
    /// reads the keys back in the same transaction: a claim gone is lost; otherwise it
    /// takes the mark's new revision, and a store is done if every mark is already at or
    /// past `mark`, or tries again.
    fn write_marks(
        &mut self,
        claims: &mut [Claim<i64>],
        mark: u64,
        write: Write,
        deadline: Instant,
    ) -> Written<EtcdError> {
        let action = write.action();
        loop {
            let answer = self
                .client
                .txn(self.fenced(claims, mark, write), left(deadline))
                .map_err(EtcdError::call(action))?;
            if answer.succeeded {
                let revision = answer.header.map_or(0, |header| header.revision);
                for claim in claims.iter_mut() {
                    claim.fence = revision;
                }
                return Ok(());
            }
            let read = ranges(answer.responses);
            let mut past = true;
            for (i, claim) in claims.iter_mut().enumerate() {
                let holder = self.keys.holder(claim.node);
                let held = read.iter().any(|kv| {
                    kv.key == holder && kv.create_revision == claim.generation && kv.lease == self.lease_id
                });
                if !held {
                    return Err(WriteError::Lost { claim: i });
                }
                let key = self.keys.mark(claim.node);
                let found = read.iter().find(|kv| kv.key == key);
                claim.fence = found.map_or(0, |kv| kv.mod_revision);
                past &= match found {
                    Some(kv) => Keys::mark_value(kv)? >= mark,
                    None => false,
                };
            }
            if past && write == Write::Store {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(WriteError::Engine(EtcdError::Call(CallFailed::new(
                    action,
                    "the mark kept moving under this holder's own late writes",
                ))));
            }
        }
    }

    /// The transaction of [`write_marks`](Etcd::write_marks): if etcd holds every claim and
    /// every mark is at the revision this holder last saw, set the marks (and delete the
    /// claims, for a release); otherwise read the claim and mark keys.
    fn fenced(&self, claims: &[Claim<i64>], mark: u64, write: Write) -> TxnRequest {
        let compare = claims
            .iter()
            .flat_map(|claim| {
                let holder = self.keys.holder(claim.node);
                [
                    compare(
                        Compare::CREATE,
                        holder.clone(),
                        Target::CreateRevision(claim.generation),
                    ),
                    compare(Compare::LEASE, holder, Target::Lease(self.lease_id)),
                    compare(
                        Compare::MOD,
                        self.keys.mark(claim.node),
                        Target::ModRevision(claim.fence),
                    ),
                ]
            })
            .collect();
        let mut success: Vec<RequestOp> = claims
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
            success.extend(claims.iter().map(|claim| {
                op(Request::DeleteRange(DeleteRangeRequest {
                    key: self.keys.holder(claim.node),
                }))
            }));
        }
        let failure = claims
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
}

/// A comparison for equality.
fn compare(target: i32, key: Vec<u8>, value: Target) -> Compare {
    Compare {
        result: Compare::EQUAL,
        target,
        key,
        target_union: Some(value),
    }
}

fn op(request: Request) -> RequestOp {
    RequestOp {
        request: Some(request),
    }
}

/// A transaction that creates the claim keys of `chosen` on etcd lease `lease_id`, only
/// if none of them exists, and reads the nodes' marks.
fn claim_txn(keys: &Keys, chosen: &[u64], holder: &str, lease_id: i64) -> TxnRequest {
    let compare = chosen
        .iter()
        .map(|&node| compare(Compare::CREATE, keys.holder(node), Target::CreateRevision(0)))
        .collect();
    let puts = chosen.iter().map(|&node| {
        op(Request::Put(PutRequest {
            key: keys.holder(node),
            value: holder.as_bytes().to_vec(),
            lease: lease_id,
        }))
    });
    let reads = chosen.iter().map(|&node| {
        op(Request::Range(RangeRequest {
            key: keys.mark(node),
            range_end: Vec::new(),
        }))
    });
    TxnRequest {
        compare,
        success: puts.chain(reads).collect(),
        failure: Vec::new(),
    }
}

/// Every node of `namespace` that is claimed or has a mark, by node: the generation is the
/// claim's revision.
///
/// # Errors
///
/// [`LeaseError::InvalidNamespace`](atomflake_lease::LeaseError::InvalidNamespace);
/// [`EtcdError::Call`] when no member answers; [`EtcdError::Corrupt`] for a key of the
/// namespace that no lease wrote.
pub fn list(endpoints: &Endpoints, namespace: &str) -> Result<Vec<LeaseRow>, LeaseError> {
    atomflake_lease::list::<Etcd>(endpoints, namespace)
}

/// The time left until `deadline` (zero once past).
fn left(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

#[cfg(test)]
mod tests {
    use super::*;
    use atomflake::Layout;

    /// Nothing listens on port 9 (discard) of loopback.
    fn nowhere() -> Endpoints {
        "etcd://127.0.0.1:9".parse().unwrap()
    }

    #[test]
    fn a_cluster_that_is_not_there_is_an_etcd_error_naming_the_member() {
        let error = Lease::acquire(
            &nowhere(),
            &Layout::TWITTER,
            &LeaseOptions::new("ns").ttl(MIN_TTL),
        )
        .unwrap_err();
        let LeaseError::Engine(EtcdError::Call(CallFailed { action, cause })) = &error else {
            panic!("{error}");
        };
        assert_eq!(*action, "grant an etcd lease");
        assert!(cause.starts_with("127.0.0.1:9: Unavailable: "), "{cause}");
        assert!(error.is_transient());
    }
}
