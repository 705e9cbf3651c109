//! The real `atomflake` binary, run as a user would: stdout, stderr and exit codes.

use atomflake_test_servers::{Killed, output_with_stdin};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A directory of its own for one run's high-water files (`ATOMFLAKE_HIGH_WATER`), so that
/// no test writes the user's home and no two runs share a node's file; removed when
/// dropped.
struct StateDir(PathBuf);

impl StateDir {
    fn new() -> StateDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "cli-state-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        StateDir(dir)
    }
}

impl Drop for StateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `atomflake` with `ATOMFLAKE_NODE` unset and `ATOMFLAKE_HIGH_WATER` at `state`.
fn atomflake(state: &StateDir) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_atomflake"));
    command
        .env_remove("ATOMFLAKE_NODE")
        .env_remove("ATOMFLAKE_LEASE")
        .env("ATOMFLAKE_HIGH_WATER", &state.0);
    command
}

/// Runs `atomflake args…` with `stdin` on its standard input, `ATOMFLAKE_NODE` unset
/// unless `node_env`, and its high-water files in a directory of its own.
fn run_with(args: &[&str], stdin: impl AsRef<[u8]>, node_env: Option<&str>) -> Output {
    let state = StateDir::new();
    let mut command = atomflake(&state);
    command.args(args);
    if let Some(node) = node_env {
        command.env("ATOMFLAKE_NODE", node);
    }
    output_with_stdin(&mut command, stdin.as_ref(), "the atomflake binary")
}

fn run(args: &[&str]) -> Output {
    run_with(args, "", None)
}

/// `atomflake args…`, which must exit 0 with nothing on stderr: its stdout.
fn succeeds(args: &[&str]) -> String {
    let output = run(args);
    assert_eq!(
        (output.status.code(), stderr(&output)),
        (Some(0), ""),
        "atomflake {args:?}"
    );
    stdout(&output).to_owned()
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
    for (format, width) in [("base32", 13), ("base62", 11)] {
        let output = run(&["mint", "-n", "3", "--format", format]);
        let lines: Vec<&str> = stdout(&output).lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines.iter().all(|l| l.len() == width), "{lines:?}");
        assert!(
            lines.windows(2).all(|w| w[0] < w[1]),
            "{format} sorts like the number"
        );
        let decoded = run(&[&["decode"][..], &lines].concat());
        assert_eq!((decoded.status.code(), stderr(&decoded)), (Some(0), ""));
    }
    // As an independent Python base62 in ASCII order writes the published ID.
    assert_eq!(
        succeeds(&["decode", "1ptWyK4WgZU"]),
        "1541815603606036480  2022-06-28T16:07:40.105Z  node 378  sequence 0\n"
    );
    assert_bad_input(
        &run(&["decode", "LygHa16AHYG"]),
        "cannot decode \"LygHa16AHYG\": base62 id \"LygHa16AHYG\" is out of range: ids allow \
         00000000000..=LygHa16AHYF",
    );

    let output = run(&["mint", "-n", "3", "--format", "json"]);
    for line in stdout(&output).lines() {
        let digits = line.strip_prefix('"').and_then(|l| l.strip_suffix('"'));
        assert!(digits.is_some_and(|d| d.parse::<u64>().is_ok()), "{line}");
    }
}

