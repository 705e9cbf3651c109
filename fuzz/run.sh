#!/usr/bin/env bash
# Runs every fuzz target for SECONDS seconds each (default 30); fails on the first crash.
#
#   bash fuzz/run.sh 30
#
# Needs a nightly toolchain and cargo-fuzz (`cargo +nightly install cargo-fuzz --locked`).
# The committed seeds in corpus/<target> are read but never written: new inputs go to a
# scratch directory, so a run leaves the repository clean. A crash leaves its input in
# fuzz/artifacts/<target>/ (git-ignored).
set -euo pipefail
cd "$(dirname "$0")"
seconds=${1:-30}

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

cargo +nightly fuzz build
for target in $(cargo +nightly fuzz list); do
    echo "== fuzz $target for ${seconds}s"
    mkdir -p "$scratch/$target"
    # The first corpus directory gets the new inputs; the seeds are only read.
    # Progress lines (NEW, REDUCE, pulse) are dropped; the stats and any crash are kept.
    set +e
    cargo +nightly fuzz run "$target" "$scratch/$target" "corpus/$target" -- \
        -max_total_time="$seconds" -print_final_stats=1 2>&1 |
        grep -Ev '^#[0-9]+\s+(NEW|REDUCE|pulse)'
    status=${PIPESTATUS[0]}
    set -e
    if [ "$status" -ne 0 ]; then
        echo "fuzz: $target failed (exit $status); the input is in fuzz/artifacts/$target/" >&2
        exit "$status"
    fi
done
echo "fuzz: every target ran ${seconds}s without a crash"
