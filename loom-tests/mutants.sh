#!/usr/bin/env bash
# Applies each mutation of README.md's tables (or those named as arguments, e.g. `T1 T3`),
# runs the tests that should catch it, prints which fail, and restores the source. M*: the
# loom models (run.sh) and the generator's unit tests. T*: the crate's own loom model of the clock's timeline and the
# discipline's unit tests. Exits non-zero when a mutation is caught by no test (a failing
# build counts as not caught). Refuses to run with uncommitted changes under src/.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "$(git status --porcelain -- src/)" ]; then
    echo "mutants: src/ has uncommitted changes; commit or stash them first" >&2
    exit 1
fi
trap 'git checkout -q -- src/' EXIT
if [ "$#" -gt 0 ]; then
    mutations=("$@")
else
    mutations=(M1 M2 M3 M4 M5 M6 M7 M8 T1 T2 T3 T4 T5)
fi
bound="${LOOM_MAX_PREEMPTIONS:-3}"
caught=()
survived=()
for m in "${mutations[@]}"; do
    python3 loom-tests/mutate.py "$m"
    echo "== $m"
    log=$(mktemp)
    case "$m" in
        M*)
            LOOM_MAX_PREEMPTIONS="$bound" bash loom-tests/run.sh >"$log" 2>&1 || true
            # The generator's own unit tests too: some mutations (M8) need a state no
            # model reaches (another shard moving the limits while one is spent).
            cargo test -p atomflake --lib generator:: >>"$log" 2>&1 || true
            ;;
        T*)
            RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS="${LOOM_CRATE_MAX_PREEMPTIONS:-3}" \
                CARGO_TARGET_DIR=target/loom \
                cargo test -p atomflake --release --lib loom_models -- --test-threads=1 >"$log" 2>&1 || true
            cargo test -p atomflake --lib discipline >>"$log" 2>&1 || true
            ;;
    esac
    grep -E '^test .*(ok|FAILED)$' "$log" || true
    # The first line of each failure's message.
    grep -A1 -E "^thread '.*' .*panicked at" "$log" | grep -vE "panicked at|^--$" | cut -c1-200 | head -4 || true
    failed=$(grep -cE '^test .*FAILED$' "$log" || true)
    if [ "$failed" -gt 0 ]; then
        caught+=("$m ($failed failing)")
    else
        if grep -qE '^error(\[|:)' "$log"; then
            echo "$m: the mutated code did not build:"
            grep -E '^error' "$log" | head -5
        fi
        survived+=("$m")
    fi
    rm -f "$log"
    git checkout -q -- src/
done
echo "== summary"
for c in "${caught[@]+"${caught[@]}"}"; do
    echo "caught:   $c"
done
for s in "${survived[@]+"${survived[@]}"}"; do
    echo "SURVIVED: $s"
done
if [ "${#survived[@]}" -gt 0 ]; then
    echo "mutants: ${#survived[@]} of ${#mutations[@]} mutations caught by no test" >&2
    exit 1
fi
echo "mutants: all ${#mutations[@]} mutations caught"
