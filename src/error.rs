//! [`Error`], which every operation's own error converts into (for `?` in code that mixes
//! them).
//!
//! Each error lives beside the operation that returns it:
//!
//! | error | returned by |
//! |---|---|
//! | [`ParseIdError`] | `Id`'s `FromStr`, [`Id::from_base32`](crate::Id::from_base32) |
//! | [`LayoutError`] | [`LayoutBuilder::build`](crate::LayoutBuilder::build) |
//! | [`RangeError`] | [`Layout::encode`](crate::Layout::encode) and the other conversions of times, fields and IDs |
//! | [`MaskKeyError`] | `Mask::from_hex` and `Mask::from_key_file` (feature `mask`) |
//! | [`UuidError`] | [`Id::from_uuid_u128`](crate::Id::from_uuid_u128), and `Id::from_uuid` (feature `uuid`) |
//! | [`BuildError`] | the generators' constructors and [`Builder`](crate::Builder)'s `build*` |
//! | [`MintError`] | `try_next_id` and the other `try_` and `_timeout` methods |
//! | [`FillError`] | `fill_timeout` |
//! | [`HighWaterError`](crate::mark::HighWaterError) | opening a high-water file, inside [`BuildError`] |
//! | [`StoreError`](crate::mark::StoreError) | a [`MarkStore`](crate::mark::MarkStore) that failed, inside [`BuildError`] and [`MintError`] |
//! | [`NodeSourceError`] | the [`node`](crate::node) sources: `from_env`, `from_statefulset*` |
//!
//! Every message names the bad value and the range it had to be in. Each error's
//! `is_transient` says whether the same call can succeed later (transient) or never will
//! for the same input (permanent).

#[cfg(feature = "mask")]
use crate::format::MaskKeyError;
use crate::format::{LayoutError, ParseIdError, RangeError, UuidError};
use crate::generator::{BuildError, FillError, MintError};
use crate::node::NodeSourceError;

/// `From` for each error that another error holds whole, as the variant named.
macro_rules! holds {
    ($($(#[$cfg:meta])* $outer:ident::$variant:ident($inner:ty)),* $(,)?) => {$(
        $(#[$cfg])*
        impl From<$inner> for $outer {
            fn from(error: $inner) -> $outer {
                $outer::$variant(error)
            }
        }
    )*};
}

pub(crate) use holds;

/// Declares [`Error`] with one variant per error type, each passing its `Display` and
/// `source` through, and its `From` conversions.
macro_rules! umbrella {
    ($(#[$doc:meta])* enum { $($(#[$cfg:meta])* $variant:ident($error:ident)),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
        #[non_exhaustive]
        pub enum Error {
            $(
                #[doc = concat!("See [`", stringify!($error), "`].")]
                #[error(transparent)]
                $(#[$cfg])*
                $variant($error),
            )*
        }

        holds!($($(#[$cfg])* Error::$variant($error)),*);
    };
}

umbrella! {
    /// Any atomflake error: each operation's own error converts into it, so that `?` works in
    /// code that mixes operations. Its `Display` and `source` are the inner error's.
    ///
    /// # Examples
    ///
    /// ```
    /// use atomflake::{Error, Generator, Id, Layout};
    ///
    /// fn first_id(node: &str) -> Result<Id, Error> {
    ///     let node: Id = node.parse()?;                         // ParseIdError
    ///     let generator = Generator::new(Layout::TWITTER, node.get())?; // BuildError
    ///     Ok(generator.try_next_id()?)                            // MintError
    /// }
    /// assert!(matches!(first_id("7"), Ok(_)));
    /// assert_eq!(
    ///     first_id("1024").unwrap_err().to_string(),
    ///     "node 1024 is out of range: the layout allows 0..=1023",
    /// );
    /// ```
    enum {
        Parse(ParseIdError),
        Layout(LayoutError),
        Range(RangeError),
        Uuid(UuidError),
        #[cfg(feature = "mask")]
        MaskKey(MaskKeyError),
        Build(BuildError),
        Mint(MintError),
        Fill(FillError),
        Node(NodeSourceError),
    }
}

impl Error {
    /// Whether the same call can succeed later: a spent tick, a mark being stored, a store
    /// that failed for now. Bad input, a layout that cannot hold the value and a generator
    /// that can no longer mint are permanent.
    ///
    /// # Examples
    ///
    /// ```
    /// use atomflake::{Error, Generator, Layout};
    ///
    /// let error: Error = Generator::new(Layout::TWITTER, 1024).unwrap_err().into();
    /// assert!(!error.is_transient());
    /// ```
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Build(error) => error.is_transient(),
            Error::Mint(error) => error.is_transient(),
            Error::Fill(error) => error.is_transient(),
            #[cfg(feature = "mask")]
            Error::MaskKey(_) => false,
            Error::Parse(_) | Error::Layout(_) | Error::Range(_) | Error::Uuid(_) | Error::Node(_) => false,
        }
    }
}
