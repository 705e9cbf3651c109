//! `atomflake mint --lease` and `atomflake lease` against throwaway PostgreSQL, etcd,
//! ZooKeeper and Redis servers (`atomflake-test-servers`).

use atomflake_test_servers::etcd::Cluster;
use atomflake_test_servers::postgres as pg;
use atomflake_test_servers::redis;
use atomflake_test_servers::zookeeper;

use std::process::{Command, Output};

fn atomflake(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_atomflake"))
        .args(args)
        .env_remove("ATOMFLAKE_NODE")
        .env_remove("ATOMFLAKE_LEASE")
        .output()
        .expect("the atomflake binary runs")
}

fn text(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).expect("UTF-8")
}

/// The decimal IDs `atomflake mint` wrote.
fn ids(output: &Output) -> Vec<u64> {
    text(&output.stdout).lines().map(|l| l.parse().unwrap()).collect()
}

#[test]
fn the_ddl_is_the_tables() {
    let output = atomflake(&["lease", "ddl"]);
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(text(&output.stdout), atomflake_postgres::lease::DDL);
}

#[test]
fn a_node_and_a_lease_together_are_refused() {
    let output = atomflake(&["mint", "--node", "3", "--lease", "host=/nowhere"]);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        text(&output.stderr),
        "atomflake: --node 3 and --lease: the lease picks the node (ATOMFLAKE_NODE counts as --node)\n"
    );
    let output = atomflake(&["mint", "--lease", "host=/nowhere", "--ttl", "0"]);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        text(&output.stderr),
        "atomflake: lease time 0ns is out of range: allowed whole seconds in 1s..=3600s\n"
    );
}

/// `atomflake` with `args` and `ATOMFLAKE_LEASE` set to `lease`, in an empty home of its
/// own (without `~/.postgresql`, libpq's default root certificate), removed after: its
/// stdout and stderr, the home's path written `HOME`.
fn atomflake_with_lease_env(args: &[&str], lease: &str) -> (Option<i32>, String) {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let home = std::env::temp_dir().join(format!("atomflake-cli-home-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&home).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_atomflake"))
        .args(args)
        .env_remove("ATOMFLAKE_NODE")
        .env("ATOMFLAKE_LEASE", lease)
        .env("HOME", &home)
        .output()
        .expect("the atomflake binary runs");
    let shown = format!("{}{}", text(&output.stdout), text(&output.stderr));
    std::fs::remove_dir_all(&home).unwrap();
    (
        output.status.code(),
        shown.replace(&home.display().to_string(), "HOME"),
    )
}

#[test]
fn no_message_and_no_help_shows_the_password() {
    const PASSWORD: &str = "s3cret-Pw";
    let mint = ["mint", "-n", "1"];
    let list = ["lease", "list"];
    for (args, lease, code, expected) in [
        (
            &mint[..],
            format!("host=127.0.0.1 port=1 user=app password={PASSWORD} sslmode=verify-full"),
            2,
            "atomflake: invalid --lease: sslmode=verify-full needs a root certificate to verify \
             the server with: give sslrootcert=FILE (or sslrootcert=system for the system's \
             roots); the default HOME/.postgresql/root.crt does not exist\n",
        ),
        (
            &mint[..],
            format!("postgres://app:{PASSWORD}@localhost:99999/db"),
            2,
            "atomflake: invalid --lease: invalid connection string: invalid value for option `port`\n",
        ),
        (
            &list[..],
            format!("postgres://app:{PASSWORD}@127.0.0.1:1/db?sslmode=require&connect_timeout=5"),
            1,
            "atomflake: lease database operation \"connect\" failed: app@127.0.0.1:1/db \
             (sslmode=require): error connecting to server: Connection refused (os error 111)\n",
        ),
        (
            &mint[..],
            format!("postgres://app:{PASSWORD}@127.0.0.1:1/db?connect_timeout=5"),
            1,
            "atomflake: lease database operation \"connect\" failed: app@127.0.0.1:1/db \
             (sslmode=prefer): error connecting to server: Connection refused (os error 111)\n",
        ),
    ] {
        let (status, shown) = atomflake_with_lease_env(args, &lease);
        assert_eq!((status, shown.as_str()), (Some(code), expected), "{lease}");
        let help: Vec<&str> = args
            .iter()
            .copied()
            .filter(|arg| arg.starts_with(char::is_alphabetic))
            .collect();
        let (status, help) = atomflake_with_lease_env(&[&help[..], &["--help"]].concat(), &lease);
        assert_eq!(status, Some(0), "{help}");
        assert!(
            help.contains("[env: ATOMFLAKE_LEASE]") && !help.contains(PASSWORD),
            "{help}"
        );
    }
}

