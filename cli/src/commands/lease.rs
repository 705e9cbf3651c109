//! `atomflake mint --lease` and `atomflake lease`: node IDs leased from PostgreSQL, etcd or
//! ZooKeeper, chosen by the URL (`etcd://` for etcd, `zk://` for ZooKeeper).

use crate::mint::write_ids;
use crate::{Failure, Format, rfc3339_ms, write_failed};
use atomflake::mark::MarkStore;
use atomflake::mark::lease::{Engine, EngineError, Lease, LeaseError, LeaseOptions, LeaseRow, PassedOver};
use atomflake::{Builder, Generator, Id, Layout, MonotonicClock};
use atomflake_etcd::Endpoints;
use atomflake_etcd::lease::Etcd;
use atomflake_postgres::Database;
use atomflake_postgres::lease::{self, Postgres};
use atomflake_zookeeper::Ensemble;
use atomflake_zookeeper::lease::ZooKeeper;
use clap::{Args, Subcommand};
use std::io::{self, Write};
use std::time::{Duration, Instant};

/// The lease settings of `mint --lease`.
#[derive(Args, Clone)]
pub(crate) struct LeaseArgs {
    /// The lease namespace: one node space. Every process minting the same IDs uses the
    /// same one.
    #[arg(long, default_value = "atomflake", value_name = "NS")]
    pub(crate) namespace: String,
    /// The lease time in seconds: how long after its last renewal a silent holder's node
    /// stays taken.
    #[arg(long, default_value_t = 10, value_name = "S")]
    ttl: u64,
}

impl LeaseArgs {
    /// The lease time.
    pub(crate) fn ttl(&self) -> Duration {
        Duration::from_secs(self.ttl)
    }
}

#[derive(Subcommand)]
pub(crate) enum LeaseCommand {
    /// List the leases of a namespace: node, generation (PostgreSQL: how many times it was
    /// claimed; etcd: the claim's revision; ZooKeeper: the claim's zxid), whether it is
    /// live, when it expires (PostgreSQL), the node's high-water mark, and the holder.
    List {
        /// Where the leases are: a PostgreSQL database (a URL or `key=value` settings), an
        /// etcd cluster (`etcd://HOST:PORT[,HOST:PORT...]`, or over TLS
        /// `etcds://[USER:PASSWORD@]HOST:PORT[,...][?cacert=PATH&cert=PATH&key=PATH]`) or a
        /// ZooKeeper ensemble (`zk://HOST:PORT[,HOST:PORT...][/CHROOT]`).
        #[arg(long, env = "ATOMFLAKE_LEASE", hide_env_values = true, value_name = "URL")]
        lease: String,
        /// The lease namespace.
        #[arg(long, default_value = "atomflake", value_name = "NS")]
        namespace: String,
    },
    /// Print the lease table's DDL, for migration tools (`mint --lease` creates it when
    /// missing).
    Ddl,
}

pub(crate) fn run(command: LeaseCommand) -> Result<(), Failure> {
    let mut out = io::stdout().lock();
    match command {
        LeaseCommand::Ddl => out.write_all(lease::DDL.as_bytes()).map_err(write_failed),
        LeaseCommand::List { lease, namespace } => {
            let rows = match engine(&lease)? {
                Where::Postgres(database) => lease::list(&database, &namespace).map_err(failure)?,
                Where::Etcd(endpoints) => {
                    atomflake_etcd::lease::list(&endpoints, &namespace).map_err(failure)?
                }
                Where::ZooKeeper(ensemble) => {
                    atomflake_zookeeper::lease::list(&ensemble, &namespace).map_err(failure)?
                }
            };
            print_rows(&mut out, &rows).map_err(write_failed)
        }
    }
}

/// The rows of `lease list`, a line each under a header; `-` where the engine keeps no
/// value.
fn print_rows(out: &mut impl Write, rows: &[LeaseRow]) -> io::Result<()> {
    let or_dash = |value: Option<String>| value.unwrap_or_else(|| "-".to_owned());
    writeln!(
        out,
        "{:>5} {:>20} {:<4} {:<24} {:<24} holder",
        "node", "generation", "live", "expires", "high-water"
    )?;
    for row in rows {
        writeln!(
            out,
            "{:>5} {:>20} {:<4} {:<24} {:<24} {}",
            row.node,
            or_dash(row.generation.map(|generation| generation.to_string())),
            yes_no(row.live),
            or_dash(
                row.expires_unix_ms
                    .map(|ms| rfc3339_ms(u64::try_from(ms).unwrap_or(0)))
            ),
            rfc3339_ms(row.high_water_ms),
            or_dash(row.holder.clone()),
        )?;
    }
    out.flush()
}

