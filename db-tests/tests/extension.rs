//! The PostgreSQL extension (`extension/`, installed with `cargo pgrx install`) on real servers
//! started with `shared_preload_libraries = 'atomflake'`:
//!
//! - its decode functions agree with [`Layout::decode`] and the paging functions with
//!   [`Layout::first_id_at`] / [`Layout::last_id_at`], for every preset;
//! - its IDs (node 7) and a Rust generator's (node 8) share a primary key;
//! - pgbench sessions, and 64 logical shards minting at once, fail no transaction;
//! - the server's clock stepped back 2 s, an immediate stop, a backend killed with
//!   SIGKILL: every ID after is past every ID handed out before;
//! - a hot standby (`pg_basebackup -R`) mints nothing and writes no mark, with the same
//!   SQLSTATE as `nextval`; promoted, it mints for its own node;
//! - a wait for the clock ends on a cancel or a statement timeout, and a clock far behind
//!   is an error at once;
//! - the settings are fixed at server start and checked, and a library that was not
//!   preloaded refuses to create the extension;
//! - a role with no grants is refused (SQLSTATE 42501) the functions that move the node
//!   ahead of the clock or mint on another node, and mints at the clock alone; a role with
//!   the grants the README lists calls them.
//!
//! - `atomflake_adopt(table, column)` switches a 100,000-row `bigserial` table over while
//!   pgbench sessions insert (no insert fails, no ID twice, every new ID above every old
//!   value), does nothing when called again, and refuses an `integer` column, an `integer`
//!   foreign key and a value at or above the IDs of now, each with its exact error.
//!
//! - `pg_dump -Fc` / `pg_restore` and `pg_dumpall` / `psql` into a server whose clock is 3 s
//!   behind, with the old server's node: its IDs continue past every ID of the old one
//!   (moved 4.9 s ahead), also after restoring only the dump of a database where nothing
//!   was minted; a standby's dump carries at least its clock; the mark moves only forward,
//!   and its type and `atomflake_raise_mark` refuse bad values with exact errors.
//!
//! Without the extension installed the tests print `SKIPPED` (a failure under `CI=true`).
use atomflake_test_servers::postgres as pg;
use atomflake_test_servers::{now_ms, uuids, wait_until};

use atomflake::{Generator, Id, Layout};
use atomflake_postgres::sql::PgScript;
use pg::Server;
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

mod support;

use support::{adoption, copies};

/// A server with the extension preloaded and created, for `layout` (a preset name) and
/// `node` (`None`: `atomflake.node` not set).
fn server(test: &str, layout: &str, node: Option<u64>, options: pg::Options) -> Option<Server> {
    let server = preloaded(test, layout, node, options)?;
    server.psql("CREATE EXTENSION atomflake");
    Some(server)
}

/// A server with the extension preloaded but not created (a restore creates it).
fn preloaded(test: &str, layout: &str, node: Option<u64>, options: pg::Options) -> Option<Server> {
    if !pg::has_library(test, "atomflake") {
        return None;
    }
    let mut options = options;
    options
        .settings
        .push(("shared_preload_libraries", "atomflake".to_owned()));
    options.settings.push(("atomflake.layout", layout.to_owned()));
    if let Some(node) = node {
        options.settings.push(("atomflake.node", node.to_string()));
    }
    Server::start_with(test, options)
}

fn connect(server: &Server) -> postgres::Client {
    postgres::Client::connect(&server.conninfo(), postgres::NoTls).unwrap()
}

fn id(value: i64) -> Id {
    Id::new(u64::try_from(value).unwrap())
}

/// `sql`'s IDs, one per row.
fn ids(client: &mut postgres::Client, sql: &str) -> Vec<u64> {
    client
        .query(sql, &[])
        .unwrap()
        .iter()
        .map(|row| u64::try_from(row.get::<_, i64>(0)).unwrap())
        .collect()
}

/// The error text of `result`, which must be a server error.
fn db_error<T: std::fmt::Debug>(result: Result<T, postgres::Error>) -> String {
    let error = result.unwrap_err();
    error
        .as_db_error()
        .unwrap_or_else(|| panic!("not a server error: {error}"))
        .message()
        .to_owned()
}

/// A session minting IDs in a loop, one statement each, until its connection breaks.
struct Minter {
    /// Its backend's process.
    pid: i32,
    /// How many IDs it has minted so far.
    minted: Arc<AtomicUsize>,
    /// Every ID the server handed back.
    ids: std::thread::JoinHandle<Vec<u64>>,
}

impl Minter {
    fn start(server: &Server) -> Minter {
        let mut client = connect(server);
        let pid: i32 = client.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
        let minted = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&minted);
        let ids = std::thread::spawn(move || {
            let mut ids = Vec::new();
            while let Ok(row) = client.query_one("SELECT atomflake_next_id()", &[]) {
                ids.push(u64::try_from(row.get::<_, i64>(0)).unwrap());
                count.store(ids.len(), Ordering::Relaxed);
            }
            ids
        });
        Minter { pid, minted, ids }
    }

    /// Waits until it has minted `count` IDs, for the hang guard at most.
    fn wait_for(&self, count: usize) {
        wait_until(
            &format!("the session minted fewer than {count} IDs"),
            Duration::from_millis(10),
            || self.minted.load(Ordering::Relaxed) >= count,
            || format!("it minted {}", self.minted.load(Ordering::Relaxed)),
        );
    }
}

/// IDs in a deterministic spread over `0..=max` (an LCG), ends included.
fn spread(max: u64) -> Vec<u64> {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut ids = vec![0, max];
    for _ in 0..300 {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ids.push(x % max);
    }
    ids
}

#[test]
fn sql_decodes_what_rust_decodes_through_the_extension() {
    for (name, layout) in Layout::PRESETS {
        let node = layout.max_node().min(7);
        let Some(server) = server(
            &format!("ext-decode-{name}"),
            name,
            Some(node),
            pg::Options::default(),
        ) else {
            return;
        };
        let mut client = connect(&server);
        let minted = ids(
            &mut client,
            "SELECT atomflake_next_id() FROM generate_series(1, 3000)",
        );
        assert!(minted.windows(2).all(|w| w[0] < w[1]), "{name}: minted IDs rise");
        assert!(
            minted.iter().all(|&raw| layout.decode(Id::new(raw)).node == node),
            "{name}: every ID carries node {node}"
        );
        let mut ids = minted;
        ids.extend(spread(layout.max_id().min(i64::MAX as u64)));
        let as_i64: Vec<i64> = ids.iter().map(|&raw| i64::try_from(raw).unwrap()).collect();
        let rows = client
            .query(
                "SELECT id, atomflake_unix_ms(id), atomflake_node(id), atomflake_sequence(id),
                        (extract(epoch FROM atomflake_time(id)) * 1000)::bigint,
                        atomflake_first_id_at(atomflake_time(id)), atomflake_last_id_at(atomflake_time(id))
                 FROM unnest($1::bigint[]) AS id",
                &[&as_i64],
            )
            .unwrap();
        assert_eq!(rows.len(), ids.len());
        for row in rows {
            let raw = id(row.get(0));
            let parts = layout.decode(raw);
            let got: Vec<u64> = (1..7)
                .map(|i| u64::try_from(row.get::<_, i64>(i)).unwrap())
                .collect();
            assert_eq!(
                got,
                [
                    parts.unix_ms,
                    parts.node,
                    parts.sequence,
                    parts.unix_ms,
                    layout.first_id_at(parts.unix_ms).unwrap().get(),
                    layout.last_id_at(parts.unix_ms).unwrap().get(),
                ],
                "{name}: id {raw}"
            );
        }

        // UUIDs of version 7: the extension's are Rust's (and the script's), sort as the IDs
        // do and give them back; a UUID that is not one of the layout's is an exact error.
        let rows = client
            .query(
                "SELECT atomflake_to_uuid(id)::text, atomflake_from_uuid(atomflake_to_uuid(id))
                 FROM unnest($1::bigint[]) AS id ORDER BY atomflake_to_uuid(id)",
                &[&as_i64],
            )
            .unwrap();
        ids.sort_unstable();
        let uuids: Vec<(String, u64)> = rows
            .iter()
            .map(|row| (row.get(0), u64::try_from(row.get::<_, i64>(1)).unwrap()))
            .collect();
        let expected: Vec<(String, u64)> = ids.iter().map(|&raw| (uuids::of(layout, raw), raw)).collect();
        assert_eq!(uuids, expected, "{name}");
        // Stored in a uuid column as its key, they read back in the IDs' order.
        client
            .batch_execute("CREATE TEMP TABLE keyed (key uuid PRIMARY KEY, id bigint NOT NULL)")
            .unwrap();
        client
            .execute(
                "INSERT INTO keyed SELECT atomflake_to_uuid(id), id FROM unnest($1::bigint[]) AS id",
                &[&as_i64],
            )
            .unwrap();
        let stored: Vec<u64> = client
            .query("SELECT id FROM keyed ORDER BY key", &[])
            .unwrap()
            .iter()
            .map(|row| u64::try_from(row.get::<_, i64>(0)).unwrap())
            .collect();
        assert_eq!(stored, ids, "{name}");
        for (uuid, message) in uuids::refused(layout) {
            let error = db_error(client.query(&format!("SELECT atomflake_from_uuid('{uuid}')"), &[]));
            assert_eq!(error, message, "{name}");
        }
        let error = db_error(client.query("SELECT atomflake_to_uuid(-1)", &[]));
        assert_eq!(
            error,
            format!(
                "id -1 is out of range: the layout allows 0..={}",
                layout.max_id().min(i64::MAX as u64)
            )
        );
    }
}

