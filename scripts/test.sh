#!/usr/bin/env bash
# Every test kiln has: formatting and lints, the Rust workspace (release: the graph tests run
# million-node chains), then the Python package built and tested against numpy and MLX, and
# third-party MLX packages (mlx-lm) run on kiln through its mlx alias (tests/clients).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all --check
cargo clippy --workspace --all-targets --release -- -D warnings
cargo test --workspace --release
python3 -m pip install --quiet .
python3 -m pytest tests/python tests/clients -q
