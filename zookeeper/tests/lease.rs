//! Node-ID leases against real ZooKeeper servers, with real processes: each test starts a
//! throwaway ensemble (`atomflake-test-servers`) and runs this test binary again as the
//! lease holders ([`zookeeper_child`]), which it freezes, kills and cuts off (the harness
//! and the lines holders print: `atomflake_test_servers::fleet`).

#![cfg(not(loom))]

use atomflake::mark::{MarkStore, StoreErrorKind};
use atomflake::{Builder, MintError};
use atomflake_lease::LeaseOptions;
use atomflake_test_servers::fleet::{self, HolderClock, Holders, layout};
use atomflake_test_servers::now_ms;
use atomflake_test_servers::postgres::can_move_clocks;
use atomflake_test_servers::zookeeper::Ensemble as Servers;
use atomflake_zookeeper::Ensemble;
use atomflake_zookeeper::lease::{self, Lease, LeaseError, ZooKeeperError};
use std::time::{Duration, Instant};

/// The lease time of most tests.
const TTL: Duration = Duration::from_secs(2);

fn ensemble(url: &str) -> Ensemble {
    url.parse().unwrap()
}

fn url(servers: &Servers) -> String {
    format!("zk://{}", servers.connect_string())
}

fn holders(url: &str) -> Holders {
    Holders::new(url, "zookeeper_child", TTL)
}

/// Not a test of its own: the holder process the tests run.
#[test]
fn zookeeper_child() {
    fleet::holder::<lease::ZooKeeper>();
}

/// A client of `servers` of its own, to write the namespace's nodes behind a holder's
/// back, and the runtime it runs on.
fn raw_client(servers: &Servers) -> (tokio::runtime::Runtime, zookeeper_client::Client) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let client = runtime
        .block_on(zookeeper_client::Client::connect(&servers.connect_string()))
        .unwrap();
    (runtime, client)
}

const MARK: &str = "/atomflake/lease/raw/mark/00000000000000000000";

fn read_mark(runtime: &tokio::runtime::Runtime, client: &zookeeper_client::Client) -> (u64, i32) {
    let (data, stat) = runtime.block_on(client.get_data(MARK)).unwrap();
    (String::from_utf8(data).unwrap().parse().unwrap(), stat.version)
}

/// A generator on a lease starts past the node's mark, keeps the mark ahead of its IDs,
/// and on drop stores the exact mark and frees the node; the next claim of the node has a
/// larger generation and starts past every ID of the first.
#[test]
fn a_generator_on_a_zookeeper_lease_starts_past_the_mark_keeps_it_and_releases_it() {
    let Some(servers) = Servers::start("zookeeper-cycle", 1) else {
        return;
    };
    let ensemble = ensemble(&url(&servers));
    assert_eq!(lease::list(&ensemble, "never-claimed").unwrap(), []);
    fleet::generator_cycle::<lease::ZooKeeper>(&ensemble, TTL);
}

#[test]
fn sixteen_zookeeper_holders_get_sixteen_nodes_and_a_seventeenth_is_refused() {
    let Some(servers) = Servers::start("zookeeper-16", 1) else {
        return;
    };
    let url = url(&servers);
    fleet::sixteen_holders::<lease::ZooKeeper>(&holders(&url), &ensemble(&url));
}

/// A holder frozen past its lease time loses its node to a successor (its session expires
/// with it), and after `SIGCONT` mints nothing more.
#[test]
fn a_frozen_zookeeper_holder_loses_its_node_and_mints_nothing_more() {
    let Some(servers) = Servers::start("zookeeper-frozen", 1) else {
        return;
    };
    let pause = TTL + Duration::from_secs(2);
    fleet::a_frozen_holder_is_lost::<lease::ZooKeeper>(&holders(&url(&servers)), HolderClock::Precise, pause);
}

#[test]
fn a_killed_zookeeper_holders_successor_with_a_clock_behind_starts_past_the_mark() {
    let test = "a_killed_zookeeper_holders_successor_with_a_clock_behind_starts_past_the_mark";
    let Some(servers) = Servers::start(test, 1) else {
        return;
    };
    if !can_move_clocks(test) {
        return;
    }
    let (url, behind) = (url(&servers), servers.file("behind"));
    fleet::a_killed_holders_successor_starts_past_the_mark::<lease::ZooKeeper>(
        &holders(&url),
        &ensemble(&url),
        &behind,
    );
}

/// A claim that ends behind its holder's back (its ephemeral node deleted, as the ensemble
/// does when it expires the session, early or on time) and goes to a successor: the
/// successor's claim bumped the mark's version, so the first holder's store and release
/// are lost, and neither touches the successor's claim or mark.
#[test]
fn a_claim_ended_behind_its_holders_back_is_lost_for_good() {
    let Some(servers) = Servers::start("zookeeper-ended", 1) else {
        return;
    };
    let (runtime, client) = raw_client(&servers);
    let holder = "/atomflake/lease/ended/holder/00000000000000000000";
    let end = || runtime.block_on(client.delete(holder, None)).unwrap();
    fleet::a_claim_ended_behind_its_back::<lease::ZooKeeper>(&ensemble(&url(&servers)), TTL, end);
}

