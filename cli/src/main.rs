//! `atomflake`: mint, decode and list Snowflake IDs from the command line.
//!
//! ```text
//! atomflake mint [--layout NAME] [--node N [--high-water DIR | --no-high-water] | --lease URL [--namespace NS] [--ttl S]] [-n COUNT] [--format decimal|base32|json|uuid|masked [--key-file PATH]]
//! atomflake decode [--layout NAME] [--json] [ID|UUID ...]
//! atomflake mask --key-file PATH [ID ...]
//! atomflake unmask --key-file PATH [ID ...]
//! atomflake layouts
//! atomflake sql [--layout NAME] --node N [--prefix P] [--max-wait-ms MS] [--adopt TABLE.COLUMN ...]
//! atomflake lease list --lease URL [--namespace NS]
//! atomflake lease ddl
//! atomflake serve [--layout NAME] ((--node N[,N...] | --statefulset) [--high-water DIR | --no-high-water] | --lease URL [--nodes K]) [--listen ADDR] [--max-connections N] [--header-timeout S] [--idle-timeout S] [--max-streams N] [--ids-rate N] [--cors-origin ORIGIN] [--stay-stopped] [--reclaim]
//! ```
//!
//! Exit codes ([`EXIT_SUCCESS`], [`EXIT_FAILURE`], [`EXIT_BAD_INPUT`]), listed at the end of
//! `atomflake help` and of every `atomflake help COMMAND`: 0 on success, 2 for bad input (a
//! usage error, an unknown layout, a node out of range, an ID that does not parse or does
//! not fit the layout), 1 for anything else (an I/O error, a clock outside the layout's
//! span). Bad input gets one line on stderr naming the value. A closed stdout (`atomflake
//! mint -n 1000000 | head`) ends the command quietly with 0.

mod commands;
mod high_water;
mod log;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use commands::{decode, layouts, lease, mask, mint, serve, sql};
use std::fmt;
use std::io;
use std::process::ExitCode;

// `lease` names this from the crate's root.
use commands::rfc3339_ms;

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
    Mint(mint::MintArgs),
    /// Decode IDs: time (RFC 3339, UTC, milliseconds), node and sequence.
    ///
    /// IDs are decimal, 13-character base32, 11-character base62 (see `mint --format`), or
    /// UUIDs of version 7 of the layout (text of digits alone is decimal). With no IDs
    /// given, reads one per line from stdin (blank lines are skipped). An ID that does not
    /// parse or does not fit the layout, or a line that is not UTF-8, is reported on stderr;
    /// the others are still decoded, and the exit code is 2.
    Decode(decode::DecodeArgs),
    /// Mask IDs with a key: a keyed permutation (Speck64/128) whose output shows neither
    /// the ID's time, its node nor the volume between two IDs, and which `unmask` takes back.
    ///
    /// IDs are decimal, base32 or base62, given or one per line on stdin; each masked ID is written
    /// in decimal, one per line. An ID below 2^63 (one that fits a signed BIGINT) masks to
    /// one below 2^63. Bad input is reported on stderr and the others still go through
    /// (exit code 2). The key is never printed; whoever holds it unmasks every ID.
    Mask(mask::MaskArgs),
    /// Unmask IDs that `mask` (or `mint --format masked`) wrote with the same key.
    Unmask(mask::MaskArgs),
    /// Serve IDs over HTTP/JSON and gRPC from one port, until SIGTERM.
    ///
    /// HTTP: `GET /v1/ids?count=N` (`{"ids": ["<decimal>", ...]}`), `GET /v1/ids/{id}`
    /// (decoded), `GET /v1/layout`, `GET /healthz` (200 only while serving), `GET
    /// /metrics` (Prometheus). gRPC: `atomflake.v1.Ids` (`proto/atomflake/v1/ids.proto`),
    /// health and reflection. Over TLS with `--tls-cert` and `--tls-key` (reloaded on
    /// SIGHUP), behind bearer tokens with `--token-file`. SIGTERM or SIGINT drains the
    /// requests under way, then releases the nodes. A fixed node (`--node`, `--statefulset`) keeps a high-water
    /// file (`--high-water`), so that a restart never hands out its IDs again.
    Serve(Box<serve::ServeArgs>),
    /// Node-ID leases kept in PostgreSQL, etcd or ZooKeeper.
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
    /// `atomflake sql --node 7 | psql -v ON_ERROR_STOP=1`: one transaction. With
    /// `--to-extension`, the SQL that moves a database from the script to the extension.
    Sql(sql::SqlArgs),
}

/// The exit code of a command that did what it was asked (or whose stdout was closed).
const EXIT_SUCCESS: u8 = 0;
/// The exit code of a command stopped by anything but bad input: I/O, the clock, a lease lost.
const EXIT_FAILURE: u8 = 1;
/// The exit code of bad input: a usage error (clap's too), an unknown layout, a node out of
/// range, an ID that does not parse or does not fit the layout.
const EXIT_BAD_INPUT: u8 = 2;

/// The exit codes as the help pages list them, at the end of `atomflake help` and of every
/// `atomflake help COMMAND`.
fn exit_codes_help() -> String {
    format!(
        "Exit codes:\n  \
         {EXIT_SUCCESS}  success (also when stdout is closed, as by `| head`)\n  \
         {EXIT_FAILURE}  any other failure: I/O, the clock, a lease lost\n  \
         {EXIT_BAD_INPUT}  bad input: a usage error, an unknown layout, a node out of range,\n     \
         an ID that does not parse or fit the layout"
    )
}

/// `cmd` and every subcommand below it with the exit codes at the end of their help.
fn with_exit_codes(cmd: clap::Command, text: &str) -> clap::Command {
    cmd.after_help(text.to_owned())
        .mut_subcommands(|sub| with_exit_codes(sub, text))
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

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::BadInput => f.write_str("bad input"),
            Failure::Closed => f.write_str("stdout closed"),
            Failure::Usage(message) | Failure::Other(message) => f.write_str(message),
        }
    }
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
    let matches = with_exit_codes(Cli::command(), &exit_codes_help()).get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|err| err.exit());
    log::init(match &cli.command {
        Command::Serve(args) => args.log_format,
        _ => log::LogFormat::Text,
    });
    let result = match cli.command {
        Command::Mint(args) => mint::run(&args),
        Command::Lease(command) => lease::run(command),
        Command::Serve(args) => serve::run(&args),
        Command::Decode(args) => decode::run(&args),
        Command::Mask(args) => mask::run(&args, false),
        Command::Unmask(args) => mask::run(&args, true),
        Command::Layouts => layouts::run(),
        Command::Sql(args) => sql::run(&args),
    };
    match result {
        Ok(()) | Err(Failure::Closed) => ExitCode::from(EXIT_SUCCESS),
        Err(Failure::BadInput) => ExitCode::from(EXIT_BAD_INPUT),
        Err(Failure::Usage(message)) => {
            report(message);
            ExitCode::from(EXIT_BAD_INPUT)
        }
        Err(Failure::Other(message)) => {
            report(message);
            ExitCode::from(EXIT_FAILURE)
        }
    }
}

/// Logs `message` as the error the command stopped with: `atomflake: {message}`, one line
/// on stderr.
fn report(message: impl fmt::Display) {
    tracing::error!(target: "atomflake", event = "failed", "{message}");
}
