//! Node-ID leases against a real PostgreSQL server, with real processes: each test starts
//! a throwaway cluster (`atomflake-test-servers`) and runs this test binary again as the lease holders
//! ([`lease_child`]), which it freezes, kills and resumes (the harness and the lines holders
//! print: `atomflake_test_servers::fleet`).

#![cfg(not(loom))]

use atomflake_test_servers::fleet::{
    self, Dice, Faults, Holder, HolderClock, Holders, assert_in_order, assert_unique, count_ids,
    count_ids_after, field, ids, layout, lease_lines, minted,
};
use atomflake_test_servers::postgres as pg;
use atomflake_test_servers::proxy::Proxy;
use atomflake_test_servers::{HANG_GUARD, now_ms, wait_until};

use atomflake::mark::{MarkStore, Tenure};
use atomflake::{BuildError, Builder, Clock, Generator, Id, Layout, ManualClock, MintError, PreciseClock};
use atomflake_postgres::lease::{self, CLAIM_TIMEOUT, Lease, LeaseError, LeaseOptions, PostgresError};
use pg::Server;
use std::collections::HashSet;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Builds a generator on the lease's node, keeping the lease.
trait BuildOn<C> {
    fn build_on(self, lease: Lease) -> Result<Generator<C>, BuildError>;
}

impl<C: Clock + Clone + Send + 'static> BuildOn<C> for Builder<C> {
    fn build_on(self, lease: Lease) -> Result<Generator<C>, BuildError> {
        let node = lease.node();
        self.mark_store(lease).build(node)
    }
}

/// The lease's error inside a store's.
fn lease_error(store: &atomflake::mark::StoreError) -> LeaseError {
    store
        .downcast_ref::<LeaseError>()
        .unwrap_or_else(|| panic!("not a lease's error: {store}"))
        .clone()
}

const TTL: Duration = Duration::from_secs(2);

/// What a lease of lease time `ttl` holds to: its hold after a renewal, how often it renews,
/// and how long a drop waits for its keeper ([`Tenure::lease`]).
fn tenure(ttl: Duration) -> (Duration, Duration, Duration) {
    match Tenure::lease(ttl) {
        Tenure::Leased {
            hold,
            renew_every,
            patience,
        } => (hold, renew_every, patience),
        other => panic!("not a lease's tenure: {other:?}"),
    }
}

/// The role the leases of these tests connect as: it has the privileges the lease docs
/// list and no more. A migration role owns the table.
const LEASE_ROLE: &str = "atomflake_app";

/// A fresh server with the lease table made by a migration role, and [`LEASE_ROLE`]
/// granted what a lease needs.
fn start(test: &str) -> Option<Server> {
    start_with(test, pg::Options::default())
}

fn start_with(test: &str, options: pg::Options) -> Option<Server> {
    let server = Server::start_with(test, options)?;
    server.psql(&format!(
        "CREATE ROLE atomflake_migrator LOGIN; GRANT CREATE ON SCHEMA public TO atomflake_migrator;
         SET ROLE atomflake_migrator; {ddl} RESET ROLE;
         CREATE ROLE {LEASE_ROLE} LOGIN;
         GRANT SELECT, INSERT, UPDATE ON public.atomflake_lease TO {LEASE_ROLE};",
        ddl = lease::DDL
    ));
    Some(server)
}

/// [`start`], and where a lease connects to the server.
fn start_with_config(test: &str) -> Option<(Server, atomflake_postgres::Database)> {
    let server = start(test)?;
    let config = config(&server);
    Some((server, config))
}

/// [`start_with_config`], and options for `namespace` (the lease time [`TTL`]) whose
/// table a first claim, released, has made: node 0 is free again.
fn start_with_a_table(
    test: &str,
    namespace: &str,
) -> Option<(Server, atomflake_postgres::Database, LeaseOptions)> {
    let (server, config) = start_with_config(test)?;
    let options = LeaseOptions::new(namespace).ttl(TTL);
    drop(Lease::acquire(&config, &layout(), &options).unwrap());
    Some((server, config, options))
}

fn conninfo(server: &Server) -> String {
    server.conninfo_as(LEASE_ROLE)
}

fn config(server: &Server) -> atomflake_postgres::Database {
    conninfo(server).parse().unwrap()
}

/// Holders on `server`, as [`LEASE_ROLE`].
fn holders(server: &Server) -> Holders {
    Holders::new(conninfo(server), "lease_child", TTL)
}

/// Not a test of its own: the holder process the tests run.
#[test]
fn lease_child() {
    fleet::holder::<lease::Postgres>();
}

#[test]
fn sixteen_processes_get_sixteen_nodes_and_a_seventeenth_is_refused() {
    let Some(server) = start("lease-16") else {
        return;
    };
    let held = fleet::sixteen_holders::<lease::Postgres>(&holders(&server), &config(&server));
    assert!(held.iter().all(|row| row.generation == Some(1)), "{held:?}");
    // The rows keep their marks.
    let rows = lease::list(&config(&server), "fleet").unwrap();
    assert_eq!(rows.len(), 16);
}

/// A holder frozen past its lease time loses its node to a successor, and after
/// `SIGCONT` mints nothing more.
/// Panics unless the `successor` claimed `node` after its first holder: the node's second
/// claim, or a later one where a store that failed for now (a loaded machine) made the
/// successor claim it again.
fn assert_second_claim(successor: &[String], node: u64) {
    let (claimed, generation) = field(successor, "node ").split_once(' ').unwrap();
    assert_eq!(claimed, node.to_string());
    assert!(generation.parse::<i64>().unwrap() >= 2, "claim {generation}");
}

fn frozen_holder(clock: HolderClock) {
    let Some(server) = start(&format!("lease-frozen-{clock:?}")) else {
        return;
    };
    let pause = TTL + Duration::from_millis(500);
    let run = fleet::a_frozen_holder_is_lost::<lease::Postgres>(&holders(&server), clock, pause);
    assert_second_claim(&run.successor, run.node);
    // Minted after SIGCONT, by the ID's own time: past the freeze, its clock's measured
    // lead and a tick (`Frozen::freeze_bound`). (The stamps, taken after each mint, can
    // fall after SIGCONT for an ID minted before.)
    let stamped_after_resume = count_ids_after(&run.frozen, run.resumed - 1);
    let refusals = lease_lines(&run.frozen);
    println!(
        "{clock:?} clock: frozen holder minted {} ids ({stamped_after_resume} stamped after SIGCONT, {} with a \
         time after it), successor 300; refusals {refusals:?}",
        count_ids(&run.frozen),
        run.minted_after_freeze().len()
    );
}

#[test]
fn a_frozen_holder_loses_its_node_and_mints_nothing_more() {
    frozen_holder(HolderClock::Precise);
}

/// With the default clock, a thread that resumes before the clock's thread may mint with
/// the time read before the pause: those IDs are still below its stored mark, so never a
/// successor's.
#[test]
fn a_frozen_holder_on_the_default_clock_never_repeats_its_successor() {
    frozen_holder(HolderClock::Monotonic);
}

#[test]
fn a_killed_holders_successor_with_a_clock_behind_starts_past_the_mark() {
    let test = "a_killed_holders_successor_with_a_clock_behind_starts_past_the_mark";
    let Some(server) = start("lease-killed") else {
        return;
    };
    if !pg::can_move_clocks(test) {
        return;
    }
    let (node, killed) = fleet::kill_a_holder(&holders(&server), "killed");
    let mark = row_mark(&server, "killed", node);
    let (successor, behind) =
        fleet::successor_behind(&holders(&server), "killed", node, &server.file("behind"));
    assert_second_claim(&successor, node);
    let first_time = layout().decode(Id::new(minted(&successor)[0])).unix_ms;
    assert!(
        first_time >= mark,
        "successor's first id at {first_time} ms, mark {mark} ms"
    );
    fleet::assert_successor(&killed, &successor);
    let last = *minted(&killed).iter().max().unwrap();
    println!(
        "killed holder's last id at {} ms, mark {mark} ms, successor's clock {behind} ms behind, its first id at {first_time} ms",
        layout().decode(Id::new(last)).unix_ms,
    );
}

