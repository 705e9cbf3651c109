//! The pure transition of a generator's state word: `(state, now) -> next step`.
//!
//! Nothing here reads a clock or touches an atomic, so tests, loom models and fuzzers can
//! drive it with any sequence of times.
//!
//! # The state word
//!
//! The state is the **next free slot**, one `u64`:
//!
//! ```text
//!  63                       sequence_bits                     0
//! |  tick (ticks since epoch)  |  sequence (next unused value)  |
//! ```
//!
//! Read as one integer, slots are in mint order: `slot + 1` is the next sequence value in
//! the same tick, and the slot after a tick's last value is sequence 0 of the next tick
//! (the carry lands in the tick field). So a mint is "take `max(state, now's first
//! slot)`, store it plus one", and the rules below fall out of integer order:
//!
//! - the state only grows, so no slot (and no ID) is ever handed out twice or out of order;
//! - a tick later than the state's starts at sequence 0;
//! - the same or an earlier tick (a clock that moved back) continues the state's sequence;
//! - a slot whose tick is ahead of the clock means the clock's tick is spent: wait for it,
//!   unless borrow-ahead allows minting that many ticks ahead of the clock (the `lead`).
//!
//! Storing the next free slot rather than the last used one needs no "nothing minted yet"
//! marker, and the carry into the tick field does the tick change.
//!
//! The last slot a state word can express is the end of the layout's span. When the
//! timestamp and sequence fill all 64 bits (Mastodon), `slot + 1` of the very last slot
//! cannot be stored, so that one slot, at the end of the span, is never minted.

/// The state-word arithmetic of one layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StateWord {
    sequence_bits: u32,
    /// How many ticks ahead of the clock a spent tick may continue (borrow-ahead; 0: off).
    lead: u64,
    /// First slot past the span: `2^(timestamp_bits + sequence_bits)`, or `u64::MAX` when
    /// that does not fit (see the module docs).
    end: u64,
}

/// What a mint at a given time may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Mint `slot`; the state becomes `slot + 1`.
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

impl StateWord {
    pub(crate) const fn new(timestamp_bits: u32, sequence_bits: u32) -> StateWord {
        let width = timestamp_bits + sequence_bits;
        StateWord {
            sequence_bits,
            lead: 0,
            end: if width >= 64 { u64::MAX } else { 1 << width },
        }
    }

    /// The same word, minting up to `lead` ticks ahead of the clock when a tick is spent.
    pub(crate) const fn with_lead(self, lead: u64) -> StateWord {
        StateWord { lead, ..self }
    }

    /// The first slot of `tick`.
    #[inline]
    pub(crate) const fn first_slot(self, tick: u64) -> u64 {
        tick << self.sequence_bits
    }

    /// The tick of `slot`.
    #[inline]
    pub(crate) const fn tick(self, slot: u64) -> u64 {
        slot >> self.sequence_bits
    }

    /// The first slot of the tick after `slot`'s (`u64::MAX` past the last expressible).
    #[inline]
    pub(crate) const fn next_tick(self, slot: u64) -> u64 {
        (slot | self.sequence_mask()).saturating_add(1)
    }

