//! serde support (feature `serde`): [`Id`] as a decimal string by default, and modules for
//! `#[serde(with = ...)]` that pick another form.
//!
//! | form | serializes as | deserializes from |
//! |---|---|---|
//! | `Id` itself | a decimal string, `"1541815603606036480"` | a decimal string or a non-negative integer |
//! | [`integer`] | a number, `1541815603606036480` | a non-negative integer |
//! | [`base32`] | a base32 string, `"1ASD13XH1F800"` | a base32 string |
//!
//! Strings are the default because JavaScript reads JSON numbers as doubles, which hold
//! integers exactly only up to 2^53: `10765432100123456789` comes back as
//! `10765432100123458000`. Discord and Twitter send IDs as strings for that reason.
//!
//! Formats that are not human-readable (bincode, postcard: `is_human_readable()` is
//! false) get the plain `u64` from `Id` itself: there is no JavaScript to protect there.
//!
//! # Examples
//!
//! ```
//! use atomflake::Id;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! struct Message {
//!     id: Id,
//!     #[serde(with = "atomflake::serde::integer")]
//!     channel: Id,
//!     #[serde(with = "atomflake::serde::base32")]
//!     author: Id,
//! }
//! # let _ = Message { id: Id::new(1), channel: Id::new(2), author: Id::new(3) };
//! ```

use crate::ParseIdError;
use crate::format::id::Id;
use ::serde::de::{self, Deserializer, Visitor};
use ::serde::ser::Serializer;
use ::serde::{Deserialize, Serialize};
use core::fmt;

impl Serialize for Id {
    /// A decimal string in human-readable formats, a `u64` in the others.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            serializer.collect_str(self)
        } else {
            serializer.serialize_u64(self.get())
        }
    }
}

impl<'de> Deserialize<'de> for Id {
    /// A decimal string or a non-negative integer in human-readable formats, a `u64` in the
    /// others.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Id, D::Error> {
        if deserializer.is_human_readable() {
            deserializer.deserialize_any(IdVisitor { strings: true })
        } else {
            deserializer.deserialize_u64(IdVisitor { strings: false })
        }
    }
}

/// Reads an ID from an integer, and from a decimal string when `strings` is set.
struct IdVisitor {
    strings: bool,
}

impl Visitor<'_> for IdVisitor {
    type Value = Id;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.strings {
            f.write_str("an id: a decimal string or a non-negative integer")
        } else {
            f.write_str("an id: a non-negative integer")
        }
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Id, E> {
        Ok(Id::new(value))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Id, E> {
        Id::try_from(value).map_err(E::custom)
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Id, E> {
        if !self.strings {
            return Err(E::invalid_type(de::Unexpected::Str(text), &self));
        }
        text.parse().map_err(E::custom)
    }
}

/// `#[serde(with = "atomflake::serde::integer")]`: an [`Id`] as a JSON number.
///
/// Only for readers that keep 64-bit integers exact (Rust, Go, Java `long`); JavaScript
/// rounds numbers above 2^53.
///
/// # Examples
///
/// ```
/// use atomflake::Id;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize, PartialEq, Debug)]
/// struct Row {
///     #[serde(with = "atomflake::serde::integer")]
///     id: Id,
/// }
///
/// let row = Row { id: Id::new(1541815603606036480) };
/// let json = serde_json::to_string(&row)?;
/// assert_eq!(json, r#"{"id":1541815603606036480}"#);
/// assert_eq!(serde_json::from_str::<Row>(&json)?, row);
/// # Ok::<(), serde_json::Error>(())
/// ```
pub mod integer {
    use super::IdVisitor;
    use crate::format::id::Id;
    use ::serde::{Deserializer, Serializer};

    /// Writes the ID as a `u64`.
    ///
    /// # Errors
    ///
    /// Whatever the serializer reports.
    pub fn serialize<S: Serializer>(id: &Id, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(id.get())
    }

    /// Reads the ID from a non-negative integer.
    ///
    /// # Errors
    ///
    /// For a negative integer (naming it and the range of IDs), and anything but an integer.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Id, D::Error> {
        deserializer.deserialize_u64(IdVisitor { strings: false })
    }
}

/// `#[serde(with = "atomflake::serde::base32")]`: an [`Id`] as 13 characters of Crockford
/// base32 (see [`Id::to_base32`]).
///
/// # Examples
///
/// ```
/// use atomflake::Id;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize, PartialEq, Debug)]
/// struct Row {
///     #[serde(with = "atomflake::serde::base32")]
///     id: Id,
/// }
///
/// let row = Row { id: Id::new(1541815603606036480) };
/// let json = serde_json::to_string(&row)?;
/// assert_eq!(json, r#"{"id":"1ASD13XH1F800"}"#);
/// assert_eq!(serde_json::from_str::<Row>(r#"{"id":"1asd13xh1f8oo"}"#)?, row);
/// # Ok::<(), serde_json::Error>(())
/// ```
pub mod base32 {
    use super::{Id, ParseIdError};
    use ::serde::de::{self, Deserializer, Visitor};
    use ::serde::ser::Serializer;
    use core::fmt;

    /// Writes the ID as 13 base32 characters.
    ///
    /// # Errors
    ///
    /// Whatever the serializer reports.
    pub fn serialize<S: Serializer>(id: &Id, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&id.to_base32())
    }

    /// Reads the ID from 13 base32 characters.
    ///
    /// # Errors
    ///
    /// The errors of [`Id::from_base32`], and for anything but a string.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Id, D::Error> {
        deserializer.deserialize_str(Base32Visitor)
    }

    struct Base32Visitor;

    impl Visitor<'_> for Base32Visitor {
        type Value = Id;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an id: 13 characters of Crockford base32")
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<Id, E> {
            Id::from_base32(text).map_err(|err: ParseIdError| E::custom(err))
        }
    }
}
