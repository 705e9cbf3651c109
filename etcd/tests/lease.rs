//! Node-ID leases against real etcd clusters, with real processes: each test starts a
//! throwaway cluster (`atomflake-test-servers`) and runs this test binary again as the lease
//! holders ([`etcd_child`]), which it freezes, kills and cuts off (the harness and the lines
//! holders print: `atomflake_test_servers::fleet`).

#![cfg(not(loom))]

use atomflake::mark::MarkStore;
use atomflake::{Builder, Id};
use atomflake_etcd::Endpoints;
use atomflake_etcd::lease::{self, Lease, LeaseError};
use atomflake_lease::LeaseOptions;
use atomflake_test_servers::clock::step_clock;
use atomflake_test_servers::etcd::{Change, Cluster};
use atomflake_test_servers::fleet::{
    self, Holder, HolderClock, Holders, assert_in_order, assert_successor, count_ids, count_ids_after, field,
    four_nodes, ids, last_refusal, layout, lease_lines,
};
use atomflake_test_servers::postgres::can_move_clocks;
use atomflake_test_servers::proxy::Proxy;
use atomflake_test_servers::{HANG_GUARD, now_ms, wait_until};
use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// The lease time of most tests: etcd's shortest with its default election timeout.
const TTL: Duration = Duration::from_secs(2);

/// The lease time of the holders that outlive a cluster's faults.
const LONG_TTL: Duration = Duration::from_secs(5);

/// How long a holder on lease time `ttl` may mint after a renewal began, by its clock: its
/// hold (the lease time less a fifth, as [`Tenure::lease`](atomflake::mark::Tenure::lease)
/// says), in ms.
fn hold_ms(ttl: Duration) -> u64 {
    u64::try_from(ttl.saturating_sub(ttl / 5).as_millis()).unwrap()
}

fn endpoints(url: &str) -> Endpoints {
    url.parse().unwrap()
}

/// Holders on the cluster at `url`.
fn holders(url: &str) -> Holders {
    Holders::new(url, "etcd_child", TTL)
}

/// A cluster of `size` members for `test`, which steps a holder's clock: `None` (a skip)
/// without etcd or libfaketime.
fn cluster_with_faketime(test: &str, size: usize) -> Option<Cluster> {
    let cluster = Cluster::start(test, size)?;
    can_move_clocks(test).then_some(cluster)
}

/// A holder minting in `namespace` on the precise clock, on a lease time of 5 s, once it
/// has minted 100 IDs.
fn minting_with_a_5_s_lease(cluster: &Cluster, namespace: &str) -> Holder {
    let mut holder = holders(&cluster.url())
        .mint(namespace)
        .clock(HolderClock::Precise)
        .ttl(LONG_TTL)
        .spawn();
    holder.wait_for_ids(100);
    holder
}

/// Not a test of its own: the holder process the tests run.
#[test]
fn etcd_child() {
    fleet::holder::<lease::Etcd>();
}

/// A generator on a lease starts past the node's mark, keeps the mark ahead of its IDs,
/// and on drop stores the exact mark and frees the node; the next claim of the node has a
/// larger revision and starts past every ID of the first.
#[test]
fn a_generator_on_an_etcd_lease_starts_past_the_mark_keeps_it_and_releases_it() {
    let Some(cluster) = Cluster::start("etcd-cycle", 1) else {
        return;
    };
    fleet::generator_cycle::<lease::Etcd>(&endpoints(&cluster.url()), TTL);
}

#[test]
fn sixteen_etcd_holders_get_sixteen_nodes_and_a_seventeenth_is_refused() {
    let Some(cluster) = Cluster::start("etcd-16", 1) else {
        return;
    };
    let url = cluster.url();
    let held = fleet::sixteen_holders::<lease::Etcd>(&holders(&url), &endpoints(&url));
    let revisions: HashSet<Option<i64>> = held.iter().map(|row| row.generation).collect();
    assert_eq!(revisions.len(), 16, "a revision per claim: {held:?}");
}

/// A holder frozen past its lease time loses its node to a successor, and after `SIGCONT`
/// mints nothing more.
#[test]
fn a_frozen_etcd_holder_loses_its_node_and_mints_nothing_more() {
    let Some(cluster) = Cluster::start("etcd-frozen", 1) else {
        return;
    };
    let pause = TTL + Duration::from_secs(1);
    fleet::a_frozen_holder_is_lost::<lease::Etcd>(&holders(&cluster.url()), HolderClock::Precise, pause);
}

