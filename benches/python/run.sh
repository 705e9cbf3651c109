#!/usr/bin/env bash
# atomflake for Python against the PyPI packages (compare.py): a venv of their own in
# target/, atomflake built in release with maturin, then one run.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=target/bench-python-venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check 'maturin>=1.9.4,<2' snowflake-id==1.0.2 \
    sonyflake-turbo==1.0.1 uuid-utils==1.2.0
VIRTUAL_ENV=$PWD/$venv CARGO_TARGET_DIR=$PWD/target "$venv/bin/maturin" develop --release -q -m python/Cargo.toml
"$venv/bin/python" benches/python/compare.py
