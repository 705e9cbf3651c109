//! An ID as a UUID of version 7 (RFC 9562, section 5.7) and back, exactly.
//!
//! RFC 9562 gives a version 7 UUID, read as a big-endian 128-bit number from bit 127:
//! `unix_ts_ms` (48 bits), `ver` = `0111` (4), `rand_a` (12), `var` = `10` (2), `rand_b`
//! (62). The 74 bits after the time and the version hold the whole ID and a 10-bit
//! fingerprint of its layout: `rand_a` = `fingerprint << 2 | id >> 62`, `rand_b` = the ID's
//! low 62 bits. `unix_ts_ms` is the start of the ID's tick.
//!
//! So the UUIDs sort as the IDs do (the time is the ID's top field, and at one
//! millisecond the fingerprint is one, so the ID's bits decide), sort by time among other
//! version 7 UUIDs of other milliseconds, and give the ID back without loss. RFC 9562
//! (section 6.2, method 1) lets `rand_a` and `rand_b` hold a counter; the node and sequence
//! are one. Such a UUID is as guessable as the ID it holds (section 6.9).

use super::error::RangeError;
use super::id::Id;
use super::layout::{FieldOrder, Layout};

/// A UUID that is not one of a layout's IDs ([`Id::from_uuid_u128`](crate::Id::from_uuid_u128)).
/// Permanent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UuidError {
    /// A UUID of another version: an ID's UUID is of version 7.
    #[error("uuid is of version {version}: an id's uuid is of version 7")]
    NotVersion7 {
        /// The version field.
        version: u8,
    },
    /// A UUID whose variant field is not RFC 9562's `10`.
    #[error("uuid has variant bits {variant:#04b}: an id's uuid has RFC 9562's 0b10")]
    NotRfc9562Variant {
        /// The two variant bits.
        variant: u8,
    },
    /// A UUID of another layout, or a version 7 UUID made elsewhere: its 10-bit layout
    /// fingerprint is not this layout's.
    #[error("uuid carries layout fingerprint {found}: this layout's is {expected}")]
    OtherLayout {
        /// The fingerprint the UUID carries.
        found: u16,
        /// This layout's.
        expected: u16,
    },
    /// The ID in the UUID has bits set above the layout's width.
    #[error(transparent)]
    Range(RangeError),
    /// Text that is not a UUID (feature `uuid`), as the `uuid` crate parses them.
    #[cfg(feature = "uuid")]
    #[error("not a UUID ({0}): a UUID is 32 hex digits, grouped 8-4-4-4-12 by hyphens or not")]
    Text(uuid::Error),
    /// The UUID's `unix_ts_ms` is not the time of the ID it holds: a version 7 UUID made
    /// elsewhere, or one altered.
    #[error("uuid's unix_ts_ms {uuid_ms} is not its id's time {id_ms} ms")]
    TimeMismatch {
        /// The UUID's `unix_ts_ms`.
        uuid_ms: u64,
        /// The time of the ID it holds.
        id_ms: u64,
    },
}

/// The version field's bits: 7.
const VERSION: u128 = 7;
/// The variant field's bits: `10`, RFC 9562's.
const VARIANT: u128 = 0b10;
/// The low 62 bits of the ID, in `rand_b`.
const RAND_B: u128 = (1 << 62) - 1;
/// The first Unix ms the 48-bit `unix_ts_ms` cannot hold.
const UUID_END_MS: u64 = 1 << 48;

impl Layout {
    /// The 10-bit fingerprint of this layout that its UUIDs carry: the top 10 bits of
    /// FNV-1a (64-bit) over the three widths and the field order (a byte each), then the
    /// epoch and the tick (8 bytes each, big-endian). Fixed across releases: UUIDs stored
    /// today read back tomorrow. Two layouts that differ share it with odds of 1 in 1,024;
    /// a UUID of the other is then refused by its time, unless their IDs' times agree.
    ///
    /// ```
    /// use atomflake::Layout;
    ///
    /// assert_eq!((Layout::TWITTER.uuid_fingerprint(), Layout::DISCORD.uuid_fingerprint()), (1003, 744));
    /// ```
    #[inline]
    pub fn uuid_fingerprint(&self) -> u16 {
        const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
        const PRIME: u64 = 0x0100_0000_01b3;
        let order: u8 = match self.order() {
            FieldOrder::NodeSequence => 0,
            FieldOrder::SequenceNode => 1,
        };
        // A width is at most 64: one byte.
        #[allow(clippy::cast_possible_truncation)]
        let widths = [self.timestamp_bits(), self.node_bits(), self.sequence_bits()].map(|bits| bits as u8);
        let hash = widths
            .into_iter()
            .chain([order])
            .chain(self.epoch_ms().to_be_bytes())
            .chain(self.tick_ms().to_be_bytes())
            .fold(OFFSET, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(PRIME));
        (hash >> 54) as u16
    }
}

