//! The Python package's tests that need servers: its lease tests (`python/tests/test_leases.py`)
//! against a throwaway PostgreSQL server, etcd cluster, ZooKeeper server and Redis server,
//! and its gRPC stubs (`python/tests/test_grpc.py`) against an `atomflake serve` on
//! loopback, run here.
//!
//! They need a Python with the `atomflake` wheel and pytest installed, named by
//! `ATOMFLAKE_PYTHON`: `.ci/run` builds the wheel with maturin, installs it into a venv and
//! sets it (see `python/README.md` for doing it by hand). Without it the test skips, and
//! under `CI=true` fails.

use atomflake_test_servers::engines::LeaseEngines;
use atomflake_test_servers::skip;
use std::path::Path;
use std::process::Command;

#[test]
fn python_leases_on_every_engine_hand_out_distinct_nodes_and_release_the_exact_mark() {
    let test = "python_leases_on_every_engine_hand_out_distinct_nodes_and_release_the_exact_mark";
    let Some(python) = std::env::var_os("ATOMFLAKE_PYTHON") else {
        skip(
            test,
            "no ATOMFLAKE_PYTHON: a Python with the atomflake wheel and pytest (see python/README.md)",
        );
        return;
    };
    // The server's directory is named after its first argument: a short name keeps its
    // socket's path within 107 bytes.
    let Some(engines) = LeaseEngines::start("python_leases") else {
        return;
    };
    let serve = Serve::start();
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("../python/tests");
    let run = Command::new(python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "servers"])
        .arg(&tests)
        .current_dir(&tests)
        .envs(engines.env())
        .env("ATOMFLAKE_TEST_SERVE", serve.address.to_string())
        .output()
        .expect("the Python of ATOMFLAKE_PYTHON runs");
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    println!("{output}");
    assert!(run.status.success(), "pytest failed:\n{output}");
    // Every test ran: none skipped, none deselected away.
    assert!(output.contains("17 passed"), "not every test ran:\n{output}");
    assert!(!output.contains("skipped"), "a test skipped:\n{output}");
}

/// An `atomflake serve` of node 5 (Twitter's layout) on a loopback port, on a runtime of
/// its own; stopped when dropped.
struct Serve {
    address: std::net::SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Serve {
    fn start() -> Serve {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime");
        let generator = atomflake::ShardedGenerator::new(atomflake::Layout::TWITTER, [5]).expect("node 5");
        let service = atomflake_serve::Service::new(generator, atomflake_serve::Limits::default(), None)
            .expect("the default limits");
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("a loopback port");
        let address = listener.local_addr().expect("its address");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = atomflake_serve::Server::new(listener, service)
            .drain_time(std::time::Duration::from_secs(1))
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            });
        runtime.spawn(server.run());
        Serve {
            address,
            stop: Some(stop),
            runtime: Some(runtime),
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_timeout(std::time::Duration::from_secs(5));
        }
    }
}
