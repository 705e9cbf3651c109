//! Base62 and UUID text and numbers: never panic. An `Ok` ID from base62 writes back to the
//! same text; each error names what the text holds; every `u64` round trips through its
//! base62 and every preset's IDs through their UUIDs; a UUID that a layout takes gives the
//! same UUID back.
#![no_main]

use atomflake::{Id, Layout, ParseIdError};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (u64, u128, &str)| {
    let (raw, uuid, text) = input;
    let id = Id::new(raw);
    assert_eq!(Id::from_base62(&id.to_base62().to_string()), Ok(id));

    match Id::from_base62(text) {
        Ok(parsed) => assert_eq!(parsed.to_base62().to_string(), text),
        Err(ParseIdError::Base62Length { length }) => assert_ne!(length, 11, "{text:?}"),
        Err(ParseIdError::InvalidBase62 { found, index }) => {
            assert_eq!(text[index..].chars().next(), Some(found), "{text:?}");
            assert!(!found.is_ascii_alphanumeric(), "{text:?}");
            assert!(text[..index].bytes().all(|b| b.is_ascii_alphanumeric()), "{text:?}");
        }
        // Base62's digits sort in ASCII order, so text past u64::MAX's sorts after it.
        Err(ParseIdError::Base62Overflow { text: given }) => {
            assert_eq!(given.to_string(), text);
            assert!(text > "LygHa16AHYF", "{text:?}");
        }
        Err(other) => panic!("{text:?}: unexpected {other:?}"),
    }

    for (name, layout) in Layout::PRESETS {
        if let Ok(made) = id.to_uuid_u128(layout) {
            assert_eq!(Id::from_uuid_u128(made, layout), Ok(id), "{name} {raw}");
        }
        if let Ok(taken) = Id::from_uuid_u128(uuid, layout) {
            assert_eq!(taken.to_uuid_u128(layout), Ok(uuid), "{name} {uuid:#x}");
        }
        let _ = Id::parse_uuid(text, layout);
    }
});
