//! The fleet tests' harness, for every lease engine: the test binary runs itself again as
//! lease holders, which the test freezes, kills and resumes, and whose printed history it
//! checks.
//!
//! A holder claims through the core crate's lease kernel on any
//! [`Engine`](atomflake_lease::Engine) whose config parses from text: what a claim
//! and a refusal mean is the same for every engine. An engine's test file holds only what
//! talks to its engine:
//! - one test that calls [`holder()`] with the engine: the holder process, which does
//!   nothing in a test run of its own;
//! - its tests, which start holders through [`Holders`] (the command line of one is a
//!   [`Spawn`], the process a [`Holder`]), read what they printed ([`ids`], [`field`],
//!   [`lease_lines`]) and check it ([`assert_unique`], [`check_fleet_history`]);
//! - the tests every engine runs, less what only the engine checks ([`sixteen_holders`],
//!   [`freeze_a_holder`], [`kill_a_holder`] and [`successor_behind`]; in the test's own
//!   process, [`generator_cycle`] and [`a_claim_ended_behind_its_back`]);
//! - for the seeded nemesis, the engine's own [`Faults`]: [`nemesis()`] runs the fleet and
//!   the faults every engine shares (a holder frozen, killed, its clock stepped).
//!
//! # What a holder prints
//!
//! One line per event, stamped with its wall clock at the time: `node N C` once claimed
//! (node, and the claim's number: a generation or a revision, larger for each later claim
//! of the node), `claimed in MS ms` with how long the claim took, `id ID MS` per minted ID,
//! `lease MS TEXT` when a mint is refused for the lease (each distinct text once),
//! `refused TEXT` when no lease could be taken, `clock MS` with its generator's clock at
//! start.

mod child;
mod history;
mod holder;
mod in_process;
mod lines;
mod nemesis;
mod quorum;
mod scenario;

use std::time::Duration;

/// How long a test waits for a holder to say it claimed (or was refused): the longest a
/// holder tries before it says `refused` (its wait for a node and a last claim's time),
/// and [`HANG_GUARD`](crate::HANG_GUARD) for starting the process and the rest. A guard
/// against a hang, not a bound on how fast a claim is.
pub const CLAIM_GUARD: Duration = child::GIVES_UP_AFTER.saturating_add(crate::HANG_GUARD);

pub use child::{HolderClock, holder, mint};
pub use history::{assert_unique, check_fleet_history};
pub use holder::{Holder, Holders, Spawn};
pub use in_process::{a_claim_ended_behind_its_back, generator_cycle};
pub use lines::{claim, count_ids, field, ids, last_refusal, lease_lines, minted, tail};
pub use nemesis::{Dice, Faults, NemesisRun, nemesis};
pub use quorum::{Quorum, QuorumFaults, quorum_nemesis};
pub use scenario::{
    Frozen, a_frozen_holder_is_lost, a_killed_holders_successor_starts_past_the_mark, assert_in_order,
    assert_successor, clock_lead_ms, count_ids_after, freeze_a_holder, kill_a_holder, minted_after,
    sixteen_holders, successor_behind,
};

use atomflake::Layout;

/// Twitter's epoch and tick with a 4-bit node field: 16 nodes.
pub fn layout() -> Layout {
    with_node_bits(4)
}

/// Twitter's epoch and tick with a 2-bit node field: 4 nodes.
pub fn four_nodes() -> Layout {
    with_node_bits(2)
}

/// Twitter's epoch, tick and sequence with a node field of `bits`.
fn with_node_bits(bits: u32) -> Layout {
    Layout::builder()
        .timestamp_bits(41)
        .node_bits(bits)
        .sequence_bits(12)
        .epoch_ms(1_288_834_974_657)
        .build()
        .unwrap()
}