/// A store that finds the mark's version moved on while its claim holds (one of its own
/// stores landed late) reads the mark back: done when it is at or past its own, else
/// written again at the version read. The mark never goes down.
#[test]
fn a_store_that_finds_the_version_moved_on_reads_it_back() {
    let Some(servers) = Servers::start("zookeeper-moved", 1) else {
        return;
    };
    let url = ensemble(&url(&servers));
    let mut lease = Lease::acquire(&url, &layout(), &LeaseOptions::new("raw").ttl(TTL)).unwrap();
    let (runtime, client) = raw_client(&servers);
    let base = now_ms();
    lease.store(base + 1_000).unwrap();
    // A late store of the holder's own, higher than the next: the next is done as it is.
    runtime
        .block_on(client.set_data(MARK, (base + 3_000).to_string().as_bytes(), None))
        .unwrap();
    lease.store(base + 2_000).unwrap();
    assert_eq!(read_mark(&runtime, &client).0, base + 3_000);
    // A late store lower than the next: the next writes its own over it.
    runtime
        .block_on(client.set_data(MARK, (base + 2_500).to_string().as_bytes(), None))
        .unwrap();
    lease.store(base + 4_000).unwrap();
    assert_eq!(read_mark(&runtime, &client).0, base + 4_000);
    // And the version this holder took is the one in place: the next store writes at once.
    let (_, version) = read_mark(&runtime, &client);
    lease.store(base + 5_000).unwrap();
    assert_eq!(read_mark(&runtime, &client), (base + 5_000, version + 1));
}

/// A session that the ensemble gives a shorter timeout than the lease time is refused:
/// the ensemble would end the claim before its holder stops minting.
#[test]
fn a_lease_time_past_the_ensembles_session_timeouts_is_refused() {
    let Some(servers) = Servers::start("zookeeper-timeout", 1) else {
        return;
    };
    let ttl = Duration::from_secs(120);
    let error = Lease::acquire(
        &ensemble(&url(&servers)),
        &layout(),
        &LeaseOptions::new("long").ttl(ttl),
    )
    .unwrap_err();
    let LeaseError::Engine(ZooKeeperError::SessionTimeout { negotiated, .. }) = &error else {
        panic!("{error}");
    };
    assert!(*negotiated < ttl);
    assert!(!error.is_transient());
    assert!(
        error.to_string().ends_with(
            "shorter than the lease time 120s: lower the lease time or raise the servers' maxSessionTimeout"
        ),
        "{error}"
    );
}

/// A generator on a three-server ensemble mints on, in order, while the leader is killed
/// and started again and a follower is frozen: the session and the claim survive both.
#[test]
fn a_zookeeper_lease_outlives_its_leader_killed_and_a_follower_frozen() {
    let Some(mut servers) = Servers::start("zookeeper-leader", 3) else {
        return;
    };
    let ttl = Duration::from_secs(6);
    let url = ensemble(&url(&servers));
    let lease = Lease::acquire(&url, &layout(), &LeaseOptions::new("leader").ttl(ttl)).unwrap();
    let generation = lease.generation();
    let generator = Builder::new(layout()).mark_store(lease).build(0).unwrap();
    let mut ids = Vec::new();
    let mint_for = |how_long: Duration, ids: &mut Vec<u64>| {
        let until = Instant::now() + how_long;
        while Instant::now() < until {
            match generator.try_next_id() {
                Ok(id) => ids.push(id.get()),
                Err(MintError::Store(error)) if error.kind() == StoreErrorKind::Lost => panic!("{error}"),
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
        }
    };
    mint_for(Duration::from_secs(1), &mut ids);
    let leader = servers.leader().expect("a leader");
    servers.kill(leader);
    mint_for(Duration::from_secs(3), &mut ids);
    servers.start_member(leader);
    servers.wait_serving();
    let follower = (0..3).find(|&i| Some(i) != servers.leader()).unwrap();
    servers.freeze(follower);
    mint_for(Duration::from_secs(3), &mut ids);
    servers.thaw(follower);
    let before_the_last_second = ids.len();
    mint_for(Duration::from_secs(1), &mut ids);
    assert!(
        ids.windows(2).all(|pair| pair[0] < pair[1]),
        "in order, none twice"
    );
    // Minting went on to the end: IDs in the last second of minting, after the thaw.
    assert!(
        ids.len() > before_the_last_second,
        "no ID in the last second: {before_the_last_second} before it, {} after",
        ids.len()
    );
    let rows = lease::list(&url, "leader").unwrap();
    assert!(
        rows[0].live && rows[0].generation == Some(generation),
        "the same claim: {rows:?}"
    );
}

/// The fleet of [`fleet::nemesis`] on 2 s leases against a three-server ensemble reached
/// through proxies, under its faults and those of [`ZooKeeperFaults`].
#[test]
fn a_zookeeper_fleet_under_a_seeded_nemesis_never_mints_an_id_twice() {
    let test = "a_zookeeper_fleet_under_a_seeded_nemesis_never_mints_an_id_twice";
    let Some(mut servers) = Servers::start(test, 3) else {
        return;
    };
    if !can_move_clocks(test) {
        return;
    }
    fleet::quorum_nemesis("ZooKeeper", "zk", &mut servers, "zookeeper_child", TTL);
}
