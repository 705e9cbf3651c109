//! Columns that adoption must read in full or refuse, shared by the tests of the SQL
//! script's `--adopt` and of the extension's `atomflake_adopt`.

use atomflake::Layout;
use atomflake_test_servers::postgres::Server;

/// The first ID of 2050-01-01T00:00:00Z: above every ID minted now.
pub fn ahead() -> u64 {
    Layout::TWITTER.first_id_at(2_524_608_000_000).unwrap().get()
}

/// Makes the role `tenant` (not a superuser, with `CREATE` on `public`) and its table
/// `tenanted` (a `bigserial` key
/// and a `tenant` column) with `FORCE ROW LEVEL SECURITY` and a policy that shows the
/// tenant only its own rows; inserts, as another tenant, a row whose id is [`ahead`]; and
/// makes `orders`, a `bigserial` table, with the view `recent` over it.
pub fn hidden_row_and_view(server: &Server) {
    server.psql(&format!(
        "CREATE ROLE tenant LOGIN;
         GRANT CREATE ON SCHEMA public TO tenant;
         CREATE TABLE tenanted (id bigserial PRIMARY KEY, tenant text NOT NULL DEFAULT current_user);
         ALTER TABLE tenanted OWNER TO tenant;
         ALTER SEQUENCE tenanted_id_seq OWNER TO tenant;
         ALTER TABLE tenanted ENABLE ROW LEVEL SECURITY;
         ALTER TABLE tenanted FORCE ROW LEVEL SECURITY;
         CREATE POLICY own ON tenanted USING (tenant = current_user);
         INSERT INTO tenanted (tenant) VALUES ('tenant'), ('tenant');
         INSERT INTO tenanted (id, tenant) VALUES ({}, 'another');
         CREATE TABLE orders (id bigserial PRIMARY KEY, v int);
         CREATE VIEW recent AS SELECT id, v FROM orders",
        ahead()
    ));
}

/// The refusal of `tenanted.id` adopted as `tenant`, without its `SQLSTATE`.
pub const HIDDEN: &str = "cannot adopt column tenanted.id: row-level security hides rows of \
                          tenanted from role tenant, so their ids cannot be checked; adopt it as \
                          a role that sees every row (one with BYPASSRLS, or the owner once the \
                          table has NO FORCE ROW LEVEL SECURITY)";

/// The refusal of `recent.id`, without its `SQLSTATE`.
pub const VIEW: &str =
    "cannot adopt column recent.id: recent is a view, not a table: adopt the column of the table it reads";

/// What defines `table`'s column `id`: its default, its identity and the sequence it owns,
/// `|`-separated.
pub fn definition(server: &Server, table: &str) -> String {
    server.psql(&format!(
        "SELECT pg_get_expr(d.adbin, d.adrelid), a.attidentity, pg_get_serial_sequence('{table}', 'id')
         FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
         WHERE a.attrelid = '{table}'::regclass AND a.attname = 'id'"
    ))
}
