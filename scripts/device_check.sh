#!/usr/bin/env bash
# On the GPU machine (device tool): runs kiln's tests there from a build made here.
#   carry: .carry   (.carry/_core.abi3.so: the extension, built here; .carry/whl/*.whl: pure
#                    Python wheels such as mlx-lm; .carry/ref: an MLX run of tests/clients
#                    made here, since MLX for the CPU is not installed there)
#   bash scripts/device_check.sh [pytest arguments...]
#   bash scripts/device_check.sh tests/python -m gpu   # every GPU test: the gpu parameter of
#       the CPU tests parametrised by `device`, and the GPU-only test_cuda_*.py modules
set -uo pipefail
cd "$(dirname "$0")/.."
cp .carry/_core.abi3.so python/kiln/_core.abi3.so
if ls .carry/whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/whl/*.whl
fi
export PYTHONPATH="$PWD/python:/tmp/site" PYTHONUNBUFFERED=1
[ -d .carry/ref ] && export KILN_MLX_REFERENCE="$PWD/.carry/ref"
nvidia-smi -L
python3 -c "import kiln.core as mx; print('kiln default device:', mx.default_device())"
python3 -m pytest -q -p no:cacheprovider "$@" 2>&1 | tee "${OUT:-/tmp}/pytest.log" | tail -40
