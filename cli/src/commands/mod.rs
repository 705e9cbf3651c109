//! The subcommands, one module each, and what they share: the `--layout` argument, the
//! node a command is given, and how times are written.

pub(crate) mod decode;
pub(crate) mod layouts;
pub(crate) mod lease;
pub(crate) mod mask;
pub(crate) mod mint;
pub(crate) mod serve;
pub(crate) mod sql;

use crate::Failure;
use atomflake::Layout;
use clap::Args;

/// `--layout`, of every subcommand that mints or decodes.
#[derive(Args)]
pub(crate) struct LayoutArgs {
    /// Layout preset (see `atomflake layouts`).
    #[arg(long, default_value = "twitter", value_name = "NAME")]
    pub(crate) layout: String,
}

impl LayoutArgs {
    /// The preset named, or a usage error that lists the presets.
    pub(crate) fn preset(&self) -> Result<Layout, Failure> {
        Layout::preset_named(&self.layout).map_err(|error| Failure::Usage(error.to_string()))
    }
}

/// The node given as text (from `--node` or `ATOMFLAKE_NODE`), checked against `layout`.
pub(crate) fn node_in(layout: Layout, text: &str) -> Result<u64, Failure> {
    let node = text.parse::<u64>().map_err(|_| {
        Failure::Usage(format!(
            "invalid node {text:?}: the layout allows 0..={}",
            layout.max_node()
        ))
    })?;
    // Checked here, before a high-water directory is made for it: the layout's error names
    // the value and the range.
    let first = atomflake::Parts {
        unix_ms: layout.epoch_ms(),
        node,
        sequence: 0,
    };
    match layout.encode(first) {
        Ok(_) => Ok(node),
        Err(err) => Err(Failure::Usage(err.to_string())),
    }
}

/// `time` as RFC 3339 in UTC with milliseconds, `2022-06-28T16:07:40.105Z`.
pub(crate) fn rfc3339(time: chrono::DateTime<chrono::Utc>) -> String {
    time.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// [`rfc3339`] of a Unix ms, or the raw number where chrono has no date for it.
pub(crate) fn rfc3339_ms(unix_ms: u64) -> String {
    i64::try_from(unix_ms)
        .ok()
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map_or_else(|| format!("{unix_ms} ms"), rfc3339)
}
