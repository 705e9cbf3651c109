//! Layouts: presets, the builder's checks, encoding and decoding, the span and its ends.

use super::*;

#[test]
fn presets_pass_validation() {
    for (name, layout) in Layout::PRESETS {
        assert_eq!(layout.validate(), Ok(layout), "{name}");
    }
}

#[test]
fn each_preset_is_found_by_its_name_and_names_itself() {
    for (name, layout) in Layout::PRESETS {
        assert_eq!(Layout::preset_named(name), Ok(layout));
        assert_eq!(layout.preset_name(), Some(name));
    }
    let custom = Layout::builder()
        .timestamp_bits(41)
        .node_bits(12)
        .sequence_bits(10)
        .build()
        .unwrap();
    assert_eq!(custom.preset_name(), None);
    // Names are exact: no case folding, no trimming.
    for name in ["", "Twitter", " twitter", "twitter ", "snowflake"] {
        assert_eq!(
            Layout::preset_named(name),
            Err(LayoutError::UnknownPreset {
                name: name.to_owned()
            })
        );
    }
}

#[test]
fn preset_widths_epochs_and_ticks() {
    let table = [
        (Layout::TWITTER, 41, 10, 12, 1, 1_288_834_974_657, 63),
        (Layout::DISCORD, 42, 10, 12, 1, 1_420_070_400_000, 64),
        (Layout::INSTAGRAM, 41, 13, 10, 1, 1_314_220_021_721, 64),
        (Layout::SONYFLAKE, 39, 16, 8, 10, 1_409_529_600_000, 63),
        (Layout::MASTODON, 48, 0, 16, 1, 0, 64),
        (Layout::JAVASCRIPT, 38, 7, 8, 10, 1_735_689_600_000, 53),
    ];
    for (layout, ts, node, seq, tick, epoch, total) in table {
        assert_eq!(
            (
                layout.timestamp_bits(),
                layout.node_bits(),
                layout.sequence_bits(),
                layout.tick_ms(),
                layout.epoch_ms(),
                layout.total_bits()
            ),
            (ts, node, seq, tick, epoch, total)
        );
    }
    assert_eq!(Layout::SONYFLAKE.order(), FieldOrder::SequenceNode);
    assert_eq!(Layout::TWITTER.max_node(), 1023);
    assert_eq!(Layout::TWITTER.ids_per_tick(), 4096);
    assert_eq!(Layout::MASTODON.max_node(), 0);
    assert_eq!(Layout::SONYFLAKE.ids_per_tick(), 256);
    assert_eq!(Layout::SONYFLAKE.max_node(), 65_535);
}

#[test]
fn end_dates() {
    // Twitter: 2^41 ms after 2010-11-04T01:42:54.657Z is 2080-07-10T17:30:30.209Z.
    assert_eq!(Layout::TWITTER.end_unix_ms(), 3_487_858_230_209);
    // Sonyflake: 2^39 ticks of 10 ms after 2014-09-01 (174 years, 2188).
    assert_eq!(
        Layout::SONYFLAKE.end_unix_ms(),
        1_409_529_600_000 + (1 << 39) * 10
    );
    assert_eq!(Layout::MASTODON.end_unix_ms(), 1 << 48);
    // JavaScript: 2^38 ticks of 10 ms after 2025-01-01 is 2112-02-09T13:44:29.440Z.
    assert_eq!(Layout::JAVASCRIPT.end_unix_ms(), 4_484_468_669_440);
}

/// The last ID of the JavaScript preset's span, and every ID with its fields at their
/// largest, is at most `Number.MAX_SAFE_INTEGER`; the other presets pass it.
#[test]
fn javascript_ids_fit_a_double() {
    let js = Layout::JAVASCRIPT;
    let last_ms = js.end_unix_ms() - 1;
    let last = js
        .encode(Parts {
            unix_ms: last_ms,
            node: js.max_node(),
            sequence: js.max_sequence(),
        })
        .unwrap();
    assert_eq!(last.get(), (1 << 53) - 1);
    assert_eq!(last.get(), Layout::JS_MAX_SAFE_INTEGER);
    assert_eq!(js.last_id_at(last_ms).unwrap(), last);
    assert_eq!(js.max_id(), Layout::JS_MAX_SAFE_INTEGER);
    // Every combination of the fields' extremes: first and last tick, node, sequence.
    for unix_ms in [js.epoch_ms(), js.epoch_ms() + 9, last_ms - 9, last_ms] {
        for node in [0, 1, js.max_node() - 1, js.max_node()] {
            for sequence in [0, 1, js.max_sequence() - 1, js.max_sequence()] {
                let id = js
                    .encode(Parts {
                        unix_ms,
                        node,
                        sequence,
                    })
                    .unwrap()
                    .get();
                assert!(id <= Layout::JS_MAX_SAFE_INTEGER, "{unix_ms} {node} {sequence}");
                // A double holds it exactly: it converts back to the same integer.
                #[allow(
                    clippy::cast_precision_loss,
                    clippy::cast_possible_truncation,
                    clippy::cast_sign_loss
                )]
                let back = (id as f64) as u64;
                assert_eq!(back, id);
            }
        }
    }
    // Past the span is an error, never an ID above 2^53 - 1.
    assert!(
        js.encode(Parts {
            unix_ms: js.end_unix_ms(),
            node: 0,
            sequence: 0
        })
        .is_err()
    );
    // 2^53 + 1 is the first integer a double does not hold.
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let rounded = (((1u64 << 53) + 1) as f64) as u64;
    assert_ne!(rounded, (1 << 53) + 1);
    for (name, layout) in Layout::PRESETS {
        assert_eq!(layout.fits_js_number(), name == "javascript", "{name}");
    }
}

