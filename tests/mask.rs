//! [`Mask`] (feature `mask`): `unmask(mask(x)) == x` at the edges of each half of the
//! `u64`s and for any value, a masked ID stays in its half (an ID that fits a signed
//! `BIGINT` masks to one that does), the repository's own vectors, and the avalanche of
//! consecutive IDs: each output bit flips with odds of one half.
#![cfg(feature = "mask")]

use atomflake::{Id, Mask};
use proptest::prelude::*;

/// The key of [`vectors`]: the bytes 0, 1, ..., 15.
const KEY: [u8; 16] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];

/// `tests/mask_vectors.txt`: its key, and its IDs with their masked IDs.
fn vectors() -> (String, Vec<(u64, u64)>) {
    let text = include_str!("mask_vectors.txt");
    let mut lines = text.lines().filter(|line| !line.starts_with('#'));
    let key = lines.next().unwrap().strip_prefix("key ").unwrap().to_owned();
    let pairs = lines
        .map(|line| {
            let (id, masked) = line.split_once(' ').unwrap();
            (id.parse().unwrap(), masked.parse().unwrap())
        })
        .collect();
    (key, pairs)
}

#[test]
fn the_vectors_mask_and_unmask_as_fixed() {
    let (key, pairs) = vectors();
    assert_eq!(
        Mask::from_hex(&key).unwrap().mask(Id::new(7)),
        Mask::new(KEY).mask(Id::new(7))
    );
    assert_eq!(pairs.len(), 7);
    let mask = Mask::new(KEY);
    for (id, masked) in pairs {
        assert_eq!(mask.mask(Id::new(id)), Id::new(masked), "{id}");
        assert_eq!(mask.unmask(Id::new(masked)), Id::new(id), "{masked}");
    }
}

/// The edges of both halves, under keys drawn at random.
#[test]
fn the_edges_of_each_half_round_trip_in_their_half() {
    let edges = [0, 1, 2, (1 << 62) - 1, 1 << 62, (1 << 63) - 2, (1 << 63) - 1];
    let edges = edges.into_iter().flat_map(|low| [low, low | 1 << 63]);
    for key in 0..64_u8 {
        let mask = Mask::new([key; 16]);
        for id in edges.clone() {
            let masked = mask.mask(Id::new(id));
            assert_eq!(masked.get() >> 63, id >> 63, "key {key}: {id}");
            assert_eq!(mask.unmask(masked), Id::new(id), "key {key}: {id}");
        }
    }
}

/// `mask_all` and `unmask_all` give what `mask` and `unmask` give, ID by ID, in slices of
/// every length around their groups of 16 and chunks of 256.
#[test]
fn masking_a_slice_is_masking_each_id() {
    let mask = Mask::new(KEY);
    for length in [0, 1, 2, 15, 16, 17, 255, 256, 257, 1000] {
        let ids: Vec<Id> = (0..length)
            .map(|i: u64| Id::new(i.wrapping_mul(0x9E37_79B9_7F4A_7C15)))
            .collect();
        let mut masked = ids.clone();
        mask.mask_all(&mut masked);
        assert_eq!(
            masked,
            ids.iter().map(|&id| mask.mask(id)).collect::<Vec<_>>(),
            "{length}"
        );
        mask.unmask_all(&mut masked);
        assert_eq!(masked, ids, "{length}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(5000))]

    /// The bulk calls run their own rounds and key schedule, many IDs at once: they agree
    /// with the `speck-cipher` crate's, which `mask` runs, under any key.
    #[test]
    fn any_slice_masks_as_its_ids_do(
        key in any::<[u8; 16]>(),
        ids in proptest::collection::vec(any::<u64>(), 0..40),
    ) {
        let mask = Mask::new(key);
        let ids: Vec<Id> = ids.into_iter().map(Id::new).collect();
        let mut masked = ids.clone();
        mask.mask_all(&mut masked);
        prop_assert_eq!(&masked, &ids.iter().map(|&id| mask.mask(id)).collect::<Vec<_>>());
        mask.unmask_all(&mut masked);
        prop_assert_eq!(masked, ids);
    }

    #[test]
    fn any_id_round_trips_in_its_half(key in any::<[u8; 16]>(), id in any::<u64>()) {
        let mask = Mask::new(key);
        let masked = mask.mask(Id::new(id));
        prop_assert_eq!(masked.get() >> 63, id >> 63);
        prop_assert_eq!(mask.unmask(masked), Id::new(id));
        prop_assert_eq!(mask.mask(mask.unmask(Id::new(id))), Id::new(id));
    }
}

/// A million consecutive IDs (from a Twitter ID of today's time: node and sequence bits
/// move, the time's barely): between the masked IDs of `x` and `x + 1`, each of the 63
/// bits below the top flips in 0.5 ± 0.003 of the pairs. A flip is a fair coin for a good
/// permutation: σ = sqrt(0.25 / 10^6) = 0.0005, so the bound is 6σ, which a fair coin passes
/// but for odds of 2·10^-9 a bit (10^-7 for the 63). The top bit never flips: both stay
/// below 2^63.
#[test]
fn each_bit_of_consecutive_masked_ids_flips_with_odds_of_one_half() {
    const PAIRS: u32 = 1_000_000;
    let mask = Mask::new(KEY);
    let start = 2_127_148_125_175_939_072_u64;
    let mut flips = [0_u32; 64];
    let mut previous = mask.mask(Id::new(start)).get();
    for x in start + 1..=start + u64::from(PAIRS) {
        let masked = mask.mask(Id::new(x)).get();
        let changed = masked ^ previous;
        for (bit, count) in flips.iter_mut().enumerate() {
            *count += u32::from(changed >> bit & 1 == 1);
        }
        previous = masked;
    }
    assert_eq!(flips[63], 0);
    for (bit, &count) in flips[..63].iter().enumerate() {
        let share = f64::from(count) / f64::from(PAIRS);
        assert!(
            (share - 0.5).abs() <= 0.003,
            "bit {bit} flips in {share} of the pairs"
        );
    }
}