#[test]
fn a_killed_etcd_holders_successor_with_a_clock_behind_starts_past_the_mark() {
    let test = "a_killed_etcd_holders_successor_with_a_clock_behind_starts_past_the_mark";
    let Some(cluster) = cluster_with_faketime(test, 1) else {
        return;
    };
    let (url, behind) = (cluster.url(), cluster.file("behind"));
    fleet::a_killed_holders_successor_starts_past_the_mark::<lease::Etcd>(
        &holders(&url),
        &endpoints(&url),
        &behind,
    );
}

/// A lease of several nodes under a sharded generator: all claimed or none, on one etcd
/// lease, each node's mark stored and released.
#[test]
fn a_sharded_generator_keeps_an_etcd_lease_of_several_nodes_all_or_none() {
    let Some(cluster) = Cluster::start("etcd-sharded", 1) else {
        return;
    };
    let url = endpoints(&cluster.url());
    let one = Lease::acquire(&url, &four_nodes(), &LeaseOptions::new("sharded").ttl(TTL)).unwrap();
    assert_eq!(one.node(), 0);
    assert_eq!(
        Lease::acquire(
            &url,
            &four_nodes(),
            &LeaseOptions::new("sharded").ttl(TTL).nodes(4)
        )
        .unwrap_err(),
        LeaseError::TooFewFreeNodes {
            namespace: "sharded".to_owned(),
            count: 4,
            free: 3
        }
    );
    // The refused claim took nothing.
    assert_eq!(
        lease::list(&url, "sharded")
            .unwrap()
            .iter()
            .filter(|row| row.live)
            .count(),
        1
    );
    let three = Lease::acquire(
        &url,
        &four_nodes(),
        &LeaseOptions::new("sharded").ttl(TTL).nodes(3),
    )
    .unwrap();
    assert_eq!(three.nodes(), [1, 2, 3]);
    let nodes = three.nodes().to_vec();
    let sharded = Builder::new(four_nodes())
        .mark_store(three)
        .build_sharded(nodes)
        .unwrap();
    let minted: Vec<Id> = (0..3_000).map(|_| sharded.next_id()).collect();
    let used: HashSet<u64> = minted.iter().map(|&id| four_nodes().decode(id).node).collect();
    assert!(used.is_subset(&HashSet::from([1, 2, 3])), "{used:?}");
    let rows = lease::list(&url, "sharded").unwrap();
    let marks: Vec<u64> = rows
        .iter()
        .filter(|row| row.node > 0)
        .map(|row| row.high_water_ms)
        .collect();
    assert!(marks.iter().all(|&mark| mark == marks[0] && mark > 0), "{rows:?}");
    drop(sharded);
    drop(one);
    assert!(lease::list(&url, "sharded").unwrap().iter().all(|row| !row.live));
}

/// A three-member cluster whose leader is killed while a holder mints, then restarted: the
/// holder keeps its claim (a new leader gives every etcd lease its full time again), pauses
/// at most while no member can renew, and mints no ID twice.
#[test]
fn an_etcd_lease_outlives_its_leader_killed_and_a_member_restarted() {
    let Some(mut cluster) = Cluster::start("etcd-leader", 3) else {
        return;
    };
    let mut holder = minting_with_a_5_s_lease(&cluster, "leader");
    let leader = cluster.leader().expect("a leader");
    cluster.kill(leader);
    let killed = now_ms();
    // A new leader is elected among the other two.
    let new_leader = cluster.wait_leader();
    assert_ne!(new_leader, leader);
    holder.wait_for(HANG_GUARD, |seen| count_ids_after(seen, killed + 1_000) >= 100);
    cluster.start_member(leader);
    cluster.wait_healthy();
    let restarted = now_ms();
    holder.wait_for(HANG_GUARD, |seen| count_ids_after(seen, restarted + 1_000) >= 100);
    let lines = holder.finish_killed();
    assert_in_order(&lines);
    assert!(
        lease_lines(&lines).iter().all(|(_, text)| !text.contains("lost")),
        "{:?}",
        lease_lines(&lines)
    );
    println!(
        "minted {} ids; leader {leader} killed, {new_leader} elected; refusals {:?}",
        count_ids(&lines),
        lease_lines(&lines)
    );
}

