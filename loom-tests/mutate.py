#!/usr/bin/env python3
"""Applies one named mutation (M1..M8, T1..T5, see README.md) to atomflake's source, in place.

Run from the repository root; restore with `git checkout src/`. loom-tests/mutants.sh runs
the models against each mutation in turn. M*: the generator (the models in tests/); T*: the
clock's timeline and discipline (src/clock/discipline.rs: its loom model and unit tests).
"""
import sys
m = sys.argv[1]
def sub(path, old, new):
    s = open(path).read()
    assert old in s, (path, old)
    open(path, 'w').write(s.replace(old, new, 1))
G, S, D = 'src/generator/minter.rs', 'src/generator/state.rs', 'src/clock/discipline.rs'
W = 'src/generator/word.rs'
if m == 'M1':  # CAS replaced by a load and a store
    sub(W, '''        self.compare_exchange_weak(current, new, Ordering::Relaxed, Ordering::Relaxed)
            .map(drop)''', '''        let _ = current;
        self.store(new, Ordering::Relaxed);
        Ok(())''')
elif m == 'M2':  # a new tick keeps the old sequence
    sub(S, 'return Step::Mint { slot: now_slot };', 'return Step::Mint { slot: now_slot | (state & self.sequence_field) };')
elif m == 'M3':  # a spent tick does not wait: mint into the next tick at once
    sub(S, 'if tick - now_tick <= self.lead {', 'if true {')
elif m == 'M4':  # a clock behind the state restarts at the clock's tick
    sub(S, 'if state <= now_slot {', 'if state <= now_slot || self.tick(state) > now_tick {')
elif m == 'M6':  # a block is not capped at the end of its tick
    sub(S, 'let room = if rest_of_tick < before_end {', 'let room = if false {')
elif m == 'M7':  # borrow-ahead goes one tick past its lead
    sub(S, 'if tick - now_tick <= self.lead {', 'if tick - now_tick <= self.lead + 1 {')
elif m == 'M8':  # a window's limit is not capped at the next tick: a carry mints its opening
    sub(G, 'limit: self.limit().min(self.word.next_tick(slot)),', 'limit: self.limit(),')
elif m == 'M5':  # CAS failure retries with the stale state
    sub(G, 'Err(actual) => state = actual,', 'Err(_actual) => {}')
elif m == 'T1':  # the reader does not re-check the version after reading
    sub(D, 'if self.version.load(Ordering::Relaxed) == version {', 'if true {')
elif m == 'T2':  # publish without its leading Release fence
    sub(D, '''        A::fence(Ordering::Release);
        self.slots''', '''        self.slots''')
elif m == 'T3':  # a slew starts at the check, before the horizon: a slower piece is published
    sub(D, '''            // Behind: leave the piece to run into its horizon and slew (or slew on).
            None''', '''            Some(Segment::new(raw, clock, self.nominal, raw, self.slewing))''')
elif m == 'T4':  # past its horizon a piece runs slow from its start value, not the horizon's
    sub(D, '''            self.at_horizon()
                .saturating_add(''', '''            self.at
                .saturating_add(''')
elif m == 'T5':  # a piece is never renewed: the clock runs slow a second after each jump
    sub(D, 'else if current.horizon < raw.saturating_add(self.horizon / 2) {', 'else if false {')
else:
    sys.exit(f'unknown mutation {m}')
