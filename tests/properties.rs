//! Property tests against simple reference models.
//!
//! Invariants checked:
//! - encode/decode round trip: for any valid layout and in-range parts (time at a tick
//!   start), `decode(encode(parts)) == parts`; out-of-range fields are refused, never masked;
//! - clock walks: for any sequence of clock moves and mints on a `ManualClock`, with any
//!   borrow-ahead lead, on a `Generator` or a `LocalGenerator`, `try_next_id` does exactly
//!   what a plain `(last tick, last sequence)` model says: the same ID, or exhaustion in
//!   the same tick; IDs strictly increase, decode to a time no earlier than any tick already
//!   used, and open a tick at most the lead ahead of the clock;
//! - block reservation: for any sequence of clock moves and `next_ids(n)` calls, the first
//!   block of each is exactly the model's: the next free slot and as many after it as the
//!   tick (and `n`) allow; a dropped iterator's unused IDs are never handed out again;
//! - bounded waits: for any sequence of clock moves and `next_id_timeout` calls, on each
//!   generator type, a call returns the model's ID when a slot is free now or the clock
//!   passes the spent tick during a wait with no deadline, and the model's exhaustion,
//!   exactly, when the clock stands still past a short deadline; IDs strictly increase;
//! - decimal text: every `u64` round-trips, and parsing any text never panics and succeeds
//!   only on plain digits; base62 text round-trips every `u64`, sorts as the numbers do,
//!   and parses only 11 alphanumeric characters.

use atomflake::{
    Builder, FieldOrder, Generator, Id, Layout, LocalGenerator, ManualClock, MintError, Parts, RangeError,
    ShardedGenerator,
};
use proptest::prelude::*;
use std::time::Duration;

fn layouts() -> impl Strategy<Value = Layout> {
    (1u32..=63, 0u32..=63, 0u32..=63, 1u64..=1000, any::<bool>())
        .prop_filter("fits 64 bits", |(t, n, s, _, _)| t + n + s <= 64)
        .prop_flat_map(|(t, n, s, tick, sony)| {
            // Any epoch that keeps the span inside u64 ms.
            let span = (1u128 << t) * u128::from(tick);
            let max_epoch = u64::try_from(u128::from(u64::MAX).saturating_sub(span)).unwrap_or(0);
            (Just((t, n, s, tick, sony)), 0..=max_epoch)
        })
        .prop_filter_map("span fits", |((t, n, s, tick, sony), epoch)| {
            let order = if sony {
                FieldOrder::SequenceNode
            } else {
                FieldOrder::NodeSequence
            };
            Layout::builder()
                .timestamp_bits(t)
                .node_bits(n)
                .sequence_bits(s)
                .tick_ms(tick)
                .epoch_ms(epoch)
                .order(order)
                .build()
                .ok()
        })
}

proptest! {
    #[test]
    fn encode_decode_round_trip(layout in layouts(), tick: u64, node: u64, sequence: u64) {
        let parts = Parts {
            unix_ms: layout.epoch_ms() + (tick & layout.max_tick()) * layout.tick_ms(),
            node: node & layout.max_node(),
            sequence: sequence & layout.max_sequence(),
        };
        let id = layout.encode(parts).unwrap();
        prop_assert!(id.get() <= layout.max_id());
        prop_assert_eq!(layout.decode(id), parts);
        prop_assert_eq!(layout.try_decode(id), Ok(parts));
    }

    #[test]
    fn encode_refuses_out_of_range_fields(layout in layouts(), node: u64, sequence: u64) {
        let parts = Parts { unix_ms: layout.epoch_ms(), node, sequence };
        let result = layout.encode(parts);
        if node > layout.max_node() || sequence > layout.max_sequence() {
            prop_assert!(matches!(result, Err(RangeError::FieldOutOfRange { .. })), "{result:?}");
        } else {
            prop_assert_eq!(result.map(|id| layout.decode(id)), Ok(parts));
        }
    }

    #[test]
    fn decimal_round_trip(raw: u64) {
        prop_assert_eq!(Id::new(raw).to_string().parse::<Id>(), Ok(Id::new(raw)));
    }

    /// Base62 round-trips every `u64`, and its text sorts as the numbers do.
    #[test]
    fn base62_round_trips_and_sorts_as_the_ids(a: u64, b: u64) {
        let (ta, tb) = (Id::new(a).to_base62(), Id::new(b).to_base62());
        prop_assert_eq!(Id::from_base62(&ta.to_string()), Ok(Id::new(a)));
        prop_assert_eq!(ta.as_bytes().cmp(tb.as_bytes()), a.cmp(&b));
    }

    #[test]
    fn parsing_base62_never_panics(text in "\\PC{0,12}") {
        if Id::from_base62(&text).is_ok() {
            prop_assert!(text.len() == 11 && text.bytes().all(|b| b.is_ascii_alphanumeric()));
        }
    }

    #[test]
    fn parsing_never_panics(text in "\\PC*") {
        let parsed = text.parse::<Id>();
        if parsed.is_ok() {
            prop_assert!(!text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()));
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Advance(u64),
    Rewind(u64),
    Mint,
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            1 => (0u64..5).prop_map(Op::Advance),
            1 => (0u64..5).prop_map(Op::Rewind),
            4 => Just(Op::Mint),
        ],
        1..200,
    )
}

