//! The seeded nemesis: a fleet of minting holders, and a fault at each step of a schedule
//! that a seed replays.

use super::child::HolderClock;
use super::history::check_fleet_history;
use super::holder::{Holder, Holders};
use crate::now_ms;
use crate::postgres::step_clock;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A small seeded generator for the nemesis's choices (xorshift64*).
pub struct Dice(pub u64);

impl Dice {
    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) % n
    }
}

/// An engine's own faults, beside those [`nemesis`] deals every engine.
pub trait Faults {
    /// Fault `which` (0, 1 or 2) of the engine's three, its details chosen by `dice`: what
    /// it did; `None` when it cannot strike now (the nemesis steps a holder's clock
    /// instead).
    fn strike(&mut self, which: u64, dice: &mut Dice) -> Option<String>;

    /// Before each step: ends the faults whose time has come (a member started again, one
    /// thawed).
    fn recover(&mut self) {}

    /// At the end: ends every fault still in force.
    fn heal(&mut self) {}

    /// Whether a node's claims keep counting up through these faults (their generations
    /// never repeat); not where a fault makes the engine forget claims.
    fn generations_kept(&self) -> bool {
        true
    }
}

/// What a [`nemesis`] run did.
#[derive(Debug, Clone)]
pub struct NemesisRun {
    /// The seed that replays its choices.
    pub seed: u64,
    /// What each step did.
    pub schedule: Vec<String>,
    /// How many IDs the fleet minted.
    pub ids: usize,
}

/// The number of steps unless `ATOMFLAKE_NEMESIS_STEPS` says.
const STEPS: u64 = 24;

/// Four nodes, a fleet of minting holders in namespace `nemesis` (four at first, each on a
/// clock of its own in `dir`, waiting for a free node), and a nemesis that, for each step
/// of a seeded schedule, does one of: freeze a holder with `SIGSTOP` past its lease time
/// (and start a successor), kill one with `SIGKILL` (and start a successor), one of the
/// engine's three `faults`, step one holder's clock forward or back. A holder that ends
/// (its claim lost, or no node free for 30 s) is followed by a new one, as a supervisor
/// would. At the end every fault is undone, the fleet mints 3 s more and is killed, and
/// [`check_fleet_history`] checks what it printed.
///
/// `ATOMFLAKE_NEMESIS_SEED` replays a schedule's choices (which holder a fault hits also
/// depends on which are running); `ATOMFLAKE_NEMESIS_STEPS` sets its length (24).
/// `engine` names the run in what it prints.
///
/// # Panics
///
/// When the history shows an ID twice, or out of order.
pub fn nemesis(engine: &str, holders: &Holders, dir: &Path, faults: &mut impl Faults) -> NemesisRun {
    let seed = std::env::var("ATOMFLAKE_NEMESIS_SEED").map_or_else(
        |_| now_ms() ^ u64::from(std::process::id()),
        |seed| seed.parse().unwrap(),
    );
    let steps: u64 = std::env::var("ATOMFLAKE_NEMESIS_STEPS").map_or(STEPS, |steps| steps.parse().unwrap());
    println!("{engine} nemesis seed {seed} ({steps} steps): replay with ATOMFLAKE_NEMESIS_SEED={seed}");
    let mut fleet = Fleet {
        holders,
        dir,
        dice: Dice(seed | 1),
        members: Vec::new(),
    };
    for _ in 0..4 {
        fleet.start();
    }
    for member in &mut fleet.members {
        member
            .holder
            .wait_for(super::CLAIM_GUARD, |seen| super::count_ids(seen) >= 10);
    }
    let mut schedule = Vec::new();
    for step in 0..steps {
        // Thaw the frozen whose time has come; read what everyone printed.
        for member in &mut fleet.members {
            if member.frozen_until.is_some_and(|until| Instant::now() >= until) {
                member.holder.signal("-CONT");
                member.frozen_until = None;
            }
            member.holder.read();
        }
        faults.recover();
        let fault = fleet.step(faults);
        println!("step {step}: {fault}");
        schedule.push(fault);
        std::thread::sleep(Duration::from_millis(300 + fleet.dice.below(1_200)));
    }
    // The end: thaw, let every holder mint a moment more, then stop them all.
    for member in &mut fleet.members {
        if member.frozen_until.take().is_some() {
            member.holder.signal("-CONT");
        }
    }
    faults.heal();
    std::thread::sleep(Duration::from_secs(3));
    // Those that ended on their own are gone already.
    let histories: Vec<Vec<String>> = fleet
        .members
        .into_iter()
        .map(|member| member.holder.finish_killed())
        .collect();
    let ids = check_fleet_history(seed, &schedule, &histories, faults.generations_kept());
    NemesisRun { seed, schedule, ids }
}

