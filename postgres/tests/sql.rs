//! The in-database minting script ([`PgScript`]) against a real PostgreSQL server.
//!
//! Each test starts its own throwaway cluster (`atomflake-test-servers`), or prints that it skipped when
//! no server is installed (a failure under `CI=true`). Checked here:
//!
//! - the script applies twice, and refuses a state made for another layout;
//! - for every preset, SQL decodes what Rust decodes, for minted and random IDs, and
//!   `first_id_at` / `last_id_at` agree with Rust;
//! - IDs minted in PostgreSQL (node 7) and by a Rust generator (node 8) never collide and
//!   sort by time together;
//! - one statement inserts 5,000 rows, where the seed's `now()` function collides;
//! - many sessions (pgbench), with the clock and with times jumping back and forth: no
//!   failed transaction, no duplicate;
//! - the clock moving back (through `next_id_at`, and the server's own clock stepped back
//!   with libfaketime): no ID repeats or decreases; a spent tick is an exact error;
//! - `next_id_at` mints at most 5 s ahead of the server's clock (half the max wait), the
//!   edge checked with the clock stopped, so `next_id()` stays at the clock;
//! - calls cancelled (statement timeout) or killed while they wait for a spent tick, more
//!   of them than the counter has room for past the sequence field, take nothing, and no
//!   ID repeats after;
//! - a server running more sessions than the layout's headroom: the exact error when the
//!   script is applied and at the next jump, and none at exactly the headroom;
//! - a crash (`pg_ctl stop -m immediate`) and a rollback give no ID back;
//! - times outside the span, IDs past `i64::MAX`, negative IDs: exact errors.

use atomflake_test_servers::postgres as pg;
use atomflake_test_servers::{HANG_GUARD, now_ms, uuids};

