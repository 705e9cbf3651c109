//! A generator on a `ManualClock` that moves forward, back and jumps anywhere, minting
//! between moves with `try_next_id`. Checks: IDs strictly increase (so are unique), carry
//! the generator's node, fit the layout, are never later than the latest clock reading,
//! and a clock that reaches a tick past the last ID's always mints; errors match the clock.
#![no_main]

use arbitrary::Arbitrary;
use atomflake::{Clock, Generator, Layout, ManualClock, MintError, RangeError};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
enum Step {
    Mint(u8),
    Advance(u16),
    Rewind(u16),
    Jump(u64),
    JumpNearEpoch(i16),
}

#[derive(Debug, Arbitrary)]
struct Input {
    layout: u8,
    sequence_bits: u8,
    node: u64,
    start: u32,
    steps: Vec<Step>,
}

fuzz_target!(|input: Input| {
    let layout = match input.layout % 3 {
        0 => Layout::PRESETS[usize::from(input.layout / 3) % Layout::PRESETS.len()].1,
        // Few sequence values and a short span, so ticks run out and so does the span.
        _ => Layout::builder()
            .timestamp_bits(12)
            .node_bits(3)
            .sequence_bits(u32::from(input.sequence_bits % 3))
            .epoch_ms(1_000_000)
            .tick_ms(u64::from(input.layout % 4) + 1)
            .build()
            .expect("a valid layout"),
    };
    let node = input.node % (layout.max_node() + 1);
    let clock = ManualClock::new(layout.epoch_ms() + u64::from(input.start));
    let generator = Generator::with_clock(layout, node, clock.clone()).expect("node in range");
    let mut last = None;
    let mut latest_clock = 0;
    for step in input.steps {
        match step {
            Step::Advance(ms) => clock.advance(u64::from(ms)),
            Step::Rewind(ms) => clock.rewind(u64::from(ms)),
            Step::Jump(to) => clock.set(to),
            Step::JumpNearEpoch(by) => clock.set(layout.epoch_ms().saturating_add_signed(i64::from(by))),
            Step::Mint(count) => {
                let now = clock.unix_ms();
                latest_clock = latest_clock.max(now);
                for _ in 0..=count {
                    match generator.try_next_id() {
                        Ok(id) => {
                            assert!(last < Some(id), "{last:?} then {id:?}");
                            let parts = layout.try_decode(id).expect("ids fit the layout");
                            assert_eq!(parts.node, node);
                            assert!(parts.unix_ms <= latest_clock, "{parts:?} after clock {latest_clock}");
                            last = Some(id);
                        }
                        Err(MintError::SequenceExhausted { .. }) => {
                            // Only the last ID's tick can be spent: the clock has not passed it.
                            let last_tick = last.map(|id| layout.decode(id).unix_ms);
                            assert!(last_tick.is_some_and(|t| now < t + layout.tick_ms()), "{now} {last_tick:?}");
                            break;
                        }
                        Err(MintError::ClockOutOfSpan(RangeError::TimeBeforeEpoch { unix_ms, epoch_ms })) => {
                            assert_eq!((unix_ms, epoch_ms), (now, layout.epoch_ms()));
                            break;
                        }
                        Err(MintError::ClockOutOfSpan(RangeError::TimePastEnd { unix_ms, end_ms })) => {
                            // The clock is past the span.
                            assert_eq!((unix_ms, end_ms), (now, layout.end_unix_ms()));
                            assert!(now >= end_ms, "{now} {end_ms}");
                            break;
                        }
                        Err(MintError::SpanSpent { end_ms }) => {
                            // The clock is inside the span, and its last slot is used: the
                            // last ID is in the span's last tick.
                            assert_eq!(end_ms, layout.end_unix_ms());
                            assert!(now < end_ms, "{now} {end_ms}");
                            let last_tick_spent =
                                last.is_some_and(|id| layout.decode(id).unix_ms + layout.tick_ms() == end_ms);
                            assert!(last_tick_spent, "{last:?}");
                            break;
                        }
                        Err(other) => panic!("unexpected {other:?}"),
                    }
                }
            }
        }
    }
});
