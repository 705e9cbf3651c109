//! `atomflake mint`: IDs one per line, as fast as the layout's cap allows.
//!
//! IDs are minted a block at a time with [`Generator::fill`] (one CAS per tick's block) and
//! written through one large `BufWriter` with `itoa`'s integer formatting, so the command
//! is bound by the layout's IDs per tick, not by formatting or syscalls.

use super::{LayoutArgs, lease, node_in};
use crate::high_water::HighWaterArgs;
use crate::{Failure, write_failed};
use atomflake::{Clock, Generator, Id, Layout, Mask};
use clap::{Args, ValueEnum};
use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// IDs minted per `fill`: a Twitter tick's worth.
const BLOCK: usize = 4096;

/// Counts from which a progress line is shown (on a terminal).
const PROGRESS_FROM: u64 = 1_000_000;

/// How often the progress line is redrawn, at most.
const PROGRESS_EVERY: Duration = Duration::from_millis(100);

/// The options of `atomflake mint`.
#[derive(Args)]
pub(crate) struct MintArgs {
    #[command(flatten)]
    layout: LayoutArgs,
    /// Node ID of this minter (0 unless given). Give every process that mints at the
    /// same time its own node, or their IDs can collide; or take one with `--lease`. A
    /// fixed node keeps a high-water file (`--high-water`), so that a restart never
    /// repeats its IDs.
    #[arg(long, env = "ATOMFLAKE_NODE", value_name = "N", allow_negative_numbers = true)]
    node: Option<String>,
    #[command(flatten)]
    high_water: HighWaterArgs,
    /// Take the node from a lease in this PostgreSQL database (a URL,
    /// `postgres://user@host/db`, or `key=value` connection settings), etcd cluster
    /// (`etcd://HOST:PORT[,HOST:PORT...]`), Redis server
    /// (`redis://[USER:PASSWORD@]HOST:PORT[/DB][?replicas=N]`) or ZooKeeper ensemble
    /// (`zk://HOST:PORT[,HOST:PORT...][/CHROOT]`): the lowest free node of the layout, held
    /// while minting, released at exit. The IDs start past every ID minted on that node
    /// before. PostgreSQL: TLS as libpq's `sslmode` says (`sslmode=verify-full
    /// sslrootcert=ca.pem`). etcd over TLS, with a client certificate and a user:
    /// `etcds://[USER:PASSWORD@]HOST:PORT[,...][?cacert=PATH&cert=PATH&key=PATH]`; Redis
    /// over TLS: `rediss://…` with the same files. No error shows the password; give it in
    /// `ATOMFLAKE_LEASE` to keep it off the command line.
    #[arg(long, env = "ATOMFLAKE_LEASE", hide_env_values = true, value_name = "URL")]
    lease: Option<String>,
    #[command(flatten)]
    lease_options: lease::LeaseArgs,
    /// How many IDs to mint.
    #[arg(short = 'n', long = "count", default_value_t = 1, value_name = "COUNT")]
    count: u64,
    /// decimal: `1541815603606036480`; base32: 13 Crockford characters,
    /// `1ASD13XH1F800`; base62: 11 characters, `0-9A-Za-z`, `1ptWyK4WgZU`; json: one JSON string per line (JSON Lines, IDs as strings so
    /// JavaScript keeps all 64 bits): `jq` reads them as a stream, `jq -s` as an array;
    /// uuid: a UUID of version 7 that holds the ID and its time, and sorts as the IDs do
    /// (`decode` takes it back); masked: the ID masked with the key of `--key-file`, in
    /// decimal (`atomflake unmask` takes it back).
    #[arg(long, value_enum, default_value_t = Format::Decimal)]
    format: Format,
    /// The key of `--format masked`: a file of 16 raw bytes or 32 hex digits, readable by
    /// its owner alone (see `atomflake mask`).
    #[arg(long, value_name = "PATH")]
    key_file: Option<PathBuf>,
}

/// How `mint` writes IDs.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    /// Decimal digits.
    Decimal,
    /// 13 characters of Crockford base32.
    Base32,
    /// 11 characters of base62, `0-9A-Za-z` in ASCII order.
    Base62,
    /// A JSON string per line.
    Json,
    /// A UUID of version 7 (RFC 9562): the tick's start as its time, then the whole ID.
    Uuid,
    /// The ID masked with `--key-file`'s key, in decimal.
    Masked,
}

/// How `mint` writes each ID: the format, and the mask of `--format masked`.
pub(crate) struct Written {
    format: Format,
    mask: Option<Mask>,
}

impl Written {
    /// The format, with the key file it needs, or the usage error of one without the other.
    fn of(format: Format, key_file: Option<&Path>) -> Result<Written, Failure> {
        let mask = match (format, key_file) {
            (Format::Masked, Some(path)) => Some(key(path)?),
            (Format::Masked, None) => {
                return Err(Failure::Usage("--format masked needs --key-file PATH".to_owned()));
            }
            (_, Some(_)) => {
                return Err(Failure::Usage("--key-file goes with --format masked".to_owned()));
            }
            (_, None) => None,
        };
        Ok(Written { format, mask })
    }
}

