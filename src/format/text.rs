//! What the fixed-width text forms ([`Base32`], [`Base62`])
//! share: a table from bytes to digit values, and their characters' formatting; and
//! [`Id::from_any_form`], which tells the forms apart.

use super::base32::Base32;
use super::base62::Base62;
use super::error::ParseIdError;
use super::id::Id;

impl Id {
    /// An ID in any of its text forms, told apart by length: base32 when the text has 13
    /// characters and not all are digits ([`from_base32`](Id::from_base32)), base62 when it
    /// has 11 and not all are digits ([`from_base62`](Id::from_base62)), else decimal
    /// (`FromStr`). Text of digits alone is always decimal. What reads IDs that a person
    /// pastes (`atomflake decode`, `GET /v1/ids/{id}`).
    ///
    /// # Errors
    ///
    /// The form's own [`ParseIdError`].
    ///
    /// # Examples
    ///
    /// ```
    /// use atomflake::Id;
    ///
    /// let id = Id::new(175928847299117063);
    /// for text in ["175928847299117063", "04W86BB0G4007", "0Czks0tP37X"] {
    ///     assert_eq!(Id::from_any_form(text)?, id);
    /// }
    /// # Ok::<(), atomflake::Error>(())
    /// ```
    pub fn from_any_form(text: &str) -> Result<Id, ParseIdError> {
        let digits = text.bytes().all(|b| b.is_ascii_digit());
        if text.len() == Base32::LEN && !digits {
            Id::from_base32(text)
        } else if text.len() == Base62::LEN && !digits {
            Id::from_base62(text)
        } else {
            text.parse()
        }
    }
}

/// Marks a byte that is not a digit in a digit table.
pub(crate) const NOT_A_DIGIT: u8 = u8::MAX;

/// The value of `found` in `table` (each byte's digit value, or [`NOT_A_DIGIT`]), if it is
/// a digit.
pub(crate) fn digit_in(table: &[u8; 256], found: char) -> Option<u8> {
    let digit = table[usize::from(u8::try_from(found).ok()?)];
    (digit != NOT_A_DIGIT).then_some(digit)
}

/// `Display` (the characters), `Debug` (`Name("...")`) and `from_checked` (text already
/// checked to be the form's digits) for a text form that is a tuple struct of `LEN` ASCII
/// bytes.
macro_rules! ascii_text {
    ($name:ident) => {
        impl core::fmt::Display for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                // Always ASCII (only built from the alphabet or from checked input).
                f.pad(core::str::from_utf8(&self.0).map_err(|_| core::fmt::Error)?)
            }
        }

        impl core::fmt::Debug for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                write!(f, concat!(stringify!($name), "(\"{}\")"), self)
            }
        }

        impl $name {
            /// Text already checked to be the form's digits, kept as given.
            pub(crate) fn from_checked(bytes: &[u8]) -> $name {
                let mut text = [0; $name::LEN];
                text.copy_from_slice(bytes);
                $name(text)
            }
        }
    };
}

pub(crate) use ascii_text;
