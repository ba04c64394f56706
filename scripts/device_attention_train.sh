#!/usr/bin/env bash
# On the GPU machine (device tool, carry .carryx): the attention forward A/B of
# KILN_HOPPER_CAUSAL (persistent against pingpong, the default), interleaved twice (the
# shared hosts' run-to-run noise is about 5%), then each kernel's own time in one compiled
# training step of bench/harness.py at the anchor size (ncu, summed by bench/ncu_table.py).
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/device_install.sh
for form in ${FORMS-persistent pingpong persistent pingpong}; do
    KILN_HOPPER_CAUSAL=$form timeout 150 python3 bench/fast_gpu.py --only attention --reps 5 \
        --no-mlx 2>&1 | grep -E "TFLOP" | sed "s/^/[causal $form] /"
done
echo "== training step kernels ($SECONDS s)"
command -v ncu >/dev/null || { echo "no ncu"; exit 0; }
timeout "${TRAIN_S:-240}" ncu --clock-control none --profile-from-start off --csv \
    --metrics gpu__time_duration.sum python3 -c "import sys; sys.path.insert(0, 'bench'); \
import harness; harness.TRAIN_SIZE = 'anchor'; \
print(harness.train_step_bench('kiln', True, ncu_steps=1))" > "$OUT/train_ncu.csv" 2>&1
grep -E "'sec'" "$OUT/train_ncu.csv" | tail -1
python3 bench/ncu_table.py "$OUT/train_ncu.csv" --steps 1 --rows 40
echo "== end ($SECONDS s)"
