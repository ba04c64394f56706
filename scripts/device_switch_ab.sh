#!/usr/bin/env bash
# On the GPU machine (device tool, carry .carryx built from main): kernel forms that sit behind
# a switch until their GPU tests pass. First the tests with the switches on, then the decode
# loops with them off and on (interleaved, ROUNDS times; the switches are read once a process),
# then the LOOPS' first model's step under ncu with them on (bench/ncu_table.py).
#   [SWITCHES="KILN_QMV_X_PASS=1 KILN_DECODE_MERGE_ROWS=1"] [LOOPS="llama-8b:q4 llama-1b:q4"]
#   [ROUNDS=2] [TESTS="files"] bash scripts/device_switch_ab.sh
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/device_install.sh
SWITCHES=${SWITCHES-KILN_QMV_X_PASS=1 KILN_DECODE_MERGE_ROWS=1}
LOOPS=${LOOPS-llama-8b:q4 llama-1b:q4}
TESTS=${TESTS-tests/python/test_cuda_qmv_mma.py tests/python/test_fast_attention.py \
tests/python/test_quantized_matmul_fused.py tests/python/test_attention_sinks.py}
echo "== tests with $SWITCHES ($SECONDS s)"
env $SWITCHES timeout "${TESTS_S:-150}" python3 -m pytest -q -p no:cacheprovider -n 15 -m gpu -rf \
    $TESTS 2>&1 | grep -E "passed|failed|^FAILED|^ERROR" | cut -c1-300 | head -30
for round in $(seq "${ROUNDS:-2}"); do
    for setting in off on; do
        for spec in $LOOPS; do
            IFS=: read -r model quant <<<"$spec"
            if [ $setting = on ]; then set_env=$SWITCHES; else set_env=KILN_NOTHING=1; fi
            env $set_env timeout 45 python3 bench/decode_loop.py --model "$model" --quant "$quant" \
                --seconds 2 --gpu-time 15 2>&1 | grep -E "kiln:|GPU time" | tr '\n' ' ' \
                | sed "s/^/[$setting $model $quant] /"
            echo
        done
    done
done
command -v ncu >/dev/null || { echo "no ncu"; exit 0; }
IFS=: read -r model quant <<<"${LOOPS%% *}"
echo "== $model $quant step under ncu, switches on ($SECONDS s)"
env $SWITCHES timeout "${NCU_S:-120}" ncu --clock-control none --profile-from-start off --csv \
    --metrics gpu__time_duration.sum python3 bench/decode_loop.py --model "$model" \
    --quant "$quant" --seconds 0.5 --ncu 2 > "$OUT/step_ncu.csv" 2>&1
python3 bench/ncu_table.py "$OUT/step_ncu.csv" --steps 2 --rows 14
echo "== end ($SECONDS s)"
