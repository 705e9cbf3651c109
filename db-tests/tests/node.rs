//! The Node.js package's tests that need servers: its lease tests
//! (`node/test/leases.test.mjs`) against a throwaway PostgreSQL server, etcd cluster,
//! ZooKeeper server and Redis server, run here with `node --test`.
//!
//! They need the package's addon built in `node/` (`npm run build` there; `.ci/run` builds
//! it with `.ci/node`). Without it, or without Node.js, the test skips, and under
//! `CI=true` fails.

use atomflake_test_servers::engines::LeaseEngines;
use atomflake_test_servers::skip;
use std::path::Path;
use std::process::Command;

#[test]
fn node_leases_on_every_engine_hand_out_distinct_nodes_and_release_the_exact_mark() {
    let test = "node_leases_on_every_engine_hand_out_distinct_nodes_and_release_the_exact_mark";
    let package = Path::new(env!("CARGO_MANIFEST_DIR")).join("../node");
    if !package.join("atomflake.linux-x64-gnu.node").exists() {
        skip(
            test,
            "no node/atomflake.linux-x64-gnu.node: build it with `npm ci && npm run build` in node/",
        );
        return;
    }
    let Some(engines) = LeaseEngines::start("node_leases") else {
        return;
    };
    let run = Command::new("node")
        .args(["--test", "test/leases.test.mjs"])
        .current_dir(&package)
        .envs(engines.env())
        .output();
    let run = match run {
        Ok(run) => run,
        Err(error) => {
            skip(test, &format!("node does not run: {error}"));
            return;
        }
    };
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    println!("{output}");
    assert!(run.status.success(), "node --test failed:\n{output}");
    // Every test ran: none skipped.
    assert!(output.contains("# pass 17\n"), "not every test ran:\n{output}");
    assert!(output.contains("# skipped 0\n"), "a test skipped:\n{output}");
}
