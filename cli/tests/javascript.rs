//! `atomflake mint --layout javascript`, read by Node.js: every ID is a safe integer of
//! JavaScript and prints back as the same decimal. Skipped without `node` (a failure under
//! CI=true).

use atomflake::Layout;
use atomflake_test_servers::output_with_stdin;
use std::fmt::Write as _;
use std::process::{Command, Output};

/// Reads decimal IDs, one a line, from stdin; prints how many and exits 1 naming the first
/// one that `Number` does not hold exactly.
const CHECK: &str = r#"
const lines = require("fs").readFileSync(0, "utf8").split("\n").filter((s) => s !== "");
const bad = lines.filter((s) => { const n = Number(s); return !(Number.isSafeInteger(n) && String(n) === s); });
if (bad.length > 0) { console.log(`${bad.length} of ${lines.length} unsafe, first ${bad[0]}`); process.exit(1); }
console.log(`${lines.length} safe`);
"#;

/// Whether `node` runs; says the test is skipped when not.
fn has_node(test: &str) -> bool {
    atomflake_test_servers::has_command(test, "node", "--version", "(Node.js) to read the IDs")
}

/// `node -e CHECK` over `ids`.
fn node_reads(ids: &str) -> Output {
    output_with_stdin(Command::new("node").args(["-e", CHECK]), ids.as_bytes(), "node")
}

/// `atomflake mint` with these arguments; its stdout.
fn mint(args: &[&str]) -> String {
    let state = std::env::temp_dir().join(format!("atomflake-js-{}-{}", std::process::id(), args.join("-")));
    let output = Command::new(env!("CARGO_BIN_EXE_atomflake"))
        .arg("mint")
        .args(args)
        .env_remove("ATOMFLAKE_NODE")
        .env_remove("ATOMFLAKE_LEASE")
        .env("ATOMFLAKE_HIGH_WATER", &state)
        .output()
        .expect("the atomflake binary runs");
    let _ = std::fs::remove_dir_all(&state);
    assert_eq!(
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).as_ref()
        ),
        (Some(0), "")
    );
    String::from_utf8(output.stdout).expect("stdout is UTF-8")
}

#[test]
fn node_reads_javascript_ids_exactly() {
    if !has_node("node_reads_javascript_ids_exactly") {
        return;
    }
    // 30,000 IDs span a dozen ticks (256 a tick) on the highest node, then the layout's
    // largest ID and the last ID of its span.
    let mut ids = mint(&["--layout", "javascript", "--node", "127", "-n", "30000"]);
    assert_eq!(ids.lines().count(), 30_000);
    let js = Layout::JAVASCRIPT;
    let last = js.last_id_at(js.end_unix_ms() - 1).expect("in the span");
    writeln!(ids, "{}\n{last}", js.max_id()).expect("a String takes text");
    let output = node_reads(&ids);
    assert_eq!(
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).as_ref()
        ),
        (Some(0), "30002 safe\n"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The check tells: Twitter's IDs of today and one past 2^53 - 1 are not read exactly.
#[test]
fn node_refuses_ids_past_2_pow_53() {
    if !has_node("node_refuses_ids_past_2_pow_53") {
        return;
    }
    let twitter = mint(&["--node", "1", "-n", "3"]);
    let output = node_reads(&twitter);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&output.stdout).starts_with("3 of 3 unsafe, first "),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    let output = node_reads(&format!("{}\n", Layout::JS_MAX_SAFE_INTEGER + 2));
    assert_eq!(
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).as_ref()
        ),
        (Some(1), "1 of 1 unsafe, first 9007199254740993\n")
    );
}
