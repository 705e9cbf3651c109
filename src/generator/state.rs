//! The pure transition of a generator's state word: `(state, now) -> next step`.
//!
//! Nothing here reads a clock or touches an atomic, so tests, loom models and fuzzers can
//! drive it with any sequence of times.
//!
//! # The state word
//!
//! The state is the **next free slot**, one `u64` kept in the layout's **ID space**: the
//! timestamp and sequence fields sit where the layout puts them in an ID, and the node
//! field holds a constant, the *filler*. A node's ID is then its slot with the node field
//! swapped in, one XOR with a key computed once (`slot ^ (filler ^ node)`), and the slot
//! after it is `slot + unit`, where `unit` is the sequence field's lowest bit. For Twitter
//! (41 | 10 | 12, node above the sequence):
//!
//! ```text
//!  63    22 21        12 11          0
//! |  tick  | 1111111111 |  sequence   |   a slot: the node field's bits all ones
//! |  tick  | 0000000000 | 00000000000 |   an opening: the state before a tick's first mint
//! ```
//!
//! The filler is chosen so that a sequence that runs out carries into the tick: where the
//! node field lies between the sequence and the timestamp (`NodeSequence`) it is all ones,
//! and `slot + unit` past a tick's last value clears it and adds one to the tick; where
//! the sequence lies right below the timestamp (`SequenceNode`, or no node bits) it is zero
//! and the carry lands in the tick directly. Read as one integer, states are in mint order:
//!
//! - `opening(t) < first_slot(t) <= every slot of t < opening(t + 1)`, where `opening(t)`
//!   is `t` shifted into the timestamp field with every lower bit zero, and
//!   `first_slot(t) = opening(t) | filler`;
//! - a mint is "take `max(state, the clock's first slot)`, store it plus `unit`", and every
//!   rule below falls out of integer order:
//!   - the state only grows, so no slot (and no ID) is ever handed out twice or out of
//!     order: this is the whole proof of uniqueness, given that a slot is only minted by the
//!     compare-and-swap that moves the state past it ([`minter`](super::minter));
//!   - a tick later than the state's starts at sequence 0;
//!   - the same or an earlier tick (a clock that moved back) continues the state's
//!     sequence;
//!   - a state that is an opening ahead of the clock means the clock's tick is spent: wait
//!     for it, unless borrow-ahead allows minting that many ticks ahead of the clock (the
//!     `lead`).
//!
//! An opening is the only state with no slot bits set (`state & (sequence | filler) == 0`);
//! every slot has the filler or a sequence value (a sequence-0 slot of a layout without
//! filler *is* its tick's opening, which is why "no mint used it" is the same test).
//! Storing the next free state rather than the last used slot needs no "nothing minted yet"
//! marker, and the carry does the tick change.
//!
//! The first state past the layout's span is its **end**: the opening of the tick after
//! the last. When the timestamp field reaches bit 63 that opening is `2^64`, which does not
//! fit; the end is then the span's very last slot, so that one slot is never minted and
//! no state wraps to zero.

use crate::format::id::Id;
use crate::format::layout::{FieldOrder, Layout, check_field};
use crate::format::{Field, FieldOutOfRange};

/// The state-word arithmetic of one layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StateWord {
    /// Where the timestamp field starts.
    timestamp_shift: u32,
    /// Where the sequence field starts.
    sequence_shift: u32,
    /// The sequence field's lowest bit: the step from one slot to the next of a tick.
    unit: u64,
    /// The sequence field's bits, in place.
    sequence_field: u64,
    /// The node field's constant in a slot: all ones where the node lies between the
    /// sequence and the timestamp, zero where it does not (see the module docs).
    filler: u64,
    /// How many ticks ahead of the clock a spent tick may continue (borrow-ahead; 0: off).
    lead: u64,
    /// The first state past the span: the opening of the tick after the last, or the
    /// span's last slot when that does not fit (see the module docs).
    end: u64,
}

