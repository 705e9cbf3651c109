//! The fleet tests every engine runs, less what only the engine can check (its claims'
//! numbers, its refusals' texts, its records of the marks).

use super::child::HolderClock;
use super::history::assert_unique;
use super::holder::{Holder, Holders};
use super::lines::{claim, field, ids, last_refusal, minted, tail};
use crate::{HANG_GUARD, now_ms};
use atomflake::Id;
use atomflake_lease::{Engine, LeaseError, LeaseRow, list};
use std::collections::HashSet;
use std::fmt::Debug;
use std::path::Path;
use std::time::Duration;

/// Sixteen holders on engine `E` at `config` claim the sixteen nodes of
/// [`layout`](super::layout) in namespace `fleet`, a seventeenth is refused with [`LeaseError::NoFreeNode`]'s text, and one in namespace
/// `other` (another node space) gets node 0; once they exit, every node is free at once.
/// The rows the engine lists while the sixteen hold are returned.
///
/// # Panics
///
/// When it is otherwise.
pub fn sixteen_holders<E: Engine>(holders: &Holders, config: &E::Config) -> Vec<LeaseRow>
where
    E::Error: Debug,
{
    // A holder that only holds does not renew: a lease time that outlasts the test, however
    // slowly a loaded machine starts sixteen processes.
    let holding = || holders.hold("fleet").ttl(Duration::from_secs(30));
    let mut sixteen: Vec<Holder> = (0..16).map(|_| holding().spawn()).collect();
    let nodes: HashSet<u64> = sixteen.iter_mut().map(Holder::node).collect();
    assert_eq!(nodes, (0..16).collect());
    let seventeenth = holding().spawn().close();
    let refusal = LeaseError::<E::Error>::NoFreeNode {
        namespace: "fleet".to_owned(),
        max: 15,
    };
    assert_eq!(field(&seventeenth, "refused "), refusal.to_string());
    let mut other = holders.hold("other").spawn();
    assert_eq!(other.node(), 0);
    other.close();
    let held = list::<E>(config, "fleet").unwrap();
    assert_eq!(held.len(), 16);
    assert!(
        held.iter().all(|row| row.live && row.generation.is_some()),
        "{held:?}"
    );
    for holder in sixteen {
        holder.close();
    }
    let rows = list::<E>(config, "fleet").unwrap();
    assert!(rows.iter().all(|row| !row.live), "released on exit: {rows:?}");
    held
}

/// [`freeze_a_holder`] on engine `E`, in namespace `frozen`: the successor's claim has a
/// larger generation, and the frozen holder's last refusal is [`LeaseError::Lost`] for its
/// own claim: its store after `SIGCONT` found the claim gone, and minting ended.
///
/// # Panics
///
/// When it is otherwise.
pub fn a_frozen_holder_is_lost<E: Engine>(holders: &Holders, clock: HolderClock, pause: Duration) -> Frozen {
    let run = freeze_a_holder(holders, "frozen", clock, pause);
    let generation = claim(&run.frozen);
    assert!(
        claim(&run.successor) > generation,
        "{:?}",
        field(&run.successor, "node ")
    );
    let lost = LeaseError::<E::Error>::Lost {
        namespace: "frozen".to_owned(),
        node: run.node,
        generation,
    };
    assert_eq!(last_refusal(&run.frozen), lost.to_string());
    run
}

/// A holder on engine `E` at `config` killed with `SIGKILL` in namespace `killed`, and a
/// successor on its node with its clock 3 s behind (stepped through the libfaketime file
/// `behind`): the successor starts past the killed holder's IDs, and the node's mark is
/// past them all.
///
/// # Panics
///
/// When it is otherwise.
pub fn a_killed_holders_successor_starts_past_the_mark<E: Engine>(
    holders: &Holders,
    config: &E::Config,
    behind: &Path,
) where
    E::Error: Debug,
{
    let (node, killed) = kill_a_holder(holders, "killed");
    let (successor, _) = successor_behind(holders, "killed", node, behind);
    let mark = list::<E>(config, "killed").unwrap()[0].high_water_ms;
    assert_successor(&killed, &successor);
    let last = *minted(&killed).iter().max().unwrap();
    assert!(super::layout().decode(Id::new(last)).unix_ms < mark);
}

