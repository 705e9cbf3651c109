//! Loom models of atomflake live in `tests/`; they build only under `--cfg loom`
//! (see `run.sh`). Without it this crate is empty, so `cargo test --workspace` skips it.
