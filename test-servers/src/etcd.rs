//! A throwaway etcd cluster for the tests that need a real one.
//!
//! [`Cluster::start`] runs one `etcd` per member on free loopback ports, each with its data
//! in a fresh temporary directory, and waits until the cluster has a leader. Dropping the
//! [`Cluster`] kills every member and removes the directory, also when the test panics.
//!
//! The binary is `ATOMFLAKE_ETCD` if set, else `etcd` on the `PATH` (Debian package
//! `etcd-server`). Without it, [`Cluster::start`] returns `None` after printing that the
//! test is skipped; with `CI=true` that is a failure instead.

use crate::pki::{Pki, has_openssl};
use crate::{free_ports, member, skip};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use std::io::{BufRead, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::Duration;

/// One member: its ports and, while it runs, its process.
struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    /// Where `/health` is served over plain HTTP: the client port, or for a secure
    /// cluster a metrics port of its own.
    health_port: u16,
    process: Option<Child>,
}

/// A running throwaway cluster.
pub struct Cluster {
    root: PathBuf,
    binary: PathBuf,
    members: Vec<Member>,
    /// `--initial-cluster`: every member's name and peer URL.
    initial: String,
    secure: Option<Box<Secure>>,
}

/// TLS on a cluster's client ports: every client must present a certificate signed by
/// `client_ca` (`--client-cert-auth`), and the members serve `cert` for 127.0.0.1.
#[derive(Debug, Clone)]
pub struct Secure {
    /// The members' certificate, for 127.0.0.1.
    pub cert: PathBuf,
    /// Its key.
    pub key: PathBuf,
    /// The CA of the client certificates (`--trusted-ca-file`).
    pub client_ca: PathBuf,
    /// The CA that signs `cert`, for `etcdctl`.
    pub ca: PathBuf,
    /// A client certificate and key whose common name is `root`: [`Cluster::etcdctl`]
    /// runs as root with it once authentication is on.
    pub root_cert: PathBuf,
    /// Its key.
    pub root_key: PathBuf,
    /// Extra `etcd` flags (`--auth-token-ttl`, ...).
    pub flags: Vec<String>,
}

/// The `etcd` binary, if there is one.
fn binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("ATOMFLAKE_ETCD") {
        return Some(PathBuf::from(path));
    }
    crate::on_path("etcd")
}

/// One HTTP/1.1 request to a member's client port: the status code and the body, or
/// `None` when it does not answer within a second.
fn http(port: u16, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    let status = answer.split(' ').nth(1)?.parse().ok()?;
    let (_, body) = answer.split_once("\r\n\r\n")?;
    Some((status, body.to_owned()))
}

/// The string value of `"name":"..."` in a JSON text (etcd's gateway writes 64-bit
/// numbers as strings).
fn json_string<'a>(json: &'a str, name: &str) -> Option<&'a str> {
    let start = json.find(&format!("\"{name}\":\""))? + name.len() + 4;
    let len = json[start..].find('"')?;
    Some(&json[start..start + len])
}

impl Cluster {
    /// A fresh cluster of `size` members, or `None` (printed as a skip) without etcd.
    pub fn start(test: &str, size: usize) -> Option<Cluster> {
        Cluster::start_with(test, size, None)
    }

    /// A fresh cluster of `size` members whose client ports speak TLS only, or `None`
    /// (printed as a skip) without etcd or etcdctl.
    pub fn start_secure(test: &str, size: usize, secure: Secure) -> Option<Cluster> {
        if crate::on_path("etcdctl").is_none() {
            skip(test, "no etcdctl: install etcd-client");
            return None;
        }
        Cluster::start_with(test, size, Some(Box::new(secure)))
    }

    fn start_with(test: &str, size: usize, secure: Option<Box<Secure>>) -> Option<Cluster> {
        let Some(binary) = binary() else {
            skip(test, "no etcd: install etcd-server or set ATOMFLAKE_ETCD");
            return None;
        };
        let root = crate::fresh_dir(&format!("etcd-{test}"));
        let ports = free_ports(3 * size);
        let members: Vec<Member> = (0..size)
            .map(|i| Member {
                name: format!("m{i}"),
                client_port: ports[3 * i],
                peer_port: ports[3 * i + 1],
                health_port: if secure.is_some() {
                    ports[3 * i + 2]
                } else {
                    ports[3 * i]
                },
                process: None,
            })
            .collect();
        let initial = members
            .iter()
            .map(|member| format!("{}=http://127.0.0.1:{}", member.name, member.peer_port))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = Cluster {
            root,
            binary,
            members,
            initial,
            secure,
        };
        for member in 0..size {
            cluster.start_member(member);
        }
        cluster.wait_healthy();
        Some(cluster)
    }

