//! The format: [`Id`] and its [`Parts`], the [`Layout`] that cuts a `u64` into fields, the
//! text forms, and their errors.

pub(crate) mod base32;
pub(crate) mod base62;
mod error;
mod field;
pub(crate) mod id;
pub(crate) mod layout;
#[cfg(feature = "mask")]
mod mask;
mod text;
mod uuid;

pub use base32::Base32;
pub use base62::Base62;
pub use error::{LayoutError, ParseIdError, RangeError};
pub use field::Field;
pub use id::{Id, Parts};
pub use layout::{FieldOrder, Layout, LayoutBuilder};
pub(crate) use layout::{FieldOutOfRange, OutOfSpan};
#[cfg(feature = "mask")]
pub use mask::{MASK_KEY_BYTES, Mask, MaskKeyError};
pub use uuid::UuidError;