/// `atomflake_mask` and `atomflake_unmask` give the repository's vectors
/// (`tests/mask_vectors.txt`, the same in Rust and Python) with the key as a parameter, and
/// take back masked IDs of minted ones; a key of another length and a negative ID are exact
/// errors that never show the key.
#[test]
fn masks_in_sql_are_the_repositorys_vectors_and_bad_keys_are_exact_errors() {
    let Some(server) = server("ext-mask", "twitter", Some(7), pg::Options::default()) else {
        return;
    };
    let mut client = connect(&server);
    let vectors = include_str!("../../tests/mask_vectors.txt");
    let mut lines = vectors.lines().filter(|line| !line.starts_with('#'));
    let hex = lines.next().unwrap().strip_prefix("key ").unwrap();
    let key: Vec<u8> = (0..16)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    let mut checked = 0;
    for line in lines {
        let (id, masked) = line.split_once(' ').unwrap();
        let (Ok(id), Ok(masked)) = (id.parse::<i64>(), masked.parse::<i64>()) else {
            continue; // IDs of 2^63 and above: not a bigint's.
        };
        let row = client
            .query_one(
                "SELECT atomflake_mask($1, $2), atomflake_unmask($3, $2)",
                &[&id, &key, &masked],
            )
            .unwrap();
        assert_eq!((row.get::<_, i64>(0), row.get::<_, i64>(1)), (masked, id));
        checked += 1;
    }
    assert_eq!(checked, 5);
    let row = client
        .query_one(
            "SELECT count(*), count(*) FILTER (WHERE atomflake_unmask(atomflake_mask(id, $1), $1) = id),
                    count(*) FILTER (WHERE atomflake_mask(id, $1) >= 0)
             FROM (SELECT atomflake_next_id() AS id FROM generate_series(1, 1000)) AS minted",
            &[&key],
        )
        .unwrap();
    assert_eq!(
        (row.get::<_, i64>(0), row.get::<_, i64>(1), row.get::<_, i64>(2)),
        (1000, 1000, 1000)
    );
    let short = vec![7_u8; 15];
    assert_eq!(
        db_error(client.query("SELECT atomflake_mask(1, $1)", &[&short])),
        "key has 15 bytes: a key is 16 bytes"
    );
    assert_eq!(
        db_error(client.query("SELECT atomflake_unmask(-1, $1)", &[&key])),
        "id -1 is out of range: ids allow 0..=9223372036854775807"
    );
}

#[test]
fn ids_from_the_extension_and_a_rust_generator_share_a_primary_key() {
    let Some(server) = server("ext-mixed", "twitter", Some(7), pg::Options::default()) else {
        return;
    };
    let mut client = connect(&server);
    client
        .batch_execute("CREATE TABLE t (n bigserial, id bigint PRIMARY KEY, source text NOT NULL)")
        .unwrap();
    let generator = Generator::new(Layout::TWITTER, 8).unwrap();
    for _ in 0..4 {
        client
            .execute(
                "INSERT INTO t (id, source) SELECT atomflake_next_id(), 'pg' FROM generate_series(1, 5000)",
                &[],
            )
            .unwrap();
        let ours: Vec<i64> = (0..5000)
            .map(|_| i64::try_from(generator.next_id().get()).unwrap())
            .collect();
        client
            .execute(
                "INSERT INTO t (id, source) SELECT unnest($1::bigint[]), 'rust'",
                &[&ours],
            )
            .unwrap();
    }
    // Each generator's IDs strictly increase in the order they were inserted. Alternating
    // between the two, the times go back by no more than a second: the server reads the
    // wall clock, the Rust generator's default clock a time its thread stores each
    // millisecond, late by that thread's wake-up (a tick on an idle machine, more on a
    // loaded one): a second apart would be another clock, not a late thread.
    let row = client
        .query_one(
            "SELECT count(*),
                    count(*) FILTER (WHERE atomflake_node(id) <> CASE source WHEN 'pg' THEN 7 ELSE 8 END),
                    count(*) FILTER (WHERE next_same <= id),
                    count(*) FILTER (WHERE next_ms + 1000 < ms)
             FROM (SELECT source, id, atomflake_unix_ms(id) AS ms,
                          lead(id) OVER (PARTITION BY source ORDER BY n) AS next_same,
                          lead(atomflake_unix_ms(id)) OVER (ORDER BY n) AS next_ms FROM t) AS pairs",
            &[],
        )
        .unwrap();
    assert_eq!(
        (
            row.get::<_, i64>(0),
            row.get::<_, i64>(1),
            row.get::<_, i64>(2),
            row.get::<_, i64>(3)
        ),
        (40_000, 0, 0, 0),
        "rows, IDs on the wrong node, IDs not past their generator's previous one, IDs more \
         than a second before an ID minted earlier"
    );
}

#[test]
fn pgbench_sessions_and_64_shards_mint_no_duplicate() {
    let Some(server) = server("ext-bench", "instagram", Some(5), pg::Options::default()) else {
        return;
    };
    server.psql(
        "CREATE TABLE t (id bigint PRIMARY KEY DEFAULT atomflake_next_id(), v int);
         CREATE TABLE shards (id bigint PRIMARY KEY, shard int NOT NULL);",
    );
    let (rows, _) = server.insert_from_sessions("t", 4, 3);
    assert_eq!(
        server
            .psql("SELECT count(*), count(*) FILTER (WHERE atomflake_node(id) <> 5) FROM t")
            .trim(),
        format!("{rows}|0")
    );
    // Each transaction mints 50 IDs for a shard drawn at random: the 64 shards' state words
    // are advanced by 8 sessions at once. A duplicate would fail a transaction. Every shard
    // mints one row first, so that each is there whatever the draws.
    server.psql("INSERT INTO shards SELECT atomflake_next_id(s), s FROM generate_series(0, 63) AS s");
    let (done, failed, _) = server.bench(
        "\\set shard random(0, 63)\n\
         INSERT INTO shards SELECT atomflake_next_id(:shard), :shard FROM generate_series(1, 50);\n",
        8,
        3,
    );
    assert!(done > 0);
    assert_eq!(failed, 0);
    assert_eq!(
        server
            .psql(
                "SELECT count(*), count(DISTINCT shard), count(*) FILTER (WHERE atomflake_node(id) <> shard)
                 FROM shards"
            )
            .trim(),
        format!("{}|64|0", done * 50 + 64),
        "rows, shards, IDs that do not carry their shard"
    );
}

/// Options for a server whose clock follows a clock file, and that file (at the real time).
fn faked(test: &str) -> (pg::Options, pg::ClockFile) {
    let file = pg::ClockFile::new(test);
    let options = pg::Options {
        faketime_file: Some(file.to_path_buf()),
        ..pg::Options::default()
    };
    (options, file)
}

#[test]
fn the_servers_clock_stepped_back_and_a_restart_repeat_nothing() {
    let (options, faketime) = faked("ext-step");
    let Some(server) = server("ext-step", "twitter", Some(7), options) else {
        return;
    };
    server.psql("CREATE TABLE t (n bigserial, id bigint UNIQUE DEFAULT atomflake_next_id());");
    server.step_back_while_writing(&faketime, &[]);
    let rows = server.psql_u64("SELECT count(*) FROM t");
    assert_eq!(
        server
            .psql("SELECT count(*) FILTER (WHERE next_id <= id) FROM (SELECT id, lead(id) OVER (ORDER BY n) AS next_id FROM t) AS pairs")
            .trim(),
        "0",
        "IDs strictly increase in the order they were minted ({rows} rows)"
    );
    let before = server.psql_u64("SELECT max(id) FROM t");
    let before_ms = Layout::TWITTER.decode(Id::new(before)).unix_ms;
    // The writer waited for its clock to catch up with the last tick. Now the clock steps
    // back 4 s more, and the server restarts: shared memory starts empty, and only the
    // mark file keeps the next ID past the old ones.
    pg::step_clock(&faketime, "-6");
    server.stop("immediate");
    server.start_again();
    server.assert_behind(6.0);
    let server_ms = server.unix_ms();
    assert!(
        before_ms > server_ms,
        "the server's clock ({server_ms}) is behind the last ID ({before_ms})"
    );
    let after = server.psql_u64("SELECT atomflake_next_id()");
    assert!(
        after > before,
        "after the restart {after} ({} ms) is not past {before} ({before_ms} ms)",
        Layout::TWITTER.decode(Id::new(after)).unix_ms
    );
}