#[test]
fn renewal_survives_a_killed_connection_and_a_restart_and_never_mints_past_its_deadline() {
    let Some(server) = start("lease-restart") else {
        return;
    };
    // A lease time of 1 s: the holder may mint for 0.8 s after a renewal is sent, less
    // than the mark's lead (1 to 1.5 s), so the deadline, not the mark, stops it.
    let ttl = Duration::from_secs(1);
    let mut holder = holders(&server)
        .mint("restart")
        .clock(HolderClock::Precise)
        .ttl(ttl)
        .spawn();
    holder.wait_for_ids(100);
    // The lease's connection, once it has one. A renewal the server answered too late for
    // (a loaded machine) gives its connection up and the next renewal makes another; the
    // backend of the one given up lives on until the server notices the client gone, so
    // there may be two for a while. Every one is ended.
    until("a lease connection to end", || {
        let terminated = server.psql(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = 'atomflake-lease') t",
        );
        terminated.trim().parse::<u32>().unwrap() >= 1
    });
    // Past a renewal or two: the holder connects again.
    std::thread::sleep(Duration::from_millis(1_500));
    server.stop("fast");
    // The last renewal was before this.
    let down = now_ms();
    std::thread::sleep(Duration::from_secs(3));
    // The server was down from `down` to here: nothing renewed the lease.
    let up = now_ms();
    server.start_again();
    holder.wait_for(HANG_GUARD, |seen| count_ids_after(seen, up) >= 100);
    let lines = holder.finish_killed();
    let minted = ids(&lines);
    assert_in_order(&lines);
    // The server expires the lease at the earliest TTL after the last renewal before it
    // went down; the holder stops a fifth of TTL before that (its hold), by its clock.
    // Checked by the IDs' own times, its precise clock's readings at each mint (a stamp,
    // printed after the mint, can be late by however long a loaded machine keeps the
    // holder from printing): `down` is this machine's clock, so the holder's clock's lead
    // on it, as its lines show, and a tick for both cut down to whole ms. The mark alone
    // would let the holder mint for up to 1.5 s.
    let (hold, _, _) = tenure(ttl);
    let lead = fleet::clock_lead_ms(&lines);
    let fence = down + u64::try_from(hold.as_millis()).unwrap() + lead + layout().tick_ms();
    let inside: Vec<(u64, u64)> = minted
        .iter()
        .map(|&(id, _)| (id, layout().decode(Id::new(id)).unix_ms))
        .filter(|&(_, unix_ms)| unix_ms > fence && unix_ms < up)
        .collect();
    assert!(
        inside.is_empty(),
        "minted past the deadline, {fence} ms (down at {down} ms, a hold of {hold:?}, the \
         holder's clock {lead} ms ahead): {inside:?}"
    );
    // The claim is never lost. (Before the server went down, a loaded machine can delay a
    // renewal, the new connection's most of all, past the holder's deadline: a refusal
    // then is the fence at work.)
    let refusals = lease_lines(&lines);
    assert!(
        refusals.iter().all(|(_, text)| !text.contains("is lost")),
        "the lease was lost: {refusals:?}"
    );
    assert!(
        refusals
            .iter()
            .any(|(_, text)| text.contains("passed its local deadline")),
        "{refusals:?}"
    );
    assert_eq!(
        server
            .psql("SELECT generation FROM atomflake_lease WHERE namespace = 'restart'")
            .trim(),
        "1",
        "the same lease throughout"
    );
    println!(
        "minted {} ids; last before the restart at {} ms after it went down; refusals {refusals:?}",
        minted.len(),
        minted
            .iter()
            .filter(|(_, stamp)| *stamp < up)
            .map(|(_, stamp)| stamp - down.min(*stamp))
            .max()
            .unwrap_or(0)
    );
}

/// A lease of several nodes under a sharded generator: all claimed or none, each row
/// renewed with the mark and released; a row taken from under it ends minting.
#[test]
fn a_sharded_generator_keeps_a_lease_of_several_nodes_all_or_none() {
    let Some((server, config)) = start_with_config("lease-nodes") else {
        return;
    };
    let options = LeaseOptions::new("nodes").ttl(TTL).holder("test");
    // Held by another process all along (a bare lease is not renewed: a long lease time).
    let long = options.clone().node(2).ttl(Duration::from_secs(60));
    let held = Lease::acquire(&config, &layout(), &long).unwrap();
    let lease = Lease::acquire(&config, &layout(), &options.clone().nodes(3)).unwrap();
    assert_eq!(lease.nodes(), [0, 1, 3], "the lowest free, around the held one");
    let generator = Builder::new(layout())
        .mark_store(lease)
        .build_sharded([0, 1, 3])
        .unwrap();
    let ids: Vec<Id> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..3)
            .map(|_| scope.spawn(|| (0..20_000).map(|_| generator.next_id()).collect::<Vec<_>>()))
            .collect();
        workers
            .into_iter()
            .flat_map(|worker| worker.join().unwrap())
            .collect()
    });
    let distinct: HashSet<Id> = ids.iter().copied().collect();
    assert_eq!(distinct.len(), ids.len(), "no ID twice");
    let used: HashSet<u64> = ids.iter().map(|&id| layout().decode(id).node).collect();
    assert!(used.is_subset(&HashSet::from([0, 1, 3])), "{used:?}");
    // Renewed while minting: every row live, with the same mark, past every ID.
    std::thread::sleep(TTL);
    let newest = ids.iter().map(|&id| layout().decode(id).unix_ms).max().unwrap();
    let rows = lease::list(&config, "nodes").unwrap();
    let ours: Vec<_> = rows.iter().filter(|row| row.node != 2).collect();
    assert_eq!(ours.len(), 3);
    assert!(
        ours.iter().all(|row| row.live && row.high_water_ms > newest),
        "{rows:?}"
    );
    // All or none: 12 of the 16 nodes are free, so 13 are refused, and nothing is left
    // claimed.
    assert_eq!(
        Lease::acquire(&config, &layout(), &options.clone().nodes(13)).unwrap_err(),
        LeaseError::TooFewFreeNodes {
            namespace: "nodes".into(),
            count: 13,
            free: 12
        }
    );
    assert_eq!(lease::list(&config, "nodes").unwrap().len(), 4, "nothing claimed");
    // One of the rows deleted: the next renewal finds it gone, and minting ends. (When is
    // no promise: a renewal that gets no answer on a loaded machine is tried again. The
    // limit is a guard against a hang.)
    server.psql("DELETE FROM atomflake_lease WHERE namespace = 'nodes' AND node = 1");
    let start = Instant::now();
    let error = loop {
        match generator.try_next_id() {
            Err(MintError::Store(store)) if !store.is_transient() => break lease_error(&store),
            _ if start.elapsed() > HANG_GUARD => panic!(
                "still minting {:?} after the row was deleted (the hang guard)",
                start.elapsed()
            ),
            _ => std::thread::sleep(Duration::from_millis(5)),
        }
    };
    assert!(matches!(error, LeaseError::Lost { node: 1, .. }), "{error:?}");
    drop(generator);
    // The release frees the other rows.
    let rows = lease::list(&config, "nodes").unwrap();
    assert!(
        rows.iter().filter(|row| row.node != 2).all(|row| !row.live),
        "{rows:?}"
    );
    drop(held);
}

