#!/usr/bin/env bash
# On the GPU machine (device tool), one call: the whole GPU suite, then the decode loops'
# GPU time a step, then the A/B of the switches not yet measured, then host time per
# primitive. Sections start only while time is left (STOP seconds into the call).
#   carry: .carry   (.carry/_core.abi3.so built here; .carry/whl/mlx_lm-*.whl), or .carryx
#   (the same, the library xz-compressed) beside .mlx/1
#   STOP=420 [SUITE_S=300] [TESTS="files"] [TESTS_K="pytest -k expression"]
#       [LOOPS="model:quant ..."] [NCU="model:quant ..."]
#       [AB="SETTING:model:quant ..."] \
#       bash scripts/device_suite_and_decode.sh
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/device_install.sh
STOP=${STOP:-420}
echo "== first the tests of what is new ($SECONDS s)"
timeout "${TESTS_S:-150}" python3 -m pytest -q -p no:cacheprovider -n 15 -m gpu -rf \
    ${TESTS_K:+-k "$TESTS_K"} ${TESTS-tests/python/test_cuda_eval_fusion.py tests/python/test_cuda_early_launch.py \
    tests/python/test_cuda_eager_graphs.py tests/python/test_cuda_gemv.py \
    tests/python/test_cuda_qmv_mma.py tests/python/test_fast_attention.py} 2>&1 \
    | grep -E "passed|failed|^FAILED|^ERROR|Error" | cut -c1-300 | head -30
if [ "${SUITE_S:-0}" -gt 0 ]; then
    echo "== suite ($SECONDS s)"
    timeout "$SUITE_S" python3 -m pytest -q -p no:cacheprovider -n 15 -m gpu -rf tests/python 2>&1 \
        | tee "$OUT/suite.log" | grep -E "passed|failed|^FAILED|^ERROR" | cut -c1-250 | head -40
    echo "suite progress: $(grep -E '^[.sFExX]+ +\[' "$OUT/suite.log" | tail -1 | grep -oE '\[ *[0-9]+%\]')," \
         "F/E marks: $(grep -E '^[.sFExX]+ +\[' "$OUT/suite.log" | tr -cd 'FE' | wc -c)"
fi
loop() {
    timeout 45 python3 bench/decode_loop.py --model "$1" --quant "$2" --seconds 3 "${@:3}" 2>&1 \
        | grep -E "kiln:|issuing|GPU time"
}
echo "== decode ($SECONDS s)"
for spec in ${LOOPS-llama-1b:q4 llama-1b:bf16 llama-8b:q4 llama-8b:bf16}; do
    IFS=: read -r model quant <<<"$spec"
    [ "$SECONDS" -gt "$STOP" ] && break
    loop "$model" "$quant" --gpu-time 15
done
echo "== kernel times a step, each alone (ncu) ($SECONDS s)"
# ncu runs the kernels one at a time (no gaps, no overlap): beside "GPU time a step" above,
# the difference is what the pipelined step loses between kernels.
for spec in ${NCU-llama-1b:bf16 llama-8b:bf16}; do
    IFS=: read -r model quant <<<"$spec"
    [ "$SECONDS" -gt "$STOP" ] && break
    command -v ncu >/dev/null || { echo "no ncu"; break; }
    timeout 120 ncu --clock-control none --profile-from-start off --csv \
        --metrics gpu__time_duration.sum python3 bench/decode_loop.py --model "$model" \
        --quant "$quant" --seconds 0.5 --ncu 2 > "$OUT/ncu_${model}_$quant.csv" 2>&1
    echo "[$model $quant] $(python3 bench/ncu_table.py "$OUT/ncu_${model}_$quant.csv" --steps 2 --rows 24)"
done
echo "== A/B ($SECONDS s)"
# (The bf16 rows are GPU-bound in the dense few-row product: another block shape too.)
for case in ${AB-KILN_L2_PREFETCH=0:llama-1b:q4 KILN_EARLY_TRIGGER=1:llama-1b:q4 \
            KILN_GROUP_DENSE=1:llama-1b:bf16 KILN_L2_PREFETCH=0:llama-8b:bf16 \
            KILN_EARLY_TRIGGER=1:llama-8b:bf16 KILN_GROUP_DENSE=1:llama-8b:bf16}; do
    IFS=: read -r setting model quant <<<"$case"
    [ "$SECONDS" -gt "$STOP" ] && break
    env "$setting" bash -c "$(declare -f loop); loop $model $quant --gpu-time 15" | sed "s/^/[$setting] /"
done
if [ "$SECONDS" -lt "$STOP" ]; then
    timeout 40 python3 bench/decode_loop.py --model llama-1b --quant bf16 --seconds 1 --host-ops 3 \
        2>&1 | grep -v "^ready"
fi
echo "== training step, captured launches plain / early ($SECONDS s)"
for setting in KILN_EARLY_LAUNCH_IN_GRAPHS=0 KILN_EARLY_LAUNCH_IN_GRAPHS=1; do
    [ "$SECONDS" -gt "$STOP" ] && break
    env "$setting" timeout 90 python3 bench/gpu.py --systems kiln-train --no-eager-ops 2>&1 \
        | grep -E "train" | sed "s/^/[$setting] /"
done
echo "== end ($SECONDS s)"