use atomflake::{Builder, Id, Layout, PreciseClock};
use atomflake_postgres::sql::PgScript;
use pg::Server;
use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::process::{Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// A fixed time inside the span of every preset but the JavaScript one (whose epoch is
/// 2025), for `next_id_at`.
const T: u64 = 1_700_000_000_000;

/// Applies the script for `layout` and `node` in schema `schema` (created if missing).
/// Panics, showing `text`, when `text` does not contain `part`.
#[track_caller]
fn assert_has(text: &str, part: &str) {
    assert!(text.contains(part), "{part:?} is not in {text:?}");
}

/// A layout of no node: a timestamp of `timestamp_bits` ms since Twitter's epoch and a
/// sequence of `sequence_bits`.
fn nodeless(timestamp_bits: u32, sequence_bits: u32) -> Layout {
    Layout::builder()
        .timestamp_bits(timestamp_bits)
        .node_bits(0)
        .sequence_bits(sequence_bits)
        .epoch_ms(Layout::TWITTER.epoch_ms())
        .tick_ms(1)
        .build()
        .unwrap()
}

fn install(server: &Server, schema: &str, script: &PgScript) {
    server.psql_file(&format!(
        "CREATE SCHEMA IF NOT EXISTS {schema};\nSET search_path TO {schema};\n{script}"
    ));
}

/// A fresh server with the script for `layout` and `node` in `public`.
fn installed(test: &str, layout: Layout, node: u64) -> Option<Server> {
    let server = Server::start(test)?;
    install(&server, "public", &PgScript::new(layout, node).unwrap());
    Some(server)
}

/// A fresh server whose clock follows a clock file, and that file (at the real time) for
/// [`pg::step_clock`].
fn faked(test: &str) -> Option<(Server, pg::ClockFile)> {
    let faketime = pg::ClockFile::new(test);
    let server = Server::start_with(
        test,
        pg::Options {
            faketime_file: Some(faketime.to_path_buf()),
            ..pg::Options::default()
        },
    )?;
    Some((server, faketime))
}

/// [`faked`], with the script for node 7 of `layout` in `public`.
fn faked_installed(test: &str, layout: Layout) -> Option<(Server, pg::ClockFile)> {
    let (server, faketime) = faked(test)?;
    install(&server, "public", &PgScript::new(layout, 7).unwrap());
    Some((server, faketime))
}

/// Runs `sessions` `psql` clients at once, each with `args` (after `-X -q -A -t`), and
/// returns their outputs.
fn psql_sessions(server: &Server, sessions: usize, args: &[&OsStr]) -> Vec<Output> {
    let clients: Vec<_> = (0..sessions)
        .map(|_| {
            let mut psql = server.client("psql");
            psql.args(["-X", "-q", "-A", "-t"]).args(args);
            std::thread::spawn(move || psql.output().unwrap())
        })
        .collect();
    clients.into_iter().map(|client| client.join().unwrap()).collect()
}

/// Lines of `psql` output, split on `|`.
fn rows(output: &str) -> Vec<Vec<String>> {
    output
        .lines()
        .filter(|line| !line.is_empty())
        .map(|line| line.split('|').map(str::to_owned).collect())
        .collect()
}

/// Runs `sql` through `psql`: its output, or its error as `SQLSTATE: message` (the line
/// `psql` prints as `ERROR:  SQLSTATE: message` with `VERBOSITY=verbose`).
fn attempt(server: &Server, sql: &str) -> Result<String, String> {
    let output = server
        .client("psql")
        .args([
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-v",
            "VERBOSITY=verbose",
            "-c",
        ])
        .arg(sql)
        .output()
        .unwrap();
    if output.status.success() {
        return Ok(String::from_utf8(output.stdout).unwrap());
    }
    let stderr = String::from_utf8(output.stderr).unwrap();
    Err(stderr
        .lines()
        .find_map(|line| line.strip_prefix("ERROR:  "))
        .unwrap_or_else(|| panic!("no error in psql's output:\n{stderr}"))
        .to_owned())
}

/// The one ID that `sql` returns, or its error as [`attempt`] gives it.
fn mint(server: &Server, sql: &str) -> Result<Id, String> {
    attempt(server, sql).map(|output| Id::new(output.trim().parse().unwrap()))
}

fn ids(output: &str) -> Vec<u64> {
    output
        .lines()
        .filter(|line| !line.is_empty())
        .map(|line| line.parse().unwrap())
        .collect()
}

#[test]
fn the_script_applies_twice_and_refuses_another_layouts_state() {
    let Some(server) = Server::start("apply") else {
        return;
    };
    let script = PgScript::new(Layout::TWITTER, 7).unwrap();
    install(&server, "s", &script);
    let first = server.psql_u64("SET search_path TO s; SELECT atomflake_next_id()");
    install(&server, "s", &PgScript::new(Layout::TWITTER, 9).unwrap());
    let second = server.psql_u64("SET search_path TO s; SELECT atomflake_next_id()");
    assert!(second > first, "the state was kept: {first} then {second}");
    assert_eq!(Layout::TWITTER.decode(Id::new(second)).node, 9);

    let error = server.psql_error(&format!(
        "SET search_path TO s;\n{}",
        PgScript::new(Layout::DISCORD, 7).unwrap()
    ));
    assert_has(
        &error,
        "sequence atomflake_state holds the state of another layout: atomflake state: timestamp 41 bits",
    );

    // A role with only the documented grants mints, jumps included (a later tick).
    server.psql(
        "CREATE ROLE app LOGIN; GRANT USAGE ON SCHEMA s TO app;
         GRANT USAGE, UPDATE ON SEQUENCE s.atomflake_state TO app;",
    );
    let by_app = ids(&server.psql(
        "SET ROLE app; SET search_path TO s;
         SELECT atomflake_next_id(); SELECT pg_sleep(0.01); SELECT atomflake_next_id();",
    ));
    assert!(
        by_app.len() == 2 && by_app[0] > second && by_app[1] > by_app[0],
        "{by_app:?}"
    );
    let second = by_app[1];
    // Without UPDATE, the first mint of a later tick (a jump: setval) is refused, by name.
    server.psql(
        "CREATE ROLE reader LOGIN; GRANT USAGE ON SCHEMA s TO reader;
         GRANT USAGE ON SEQUENCE s.atomflake_state TO reader;",
    );
    let error = server.psql_error(
        "SET ROLE reader; SET search_path TO s; SELECT pg_sleep(0.01); SELECT atomflake_next_id();",
    );
    assert_has(&error, "permission denied for sequence atomflake_state");

    // Callers with another search_path still reach the state the functions were made for.
    install(&server, "other", &PgScript::new(Layout::TWITTER, 3).unwrap());
    let from_other = server.psql_u64("SET search_path TO other; SELECT s.atomflake_next_id()");
    assert_eq!(Layout::TWITTER.decode(Id::new(from_other)).node, 9);
    assert!(from_other > second);
}

/// The script applied over another layout's state is refused and changes nothing, however
/// psql runs it: statement by statement without `ON_ERROR_STOP` (psql then exits 0), or
/// with `-1`. The decoders, the mint and the state stay the first layout's.
#[test]
fn a_script_refused_over_another_layout_changes_nothing_however_psql_runs_it() {
    let Some(server) = Server::start("refused-whole") else {
        return;
    };
    install(&server, "s", &PgScript::new(Layout::INSTAGRAM, 5).unwrap());
    let functions = "SELECT md5(string_agg(pg_get_functiondef(p.oid), '' ORDER BY p.oid)) \
                     FROM pg_proc p WHERE p.pronamespace = 's'::regnamespace";
    let before = server.psql(functions);
    let id = server.psql_u64("SET search_path TO s; SELECT atomflake_next_id()");
    let decoded = format!(
        "SET search_path TO s; SELECT atomflake_node({id}), atomflake_sequence({id}), \
         atomflake_unix_ms({id}), atomflake_time({id}), atomflake_first_id_at(atomflake_time({id})), \
         atomflake_last_id_at(atomflake_time({id}))"
    );
    let parts = Layout::INSTAGRAM.decode(Id::new(id));
    let expected = server.psql(&decoded);
    assert!(
        expected.starts_with(&format!("{}|{}|{}|", parts.node, parts.sequence, parts.unix_ms)),
        "{expected}"
    );
    let path = server.file("twitter-over-instagram.sql");
    std::fs::write(
        &path,
        format!(
            "SET search_path TO s;\n{}",
            PgScript::new(Layout::TWITTER, 7).unwrap()
        ),
    )
    .unwrap();
    for single_transaction in [false, true] {
        let mut psql = server.client("psql");
        psql.args(["-X", "-q"]);
        if single_transaction {
            psql.arg("-1");
        }
        let output = psql.arg("-f").arg(&path).output().unwrap();
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert_has(
            &stderr,
            "sequence atomflake_state holds the state of another layout: atomflake state: timestamp 41 bits",
        );
        assert_eq!(
            output.status.code(),
            Some(0),
            "psql without ON_ERROR_STOP: {stderr}"
        );
        assert_eq!(
            server.psql(functions),
            before,
            "functions changed (-1: {single_transaction})"
        );
        assert_eq!(server.psql(&decoded), expected, "-1: {single_transaction}");
        let next = server.psql_u64("SET search_path TO s; SELECT atomflake_next_id()");
        assert!(next > id, "{next} after {id}");
        assert_eq!(Layout::INSTAGRAM.decode(Id::new(next)).node, 5);
    }
}

#[test]
fn sql_decodes_what_rust_decodes_for_every_preset() {
    let Some(server) = Server::start("decode") else {
        return;
    };
    for (name, layout) in Layout::PRESETS {
        let node = 7.min(layout.max_node());
        install(&server, name, &PgScript::new(layout, node).unwrap());
        let before = now_ms();
        let minted = rows(&server.psql(&format!(
            "SET search_path TO {name};
             SELECT id, atomflake_unix_ms(id), atomflake_node(id), atomflake_sequence(id),
                    floor(extract(epoch FROM atomflake_time(id)) * 1000)::bigint
             FROM (SELECT atomflake_next_id() AS id FROM generate_series(1, 3000)) AS minted"
        )));
        let after = now_ms();
        assert_eq!(minted.len(), 3000);
        let mut previous = None;
        for row in &minted {
            let fields: Vec<u64> = row.iter().map(|field| field.parse().unwrap()).collect();
            let id = Id::new(fields[0]);
            let parts = layout.decode(id);
            assert_eq!(
                fields[1..],
                [parts.unix_ms, parts.node, parts.sequence, parts.unix_ms],
                "{name}: {id}"
            );
            assert_eq!(parts.node, node, "{name}");
            // The tick of the server's clock when it was minted.
            let tick_start = before - (before - layout.epoch_ms()) % layout.tick_ms();
            assert!((tick_start..=after).contains(&parts.unix_ms), "{name}: {parts:?}");
            assert!(previous < Some(id), "{name}: {previous:?} then {id}");
            previous = Some(id);
        }

        // Random IDs of the layout that fit a bigint, and the ends of the range.
        let max = layout.max_id().min(i64::MAX as u64);
        let mut x = 0x9E37_79B9_7F4A_7C15_u64;
        let mut sample = vec![0, max];
        for _ in 0..500 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            sample.push(x % (max + 1));
        }
        let list: Vec<String> = sample.iter().map(u64::to_string).collect();
        let decoded = rows(&server.psql(&format!(
            "SET search_path TO {name};
             SELECT atomflake_unix_ms(id), atomflake_node(id), atomflake_sequence(id)
             FROM unnest('{{{}}}'::bigint[]) WITH ORDINALITY AS given(id, n) ORDER BY n",
            list.join(",")
        )));
        for (raw, row) in sample.iter().zip(&decoded) {
            let parts = layout.decode(Id::new(*raw));
            let fields: Vec<u64> = row.iter().map(|field| field.parse().unwrap()).collect();
            assert_eq!(
                fields,
                [parts.unix_ms, parts.node, parts.sequence],
                "{name}: {raw}"
            );
        }

        uuids_agree_with_rust(&server, name, layout, &sample);

        // Paging bounds agree with Rust, at tick edges too.
        let t = T.max(layout.epoch_ms() + 1_000);
        for at in [layout.epoch_ms(), t, t + 1, t + 9, layout.i64_end_unix_ms() - 1] {
            let bounds: Vec<u64> = server
                .psql(&format!(
                    "SET search_path TO {name};
                     SELECT atomflake_first_id_at(to_timestamp({at} / 1000) + {at} % 1000 * interval '1 ms'),
                            atomflake_last_id_at(to_timestamp({at} / 1000) + {at} % 1000 * interval '1 ms')"
                ))
                .trim()
                .split('|')
                .map(|field| field.parse().unwrap())
                .collect();
            assert_eq!(
                bounds,
                [
                    layout.first_id_at(at).unwrap().get(),
                    layout.last_id_at(at).unwrap().get()
                ],
                "{name} at {at}"
            );
        }
        let end = layout.i64_end_unix_ms();
        let error = server.psql_error(&format!(
            "SET search_path TO {name};
             SELECT atomflake_first_id_at(to_timestamp({end} / 1000) + {end} % 1000 * interval '1 ms')"
        ));
        assert!(
            error.contains(&format!(
                "time {end} ms is out of range: the layout's bigint ids cover {}..{end} ms",
                layout.epoch_ms()
            )),
            "{name}: {error}"
        );
        let error = server.psql_error(&format!("SET search_path TO {name}; SELECT atomflake_node(-5)"));
        assert!(
            error.contains(&format!("id -5 is out of range: the layout allows 0..={max}")),
            "{name}: {error}"
        );
    }
}

