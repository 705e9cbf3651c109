//! Throwaway ZooKeeper servers: one serves standalone; an ensemble of three serves with one
//! leader, elects another when its leader is killed, and takes a member back.

use atomflake_test_servers::wait_for;
use atomflake_test_servers::zookeeper::{Ensemble, Mode};
use std::time::Duration;

#[test]
fn a_single_zookeeper_server_serves_standalone() {
    let Some(server) = Ensemble::start("zookeeper-single", 1) else {
        return;
    };
    assert_eq!(server.mode(0), Some(Mode::Standalone));
    assert_eq!(server.leader(), Some(0));
    assert_eq!(server.four_letter_word(0, "ruok").as_deref(), Some("imok"));
    assert_eq!(server.connect_string(), server.address(0));
    let srvr = server.four_letter_word(0, "srvr").unwrap();
    assert!(srvr.contains("Zookeeper version: 3."), "{srvr}");
}

#[test]
fn a_zookeeper_ensemble_elects_a_new_leader_when_its_leader_is_killed() {
    let Some(mut ensemble) = Ensemble::start("zookeeper-ensemble", 3) else {
        return;
    };
    let addresses: Vec<String> = (0..3).map(|i| ensemble.address(i)).collect();
    assert_eq!(ensemble.connect_string(), addresses.join(","));
    let modes: Vec<Option<Mode>> = (0..3).map(|i| ensemble.mode(i)).collect();
    let leaders = modes.iter().filter(|&&mode| mode == Some(Mode::Leader)).count();
    let followers = modes.iter().filter(|&&mode| mode == Some(Mode::Follower)).count();
    assert_eq!((leaders, followers), (1, 2), "{modes:?}");
    let leader = ensemble.leader().unwrap();
    assert_eq!(modes[leader], Some(Mode::Leader));

    // A frozen follower answers nothing; thawed, it serves again.
    let follower = (leader + 1) % 3;
    ensemble.freeze(follower);
    assert_eq!(ensemble.mode(follower), None);
    ensemble.thaw(follower);
    ensemble.wait_serving();

    ensemble.kill(leader);
    assert_eq!(ensemble.mode(leader), None);
    let elected = wait_for(
        "no new leader",
        Duration::from_millis(100),
        || ensemble.leader().filter(|&elected| elected != leader),
        || ensemble.logs(),
    );
    ensemble.wait_serving();
    // The old leader, started again on its data, rejoins as a follower.
    ensemble.restart(leader);
    assert_eq!(ensemble.mode(leader), Some(Mode::Follower));
    assert_eq!(ensemble.leader(), Some(elected));
}
