//! A throwaway MariaDB (or MySQL) server for the sqlx MySQL tests.
//!
//! [`Server::start`] runs `mariadb-install-db` into a fresh temporary directory and starts
//! `mariadbd` on a Unix socket there (`--skip-networking`: nothing listens on the network).
//! Dropping the [`Server`] kills it and removes the directory, also when the test panics.
//! As root, the server runs with `--user=root`.
//!
//! The programs are looked up on `PATH` and in `/usr/sbin` (Debian package
//! `mariadb-server`). Without them, [`Server::start`] prints that the test is skipped and
//! returns `None`; with `CI=true` a missing server is a failure instead.

use crate::{is_root, skip};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running throwaway server.
pub struct Server {
    root: PathBuf,
    child: Child,
}

/// `program` on `PATH` or in `/usr/sbin`, if installed.
fn find(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.exists())
}

impl Server {
    /// A fresh server with an empty database `atomflake`, or `None` (printed as a skip).
    pub fn start(test: &str) -> Option<Server> {
        let (Some(install), Some(server)) = (find("mariadb-install-db"), find("mariadbd")) else {
            skip(test, "no MariaDB server (Debian package mariadb-server)");
            return None;
        };
        let root = crate::fresh_dir(&format!("mysql-{test}"));
        let user: &[&str] = if is_root() { &["--user=root"] } else { &[] };
        let output = Command::new(install)
            .arg("--no-defaults")
            .arg(format!("--datadir={}", root.join("data").display()))
            // A temporary directory of its own: the bootstrap's temporary tables in a
            // shared /tmp are not this server's alone.
            .arg(format!("--tmpdir={}", root.display()))
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"])
            .args(user)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "mariadb-install-db failed:\n{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let child = Command::new(server)
            .arg("--no-defaults")
            .arg(format!("--datadir={}", root.join("data").display()))
            .arg(format!("--socket={}", root.join("socket").display()))
            .arg(format!("--pid-file={}", root.join("pid").display()))
            .arg(format!("--tmpdir={}", root.display()))
            .arg(format!("--log-error={}", root.join("log").display()))
            .args(["--skip-networking", "--innodb-buffer-pool-size=16M"])
            .args(user)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let server = Server { root, child };
        server.wait_ready();
        Some(server)
    }

    /// The Unix socket.
    pub fn socket(&self) -> PathBuf {
        self.root.join("socket")
    }

    /// A URL for sqlx, naming the `atomflake` database.
    pub fn url(&self) -> String {
        format!(
            "mysql://root@localhost/atomflake?socket={}",
            self.socket().display()
        )
    }

    /// Waits until the `mariadb` client can connect, then creates the database; for
    /// [`HANG_GUARD`](crate::HANG_GUARD) at most.
    fn wait_ready(&self) {
        crate::wait_until(
            "MariaDB did not come up",
            Duration::from_millis(100),
            || self.sql("create database if not exists atomflake").is_ok(),
            || std::fs::read_to_string(self.root.join("log")).unwrap_or_default(),
        );
    }

    /// Runs SQL through the `mariadb` client (tab-separated, no headers).
    pub fn sql(&self, sql: &str) -> Result<String, String> {
        let client = find("mariadb").expect("mariadb client");
        let output = Command::new(client)
            .arg("--no-defaults")
            .arg(format!("--socket={}", self.socket().display()))
            .args(["-u", "root", "-N", "-B", "-e", sql])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        if output.status.success() {
            Ok(String::from_utf8(output.stdout).unwrap())
        } else {
            Err(String::from_utf8_lossy(&output.stderr).into_owned())
        }
    }

    /// The server's directory.
    pub fn root(&self) -> &Path {
        &self.root
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}
