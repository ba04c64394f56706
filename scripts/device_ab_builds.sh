#!/usr/bin/env bash
# On the GPU machine (device tool): two builds A/B on one host, interleaved. carry .carryx
# (A, the baseline) and .carryy (B, the change; the same layout). Each round runs every
# LOOPS spec under each build; then the GPU tests TESTS (-k TESTS_K) under B.
#   [ROUNDS=2] [LOOPS="model:quant ..."] [TESTS="files"] [TESTS_K=expr] bash scripts/device_ab_builds.sh
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/device_install.sh
cp python/kiln/_core.abi3.so /tmp/build_A.so
xz -dc .carryy/_core.abi3.so.xz > /tmp/build_B.so
for round in $(seq "${ROUNDS:-2}"); do
    for build in A B; do
        cp "/tmp/build_$build.so" python/kiln/_core.abi3.so
        for spec in ${LOOPS-llama-8b:q4 llama-1b:bf16}; do
            IFS=: read -r model quant <<<"$spec"
            timeout 45 python3 bench/decode_loop.py --model "$model" --quant "$quant" --seconds 2 \
                --gpu-time 15 2>&1 | grep -E "kiln:|GPU time" | tr '\n' ' ' | sed "s/^/[$build $model $quant] /"
            echo
        done
    done
done
if [ -n "${TESTS:-}" ]; then
    cp /tmp/build_B.so python/kiln/_core.abi3.so
    echo "== tests under B ($SECONDS s)"
    timeout "${TESTS_S:-150}" python3 -m pytest -q -p no:cacheprovider -n 15 -m gpu -rf \
        ${TESTS_K:+-k "$TESTS_K"} $TESTS 2>&1 | grep -E "passed|failed|^FAILED|^ERROR" | cut -c1-300 | head -30
fi
echo "== end ($SECONDS s)"
