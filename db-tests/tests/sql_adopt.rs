//! The SQL script's column adoption (`PgScript::adopt`, `atomflake sql --adopt`) and its
//! state across `pg_dump` / `pg_restore`, against real PostgreSQL servers.
//!
//! - a 100,000-row `bigserial` table and a 100,000-row identity table switch over while
//!   pgbench sessions insert: no insert fails, no ID twice, every atomflake ID above every
//!   old value (the old ones placed a second below atomflake's IDs of now), the identity
//!   gone or the sequence no longer owned; applied again, nothing changes;
//! - each refusal, with its exact error, leaving the table as it was: an `integer` column,
//!   an `integer` foreign key referencing the column, a value at or above the first ID of
//!   now, a transaction that is not `READ COMMITTED`, a missing table and column;
//! - `pg_dump -Fc` / `pg_restore` and `pg_dumpall` / `psql` into a new server whose clock
//!   is 3 s behind (libfaketime): it continues past every ID the old server minted, also
//!   past a state moved 4.9 s ahead of the old clock;
//! - a standby (`pg_basebackup`) whose clock is 3 s behind, promoted once it has replayed
//!   the primary's commits: the same.

use atomflake_test_servers::postgres as pg;

use atomflake::Layout;
use atomflake_postgres::sql::PgScript;
use pg::Server;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

mod support;

use support::{adoption, copies};

use adoption::definition;
use copies::NODE;

fn script() -> PgScript {
    PgScript::new(Layout::TWITTER, NODE).unwrap()
}

/// Runs `script` through `psql -f` (autocommit unless `one_transaction`), with `env`:
/// `Ok(())`, or the first error as `SQLSTATE: message`.
fn apply(server: &Server, script: &str, one_transaction: bool, env: &[(&str, &str)]) -> Result<(), String> {
    let path = server.file(&format!("adopt-{}.sql", script.len()));
    std::fs::write(&path, script).unwrap();
    let mut psql = server.client("psql");
    psql.args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-v", "VERBOSITY=verbose"])
        .envs(env.iter().copied());
    if one_transaction {
        psql.arg("-1");
    }
    let output = psql.arg("-f").arg(&path).output().unwrap();
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8(output.stderr).unwrap();
    Err(stderr
        .lines()
        .find_map(|line| line.split_once("ERROR:  ").map(|(_, error)| error))
        .unwrap_or_else(|| panic!("no error in psql's output:\n{stderr}"))
        .to_owned())
}

