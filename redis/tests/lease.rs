//! Node-ID leases against a real Redis, with real processes: each test starts a throwaway
//! server (`atomflake-test-servers`) and runs this test binary again as the lease holders
//! ([`redis_child`]), which it freezes and kills (the harness and the lines holders print:
//! `atomflake_test_servers::fleet`).

use atomflake_redis::RedisUrl;
use atomflake_redis::lease;
use atomflake_test_servers::clock::step_clock;
use atomflake_test_servers::fleet::{self, Dice, Faults, HolderClock, Holders};
use atomflake_test_servers::redis::{Persistence, Server};
use std::collections::HashSet;
use std::time::Duration;

/// The lease time of the tests.
const TTL: Duration = Duration::from_secs(2);

fn url(server: &Server) -> RedisUrl {
    server.url().parse().unwrap()
}

fn holders(server: &Server) -> Holders {
    Holders::new(server.url(), "redis_child", TTL)
}

/// Not a test of its own: the holder process the tests run.
#[test]
fn redis_child() {
    fleet::holder::<lease::Redis>();
}

/// A generator on a lease starts past the node's mark, keeps the mark ahead of its IDs,
/// and on drop stores the exact mark and frees the node; the next claim of the node has a
/// larger generation and starts past every ID of the first.
#[test]
fn a_generator_on_a_redis_lease_starts_past_the_mark_keeps_it_and_releases_it() {
    let Some(server) = Server::start("redis-cycle", Persistence::AppendEverySec) else {
        return;
    };
    fleet::generator_cycle::<lease::Redis>(&url(&server), TTL);
}

#[test]
fn sixteen_redis_holders_get_sixteen_nodes_and_a_seventeenth_is_refused() {
    let Some(server) = Server::start("redis-16", Persistence::AppendEverySec) else {
        return;
    };
    // The holders hold on a lease time of 30 s: a server younger than that (and 11 s)
    // could have lost their claims, and has them wait.
    std::thread::sleep(Duration::from_secs(42));
    let held = fleet::sixteen_holders::<lease::Redis>(&holders(&server), &url(&server));
    let generations: HashSet<Option<i64>> = held.iter().map(|row| row.generation).collect();
    assert_eq!(
        generations,
        HashSet::from([Some(1)]),
        "each node's first claim: {held:?}"
    );
}

/// A holder frozen past its lease time loses its node to a successor, and after `SIGCONT`
/// mints nothing more.
#[test]
fn a_frozen_redis_holder_loses_its_node_and_mints_nothing_more() {
    let Some(server) = Server::start("redis-frozen", Persistence::AppendEverySec) else {
        return;
    };
    let pause = TTL + Duration::from_secs(1);
    fleet::a_frozen_holder_is_lost::<lease::Redis>(&holders(&server), HolderClock::Precise, pause);
}

/// The store's own errors reach a minting thread whole: a claim expired behind its
/// holder's back, and taken by a successor, is lost for good.
#[test]
fn a_claim_expired_behind_its_back_is_lost_for_good() {
    let Some(server) = Server::start("redis-expired", Persistence::AppendEverySec) else {
        return;
    };
    let expire = || {
        let script = "local e = cjson.decode(redis.call('HGET', KEYS[1], '0')) e.e = '0' \
                      return redis.call('HSET', KEYS[1], '0', cjson.encode(e))";
        server
            .cli(&["EVAL", script, "1", "atomflake:lease:{ended}:claims"])
            .unwrap();
    };
    fleet::a_claim_ended_behind_its_back::<lease::Redis>(&url(&server), TTL, expire);
}

/// Redis restarted empty (no persistence: every claim and mark gone) under a minting
/// holder, and a claimant for the holder's node at once: the claimant waits out the
/// restart; the holder's next store finds its claim gone, puts its mark back and stops;
/// the claimant then starts past every ID the holder minted. With neither the wait nor the
/// mark put back, both mint on the node at once.
#[test]
fn a_redis_restarted_empty_under_a_holder_never_hands_its_node_out_twice() {
    let Some(mut server) = Server::start("redis-restart-empty", Persistence::None) else {
        return;
    };
    handed_over(&holders(&server), "restart", |_| {
        server.kill();
        server.restart();
    });
}