/// The script's UUIDs of version 7 of the IDs `sample`, in the schema `name` that holds
/// `layout`'s script: they are Rust's, sort as the IDs do and give them back; a UUID that
/// is not one of the layout's is an exact error.
fn uuids_agree_with_rust(server: &Server, name: &str, layout: Layout, sample: &[u64]) {
    let list: Vec<String> = sample.iter().map(u64::to_string).collect();
    let uuids = rows(&server.psql(&format!(
        "SET search_path TO {name};
         SELECT atomflake_to_uuid(id), atomflake_from_uuid(atomflake_to_uuid(id))
         FROM unnest('{{{}}}'::bigint[]) AS given(id) ORDER BY atomflake_to_uuid(id)",
        list.join(",")
    )));
    let mut sorted = sample.to_vec();
    sorted.sort_unstable();
    assert_eq!(uuids.len(), sorted.len());
    for (raw, row) in sorted.iter().zip(&uuids) {
        assert_eq!(row, &[uuids::of(layout, *raw), raw.to_string()], "{name}: {raw}");
    }
    for (uuid, message) in uuids::refused(layout) {
        let error = server.psql_error(&format!(
            "SET search_path TO {name}; SELECT atomflake_from_uuid('{uuid}')"
        ));
        assert!(error.contains(&message), "{name}: {error}\nexpected: {message}");
    }
}

