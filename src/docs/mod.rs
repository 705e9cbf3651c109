//! The reference: what atomflake promises and what those promises rest on, the formats,
//! and running a fleet. Pages only; no code.

#[doc = include_str!("guarantees.md")]
pub mod guarantees {}

#[doc = include_str!("formats.md")]
pub mod formats {}

#[doc = include_str!("fleets.md")]
pub mod fleets {}