#[test]
fn an_immediate_stop_and_a_killed_backend_give_no_id_back() {
    let (options, faketime) = faked("ext-crash");
    let Some(server) = server("ext-crash", "twitter", Some(7), options) else {
        return;
    };
    for (crash, offset) in [("SIGKILL to a backend", "-3"), ("pg_ctl stop -m immediate", "-6")] {
        // Two sessions mint at once; once both are under way, the clock steps 3 s back and
        // the server crashes: after it, only the mark file keeps the next ID past the old
        // ones.
        let (killed, other) = (Minter::start(&server), Minter::start(&server));
        killed.wait_for(200);
        other.wait_for(200);
        pg::step_clock(&faketime, offset);
        std::thread::sleep(Duration::from_millis(100));
        if crash.starts_with("SIGKILL") {
            let status = std::process::Command::new("kill")
                .args(["-9", &killed.pid.to_string()])
                .status()
                .unwrap();
            assert!(status.success());
        } else {
            server.stop("immediate");
        }
        let mut handed_out = killed.ids.join().unwrap();
        handed_out.extend(other.ids.join().unwrap());
        let max = *handed_out.iter().max().unwrap();
        let max_ms = Layout::TWITTER.decode(Id::new(max)).unix_ms;
        if crash.starts_with("pg_ctl") {
            server.start_again();
        }
        // After a backend's crash the postmaster restarts every process and sets shared
        // memory up again. The mark it stored covers every ID handed out (the postmaster
        // may have lowered it to just past the last ID once every backend was gone).
        server.wait_ready();
        // The server's clock ran on through the restart, which takes seconds on a loaded
        // machine: step it again, so that it is as far behind the last ID handed out as
        // the step before the crash made it. (The words start from the mark file at the
        // first mint after the restart.)
        let behind_ms = offset.parse::<i64>().unwrap().abs() * 1_000;
        let offset_s =
            (i64::try_from(max_ms).unwrap() - behind_ms - i64::try_from(now_ms()).unwrap()).div_euclid(1_000);
        pg::step_clock(&faketime, &format!("{offset_s:+}"));
        let mark = atomflake::raw::read_mark(&server.data().join("atomflake.mark"))
            .unwrap()
            .unwrap();
        assert!(max_ms < mark, "{crash}: the mark covers every ID");
        let server_ms: u64 = server.unix_ms();
        assert!(
            server_ms < max_ms,
            "{crash}: the server's clock is behind the last ID handed out"
        );
        let mut client = connect(&server);
        let after = ids(
            &mut client,
            "SELECT atomflake_next_id() FROM generate_series(1, 1000)",
        );
        assert!(after[0] > max, "{crash}: {} is not past {max}", after[0]);
        assert!(
            Layout::TWITTER.decode(Id::new(after[0])).unix_ms >= mark,
            "{crash}: the first ID after the crash starts at or past the stored mark {mark}"
        );
        let unique: HashSet<u64> = handed_out.iter().chain(&after).copied().collect();
        assert_eq!(
            unique.len(),
            handed_out.len() + after.len(),
            "{crash}: an ID repeated"
        );
    }
    assert!(
        std::fs::read_to_string(server.file("log"))
            .unwrap()
            .contains("terminated by signal 9"),
        "the server saw its backend killed"
    );
}

#[test]
fn a_clean_stop_stores_the_mark_just_past_the_last_id() {
    let Some(server) = server("ext-final", "twitter", Some(7), pg::Options::default()) else {
        return;
    };
    let mark_file = server.data().join("atomflake.mark");
    let ids: Vec<u64> = server
        .psql("SELECT atomflake_next_id() FROM generate_series(1, 1000); SELECT atomflake_next_id(3)")
        .lines()
        .map(|line| line.parse().unwrap())
        .collect();
    let last_ms = ids
        .iter()
        .map(|&id| Layout::TWITTER.decode(Id::new(id)).unix_ms)
        .max()
        .unwrap();
    let ahead = atomflake::raw::read_mark(&mark_file).unwrap().unwrap();
    assert!(ahead > last_ms + 1, "the mark is stored ahead of need");
    server.stop("fast");
    assert_eq!(
        atomflake::raw::read_mark(&mark_file).unwrap(),
        Some(last_ms + 1),
        "the final mark is just past the last ID's tick"
    );
    server.start_again();
    let next = server.psql_u64("SELECT atomflake_next_id(3)");
    assert!(next > *ids.iter().max().unwrap());
    assert!(Layout::TWITTER.decode(Id::new(next)).unix_ms > last_ms);
}

/// What a minting function raises on a hot standby.
const IN_RECOVERY: &str = "atomflake cannot mint while the server is in recovery (a standby): \
     mint on the primary; a promoted standby mints once it is out of recovery, for the \
     atomflake.node it was started with, which must be its own";

/// The SQLSTATE and message of the error `sql` raises; a panic naming what it returned
/// when it succeeds.
fn refusal(client: &mut postgres::Client, sql: &str) -> (String, String) {
    match client.query_one(sql, &[]) {
        Ok(row) => panic!(
            "{sql} returned {:?} instead of an error",
            row.try_get::<_, i64>(0)
        ),
        Err(error) => {
            let error = error
                .as_db_error()
                .unwrap_or_else(|| panic!("{sql}: not a server error: {error}"));
            (error.code().code().to_owned(), error.message().to_owned())
        }
    }
}

/// A standby's mark moves no further by hand, and a dump of the standby carries at least
/// its clock (`now`, read before) and the mark of its base backup (in `mark_file`).
fn assert_a_standbys_mark(on_standby: &mut postgres::Client, now: u64, mark_file: &std::path::Path) {
    assert_eq!(
        refusal(on_standby, &format!("SELECT atomflake_raise_mark({now})")),
        ("25006".to_owned(), IN_RECOVERY.to_owned()),
    );
    let carried: i64 = on_standby
        .query_one("SELECT atomflake_mark()", &[])
        .unwrap()
        .get(0);
    let copied_mark = atomflake::raw::read_mark(mark_file).unwrap().unwrap();
    assert!(
        u64::try_from(carried).unwrap() >= now.max(copied_mark),
        "the standby carries {carried}, below its clock {now} or its mark {copied_mark}"
    );
}

#[test]
fn a_standby_refuses_to_mint_and_once_promoted_mints_for_its_own_node() {
    let Some(primary) = server("ext-standby", "twitter", Some(7), pg::Options::default()) else {
        return;
    };
    primary.psql("CREATE SEQUENCE s");
    let mut client = connect(&primary);
    let mut primary_ids = ids(
        &mut client,
        "SELECT atomflake_next_id() FROM generate_series(1, 2000)",
    );
    // The copy carries the primary's mark file; the standby starts with its own node.
    let standby = primary.standby(
        "ext-standby",
        pg::Options {
            settings: vec![
                ("shared_preload_libraries", "atomflake".to_owned()),
                ("atomflake.layout", "twitter".to_owned()),
                ("atomflake.node", "8".to_owned()),
            ],
            ..pg::Options::default()
        },
    );
    assert!(standby.in_recovery(), "the standby is in recovery");
    let mark_file = standby.data().join("atomflake.mark");
    let copied = std::fs::read(&mark_file).unwrap();
    let mut on_standby = connect(&standby);
    let now = now_ms();
    for sql in [
        "SELECT atomflake_next_id()".to_owned(),
        "SELECT atomflake_next_id(3)".to_owned(),
        "SELECT atomflake_next_id(8)".to_owned(),
        format!("SELECT atomflake_next_id_at({now})"),
    ] {
        assert_eq!(
            refusal(&mut on_standby, &sql),
            ("25006".to_owned(), IN_RECOVERY.to_owned()),
            "{sql} on the standby"
        );
    }
    assert_a_standbys_mark(&mut on_standby, now, &mark_file);
    // The same SQLSTATE as nextval's on a standby; decoding still works there.
    assert_eq!(refusal(&mut on_standby, "SELECT nextval('s')").0, "25006");
    let decoded: i64 = on_standby
        .query_one(
            "SELECT atomflake_node($1)",
            &[&i64::try_from(primary_ids[0]).unwrap()],
        )
        .unwrap()
        .get(0);
    assert_eq!(decoded, 7);
    // Nothing writes the standby's mark file: not the refused calls, not a clean stop.
    drop(on_standby);
    standby.stop("fast");
    assert_eq!(
        std::fs::read(&mark_file).unwrap(),
        copied,
        "the standby's mark file moved"
    );
    standby.start_again();
    assert!(
        standby.in_recovery(),
        "the standby is in recovery after a restart"
    );
    assert_eq!(
        refusal(&mut connect(&standby), "SELECT atomflake_next_id()"),
        ("25006".to_owned(), IN_RECOVERY.to_owned()),
        "after a restart in recovery"
    );
    // Promoted, it mints for its own node, and stores its own mark, while the old primary
    // still mints for its node.
    standby.promote();
    let mut promoted = connect(&standby);
    let mut standby_ids = ids(
        &mut promoted,
        "SELECT atomflake_next_id() FROM generate_series(1, 2000)",
    );
    assert_ne!(
        std::fs::read(&mark_file).unwrap(),
        copied,
        "the promoted standby stores its mark"
    );
    primary_ids.extend(ids(
        &mut client,
        "SELECT atomflake_next_id() FROM generate_series(1, 2000)",
    ));
    standby_ids.extend(ids(
        &mut promoted,
        "SELECT atomflake_next_id() FROM generate_series(1, 2000)",
    ));
    assert!(
        standby_ids.windows(2).all(|w| w[0] < w[1]),
        "the promoted standby's IDs rise"
    );
    assert!(
        standby_ids
            .iter()
            .all(|&raw| Layout::TWITTER.decode(Id::new(raw)).node == 8),
        "every ID of the promoted standby carries its node, 8"
    );
    let primary_ids: HashSet<u64> = primary_ids.into_iter().collect();
    assert_eq!(primary_ids.len(), 4000);
    assert_eq!(
        standby_ids.iter().filter(|raw| primary_ids.contains(raw)).count(),
        0,
        "IDs of the promoted standby that the primary minted too"
    );
}