/// What [`freeze_a_holder`] saw.
pub struct Frozen {
    /// The node of both.
    pub node: u64,
    /// Every line of the frozen holder.
    pub frozen: Vec<String>,
    /// Every line of its successor.
    pub successor: Vec<String>,
    /// When it was frozen (Unix ms).
    pub stopped: u64,
    /// When it was thawed (Unix ms).
    pub resumed: u64,
}

/// A holder minting in `namespace` on `clock` is frozen with `SIGSTOP` after 100 IDs, for
/// `pause` (past its lease time); a successor asking for its node mints 300 IDs; then the
/// first is thawed and ends. The successor starts past every ID of the first, none twice;
/// on the precise clock the first mints nothing after it was thawed
/// ([`Frozen::minted_after_freeze`] is empty: no ID's time is past the freeze).
pub fn freeze_a_holder(holders: &Holders, namespace: &str, clock: HolderClock, pause: Duration) -> Frozen {
    let mut frozen = holders.mint(namespace).clock(clock).spawn();
    let node = frozen.node();
    frozen.wait_for_ids(100);
    frozen.signal("-STOP");
    let stopped = now_ms();
    std::thread::sleep(pause);
    let successor = holders
        .mint(namespace)
        .node(node)
        .clock(clock)
        .count(300)
        .spawn()
        .finish(super::CLAIM_GUARD);
    // Checked before the first is thawed: a successor refused leaves the claim to the
    // first, which then renews it and mints on.
    assert_eq!(
        minted(&successor).len(),
        300,
        "the successor: {:?}",
        tail(&successor)
    );
    let resumed = now_ms();
    frozen.signal("-CONT");
    let frozen = frozen.finish(HANG_GUARD);
    assert_successor(&frozen, &successor);
    let run = Frozen {
        node,
        frozen,
        successor,
        stopped,
        resumed,
    };
    if clock == HolderClock::Precise {
        assert_eq!(
            run.minted_after_freeze(),
            [] as [u64; 0],
            "minted after SIGCONT: IDs past {} ms (frozen at {stopped} ms, last seen running at {} ms, \
             its clock measured {} ms ahead of this machine's, and a tick)",
            run.freeze_bound(),
            run.last_seen_running(),
            clock_lead_ms(&run.frozen)
        );
    }
    run
}

impl Frozen {
    /// When the frozen holder was last seen running before the thaw: the freeze
    /// ([`stopped`](Self::stopped), read after `kill -STOP` returned), or the last stamp it
    /// printed before [`resumed`](Self::resumed) where that is later. (`SIGSTOP` acts once
    /// the holder next enters the kernel, which a loaded machine can delay past `kill`'s
    /// return by milliseconds; a stamp before `resumed` was printed before the thaw, on
    /// this machine's clock.)
    pub fn last_seen_running(&self) -> u64 {
        ids(&self.frozen)
            .into_iter()
            .map(|(_, stamp)| stamp)
            .filter(|&stamp| stamp < self.resumed)
            .fold(self.stopped, u64::max)
    }

    /// The last time an ID of the frozen holder can have, minted before the thaw: when it
    /// was [last seen running](Self::last_seen_running), plus how far its clock was
    /// measured to read ahead of this machine's ([`clock_lead_ms`]), plus a tick (both
    /// times are whole ticks, cut down).
    pub fn freeze_bound(&self) -> u64 {
        self.last_seen_running() + clock_lead_ms(&self.frozen) + super::layout().tick_ms()
    }

    /// The frozen holder's IDs whose own time is past [`freeze_bound`](Self::freeze_bound):
    /// minted with a clock reading after the freeze, so after `SIGCONT`.
    pub fn minted_after_freeze(&self) -> Vec<u64> {
        minted_after(&self.frozen, self.freeze_bound())
    }
}