#[test]
fn a_generator_on_a_lease_starts_past_the_mark_keeps_it_and_releases_it() {
    let Some((server, config)) = start_with_config("lease-gen") else {
        return;
    };
    // The claims here are tested for what they store, not for how they lapse: a lease
    // time no pause of a loaded machine outlasts (the hang guard), so that the release
    // below is this claim's and stores the end of its last ID (a release of a claim
    // already lapsed stores nothing, rightly).
    let options = LeaseOptions::new("in-process").ttl(HANG_GUARD).holder("test");
    // A previous holder's mark, 3 s ahead of the clock.
    let lease = Lease::acquire(&config, &layout(), &options).unwrap();
    assert_eq!(
        (lease.node(), lease.generation(), lease.high_water_ms()),
        (0, 1, 0)
    );
    drop(lease);
    let ahead = now_ms() + 3_000;
    server.psql(&format!("UPDATE atomflake_lease SET high_water_ms = {ahead}"));
    let lease = Lease::acquire(&config, &layout(), &options).unwrap();
    assert_eq!(
        (lease.node(), lease.generation(), lease.high_water_ms()),
        (0, 2, ahead)
    );
    let generator = Builder::new(layout()).build_on(lease).unwrap();
    let first = generator.next_id();
    assert!(layout().decode(first).unix_ms >= ahead);
    // Still this claim, kept ahead of the first ID.
    let rows = lease::list(&config, "in-process").unwrap();
    assert_eq!(rows.len(), 1);
    assert!(
        rows[0].holder.as_deref() == Some("test") && rows[0].generation == Some(2),
        "{rows:?}"
    );
    assert!(rows[0].high_water_ms > layout().decode(first).unix_ms, "{rows:?}");
    let last = generator.next_id();
    drop(generator);
    let rows = lease::list(&config, "in-process").unwrap();
    assert!(!rows[0].live, "released");
    // The release stores the end of the last ID's tick, not the mark stored ahead.
    assert_eq!(rows[0].high_water_ms, layout().decode(last).unix_ms + 1);
    let lease = Lease::acquire(&config, &layout(), &options).unwrap();
    assert_eq!(
        (lease.generation(), lease.high_water_ms()),
        (3, layout().decode(last).unix_ms + 1)
    );
    let successor = Builder::new(layout()).build_on(lease).unwrap();
    assert!(successor.next_id() > last);
    drop(successor);

    // From async code: the client's calls run on threads of their own.
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let in_async = runtime.block_on(async { Lease::acquire(&config, &layout(), &options.clone().node(7)) });
    let in_async = in_async.unwrap();
    assert_eq!(in_async.node(), 7);
    runtime.block_on(async { in_async.release() }).unwrap();

    // A node asked for that is held; a mark too far ahead; a file beside the lease.
    let held = Lease::acquire(&config, &layout(), &options.clone().node(5)).unwrap();
    assert_eq!(
        Lease::acquire(&config, &layout(), &options.clone().node(5)).unwrap_err(),
        LeaseError::NodeTaken {
            namespace: "in-process".into(),
            node: 5
        }
    );
    drop(held);
    let far = now_ms() + 60_000;
    server.psql(&format!(
        "UPDATE atomflake_lease SET high_water_ms = {far} WHERE node = 5"
    ));
    let lease = Lease::acquire(&config, &layout(), &options.clone().node(5)).unwrap();
    let error = Builder::new(layout()).build_on(lease).unwrap_err();
    assert!(
        matches!(&error, BuildError::Ahead { store, mark_ms, max_wait, .. }
            if *mark_ms == far && *max_wait == Duration::from_secs(10)
                && store == "the high-water mark of node 5 in PostgreSQL lease namespace \"in-process\""),
        "{error:?}"
    );
    // A lease holds one node: a generator of another node, or of more than one, is refused.
    let lease = Lease::acquire(&config, &layout(), &options.clone().node(6)).unwrap();
    let error = Builder::new(layout()).mark_store(lease).build(7).unwrap_err();
    assert_eq!(
        error,
        BuildError::NodeNotHeld {
            node: 7,
            held: vec![6]
        }
    );
    assert_eq!(
        error.to_string(),
        "node 7 is not held by the mark store, which holds node 6"
    );
    let lease = Lease::acquire(&config, &layout(), &options.clone().node(6)).unwrap();
    let error = Builder::new(layout())
        .mark_store(lease)
        .build_sharded([6, 8])
        .unwrap_err();
    assert_eq!(
        error,
        BuildError::NodeNotHeld {
            node: 8,
            held: vec![6]
        }
    );
    // The lead a lease allows follows its lease time (2 s here).
    let lease = Lease::acquire(&config, &layout(), &options.clone().node(6).ttl(TTL)).unwrap();
    let error = Builder::new(layout())
        .borrow_ahead(Duration::from_secs(1))
        .build_on(lease)
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "borrow-ahead lead 1s is out of range: allowed whole multiples of the 1 ms tick, up to 500ms"
    );
}

#[test]
fn a_server_that_is_not_there_is_a_database_error() {
    let config: atomflake_postgres::Database =
        "host=/nonexistent-atomflake port=1 user=postgres connect_timeout=1"
            .parse()
            .unwrap();
    let error = Lease::acquire(&config, &layout(), &LeaseOptions::new("n")).unwrap_err();
    let LeaseError::Engine(PostgresError::Database { action, cause }) = &error else {
        panic!("{error:?}");
    };
    assert_eq!(*action, "connect");
    assert!(std::error::Error::source(&error).is_some());
    assert!(
        error
            .to_string()
            .starts_with("lease database operation \"connect\" failed: "),
        "{error} ({cause})"
    );
}

#[test]
fn next_id_waits_out_a_database_restart_shorter_than_the_lease() {
    let Some(server) = start("lease-wait") else {
        return;
    };
    // The server is down for 2.5 s and a restart: well within the lease time, with
    // seconds to spare for a restart on a loaded machine.
    let options = LeaseOptions::new("wait").ttl(Duration::from_secs(10));
    let lease = Lease::acquire(&config(&server), &layout(), &options).unwrap();
    let generator = Builder::with_clock(layout(), PreciseClock::new())
        .build_on(lease)
        .unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let last_stamp = std::sync::atomic::AtomicU64::new(0);
    let (minted, down, up) = std::thread::scope(|scope| {
        let minter = scope.spawn(|| {
            let mut minted = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let id = generator.next_id().get();
                let stamp = now_ms();
                minted.push((id, stamp));
                last_stamp.store(stamp, std::sync::atomic::Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(1));
            }
            minted
        });
        std::thread::sleep(Duration::from_millis(500));
        server.stop("fast");
        let down = now_ms();
        // Past the mark's lead (1.5 s at most), within the lease time (10 s).
        std::thread::sleep(Duration::from_millis(2_500));
        server.start_again();
        let up = now_ms();
        // Until next_id has returned after the restart, for the hang guard at most (the
        // check below then fails).
        let start = Instant::now();
        while last_stamp.load(std::sync::atomic::Ordering::Relaxed) <= up && start.elapsed() < HANG_GUARD {
            std::thread::sleep(Duration::from_millis(10));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        (minter.join().expect("next_id did not panic"), down, up)
    });
    let all: Vec<u64> = minted.iter().map(|(id, _)| *id).collect();
    assert!(all.windows(2).all(|pair| pair[0] < pair[1]), "ids in order");
    let longest = minted.windows(2).map(|pair| pair[1].1 - pair[0].1).max().unwrap();
    assert!(longest >= 500, "next_id never waited: longest gap {longest} ms");
    assert!(
        minted.iter().any(|(_, stamp)| *stamp > up),
        "minted after the restart"
    );
    println!(
        "server down {} ms; next_id waited at most {longest} ms; {} ids",
        up - down,
        all.len()
    );
}

