//! A throwaway ZooKeeper ensemble for the tests that need a real one.
//!
//! [`Ensemble::start`] runs one Java ZooKeeper server per member
//! (`org.apache.zookeeper.server.quorum.QuorumPeerMain`, started directly, not through the
//! service scripts) on free loopback ports, each with its own configuration and data in a
//! fresh temporary directory, and waits until every member serves: one member is a
//! standalone server, more form a quorum with one leader. Dropping the [`Ensemble`] kills
//! every member and removes the directory, also when the test panics.
//!
//! The servers tick every [`TICK`], so that sessions can be short: a client's session
//! timeout is granted within [`MIN_SESSION_TIMEOUT`]`..=`[`MAX_SESSION_TIMEOUT`]. Every
//! four-letter word is allowed (`srvr` tells a member's mode); the admin server is off.
//!
//! The classpath is `ATOMFLAKE_ZOOKEEPER_CLASSPATH` if set, else Debian's
//! `/usr/share/java/zookeeper.jar` (package `zookeeper`; its manifest names its
//! dependencies) with `slf4j-simple.jar` for the log when there is one; `java` is
//! `ATOMFLAKE_JAVA` if set, else `java` on the `PATH`. Without either,
//! [`Ensemble::start`] returns `None` after printing that the test is skipped; with
//! `CI=true` that is a failure instead.

use crate::{free_ports, member, skip};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

/// The servers' tick: the unit of their timeouts.
pub const TICK: Duration = Duration::from_millis(200);
/// The shortest session timeout the servers grant (2 ticks).
pub const MIN_SESSION_TIMEOUT: Duration = Duration::from_millis(400);
/// The longest session timeout the servers grant.
pub const MAX_SESSION_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a follower has to connect to its leader and sync, in ticks (10 s: a loaded
/// machine runs a starting JVM slowly).
const INIT_LIMIT: u32 = 50;
/// How far a follower may fall behind its leader, in ticks (2 s).
const SYNC_LIMIT: u32 = 10;

/// Debian's ZooKeeper jar; its manifest's `Class-Path` names every dependency.
const DEBIAN_JAR: &str = "/usr/share/java/zookeeper.jar";
/// An SLF4J binding that logs to stderr: without one ZooKeeper logs nothing.
const DEBIAN_SLF4J_SIMPLE: &str = "/usr/share/java/slf4j-simple.jar";

/// What a member says it is (`srvr`'s `Mode:` line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The one server of an ensemble of one.
    Standalone,
    /// The leader of a quorum.
    Leader,
    /// A follower of the leader.
    Follower,
    /// A non-voting member.
    Observer,
}

/// One member: its ports and, while it runs, its process.
struct Member {
    /// `server.ID` and the `myid` file: 1, 2, 3...
    id: usize,
    client_port: u16,
    peer_port: u16,
    election_port: u16,
    process: Option<Child>,
}

/// A running throwaway ensemble.
pub struct Ensemble {
    root: PathBuf,
    java: PathBuf,
    classpath: String,
    members: Vec<Member>,
}

/// `java` and the classpath, if both are there.
fn java_and_classpath() -> Option<(PathBuf, String)> {
    let java = match std::env::var_os("ATOMFLAKE_JAVA") {
        Some(path) => PathBuf::from(path),
        None => crate::on_path("java")?,
    };
    let classpath = match std::env::var("ATOMFLAKE_ZOOKEEPER_CLASSPATH") {
        Ok(classpath) => classpath,
        Err(_) if Path::new(DEBIAN_JAR).is_file() => {
            let mut classpath = DEBIAN_JAR.to_owned();
            if Path::new(DEBIAN_SLF4J_SIMPLE).is_file() {
                write!(classpath, ":{DEBIAN_SLF4J_SIMPLE}").unwrap();
            }
            classpath
        }
        Err(_) => return None,
    };
    Some((java, classpath))
}