#[test]
fn mint_takes_its_node_from_a_lease_and_lease_list_shows_it() {
    let Some(server) = pg::Server::start("cli-lease") else {
        return;
    };
    let url = server.url();
    mint_twice(&url, &server.conninfo());
    // The row keeps its holder, generation and expiry once free.
    let fields = list_row(&url);
    assert_eq!(&fields[..3], ["0", "2", "no"], "{fields:?}");
}

/// A password kept out of the command line and the URL: `PGPASSWORD`, as libpq reads it.
#[test]
fn the_password_can_come_from_pgpassword() {
    let options = pg::Options {
        tcp: true,
        ..pg::Options::default()
    };
    let Some(server) = pg::Server::start_with("cli-pgpassword", options) else {
        return;
    };
    server.psql(&format!(
        "SET password_encryption = 'scram-sha-256'; CREATE ROLE app LOGIN PASSWORD 'from-env';
         {} GRANT SELECT, INSERT, UPDATE ON public.atomflake_lease TO app;",
        atomflake_postgres::lease::DDL
    ));
    server.set_hba("host all all 127.0.0.1/32 scram-sha-256");
    let lease = format!("host=127.0.0.1 port={} user=app dbname=postgres", server.port());
    let run = |password: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_atomflake"));
        command
            .args(["mint", "-n", "3", "--lease", &lease])
            .env_remove("ATOMFLAKE_NODE")
            .env_remove("ATOMFLAKE_LEASE")
            .env_remove("PGPASSWORD")
            .env("PGPASSFILE", "/nonexistent/pgpass");
        if let Some(password) = password {
            command.env("PGPASSWORD", password);
        }
        command.output().expect("the atomflake binary runs")
    };
    let output = run(Some("from-env"));
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(text(&output.stdout).lines().count(), 3);
    let output = run(None);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        text(&output.stderr).ends_with("password missing\n"),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn mint_takes_its_node_from_an_etcd_lease_and_lease_list_shows_it() {
    let Some(cluster) = Cluster::start("cli-etcd", 1) else {
        return;
    };
    mint_twice_and_list(&cluster.url());
}

/// On Redis, which keeps a free node's holder and generation: the second claim of node 0
/// is its generation 2.
#[test]
fn mint_takes_its_node_from_a_redis_lease_and_lease_list_shows_it() {
    let Some(server) = redis::Server::start("cli-redis", redis::Persistence::AppendEverySec) else {
        return;
    };
    let url = server.url();
    mint_twice(&url, &url);
    let fields = list_row(&url);
    assert_eq!(&fields[..3], ["0", "2", "no"], "{fields:?}");
}

/// A running `atomflake mint` process: its IDs and its error output, read as they come.
struct Minting {
    child: std::process::Child,
    ids: std::sync::Arc<std::sync::Mutex<Vec<u64>>>,
    readers: Vec<std::thread::JoinHandle<String>>,
}

impl Minting {
    /// `atomflake mint --layout sonyflake --lease URL --ttl 2 -n COUNT` in namespace `fleet`.
    fn start(url: &str, count: usize) -> Minting {
        use std::io::{BufRead, Read};
        use std::process::Stdio;
        let count = count.to_string();
        let args = [
            "mint",
            "--layout",
            "sonyflake",
            "--lease",
            url,
            "--namespace",
            "fleet",
        ];
        let mut child = Command::new(env!("CARGO_BIN_EXE_atomflake"))
            .args(args)
            .args(["--ttl", "2", "-n", &count])
            .env_remove("ATOMFLAKE_NODE")
            .env_remove("ATOMFLAKE_LEASE")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the atomflake binary runs");
        let ids = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let stdout = child.stdout.take().unwrap();
        let into = ids.clone();
        let out = std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                into.lock().unwrap().push(line.unwrap().parse().unwrap());
            }
            String::new()
        });
        let mut stderr = child.stderr.take().unwrap();
        let err = std::thread::spawn(move || {
            let mut text = String::new();
            stderr.read_to_string(&mut text).unwrap();
            text
        });
        Minting {
            child,
            ids,
            readers: vec![out, err],
        }
    }

    fn count(&self) -> usize {
        self.ids.lock().unwrap().len()
    }

    /// Waits for it to exit (60 s at most): its exit code, IDs and error output.
    fn finish(mut self) -> (Option<i32>, Vec<u64>, String) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while self.child.try_wait().unwrap().is_none() {
            if std::time::Instant::now() > deadline {
                let _ = self.child.kill();
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let code = self.child.wait().unwrap().code();
        let stderr: String = self
            .readers
            .into_iter()
            .map(|reader| reader.join().unwrap())
            .collect();
        let ids = std::mem::take(&mut *self.ids.lock().unwrap());
        (code, ids, stderr)
    }
}