    /// The sequence value of `slot`.
    #[cfg(test)]
    pub(crate) const fn sequence(self, slot: u64) -> u64 {
        slot & self.sequence_mask()
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
        // moved back. The state's slot is free to mint unless it is sequence 0 of a tick
        // no mint has used, which only a spent tick's carry produces (the state minus one
        // is the last slot handed out); that tick waits for the clock, or with borrow-ahead
        // is minted early while it is at most `lead` ticks ahead of the clock.
        if state >= self.end {
            return Step::End;
        }
        if state & self.sequence_mask() != 0 {
            return Step::Mint { slot: state };
        }
        // `state > now_slot` and sequence 0: the state's tick is later than the clock's.
        let tick = self.tick(state);
        if tick - now_tick <= self.lead {
            Step::Mint { slot: state }
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
        let rest_of_tick = self.sequence_mask() - (slot & self.sequence_mask()) + 1;
        let before_end = self.end - slot;
        let room = if rest_of_tick < before_end {
            rest_of_tick
        } else {
            before_end
        };
        if want < room { want } else { room }
    }

    const fn sequence_mask(self) -> u64 {
        (1 << self.sequence_bits) - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWITTER: StateWord = StateWord::new(41, 12);

    #[test]
    fn first_mint_of_a_tick_is_sequence_zero() {
        assert_eq!(TWITTER.step(0, 5), Step::Mint { slot: 5 << 12 });
        assert_eq!(TWITTER.sequence(5 << 12), 0);
        assert_eq!(TWITTER.tick(5 << 12), 5);
    }

    #[test]
    fn same_tick_continues_the_sequence() {
        let state = (5 << 12) + 3;
        assert_eq!(TWITTER.step(state, 5), Step::Mint { slot: state });
    }

    #[test]
    fn later_tick_restarts_at_zero() {
        assert_eq!(TWITTER.step((5 << 12) + 3, 6), Step::Mint { slot: 6 << 12 });
    }

    #[test]
    fn earlier_tick_continues_the_state() {
        let state = (9 << 12) + 7;
        assert_eq!(TWITTER.step(state, 2), Step::Mint { slot: state });
        // Also at the first value of the last used tick's sequence.
        let state = (9 << 12) + 1;
        assert_eq!(TWITTER.step(state, 2), Step::Mint { slot: state });
    }

    #[test]
    fn spent_tick_waits_for_the_next() {
        // After the last sequence value of tick 5 the state carried into tick 6.
        let state = (5 << 12) + 4095 + 1;
        assert_eq!(TWITTER.step(state, 5), Step::Wait { tick: 6 });
        assert_eq!(TWITTER.step(state, 4), Step::Wait { tick: 6 });
        assert_eq!(TWITTER.step(state, 6), Step::Mint { slot: 6 << 12 });
    }

    #[test]
    fn borrow_ahead_mints_up_to_the_lead_then_waits() {
        let word = TWITTER.with_lead(2);
        // Tick 5 spent: ticks 6 and 7 may be borrowed while the clock reads 5.
        assert_eq!(word.step(6 << 12, 5), Step::Mint { slot: 6 << 12 });
        assert_eq!(word.step((6 << 12) + 9, 5), Step::Mint { slot: (6 << 12) + 9 });
        assert_eq!(word.step(7 << 12, 5), Step::Mint { slot: 7 << 12 });
        // Tick 8 is three ahead: wait until the clock reads 6, two behind it.
        assert_eq!(word.step(8 << 12, 5), Step::Wait { tick: 6 });
        assert_eq!(word.step(8 << 12, 6), Step::Mint { slot: 8 << 12 });
        // The clock catching up ends the lead: minting restarts at the clock's tick.
        assert_eq!(word.step(8 << 12, 9), Step::Mint { slot: 9 << 12 });
        // A lead never passes the end of the span.
        assert_eq!(StateWord::new(2, 1).with_lead(5).step(8, 3), Step::End);
    }

    #[test]
    fn zero_bit_sequence_mints_once_per_tick() {
        let word = StateWord::new(63, 0);
        assert_eq!(word.step(0, 3), Step::Mint { slot: 3 });
        assert_eq!(word.step(4, 3), Step::Wait { tick: 4 });
        // A clock behind the last used tick waits for the clock: one id per tick.
        assert_eq!(word.step(10, 2), Step::Wait { tick: 10 });
        assert_eq!(word.sequence(3), 0);
    }

    #[test]
    fn blocks_stop_at_the_end_of_the_tick_and_of_the_span() {
        assert_eq!(TWITTER.block(5 << 12, 10), 10);
        assert_eq!(TWITTER.block(5 << 12, 10_000), 4096);
        assert_eq!(TWITTER.block((5 << 12) + 4095, 10), 1);
        assert_eq!(StateWord::new(63, 0).block(9, 5), 1);
        let full = StateWord::new(62, 2);
        assert_eq!(
            full.block(u64::MAX - 3, 9),
            3,
            "the last slot of a 64-bit word is the end"
        );
    }

    #[test]
    fn next_tick_is_the_first_slot_of_the_following_tick() {
        assert_eq!(TWITTER.next_tick(5 << 12), 6 << 12);
        assert_eq!(TWITTER.next_tick((5 << 12) + 4095), 6 << 12);
        assert_eq!(StateWord::new(63, 0).next_tick(9), 10);
        assert_eq!(StateWord::new(48, 16).next_tick(u64::MAX - 1), u64::MAX);
    }

    #[test]
    fn end_of_span() {
        // 2-bit timestamp, 1-bit sequence: 8 slots.
        let word = StateWord::new(2, 1);
        assert_eq!(word.step(7, 3), Step::Mint { slot: 7 });
        assert_eq!(word.step(8, 3), Step::End);
        // A 64-bit word: the very last slot is the end marker.
        let full = StateWord::new(48, 16);
        assert_eq!(
            full.step(u64::MAX - 1, (1 << 48) - 1),
            Step::Mint { slot: u64::MAX - 1 }
        );
        assert_eq!(full.step(u64::MAX, (1 << 48) - 1), Step::End);
    }
}
