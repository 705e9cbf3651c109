//! Pieces the benches, the bins and the examples share: each measurement is written once
//! here and used by the criterion benches (`benches/`) and the one-run `report` bin.
//!
//! - [`measure`]: the timed loops (tight, paced bursts, threads), saturation windows with
//!   the thread's CPU time, and per-call latency histograms.
//! - [`sanity`]: the check every generator passes before it is timed.
//! - [`peers`]: every benched generator, atomflake's and the peers', listed once per group.
//! - [`report`]: rows, ratios, the Markdown table and the SVG chart of the `report` bin.
//! - [`clients`]: h2load and wrk run against a server, their reports parsed (the `serve`
//!   bin).
//!
//! The floors of the `serve` bin (a hyper server with fixed answers, and the same answers
//! with no HTTP library) are in `atomflake-floor` (`benches/floor/`), which CI builds
//! beside the command to count instructions per request.

pub mod clients;
pub mod measure;
pub mod peers;
pub mod report;
pub mod sanity;

pub use measure::floor_step;
