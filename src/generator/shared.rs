//! [`Generator`]: one state word advanced by a lock-free CAS loop.

use crate::BuildError;
use crate::clock::{Clock, MonotonicClock};
use crate::format::layout::Layout;
use crate::generator::atfork::Home;
use crate::generator::builder::Builder;
use crate::generator::ids::{Body, Shard, SharedWord, minting_methods};
use crate::generator::minter::Word;

/// A lock-free Snowflake ID generator for one node.
///
/// Shared by `&` (or `Arc`) across threads: `Generator` is `Send + Sync` when its clock is.
/// Each mint is one successful compare-and-swap on a single `AtomicU64` (see
/// [design](crate::docs::design) for the word), so two mints never get the same ID and IDs
/// from one generator strictly increase in the order the CASes take effect, whatever the
/// clock does.
///
/// Uniqueness *across* generators needs a distinct node ID for each live generator of a
/// layout; that is the user's to arrange. A generator is deliberately not `Clone`: a copy
/// would mint the same IDs as the original.
///
/// # Examples
///
/// ```
/// use atomflake::{Generator, Layout};
///
/// let generator = Generator::new(Layout::TWITTER, 7)?;
/// let (a, b) = (generator.next_id(), generator.next_id());
/// assert!(b > a);
/// assert_eq!(Layout::TWITTER.decode(a).node, 7);
/// # Ok::<(), atomflake::Error>(())
/// ```
///
/// ```compile_fail
/// # use atomflake::{Generator, Layout};
/// let generator = Generator::new(Layout::TWITTER, 7).unwrap();
/// let copy = generator.clone(); // a copy would mint duplicates: not Clone
/// ```
///
/// # Atomic orderings
///
/// The state word orders nothing but itself: no other memory is published through it, and
/// an ID is built from the value a CAS won. Uniqueness and per-generator order follow from
/// the atomic's single modification order, which every ordering (`Relaxed` included)
/// respects: each successful CAS reads the value the previous one wrote and writes a
/// larger one. So every operation on it is `Relaxed`.
pub struct Generator<C = MonotonicClock> {
    home: Home<Body<Shard<SharedWord>, C>>,
}

impl Generator<MonotonicClock> {
    /// A generator for `node` with the process's [`MonotonicClock`].
    ///
    /// # Errors
    ///
    /// [`BuildError::NodeOutOfRange`] when `node` does not fit the layout's node field.
    ///
    /// ```
    /// use atomflake::{BuildError, Field, Generator, Layout};
    ///
    /// assert_eq!(
    ///     Generator::new(Layout::SONYFLAKE, 65_536).unwrap_err(),
    ///     BuildError::NodeOutOfRange { node: 65_536, max: 65_535 },
    /// );
    /// ```
    pub fn new(layout: Layout, node: u64) -> Result<Generator<MonotonicClock>, BuildError> {
        Builder::new(layout).build(node)
    }

    /// A [`Builder`] for generators of `layout`, for options beyond a node and a clock
    /// (borrow-ahead, how to wait, a high-water file).
    pub fn builder(layout: Layout) -> Builder {
        Builder::new(layout)
    }
}

impl<C: Clock> Generator<C> {
    /// A generator for `node` that reads `clock`.
    ///
    /// # Errors
    ///
    /// [`BuildError::NodeOutOfRange`] when `node` does not fit the layout's node field.
    ///
    /// ```
    /// use atomflake::{Generator, Layout, ManualClock, Parts};
    ///
    /// let clock = ManualClock::new(1_700_000_000_000);
    /// let generator = Generator::with_clock(Layout::DISCORD, 1 << 5 | 3, clock.clone())?;
    /// let id = generator.try_next_id()?;
    /// assert_eq!(
    ///     Layout::DISCORD.decode(id),
    ///     Parts { unix_ms: 1_700_000_000_000, node: 35, sequence: 0 },
    /// );
    /// # Ok::<(), atomflake::Error>(())
    /// ```
    pub fn with_clock(layout: Layout, node: u64, clock: C) -> Result<Generator<C>, BuildError> {
        Builder::with_clock(layout, clock).build(node)
    }