#[test]
fn a_wait_for_the_clock_ends_on_a_cancel_and_a_clock_far_behind_is_an_error() {
    // How far back the clock steps; the longest the extension waits for the clock (its
    // error below says so).
    const BEHIND: Duration = Duration::from_secs(9);
    const MAX_WAIT: Duration = Duration::from_secs(10);
    let (options, faketime) = faked("ext-wait");
    let Some(server) = server("ext-wait", "twitter", Some(7), options) else {
        return;
    };
    let mut client = connect(&server);
    // The node's last tick is minted after this: a wait for the clock, stepped back by
    // `BEHIND`, lasts until `BEHIND` past this at the earliest. A call that returns before
    // then was not let finish its wait.
    let before_the_last_tick = Instant::now();
    client.query_one("SELECT atomflake_next_id()", &[]).unwrap();
    pg::step_clock(&faketime, &format!("-{}", BEHIND.as_secs()));
    let not_waited_out = |returned: Instant, what: &str| {
        let after = returned.duration_since(before_the_last_tick);
        assert!(
            after < BEHIND,
            "{what}: returned {after:?} after the last tick, not before the clock's wait of {BEHIND:?} \
             ran out"
        );
    };
    // The last tick continues for its 4,096 IDs, then the call waits about 9 s for the
    // clock: the statement timeout ends that.
    client.batch_execute("SET statement_timeout = 300").unwrap();
    let error = db_error(client.query_one(
        "SELECT count(atomflake_next_id()) FROM generate_series(1, 10000)",
        &[],
    ));
    not_waited_out(Instant::now(), "the statement timeout");
    assert_eq!(error, "canceling statement due to statement timeout");
    client.batch_execute("SET statement_timeout = 0").unwrap();
    // And a cancel from another session.
    let pid: i32 = client.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    let waiter = std::thread::spawn(move || {
        let result = client.query_one(
            "SELECT count(atomflake_next_id()) FROM generate_series(1, 10000)",
            &[],
        );
        (db_error(result), Instant::now())
    });
    // Cancel once the statement is running and has waited a little.
    let query = format!("SELECT state FROM pg_stat_activity WHERE pid = {pid}");
    while server.psql(&query).trim() != "active" {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        server.psql(&format!("SELECT pg_cancel_backend({pid})")).trim(),
        "t"
    );
    let (error, returned) = waiter.join().unwrap();
    not_waited_out(returned, "the cancel");
    assert_eq!(error, "canceling statement due to user request");
    // A clock more than `MAX_WAIT` behind the next free ID: an error at once, naming both
    // times, not after a wait of `MAX_WAIT`.
    pg::step_clock(&faketime, "-30");
    let mut client = connect(&server);
    let start = Instant::now();
    let error = db_error(client.query_one(
        "SELECT count(atomflake_next_id()) FROM generate_series(1, 10000)",
        &[],
    ));
    let took = start.elapsed();
    assert!(
        took < MAX_WAIT,
        "the error took {took:?}, not under the longest wait for the clock ({MAX_WAIT:?})"
    );
    assert!(
        error.starts_with("the clock reads ")
            && error.contains(" ms behind node 7's next free id at ")
            && error.ends_with(&format!(
                " ms: atomflake waits at most {} ms for the clock",
                MAX_WAIT.as_millis()
            )),
        "{error}"
    );
    pg::step_clock(&faketime, "+0");
    let id: i64 = client
        .query_one("SELECT atomflake_next_id()", &[])
        .unwrap()
        .get(0);
    let ms = Layout::TWITTER.decode(self::id(id)).unix_ms;
    assert!(ms.abs_diff(now_ms()) < 5_000, "{ms}");
}

#[test]
fn settings_are_fixed_at_server_start_and_every_bad_value_is_an_exact_error() {
    let Some(server) = server("ext-settings", "twitter", None, pg::Options::default()) else {
        return;
    };
    let mut client = connect(&server);
    let error = |client: &mut postgres::Client, sql: &str| db_error(client.query_one(sql, &[]));
    for (sql, message) in [
        (
            "SELECT atomflake_next_id()",
            "atomflake.node is not set: set it in postgresql.conf (0..=1023 for layout twitter) \
         and restart the server, or pass a node to atomflake_next_id(node)",
        ),
        (
            "SELECT atomflake_next_id(1024)",
            "node 1024 is out of range: layout twitter allows 0..=1023",
        ),
        (
            "SELECT atomflake_next_id(-1)",
            "node -1 is out of range: layout twitter allows 0..=1023",
        ),
        (
            "SELECT atomflake_node(-1)",
            "id -1 is out of range: the layout allows 0..=9223372036854775807",
        ),
        (
            "SELECT atomflake_first_id_at('2000-01-01 00:00:00+00')",
            "time 946684800000 ms is out of range: the layout's bigint ids cover 1288834974657..3487858230209 ms",
        ),
    ] {
        assert_eq!(error(&mut client, sql), message, "{sql}");
    }
    let error_text = error(
        &mut client,
        &format!("SELECT atomflake_next_id_at({})", now_ms() + 60_000),
    );
    assert!(
        error_text.starts_with("time ")
            && error_text
                .ends_with(" ms ahead of the clock: atomflake_next_id_at mints at most 5000 ms ahead"),
        "{error_text}"
    );
    let sql_state = |client: &mut postgres::Client, sql: &str| {
        client
            .query_one(sql, &[])
            .unwrap_err()
            .code()
            .unwrap()
            .code()
            .to_owned()
    };
    assert_eq!(sql_state(&mut client, "SELECT atomflake_node(-1)"), "22003");
    for (sql, message) in [
        (
            "SET atomflake.node = 3",
            "parameter \"atomflake.node\" cannot be changed without restarting the server",
        ),
        (
            "SET atomflake.layout = 'discord'",
            "parameter \"atomflake.layout\" cannot be changed without restarting the server",
        ),
        (
            "SET atomflake.nod = 3",
            "invalid configuration parameter name \"atomflake.nod\"",
        ),
        (
            "ALTER SYSTEM SET atomflake.layout = 'snowflake'",
            "invalid value for parameter \"atomflake.layout\": \"snowflake\"",
        ),
    ] {
        assert_eq!(error(&mut client, sql), message, "{sql}");
    }
    // A node the layout cannot hold stops the server from starting, with the reason.
    client
        .batch_execute("ALTER SYSTEM SET atomflake.node = 1024")
        .unwrap();
    server.stop("fast");
    let restart = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| server.start_again()));
    assert!(restart.is_err(), "the server started with node 1024");
    let log = std::fs::read_to_string(server.file("log")).unwrap();
    assert!(
        log.contains("atomflake.node 1024 is out of range: layout twitter allows 0..=1023"),
        "{log}"
    );
}