#[test]
fn ids_from_postgres_and_rust_never_collide_and_sort_by_time_together() {
    let Some(server) = Server::start("together") else {
        return;
    };
    for (name, layout) in Layout::PRESETS {
        if layout.node_bits() == 0 {
            continue; // Mastodon has no node field: two minters cannot share it.
        }
        install(&server, name, &PgScript::new(layout, 7).unwrap());
        // The precise clock: the default one stamps IDs with the time its thread stored,
        // late by that thread's wake-up, which a loaded machine stretches past the gap
        // between rounds. The rounds 100 ms apart: more than the two clocks (both the wall
        // clock) ever read apart.
        let generator = Builder::with_clock(layout, PreciseClock::new()).build(8).unwrap();
        let mut all = Vec::new();
        for _ in 0..4 {
            all.extend(generator.next_ids(1000).map(Id::get));
            all.extend(ids(&server.psql(&format!(
                "SET search_path TO {name};
                 SELECT atomflake_next_id() FROM generate_series(1, 1000)"
            ))));
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut sorted = all.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), all.len(), "{name}: duplicates");
        // Sorted by ID is sorted by time, and both minters interleave in it.
        let times: Vec<u64> = sorted
            .iter()
            .map(|&raw| layout.decode(Id::new(raw)).unix_ms)
            .collect();
        assert!(times.is_sorted(), "{name}");
        let switches = sorted
            .windows(2)
            .filter(|pair| layout.decode(Id::new(pair[0])).node != layout.decode(Id::new(pair[1])).node)
            .count();
        assert!(
            switches >= 7,
            "{name}: the two minters' IDs interleave by time ({switches})"
        );
    }
}

#[test]
fn one_statement_inserts_5000_rows_where_the_seed_collides() {
    let Some(server) = installed("statement", Layout::INSTAGRAM, 5) else {
        return;
    };
    server.psql(pg::SEED);
    server.psql(
        "CREATE TABLE ours (id bigint PRIMARY KEY DEFAULT atomflake_next_id(), n int);
         CREATE TABLE seeds (id bigint PRIMARY KEY DEFAULT seed_next_id(), n int);",
    );
    server.psql("INSERT INTO ours (n) SELECT g FROM generate_series(1, 5000) AS g");
    assert_eq!(server.psql("SELECT count(DISTINCT id) FROM ours").trim(), "5000");
    let error = server.psql_error("INSERT INTO seeds (n) SELECT g FROM generate_series(1, 5000) AS g");
    assert_has(
        &error,
        "duplicate key value violates unique constraint \"seeds_pkey\"",
    );
}

#[test]
fn many_sessions_mint_no_duplicate_with_the_clock_or_with_times_jumping_about() {
    let Some(server) = installed("sessions", Layout::INSTAGRAM, 7) else {
        return;
    };
    install(&server, "jumpy", &PgScript::new(Layout::INSTAGRAM, 7).unwrap());
    server.psql(
        "CREATE TABLE clocked (id bigint PRIMARY KEY DEFAULT atomflake_next_id(), v int);
         CREATE TABLE jumping (id bigint PRIMARY KEY, v int);",
    );
    let (rows, _) = server.insert_from_sessions("clocked", 4, 3);
    assert_eq!(
        server
            .psql("SELECT count(*) = count(DISTINCT id), count(*) FROM clocked")
            .trim(),
        format!("t|{rows}")
    );
    // Each call's time up to 40 ms behind the clock, at random: calls continue a tick
    // ahead of their time or jump, from 6 sessions at once. A duplicate would fail a
    // transaction on the primary key.
    let (done, failed, _) = server.bench(
        "INSERT INTO jumping
             SELECT jumpy.atomflake_next_id_at(
                        floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint - (random() * 40)::bigint), g
             FROM generate_series(1, 50) AS g;\n",
        6,
        3,
    );
    assert!(done > 0);
    assert_eq!(failed, 0);
    let count = server.psql_u64("SELECT count(*) FROM jumping");
    assert_eq!(count, done * 50);
}

