#!/usr/bin/env bash
# On the GPU machine (device tool): the attention kernels' GPU tests, then bench/fast_gpu.py's
# attention rows with every Hopper form (forward and backward), beside torch in the same run.
#   carry: .carry  (.carry/_core.abi3.so: the abi3 extension built here)
#   bash scripts/device_attention.sh            # tests, then the bench
#   TESTS=0 bash scripts/device_attention.sh    # the bench only
# Writes $OUT/attention_tests.log and $OUT/attention_bench.log.
set -uo pipefail
cd "$(dirname "$0")/.."
cp .carry/_core.abi3.so python/kiln/_core.abi3.so
export PYTHONPATH="$PWD/python" PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp}
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
if [ "${TESTS:-1}" != 0 ]; then
    echo "== attention GPU tests"
    timeout "${TEST_S:-240}" python3 -m pytest -q -p no:cacheprovider -n 14 -m gpu -rf \
        tests/python/test_cuda_fast_paths.py tests/python/test_attention_fused_vjp.py \
        tests/python/test_attention_sinks.py 2>&1 | tee "$OUT/attention_tests.log" \
        | grep -E "passed|failed|^FAILED|^ERROR" | cut -c1-200 | head -40
fi
echo "== attention bench ($SECONDS s)"
timeout "${BENCH_S:-200}" python3 bench/fast_gpu.py --only attention attention-bwd \
    --reps "${REPS:-5}" --hopper --no-mlx 2>&1 | tee "$OUT/attention_bench.log" \
    | grep -E "attention|workload"
echo "== end ($SECONDS s)"