proptest::proptest! {
    /// Any ID the JavaScript preset encodes, from any time of its span, node and sequence,
    /// is a safe JavaScript integer; a layout of 54 bits is not.
    #[test]
    fn javascript_ids_are_safe_integers(
        unix_ms in Layout::JAVASCRIPT.epoch_ms()..Layout::JAVASCRIPT.end_unix_ms(),
        node in 0..=Layout::JAVASCRIPT.max_node(),
        sequence in 0..=Layout::JAVASCRIPT.max_sequence(),
        extra in 1u32..=11,
    ) {
        let id = Layout::JAVASCRIPT.encode(Parts { unix_ms, node, sequence }).unwrap();
        proptest::prop_assert!(id.get() <= Layout::JS_MAX_SAFE_INTEGER);
        let wider = Layout::builder().timestamp_bits(38 + extra).node_bits(7).sequence_bits(8).tick_ms(10).build().unwrap();
        proptest::prop_assert!(!wider.fits_js_number());
    }
}

#[test]
fn builder_equals_presets() {
    let twitter = Layout::builder()
        .timestamp_bits(41)
        .node_bits(10)
        .sequence_bits(12)
        .epoch_ms(1_288_834_974_657)
        .build();
    assert_eq!(twitter, Ok(Layout::TWITTER));
    let sony = Layout::builder()
        .timestamp_bits(39)
        .node_bits(16)
        .sequence_bits(8)
        .tick_ms(10)
        .epoch_ms(1_409_529_600_000)
        .order(FieldOrder::SequenceNode)
        .build();
    assert_eq!(sony, Ok(Layout::SONYFLAKE));
}

#[test]
fn builder_errors() {
    let b = Layout::builder();
    assert_eq!(
        b.timestamp_bits(41).node_bits(12).sequence_bits(12).build(),
        Err(LayoutError::LayoutTooWide {
            timestamp_bits: 41,
            node_bits: 12,
            sequence_bits: 12
        })
    );
    // Huge widths do not overflow the sum.
    assert_eq!(
        b.timestamp_bits(u32::MAX).node_bits(u32::MAX).build(),
        Err(LayoutError::LayoutTooWide {
            timestamp_bits: u32::MAX,
            node_bits: u32::MAX,
            sequence_bits: 0
        })
    );
    assert_eq!(b.sequence_bits(12).build(), Err(LayoutError::NoTimestampBits));
    assert_eq!(
        b.timestamp_bits(41).tick_ms(0).build(),
        Err(LayoutError::ZeroTick)
    );
    assert_eq!(
        b.timestamp_bits(64).build(),
        Err(LayoutError::SpanOverflow {
            epoch_ms: 0,
            tick_ms: 1,
            timestamp_bits: 64
        })
    );
    assert_eq!(
        b.timestamp_bits(41).epoch_ms(u64::MAX - (1 << 41) + 1).build(),
        Err(LayoutError::SpanOverflow {
            epoch_ms: u64::MAX - (1 << 41) + 1,
            tick_ms: 1,
            timestamp_bits: 41
        })
    );
    // The largest epoch that still fits.
    assert!(
        b.timestamp_bits(41)
            .epoch_ms(u64::MAX - (1 << 41))
            .build()
            .is_ok()
    );
    assert!(b.timestamp_bits(63).build().is_ok());
    assert_eq!(
        b.timestamp_bits(40).tick_ms(u64::MAX / 1000).build(),
        Err(LayoutError::SpanOverflow {
            epoch_ms: 0,
            tick_ms: u64::MAX / 1000,
            timestamp_bits: 40
        })
    );
    // 0-bit sequence and 0-bit node are allowed.
    let one_per_tick = b.timestamp_bits(54).node_bits(10).build().unwrap();
    assert_eq!(one_per_tick.ids_per_tick(), 1);
}

#[test]
fn tick_at_bounds() {
    let l = Layout::SONYFLAKE;
    let epoch = l.epoch_ms();
    assert_eq!(l.tick_at(epoch), Ok(0));
    assert_eq!(l.tick_at(epoch + 19), Ok(1));
    assert_eq!(
        l.tick_at(epoch - 1),
        Err(RangeError::TimeBeforeEpoch {
            unix_ms: epoch - 1,
            epoch_ms: epoch
        })
    );
    assert_eq!(l.tick_at(l.end_unix_ms() - 1), Ok(l.max_tick()));
    assert_eq!(
        l.tick_at(l.end_unix_ms()),
        Err(RangeError::TimePastEnd {
            unix_ms: l.end_unix_ms(),
            end_ms: l.end_unix_ms()
        })
    );
}

