//! The holder process: what a test asks of it (its environment, written by
//! [`Spawn`](super::Spawn)), how it claims through an [`Engine`], and what it prints.

use crate::now_ms;
use atomflake::mark::{LeaseOptions, MarkStore, StoreErrorKind};
use atomflake::{Builder, Clock, FieldOrder, Generator, Layout, MintError, MonotonicClock, PreciseClock};
use std::fmt::Display;
use std::io::Write;
use std::time::{Duration, Instant};

/// `hold` (claim, then wait for stdin to close) or `mint` (claim, then mint until
/// [`COUNT`] IDs or the lease is lost). A test run without it is no holder.
pub(super) const MODE: &str = "ATOMFLAKE_HOLDER_MODE";
/// Where the engine is, as [`Engine::acquire`] reads it: a URL, a connection string.
pub(super) const TARGET: &str = "ATOMFLAKE_HOLDER_TARGET";
pub(super) const NAMESPACE: &str = "ATOMFLAKE_HOLDER_NAMESPACE";
/// The node asked for; the lowest free one without it.
pub(super) const NODE: &str = "ATOMFLAKE_HOLDER_NODE";
pub(super) const TTL_MS: &str = "ATOMFLAKE_HOLDER_TTL_MS";
/// The layout, as [`encode_layout`] writes it.
pub(super) const LAYOUT: &str = "ATOMFLAKE_HOLDER_LAYOUT";
/// `precise` for [`PreciseClock`]; [`MonotonicClock`] otherwise.
pub(super) const CLOCK: &str = "ATOMFLAKE_HOLDER_CLOCK";
/// How many IDs to mint; no end without it.
pub(super) const COUNT: &str = "ATOMFLAKE_HOLDER_COUNT";
/// Set: wait (up to 30 s) for a node when none is free or the engine does not answer.
pub(super) const WAIT: &str = "ATOMFLAKE_HOLDER_WAIT";

/// How long a holder asking for a node waits for its holder's lease to expire.
const TAKEN_WAIT: Duration = Duration::from_secs(20);
/// How long a holder told to wait waits for a free node or an engine that answers.
const BUSY_WAIT: Duration = Duration::from_secs(30);

/// A lease engine, as holder processes use it.
pub trait Engine {
    /// The name of the test in the engine's test binary that calls [`holder()`].
    const CHILD: &'static str;
    /// The lease time of a holder not given one.
    const TTL: Duration;
    /// A claim: the mark store a holder's generator runs on.
    type Lease: MarkStore;
    /// Why a claim was refused.
    type Error: Display;

    /// Claims as `options` say, on the engine at `target` (as the test gave it to
    /// [`Holders::new`](super::Holders::new)).
    ///
    /// # Errors
    ///
    /// The engine's refusal.
    fn acquire(target: &str, layout: &Layout, options: &LeaseOptions) -> Result<Self::Lease, Self::Error>;

    /// The claim's number: larger for each later claim of its node (a generation, a
    /// revision).
    fn claim(lease: &Self::Lease) -> i64;

    /// What `error` means to a holder.
    fn refusal(error: &Self::Error) -> Refusal;
}

/// What a refused claim means to a holder process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The node asked for is held: the holder tries again for 20 s, waiting for the lease
    /// of the node's holder to expire.
    Taken,
    /// No node is free, or the engine does not answer: a holder told to
    /// [`wait`](super::Spawn::wait) tries again for 30 s.
    Busy,
    /// Any other: the holder prints `refused TEXT` and exits.
    Final,
}

/// The clock a minting holder's generator runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HolderClock {
    /// [`MonotonicClock`]: a thread of its own reads the time.
    #[default]
    Monotonic,
    /// [`PreciseClock`]: the time read at each mint.
    Precise,
}