#[test]
fn a_clock_moving_back_continues_the_last_tick_and_a_spent_tick_is_an_exact_error() {
    let layout = Layout::INSTAGRAM;
    let Some((server, faketime)) = faked_installed("back", layout) else {
        return;
    };
    let mint = |at: u64| -> Result<Id, String> {
        let output = server
            .client("psql")
            .args(["-X", "-q", "-A", "-t", "-c"])
            .arg(format!("SELECT atomflake_next_id_at({at})"))
            .output()
            .unwrap();
        if output.status.success() {
            Ok(Id::new(
                String::from_utf8(output.stdout).unwrap().trim().parse().unwrap(),
            ))
        } else {
            Err(String::from_utf8(output.stderr).unwrap())
        }
    };
    let first = mint(T).unwrap();
    assert_eq!(layout.decode(first).sequence, 0);
    let later = mint(T + 5).unwrap();
    assert_eq!(
        (layout.decode(later).unix_ms, layout.decode(later).sequence),
        (T + 5, 0)
    );
    // 2 s back: the tick of T + 5 continues.
    let back = mint(T - 2000).unwrap();
    assert_eq!(
        (layout.decode(back).unix_ms, layout.decode(back).sequence),
        (T + 5, 1)
    );
    // Spend the rest of that tick in one statement, still 2 s back.
    let rest = ids(&server.psql(&format!(
        "SELECT atomflake_next_id_at({}) FROM generate_series(2, 1023)",
        T - 2000
    )));
    assert_eq!(rest.len(), 1022);
    assert!(rest.windows(2).all(|pair| pair[0] < pair[1]) && rest[0] > back.get());
    assert_eq!(layout.decode(Id::new(rest[1021])).sequence, 1023);
    let error = mint(T - 2000).unwrap_err();
    assert_has(
        &error,
        &format!(
            "sequence exhausted at {} ms: tick {} is spent, ids are available again at {} ms",
            T - 2000,
            T + 5 - layout.epoch_ms(),
            T + 6
        ),
    );
    // Failing calls take nothing: the counter stays at the first spent value (Instagram's
    // counter has 23 bits, its sequence field 10).
    for _ in 0..30 {
        assert!(mint(T - 2000).is_err());
    }
    let next_free = server.psql_u64("SELECT last_value + 1 FROM atomflake_state");
    assert_eq!(
        (next_free >> 23, next_free & ((1 << 23) - 1)),
        (T + 5 - layout.epoch_ms(), 1024),
        "the spent tick, its counter at the first spent value"
    );
    // The clock passes the spent tick: sequence 0 of the new tick, above everything.
    let next = mint(T + 6).unwrap();
    assert_eq!(
        (layout.decode(next).unix_ms, layout.decode(next).sequence),
        (T + 6, 0)
    );
    assert!(next.get() > rest[1021]);

    // Outside the span.
    let error = mint(layout.epoch_ms() - 1).unwrap_err();
    assert_has(
        &error,
        &format!(
            "time {} ms is before the layout's epoch: the layout allows {} ms and later",
            layout.epoch_ms() - 1,
            layout.epoch_ms()
        ),
    );
    // Instagram's IDs pass i64::MAX on 2046-06-27: with the server's clock 2 to 3 s before
    // that (next_id_at mints at most 5 s ahead of it), the last millisecond before works,
    // the next is refused, naming the time.
    let end = layout.i64_end_unix_ms();
    pg::step_clock(&faketime, &format!("+{}", (end - now_ms()) / 1000 - 2));
    let last = mint(end - 1).unwrap();
    assert_eq!(layout.decode(last).unix_ms, end - 1);
    let error = mint(end).unwrap_err();
    assert_has(
        &error,
        &format!(
            "time {end} ms is past the end of atomflake's ids: ids are minted for times before {end} ms"
        ),
    );
}

#[test]
fn the_servers_own_clock_stepped_back_repeats_and_reorders_nothing() {
    let faketime = pg::ClockFile::new("stepback");
    let Some(server) = Server::start_with(
        "stepback",
        pg::Options {
            faketime_file: Some(faketime.to_path_buf()),
            ..pg::Options::default()
        },
    ) else {
        return;
    };
    install(&server, "public", &PgScript::new(Layout::INSTAGRAM, 7).unwrap());
    server.psql(
        "CREATE TABLE t (n bigserial, id bigint UNIQUE DEFAULT atomflake_next_id(), at timestamptz DEFAULT clock_timestamp());",
    );
    // Each transaction on a new connection, as a pool that recycles them would.
    server.step_back_while_writing(&faketime, &["-C"]);
    // The server's clock did step back: its readings go back somewhere. (By 2 s less the
    // time between the two rows around the step, which a loaded machine can stretch: any
    // reading that goes back shows the step.)
    let step: f64 = server
        .psql("SELECT min(extract(epoch FROM at2 - at1)) FROM (SELECT at AS at1, lead(at) OVER (ORDER BY n) AS at2 FROM t) AS pairs")
        .trim()
        .parse()
        .unwrap();
    let rows = server.psql_u64("SELECT count(*) FROM t");
    assert!(rows > 2000);
    assert!(
        step < 0.0,
        "the server's clock never stepped back while minting ({step} s)"
    );
    assert_eq!(
        server
            .psql(
                "SELECT count(*), count(*) FILTER (WHERE next_id <= id)
             FROM (SELECT id, lead(id) OVER (ORDER BY n) AS next_id FROM t) AS pairs"
            )
            .trim(),
        format!("{rows}|0"),
        "IDs strictly increase in the order they were minted"
    );
}

