//! A throwaway PostgreSQL cluster for the tests that need a real server.
//!
//! [`Server::start`] runs `initdb` into a fresh temporary directory and starts `postgres`
//! on a Unix socket in that directory (`listen_addresses=''`: nothing listens on the
//! network). Dropping the [`Server`] stops it (`pg_ctl stop -m immediate`) and removes the
//! directory, also when the test panics. As root, `initdb` and `postgres` run as the
//! `postgres` user (`runuser`), since both refuse to run as root.
//!
//! The binaries are looked up in `ATOMFLAKE_PG_BIN`, else the newest
//! `/usr/lib/postgresql/*/bin`, else `pg_config --bindir`. Without them, [`Server::start`]
//! returns `None` after printing that the test is skipped; with `CI=true` a missing server
//! is a failure instead.

use crate::{is_root, skip};
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long `pg_ctl` waits for a server to start, stop or be promoted, in seconds. A start
/// after a crash first syncs the whole data directory, and on a loaded machine (busy CPUs,
/// other servers syncing) a start or stop has been seen to take over a minute.
const PG_CTL_WAIT_S: &str = "300";

/// The preloaded library that moves one process's clock (Debian package `faketime`).
pub const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// Removes what libfaketime left in `/dev/shm` for processes that are gone. libfaketime
/// (0.9.10) makes a semaphore and a shared memory segment named by the process's ID when
/// it starts, and removes them only when the process exits: a holder killed with
/// `SIGKILL` leaves them behind. A later process given the same ID by another user (a
/// server run as `postgres` after a holder run as root) cannot open them, and libfaketime
/// refuses to start it.
pub fn remove_stale_faketime_files() {
    let Ok(entries) = std::fs::read_dir("/dev/shm") else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let pid = name
            .strip_prefix("faketime_shm_")
            .or_else(|| name.strip_prefix("sem.faketime_sem_"));
        if let Some(pid) = pid.filter(|pid| pid.bytes().all(|b| b.is_ascii_digit()))
            && !Path::new("/proc").join(pid).exists()
        {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// The seed: Instagram's published PL/pgSQL (2011 engineering blog, "Sharding & IDs at
/// Instagram"), shard 5, restated with `now()` as the time: a sequence taken modulo 1024
/// and no per-millisecond check.
pub const SEED: &str = "
CREATE SEQUENCE seed_seq;
CREATE FUNCTION seed_next_id(OUT result bigint) LANGUAGE plpgsql AS $$
DECLARE
    our_epoch bigint := 1314220021721;
    seq_id bigint;
    now_millis bigint;
    shard_id int := 5;
BEGIN
    SELECT nextval('seed_seq') % 1024 INTO seq_id;
    SELECT floor(extract(epoch FROM now()) * 1000) INTO now_millis;
    result := (now_millis - our_epoch) << 23;
    result := result | (shard_id << 10);
    result := result | (seq_id);
END
$$;";

/// How a test server is started.
#[derive(Default)]
pub struct Options {
    /// Run the server on the stepped clock in this file ([`crate::clock`]):
    /// [`step_clock`]`(file, "-2")` steps the server's clock back by 2 s, and nothing else's.
    pub faketime_file: Option<PathBuf>,
    /// Run the server on a wall clock this far from the real one, with libfaketime
    /// ([`LIBFAKETIME`]) and this `FAKETIME` (`-3s`: 3 s behind): a fixed offset, read
    /// from the environment once. Not with [`faketime_file`](Self::faketime_file). Check
    /// [`can_move_clocks`] first.
    pub clock_offset: Option<&'static str>,
    /// Extra `-c name=value` settings.
    pub settings: Vec<(&'static str, String)>,
    /// Listen on a free loopback TCP port too ([`Server::tcp_conninfo`]).
    pub tcp: bool,
}

impl Options {
    /// Default options but one `-c name=value` setting.
    pub fn setting(name: &'static str, value: &str) -> Options {
        Options {
            settings: vec![(name, value.to_owned())],
            ..Options::default()
        }
    }
}

/// A running throwaway cluster.
pub struct Server {
    root: PathBuf,
    bin: PathBuf,
    port: u16,
    options: Options,
    as_postgres: bool,
}

/// The directory with `initdb`, `pg_ctl` and `postgres`, if there is one.
fn bin_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("ATOMFLAKE_PG_BIN") {
        return Some(PathBuf::from(dir));
    }
    let mut installed: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, bin)| bin.join("pg_ctl").exists())
        .collect();
    installed.sort();
    if let Some((_, bin)) = installed.pop() {
        return Some(bin);
    }
    let output = Command::new("pg_config").arg("--bindir").output().ok()?;
    let dir = PathBuf::from(String::from_utf8(output.stdout).ok()?.trim());
    dir.join("pg_ctl").exists().then_some(dir)
}

