//! One server process of a replicated store (an etcd member, a ZooKeeper server): started
//! with its output appended to a log, killed, signalled.

use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Starts `command`, its output appended to the file `log`.
///
/// # Panics
///
/// When it cannot be started.
pub(crate) fn spawn_logged(command: &mut Command, log: &Path) -> Child {
    let log = std::fs::File::options()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    command
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|err| panic!("cannot run {}: {err}", command.get_program().display()))
}

/// Kills `process` with `SIGKILL`, if it runs, and waits for it to be gone.
pub(crate) fn kill(process: &mut Option<Child>) {
    if let Some(mut process) = process.take() {
        let _ = process.kill();
        let _ = process.wait();
    }
}

/// Sends `signal` (`-STOP`, `-CONT`) to `process`.
///
/// # Panics
///
/// When it does not run, or the signal cannot be sent.
pub(crate) fn signal(process: Option<&Child>, signal: &str) {
    crate::signal(process.expect("the member runs").id(), signal);
}

/// `127.0.0.1:PORT` for each of `ports`, joined by commas: a client's list of servers.
pub(crate) fn loopback(ports: impl IntoIterator<Item = u16>) -> String {
    let addresses: Vec<String> = ports
        .into_iter()
        .map(|port| format!("127.0.0.1:{port}"))
        .collect();
    addresses.join(",")
}
