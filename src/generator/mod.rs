//! The core: the state word and its pure transition ([`state`]), the CAS loop over it
//! ([`minter`]), where the word and its window live ([`word`]), the keeper thread that
//! moves a mark store's mark ahead of the minting path ([`keeper`]), waiting for a spent
//! tick, the three generator types and the
//! [`Builder`] they share, and the errors of building and minting.

pub(crate) mod atfork;
pub(crate) mod builder;
mod error;
pub(crate) mod fork;
pub(crate) mod ids;
pub(crate) mod ids_async;
pub(crate) mod keeper;
mod local;
pub(crate) mod minter;
mod run;
mod sharded;
mod shared;
pub(crate) mod state;
pub(crate) mod wait;
pub(crate) mod word;

pub use builder::Builder;
pub use error::{BuildError, FillError, MintError};
pub use ids::{Ids, LocalIds};
pub use local::LocalGenerator;
pub use run::{Run, RunIter};
pub use sharded::ShardedGenerator;
pub use shared::Generator;
#[cfg(feature = "tokio")]
pub use wait::Tokio;
pub use wait::{Sleep, Until, Wait};