/// A Unix ms as `YYYY-MM-DD HH:MM:SS.mmm UTC`, by `date`.
fn utc(unix_ms: u64) -> String {
    let output = Command::new("date")
        .env("TZ", "UTC")
        .arg("-d")
        .arg(format!("@{}.{:03}", unix_ms / 1000, unix_ms % 1000))
        .arg("+%Y-%m-%d %H:%M:%S.%3N UTC")
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

fn now_ms() -> u64 {
    u64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

/// Fills `t` (made by `create`, a key `id` and an `int` column `v`, its ids from the
/// sequence `sequence`) with 100,000 rows whose ids lie a second below atomflake's first
/// ID of now, then switches it over with the script (in one transaction or not) while 4
/// pgbench sessions insert for 3 s, and checks the rows.
fn switch_over_while_inserting(test: &str, create: &str, sequence: &str, one_transaction: bool) {
    let Some(server) = Server::start(test) else {
        return;
    };
    server.psql(create);
    // The old values: just below the IDs of now, so that "above every old one" is a close
    // call, not a matter of magnitude.
    let start = Layout::TWITTER.first_id_at(now_ms() - 1000).unwrap().get();
    server.psql(&format!("SELECT setval('{sequence}', {start})"));
    server.psql("INSERT INTO t (v) SELECT g FROM generate_series(1, 100000) AS g");
    let script = script().adopt("t.id").unwrap().to_string();
    let before = definition(&server, "t");
    let switched_at = std::thread::scope(|scope| {
        let inserts = scope.spawn(|| server.bench("INSERT INTO t (v) VALUES (1);\n", 4, 3));
        while server.psql_u64("SELECT count(*) FROM t") < 100_500 {
            assert!(!inserts.is_finished(), "the inserts ended before 500 rows");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let switched_at = now_ms();
        apply(&server, &script, one_transaction, &[]).unwrap();
        let (done, failed, _) = inserts.join().unwrap();
        assert_eq!(failed, 0, "failed inserts");
        assert!(done > 500, "{done} inserts");
        switched_at
    });
    // The old values run on from `start` one by one, far fewer than 10^7 of them; the
    // atomflake ids of a second later lie 2^22 * 1000 ids above `start`.
    let last_old = start + 10_000_000;
    let counts = server.psql(&format!(
        "SELECT count(*), count(DISTINCT id),
                count(*) FILTER (WHERE id BETWEEN {start} + 1 AND {last_old}),
                max(id) FILTER (WHERE id <= {last_old}),
                min(id) FILTER (WHERE id > {last_old}),
                count(*) FILTER (WHERE id > {last_old} AND atomflake_node(id) = {NODE}
                    AND atomflake_unix_ms(id) BETWEEN {switched_at} - 1000 AND {})
         FROM t",
        now_ms()
    ));
    let fields: Vec<u64> = counts.trim().split('|').map(|f| f.parse().unwrap()).collect();
    let [all, distinct, old, max_old, min_new, new_of_node] = fields[..] else {
        panic!("{counts}")
    };
    assert_eq!(distinct, all, "an id twice");
    assert!(old > 100_000, "no insert took an old id during the switch: {old}");
    assert_eq!(old, max_old - start, "old ids are the sequence's, each once");
    assert!(all > old, "no insert took an atomflake id");
    assert_eq!(
        new_of_node,
        all - old,
        "new ids not node {NODE}'s, or not minted now"
    );
    assert!(max_old < min_new, "{max_old} is not below {min_new}");
    let after = definition(&server, "t");
    assert_eq!(after, "atomflake_next_id()||\n", "before: {before}");
    // The sequence is kept, not owned by the column any more, and handed out the last old
    // id; or it is gone with the identity.
    if before.contains("|a|") {
        assert_eq!(server.psql(&format!("SELECT to_regclass('{sequence}')")), "\n");
    } else {
        assert_eq!(
            server.psql_u64(&format!("SELECT last_value FROM {sequence}")),
            max_old
        );
    }
    // Applied again: nothing changes, nothing is minted, and no lock is taken (a reader
    // holds one meanwhile).
    let state = server.psql_u64("SELECT pg_sequence_last_value('atomflake_state')");
    let mut reader = postgres::Client::connect(&server.conninfo(), postgres::NoTls).unwrap();
    reader.batch_execute("BEGIN; SELECT count(*) FROM t").unwrap();
    apply(&server, &script, false, &[("PGOPTIONS", "-c lock_timeout=200")]).unwrap();
    reader.batch_execute("COMMIT").unwrap();
    assert_eq!(definition(&server, "t"), after);
    assert_eq!(
        server.psql_u64("SELECT pg_sequence_last_value('atomflake_state')"),
        state
    );
}

#[test]
fn a_bigserial_table_switches_over_while_sessions_insert() {
    switch_over_while_inserting(
        "adopt-bigserial",
        "CREATE TABLE t (id bigserial PRIMARY KEY, v int)",
        "t_id_seq",
        true,
    );
}

#[test]
fn an_identity_table_switches_over_while_sessions_insert() {
    switch_over_while_inserting(
        "adopt-identity",
        "CREATE TABLE t (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v int)",
        "t_id_seq",
        false,
    );
}

#[test]
fn each_refusal_is_an_exact_error_and_changes_nothing() {
    let Some(server) = Server::start("adopt-refusals") else {
        return;
    };
    server.psql(&script().to_string());
    server.psql(
        "CREATE TABLE narrow (id serial PRIMARY KEY);
         CREATE TABLE parent (id bigserial PRIMARY KEY);
         CREATE TABLE child (parent_id int REFERENCES parent (id));
         CREATE TABLE ahead (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY);
         CREATE TABLE fine (id bigserial PRIMARY KEY)",
    );
    let adopt = |column: &str, env: &[(&str, &str)]| {
        apply(&server, &script().adopt(column).unwrap().to_string(), false, env).unwrap_err()
    };
    let tables = ["narrow", "parent", "ahead", "fine"];
    let defined = || tables.map(|table| definition(&server, table));
    let before = defined();
    assert_eq!(
        adopt("narrow.id", &[]),
        "42804: cannot adopt column narrow.id: it is integer and atomflake ids are bigint; change it \
         first with ALTER TABLE narrow ALTER COLUMN id TYPE bigint (this rewrites the table), then \
         adopt it"
    );
    assert_eq!(
        adopt("public.parent.id", &[]),
        "42804: cannot adopt column public.parent.id: column child.parent_id references it (foreign \
         key child_parent_id_fkey) and is integer, which atomflake ids do not fit; change it first \
         with ALTER TABLE child ALTER COLUMN parent_id TYPE bigint, then adopt public.parent.id"
    );
    // 2050-01-01T00:00:00Z
    let ahead = Layout::TWITTER.first_id_at(2_524_608_000_000).unwrap().get();
    server.psql(&format!("INSERT INTO ahead VALUES (1), ({ahead}), (2)"));
    let from = now_ms();
    let error = adopt("ahead.id", &[]);
    let to = now_ms();
    // The first id of the tick the refusal minted at: node 0, sequence 0, minted meanwhile.
    let (first, first_ms) = pg::adoption_refused_at(&error, from, to);
    assert_eq!(
        error,
        format!(
            "55000: cannot adopt column ahead.id: it holds {ahead}, which decodes to 2050-01-01 \
             00:00:00.000 UTC, at or above {first} ({}), the smallest id atomflake mints from now \
             on; adopt it once atomflake's ids are past its values (after 2050-01-01 00:00:00.000 \
             UTC), or use a layout whose ids are above them",
            utc(first_ms)
        )
    );
    assert_eq!(
        adopt(
            "fine.id",
            &[("PGOPTIONS", "-c default_transaction_isolation=repeatable\\ read")]
        ),
        "25001: cannot adopt column fine.id in a repeatable read transaction: run it under read \
         committed, the default"
    );
    assert_eq!(
        adopt("missing.id", &[]),
        "42P01: cannot adopt column missing.id: there is no table missing"
    );
    assert_eq!(
        adopt("fine.key", &[]),
        "42703: cannot adopt column fine.key: table fine has no column key"
    );
    assert_eq!(defined(), before);
    // The one it refused for its isolation goes over under read committed.
    apply(
        &server,
        &script().adopt("fine.id").unwrap().to_string(),
        false,
        &[],
    )
    .unwrap();
    assert_eq!(definition(&server, "fine"), "atomflake_next_id()||\n");
}

/// A fresh server whose wall clock is 3 s behind (libfaketime), or `None` after a skip.
fn behind(test: &str) -> Option<Server> {
    if !pg::can_move_clocks(test) {
        return None;
    }
    let server = Server::start_with(
        test,
        pg::Options {
            clock_offset: Some("-3s"),
            ..pg::Options::default()
        },
    )?;
    server.assert_behind(3.0);
    Some(server)
}

/// A server with the script and the table of [`copies::fill_ahead`]: the server and the
/// highest ID it minted.
fn minted_then_dumped(test: &str) -> Option<(Server, u64)> {
    let server = Server::start(test)?;
    server.psql(&script().to_string());
    let newest = copies::fill_ahead(&server);
    Some((server, newest))
}

/// A server with IDs minted ahead of its clock (the newest of them too), and a second
/// server 3 s behind it to copy them into; `None` where either cannot start (skipped).
fn minted_and_a_server_behind(test: &str) -> Option<(Server, u64, Server)> {
    let (old, newest) = minted_then_dumped(test)?;
    Some((old, newest, behind(test)?))
}

/// `copy` of a server with IDs ahead of its clock into a server 3 s behind, whose IDs
/// then continue past every one of them.
fn a_copy_behind_continues_past_every_id(test: &str, copy: fn(&Server, &Server)) {
    let Some((old, newest, new)) = minted_and_a_server_behind(test) else {
        return;
    };
    copy(&old, &new);
    copies::continues_past(&new, newest);
}

#[test]
fn pg_dump_and_pg_restore_into_a_server_3_s_behind_continue_past_every_id() {
    a_copy_behind_continues_past_every_id("dump-restore", copies::pg_dump_and_pg_restore);
}

#[test]
fn pg_dumpall_into_a_server_3_s_behind_continues_past_every_id() {
    a_copy_behind_continues_past_every_id("dumpall", copies::pg_dumpall_and_psql);
}

#[test]
fn a_promoted_standby_3_s_behind_continues_past_every_id_it_replayed() {
    let test = "script-standby";
    let Some((primary, newest)) = minted_then_dumped(test) else {
        return;
    };
    if !pg::can_move_clocks(test) {
        return;
    }
    let standby = primary.standby(
        test,
        pg::Options {
            clock_offset: Some("-3s"),
            ..pg::Options::default()
        },
    );
    standby.assert_behind(3.0);
    // Every commit of the primary replayed, then the primary gone and the standby promoted.
    let lsn = primary.psql("SELECT pg_current_wal_lsn()");
    let start = std::time::Instant::now();
    while standby.psql(&format!("SELECT pg_last_wal_replay_lsn() >= '{}'", lsn.trim())) != "t\n" {
        assert!(
            start.elapsed() < atomflake_test_servers::HANG_GUARD,
            "the standby did not catch up in {:?} (the hang guard)",
            start.elapsed()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    primary.stop("immediate");
    standby.promote();
    copies::continues_past(&standby, newest);
}

/// A table whose rows row-level security hides from the adopting role (its owner, under
/// `FORCE ROW LEVEL SECURITY`) is refused, not adopted past a hidden row; a view is
/// refused, naming what it is; neither changes.
#[test]
fn adoption_reads_every_row_or_refuses_and_takes_no_view() {
    let Some(server) = Server::start("adopt-hidden") else {
        return;
    };
    adoption::hidden_row_and_view(&server);
    // The tenant installs the script, as the owner of an application's schema does.
    apply(&server, &script().to_string(), false, &[("PGUSER", "tenant")]).unwrap();
    let before = [definition(&server, "tenanted"), definition(&server, "orders")];
    let adopt = |column: &str, env: &[(&str, &str)]| {
        apply(&server, &script().adopt(column).unwrap().to_string(), false, env)
    };
    assert_eq!(
        adopt("tenanted.id", &[("PGUSER", "tenant")]),
        Err(format!("42501: {}", adoption::HIDDEN))
    );
    assert_eq!(adopt("recent.id", &[]), Err(format!("42809: {}", adoption::VIEW)));
    // The superuser sees the hidden row, and is refused for it.
    let refused = adopt("tenanted.id", &[]).unwrap_err();
    assert!(
        refused.starts_with(&format!(
            "55000: cannot adopt column tenanted.id: it holds {}",
            adoption::ahead()
        )),
        "{refused}"
    );
    assert_eq!(
        [definition(&server, "tenanted"), definition(&server, "orders")],
        before
    );
}