/// How far, in ms, the clock of the holder that printed `lines` read ahead of this
/// machine's wall clock, as measured: the most an `id` line's ID has its own time past the
/// line's stamp (read after the mint, so never before it on one clock); 0 when never. A
/// stamp printed late only hides a lead, so this is the least lead the lines show.
pub fn clock_lead_ms(lines: &[String]) -> u64 {
    let layout = super::layout();
    ids(lines)
        .into_iter()
        .map(|(id, stamp)| layout.decode(Id::new(id)).unix_ms.saturating_sub(stamp))
        .max()
        .unwrap_or(0)
}

/// The IDs in `lines` whose own time is past `unix_ms`: minted with a clock reading after
/// it (the stamp of an `id` line, taken after the mint, can be later than that).
pub fn minted_after(lines: &[String], unix_ms: u64) -> Vec<u64> {
    let layout = super::layout();
    minted(lines)
        .into_iter()
        .filter(|&id| layout.decode(atomflake::Id::new(id)).unix_ms > unix_ms)
        .collect()
}

/// A holder minting in `namespace` is killed with `SIGKILL` after 100 IDs: its node, and
/// every line it printed.
pub fn kill_a_holder(holders: &Holders, namespace: &str) -> (u64, Vec<String>) {
    let mut killed = holders.mint(namespace).spawn();
    let node = killed.node();
    killed.wait_for_ids(100);
    killed.signal("-KILL");
    (node, killed.finish(HANG_GUARD))
}

/// How far back [`successor_behind`] steps its successor's clock, in seconds.
const BEHIND_S: u64 = 3;

/// A successor asking for `node` in `namespace` mints 100 IDs on a clock 3 s behind (the
/// libfaketime clock `file`). Every line it printed, and how far behind its clock read at
/// start (the step less a tick at least).
pub fn successor_behind(holders: &Holders, namespace: &str, node: u64, file: &Path) -> (Vec<String>, u64) {
    crate::clock::step_clock(file, &format!("-{BEHIND_S}"));
    let mut successor = holders
        .mint(namespace)
        .node(node)
        .count(100)
        .faketime(file)
        .spawn();
    successor.wait_for(super::CLAIM_GUARD, |seen| {
        seen.iter().any(|line| line.starts_with("clock "))
    });
    let real = now_ms();
    let successor = successor.finish(HANG_GUARD);
    let clock: u64 = field(&successor, "clock ").parse().unwrap();
    let behind = real - clock;
    // The clock line was read on the stepped clock before `real` was read on this one:
    // behind by the step at least, less a tick for the two readings cut down to whole ms.
    let least = BEHIND_S * 1_000 - super::layout().tick_ms();
    assert!(
        behind >= least,
        "the successor's clock is {behind} ms behind, not the step's {least} ms at least"
    );
    (successor, behind)
}

/// Panics unless the `successor`'s first ID is past every ID of the holder before it on
/// the node (`before`), and no ID is there twice.
pub fn assert_successor(before: &[String], successor: &[String]) {
    let before = minted(before);
    let after = minted(successor);
    let last = *before.iter().max().expect("the first holder minted");
    let first = *after.first().expect("the successor minted");
    assert!(
        first > last,
        "the successor's first {first} is not past its predecessor's last {last}"
    );
    assert_unique(&before.into_iter().chain(after).collect::<Vec<_>>());
}

/// Panics unless the IDs in `lines` strictly increase and none is there twice.
pub fn assert_in_order(lines: &[String]) {
    let all = minted(lines);
    assert!(all.windows(2).all(|pair| pair[0] < pair[1]), "ids in order");
    assert_unique(&all);
}

/// How many `id` lines are stamped after `unix_ms`.
pub fn count_ids_after(seen: &[String], unix_ms: u64) -> usize {
    ids(seen).iter().filter(|(_, stamp)| *stamp > unix_ms).count()
}
