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
    #[arg(
        long,
        env = "ATOMFLAKE_NODE",
        value_name = "N",
        allow_negative_numbers = true,
        required_unless_present = "to_extension"
    )]
    node: Option<String>,
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
    /// Print instead the SQL that moves the database from this script (its layout and
    /// prefix, in the current schema) to the extension: the columns on the script's
    /// function, and its mark, in one transaction. The server must preload the extension
    /// with the same layout; the extension mints for its own `atomflake.node`, so no
    /// node is needed (one given is checked against the layout, and not used).
    #[arg(long, conflicts_with_all = ["adopt", "max_wait_ms"])]
    to_extension: bool,
}

/// `atomflake sql`: the in-database minting script on stdout.
pub(crate) fn run(args: &SqlArgs) -> Result<(), Failure> {
    let layout = args.layout.preset()?;
    let node = match &args.node {
        Some(node) => node_in(layout, node)?,
        // The move mints nothing for the script's node.
        None => 0,
    };
    let script = atomflake_postgres::sql::PgScript::new(layout, node)
        .and_then(|script| script.prefix(&args.prefix))
        .and_then(|script| script.max_wait(Duration::from_millis(args.max_wait_ms)))
        .and_then(|script| {
            args.adopt
                .iter()
                .try_fold(script, |script, column| script.adopt(column))
        })
        .map_err(|err| Failure::Usage(err.to_string()))?;
    let text = if args.to_extension {
        script
            .to_extension()
            .map_err(|err| Failure::Usage(err.to_string()))?
    } else {
        script.to_string()
    };
    let mut out = io::stdout().lock();
    write!(out, "{text}")
        .and_then(|()| out.flush())
        .map_err(write_failed)
}
