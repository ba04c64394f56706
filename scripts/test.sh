#!/usr/bin/env bash
# Every test kiln has: formatting and lints, the Rust workspace (release: the graph tests run
# million-node chains), then the Python package built and tested against numpy.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all --check
cargo clippy --workspace --all-targets --release -- -D warnings
cargo test --workspace --release
python3 -m pip install --quiet .
python3 -m pytest tests/python -q
