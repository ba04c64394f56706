#!/usr/bin/env bash
# On the GPU machine (device tool, carry .carryx): a decode step's products alone, kiln's
# dense and 4-bit beside torch's dense (bench/qmv_gpu.py), then each product once under
# `ncu --set full`: the details page (throughputs, occupancy, warp states) and the raw
# stall-reason metrics as CSV under $OUT, summarised by bench/ncu_sections.py.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/device_install.sh
for model in ${MODELS-llama-8b}; do
    timeout 90 python3 bench/qmv_gpu.py --model "$model" --torch 2>&1 | sed "s/^/[$model] /"
done
command -v ncu >/dev/null || { echo "no ncu"; exit 0; }
echo "== ncu --set full ($SECONDS s)"
timeout "${NCU_S:-240}" ncu --profile-from-start off --set full -f -o "$OUT/qmv" \
    python3 bench/qmv_gpu.py --model "${NCU_MODEL:-llama-8b}" --ncu > "$OUT/qmv_ncu.log" 2>&1
tail -3 "$OUT/qmv_ncu.log"
ncu --import "$OUT/qmv.ncu-rep" --csv --page details > "$OUT/qmv_details.csv" 2>&1
ncu --import "$OUT/qmv.ncu-rep" --csv --page raw > "$OUT/qmv_raw.csv" 2>&1
python3 bench/ncu_sections.py "$OUT/qmv_details.csv" "$OUT/qmv_raw.csv"
echo "== end ($SECONDS s)"