    /// Starts member `i` (again, after [`kill`](Cluster::kill), on its data).
    pub fn start_member(&mut self, i: usize) {
        let member = &self.members[i];
        let data = self.root.join(&member.name);
        let scheme = if self.secure.is_some() { "https" } else { "http" };
        let client = format!("{scheme}://127.0.0.1:{}", member.client_port);
        let peer = format!("http://127.0.0.1:{}", member.peer_port);
        let mut command = Command::new(&self.binary);
        command
            .args(["--name", &member.name])
            .arg("--data-dir")
            .arg(&data)
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args([
                "--initial-cluster",
                &self.initial,
                "--initial-cluster-state",
                "new",
            ])
            .args([
                "--initial-cluster-token",
                &format!("atomflake-{}", std::process::id()),
            ]);
        if let Some(secure) = &self.secure {
            command
                .arg("--cert-file")
                .arg(&secure.cert)
                .arg("--key-file")
                .arg(&secure.key)
                .arg("--trusted-ca-file")
                .arg(&secure.client_ca)
                .arg("--client-cert-auth")
                .arg("--listen-metrics-urls")
                .arg(format!("http://127.0.0.1:{}", member.health_port))
                .args(&secure.flags);
        }
        let log = self.root.join(format!("{}.log", member.name));
        self.members[i].process = Some(member::spawn_logged(&mut command, &log));
    }

    /// Kills member `i` with `SIGKILL` and waits for it to be gone.
    pub fn kill(&mut self, i: usize) {
        member::kill(&mut self.members[i].process);
    }

    /// Sends `signal` (`-STOP`, `-CONT`) to member `i`.
    pub fn signal(&self, i: usize, signal: &str) {
        member::signal(self.members[i].process.as_ref(), signal);
    }

    /// Stops member `i` with `SIGSTOP`: it holds its connections open and answers nothing.
    pub fn freeze(&self, i: usize) {
        self.signal(i, "-STOP");
    }

    /// Resumes member `i` after [`freeze`](Cluster::freeze), with `SIGCONT`.
    pub fn thaw(&self, i: usize) {
        self.signal(i, "-CONT");
    }

    /// The cluster's URL for a lease: `etcd://` and every member's client address.
    pub fn url(&self) -> String {
        format!("etcd://{}", self.members())
    }

    /// Every member's client address, `127.0.0.1:PORT`, comma-separated.
    pub fn members(&self) -> String {
        member::loopback(self.members.iter().map(|member| member.client_port))
    }

    /// Runs `etcdctl` on member 0 of a secure cluster, as root (its client certificate):
    /// its output.
    ///
    /// # Panics
    ///
    /// On a cluster that is not secure, or when etcdctl fails.
    pub fn etcdctl(&self, args: &[&str]) -> String {
        let secure = self.secure.as_ref().expect("etcdctl runs on a secure cluster");
        let output =
            Command::new(crate::on_path("etcdctl").expect("etcdctl (Debian etcd-client) is installed"))
                .env("ETCDCTL_API", "3")
                .arg(format!("--endpoints=https://127.0.0.1:{}", self.client_port(0)))
                .arg("--cacert")
                .arg(&secure.ca)
                .arg("--cert")
                .arg(&secure.root_cert)
                .arg("--key")
                .arg(&secure.root_key)
                .args(args)
                .output()
                .expect("etcdctl runs");
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "etcdctl {args:?}: {text}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        text
    }

    /// Member `i`'s client port.
    pub fn client_port(&self, i: usize) -> u16 {
        self.members[i].client_port
    }

    /// How many members the cluster has.
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// Waits for a member to lead, for [`HANG_GUARD`](crate::HANG_GUARD) at most (an
    /// election after a leader is killed), and returns it.
    pub fn wait_leader(&self) -> usize {
        crate::wait_for(
            "no leader",
            Duration::from_millis(50),
            || self.leader(),
            || self.logs(),
        )
    }

    /// The member that is the leader now, as the running members report it; `None` while
    /// they report none. A secure cluster's members tell it in their metrics
    /// (`etcd_server_is_leader`), served over plain HTTP.
    pub fn leader(&self) -> Option<usize> {
        let mut running = (0..self.members.len()).filter(|&i| self.members[i].process.is_some());
        if self.secure.is_some() {
            return running.find(|&i| {
                http(self.members[i].health_port, "GET", "/metrics", "")
                    .is_some_and(|(_, metrics)| metrics.lines().any(|line| line == "etcd_server_is_leader 1"))
            });
        }
        running.find_map(|i| {
            let (_, status) = http(
                self.members[i].client_port,
                "POST",
                "/v3/maintenance/status",
                "{}",
            )?;
            let me = json_string(&status, "member_id")?;
            (json_string(&status, "leader")? == me).then_some(i)
        })
    }