impl Layout {
    /// Whether every ID of this layout has a UUID of version 7: its times end by 2^48 Unix
    /// ms (the year 10889), as every preset's do.
    ///
    /// ```
    /// use atomflake::Layout;
    ///
    /// assert!(Layout::PRESETS.iter().all(|(_, layout)| layout.fits_uuid()));
    /// let long = Layout::builder().timestamp_bits(40).node_bits(0).sequence_bits(24).tick_ms(1000).build()?;
    /// assert!(!long.fits_uuid());
    /// # Ok::<(), atomflake::Error>(())
    /// ```
    pub const fn fits_uuid(&self) -> bool {
        self.end_unix_ms() <= UUID_END_MS
    }
}

impl Id {
    /// This ID of `layout` as a UUID of version 7, a 128-bit number (bit 127 first, as
    /// RFC 9562 writes it; Python's `uuid.UUID(int=...)` takes it): the start of its tick as
    /// `unix_ts_ms`, then the whole ID and a fingerprint of the layout. The UUIDs sort as
    /// the IDs do, and [`from_uuid_u128`](Self::from_uuid_u128) gives the ID back. With the
    /// `uuid` feature, [`to_uuid`](Self::to_uuid) gives a `uuid::Uuid`.
    ///
    /// # Errors
    ///
    /// [`RangeError::IdOutOfLayout`] for an ID with bits set above the layout's width;
    /// [`RangeError::TimeOutOfRange`] for a time at or past 2^48 Unix ms (the year 10889:
    /// never for the presets).
    ///
    /// # Examples
    ///
    /// ```
    /// use atomflake::{Id, Layout};
    ///
    /// let id = Id::new(1050118621198921728);
    /// assert_eq!(id.to_uuid_u128(Layout::TWITTER)?, 0x01665fa2_4db3_7fac_8e92_c5527c95b000);
    /// # Ok::<(), atomflake::Error>(())
    /// ```
    #[inline]
    pub fn to_uuid_u128(self, layout: Layout) -> Result<u128, RangeError> {
        let unix_ms = layout.try_decode(self)?.unix_ms;
        if unix_ms >= UUID_END_MS {
            return Err(RangeError::TimeOutOfRange {
                unix_ms,
                target: "a UUIDv7 (48-bit unix_ts_ms)",
            });
        }
        let id = u128::from(self.get());
        let rand_a = u128::from(layout.uuid_fingerprint()) << 2 | id >> 62;
        Ok(u128::from(unix_ms) << 80 | VERSION << 76 | rand_a << 64 | VARIANT << 62 | id & RAND_B)
    }

    /// The ID of `layout` that the UUID `uuid` (a 128-bit number, bit 127 first) from
    /// [`to_uuid_u128`](Self::to_uuid_u128) holds.
    ///
    /// # Errors
    ///
    /// A [`UuidError`] naming what makes `uuid` not one of the layout's: not version 7,
    /// not RFC 9562's variant, another layout's fingerprint, an ID past the layout's width,
    /// or a `unix_ts_ms` other than the ID's time (a version 7 UUID made elsewhere).
    ///
    /// # Examples
    ///
    /// ```
    /// use atomflake::{Id, Layout, UuidError};
    ///
    /// let uuid = 0x01665fa2_4db3_7fac_8e92_c5527c95b000;
    /// assert_eq!(Id::from_uuid_u128(uuid, Layout::TWITTER)?, Id::new(1050118621198921728));
    /// let random = 0x67e55044_10b1_426f_9247_bb680e5fe0c8; // version 4
    /// assert_eq!(Id::from_uuid_u128(random, Layout::TWITTER), Err(UuidError::NotVersion7 { version: 4 }));
    /// # Ok::<(), atomflake::Error>(())
    /// ```
    pub fn from_uuid_u128(uuid: u128, layout: Layout) -> Result<Id, UuidError> {
        let version = (uuid >> 76 & 0xf) as u8;
        if version != 7 {
            return Err(UuidError::NotVersion7 { version });
        }
        let variant = (uuid >> 62 & 0b11) as u8;
        if u128::from(variant) != VARIANT {
            return Err(UuidError::NotRfc9562Variant { variant });
        }
        let rand_a = uuid >> 64 & 0xfff;
        let found = (rand_a >> 2) as u16;
        let expected = layout.uuid_fingerprint();
        if found != expected {
            return Err(UuidError::OtherLayout { found, expected });
        }
        // Two bits of rand_a above the 62 of rand_b: 64 bits.
        #[allow(clippy::cast_possible_truncation)]
        let id = Id::new(((rand_a & 0b11) << 62 | uuid & RAND_B) as u64);
        let id_ms = layout.try_decode(id).map_err(UuidError::Range)?.unix_ms;
        // 128 - 80 = 48 bits.
        #[allow(clippy::cast_possible_truncation)]
        let uuid_ms = (uuid >> 80) as u64;
        if uuid_ms != id_ms {
            return Err(UuidError::TimeMismatch { uuid_ms, id_ms });
        }
        Ok(id)
    }