/// What a mint at a given time may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Mint `slot`; the state becomes `slot + unit`.
    Mint {
        /// The slot to mint.
        slot: u64,
    },
    /// The clock's tick is spent: no slot may be minted before the clock reaches `tick`.
    Wait {
        /// The first clock tick at which a slot is free (with borrow-ahead, `lead` ticks
        /// before the tick of that slot).
        tick: u64,
    },
    /// Every slot of the layout's span is used.
    End,
}

/// The node field's constant in a slot of `layout` (see the module docs).
const fn filler_of(layout: &Layout) -> u64 {
    match layout.order() {
        FieldOrder::NodeSequence => layout.max_node() << layout.node_shift(),
        FieldOrder::SequenceNode => 0,
    }
}

impl StateWord {
    pub(crate) const fn of(layout: &Layout) -> StateWord {
        let timestamp_shift = layout.timestamp_shift();
        let top = timestamp_shift + layout.timestamp_bits();
        let node_field = layout.max_node() << layout.node_shift();
        let filler = filler_of(layout);
        StateWord {
            timestamp_shift,
            sequence_shift: layout.sequence_shift(),
            unit: 1 << layout.sequence_shift(),
            sequence_field: layout.max_sequence() << layout.sequence_shift(),
            filler,
            lead: 0,
            end: if top >= 64 { !node_field | filler } else { 1 << top },
        }
    }

    /// The same word, minting up to `lead` ticks ahead of the clock when a tick is spent.
    pub(crate) const fn with_lead(self, lead: u64) -> StateWord {
        StateWord { lead, ..self }
    }

    /// What `slot ^ key` turns into the ID of `node` (already shifted into its field).
    pub(crate) const fn key(self, node_in_place: u64) -> u64 {
        self.filler ^ node_in_place
    }

    /// The step from one slot to the next of the same tick.
    #[inline]
    pub(crate) const fn unit(self) -> u64 {
        self.unit
    }

    /// The state before `tick`'s first mint (see the module docs).
    #[inline]
    pub(crate) const fn opening(self, tick: u64) -> u64 {
        tick << self.timestamp_shift
    }

    /// The first slot of `tick`.
    #[inline]
    pub(crate) const fn first_slot(self, tick: u64) -> u64 {
        self.opening(tick) | self.filler
    }

    /// The tick of `slot` (or of a state: an opening's is the tick it opens).
    #[inline]
    pub(crate) const fn tick(self, slot: u64) -> u64 {
        slot >> self.timestamp_shift
    }

    /// The opening of the tick after `slot`'s, never past the end of the span.
    #[inline]
    pub(crate) const fn next_tick(self, slot: u64) -> u64 {
        let next = (slot | ((1 << self.timestamp_shift) - 1)).saturating_add(1);
        if next < self.end { next } else { self.end }
    }

    /// The sequence value of `slot`.
    #[cfg(test)]
    pub(crate) const fn sequence(self, slot: u64) -> u64 {
        (slot & self.sequence_field) >> self.sequence_shift
    }

    /// The step from `state` when the clock reads `now_tick` (which the caller has checked
    /// is inside the layout's span).
    #[inline]
    pub(crate) const fn step(self, state: u64, now_tick: u64) -> Step {
        let now_slot = self.first_slot(now_tick);
        if state <= now_slot {
            // The clock reached a tick with no slot used yet: its sequence 0.
            return Step::Mint { slot: now_slot };
        }
        // The state is ahead of the clock's first slot: the same tick, or a clock that
        // moved back. The state's slot is free to mint unless the state is an opening,
        // which only a spent tick's carry (or a start past a stored mark) produces; that
        // tick waits for the clock, or with borrow-ahead is minted early while it is at
        // most `lead` ticks ahead of the clock.
        if state >= self.end {
            return Step::End;
        }
        if state & (self.sequence_field | self.filler) != 0 {
            return Step::Mint { slot: state };
        }
        // An opening, later than the clock's first slot: the state's tick is later than
        // the clock's.
        let tick = self.tick(state);
        if tick - now_tick <= self.lead {
            Step::Mint {
                slot: self.first_slot(tick),
            }
        } else {
            Step::Wait {
                tick: tick - self.lead,
            }
        }
    }

