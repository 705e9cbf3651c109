//! Node-ID leases kept in ZooKeeper: one ID space across a fleet of processes, on the
//! ensemble Twitter's Snowflake and Meituan's Leaf registered their workers in.
//!
//! A [`Lease`] is [`atomflake_lease::Lease`] on the [`ZooKeeper`] engine; the lease's
//! workings common to every engine are told in [`atomflake_lease`]. In ZooKeeper a claim
//! is `holder/NODE`, an **ephemeral** node of the holder's session holding the holder's
//! name, which ZooKeeper deletes when the session expires (the lease time after the session
//! was last heard from) or closes; the node's mark is `mark/NODE`, a persistent node whose
//! **version** counts its writes (both under `/atomflake/lease/NAMESPACE/`, below the URL's
//! chroot; the crate's README draws the layout).
//!
//! # The engine's part
//!
//! - **Claim.** A session whose timeout is the lease time (a session the ensemble would
//!   give less is refused: [`ZooKeeperError::SessionTimeout`]), then one `multi` per claim:
//!   *create every `holder/NODE`, ephemeral, and write every `mark/NODE` back unchanged at
//!   the version read (or create it)*. All or nothing: a node claimed meanwhile, or a mark
//!   written meanwhile, fails it. Writing the mark bumps its version, so a write of any
//!   earlier holder's that ZooKeeper applies later fails. The claim's generation is the
//!   zxid that created its `holder/NODE`; its token is that zxid with the session.
//! - **Store.** `setData` of each `mark/NODE` at the version this holder last saw (a
//!   compare-and-swap); ZooKeeper applies a session's requests in order, and every request
//!   renews the session. A store that finds another version syncs and reads the node back:
//!   its `holder/NODE` gone, or another session's, is lost; otherwise one of this holder's
//!   own stores landed, and the store is done when the mark is at or past its own, or tries
//!   again at the version read. An expired session is lost.
//! - **Release.** One `multi` per node: the exact mark at the version last seen, and the
//!   deletion of `holder/NODE`; then the session is closed.
//!
//! # What it rests on
//!
//! - **ZooKeeper's guarantees.** Writes are linearizable: an acknowledged write is on a
//!   quorum, and every server applies writes in one order. A `multi` is atomic.
//! - **Nothing about time, for uniqueness.** A session the ensemble expires early costs its
//!   holder the node, never an ID: the successor's claim bumps the mark's version, which
//!   every later write of the holder's compares.
//!
//! # Examples
//!
//! ```no_run
//! use atomflake::{Builder, Layout};
//! use atomflake_zookeeper::Ensemble;
//! use atomflake_zookeeper::lease::{Lease, LeaseOptions};
//!
//! let ensemble: Ensemble = "zk://10.0.0.1:2181,10.0.0.2:2181,10.0.0.3:2181".parse()?;
//! let lease = Lease::acquire(&ensemble, &Layout::TWITTER, &LeaseOptions::new("orders"))?;
//! let node = lease.node();
//! let ids = Builder::new(Layout::TWITTER).mark_store(lease).build(node)?;
//! let id = ids.try_next_id()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod error;

pub use atomflake_lease::{
    CLAIM_TIMEOUT, LeaseOptions, LeaseRow, MAX_NAMESPACE_LEN, MAX_TTL, MIN_TTL, PassedOver,
};
pub use error::{LeaseError, ZooKeeperError};

use crate::Ensemble;
use atomflake_lease::{
    Attempt, CallFailed, Claim, ClaimRequest, Claimed, Engine, Release, Write, WriteError, Written, choose,
};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::{Duration, Instant};
use zookeeper_client::{Acls, Client, CreateMode, Error, Stat};

/// An [`atomflake_lease::Lease`] on ZooKeeper nodes.
pub type Lease = atomflake_lease::Lease<ZooKeeper>;

/// ZooKeeper's driver for an [`atomflake_lease::Registry`]: `zk://`.
pub const DRIVER: atomflake_lease::Driver = atomflake_lease::Driver::of::<ZooKeeper>();

impl atomflake_lease::UrlEngine for ZooKeeper {
    const SCHEMES: &'static [&'static str] = &["zk"];
}

/// The ZooKeeper lease engine: a session, and the runtime its client runs on.
pub struct ZooKeeper {
    /// Taken by [`Engine::close`], which drops the client (closing the session) and the
    /// runtime off any runtime of the caller's.
    session: Option<(tokio::runtime::Runtime, Client)>,
    paths: Paths,
    session_id: i64,
}