    /// This ID of `layout` as a `uuid::Uuid` of version 7 (feature `uuid`): see
    /// [`to_uuid_u128`](Self::to_uuid_u128).
    ///
    /// # Errors
    ///
    /// As [`to_uuid_u128`](Self::to_uuid_u128)'s.
    ///
    /// # Examples
    ///
    /// ```
    /// use atomflake::{Id, Layout};
    ///
    /// let id = Id::new(1050118621198921728);
    /// let uuid = id.to_uuid(Layout::TWITTER)?;
    /// assert_eq!(uuid.get_version_num(), 7);
    /// assert_eq!(uuid.get_timestamp().unwrap().to_unix(), (1539202764, 211_000_000));
    /// assert_eq!(Id::from_uuid(uuid, Layout::TWITTER)?, id);
    /// # Ok::<(), atomflake::Error>(())
    /// ```
    #[cfg(feature = "uuid")]
    pub fn to_uuid(self, layout: Layout) -> Result<uuid::Uuid, RangeError> {
        self.to_uuid_u128(layout).map(uuid::Uuid::from_u128)
    }

    /// The ID of `layout` that a UUID from [`to_uuid`](Self::to_uuid) holds (feature
    /// `uuid`): see [`from_uuid_u128`](Self::from_uuid_u128).
    ///
    /// # Errors
    ///
    /// As [`from_uuid_u128`](Self::from_uuid_u128)'s.
    ///
    /// # Examples
    ///
    /// ```
    /// use atomflake::{Id, Layout, UuidError};
    ///
    /// let random = uuid::Uuid::parse_str("67e55044-10b1-426f-9247-bb680e5fe0c8")?;
    /// assert_eq!(Id::from_uuid(random, Layout::TWITTER), Err(UuidError::NotVersion7 { version: 4 }));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "uuid")]
    pub fn from_uuid(uuid: uuid::Uuid, layout: Layout) -> Result<Id, UuidError> {
        Id::from_uuid_u128(uuid.as_u128(), layout)
    }