/// A holder whose connections to etcd are cut stops minting at its local deadline, before
/// etcd expires its lease; a successor then takes the node and starts past every ID of the
/// first; when the connection comes back, the first finds its claim lost.
#[test]
fn a_holder_cut_off_from_etcd_stops_before_its_successor_starts() {
    let Some(cluster) = Cluster::start("etcd-cut", 1) else {
        return;
    };
    let proxy = Proxy::start(cluster.client_port(0));
    let through_proxy = format!("etcd://127.0.0.1:{}", proxy.port());
    let mut cut_off = holders(&through_proxy)
        .mint("cut")
        .clock(HolderClock::Precise)
        .spawn();
    let node = cut_off.node();
    cut_off.wait_for_ids(100);
    proxy.cut();
    let cut = now_ms();
    let successor = holders(&cluster.url())
        .mint("cut")
        .node(node)
        .clock(HolderClock::Precise)
        .count(300)
        .spawn()
        .finish(fleet::CLAIM_GUARD);
    cut_off.wait_for(HANG_GUARD, |seen| {
        lease_lines(seen)
            .iter()
            .any(|(_, text)| text.contains("local deadline"))
    });
    proxy.restore();
    let first = cut_off.finish(HANG_GUARD);
    let first_ids: Vec<(u64, u64)> = ids(&first);
    // The last renewal began before the cut; the holder may mint for 0.8 of the lease time
    // after it, by its clock: the time in its IDs, however late the process ran.
    let deadline = cut + hold_ms(TTL);
    let late: Vec<&(u64, u64)> = first_ids
        .iter()
        .filter(|(id, _)| layout().decode(Id::new(*id)).unix_ms >= deadline)
        .collect();
    assert!(late.is_empty(), "minted past the local deadline: {late:?}");
    assert_successor(&first, &successor);
    let why = last_refusal(&first);
    assert!(why.contains("is lost"), "{:?}", lease_lines(&first));
}

/// The store's own errors reach a minting thread whole: a lost claim is permanent.
#[test]
fn a_revoked_claim_is_lost_for_good() {
    let Some(cluster) = Cluster::start("etcd-revoked", 1) else {
        return;
    };
    // Expire the first claim behind its holder's back: wait out the lease time without
    // renewing.
    let expire = || std::thread::sleep(TTL + Duration::from_millis(1_500));
    fleet::a_claim_ended_behind_its_back::<lease::Etcd>(&endpoints(&cluster.url()), TTL, expire);
}

/// The fleet of [`fleet::nemesis`] on 2 s leases against a three-member cluster reached
/// through proxies, under its faults and those of [`EtcdFaults`]. The history must show
/// no ID twice, each process's IDs strictly increasing, and on each node every holder's IDs
/// past every earlier holder's; etcd's history, no mark that went down but at a release.
/// `ATOMFLAKE_NEMESIS_SEED` replays a schedule's choices; `ATOMFLAKE_NEMESIS_STEPS` sets its
/// length.
#[test]
fn an_etcd_fleet_under_a_seeded_nemesis_never_mints_an_id_twice() {
    let test = "an_etcd_fleet_under_a_seeded_nemesis_never_mints_an_id_twice";
    let Some(mut cluster) = cluster_with_faketime(test, 3) else {
        return;
    };
    let run = fleet::quorum_nemesis("etcd", "etcd", &mut cluster, "etcd_child", TTL);
    let seed = run.seed;
    cluster.wait_healthy();
    let changes = cluster.history("/atomflake/lease/nemesis/");
    let stores = assert_marks_never_went_down("nemesis", &changes);
    println!("seed {seed}: {stores} mark writes in etcd's history, none down but at a release");
}

/// Panics when a node's mark in `changes` (etcd's history of `namespace`) went down other
/// than at a release: a write of the mark in the revision that deleted the node's claim
/// key. The number of mark writes.
fn assert_marks_never_went_down(namespace: &str, changes: &[Change]) -> usize {
    let marks = format!("/atomflake/lease/{namespace}/mark/");
    let holders = format!("/atomflake/lease/{namespace}/holder/");
    let mut last: HashMap<&str, u64> = HashMap::new();
    let mut writes = 0;
    for change in changes {
        let Some(node) = change.key.strip_prefix(&marks) else {
            continue;
        };
        writes += 1;
        let value: u64 = change
            .value
            .as_deref()
            .unwrap_or_else(|| panic!("node {node}'s mark was deleted at revision {}", change.revision))
            .parse()
            .unwrap();
        if let Some(&before) = last.get(node)
            && value < before
        {
            let holder = format!("{holders}{node}");
            let released = changes.iter().any(|other| {
                other.revision == change.revision && other.key == holder && other.value.is_none()
            });
            assert!(
                released,
                "node {node}'s mark went down from {before} to {value} at revision {}, not at a release",
                change.revision
            );
        }
        last.insert(node, value);
    }
    writes
}