    /// The generator's node ID.
    pub fn node(&self) -> u64 {
        self.home.nodes.id
    }
}

impl<C: Clock> Builder<C> {
    /// A [`Generator`] for `node`.
    ///
    /// # Errors
    ///
    /// [`BuildError::NodeOutOfRange`] when `node` does not fit the layout's node field;
    /// [`BuildError::LeadOutOfRange`] for a bad [`borrow_ahead`](Self::borrow_ahead) lead;
    /// for a [`high_water_file`](Self::high_water_file) or a
    /// [`mark_store`](Self::mark_store): [`BuildError::HighWater`] (the file cannot be
    /// opened), [`BuildError::NodeNotHeld`], [`BuildError::Ahead`] (the clock is too far
    /// behind the stored mark), [`BuildError::Store`] (the first mark cannot be stored).
    pub fn build(self, node: u64) -> Result<Generator<C>, BuildError> {
        let (core, packer) = self.into_node_core(node)?;
        let node = Shard::shared(&core.minter, packer, node);
        Ok(Generator {
            home: Body::home(node, core),
        })
    }
}

// `next_id`, `next_ids`, `fill`, their bounded and async twins and `Debug`: written once
// for the three generator types by `minting_methods!` in `src/generator/ids.rs`.
minting_methods!(
    Generator, Ids,
    node: |self| &self.home.nodes,
    debug: ["node": self.home.nodes.id, "state": self.home.nodes.state.load()],
    new: "Generator::new(Layout::TWITTER, 7)",
    with_clock: "Generator::with_clock(layout, 7, clock.clone())",
);

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::{Id, ManualClock, MintError, Parts, RangeError};
    use std::sync::Arc;
    use std::time::Duration;

    const T0: u64 = 1_700_000_000_000;

    fn manual(layout: Layout, node: u64) -> (Generator<ManualClock>, ManualClock) {
        let clock = ManualClock::new(T0);
        (Generator::with_clock(layout, node, clock.clone()).unwrap(), clock)
    }

    /// Node 0 of a layout of 2 IDs a tick (a `timestamp_bits` timestamp of `tick_ms`
    /// ticks since 1970, no node), whose tick at `now` is spent, and its clock.
    fn spent_at(timestamp_bits: u32, tick_ms: u64, now: u64) -> (Generator<ManualClock>, ManualClock) {
        let layout = Layout::builder()
            .timestamp_bits(timestamp_bits)
            .sequence_bits(1)
            .tick_ms(tick_ms)
            .build()
            .unwrap();
        let (g, clock) = manual(layout, 0);
        clock.set(now);
        let _ = (g.next_id(), g.next_id());
        (g, clock)
    }

    fn assert_send_sync<T: Send + Sync>() {}

    /// A 41-bit ms timestamp since 1970 and a sequence of `bits`, no node.
    fn sequence_bits(bits: u32) -> Layout {
        Layout::builder()
            .timestamp_bits(41)
            .sequence_bits(bits)
            .build()
            .unwrap()
    }

    #[test]
    fn generators_are_send_and_sync() {
        assert_send_sync::<Generator>();
        assert_send_sync::<Generator<ManualClock>>();
        assert_send_sync::<Generator<crate::PreciseClock>>();
    }

    #[test]
    fn mints_node_time_and_sequence() {
        let (g, _) = manual(Layout::TWITTER, 347);
        for sequence in 0..5 {
            let id = g.next_id();
            assert_eq!(
                Layout::TWITTER.decode(id),
                Parts {
                    unix_ms: T0,
                    node: 347,
                    sequence
                }
            );
        }
        assert_eq!((g.layout(), g.node()), (Layout::TWITTER, 347));
    }

    #[test]
    fn sonyflake_generator_matches_encode() {
        let (g, clock) = manual(Layout::SONYFLAKE, 0xBEEF);
        clock.set(Layout::SONYFLAKE.epoch_ms() + 123);
        let id = g.next_id();
        let expected = Layout::SONYFLAKE.encode(Parts {
            unix_ms: Layout::SONYFLAKE.epoch_ms() + 120,
            node: 0xBEEF,
            sequence: 0,
        });
        assert_eq!(Ok(id), expected);
    }

    #[test]
    fn new_tick_restarts_the_sequence() {
        let (g, clock) = manual(Layout::TWITTER, 1);
        let _ = (g.next_id(), g.next_id());
        clock.advance(1);
        let parts = Layout::TWITTER.decode(g.next_id());
        assert_eq!((parts.unix_ms, parts.sequence), (T0 + 1, 0));
    }

    #[test]
    fn clock_moving_back_continues_the_last_tick() {
        let (g, clock) = manual(Layout::TWITTER, 1);
        clock.advance(10);
        let before = g.next_id();
        clock.rewind(1000);
        let after = g.next_id();
        assert!(after > before);
        let parts = Layout::TWITTER.decode(after);
        assert_eq!((parts.unix_ms, parts.sequence), (T0 + 10, 1));
    }

    #[test]
    fn spent_tick_reports_when_ids_return() {
        let small = sequence_bits(2);
        let (g, clock) = manual(small, 0);
        for _ in 0..4 {
            let _ = g.try_next_id().unwrap();
        }
        assert_eq!(
            g.try_next_id(),
            Err(MintError::SequenceExhausted {
                tick: T0 + 1,
                retry_after: Duration::from_millis(1)
            })
        );
        // After the clock moves back 5 ms, the wait is 6 ms.
        clock.rewind(5);
        assert_eq!(
            g.try_next_id(),
            Err(MintError::SequenceExhausted {
                tick: T0 + 1,
                retry_after: Duration::from_millis(6)
            })
        );
        clock.advance(6);
        assert_eq!(small.decode(g.try_next_id().unwrap()).sequence, 0);
    }

    #[test]
    fn retry_after_counts_in_ticks_of_the_layout() {
        let (g, _clock) = spent_at(39, 10, 1003);
        assert_eq!(
            g.try_next_id(),
            Err(MintError::SequenceExhausted {
                tick: 101,
                retry_after: Duration::from_millis(7)
            })
        );
    }

    #[test]
    fn next_id_waits_for_the_clock() {
        let small = sequence_bits(1);
        let clock = ManualClock::new(T0);
        let g = Arc::new(Generator::with_clock(small, 0, clock.clone()).unwrap());
        let _ = (g.next_id(), g.next_id());
        let waiter = {
            let g = Arc::clone(&g);
            std::thread::spawn(move || g.next_id())
        };
        std::thread::sleep(Duration::from_millis(20));
        assert!(!waiter.is_finished(), "minted a third id in a 2-id tick");
        clock.advance(1);
        let id = waiter.join().unwrap();
        assert_eq!(small.decode(id).unix_ms, T0 + 1);
    }

    #[test]
    fn clock_outside_the_span_is_an_error() {
        let (g, clock) = manual(Layout::TWITTER, 1);
        clock.set(5);
        assert_eq!(
            g.try_next_id(),
            Err(MintError::ClockOutOfSpan(RangeError::TimeBeforeEpoch {
                unix_ms: 5,
                epoch_ms: Layout::TWITTER.epoch_ms()
            }))
        );
        let end = Layout::TWITTER.end_unix_ms();
        clock.set(end);
        assert_eq!(
            g.try_next_id(),
            Err(MintError::ClockOutOfSpan(RangeError::TimePastEnd {
                unix_ms: end,
                end_ms: end
            }))
        );
        clock.set(end - 1);
        let last_tick = Parts {
            unix_ms: end - 1,
            node: 1,
            sequence: 0,
        };
        assert_eq!(g.try_next_id().ok(), Layout::TWITTER.encode(last_tick).ok());
    }

    #[test]
    #[should_panic(expected = "atomflake: cannot mint an id: time 5 ms is before the layout's epoch")]
    fn next_id_panics_before_the_epoch() {
        let (g, clock) = manual(Layout::TWITTER, 1);
        clock.set(5);
        let _ = g.next_id();
    }

    #[test]
    fn last_slot_of_the_span() {
        // 2-bit timestamp, 1-bit sequence: 4 ticks of 2 ids.
        let (g, _clock) = spent_at(2, 1, 3);
        // The clock reads 3, inside the span: the error names the end, not a time.
        assert_eq!(g.try_next_id(), Err(MintError::SpanSpent { end_ms: 4 }));
        assert_eq!(
            MintError::SpanSpent { end_ms: 4 }.to_string(),
            "every id of the layout's span is used: the next id would need a time at or past \
             the layout's end, 4 ms"
        );
        // A layout filling all 64 bits never mints its very last slot.
        let full = Layout::builder()
            .timestamp_bits(62)
            .sequence_bits(2)
            .build()
            .unwrap();
        let (g, clock) = manual(full, 0);
        clock.set(full.end_unix_ms() - 1);
        for sequence in 0..3 {
            assert_eq!(full.decode(g.try_next_id().unwrap()).sequence, sequence);
        }
        assert_eq!(
            g.try_next_id(),
            Err(MintError::SpanSpent {
                end_ms: full.end_unix_ms()
            })
        );
    }

    #[test]
    fn next_ids_reserves_a_tick_at_a_time() {
        let small = sequence_bits(2);
        let (g, clock) = manual(small, 0);
        let mut ids = g.next_ids(6);
        assert_eq!(ids.len(), 6);
        let first: Vec<Id> = ids.by_ref().take(4).collect();
        assert!(first.iter().all(|&id| small.decode(id).unix_ms == T0));
        // The tick is spent: the next block waits for the clock.
        let rest = std::thread::scope(|s| {
            let rest = s.spawn(move || ids.collect::<Vec<_>>());
            std::thread::sleep(Duration::from_millis(20));
            assert!(!rest.is_finished());
            clock.advance(1);
            rest.join().unwrap()
        });
        let sequences: Vec<u64> = rest.iter().map(|&id| small.decode(id).sequence).collect();
        assert_eq!(sequences, [0, 1]);
        assert!(rest.iter().all(|&id| small.decode(id).unix_ms == T0 + 1));
        assert!(first.last() < rest.first());
    }

    #[test]
    fn dropped_block_is_a_gap_not_a_duplicate() {
        let (g, _) = manual(Layout::TWITTER, 1);
        let started = g.next_ids(100);
        drop(started);
        assert_eq!(Layout::TWITTER.decode(g.next_id()).sequence, 100);
        assert_eq!(g.next_ids(0).next(), None);
    }

    #[test]
    fn fill_matches_single_mints() {
        // Borrow-ahead lets a burst run into later ticks without waiting for the clock, so
        // both generators see the same times, whatever the scheduler does.
        let build = |clock: &ManualClock| {
            Builder::with_clock(Layout::TWITTER, clock.clone())
                .borrow_ahead(Duration::from_millis(5))
                .build(1)
                .unwrap()
        };
        let (clock, twin) = (ManualClock::new(T0), ManualClock::new(T0));
        let (filled, single) = (build(&clock), build(&twin));
        for (len, step) in [(5_000, 0), (1, 0), (3_000, 3), (0, 1), (9_000, 10)] {
            clock.advance(step);
            twin.advance(step);
            let mut buffer = vec![Id::new(0); len];
            filled.fill(&mut buffer);
            let one_by_one: Vec<Id> = (0..len).map(|_| single.next_id()).collect();
            assert_eq!(buffer, one_by_one, "{len} ids after a step of {step} ms");
        }
        let last = Layout::TWITTER.decode(single.next_id());
        assert_eq!(
            (last.unix_ms, last.sequence),
            (T0 + 16, 9_000 - 4_096 * 2),
            "the last fill ran two ticks past the clock"
        );
    }

    #[test]
    fn debug_shows_layout_and_node() {
        let (g, _) = manual(Layout::MASTODON, 0);
        let text = format!("{g:?}");
        assert!(
            text.starts_with("Generator { layout: Layout { timestamp_bits: 48"),
            "{text}"
        );
        assert!(text.contains("node: 0, state: 0, .."), "{text}");
    }
}
