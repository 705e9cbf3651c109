//! The faults of a replicated store (an etcd cluster, a ZooKeeper ensemble) for the
//! [`nemesis`](super::nemesis()): connections cut, the leader killed, a server frozen.

use super::holder::Holders;
use super::nemesis::{Dice, Faults, NemesisRun, nemesis};
use crate::proxy::Proxy;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// A store of several servers that elect a leader, as the nemesis strikes them.
pub trait Quorum {
    /// How many servers.
    fn size(&self) -> usize;
    /// The leader now, if one is elected.
    fn leader(&self) -> Option<usize>;
    /// Server `i`'s client port on loopback.
    fn client_port(&self, i: usize) -> u16;
    /// A path in the store's temporary directory.
    fn file(&self, name: &str) -> PathBuf;
    /// Kills server `i` (`SIGKILL`).
    fn kill(&mut self, i: usize);
    /// Starts server `i` again, with its data.
    fn start_member(&mut self, i: usize);
    /// Freezes server `i` (`SIGSTOP`).
    fn freeze(&self, i: usize);
    /// Thaws server `i` (`SIGCONT`).
    fn thaw(&self, i: usize);
}

/// The nemesis's faults on a [`Quorum`] reached through `proxies`: cut every connection
/// to it for up to 1.5 s, kill the leader and start it again 0.5 to 3.5 s later, freeze a
/// server (half the time the leader) past the lease time. One server is down or frozen at
/// a time.
pub struct QuorumFaults<'a, Q: Quorum> {
    name: &'static str,
    servers: &'a mut Q,
    proxies: &'a [Proxy],
    ttl: Duration,
    /// A server killed, and when to start it again.
    down: Option<(usize, Instant)>,
    /// A server frozen, and when to thaw it.
    frozen: Option<(usize, Instant)>,
}

impl<'a, Q: Quorum> QuorumFaults<'a, Q> {
    /// The faults of `servers` (named `name` in what they print), reached through
    /// `proxies`, for holders on lease time `ttl`.
    pub fn new(name: &'static str, servers: &'a mut Q, proxies: &'a [Proxy], ttl: Duration) -> Self {
        QuorumFaults {
            name,
            servers,
            proxies,
            ttl,
            down: None,
            frozen: None,
        }
    }
}

impl<Q: Quorum> Faults for QuorumFaults<'_, Q> {
    fn strike(&mut self, which: u64, dice: &mut Dice) -> Option<String> {
        let name = self.name;
        let one_down = self.down.is_some() || self.frozen.is_some();
        match which {
            0 => {
                for proxy in self.proxies {
                    proxy.cut();
                }
                std::thread::sleep(Duration::from_millis(dice.below(1_500)));
                for proxy in self.proxies {
                    proxy.restore();
                }
                Some(format!("cut every connection to {name}"))
            }
            1 if !one_down => {
                let Some(leader) = self.servers.leader() else {
                    return Some("no leader to kill (an election is on)".to_owned());
                };
                self.servers.kill(leader);
                let back = Instant::now() + Duration::from_millis(500 + dice.below(3_000));
                self.down = Some((leader, back));
                Some(format!("SIGKILL {name} leader {leader}, start it again later"))
            }
            2 if !one_down => {
                // Half the time the leader: one that resumes may apply calls its clients
                // gave up on (and etcd 3.4 may then revoke leases early).
                let any = usize::try_from(dice.below(self.servers.size() as u64)).unwrap();
                let (server, which) = match dice.below(2) {
                    0 => (self.servers.leader().unwrap_or(any), "leader"),
                    _ => (any, "server"),
                };
                self.servers.freeze(server);
                let thaw = Instant::now() + self.ttl + Duration::from_millis(dice.below(2_000));
                self.frozen = Some((server, thaw));
                Some(format!("SIGSTOP {name} {which} {server} past a lease time"))
            }
            _ => None,
        }
    }

    fn recover(&mut self) {
        if let Some((server, _)) = self.down.take_if(|(_, until)| Instant::now() >= *until) {
            self.servers.start_member(server);
        }
        if let Some((server, _)) = self.frozen.take_if(|(_, until)| Instant::now() >= *until) {
            self.servers.thaw(server);
        }
    }

    fn heal(&mut self) {
        if let Some((server, _)) = self.frozen.take() {
            self.servers.thaw(server);
        }
        if let Some((server, _)) = self.down.take() {
            self.servers.start_member(server);
        }
    }
}

/// [`Quorum`] for a type whose inherent methods of the same names do the work.
macro_rules! quorum {
    ($servers:ty) => {
        impl Quorum for $servers {
            fn size(&self) -> usize {
                <$servers>::size(self)
            }
            fn leader(&self) -> Option<usize> {
                <$servers>::leader(self)
            }
            fn client_port(&self, i: usize) -> u16 {
                <$servers>::client_port(self, i)
            }
            fn file(&self, name: &str) -> PathBuf {
                <$servers>::file(self, name)
            }
            fn kill(&mut self, i: usize) {
                <$servers>::kill(self, i);
            }
            fn start_member(&mut self, i: usize) {
                <$servers>::start_member(self, i);
            }
            fn freeze(&self, i: usize) {
                <$servers>::freeze(self, i);
            }
            fn thaw(&self, i: usize) {
                <$servers>::thaw(self, i);
            }
        }
    };
}

quorum!(crate::etcd::Cluster);
quorum!(crate::zookeeper::Ensemble);

/// The fleet of [`nemesis()`] on lease time `ttl` (holders run by the test named `child`)
/// against `servers`, reached through a [`Proxy`] each at `SCHEME://` URL `scheme`, under
/// the [`QuorumFaults`] too. `name` names the store in what it prints.
///
/// # Panics
///
/// When the fleet mints an ID twice or out of order, or fewer than 5,000 IDs.
pub fn quorum_nemesis<Q: Quorum>(
    name: &'static str,
    scheme: &str,
    servers: &mut Q,
    child: &'static str,
    ttl: Duration,
) -> NemesisRun {
    let proxies: Vec<Proxy> = (0..servers.size())
        .map(|i| Proxy::start(servers.client_port(i)))
        .collect();
    let addresses: Vec<String> = proxies
        .iter()
        .map(|proxy| format!("127.0.0.1:{}", proxy.port()))
        .collect();
    let holders = Holders::new(format!("{scheme}://{}", addresses.join(",")), child, ttl);
    let dir = servers.file("nemesis");
    std::fs::create_dir_all(&dir).unwrap();
    let mut faults = QuorumFaults::new(name, servers, &proxies, ttl);
    let run = nemesis(name, &holders, &dir, &mut faults);
    let (seed, total) = (run.seed, run.ids);
    assert!(total > 5_000, "seed {seed}: the fleet minted only {total} ids");
    run
}