#[test]
fn next_id_at_mints_at_most_5_s_ahead_so_next_id_stays_at_the_servers_clock() {
    let layout = Layout::TWITTER;
    let Some((server, faketime)) = faked_installed("ahead", layout) else {
        return;
    };
    // 30 years ahead: refused, and next_id() goes on at the server's clock.
    let before = server.unix_ms();
    let far = before + 946_728_000_000;
    let far_call = mint(&server, &format!("SELECT atomflake_next_id_at({far})"));
    let next = mint(&server, "SELECT atomflake_next_id()").unwrap();
    let after = server.unix_ms();
    let stamped = layout.decode(next).unix_ms;
    assert!(
        (before..=after).contains(&stamped),
        "next_id() after next_id_at({far}) is stamped {stamped} ms, {} ms past the server's clock ({after} ms)",
        stamped.saturating_sub(after)
    );
    let error = far_call.unwrap_err();
    let ahead: u64 = error
        .strip_prefix(&format!("22008: time {far} ms is "))
        .and_then(|rest| {
            rest.strip_suffix(" ms ahead of the clock: atomflake_next_id_at mints at most 5000 ms ahead")
        })
        .unwrap_or_else(|| panic!("{error}"))
        .parse()
        .unwrap();
    assert!((before..=after).contains(&(far - ahead)), "{error}");

    // The edge, with the server's clock stopped: exactly 5 s ahead mints there, 1 ms more is
    // refused. A script waiting at most 2 s for a spent tick mints at most 1 s ahead.
    install(
        &server,
        "short",
        &PgScript::new(layout, 7)
            .unwrap()
            .max_wait(Duration::from_secs(2))
            .unwrap(),
    );
    pg::step_clock(&faketime, "2040-01-01 00:00:00");
    let stopped = server.unix_ms();
    for (schema, bound) in [("public", 5000), ("short", 1000)] {
        let at = stopped + bound;
        let edge = mint(
            &server,
            &format!("SET search_path TO {schema}; SELECT atomflake_next_id_at({at})"),
        )
        .unwrap();
        assert_eq!(layout.decode(edge).unix_ms, at, "{schema}");
        assert_eq!(
            mint(
                &server,
                &format!(
                    "SET search_path TO {schema}; SELECT atomflake_next_id_at({})",
                    at + 1
                )
            ),
            Err(format!(
                "22008: time {} ms is {} ms ahead of the clock: atomflake_next_id_at mints at most {bound} ms ahead",
                at + 1,
                bound + 1
            )),
            "{schema}"
        );
    }
    assert_eq!(server.unix_ms(), stopped, "the server's clock stood still");
}

#[test]
fn calls_cancelled_or_killed_while_they_wait_take_nothing_and_no_id_repeats() {
    let Some((server, faketime)) = faked("cancel") else {
        return;
    };
    // 128 IDs per tick and a counter of 8 bits: room for 128 values past the sequence field.
    let layout = nodeless(55, 7);
    let script = PgScript::new(layout, 0)
        .unwrap()
        .max_wait(Duration::from_secs(60))
        .unwrap();
    assert_eq!((script.counter_bits(), script.headroom()), (8, 128));
    install(&server, "public", &script);
    let mut minted = ids(&server.psql("SELECT atomflake_next_id()"));
    let tick = layout.decode(Id::new(minted[0])).unix_ms - layout.epoch_ms();
    // The server's clock 20 s behind: the rest of the tick's 128 IDs, then calls wait.
    pg::step_clock(&faketime, "-20");
    server.assert_behind(20.0);
    minted.extend(ids(
        &server.psql("SELECT atomflake_next_id() FROM generate_series(2, 128)")
    ));
    assert_eq!(layout.decode(Id::new(minted[127])).sequence, 127);
    let state = || -> (u64, u64) {
        let next_free = server.psql_u64("SELECT last_value + 1 FROM atomflake_state");
        (next_free >> 8, next_free & 0xff)
    };
    assert_eq!(state(), (tick, 128));

    // 4 sessions, 60 calls each, every one cancelled by a 20 ms statement timeout while it
    // waits for the clock: more cancelled calls than the counter has room for.
    let calls = server.file("cancelled.sql");
    std::fs::write(
        &calls,
        format!(
            "SET statement_timeout = 20;\n{}",
            "SELECT atomflake_next_id();\n".repeat(60)
        ),
    )
    .unwrap();
    let mut cancelled = 0;
    let mut minted_while_behind = Vec::new();
    for output in psql_sessions(&server, 4, &["-f".as_ref(), calls.as_ref()]) {
        cancelled += String::from_utf8(output.stderr)
            .unwrap()
            .matches("ERROR:  canceling statement due to statement timeout")
            .count();
        minted_while_behind.extend(ids(&String::from_utf8(output.stdout).unwrap()));
    }
    assert_eq!(
        (cancelled, minted_while_behind.len()),
        (240, 0),
        "calls cancelled, and calls that minted while tick {tick} was spent; the state at {:?}",
        state()
    );
    kill_a_waiting_call(&server);
    // Nothing was taken: the state is where the last ID left it.
    assert_eq!(state(), (tick, 128), "the state after the cancelled calls");

    // The clock back at the real time: 4 sessions mint on, and no ID repeats.
    pg::step_clock(&faketime, "+0");
    let mint_on = ["-c", "SELECT atomflake_next_id() FROM generate_series(1, 3000)"].map(OsStr::new);
    for output in psql_sessions(&server, 4, &mint_on) {
        assert!(output.status.success(), "{output:?}");
        let later = ids(&String::from_utf8(output.stdout).unwrap());
        assert!(later.iter().all(|&id| id > minted[127]));
        minted.extend(later);
    }
    let all = minted.len();
    minted.sort_unstable();
    minted.dedup();
    assert_eq!(minted.len(), all, "duplicates");
}

