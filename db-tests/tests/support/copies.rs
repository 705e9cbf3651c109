//! Copies of a server into a new one whose clock is 3 s behind (`pg_dump -Fc` /
//! `pg_restore`, `pg_dumpall` / `psql`), and the check that the new server's IDs continue
//! past every ID of the old one: shared by the SQL script's tests and the extension's.
//! Both mint for node [`NODE`] of the Twitter layout, through `atomflake_next_id()` and
//! `atomflake_next_id_at(ms)`.

use atomflake::{Id, Layout};
use atomflake_test_servers::postgres::Server;

/// The node the servers mint for.
pub const NODE: u64 = 7;

/// Creates a table `t` of 2,000 rows on `server`, the last 500 minted after
/// `atomflake_next_id_at` moved the node 4.9 s ahead of the clock: the highest ID minted
/// (every ID minted is in `t`).
pub fn fill_ahead(server: &Server) -> u64 {
    server.psql(
        "CREATE TABLE t (id bigint PRIMARY KEY DEFAULT atomflake_next_id(), v int);
         INSERT INTO t (v) SELECT 1 FROM generate_series(1, 1499)",
    );
    let ahead = server.unix_ms() + 4900;
    server.psql(&format!(
        "INSERT INTO t VALUES (atomflake_next_id_at({ahead}), 1);
         INSERT INTO t (v) SELECT 1 FROM generate_series(1, 500)"
    ));
    let newest = server.psql_u64("SELECT max(id) FROM t");
    assert_eq!(
        Layout::TWITTER.decode(Id::new(newest)).unix_ms,
        ahead,
        "the node is not ahead"
    );
    newest
}

/// `pg_dump -Fc` of `old`'s database `postgres`, restored into `new`'s with `pg_restore
/// --exit-on-error`.
pub fn pg_dump_and_pg_restore(old: &Server, new: &Server) {
    pg_dump_and_pg_restore_database(old, "postgres", new, "postgres");
}

/// `pg_dump -Fc` of `old`'s database `from`, restored into `new`'s database `into` with
/// `pg_restore --exit-on-error`.
pub fn pg_dump_and_pg_restore_database(old: &Server, from: &str, new: &Server, into: &str) {
    let dump = old.file(&format!("{from}.custom"));
    let output = old
        .client("pg_dump")
        .args(["-Fc", "-d", from, "-f"])
        .arg(&dump)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let output = new
        .client("pg_restore")
        .args(["--exit-on-error", "-d", into])
        .arg(&dump)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
}

/// `pg_dumpall` of `old`, run into `new` with `psql`: the one error allowed is the role
/// `postgres`, which `new` has already.
pub fn pg_dumpall_and_psql(old: &Server, new: &Server) {
    let dump = old.file("dumpall.sql");
    let output = old.client("pg_dumpall").arg("-f").arg(&dump).output().unwrap();
    assert!(output.status.success(), "{output:?}");
    let output = new
        .client("psql")
        .args(["-X", "-q", "-f"])
        .arg(&dump)
        .output()
        .unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    let errors: Vec<&str> = stderr.lines().filter(|line| line.contains("ERROR:")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(
        errors[0].ends_with("ERROR:  role \"postgres\" already exists"),
        "{stderr}"
    );
}

/// Mints 2,000 rows (`v = 2`) on `server`, which holds a copy of a server whose highest ID
/// was `newest`, and checks that every one is above it and that the clock is still 3 s
/// behind (the IDs continue the copied state, not the clock).
pub fn continues_past(server: &Server, newest: u64) {
    assert_eq!(server.psql_u64("SELECT count(*) FROM t"), 2000);
    assert_eq!(server.psql_u64("SELECT max(id) FROM t"), newest);
    server.psql("INSERT INTO t (v) SELECT 2 FROM generate_series(1, 2000)");
    let lowest = server.psql_u64("SELECT min(id) FROM t WHERE v = 2");
    assert!(lowest > newest, "{lowest} is not above {newest}");
    assert_eq!(
        server.psql_u64(&format!(
            "SELECT count(*) FROM t WHERE v = 2 AND atomflake_node(id) = {NODE}"
        )),
        2000
    );
    server.assert_behind(3.0);
}
