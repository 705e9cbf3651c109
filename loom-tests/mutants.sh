#!/usr/bin/env bash
# Applies each mutation of README.md's table, runs the loom models, prints which fail, and
# restores the source. Refuses to run with uncommitted changes under src/.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "$(git status --porcelain -- src/)" ]; then
    echo "mutants: src/ has uncommitted changes; commit or stash them first" >&2
    exit 1
fi
trap 'git checkout -q -- src/' EXIT
for m in M1 M2 M3 M4 M5 M6 M7; do
    python3 loom-tests/mutate.py "$m"
    echo "== $m"
    LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}" bash loom-tests/run.sh 2>&1 |
        grep -E '^test .*(ok|FAILED)$' || true
    git checkout -q -- src/
done
