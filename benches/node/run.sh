#!/usr/bin/env bash
# atomflake for Node.js against the npm ID packages (bench.mjs): the peers pinned in
# benches/node/package-lock.json (npm ci), the addon in node/ built in release (npm ci and
# `npm run build -- --release` there; a few minutes the first time, cached in target/ after),
# then one run of the benchmark, about 40 s. Needs Node.js 20 or later, npm, and a Rust
# toolchain for the addon.
set -euo pipefail
cd "$(dirname "$0")/../.."
(cd benches/node && npm ci --no-audit --no-fund)
(cd node && npm ci --no-audit --no-fund && npm run build -- --release)
node benches/node/bench.mjs