/// `mint --format uuid` writes UUIDs of version 7 that sort as the IDs and that `decode`
/// reads back to them; a UUID of another layout, version or text is refused by name.
#[test]
fn mint_writes_uuids_that_decode_reads_back_and_refuses_others() {
    let output = run(&["mint", "-n", "5", "--node", "9", "--format", "uuid"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let uuids: Vec<&str> = stdout(&output).lines().collect();
    assert_eq!(uuids.len(), 5);
    assert!(
        uuids.windows(2).all(|w| w[0] < w[1]),
        "UUIDs sort as the IDs: {uuids:?}"
    );
    for uuid in &uuids {
        // Version 7 and RFC 9562's variant, in the canonical text.
        let bytes = uuid.as_bytes();
        assert_eq!(
            (uuid.len(), bytes[14], bytes[8], bytes[13]),
            (36, b'7', b'-', b'-'),
            "{uuid}"
        );
        assert!(matches!(bytes[19], b'8' | b'9' | b'a' | b'b'), "{uuid}");
    }
    let decoded = succeeds(&[&["decode"][..], &uuids].concat());
    let ids: Vec<u64> = decoded
        .lines()
        .map(|line| line.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(ids.len(), 5, "{decoded}");
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{decoded}");
    assert!(
        decoded.lines().all(|line| line.contains("  node 9  ")),
        "{decoded}"
    );
    // Twitter's published ID, as Python's uuid module prints the UUID computed from RFC
    // 9562's fields (src/format/uuid.rs), in each form the uuid crate parses.
    let published = "1050118621198921728  2018-10-10T20:19:24.211Z  node 347  sequence 0\n";
    for text in [
        "01665fa2-4db3-7fac-8e92-c5527c95b000",
        "01665FA24DB37FAC8E92C5527C95B000",
        "urn:uuid:01665fa2-4db3-7fac-8e92-c5527c95b000",
    ] {
        assert_eq!(succeeds(&["decode", text]), published, "{text}");
    }
    let refused = |args: &[&str], line: &str| assert_bad_input(&run(args), line);
    refused(
        &[
            "decode",
            "--layout",
            "discord",
            "01665fa2-4db3-7fac-8e92-c5527c95b000",
        ],
        "cannot decode \"01665fa2-4db3-7fac-8e92-c5527c95b000\": uuid carries layout fingerprint 1003: \
         this layout's is 744",
    );
    refused(
        &["decode", "67e55044-10b1-426f-9247-bb680e5fe0c8"],
        "cannot decode \"67e55044-10b1-426f-9247-bb680e5fe0c8\": uuid is of version 4: an id's uuid \
         is of version 7",
    );
    refused(
        &["decode", "01665fa2-4db3-7fac-8e92-c5527c95b00x"],
        "cannot decode \"01665fa2-4db3-7fac-8e92-c5527c95b00x\": not a UUID (invalid character: \
         found `x` at 35): a UUID is 32 hex digits, grouped 8-4-4-4-12 by hyphens or not",
    );
    // The time one ms later than the ID's.
    refused(
        &["decode", "01665fa2-4db4-7fac-8e92-c5527c95b000"],
        "cannot decode \"01665fa2-4db4-7fac-8e92-c5527c95b000\": uuid's unix_ts_ms 1539202764212 is \
         not its id's time 1539202764211 ms",
    );
}

/// A key file in `state`'s directory holding `bytes`, with the permission bits `mode`.
fn key_file(state: &StateDir, name: &str, bytes: &[u8], mode: u32) -> String {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(&state.0).unwrap();
    let path = state.0.join(name);
    std::fs::write(&path, bytes).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path.display().to_string()
}

/// `mask` and `unmask` give the repository's vectors (`tests/mask_vectors.txt`), from
/// arguments and stdin, with the key as hex or as raw bytes; `mint --format masked` writes
/// IDs that `unmask` takes back to increasing IDs of the node.
#[test]
fn mask_and_unmask_give_the_vectors_and_take_back_masked_mints() {
    let state = StateDir::new();
    let vectors = include_str!("../../tests/mask_vectors.txt");
    let mut lines = vectors.lines().filter(|line| !line.starts_with('#'));
    let hex = lines.next().unwrap().strip_prefix("key ").unwrap();
    let (ids, masked): (Vec<&str>, Vec<&str>) = lines.map(|line| line.split_once(' ').unwrap()).unzip();
    let hex_key = key_file(&state, "hex.key", format!("{hex}\n").as_bytes(), 0o600);
    let raw: Vec<u8> = (0..16).collect();
    let raw_key = key_file(&state, "raw.key", &raw, 0o400);
    let with = |command: &str, key: &str, given: &[&str], stdin: &str| {
        let output = output_with_stdin(
            atomflake(&state).args([command, "--key-file", key]).args(given),
            stdin.as_bytes(),
            "the atomflake binary",
        );
        assert_eq!(
            (output.status.code(), stderr(&output)),
            (Some(0), ""),
            "{command}"
        );
        stdout(&output).lines().map(str::to_owned).collect::<Vec<_>>()
    };
    assert_eq!(with("mask", &hex_key, &ids, ""), masked);
    assert_eq!(with("unmask", &raw_key, &[], &(masked.join("\n") + "\n")), ids);

    let output = atomflake(&state)
        .args([
            "mint",
            "-n",
            "100",
            "--node",
            "3",
            "--format",
            "masked",
            "--key-file",
            &hex_key,
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let minted: Vec<&str> = stdout(&output).lines().collect();
    let unmasked: Vec<u64> = with("unmask", &hex_key, &minted, "")
        .iter()
        .map(|id| id.parse().unwrap())
        .collect();
    assert_eq!(unmasked.len(), 100);
    assert!(unmasked.windows(2).all(|w| w[0] < w[1]), "{unmasked:?}");
    assert!(unmasked.iter().all(|&id| (id >> 12) & 1023 == 3), "{unmasked:?}");
    let masked_sorted = minted
        .windows(2)
        .all(|w| w[0].parse::<u64>().unwrap() < w[1].parse::<u64>().unwrap());
    assert!(!masked_sorted, "masked IDs keep the order: {minted:?}");
}

/// Each key file that cannot be used, each ID that does not parse, and the flags that go
/// together is an exact error, exit code 2; the key is never in one.
#[test]
fn mask_refuses_bad_keys_and_ids_with_exact_errors() {
    let state = StateDir::new();
    let open = key_file(&state, "open.key", b"000102030405060708090a0b0c0d0e0f", 0o644);
    let short = key_file(&state, "short.key", &[7; 15], 0o600);
    let not_hex = key_file(&state, "not-hex.key", b"000102030405060708090a0b0c0d0e0g", 0o600);
    let good = key_file(&state, "good.key", &[7; 16], 0o600);
    let missing = state.0.join("missing.key").display().to_string();
    let refused = |args: &[&str], line: &str| assert_bad_input(&run(args), line);
    refused(
        &["mask", "--key-file", &open, "1"],
        &format!(
            "key file {open} has mode 644: a key file may be read and written by its owner alone (chmod 600)"
        ),
    );
    refused(
        &["unmask", "--key-file", &short, "1"],
        &format!(
            "key file {short} holds 15 bytes: a key file holds 16 raw bytes, or 32 hex digits and a line end"
        ),
    );
    refused(
        &["mask", "--key-file", &not_hex, "1"],
        "key has a character other than a hex digit at byte 31: a key is 32 hex digits (0-9, a-f, A-F)",
    );
    refused(
        &["mask", "--key-file", &missing, "1"],
        &format!("cannot read key file {missing}: No such file or directory (os error 2)"),
    );
    refused(
        &["mint", "--format", "masked"],
        "--format masked needs --key-file PATH",
    );
    refused(
        &["mint", "--key-file", &good],
        "--key-file goes with --format masked",
    );
    let output = run(&["mask", "--key-file", &good, "x1", "5"]);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(stdout(&output).lines().count(), 1, "the good ID still masked");
    assert_eq!(
        stderr(&output),
        "atomflake: cannot mask \"x1\": invalid character 'x' at byte 0 in id: ids are decimal (the digits \
         0-9), base32 (13 characters: Crockford's digits 0-9 and A-Z without U, I and L read as 1, O as 0) or \
         base62 (11 characters: 0-9, A-Z, a-z)\n"
    );
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
         decimal (the digits 0-9), base32 (13 characters: Crockford's digits 0-9 and A-Z \
         without U, I and L read as 1, O as 0), base62 (11 characters: 0-9, A-Z, a-z) or a UUID of \
         version 7 (32 hex digits)\n\
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
    let forms = "decimal (the digits 0-9), base32 (13 characters: Crockford's digits 0-9 \
                 and A-Z without U, I and L read as 1, O as 0), base62 (11 characters: 0-9, A-Z, a-z) \
                 or a UUID of version 7 (32 hex digits)";
    assert_bad_input(
        &run(&["decode", "-5"]),
        &format!("cannot decode \"-5\": sign '-' in id: ids are unsigned, {forms}"),
    );
    // Letters in text that is not 13 characters long: decimal or base32 of a wrong length.
    assert_bad_input(
        &run(&["decode", "abc"]),
        &format!("cannot decode \"abc\": invalid character 'a' at byte 0 in id: ids are {forms}"),
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
                sonyflake, mastodon, javascript";
    assert_bad_input(&run(&["mint", "--layout", "snowflake"]), line);
    assert_bad_input(&run(&["decode", "--layout", "snowflake", "1"]), line);
}

#[test]
fn out_of_range_node_exits_2() {
    // (the arguments, `ATOMFLAKE_NODE`, the error line)
    for (args, node_env, line) in [
        (
            &["mint", "--node", "1024"][..],
            None,
            "node 1024 is out of range: the layout allows 0..=1023",
        ),
        (
            &["mint", "--layout", "mastodon", "--node", "1"],
            None,
            "node 1 is out of range: the layout allows 0..=0",
        ),
        (
            &["mint"],
            Some("65536"),
            "node 65536 is out of range: the layout allows 0..=1023",
        ),
        (
            &["mint"],
            Some("seven"),
            "invalid node \"seven\": the layout allows 0..=1023",
        ),
        (
            &["mint", "--node", "-1"],
            None,
            "invalid node \"-1\": the layout allows 0..=1023",
        ),
    ] {
        assert_bad_input(&run_with(args, "", node_env), line);
    }
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
    assert_eq!(text.lines().count(), 7, "{text}");
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
    assert!(text.contains(
        "javascript        38    7        8 10 ms  time|node|seq   2025-01-01T00:00:00.000Z \
         never                    2112-02-09T13:44:29.440Z\n"
    ));
    for name in ["discord", "instagram", "mastodon"] {
        assert!(text.contains(name), "{name}");
    }
}

#[test]
fn sql_prints_the_script_for_the_layout_and_node() {
    let script = succeeds(&["sql", "--layout", "instagram", "--node", "5"]);
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
    let script = succeeds(&[
        "sql",
        "--node",
        "7",
        "--adopt",
        "orders.id",
        "--adopt",
        "shop.items.id",
    ]);
    assert!(script.contains("what text := 'orders.id';"), "{script}");
    assert!(script.contains("what text := 'shop.items.id';"), "{script}");
    let moved = succeeds(&[
        "sql",
        "--layout",
        "discord",
        "--prefix",
        "orders",
        "--to-extension",
    ]);
    assert!(
        moved.contains("set atomflake.layout = discord and restart"),
        "{moved}"
    );
    assert!(moved.contains("'orders_next_id()'"), "{moved}");
    assert!(moved.ends_with("COMMIT;\n"), "{moved}");
    let both = run(&["sql", "--adopt", "t.id", "--to-extension"]);
    assert_eq!(both.status.code(), Some(2));
    assert!(stderr(&both).contains("cannot be used with"), "{}", stderr(&both));
}

#[test]
fn sql_bad_input_exits_2_with_one_line() {
    for (args, line) in [
        (
            &["sql", "--node", "1024"][..],
            "node 1024 is out of range: the layout allows 0..=1023",
        ),
        (
            &["sql", "--node", "1", "--prefix", "Orders"],
            "sql prefix \"Orders\" is not allowed: a prefix is 1..=40 characters of a-z, 0-9 and _, \
             starting with a letter or _",
        ),
        (
            &["sql", "--node", "1", "--max-wait-ms", "600001"],
            "max wait (ms) 600001 is out of range for in-database minting: allowed 0..=600000",
        ),
        (
            &["sql", "--node", "1", "--adopt", "orders"],
            "column \"orders\" cannot be adopted: give TABLE.COLUMN or SCHEMA.TABLE.COLUMN, each \
             name 1..=63 characters of a-z, 0-9 and _, starting with a letter or _",
        ),
    ] {
        assert_bad_input(&run(args), line);
    }
    let output = run(&["sql"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("--node"), "{}", stderr(&output));
}

#[test]
fn a_closed_stdout_ends_mint_quietly() {
    let state = StateDir::new();
    let mut child = atomflake(&state)
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

/// The mark in a high-water file (its second line, `unix_ms <mark>`).
fn mark_in(path: &Path) -> u64 {
    let text = std::fs::read_to_string(path).unwrap();
    let line = text.lines().nth(1).unwrap();
    line.strip_prefix("unix_ms ").unwrap().parse().unwrap()
}

/// The time of a Twitter ID, by `atomflake decode --json`.
fn unix_ms_of(id: u64) -> u64 {
    let output = run(&["decode", "--json", &id.to_string()]);
    let decoded: serde_json::Value = serde_json::from_str(stdout(&output)).unwrap();
    decoded["unix_ms"].as_u64().unwrap()
}

#[test]
fn mint_on_a_fixed_node_keeps_a_high_water_file_per_layout_and_node() {
    let state = StateDir::new();
    let mint = |args: &[&str]| atomflake(&state).arg("mint").args(args).output().unwrap();
    let first = mint(&["-n", "3", "--node", "5"]);
    assert_eq!((first.status.code(), stderr(&first)), (Some(0), ""));
    let file = state.0.join("twitter-node-5.hw");
    // A clean stop leaves the mark just past the last ID (its tick's end), so a run
    // started at once need not wait out the lead the mark kept while minting.
    let last = *ids(&first).last().unwrap();
    assert_eq!(mark_in(&file), unix_ms_of(last) + 1);
    let second = mint(&["-n", "3", "--node", "5"]);
    assert!(ids(&second)[0] > last);
    // Node 0 unless given; one file per layout and node.
    assert_eq!(mint(&["--layout", "sonyflake"]).status.code(), Some(0));
    assert_eq!(mint(&[]).status.code(), Some(0));
    let mut files: Vec<String> = std::fs::read_dir(&state.0)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "sonyflake-node-0.hw",
            "sonyflake-node-0.hw.lock",
            "twitter-node-0.hw",
            "twitter-node-0.hw.lock",
            "twitter-node-5.hw",
            "twitter-node-5.hw.lock"
        ]
    );

    // --no-high-water overrides ATOMFLAKE_HIGH_WATER and writes nothing.
    let none = StateDir::new();
    let output = atomflake(&none)
        .args(["mint", "--no-high-water", "--node", "9"])
        .output()
        .unwrap();
    assert_eq!((output.status.code(), stderr(&output)), (Some(0), ""));
    assert!(!none.0.exists());
}

#[test]
fn the_high_water_directory_defaults_to_the_xdg_state_home_then_home() {
    let root = StateDir::new();
    let mint = |env: &[(&str, &Path)]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_atomflake"));
        command
            .args(["mint", "--node", "4"])
            .env_remove("ATOMFLAKE_NODE")
            .env_remove("ATOMFLAKE_HIGH_WATER")
            .env_remove("XDG_STATE_HOME")
            .env_remove("HOME");
        for (name, value) in env {
            command.env(name, value);
        }
        command.output().unwrap()
    };
    let (home, xdg) = (root.0.join("home"), root.0.join("xdg"));
    let output = mint(&[("HOME", &home)]);
    assert_eq!((output.status.code(), stderr(&output)), (Some(0), ""));
    assert!(home.join(".local/state/atomflake/twitter-node-4.hw").exists());
    let output = mint(&[("HOME", &home), ("XDG_STATE_HOME", &xdg)]);
    assert_eq!((output.status.code(), stderr(&output)), (Some(0), ""));
    assert!(xdg.join("atomflake/twitter-node-4.hw").exists());
    // A relative XDG_STATE_HOME is ignored, as the XDG specification says.
    let output = mint(&[("HOME", &home), ("XDG_STATE_HOME", Path::new("relative"))]);
    assert_eq!((output.status.code(), stderr(&output)), (Some(0), ""));
    assert!(!Path::new("relative").exists());

    assert_bad_input(
        &mint(&[]),
        "no directory for the high-water file of a fixed node: neither XDG_STATE_HOME nor HOME \
         is set; pass --high-water DIR (or set ATOMFLAKE_HIGH_WATER), or --no-high-water to \
         accept that a restart with the clock behind repeats IDs",
    );
}

#[test]
fn a_high_water_file_that_cannot_be_written_is_refused_naming_its_path_and_the_os_error() {
    let state = StateDir::new();
    std::fs::create_dir_all(&state.0).unwrap();
    // Tests may run as root, whom permission bits do not stop: a regular file where a
    // directory must be stops everyone.
    let file = state.0.join("a-file");
    std::fs::write(&file, "").unwrap();
    let mint = |dir: &Path| {
        atomflake(&state)
            .args(["mint", "--high-water"])
            .arg(dir)
            .output()
            .unwrap()
    };
    let how = "pass --high-water DIR (or set ATOMFLAKE_HIGH_WATER) for a writable directory, or \
               --no-high-water to accept that a restart with the clock behind repeats IDs";
    for (dir, line) in [
        (
            file.clone(),
            format!(
                "cannot create the high-water directory {}: File exists (os error 17); {how}",
                file.display()
            ),
        ),
        (
            file.join("state"),
            format!(
                "cannot create the high-water directory {}/state: Not a directory (os error 20); \
                 {how}",
                file.display()
            ),
        ),
    ] {
        let output = mint(&dir);
        assert_eq!(
            (output.status.code(), stdout(&output), stderr(&output)),
            (Some(1), "", format!("atomflake: {line}\n").as_str())
        );
    }
    // The directory is there, its file is not a file.
    let dir = state.0.join("dir");
    std::fs::create_dir_all(dir.join("twitter-node-0.hw.lock")).unwrap();
    let output = mint(&dir);
    assert_eq!(
        (output.status.code(), stderr(&output)),
        (
            Some(1),
            format!(
                "atomflake: could not open the lock file of high-water file {}: Is a directory \
                 (os error 21); {how}\n",
                dir.join("twitter-node-0.hw").display()
            )
            .as_str()
        )
    );
}

#[test]
fn a_second_minter_on_a_node_and_its_high_water_file_is_refused() {
    let state = StateDir::new();
    // The first mints on, blocked on a full pipe that no one reads: it holds the file.
    let mut first = Killed(
        atomflake(&state)
            .args(["mint", "-n", "100000000", "--node", "6"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut line = [0; 20];
    std::io::Read::read_exact(first.0.stdout.as_mut().unwrap(), &mut line).unwrap();
    let second = atomflake(&state).args(["mint", "--node", "6"]).output().unwrap();
    assert_eq!(
        (second.status.code(), stdout(&second), stderr(&second)),
        (
            Some(1),
            "",
            format!(
                "atomflake: high-water file {} is in use: another live generator holds its \
                 lock: another process mints on this node of this layout now, and two would \
                 hand out the same IDs\n",
                state.0.join("twitter-node-6.hw").display()
            )
            .as_str()
        )
    );
    // Another node, or the same node of another layout, is free.
    for args in [&["--node", "7"][..], &["--node", "6", "--layout", "discord"][..]] {
        let output = atomflake(&state).arg("mint").args(args).output().unwrap();
        assert_eq!((output.status.code(), stderr(&output)), (Some(0), ""), "{args:?}");
    }
}

#[test]
fn high_water_options_that_contradict_each_other_or_a_lease_are_usage_errors() {
    let state = StateDir::new();
    let output = run(&["mint", "--high-water", "/tmp", "--no-high-water"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output)
            .starts_with("error: the argument '--high-water <DIR>' cannot be used with '--no-high-water'"),
        "{}",
        stderr(&output)
    );
    for flag in [&["--no-high-water"][..], &["--high-water", "/tmp"][..]] {
        let output = atomflake(&state)
            .args(["mint", "--lease", "postgres://nobody@127.0.0.1:1/x"])
            .args(flag)
            .output()
            .unwrap();
        assert_bad_input(
            &output,
            &format!(
                "{} and --lease: the lease keeps the node's mark (ATOMFLAKE_HIGH_WATER is ignored \
                 with a lease)",
                flag[0]
            ),
        );
    }
    // --help says what --no-high-water risks.
    let help = run(&["mint", "--help"]);
    assert!(
        stdout(&help).contains("The risk: a restart with the clock behind"),
        "{}",
        stdout(&help)
    );
}

/// The exit codes as the help pages list them (`EXIT_SUCCESS`, `EXIT_FAILURE` and
/// `EXIT_BAD_INPUT` in `src/main.rs`).
const EXIT_CODES: &str = "Exit codes:\n  \
    0  success (also when stdout is closed, as by `| head`)\n  \
    1  any other failure: I/O, the clock, a lease lost\n  \
    2  bad input: a usage error, an unknown layout, a node out of range,\n     \
    an ID that does not parse or fit the layout\n";

#[test]
fn every_help_page_ends_with_the_exit_codes_the_command_exits_with() {
    for args in [
        &["help"][..],
        &["--help"],
        &["-h"],
        &["help", "mint"],
        &["mint", "--help"],
        &["help", "decode"],
        &["help", "layouts"],
        &["help", "sql"],
        &["help", "serve"],
        &["help", "lease"],
        &["help", "lease", "list"],
        &["lease", "ddl", "--help"],
    ] {
        let output = run(args);
        assert_eq!(output.status.code(), Some(0), "atomflake {args:?}");
        assert!(
            stdout(&output).ends_with(&format!("\n\n{EXIT_CODES}")),
            "atomflake {args:?} does not end with the exit codes:\n{}",
            stdout(&output)
        );
    }
    // The codes listed are the ones the command exits with.
    let listed: Vec<i32> = EXIT_CODES
        .lines()
        .skip(1)
        .filter(|line| !line.starts_with("     "))
        .map(|line| line.trim_start().split(' ').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(listed, [0, 1, 2]);
    let state = StateDir::new();
    std::fs::create_dir_all(&state.0).unwrap();
    let file = state.0.join("a-file");
    std::fs::write(&file, "").unwrap();
    let file = file.to_str().unwrap();
    for (code, args) in [
        (0, &["mint", "-n", "1"][..]),
        (1, &["mint", "--high-water", file]),
        (2, &["decode", "abc"]),
        (2, &["mint", "--no-such-flag"]),
    ] {
        assert!(listed.contains(&code));
        let output = run(args);
        assert_eq!(
            output.status.code(),
            Some(code),
            "atomflake {args:?}: {}",
            stderr(&output)
        );
    }
}
