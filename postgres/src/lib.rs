//! atomflake on PostgreSQL: node-ID leases that keep each node's high-water mark
//! ([`lease`]), and the SQL script that mints inside the database ([`sql`]).
//!
//! - [`lease::Lease`] claims a node ID from a table in the fleet's own PostgreSQL, fenced
//!   by a token per claim, with the node's high-water mark in the row. It is a
//!   [`MarkStore`](atomflake::mark::MarkStore): any atomflake generator type goes on it
//!   with `Builder::mark_store`, and the generator keeps it renewed.
//! - [`Database`] is where the leases live: a libpq URL or `key=value` settings, with
//!   libpq's TLS modes (`sslmode=verify-full` and the rest) on rustls, and never a
//!   password in what it displays.
//! - [`sql::PgScript`] writes the idempotent SQL (PL/pgSQL) that creates
//!   `atomflake_next_id()` and its decoders for a layout and a node: IDs minted by the
//!   database itself, with the same rules as the crate's state word.
//!
//! The `atomflake` command (`atomflake sql`, `atomflake lease`, `atomflake mint --lease`)
//! is built on this crate. The README compares the script with the extension, which mints
//! inside PostgreSQL from shared memory.
//!
//! Under `--cfg loom` only [`sql`] is built: its protocol has a loom model
//! (`tests/loom_sql_protocol.rs`), and the client under [`lease`] does not build there.
#![forbid(unsafe_code)]

#[cfg(not(loom))]
pub mod database;
#[cfg(not(loom))]
pub use database::Database;
#[cfg(not(loom))]
pub mod lease;
pub mod sql;

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