fn yes_no(live: bool) -> &'static str {
    if live { "yes" } else { "no" }
}

/// `mint --lease`: mints `count` IDs on a leased node, then releases it.
pub(crate) fn mint(
    layout: Layout,
    url: &str,
    args: &LeaseArgs,
    count: u64,
    format: Format,
) -> Result<(), Failure> {
    let (nodes, store) = acquire(layout, url, args, 1)?;
    let generator = Builder::new(layout)
        .mark_store(store)
        .build(nodes[0])
        .map_err(|err| Failure::Other(err.to_string()))?;
    write_ids(&generator, count, format, |generator, block| {
        for id in block {
            *id = next_id(generator, args.ttl())?;
        }
        Ok(())
    })
}

/// Claims `count` nodes from the lease engine of `url`: the nodes, and the lease as the
/// mark store to build a generator on. Free nodes passed over (their marks far ahead of
/// this clock) are reported on stderr.
pub(crate) fn acquire(
    layout: Layout,
    url: &str,
    args: &LeaseArgs,
    count: u64,
) -> Result<(Vec<u64>, Box<dyn MarkStore>), Failure> {
    let options = LeaseOptions::new(&args.namespace).ttl(args.ttl()).nodes(count);
    let (store, passed_over) = match engine(url)? {
        Where::Postgres(database) => acquire_on::<Postgres>(&database, layout, &options)?,
        Where::Etcd(endpoints) => acquire_on::<Etcd>(&endpoints, layout, &options)?,
        Where::ZooKeeper(ensemble) => acquire_on::<ZooKeeper>(&ensemble, layout, &options)?,
    };
    for PassedOver {
        node: passed,
        high_water_ms: mark,
        ..
    } in passed_over
    {
        tracing::warn!(
            target: "atomflake",
            event = "passed_over",
            node = passed,
            "passed over free node {passed} of lease namespace {:?}: its high-water mark {} \
             is ahead of this clock by more than a generator waits (a previous holder's clock ran ahead)",
            args.namespace,
            rfc3339_ms(mark),
        );
    }
    Ok((store.nodes().to_vec(), store))
}

/// A lease on engine `E`, as a mark store, and the free nodes it passed over.
fn acquire_on<E: Engine>(
    config: &E::Config,
    layout: Layout,
    options: &LeaseOptions,
) -> Result<(Box<dyn MarkStore>, Vec<PassedOver>), Failure> {
    let lease = Lease::<E>::acquire(config, &layout, options).map_err(failure)?;
    let passed_over = lease.passed_over().to_vec();
    Ok((Box::new(lease), passed_over))
}

/// The next ID, waiting out what passes (a spent tick, a mark being stored, a lease being
/// renewed) for at most `patience`.
fn next_id(generator: &Generator<MonotonicClock>, patience: Duration) -> Result<Id, Failure> {
    let start = Instant::now();
    loop {
        let error = match generator.try_next_id() {
            Ok(id) => return Ok(id),
            Err(error) => error,
        };
        if !error.is_transient() || start.elapsed() > patience {
            return Err(Failure::Other(format!("cannot mint: {error}")));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Where `--lease` keeps leases.
enum Where {
    Postgres(Box<Database>),
    Etcd(Endpoints),
    ZooKeeper(Ensemble),
}

/// The engine of `--lease`: etcd for `etcd://` and `etcds://`, ZooKeeper for `zk://`, else
/// PostgreSQL. The error never quotes the URL: it can hold a password.
fn engine(url: &str) -> Result<Where, Failure> {
    let invalid = |err: &dyn std::fmt::Display| Failure::Usage(format!("invalid --lease: {err}"));
    if url.starts_with("etcd://") || url.starts_with("etcds://") {
        url.parse().map(Where::Etcd).map_err(|err| invalid(&err))
    } else if url.starts_with("zk://") {
        url.parse().map(Where::ZooKeeper).map_err(|err| invalid(&err))
    } else {
        url.parse()
            .map(|database| Where::Postgres(Box::new(database)))
            .map_err(|err| invalid(&err))
    }
}

/// Bad options are bad input; the rest (no free node, the engine out of reach) is not.
#[expect(clippy::needless_pass_by_value, reason = "called as map_err(failure)")]
fn failure<E: EngineError>(error: LeaseError<E>) -> Failure {
    match error {
        LeaseError::InvalidNamespace { .. } | LeaseError::TtlOutOfRange { .. } | LeaseError::Nodes(_) => {
            Failure::Usage(error.to_string())
        }
        _ => Failure::Other(error.to_string()),
    }
}