#[test]
fn without_shared_preload_libraries_create_extension_is_a_clear_error() {
    if !pg::has_library("ext-not-preloaded", "atomflake") {
        return;
    }
    let Some(server) = Server::start("ext-not-preloaded") else {
        return;
    };
    let mut client = connect(&server);
    assert_eq!(
        db_error(client.batch_execute("CREATE EXTENSION atomflake").map(drop)),
        "atomflake must be loaded at server start: add atomflake to shared_preload_libraries \
         in postgresql.conf and restart the server"
    );
    assert_eq!(server.psql("SELECT 1").trim(), "1", "the server is still up");
}

/// Every function the extension creates, and whether a role with no grants may call it:
/// a function added later must be placed here, on purpose.
const PUBLIC_MAY_EXECUTE: [(&str, bool); 20] = [
    ("atomflake_adopt(regclass,name)", true),
    ("atomflake_dump_restored()", true),
    ("atomflake_first_id_at(timestamp with time zone)", true),
    ("atomflake_from_uuid(uuid)", true),
    ("atomflake_last_id_at(timestamp with time zone)", true),
    ("atomflake_mark()", true),
    ("atomflake_mark_in(cstring)", true),
    ("atomflake_mark_out(atomflake_mark)", true),
    ("atomflake_mask(bigint,bytea)", true),
    ("atomflake_next_id()", true),
    ("atomflake_next_id(bigint)", false),
    ("atomflake_next_id_at(bigint)", false),
    ("atomflake_node(bigint)", true),
    ("atomflake_raise_mark(atomflake_mark)", false),
    ("atomflake_raise_mark(bigint)", false),
    ("atomflake_sequence(bigint)", true),
    ("atomflake_time(bigint)", true),
    ("atomflake_to_uuid(bigint)", true),
    ("atomflake_unix_ms(bigint)", true),
    ("atomflake_unmask(bigint,bytea)", true),
];

/// The row a dump carries is the owner's alone to write (`stranger` has no grants), and
/// anyone's to read: it reads below `ahead`, the mark the refused insert would have set.
fn assert_the_dump_row_is_read_only(stranger: &mut postgres::Client, ahead: u64) {
    assert_eq!(
        refusal(
            stranger,
            &format!("INSERT INTO atomflake_dump VALUES ('{ahead}') RETURNING 0::bigint")
        ),
        (
            "42501".to_owned(),
            "permission denied for table atomflake_dump".to_owned()
        ),
    );
    let carried: String = stranger
        .query_one("SELECT mark::text FROM atomflake_dump", &[])
        .unwrap()
        .get(0);
    assert!(
        carried.parse::<u64>().unwrap() < ahead,
        "the stranger moved the mark"
    );
}

