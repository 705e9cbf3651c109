//! Helpers shared by the tests in `tests/`: the IDs they round-trip, and the search for
//! atomflake's error inside a client's error.
//!
//! The tests start a throwaway PostgreSQL server, and the sqlx MySQL tests a MariaDB one,
//! from `atomflake-test-servers`; without one installed they print `SKIPPED` (a failure
//! under `CI=true`).

use atomflake::{Id, RangeError};

/// IDs every signed `BIGINT` column holds: 0, a Twitter ID, and `i64::MAX`.
pub const ROUND_TRIP: [Id; 3] = [
    Id::new(0),
    Id::new(1_541_815_603_606_036_480),
    Id::new(i64::MAX as u64),
];

/// The smallest ID a signed `BIGINT` cannot hold.
pub const ABOVE_I64: Id = Id::new(1 << 63);

/// The first atomflake [`RangeError`] in `err`'s chain of sources (`err` itself included).
pub fn atomflake_error<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a RangeError> {
    let mut next = Some(err);
    while let Some(err) = next {
        if let Some(found) = err.downcast_ref::<RangeError>() {
            return Some(found);
        }
        next = err.source();
    }
    None
}

/// The text of `err` and all its sources, joined with `: `.
pub fn chain_text(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut next = err.source();
    while let Some(err) = next {
        let source = err.to_string();
        if !text.contains(&source) {
            text.push_str(": ");
            text.push_str(&source);
        }
        next = err.source();
    }
    text
}
