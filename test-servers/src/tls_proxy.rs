//! A TLS-terminating proxy in front of one server, as a cluster behind `haproxy`, nginx's
//! stream module or ghostunnel runs: `haproxy` (Debian package `haproxy`) takes the client's
//! TLS with a client certificate required, and opens a TLS connection of its own to the
//! server only once a client's handshake is done. When the server is down, each client
//! completes its handshake and is then closed without a byte: what a server that refused
//! the client's certificate does too.
//!
//! The binary is `ATOMFLAKE_HAPROXY` if set, else `haproxy` on the `PATH` or in
//! `/usr/sbin`. Without it, [`TlsProxy::start`] returns `None` after printing that the test
//! is skipped; with `CI=true` that is a failure instead.

use crate::pki::Pki;
use crate::{free_ports, member, skip};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::Duration;

/// A running `haproxy`, killed and its directory removed when dropped.
pub struct TlsProxy {
    dir: PathBuf,
    port: u16,
    process: Option<Child>,
}

/// The `haproxy` binary, if there is one.
fn binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("ATOMFLAKE_HAPROXY") {
        return Some(PathBuf::from(path));
    }
    crate::on_path("haproxy").or_else(|| {
        let sbin = PathBuf::from("/usr/sbin/haproxy");
        sbin.is_file().then_some(sbin)
    })
}

impl TlsProxy {
    /// A proxy on a free loopback port to the TLS server at `127.0.0.1:upstream`, with the
    /// certificates of `pki`: it serves `server.crt` (for 127.0.0.1), requires a client
    /// certificate signed by `ca.pem`, and agrees to HTTP/2 by ALPN; to the server it
    /// presents `client.crt` and verifies the server's against `ca.pem`. It connects to the
    /// server once for each client, once, and closes the client's connection when that
    /// fails. `None` (printed as a skip) without `haproxy`.
    pub fn start(test: &str, pki: &Pki, upstream: u16) -> Option<TlsProxy> {
        let Some(binary) = binary() else {
            skip(test, "no haproxy: install haproxy or set ATOMFLAKE_HAPROXY");
            return None;
        };
        let dir = crate::fresh_dir(&format!("haproxy-{test}"));
        let concatenated = |name: &str| {
            let path = dir.join(format!("{name}.pem"));
            let mut pem = std::fs::read(pki.path(&format!("{name}.crt"))).unwrap();
            pem.extend(std::fs::read(pki.path(&format!("{name}.key"))).unwrap());
            std::fs::write(&path, pem).unwrap();
            path
        };
        let (served, presented) = (concatenated("server"), concatenated("client"));
        let ca = pki.path("ca.pem");
        let port = free_ports(1)[0];
        let config = format!(
            "defaults\n    mode tcp\n    timeout connect 1s\n    timeout client 30s\n    \
             timeout server 30s\n    retries 0\n\
             frontend member\n    bind 127.0.0.1:{port} ssl crt {served} ca-file {ca} verify required \
             alpn h2\n    default_backend member\n\
             backend member\n    server member 127.0.0.1:{upstream} ssl verify required ca-file {ca} \
             crt {presented} alpn h2\n",
            served = served.display(),
            ca = ca.display(),
            presented = presented.display(),
        );
        let file = dir.join("haproxy.cfg");
        std::fs::write(&file, config).unwrap();
        let mut command = Command::new(binary);
        command.arg("-db").arg("-f").arg(&file);
        let process = member::spawn_logged(&mut command, &dir.join("haproxy.log"));
        let proxy = TlsProxy {
            dir,
            port,
            process: Some(process),
        };
        crate::wait_until(
            "haproxy does not listen",
            Duration::from_millis(20),
            || TcpStream::connect(("127.0.0.1", port)).is_ok(),
            || std::fs::read_to_string(proxy.dir.join("haproxy.log")).unwrap_or_default(),
        );
        Some(proxy)
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for TlsProxy {
    fn drop(&mut self) {
        member::kill(&mut self.process);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
