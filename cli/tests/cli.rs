//! The real `atomflake` binary, run as a user would: stdout, stderr and exit codes.

use std::io::Write;
use std::process::{Command, Output, Stdio};

/// Runs `atomflake args…` with `stdin` on its standard input, `ATOMFLAKE_NODE` unset.
fn run_with(args: &[&str], stdin: impl AsRef<[u8]>, node_env: Option<&str>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_atomflake"));
    command
        .args(args)
        .env_remove("ATOMFLAKE_NODE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(node) = node_env {
        command.env("ATOMFLAKE_NODE", node);
    }
    let mut child = command.spawn().expect("the atomflake binary starts");
    child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(stdin.as_ref())
        .expect("stdin takes the input");
    child.wait_with_output().expect("the atomflake binary runs")
}

fn run(args: &[&str]) -> Output {
    run_with(args, "", None)
}

fn stdout(output: &Output) -> &str {
    std::str::from_utf8(&output.stdout).expect("stdout is UTF-8")
}

fn stderr(output: &Output) -> &str {
    std::str::from_utf8(&output.stderr).expect("stderr is UTF-8")
}

/// Asserts exit code 2, no stdout and exactly `line` on stderr.
fn assert_bad_input(output: &Output, line: &str) {
    assert_eq!(stderr(output), format!("atomflake: {line}\n"));
    assert_eq!(stdout(output), "");
    assert_eq!(output.status.code(), Some(2));
}

fn ids(output: &Output) -> Vec<u64> {
    stdout(output)
        .lines()
        .map(|line| line.parse().expect("one decimal id per line"))
        .collect()
}

#[test]
fn mint_prints_distinct_increasing_ids() {
    let output = run(&["mint", "-n", "5"]);
    assert_eq!((output.status.code(), stderr(&output)), (Some(0), ""));
    let ids = ids(&output);
    assert_eq!(ids.len(), 5);
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
}

#[test]
fn mint_defaults_to_one_twitter_id_from_node_0() {
    let output = run(&["mint"]);
    let ids = ids(&output);
    assert_eq!(ids.len(), 1);
    let decoded = run(&["decode", &ids[0].to_string()]);
    assert!(
        stdout(&decoded).contains("  node 0  sequence 0\n"),
        "{}",
        stdout(&decoded)
    );
}

#[test]
fn mint_spans_several_ticks() {
    let output = run(&["mint", "-n", "20000", "--layout", "sonyflake", "--node", "65535"]);
    let ids = ids(&output);
    assert_eq!(ids.len(), 20_000);
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    // Sonyflake's machine is the lowest 16 bits.
    assert!(ids.iter().all(|id| id & 0xFFFF == 0xFFFF));
}

