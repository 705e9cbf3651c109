//! [`LocalGenerator`]: one thread's generator, its state in a plain `Cell`.

use crate::BuildError;
use crate::clock::{Clock, MonotonicClock};
use crate::format::layout::Layout;
use crate::generator::atfork::Home;
use crate::generator::builder::Builder;
use crate::generator::ids::{Body, Shard, minting_methods};
use crate::generator::minter::LocalWord;

/// A Snowflake ID generator for one thread: no atomics, no cache-line traffic.
///
/// The same minting rules as [`Generator`](crate::Generator) (strictly increasing IDs
/// whatever the clock does, a spent tick waits), with the state word in a `Cell`: it is
/// `Send` (move it to another thread) but not `Sync` (it cannot be shared), so only one
/// thread mints from it at a time and a plain load and store replace the CAS.
///
/// Give each thread its own with its own node ID, for instance from a `thread_local!`
/// (below), or use a [`ShardedGenerator`](crate::ShardedGenerator) when the number of
/// threads is not known up front.
///
/// Like `Generator`, it is neither `Clone` nor `Copy`: a copy would continue from the
/// same state with the same node and mint the very IDs the original mints.
///
/// With the `tokio` feature it has the same async methods as `Generator`; their futures
/// are not `Send` (run them on a `LocalSet` or a current-thread runtime).
///
/// # Examples
///
/// ```
/// use atomflake::{Layout, LocalGenerator};
/// use std::sync::atomic::{AtomicU64, Ordering};
///
/// static NEXT_NODE: AtomicU64 = AtomicU64::new(0);
///
/// thread_local! {
///     // Each thread takes the next node on first use (a real service would also check
///     // that it stays below 1024, the Twitter layout's node count).
///     static IDS: LocalGenerator = LocalGenerator::new(
///         Layout::TWITTER,
///         NEXT_NODE.fetch_add(1, Ordering::Relaxed),
///     ).expect("fewer than 1024 threads");
/// }
///
/// let (a, b) = IDS.with(|ids| (ids.next_id(), ids.next_id()));
/// assert!(b > a);
/// ```
///
/// ```compile_fail
/// # use atomflake::{Layout, LocalGenerator};
/// let generator = LocalGenerator::new(Layout::TWITTER, 7).unwrap();
/// let copy = generator.clone(); // a copy would mint duplicates: not Clone
/// ```
///
/// ```compile_fail
/// # use atomflake::{Layout, LocalGenerator};
/// fn shared<T: Sync>(_: &T) {}
/// let generator = LocalGenerator::new(Layout::TWITTER, 7).unwrap();
/// shared(&generator); // one thread only: not Sync
/// ```
pub struct LocalGenerator<C = MonotonicClock> {
    home: Home<Body<Shard<LocalWord>, C>>,
}

impl LocalGenerator<MonotonicClock> {
    /// A generator for `node` with the process's [`MonotonicClock`].
    ///
    /// # Errors
    ///
    /// [`BuildError::NodeOutOfRange`] when `node` does not fit the layout's node field.
    pub fn new(layout: Layout, node: u64) -> Result<LocalGenerator<MonotonicClock>, BuildError> {
        Builder::new(layout).build_local(node)
    }
}

impl<C: Clock> LocalGenerator<C> {
    /// A generator for `node` that reads `clock`.
    ///
    /// # Errors
    ///
    /// [`BuildError::NodeOutOfRange`] when `node` does not fit the layout's node field.
    pub fn with_clock(layout: Layout, node: u64, clock: C) -> Result<LocalGenerator<C>, BuildError> {
        Builder::with_clock(layout, clock).build_local(node)
    }

    /// The generator's node ID.
    pub fn node(&self) -> u64 {
        self.home.nodes.id
    }
}

