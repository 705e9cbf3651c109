//! Node-ID leases against real etcd clusters, with real processes: each test starts a
//! throwaway cluster (`atomflake-test-servers`) and runs this test binary again as the lease
//! holders ([`etcd_child`]), which it freezes, kills and cuts off (the harness and the lines
//! holders print: `atomflake_test_servers::fleet`).

#![cfg(not(loom))]

use atomflake::mark::{MarkStore, StoreErrorKind};
use atomflake::{Builder, Id, Layout, MonotonicClock, PreciseClock};
use atomflake_etcd::Endpoints;
use atomflake_etcd::lease::{self, Lease, LeaseError, LeaseOptions};
use atomflake_test_servers::etcd::{Change, Cluster};
use atomflake_test_servers::fleet::{
    Dice, Holder, assert_unique, check_fleet_history, count_ids, field, ids, lease_lines, mint, tail,
};
use atomflake_test_servers::now_ms;
use atomflake_test_servers::postgres::{LIBFAKETIME, has_libfaketime, step_clock};
use atomflake_test_servers::proxy::Proxy;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// Twitter's epoch and tick with a 4-bit node field: 16 nodes.
fn layout() -> Layout {
    Layout::builder()
        .timestamp_bits(41)
        .node_bits(4)
        .sequence_bits(12)
        .epoch_ms(1_288_834_974_657)
        .build()
        .unwrap()
}

/// Twitter's epoch and tick with a 2-bit node field: 4 nodes.
fn four_nodes() -> Layout {
    Layout::builder()
        .timestamp_bits(41)
        .node_bits(2)
        .sequence_bits(12)
        .epoch_ms(1_288_834_974_657)
        .build()
        .unwrap()
}

/// The lease time of most tests: etcd's shortest with its default election timeout.
const TTL: Duration = Duration::from_secs(2);

fn endpoints(url: &str) -> Endpoints {
    url.parse().unwrap()
}

/// The environment of a child: what it does, where, and how.
const MODE: &str = "ATOMFLAKE_ETCD_CHILD";
const URL: &str = "ATOMFLAKE_ETCD_URL";
const NAMESPACE: &str = "ATOMFLAKE_ETCD_NAMESPACE";
const NODE: &str = "ATOMFLAKE_ETCD_NODE";
/// `precise` for [`PreciseClock`], otherwise the default clock.
const CLOCK: &str = "ATOMFLAKE_ETCD_CLOCK";
const COUNT: &str = "ATOMFLAKE_ETCD_COUNT";
const TTL_S: &str = "ATOMFLAKE_ETCD_TTL_S";
/// `four` for a 2-bit node field; otherwise [`layout`].
const LAYOUT: &str = "ATOMFLAKE_ETCD_LAYOUT";
/// Set: wait (up to 30 s) for a node when none is free or etcd does not answer.
const WAIT: &str = "ATOMFLAKE_ETCD_WAIT";

/// Runs this test binary as a holder on the cluster at `url`: `mode` is `hold` (claim, then
/// wait for stdin to close) or `mint` (claim, then mint until `COUNT` IDs or the lease is
/// lost).
fn spawn(url: &str, namespace: &str, mode: &str, env: &[(&str, &str)]) -> Holder {
    let mut all = vec![(MODE, mode), (URL, url), (NAMESPACE, namespace)];
    all.extend_from_slice(env);
    Holder::spawn("etcd_child", &all)
}

