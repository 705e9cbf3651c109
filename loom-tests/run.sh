#!/usr/bin/env bash
# Runs the loom models against atomflake's real code (atomics from loom via `--cfg loom`).
# LOOM_MAX_PREEMPTIONS bounds the preemptions loom explores per execution; see README.md
# for the bound chosen and the run time on a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."

export RUSTFLAGS="--cfg loom ${RUSTFLAGS:-}"
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-5}"
# A target directory of its own: the loom cfg would otherwise rebuild the normal one.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/loom}"

start=$(date +%s)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test -p atomflake-loom-tests --release --test "*" -- --test-threads=1 2>&1 | tee "$log"
ran=$(grep -Eo '^test result: ok\. [0-9]+ passed' "$log" | awk '{s += $4} END {print s + 0}')
echo "loom: $ran models passed with LOOM_MAX_PREEMPTIONS=$LOOM_MAX_PREEMPTIONS in $(( $(date +%s) - start )) s"
if [ "$ran" -eq 0 ]; then
    echo "loom: no model ran" >&2
    exit 1
fi
