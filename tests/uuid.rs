//! IDs as UUIDs of version 7 (feature `uuid`), read back by the `uuid` crate: for every
//! preset and any ID of its span, the UUID is of version 7 and RFC 9562's variant, its
//! timestamp (as the `uuid` crate reads it) is the start of the ID's tick, it gives the ID
//! back exactly, and two IDs' UUIDs compare as the IDs do. A UUID of another layout is
//! refused.
#![cfg(feature = "uuid")]

use atomflake::{Id, Layout, UuidError};
use proptest::prelude::*;
use uuid::{Variant, Version};

/// A preset and two IDs of it that have a UUID (time below 2^48 ms: every preset's span),
/// the second near the first half of the time.
fn preset_ids() -> impl Strategy<Value = (&'static str, Layout, Id, Id)> {
    (0..Layout::PRESETS.len()).prop_flat_map(|i| {
        let (name, layout) = Layout::PRESETS[i];
        let last = layout
            .max_id()
            .min(layout.last_id_at((1 << 48) - 1).map_or(u64::MAX, Id::get));
        (0..=last).prop_flat_map(move |a| {
            let near = a.saturating_sub(1 << 20)..=a.saturating_add(1 << 20).min(last);
            let b = prop_oneof![near, 0..=last];
            (Just(name), Just(layout), Just(Id::new(a)), b.prop_map(Id::new))
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn every_presets_ids_round_trip_through_a_uuid_the_uuid_crate_reads_as_version_7(
        (name, layout, id, _) in preset_ids()
    ) {
        let uuid = id.to_uuid(layout).unwrap();
        prop_assert_eq!(uuid.get_version(), Some(Version::SortRand), "{}: {}", name, uuid);
        prop_assert_eq!(uuid.get_variant(), Variant::RFC4122);
        let (seconds, nanos) = uuid.get_timestamp().unwrap().to_unix();
        let unix_ms = seconds * 1000 + u64::from(nanos) / 1_000_000;
        prop_assert_eq!(unix_ms, layout.decode(id).unix_ms, "{}: {}", name, uuid);
        prop_assert_eq!(Id::from_uuid(uuid, layout), Ok(id));
        // Parsed back from its text, as a column or JSON would hold it.
        prop_assert_eq!(Id::from_uuid(uuid.to_string().parse().unwrap(), layout), Ok(id));
    }

    #[test]
    fn uuids_compare_as_their_ids_do((name, layout, a, b) in preset_ids()) {
        let (ua, ub) = (a.to_uuid(layout).unwrap(), b.to_uuid(layout).unwrap());
        prop_assert_eq!(ua.cmp(&ub), a.cmp(&b), "{}: {} {}", name, ua, ub);
        prop_assert_eq!(ua.as_bytes().cmp(ub.as_bytes()), a.cmp(&b));
    }

    #[test]
    fn a_uuid_of_one_preset_is_refused_by_every_other((_, layout, id, _) in preset_ids()) {
        let uuid = id.to_uuid(layout).unwrap();
        for (_, other) in Layout::PRESETS {
            if other != layout {
                let read = Id::from_uuid(uuid, other);
                prop_assert!(matches!(read, Err(UuidError::OtherLayout { .. })), "{:?}", read);
            }
        }
    }
}

/// A version 7 UUID the `uuid` crate made now is not an ID's: its random bits carry no
/// layout's fingerprint, or a time other than the ID's (refused either way, never read as
/// an ID).
#[test]
fn version_7_uuids_made_by_the_uuid_crate_are_refused() {
    for _ in 0..10_000 {
        let foreign = uuid::Uuid::from_u128(random_v7());
        let read = Id::from_uuid(foreign, Layout::TWITTER);
        assert!(
            matches!(
                read,
                Err(UuidError::OtherLayout { .. } | UuidError::Range(_) | UuidError::TimeMismatch { .. })
            ),
            "{foreign}: {read:?}"
        );
    }
}

/// A version 7 UUID with the time of now and random bits elsewhere (as `Uuid::now_v7` makes
/// one; built here from the standard library's random hasher, so the test needs no more of
/// the `uuid` crate than the feature does).
fn random_v7() -> u128 {
    use std::hash::{BuildHasher, RandomState};
    let random =
        u128::from(RandomState::new().hash_one(0u8)) << 64 | u128::from(RandomState::new().hash_one(1u8));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    now << 80 | 7 << 76 | (random >> 52 & 0xfff) << 64 | 0b10 << 62 | random & ((1 << 62) - 1)
}
