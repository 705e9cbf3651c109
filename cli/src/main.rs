//! `atomflake`: mint, decode and list Snowflake IDs from the command line.
//!
//! ```text
//! atomflake mint [--layout NAME] [--node N [--high-water DIR | --no-high-water] | --lease URL [--namespace NS] [--ttl S]] [-n COUNT] [--format decimal|base32|json]
//! atomflake decode [--layout NAME] [--json] [ID ...]
//! atomflake layouts
//! atomflake sql [--layout NAME] --node N [--prefix P] [--max-wait-ms MS]
//! atomflake lease list --lease URL [--namespace NS]
//! atomflake lease ddl
//! atomflake serve [--layout NAME] ((--node N[,N...] | --statefulset) [--high-water DIR | --no-high-water] | --lease URL [--nodes K]) [--listen ADDR]
//! ```
//!
//! Exit codes: 0 on success, 2 for bad input (a usage error, an unknown layout, a node out
//! of range, an ID that does not parse or does not fit the layout), 1 for anything else
//! (an I/O error, a clock outside the layout's span). Bad input gets one line on stderr
//! naming the value. A closed stdout (`atomflake mint -n 1000000 | head`) ends the command
//! quietly with 0.

mod decode;
mod high_water;
mod lease;
mod mint;
mod serve;

use atomflake::Layout;
use clap::{Parser, Subcommand, ValueEnum};
use std::fmt;
use std::io::{self, Write};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "atomflake", version, about = "Mint, decode and list Snowflake IDs.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Mint IDs and write one per line to stdout.
    ///
    /// Output is buffered and minted a tick's block at a time, so a large count runs at the
    /// layout's cap (twitter: 4,096 IDs per ms). A progress line is shown on stderr when
    /// stderr is a terminal and the count is at least 1,000,000.
    Mint {
        /// Layout preset (see `atomflake layouts`).
        #[arg(long, default_value = "twitter", value_name = "NAME")]
        layout: String,
        /// Node ID of this minter (0 unless given). Give every process that mints at the
        /// same time its own node, or their IDs can collide; or take one with `--lease`. A
        /// fixed node keeps a high-water file (`--high-water`), so that a restart never
        /// repeats its IDs.
        #[arg(long, env = "ATOMFLAKE_NODE", value_name = "N", allow_negative_numbers = true)]
        node: Option<String>,
        #[command(flatten)]
        high_water: high_water::HighWaterArgs,
        /// Take the node from a lease in this PostgreSQL database (a URL,
        /// `postgres://user@host/db`, or `key=value` connection settings) or etcd cluster
        /// (`etcd://HOST:PORT[,HOST:PORT...]`): the lowest free node of the layout, held
        /// while minting, released at exit. The IDs start past every ID minted on that node
        /// before. PostgreSQL: TLS as libpq's `sslmode` says (`sslmode=verify-full
        /// sslrootcert=ca.pem`); no error shows the password.
        #[arg(long, env = "ATOMFLAKE_LEASE", hide_env_values = true, value_name = "URL")]
        lease: Option<String>,
        #[command(flatten)]
        lease_options: lease::LeaseArgs,
        /// How many IDs to mint.
        #[arg(short = 'n', long = "count", default_value_t = 1, value_name = "COUNT")]
        count: u64,
        /// decimal: `1541815603606036480`; base32: 13 Crockford characters,
        /// `1ASD13XH1F800`; json: one JSON string per line (JSON Lines, IDs as strings so
        /// JavaScript keeps all 64 bits): `jq` reads them as a stream, `jq -s` as an array.
        #[arg(long, value_enum, default_value_t = Format::Decimal)]
        format: Format,
    },
    /// Decode IDs: time (RFC 3339, UTC, milliseconds), node and sequence.
    ///
    /// IDs are decimal, or 13-character base32 (see `mint --format base32`). With no IDs
    /// given, reads one per line from stdin (blank lines are skipped). An ID that does not
    /// parse or does not fit the layout, or a line that is not UTF-8, is reported on stderr;
    /// the others are still decoded, and the exit code is 2.
    Decode {
        /// Layout preset (see `atomflake layouts`).
        #[arg(long, default_value = "twitter", value_name = "NAME")]
        layout: String,
        /// One JSON object per line, ID as a string.
        #[arg(long)]
        json: bool,
        /// IDs to decode; read from stdin when none are given.
        #[arg(value_name = "ID", allow_negative_numbers = true)]
        ids: Vec<String>,
    },
    /// Serve IDs over HTTP/JSON and gRPC from one port, until SIGTERM.
    ///
    /// HTTP: `GET /v1/ids?count=N` (`{"ids": ["<decimal>", ...]}`), `GET /v1/ids/{id}`
    /// (decoded), `GET /v1/layout`, `GET /healthz` (200 only while serving), `GET
    /// /metrics` (Prometheus). gRPC: `atomflake.v1.Ids` (`proto/atomflake/v1/ids.proto`),
    /// health and reflection. SIGTERM or SIGINT drains the requests under way, then
    /// releases the nodes. A fixed node (`--node`, `--statefulset`) keeps a high-water
    /// file (`--high-water`), so that a restart never hands out its IDs again.
    Serve(Box<serve::ServeArgs>),
    /// Node-ID leases kept in PostgreSQL or etcd.
    #[command(subcommand)]
    Lease(lease::LeaseCommand),
    /// List the layout presets: field widths, tick, epoch, the date their IDs outgrow a
    /// signed 64-bit BIGINT, and the date they run out.
    Layouts,
    /// Print the SQL script that mints IDs of a layout inside PostgreSQL.
    ///
    /// The script is idempotent (apply it again at any time; the state is kept) and
    /// creates, in the current schema, `PREFIX_next_id()` (a column default:
    /// `id bigint PRIMARY KEY DEFAULT atomflake_next_id()`), `PREFIX_next_id_at(unix_ms)`,
    /// the decoders `PREFIX_unix_ms`, `PREFIX_node`, `PREFIX_sequence`, `PREFIX_time`, and
    /// `PREFIX_first_id_at` / `PREFIX_last_id_at` for paging by time. Apply it with
    /// `atomflake sql --node 7 | psql`.
    Sql {
        /// Layout preset (see `atomflake layouts`).
        #[arg(long, default_value = "twitter", value_name = "NAME")]
        layout: String,
        /// Node ID of the database. Give every database (and every other minter) of the
        /// same IDs its own node.
        #[arg(long, env = "ATOMFLAKE_NODE", value_name = "N", allow_negative_numbers = true)]
        node: String,
        /// Name prefix of every object the script creates.
        #[arg(long, default_value = "atomflake", value_name = "PREFIX")]
        prefix: String,
        /// The longest a call waits for a spent tick (after the server's clock moved
        /// back) before it raises an error. `PREFIX_next_id_at` mints at most half of it,
        /// and at most 5 s, ahead of the server's clock.
        #[arg(long, default_value_t = 10_000, value_name = "MS")]
        max_wait_ms: u64,
    },
}