/// The values node `node`'s mark took in `changes`, in order.
fn mark_values(namespace: &str, node: u64, changes: &[Change]) -> Vec<u64> {
    let key = format!("/atomflake/lease/{namespace}/mark/{node:020}");
    changes
        .iter()
        .filter(|change| change.key == key)
        .map(|change| change.value.as_deref().unwrap().parse().unwrap())
        .collect()
}

/// A store that etcd applies after a later store of the same holder (the client gave up on
/// it, held on its way to a member, and sent it to the next) finds the mark moved on and
/// changes nothing: a node's mark never goes down while its claim holds.
#[test]
fn a_store_applied_after_a_later_one_leaves_the_mark_where_it_is() {
    let Some(cluster) = Cluster::start("etcd-late", 3) else {
        return;
    };
    let proxies: Vec<Proxy> = (0..3).map(|i| Proxy::start(cluster.client_port(i))).collect();
    let ports: Vec<String> = proxies
        .iter()
        .map(|proxy| format!("127.0.0.1:{}", proxy.port()))
        .collect();
    let url = endpoints(&format!("etcd://{}", ports.join(",")));
    let mut lease = Lease::acquire(&url, &layout(), &LeaseOptions::new("late").ttl(TTL)).unwrap();
    let node = lease.node();
    let base = now_ms();
    // Through the first member, which answered the claim.
    lease.store(base + 1_000).unwrap();
    proxies[0].hold();
    // Held on its way to the first member, given up on, and sent to the second.
    lease.store(base + 2_000).unwrap();
    lease.store(base + 3_000).unwrap();
    let direct = endpoints(&cluster.url());
    let mark = || lease::list(&direct, "late").unwrap()[0].high_water_ms;
    assert_eq!(mark(), base + 3_000);
    let answered = proxies[0].answered();
    proxies[0].deliver();
    // The first member answers the held store once it has applied it (or found it stale):
    // then the mark is what it will stay.
    wait_until(
        "the held store got no answer",
        Duration::from_millis(10),
        || proxies[0].answered() != answered,
        String::new,
    );
    for _ in 0..10 {
        assert_eq!(mark(), base + 3_000, "a late store moved the mark");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The holder goes on storing and releases with the exact mark.
    lease.store(base + 4_000).unwrap();
    lease.finish(base + 3_500);
    lease.release().unwrap();
    let changes = cluster.history("/atomflake/lease/late/");
    assert_eq!(
        mark_values("late", node, &changes),
        [1_000, 2_000, 3_000, 4_000, 3_500].map(|ms| base + ms)
    );
    assert_marks_never_went_down("late", &changes);
}

/// A store that finds the mark moved on while its claim holds (a store of its own applied
/// late: here a write straight to etcd) reads it back in the same transaction: it is done
/// when the mark is at or past its own, and otherwise writes its own over it; a release
/// does the same.
#[test]
fn a_store_that_finds_the_mark_moved_on_reads_it_back() {
    let Some(cluster) = Cluster::start("etcd-moved", 1) else {
        return;
    };
    let url = endpoints(&cluster.url());
    let mut lease = Lease::acquire(&url, &layout(), &LeaseOptions::new("moved").ttl(TTL)).unwrap();
    let node = lease.node();
    let key = format!("/atomflake/lease/moved/mark/{node:020}");
    let base = now_ms();
    lease.store(base + 1_000).unwrap();
    cluster.put(&key, &(base + 5_000).to_string());
    lease.store(base + 2_000).unwrap();
    lease.store(base + 6_000).unwrap();
    cluster.put(&key, &(base + 6_500).to_string());
    lease.finish(base + 5_500);
    lease.release().unwrap();
    let rows = lease::list(&url, "moved").unwrap();
    assert!(!rows[0].live, "{rows:?}");
    let changes = cluster.history("/atomflake/lease/moved/");
    assert_eq!(
        mark_values("moved", node, &changes),
        [1_000, 5_000, 6_000, 6_500, 5_500].map(|ms| base + ms)
    );
}

/// A holder whose clock ran a minute ahead leaves its node's mark a minute ahead: a
/// claimant with a right clock passes that node over and says so, instead of taking it and
/// waiting a minute.
#[test]
fn a_free_node_with_a_mark_far_ahead_is_passed_over() {
    /// How far ahead the first holder's clock runs.
    const AHEAD_MS: u64 = 60_000;
    let test = "a_free_node_with_a_mark_far_ahead_is_passed_over";
    let Some(cluster) = cluster_with_faketime(test, 1) else {
        return;
    };
    let url = cluster.url();
    let ahead = cluster.file("ahead");
    step_clock(&ahead, &format!("+{}", AHEAD_MS / 1_000));
    let spawned = now_ms();
    let ran_ahead = holders(&url)
        .mint("ahead")
        .count(10)
        .faketime(&ahead)
        .spawn()
        .finish(fleet::CLAIM_GUARD);
    assert_eq!(field(&ran_ahead, "node ").split(' ').next(), Some("0"));
    let mark = lease::list(&endpoints(&url), "ahead").unwrap()[0].high_water_ms;
    // Every ID was minted after `spawned` on a clock the step ahead, and the mark is past
    // every ID.
    assert!(
        mark > spawned + AHEAD_MS,
        "mark {mark}, not past {spawned} ms and the step of {AHEAD_MS} ms"
    );
    let lease = Lease::acquire(&endpoints(&url), &layout(), &LeaseOptions::new("ahead").ttl(TTL)).unwrap();
    assert_eq!(lease.node(), 1);
    assert_eq!(
        lease
            .passed_over()
            .iter()
            .map(|p| (p.node, p.high_water_ms))
            .collect::<Vec<_>>(),
        [(0, mark)]
    );
    // Asked for by number, the node is claimed whatever its mark.
    let asked = Lease::acquire(
        &endpoints(&url),
        &layout(),
        &LeaseOptions::new("ahead").ttl(TTL).node(0),
    )
    .unwrap();
    assert_eq!(asked.high_water_ms(), mark);
}

/// The whole cluster (one member) killed and started again while a holder mints: the
/// holder stops at its local deadline while etcd is down, and resumes on the same claim once
/// it is back (etcd keeps leases on disk and gives each its full time again at start).
#[test]
fn a_holder_waits_out_its_whole_cluster_restarting_and_keeps_its_claim() {
    let Some(mut cluster) = Cluster::start("etcd-restart", 1) else {
        return;
    };
    let mut holder = minting_with_a_5_s_lease(&cluster, "restart");
    let revision = field(&holder.seen, "node ").to_owned();
    cluster.kill(0);
    let down = now_ms();
    std::thread::sleep(Duration::from_secs(6));
    let up = now_ms();
    cluster.start_member(0);
    cluster.wait_healthy();
    holder.wait_for(HANG_GUARD, |seen| count_ids_after(seen, up) >= 100);
    let lines = holder.finish_killed();
    let minted = ids(&lines);
    // The last renewal began before `down`: a hold later at most by the holder's clock, the
    // time in its IDs, minting stops until etcd is back.
    let fence = down + hold_ms(LONG_TTL);
    let inside: Vec<&(u64, u64)> = minted
        .iter()
        .filter(|(id, _)| (fence..up).contains(&layout().decode(Id::new(*id)).unix_ms))
        .collect();
    assert!(inside.is_empty(), "minted past the deadline: {inside:?}");
    assert_in_order(&lines);
    let refusals = lease_lines(&lines);
    assert!(
        refusals.iter().all(|(_, text)| !text.contains("lost")),
        "{refusals:?}"
    );
    let rows = lease::list(&endpoints(&cluster.url()), "restart").unwrap();
    assert_eq!(
        format!("{} {}", rows[0].node, rows[0].generation.unwrap_or(0)),
        revision,
        "the same claim throughout"
    );
}

/// A lease of 42 nodes claims, stores and releases in single transactions; 43 would pass
/// etcd's default of 128 operations in one, and is refused before anything is sent.
#[test]
fn a_lease_holds_at_most_the_nodes_one_etcd_transaction_fits() {
    let unreachable = endpoints("etcd://127.0.0.1:9");
    assert_eq!(
        Lease::acquire(
            &unreachable,
            &atomflake::Layout::TWITTER,
            &LeaseOptions::new("wide").nodes(43)
        )
        .unwrap_err(),
        LeaseError::Nodes(atomflake_lease::NodesError::CountOutOfRange { count: 43, max: 42 })
    );
    let Some(cluster) = Cluster::start("etcd-wide", 1) else {
        return;
    };
    let url = endpoints(&cluster.url());
    let mut lease = Lease::acquire(
        &url,
        &atomflake::Layout::TWITTER,
        &LeaseOptions::new("wide").ttl(TTL).nodes(42),
    )
    .unwrap();
    assert_eq!(lease.nodes(), (0..42).collect::<Vec<_>>());
    let mark = now_ms() + 5_000;
    lease.store(mark).unwrap();
    let rows = lease::list(&url, "wide").unwrap();
    assert!(
        rows.len() == 42 && rows.iter().all(|row| row.live && row.high_water_ms == mark),
        "{rows:?}"
    );
    lease.release().unwrap();
    assert!(lease::list(&url, "wide").unwrap().iter().all(|row| !row.live));
}
