//! `atomflake layouts`: the layout presets, one line each.

use super::rfc3339_ms;
use crate::{Failure, write_failed};
use atomflake::Layout;
use std::io::{self, Write};

/// `atomflake layouts`: field widths, tick, epoch, and the dates the IDs pass `i64::MAX`
/// and run out.
pub(crate) fn run() -> Result<(), Failure> {
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