/// How `mint` writes IDs.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    /// Decimal digits.
    Decimal,
    /// 13 characters of Crockford base32.
    Base32,
    /// A JSON string per line.
    Json,
}

/// Why a command stopped.
#[derive(Debug)]
enum Failure {
    /// Bad input, already reported on stderr where it was found (`decode` goes on after
    /// it). Exit 2.
    BadInput,
    /// Bad input, to report. Exit 2.
    Usage(String),
    /// Stdout was closed (`| head`): the reader has what it wanted. Exit 0, quietly.
    Closed,
    /// Anything else: I/O, the clock. Exit 1.
    Other(String),
}

/// A write error as a [`Failure`]: a closed pipe is not one.
#[expect(clippy::needless_pass_by_value, reason = "called as map_err(write_failed)")]
fn write_failed(err: io::Error) -> Failure {
    if err.kind() == io::ErrorKind::BrokenPipe {
        Failure::Closed
    } else {
        Failure::Other(format!("cannot write: {err}"))
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Mint {
            layout,
            node,
            high_water,
            lease,
            lease_options,
            count,
            format,
        } => layout_named(&layout).and_then(|preset| match (lease, node) {
            (Some(_), Some(node)) => Err(Failure::Usage(format!(
                "--node {node} and --lease: the lease picks the node (ATOMFLAKE_NODE counts as --node)"
            ))),
            (Some(url), None) => high_water
                .check_lease()
                .and_then(|()| lease::mint(preset, &url, &lease_options, count, format)),
            (None, node) => mint::run(
                preset,
                &layout,
                node.as_deref().unwrap_or("0"),
                &high_water,
                count,
                format,
            ),
        }),
        Command::Lease(command) => lease::run(command),
        Command::Serve(args) => serve::run(&args),
        Command::Decode { layout, json, ids } => {
            layout_named(&layout).and_then(|layout| decode::run(layout, json, &ids))
        }
        Command::Layouts => list_layouts(),
        Command::Sql {
            layout,
            node,
            prefix,
            max_wait_ms,
        } => layout_named(&layout).and_then(|layout| sql(layout, &node, &prefix, max_wait_ms)),
    };
    match result {
        Ok(()) | Err(Failure::Closed) => ExitCode::SUCCESS,
        Err(Failure::BadInput) => ExitCode::from(2),
        Err(Failure::Usage(message)) => {
            report(message);
            ExitCode::from(2)
        }
        Err(Failure::Other(message)) => {
            report(message);
            ExitCode::from(1)
        }
    }
}