pub use crate::clock::{ClockFile, step_clock};

/// Whether the server's library directory holds the shared library `name` (an extension
/// installed with `cargo pgrx install`); says it is skipping `test` when not.
pub fn has_library(test: &str, name: &str) -> bool {
    let installed =
        bin_dir().is_some_and(|bin| bin.with_file_name("lib").join(format!("{name}.so")).exists());
    if !installed {
        skip(
            test,
            &format!("the {name} extension is not installed (see extension/README.md)"),
        );
    }
    installed
}

/// Whether a test can move a process's clock: libfaketime installed (for a fixed offset in
/// its environment, `FAKETIME=-3s`) and the stepped clock built ([`crate::clock`]); says it
/// is skipping `test` when not (under `CI=true` that is a failure).
pub fn can_move_clocks(test: &str) -> bool {
    remove_stale_faketime_files();
    if !Path::new(LIBFAKETIME).exists() {
        skip(test, "libfaketime is not installed (Debian package faketime)");
        return false;
    }
    if let Err(why) = crate::clock::library() {
        skip(test, why);
        return false;
    }
    true
}

/// Runs `command`, panicking with its output if it fails.
fn run(command: &mut Command) -> Output {
    run_or_explain(command, String::new)
}

/// Runs `command`, panicking with its output and `explain()` (a log, say) if it fails.
fn run_or_explain(command: &mut Command, explain: impl FnOnce() -> String) -> Output {
    let output = command
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|err| panic!("cannot run {command:?}: {err}"));
    assert!(
        output.status.success(),
        "{command:?} failed ({}):\n{}\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
        explain(),
    );
    output
}

impl Server {
    /// A fresh server with default options, or `None` (printed as a skip) without one.
    pub fn start(test: &str) -> Option<Server> {
        Server::start_with(test, Options::default())
    }

    /// A fresh server started with `options`.
    pub fn start_with(test: &str, options: Options) -> Option<Server> {
        static NEXT: AtomicU16 = AtomicU16::new(0);
        let Some(bin) = bin_dir() else {
            skip(
                test,
                "no PostgreSQL server: no initdb/pg_ctl; set ATOMFLAKE_PG_BIN or install postgresql",
            );
            return None;
        };
        if options.faketime_file.is_some()
            && let Err(why) = crate::clock::library()
        {
            skip(test, why);
            return None;
        }
        let serial = NEXT.fetch_add(1, Ordering::Relaxed);
        // Port numbers only name the socket file inside `root`, but PostgreSQL also
        // derives its System V key from the port: keep them apart across test processes.
        // A server on TCP takes a port that is free on loopback now, outside the ephemeral
        // range, so that it finds the port free again when it restarts.
        let spread = (std::process::id() * 16 + u32::from(serial)) % 20_000;
        let port = if options.tcp {
            crate::free_ports(1)[0]
        } else {
            20_000 + u16::try_from(spread).unwrap()
        };
        let root = crate::fresh_dir(&format!("pg-{serial}-{test}"));
        let as_postgres = is_root();
        let server = Server {
            root,
            bin,
            port,
            options,
            as_postgres,
        };
        if as_postgres {
            run(Command::new("chown").arg("postgres:postgres").arg(&server.root));
        }
        run(server
            .server_command("initdb")
            .args(["-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8", "-D"])
            .arg(server.data()));
        server.start_again();
        Some(server)
    }