impl std::fmt::Debug for ZooKeeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZooKeeper")
            .field("session_id", &format_args!("{:#x}", self.session_id))
            .finish_non_exhaustive()
    }
}

impl ZooKeeper {
    /// The session that owns the claims.
    pub fn session_id(&self) -> i64 {
        self.session_id
    }

    /// Runs `call` on the client, until `deadline`.
    fn run<'c, T, F: Future<Output = Result<T, Error>> + 'c>(
        &'c self,
        deadline: Instant,
        call: impl FnOnce(&'c Client) -> F,
    ) -> Result<T, Error> {
        let (runtime, client) = self.session.as_ref().ok_or(Error::ClientClosed)?;
        run(runtime, client, deadline, call)
    }
}

fn run<'c, T, F: Future<Output = Result<T, Error>> + 'c>(
    runtime: &tokio::runtime::Runtime,
    client: &'c Client,
    deadline: Instant,
    call: impl FnOnce(&'c Client) -> F,
) -> Result<T, Error> {
    let within = deadline.saturating_duration_since(Instant::now());
    runtime
        .block_on(async { tokio::time::timeout(within, call(client)).await })
        .unwrap_or(Err(Error::Timeout))
}

/// The paths of one namespace.
#[derive(Debug, Clone)]
struct Paths {
    holders: String,
    marks: String,
}

impl Paths {
    fn new(namespace: &str) -> Paths {
        Paths {
            holders: format!("/atomflake/lease/{namespace}/holder"),
            marks: format!("/atomflake/lease/{namespace}/mark"),
        }
    }

    fn holder(&self, node: u64) -> String {
        format!("{}/{node:020}", self.holders)
    }

    fn mark(&self, node: u64) -> String {
        format!("{}/{node:020}", self.marks)
    }

    /// The node a child of `dir` names.
    fn node(dir: &str, child: &str) -> Result<u64, ZooKeeperError> {
        Some(child)
            .filter(|digits| digits.len() == 20)
            .and_then(|digits| digits.parse().ok())
            .ok_or_else(|| ZooKeeperError::Corrupt {
                path: format!("{dir}/{child}"),
                problem: "the name is not a node number of 20 digits".to_owned(),
            })
    }

    /// A mark node's value.
    fn mark_value(path: &str, data: &[u8]) -> Result<u64, ZooKeeperError> {
        std::str::from_utf8(data)
            .ok()
            .and_then(|text| text.parse().ok())
            .ok_or_else(|| ZooKeeperError::Corrupt {
                path: path.to_owned(),
                problem: "the value is not a mark in decimal Unix ms".to_owned(),
            })
    }
}

/// What a namespace holds: its marks with their versions, and its live claims with their
/// stats.
struct Snapshot {
    marks: BTreeMap<u64, (u64, i32)>,
    holders: BTreeMap<u64, (Vec<u8>, Stat)>,
}

/// Connects a session of `ttl` to `ensemble` by `deadline`, on a runtime of its own.
fn session(
    ensemble: &Ensemble,
    ttl: Duration,
    deadline: Instant,
) -> Result<(tokio::runtime::Runtime, Client), ZooKeeperError> {
    let action = "connect";
    // One worker: the client's session task sends pings and reconnects between calls.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("atomflake-zookeeper")
        .enable_all()
        .build()
        .map_err(|error| ZooKeeperError::Call(CallFailed::new(action, error)))?;
    let within = deadline.saturating_duration_since(Instant::now());
    let connect = async {
        let mut connector = Client::connector();
        connector.session_timeout(ttl).connection_timeout(ttl / 4);
        tokio::time::timeout(within, connector.connect(&ensemble.connect_string())).await
    };
    let client = runtime
        .block_on(connect)
        .unwrap_or(Err(Error::Timeout))
        .map_err(ZooKeeperError::call(action))?;
    Ok((runtime, client))
}

/// Reads the marks and the live claims of `paths`.
fn snapshot(
    runtime: &tokio::runtime::Runtime,
    client: &Client,
    paths: &Paths,
    deadline: Instant,
) -> Result<Snapshot, ZooKeeperError> {
    let action = "read the namespace";
    let read = run(runtime, client, deadline, |client| async move {
        // A namespace never claimed in has neither directory.
        let children = |dir| async move {
            match client.list_children(dir).await {
                Err(Error::NoNode) => Ok(Vec::new()),
                children => children,
            }
        };
        let marks = children(&paths.marks).await?;
        let holders = children(&paths.holders).await?;
        // Sent at once, answered in order.
        let mark_reads: Vec<_> = marks
            .iter()
            .map(|child| client.get_data(&format!("{}/{child}", paths.marks)))
            .collect();
        let holder_reads: Vec<_> = holders
            .iter()
            .map(|child| client.get_data(&format!("{}/{child}", paths.holders)))
            .collect();
        let mut mark_data = Vec::new();
        for read in mark_reads {
            mark_data.push(read.await);
        }
        let mut holder_data = Vec::new();
        for read in holder_reads {
            holder_data.push(read.await);
        }
        Ok((marks, mark_data, holders, holder_data))
    })
    .map_err(ZooKeeperError::call(action))?;
    let (marks, mark_data, holders, holder_data) = read;
    let mut snapshot = Snapshot {
        marks: BTreeMap::new(),
        holders: BTreeMap::new(),
    };
    for (child, data) in marks.iter().zip(mark_data) {
        match data {
            Ok((data, stat)) => {
                let node = Paths::node(&paths.marks, child)?;
                let path = paths.mark(node);
                snapshot
                    .marks
                    .insert(node, (Paths::mark_value(&path, &data)?, stat.version));
            }
            // Marks are never deleted; a claim that was not created after all.
            Err(Error::NoNode) => {}
            Err(error) => return Err(ZooKeeperError::call(action)(error)),
        }
    }
    for (child, data) in holders.iter().zip(holder_data) {
        match data {
            Ok(read) => {
                snapshot.holders.insert(Paths::node(&paths.holders, child)?, read);
            }
            // Released or expired since it was listed.
            Err(Error::NoNode) => {}
            Err(error) => return Err(ZooKeeperError::call(action)(error)),
        }
    }
    Ok(snapshot)
}

impl Engine for ZooKeeper {
    type Config = Ensemble;
    type Error = ZooKeeperError;
    /// The version of `mark/NODE` as this holder last read or wrote it: every write of the
    /// mark compares it. The claim's generation is the zxid that created its `holder/NODE`:
    /// the token, with the session.
    type Fence = i32;

    fn connect(ensemble: &Ensemble, options: &LeaseOptions, deadline: Instant) -> Result<Self, Self::Error> {
        let (namespace, ttl) = (options.namespace.as_str(), options.ttl);
        let (runtime, client) = session(ensemble, ttl, deadline)?;
        let negotiated = client.session_timeout();
        if negotiated < ttl {
            return Err(ZooKeeperError::SessionTimeout { ttl, negotiated });
        }
        let paths = Paths::new(namespace);
        let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
        for dir in [&paths.holders, &paths.marks] {
            match run(&runtime, &client, deadline, |client| {
                client.mkdir(dir, &persistent)
            }) {
                Ok(()) | Err(Error::NodeExists) => {}
                Err(error) => return Err(ZooKeeperError::call("create the namespace")(error)),
            }
        }
        Ok(ZooKeeper {
            session_id: client.session_id().0,
            session: Some((runtime, client)),
            paths,
        })
    }

    fn claim(&mut self, request: &ClaimRequest<'_>) -> Result<Attempt<i32>, ZooKeeperError> {
        let action = "claim a node";
        let deadline = request.deadline;
        let (runtime, client) = self
            .session
            .as_ref()
            .ok_or_else(|| ZooKeeperError::Call(CallFailed::new(action, "the session is closed")))?;
        let snapshot = snapshot(runtime, client, &self.paths, deadline)?;
        let mark_of = |node: &u64| snapshot.marks.get(node).copied();
        // Claims of this session whose answer was lost on the way.
        let ours: Vec<Claim<i32>> = snapshot
            .holders
            .iter()
            .filter(|(_, (_, stat))| stat.ephemeral_owner == self.session_id)
            .map(|(&node, (_, stat))| Claim {
                node,
                generation: stat.czxid,
                fence: mark_of(&node).map_or(0, |(_, version)| version),
            })
            .collect();
        if !ours.is_empty() {
            let mark = ours
                .iter()
                .filter_map(|claim| mark_of(&claim.node))
                .map(|(mark, _)| mark);
            return Ok(Attempt::Claimed(Claimed {
                mark: mark.max().unwrap_or(0),
                claims: ours,
                passed_over: Vec::new(),
            }));
        }
        let live: BTreeSet<u64> = snapshot.holders.keys().copied().collect();
        let marks = snapshot
            .marks
            .iter()
            .map(|(&node, &(mark, _))| (node, mark))
            .collect();
        let (chosen, passed_over) = match choose(request, &live, &marks) {
            Ok(chosen) => chosen,
            Err(shortfall) => return Ok(Attempt::Short(shortfall)),
        };
        let ephemeral = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
        let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
        let mut multi = client.new_multi_writer();
        let mut mark = 0;
        let op = |error| ZooKeeperError::call(action)(error);
        for &node in &chosen {
            multi
                .add_create(&self.paths.holder(node), request.holder.as_bytes(), &ephemeral)
                .map_err(op)?;
            match mark_of(&node) {
                Some((value, version)) => {
                    mark = mark.max(value);
                    multi
                        .add_set_data(
                            &self.paths.mark(node),
                            value.to_string().as_bytes(),
                            Some(version),
                        )
                        .map_err(op)?;
                }
                None => multi
                    .add_create(&self.paths.mark(node), b"0", &persistent)
                    .map_err(op)?,
            }
        }
        let within = deadline.saturating_duration_since(Instant::now());
        let committed = runtime
            .block_on(async { tokio::time::timeout(within, multi.commit()).await })
            .unwrap_or(Err(Error::Timeout.into()))
            .map_err(Error::from);
        match committed {
            Ok(_) => {}
            Err(Error::SessionExpired | Error::ClientClosed) => {
                return Err(ZooKeeperError::call(action)(Error::SessionExpired));
            }
            Err(error) if Instant::now() >= deadline => return Err(op(error)),
            // Another claimant took a node or wrote a mark this one read, or the answer was
            // lost (the next read finds the claim by its session).
            Err(_) => return Ok(Attempt::Raced),
        }
        let claims = read_claims(runtime, client, &self.paths, &chosen, deadline)?;
        Ok(Attempt::Claimed(Claimed {
            claims,
            mark,
            passed_over,
        }))
    }

    fn store(&mut self, claims: &mut [Claim<i32>], mark: u64, deadline: Instant) -> Written<ZooKeeperError> {
        for i in 0..claims.len() {
            self.write(claims, i, mark, Write::Store, deadline)?;
        }
        Ok(())
    }

    fn release(
        &mut self,
        claims: &mut [Claim<i32>],
        release: Release,
        deadline: Instant,
    ) -> Written<ZooKeeperError> {
        let mut result = Ok(());
        for i in 0..claims.len() {
            let released = self.write(claims, i, release.mark(), Write::Release, deadline);
            result = result.and(released);
        }
        result
    }

    fn list(ensemble: &Ensemble, namespace: &str) -> Result<Vec<LeaseRow>, ZooKeeperError> {
        let deadline = Instant::now() + CLAIM_TIMEOUT;
        let (runtime, client) = session(ensemble, LeaseOptions::DEFAULT_TTL, deadline)?;
        let snapshot = snapshot(&runtime, &client, &Paths::new(namespace), deadline);
        drop(client);
        runtime.shutdown_timeout(Duration::from_secs(1));
        let snapshot = snapshot?;
        let marks = snapshot.marks.iter().map(|(&node, &(mark, _))| (node, mark));
        let claims = snapshot
            .holders
            .iter()
            .map(|(&node, (name, stat))| (node, String::from_utf8_lossy(name).into_owned(), stat.czxid));
        Ok(LeaseRow::merge(marks, claims))
    }

    /// Closes the session: its claims' ephemeral nodes go with it.
    fn close(&mut self) {
        if let Some((runtime, client)) = self.session.take() {
            drop(client);
            runtime.shutdown_timeout(Duration::from_secs(1));
        }
    }
}

/// The claims just made on `chosen`, read back: a session sees its own writes.
fn read_claims(
    runtime: &tokio::runtime::Runtime,
    client: &Client,
    paths: &Paths,
    chosen: &[u64],
    deadline: Instant,
) -> Result<Vec<Claim<i32>>, ZooKeeperError> {
    let action = "claim a node";
    let mut claims = Vec::new();
    for &node in chosen {
        let (holder, mark_stat) = run(runtime, client, deadline, |client| async move {
            let holder = client.check_stat(&paths.holder(node)).await?;
            let mark = client.check_stat(&paths.mark(node)).await?;
            Ok((holder, mark))
        })
        .map_err(ZooKeeperError::call(action))?;
        let (Some(holder), Some(mark_stat)) = (holder, mark_stat) else {
            return Err(ZooKeeperError::Call(CallFailed::new(
                action,
                format!("node {node}'s claim vanished as it was made: the session ended"),
            )));
        };
        claims.push(Claim {
            node,
            generation: holder.czxid,
            fence: mark_stat.version,
        });
    }
    Ok(claims)
}

impl ZooKeeper {
    /// Sets claim `i`'s mark to `mark` at the version this holder last saw (and for a
    /// release deletes its `holder/NODE` in the same `multi`). A version moved on is read
    /// back after a sync: a claim gone is lost; otherwise the holder's own late write
    /// landed, its version is taken, and a store is done if the mark is at or past `mark`,
    /// or tries again.
    fn write(
        &self,
        claims: &mut [Claim<i32>],
        i: usize,
        mark: u64,
        write: Write,
        deadline: Instant,
    ) -> Written<ZooKeeperError> {
        let action = write.action();
        let claim = claims[i];
        let (holder, path) = (self.paths.holder(claim.node), self.paths.mark(claim.node));
        let value = mark.to_string();
        loop {
            let version = claims[i].fence;
            let written = self.run(deadline, |client| async {
                match write {
                    Write::Store => client
                        .set_data(&path, value.as_bytes(), Some(version))
                        .await
                        .map(Some),
                    Write::Release => {
                        let mut multi = client.new_multi_writer();
                        multi.add_set_data(&path, value.as_bytes(), Some(version))?;
                        multi.add_delete(&holder, None)?;
                        multi.commit().await?;
                        Ok(None)
                    }
                }
            });
            match written {
                Ok(stat) => {
                    if let Some(stat) = stat {
                        claims[i].fence = stat.version;
                    }
                    return Ok(());
                }
                Err(Error::SessionExpired | Error::ClientClosed) => {
                    return Err(WriteError::Lost { claim: i });
                }
                Err(Error::BadVersion | Error::NoNode) => {}
                Err(error) => return Err(WriteError::Engine(ZooKeeperError::call(action)(error))),
            }
            let read = self.run(deadline, |client| async {
                client.sync(&path).await?;
                let holder = client.check_stat(&holder).await?;
                let mark = client.get_data(&path).await?;
                Ok((holder, mark))
            });
            let (held, (data, stat)) = match read {
                Ok(read) => read,
                Err(Error::SessionExpired | Error::ClientClosed) => {
                    return Err(WriteError::Lost { claim: i });
                }
                Err(error) => return Err(WriteError::Engine(ZooKeeperError::call(action)(error))),
            };
            let ours = held.is_some_and(|held| {
                held.ephemeral_owner == self.session_id && held.czxid == claim.generation
            });
            if !ours {
                return Err(WriteError::Lost { claim: i });
            }
            claims[i].fence = stat.version;
            if write == Write::Store && Paths::mark_value(&path, &data)? >= mark {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(WriteError::Engine(ZooKeeperError::Call(CallFailed::new(
                    action,
                    "the mark kept moving under this holder's own late writes",
                ))));
            }
        }
    }
}

/// The nodes of `namespace` with a claim or a mark, by node; a row's generation is the zxid
/// that created its claim.
///
/// # Errors
///
/// [`LeaseError::InvalidNamespace`](atomflake_lease::LeaseError::InvalidNamespace);
/// [`ZooKeeperError::Call`] when no server answers; [`ZooKeeperError::Corrupt`] for a node
/// of the namespace that no lease wrote.
pub fn list(ensemble: &Ensemble, namespace: &str) -> Result<Vec<LeaseRow>, LeaseError> {
    atomflake_lease::list::<ZooKeeper>(ensemble, namespace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_sort_as_numbers_and_read_back() {
        let paths = Paths::new("ns");
        assert_eq!(paths.holder(7), "/atomflake/lease/ns/holder/00000000000000000007");
        assert!(paths.mark(9) < paths.mark(10));
        assert_eq!(Paths::node(&paths.marks, "00000000000000000012").unwrap(), 12);
        assert_eq!(
            Paths::node(&paths.marks, "12").unwrap_err(),
            ZooKeeperError::Corrupt {
                path: "/atomflake/lease/ns/mark/12".to_owned(),
                problem: "the name is not a node number of 20 digits".to_owned()
            }
        );
        assert_eq!(
            Paths::mark_value("/m", b"1700000000000").unwrap(),
            1_700_000_000_000
        );
        assert!(matches!(
            Paths::mark_value("/m", b"-1"),
            Err(ZooKeeperError::Corrupt { .. })
        ));
    }

    #[test]
    fn an_ensemble_that_is_not_there_is_a_transient_zookeeper_error() {
        let nowhere: Ensemble = "zk://127.0.0.1:9".parse().unwrap();
        let error = Lease::acquire(
            &nowhere,
            &atomflake::Layout::TWITTER,
            &LeaseOptions::new("ns").ttl(MIN_TTL),
        )
        .unwrap_err();
        let LeaseError::Engine(ZooKeeperError::Call(CallFailed { action, .. })) = &error else {
            panic!("{error}");
        };
        assert_eq!(*action, "connect");
        assert!(error.is_transient());
    }
}