/// The reference model: the last `(tick, sequence)` minted, in plain terms, and how many
/// ticks ahead of the clock a spent tick may borrow.
#[derive(Debug, Default, Clone)]
struct Model {
    last: Option<(u64, u64)>,
    lead: u64,
}

impl Model {
    /// The `(tick, sequence)` of the next mint at `now_tick`, or the tick to wait for.
    fn mint(&mut self, now_tick: u64, max_sequence: u64) -> Result<(u64, u64), u64> {
        self.reserve(now_tick, max_sequence, 1)
            .map(|(tick, sequence, _)| (tick, sequence))
    }

    /// The first `(tick, sequence)` and the count of a block of up to `want` IDs.
    fn reserve(&mut self, now_tick: u64, max_sequence: u64, want: u64) -> Result<(u64, u64, u64), u64> {
        let (tick, first) = match self.last {
            None => (now_tick, 0),
            Some((tick, _)) if now_tick > tick => (now_tick, 0),
            Some((tick, sequence)) if sequence < max_sequence => (tick, sequence + 1),
            // Spent: borrow the next tick if it is within the lead, else wait for the clock
            // to come within the lead of it.
            Some((tick, _)) if tick + 1 - now_tick <= self.lead => (tick + 1, 0),
            Some((tick, _)) => return Err(tick + 1 - self.lead),
        };
        let count = want.min(max_sequence - first + 1);
        self.last = Some((tick, first + count - 1));
        Ok((tick, first, count))
    }
}

proptest! {
    #[test]
    fn clock_walks_match_the_model(
        sequence_bits in 0u32..3,
        tick_ms in 1u64..4,
        lead in 0u64..3,
        local: bool,
        // The node between the sequence and the timestamp (a slot's node field all ones)
        // or below both (no filler: the sequence carries into the tick directly).
        node_below: bool,
        ops in ops(),
    ) {
        let order = if node_below { FieldOrder::SequenceNode } else { FieldOrder::NodeSequence };
        let layout = Layout::builder()
            .timestamp_bits(40).node_bits(5).sequence_bits(sequence_bits).order(order)
            .tick_ms(tick_ms).epoch_ms(1_000)
            .build().unwrap();
        let clock = ManualClock::new(1_000 + 10 * tick_ms);
        let builder = Builder::with_clock(layout, clock.clone()).borrow_ahead(Duration::from_millis(lead * tick_ms));
        // The shared and the local generator run the same minting code on different cells.
        let try_next_id: Box<dyn Fn() -> Result<Id, MintError>> = if local {
            let generator = builder.build_local(9).unwrap();
            Box::new(move || generator.try_next_id())
        } else {
            let generator = builder.build(9).unwrap();
            Box::new(move || generator.try_next_id())
        };
        let mut model = Model { lead, ..Model::default() };
        let mut now = 1_000 + 10 * tick_ms;
        let mut previous: Option<Id> = None;
        for op in ops {
            match op {
                Op::Advance(ms) => now += ms,
                Op::Rewind(ms) => now -= ms.min(now - 1_000),
                Op::Mint => {
                    clock.set(now);
                    let now_tick = (now - 1_000) / tick_ms;
                    let highest_used = model.last.map(|(tick, _)| tick);
                    match (model.mint(now_tick, layout.max_sequence()), try_next_id()) {
                        (Ok((tick, sequence)), Ok(id)) => {
                            let parts = layout.decode(id);
                            prop_assert_eq!(parts, Parts { unix_ms: 1_000 + tick * tick_ms, node: 9, sequence });
                            prop_assert!(previous < Some(id));
                            prop_assert!(highest_used.is_none_or(|used| tick >= used));
                            // Sequence 0 opens a tick: never more than the lead ahead.
                            prop_assert!(sequence > 0 || tick <= now_tick + lead);
                            previous = Some(id);
                        }
                        (Err(wait_tick), Err(MintError::SequenceExhausted { tick, retry_after })) => {
                            prop_assert_eq!(tick, wait_tick);
                            prop_assert_eq!(retry_after.as_millis(), u128::from(1_000 + tick * tick_ms - now));
                        }
                        (expected, got) => prop_assert!(false, "model {:?}, generator {:?}", expected, got),
                    }
                }
            }
        }
    }
}

