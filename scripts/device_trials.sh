#!/usr/bin/env bash
# On the GPU machine (device tool): the trial switches session 26 left off by default, in one
# call: their GPU tests, then their A/B timings beside the defaults.
#   - KILN_QMV_STREAM=1 (4-bit decode products on resident blocks walking tiles).
#   carry: .carry  (.carry/_core.abi3.so; .carry/whl/mlx_lm-*.whl for the decode loops)
#   bash scripts/device_trials.sh
# A trial that passes its tests and wins its A/B becomes the default (then drop its switch).
set -uo pipefail
cd "$(dirname "$0")/.."
cp .carry/_core.abi3.so python/kiln/_core.abi3.so
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/whl/*.whl
export PYTHONPATH="$PWD/python:/tmp/site" PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp}
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
echo "== trial tests"
timeout "${TEST_S:-200}" python3 -m pytest -q -p no:cacheprovider -m gpu -rf \
    tests/python/test_cuda_qmv_mma.py -k "streaming_form" 2>&1 | tee "$OUT/trial_tests.log" \
    | grep -E "passed|failed|^FAILED|^ERROR" | cut -c1-200 | head -30
echo "== decode A/B ($SECONDS s)"
SETTINGS="-;KILN_QMV_STREAM=1" LOOP_SECONDS=${LOOP_SECONDS:-5} timeout "${DECODE_S:-300}" \
    bash scripts/device_decode_ab.sh llama-8b:q4 2>&1 | tee "$OUT/trial_decode.log"
echo "== end ($SECONDS s)"
