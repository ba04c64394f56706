#!/usr/bin/env bash
# On the GPU machine (device tool), the call after `bash scripts/mlx_cuda_unpack.sh` with
# carry [".mlx/1"]: joins MLX-CUDA, then in one run the LLM table of kiln beside MLX-CUDA
# (bench/llm.py: prefill and decode, 1B and 8B, bf16 and 4-bit), then the decode loop's A/B
# of the switch being measured (AB, default KILN_EAGER_GRAPHS=1) on the four rows, with the
# GPU's own time a step. Sections start only while time is left (STOP seconds in).
#   carry: .mlx/2 .carry    STOP=480 bash scripts/device_peers_and_ab.sh
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/device_install.sh
bash scripts/mlx_cuda_unpack.sh 2>&1 | tail -2
[ -f /root/mlx_site/env.sh ] && . /root/mlx_site/env.sh
export PYTHONPATH="$PWD/python:/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
STOP=${STOP:-480}
AB=${AB:-KILN_EAGER_GRAPHS=1}
echo "== llm table ($SECONDS s)"
timeout 300 python3 bench/llm.py --systems kiln mlx --models llama-1b llama-8b --quant bf16 q4 \
    --gen 128 --reps 1 --json "$OUT/llm.json" 2>&1 | tail -30
echo "== decode A/B: default / $AB ($SECONDS s)"
for spec in llama-1b:q4 llama-1b:bf16 llama-8b:q4 llama-8b:bf16; do
    IFS=: read -r model quant <<<"$spec"
    for setting in KILN_NOTHING=1 "$AB"; do
        [ "$SECONDS" -gt "$STOP" ] && break 2
        env "$setting" timeout 45 python3 bench/decode_loop.py --model "$model" --quant "$quant" \
            --seconds 3 --gpu-time 15 2>&1 | grep -E "kiln:|issuing|GPU time" | sed "s/^/[$setting] /"
    done
done
echo "== end ($SECONDS s)"