proptest! {
    #[test]
    fn first_blocks_match_the_model(
        sequence_bits in 0u32..4,
        moves in prop::collection::vec((0u64..3, 0u64..3, 1u64..12), 1..60),
    ) {
        let layout = Layout::builder()
            .timestamp_bits(40).node_bits(3).sequence_bits(sequence_bits).epoch_ms(1_000)
            .build().unwrap();
        let clock = ManualClock::new(1_100);
        let generator = Generator::with_clock(layout, 2, clock.clone()).unwrap();
        let mut model = Model::default();
        let mut now = 1_100;
        let mut previous: Option<Id> = None;
        for (forward, back, want) in moves {
            now = now + forward - back;
            clock.set(now);
            match model.reserve(now - 1_000, layout.max_sequence(), want) {
                Ok((tick, first, count)) => {
                    let ids: Vec<Id> = generator.next_ids(want).take(usize::try_from(count).unwrap()).collect();
                    let expected: Vec<Id> = (first..first + count)
                        .map(|sequence| layout.encode(Parts { unix_ms: 1_000 + tick, node: 2, sequence }).unwrap())
                        .collect();
                    prop_assert_eq!(&ids, &expected);
                    prop_assert!(previous < ids.first().copied());
                    previous = ids.last().copied();
                }
                Err(wait_tick) => {
                    let exhausted = generator.try_next_id();
                    prop_assert!(
                        matches!(exhausted, Err(MintError::SequenceExhausted { tick, .. }) if tick == wait_tick),
                        "{:?}", exhausted
                    );
                }
            }
        }
    }
}

#[derive(Debug, Clone)]
enum TimedOp {
    Advance(u64),
    Rewind(u64),
    /// `next_id_timeout` with this timeout (ms), the clock standing still.
    Mint(u64),
    /// `next_id_timeout` with no deadline while a thread moves the clock this many ms
    /// past the start of the tick the model waits for (when it waits).
    MintWhileTheClockMoves(u64),
}

fn timed_ops() -> impl Strategy<Value = Vec<TimedOp>> {
    prop::collection::vec(
        prop_oneof![
            1 => (0u64..5).prop_map(TimedOp::Advance),
            1 => (0u64..5).prop_map(TimedOp::Rewind),
            4 => (0u64..3).prop_map(TimedOp::Mint),
            1 => (0u64..3).prop_map(TimedOp::MintWhileTheClockMoves),
        ],
        1..60,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn bounded_waits_match_the_model(
        sequence_bits in 0u32..3,
        tick_ms in 1u64..4,
        kind in 0u8..3,
        ops in timed_ops(),
    ) {
        let layout = Layout::builder()
            .timestamp_bits(40).node_bits(5).sequence_bits(sequence_bits)
            .tick_ms(tick_ms).epoch_ms(1_000)
            .build().unwrap();
        let start = 1_000 + 10 * tick_ms;
        let clock = ManualClock::new(start);
        // The three types run the same loop over different state words.
        let next_id_timeout: Box<dyn Fn(Duration) -> Result<Id, MintError>> = match kind {
            0 => {
                let generator = Generator::with_clock(layout, 9, clock.clone()).unwrap();
                Box::new(move |timeout| generator.next_id_timeout(timeout))
            }
            1 => {
                let generator = LocalGenerator::with_clock(layout, 9, clock.clone()).unwrap();
                Box::new(move |timeout| generator.next_id_timeout(timeout))
            }
            _ => {
                let generator = ShardedGenerator::with_clock(layout, [9], clock.clone()).unwrap();
                Box::new(move |timeout| generator.next_id_timeout(timeout))
            }
        };
        let mut model = Model::default();
        let mut now = start;
        let mut previous: Option<Id> = None;
        for op in ops {
            let (minted, expected) = match op {
                TimedOp::Advance(ms) => {
                    now += ms;
                    continue;
                }
                TimedOp::Rewind(ms) => {
                    now -= ms.min(now - 1_000);
                    continue;
                }
                TimedOp::Mint(timeout_ms) => {
                    clock.set(now);
                    let expected = model.mint((now - 1_000) / tick_ms, layout.max_sequence());
                    (next_id_timeout(Duration::from_millis(timeout_ms)), expected)
                }
                TimedOp::MintWhileTheClockMoves(past) => {
                    clock.set(now);
                    let waits_for = model.clone().mint((now - 1_000) / tick_ms, layout.max_sequence()).err();
                    let mover = waits_for.map(|tick| {
                        now = 1_000 + tick * tick_ms + past;
                        let (clock, now) = (clock.clone(), now);
                        std::thread::spawn(move || {
                            std::thread::sleep(Duration::from_millis(1));
                            clock.set(now);
                        })
                    });
                    let minted = next_id_timeout(Duration::MAX);
                    if let Some(mover) = mover {
                        mover.join().unwrap();
                    }
                    (minted, model.mint((now - 1_000) / tick_ms, layout.max_sequence()))
                }
            };
            match (expected, minted) {
                (Ok((tick, sequence)), Ok(id)) => {
                    prop_assert_eq!(layout.decode(id), Parts { unix_ms: 1_000 + tick * tick_ms, node: 9, sequence });
                    prop_assert!(previous < Some(id));
                    previous = Some(id);
                }
                (Err(wait_tick), Err(MintError::SequenceExhausted { tick, retry_after })) => {
                    prop_assert_eq!(tick, wait_tick);
                    prop_assert_eq!(retry_after.as_millis(), u128::from(1_000 + tick * tick_ms - now));
                }
                (expected, got) => prop_assert!(false, "model {:?}, generator {:?}", expected, got),
            }
        }
    }
}
