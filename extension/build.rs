//! Writes `$OUT_DIR/adopt.rs`: the `extension_sql!` that creates `atomflake_adopt(tbl, col)`,
//! its body `postgres/src/adopt.sql` (shared with the SQL script's `--adopt`) with the
//! extension's names filled in. `extension_sql!` takes only a string literal, so the filled
//! body is written out here and `src/lib.rs` includes the file.

use std::{env, fs, path::PathBuf};

const TEMPLATE: &str = "../postgres/src/adopt.sql";

/// The UTC time the bigint `id` decodes to, as text.
fn time_of(id: &str) -> String {
    format!(
        "to_char(@extschema@.atomflake_time({id}) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS') || ' UTC'"
    )
}

fn main() {
    println!("cargo::rerun-if-changed={TEMPLATE}");
    let template =
        fs::read_to_string(TEMPLATE).unwrap_or_else(|error| panic!("cannot read {TEMPLATE}: {error}"));
    let (_, body) = template
        .split_once("\nDECLARE\n")
        .unwrap_or_else(|| panic!("{TEMPLATE} has no DECLARE line"));
    let mut body = format!("DECLARE\n{body}");
    for (name, value) in [
        (
            "variables",
            "    what text := format('%s.%I', tbl, col);\n    mint text := '@extschema@.atomflake_next_id()';\n".to_owned(),
        ),
        ("checks", String::new()),
        ("mint_call", "@extschema@.atomflake_next_id()".to_owned()),
        (
            "first_of_tick",
            "@extschema@.atomflake_first_id_at(@extschema@.atomflake_time(minted))".to_owned(),
        ),
        ("newest_time", time_of("newest")),
        ("first_time", time_of("first_id")),
    ] {
        let placeholder = format!("{{{name}}}");
        assert!(body.contains(&placeholder), "{TEMPLATE} has no {placeholder}");
        body = body.replace(&placeholder, &value);
    }
    assert!(
        !body.contains(['{', '"']),
        "{TEMPLATE} has a placeholder build.rs does not fill, or a double quote (it goes into a raw string r\"…\")"
    );
    let rust = format!(
        "extension_sql!(
    r\"
CREATE FUNCTION @extschema@.atomflake_adopt(tbl regclass, col name) RETURNS void
LANGUAGE plpgsql VOLATILE STRICT AS $adopt$
{body}$adopt$;
\",
    name = \"adopt\",
    requires = [next_id, time, first_id_at],
);
"
    );
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("adopt.rs");
    fs::write(&out, rust).unwrap_or_else(|error| panic!("cannot write {}: {error}", out.display()));
}
