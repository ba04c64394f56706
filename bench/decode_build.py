"""The Python build of one decode step's graph, alone: mlx-lm's model at a `bench/llm.py` shape
with lazy weights (never evaluated, so an 8B model costs no memory), a KV cache holding
--context evaluated entries, and `model(token, cache)` plus generate_step's log-softmax and
argmax built --steps times (the cache put back each time) and never evaluated. Prints the
median build time and the step's node count; runs on kiln through its `mlx` alias, or real
MLX with --mlx. Nothing here needs a GPU: this is host work only.

    python3 bench/decode_build.py --model llama-8b --quant q4 [--mlx]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llm  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="llama-8b", choices=list(llm.MODELS))
    p.add_argument("--quant", default="q4", choices=["bf16", "q8", "q4"])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--mlx", action="store_true")
    args = p.parse_args()
    if not args.mlx:
        import kiln

        kiln.alias_mlx()
    import mlx.core as mx
    from mlx_lm import utils as lm_utils
    from mlx_lm.models.cache import make_prompt_cache

    mx.set_default_device(mx.cpu)
    _, config = llm.MODELS[args.model]
    model_class, args_class = lm_utils._get_classes(config)
    model = model_class(args_class.from_dict(dict(config)))
    model.set_dtype(mx.bfloat16)
    if args.quant in llm.QUANT_BITS:
        model, _ = lm_utils.quantize_model(model, dict(config), llm.GROUP, llm.QUANT_BITS[args.quant])
    model.eval()
    cache = make_prompt_cache(model)
    n_kv, hd = config["num_key_value_heads"], config.get("head_dim") or config["hidden_size"] // config[
        "num_attention_heads"]
    cap = (args.context // 256 + 1) * 256
    base = mx.zeros((1, n_kv, cap, hd), dtype=mx.bfloat16)
    mx.eval(base)

    def reset():
        # A fresh view of the evaluated buffer each time: the cache's slice assignment
        # replaces the node of the array it holds, so holding `base` itself would chain every
        # step's writes onto it (a graph and its memory growing each step).
        for c in cache:
            c.keys, c.values, c.offset = base[:], base[:], args.context

    step = llm.greedy_step(mx, model, cache)
    tok = mx.array([1])
    mx.eval(tok)
    times = []
    for i in range(args.steps + 5):
        reset()
        t = time.process_time()
        y, lp = step(tok)
        dt = time.process_time() - t
        if i >= 5:
            times.append(dt)
        del y, lp
    q = statistics.quantiles(times, n=10)
    print(f"p10 {q[0] * 1e3:.3f} p90 {q[-1] * 1e3:.3f}")
    print(f"{args.model} {args.quant} {'mlx' if args.mlx else 'kiln'}: build median "
          f"{statistics.median(times) * 1e3:.3f} ms, min {min(times) * 1e3:.3f} ms over {args.steps}")


if __name__ == "__main__":
    main()
