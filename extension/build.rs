//! Writes `$OUT_DIR/adopt.rs`: the `extension_sql!` that creates `atomflake_adopt(tbl, col)`,
//! from the templates of `atomflake-sql` (the adoption body that the SQL script's `--adopt`
//! fills too) with the extension's names filled in. `extension_sql!` takes only a string
//! literal, so the filled SQL is written out here and `src/lib.rs` includes the file.

use atomflake_sql::{ADOPT, EXTENSION_ADOPT, EXTENSION_ADOPT_VARIABLES, EXTENSION_DECODED_TIME, fill};
use std::{env, fs, path::PathBuf};

fn filled(template: &str, values: &[(&str, &str)]) -> String {
    fill(template, values).unwrap_or_else(|error| panic!("the extension's atomflake_adopt: {error}"))
}

fn main() {
    let body = filled(
        ADOPT,
        &[
            ("variables", &filled(EXTENSION_ADOPT_VARIABLES, &[])),
            ("checks", ""),
            ("mint_call", "@extschema@.atomflake_next_id()"),
            (
                "first_of_tick",
                "@extschema@.atomflake_first_id_at(@extschema@.atomflake_time(minted))",
            ),
            (
                "newest_time",
                &filled(EXTENSION_DECODED_TIME, &[("id", "newest")]),
            ),
            (
                "first_time",
                &filled(EXTENSION_DECODED_TIME, &[("id", "first_id")]),
            ),
        ],
    );
    let sql = filled(EXTENSION_ADOPT, &[("body", &body)]);
    assert!(
        !sql.contains('"'),
        "atomflake_adopt's SQL has a double quote: it goes into a raw string r\"…\""
    );
    let rust = format!(
        "extension_sql!(
    r\"
{sql}
\",
    name = \"adopt\",
    requires = [next_id, time, first_id_at],
);
"
    );
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("adopt.rs");
    fs::write(&out, rust).unwrap_or_else(|error| panic!("cannot write {}: {error}", out.display()));
}
