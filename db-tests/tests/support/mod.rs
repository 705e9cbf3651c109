//! What the minting script's tests (`sql_adopt.rs`) and the extension's (`extension.rs`)
//! share: the adoption of existing columns, and the copies of a database into a server
//! whose clock is behind.

pub mod adoption;
pub mod copies;