/// A replica promoted that never had a minting holder's claim or marks (cut off from its
/// primary while the holder claimed and minted, and its primary died): a claimant on it for the
/// holder's node waits out the promotion, by when the holder, cut off from its primary,
/// has stopped at its deadline; the claimant's IDs are past the holder's. Without the wait
/// both mint on the node at once.
#[test]
fn a_replica_promoted_without_a_holders_claim_never_hands_its_node_out_twice() {
    let test = "redis-promoted";
    let Some(mut primary) = Server::start(test, Persistence::AppendEverySec) else {
        return;
    };
    let Some(mut replica) = Server::replica(test, &primary) else {
        return;
    };
    // Cut off: a replica of a port where nothing listens, keeping what it had.
    assert_eq!(replica.cli(&["REPLICAOF", "127.0.0.1", "1"]).as_deref(), Ok("OK"));
    let mut first = on_node_0(&Holders::new(primary.url(), "redis_child", TTL), "promoted").spawn();
    first.wait_for_ids(1_000);
    primary.kill();
    replica.promote();
    let mut second = on_node_0(&Holders::new(replica.url(), "redis_child", TTL), "promoted").spawn();
    second.wait_for_ids(1_000);
    let (first, second) = (first.finish_killed(), second.finish_killed());
    assert_successor_past(&first, &second);
}

/// Every client connection killed (`CLIENT KILL`) twenty times in two seconds under a
/// minting holder: each call is made again on a new connection (every script can run twice
/// to the same effect), the holder keeps its node and mints on, and its IDs stay unique
/// and in order.
#[test]
fn connections_killed_under_a_holder_cost_it_nothing() {
    let Some(server) = Server::start("redis-client-kill", Persistence::AppendEverySec) else {
        return;
    };
    let mut holder = holders(&server)
        .mint("killed")
        .clock(HolderClock::Precise)
        .spawn();
    holder.wait_for_ids(1_000);
    let mut killed = 0;
    for _ in 0..20 {
        killed += server
            .cli(&["CLIENT", "KILL", "TYPE", "normal"])
            .unwrap()
            .parse::<u32>()
            .unwrap();
        std::thread::sleep(Duration::from_millis(100));
    }
    // The holder's is the only other client: its connection was made again and killed.
    assert!(killed >= 3, "{killed} connections killed");
    // It mints on past the kills: a thousand IDs more within the hang guard.
    holder.wait_for_ids(2_000);
    let lines = holder.finish_killed();
    let ids = fleet::minted(&lines);
    fleet::assert_unique(&ids);
    assert!(ids.windows(2).all(|pair| pair[0] < pair[1]), "in order");
    assert!(
        !fleet::lease_lines(&lines)
            .iter()
            .any(|(_, why)| why.contains("lost") || why.contains("deadline")),
        "the holder kept its lease: {:?}",
        fleet::lease_lines(&lines)
    );
}

/// A holder that mints on node 0 of `namespace`, on the precise clock.
fn on_node_0(holders: &Holders, namespace: &str) -> fleet::Spawn {
    holders.mint(namespace).node(0).clock(HolderClock::Precise)
}

/// The checks of a node handed from a holder to its successor (their lines): no ID twice,
/// and the successor's first ID past the holder's last.
fn assert_successor_past(first: &[String], second: &[String]) {
    let (before, after) = (fleet::minted(first), fleet::minted(second));
    let all: Vec<u64> = before.iter().chain(&after).copied().collect();
    fleet::assert_unique(&all);
    assert!(
        after.first() > before.last(),
        "the successor started at {:?}, below the holder's last ID {:?}",
        after.first(),
        before.last()
    );
}

/// A holder on node 0 of `namespace` mints 1,000 IDs, `fault` strikes, and a successor
/// claims node 0 and mints 1,000: [`assert_successor_past`], and the holder found its claim
/// lost.
fn handed_over(holders: &Holders, namespace: &str, fault: impl FnOnce(&mut fleet::Holder)) {
    let mut first = on_node_0(holders, namespace).spawn();
    first.wait_for_ids(1_000);
    fault(&mut first);
    let mut second = on_node_0(holders, namespace).spawn();
    second.wait_for_ids(1_000);
    // A holder the fault froze goes on: its next store finds its claim lost.
    first.signal("-CONT");
    let lost = |seen: &[String]| {
        fleet::lease_lines(seen)
            .iter()
            .any(|(_, why)| why.contains("lost"))
    };
    first.wait_for(Duration::from_secs(30), lost);
    let (first, second) = (first.finish_killed(), second.finish_killed());
    assert_successor_past(&first, &second);
}

/// A directory of this test process for clock files, removed when dropped.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new(test: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("atomflake-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The server's clock stepped an hour ahead under a minting holder: to the server its
/// claim has expired, and a claimant for its node takes the node at once. The holder's
/// next store finds another token on the node and it stops; the claimant starts past the
/// holder's mark, which is past every ID the holder minted. The expiry is the server's
/// clock; the IDs rest on the token and the mark.
#[test]
fn a_server_clock_stepped_ahead_hands_a_node_out_early_but_no_id_twice() {
    let test = "redis-clock-ahead";
    let scratch = Scratch::new(test);
    let clock = scratch.0.join("server-clock");
    let Some(server) = Server::start_on_clock(test, Persistence::AppendEverySec, &clock) else {
        return;
    };
    // Frozen across the step, so that its renewals cannot make the claim live again before
    // the successor claims.
    handed_over(&holders(&server), "ahead", |first| {
        first.signal("-STOP");
        step_clock(&clock, "+3600");
    });
}