    /// How many slots from `slot` on a block may take, at most `want` (≥ 1): the rest of
    /// `slot`'s tick, and never the end of the span. At least 1 for a slot `step` minted.
    #[inline]
    pub(crate) const fn block(self, slot: u64, want: u64) -> u64 {
        let rest_of_tick = ((self.sequence_field - (slot & self.sequence_field)) >> self.sequence_shift) + 1;
        let before_end = ((self.end - slot - 1) >> self.sequence_shift) + 1;
        let room = if rest_of_tick < before_end {
            rest_of_tick
        } else {
            before_end
        };
        if want < room { want } else { room }
    }

    /// How many slots from `state` on a block may take below `limit`, at most `want` (≥ 1;
    /// `state < limit`, and `limit` at most the opening of `state`'s next tick).
    #[inline]
    pub(crate) const fn below(self, state: u64, limit: u64, want: u64) -> u64 {
        let room = ((limit - state - 1) >> self.sequence_shift) + 1;
        if want < room { want } else { room }
    }
}

/// Turns one node's slots into its IDs: `slot ^ key`, one XOR (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SlotPacker {
    /// The filler, with the node swapped in.
    key: u64,
}

impl SlotPacker {
    /// A packer for `node`.
    ///
    /// # Errors
    ///
    /// [`FieldOutOfRange`] when `node` does not fit the layout's node field.
    pub(crate) fn new(layout: &Layout, node: u64) -> Result<SlotPacker, FieldOutOfRange> {
        check_field(Field::Node, node, layout.max_node())?;
        Ok(SlotPacker {
            key: StateWord::of(layout).key(node << layout.node_shift()),
        })
    }

