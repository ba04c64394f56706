#!/usr/bin/env bash
# On the GPU machine (device tool): A/B of decode-loop switches in one call. For each
# MODEL:QUANT and each setting (a space-separated list of VAR=value pairs, `-` for none) runs
# bench/decode_loop.py and prints its step split (build / issue / wait / step, tok/s).
#   carry: .carry  (.carry/_core.abi3.so, .carry/whl/mlx_lm-*.whl)
#   SETTINGS="KILN_ASYNC_THREAD=0;KILN_ASYNC_THREAD=gpu;KILN_ASYNC_THREAD=gpu KILN_BLOCKING_EVENTS=1" \
#   bash scripts/device_decode_ab.sh llama-1b:bf16 llama-8b:q4
# (`;` separates the settings; LOOP_ARGS=--tiny for a CPU smoke test.)
set -uo pipefail
cd "$(dirname "$0")/.."
cp .carry/_core.abi3.so python/kiln/_core.abi3.so
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/whl/*.whl
export PYTHONPATH="$PWD/python:/tmp/site" PYTHONUNBUFFERED=1
IFS=';' read -r -a settings <<<"${SETTINGS:--}"
for spec in "$@"; do
    IFS=: read -r model quant <<<"$spec"
    for setting in "${settings[@]}"; do
        vars=()
        [ "$setting" != "-" ] && read -r -a vars <<<"$setting"
        printf '%-48s ' "[${setting}]"
        env "${vars[@]}" timeout 120 python3 bench/decode_loop.py --model "$model" \
            --quant "$quant" --seconds "${LOOP_SECONDS:-6}" ${LOOP_ARGS:-} 2>&1 | grep -v -E "^(ready|\[INFO\])"
    done
done
