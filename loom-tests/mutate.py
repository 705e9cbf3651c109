#!/usr/bin/env python3
"""Applies one named mutation (M1..M7, see README.md) to atomflake's source, in place.

Run from the repository root; restore with `git checkout src/`. loom-tests/mutants.sh runs
the models against each mutation in turn.
"""
import sys
m = sys.argv[1]
def sub(path, old, new):
    s = open(path).read()
    assert old in s, (path, old)
    open(path, 'w').write(s.replace(old, new, 1))
G, S = 'src/mint.rs', 'src/state.rs'
if m == 'M1':  # CAS replaced by a load and a store
    sub(G, '''        self.compare_exchange_weak(current, new, Ordering::Relaxed, Ordering::Relaxed)
            .map(drop)''', '''        let _ = current;
        self.store(new, Ordering::Relaxed);
        Ok(())''')
elif m == 'M2':  # a new tick keeps the old sequence
    sub(S, 'return Step::Mint { slot: now_slot };', 'return Step::Mint { slot: now_slot | (state & self.sequence_mask()) };')
elif m == 'M3':  # a spent tick does not wait: mint into the next tick at once
    sub(S, 'if tick - now_tick <= self.lead {', 'if true {')
elif m == 'M4':  # a clock behind the state restarts at the clock's tick
    sub(S, 'if state <= now_slot {', 'if state <= now_slot || self.tick(state) > now_tick {')
elif m == 'M6':  # a block is not capped at the end of its tick
    sub(S, 'let room = if rest_of_tick < before_end {', 'let room = if false {')
elif m == 'M7':  # borrow-ahead goes one tick past its lead
    sub(S, 'if tick - now_tick <= self.lead {', 'if tick - now_tick <= self.lead + 1 {')
elif m == 'M5':  # CAS failure retries with the stale state
    sub(G, 'Err(actual) => state = actual,', 'Err(_actual) => {}')
