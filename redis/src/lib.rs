//! atomflake on Redis: node-ID leases for a fleet, kept in the Redis it already runs, each
//! node's high-water mark with its claim, fenced by random tokens and marks in
//! server-side scripts, and safe when Redis forgets recent writes (a restart, a failover).
//!
//! - [`lease`]: the Redis engine of [`atomflake_lease`]: claim node IDs, keep their marks,
//!   release them; the lease goes under any generator type as its
//!   [`MarkStore`](atomflake::mark::MarkStore).
//! - [`RedisUrl`]: `redis://[USER:PASSWORD@]HOST:PORT[/DB]`, `rediss://…` (TLS, with
//!   `cacert`, `cert`, `key`), and `?replicas=N`.

pub mod lease;
mod url;

pub use url::{MAX_REPLICAS, RedisUrl, RedisUrlError};