#[test]
fn mint_node_from_the_environment_and_the_flag() {
    let output = run_with(&["mint", "--format", "json"], "", Some("1023"));
    let text = stdout(&output).trim().trim_matches('"').to_owned();
    let decoded = run(&["decode", "--json", &text]);
    assert!(
        stdout(&decoded).contains(r#","node":1023,"#),
        "{}",
        stdout(&decoded)
    );
    // The flag wins over the environment.
    let output = run_with(&["mint", "--node", "5"], "", Some("1023"));
    let decoded = run(&["decode", stdout(&output).trim()]);
    assert!(stdout(&decoded).contains("  node 5  "), "{}", stdout(&decoded));
}

#[test]
fn mint_base32_and_json_formats() {
    let output = run(&["mint", "-n", "3", "--format", "base32"]);
    let lines: Vec<&str> = stdout(&output).lines().collect();
    assert_eq!(lines.len(), 3);
    assert!(lines.iter().all(|l| l.len() == 13), "{lines:?}");
    assert!(
        lines.windows(2).all(|w| w[0] < w[1]),
        "base32 sorts like the number"
    );
    let decoded = run(&["decode", lines[0]]);
    assert_eq!(decoded.status.code(), Some(0), "{}", stderr(&decoded));

    let output = run(&["mint", "-n", "3", "--format", "json"]);
    for line in stdout(&output).lines() {
        let digits = line.strip_prefix('"').and_then(|l| l.strip_suffix('"'));
        assert!(digits.is_some_and(|d| d.parse::<u64>().is_ok()), "{line}");
    }
}

#[test]
fn decode_published_vectors() {
    let output = run(&["decode", "1541815603606036480", "1050118621198921728"]);
    assert_eq!(
        stdout(&output),
        "1541815603606036480  2022-06-28T16:07:40.105Z  node 378  sequence 0\n\
         1050118621198921728  2018-10-10T20:19:24.211Z  node 347  sequence 0\n"
    );
    assert_eq!((output.status.code(), stderr(&output)), (Some(0), ""));

    let output = run(&["decode", "--layout", "discord", "175928847299117063"]);
    assert_eq!(
        stdout(&output),
        "175928847299117063  2016-04-30T11:18:25.796Z  worker 1  process 0  sequence 7\n"
    );
}

#[test]
fn decode_json_lines() {
    let output = run(&["decode", "--json", "--layout", "discord", "175928847299117063"]);
    assert_eq!(
        stdout(&output),
        "{\"id\":\"175928847299117063\",\"unix_ms\":1462015105796,\
         \"time\":\"2016-04-30T11:18:25.796Z\",\"node\":32,\"worker\":1,\"process\":0,\
         \"sequence\":7}\n"
    );
    let output = run(&["decode", "--json", "1050118621198921728"]);
    assert_eq!(
        stdout(&output),
        "{\"id\":\"1050118621198921728\",\"unix_ms\":1539202764211,\
         \"time\":\"2018-10-10T20:19:24.211Z\",\"node\":347,\"sequence\":0}\n"
    );
}

#[test]
fn decode_reads_base32_case_insensitively() {
    // 175928847299117063 in base32 is 04W86BB0G4007.
    let output = run(&["decode", "--layout", "discord", "04w86bb0g4oo7"]);
    assert_eq!(
        stdout(&output),
        "175928847299117063  2016-04-30T11:18:25.796Z  worker 1  process 0  sequence 7\n"
    );
}

#[test]
fn decode_reads_stdin_when_no_ids_are_given() {
    let output = run_with(
        &["decode"],
        "1541815603606036480\n\n  1050118621198921728  \n",
        None,
    );
    assert_eq!(
        stdout(&output),
        "1541815603606036480  2022-06-28T16:07:40.105Z  node 378  sequence 0\n\
         1050118621198921728  2018-10-10T20:19:24.211Z  node 347  sequence 0\n"
    );
    assert_eq!(output.status.code(), Some(0));
}

#[test]
fn decode_goes_on_after_a_bad_id() {
    let output = run_with(
        &["decode"],
        "12x\n1541815603606036480\n18446744073709551616\n9223372036854775808\n0000000000U00\n",
        None,
    );
    assert_eq!(
        stdout(&output),
        "1541815603606036480  2022-06-28T16:07:40.105Z  node 378  sequence 0\n"
    );
    assert_eq!(
        stderr(&output),
        "atomflake: cannot decode \"12x\": invalid character 'x' at byte 2 in id: ids are \
         written with the digits 0-9 only\n\
         atomflake: cannot decode \"18446744073709551616\": id is out of range: ids allow \
         0..=18446744073709551615\n\
         atomflake: cannot decode \"9223372036854775808\": id 9223372036854775808 is out of \
         range: the layout allows 0..=9223372036854775807\n\
         atomflake: cannot decode \"0000000000U00\": invalid character 'U' at byte 10 in \
         base32 id: base32 ids use Crockford's digits 0-9 and A-Z without U (I and L read as \
         1, O as 0)\n"
    );
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn decode_goes_on_after_a_line_that_is_not_utf8() {
    let output = run_with(
        &["decode"],
        b"1541815603606036480\r\n\xff\xfe12\r\n1050118621198921728\n\x80\n1541815603606036480",
        None,
    );
    assert_eq!(
        stdout(&output),
        "1541815603606036480  2022-06-28T16:07:40.105Z  node 378  sequence 0\n\
         1050118621198921728  2018-10-10T20:19:24.211Z  node 347  sequence 0\n\
         1541815603606036480  2022-06-28T16:07:40.105Z  node 378  sequence 0\n"
    );
    assert_eq!(
        stderr(&output),
        "atomflake: cannot decode line 2: it is not UTF-8\n\
         atomflake: cannot decode line 4: it is not UTF-8\n"
    );
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn decode_bad_arguments_exit_2_with_one_line() {
    assert_bad_input(
        &run(&["decode", "-5"]),
        "cannot decode \"-5\": sign '-' in id: ids are unsigned, written with the digits 0-9 only",
    );
    assert_bad_input(
        &run(&["decode", "G000000000000"]),
        "cannot decode \"G000000000000\": base32 id \"G000000000000\" is out of range: ids \
         allow 0000000000000..=FZZZZZZZZZZZZ",
    );
}

#[test]
fn unknown_layout_exits_2_naming_the_presets() {
    let line = "unknown layout \"snowflake\": the presets are twitter, discord, instagram, \
                sonyflake, mastodon";
    assert_bad_input(&run(&["mint", "--layout", "snowflake"]), line);
    assert_bad_input(&run(&["decode", "--layout", "snowflake", "1"]), line);
}

#[test]
fn out_of_range_node_exits_2() {
    assert_bad_input(
        &run(&["mint", "--node", "1024"]),
        "node 1024 is out of range: the layout allows 0..=1023",
    );
    assert_bad_input(
        &run(&["mint", "--layout", "mastodon", "--node", "1"]),
        "node 1 is out of range: the layout allows 0..=0",
    );
    assert_bad_input(
        &run_with(&["mint"], "", Some("65536")),
        "node 65536 is out of range: the layout allows 0..=1023",
    );
    assert_bad_input(
        &run_with(&["mint"], "", Some("seven")),
        "invalid node \"seven\": the layout allows 0..=1023",
    );
    assert_bad_input(
        &run(&["mint", "--node", "-1"]),
        "invalid node \"-1\": the layout allows 0..=1023",
    );
}

#[test]
fn usage_errors_exit_2() {
    let output = run(&["mint", "--format", "xml"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("'xml'"), "{}", stderr(&output));
}

#[test]
fn layouts_lists_every_preset_with_its_dates() {
    let output = run(&["layouts"]);
    let text = stdout(&output);
    assert_eq!(text.lines().count(), 6, "{text}");
    assert!(text.contains(
        "twitter           41   10       12  1 ms  time|node|seq   2010-11-04T01:42:54.657Z \
         never                    2080-07-10T17:30:30.209Z\n"
    ));
    assert!(text.contains(
        "sonyflake         39   16        8 10 ms  time|seq|node   2014-09-01T00:00:00.000Z \
         never                    2188-11-16T03:28:58.880Z\n"
    ));
    assert!(text.contains(
        "instagram         41   13       10  1 ms  time|node|seq   2011-08-24T21:07:01.721Z \
         2046-06-27T17:00:49.497Z 2081-04-30T12:54:37.273Z\n"
    ));
    for name in ["discord", "instagram", "mastodon"] {
        assert!(text.contains(name), "{name}");
    }
}

#[test]
fn sql_prints_the_script_for_the_layout_and_node() {
    let output = run(&["sql", "--layout", "instagram", "--node", "5"]);
    assert_eq!((output.status.code(), stderr(&output)), (Some(0), ""));
    let script = stdout(&output);
    assert!(script.starts_with("-- atomflake "), "{script}");
    assert!(
        script.contains(
            "13-bit node,\n-- 10-bit sequence, time | node | sequence. Node: 5. Prefix: atomflake."
        )
    );
    assert!(script.contains("CREATE OR REPLACE FUNCTION atomflake_next_id()"));
    let prefixed = run_with(&["sql", "--prefix", "orders"], "", Some("7"));
    assert!(stdout(&prefixed).contains("CREATE OR REPLACE FUNCTION orders_next_id()"));
    assert!(stdout(&prefixed).contains("Node: 7."));
}

#[test]
fn sql_bad_input_exits_2_with_one_line() {
    assert_bad_input(
        &run(&["sql", "--node", "1024"]),
        "node 1024 is out of range: the layout allows 0..=1023",
    );
    assert_bad_input(
        &run(&["sql", "--node", "1", "--prefix", "Orders"]),
        "sql prefix \"Orders\" is not allowed: a prefix is 1..=40 characters of a-z, 0-9 and _, \
         starting with a letter or _",
    );
    assert_bad_input(
        &run(&["sql", "--node", "1", "--max-wait-ms", "600001"]),
        "max wait (ms) 600001 is out of range for in-database minting: allowed 0..=600000",
    );
    let output = run(&["sql"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("--node"), "{}", stderr(&output));
}

#[test]
fn a_closed_stdout_ends_mint_quietly() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_atomflake"))
        .args(["mint", "-n", "100000000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the atomflake binary starts");
    let mut first = [0; 20];
    std::io::Read::read_exact(child.stdout.as_mut().expect("stdout is piped"), &mut first)
        .expect("some output");
    drop(child.stdout.take()); // like `| head`
    let output = child.wait_with_output().expect("the atomflake binary runs");
    assert_eq!((output.status.code(), stderr(&output)), (Some(0), ""));
}
