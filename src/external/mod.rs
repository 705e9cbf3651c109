//! Foreign traits for the format's types, each behind its feature: serde, chrono and time,
//! `Id` as a database `BIGINT` (postgres-types, sqlx, diesel), and `Id`'s schema for
//! OpenAPI and JSON Schema (utoipa, schemars). They live in this crate
//! because the orphan rule keeps them here.

#[cfg(any(
    feature = "postgres",
    feature = "sqlx-postgres",
    feature = "sqlx-mysql",
    feature = "sqlx-sqlite",
    feature = "diesel",
    feature = "diesel-mysql"
))]
mod bigint;
mod datetime;
#[cfg(any(feature = "diesel", feature = "diesel-mysql"))]
mod diesel;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(any(feature = "utoipa", feature = "schemars"))]
mod schema;
#[cfg(feature = "serde")]
pub mod serde;
#[cfg(any(feature = "sqlx-postgres", feature = "sqlx-mysql", feature = "sqlx-sqlite"))]
mod sqlx;