/// Writes `atomflake: {message}` as one line on stderr.
fn report(message: impl fmt::Display) {
    // Nothing sensible is left to do if stderr itself fails.
    let _ = writeln!(io::stderr().lock(), "atomflake: {message}");
}

/// The preset called `name`.
fn layout_named(name: &str) -> Result<Layout, Failure> {
    Layout::PRESETS
        .iter()
        .find(|(preset, _)| *preset == name)
        .map(|&(_, layout)| layout)
        .ok_or_else(|| {
            let names: Vec<&str> = Layout::PRESETS.iter().map(|(preset, _)| *preset).collect();
            Failure::Usage(format!(
                "unknown layout {name:?}: the presets are {}",
                names.join(", ")
            ))
        })
}

/// `unix_ms` as RFC 3339 in UTC with milliseconds, `2022-06-28T16:07:40.105Z`.
fn rfc3339(time: chrono::DateTime<chrono::Utc>) -> String {
    time.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// [`rfc3339`] of a Unix ms, or the raw number where chrono has no date for it.
fn rfc3339_ms(unix_ms: u64) -> String {
    i64::try_from(unix_ms)
        .ok()
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map_or_else(|| format!("{unix_ms} ms"), rfc3339)
}

/// `atomflake sql`: the in-database minting script on stdout.
fn sql(layout: Layout, node: &str, prefix: &str, max_wait_ms: u64) -> Result<(), Failure> {
    let node = mint::node_in(layout, node)?;
    let script = atomflake_postgres::sql::PgScript::new(layout, node)
        .and_then(|script| script.prefix(prefix))
        .and_then(|script| script.max_wait(std::time::Duration::from_millis(max_wait_ms)))
        .map_err(|err| Failure::Usage(err.to_string()))?;
    let mut out = io::stdout().lock();
    write!(out, "{script}")
        .and_then(|()| out.flush())
        .map_err(write_failed)
}

fn list_layouts() -> Result<(), Failure> {
    let mut out = io::stdout().lock();
    let mut write = || -> io::Result<()> {
        writeln!(
            out,
            "{:<10} {:>9} {:>4} {:>8} {:>5}  {:<15} {:<24} {:<24} ids run out",
            "name", "timestamp", "node", "sequence", "tick", "order", "epoch", "ids pass i64::MAX"
        )?;
        for (name, layout) in Layout::PRESETS {
            let order = match layout.order() {
                atomflake::FieldOrder::NodeSequence => "time|node|seq",
                atomflake::FieldOrder::SequenceNode => "time|seq|node",
            };
            writeln!(
                out,
                "{name:<10} {:>9} {:>4} {:>8} {:>2} ms  {order:<15} {:<24} {:<24} {}",
                layout.timestamp_bits(),
                layout.node_bits(),
                layout.sequence_bits(),
                layout.tick_ms(),
                rfc3339_ms(layout.epoch_ms()),
                if layout.i64_end_unix_ms() < layout.end_unix_ms() {
                    rfc3339_ms(layout.i64_end_unix_ms())
                } else {
                    "never".to_owned()
                },
                rfc3339_ms(layout.end_unix_ms()),
            )?;
        }
        out.flush()
    };
    write().map_err(write_failed)
}