/// The mask of the key file at `path`, or the usage error that says why it cannot be used.
pub(crate) fn key(path: &Path) -> Result<Mask, Failure> {
    Mask::from_key_file(path).map_err(|err| Failure::Usage(err.to_string()))
}

/// `atomflake mint`: on the node given, or on one leased with `--lease`.
pub(crate) fn run(args: &MintArgs) -> Result<(), Failure> {
    let layout = args.layout.preset()?;
    let written = Written::of(args.format, args.key_file.as_deref())?;
    match (&args.lease, &args.node) {
        (Some(_), Some(node)) => Err(Failure::Usage(format!(
            "--node {node} and --lease: the lease picks the node (ATOMFLAKE_NODE counts as --node)"
        ))),
        (Some(url), None) => args
            .high_water
            .check_lease()
            .and_then(|()| lease::mint(layout, url, &args.lease_options, args.count, &written)),
        (None, node) => fixed(
            layout,
            &args.layout.layout,
            node.as_deref().unwrap_or("0"),
            &args.high_water,
            args.count,
            &written,
        ),
    }
}

/// `mint` on a fixed `node` of `layout` (preset `name`), keeping the node's high-water file
/// unless `--no-high-water`.
fn fixed(
    layout: Layout,
    name: &str,
    node: &str,
    high_water: &HighWaterArgs,
    count: u64,
    written: &Written,
) -> Result<(), Failure> {
    let node = node_in(layout, node)?;
    let generator = high_water.generator(layout, name, node)?;
    write_ids(&generator, count, written, |generator, block| {
        generator.fill(block);
        Ok(())
    })
}

/// Mints `count` IDs with `fill` (a block at a time) and writes them to stdout.
pub(crate) fn write_ids<C: Clock>(
    generator: &Generator<C>,
    count: u64,
    written: &Written,
    mut fill: impl FnMut(&Generator<C>, &mut [Id]) -> Result<(), Failure>,
) -> Result<(), Failure> {
    // `fill` panics on a clock outside the layout's span: say so cleanly instead.
    generator
        .layout()
        .tick_at(generator.clock().unix_ms())
        .map_err(|err| Failure::Other(format!("cannot mint now: {err}")))?;

    let layout = generator.layout();
    let mut progress = Progress::new(count);
    let mut out = BufWriter::with_capacity(1 << 16, io::stdout().lock());
    let mut digits = itoa::Buffer::new();
    let mut ids = vec![Id::new(0); BLOCK];
    let mut left = count;
    while left > 0 {
        let block = &mut ids[..usize::try_from(left).map_or(BLOCK, |left| left.min(BLOCK))];
        fill(generator, block)?;
        if let Some(mask) = &written.mask {
            mask.mask_all(block);
        }
        for &id in &*block {
            write_id(&mut out, &mut digits, layout, id, written).map_err(write_failed)?;
        }
        left -= block.len() as u64;
        progress.show(count - left);
    }
    out.flush().map_err(write_failed)?;
    progress.finish();
    Ok(())
}

fn write_id(
    out: &mut impl Write,
    digits: &mut itoa::Buffer,
    layout: Layout,
    id: Id,
    written: &Written,
) -> io::Result<()> {
    match written.format {
        // A masked block is masked before it is written (`Mask::mask_all`, in bulk).
        Format::Decimal | Format::Masked => out.write_all(digits.format(id.get()).as_bytes())?,
        Format::Base32 => out.write_all(id.to_base32().as_bytes())?,
        Format::Base62 => out.write_all(id.to_base62().as_bytes())?,
        Format::Json => {
            out.write_all(b"\"")?;
            out.write_all(digits.format(id.get()).as_bytes())?;
            out.write_all(b"\"")?;
        }
        // The generator's IDs are of its layout, a preset, whose times all end by 2^48 ms
        // (Mastodon's exactly there): never an error.
        Format::Uuid => write!(out, "{}", id.to_uuid(layout).map_err(io::Error::other)?)?,
    }
    out.write_all(b"\n")
}

/// A progress line on stderr, redrawn in place, for large counts on a terminal.
struct Progress {
    total: u64,
    started: Instant,
    next_draw: Instant,
    enabled: bool,
}

impl Progress {
    fn new(total: u64) -> Progress {
        let now = Instant::now();
        Progress {
            total,
            started: now,
            next_draw: now + PROGRESS_EVERY,
            enabled: total >= PROGRESS_FROM && io::stderr().is_terminal(),
        }
    }

    fn show(&mut self, done: u64) {
        if !self.enabled {
            return;
        }
        let now = Instant::now();
        if now < self.next_draw {
            return;
        }
        self.next_draw = now + PROGRESS_EVERY;
        self.draw(done, "\r");
    }

    fn finish(&self) {
        if self.enabled {
            self.draw(self.total, "\n");
        }
    }

    /// `12000000/100000000 ids (12%), 4093 k ids/s` and `end`.
    fn draw(&self, done: u64, end: &str) {
        let ms = self.started.elapsed().as_millis().max(1);
        let rate = u128::from(done) / ms;
        let percent = u128::from(done) * 100 / u128::from(self.total);
        // A progress line that cannot be drawn is no reason to stop minting.
        let _ = write!(
            io::stderr().lock(),
            "\r{done}/{} ids ({percent}%), {rate} k ids/s{end}",
            self.total
        );
    }
}
