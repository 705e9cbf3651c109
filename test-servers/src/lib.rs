//! Throwaway servers for atomflake's tests: PostgreSQL ([`postgres::Server`]) and MariaDB
//! ([`mariadb::Server`]), each started in a fresh temporary directory on a Unix socket, and
//! etcd clusters ([`etcd::Cluster`]) and ZooKeeper ensembles ([`zookeeper::Ensemble`]) on
//! loopback ports; each is stopped and removed when dropped, also when the test panics. A
//! [`proxy::Proxy`] cuts a client's connections; [`fleet`] runs lease holders as processes
//! for every lease engine.
//!
//! A test that finds no server installed prints `SKIPPED <test>: <why>` and returns; with
//! `CI=true` a skip is a failure instead ([`skip`]).
//!
//! # Panics
//!
//! Every function panics, with the server's output, when a server does not do what it is
//! asked: in a test that is the failure to report.
#![allow(
    clippy::missing_panics_doc,
    clippy::missing_errors_doc,
    reason = "a test harness: each failure is a panic, said once in the crate docs"
)]

pub mod clock;
pub mod etcd;
pub mod fleet;
pub mod mariadb;
mod member;
pub mod pki;
pub mod postgres;
pub mod proxy;
pub mod python;
pub mod zookeeper;

use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

/// `program` in a directory of `PATH`, if there is one.
fn on_path(program: &str) -> Option<std::path::PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|path| path.is_file())
}

/// This machine's clock, Unix ms.
///
/// # Panics
///
/// When the clock reads before 1970.
pub fn now_ms() -> u64 {
    u64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

/// Says loudly that `test` did not run, and why; under `CI=true` that is a failure.
///
/// # Panics
///
/// When the environment has `CI=true`.
pub fn skip(test: &str, why: &str) {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{test}: {why}, and CI=true makes a skip a failure"
    );
    eprintln!("SKIPPED {test}: {why}");
}

/// `count` distinct loopback ports that are free now: all held open while they are
/// chosen, so that none is handed out twice.
fn free_ports(count: usize) -> Vec<u16> {
    let held: Vec<std::net::TcpListener> = (0..count)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    held.iter()
        .map(|listener| listener.local_addr().unwrap().port())
        .collect()
}

/// An empty directory `atomflake-NAME` in the system's temporary directory, this process's
/// ID after `atomflake-`: whatever an earlier run left there is removed.
///
/// # Panics
///
/// When the directory cannot be made.
fn fresh_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("atomflake-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|error| panic!("{}: {error}", dir.display()));
    dir
}

/// Whether this process runs as root (`initdb`, `postgres` and `mariadbd` need another user
/// then).
fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout.trim_ascii() == b"0")
}
