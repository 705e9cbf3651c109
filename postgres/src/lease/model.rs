//! A model of the lease table and its holders: what the server can lose (its last commits,
//! a row) and what a claim can reuse (a generation), against the fence the statements
//! keep (`CLAIM`, `RENEW`: a store succeeds only while the row has the holder's token).
//! One node; a holder mints at most one ID a tick, so two holders sharing a tick stands
//! for a repeated ID.

use atomflake::mark::Tenure;
use proptest::prelude::*;
use std::time::Duration;

const TTL: u64 = 2_000;

/// The mark the generator's keeper stores to cover `unix_ms`: a window and a half
/// (1.5 s) past it.
fn ahead(unix_ms: u64) -> u64 {
    unix_ms + 1_500
}

/// What a store checks the row against.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fence {
    /// The claim's own random token: what the statements do.
    Token,
    /// The row's claim counter, which a lost commit or a lost row lets a claim reuse.
    Generation,
}

#[derive(Debug, Clone, Copy)]
struct Row {
    generation: i64,
    token: u64,
    expires: u64,
    mark: u64,
}

/// A committed state of the row, and the holder whose claim or store wrote it.
type Commit = (Option<Row>, Option<usize>);

#[derive(Debug, Default)]
struct Holder {
    generation: i64,
    token: u64,
    /// The first tick it may mint (past the mark it claimed).
    start: u64,
    stored: u64,
    deadline: u64,
    lost: bool,
    /// The largest mark of this holder's that the server lost after acknowledging it.
    lost_cover: u64,
    minted: Vec<u64>,
}

#[derive(Debug, Clone)]
enum Op {
    Wait(u64),
    Claim,
    Store(usize),
    Mint(usize),
    /// The server loses its last `n` commits (a failover to a lagging standby).
    Lose(usize),
    /// The row is deleted.
    Delete,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u64..=1_500).prop_map(Op::Wait),
        2 => Just(Op::Claim),
        4 => (0usize..4).prop_map(Op::Store),
        8 => (0usize..4).prop_map(Op::Mint),
        1 => (1usize..=3).prop_map(Op::Lose),
        1 => Just(Op::Delete),
    ]
}

/// Runs `ops` on one node: the holders at the end.
fn run(fence: Fence, ops: &[Op]) -> Vec<Holder> {
    let Tenure::Leased { hold, .. } = Tenure::lease(Duration::from_millis(TTL)) else {
        unreachable!("a lease's tenure is leased");
    };
    let hold = u64::try_from(hold.as_millis()).unwrap();
    let mut now = 1_000_000;
    let mut history: Vec<Commit> = vec![(None, None)];
    let mut holders: Vec<Holder> = Vec::new();
    for op in ops {
        let row = history.last().unwrap().0;
        match *op {
            Op::Wait(ms) => now += ms,
            Op::Claim => {
                if row.is_some_and(|row| row.expires > now) {
                    continue;
                }
                let claimed = Row {
                    generation: row.map_or(1, |row| row.generation + 1),
                    // Random and never reused: a new number per claim.
                    token: holders.len() as u64 + 1,
                    expires: now + TTL,
                    mark: row.map_or(0, |row| row.mark),
                };
                history.push((Some(claimed), Some(holders.len())));
                let start = claimed.mark.max(now);
                holders.push(Holder {
                    generation: claimed.generation,
                    token: claimed.token,
                    start,
                    stored: claimed.mark,
                    ..Holder::default()
                });
                // The generator's first store follows at once, as `Mark::kept` does.
                let last = holders.len() - 1;
                store(fence, &mut history, &mut holders, last, now, hold, ahead(start));
            }
            Op::Store(i) if i < holders.len() => {
                let target = ahead(now).max(holders[i].stored);
                store(fence, &mut history, &mut holders, i, now, hold, target);
            }
            Op::Mint(i) if i < holders.len() => {
                let holder = &mut holders[i];
                let last = holder.minted.last().copied().unwrap_or(0);
                if now >= holder.start && now < holder.stored && now < holder.deadline && now > last {
                    holder.minted.push(now);
                }
            }
            Op::Lose(n) => {
                let keep = history.len().saturating_sub(n).max(1);
                for (row, writer) in history.drain(keep..) {
                    if let (Some(row), Some(writer)) = (row, writer) {
                        let holder = &mut holders[writer];
                        holder.lost_cover = holder.lost_cover.max(row.mark);
                    }
                }
            }
            Op::Delete => {
                for holder in &mut holders {
                    holder.lost_cover = holder.lost_cover.max(holder.stored);
                }
                history.push((None, None));
            }
            Op::Store(_) | Op::Mint(_) => {}
        }
    }
    holders
}