#[test]
fn a_role_with_no_grants_mints_at_the_clock_alone_and_the_documented_grants_allow_the_rest() {
    let Some(server) = server("ext-privileges", "twitter", Some(7), pg::Options::default()) else {
        return;
    };
    // `app` has the grants the README lists; `stranger` has none.
    server.psql(
        "CREATE ROLE stranger LOGIN; CREATE ROLE app LOGIN; \
         CREATE TABLE message (id bigint PRIMARY KEY DEFAULT atomflake_next_id(), body text); \
         GRANT SELECT, INSERT ON message TO app; \
         GRANT EXECUTE ON FUNCTION atomflake_next_id(bigint), atomflake_next_id_at(bigint) TO app",
    );
    let mut owner = connect(&server);
    let functions: Vec<(String, bool)> = owner
        .query(
            "SELECT p.oid::regprocedure::text, has_function_privilege('stranger', p.oid, 'EXECUTE') \
             FROM pg_depend d JOIN pg_proc p ON p.oid = d.objid \
             WHERE d.classid = 'pg_proc'::regclass AND d.deptype = 'e' \
             AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'atomflake') \
             ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    let expected: Vec<(String, bool)> = PUBLIC_MAY_EXECUTE
        .iter()
        .map(|(function, public)| ((*function).to_owned(), *public))
        .collect();
    assert_eq!(
        functions, expected,
        "the extension's functions and who may call them"
    );

    let mut stranger = postgres::Client::connect(&server.conninfo_as("stranger"), postgres::NoTls).unwrap();
    let ahead = now_ms() + 4_900;
    for (sql, function) in [
        (
            format!("SELECT atomflake_next_id_at({ahead})"),
            "atomflake_next_id_at",
        ),
        ("SELECT atomflake_next_id(8)".to_owned(), "atomflake_next_id"),
        ("SELECT atomflake_next_id(7)".to_owned(), "atomflake_next_id"),
        (
            format!("SELECT atomflake_raise_mark({ahead})"),
            "atomflake_raise_mark",
        ),
    ] {
        assert_eq!(
            refusal(&mut stranger, &sql),
            (
                "42501".to_owned(),
                format!("permission denied for function {function}")
            ),
            "{sql} as a role with no grants"
        );
    }
    assert_the_dump_row_is_read_only(&mut stranger, ahead);
    // What the stranger may do: mint for the server's node at the clock, and decode.
    let minted = ids(
        &mut stranger,
        "SELECT atomflake_next_id() FROM generate_series(1, 10000)",
    );
    assert_eq!(minted.len(), 10_000);
    let node: i64 = stranger
        .query_one("SELECT atomflake_node(atomflake_next_id())", &[])
        .unwrap()
        .get(0);
    assert_eq!(node, 7);
    // The node is no further than the clock: the owner's next ID is of a tick the clock
    // has reached.
    let owners = ids(&mut owner, "SELECT atomflake_next_id()")[0];
    let clock: i64 = owner
        .query_one(
            "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint",
            &[],
        )
        .unwrap()
        .get(0);
    let owners_ms = Layout::TWITTER.decode(Id::new(owners)).unix_ms;
    assert!(
        owners_ms <= u64::try_from(clock).unwrap(),
        "the owner's id {owners} is at {owners_ms} ms, ahead of the clock at {clock} ms"
    );

    let mut app = postgres::Client::connect(&server.conninfo_as("app"), postgres::NoTls).unwrap();
    let on_8 = ids(&mut app, "SELECT atomflake_next_id(8)")[0];
    assert_eq!(Layout::TWITTER.decode(Id::new(on_8)).node, 8);
    let at = now_ms();
    let parts = Layout::TWITTER.decode(Id::new(
        ids(&mut app, &format!("SELECT atomflake_next_id_at({at})"))[0],
    ));
    assert_eq!((parts.node, parts.unix_ms), (7, at));
    let row = ids(
        &mut app,
        "INSERT INTO message (body) VALUES ('hello') RETURNING id",
    )[0];
    assert!(
        row > owners,
        "the row's id {row} is not past the owner's {owners}"
    );
}

/// Rows per second through pgbench, the same table shape for each: the extension's
/// `atomflake_next_id()`, the SQL script's (`atomflake sql`) and the seed's (Instagram's
/// published function), at 2 and 4 clients, alternating in one run on one server; then
/// the cost of a million calls in one statement. Prints the table; asserts only that
/// nothing failed. A measurement, not a test: run it on a quiet machine with
/// `cargo test --release -p atomflake-db-tests --test extension -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement (about two minutes); run by hand"]
fn measure_the_extension_against_the_script_and_the_seed() {
    let Some(server) = server("ext-measure", "twitter", Some(7), pg::Options::default()) else {
        return;
    };
    server.psql_file(
        &PgScript::new(Layout::TWITTER, 7)
            .unwrap()
            .prefix("script")
            .unwrap()
            .to_string(),
    );
    server.psql(&pg::SEED.replace(
        "extract(epoch FROM now())",
        "extract(epoch FROM clock_timestamp())",
    ));
    let functions = [
        ("extension", "atomflake_next_id()"),
        ("script", "script_next_id()"),
        ("seed", "seed_next_id()"),
    ];
    for (table, function) in functions {
        server.psql(&format!(
            "CREATE TABLE {table} (id bigint PRIMARY KEY DEFAULT {function}, v int)"
        ));
    }
    rows_per_second(&server, &functions);
    cost_of_a_call(&server);
}

/// pgbench at 2 and 4 clients into each function's table, alternating: prints each round
/// and the medians.
fn rows_per_second(server: &Server, functions: &[(&str, &str)]) {
    let (seconds, rounds) = (5, 5);
    for clients in [2, 4] {
        let mut rates = vec![Vec::new(); functions.len()];
        for round in 0..rounds {
            for (which, (table, _)) in functions.iter().enumerate() {
                server.psql(&format!("TRUNCATE {table}"));
                let (_, rate) = server.insert_from_sessions(table, clients, seconds);
                println!("{clients} clients, round {round}: {table:<9} {rate:>9.0} rows/s");
                rates[which].push(rate);
            }
        }
        let medians: Vec<f64> = rates
            .iter_mut()
            .map(|rates| {
                rates.sort_by(f64::total_cmp);
                rates[rates.len() / 2]
            })
            .collect();
        println!(
            "median rows/s, {clients} clients x 50 rows per INSERT, {rounds} rounds of {seconds} s: \
             extension {:.0}, script {:.0}, seed {:.0}; extension/seed {:.2}, extension/script {:.2}",
            medians[0],
            medians[1],
            medians[2],
            medians[0] / medians[2],
            medians[0] / medians[1]
        );
    }
}

/// Times `expression` over a million rows in one statement (median of 5 runs, in ms);
/// `{run}` in it is the run's number.
fn million_calls(server: &Server, expression: &str) -> f64 {
    let mut times: Vec<f64> = (0..5)
        .map(|run| {
            let expression = expression.replace("{run}", &run.to_string());
            server.timed(&format!(
                "SELECT count({expression}) FROM generate_series(1, 1000000) AS g;"
            ))
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[2]
}

/// The cost of one call of each function, and what bounds one node.
fn cost_of_a_call(server: &Server) {
    let timed = |expression: &str| million_calls(server, expression);
    let bare = timed("g");
    println!("statement without a call: {bare:.1} ms");
    for expression in [
        "atomflake_next_id()",
        "atomflake_next_id(g & 63)",
        "script_next_id()",
        "seed_next_id()",
        "nextval('seed_seq')",
    ] {
        let ms = timed(expression);
        println!(
            "{expression:<26} {ms:>8.1} ms per million calls: {:>6.0} ns per call, {:>6.0} ns past the bare statement",
            ms * 1e6 / 1e6,
            (ms - bare) * 1e6 / 1e6
        );
    }
    // One node mints at most 4,096 IDs per ms (Twitter's 12-bit sequence): a million IDs
    // take at least 244 ms of ID time, whatever a call costs.
    let span = server.psql_u64(
        "SELECT max(ms) - min(ms) + 1 FROM
               (SELECT atomflake_unix_ms(atomflake_next_id()) AS ms FROM generate_series(1, 1000000)) AS ids",
    );
    println!("a million IDs of one node span {span} ms of ID time (the layout's cap: 4,096 per ms)");
    // Minting alone, at given times ahead of the clock (no clock read, no wait), each run
    // 0.9 s after the last, within the 5 s ahead that `atomflake_next_id_at` allows.
    let ahead = now_ms() + 500;
    let ms = timed(&format!(
        "atomflake_next_id_at({ahead} + {{run}} * 900 + g / 4096)"
    )) - timed(&format!("{ahead} + {{run}} * 900 + g / 4096"));
    println!(
        "atomflake_next_id_at(t): {:.0} ns per call past the statement without it",
        ms * 1e6 / 1e6
    );
}

#[test]
fn adopt_switches_a_bigserial_table_over_while_sessions_insert() {
    let Some(server) = server("ext-adopt", "twitter", Some(7), pg::Options::default()) else {
        return;
    };
    // The old values lie a second below the IDs of now.
    let start = Layout::TWITTER.first_id_at(now_ms() - 1000).unwrap().get();
    server.psql(&format!(
        "CREATE TABLE t (id bigserial PRIMARY KEY, v int);
         SELECT setval('t_id_seq', {start});
         INSERT INTO t (v) SELECT g FROM generate_series(1, 100000) AS g"
    ));
    std::thread::scope(|scope| {
        let inserts = scope.spawn(|| server.bench("INSERT INTO t (v) VALUES (1);\n", 4, 3));
        while server.psql_u64("SELECT count(*) FROM t") < 100_500 {
            assert!(!inserts.is_finished(), "the inserts ended before 500 rows");
            std::thread::sleep(Duration::from_millis(20));
        }
        server.psql("SELECT atomflake_adopt('t', 'id')");
        let (_, failed, _) = inserts.join().unwrap();
        assert_eq!(failed, 0, "failed inserts");
    });
    let last_old = server.psql_u64("SELECT last_value FROM t_id_seq");
    let counts = server.psql(&format!(
        "SELECT count(*) - count(DISTINCT id), count(*) FILTER (WHERE id <= {last_old}),
                count(*) FILTER (WHERE id > {last_old}),
                count(*) FILTER (WHERE id > {last_old} AND atomflake_node(id) = 7),
                max(id) FILTER (WHERE id <= {last_old}) < min(id) FILTER (WHERE id > {last_old})
         FROM t"
    ));
    let fields: Vec<&str> = counts.trim().split('|').collect();
    assert_eq!(fields[0], "0", "an id twice: {counts}");
    assert!(
        fields[1].parse::<u64>().unwrap() > 100_000,
        "no old id during the switch: {counts}"
    );
    assert_eq!(fields[1].parse::<u64>().unwrap(), last_old - start, "{counts}");
    assert!(fields[2].parse::<u64>().unwrap() > 0, "no atomflake id: {counts}");
    assert_eq!(fields[2], fields[3], "{counts}");
    assert_eq!(fields[4], "t", "an old value above a new id: {counts}");
    let definition = "SELECT pg_get_expr(d.adbin, d.adrelid), pg_get_serial_sequence('t', 'id')
        FROM pg_attrdef d WHERE d.adrelid = 't'::regclass";
    assert_eq!(server.psql(definition), "atomflake_next_id()|\n");
    // Again: nothing changes, and no lock is taken (a reader holds one meanwhile).
    let mut reader = connect(&server);
    reader.batch_execute("BEGIN; SELECT count(*) FROM t").unwrap();
    server.psql("SET lock_timeout = 200; SELECT atomflake_adopt('t', 'id')");
    reader.batch_execute("COMMIT").unwrap();
    assert_eq!(server.psql(definition), "atomflake_next_id()|\n");
}

#[test]
fn adopt_refuses_each_column_it_cannot_take_with_an_exact_error() {
    let Some(server) = server("ext-adopt-refusals", "twitter", Some(7), pg::Options::default()) else {
        return;
    };
    let mut client = connect(&server);
    server.psql(
        "CREATE TABLE narrow (id serial PRIMARY KEY);
         CREATE TABLE parent (id bigserial PRIMARY KEY);
         CREATE TABLE child (parent_id int REFERENCES parent (id));
         CREATE TABLE ahead (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY)",
    );
    assert_eq!(
        db_error(client.execute("SELECT atomflake_adopt('narrow', 'id')", &[])),
        "cannot adopt column narrow.id: it is integer and atomflake ids are bigint; change it \
         first with ALTER TABLE narrow ALTER COLUMN id TYPE bigint (this rewrites the table), then \
         adopt it"
    );
    assert_eq!(
        db_error(client.execute("SELECT atomflake_adopt('parent', 'id')", &[])),
        "cannot adopt column parent.id: column child.parent_id references it (foreign key \
         child_parent_id_fkey) and is integer, which atomflake ids do not fit; change it first \
         with ALTER TABLE child ALTER COLUMN parent_id TYPE bigint, then adopt parent.id"
    );
    assert_eq!(
        db_error(client.execute("SELECT atomflake_adopt('narrow', 'key')", &[])),
        "cannot adopt column narrow.key: table narrow has no column key"
    );
    // 2050-01-01T00:00:00Z
    let ahead = Layout::TWITTER.first_id_at(2_524_608_000_000).unwrap().get();
    server.psql(&format!(
        "INSERT INTO ahead OVERRIDING SYSTEM VALUE VALUES (1), ({ahead})"
    ));
    let from = now_ms();
    let error = db_error(client.execute("SELECT atomflake_adopt('ahead', 'id')", &[]));
    let to = now_ms();
    let (first, first_ms) = pg::adoption_refused_at(&error, from, to);
    let first_time = server.psql(&format!(
        "SELECT to_char(to_timestamp({first_ms} / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS')"
    ));
    assert_eq!(
        error,
        format!(
            "cannot adopt column ahead.id: it holds {ahead}, which decodes to 2050-01-01 \
             00:00:00.000 UTC, at or above {first} ({} UTC), the smallest id atomflake mints from \
             now on; adopt it once atomflake's ids are past its values (after 2050-01-01 \
             00:00:00.000 UTC), or use a layout whose ids are above them",
            first_time.trim()
        )
    );
    assert_eq!(
        server.psql(
            "SELECT attidentity FROM pg_attribute WHERE attrelid = 'ahead'::regclass AND attname = 'id'"
        ),
        "a\n"
    );
}

/// A server with the extension preloaded for node [`copies::NODE`] (not created: a
/// restore creates it), its clock 3 s behind, or `None` after a skip.
fn behind(test: &str) -> Option<Server> {
    if !pg::can_move_clocks(test) {
        return None;
    }
    let options = pg::Options {
        clock_offset: Some("-3s"),
        ..pg::Options::default()
    };
    let server = preloaded(test, "twitter", Some(copies::NODE), options)?;
    server.assert_behind(3.0);
    Some(server)
}

/// `sql`'s one line of output in `server`'s database `database`.
fn psql_in(server: &Server, database: &str, sql: &str) -> String {
    let output = server
        .client("psql")
        .args(["-X", "-qAt", "-v", "ON_ERROR_STOP=1", "-d", database, "-c", sql])
        .output()
        .unwrap();
    assert!(output.status.success(), "{sql}: {output:?}");
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

/// A server with the extension and the table of [`copies::fill_ahead`], and a second
/// database `other` with the extension where nothing was minted: the server and the
/// highest ID it minted. Both databases' `atomflake_dump` read the server's mark, which is
/// past that ID.
fn minted_then_dumped(test: &str) -> Option<(Server, u64)> {
    let server = server(test, "twitter", Some(copies::NODE), pg::Options::default())?;
    let newest = copies::fill_ahead(&server);
    server.psql("CREATE DATABASE other");
    psql_in(&server, "other", "CREATE EXTENSION atomflake");
    let mark = server.psql_u64("SELECT atomflake_mark()");
    assert!(
        mark > Layout::TWITTER.decode(Id::new(newest)).unix_ms,
        "the mark {mark} is not past the newest ID {newest}"
    );
    for database in ["postgres", "other"] {
        assert_eq!(
            psql_in(&server, database, "SELECT mark FROM atomflake_dump"),
            mark.to_string(),
            "the row in {database}"
        );
    }
    Some((server, newest))
}

/// A server with IDs minted ahead of its clock (the newest of them too), and a second
/// server 3 s behind it to copy them into; `None` where either cannot start (skipped).
fn minted_and_a_server_behind(test: &str) -> Option<(Server, u64, Server)> {
    let (old, newest) = minted_then_dumped(test)?;
    Some((old, newest, behind(test)?))
}

/// Checks that the copy `new` has one row in `atomflake_dump` per database, holds a mark
/// past `newest` in its mark file, and continues past it.
fn the_copy_continues_past(new: &Server, newest: u64) {
    for database in ["postgres", "other"] {
        assert_eq!(
            psql_in(new, database, "SELECT count(*) FROM atomflake_dump"),
            "1",
            "rows in {database}'s atomflake_dump"
        );
    }
    let mark = atomflake::raw::read_mark(&new.data().join("atomflake.mark"))
        .unwrap()
        .expect("the restore stored a mark");
    assert!(
        mark > Layout::TWITTER.decode(Id::new(newest)).unix_ms,
        "the restored mark {mark} is not past the newest ID {newest}"
    );
    copies::continues_past(new, newest);
}

#[test]
fn pg_dump_and_pg_restore_carry_the_mark_into_a_server_3_s_behind() {
    let test = "ext-dump";
    let Some((old, newest, new)) = minted_and_a_server_behind(test) else {
        return;
    };
    new.psql("CREATE DATABASE other");
    copies::pg_dump_and_pg_restore(&old, &new);
    // `other` holds no ID, but its dump carries the same mark: restored alone, it is enough.
    copies::pg_dump_and_pg_restore_database(&old, "other", &new, "other");
    the_copy_continues_past(&new, newest);
}

#[test]
fn pg_dumpall_carries_the_mark_into_a_server_3_s_behind() {
    let test = "ext-dumpall";
    let Some((old, newest, new)) = minted_and_a_server_behind(test) else {
        return;
    };
    copies::pg_dumpall_and_psql(&old, &new);
    the_copy_continues_past(&new, newest);
}

#[test]
fn a_dump_of_a_database_where_nothing_was_minted_carries_the_servers_mark() {
    let test = "ext-dump-other";
    let Some((old, newest, new)) = minted_and_a_server_behind(test) else {
        return;
    };
    // Only `other` is copied; the IDs of `postgres` are then copied by hand, as an
    // application moving its data across databases would.
    copies::pg_dump_and_pg_restore_database(&old, "other", &new, "postgres");
    let rows = old.psql("SELECT string_agg(format('(%s, %s)', id, v), ', ') FROM t");
    new.psql(&format!(
        "CREATE TABLE t (id bigint PRIMARY KEY DEFAULT atomflake_next_id(), v int);
         INSERT INTO t VALUES {}",
        rows.trim()
    ));
    assert_eq!(new.psql("SELECT count(*) FROM atomflake_dump"), "1\n");
    copies::continues_past(&new, newest);
}

#[test]
fn the_mark_moves_only_forward_and_refuses_bad_values_with_exact_errors() {
    let Some(server) = server("ext-mark", "twitter", Some(7), pg::Options::default()) else {
        return;
    };
    let mut client = connect(&server);
    for text in ["-1", "+5", "x", "", "1.5", "9223372036854775808"] {
        assert_eq!(
            refusal(
                &mut client,
                &format!("SELECT '{text}'::atomflake_mark::text::bigint")
            ),
            (
                "22P02".to_owned(),
                format!(
                    "invalid input for type atomflake_mark: \"{text}\": a mark is a Unix time \
                     in ms, 0..=9223372036854775807"
                )
            ),
            "{text:?}"
        );
    }
    let end = Layout::TWITTER.i64_end_unix_ms();
    for ms in [-1, i64::try_from(end).unwrap()] {
        assert_eq!(
            refusal(&mut client, &format!("SELECT atomflake_raise_mark({ms})")),
            (
                "22008".to_owned(),
                format!(
                    "mark {ms} ms is out of range: layout twitter's bigint ids end at {end} ms, \
                     so a mark is 0..{end} ms (Unix)"
                )
            )
        );
    }
    let before = ids(&mut client, "SELECT atomflake_next_id(3)")[0];
    let raised = server.unix_ms() + 2_000;
    assert_eq!(
        ids(&mut client, &format!("SELECT atomflake_raise_mark({raised})")),
        [raised]
    );
    // Lower marks leave it where it is.
    assert_eq!(
        ids(
            &mut client,
            &format!("SELECT atomflake_raise_mark({})", raised - 1_000)
        ),
        [raised]
    );
    assert_eq!(ids(&mut client, "SELECT atomflake_mark()"), [raised]);
    // Every node mints from the raised mark on, the clock 2 s behind it.
    for sql in ["SELECT atomflake_next_id()", "SELECT atomflake_next_id(3)"] {
        let id = ids(&mut client, sql)[0];
        assert!(id > before);
        assert!(
            Layout::TWITTER.decode(Id::new(id)).unix_ms >= raised,
            "{sql} gave {id}, before the raised mark {raised}"
        );
    }
}

/// The stored mark runs ahead of the words (1.5 s ahead of the clock, shared by every
/// node): a mark raised to a time between the words and the stored mark must move every
/// node's word past it all the same, and leave the stored mark where it is.
#[test]
fn a_mark_raised_below_the_stored_mark_still_starts_every_node_past_it() {
    let Some(server) = server("ext-mark-below", "twitter", Some(7), pg::Options::default()) else {
        return;
    };
    let mut client = connect(&server);
    ids(&mut client, "SELECT atomflake_next_id()");
    let stored = ids(&mut client, "SELECT atomflake_mark()")[0];
    let raised = server.unix_ms() + 1_000;
    assert!(
        raised < stored,
        "the stored mark {stored} is not ahead of {raised}: nothing to test"
    );
    // What pg_restore's COPY of the dump's row does: the trigger raises the mark.
    client
        .batch_execute(&format!("INSERT INTO atomflake_dump VALUES ('{raised}')"))
        .unwrap();
    assert_eq!(ids(&mut client, "SELECT atomflake_mark()"), [stored]);
    assert_eq!(
        ids(&mut client, &format!("SELECT atomflake_raise_mark({raised})")),
        [stored]
    );
    for sql in [
        "SELECT atomflake_next_id()",
        "SELECT atomflake_next_id(5)",
        "SELECT atomflake_next_id(7)",
    ] {
        let id = ids(&mut client, sql)[0];
        let unix_ms = Layout::TWITTER.decode(Id::new(id)).unix_ms;
        assert!(
            unix_ms >= raised,
            "{sql} gave {id} at {unix_ms} ms, before the raised mark {raised} (stored {stored})"
        );
    }
}

/// `atomflake_adopt` reads the column with row security off: as the owner of a table under
/// `FORCE ROW LEVEL SECURITY` it is refused, not passed by a hidden row; it refuses a view;
/// the caller's `lock_timeout` bounds its wait for the table; and it knows a default by
/// the function it calls, not its text: a default on the SQL script's
/// `atomflake_next_id()` of another schema on the search path is switched over.
#[test]
fn adopt_reads_every_row_or_refuses_takes_no_view_and_knows_a_default_by_its_function() {
    let Some(server) = server("ext-adopt-hidden", "twitter", Some(7), pg::Options::default()) else {
        return;
    };
    adoption::hidden_row_and_view(&server);
    let defined = || {
        [
            adoption::definition(&server, "tenanted"),
            adoption::definition(&server, "orders"),
        ]
    };
    let before = defined();
    let mut tenant = postgres::Client::connect(&server.conninfo_as("tenant"), postgres::NoTls).unwrap();
    assert_eq!(
        refusal(&mut tenant, "SELECT atomflake_adopt('tenanted', 'id')"),
        ("42501".to_owned(), adoption::HIDDEN.to_owned())
    );
    let mut client = connect(&server);
    assert_eq!(
        refusal(&mut client, "SELECT atomflake_adopt('recent', 'id')"),
        ("42809".to_owned(), adoption::VIEW.to_owned())
    );
    let (code, message) = refusal(&mut client, "SELECT atomflake_adopt('tenanted', 'id')");
    assert_eq!(code, "55000");
    assert!(
        message.starts_with(&format!(
            "cannot adopt column tenanted.id: it holds {}",
            adoption::ahead()
        )),
        "{message}"
    );
    let mut reader = connect(&server);
    reader
        .batch_execute("BEGIN; SELECT count(*) FROM orders")
        .unwrap();
    client.batch_execute("SET lock_timeout = '200ms'").unwrap();
    assert_eq!(
        refusal(&mut client, "SELECT atomflake_adopt('orders', 'id')"),
        (
            "55P03".to_owned(),
            "canceling statement due to lock timeout".to_owned()
        )
    );
    reader.batch_execute("COMMIT").unwrap();
    assert_eq!(defined(), before);

    let script = PgScript::new(Layout::TWITTER, 7).unwrap();
    server.psql(&format!("CREATE SCHEMA scr; SET search_path = scr; {script}"));
    server.psql(
        "CREATE TABLE scripted (id bigint PRIMARY KEY DEFAULT scr.atomflake_next_id(), v int);
         INSERT INTO scripted (v) VALUES (1), (2)",
    );
    std::thread::sleep(Duration::from_millis(5));
    client
        .batch_execute("SET search_path = scr, public; SELECT public.atomflake_adopt('scripted', 'id')")
        .unwrap();
    let on = |function: &str| {
        server.psql_u64(&format!(
            "SELECT count(*) FROM pg_attrdef d JOIN pg_depend p ON p.classid = 'pg_attrdef'::regclass
                 AND p.objid = d.oid AND p.refclassid = 'pg_proc'::regclass
             WHERE d.adrelid = 'scripted'::regclass AND p.refobjid = '{function}'::regprocedure"
        ))
    };
    assert_eq!(
        (on("public.atomflake_next_id()"), on("scr.atomflake_next_id()")),
        (1, 0),
        "the script's default was taken for the extension's"
    );
}

/// A loader running with `session_replication_role = replica` (pgcopydb, the table sync of
/// logical replication) raises the mark through the trigger all the same, and keeps the
/// table at one row; a server restarted without the library preloaded still dumps, with
/// a warning, the mark of its data directory's file, which covers every ID it minted.
#[test]
fn a_replica_role_load_raises_the_mark_and_a_server_without_the_library_dumps_its_files_mark() {
    let Some(mut server) = server("ext-dump-unloaded", "twitter", Some(7), pg::Options::default()) else {
        return;
    };
    // Past the mark stored ahead of the clock (1.5 s).
    let raised = server.unix_ms() + 3_000;
    server.psql(&format!(
        "SET session_replication_role = replica; INSERT INTO atomflake_dump VALUES ('{raised}')"
    ));
    assert_eq!(server.psql("SELECT count(*) FROM atomflake_dump"), "1\n");
    assert!(server.psql_u64("SELECT atomflake_mark()") >= raised);
    let newest = server.psql_u64("SELECT max(atomflake_next_id()) FROM generate_series(1, 1000)");
    let newest_ms = Layout::TWITTER.decode(Id::new(newest)).unix_ms;
    assert!(newest_ms >= raised, "{newest} at {newest_ms} ms, before {raised}");

    server.stop("fast");
    let mark = atomflake::raw::read_mark(&server.data().join("atomflake.mark"))
        .unwrap()
        .expect("a mark");
    assert!(mark > newest_ms, "the stored mark {mark} is not past {newest}");
    server.start_again_with(Vec::new());
    let output = server.client("pg_dump").output().unwrap();
    assert!(output.status.success(), "pg_dump: {output:?}");
    let dump = String::from_utf8(output.stdout).unwrap();
    let carried = dump
        .split_once("COPY public.atomflake_dump (mark) FROM stdin;\n")
        .and_then(|(_, rest)| rest.lines().next())
        .unwrap_or_else(|| panic!("no row of atomflake_dump in the dump:\n{dump}"));
    assert_eq!(carried, mark.to_string());
    let output = server
        .client("psql")
        .args(["-X", "-qAt", "-c", "SELECT mark FROM atomflake_dump"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&output.stdout), format!("{mark}\n"));
    // Every other function refuses, the decoders too (their layout is a setting the
    // library defines only when preloaded).
    for call in [
        "atomflake_next_id()",
        "atomflake_next_id(3)",
        "atomflake_unix_ms(1)",
        "atomflake_first_id_at(now())",
        "atomflake_mark()",
    ] {
        let error = server.psql_error(&format!("SELECT {call}"));
        assert!(
            error.contains(
                "ERROR:  atomflake must be loaded at server start: add atomflake to \
                 shared_preload_libraries in postgresql.conf and restart the server"
            ),
            "{call}: {error}"
        );
    }
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.contains(&format!(
            "WARNING:  atomflake is not loaded at server start (shared_preload_libraries): the \
             mark read is the one in the data directory's file, {mark} ms, which covers every \
             ID this server minted, as it can mint none until atomflake is loaded"
        )),
        "{stderr}"
    );
}

/// `sql` through `psql -v ON_ERROR_STOP=1 -f`: `Ok(())`, or the first error's message.
fn psql_script(server: &Server, sql: &str) -> Result<(), String> {
    let path = server.file(&format!("script-{}.sql", sql.len()));
    std::fs::write(&path, sql).unwrap();
    let output = server
        .client("psql")
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-f"])
        .arg(&path)
        .output()
        .unwrap();
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8(output.stderr).unwrap();
    Err(stderr
        .lines()
        .find_map(|line| line.split_once("ERROR:  ").map(|(_, error)| error.to_owned()))
        .unwrap_or_else(|| panic!("no error in psql's output:\n{stderr}")))
}

/// A database on the SQL script cannot create the extension over the script's functions;
/// `PgScript::to_extension` (`atomflake sql --to-extension`) moves it: in one transaction
/// the script's column switches over and the extension's IDs start past every ID the
/// script minted (4.9 s ahead of the clock, on the same node). A view that decodes with
/// the script's functions stops the move, and nothing changes.
#[test]
fn a_database_on_the_script_moves_to_the_extension_past_every_id_the_script_minted() {
    let Some(server) = preloaded("ext-move", "twitter", Some(copies::NODE), pg::Options::default()) else {
        return;
    };
    let script = PgScript::new(Layout::TWITTER, copies::NODE).unwrap();
    psql_script(&server, &script.to_string()).unwrap();
    assert_eq!(
        psql_script(&server, "CREATE EXTENSION atomflake"),
        Err("function \"atomflake_first_id_at\" already exists with same argument types".to_owned())
    );
    let newest = copies::fill_ahead(&server);
    server.psql("CREATE VIEW decoded AS SELECT id, atomflake_time(id) AS at FROM t");
    let moving = script.to_extension().unwrap();
    assert_eq!(
        psql_script(&server, &moving),
        Err(
            "cannot drop function atomflake_retired.atomflake_time(bigint) because other objects \
             depend on it"
                .to_owned()
        )
    );
    let extensions = "SELECT count(*) FROM pg_extension WHERE extname = 'atomflake'";
    assert_eq!(server.psql_u64(extensions), 0);
    assert_eq!(adoption::definition(&server, "t"), "atomflake_next_id()||\n");
    assert!(server.psql_u64("SELECT atomflake_next_id()") > newest);

    server.psql("DROP VIEW decoded");
    psql_script(&server, &moving).unwrap();
    assert_eq!(server.psql_u64(extensions), 1);
    assert_eq!(
        server.psql(
            "SELECT to_regnamespace('atomflake_retired') IS NULL, to_regclass('atomflake_state') IS NULL,
                    count(*) FROM pg_depend WHERE refobjid = 'atomflake_next_id()'::regprocedure
                        AND classid = 'pg_attrdef'::regclass"
        ),
        "t|t|1\n"
    );
    server.psql("INSERT INTO t (v) SELECT 2 FROM generate_series(1, 2000)");
    assert_eq!(
        server.psql(&format!(
            "SELECT count(*), count(*) FILTER (WHERE id > {newest} AND atomflake_node(id) = {})
             FROM t WHERE v = 2",
            copies::NODE
        )),
        "2000|2000\n"
    );
}
