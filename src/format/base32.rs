//! [`Base32`]: an ID as 13 characters of Crockford base32, fixed width, sorting like the
//! number.
//!
//! ```text
//!  char:   0    1    2   …   12
//!  bits: 64-60 59-55 54-50 … 4-0     (the first character holds only 4 bits: 0..=F)
//! ```
//!
//! Alphabet (Crockford): `0123456789ABCDEFGHJKMNPQRSTVWXYZ`. Written upper-case. Read
//! case-insensitively, with `I` and `L` as `1` and `O` as `0`; `U` and anything else is an
//! error.

use super::text::{NOT_A_DIGIT, ascii_text, digit_in};

/// The 32 digits, in value order.
const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// Bits per character.
pub(crate) const BITS: u32 = 5;

/// Characters per ID.
const CHARS: u32 = 13;

/// Bit offset of the first character's value.
const TOP_SHIFT: u32 = (CHARS - 1) * BITS;

/// The largest value of the first character, which holds the top 4 bits: 65 bits of text
/// carry 64 bits of ID.
pub(crate) const MAX_FIRST: u8 = (1 << (u64::BITS - TOP_SHIFT)) - 1;

/// The value of each byte as a base32 digit, or [`NOT_A_DIGIT`].
const DIGITS: [u8; 256] = {
    let mut table = [NOT_A_DIGIT; 256];
    let mut value: u8 = 0;
    while value < 32 {
        let upper = ALPHABET[value as usize];
        table[upper as usize] = value;
        table[upper.to_ascii_lowercase() as usize] = value;
        value += 1;
    }
    // Crockford's look-alikes.
    table[b'I' as usize] = 1;
    table[b'i' as usize] = 1;
    table[b'L' as usize] = 1;
    table[b'l' as usize] = 1;
    table[b'O' as usize] = 0;
    table[b'o' as usize] = 0;
    table
};

/// The value of `found` as a base32 digit (look-alikes included), if it is one.
pub(crate) fn digit(found: char) -> Option<u8> {
    digit_in(&DIGITS, found)
}

/// An ID written as 13 characters of Crockford base32, as
/// [`Id::to_base32`](crate::Id::to_base32) returns it.
///
/// Fixed width, so the text sorts like the number. `Display` writes the characters;
/// [`as_bytes`](Self::as_bytes) gives them without formatting. No allocation.
///
/// # Examples
///
/// ```
/// use atomflake::Id;
///
/// let id = Id::new(175928847299117063);
/// assert_eq!(id.to_base32().to_string(), "04W86BB0G4007");
/// assert_eq!(Id::from_base32("04w86bb0g4oo7")?, id);
/// # Ok::<(), atomflake::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Base32([u8; Base32::LEN]);

impl Base32 {
    /// The number of characters: 13.
    pub const LEN: usize = CHARS as usize;

    /// The characters, all ASCII.
    pub const fn as_bytes(&self) -> &[u8; Base32::LEN] {
        &self.0
    }
}

ascii_text!(Base32);

