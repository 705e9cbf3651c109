//! A throwaway Redis server (Debian's `redis-server`, 7.x) on a loopback port, for the
//! Redis lease tests: started with a configuration file written here, in a fresh temporary
//! directory; optionally a replica of another. Dropping the [`Server`] kills it and removes
//! the directory, also when the test panics.
//!
//! The data survives what the test asks for: an append-only file written every second
//! (`appendfsync everysec`, Redis's default, which loses up to a second of acknowledged
//! writes in a crash), or none at all ([`Persistence::None`]). [`Server::restart`] starts
//! the same server again on the same port and directory, with what its files kept.
//!
//! Without `redis-server`, [`Server::start`] prints that the test is skipped and returns
//! `None`; with `CI=true` a missing server is a failure instead.

use crate::skip;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// What a server keeps across a restart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Persistence {
    /// An append-only file, synced every second: a crash loses up to a second of writes.
    AppendEverySec,
    /// Nothing: a restart starts empty.
    None,
}

/// The password of user `app` of [`Server::start_secure`]: no error or `Debug` may show it.
pub const PASSWORD: &str = "s3cret-Pw0rd";

/// The password of user `admin` (every right), which [`Server::cli`] uses on a secure
/// server.
const ADMIN_PASSWORD: &str = "admin-Pw0rd";

/// The rights of user `app` of [`Server::start_secure`]: the lease's keys, and the commands
/// its scripts and `lease list` run, no more.
pub const APP_RIGHTS: &str = "~atomflake:lease:* resetchannels -@all +ping +evalsha +eval \
                              +script|load +info +time +wait +hget +hset +hmget +hgetall +multi +exec";

/// A secure server's TLS files: its CA, its certificate for 127.0.0.1, and the client
/// certificate the tests present.
#[derive(Clone, Debug)]
pub struct Tls {
    /// The CA that signed the server's and the clients' certificates.
    pub ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    /// A client certificate the server accepts, and its key.
    pub client: (PathBuf, PathBuf),
}

/// A running throwaway server.
pub struct Server {
    root: PathBuf,
    port: u16,
    persistence: Persistence,
    replica_of: Option<u16>,
    /// The stepped clock the server runs on ([`crate::clock`]), if any.
    clock: Option<PathBuf>,
    /// TLS only, clients with certificates, users `app` and `admin`; the default user off.
    tls: Option<Tls>,
    child: Option<Child>,
}

impl Server {
    /// A fresh, empty server, or `None` (printed as a skip).
    pub fn start(test: &str, persistence: Persistence) -> Option<Server> {
        Server::launch(test, persistence, None, None)
    }

    /// A fresh, empty server whose wall clock is the stepped clock in `file`
    /// ([`crate::clock::step_clock`] moves it), or `None` (printed as a skip; also when
    /// the clock's library cannot be built).
    pub fn start_on_clock(test: &str, persistence: Persistence, file: &Path) -> Option<Server> {
        if let Err(why) = crate::clock::library() {
            skip(test, why);
            return None;
        }
        Server::launch(test, persistence, None, Some(file.to_owned()))
    }

    /// A fresh server that speaks TLS alone (its certificate for 127.0.0.1 and the CA in
    /// `pki`, made here), asks every client for a certificate of that CA, and knows two
    /// users: `app` ([`PASSWORD`], [`APP_RIGHTS`]) and `admin`; the default user is off.
    /// `None` (a skip) without `redis-server` or openssl.
    pub fn start_secure(test: &str, pki: &crate::pki::Pki) -> Option<Server> {
        if !crate::pki::has_openssl(test) {
            return None;
        }
        let ca = pki.ca("ca");
        let (cert, key) = pki.leaf("server", "ca", "127.0.0.1", "IP:127.0.0.1");
        let client = pki.leaf("client", "ca", "app", "");
        let tls = Tls {
            ca,
            cert,
            key,
            client,
        };
        let mut server = Server::prepare(test, Persistence::None, None, None)?;
        server.tls = Some(tls);
        server.run();
        Some(server)
    }

