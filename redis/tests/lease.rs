//! Node-ID leases against a real Redis, with real processes: each test starts a throwaway
//! server (`atomflake-test-servers`) and runs this test binary again as the lease holders
//! ([`redis_child`]), which it freezes and kills (the harness and the lines holders print:
//! `atomflake_test_servers::fleet`).

use atomflake_redis::RedisUrl;
use atomflake_redis::lease;
use atomflake_test_servers::fleet::{self, HolderClock, Holders};
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
    // The holders hold on a lease time of 30 s: a server younger than that (and a second)
    // could have lost their claims, and has them wait.
    std::thread::sleep(Duration::from_secs(32));
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
    let holders = holders(&server);
    let mut first = holders
        .mint("restart")
        .node(0)
        .clock(HolderClock::Precise)
        .spawn();
    first.wait_for_ids(1_000);
    server.kill();
    server.restart();
    let mut second = holders
        .mint("restart")
        .node(0)
        .clock(HolderClock::Precise)
        .spawn();
    second.wait_for_ids(1_000);
    let (first, second) = (first.finish_killed(), second.finish_killed());
    let (before, after) = (fleet::minted(&first), fleet::minted(&second));
    let all: Vec<u64> = before.iter().chain(&after).copied().collect();
    fleet::assert_unique(&all);
    assert!(
        after.first() > before.last(),
        "the claimant started at {:?}, below the holder's last ID {:?}",
        after.first(),
        before.last()
    );
    assert!(
        fleet::lease_lines(&first)
            .iter()
            .any(|(_, why)| why.contains("lost")),
        "the holder found its claim lost: {:?}",
        fleet::lease_lines(&first)
    );
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
    let mut first = Holders::new(primary.url(), "redis_child", TTL)
        .mint("promoted")
        .node(0)
        .clock(HolderClock::Precise)
        .spawn();
    first.wait_for_ids(1_000);
    primary.kill();
    replica.promote();
    let mut second = Holders::new(replica.url(), "redis_child", TTL)
        .mint("promoted")
        .node(0)
        .clock(HolderClock::Precise)
        .spawn();
    second.wait_for_ids(1_000);
    let (first, second) = (first.finish_killed(), second.finish_killed());
    let (before, after) = (fleet::minted(&first), fleet::minted(&second));
    let all: Vec<u64> = before.iter().chain(&after).copied().collect();
    fleet::assert_unique(&all);
    assert!(
        after.first() > before.last(),
        "the claimant started at {:?}, below the holder's last ID {:?}",
        after.first(),
        before.last()
    );
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