/// Mints with `try_next_id` for `how_long`, or until the lease is lost (for good), and
/// returns the lease errors it met, once each.
fn lease_errors_while_minting<C: Clock>(generator: &Generator<C>, how_long: Duration) -> Vec<LeaseError> {
    let start = Instant::now();
    let mut errors: Vec<LeaseError> = Vec::new();
    while start.elapsed() < how_long {
        match generator.try_next_id() {
            Ok(_) | Err(MintError::MarkPending { .. } | MintError::SequenceExhausted { .. }) => {}
            Err(MintError::Store(store)) => {
                let error = lease_error(&store);
                let lost = matches!(error, LeaseError::Lost { .. });
                if !errors.contains(&error) {
                    errors.push(error);
                }
                if lost {
                    break;
                }
            }
            Err(other) => panic!("{other}"),
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    errors
}

#[test]
fn a_holder_whose_row_was_deleted_is_fenced_off_its_successors_claim() {
    let Some((server, config)) = start_with_config("lease-deleted") else {
        return;
    };
    let options = LeaseOptions::new("deleted").ttl(TTL).node(3);
    let first = Lease::acquire(&config, &layout(), &options.clone().holder("first")).unwrap();
    let first = Builder::with_clock(layout(), PreciseClock::new())
        .build_on(first)
        .unwrap();
    let _ = first.try_next_id().unwrap();
    // The row is lost (deleted here; a failover to a lagging standby or a restore loses it
    // the same way): the node is claimed again, and its claim counter starts over.
    server.psql("DELETE FROM atomflake_lease WHERE namespace = 'deleted'");
    let second = Lease::acquire(&config, &layout(), &options.clone().holder("second")).unwrap();
    assert_eq!(
        (second.node(), second.generation()),
        (3, 1),
        "the same generation again"
    );
    let second = Builder::with_clock(layout(), PreciseClock::new())
        .build_on(second)
        .unwrap();
    // The first holder's next renewal (a quarter of the lease time; more on a loaded
    // machine) finds its claim gone.
    let errors = lease_errors_while_minting(&first, 10 * TTL);
    assert_eq!(
        errors.last(),
        Some(&LeaseError::Lost {
            namespace: "deleted".into(),
            node: 3,
            generation: 1
        }),
        "the first holder still renews the second holder's claim: {errors:?}"
    );
    // Nor does dropping it touch the successor's row (a lost claim sends no release; the
    // fence of one that is sent late is `a_late_store_or_release_of_an_ended_claim_...`).
    // A release would expire the row at the server's clock, a time no renewal of the
    // second holder's wrote: the row is as it was, or renewed by the second holder since
    // (live again; a renewal late on a loaded machine can leave it expired for a moment, so
    // liveness alone proves nothing).
    let before = lease::list(&config, "deleted").unwrap();
    drop(first);
    let after = lease::list(&config, "deleted").unwrap();
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].holder.as_deref(), Some("second"), "{after:?}");
    assert!(
        after[0] == before[0] || (after[0].live && after[0].expires_unix_ms > before[0].expires_unix_ms),
        "the first holder's release touched the second holder's row: {before:?}, then {after:?}"
    );
    // The second holder keeps its claim. (A loaded machine can delay a renewal past its
    // deadline for a moment: `Expired` then is the fence at work, not a lost claim.)
    let errors = lease_errors_while_minting(&second, TTL / 2);
    assert!(
        !errors
            .iter()
            .any(|error| matches!(error, LeaseError::Lost { .. })),
        "{errors:?}"
    );
}

#[test]
fn a_claim_survives_a_crash_of_a_server_that_commits_asynchronously() {
    // The server's default: commits return before the WAL is flushed.
    let Some(server) = start_with(
        "lease-async-crash",
        pg::Options::setting("synchronous_commit", "off"),
    ) else {
        return;
    };
    let config = config(&server);
    let options = LeaseOptions::new("crash").ttl(Duration::from_secs(30)).node(2);
    let mut held = None;
    server.crash_losing_unwritten_wal(|| {
        held = Some(Lease::acquire(&config, &layout(), &options.clone().holder("before")).unwrap());
    });
    server.start_again();
    // The claim the server acknowledged is still there: the node is not free.
    let rows = lease::list(&config, "crash").unwrap_or_default();
    assert!(
        rows.len() == 1 && rows[0].live && rows[0].holder.as_deref() == Some("before"),
        "the crash lost the claim: {rows:?}"
    );
    assert_eq!(
        Lease::acquire(&config, &layout(), &options.clone().holder("after")).unwrap_err(),
        LeaseError::NodeTaken {
            namespace: "crash".into(),
            node: 2
        }
    );
    // Renewals and the release reconnect and find the claim theirs.
    held.unwrap().release().unwrap();
}

#[test]
fn leases_over_loopback_tcp_with_short_lease_times_connect_and_renew() {
    let options = pg::Options {
        tcp: true,
        ..pg::Options::default()
    };
    let Some(server) = start_with("lease-tcp", options) else {
        return;
    };
    let config: atomflake_postgres::Database = format!("{} user={LEASE_ROLE}", server.tcp_conninfo())
        .parse()
        .unwrap();
    for ttl_ms in [1_000, 2_000, 3_000, 4_000] {
        let ttl = Duration::from_millis(ttl_ms);
        let options = LeaseOptions::new(format!("tcp-{ttl_ms}")).ttl(ttl);
        let lease = Lease::acquire(&config, &layout(), &options)
            .unwrap_or_else(|error| panic!("lease time {ttl:?}: {error}"));
        let generator = Builder::with_clock(layout(), PreciseClock::new())
            .build_on(lease)
            .unwrap();
        // Two lease times: renewed every quarter of one, never lost. (A loaded machine can
        // delay a renewal past the deadline, a fifth of a second before the lease time of
        // 1 s ends: `Expired` or a connection timed out is then the fence at work.)
        let errors = lease_errors_while_minting(&generator, 2 * ttl);
        assert!(
            !errors
                .iter()
                .any(|error| matches!(error, LeaseError::Lost { .. })),
            "lease time {ttl:?}: {errors:?}"
        );
        if !errors.is_empty() {
            println!("lease time {ttl:?}: {errors:?}");
        }
        // Still the first claim: no one took the node over. (Whether the row is live now
        // depends on how late the last renewal is; a late one shows as `Expired` above.)
        let rows = lease::list(&config, &format!("tcp-{ttl_ms}")).unwrap();
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows[0].generation, Some(1), "{rows:?}");
    }
    let over_tcp = server.psql(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'atomflake-lease' \
         AND client_addr = '127.0.0.1'",
    );
    println!("lease connections over TCP at the end: {}", over_tcp.trim());
}

