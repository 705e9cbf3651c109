//! Time ranges to ID ranges: `Layout::first_id_at` and `Layout::last_id_at`, on every
//! preset (both field orders).
//!
//! Invariants, checked for random IDs of each preset:
//! - `first_id_at(t) <= id <= last_id_at(t)` for `t` the ID's time (any ms of its tick);
//! - the bounds are in the same tick as the ID, with node and sequence all 0 / all 1;
//! - the bounds of consecutive ticks are adjacent: `last_id_at(t) + 1 == first_id_at(next tick)`,
//!   so ranges of adjacent time windows neither overlap nor leave gaps.

use atomflake::{Id, Layout, Parts, RangeError};
use proptest::prelude::*;

fn preset() -> impl Strategy<Value = (&'static str, Layout)> {
    proptest::sample::select(Layout::PRESETS.to_vec())
}

proptest! {
    #[test]
    fn an_id_lies_between_the_bounds_of_its_tick(
        (name, layout) in preset(),
        raw in any::<u64>(),
        into_tick in any::<u64>(),
    ) {
        let id = Id::new(raw & layout.max_id());
        let parts = layout.decode(id);
        let t = parts.unix_ms + into_tick % layout.tick_ms();
        let (first, last) = (layout.first_id_at(t).unwrap(), layout.last_id_at(t).unwrap());
        prop_assert!(first <= id && id <= last, "{name}: {first:?} {id:?} {last:?}");
        prop_assert_eq!(layout.decode(first), Parts { node: 0, sequence: 0, ..parts });
        prop_assert_eq!(
            layout.decode(last),
            Parts { node: layout.max_node(), sequence: layout.max_sequence(), ..parts }
        );
        if let Ok(next) = layout.first_id_at(parts.unix_ms + layout.tick_ms()) {
            prop_assert_eq!(last.get() + 1, next.get(), "{}", name);
        }
    }
}

#[test]
fn the_span_maps_onto_all_ids() {
    for (name, layout) in Layout::PRESETS {
        assert_eq!(layout.first_id_at(layout.epoch_ms()), Ok(Id::new(0)), "{name}");
        assert_eq!(
            layout.last_id_at(layout.end_unix_ms() - 1),
            Ok(Id::new(layout.max_id())),
            "{name}"
        );
    }
}

#[test]
fn times_outside_the_span_are_errors() {
    for (name, layout) in Layout::PRESETS {
        let end = layout.end_unix_ms();
        let past_end = Err(RangeError::TimePastEnd {
            unix_ms: end,
            end_ms: end,
        });
        assert_eq!(layout.first_id_at(end), past_end, "{name}");
        assert_eq!(layout.last_id_at(end), past_end, "{name}");
    }
    let epoch = Layout::TWITTER.epoch_ms();
    let before = Err(RangeError::TimeBeforeEpoch {
        unix_ms: 0,
        epoch_ms: epoch,
    });
    assert_eq!(Layout::TWITTER.first_id_at(0), before);
    assert_eq!(Layout::TWITTER.last_id_at(0), before);
    assert_eq!(
        Layout::TWITTER.first_id_at(0).unwrap_err().to_string(),
        "time 0 ms is before the layout's epoch: the layout allows 1288834974657 ms and later"
    );
}

#[test]
fn a_window_between_two_times_covers_the_minted_ids() {
    // Twitter's documented tweet, at 1539202764211 ms, inside a one-second window.
    let id = Id::new(1_050_118_621_198_921_728);
    let from = Layout::TWITTER.first_id_at(1_539_202_764_000).unwrap();
    let to = Layout::TWITTER.last_id_at(1_539_202_764_999).unwrap();
    assert!((from..=to).contains(&id));
    // One ms later the window no longer holds it.
    let later = Layout::TWITTER.first_id_at(1_539_202_764_212).unwrap();
    assert!(id < later);
}