    /// The TLS files of a server of [`start_secure`](Server::start_secure).
    pub fn tls(&self) -> Option<&Tls> {
        self.tls.as_ref()
    }

    /// A fresh server replicating `primary`, or `None` (printed as a skip).
    pub fn replica(test: &str, primary: &Server) -> Option<Server> {
        Server::launch(test, primary.persistence, Some(primary.port), None)
    }

    fn launch(
        test: &str,
        persistence: Persistence,
        replica_of: Option<u16>,
        clock: Option<PathBuf>,
    ) -> Option<Server> {
        let mut server = Server::prepare(test, persistence, replica_of, clock)?;
        server.run();
        Some(server)
    }

    /// The server, not started yet: its port and directory.
    fn prepare(
        test: &str,
        persistence: Persistence,
        replica_of: Option<u16>,
        clock: Option<PathBuf>,
    ) -> Option<Server> {
        if Command::new("redis-server").arg("--version").output().is_err() {
            skip(test, "no Redis server (Debian package redis-server)");
            return None;
        }
        let port = crate::free_ports(1)[0];
        let root = crate::fresh_dir(&format!("redis-{test}-{port}"));
        let server = Server {
            root,
            port,
            persistence,
            replica_of,
            clock,
            tls: None,
            child: None,
        };
        Some(server)
    }

    /// Writes the configuration and starts `redis-server` on it, then waits until it
    /// answers `PING` (and, for a replica, until it has synced).
    fn run(&mut self) {
        let append = match self.persistence {
            Persistence::AppendEverySec => "appendonly yes\nappendfsync everysec\n",
            Persistence::None => "appendonly no\n",
        };
        let replica = self
            .replica_of
            .map(|port| format!("replicaof 127.0.0.1 {port}\n"))
            .unwrap_or_default();
        let listen = match &self.tls {
            None => format!("port {}\n", self.port),
            Some(tls) => format!(
                "port 0\ntls-port {}\ntls-cert-file {}\ntls-key-file {}\ntls-ca-cert-file {}\n\
                 tls-auth-clients yes\nuser default off\nuser admin on >{ADMIN_PASSWORD} ~* &* +@all\n\
                 user app on >{PASSWORD} {APP_RIGHTS}\n",
                self.port,
                tls.cert.display(),
                tls.key.display(),
                tls.ca.display(),
            ),
        };
        let config = format!(
            "bind 127.0.0.1\n{listen}protected-mode no\ndir {dir}\nlogfile {log}\nsave \"\"\n\
             {append}{replica}daemonize no\nenable-debug-command local\n",
            dir = self.root.display(),
            log = self.root.join("log").display(),
        );
        let path = self.root.join("redis.conf");
        std::fs::write(&path, config).unwrap();
        let clock = self.clock.as_deref().map(crate::clock::environment);
        let child = Command::new("redis-server")
            .arg(&path)
            .envs(clock.into_iter().flatten())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        crate::wait_until(
            "Redis did not come up",
            Duration::from_millis(50),
            || {
                self.cli(&["PING"]).is_ok_and(|answer| answer == "PONG")
                    && (self.replica_of.is_none()
                        || self
                            .cli(&["INFO", "replication"])
                            .is_ok_and(|info| info.contains("master_link_status:up")))
            },
            || std::fs::read_to_string(self.root.join("log")).unwrap_or_default(),
        );
    }

    /// The port it listens on, on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `rediss://USERINFO@127.0.0.1:PORT?cacert=…&cert=…&key=…` of a secure server, its
    /// client certificate presented; `USERINFO` is `user:password` (or empty for none).
    ///
    /// # Panics
    ///
    /// When the server is not secure.
    pub fn rediss_url(&self, userinfo: &str) -> String {
        let tls = self.tls.as_ref().expect("a secure server");
        let at = if userinfo.is_empty() { "" } else { "@" };
        format!(
            "rediss://{userinfo}{at}127.0.0.1:{}?cacert={}&cert={}&key={}",
            self.port,
            tls.ca.display(),
            tls.client.0.display(),
            tls.client.1.display()
        )
    }

