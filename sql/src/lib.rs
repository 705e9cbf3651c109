#![doc = include_str!("../README.md")]

/// Declares a template: the file in `templates/`, less the newline that ends the file.
macro_rules! template {
    ($(#[$doc:meta])* $name:ident = $file:literal) => {
        $(#[$doc])*
        pub const $name: &str = without_final_newline(include_str!(concat!("../templates/", $file)));
    };
}

/// `text` less its final newline; a template file without one fails the build.
const fn without_final_newline(text: &'static str) -> &'static str {
    let bytes = text.as_bytes();
    assert!(
        !bytes.is_empty() && bytes[bytes.len() - 1] == b'\n',
        "a template file ends with a newline"
    );
    text.split_at(text.len() - 1).0
}

template!(
    /// The minting script (`atomflake sql`), from its header to `COMMIT;` (the last line's
    /// newline is the writer's). Placeholders: the layout's fields and numbers, the node,
    /// the prefix `p`, and the pieces below, filled: `room_check` ([`ROOM_CHECK`]),
    /// `mint_now` and `mint_at` ([`MINT`]), `adoptions` ([`ADOPTION`], one per column).
    SCRIPT = "script.sql"
);

template!(
    /// The check that the server runs no more sessions than the counter has room for
    /// (`headroom`), raising SQLSTATE `53400` naming the settings.
    ROOM_CHECK = "room_check.sql"
);

template!(
    /// The body of `PREFIX_next_id()` and `PREFIX_next_id_at(unix_ms)`: `now` is the clock or
    /// the argument, `guard` what runs first (for `next_id_at`, [`MINT_AT_GUARD`]).
    MINT = "mint.sql"
);

template!(
    /// `next_id_at`'s refusal of a time more than `max_ahead_ms` ahead of the clock; starts
    /// with a line break, as it follows `BEGIN` on its line in [`MINT`].
    MINT_AT_GUARD = "mint_at_guard.sql"
);

template!(
    /// The `DO` block that adopts one column in the script: the comment, and [`ADOPT`] filled.
    ADOPTION = "adoption.sql"
);

template!(
    /// The body of the PL/pgSQL block that switches a bigint column over to atomflake's
    /// IDs, from its `DECLARE` to its `END`: the script wraps it in a `DO` block for one
    /// column ([`ADOPTION`]), the extension in the function `atomflake_adopt(tbl regclass,
    /// col name)` ([`EXTENSION_ADOPT`]). Placeholders:
    ///
    /// - `variables`: declarations of `what` (the column's name in messages), `mint` (the
    ///   default the column gets) and, in the script, `tbl` and `col`
    ///   ([`SCRIPT_ADOPT_VARIABLES`], [`EXTENSION_ADOPT_VARIABLES`]);
    /// - `checks`: statements run first: in the script, that the table exists
    ///   ([`SCRIPT_ADOPT_CHECKS`]);
    /// - `mint_call`: the call that mints an ID;
    /// - `first_of_tick`: the first ID of the tick of the bigint `minted`;
    /// - `newest_time`, `first_time`: the UTC time `newest` / `first_id` decodes to, as
    ///   text ([`SCRIPT_DECODED_TIME`], [`EXTENSION_DECODED_TIME`]).
    ///
    /// Under an `ACCESS EXCLUSIVE` lock taken before anything is read, the column and every
    /// foreign key to it must be bigint and every value below the first ID of the tick of
    /// an ID minted then; then the default moves and the identity (with its sequence) or
    /// the sequence's ownership goes. A column whose default already calls the function
    /// `mint` names (found by the default's dependency, not its text) is left alone. The
    /// maximum is read with row security off: a policy that would hide a row makes the read
    /// fail (42501) instead of passing the check without it. Only a table or a partitioned
    /// table is taken: a view's default would leave its base table on its old default.
    /// `LOCK TABLE` waits for every transaction that holds any lock on the table (readers
    /// too), and every statement on the table queues behind it meanwhile; the caller's
    /// `lock_timeout` bounds that wait (55P03, nothing changed).
    ADOPT = "adopt.sql"
);

template!(
    /// [`ADOPT`]'s `variables` in the script: the column's names, written in (`table`,
    /// `column`), and the prefix's `next_id` in the current schema.
    SCRIPT_ADOPT_VARIABLES = "script_adopt_variables.sql"
);

template!(
    /// [`ADOPT`]'s `checks` in the script: the table exists.
    SCRIPT_ADOPT_CHECKS = "script_adopt_checks.sql"
);

template!(
    /// The UTC time of a decoded `ms` in the script, in ms past what a timestamp holds:
    /// `ticks` is the SQL of the ID's ticks.
    SCRIPT_DECODED_TIME = "script_decoded_time.sql"
);

template!(
    /// [`ADOPT`]'s `variables` in the extension: the names from the function's arguments.
    EXTENSION_ADOPT_VARIABLES = "extension_adopt_variables.sql"
);

template!(
    /// The UTC time the bigint `id` decodes to in the extension, as text.
    EXTENSION_DECODED_TIME = "extension_decoded_time.sql"
);

template!(
    /// The extension's `CREATE FUNCTION atomflake_adopt(tbl regclass, col name)` around
    /// [`ADOPT`] filled (`body`).
    EXTENSION_ADOPT = "extension_adopt.sql"
);

template!(
    /// The move of a database from the script (prefix `p`) to the extension, in one
    /// transaction, from `BEGIN;` to `COMMIT;` (the last line's newline is the writer's).
    TO_EXTENSION = "to_extension.sql"
);

/// `template` with each `{name}` in it replaced by `name`'s value in `values`, in one pass:
/// a value's own braces are not read again. A name may stand in the template more than
/// once.
///
/// # Errors
///
/// [`FillError::Missing`] for a placeholder `values` has no value for,
/// [`FillError::Unused`] for a value no placeholder takes, [`FillError::Unclosed`] for a
/// `{` with no `}` after it: the template and its caller are out of step.
///
/// # Examples
///
/// ```
/// use atomflake_sql::{FillError, fill};
///
/// assert_eq!(fill("{a}{b}{a}", &[("a", "1"), ("b", "{a}")])?, "1{a}1");
/// assert_eq!(fill("{a}", &[]), Err(FillError::Missing { name: "a".to_owned() }));
/// assert_eq!(fill("a", &[("a", "1")]), Err(FillError::Unused { name: "a".to_owned() }));
/// # Ok::<(), FillError>(())
/// ```
pub fn fill(template: &str, values: &[(&str, &str)]) -> Result<String, FillError> {
    let mut used = vec![false; values.len()];
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            return Err(FillError::Unclosed {
                at: template.len() - rest.len() + open,
            });
        };
        let name = &rest[open + 1..open + close];
        let Some(index) = values.iter().position(|&(key, _)| key == name) else {
            return Err(FillError::Missing {
                name: name.to_owned(),
            });
        };
        used[index] = true;
        out.push_str(&rest[..open]);
        out.push_str(values[index].1);
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    match used.iter().position(|&used| !used) {
        Some(index) => Err(FillError::Unused {
            name: values[index].0.to_owned(),
        }),
        None => Ok(out),
    }
}

/// Why [`fill`] could not fill a template.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FillError {
    /// A placeholder with no value.
    #[error("the template's placeholder {{{name}}} has no value")]
    Missing {
        /// Its name.
        name: String,
    },
    /// A value that no placeholder takes.
    #[error("the value of {name} fills no placeholder of the template")]
    Unused {
        /// Its name.
        name: String,
    },
    /// A `{` with no `}` after it.
    #[error("the template's {{ at byte {at} is not closed")]
    Unclosed {
        /// Its byte offset in the template.
        at: usize,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_placeholder_is_filled_once_per_place_and_values_are_not_read_again() {
        assert_eq!(
            fill("x {a} y {b} {a}", &[("b", "{a}"), ("a", "1")]).unwrap(),
            "x 1 y {a} 1"
        );
        assert_eq!(fill("no placeholders", &[]).unwrap(), "no placeholders");
    }

    #[test]
    fn a_missing_an_unused_and_an_unclosed_placeholder_are_exact_errors() {
        assert_eq!(
            fill("{a} {b}", &[("a", "1")]),
            Err(FillError::Missing { name: "b".to_owned() })
        );
        assert_eq!(
            fill("{a}", &[("a", "1"), ("c", "3")]),
            Err(FillError::Unused { name: "c".to_owned() })
        );
        assert_eq!(fill("ab {a", &[("a", "1")]), Err(FillError::Unclosed { at: 3 }));
        assert_eq!(
            FillError::Missing { name: "b".to_owned() }.to_string(),
            "the template's placeholder {b} has no value"
        );
        assert_eq!(
            FillError::Unused { name: "c".to_owned() }.to_string(),
            "the value of c fills no placeholder of the template"
        );
        assert_eq!(
            FillError::Unclosed { at: 3 }.to_string(),
            "the template's { at byte 3 is not closed"
        );
    }

    #[test]
    fn every_brace_of_a_template_is_a_placeholder() {
        for template in [
            SCRIPT,
            ROOM_CHECK,
            MINT,
            MINT_AT_GUARD,
            ADOPTION,
            ADOPT,
            SCRIPT_ADOPT_VARIABLES,
            SCRIPT_ADOPT_CHECKS,
            SCRIPT_DECODED_TIME,
            EXTENSION_ADOPT_VARIABLES,
            EXTENSION_DECODED_TIME,
            EXTENSION_ADOPT,
            TO_EXTENSION,
        ] {
            let mut rest = template;
            while let Some(open) = rest.find('{') {
                let close = rest[open..].find('}').expect("closed");
                let name = &rest[open + 1..open + close];
                assert!(
                    !name.is_empty()
                        && name
                            .bytes()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                    "{{{name}}} is no placeholder name"
                );
                rest = &rest[open + close + 1..];
            }
        }
    }
}
