//! [`Base62`]: an ID as 11 characters of base62, fixed width, sorting like the number.
//!
//! Alphabet in ASCII order, `0-9A-Za-z`, so that the text sorts as the IDs do (byte by
//! byte; in PostgreSQL under `COLLATE "C"`). 62^10 < 2^64 < 62^11: 11 characters hold
//! every `u64`, the largest `LygHa16AHYF`. Case-sensitive: `a` and `A` are other digits.

use super::text::{NOT_A_DIGIT, ascii_text, digit_in};

/// The 62 digits, in value order (which is ASCII order).
const ALPHABET: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// The value of each byte as a base62 digit, or [`NOT_A_DIGIT`].
const DIGITS: [u8; 256] = {
    let mut table = [NOT_A_DIGIT; 256];
    let mut value: u8 = 0;
    while value < 62 {
        table[ALPHABET[value as usize] as usize] = value;
        value += 1;
    }
    table
};

/// The value of `found` as a base62 digit, if it is one.
pub(crate) fn digit(found: char) -> Option<u8> {
    digit_in(&DIGITS, found)
}

/// An ID written as 11 characters of base62, as [`Id::to_base62`](crate::Id::to_base62)
/// returns it.
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
/// assert_eq!(id.to_base62().to_string(), "0Czks0tP37X");
/// assert_eq!(Id::from_base62("0Czks0tP37X")?, id);
/// # Ok::<(), atomflake::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Base62([u8; Base62::LEN]);

impl Base62 {
    /// The number of characters: 11.
    pub const LEN: usize = 11;

    /// The characters, all ASCII.
    pub const fn as_bytes(&self) -> &[u8; Base62::LEN] {
        &self.0
    }

    /// The text of the raw ID `raw`.
    pub(crate) const fn encode(mut raw: u64) -> Base62 {
        let mut text = [b'0'; Base62::LEN];
        let mut index = Base62::LEN;
        while index > 0 {
            index -= 1;
            let digit = (raw % 62) as usize;
            text[index] = ALPHABET[digit];
            raw /= 62;
        }
        Base62(text)
    }
}

ascii_text!(Base62);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ParseIdError;
    use crate::format::id::Id;

    fn text(id: u64) -> String {
        Id::new(id).to_base62().to_string()
    }

    #[test]
    fn encodes_fixed_width_in_ascii_order() {
        assert_eq!(text(0), "00000000000");
        assert_eq!(text(61), "0000000000z");
        assert_eq!(text(62), "00000000010");
        assert_eq!(text(u64::MAX), "LygHa16AHYF");
        assert_eq!(text(i64::MAX as u64), "AzL8n0Y58m7");
        assert!(ALPHABET.is_sorted());
    }

    #[test]
    fn bad_text_is_an_exact_error() {
        assert_eq!(Id::from_base62(""), Err(ParseIdError::Base62Length { length: 0 }));
        assert_eq!(
            Id::from_base62("0000000000é"),
            Err(ParseIdError::Base62Length { length: 12 })
        );
        assert_eq!(
            Id::from_base62("00000-00000"),
            Err(ParseIdError::InvalidBase62 { found: '-', index: 5 })
        );
        assert_eq!(
            Id::from_base62("LygHa16AHYG").unwrap_err().to_string(),
            "base62 id \"LygHa16AHYG\" is out of range: ids allow 00000000000..=LygHa16AHYF"
        );
        assert_eq!(
            Id::from_base62("zzzzzzzzzzz").unwrap_err().to_string(),
            "base62 id \"zzzzzzzzzzz\" is out of range: ids allow 00000000000..=LygHa16AHYF"
        );
        assert_eq!(
            Id::from_base62("0000000000!").unwrap_err().to_string(),
            "invalid character '!' at byte 10 in base62 id: base62 ids use the digits 0-9, A-Z and a-z"
        );
    }
}