    /// The server's directory (its configuration, log and append-only files).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Runs a command through `redis-cli`: its answer, trimmed, or the error it printed.
    pub fn cli(&self, args: &[&str]) -> Result<String, String> {
        let mut command = Command::new("redis-cli");
        command.args(["-h", "127.0.0.1", "-p", &self.port.to_string()]);
        if let Some(tls) = &self.tls {
            command.arg("--tls").arg("--cacert").arg(&tls.ca);
            command
                .arg("--cert")
                .arg(&tls.client.0)
                .arg("--key")
                .arg(&tls.client.1);
            command.args(["--user", "admin", "--pass", ADMIN_PASSWORD, "--no-auth-warning"]);
        }
        let output = command
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|error| error.to_string())?;
        let text = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        if output.status.success() && !text.starts_with("ERR") && !text.is_empty() {
            Ok(text)
        } else {
            Err(format!("{text}{}", String::from_utf8_lossy(&output.stderr)))
        }
    }

    /// Kills it at once (SIGKILL): what its files hold is what a crash leaves.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills it and starts it again on the same port and directory, with what its files
    /// kept.
    pub fn restart(&mut self) {
        self.kill();
        self.run();
    }

    /// Kills it, removes its append-only files, and starts it again empty on the same port
    /// and directory: a crash that lost every write.
    pub fn restart_empty(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(self.root.join("appendonlydir"));
        self.run();
    }

    /// Makes a replica the primary, as Sentinel does on a failover (`REPLICAOF NO ONE`).
    pub fn promote(&mut self) {
        assert_eq!(self.cli(&["REPLICAOF", "NO", "ONE"]).as_deref(), Ok("OK"));
        self.replica_of = None;
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_primary_and_its_replica_start_replicate_survive_a_restart_and_stop() {
        let test = "redis_primary_and_replica";
        let Some(mut primary) = Server::start(test, Persistence::AppendEverySec) else {
            return;
        };
        let Some(mut replica) = Server::replica(test, &primary) else {
            return;
        };
        assert_eq!(primary.cli(&["SET", "k", "1"]).as_deref(), Ok("OK"));
        // The replica acknowledges the write. (Asked again: on a busy machine one redis-cli
        // of `WAIT` was seen to end with no answer at all.)
        crate::wait_until(
            "the replica never acknowledged the write",
            Duration::from_millis(100),
            || primary.cli(&["WAIT", "1", "1000"]).as_deref() == Ok("1"),
            || std::fs::read_to_string(replica.root().join("log")).unwrap_or_default(),
        );
        assert_eq!(replica.cli(&["GET", "k"]).as_deref(), Ok("1"));
        // A write a second old is in the append-only file: it survives a SIGKILL.
        std::thread::sleep(Duration::from_millis(1500));
        primary.restart();
        assert_eq!(primary.cli(&["GET", "k"]).as_deref(), Ok("1"));
        replica.promote();
        assert_eq!(replica.cli(&["SET", "k", "2"]).as_deref(), Ok("OK"));
        primary.restart_empty();
        assert_eq!(
            primary.cli(&["EXISTS", "k"]).as_deref(),
            Ok("0"),
            "its append-only files removed"
        );
        let root = primary.root().to_owned();
        drop(primary);
        assert!(!root.exists(), "its directory is removed");

        let Some(mut empty) = Server::start(test, Persistence::None) else {
            return;
        };
        assert_eq!(empty.cli(&["SET", "k", "1"]).as_deref(), Ok("OK"));
        empty.restart();
        assert_eq!(
            empty.cli(&["EXISTS", "k"]).as_deref(),
            Ok("0"),
            "no persistence: nothing kept"
        );

        let clock = empty.root().join("clock");
        crate::clock::step_clock(&clock, "+3600");
        let Some(ahead) = Server::start_on_clock(test, Persistence::None, &clock) else {
            return;
        };
        let time = ahead.cli(&["TIME"]).unwrap();
        let seconds: u64 = time.lines().next().unwrap().parse().unwrap();
        let real = crate::now_ms() / 1000;
        assert!(
            (real + 3590..real + 3610).contains(&seconds),
            "TIME says {seconds}, the real time is {real}"
        );
    }
}
