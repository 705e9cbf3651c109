//! `atomflake mask` and `atomflake unmask`: IDs through a keyed permutation, for public IDs
//! that show neither their time, their node nor the volume between two of them.

use super::decode::{ID_FORMS, each_input, parse_id, reject};
use super::mint::key;
use crate::{Failure, write_failed};
use atomflake::Mask;
use clap::Args;
use std::io::Write;
use std::path::PathBuf;

/// The options of `atomflake mask` and `atomflake unmask`.
#[derive(Args)]
pub(crate) struct MaskArgs {
    /// The key: a file of 16 raw bytes or 32 hex digits (a line end after them is allowed),
    /// readable by its owner alone (chmod 600). Make one with
    /// `head -c 16 /dev/urandom > mask.key && chmod 600 mask.key`.
    #[arg(long, value_name = "PATH")]
    key_file: PathBuf,
    /// IDs, decimal or base32; read one per line from stdin when none are given.
    #[arg(value_name = "ID", allow_negative_numbers = true)]
    ids: Vec<String>,
}

/// `atomflake mask` (`unmask` false) or `atomflake unmask`: each ID given, else each on
/// stdin, written in decimal, one a line.
pub(crate) fn run(args: &MaskArgs, unmask: bool) -> Result<(), Failure> {
    let mask = key(&args.key_file)?;
    let (verb, through): (&str, fn(&Mask, atomflake::Id) -> atomflake::Id) = if unmask {
        ("unmask", Mask::unmask)
    } else {
        ("mask", Mask::mask)
    };
    let mut digits = itoa::Buffer::new();
    each_input(&args.ids, verb, |out, text| match parse_id(text, ID_FORMS) {
        Ok(id) => {
            writeln!(out, "{}", digits.format(through(&mask, id).get())).map_err(write_failed)?;
            Ok(true)
        }
        Err(err) => reject(out, format_args!("cannot {verb} {text:?}: {err}")),
    })
}