impl Base32 {
    /// The text of the raw ID `raw`.
    pub(crate) const fn encode(raw: u64) -> Base32 {
        let mut text = [0; Base32::LEN];
        let mut index = 0;
        let mut shift = TOP_SHIFT;
        while index < Base32::LEN {
            #[expect(clippy::cast_possible_truncation, reason = "a 5-bit digit")]
            let digit = (raw >> shift) as u8 & 0b1_1111;
            text[index] = ALPHABET[digit as usize];
            index += 1;
            shift = shift.saturating_sub(BITS);
        }
        Base32(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ParseIdError;
    use crate::format::id::Id;

    fn text(id: u64) -> String {
        Id::new(id).to_base32().to_string()
    }

    #[test]
    fn encodes_fixed_width_upper_case() {
        assert_eq!(text(0), "0000000000000");
        assert_eq!(text(1), "0000000000001");
        assert_eq!(text(31), "000000000000Z");
        assert_eq!(text(32), "0000000000010");
        assert_eq!(text(u64::MAX), "FZZZZZZZZZZZZ");
        assert_eq!(text(1 << 63), "8000000000000");
        assert_eq!(
            format!("{:?}", Id::new(10).to_base32()),
            "Base32(\"000000000000A\")"
        );
        assert_eq!(format!("{:>15}", Id::new(10).to_base32()), "  000000000000A");
    }

    #[test]
    fn decodes_case_insensitively_with_look_alikes() {
        assert_eq!(Id::from_base32("FZZZZZZZZZZZZ"), Ok(Id::new(u64::MAX)));
        assert_eq!(Id::from_base32("fzzzzzzzzzzzz"), Ok(Id::new(u64::MAX)));
        assert_eq!(Id::from_base32("0000000000001"), Ok(Id::new(1)));
        for one in ["000000000000I", "000000000000i", "000000000000L", "000000000000l"] {
            assert_eq!(Id::from_base32(one), Ok(Id::new(1)), "{one}");
        }
        assert_eq!(Id::from_base32("OoOoOoOoOoOo0"), Ok(Id::new(0)));
        assert_eq!(Id::from_base32("abcdefghjkmnp"), Id::from_base32("ABCDEFGHJKMNP"));
    }

    #[test]
    fn length_errors_count_characters() {
        assert_eq!(Id::from_base32(""), Err(ParseIdError::Base32Length { length: 0 }));
        assert_eq!(
            Id::from_base32("00000000000000"),
            Err(ParseIdError::Base32Length { length: 14 })
        );
        // 13 bytes but 12 characters: the length is counted in characters.
        assert_eq!(
            Id::from_base32("é00000000000"),
            Err(ParseIdError::Base32Length { length: 12 })
        );
        assert_eq!(
            Id::from_base32("12").unwrap_err().to_string(),
            "base32 id has 2 characters: a base32 id has exactly 13"
        );
    }

    #[test]
    fn invalid_characters_are_named_with_their_offset() {
        assert_eq!(
            Id::from_base32("u000000000000"),
            Err(ParseIdError::InvalidBase32 { found: 'u', index: 0 })
        );
        assert_eq!(
            Id::from_base32("00000-0000000"),
            Err(ParseIdError::InvalidBase32 { found: '-', index: 5 })
        );
        assert_eq!(
            Id::from_base32("0é00000000000"),
            Err(ParseIdError::InvalidBase32 {
                found: 'é', index: 1
            })
        );
        // The first bad character is reported, even when the first one would overflow.
        assert_eq!(
            Id::from_base32("Z0000000000U0"),
            Err(ParseIdError::InvalidBase32 {
                found: 'U',
                index: 11
            })
        );
        assert_eq!(
            Id::from_base32("000000000000U").unwrap_err().to_string(),
            "invalid character 'U' at byte 12 in base32 id: base32 ids use Crockford's digits \
             0-9 and A-Z without U (I and L read as 1, O as 0)"
        );
    }

    #[test]
    fn overflow_names_the_text_as_given() {
        let given = |s: &str| {
            let mut bytes = [0; Base32::LEN];
            bytes.copy_from_slice(s.as_bytes());
            Base32(bytes)
        };
        assert_eq!(
            Id::from_base32("G000000000000"),
            Err(ParseIdError::Base32Overflow {
                text: given("G000000000000")
            })
        );
        assert_eq!(
            Id::from_base32("zzzzzzzzzzzzz"),
            Err(ParseIdError::Base32Overflow {
                text: given("zzzzzzzzzzzzz")
            })
        );
        assert_eq!(
            Id::from_base32("zzzzzzzzzzzzz").unwrap_err().to_string(),
            "base32 id \"zzzzzzzzzzzzz\" is out of range: ids allow 0000000000000..=FZZZZZZZZZZZZ"
        );
    }

    #[test]
    fn first_character_holds_four_bits() {
        assert_eq!((TOP_SHIFT, MAX_FIRST), (60, 0xF));
        assert_eq!(DIGITS[usize::from(b'F')], MAX_FIRST);
    }

    #[test]
    fn round_trips_and_sorts_like_the_number() {
        let samples = [
            0,
            1,
            31,
            32,
            1 << 53,
            (1 << 53) + 1,
            i64::MAX as u64,
            u64::MAX - 1,
            u64::MAX,
        ];
        for raw in samples {
            let id = Id::new(raw);
            assert_eq!(Id::from_base32(&id.to_base32().to_string()), Ok(id), "{raw}");
        }
        for pair in samples.windows(2) {
            assert!(Id::new(pair[0]).to_base32() < Id::new(pair[1]).to_base32());
        }
    }
}
