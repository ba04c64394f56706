#!/usr/bin/env bash
# On the GPU machine (device tool): where a pipelined decode step's host time goes. Runs
# bench/decode_loop.py for each MODEL:QUANT given and samples it with py-spy (--native: the
# Rust frames of kiln's extension too), writing collapsed stacks to $OUT/stacks_MODEL_QUANT.txt
# and the loop's step split to stdout. MODEL:QUANT:FLAGS, FLAGS a comma list: `graphs` runs it
# with KILN_EAGER_GRAPHS=1, `thread` with KILN_ASYNC_THREAD=1.
#   carry: .carry  (.carry/_core.abi3.so, .carry/whl/mlx_lm-*.whl, .carry/tools/py_spy-*.whl)
#   bash scripts/device_decode_profile.sh llama-8b:q4 llama-1b:bf16
# Summarise here with: python3 scripts/stacks_summary.py /work/.device/.../stacks_*.txt
set -uo pipefail
cd "$(dirname "$0")/.."
cp .carry/_core.abi3.so python/kiln/_core.abi3.so
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/whl/*.whl
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/spy .carry/tools/py_spy-*.whl
export PYTHONPATH="$PWD/python:/tmp/site" PYTHONUNBUFFERED=1
SPY=$(ls /tmp/spy/bin/py-spy 2>/dev/null || find /tmp/spy -name py-spy -type f | head -1)
for spec in "$@"; do
    IFS=: read -r model quant flags <<<"$spec"
    tag=${model}_${quant}${flags:+_${flags//,/_}}
    ready=/tmp/ready_$tag
    graphs=$([[ ,$flags, == *,graphs,* ]] && echo 1)
    thread=$([[ ,$flags, == *,thread,* ]] && echo 1)
    rm -f "$ready"
    KILN_EAGER_GRAPHS=$graphs KILN_ASYNC_THREAD=$thread python3 bench/decode_loop.py \
        --model "$model" --quant "$quant" --seconds "${LOOP_SECONDS:-10}" --ready "$ready" &
    pid=$!
    for _ in $(seq 600); do [ -e "$ready" ] && break; sleep 0.2; done
    sleep 1
    "$SPY" record --native --pid "$pid" -d 5 -r 400 -f raw \
        -o "${OUT:-/tmp}/stacks_$tag.txt" 2>&1 | tail -3
    # py-spy sees Python threads only: the issuing thread's stacks come from a debugger,
    # a few samples while the loop still runs (GDB_SAMPLES, 0: none).
    for _ in $(seq "${GDB_SAMPLES:-0}"); do
        kill -0 "$pid" 2>/dev/null || break
        timeout 20 cuda-gdb -p "$pid" -batch -ex "thread apply all bt 14" 2>/dev/null \
            | grep -E "^#|^Thread" >> "${OUT:-/tmp}/gdb_$tag.txt"
        echo "== sample" >> "${OUT:-/tmp}/gdb_$tag.txt"
    done
    wait "$pid"
done
