//! `atomflake decode`: an ID's time, node and sequence, as text or JSON lines.

use super::{LayoutArgs, rfc3339};
use crate::{Failure, report, write_failed};
use atomflake::{Id, Layout, ParseIdError};
use clap::Args;
use std::fmt;
use std::io::{self, BufRead, BufWriter, Write};

/// Discord's node is `worker << 5 | process`.
const DISCORD_PROCESS_BITS: u32 = 5;

/// The options of `atomflake decode`.
#[derive(Args)]
pub(crate) struct DecodeArgs {
    #[command(flatten)]
    layout: LayoutArgs,
    /// One JSON object per line, ID as a string.
    #[arg(long)]
    json: bool,
    /// IDs to decode; read from stdin when none are given.
    #[arg(value_name = "ID", allow_negative_numbers = true)]
    ids: Vec<String>,
}

/// `atomflake decode`: the IDs given, else those on stdin.
pub(crate) fn run(args: &DecodeArgs) -> Result<(), Failure> {
    let layout = args.layout.preset()?;
    let json = args.json;
    each_input(&args.ids, "decode", |out, text| {
        decode_one(out, layout, json, text)
    })
}

/// Runs `each` on the texts `given`, else on each line of stdin (blank lines skipped),
/// writing to a buffered stdout; a line that is not UTF-8 is reported as what cannot be
/// done to it (`verb`), and the lines after it still go through `each`, which answers
/// whether its text was good. Bad input, reported, ends in [`Failure::BadInput`].
pub(crate) fn each_input<'a>(
    given: &[String],
    verb: &str,
    mut each: impl FnMut(&mut BufWriter<io::StdoutLock<'a>>, &str) -> Result<bool, Failure>,
) -> Result<(), Failure> {
    let mut out = BufWriter::new(io::stdout().lock());
    let mut all_good = true;
    if given.is_empty() {
        // Lines as bytes: a line that is not UTF-8 is bad input like any other, reported
        // while the lines after it are still read.
        for (index, line) in io::stdin().lock().split(b'\n').enumerate() {
            let line = line.map_err(|err| Failure::Other(format!("cannot read stdin: {err}")))?;
            all_good &= match std::str::from_utf8(&line) {
                // `trim` also takes the `\r` of a `\r\n` line end.
                Ok(text) => match text.trim() {
                    "" => true,
                    text => each(&mut out, text)?,
                },
                Err(_) => reject(
                    &mut out,
                    format_args!("cannot {verb} line {}: it is not UTF-8", index + 1),
                )?,
            };
        }
    } else {
        for text in given {
            all_good &= each(&mut out, text)?;
        }
    }
    out.flush().map_err(write_failed)?;
    if all_good { Ok(()) } else { Err(Failure::BadInput) }
}

/// Writes the decoded `text`, or reports why it does not decode; `Ok(false)` for the latter.
fn decode_one(out: &mut impl Write, layout: Layout, json: bool, text: &str) -> Result<bool, Failure> {
    let decoded = parse(layout, text).and_then(|id| match layout.chrono_utc(id) {
        Ok(time) => Ok((id, time)),
        Err(err) => Err(err.to_string()),
    });
    let (id, time) = match decoded {
        Ok(decoded) => decoded,
        Err(err) => return reject(out, format_args!("cannot decode {text:?}: {err}")),
    };
    let parts = layout.decode(id);
    let time = rfc3339(time);
    let discord = (layout == Layout::DISCORD).then_some((
        parts.node >> DISCORD_PROCESS_BITS,
        parts.node & ((1 << DISCORD_PROCESS_BITS) - 1),
    ));
    let written = if json {
        write!(
            out,
            r#"{{"id":"{id}","unix_ms":{},"time":"{time}","node":{}"#,
            parts.unix_ms, parts.node
        )
        .and_then(|()| match discord {
            Some((worker, process)) => write!(out, r#","worker":{worker},"process":{process}"#),
            None => Ok(()),
        })
        .and_then(|()| writeln!(out, r#","sequence":{}}}"#, parts.sequence))
    } else {
        write!(out, "{id}  {time}  ")
            .and_then(|()| match discord {
                Some((worker, process)) => write!(out, "worker {worker}  process {process}"),
                None => write!(out, "node {}", parts.node),
            })
            .and_then(|()| writeln!(out, "  sequence {}", parts.sequence))
    };
    written.map_err(write_failed)?;
    Ok(true)
}

/// Reports bad input on stderr after what `out` holds so far; `Ok(false)`.
pub(crate) fn reject(out: &mut impl Write, message: fmt::Arguments<'_>) -> Result<bool, Failure> {
    // Keep stdout and stderr in input order on a terminal.
    out.flush().map_err(write_failed)?;
    report(message);
    Ok(false)
}

/// The forms [`parse`] takes, as its errors name them.
const FORMS: &str = "decimal (the digits 0-9), base32 (13 characters: Crockford's digits 0-9 \
                     and A-Z without U, I and L read as 1, O as 0), base62 (11 characters: 0-9, A-Z, \
                     a-z) or a UUID of version 7 (32 hex digits)";

/// The forms [`parse_id`] takes.
pub(crate) const ID_FORMS: &str = "decimal (the digits 0-9), base32 (13 characters: Crockford's digits \
                                   0-9 and A-Z without U, I and L read as 1, O as 0) or base62 (11 \
                                   characters: 0-9, A-Z, a-z)";

/// The fewest characters of a UUID's text (32 hex digits, no hyphens): more than any
/// decimal or base32 ID has.
const UUID_MIN_LEN: usize = 32;

/// [`parse_id`], or a UUID of version 7 of the layout when the text has 32 characters or
/// more.
fn parse(layout: Layout, text: &str) -> Result<Id, String> {
    if text.len() >= UUID_MIN_LEN {
        return Id::parse_uuid(text, layout).map_err(|err| err.to_string());
    }
    parse_id(text, FORMS)
}

/// [`Id::from_any_form`], with an error that is the line to report: text read as decimal
/// that holds a letter or a sign is told the `forms` taken, as it may be another form.
pub(crate) fn parse_id(text: &str, forms: &str) -> Result<Id, String> {
    Id::from_any_form(text).map_err(|err| match err {
        ParseIdError::InvalidDigit { found, index } => {
            format!("invalid character {found:?} at byte {index} in id: ids are {forms}")
        }
        ParseIdError::SignedId { sign } => {
            format!("sign {sign:?} in id: ids are unsigned, {forms}")
        }
        err => err.to_string(),
    })
}