    /// The ID of `slot`.
    #[inline]
    pub(crate) const fn id(self, slot: u64) -> Id {
        Id::new(slot ^ self.key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWITTER: StateWord = StateWord::of(&Layout::TWITTER);

    /// The slot of `tick` and `sequence` in `word`.
    fn at(word: StateWord, tick: u64, sequence: u64) -> u64 {
        word.first_slot(tick) + sequence * word.unit()
    }

    /// The step that mints at the slot of `tick` and `sequence` in `word`.
    fn mint_at(word: StateWord, tick: u64, sequence: u64) -> Step {
        Step::Mint {
            slot: at(word, tick, sequence),
        }
    }

    fn layout(timestamp_bits: u32, node_bits: u32, sequence_bits: u32) -> Layout {
        Layout::builder()
            .timestamp_bits(timestamp_bits)
            .node_bits(node_bits)
            .sequence_bits(sequence_bits)
            .build()
            .unwrap()
    }

    #[test]
    fn a_slot_is_the_id_with_the_node_field_filled() {
        // Twitter: the node field (bits 12..22) all ones; node 5's key swaps in 5.
        assert_eq!(at(TWITTER, 5, 3), 5 << 22 | 1023 << 12 | 3);
        assert_eq!(at(TWITTER, 5, 3) ^ TWITTER.key(5 << 12), 5 << 22 | 5 << 12 | 3);
        assert_eq!(TWITTER.opening(5), 5 << 22);
        // Sonyflake: the sequence right below the timestamp, the node lowest: no filler.
        let sonyflake = StateWord::of(&Layout::SONYFLAKE);
        assert_eq!(sonyflake.unit(), 1 << 16);
        assert_eq!(at(sonyflake, 5, 3), 5 << 24 | 3 << 16);
        assert_eq!(sonyflake.first_slot(5), sonyflake.opening(5));
        assert_eq!(
            at(sonyflake, 5, 3) ^ sonyflake.key(0xBEEF),
            5 << 24 | 3 << 16 | 0xBEEF
        );
    }

    #[test]
    fn slot_packer_agrees_with_encode() {
        for (name, l) in Layout::PRESETS {
            let parts = crate::Parts {
                unix_ms: l.epoch_ms() + 1000 * l.tick_ms(),
                node: l.max_node() / 3,
                sequence: l.max_sequence() / 2,
            };
            let slot = at(StateWord::of(&l), 1000, parts.sequence);
            assert_eq!(
                SlotPacker::new(&l, parts.node).unwrap().id(slot),
                l.encode(parts).unwrap(),
                "{name}"
            );
        }
    }

    #[test]
    fn the_last_sequence_carries_into_the_next_tick() {
        assert_eq!(at(TWITTER, 5, 4095) + TWITTER.unit(), TWITTER.opening(6));
        let sonyflake = StateWord::of(&Layout::SONYFLAKE);
        assert_eq!(at(sonyflake, 5, 255) + sonyflake.unit(), sonyflake.opening(6));
    }

    #[test]
    fn first_mint_of_a_tick_is_sequence_zero() {
        assert_eq!(TWITTER.step(0, 5), mint_at(TWITTER, 5, 0));
        assert_eq!(TWITTER.sequence(at(TWITTER, 5, 0)), 0);
        assert_eq!(TWITTER.tick(at(TWITTER, 5, 0)), 5);
        // The opening of the clock's tick (a start past a mark the clock reached).
        assert_eq!(TWITTER.step(TWITTER.opening(5), 5), mint_at(TWITTER, 5, 0));
    }

    #[test]
    fn same_tick_continues_the_sequence() {
        let state = at(TWITTER, 5, 3);
        assert_eq!(TWITTER.step(state, 5), Step::Mint { slot: state });
    }

    #[test]
    fn later_tick_restarts_at_zero() {
        assert_eq!(TWITTER.step(at(TWITTER, 5, 3), 6), mint_at(TWITTER, 6, 0));
        assert_eq!(TWITTER.step(TWITTER.opening(6), 9), mint_at(TWITTER, 9, 0));
    }

    #[test]
    fn earlier_tick_continues_the_state() {
        let state = at(TWITTER, 9, 7);
        assert_eq!(TWITTER.step(state, 2), Step::Mint { slot: state });
        // Also at the first value of the last used tick's sequence.
        let state = at(TWITTER, 9, 1);
        assert_eq!(TWITTER.step(state, 2), Step::Mint { slot: state });
    }

    #[test]
    fn spent_tick_waits_for_the_next() {
        // After the last sequence value of tick 5 the state carried into tick 6's opening.
        let state = at(TWITTER, 5, 4095) + TWITTER.unit();
        assert_eq!(TWITTER.step(state, 5), Step::Wait { tick: 6 });
        assert_eq!(TWITTER.step(state, 4), Step::Wait { tick: 6 });
        assert_eq!(TWITTER.step(state, 6), mint_at(TWITTER, 6, 0));
        // The same without filler: the carry lands in the tick at sequence 0.
        let sonyflake = StateWord::of(&Layout::SONYFLAKE);
        let state = at(sonyflake, 5, 255) + sonyflake.unit();
        assert_eq!(sonyflake.step(state, 5), Step::Wait { tick: 6 });
        assert_eq!(sonyflake.step(state, 6), Step::Mint { slot: state });
    }

    #[test]
    fn borrow_ahead_mints_up_to_the_lead_then_waits() {
        let word = TWITTER.with_lead(2);
        // Tick 5 spent: ticks 6 and 7 may be borrowed while the clock reads 5.
        assert_eq!(word.step(word.opening(6), 5), Step::Mint { slot: at(word, 6, 0) });
        assert_eq!(word.step(at(word, 6, 9), 5), Step::Mint { slot: at(word, 6, 9) });
        assert_eq!(word.step(word.opening(7), 5), Step::Mint { slot: at(word, 7, 0) });
        // Tick 8 is three ahead: wait until the clock reads 6, two behind it.
        assert_eq!(word.step(word.opening(8), 5), Step::Wait { tick: 6 });
        assert_eq!(word.step(word.opening(8), 6), Step::Mint { slot: at(word, 8, 0) });
        // The clock catching up ends the lead: minting restarts at the clock's tick.
        assert_eq!(word.step(word.opening(8), 9), Step::Mint { slot: at(word, 9, 0) });
        // A lead never passes the end of the span.
        let tiny = StateWord::of(&layout(2, 0, 1)).with_lead(5);
        assert_eq!(tiny.step(8, 3), Step::End);
    }

    #[test]
    fn zero_bit_sequence_mints_once_per_tick() {
        for word in [
            StateWord::of(&layout(53, 10, 0)),
            StateWord::of(&layout(63, 0, 0)),
        ] {
            assert_eq!(word.step(0, 3), Step::Mint { slot: at(word, 3, 0) });
            let state = at(word, 3, 0) + word.unit();
            assert_eq!(state, word.opening(4));
            assert_eq!(word.step(state, 3), Step::Wait { tick: 4 });
            // A clock behind the last used tick waits for the clock: one id per tick.
            assert_eq!(word.step(word.opening(10), 2), Step::Wait { tick: 10 });
            assert_eq!(word.sequence(at(word, 3, 0)), 0);
        }
    }

    #[test]
    fn blocks_stop_at_the_end_of_the_tick_and_of_the_span() {
        assert_eq!(TWITTER.block(at(TWITTER, 5, 0), 10), 10);
        assert_eq!(TWITTER.block(at(TWITTER, 5, 0), 10_000), 4096);
        assert_eq!(TWITTER.block(at(TWITTER, 5, 4095), 10), 1);
        let sonyflake = StateWord::of(&Layout::SONYFLAKE);
        assert_eq!(sonyflake.block(at(sonyflake, 5, 250), 10), 6);
        assert_eq!(StateWord::of(&layout(63, 0, 0)).block(9, 5), 1);
        let full = StateWord::of(&layout(62, 0, 2));
        assert_eq!(
            full.block(u64::MAX - 3, 9),
            3,
            "the last slot of a 64-bit word is the end"
        );
        // The same where the last slot's node field is zero.
        let full = StateWord::of(
            &Layout::builder()
                .timestamp_bits(40)
                .sequence_bits(8)
                .node_bits(16)
                .order(FieldOrder::SequenceNode)
                .build()
                .unwrap(),
        );
        let last: u64 = !0xFFFF;
        assert_eq!(full.block(last - 3 * full.unit(), 9), 3);
        assert_eq!(full.step(last, (1 << 40) - 1), Step::End);
    }

    #[test]
    fn below_a_limit_a_block_takes_the_slots_under_it() {
        let limit = TWITTER.next_tick(at(TWITTER, 5, 0));
        assert_eq!(limit, TWITTER.opening(6));
        assert_eq!(TWITTER.below(at(TWITTER, 5, 4090), limit, 100), 6);
        assert_eq!(TWITTER.below(at(TWITTER, 5, 4090), limit, 2), 2);
        let sonyflake = StateWord::of(&Layout::SONYFLAKE);
        let limit = sonyflake.next_tick(at(sonyflake, 5, 0));
        assert_eq!(sonyflake.below(at(sonyflake, 5, 250), limit, 100), 6);
    }

    #[test]
    fn next_tick_is_the_opening_of_the_following_tick() {
        assert_eq!(TWITTER.next_tick(at(TWITTER, 5, 0)), TWITTER.opening(6));
        assert_eq!(TWITTER.next_tick(at(TWITTER, 5, 4095)), TWITTER.opening(6));
        assert_eq!(StateWord::of(&layout(63, 0, 0)).next_tick(9), 10);
        let mastodon = StateWord::of(&Layout::MASTODON);
        assert_eq!(mastodon.next_tick(u64::MAX - 1), u64::MAX, "never past the end");
    }

    #[test]
    fn end_of_span() {
        // 2-bit timestamp, 1-bit sequence: 8 slots.
        let word = StateWord::of(&layout(2, 0, 1));
        assert_eq!(word.step(7, 3), Step::Mint { slot: 7 });
        assert_eq!(word.step(8, 3), Step::End);
        // A 64-bit word: the very last slot is the end.
        for full in [StateWord::of(&Layout::MASTODON), StateWord::of(&Layout::DISCORD)] {
            assert_eq!(
                full.step(u64::MAX - 1, full.tick(u64::MAX)),
                Step::Mint { slot: u64::MAX - 1 }
            );
            assert_eq!(full.step(u64::MAX, full.tick(u64::MAX)), Step::End);
        }
    }
}