    /// The data directory.
    pub fn data(&self) -> PathBuf {
        self.root.join("data")
    }

    /// The directory holding the server's Unix socket.
    pub fn socket_dir(&self) -> &Path {
        &self.root
    }

    /// The port (it names the socket file).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A libpq connection string.
    pub fn conninfo(&self) -> String {
        format!(
            "host={} port={} user=postgres dbname=postgres",
            self.root.display(),
            self.port
        )
    }

    /// A libpq connection string over loopback TCP (a server started with
    /// [`Options::tcp`]).
    pub fn tcp_conninfo(&self) -> String {
        assert!(self.options.tcp, "the server listens on a Unix socket only");
        format!("host=127.0.0.1 port={} user=postgres dbname=postgres", self.port)
    }

    /// [`conninfo`](Self::conninfo) for another role.
    pub fn conninfo_as(&self, user: &str) -> String {
        format!(
            "host={} port={} user={user} dbname=postgres",
            self.root.display(),
            self.port
        )
    }

    /// Replaces `pg_hba.conf` with `lines` after a line that lets every local (Unix
    /// socket) connection in without a password (what [`psql`](Self::psql) uses), and
    /// makes the server read it again.
    pub fn set_hba(&self, lines: &str) {
        std::fs::write(
            self.data().join("pg_hba.conf"),
            format!("local all all trust\n{lines}\n"),
        )
        .unwrap();
        assert_eq!(self.psql("SELECT pg_reload_conf()").trim(), "t");
    }

    /// Makes the server's user the owner of `path` with mode 0600 (a key file the server
    /// reads), when this process runs as root.
    pub fn give_to_server(&self, path: &Path) {
        if self.as_postgres {
            run(Command::new("chown").arg("postgres:postgres").arg(path));
        }
        run(Command::new("chmod").arg("600").arg(path));
    }

    /// A URL for clients that take one (sqlx).
    pub fn url(&self) -> String {
        format!(
            "postgres://postgres@localhost:{}/postgres?host={}",
            self.port,
            self.root.display()
        )
    }