impl<C: Clock> Builder<C> {
    /// A [`LocalGenerator`] for `node`.
    ///
    /// # Errors
    ///
    /// As [`build`](Self::build).
    pub fn build_local(self, node: u64) -> Result<LocalGenerator<C>, BuildError> {
        let (core, packer) = self.into_node_core(node)?;
        let node = Shard::local(&core.minter, packer, node);
        Ok(LocalGenerator {
            home: Body::home(node, core),
        })
    }
}

// `next_id`, `next_ids`, `fill`, their bounded and async twins and `Debug`: written once
// for the three generator types by `minting_methods!` in `src/generator/ids.rs`.
minting_methods!(
    LocalGenerator, LocalIds,
    node: |self| &self.home.nodes,
    debug: [
        "node": self.home.nodes.id,
        "state": crate::generator::minter::Word::load(&self.home.nodes.state),
    ],
    new: "LocalGenerator::new(Layout::TWITTER, 7)",
    with_clock: "LocalGenerator::with_clock(layout, 7, clock.clone())",
);

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::{Id, ManualClock, MintError, Parts};
    use std::time::Duration;

    const T0: u64 = 1_700_000_000_000;

    fn manual(layout: Layout, node: u64) -> (LocalGenerator<ManualClock>, ManualClock) {
        let clock = ManualClock::new(T0);
        (
            LocalGenerator::with_clock(layout, node, clock.clone()).unwrap(),
            clock,
        )
    }

    fn assert_send<T: Send>() {}

    #[test]
    fn local_generators_are_send() {
        assert_send::<LocalGenerator>();
    }

    #[test]
    fn mints_like_the_shared_generator() {
        let (local, clock) = manual(Layout::DISCORD, 35);
        let shared = crate::Generator::with_clock(Layout::DISCORD, 35, clock.clone()).unwrap();
        for step in [0_i64, 0, 3, -100, 0, 1, 1, -2, 7] {
            if step >= 0 {
                clock.advance(step.unsigned_abs());
            } else {
                clock.rewind(step.unsigned_abs());
            }
            assert_eq!(
                local.try_next_id(),
                shared.try_next_id(),
                "after a step of {step}"
            );
        }
        assert_eq!(
            Layout::DISCORD.decode(local.next_id()),
            Parts {
                unix_ms: T0 + 3,
                node: 35,
                sequence: 7
            },
            "a clock behind continues the last tick"
        );
        assert_eq!((local.layout(), local.node()), (Layout::DISCORD, 35));
    }

    #[test]
    fn spent_tick_reports_when_ids_return() {
        let one_per_tick = Layout::builder().timestamp_bits(41).build().unwrap();
        let (g, clock) = manual(one_per_tick, 0);
        let first = g.try_next_id().unwrap();
        assert_eq!(
            g.try_next_id(),
            Err(MintError::SequenceExhausted {
                tick: T0 + 1,
                retry_after: Duration::from_millis(1)
            })
        );
        clock.advance(1);
        assert!(g.try_next_id().unwrap() > first);
    }

    #[test]
    fn blocks_and_fill_continue_one_sequence() {
        let (g, clock) = manual(Layout::TWITTER, 1);
        let block: Vec<Id> = g.next_ids(4000).collect();
        clock.advance(1);
        let mut buffer = [Id::new(0); 300];
        g.fill(&mut buffer);
        let all: Vec<Id> = block.into_iter().chain(buffer).collect();
        assert!(all.windows(2).all(|w| w[0] < w[1]));
        let last = Layout::TWITTER.decode(all[all.len() - 1]);
        assert_eq!((last.unix_ms, last.sequence), (T0 + 1, 299));
    }

    #[test]
    fn debug_shows_layout_node_and_state() {
        let (g, _) = manual(Layout::TWITTER, 9);
        let _ = g.next_id();
        let text = format!("{g:?}");
        assert!(text.starts_with("LocalGenerator { layout: Layout {"), "{text}");
        let first_slot = (T0 - Layout::TWITTER.epoch_ms()) << 22 | 1023 << 12;
        assert!(
            text.contains(&format!("node: 9, state: {}, ..", first_slot + 1)),
            "{text}"
        );
    }
}