#[test]
fn a_free_node_with_a_mark_far_ahead_is_passed_over_not_claimed_by_everyone() {
    // Node 0 was released by a host whose clock ran an hour ahead.
    let Some((server, config, options)) = start_with_a_table("lease-ahead", "ahead") else {
        return;
    };
    let far = now_ms() + 3_600_000;
    server.psql(&format!(
        "UPDATE atomflake_lease SET high_water_ms = {far} WHERE namespace = 'ahead'"
    ));
    let mut generators = Vec::new();
    for expected in 1..=3 {
        let lease = Lease::acquire(&config, &layout(), &options).unwrap();
        assert_eq!(
            lease.node(),
            expected,
            "a claimant took the node ahead of its clock"
        );
        assert_eq!(lease.passed_over().len(), 1);
        assert_eq!(
            (lease.passed_over()[0].node, lease.passed_over()[0].high_water_ms),
            (0, far)
        );
        generators.push(Builder::new(layout()).build_on(lease).unwrap());
    }
    drop(generators);
    // Every free node ahead: the error names the lowest.
    server.psql(&format!(
        "UPDATE atomflake_lease SET high_water_ms = {far} + node WHERE namespace = 'ahead'; \
         INSERT INTO atomflake_lease (namespace, node, holder, generation, token, expires_at, high_water_ms) \
         SELECT 'ahead', n, 'gone', 1, gen_random_uuid(), now(), {far} FROM generate_series(4, 15) n"
    ));
    let error = Lease::acquire(&config, &layout(), &options).unwrap_err();
    let LeaseError::Ahead { clock_ms, .. } = error else {
        panic!("{error:?}");
    };
    assert_eq!(
        error,
        LeaseError::Ahead {
            namespace: "ahead".into(),
            node: 0,
            mark_ms: far,
            clock_ms,
            max_wait: Duration::from_secs(10)
        }
    );
    assert_eq!(
        error.to_string(),
        format!(
            "clock is {:?} behind the high-water mark of node 0 in PostgreSQL lease namespace \"ahead\" \
             (mark {far} ms, clock {clock_ms} ms): a generator waits at most 10s at start-up",
            Duration::from_millis(far - clock_ms)
        )
    );
    // A node asked for is claimed whatever its mark; the generator says how far ahead.
    let asked = Lease::acquire(&config, &layout(), &options.clone().node(2)).unwrap();
    assert!(asked.passed_over().is_empty());
}

/// Forty processes claim at once on Sonyflake's 65,536 nodes: each gets its own node, the
/// lowest forty. (Claims take turns: on a loaded machine the last of forty processes
/// starting at once can wait past a claim's 10 s, and tries again, as a holder told to wait
/// does. A holder that only holds does not renew: its lease time outlasts the rollout.)
#[test]
fn a_fleet_starting_at_once_on_a_large_node_space_claims_one_node_each() {
    let Some(server) = start_with("lease-rollout", pg::Options::setting("max_connections", "100")) else {
        return;
    };
    // The table exists: forty claimants, not forty creators.
    drop(Lease::acquire(&config(&server), &Layout::SONYFLAKE, &LeaseOptions::new("warm")).unwrap());
    let rollout = holders(&server)
        .hold("rollout")
        .layout(Layout::SONYFLAKE)
        .ttl(Duration::from_secs(60))
        .wait();
    let mut holders: Vec<Holder> = (0..40).map(|_| rollout.clone().spawn()).collect();
    let nodes: HashSet<u64> = holders.iter_mut().map(Holder::node).collect();
    assert_eq!(nodes, (0..40).collect());
    let mut slowest = 0;
    for holder in &mut holders {
        holder.wait_for(fleet::CLAIM_GUARD, |seen| {
            seen.iter().any(|line| line.starts_with("claimed in "))
        });
        let took: u64 = field(&holder.seen, "claimed in ")
            .trim_end_matches(" ms")
            .parse()
            .unwrap();
        slowest = slowest.max(took);
    }
    for holder in holders {
        holder.close();
    }
    println!("40 claims at once on 65,536 nodes: the slowest took {slowest} ms, its connection included");
}

/// A session whose `search_path` finds another `atomflake_lease` first still claims in
/// `public.atomflake_lease`: every process of a fleet uses one table whatever its role's
/// settings.
#[test]
fn the_lease_table_is_public_whatever_the_search_path() {
    let Some(server) = Server::start("lease-search-path") else {
        return;
    };
    // A role that may create in `public` (the superuser here) creates the table itself.
    let config: atomflake_postgres::Database = server.conninfo().parse().unwrap();
    let first = Lease::acquire(&config, &layout(), &LeaseOptions::new("path")).unwrap();
    server.psql(
        "CREATE SCHEMA shadow; CREATE TABLE shadow.atomflake_lease (LIKE public.atomflake_lease INCLUDING ALL)",
    );
    server.psql("ALTER ROLE postgres SET search_path = shadow, public");
    let second = Lease::acquire(&config, &layout(), &LeaseOptions::new("path")).unwrap();
    assert_eq!((first.node(), second.node()), (0, 1), "one table for both");
    assert_eq!(
        server.psql("SELECT count(*) FROM shadow.atomflake_lease").trim(),
        "0"
    );
}

/// Claimants that find no table (a role that may create it) create it once between them,
/// and each gets a node of its own.
#[test]
fn claimants_that_find_no_table_create_it_once_and_each_get_a_node() {
    let Some(server) = Server::start("lease-create") else {
        return;
    };
    let config: atomflake_postgres::Database = server.conninfo().parse().unwrap();
    let leases: Vec<Lease> = std::thread::scope(|scope| {
        let claims: Vec<_> = (0..8)
            .map(|_| scope.spawn(|| Lease::acquire(&config, &layout(), &LeaseOptions::new("create"))))
            .collect();
        claims
            .into_iter()
            .map(|claim| claim.join().unwrap().unwrap())
            .collect()
    });
    let nodes: HashSet<u64> = leases.iter().map(Lease::node).collect();
    assert_eq!(nodes, (0..8).collect());
}

/// The nemesis's faults on PostgreSQL: kill every lease connection, restart the server
/// with `-m immediate`, step the server's clock forward or back.
struct PostgresFaults<'a> {
    server: &'a Server,
    /// The server's libfaketime clock.
    clock: &'a std::path::Path,
}

impl Faults for PostgresFaults<'_> {
    fn strike(&mut self, which: u64, dice: &mut Dice) -> Option<String> {
        Some(match which {
            0 => {
                let killed = self.server.psql(
                    "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                     WHERE application_name = 'atomflake-lease') t",
                );
                format!("kill {} lease connections", killed.trim())
            }
            1 => {
                self.server.stop("immediate");
                std::thread::sleep(Duration::from_millis(dice.below(1_000)));
                self.server.start_again();
                "restart the server (-m immediate)".to_owned()
            }
            _ => {
                let offset = format!("{:+}", i64::try_from(dice.below(7)).unwrap() - 3);
                pg::step_clock(self.clock, &offset);
                format!("step the server's clock to {offset} s")
            }
        })
    }

    fn heal(&mut self) {
        pg::step_clock(self.clock, "+0");
    }
}

