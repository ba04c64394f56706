#!/usr/bin/env bash
# Every test kiln has: formatting and lints, the Rust workspace (release: the graph tests run
# million-node chains), then the Python package built and tested against numpy and MLX, and
# third-party MLX packages (mlx-lm) run on kiln through its mlx alias (tests/clients).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all --check
cargo clippy --workspace --all-targets --release -- -D warnings
# NVRTC from pip (nvidia-cuda-nvrtc-cu12, where installed): kiln-cuda's offline build checks
# compile the kernels without a GPU (skipped without it).
pip_dir() {
    python3 -c "import importlib.util as u, os, sys; s = u.find_spec(sys.argv[1]); \
print(os.path.join(list(s.submodule_search_locations)[0], sys.argv[2]) if s else '')" "$1" "$2" \
        2>/dev/null || true
}
nvrtc_lib=$(pip_dir nvidia.cuda_nvrtc lib)
if [ -n "$nvrtc_lib" ]; then
    LD_LIBRARY_PATH="${nvrtc_lib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" cargo test --workspace --release
else
    cargo test --workspace --release
fi
python3 -m pip install --quiet .
python3 -m pytest tests/python tests/clients -q