    /// The ID of `layout` that the UUID written as `text` holds (feature `uuid`): 32 hex
    /// digits in any case, with or without the hyphens, braces or `urn:uuid:` (as the `uuid`
    /// crate parses them).
    ///
    /// # Errors
    ///
    /// [`UuidError::Text`] for text that is not a UUID; else as
    /// [`from_uuid_u128`](Self::from_uuid_u128)'s.
    ///
    /// # Examples
    ///
    /// ```
    /// use atomflake::{Id, Layout};
    ///
    /// let id = Id::parse_uuid("01665FA2-4DB3-7FAC-8E92-C5527C95B000", Layout::TWITTER)?;
    /// assert_eq!(id, Id::new(1050118621198921728));
    /// assert_eq!(
    ///     Id::parse_uuid("01665fa2", Layout::TWITTER).unwrap_err().to_string(),
    ///     "not a UUID (invalid length: found 8): a UUID is 32 hex digits, grouped 8-4-4-4-12 by hyphens \
    ///      or not",
    /// );
    /// # Ok::<(), atomflake::Error>(())
    /// ```
    #[cfg(feature = "uuid")]
    pub fn parse_uuid(text: &str, layout: Layout) -> Result<Id, UuidError> {
        Id::from_uuid(uuid::Uuid::parse_str(text).map_err(UuidError::Text)?, layout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: Id = Id::new(1_050_118_621_198_921_728);

    #[test]
    fn twitters_published_id_becomes_a_uuid_with_its_time_and_bits() {
        let bits = ID.to_uuid_u128(Layout::TWITTER).unwrap();
        let fingerprint = u128::from(Layout::TWITTER.uuid_fingerprint());
        assert_eq!(bits >> 80, 1_539_202_764_211);
        assert_eq!(bits >> 76 & 0xf, 7);
        assert_eq!(bits >> 66 & 0x3ff, fingerprint);
        // An ID below 2^62: the low 64 bits are the ID with the variant's bit 63 set.
        assert_eq!(bits & u128::from(u64::MAX), u128::from(ID.get() | 1 << 63));
        assert_eq!(Id::from_uuid_u128(bits, Layout::TWITTER), Ok(ID));
        // As Python's uuid module prints the number Python computed from RFC 9562's fields.
        assert_eq!(bits, 0x0166_5fa2_4db3_7fac_8e92_c552_7c95_b000);
    }

    /// The fingerprints are part of the stored format: pinned (computed again in Python from
    /// the definition above), and distinct among the presets.
    #[test]
    fn the_presets_fingerprints_are_fixed_and_distinct() {
        let fingerprints = Layout::PRESETS.map(|(name, layout)| (name, layout.uuid_fingerprint()));
        assert_eq!(
            fingerprints,
            [
                ("twitter", 1003),
                ("discord", 744),
                ("instagram", 151),
                ("sonyflake", 1001),
                ("mastodon", 815),
                ("javascript", 318),
            ]
        );
    }

    /// Every preset's IDs have UUIDs: their times all end by 2^48 ms (Mastodon's, with epoch
    /// 0 and 48 bits of ms, exactly there).
    #[test]
    fn every_presets_span_ends_within_48_bits_of_ms() {
        for (name, layout) in Layout::PRESETS {
            assert!(layout.fits_uuid(), "{name}");
            let last = Id::new(layout.max_id());
            assert!(last.to_uuid_u128(layout).is_ok(), "{name}");
        }
        assert_eq!(Layout::MASTODON.end_unix_ms(), UUID_END_MS);
    }

    #[test]
    fn each_field_of_a_foreign_uuid_is_refused_by_name() {
        let bits = ID.to_uuid_u128(Layout::TWITTER).unwrap();
        let version_4 = bits & !(0xf << 76) | 4 << 76;
        assert_eq!(
            Id::from_uuid_u128(version_4, Layout::TWITTER),
            Err(UuidError::NotVersion7 { version: 4 })
        );
        let microsoft = bits & !(0b11 << 62) | 0b11 << 62;
        assert_eq!(
            Id::from_uuid_u128(microsoft, Layout::TWITTER),
            Err(UuidError::NotRfc9562Variant { variant: 0b11 })
        );
        assert_eq!(
            Id::from_uuid_u128(bits, Layout::DISCORD),
            Err(UuidError::OtherLayout {
                found: Layout::TWITTER.uuid_fingerprint(),
                expected: Layout::DISCORD.uuid_fingerprint(),
            })
        );
        let later = bits + (1 << 80);
        assert_eq!(
            Id::from_uuid_u128(later, Layout::TWITTER),
            Err(UuidError::TimeMismatch {
                uuid_ms: 1_539_202_764_212,
                id_ms: 1_539_202_764_211,
            })
        );
        // Twitter's top bit is always 0: an ID with it set is past the layout.
        let top_bit = bits | 0b10 << 64;
        assert_eq!(
            Id::from_uuid_u128(top_bit, Layout::TWITTER),
            Err(UuidError::Range(RangeError::IdOutOfLayout {
                id: ID.get() | 1 << 63,
                max: i64::MAX as u64,
            }))
        );
    }

    #[test]
    fn an_id_past_the_layout_or_past_48_bits_of_ms_has_no_uuid() {
        assert_eq!(
            Id::new(u64::MAX).to_uuid_u128(Layout::TWITTER),
            Err(RangeError::IdOutOfLayout {
                id: u64::MAX,
                max: i64::MAX as u64,
            })
        );
        // 40 bits of 1000 ms ticks reach past 2^48 ms.
        let long = Layout::builder()
            .timestamp_bits(40)
            .node_bits(0)
            .sequence_bits(24)
            .tick_ms(1000)
            .build()
            .unwrap();
        let last = long.last_id_at(long.end_unix_ms() - 1).unwrap();
        assert_eq!(
            last.to_uuid_u128(long),
            Err(RangeError::TimeOutOfRange {
                unix_ms: long.decode(last).unix_ms,
                target: "a UUIDv7 (48-bit unix_ts_ms)",
            })
        );
    }
}