/// The nemesis's faults on Redis: every client connection killed; the server killed and
/// started again, with its append-only file (synced every second) or with nothing; the
/// server's clock stepped up to 3 s either way. A step waits until the claim gate of the
/// last restart (a lease time and 11 s, by the server's clock) has passed: a step
/// forward within it shortens the gate by the step (the README's failure table).
struct RedisFaults<'a> {
    server: &'a mut Server,
    clock: &'a std::path::Path,
    restarted: std::time::Instant,
}

impl Faults for RedisFaults<'_> {
    fn strike(&mut self, which: u64, dice: &mut Dice) -> Option<String> {
        Some(match which {
            0 => {
                let killed = self.server.cli(&["CLIENT", "KILL", "TYPE", "normal"]).unwrap();
                format!("kill {killed} client connections")
            }
            1 => {
                self.restarted = std::time::Instant::now();
                if dice.below(2) == 0 {
                    self.server.restart();
                    "restart the server (SIGKILL; its append-only file kept)".to_owned()
                } else {
                    self.server.restart_empty();
                    "restart the server empty (SIGKILL; its files removed)".to_owned()
                }
            }
            _ => {
                if self.restarted.elapsed() < TTL + Duration::from_secs(12) {
                    return None;
                }
                let offset = format!("{:+}", i64::try_from(dice.below(7)).unwrap() - 3);
                step_clock(self.clock, &offset);
                format!("step the server's clock to {offset} s")
            }
        })
    }

    /// A server restarted empty counts each node's claims from 1 again.
    fn generations_kept(&self) -> bool {
        false
    }
}

/// The fleet of [`fleet::nemesis`] on 2 s leases, under its faults and those of
/// [`RedisFaults`]. The history must show no ID twice, each process's IDs strictly
/// increasing, and on each node every holder's IDs past every earlier holder's.
/// `ATOMFLAKE_NEMESIS_SEED` replays a schedule's choices; `ATOMFLAKE_NEMESIS_STEPS` sets
/// its length.
#[test]
fn a_fleet_on_redis_under_a_seeded_nemesis_never_mints_an_id_twice() {
    let test = "redis-nemesis";
    let scratch = Scratch::new(test);
    let clock = scratch.0.join("server-clock");
    let Some(mut server) = Server::start_on_clock(test, Persistence::AppendEverySec, &clock) else {
        return;
    };
    let holders = holders(&server);
    let mut faults = RedisFaults {
        server: &mut server,
        clock: &clock,
        restarted: std::time::Instant::now(),
    };
    let run = fleet::nemesis("redis", &holders, &scratch.0, &mut faults);
    let (seed, total) = (run.seed, run.ids);
    assert!(total > 1_000, "seed {seed}: the fleet minted only {total} ids");
}

/// Copies directory `from` (flat) to `to`.
fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

/// Redis restarted on an append-only file that lost its last writes: a copy of the file
/// taken while a holder minted, put back after the holder was killed (its claim kept, the
/// marks it stored in its last 2.5 s gone). The node's next holder runs on a clock 5 s
/// behind: it starts past the mark that survived, which is past every ID the holder minted
/// since: a mark is ahead of the IDs, and every store adds the loss window (2 s). Without
/// the window the successor mints IDs the holder minted.
#[test]
fn a_redis_that_lost_its_last_writes_never_hands_out_an_id_twice() {
    let test = "redis-lost-writes";
    let scratch = Scratch::new(test);
    let Some(mut server) = Server::start(test, Persistence::AppendEverySec) else {
        return;
    };
    let holders = holders(&server);
    let mut first = on_node_0(&holders, "lost").spawn();
    first.wait_for_ids(1_000);
    // What the file holds once synced: the claim and the marks stored so far.
    std::thread::sleep(Duration::from_millis(1_200));
    let aof = server.root().join("appendonlydir");
    let copy = scratch.0.join("appendonlydir");
    copy_dir(&aof, &copy);
    std::thread::sleep(Duration::from_millis(2_500));
    let first = first.finish_killed();
    server.kill();
    std::fs::remove_dir_all(&aof).unwrap();
    copy_dir(&copy, &aof);
    server.restart();
    let clock = scratch.0.join("successor-clock");
    step_clock(&clock, "-5");
    let mut second = on_node_0(&holders, "lost").faketime(&clock).spawn();
    second.wait_for_ids(1_000);
    let second = second.finish_killed();
    assert_successor_past(&first, &second);
}

