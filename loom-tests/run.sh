#!/usr/bin/env bash
# Runs the loom models against atomflake's real code (atomics from loom via `--cfg loom`).
# LOOM_MAX_PREEMPTIONS bounds the preemptions loom explores per execution; see README.md
# for the bound chosen and the run time on a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."

export RUSTFLAGS="--cfg loom ${RUSTFLAGS:-}"
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-5}"
# The models of a test binary run side by side, one per core (LOOM_TEST_THREADS): each
# explores its own executions on its own threads.
threads="${LOOM_TEST_THREADS:-$(nproc)}"
# A target directory of its own: the loom cfg would otherwise rebuild the normal one.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/loom}"

start=$(date +%s)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test -p atomflake-loom-tests --release --test "*" -- --test-threads="$threads" 2>&1 | tee "$log"
# The protocol of the SQL script that mints inside PostgreSQL, restated on loom's primitives.
cargo test -p atomflake-postgres --release --test loom_sql_protocol -- --test-threads="$threads" 2>&1 | tee -a "$log"
# The crate's own models of private machinery (the clock's timeline, `src/clock/discipline.rs`):
# three threads with a seqlock retry loop, so a lower bound keeps them to about a minute.
LOOM_MAX_PREEMPTIONS="${LOOM_CRATE_MAX_PREEMPTIONS:-3}" \
    cargo test -p atomflake --release --lib loom_models -- --test-threads="$threads" 2>&1 | tee -a "$log"
ran=$(grep -Eo '^test result: ok\. [0-9]+ passed' "$log" | awk '{s += $4} END {print s + 0}')
echo "loom: $ran models passed with LOOM_MAX_PREEMPTIONS=$LOOM_MAX_PREEMPTIONS (the crate's own: ${LOOM_CRATE_MAX_PREEMPTIONS:-3}) in $(( $(date +%s) - start )) s"
if [ "$ran" -eq 0 ]; then
    echo "loom: no model ran" >&2
    exit 1
fi