/// Sends four-letter word `word` to the server on `port`: its answer, or `None` when it
/// does not answer within 2 s.
fn four_letter_word(port: u16, word: &str) -> Option<String> {
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream.write_all(word.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    Some(answer)
}

impl Ensemble {
    /// A fresh ensemble of `size` members (1: a standalone server), serving, or `None`
    /// (printed as a skip) without Java or ZooKeeper.
    pub fn start(test: &str, size: usize) -> Option<Ensemble> {
        let Some((java, classpath)) = java_and_classpath() else {
            skip(
                test,
                "no java or no ZooKeeper: install zookeeper or set ATOMFLAKE_JAVA and \
                 ATOMFLAKE_ZOOKEEPER_CLASSPATH",
            );
            return None;
        };
        let root = crate::fresh_dir(&format!("zookeeper-{test}"));
        let ports = free_ports(3 * size);
        let members: Vec<Member> = (0..size)
            .map(|i| Member {
                id: i + 1,
                client_port: ports[3 * i],
                peer_port: ports[3 * i + 1],
                election_port: ports[3 * i + 2],
                process: None,
            })
            .collect();
        let mut ensemble = Ensemble {
            root,
            java,
            classpath,
            members,
        };
        for i in 0..size {
            ensemble.configure(i);
        }
        for i in 0..size {
            ensemble.start_member(i);
        }
        ensemble.wait_serving();
        Some(ensemble)
    }

    /// Member `i`'s directory.
    fn dir(&self, i: usize) -> PathBuf {
        self.root.join(format!("zk{}", self.members[i].id))
    }

    /// Writes member `i`'s configuration and `myid`.
    fn configure(&self, i: usize) {
        let member = &self.members[i];
        let dir = self.dir(i);
        let data = dir.join("data");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(data.join("myid"), format!("{}\n", member.id)).unwrap();
        let mut config = format!(
            "tickTime={tick}\ninitLimit={INIT_LIMIT}\nsyncLimit={SYNC_LIMIT}\n\
             minSessionTimeout={min}\nmaxSessionTimeout={max}\n\
             dataDir={data}\nclientPort={port}\nclientPortAddress=127.0.0.1\n\
             4lw.commands.whitelist=*\nadmin.enableServer=false\n\
             preAllocSize=1024\n",
            tick = TICK.as_millis(),
            min = MIN_SESSION_TIMEOUT.as_millis(),
            max = MAX_SESSION_TIMEOUT.as_millis(),
            data = data.display(),
            port = member.client_port,
        );
        // One member alone runs standalone: no server lines.
        if self.members.len() > 1 {
            for other in &self.members {
                writeln!(
                    config,
                    "server.{}=127.0.0.1:{}:{}",
                    other.id, other.peer_port, other.election_port
                )
                .unwrap();
            }
        }
        std::fs::write(dir.join("zoo.cfg"), config).unwrap();
    }

    /// Starts member `i` (again, after [`kill`](Ensemble::kill), on its data); does not
    /// wait for it to serve.
    pub fn start_member(&mut self, i: usize) {
        let dir = self.dir(i);
        let mut command = Command::new(&self.java);
        command
            .arg("-cp")
            .arg(&self.classpath)
            // A small heap, and the JIT's quick tier: a test server starts sooner.
            .args(["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
            .arg("-Djava.net.preferIPv4Stack=true")
            .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
            .arg(dir.join("zoo.cfg"))
            .current_dir(&dir);
        self.members[i].process = Some(member::spawn_logged(&mut command, &dir.join("server.log")));
    }

    /// Kills member `i` with `SIGKILL` and waits for it to be gone.
    pub fn kill(&mut self, i: usize) {
        member::kill(&mut self.members[i].process);
    }

    /// Kills member `i` and starts it again on its data, then waits until every running
    /// member serves.
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        self.start_member(i);
        self.wait_serving();
    }

    /// Stops member `i` with `SIGSTOP`: it holds its connections open and answers nothing.
    pub fn freeze(&self, i: usize) {
        self.signal(i, "-STOP");
    }

    /// Resumes member `i` after [`freeze`](Ensemble::freeze), with `SIGCONT`.
    pub fn thaw(&self, i: usize) {
        self.signal(i, "-CONT");
    }

    fn signal(&self, i: usize, signal: &str) {
        member::signal(self.members[i].process.as_ref(), signal);
    }

    /// The connect string of a client: every member's client address,
    /// `127.0.0.1:P1,127.0.0.1:P2,...`.
    pub fn connect_string(&self) -> String {
        member::loopback(self.members.iter().map(|member| member.client_port))
    }

    /// Member `i`'s client address, `127.0.0.1:PORT`.
    pub fn address(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.members[i].client_port)
    }

    /// Member `i`'s client port.
    pub fn client_port(&self, i: usize) -> u16 {
        self.members[i].client_port
    }

    /// How many members the ensemble has.
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// Member `i`'s answer to four-letter word `word` (`srvr`, `stat`, `ruok`, `mntr`...);
    /// `None` when it does not answer within 2 s.
    pub fn four_letter_word(&self, i: usize, word: &str) -> Option<String> {
        four_letter_word(self.members[i].client_port, word)
    }

    /// What member `i` says it is; `None` while it does not serve (stopped, frozen, or
    /// without a quorum).
    pub fn mode(&self, i: usize) -> Option<Mode> {
        self.members[i].process.as_ref()?;
        let answer = self.four_letter_word(i, "srvr")?;
        let mode = answer.lines().find_map(|line| line.strip_prefix("Mode: "))?;
        match mode.trim() {
            "standalone" => Some(Mode::Standalone),
            "leader" => Some(Mode::Leader),
            "follower" => Some(Mode::Follower),
            "observer" => Some(Mode::Observer),
            _ => None,
        }
    }

    /// The member that leads now (the standalone server of an ensemble of one), as the
    /// running members report it; `None` while they report none.
    pub fn leader(&self) -> Option<usize> {
        (0..self.members.len()).find(|&i| matches!(self.mode(i), Some(Mode::Leader | Mode::Standalone)))
    }

    /// Waits until every running member serves and one of them leads, for at most
    /// [`HANG_GUARD`](crate::HANG_GUARD): a JVM on a busy two-core machine takes 5 to 10 s
    /// to start, several at once longer.
    ///
    /// # Panics
    ///
    /// When they do not, with the members' logs.
    pub fn wait_serving(&self) {
        let modes_seen = std::cell::RefCell::new(Vec::new());
        crate::wait_until(
            "the ZooKeeper ensemble does not serve",
            Duration::from_millis(100),
            || {
                let modes: Vec<Option<Mode>> = (0..self.members.len())
                    .filter(|&i| self.members[i].process.is_some())
                    .map(|i| self.mode(i))
                    .collect();
                let leaders = modes
                    .iter()
                    .filter(|mode| matches!(mode, Some(Mode::Leader | Mode::Standalone)))
                    .count();
                let serving = modes.iter().all(Option::is_some) && leaders == 1;
                *modes_seen.borrow_mut() = modes;
                serving
            },
            || format!("modes {:?}:\n{}", modes_seen.borrow(), self.logs()),
        );
    }

    /// The last lines of every member's log.
    pub fn logs(&self) -> String {
        (0..self.members.len())
            .map(|i| {
                let log = std::fs::read_to_string(self.dir(i).join("server.log")).unwrap_or_default();
                let lines: Vec<&str> = log.lines().collect();
                format!(
                    "--- zk{}\n{}",
                    self.members[i].id,
                    lines[lines.len().saturating_sub(20)..].join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// A path in the ensemble's temporary directory (removed with it).
    pub fn file(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }
}

impl Drop for Ensemble {
    fn drop(&mut self) {
        for member in 0..self.members.len() {
            self.kill(member);
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}
