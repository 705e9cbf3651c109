//! The format: [`Id`] and its [`Parts`], the [`Layout`] that cuts a `u64` into fields, the
//! text forms, and their errors.

pub(crate) mod base32;
mod error;
pub(crate) mod id;
pub(crate) mod layout;

pub use base32::Base32;
pub use error::{Field, LayoutError, ParseIdError, RangeError};
pub(crate) use error::{FieldOutOfRange, OutOfSpan, field_out_of_range};
pub use id::{Id, Parts};
pub use layout::{FieldOrder, Layout, LayoutBuilder};
