//! The Python package's lease tests (`python/tests/test_leases.py`) against a throwaway
//! PostgreSQL server, etcd cluster and ZooKeeper server.
//!
//! They need a Python with the `atomflake` wheel and pytest installed, named by
//! `ATOMFLAKE_PYTHON`: `.ci/run` builds the wheel with maturin, installs it into a venv and
//! sets it (see `python/README.md` for doing it by hand). Without it the test skips, and
//! under `CI=true` fails.

use atomflake_test_servers::etcd::Cluster;
use atomflake_test_servers::postgres::Server;
use atomflake_test_servers::skip;
use atomflake_test_servers::zookeeper::Ensemble;
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
    let Some(postgres) = Server::start("python_leases") else {
        return;
    };
    let Some(etcd) = Cluster::start("python_leases", 1) else {
        return;
    };
    let Some(zookeeper) = Ensemble::start("python_leases", 1) else {
        return;
    };
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("../python/tests");
    let run = Command::new(python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "servers"])
        .arg(&tests)
        .current_dir(&tests)
        .env("ATOMFLAKE_TEST_POSTGRES", postgres.conninfo())
        .env("ATOMFLAKE_TEST_ETCD", etcd.url())
        .env(
            "ATOMFLAKE_TEST_ZOOKEEPER",
            format!("zk://{}", zookeeper.connect_string()),
        )
        .output()
        .expect("the Python of ATOMFLAKE_PYTHON runs");
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    println!("{output}");
    assert!(run.status.success(), "pytest failed:\n{output}");
    // Every lease test ran: none skipped, none deselected away.
    assert!(
        output.contains("12 passed"),
        "not every lease test ran:\n{output}"
    );
    assert!(!output.contains("skipped"), "a lease test skipped:\n{output}");
}