/// One store of `target` by holder `i`, as `RENEW` runs it under `fence`.
fn store(
    fence: Fence,
    history: &mut Vec<Commit>,
    holders: &mut [Holder],
    i: usize,
    now: u64,
    hold: u64,
    target: u64,
) {
    let holder = &mut holders[i];
    if holder.lost {
        return;
    }
    let ours = history.last().unwrap().0.filter(|row| match fence {
        Fence::Token => row.token == holder.token,
        Fence::Generation => row.generation == holder.generation,
    });
    let Some(row) = ours else {
        holder.lost = true;
        return;
    };
    let mark = row.mark.max(target);
    history.push((
        Some(Row {
            expires: now + TTL,
            mark,
            ..row
        }),
        Some(i),
    ));
    holder.stored = holder.stored.max(target);
    holder.deadline = now + hold;
}

/// Every tick two holders minted, with the two.
fn shared_ticks(holders: &[Holder]) -> Vec<(u64, usize, usize)> {
    let mut seen = std::collections::HashMap::new();
    let mut shared = Vec::new();
    for (i, holder) in holders.iter().enumerate() {
        for &tick in &holder.minted {
            if let Some(other) = seen.insert(tick, i) {
                shared.push((tick, other, i));
            }
        }
    }
    shared
}

/// Whether every tick two holders share lies below a mark of theirs that the server
/// lost after acknowledging it: the only way two holders meet.
fn only_lost_marks_let_holders_meet(holders: &[Holder]) -> bool {
    shared_ticks(holders)
        .iter()
        .all(|&(tick, a, b)| tick < holders[a].lost_cover.max(holders[b].lost_cover))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4_000))]

    /// With the token, whatever the server loses and whatever generation a claim
    /// reuses: two holders mint in the same tick only below a mark the server lost
    /// (so never when it loses nothing, as with synchronous replication).
    #[test]
    fn with_the_token_holders_meet_only_below_a_lost_mark(ops in proptest::collection::vec(op(), 1..80)) {
        let holders = run(Fence::Token, &ops);
        prop_assert!(only_lost_marks_let_holders_meet(&holders), "{:?}", shared_ticks(&holders));
        if !ops.iter().any(|op| matches!(op, Op::Lose(_) | Op::Delete)) {
            prop_assert_eq!(shared_ticks(&holders), vec![]);
        }
    }
}

/// The counter as the fence: a claim lost with the server's last commits is made
/// again with the same generation, the first holder renews the second's claim, and
/// both mint past every mark the server lost. The token ends the first at its store.
#[test]
fn with_the_generation_as_fence_two_holders_mint_past_every_lost_mark() {
    let ops = [
        Op::Claim,
        Op::Lose(2),
        Op::Claim,
        Op::Wait(1_600),
        Op::Store(0),
        Op::Store(1),
        Op::Mint(0),
        Op::Mint(1),
    ];
    let holders = run(Fence::Generation, &ops);
    assert!(!only_lost_marks_let_holders_meet(&holders), "{holders:?}");
    let holders = run(Fence::Token, &ops);
    assert!(holders[0].lost && holders[0].minted.is_empty(), "{holders:?}");
    assert_eq!(holders[1].minted.len(), 1);
}