/// Four `atomflake mint --lease redis://` processes minting (Sonyflake: 25,600 IDs a second
/// each), every connection killed five times under them, then Redis restarted empty (no
/// persistence: every claim and mark gone) and four more started at once. The four that
/// lost their claims stop, each saying its lease is lost; the four after the restart wait
/// out the claim gate and mint past them. No ID twice.
#[test]
fn mint_processes_on_redis_mint_no_id_twice_through_killed_connections_and_an_empty_restart() {
    let Some(mut server) = redis::Server::start("cli-redis-fleet", redis::Persistence::None) else {
        return;
    };
    let url = server.url();
    let first: Vec<Minting> = (0..4).map(|_| Minting::start(&url, 10_000_000)).collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while first.iter().any(|minting| minting.count() < 5_000) {
        assert!(
            std::time::Instant::now() < deadline,
            "the first four did not mint"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    for _ in 0..5 {
        server.cli(&["CLIENT", "KILL", "TYPE", "normal"]).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    server.restart_empty();
    let second: Vec<Minting> = (0..4).map(|_| Minting::start(&url, 50_000)).collect();
    let layout = atomflake::Layout::SONYFLAKE;
    let node = |id: u64| layout.decode(atomflake::Id::new(id)).node;
    let mut last_before = std::collections::HashMap::new();
    let mut all = Vec::new();
    for minting in first {
        let (code, ids, stderr) = minting.finish();
        assert_eq!(code, Some(1), "{stderr}");
        assert!(stderr.contains("is lost"), "{stderr}");
        for &id in &ids {
            let last = last_before.entry(node(id)).or_insert(id);
            *last = id.max(*last);
        }
        all.extend(ids);
    }
    let mut starts = Vec::new();
    for minting in second {
        let (code, ids, stderr) = minting.finish();
        assert_eq!((code, stderr.as_str(), ids.len()), (Some(0), "", 50_000));
        starts.push((ids[0], last_before.get(&node(ids[0])).copied()));
        all.extend(ids);
    }
    let unique: std::collections::HashSet<u64> = all.iter().copied().collect();
    assert_eq!(all.len() - unique.len(), 0, "IDs twice, of {}", all.len());
    for (start, past) in starts {
        assert!(Some(start) > past, "started at {start}, not past {past:?}");
    }
    println!("{} IDs from eight processes, none twice", all.len());
}

/// Over TLS with a client certificate and a password, from `ATOMFLAKE_LEASE`: `mint` and
/// `lease list` work, a wrong password is an error that says so, and neither they nor
/// `--help` show the password.
#[test]
fn mint_and_lease_list_over_etcds_take_the_password_from_the_environment_and_never_show_it() {
    use atomflake_test_servers::etcd::{NAMESPACE, PASSWORD, secure_with_users};
    let Some((cluster, pki)) = secure_with_users("cli-etcds", 300) else {
        return;
    };
    let lease = |password: &str| {
        format!(
            "etcds://app:{password}@{}?cacert={}&cert={}&key={}",
            cluster.members(),
            pki.path("ca.pem").display(),
            pki.path("client.crt").display(),
            pki.path("client.key").display()
        )
    };
    let (status, shown) =
        atomflake_with_lease_env(&["mint", "--namespace", NAMESPACE, "-n", "3"], &lease(PASSWORD));
    assert_eq!(status, Some(0), "{shown}");
    let layout = atomflake::Layout::TWITTER;
    let ids: Vec<u64> = shown.lines().map(|line| line.parse().unwrap()).collect();
    assert_eq!(ids.len(), 3);
    assert!(
        ids.iter()
            .all(|&id| layout.decode(atomflake::Id::new(id)).node == 0)
    );

    let (status, shown) =
        atomflake_with_lease_env(&["lease", "list", "--namespace", NAMESPACE], &lease(PASSWORD));
    assert_eq!(status, Some(0), "{shown}");
    assert!(!shown.contains(PASSWORD), "{shown}");
    assert_eq!(shown.lines().count(), 2, "a header and node 0: {shown}");

    let wrong = format!("{PASSWORD}-wrong");
    let (status, shown) = atomflake_with_lease_env(&["mint", "--namespace", NAMESPACE], &lease(&wrong));
    assert_eq!(status, Some(1), "{shown}");
    assert!(
        shown.starts_with("atomflake: ")
            && shown.contains(
                "authentication failed, invalid user ID or password: check the password of user \"app\""
            ),
        "{shown}"
    );
    assert!(!shown.contains(PASSWORD), "{shown}");

    let (status, help) = atomflake_with_lease_env(&["mint", "--help"], &lease(PASSWORD));
    assert_eq!(status, Some(0));
    assert!(
        help.contains("[env: ATOMFLAKE_LEASE]") && !help.contains(PASSWORD),
        "{help}"
    );
}

#[test]
fn mint_takes_its_node_from_a_zookeeper_lease_and_lease_list_shows_it() {
    let Some(servers) = zookeeper::Ensemble::start("cli-zookeeper", 1) else {
        return;
    };
    mint_twice_and_list(&format!("zk://{}", servers.connect_string()));
}

/// `mint --lease` at `first`, then at `second` (the same engine): node 0 both times
/// (released at exit), the second run past the first. The IDs of both.
fn mint_twice(first: &str, second: &str) -> (Vec<u64>, Vec<u64>) {
    let mint = |url: &str, count: &str| {
        let output = atomflake(&[
            "mint",
            "--lease",
            url,
            "--namespace",
            "cli",
            "--ttl",
            "2",
            "-n",
            count,
        ]);
        assert_eq!((output.status.code(), text(&output.stderr)), (Some(0), ""));
        ids(&output)
    };
    let (first, second) = (mint(first, "5000"), mint(second, "5"));
    assert_eq!((first.len(), second.len()), (5000, 5));
    assert!(first.windows(2).all(|w| w[0] < w[1]));
    let layout = atomflake::Layout::TWITTER;
    assert!(
        first
            .iter()
            .chain(&second)
            .all(|&id| layout.decode(atomflake::Id::new(id)).node == 0)
    );
    assert!(second[0] > *first.last().unwrap());
    (first, second)
}

/// `lease list` of namespace `cli` at `url`: its one row's fields, under the header.
fn list_row(url: &str) -> Vec<String> {
    let list = atomflake(&["lease", "list", "--lease", url, "--namespace", "cli"]);
    assert_eq!((list.status.code(), text(&list.stderr)), (Some(0), ""));
    let lines: Vec<&str> = text(&list.stdout).lines().collect();
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        ["node", "generation", "live", "expires", "high-water", "holder"]
    );
    assert_eq!(lines.len(), 2, "{lines:?}");
    lines[1].split_whitespace().map(str::to_owned).collect()
}

/// On etcd and ZooKeeper, which keep no holder, generation or expiry once a node is free:
/// node 0 free, with the exact mark just past the last ID.
fn mint_twice_and_list(url: &str) {
    let (_, second) = mint_twice(url, url);
    let fields = list_row(url);
    assert_eq!(fields, ["0", "-", "no", "-", &fields[4], "-"], "{fields:?}");
    let mark = chrono::DateTime::parse_from_rfc3339(&fields[4])
        .unwrap()
        .timestamp_millis();
    let last_ms = atomflake::Layout::TWITTER
        .decode(atomflake::Id::new(*second.last().unwrap()))
        .unix_ms;
    assert_eq!(
        u64::try_from(mark).unwrap(),
        last_ms + 1,
        "the exact mark: just past the last id"
    );
}

#[test]
fn a_bad_etcd_or_zookeeper_url_ttl_or_namespace_is_a_usage_error() {
    for (args, expected) in [
        (
            &["lease", "list", "--lease", "mysql://root:secret@db:3306"][..],
            "atomflake: invalid --lease: the lease URL's scheme \"mysql\" names no engine: allowed \
             postgres://, postgresql://, etcd://, etcds://, redis://, rediss://, zk:// or PostgreSQL key=value \
             settings\n",
        ),
        (
            &["mint", "--lease", "etcd://root:pw@h:2379"][..],
            "atomflake: invalid --lease: invalid etcd URL: found '@': an etcd:// URL names members only, \
             etcd://HOST:PORT[,HOST:PORT...]; a user, a password and TLS files go in an etcds:// URL, \
             etcds://[USER:PASSWORD@]HOST:PORT[,...][?cacert=PATH&cert=PATH&key=PATH] (no path or fragment)\n",
        ),
        (
            &["lease", "list", "--lease", "etcd://h:0"][..],
            "atomflake: invalid --lease: invalid etcd URL: member 1's port \"0\" is not a port number: \
             allowed 1..=65535\n",
        ),
        (
            &["mint", "--lease", "etcd://127.0.0.1:9", "--ttl", "0"][..],
            "atomflake: lease time 0ns is out of range: allowed whole seconds in 1s..=3600s\n",
        ),
        (
            &["lease", "list", "--lease", "zk://h:0"][..],
            "atomflake: invalid --lease: invalid ZooKeeper URL: server 1's port \"0\" is not a port \
             number: allowed 1..=65535\n",
        ),
        (
            &["mint", "--lease", "zk://127.0.0.1:9", "--namespace", "a/b"][..],
            "atomflake: invalid lease namespace \"a/b\": allowed 1..=63 bytes of ASCII letters, \
             digits, '-', '_' and '.'\n",
        ),
    ] {
        let output = atomflake(args);
        assert_eq!(
            (output.status.code(), text(&output.stderr)),
            (Some(2), expected),
            "{args:?}"
        );
    }
}
