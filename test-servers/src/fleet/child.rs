//! The holder process: what a test asks of it (its environment, written by
//! [`Spawn`](super::Spawn)), how it claims through an [`Engine`], and what it prints.

use crate::now_ms;
use atomflake::mark::{MarkStore, StoreError, StoreErrorKind, Tenure};
use atomflake::{
    BuildError, Builder, Clock, FieldOrder, Generator, Layout, MintError, MonotonicClock, PreciseClock,
};
use atomflake_lease::LeaseOptions;
use atomflake_lease::{CLAIM_TIMEOUT, Engine, Lease, LeaseError};
use std::fmt::Debug;
use std::io::Write;
use std::str::FromStr;
use std::time::{Duration, Instant};

/// `hold` (claim, then wait for stdin to close) or `mint` (claim, then mint until
/// [`COUNT`] IDs or the lease is lost). A test run without it is no holder.
pub(super) const MODE: &str = "ATOMFLAKE_HOLDER_MODE";
/// Where the engine is, as its config parses it: a URL, a connection string.
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

/// How long a holder asking for a node waits for its holder's lease to expire, or for an
/// engine that does not answer.
const TAKEN_WAIT: Duration = Duration::from_secs(20);
/// How long a holder told to wait waits for a free node or an engine that answers.
const BUSY_WAIT: Duration = Duration::from_secs(30);

/// The longest a holder tries to claim before it says `refused`: its longer wait
/// ([`BUSY_WAIT`], not [`TAKEN_WAIT`]) and a last claim begun just before it ends, which
/// takes a claim's time ([`CLAIM_TIMEOUT`]) at most.
pub(super) const GIVES_UP_AFTER: Duration = BUSY_WAIT.saturating_add(CLAIM_TIMEOUT);
const _: () = assert!(BUSY_WAIT.as_millis() >= TAKEN_WAIT.as_millis());

/// What a refused claim means to a holder process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// The node asked for is held: the holder tries again for 20 s, waiting for the lease
    /// of the node's holder to expire.
    Taken,
    /// No node is free, or the engine does not answer: a holder told to
    /// [`wait`](super::Spawn::wait) tries again for 30 s, one asking for a node for 20 s
    /// (a successor is there to take the node, not to test the engine's refusals).
    Busy,
    /// Any other: the holder prints `refused TEXT` and exits.
    Final,
}

