//! Layouts with arbitrary parameters: `build` accepts exactly the valid ones (a reference
//! model in u128 arithmetic), and on those encode and decode round trip, and
//! `first_id_at`/`last_id_at` bound every ID of its tick.
#![no_main]

use arbitrary::Arbitrary;
use atomflake::{FieldOrder, Id, Layout, Parts};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
struct Input {
    timestamp_bits: u32,
    node_bits: u32,
    sequence_bits: u32,
    epoch_ms: u64,
    tick_ms: u64,
    sequence_first: bool,
    parts: (u64, u64, u64),
    raw: u64,
}

/// Keeps widths mostly in the interesting 0..=70 range, sometimes huge.
fn width(w: u32) -> u32 {
    if w & 0x8000_0000 != 0 { w } else { w % 71 }
}

fuzz_target!(|input: Input| {
    let (ts, node, seq) = (
        width(input.timestamp_bits),
        width(input.node_bits),
        width(input.sequence_bits),
    );
    let order = if input.sequence_first { FieldOrder::SequenceNode } else { FieldOrder::NodeSequence };
    let built = Layout::builder()
        .timestamp_bits(ts)
        .node_bits(node)
        .sequence_bits(seq)
        .epoch_ms(input.epoch_ms)
        .tick_ms(input.tick_ms)
        .order(order)
        .build();

    let total = u128::from(ts) + u128::from(node) + u128::from(seq);
    let valid = total <= 64
        && ts >= 1
        && input.tick_ms >= 1
        && (1u128 << ts) * u128::from(input.tick_ms) + u128::from(input.epoch_ms) <= u128::from(u64::MAX);
    assert_eq!(built.is_ok(), valid, "{input:?}: {built:?}");
    let Ok(layout) = built else { return };

    // Any in-layout ID decodes and encodes back to itself.
    let id = Id::new(input.raw & layout.max_id());
    let parts = layout.try_decode(id).expect("an in-layout id decodes");
    assert_eq!(layout.encode(parts), Ok(id));
    let first = layout.first_id_at(parts.unix_ms).expect("the id's time is in the span");
    let last = layout.last_id_at(parts.unix_ms).expect("the id's time is in the span");
    assert!(first <= id && id <= last);
    assert_eq!(layout.decode(first), Parts { node: 0, sequence: 0, ..parts });

    // Arbitrary parts encode exactly when each is in range, and decode to the tick start.
    let (unix_ms, node, sequence) = input.parts;
    let wanted = Parts { unix_ms, node, sequence };
    let fits = node <= layout.max_node()
        && sequence <= layout.max_sequence()
        && unix_ms >= layout.epoch_ms()
        && unix_ms < layout.end_unix_ms();
    match layout.encode(wanted) {
        Ok(id) => {
            assert!(fits, "{wanted:?}");
            let tick_start = unix_ms - (unix_ms - layout.epoch_ms()) % layout.tick_ms();
            assert_eq!(layout.decode(id), Parts { unix_ms: tick_start, ..wanted });
        }
        Err(_) => assert!(!fits, "{wanted:?}"),
    }
});
