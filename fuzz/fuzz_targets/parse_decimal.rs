//! Decimal parsing: never panics; agrees with `u64::from_str` (which also takes a leading
//! `+`, refused here); an `Ok` ID prints back to the canonical digits and parses again.
#![no_main]

use atomflake::{Id, ParseIdError};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let parsed = text.parse::<Id>();
    if text.starts_with('+') {
        assert!(matches!(parsed, Err(ParseIdError::SignedId { sign: '+' })), "{text:?}: {parsed:?}");
        return;
    }
    // The reference model: the standard library's parser.
    assert_eq!(parsed.as_ref().ok().map(|id| id.get()), text.parse::<u64>().ok(), "{text:?}");
    if let Ok(id) = parsed {
        let printed = id.to_string();
        assert_eq!(printed.trim_start_matches('0'), text.trim_start_matches('0'));
        assert_eq!(printed.parse::<Id>(), Ok(id));
    }
});