#[test]
fn a_server_running_more_sessions_than_the_headroom_is_refused_when_applied_and_when_minting() {
    // 100 connections + 8 worker processes + 10 WAL senders + 3 autovacuum workers: 121.
    let Some(server) = Server::start_with(
        "room",
        pg::Options {
            settings: vec![("max_connections", "100".to_owned())],
            ..pg::Options::default()
        },
    ) else {
        return;
    };
    // A 56-bit timestamp and a 0-bit sequence field: a 7-bit counter, room for 127.
    let layout = nodeless(56, 0);
    let script = PgScript::new(layout, 0).unwrap();
    assert_eq!(script.headroom(), 127);
    install(&server, "public", &script);
    let first = mint(&server, "SELECT atomflake_next_id()").unwrap();
    let restart_with_workers = |workers: u32| {
        server.psql(&format!("ALTER SYSTEM SET max_worker_processes = {workers}"));
        server.stop("fast");
        server.start_again();
    };
    // 127 sessions, as many as the headroom: applied again, and minting jumps on.
    restart_with_workers(14);
    install(&server, "public", &script);
    let second = mint(&server, "SELECT atomflake_next_id()").unwrap();
    assert!(second > first);
    // 128: the next jump, and applying the script, are each the exact error.
    restart_with_workers(15);
    let error = "53400: this server runs up to 128 sessions at once (max_connections 100 + \
                 max_worker_processes 15 + max_wal_senders 10 + autovacuum_max_workers 3), more \
                 than the 127 that atomflake's state has room for (layout 56/0/0 bits, 1 ms ticks, \
                 epoch 1288834974657 ms)";
    assert_eq!(mint(&server, "SELECT atomflake_next_id()"), Err(error.to_owned()));
    assert_eq!(
        attempt(&server, &script.to_string()).map(drop),
        Err(error.to_owned())
    );
}

/// Kills the session of a `next_id()` call while it waits (`pg_terminate_backend`: no
/// handler can run).
fn kill_a_waiting_call(server: &Server) {
    let mut waiter = server.client("psql");
    waiter.args(["-X", "-q", "-A", "-t", "-c", "SELECT atomflake_next_id()"]);
    let waiter = std::thread::spawn(move || waiter.output().unwrap());
    let waiting =
        "SELECT pid FROM pg_stat_activity WHERE query = 'SELECT atomflake_next_id()' AND state = 'active'";
    while server.psql(waiting).trim().is_empty() {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        server
            .psql(&format!("SELECT pg_terminate_backend(pid) FROM ({waiting}) AS w"))
            .trim(),
        "t"
    );
    let killed = String::from_utf8(waiter.join().unwrap().stderr).unwrap();
    assert_has(&killed, "terminating connection due to administrator command");
}

#[test]
fn a_crash_and_a_rollback_give_no_id_back() {
    let Some(server) = installed("crash", Layout::TWITTER, 7) else {
        return;
    };
    server.psql("CREATE TABLE t (id bigint PRIMARY KEY)");
    // All at one fixed time: every ID is in the same tick, so only the state (not the
    // clock) can keep later ones apart.
    let rolled_back = ids(&server.psql(&format!(
        "BEGIN; SELECT atomflake_next_id_at({T}) FROM generate_series(1, 3); ROLLBACK;"
    )));
    assert_eq!(rolled_back.len(), 3);
    server.psql(&format!(
        "INSERT INTO t SELECT atomflake_next_id_at({T}) FROM generate_series(1, 100)"
    ));
    let committed_max = server.psql_u64("SELECT max(id) FROM t");
    assert!(rolled_back.iter().all(|&id| id < committed_max));
    server.stop("immediate");
    server.start_again();
    let after = server.psql_u64(&format!("SELECT atomflake_next_id_at({T})"));
    assert!(after > committed_max, "{after} <= {committed_max}");
    assert_eq!(Layout::TWITTER.decode(Id::new(after)).unix_ms, T);
}