    /// Waits until every running member reports itself healthy (it has a leader), for at
    /// most [`HANG_GUARD`](crate::HANG_GUARD).
    ///
    /// # Panics
    ///
    /// When they do not, with the members' logs.
    pub fn wait_healthy(&self) {
        let healthy = |member: &Member| {
            member.process.is_none()
                || http(member.health_port, "GET", "/health", "")
                    .is_some_and(|(status, body)| status == 200 && body.contains("true"))
        };
        crate::wait_until(
            "the etcd cluster is not healthy",
            Duration::from_millis(50),
            || self.members.iter().all(healthy),
            || self.logs(),
        );
    }

    /// The last lines of every member's log.
    pub fn logs(&self) -> String {
        self.members
            .iter()
            .map(|member| {
                let log = std::fs::read_to_string(self.root.join(format!("{}.log", member.name)))
                    .unwrap_or_default();
                let lines: Vec<&str> = log.lines().collect();
                format!(
                    "--- {}\n{}",
                    member.name,
                    lines[lines.len().saturating_sub(20)..].join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Sets `key` to `value` through member 0, as any client of the cluster could: the
    /// revision of the write.
    ///
    /// # Panics
    ///
    /// When the member does not take it.
    pub fn put(&self, key: &str, value: &str) -> i64 {
        let body = serde_json::json!({ "key": BASE64.encode(key), "value": BASE64.encode(value) });
        let (status, answer) = http(self.client_port(0), "POST", "/v3/kv/put", &body.to_string())
            .unwrap_or_else(|| panic!("no answer to a put of {key}"));
        assert_eq!(status, 200, "put {key}: {answer}");
        revision(&answer)
    }

    /// Every change etcd made to the keys under `prefix` since the cluster started, oldest
    /// first: a watch from revision 1, read through member 0 until a change written after
    /// this call began (a key of its own under `prefix`, set and deleted) comes through.
    ///
    /// # Panics
    ///
    /// When the member does not answer, or the history does not come within 30 s.
    pub fn history(&self, prefix: &str) -> Vec<Change> {
        let end = format!("{prefix}~history-end-{}", crate::now_ms());
        let mut range_end = prefix.as_bytes().to_vec();
        *range_end.last_mut().expect("a prefix is not empty") += 1;
        let create = serde_json::json!({ "create_request": {
            "key": BASE64.encode(prefix),
            "range_end": BASE64.encode(&range_end),
            "start_revision": "1",
        }})
        .to_string();
        let mut stream = TcpStream::connect(("127.0.0.1", self.client_port(0))).unwrap();
        // A guard against a watch that never answers, not a bound on its speed.
        stream.set_read_timeout(Some(crate::HANG_GUARD)).unwrap();
        write!(
            stream,
            "POST /v3/watch HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{create}",
            create.len()
        )
        .unwrap();
        self.put(&end, "");
        let mut changes = Vec::new();
        let mut body = ChunkedLines::new(stream);
        while let Some(line) = body.next_line() {
            let message: serde_json::Value =
                serde_json::from_str(&line).unwrap_or_else(|error| panic!("watch answer {line:?}: {error}"));
            let events = message["result"]["events"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            for event in events {
                let kv = &event["kv"];
                let key = String::from_utf8(decode(&kv["key"])).unwrap();
                if key == end {
                    return changes;
                }
                let deleted = event["type"].as_str() == Some("DELETE");
                changes.push(Change {
                    revision: kv["mod_revision"].as_str().unwrap_or("0").parse().unwrap(),
                    key,
                    value: (!deleted).then(|| String::from_utf8(decode(&kv["value"])).unwrap()),
                });
            }
        }
        panic!(
            "the watch of {prefix} ended before its end mark; {} changes",
            changes.len()
        )
    }

    /// A path in the cluster's temporary directory (removed with it).
    pub fn file(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }
}

/// One change of [`Cluster::history`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The revision of the write.
    pub revision: i64,
    /// The key.
    pub key: String,
    /// The value written; `None` for a delete.
    pub value: Option<String>,
}

/// The revision in the header of a gateway answer.
fn revision(answer: &str) -> i64 {
    json_string(answer, "revision")
        .and_then(|revision| revision.parse().ok())
        .unwrap_or_else(|| panic!("no revision in {answer}"))
}

/// A base64 field of a gateway answer (absent when empty).
fn decode(field: &serde_json::Value) -> Vec<u8> {
    BASE64.decode(field.as_str().unwrap_or("")).unwrap()
}

/// The lines of an HTTP/1.1 answer's chunked body, read as they come.
struct ChunkedLines {
    reader: std::io::BufReader<TcpStream>,
    body: Vec<u8>,
}

impl ChunkedLines {
    /// Reads past the answer's head.
    fn new(stream: TcpStream) -> ChunkedLines {
        let mut reader = std::io::BufReader::new(stream);
        let mut line = String::new();
        loop {
            line.clear();
            reader.read_line(&mut line).unwrap();
            if line == "\r\n" || line.is_empty() {
                break;
            }
        }
        ChunkedLines {
            reader,
            body: Vec::new(),
        }
    }

    /// The next line of the body; `None` at its end.
    fn next_line(&mut self) -> Option<String> {
        loop {
            if let Some(at) = self.body.iter().position(|&byte| byte == b'\n') {
                let line: Vec<u8> = self.body.drain(..=at).collect();
                let text = String::from_utf8(line).unwrap();
                if text.trim().is_empty() {
                    continue;
                }
                return Some(text.trim().to_owned());
            }
            let mut size = String::new();
            if self.reader.read_line(&mut size).ok()? == 0 {
                return None;
            }
            let size = usize::from_str_radix(size.trim(), 16).ok()?;
            if size == 0 {
                return None;
            }
            let mut chunk = vec![0; size + 2];
            self.reader.read_exact(&mut chunk).ok()?;
            self.body.extend_from_slice(&chunk[..size]);
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for member in 0..self.members.len() {
            self.kill(member);
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The password of user `app` of [`secure_with_users`]: no error or `Debug` may show it.
pub const PASSWORD: &str = "s3cret-Pw0rd";

/// The namespace whose prefix `app`'s role may read and write in [`secure_with_users`].
pub const NAMESPACE: &str = "fleet";

/// A secure cluster of `size` members with authentication off: every client presents a
/// certificate signed by `ca`, and the certificates the tests use are made (`ca.pem`,
/// `other-ca.pem`, `server.crt` and `server.key` for 127.0.0.1, and `client.crt` and
/// `client.key` of user `nobody`); `flags` go to every member. `None` (a skip) without
/// etcd, etcdctl or openssl.
pub fn secure(test: &str, size: usize, flags: Vec<String>) -> Option<(Cluster, Pki)> {
    if !has_openssl(test) {
        return None;
    }
    let pki = Pki::temporary(test);
    let ca = pki.ca("ca");
    pki.ca("other-ca");
    let (cert, key) = pki.leaf("server", "ca", "127.0.0.1", "IP:127.0.0.1");
    let (root_cert, root_key) = pki.leaf("root", "ca", "root", "");
    pki.leaf("client", "ca", "nobody", "");
    let secure = Secure {
        cert,
        key,
        client_ca: ca.clone(),
        ca,
        root_cert,
        root_key,
        flags,
    };
    let cluster = Cluster::start_secure(test, size, secure)?;
    Some((cluster, pki))
}

/// A one-member [`secure`] etcd with authentication on and users `root` (by its client
/// certificate), `app` (role `fleet-rw`: readwrite on the prefix of [`NAMESPACE`] alone) and
/// `other` (readwrite on another namespace's prefix), tokens that last `token_ttl_s` unused:
/// `None` (a skip) without etcd, etcdctl or openssl.
pub fn secure_with_users(test: &str, token_ttl_s: u32) -> Option<(Cluster, Pki)> {
    let (cluster, pki) = secure(test, 1, vec![format!("--auth-token-ttl={token_ttl_s}")])?;
    let prefix = format!("/atomflake/lease/{NAMESPACE}/");
    for args in [
        &["user", "add", "root", "--new-user-password=root-pw"][..],
        &["user", "add", "app", &format!("--new-user-password={PASSWORD}")],
        &["user", "add", "other", "--new-user-password=other-pw"],
        &["role", "add", "fleet-rw"],
        &[
            "role",
            "grant-permission",
            "fleet-rw",
            "--prefix=true",
            "readwrite",
            &prefix,
        ],
        &["role", "add", "other-rw"],
        &[
            "role",
            "grant-permission",
            "other-rw",
            "--prefix=true",
            "readwrite",
            "/atomflake/lease/other/",
        ],
        &["user", "grant-role", "app", "fleet-rw"],
        &["user", "grant-role", "other", "other-rw"],
        &["auth", "enable"],
    ] {
        cluster.etcdctl(args);
    }
    Some((cluster, pki))
}