/// The nemesis's fleet: how to start a member, and the members started so far.
struct Fleet<'a> {
    holders: &'a Holders,
    dir: &'a Path,
    dice: Dice,
    members: Vec<Member>,
}

/// One minting process of the fleet.
struct Member {
    holder: Holder,
    clock: PathBuf,
    frozen_until: Option<Instant>,
    /// Whether a new process was started after this one ended.
    followed: bool,
}

impl Fleet<'_> {
    /// Starts the next member: on the 4-node layout, waiting for a free node, on either
    /// clock, with a clock file of its own that the nemesis can step. Its number.
    fn start(&mut self) -> usize {
        let serial = self.members.len();
        let clock = self.dir.join(format!("clock-{serial}"));
        step_clock(&clock, "+0");
        let kind = if self.dice.below(2) == 0 {
            HolderClock::Precise
        } else {
            HolderClock::Monotonic
        };
        let holder = self
            .holders
            .mint("nemesis")
            .layout(super::four_nodes())
            .wait()
            .clock(kind)
            .faketime(&clock)
            .spawn();
        self.members.push(Member {
            holder,
            clock,
            frozen_until: None,
            followed: false,
        });
        serial
    }

    /// One step: members that ended followed by new ones, then one fault chosen by the
    /// dice. What it did.
    fn step(&mut self, faults: &mut impl Faults) -> String {
        let mut started = String::new();
        for i in 0..self.members.len() {
            if !self.members[i].followed && !self.members[i].holder.runs() {
                self.members[i].followed = true;
                let next = self.start();
                write!(started, "process {i} ended, start process {next}; ").unwrap();
            }
        }
        let running: Vec<usize> = (0..self.members.len())
            .filter(|&i| self.members[i].frozen_until.is_none() && self.members[i].holder.runs())
            .collect();
        if running.is_empty() {
            let next = self.start();
            return format!("{started}none running: start process {next}");
        }
        started + &self.strike(&running, faults)
    }

    /// One fault chosen by the dice, on the engine or on one of the `running` members.
    fn strike(&mut self, running: &[usize], faults: &mut impl Faults) -> String {
        let pick = running[usize::try_from(self.dice.below(running.len() as u64)).unwrap()];
        let fault = self.dice.below(7);
        match fault {
            0 => {
                let pause = self.holders.ttl() + Duration::from_millis(500 + self.dice.below(1_500));
                self.members[pick].holder.signal("-STOP");
                self.members[pick].frozen_until = Some(Instant::now() + pause);
                let next = self.start();
                return format!("SIGSTOP process {pick} for {pause:?}, start process {next}");
            }
            1 => {
                self.members[pick].holder.signal("-KILL");
                self.members[pick].followed = true;
                let next = self.start();
                return format!("SIGKILL process {pick}, start process {next}");
            }
            2..=4 => {
                if let Some(done) = faults.strike(fault - 2, &mut self.dice) {
                    return done;
                }
            }
            _ => {}
        }
        let offset = format!("{:+}", i64::try_from(self.dice.below(7)).unwrap() - 3);
        step_clock(&self.members[pick].clock, &offset);
        format!("step process {pick}'s clock to {offset} s")
    }
}