/// Rows per second through pgbench: atomflake's `next_id()` as the default of a primary
/// key against the seed (Instagram's function, as published with `clock_timestamp()`),
/// alternating in one run on one server. Prints the table; asserts only that nothing
/// failed. A measurement, not a test: run it on a quiet machine with
/// `cargo test --release -p atomflake-postgres --test sql -- --ignored --nocapture measure`.
#[test]
#[ignore = "a measurement (about a minute); run by hand"]
fn measure_rows_per_second_against_the_seed() {
    let Some(server) = installed("measure", Layout::INSTAGRAM, 5) else {
        return;
    };
    server.psql(&pg::SEED.replace(
        "extract(epoch FROM now())",
        "extract(epoch FROM clock_timestamp())",
    ));
    server.psql(
        "CREATE TABLE ours (id bigint PRIMARY KEY DEFAULT atomflake_next_id(), v int);
         CREATE TABLE seeds (id bigint PRIMARY KEY DEFAULT seed_next_id(), v int);",
    );
    let (clients, seconds, rounds) = (4, 5, 5);
    let mut rates: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        for (which, table) in ["seeds", "ours"].into_iter().enumerate() {
            let (_, rate) = server.insert_from_sessions(table, clients, seconds);
            println!("round {round}: {table:<5} {rate:>9.0} rows/s");
            rates[which].push(rate);
        }
    }
    assert_eq!(
        server
            .psql("SELECT count(*) = count(DISTINCT id) FROM ours")
            .trim(),
        "t"
    );
    let median = |rates: &mut Vec<f64>| {
        rates.sort_by(f64::total_cmp);
        rates[rates.len() / 2]
    };
    let (seed, ours) = (median(&mut rates[0]), median(&mut rates[1]));
    println!(
        "median rows/s, {clients} clients x 50 rows per INSERT, {rounds} rounds of {seconds} s: \
         seed {seed:.0}, atomflake {ours:.0}, atomflake/seed {:.2}",
        ours / seed
    );
    // The cost of one call, in one session, against nextval() alone and the seed.
    server.psql("CREATE SEQUENCE bare");
    for expression in ["nextval('bare')", "seed_next_id()", "atomflake_next_id()"] {
        let ms = server.timed(&format!(
            "SELECT count({expression}) FROM generate_series(1, 500000);"
        ));
        println!(
            "{expression:<22} {:.2} us per call (500,000 in one statement)",
            ms * 1000.0 / 500_000.0
        );
    }
}

/// A backend reads the clock in its `SIGALRM` handler (its timeouts): on a stepped clock a
/// signal that lands in a clock reading of the backend's own never hangs it. Each of four
/// sessions runs statements that do nothing but read the clock, each cancelled by a 1 ms
/// `statement_timeout`: every statement ends in a timer signal, and the signal lands in
/// one of the statement's clock readings (the backend does little else), thousands of
/// times a run. Meanwhile the clock steps between 2 s behind and 2 s ahead every 50 ms.
/// Sessions that end no statement for the hang guard hang (a statement ends in 1 ms).
#[test]
fn a_stepped_clock_never_hangs_a_backend_in_its_timer_signal() {
    const STATEMENTS: usize = 250;
    let test = "a_stepped_clock_never_hangs_a_backend_in_its_timer_signal";
    let Some((server, faketime)) = faked(test) else {
        return;
    };
    let script = server.file("timer-signals.sql");
    // Each statement prints a line when it ends (its cancel, on stderr): the sessions'
    // progress.
    let statements =
        "SELECT count(clock_timestamp()) FROM generate_series(1, 100000000);\n".repeat(STATEMENTS);
    std::fs::write(
        &script,
        format!("\\set ON_ERROR_STOP off\nSET statement_timeout = '1ms';\n{statements}"),
    )
    .unwrap();
    let ended = Arc::new(AtomicUsize::new(0));
    let sessions: Vec<_> = (0..4)
        .map(|_| {
            let mut psql = server.client("psql");
            psql.args(["-X", "-q", "-A", "-t", "-o", "/dev/null", "-f"])
                .arg(&script)
                .stderr(Stdio::piped());
            let ended = Arc::clone(&ended);
            std::thread::spawn(move || {
                let mut child = psql.spawn().unwrap();
                // A statement cancelled by its timer: "due to statement timeout", or, when a
                // step moved the clock the backend's timeouts are kept by, "due to user
                // request". Any other line is kept to fail the test with.
                let (mut cancelled, mut other) = (0, Vec::new());
                for line in BufReader::new(child.stderr.take().unwrap()).lines() {
                    let line = line.unwrap();
                    if line.contains("ERROR:  canceling statement due to") {
                        cancelled += 1;
                        ended.fetch_add(1, Ordering::Relaxed);
                    } else {
                        other.push(line);
                    }
                }
                (child.wait().unwrap(), cancelled, other)
            })
        })
        .collect();
    let started = std::time::Instant::now();
    let mut steps = ["-2", "+2", "+0"].iter().cycle();
    let (mut seen, mut progress) = (0, std::time::Instant::now());
    while !sessions.iter().all(std::thread::JoinHandle::is_finished) {
        let now_ended = ended.load(Ordering::Relaxed);
        if now_ended != seen {
            (seen, progress) = (now_ended, std::time::Instant::now());
        }
        assert!(
            progress.elapsed() < HANG_GUARD,
            "no statement ended for {HANG_GUARD:?} after {seen} of {}: a backend hangs in its timer \
             signal; backends:\n{}",
            4 * STATEMENTS,
            server.psql(
                "SELECT pid, state, wait_event_type, wait_event, left(query, 40) FROM pg_stat_activity"
            )
        );
        pg::step_clock(&faketime, steps.next().unwrap());
        std::thread::sleep(Duration::from_millis(50));
    }
    pg::step_clock(&faketime, "+0");
    for session in sessions {
        let (status, cancelled, other) = session.join().unwrap();
        assert!(status.success() && other.is_empty(), "psql {status}: {other:?}");
        // Every statement was cancelled by its timer: each signal landed mid-statement.
        assert_eq!(cancelled, STATEMENTS);
    }
    println!(
        "4 sessions x {STATEMENTS} statements, each cancelled by its timer signal, in {:?}",
        started.elapsed()
    );
}
