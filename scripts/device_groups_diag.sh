#!/usr/bin/env bash
# On the GPU machine (device tool, carry .carryx): which calls of an evaluation ran together
# and what kept the others apart (KILN_LOG=groups), for the eval-fusion tests and one short
# llama 1B bf16 decode loop; each distinct log line with its count.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/device_install.sh
KILN_LOG=groups timeout 90 python3 -m pytest -q -p no:cacheprovider -s -m gpu \
    tests/python/test_cuda_eval_fusion.py 2>&1 | grep -E "kiln groups|passed|failed|Error" \
    | sort | uniq -c | sort -rn | head -40
KILN_LOG=groups timeout 60 python3 bench/decode_loop.py --model llama-1b --quant bf16 \
    --seconds 0.2 2>&1 | grep "kiln groups" | sort | uniq -c | sort -rn | head -20
