//! Base32 parsing: never panics; an `Ok` ID writes back to the same text, normalised
//! (upper case, `I`/`L` as `1`, `O` as `0`); every `u64` round trips through its text,
//! and `Id::from_any_form` reads back each of its texts that is not all digits (text of
//! digits alone is decimal).
#![no_main]

use atomflake::{Id, ParseIdError};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (u64, &str)| {
    let (raw, text) = input;
    let id = Id::new(raw);
    assert_eq!(Id::from_base32(&id.to_base32().to_string()), Ok(id));
    for form in [id.to_string(), id.to_base32().to_string(), id.to_base62().to_string()] {
        let expected = if form.bytes().all(|b| b.is_ascii_digit()) { form.parse() } else { Ok(id) };
        assert_eq!(Id::from_any_form(&form), expected, "{form:?}");
    }

    match Id::from_base32(text) {
        Ok(parsed) => {
            let normalised: String = text
                .chars()
                .map(|c| match c.to_ascii_uppercase() {
                    'I' | 'L' => '1',
                    'O' => '0',
                    upper => upper,
                })
                .collect();
            assert_eq!(parsed.to_base32().to_string(), normalised, "{text:?}");
        }
        Err(ParseIdError::Base32Length { length }) => assert_ne!(length, 13, "{text:?}"),
        Err(ParseIdError::InvalidBase32 { found, index }) => {
            assert_eq!(text[index..].chars().next(), Some(found), "{text:?}");
            assert!(!found.is_ascii_alphanumeric() || found.eq_ignore_ascii_case(&'u'), "{text:?}");
        }
        Err(ParseIdError::Base32Overflow { text: given }) => {
            assert_eq!(given.to_string(), text);
            // The first character is a digit above F (look-alikes read as 0 and 1).
            let first = text.as_bytes()[0].to_ascii_uppercase();
            assert!(!matches!(first, b'0'..=b'9' | b'A'..=b'F' | b'I' | b'L' | b'O'), "{text:?}");
        }
        Err(other) => panic!("{text:?}: unexpected {other:?}"),
    }
});
