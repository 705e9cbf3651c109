//! `atomflake sql`: the script that mints IDs inside PostgreSQL, on stdout.

use super::{LayoutArgs, node_in};
use crate::{Failure, write_failed};
use clap::Args;
use std::io::{self, Write};
use std::time::Duration;

/// The options of `atomflake sql`.
#[derive(Args)]
pub(crate) struct SqlArgs {
    #[command(flatten)]
    layout: LayoutArgs,
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
    /// Switch an existing bigint column (a bigserial or identity key) over to the
    /// script's function: checked, under a lock, to be bigint and to hold only values
    /// below the IDs minted from now on. Repeat for more columns.
    #[arg(long, value_name = "TABLE.COLUMN")]
    adopt: Vec<String>,
}

/// `atomflake sql`: the in-database minting script on stdout.
pub(crate) fn run(args: &SqlArgs) -> Result<(), Failure> {
    let layout = args.layout.preset()?;
    let node = node_in(layout, &args.node)?;
    let script = atomflake_postgres::sql::PgScript::new(layout, node)
        .and_then(|script| script.prefix(&args.prefix))
        .and_then(|script| script.max_wait(Duration::from_millis(args.max_wait_ms)))
        .and_then(|script| {
            args.adopt
                .iter()
                .try_fold(script, |script, column| script.adopt(column))
        })
        .map_err(|err| Failure::Usage(err.to_string()))?;
    let mut out = io::stdout().lock();
    write!(out, "{script}")
        .and_then(|()| out.flush())
        .map_err(write_failed)
}
