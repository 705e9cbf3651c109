//! The reference: what atomflake promises and what those promises rest on, the formats,
//! running a fleet, the design and the feature flags. Pages only; no code.

#[doc = include_str!("guarantees.md")]
pub mod guarantees {}

#[doc = include_str!("formats.md")]
pub mod formats {}

#[doc = include_str!("fleets.md")]
pub mod fleets {}

#[doc = include_str!("design.md")]
pub mod design {}

#[doc = include_str!("features.md")]
pub mod features {}