/// The fleet of [`fleet::nemesis`] on 2 s leases, under its faults and those of
/// [`PostgresFaults`]. The history must show no ID twice, each process's IDs strictly
/// increasing, and on each node every holder's IDs past every earlier holder's.
/// `ATOMFLAKE_NEMESIS_SEED` replays a schedule's choices (which process a fault hits
/// also depends on which are running); `ATOMFLAKE_NEMESIS_STEPS` sets its length.
#[test]
fn a_fleet_under_a_seeded_nemesis_never_mints_an_id_twice() {
    let test = "a_fleet_under_a_seeded_nemesis_never_mints_an_id_twice";
    if !pg::can_move_clocks(test) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("atomflake-nemesis-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let server_clock = dir.join("server-clock");
    pg::step_clock(&server_clock, "+0");
    let options = pg::Options {
        faketime_file: Some(server_clock.clone()),
        // The lease's own session commits durably whatever the server's default.
        settings: vec![
            ("synchronous_commit", "off".into()),
            ("max_connections", "100".into()),
        ],
        ..pg::Options::default()
    };
    let Some(server) = start_with("lease-nemesis", options) else {
        return;
    };
    let mut faults = PostgresFaults {
        server: &server,
        clock: &server_clock,
    };
    let run = fleet::nemesis("postgres", &holders(&server), &dir, &mut faults);
    let (seed, total) = (run.seed, run.ids);
    // Enough for the history to say something: an idle machine mints tens of thousands,
    // a loaded one fewer (each process sleeps a millisecond between IDs, longer when the
    // machine is busy), never a few hundred.
    assert!(total > 1_000, "seed {seed}: the fleet minted only {total} ids");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Dropping a generator whose server is frozen (every server process stopped with
/// `SIGSTOP`, its Unix socket open: a renewal sent there never returns) returns within
/// the lease time instead of waiting for the server.
#[test]
fn dropping_a_leased_generator_while_its_server_is_frozen_returns_within_the_lease_time() {
    let Some(server) = start("lease-frozen-server") else {
        return;
    };
    let lease = Lease::acquire(
        &config(&server),
        &layout(),
        &LeaseOptions::new("frozen-server").ttl(TTL),
    )
    .unwrap();
    let generator = Builder::with_clock(layout(), PreciseClock::new())
        .build_on(lease)
        .unwrap();
    let _ = generator.next_id();
    server.signal_all("-STOP");
    // A renewal (every quarter of the lease time) is sent into the frozen server.
    std::thread::sleep(TTL / 2);
    // The drop waits for the keeper for its patience (the lease time), then leaves it; a
    // renewal interval more for the wake-up on a loaded machine. A drop that waited for the
    // server would still be waiting: it is thawed only after this.
    let (_, renew_every, patience) = tenure(TTL);
    let bound = patience + renew_every;
    let (done, dropped) = mpsc::channel();
    let start = Instant::now();
    std::thread::spawn(move || {
        drop(generator);
        let _ = done.send(());
    });
    let returned = dropped.recv_timeout(bound).is_ok();
    let took = start.elapsed();
    server.signal_all("-CONT");
    assert!(
        returned,
        "drop did not return in {took:?}: the bound is {bound:?} (its patience {patience:?} and a \
         renewal interval {renew_every:?})"
    );
    println!("drop returned after {took:?} with the server frozen");
}

/// The advisory lock key that gated sessions wait for ([`Late`]).
const GATE_KEY: i64 = 0x1a7e_c0de;

/// Statements that commit late, and a record of every committed write to the lease table.
///
/// Installed by the superuser: a statement-level trigger makes every `UPDATE` from a gated
/// session (by backend pid) wait, before it touches any row, for an advisory lock that a
/// second session of the test holds; a row-level trigger logs every row an `UPDATE`
/// changes (its generation and mark before and after, and whether it expired the row: a
/// release) in the transaction that changes it. So the log holds the writes the server
/// committed and nothing else, in the order they took the row. A gated session whose
/// connection is closed under it (the [`Proxy`] reset) runs on, waiting at the gate:
/// let through, its statement commits after its holder gave up on it and sent it again on
/// a new connection.
struct Late {
    /// The second session: it holds the gate's lock.
    gatekeeper: lease::postgres::Client,
}

/// One logged write to a lease row.
#[derive(Debug)]
struct Write {
    seq: i64,
    pid: i32,
    node: i64,
    generation: (i64, i64),
    mark: (i64, i64),
    released: bool,
}

impl Late {
    fn install(server: &Server) -> Late {
        server.psql(&format!(
            "CREATE TABLE late_gate (pid int PRIMARY KEY);
             CREATE TABLE late_log (
                 seq bigserial PRIMARY KEY, pid int NOT NULL, what text NOT NULL, node bigint,
                 old_generation bigint, new_generation bigint, old_mark bigint, new_mark bigint,
                 released boolean);
             CREATE FUNCTION late_gate() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
                 SET search_path = public, pg_catalog AS $$
             BEGIN
                 IF EXISTS (SELECT 1 FROM late_gate WHERE pid = pg_backend_pid()) THEN
                     PERFORM pg_advisory_xact_lock_shared({GATE_KEY});
                     INSERT INTO late_log (pid, what) VALUES (pg_backend_pid(), 'through the gate');
                 END IF;
                 RETURN NULL;
             END $$;
             CREATE TRIGGER late_gate BEFORE UPDATE ON public.atomflake_lease
                 FOR EACH STATEMENT EXECUTE FUNCTION late_gate();
             CREATE FUNCTION late_log() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
                 SET search_path = public, pg_catalog AS $$
             BEGIN
                 INSERT INTO late_log (pid, what, node, old_generation, new_generation, old_mark,
                                       new_mark, released)
                 VALUES (pg_backend_pid(), 'write', NEW.node, OLD.generation, NEW.generation,
                         OLD.high_water_ms, NEW.high_water_ms, NEW.expires_at <= clock_timestamp());
                 RETURN NULL;
             END $$;
             CREATE TRIGGER late_log AFTER UPDATE ON public.atomflake_lease
                 FOR EACH ROW EXECUTE FUNCTION late_log();"
        ));
        let gatekeeper =
            lease::postgres::Client::connect(&server.conninfo(), lease::postgres::NoTls).unwrap();
        Late { gatekeeper }
    }

    /// Closes the gate, and gates the one session whose `application_name` is `name`.
    fn gate(&mut self, server: &Server, name: &str) -> Gated {
        self.gatekeeper
            .execute("SELECT pg_advisory_lock($1)", &[&GATE_KEY])
            .unwrap();
        let pid = server.psql(&format!(
            "INSERT INTO late_gate SELECT pid FROM pg_stat_activity WHERE application_name = '{name}' \
             RETURNING pid"
        ));
        let pids: Vec<i32> = pid.lines().map(|pid| pid.trim().parse().unwrap()).collect();
        assert_eq!(pids.len(), 1, "one session named {name}: {pids:?}");
        let since = server
            .psql("SELECT coalesce(max(seq), 0) FROM late_log")
            .trim()
            .parse()
            .unwrap();
        Gated { pid: pids[0], since }
    }

    /// Waits until the gated session `pid` waits at the gate.
    fn wait_at_gate(server: &Server, Gated { pid, .. }: Gated) {
        until("the gated statement to wait at the gate", || {
            server
                .psql(&format!(
                    "SELECT wait_event FROM pg_stat_activity WHERE pid = {pid}"
                ))
                .trim()
                == "advisory"
        });
    }

    /// Opens the gate, and waits until the gated session's statement has committed and the
    /// session, its connection closed, has ended.
    fn let_through(&mut self, server: &Server, Gated { pid, .. }: Gated) {
        self.gatekeeper
            .execute("SELECT pg_advisory_unlock($1)", &[&GATE_KEY])
            .unwrap();
        until("the gated session to end", || {
            server
                .psql(&format!(
                    "SELECT count(*) FROM pg_stat_activity WHERE pid = {pid}"
                ))
                .trim()
                == "0"
        });
        assert_eq!(
            server
                .psql(&format!(
                    "SELECT count(*) FROM late_log WHERE pid = {pid} AND what = 'through the gate'"
                ))
                .trim(),
            "1",
            "the late statement did not commit (its statement_timeout, a quarter of the lease \
             time, ran out first?)"
        );
    }

    /// Every committed write to a lease row, in the order they took it.
    fn writes(server: &Server) -> Vec<Write> {
        server
            .psql(
                "SELECT seq, pid, node, old_generation, new_generation, old_mark, new_mark, released \
                 FROM late_log WHERE what = 'write' ORDER BY seq",
            )
            .lines()
            .map(|line| {
                let f: Vec<&str> = line.split('|').collect();
                Write {
                    seq: f[0].parse().unwrap(),
                    pid: f[1].parse().unwrap(),
                    node: f[2].parse().unwrap(),
                    generation: (f[3].parse().unwrap(), f[4].parse().unwrap()),
                    mark: (f[5].parse().unwrap(), f[6].parse().unwrap()),
                    released: f[7] == "t",
                }
            })
            .collect()
    }
}

/// A session at the gate: its pid, and the last log entry before it was gated.
#[derive(Debug, Clone, Copy)]
struct Gated {
    pid: i32,
    since: i64,
}

impl Gated {
    /// The writes of the gated session's statements sent after it was gated: the late ones.
    fn writes<'a>(&self, writes: &'a [Write]) -> Vec<&'a Write> {
        writes
            .iter()
            .filter(|write| write.pid == self.pid && write.seq > self.since)
            .collect()
    }
}

/// Waits for `done`, every 10 ms, for the hang guard at most; panics naming `what`
/// otherwise.
fn until(what: &str, done: impl FnMut() -> bool) {
    wait_until(
        &format!("waited for {what}"),
        Duration::from_millis(10),
        done,
        String::new,
    );
}

/// The mark in the row of `node` in `namespace`.
fn row_mark(server: &Server, namespace: &str, node: u64) -> u64 {
    server
        .psql(&format!(
            "SELECT high_water_ms FROM atomflake_lease WHERE namespace = '{namespace}' AND node = {node}"
        ))
        .trim()
        .parse()
        .unwrap()
}

/// A server on loopback TCP with [`Late`] installed, and a proxy to it whose connections
/// the test breaks: the lease of `name` (its `application_name`) connects through it.
fn late_server(test: &str) -> Option<(Server, Late, Proxy)> {
    let options = pg::Options {
        tcp: true,
        ..pg::Options::default()
    };
    let server = start_with(test, options)?;
    let late = Late::install(&server);
    let proxy = Proxy::start(server.port());
    Some((server, late, proxy))
}

fn through(proxy: &Proxy, name: &str) -> atomflake_postgres::Database {
    format!(
        "host=127.0.0.1 port={} user={LEASE_ROLE} dbname=postgres application_name={name}",
        proxy.port()
    )
    .parse()
    .unwrap()
}

/// A store that waits on the server while its connection breaks, is sent again on a new
/// connection, and commits late, after a newer mark: the mark stays the newer one (a
/// store keeps the higher of the two), so a successor whose clock reads the mark it
/// claims mints none of the holder's IDs. Every write the server committed is checked: no
/// store of a claim ever lowered its mark.
#[test]
fn a_store_that_commits_late_from_an_abandoned_connection_never_lowers_the_mark() {
    let Some((server, mut late, proxy)) = late_server("lease-late-store") else {
        return;
    };
    // Long enough that the store waiting at the gate is not cancelled (a quarter of it)
    // while the test works, on a loaded machine too.
    let ttl = Duration::from_secs(8);
    let options = LeaseOptions::new("late").ttl(ttl).node(0);
    let first = Lease::acquire(
        &through(&proxy, "late-first"),
        &layout(),
        &options.clone().holder("first"),
    )
    .unwrap();
    let t0 = now_ms();
    let clock = ManualClock::new(t0);
    let first = Builder::with_clock(layout(), clock.clone())
        .build_on(first)
        .unwrap();
    let mut minted = vec![first.try_next_id().unwrap()];
    let built_mark = row_mark(&server, "late", 0);
    let gated = late.gate(&server, "late-first");
    // Less than half a window before the mark, a mint asks the keeper for the next one:
    // that store waits at the gate.
    clock.set(built_mark - 300);
    minted.push(first.try_next_id().unwrap());
    Late::wait_at_gate(&server, gated);
    // The connection breaks under it: the lease sends it again on a new one, which commits.
    proxy.reset();
    until("the store sent again", || {
        row_mark(&server, "late", 0) > built_mark
    });
    let stale = row_mark(&server, "late", 0);
    // A newer mark, stored on the new connection; then IDs in the tick the stale mark
    // starts, which the newer one covers.
    clock.set(stale - 400);
    minted.push(first.try_next_id().unwrap());
    until("a newer mark", || row_mark(&server, "late", 0) > stale);
    let newer = row_mark(&server, "late", 0);
    clock.set(stale);
    minted.extend((0..5).map(|_| first.try_next_id().unwrap()));
    // The holder loses its link for good (it renews and releases nothing more), and the
    // abandoned store commits.
    proxy.cut();
    late.let_through(&server, gated);
    let writes = Late::writes(&server);
    let abandoned = gated.writes(&writes);
    assert_eq!(abandoned.len(), 1, "the late store wrote once: {writes:?}");
    for write in &writes {
        if write.generation.0 == write.generation.1 && !write.released {
            assert!(
                write.mark.1 >= write.mark.0,
                "a store lowered node {}'s mark from {} to {} (the late one: {abandoned:?}): {writes:?}",
                write.node,
                write.mark.0,
                write.mark.1
            );
        }
    }
    assert_eq!(row_mark(&server, "late", 0), newer, "the newer mark stays");
    // A successor, once the lease has expired (the late store renewed it too), with its
    // clock at the mark it claims: behind the holder's, which minted up to the newer mark.
    // Nothing renews the row after the late store, which committed before `start`: by the
    // server's clock it expires a lease time later, and a claim then takes a claim's time
    // at most.
    let start = Instant::now();
    let expired = ttl + CLAIM_TIMEOUT;
    let successor = loop {
        match Lease::acquire(&config(&server), &layout(), &options.clone().holder("second")) {
            Ok(lease) => break lease,
            Err(LeaseError::NodeTaken { .. }) if start.elapsed() < expired => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(error) => panic!("{error}"),
        }
    };
    assert_eq!(successor.generation(), 2);
    let claimed = successor.high_water_ms();
    assert_eq!(claimed, newer);
    let second = Builder::with_clock(layout(), ManualClock::new(claimed))
        .build_on(successor)
        .unwrap();
    let theirs: Vec<Id> = (0..5).map(|_| second.try_next_id().unwrap()).collect();
    let last = *minted.iter().max().unwrap();
    assert!(
        theirs[0] > last,
        "the successor's first {} is not past {last}",
        theirs[0]
    );
    let all: Vec<u64> = minted.iter().chain(&theirs).map(|id| id.get()).collect();
    assert_unique(&all);
    drop(second);
    drop(first);
    println!("stale mark {stale}, newer {newer}, successor claimed {claimed}; writes: {writes:?}");
}

/// A store or a release of a claim that has ended (its holder released the node, and a
/// successor claimed it), committing late from a connection its holder gave up on: it
/// finds another token and changes nothing. The successor's row stays live with its own
/// mark.
#[test]
fn a_late_store_or_release_of_an_ended_claim_never_touches_its_successors() {
    let Some((server, mut late, proxy)) = late_server("lease-late-release") else {
        return;
    };
    let ttl = Duration::from_secs(8);
    for kind in ["store", "release"] {
        let namespace = format!("late-{kind}");
        let name = format!("late-{kind}");
        let options = LeaseOptions::new(namespace.as_str()).ttl(ttl).node(0);
        let mut first = Lease::acquire(
            &through(&proxy, &name),
            &layout(),
            &options.clone().holder("first"),
        )
        .unwrap();
        let t = now_ms();
        first.store(t + 5_000).unwrap();
        let gated = late.gate(&server, &name);
        // The holder minted up to `t`: its release stores exactly that, below its marks.
        first.finish(t);
        match kind {
            "store" => {
                std::thread::scope(|scope| {
                    let sent = scope.spawn(|| first.store(t + 6_000));
                    Late::wait_at_gate(&server, gated);
                    proxy.reset();
                    sent.join().unwrap().unwrap();
                });
                first.release().unwrap();
            }
            _ => std::thread::scope(|scope| {
                let sent = scope.spawn(|| first.release());
                Late::wait_at_gate(&server, gated);
                proxy.reset();
                sent.join().unwrap().unwrap();
            }),
        }
        let successor =
            Lease::acquire(&config(&server), &layout(), &options.clone().holder("second")).unwrap();
        assert_eq!(
            (successor.generation(), successor.high_water_ms()),
            (2, t),
            "{kind}: the released mark"
        );
        let mut successor = successor;
        successor.store(t + 7_000).unwrap();
        late.let_through(&server, gated);
        let writes = Late::writes(&server);
        assert!(
            gated.writes(&writes).is_empty(),
            "{kind}: the late {kind} wrote: {writes:?}"
        );
        let rows = lease::list(&config(&server), &namespace).unwrap();
        assert!(
            rows.len() == 1
                && rows[0].live
                && rows[0].holder.as_deref() == Some("second")
                && rows[0].generation == Some(2)
                && rows[0].high_water_ms == t + 7_000,
            "{kind}: {rows:?}"
        );
        successor.release().unwrap();
    }
}

/// The number of rows `sql` (a `SELECT count(*)`) counts.
fn count(server: &Server, sql: &str) -> u64 {
    server.psql(sql).trim().parse().unwrap()
}

#[test]
fn a_claimant_frozen_within_its_turn_holds_the_namespace_for_half_a_claim_time_at_most() {
    let Some(server) = start("lease-frozen-turn") else {
        return;
    };
    let holders = holders(&server);
    // The table locked by a migration that runs 3 s: the first claimant takes its turn,
    // then waits for the table inside it.
    let mut migration = server
        .client("psql")
        .args([
            "-X",
            "-q",
            "-c",
            "BEGIN; LOCK TABLE public.atomflake_lease IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(3); COMMIT;",
        ])
        .spawn()
        .unwrap();
    let locked = "SELECT count(*) FROM pg_locks WHERE relation = 'public.atomflake_lease'::regclass \
                  AND mode = 'AccessExclusiveLock' AND granted";
    until("the migration's lock", || count(&server, locked) == 1);
    let mut frozen = holders.hold("turn").spawn();
    let waiting = "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'atomflake-lease' \
                   AND wait_event_type = 'Lock'";
    until("the claimant waiting in its turn", || {
        count(&server, waiting) == 1
    });
    // Frozen in its turn: once the migration ends, its session is idle in the claim.
    assert!(frozen.signal("-STOP"));
    assert!(migration.wait().unwrap().success());
    let idle = "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'atomflake-lease' \
                AND state = 'idle in transaction'";
    until("the frozen claimant idle in its turn", || {
        count(&server, idle) == 1
    });

    // Another claimant gets in once the server has ended the frozen one's session, half a
    // claim's time (5 s) later, and takes the node the frozen one had claimed in its turn.
    let start = Instant::now();
    let mut next = holders.hold("turn").wait().spawn();
    assert_eq!(next.node(), 0, "the frozen claim was rolled back");
    let took = start.elapsed();
    // The server frees the turn half a claim's time after the session went idle (before
    // `start`); a claimant that found it held would wait a whole claim's time for it.
    assert!(
        took < CLAIM_TIMEOUT,
        "the turn was held {took:?}: not freed before a claim's time ({CLAIM_TIMEOUT:?})"
    );
    assert_eq!(count(&server, idle), 0, "the frozen session was ended");

    // Woken, the frozen claimant finds its session ended and its claim in it rolled back:
    // it claims again on a new connection, a node of its own, never the one taken
    // meanwhile (or, woken past its claim's deadline, nothing).
    assert!(frozen.signal("-CONT"));
    let lines = frozen.close();
    let claimed: Vec<_> = lines.iter().filter(|line| line.starts_with("node ")).collect();
    assert!(
        claimed.iter().all(|line| !line.starts_with("node 0 ")),
        "{lines:?}"
    );
    assert!(claimed.len() <= 1, "{lines:?}");
    println!("the turn was free again after {took:?}; the frozen claimant said {lines:?}");
    next.close();
}

/// A lease whose connection the server never answers on (held by the proxy: the server
/// sees nothing, the client's TCP is acknowledged) gives the call up at its deadline and
/// renews on a new connection; a claim on a server that answers no connection fails a
/// claim's time past its deadline, saying so, instead of waiting for good.
#[test]
fn a_call_the_server_never_answers_is_given_up_at_its_deadline_and_made_again() {
    let Some((server, _late, proxy)) = late_server("lease-unanswered") else {
        return;
    };
    let ttl = Duration::from_secs(4);
    let options = LeaseOptions::new("unanswered").ttl(ttl).node(0);
    let lease = Lease::acquire(&through(&proxy, "unanswered"), &layout(), &options).unwrap();
    let generator = Builder::new(layout()).build_on(lease).unwrap();
    assert!(generator.try_next_id().is_ok());
    // The lease's connection goes silent; new connections go through.
    let held_at = server.psql("SELECT clock_timestamp()");
    let start = Instant::now();
    proxy.hold();
    proxy.restore();
    let renewed_after = format!(
        "SELECT count(*) FROM atomflake_lease WHERE namespace = 'unanswered' \
         AND expires_at > '{}'::timestamptz + interval '{} seconds'",
        held_at.trim(),
        ttl.as_secs()
    );
    until("a renewal after the connection went silent", || {
        server.psql(&renewed_after).trim() == "1"
    });
    let renewed = start.elapsed();
    // The renewal sent on the silent connection after `start` is given up at its deadline
    // (half the lease time; the engine waits a second more), then renewed at the next store.
    let given_up = ttl / 2;
    assert!(
        renewed >= given_up,
        "renewed in {renewed:?} on a silent connection, before a store's deadline ({given_up:?})"
    );
    let id = (0..200).find_map(|_| {
        std::thread::sleep(Duration::from_millis(10));
        generator.try_next_id().ok()
    });
    assert!(id.is_some(), "minting did not resume");
    drop(generator);

    // Every connection silent: the claim gives up at its deadline.
    proxy.hold();
    let start = Instant::now();
    let error = Lease::acquire(&through(&proxy, "unanswered-claim"), &layout(), &options).unwrap_err();
    let took = start.elapsed();
    let text = error.to_string();
    assert!(
        text.starts_with("lease database operation \"connect\" failed: no answer from the server within ")
            && text.ends_with("s: the connection is given up and made again"),
        "{text}"
    );
    assert!(error.is_transient(), "{error:?}");
    // At the claim's deadline and a claim's time more (the connect is waited for until
    // then, from the deadline set before `start`): not before. A claim that tried again,
    // or waited for good, would take a claim's time more at least.
    assert!(
        took >= 2 * CLAIM_TIMEOUT && took < 3 * CLAIM_TIMEOUT,
        "gave up after {took:?}: not in {:?}..{:?}",
        2 * CLAIM_TIMEOUT,
        3 * CLAIM_TIMEOUT
    );
    println!(
        "renewed on a new connection {renewed:?} after the old one went silent; the claim gave up after \
         {took:?}: {text}"
    );
    proxy.deliver();
}

/// A claim whose session the server ends within its transaction (here its own trigger,
/// once; on a loaded machine, anything that closes the connection) is claimed again on a
/// new connection: the broken transaction left nothing.
#[test]
fn a_claim_whose_session_the_server_ends_is_made_again_on_a_new_connection() {
    let Some((server, config, options)) = start_with_a_table("lease-broken-claim", "broken") else {
        return;
    };
    server.psql(
        "CREATE SEQUENCE breaks; \
         CREATE FUNCTION break_once() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$ \
         BEGIN \
             IF nextval('breaks') = 1 THEN PERFORM pg_terminate_backend(pg_backend_pid()); END IF; \
             RETURN NEW; \
         END $$; \
         CREATE TRIGGER break_once BEFORE INSERT OR UPDATE ON atomflake_lease \
             FOR EACH ROW EXECUTE FUNCTION break_once()",
    );
    let lease = Lease::acquire(&config, &layout(), &options).unwrap();
    assert_eq!(lease.node(), 0);
    assert_eq!(lease.generation(), 2, "the broken claim left nothing");
    // The first claim's session ended in its write; the second's wrote.
    let writes: u64 = server
        .psql("SELECT last_value FROM breaks")
        .trim()
        .parse()
        .unwrap();
    assert!(writes >= 2, "{writes}");
}
