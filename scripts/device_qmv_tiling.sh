#!/usr/bin/env bash
# On the GPU machine (device tool, carry .carryx): the 4-bit product's tiling swept through
# KILN_QMV_TILING=warps,stages (one setting for every shape): each product alone under ncu
# (bench/qmv_gpu.py --ncu, kernel times in us), then a decode step's GPU time (the products
# pipelined among the step's other kernels), for each setting in TILINGS.
#   [TILINGS="0,0 4,3 ..."] [MODELS="llama-8b llama-1b"] bash scripts/device_qmv_tiling.sh
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/device_install.sh
for t in ${TILINGS-0,0 4,3 8,3 4,4 16,2 16,3}; do
    for model in ${MODELS-llama-8b llama-1b}; do
        KILN_QMV_TILING=$t timeout 60 ncu --clock-control none --profile-from-start off --csv \
            -k regex:qmv_mma --metrics gpu__time_duration.sum python3 bench/qmv_gpu.py \
            --model "$model" --ncu > "$OUT/tiling.csv" 2>&1
        python3 -c "import sys; sys.path.insert(0, 'bench'); import ncu_table as t; \
print('[$t $model] ncu us:', ' '.join(f'{us:.1f}' for *_, us in t.kernel_times(open('$OUT/tiling.csv').read())))"
        KILN_QMV_TILING=$t timeout 45 python3 bench/decode_loop.py --model "$model" --quant q4 \
            --seconds 1 --gpu-time 15 2>&1 | grep -E "GPU time" | sed "s/^/[$t $model] /"
    done
done
echo "== end ($SECONDS s)"