/// With `?replicas=1`, a claim counts once a replica has it (`WAIT`): with the replica cut
/// off, a claim fails once `WAIT` has had all but a second of the claim's time, saying how
/// many replicas acknowledged it.
#[test]
fn with_replicas_1_a_claim_no_replica_acknowledged_fails() {
    use atomflake_lease::LeaseOptions;
    let test = "redis-replicas";
    let Some(primary) = Server::start(test, Persistence::AppendEverySec) else {
        return;
    };
    let Some(replica) = Server::replica(test, &primary) else {
        return;
    };
    let url: RedisUrl = format!("{}?replicas=1", primary.url()).parse().unwrap();
    let options = |namespace: &str| LeaseOptions::new(namespace).ttl(TTL);
    let lease = lease::Lease::acquire(&url, &fleet::layout(), &options("replicated")).unwrap();
    assert_eq!(lease.node(), 0);
    assert_eq!(replica.cli(&["REPLICAOF", "127.0.0.1", "1"]).as_deref(), Ok("OK"));
    let error = lease::Lease::acquire(&url, &fleet::layout(), &options("cut")).unwrap_err();
    assert_eq!(
        error.to_string(),
        "Redis: 0 of the 1 replicas asked for acknowledged the write in time"
    );
}

/// On a server just started, a claim waits out the claim gate (the namespace's longest
/// lease time and 11 s) even past the claim timeout of 10 s; a gate longer than a
/// minute is an error that says how long it has left.
#[test]
fn a_claim_on_a_fresh_server_waits_out_the_gate_up_to_a_minute() {
    use atomflake_lease::LeaseOptions;
    use std::time::Instant;
    let Some(server) = Server::start("redis-gate", Persistence::None) else {
        return;
    };
    let started = Instant::now();
    let long = LeaseOptions::new("long").ttl(Duration::from_secs(100));
    match lease::Lease::acquire(&url(&server), &fleet::layout(), &long) {
        Err(lease::LeaseError::Engine(lease::RedisError::Restarted { wait })) => assert!(
            wait > Duration::from_secs(100) && wait <= Duration::from_secs(111),
            "{wait:?}"
        ),
        other => panic!("{other:?}"),
    }
    let ten = LeaseOptions::new("ten").ttl(Duration::from_secs(10));
    let lease = lease::Lease::acquire(&url(&server), &fleet::layout(), &ten).unwrap();
    assert_eq!(lease.node(), 0);
    assert!(
        started.elapsed() >= Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

/// Over TLS with a client certificate, as an ACL user whose rights are the lease's keys
/// and the commands it runs (`APP_RIGHTS`): a generator on a lease claims, mints and
/// releases, and `list` shows the node. A wrong password is refused as such, and so is a
/// user without the rights; neither error nor the lease's `Debug` shows the password.
#[test]
fn over_tls_an_acl_user_with_the_leases_rights_alone_claims_mints_and_lists() {
    use atomflake_lease::LeaseOptions;
    use atomflake_test_servers::pki::Pki;
    use atomflake_test_servers::redis::PASSWORD;
    let test = "redis-tls";
    let pki = Pki::temporary(test);
    let Some(server) = Server::start_secure(test, &pki) else {
        return;
    };
    let url: RedisUrl = server.rediss_url(&format!("app:{PASSWORD}")).parse().unwrap();
    fleet::generator_cycle::<lease::Redis>(&url, TTL);
    let rows = atomflake_lease::list::<lease::Redis>(&url, "cycle").unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    let options = LeaseOptions::new("tls").ttl(TTL);
    let lease = lease::Lease::acquire(&url, &fleet::layout(), &options).unwrap();
    assert!(!format!("{lease:?}").contains(PASSWORD), "{lease:?}");
    drop(lease);

    let wrong: RedisUrl = server.rediss_url("app:wrong-Pw0rd").parse().unwrap();
    let error = lease::Lease::acquire(&wrong, &fleet::layout(), &options).unwrap_err();
    assert_eq!(
        error.to_string(),
        "Redis lease operation \"connect\" failed: Password authentication failed - AuthenticationFailed"
    );
    server.cli(&["ACL", "SETUSER", "app", "-info"]).unwrap();
    let error = lease::Lease::acquire(&url, &fleet::layout(), &options).unwrap_err();
    // Permanent: the script's INFO is refused (the message names the script by its hash).
    assert!(
        matches!(error, lease::LeaseError::Engine(lease::RedisError::Refused(_))),
        "{error:?}"
    );
    assert!(
        error.to_string().starts_with(
            "Redis lease operation \"claim\" failed: ResponseError: The user executing the script \
             can't run this command or subcommand script: "
        ),
        "{error}"
    );
}