    /// A server program (`initdb`, `pg_ctl`) as the user the server runs as.
    fn server_command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        let mut command = if self.as_postgres {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(path);
            command
        } else {
            Command::new(path)
        };
        command.env("LC_ALL", "C");
        command
    }

    /// A client program (`psql`, `pgbench`) pointed at this server.
    pub fn client(&self, program: &str) -> Command {
        let mut command = Command::new(self.bin.join(program));
        command
            .env("PGHOST", &self.root)
            .env("PGPORT", self.port.to_string())
            .env("PGUSER", "postgres")
            .env("PGDATABASE", "postgres");
        command
    }

    /// Starts the server (again, after [`stop`](Self::stop)) and waits until it answers.
    ///
    /// With `fsync = off`: every crash these tests make is a crash of the server's
    /// processes, never of the machine, and the kernel keeps what the server wrote. A
    /// commit still writes its WAL out of the server's buffers before it returns (what a
    /// crash of the server loses is what it had not written: asynchronous commits,
    /// [`crash_losing_unwritten_wal`](Self::crash_losing_unwritten_wal)). Flushing to disk
    /// would add nothing these tests check, and on a loaded machine it stalled every commit
    /// for seconds (renewals of 40 holders took 8 s each, all at once).
    pub fn start_again(&self) {
        let listen = if self.options.tcp { "127.0.0.1" } else { "" };
        let mut settings = format!(
            "-k {} -p {} -c listen_addresses='{listen}' -c fsync=off -c max_connections=40",
            self.root.display(),
            self.port
        );
        for (name, value) in &self.options.settings {
            write!(settings, " -c {name}={value}").unwrap();
        }
        let mut command = self.server_command("pg_ctl");
        if let Some(file) = &self.options.faketime_file {
            // pg_ctl passes its environment on to `postgres` (runuser keeps it too). Only
            // the wall clock moves: timeouts and sleeps keep real time.
            command.envs(crate::clock::environment(file));
        }
        if let Some(offset) = self.options.clock_offset {
            assert!(
                self.options.faketime_file.is_none(),
                "a server runs on a stepped clock or an offset one, not both"
            );
            command.envs([
                ("LD_PRELOAD", LIBFAKETIME),
                ("FAKETIME", offset),
                ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
            ]);
        }
        let log = self.root.join("log");
        run_or_explain(
            command
                .arg("-D")
                .arg(self.data())
                .arg("-l")
                .arg(&log)
                .args(["-w", "-t", PG_CTL_WAIT_S, "-o"])
                .arg(settings)
                .arg("start"),
            || {
                format!(
                    "server log:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                )
            },
        );
    }

    /// Starts the server again (after [`stop`](Self::stop)) with `settings` as its `-c`
    /// settings instead of those it had: a server restarted with other settings.
    pub fn start_again_with(&mut self, settings: Vec<(&'static str, String)>) {
        self.options.settings = settings;
        self.start_again();
    }

    /// Stops the server: `mode` is `fast` or `immediate` (a crash: no shutdown checkpoint).
    pub fn stop(&self, mode: &str) {
        run(self.server_command("pg_ctl").arg("-D").arg(self.data()).args([
            "-w",
            "-t",
            PG_CTL_WAIT_S,
            "-m",
            mode,
            "stop",
        ]));
    }

    /// Crashes the server losing what it has not written out: stops its WAL writer
    /// (`SIGSTOP`), runs `before_crash` (which commits what the crash may lose: with
    /// `synchronous_commit = off`, commits that nothing flushed stay in the server's WAL
    /// buffers), then kills the postmaster and every server process with `SIGKILL`.
    /// Start it again with [`start_again`](Self::start_again).
    pub fn crash_losing_unwritten_wal(&self, before_crash: impl FnOnce()) {
        self.stop_wal_writer_asleep();
        before_crash();
        // Stopped, the postmaster starts no process between the listing and the kill: one
        // it started would outlive it attached to the shared memory, and the server
        // would refuse to start again.
        let postmaster = self.postmaster();
        crate::signal(postmaster.parse().unwrap(), "-STOP");
        self.signal_all("-KILL");
        let alive = || {
            Command::new("kill")
                .args(["-0", &postmaster])
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|status| status.success())
        };
        crate::wait_until(
            "the postmaster outlived SIGKILL",
            Duration::from_millis(20),
            || !alive(),
            String::new,
        );
    }

    /// Stops the WAL writer (`SIGSTOP`) while it sleeps in its main loop. Stopped at any
    /// other instant it may hold the lock on writing the WAL out, and every commit that
    /// flushes (a durable one) would wait for it for good.
    fn stop_wal_writer_asleep(&self) {
        // A server that has just started (or started again) may not list its WAL writer yet.
        let pid = crate::wait_for(
            "no WAL writer in pg_stat_activity",
            Duration::from_millis(20),
            || {
                Some(self.psql("SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'"))
                    .filter(|pid| !pid.trim().is_empty())
            },
            String::new,
        );
        let pid = pid.trim();
        for _ in 0..500 {
            crate::signal(pid.parse().unwrap(), "-STOP");
            let waits = self.psql(&format!(
                "SELECT wait_event FROM pg_stat_activity WHERE pid = {pid}"
            ));
            if waits.trim() == "WalWriterMain" {
                return;
            }
            run(Command::new("kill").args(["-CONT", pid]));
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("the WAL writer {pid} was never found asleep in its main loop");
    }

    /// The postmaster's process ID, from `postmaster.pid`.
    fn postmaster(&self) -> String {
        let pid_file = std::fs::read_to_string(self.data().join("postmaster.pid")).unwrap();
        pid_file.lines().next().unwrap().trim().to_owned()
    }

    /// Sends `signal` (`-STOP`, `-CONT`) to the postmaster and every process it started:
    /// `-STOP` freezes the whole server, as a paused VM would, with its sockets still open.
    pub fn signal_all(&self, signal: &str) {
        let postmaster = self.postmaster();
        let children = run(Command::new("pgrep").args(["-P", &postmaster]));
        let mut pids = vec![postmaster];
        pids.extend(
            String::from_utf8(children.stdout)
                .unwrap()
                .split_whitespace()
                .map(str::to_owned),
        );
        run(Command::new("kill").arg(signal).args(&pids));
        if signal == "-STOP" {
            for pid in &pids {
                crate::wait_stopped(pid.parse().unwrap());
            }
        }
    }

    /// Runs SQL through `psql` and returns its unaligned, tuples-only output.
    pub fn psql(&self, sql: &str) -> String {
        let output = run(self
            .client("psql")
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c"])
            .arg(sql));
        String::from_utf8(output.stdout).unwrap()
    }

    /// The one whole number that `sql`, run through [`psql`](Server::psql), answers.
    ///
    /// # Panics
    ///
    /// As [`psql`](Server::psql), and when the answer is not one number.
    pub fn psql_u64(&self, sql: &str) -> u64 {
        let answer = self.psql(sql);
        answer
            .trim()
            .parse()
            .unwrap_or_else(|error| panic!("{sql}: {answer:?} is not a number: {error}"))
    }

    /// Runs SQL through `psql` expecting it to fail, and returns the error text.
    pub fn psql_error(&self, sql: &str) -> String {
        let output = self
            .client("psql")
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c"])
            .arg(sql)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(!output.status.success(), "{sql} succeeded");
        String::from_utf8(output.stderr).unwrap()
    }

    /// Runs a script file through `psql` (`-f`), in one transaction.
    pub fn psql_file(&self, script: &str) {
        let path = self.root.join(format!("script-{}.sql", script.len()));
        std::fs::write(&path, script).unwrap();
        run(self
            .client("psql")
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-1", "-f"])
            .arg(&path));
    }

    /// Runs `pgbench` with `args` and returns its standard output.
    pub fn pgbench<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(&self, args: I) -> String {
        let output = run(self.client("pgbench").args(args));
        String::from_utf8(output.stdout).unwrap()
    }

    /// Inserts rows into `table`, whose ID column has a minting default, 50 rows a
    /// transaction (`INSERT INTO table (v) ...`), from `clients` pgbench sessions for
    /// `seconds`: the number of rows inserted, and rows a second. Panics unless every
    /// transaction succeeded: a repeated ID fails one on the table's primary key.
    pub fn insert_from_sessions(&self, table: &str, clients: u32, seconds: u32) -> (u64, f64) {
        let (done, failed, tps) = self.bench(
            &format!("INSERT INTO {table} (v) SELECT g FROM generate_series(1, 50) AS g;\n"),
            clients,
            seconds,
        );
        assert!(done > 0, "no transaction in {seconds} s");
        assert_eq!(failed, 0, "{table}: failed transactions: a repeated id fails one");
        (done * 50, tps * 50.0)
    }

    /// Runs pgbench with `clients` sessions, each running `script` for `seconds`, and returns
    /// (transactions, failed transactions, transactions per second).
    pub fn bench(&self, script: &str, clients: u32, seconds: u32) -> (u64, u64, f64) {
        let path = self.file(&format!("bench-{}.sql", script.len()));
        std::fs::write(&path, script).unwrap();
        let output = self.pgbench([
            "-n".to_owned(),
            "-c".to_owned(),
            clients.to_string(),
            "-j".to_owned(),
            clients.min(2).to_string(),
            "-T".to_owned(),
            seconds.to_string(),
            "-f".to_owned(),
            path.display().to_string(),
        ]);
        let field = |label: &str| -> String {
            let line = output
                .lines()
                .find(|line| line.starts_with(label))
                .unwrap_or_else(|| panic!("no {label:?} in pgbench's output:\n{output}"));
            line[label.len()..].trim().to_owned()
        };
        let done: u64 = field("number of transactions actually processed:")
            .split('/')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let failed: u64 = field("number of failed transactions:")
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let tps: f64 = field("tps =").split_whitespace().next().unwrap().parse().unwrap();
        (done, failed, tps)
    }

    /// The milliseconds `sql` takes, as `psql`'s `\timing` reports them.
    pub fn timed(&self, sql: &str) -> f64 {
        let path = self.file("timed.sql");
        std::fs::write(&path, format!("\\timing on\n{sql}\n")).unwrap();
        let output = run(self
            .client("psql")
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-f"])
            .arg(&path));
        let text = String::from_utf8(output.stdout).unwrap();
        text.lines()
            .find_map(|line| line.strip_prefix("Time: "))
            .and_then(|line| line.split_whitespace().next())
            .and_then(|ms| ms.parse().ok())
            .unwrap_or_else(|| panic!("no time in psql's output:\n{text}"))
    }

    /// Asserts that the server's wall clock is `seconds` behind this process's (negative:
    /// ahead), as far as one query can tell: the server read its clock at some instant of
    /// the query's round trip, so the offset lies between the round trip's ends, less what
    /// the server read. A loaded machine stretches the round trip, and with it what the
    /// check accepts, never the other way.
    pub fn assert_behind(&self, seconds: f64) {
        let now = || {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_secs_f64()
        };
        let before = now();
        let theirs: f64 = self
            .psql("SELECT extract(epoch FROM clock_timestamp())")
            .trim()
            .parse()
            .unwrap();
        let after = now();
        // 0.1 s for the two clocks' reads, and the rounding of what psql prints.
        let (low, high) = (before - theirs - 0.1, after - theirs + 0.1);
        assert!(
            (low..=high).contains(&seconds),
            "the server's clock is {low:.3} to {high:.3} s behind, not {seconds} s"
        );
    }

    /// The server's wall clock, in Unix ms.
    pub fn unix_ms(&self) -> u64 {
        self.psql("SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)")
            .trim()
            .parse()
            .unwrap()
    }

    /// Steps the server's clock 2 s back in the middle of a write: one pgbench client, with
    /// `pgbench_options` (`-C`: a new connection per transaction), inserts 50 rows a
    /// statement into `t` (whose `bigserial` column `n` gives the order in which they were
    /// minted), 80 statements; once 2,000 rows are in, however slowly a busy machine runs
    /// it, `faketime` steps the clock back; the client is waited for.
    ///
    /// # Panics
    ///
    /// When the client ends before 2,000 rows or fails, or the clock is not 2 s behind.
    pub fn step_back_while_writing(&self, faketime: &Path, pgbench_options: &[&str]) {
        let script = self.file("writer.sql");
        std::fs::write(
            &script,
            "INSERT INTO t (n) SELECT nextval('t_n_seq') FROM generate_series(1, 50);\n",
        )
        .unwrap();
        let mut writer = self.client("pgbench");
        writer
            .args(["-n", "-c", "1", "-t", "80"])
            .args(pgbench_options)
            .arg("-f")
            .arg(&script);
        let writer = std::thread::spawn(move || writer.output());
        let rows = || self.psql_u64("SELECT count(*) FROM t");
        while rows() < 2000 {
            assert!(!writer.is_finished(), "the writer ended before 2,000 rows");
            std::thread::sleep(Duration::from_millis(20));
        }
        step_clock(faketime, "-2");
        self.assert_behind(2.0);
        let output = writer.join().unwrap().unwrap();
        assert!(output.status.success(), "{output:?}");
    }

    /// A file in the server's temporary directory (for scripts, faketime files).
    pub fn file(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    /// Waits until `psql` can connect (after a restart that `pg_ctl -w` already awaited,
    /// this returns at once), for [`HANG_GUARD`](crate::HANG_GUARD) at most.
    pub fn wait_ready(&self) {
        let start = Instant::now();
        while start.elapsed() < crate::HANG_GUARD {
            let ok = self
                .client("psql")
                .args(["-X", "-q", "-c", "select 1"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|status| status.success());
            if ok {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("server did not come up in {:?} (the hang guard)", start.elapsed());
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self
            .server_command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-w", "-m", "immediate", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Physical replication: a hot standby of a test server, and its promotion.
impl Server {
    /// A hot standby of this server: `pg_basebackup -R` copies the data directory into a
    /// fresh temporary directory, and the copy starts on its own socket directory and port
    /// with `options`, streaming from this server. The primary's `-c` settings are not in
    /// the copy: `options` holds the standby's own. Dropping it stops it and removes its
    /// directory, as for any [`Server`].
    #[must_use]
    pub fn standby(&self, test: &str, options: Options) -> Server {
        static NEXT: AtomicU16 = AtomicU16::new(0);
        let serial = NEXT.fetch_add(1, Ordering::Relaxed);
        // The primaries' spread, in 40000..60000: apart from theirs (20000..40000).
        let spread = (std::process::id() * 16 + u32::from(serial)) % 20_000;
        let port = 40_000 + u16::try_from(spread).unwrap();
        let root = crate::fresh_dir(&format!("pg-standby-{serial}-{test}"));
        let standby = Server {
            root,
            bin: self.bin.clone(),
            port,
            options,
            as_postgres: self.as_postgres,
        };
        if standby.as_postgres {
            run(Command::new("chown").arg("postgres:postgres").arg(&standby.root));
        }
        run(standby
            .server_command("pg_basebackup")
            .args(["-R", "-X", "stream", "-c", "fast", "--no-sync"])
            .args(["-U", "postgres", "-h"])
            .arg(&self.root)
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-D")
            .arg(standby.data()));
        standby.start_again();
        standby
    }

    /// Whether the server is in recovery (`pg_is_in_recovery()`): a standby is.
    pub fn in_recovery(&self) -> bool {
        self.psql("SELECT pg_is_in_recovery()").trim() == "t"
    }

    /// Promotes a standby (`pg_ctl promote`) and waits until it is out of recovery.
    pub fn promote(&self) {
        run(self.server_command("pg_ctl").arg("-D").arg(self.data()).args([
            "-w",
            "-t",
            PG_CTL_WAIT_S,
            "promote",
        ]));
        crate::wait_until(
            "the standby is still in recovery after pg_ctl promote",
            Duration::from_millis(20),
            || !self.in_recovery(),
            String::new,
        );
    }
}

/// The first ID a refused column adoption names (`... at or above FIRST ...`), with its
/// Unix ms: checked to be the first ID of a Twitter-layout tick minted in `from..=to`
/// (Unix ms), as the refusal mints one to compare against.
///
/// # Panics
///
/// When `error` names no such ID.
pub fn adoption_refused_at(error: &str, from: u64, to: u64) -> (u64, u64) {
    let layout = atomflake::Layout::TWITTER;
    let first: u64 = error
        .split_once("at or above ")
        .and_then(|(_, rest)| rest.split_once(' '))
        .and_then(|(first, _)| first.parse().ok())
        .unwrap_or_else(|| panic!("no first id in {error:?}"));
    let first_ms = layout.decode(atomflake::Id::new(first)).unix_ms;
    assert!((from..=to).contains(&first_ms), "{first_ms} not in {from}..={to}");
    assert_eq!(layout.first_id_at(first_ms).unwrap().get(), first);
    (first, first_ms)
}