#[test]
fn encode_rejects_out_of_range_fields() {
    let l = Layout::TWITTER;
    let ok = Parts {
        unix_ms: l.epoch_ms(),
        node: 1023,
        sequence: 4095,
    };
    assert_eq!(l.encode(ok).map(Id::get), Ok((1 << 22) - 1));
    assert_eq!(
        l.encode(Parts { node: 1024, ..ok }),
        Err(RangeError::FieldOutOfRange {
            field: Field::Node,
            value: 1024,
            max: 1023
        })
    );
    assert_eq!(
        l.encode(Parts { sequence: 4096, ..ok }),
        Err(RangeError::FieldOutOfRange {
            field: Field::Sequence,
            value: 4096,
            max: 4095
        })
    );
    assert_eq!(
        l.encode(Parts { unix_ms: 0, ..ok }),
        Err(RangeError::TimeBeforeEpoch {
            unix_ms: 0,
            epoch_ms: l.epoch_ms()
        })
    );
    assert_eq!(
        Layout::MASTODON.encode(Parts {
            unix_ms: 5,
            node: 1,
            sequence: 0
        }),
        Err(RangeError::FieldOutOfRange {
            field: Field::Node,
            value: 1,
            max: 0
        })
    );
}

#[test]
fn sonyflake_order_and_ticks() {
    let l = Layout::SONYFLAKE;
    let parts = Parts {
        unix_ms: l.epoch_ms() + 10 * 3 + 7,
        node: 0xBEEF,
        sequence: 0x12,
    };
    let id = l.encode(parts).unwrap().get();
    assert_eq!(id, 3 << 24 | 0x12 << 16 | 0xBEEF);
    // The 7 ms inside the tick are not representable: decode gives the tick's start.
    assert_eq!(
        l.decode(Id::new(id)),
        Parts {
            unix_ms: l.epoch_ms() + 30,
            ..parts
        }
    );
}

#[test]
fn decode_keeps_bits_above_the_layout_in_the_timestamp() {
    let l = Layout::TWITTER;
    let top = Id::new(1 << 63);
    assert_eq!(l.decode(top).unix_ms, l.end_unix_ms());
    assert_eq!(
        l.try_decode(top),
        Err(RangeError::IdOutOfLayout {
            id: 1 << 63,
            max: (1 << 63) - 1
        })
    );
    assert_eq!(
        l.try_decode(Id::new((1 << 63) - 1)).map(|p| p.unix_ms),
        Ok(l.end_unix_ms() - 1)
    );
}

#[test]
fn display() {
    assert_eq!(
        Layout::TWITTER.to_string(),
        "41/10/12 bits, 1 ms ticks, epoch 1288834974657 ms"
    );
    assert_eq!(
        Layout::SONYFLAKE.to_string(),
        "39/8/16 bits, 10 ms ticks, epoch 1409529600000 ms, time|sequence|node"
    );
}

#[test]
fn each_format_error_names_the_value_and_the_allowed_range() {
    let cases: [(Box<dyn std::error::Error>, &str); 7] = [
        (
            Box::new(LayoutError::UnknownPreset { name: "x".into() }),
            "unknown layout \"x\": the presets are twitter, discord, instagram, sonyflake, mastodon, javascript",
        ),
        (
            Box::new(LayoutError::LayoutTooWide {
                timestamp_bits: 42,
                node_bits: 12,
                sequence_bits: 12,
            }),
            "layout needs 66 bits (42 timestamp + 12 node + 12 sequence): an id holds at most 64",
        ),
        (
            Box::new(LayoutError::NoTimestampBits),
            "timestamp width 0 is out of range: a layout needs 1..=64 timestamp bits",
        ),
        (
            Box::new(LayoutError::ZeroTick),
            "tick length 0 ms is out of range: a tick is at least 1 ms",
        ),
        (
            Box::new(LayoutError::SpanOverflow {
                epoch_ms: 5,
                tick_ms: 1,
                timestamp_bits: 64,
            }),
            "layout span overflows: epoch 5 ms + 2^64 ticks of 1 ms is past u64::MAX ms",
        ),
        (
            Box::new(RangeError::IdAboveI64 { id: 1 << 63 }),
            "id 9223372036854775808 is out of range for i64: i64 allows 0..=9223372036854775807",
        ),
        (
            Box::new(RangeError::IdOutOfLayout {
                id: 1 << 63,
                max: (1 << 63) - 1,
            }),
            "id 9223372036854775808 is out of range: the layout allows 0..=9223372036854775807",
        ),
    ];
    for (error, message) in cases {
        assert_eq!(error.to_string(), message);
        assert!(error.source().is_none(), "{error}");
    }
}
