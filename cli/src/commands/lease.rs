//! `atomflake mint --lease` and `atomflake lease`: node IDs leased from PostgreSQL, etcd,
//! Redis or ZooKeeper, chosen by the URL (`etcd://` for etcd, `redis://` for Redis, `zk://`
//! for ZooKeeper).

use crate::mint::{Written, write_ids};
use crate::{Failure, rfc3339_ms, write_failed};
use atomflake::mark::MarkStore;
use atomflake::{Builder, Layout};
use atomflake_lease::{AnyLeaseError, LeaseOptions, LeaseRow, PassedOver, Registry};
use clap::{Args, Subcommand};
use std::io::{self, Write};
use std::time::Duration;

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
    /// List the leases of a namespace: node, generation (PostgreSQL and Redis: how many
    /// times it was claimed; etcd: the claim's revision; ZooKeeper: the claim's zxid),
    /// whether it is live, when it expires (PostgreSQL and Redis), the node's high-water
    /// mark, and the holder.
    List {
        /// Where the leases are: a PostgreSQL database (a URL or `key=value` settings), an
        /// etcd cluster (`etcd://HOST:PORT[,HOST:PORT...]`, or over TLS
        /// `etcds://[USER:PASSWORD@]HOST:PORT[,...][?cacert=PATH&cert=PATH&key=PATH]`), a
        /// Redis server (`redis://[USER:PASSWORD@]HOST:PORT[/DB]`, over TLS `rediss://…`) or a
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

/// The lease engines of `--lease`, found by the URL's scheme.
static LEASES: Registry = Registry::new(&[
    atomflake_postgres::lease::DRIVER,
    atomflake_etcd::lease::DRIVER,
    atomflake_redis::lease::DRIVER,
    atomflake_zookeeper::lease::DRIVER,
]);

pub(crate) fn run(command: LeaseCommand) -> Result<(), Failure> {
    let mut out = io::stdout().lock();
    match command {
        LeaseCommand::Ddl => out
            .write_all(atomflake_postgres::lease::DDL.as_bytes())
            .map_err(write_failed),
        LeaseCommand::List { lease, namespace } => {
            let rows = LEASES.list(&lease, &namespace).map_err(failure)?;
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
    written: &Written,
) -> Result<(), Failure> {
    let (nodes, store) = acquire(layout, url, args, 1)?;
    let generator = Builder::new(layout)
        .mark_store(store)
        .build(nodes[0])
        .map_err(|err| Failure::Other(err.to_string()))?;
    write_ids(&generator, count, written, |generator, block| {
        // At most a lease time for each ID: a spent tick, a mark being stored, a lease
        // being renewed.
        for id in block {
            *id = generator
                .next_id_timeout(args.ttl())
                .map_err(|error| Failure::Other(format!("cannot mint: {error}")))?;
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
    let lease = LEASES.acquire(url, &layout, &options).map_err(failure)?;
    for &PassedOver {
        node: passed,
        high_water_ms: mark,
        ..
    } in lease.passed_over()
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
    Ok((lease.nodes().to_vec(), lease))
}

/// A bad URL or bad options are bad input; the rest (no free node, the engine out of
/// reach) is not. The error never quotes the URL: it can hold a password.
#[expect(clippy::needless_pass_by_value, reason = "called as map_err(failure)")]
fn failure(error: AnyLeaseError) -> Failure {
    match error {
        AnyLeaseError::UnknownScheme { .. } | AnyLeaseError::InvalidUrl(_) => {
            Failure::Usage(format!("invalid --lease: {error}"))
        }
        _ if error.is_invalid_input() => Failure::Usage(error.to_string()),
        _ => Failure::Other(error.to_string()),
    }
}
