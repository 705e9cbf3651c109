//! The native addon of the `atomflake` npm package. JavaScript sees the same generator,
//! layouts, mark stores and leases as Rust, with Rust's error messages; `index.js` wraps
//! this module in the package's API (its classes, errors and async methods).
//!
//! - [`generator`]: `NativeGenerator` and `lease()`; every generator on one node of one
//!   layout is one Rust generator per process, shared by the worker threads that ask for it.
//! - [`layout`]: `NativeLayout`, the ID text forms and `NativeMask`.
//! - [`errors`]: how each Rust error reaches `index.js`, which throws the package's classes.

#![deny(unsafe_code)]

mod args;
pub mod errors;
pub mod generator;
pub mod layout;
pub mod raw;