/// The environment that runs a child on the clock in `file` (libfaketime).
fn faketime(file: &str) -> [(&'static str, &str); 4] {
    [
        ("LD_PRELOAD", LIBFAKETIME),
        ("FAKETIME_TIMESTAMP_FILE", file),
        ("FAKETIME_NO_CACHE", "1"),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ]
}

/// Not a test of its own: the holder process the tests run. Without [`MODE`] it returns at
/// once.
#[test]
fn etcd_child() {
    let Ok(mode) = std::env::var(MODE) else {
        return;
    };
    // The test harness has written "test etcd_child ... " without a newline.
    println!();
    let env = |name| std::env::var(name).unwrap();
    let cluster = endpoints(&env(URL));
    let ttl = std::env::var(TTL_S).map_or(TTL, |s| Duration::from_secs(s.parse().unwrap()));
    let mut options = LeaseOptions::new(env(NAMESPACE)).ttl(ttl);
    if let Ok(node) = std::env::var(NODE) {
        options = options.node(node.parse().unwrap());
    }
    let layout = if std::env::var(LAYOUT).as_deref() == Ok("four") {
        four_nodes()
    } else {
        layout()
    };
    let wait_for_any = std::env::var(WAIT).is_ok();
    let start = Instant::now();
    let lease = loop {
        match Lease::acquire(&cluster, &layout, &options) {
            Ok(lease) => break lease,
            // A successor asked for a node, or waits for any: wait for a holder's etcd
            // lease to expire.
            Err(LeaseError::NodeTaken { .. }) if start.elapsed() < Duration::from_secs(20) => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(LeaseError::NoFreeNode { .. } | LeaseError::Engine(_))
                if wait_for_any && start.elapsed() < Duration::from_secs(30) =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(error) => {
                println!("refused {error}");
                return;
            }
        }
    };
    println!("node {} {}", lease.node(), lease.generation());
    println!("claimed in {} ms", start.elapsed().as_millis());
    match mode.as_str() {
        "hold" => {
            let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
            drop(lease);
        }
        "mint" => {
            let count = std::env::var(COUNT).map_or(usize::MAX, |count| count.parse().unwrap());
            let node = lease.node();
            if std::env::var(CLOCK).as_deref() == Ok("precise") {
                let builder = Builder::with_clock(layout, PreciseClock::new()).mark_store(lease);
                mint(&builder.build(node).unwrap(), count);
            } else {
                let builder = Builder::with_clock(layout, MonotonicClock::new()).mark_store(lease);
                mint(&builder.build(node).unwrap(), count);
            }
        }
        other => panic!("unknown mode {other}"),
    }
}

/// A generator on a lease starts past the node's mark, keeps the mark ahead of its IDs,
/// and on drop stores the exact mark and frees the node; the next claim of the node has a
/// larger revision and starts past every ID of the first.
#[test]
fn a_generator_on_an_etcd_lease_starts_past_the_mark_keeps_it_and_releases_it() {
    let Some(cluster) = Cluster::start("etcd-cycle", 1) else {
        return;
    };
    let url = endpoints(&cluster.url());
    let options = LeaseOptions::new("cycle").ttl(TTL).holder("test-holder");
    let lease = Lease::acquire(&url, &layout(), &options).unwrap();
    assert_eq!((lease.node(), lease.high_water_ms()), (0, 0));
    assert_eq!(
        lease.describe(),
        "the high-water mark of node 0 in etcd lease namespace \"cycle\""
    );
    let first_revision = lease.generation();
    let generator = Builder::new(layout()).mark_store(lease).build(0).unwrap();
    let first: Vec<Id> = (0..1_000).map(|_| generator.next_id()).collect();
    let rows = lease::list(&url, "cycle").unwrap();
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    assert!(
        row.live && row.holder.as_deref() == Some("test-holder"),
        "{row:?}"
    );
    assert_eq!(row.revision, Some(first_revision));
    let last_time = layout().decode(*first.last().unwrap()).unix_ms;
    assert!(
        row.high_water_ms > last_time,
        "mark {} ids at {last_time}",
        row.high_water_ms
    );
    drop(generator);

    let rows = lease::list(&url, "cycle").unwrap();
    assert!(!rows[0].live && rows[0].holder.is_none(), "{rows:?}");
    // The exact mark: the end of the last ID's tick, not the mark stored ahead of need.
    let finished = rows[0].high_water_ms;
    assert!(finished > last_time && finished < row.high_water_ms, "{finished}");

    let lease = Lease::acquire(&url, &layout(), &options).unwrap();
    assert_eq!((lease.node(), lease.high_water_ms()), (0, finished));
    assert!(lease.generation() > first_revision);
    let generator = Builder::new(layout()).mark_store(lease).build(0).unwrap();
    let next = generator.next_id();
    assert!(next > *first.last().unwrap());
    assert_unique(
        &first
            .iter()
            .map(|id| id.get())
            .chain([next.get()])
            .collect::<Vec<_>>(),
    );
}

#[test]
fn sixteen_etcd_holders_get_sixteen_nodes_and_a_seventeenth_is_refused() {
    let Some(cluster) = Cluster::start("etcd-16", 1) else {
        return;
    };
    let url = cluster.url();
    let mut holders: Vec<Holder> = (0..16).map(|_| spawn(&url, "fleet", "hold", &[])).collect();
    let nodes: HashSet<u64> = holders.iter_mut().map(Holder::node).collect();
    assert_eq!(nodes, (0..16).collect());
    let seventeenth = spawn(&url, "fleet", "hold", &[]).close();
    assert_eq!(
        field(&seventeenth, "refused "),
        "no free node in etcd lease namespace \"fleet\": every node of 0..=15 is held by a live lease"
    );
    // Another namespace is another node space.
    let mut other = spawn(&url, "other", "hold", &[]);
    assert_eq!(other.node(), 0);
    other.close();
    let rows = lease::list(&endpoints(&url), "fleet").unwrap();
    assert_eq!(rows.len(), 16);
    assert!(rows.iter().all(|row| row.live), "{rows:?}");
    let revisions: HashSet<i64> = rows.iter().filter_map(|row| row.revision).collect();
    assert_eq!(revisions.len(), 16, "a revision per claim");
    for holder in holders {
        holder.close();
    }
    // Released on exit: every node free at once.
    let rows = lease::list(&endpoints(&url), "fleet").unwrap();
    assert!(rows.iter().all(|row| !row.live), "{rows:?}");
}

/// A holder frozen past its lease time loses its node to a successor, and after `SIGCONT`
/// mints nothing more.
#[test]
fn a_frozen_etcd_holder_loses_its_node_and_mints_nothing_more() {
    let Some(cluster) = Cluster::start("etcd-frozen", 1) else {
        return;
    };
    let url = cluster.url();
    let mut frozen = spawn(&url, "frozen", "mint", &[(CLOCK, "precise")]);
    let node = frozen.node();
    let revision: i64 = field(&frozen.seen, "node ")
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    frozen.wait_for(Duration::from_secs(20), |seen| count_ids(seen) >= 100);
    frozen.signal("-STOP");
    let stopped = now_ms();
    std::thread::sleep(TTL + Duration::from_secs(1));
    let node_text = node.to_string();
    let successor = spawn(
        &url,
        "frozen",
        "mint",
        &[(NODE, &node_text), (CLOCK, "precise"), (COUNT, "300")],
    )
    .finish(Duration::from_secs(30));
    let successor_revision: i64 = field(&successor, "node ")
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!(successor_revision > revision);
    frozen.signal("-CONT");
    let frozen = frozen.finish(Duration::from_secs(20));

    let before: Vec<u64> = ids(&frozen).into_iter().map(|(id, _)| id).collect();
    let after_resume: Vec<u64> = before
        .iter()
        .copied()
        .filter(|id| layout().decode(Id::new(*id)).unix_ms > stopped + 1_000)
        .collect();
    assert_eq!(after_resume, [] as [u64; 0], "minted after SIGCONT");
    let successor_ids: Vec<u64> = ids(&successor).into_iter().map(|(id, _)| id).collect();
    assert_eq!(successor_ids.len(), 300);
    let last = *before.iter().max().unwrap();
    assert!(
        successor_ids[0] > last,
        "successor's first {} vs {last}",
        successor_ids[0]
    );
    assert_unique(&before.iter().chain(&successor_ids).copied().collect::<Vec<_>>());
    let refusals = lease_lines(&frozen);
    let (_, last_refusal) = refusals.last().unwrap_or_else(|| panic!("{:?}", tail(&frozen)));
    assert_eq!(
        *last_refusal,
        format!(
            "etcd lease on node {node} of namespace \"frozen\" is lost: etcd no longer holds this \
             holder's claim (generation {revision}); minting has ended"
        )
    );
}

#[test]
fn a_killed_etcd_holders_successor_with_a_clock_behind_starts_past_the_mark() {
    let test = "a_killed_etcd_holders_successor_with_a_clock_behind_starts_past_the_mark";
    let Some(cluster) = Cluster::start("etcd-killed", 1) else {
        return;
    };
    if !has_libfaketime(test) {
        return;
    }
    let url = cluster.url();
    let mut killed = spawn(&url, "killed", "mint", &[]);
    let node = killed.node();
    killed.wait_for(Duration::from_secs(20), |seen| count_ids(seen) >= 100);
    killed.signal("-KILL");
    let killed = killed.finish(Duration::from_secs(10));
    let behind = cluster.file("behind");
    std::fs::write(&behind, "-3s").unwrap();
    let behind_text = behind.display().to_string();
    let node_text = node.to_string();
    let mut env = vec![(NODE, node_text.as_str()), (COUNT, "100")];
    env.extend(faketime(&behind_text));
    let mut successor = spawn(&url, "killed", "mint", &env);
    successor.wait_for(Duration::from_secs(30), |seen| {
        seen.iter().any(|line| line.starts_with("clock "))
    });
    let real = now_ms();
    let successor = successor.finish(Duration::from_secs(30));
    let clock: u64 = field(&successor, "clock ").parse().unwrap();
    assert!(
        real - clock > 2_500,
        "the successor's clock is {} ms behind",
        real - clock
    );
    let mark = lease::list(&endpoints(&url), "killed").unwrap()[0].high_water_ms;
    let killed_ids: Vec<u64> = ids(&killed).into_iter().map(|(id, _)| id).collect();
    let successor_ids: Vec<u64> = ids(&successor).into_iter().map(|(id, _)| id).collect();
    let last = *killed_ids.iter().max().unwrap();
    assert!(
        successor_ids[0] > last,
        "successor's first {} vs {last}",
        successor_ids[0]
    );
    assert!(layout().decode(Id::new(last)).unix_ms < mark);
    assert_unique(
        &killed_ids
            .iter()
            .chain(&successor_ids)
            .copied()
            .collect::<Vec<_>>(),
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
    let url = cluster.url();
    let mut holder = spawn(&url, "leader", "mint", &[(CLOCK, "precise"), (TTL_S, "5")]);
    holder.node();
    holder.wait_for(Duration::from_secs(20), |seen| count_ids(seen) >= 100);
    let leader = cluster.leader().expect("a leader");
    cluster.kill(leader);
    let killed = now_ms();
    // A new leader is elected among the other two.
    let start = Instant::now();
    let new_leader = loop {
        if let Some(new_leader) = cluster.leader() {
            break new_leader;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no new leader:\n{}",
            cluster.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_ne!(new_leader, leader);
    holder.wait_for(Duration::from_secs(20), |seen| {
        ids(seen)
            .iter()
            .filter(|(_, stamp)| *stamp > killed + 1_000)
            .count()
            >= 100
    });
    cluster.start_member(leader);
    cluster.wait_healthy();
    let restarted = now_ms();
    holder.wait_for(Duration::from_secs(20), |seen| {
        ids(seen)
            .iter()
            .filter(|(_, stamp)| *stamp > restarted + 1_000)
            .count()
            >= 100
    });
    let lines = holder.finish_killed();
    let minted: Vec<u64> = ids(&lines).into_iter().map(|(id, _)| id).collect();
    assert!(minted.windows(2).all(|pair| pair[0] < pair[1]), "ids in order");
    assert_unique(&minted);
    assert!(
        lease_lines(&lines).iter().all(|(_, text)| !text.contains("lost")),
        "{:?}",
        lease_lines(&lines)
    );
    println!(
        "minted {} ids; leader {leader} killed, {new_leader} elected; refusals {:?}",
        minted.len(),
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
    let mut cut_off = spawn(&through_proxy, "cut", "mint", &[(CLOCK, "precise")]);
    let node = cut_off.node();
    cut_off.wait_for(Duration::from_secs(20), |seen| count_ids(seen) >= 100);
    proxy.cut();
    let cut = now_ms();
    let node_text = node.to_string();
    let successor = spawn(
        &cluster.url(),
        "cut",
        "mint",
        &[(NODE, &node_text), (CLOCK, "precise"), (COUNT, "300")],
    );
    let successor = successor.finish(Duration::from_secs(30));
    cut_off.wait_for(Duration::from_secs(10), |seen| {
        lease_lines(seen)
            .iter()
            .any(|(_, text)| text.contains("local deadline"))
    });
    proxy.restore();
    let first = cut_off.finish(Duration::from_secs(20));
    let first_ids: Vec<(u64, u64)> = ids(&first);
    // The last renewal began before the cut; the holder may mint for 0.8 of the lease time
    // after it, by its clock: the time in its IDs, however late the process ran.
    let deadline = cut + u64::try_from(TTL.saturating_sub(TTL / 5).as_millis()).unwrap();
    let late: Vec<&(u64, u64)> = first_ids
        .iter()
        .filter(|(id, _)| layout().decode(Id::new(*id)).unix_ms >= deadline)
        .collect();
    assert!(late.is_empty(), "minted past the local deadline: {late:?}");
    let successor_ids: Vec<u64> = ids(&successor).into_iter().map(|(id, _)| id).collect();
    let last = first_ids.iter().map(|(id, _)| *id).max().unwrap();
    assert!(successor_ids[0] > last);
    let all: Vec<u64> = first_ids.iter().map(|(id, _)| *id).chain(successor_ids).collect();
    assert_unique(&all);
    let (_, last_refusal) = *lease_lines(&first).last().unwrap();
    assert!(last_refusal.contains("is lost"), "{:?}", lease_lines(&first));
}

/// The store's own errors reach a minting thread whole: a lost claim is permanent.
#[test]
fn a_revoked_claim_is_lost_for_good() {
    let Some(cluster) = Cluster::start("etcd-revoked", 1) else {
        return;
    };
    let url = endpoints(&cluster.url());
    let mut lease = Lease::acquire(&url, &layout(), &LeaseOptions::new("revoked").ttl(TTL)).unwrap();
    lease.store(now_ms() + 1_500).unwrap();
    // A second claim of the node can only follow the first's end: here its release.
    let revision = lease.generation();
    let other = Lease::acquire(&url, &layout(), &LeaseOptions::new("revoked").ttl(TTL).node(0)).unwrap_err();
    assert_eq!(
        other,
        LeaseError::NodeTaken {
            namespace: "revoked".to_owned(),
            node: 0
        }
    );
    // Expire the first claim behind its holder's back: wait out the lease time without
    // renewing.
    std::thread::sleep(TTL + Duration::from_millis(1_500));
    let successor = Lease::acquire(&url, &layout(), &LeaseOptions::new("revoked").ttl(TTL).node(0)).unwrap();
    assert!(successor.generation() > revision);
    let error = lease.store(now_ms() + 1_500).unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Lost);
    assert_eq!(
        error.downcast_ref::<LeaseError>(),
        Some(&LeaseError::Lost {
            namespace: "revoked".to_owned(),
            node: 0,
            generation: revision
        })
    );
    assert_eq!(
        lease.release().unwrap_err(),
        LeaseError::Lost {
            namespace: "revoked".to_owned(),
            node: 0,
            generation: revision
        }
    );
    // The successor's claim and mark are untouched by the first holder's attempts.
    let rows = lease::list(&url, "revoked").unwrap();
    assert!(
        rows[0].live && rows[0].revision == Some(successor.generation()),
        "{rows:?}"
    );
    assert_eq!(rows[0].high_water_ms, successor.high_water_ms());
}

/// Four nodes, a fleet of minting processes on 2 s leases against a three-member cluster
/// reached through proxies, and a nemesis that, for each step of a seeded schedule, does
/// one of: freeze a holder with `SIGSTOP` past its lease (and start a successor), kill one
/// with `SIGKILL` (and start a successor), cut every connection to etcd, kill the leader
/// and start it again, freeze a member, step one holder's clock forward or back. Every ID
/// is recorded with its process; the history must show no ID twice, each process's IDs
/// strictly increasing, and on each node every holder's IDs past every earlier holder's.
/// `ATOMFLAKE_NEMESIS_SEED` replays a schedule's choices; `ATOMFLAKE_NEMESIS_STEPS` sets its
/// length.
#[test]
fn an_etcd_fleet_under_a_seeded_nemesis_never_mints_an_id_twice() {
    let test = "an_etcd_fleet_under_a_seeded_nemesis_never_mints_an_id_twice";
    let Some(mut cluster) = Cluster::start("etcd-nemesis", 3) else {
        return;
    };
    if !has_libfaketime(test) {
        return;
    }
    let proxies: Vec<Proxy> = (0..3).map(|i| Proxy::start(cluster.client_port(i))).collect();
    let url = format!(
        "etcd://{}",
        proxies
            .iter()
            .map(|proxy| format!("127.0.0.1:{}", proxy.port()))
            .collect::<Vec<_>>()
            .join(",")
    );
    let seed = std::env::var("ATOMFLAKE_NEMESIS_SEED").map_or_else(
        |_| now_ms() ^ u64::from(std::process::id()),
        |seed| seed.parse().unwrap(),
    );
    let steps: u64 = std::env::var("ATOMFLAKE_NEMESIS_STEPS").map_or(24, |steps| steps.parse().unwrap());
    println!("etcd nemesis seed {seed} ({steps} steps): replay with ATOMFLAKE_NEMESIS_SEED={seed}");
    let mut dice = Dice(seed | 1);
    let mut fleet: Vec<Member> = (0..4)
        .map(|serial| Member::spawn(&url, &cluster, serial, &mut dice))
        .collect();
    for member in &mut fleet {
        member
            .holder
            .wait_for(Duration::from_secs(30), |seen| count_ids(seen) >= 10);
    }
    let mut schedule = Vec::new();
    let mut down: Option<(usize, Instant)> = None;
    let mut frozen_member: Option<(usize, Instant)> = None;
    for step in 0..steps {
        for member in &mut fleet {
            if member.frozen_until.is_some_and(|until| Instant::now() >= until) {
                member.holder.signal("-CONT");
                member.frozen_until = None;
            }
            while let Ok(line) = member.holder.lines.try_recv() {
                member.holder.seen.push(line);
            }
        }
        if let Some((member, _)) = down.take_if(|(_, until)| Instant::now() >= *until) {
            cluster.start_member(member);
        }
        if let Some((member, _)) = frozen_member.take_if(|(_, until)| Instant::now() >= *until) {
            cluster.signal(member, "-CONT");
        }
        let strike = Strike {
            url: &url,
            cluster: &mut cluster,
            proxies: &proxies,
            down: &mut down,
            frozen_member: &mut frozen_member,
        };
        let fault = strike.run(&mut fleet, &mut dice);
        println!("step {step}: {fault}");
        schedule.push(fault);
        std::thread::sleep(Duration::from_millis(300 + dice.below(1_200)));
    }
    for member in &mut fleet {
        if member.frozen_until.take().is_some() {
            member.holder.signal("-CONT");
        }
    }
    if let Some((member, _)) = frozen_member.take() {
        cluster.signal(member, "-CONT");
    }
    if let Some((member, _)) = down.take() {
        cluster.start_member(member);
    }
    std::thread::sleep(Duration::from_secs(3));
    let histories: Vec<Vec<String>> = fleet
        .into_iter()
        .map(|member| member.holder.finish_killed())
        .collect();
    let total = check_fleet_history(seed, &schedule, &histories);
    assert!(total > 5_000, "seed {seed}: the fleet minted only {total} ids");
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
    let start = Instant::now();
    while proxies[0].answered() == answered {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the held store got no answer"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
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

/// One minting process of the nemesis's fleet.
struct Member {
    holder: Holder,
    clock: std::path::PathBuf,
    frozen_until: Option<Instant>,
    /// Whether a new process was started after this one ended.
    followed: bool,
}

impl Member {
    /// Starts minting process `serial`: on the 4-node layout, waiting for a free node, with
    /// a clock of its own that the nemesis can step.
    fn spawn(url: &str, cluster: &Cluster, serial: usize, dice: &mut Dice) -> Member {
        let clock = cluster.file(&format!("clock-{serial}"));
        std::fs::write(&clock, "+0\n").unwrap();
        let kind = if dice.below(2) == 0 { "precise" } else { "default" };
        let clock_text = clock.display().to_string();
        let mut env = vec![(LAYOUT, "four"), (WAIT, "1"), (CLOCK, kind)];
        env.extend(faketime(&clock_text));
        Member {
            holder: spawn(url, "nemesis", "mint", &env),
            clock,
            frozen_until: None,
            followed: false,
        }
    }
}

/// What one step of the nemesis acts on.
struct Strike<'a> {
    url: &'a str,
    cluster: &'a mut Cluster,
    proxies: &'a [Proxy],
    /// A member killed, and when to start it again.
    down: &'a mut Option<(usize, Instant)>,
    /// A member frozen, and when to thaw it.
    frozen_member: &'a mut Option<(usize, Instant)>,
}

impl Strike<'_> {
    /// One fault chosen by `dice`, on the cluster or a running process of `fleet` (a
    /// frozen or killed process is replaced by a new one): what it did.
    fn run(self, fleet: &mut Vec<Member>, dice: &mut Dice) -> String {
        // A process that ended (its claim lost, or no node free for 30 s) is followed by a
        // new one, as a supervisor would.
        let mut started = Vec::new();
        for i in 0..fleet.len() {
            if !fleet[i].followed && fleet[i].holder.child.try_wait().unwrap().is_some() {
                fleet[i].followed = true;
                fleet.push(Member::spawn(self.url, self.cluster, fleet.len(), dice));
                started.push(format!("process {i} ended, start process {}; ", fleet.len() - 1));
            }
        }
        let running: Vec<usize> = (0..fleet.len())
            .filter(|&i| {
                fleet[i].frozen_until.is_none() && fleet[i].holder.child.try_wait().unwrap().is_none()
            })
            .collect();
        if running.is_empty() {
            fleet.push(Member::spawn(self.url, self.cluster, fleet.len(), dice));
            return format!(
                "{}none running: start process {}",
                started.concat(),
                fleet.len() - 1
            );
        }
        started.concat() + &self.strike(fleet, &running, dice)
    }

    /// One fault chosen by `dice`, on the cluster or on one of the `running` processes of
    /// `fleet`: what it did.
    fn strike(self, fleet: &mut Vec<Member>, running: &[usize], dice: &mut Dice) -> String {
        let pick = running[usize::try_from(dice.below(running.len() as u64)).unwrap()];
        match dice.below(7) {
            0 => {
                let pause = TTL + Duration::from_millis(500 + dice.below(1_500));
                fleet[pick].holder.signal("-STOP");
                fleet[pick].frozen_until = Some(Instant::now() + pause);
                fleet.push(Member::spawn(self.url, self.cluster, fleet.len(), dice));
                format!(
                    "SIGSTOP process {pick} for {pause:?}, start process {}",
                    fleet.len() - 1
                )
            }
            1 => {
                fleet[pick].holder.signal("-KILL");
                fleet[pick].followed = true;
                fleet.push(Member::spawn(self.url, self.cluster, fleet.len(), dice));
                format!("SIGKILL process {pick}, start process {}", fleet.len() - 1)
            }
            2 => {
                for proxy in self.proxies {
                    proxy.cut();
                }
                std::thread::sleep(Duration::from_millis(dice.below(1_500)));
                for proxy in self.proxies {
                    proxy.restore();
                }
                "cut every connection to etcd".to_owned()
            }
            3 if self.down.is_none() && self.frozen_member.is_none() => {
                let Some(leader) = self.cluster.leader() else {
                    return "no leader to kill (an election is on)".to_owned();
                };
                self.cluster.kill(leader);
                let back = Instant::now() + Duration::from_millis(500 + dice.below(3_000));
                *self.down = Some((leader, back));
                format!("SIGKILL etcd leader m{leader}, start it again later")
            }
            4 if self.down.is_none() && self.frozen_member.is_none() => {
                // Half the time the leader: one that resumes may apply calls its clients
                // gave up on, and etcd 3.4 may then revoke leases early.
                let any = usize::try_from(dice.below(self.cluster.size() as u64)).unwrap();
                let (member, which) = match dice.below(2) {
                    0 => (self.cluster.leader().unwrap_or(any), "leader"),
                    _ => (any, "member"),
                };
                self.cluster.signal(member, "-STOP");
                let thaw = Instant::now() + TTL + Duration::from_millis(dice.below(2_000));
                *self.frozen_member = Some((member, thaw));
                format!("SIGSTOP etcd {which} m{member} past a lease time")
            }
            _ => {
                let offset = format!("{:+}", i64::try_from(dice.below(7)).unwrap() - 3);
                step_clock(&fleet[pick].clock, &offset);
                format!("step process {pick}'s clock to {offset} s")
            }
        }
    }
}

/// A holder whose clock ran a minute ahead leaves its node's mark a minute ahead: a
/// claimant with a right clock passes that node over and says so, instead of taking it and
/// waiting a minute.
#[test]
fn a_free_node_with_a_mark_far_ahead_is_passed_over() {
    let test = "a_free_node_with_a_mark_far_ahead_is_passed_over";
    let Some(cluster) = Cluster::start("etcd-ahead", 1) else {
        return;
    };
    if !has_libfaketime(test) {
        return;
    }
    let url = cluster.url();
    let ahead = cluster.file("ahead");
    std::fs::write(&ahead, "+60s").unwrap();
    let ahead_text = ahead.display().to_string();
    let mut env = vec![(COUNT, "10")];
    env.extend(faketime(&ahead_text));
    let ran_ahead = spawn(&url, "ahead", "mint", &env).finish(Duration::from_secs(30));
    assert_eq!(field(&ran_ahead, "node ").split(' ').next(), Some("0"));
    let mark = lease::list(&endpoints(&url), "ahead").unwrap()[0].high_water_ms;
    assert!(mark > now_ms() + 50_000, "mark {mark}");
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
    let url = cluster.url();
    let mut holder = spawn(&url, "restart", "mint", &[(CLOCK, "precise"), (TTL_S, "5")]);
    holder.node();
    let revision = field(&holder.seen, "node ").to_owned();
    holder.wait_for(Duration::from_secs(20), |seen| count_ids(seen) >= 100);
    cluster.kill(0);
    let down = now_ms();
    std::thread::sleep(Duration::from_secs(6));
    let up = now_ms();
    cluster.start_member(0);
    cluster.wait_healthy();
    holder.wait_for(Duration::from_secs(20), |seen| {
        ids(seen).iter().filter(|(_, stamp)| *stamp > up).count() >= 100
    });
    let lines = holder.finish_killed();
    let minted = ids(&lines);
    // The last renewal began before `down`: 4 s (0.8 of 5 s) later at most by the holder's
    // clock, the time in its IDs, minting stops until etcd is back.
    let fence = down + 4_000;
    let inside: Vec<&(u64, u64)> = minted
        .iter()
        .filter(|(id, _)| (fence..up).contains(&layout().decode(Id::new(*id)).unix_ms))
        .collect();
    assert!(inside.is_empty(), "minted past the deadline: {inside:?}");
    let all: Vec<u64> = minted.iter().map(|(id, _)| *id).collect();
    assert!(all.windows(2).all(|pair| pair[0] < pair[1]), "ids in order");
    let refusals = lease_lines(&lines);
    assert!(
        refusals.iter().all(|(_, text)| !text.contains("lost")),
        "{refusals:?}"
    );
    let rows = lease::list(&endpoints(&url), "restart").unwrap();
    assert_eq!(
        format!("{} {}", rows[0].node, rows[0].revision.unwrap_or(0)),
        revision,
        "the same claim throughout"
    );
}