impl Refusal {
    /// What `error` means to a holder: every engine's [`LeaseError`] says the same.
    fn of<E>(error: &LeaseError<E>) -> Refusal {
        match error {
            LeaseError::NodeTaken { .. } => Refusal::Taken,
            LeaseError::NoFreeNode { .. } | LeaseError::Crowded { .. } | LeaseError::Engine(_) => {
                Refusal::Busy
            }
            _ => Refusal::Final,
        }
    }
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

/// The holder process on engine `E`, run from the engine's test that
/// [`Holders::new`](super::Holders::new) names: claims where the test said (parsed as the
/// engine's config), prints `node N C` (C the claim's generation), then holds or mints as
/// its environment says. Returns at once in a test run that is no holder.
///
/// # Panics
///
/// On an environment [`Spawn`](super::Spawn) did not write.
pub fn holder<E>()
where
    E: Engine<Config: Sized + FromStr<Err: Debug>>,
{
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
    let target: E::Config = env(TARGET).parse().unwrap();
    let start = Instant::now();
    let count = std::env::var(COUNT).map_or(usize::MAX, |count| count.parse().unwrap());
    let asked = Asked {
        start,
        wait_for_any: std::env::var(WAIT).is_ok(),
        for_a_node: std::env::var(NODE).is_ok(),
    };
    loop {
        let Some(lease) = asked.claim::<E>(&target, &layout, &options) else {
            return;
        };
        let node = lease.nodes()[0];
        let generation = lease.generation();
        let claimed = || {
            println!("node {node} {generation}");
            println!("claimed in {} ms", start.elapsed().as_millis());
        };
        let minted = match mode.as_str() {
            "hold" => {
                claimed();
                let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
                drop(lease);
                return;
            }
            "mint" if std::env::var(CLOCK).as_deref() == Ok("precise") => {
                mint_on(PreciseClock::new(), layout, lease, count, claimed)
            }
            "mint" => mint_on(MonotonicClock::new(), layout, lease, count, claimed),
            other => panic!("unknown mode {other}"),
        };
        match minted {
            Ok(()) => return,
            // The build's first store failed for now (a loaded machine's server slow to
            // answer, a nemesis's pause): the claim is given back and made again, as a
            // program would (a successor asking for the node waits for it the same way).
            Err(error) if error.is_transient() && start.elapsed() < TAKEN_WAIT => {
                eprintln!(
                    "holder {}: no generator on node {node} (claim {generation}), claiming again: {error}",
                    std::process::id()
                );
            }
            // The lease lost between the claim and the build: said as a lost lease is while
            // minting.
            Err(error) => {
                claimed();
                println!("lease {} {error}", now_ms());
                return;
            }
        }
    }
}

/// How a holder asks for its node.
struct Asked {
    start: Instant,
    /// Told to [`wait`](super::Spawn::wait).
    wait_for_any: bool,
    /// Asking for one node.
    for_a_node: bool,
}

impl Asked {
    /// A claim on engine `E`, tried again as [`Refusal`] says; `None` once refused, said as
    /// `refused TEXT`.
    fn claim<E: Engine>(
        &self,
        target: &E::Config,
        layout: &Layout,
        options: &LeaseOptions,
    ) -> Option<Lease<E>> {
        loop {
            let error = match Lease::<E>::acquire(target, layout, options) {
                Ok(lease) => return Some(lease),
                Err(error) => error,
            };
            let waited = self.start.elapsed();
            match Refusal::of(&error) {
                // A successor asked for a node, or waits for any: wait for a holder's lease
                // to expire.
                Refusal::Taken if waited < TAKEN_WAIT => {}
                Refusal::Busy if self.wait_for_any && waited < BUSY_WAIT => {}
                Refusal::Busy if self.for_a_node && waited < TAKEN_WAIT => {
                    eprintln!(
                        "holder {}: asking for a node, refused; trying again: {error}",
                        std::process::id()
                    );
                }
                _ => {
                    println!("refused {error}");
                    return None;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Builds a generator on `clock` and the node of `lease`, says it `claimed`, and mints
/// `count` IDs on it; the build's error when there is no generator.
fn mint_on<C: Clock + Clone + Send + 'static, S: MarkStore>(
    clock: C,
    layout: Layout,
    lease: S,
    count: usize,
    claimed: impl FnOnce(),
) -> Result<(), BuildError> {
    let node = lease.nodes()[0];
    let generator = Builder::with_clock(layout, clock)
        .mark_store(Told(lease))
        .build(node)?;
    claimed();
    mint(&generator, count);
    Ok(())
}

/// A holder's lease, whose failed and slow stores are said on stderr (a minting holder
/// sees only that its deadline passed): what a test that fails on a holder shows.
#[derive(Debug)]
struct Told<S>(S);

/// A store slower than this is said even when it succeeds.
const SLOW_STORE: Duration = Duration::from_secs(1);

impl<S: MarkStore> MarkStore for Told<S> {
    fn mark(&self) -> u64 {
        self.0.mark()
    }

    fn store(&mut self, unix_ms: u64) -> Result<(), StoreError> {
        let start = Instant::now();
        let result = self.0.store(unix_ms);
        let took = start.elapsed();
        match &result {
            Err(error) => eprintln!(
                "holder {}: at {} ms a store of {unix_ms} failed after {took:?}: {error}",
                std::process::id(),
                now_ms()
            ),
            Ok(()) if took > SLOW_STORE => eprintln!(
                "holder {}: at {} ms a store of {unix_ms} took {took:?}",
                std::process::id(),
                now_ms()
            ),
            Ok(()) => {}
        }
        result
    }

    fn describe(&self) -> String {
        self.0.describe()
    }

    fn nodes(&self) -> &[u64] {
        self.0.nodes()
    }

    fn tenure(&self) -> Tenure {
        self.0.tenure()
    }

    fn lapsed(&self) -> StoreError {
        self.0.lapsed()
    }

    fn finish(&mut self, unix_ms: u64) {
        self.0.finish(unix_ms);
    }
}

/// How long a minting holder goes without an ID, refused only with a pending mark or a
/// spent sequence, before it says so on stderr.
const STALLED: Duration = Duration::from_secs(2);

/// Mints `count` IDs, one a millisecond, printing each; stops when the lease is lost.
/// Minting refused only with a pending mark or a spent sequence for 2 s is said on
/// stderr, once per stall.
///
/// # Panics
///
/// On a mint error other than the store's, a pending mark or a spent sequence.
pub fn mint<C: Clock>(generator: &Generator<C>, count: usize) {
    println!("clock {}", generator.clock().precise_unix_ms());
    let mut out = std::io::stdout().lock();
    let mut minted = 0;
    let mut last_refusal = String::new();
    let mut last_id = Instant::now();
    let mut stall_said = false;
    while minted < count {
        match generator.try_next_id() {
            Ok(id) => {
                writeln!(out, "id {} {}", id.get(), now_ms()).unwrap();
                minted += 1;
                last_id = Instant::now();
                stall_said = false;
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
            Err(error @ (MintError::MarkPending { .. } | MintError::SequenceExhausted { .. })) => {
                if !stall_said && last_id.elapsed() >= STALLED {
                    eprintln!(
                        "holder {}: at {} ms no id for {:?}, its clock at {} ms ({} ms read \
                         precisely): {error}",
                        std::process::id(),
                        now_ms(),
                        last_id.elapsed(),
                        generator.clock().unix_ms(),
                        generator.clock().precise_unix_ms()
                    );
                    stall_said = true;
                }
            }
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