/// The holder process, run from the engine's test named [`Engine::CHILD`]: claims, prints
/// `node N C`, then holds or mints as its environment says. Returns at once in a test run
/// that is no holder.
///
/// # Panics
///
/// On an environment [`Spawn`](super::Spawn) did not write.
pub fn holder<E: Engine>() {
    let Ok(mode) = std::env::var(MODE) else {
        return;
    };
    // The test harness has written "test NAME ... " without a newline.
    println!();
    let env = |name| std::env::var(name).unwrap_or_else(|_| panic!("no {name}"));
    let ttl = Duration::from_millis(env(TTL_MS).parse().unwrap());
    let mut options = LeaseOptions::new(env(NAMESPACE)).ttl(ttl);
    if let Ok(node) = std::env::var(NODE) {
        options = options.node(node.parse().unwrap());
    }
    let layout = decode_layout(&env(LAYOUT));
    let wait_for_any = std::env::var(WAIT).is_ok();
    let target = env(TARGET);
    let start = Instant::now();
    let lease = loop {
        match E::acquire(&target, &layout, &options) {
            Ok(lease) => break lease,
            // A successor asked for a node, or waits for any: wait for a holder's lease to
            // expire.
            Err(error) => match E::refusal(&error) {
                Refusal::Taken if start.elapsed() < TAKEN_WAIT => {}
                Refusal::Busy if wait_for_any && start.elapsed() < BUSY_WAIT => {}
                _ => {
                    println!("refused {error}");
                    return;
                }
            },
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let node = lease.nodes()[0];
    println!("node {node} {}", E::claim(&lease));
    println!("claimed in {} ms", start.elapsed().as_millis());
    match mode.as_str() {
        "hold" => {
            let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
            drop(lease);
        }
        "mint" => {
            let count = std::env::var(COUNT).map_or(usize::MAX, |count| count.parse().unwrap());
            if std::env::var(CLOCK).as_deref() == Ok("precise") {
                let builder = Builder::with_clock(layout, PreciseClock::new()).mark_store(lease);
                mint(&builder.build(node).unwrap(), count);
            } else {
                let builder = Builder::with_clock(layout, MonotonicClock::new()).mark_store(lease);
                mint(&builder.build(node).unwrap(), count);
            }
        }
        other => panic!("unknown mode {other}"),
    }
}

/// Mints `count` IDs, one a millisecond, printing each; stops when the lease is lost.
///
/// # Panics
///
/// On a mint error other than the store's, a pending mark or a spent sequence.
pub fn mint<C: Clock>(generator: &Generator<C>, count: usize) {
    println!("clock {}", generator.clock().precise_unix_ms());
    let mut out = std::io::stdout().lock();
    let mut minted = 0;
    let mut last_refusal = String::new();
    while minted < count {
        match generator.try_next_id() {
            Ok(id) => {
                writeln!(out, "id {} {}", id.get(), now_ms()).unwrap();
                minted += 1;
            }
            Err(MintError::Store(store)) => {
                let text = store.to_string();
                if text != last_refusal {
                    writeln!(out, "lease {} {text}", now_ms()).unwrap();
                    last_refusal = text;
                }
                if store.kind() == StoreErrorKind::Lost {
                    return;
                }
            }
            Err(MintError::MarkPending | MintError::SequenceExhausted { .. }) => {}
            Err(other) => panic!("{other}"),
        }
        out.flush().unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// `layout` for [`LAYOUT`]: its widths, epoch, tick and field order.
pub(super) fn encode_layout(layout: &Layout) -> String {
    let order = match layout.order() {
        FieldOrder::NodeSequence => "node-sequence",
        FieldOrder::SequenceNode => "sequence-node",
    };
    format!(
        "{} {} {} {} {} {order}",
        layout.timestamp_bits(),
        layout.node_bits(),
        layout.sequence_bits(),
        layout.epoch_ms(),
        layout.tick_ms()
    )
}

/// The layout [`encode_layout`] wrote.
fn decode_layout(text: &str) -> Layout {
    let fields: Vec<&str> = text.split(' ').collect();
    let number = |i: usize| -> u64 { fields[i].parse().unwrap() };
    let bits = |i: usize| u32::try_from(number(i)).unwrap();
    let order = match fields[5] {
        "node-sequence" => FieldOrder::NodeSequence,
        _ => FieldOrder::SequenceNode,
    };
    Layout::builder()
        .timestamp_bits(bits(0))
        .node_bits(bits(1))
        .sequence_bits(bits(2))
        .epoch_ms(number(3))
        .tick_ms(number(4))
        .order(order)
        .build()
        .unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layout_comes_through_the_environment_whole() {
        for layout in [Layout::TWITTER, Layout::SONYFLAKE, super::super::four_nodes()] {
            assert_eq!(decode_layout(&encode_layout(&layout)), layout);
        }
    }
}
