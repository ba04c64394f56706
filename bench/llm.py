"""LLM inference rows: mlx-lm's own llama, qwen3 and qwen3_moe models, built from configs with
random weights (nothing is downloaded), run through kiln's `mlx` alias, beside MLX-CUDA (the
real `mlx` package) and torch (HF transformers, eager and torch.compile with a static cache),
each system in its own process, one table (and --json). What is measured:

- generation (the default mode): batch 1, a --prompt token prompt (512; random tokens from a
  fixed seed), --gen generated tokens (128), greedy, through `mlx_lm.generate.generate_step`
  (the path mlx-lm users hit: one async_eval per step). Prefill = the time to the first token
  (generate_step's first yield comes after the prompt's forward and the first sample: prefill
  tok/s is --prompt over it); decode = the steady rate over the remaining --gen - 1 tokens (first
  yield to last). Each model is warmed up first (a 16-token prompt and 8 tokens, then one
  generation of the real lengths, untimed) so kernel builds are left out; then --reps timed
  generations, medians reported. Peak memory: `mx.get_peak_memory()` over a timed generation
  (reset after the model is built: weights + KV cache + activations). Each row also splits
  a pipelined decode step's host time (32 steps after the timed runs): the Python build of
  the step's graph, async_eval's issuing of it, the wait for the previous token (kiln: with
  its eager-graph counters; `KILN_EAGER_GRAPHS=1` turns those graphs on). Quantized rows:
  `mlx_lm.utils.quantize_model(model, config, 64, bits)` (mlx-lm's convert path; affine,
  group 64) of the bf16 model;
- torch: `AutoModelForCausalLM.from_config` (LlamaForCausalLM, Qwen3ForCausalLM,
  Qwen3MoeForCausalLM; random init, bf16, sdpa attention) and `model.generate` (greedy, no EOS),
  timed by CUDA events recorded from a logits processor at every step (no extra syncs):
  first-token and decode as above. `torch-compile`: the same with
  `cache_implementation="static"`, which makes transformers compile the decode step itself
  (torch.compile, mode reduce-overhead; the prefill stays eager; warmed up with two generations
  of the real lengths, so the static cache keeps one shape); the JSON row says how many graphs
  dynamo compiled, and the row is marked skipped, with the error, when that fails. torch has no 8- or 4-bit rows
  (n/a: no quantization package is assumed);
- roofline: each decode row's tokens/s times the bytes a decode step must read (every leaf of
  the model's parameters as stored: packed weights, scales, biases, embeddings, norms; for
  the mixture-of-experts model the routed experts count num_experts_per_tok / num_experts of
  their bytes) over --bandwidth (4.8e12 B/s, the H200's HBM3e); 1.00 = at memory bandwidth;
- --attention: decode attention alone (1 query, 32 query heads over 8 KV heads, D 128, bf16)
  for each of --keys (512 4096 16384) keys, the keys a slice `k_buf[..., :n, :]` of a larger
  preallocated cache as mlx-lm's KVCache hands them (capacity: the next multiple of 256 above
  n): `mx.fast.scaled_dot_product_attention` (kiln, MLX) beside torch's
  `F.scaled_dot_product_attention` (enable_gqa, and with the KV heads repeated as HF's
  repeat_kv does); us per call (50 calls back to back, one sync, median of --reps);
- --check: kiln against real MLX on the CPU: 2-layer float32 configs of each architecture
  (the same numpy-made weights in both processes), 16 greedy tokens from a 32-token prompt,
  and the same quantized to 8 and 4 bits; prints match / mismatch and the largest difference
  of the first step's log-probabilities.

    python3 bench/llm.py                                  # every installed system, all models
    python3 bench/llm.py --systems kiln mlx --models llama-8b --quant bf16 q4 --json $OUT/llm.json
    python3 bench/llm.py --systems torch torch-compile --models llama-1b llama-8b --json $OUT/t.json
    python3 bench/llm.py --table $OUT/llm.json $OUT/t.json   # the merged table of earlier runs
    python3 bench/llm.py --attention --keys 512 4096 16384
    python3 bench/llm.py --check                          # kiln vs MLX tokens, CPU, seconds
    python3 bench/llm.py --tiny --systems kiln mlx        # smoke test: 2 layers, hidden 256

Models (--models): llama-1b (Llama-3.2-1B's shapes), llama-8b (Llama-3-8B), qwen3-1.7b and
qwen3-8b (Qwen3's), qwen3-moe (Qwen3-30B-A3B's layers, 24 of its 48: hidden 2048, 128 experts,
8 active). Systems (--systems): kiln, mlx, torch, torch-compile; one whose packages are not
installed is skipped with a note (kiln and mlx need mlx-lm; torch needs transformers).
MLX-CUDA on the GPU machine: `. /root/mlx_site/env.sh` first (scripts/mlx_cuda_unpack.sh).
--device auto (default) runs each system on its GPU when it finds one (rows off a GPU are
marked "(cpu)"). --system-timeout bounds each system; --json is rewritten after each one and
keeps the rows a stopped system measured before its limit. Adding a system: one
run_<system>(args, emit) and an entry in RUNNERS and PACKAGES.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import zlib

BANDWIDTH = 4.8e12
GROUP = 64  # quantization group size
QUANT_BITS = {"q8": 8, "q4": 4}
WARM_PROMPT, WARM_GEN = 16, 8
ATTN_CALLS = 50
ATTN_HEADS, ATTN_KV_HEADS, ATTN_D = 32, 8, 128
CHECK_PROMPT, CHECK_GEN = 32, 16
# kiln's decode-path switches, recorded in its rows when set.
KILN_SWITCHES = ("KILN_ASYNC_THREAD", "KILN_EAGER_GRAPHS", "KILN_BLOCKING_EVENTS")

LLAMA_ROPE3 = {"rope_type": "llama3", "factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
               "original_max_position_embeddings": 8192}
# name -> (size class for the targets, mlx-lm / transformers config)
MODELS = {
    "llama-1b": ("1b", {
        "model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32,
        "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 8192, "vocab_size": 128256,
        "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "rope_scaling": LLAMA_ROPE3,
        "max_position_embeddings": 131072, "tie_word_embeddings": True}),
    "llama-8b": ("8b", {
        "model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 14336, "vocab_size": 128256,
        "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "max_position_embeddings": 8192,
        "tie_word_embeddings": False}),
    "qwen3-1.7b": ("1b", {
        "model_type": "qwen3", "hidden_size": 2048, "num_hidden_layers": 28, "num_attention_heads": 16,
        "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 6144, "vocab_size": 151936,
        "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "max_position_embeddings": 40960,
        "tie_word_embeddings": True}),
    "qwen3-8b": ("8b", {
        "model_type": "qwen3", "hidden_size": 4096, "num_hidden_layers": 36, "num_attention_heads": 32,
        "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 12288, "vocab_size": 151936,
        "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "max_position_embeddings": 40960,
        "tie_word_embeddings": False}),
    "qwen3-moe": ("moe", {
        "model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 24, "num_attention_heads": 32,
        "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144, "moe_intermediate_size": 768,
        "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [],
        "norm_topk_prob": True, "vocab_size": 151936, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
        "max_position_embeddings": 40960, "tie_word_embeddings": False}),
}
CHECK_MODELS = ["llama-1b", "qwen3-1.7b", "qwen3-moe"]  # one of each architecture


def shrink(config):
    """--tiny (and --check): the same architecture at 2 layers, hidden 256, a 4096-word vocab."""
    c = dict(config, hidden_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             head_dim=64, intermediate_size=512, vocab_size=4096)
    if "num_experts" in c:
        c.update(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=128)
    return c


def model_config(args, name):
    size, config = MODELS[name]
    return size, (shrink(config) if args.tiny or args.check else dict(config))


def expert_share(config):
    """The share of a routed expert layer's bytes one token reads (1 for dense models)."""
    experts = config.get("num_experts") or config.get("num_local_experts")
    return config["num_experts_per_tok"] / experts if experts else 1.0


def is_expert(name):
    return "switch_mlp" in name or ".experts." in name or name.endswith(".experts")


def read_bytes(named_nbytes, config):
    """Bytes a decode step reads: every parameter, routed experts at their active share."""
    share = expert_share(config)
    total = sum(b for _, b in named_nbytes)
    experts = sum(b for n, b in named_nbytes if is_expert(n))
    return total, total - experts + experts * share


def prompt_tokens(n, vocab, seed):
    import numpy as np

    return np.random.default_rng(seed).integers(0, vocab, size=n).tolist()


def label(system, device):
    return system if device == "gpu" else f"{system} ({device})"


def median(xs):
    return statistics.median(xs) if xs else None


# ---- kiln and MLX: mlx-lm on either (the same mlx.core API) ----------------------------------


def pick_device(mx, want, name):
    has_gpu = mx.is_available(mx.gpu)
    if want == "gpu" and not has_gpu:
        raise SystemExit(f"[{name}] --device gpu but {name} finds no GPU")
    dev = "gpu" if (want != "cpu" and has_gpu) else "cpu"
    mx.set_default_device(mx.gpu if dev == "gpu" else mx.cpu)
    return dev


def build_mlx_model(mx, config, quant, seed=0, weights=None, floats="bf16"):
    """An mlx-lm model from its config: seeded random weights (or `weights(model)`'s), cast to
    bf16 (`floats`; 'fp32' keeps float32), quantized for q8/q4 as mlx_lm.convert does."""
    from mlx.utils import tree_flatten
    from mlx_lm import utils as lm_utils

    model_class, args_class = lm_utils._get_classes(config)
    mx.random.seed(seed)
    model = model_class(args_class.from_dict(config))
    if weights is not None:
        model.update(weights(model))
    if floats == "bf16":
        model.set_dtype(mx.bfloat16)
    mx.eval(model.parameters())
    if quant in QUANT_BITS:
        model, _ = lm_utils.quantize_model(model, dict(config), GROUP, QUANT_BITS[quant])
        mx.eval(model.parameters())
    model.eval()
    named = [(k, v.nbytes) for k, v in tree_flatten(model.parameters())]
    return model, named


def mlx_generate(mx, model, prompt, gen):
    """One greedy generation through generate_step: seconds to the first token, the decode
    rate over the rest, and the tokens and first log-probabilities."""
    from mlx_lm.generate import generate_step

    stamps, tokens, first = [], [], None
    t0 = time.perf_counter()
    for tok, logprobs in generate_step(mx.array(prompt), model, max_tokens=gen):
        stamps.append(time.perf_counter())
        tokens.append(int(tok))
        if first is None:
            first = logprobs
    if len(stamps) != gen:
        raise RuntimeError(f"generate_step gave {len(stamps)} tokens, not {gen}")
    decode = (gen - 1) / (stamps[-1] - stamps[0]) if gen > 1 else None
    return stamps[0] - t0, decode, tokens, first


def profile_decode(mx, model, prompt, gen, what):
    """kiln's profiler over one generation: the primitives by host and device time (stderr)."""
    import kiln.profiler

    for tokens, part in [(1, "the prefill (first token only)"), (gen, f"one generation of {gen} tokens")]:
        with kiln.profiler.profile() as prof:
            mlx_generate(mx, model, prompt, tokens)
        table = prof.key_averages().table(sort_by="host_time_total", row_limit=25)
        print(f"[kiln profile] {what}, {part}\n{table}", file=sys.stderr)


def greedy_step(mx, model, cache):
    """generate_step's greedy decode step over `cache`: tokens -> (argmax, log-probabilities)
    of the last position, as lazy arrays."""

    def step(tok):
        logits = model(tok[None], cache=cache)[:, -1, :]
        logprobs = logits - mx.logsumexp(logits, keepdims=True)
        return mx.argmax(logprobs, axis=-1), logprobs.squeeze(0)

    return step


def pipelined_step(mx, step, y, split):
    """One generate_step iteration: builds step n+1 on the lazy token n, async_evals it and
    reads token n; appends the three host times (seconds) to split's build, issue and wait
    lists and returns step n+1's (token, log-probabilities)."""
    t0 = time.perf_counter()
    ny, nlp = step(y)
    t1 = time.perf_counter()
    mx.async_eval(ny, nlp)
    t2 = time.perf_counter()
    y.item()
    t3 = time.perf_counter()
    split["build"].append(t1 - t0)
    split["issue"].append(t2 - t1)
    split["wait"].append(t3 - t2)
    return ny, nlp


def host_split(mx, model, prompt, steps=32):
    """Where a pipelined decode step's host time goes, as generate_step runs it (greedy): the
    Python build of step n+1's graph, async_eval's issuing of it, and the wait for token n;
    medians in ms. With kiln, its eager-graph counters over the steps too."""
    from mlx_lm.models.cache import make_prompt_cache

    step = greedy_step(mx, model, make_prompt_cache(model))
    y, lp = step(mx.array(prompt))
    mx.eval(y, lp)
    for _ in range(4):
        y, lp = step(y)
        mx.eval(y, lp)
    stats = getattr(getattr(sys.modules.get("kiln"), "_core", None), "_eager_graph_stats", None)
    before = stats() if stats else None
    split = {"build": [], "issue": [], "wait": []}
    y, lp = step(y)
    mx.async_eval(y, lp)
    for _ in range(steps):
        y, lp = pipelined_step(mx, step, y, split)
    mx.eval(y, lp)
    out = {f"{k}_ms": median(v) * 1e3 for k, v in split.items()}
    if stats:
        after = stats()
        out["eager_graphs"] = {k: after[k] - before[k] for k in after}
    return out


def run_mlx_lm(args, emit, mx, name):
    dev = pick_device(mx, args.device, name)
    for model_name in args.models:
        size, config = model_config(args, model_name)
        prompt = prompt_tokens(args.prompt, config["vocab_size"], args.seed)
        warm = prompt_tokens(WARM_PROMPT, config["vocab_size"], args.seed + 1)
        for quant in args.quant:
            row = {"mode": "generate", "model": model_name, "quant": quant, "size": size,
                   "system": label(name, dev), "prompt": args.prompt, "gen": args.gen}
            switches = {k: v for k, v in os.environ.items() if k in KILN_SWITCHES}
            if name == "kiln" and switches:
                row["switches"] = switches
            try:
                t = time.perf_counter()
                model, named = build_mlx_model(mx, config, quant, args.seed)
                row["build_s"] = time.perf_counter() - t
                row["param_bytes"], row["read_bytes"] = read_bytes(named, config)
                mlx_generate(mx, model, warm, WARM_GEN)
                mlx_generate(mx, model, prompt, args.gen)
                if args.profile and name == "kiln":
                    profile_decode(mx, model, prompt, args.gen, f"{model_name} {quant}")
                ttfts, decodes, peaks = [], [], []
                for _ in range(args.reps):
                    mx.clear_cache()
                    mx.reset_peak_memory()
                    ttft, decode, _, _ = mlx_generate(mx, model, prompt, args.gen)
                    peaks.append(mx.get_peak_memory())
                    ttfts.append(ttft)
                    decodes.append(decode)
                row.update(ttft_ms=median(ttfts) * 1e3, prefill_tps=args.prompt / median(ttfts),
                           decode_tps=median(decodes), peak_gb=max(peaks) / 1e9,
                           reps_ttft_ms=[x * 1e3 for x in ttfts], reps_decode_tps=decodes)
                row["host"] = host_split(mx, model, prompt)
            except Exception as e:  # noqa: BLE001  (one row's failure is noted, the rest run)
                row["error"] = f"{type(e).__name__}: {e}"[:400]
            emit(row)
            model = None
            gc.collect()
            mx.clear_cache()


def mlx_attention(args, emit, mx, name):
    import numpy as np

    dev = pick_device(mx, args.device, name)
    rng = np.random.default_rng(args.seed)
    scale = ATTN_D**-0.5
    for n in args.keys:
        cap = (n // 256 + 1) * 256
        q = mx.array(rng.standard_normal((1, ATTN_HEADS, 1, ATTN_D), dtype=np.float32)).astype(mx.bfloat16)
        k_buf, v_buf = (mx.array(rng.standard_normal((1, ATTN_KV_HEADS, cap, ATTN_D), dtype=np.float32))
                        .astype(mx.bfloat16) for _ in range(2))
        mx.eval(q, k_buf, v_buf)

        def call():
            k, v = k_buf[..., :n, :], v_buf[..., :n, :]
            mx.async_eval(mx.fast.scaled_dot_product_attention(q, k, v, scale=scale))

        us = attention_time(call, mx.synchronize, args.reps)
        emit(attention_row(n, label(name, dev), us))
        del q, k_buf, v_buf
        mx.clear_cache()


def attention_time(call, sync, reps):
    for _ in range(10):
        call()
    sync()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(ATTN_CALLS):
            call()
        sync()
        times.append((time.perf_counter() - t) / ATTN_CALLS)
    return statistics.median(times) * 1e6


def attention_row(n, system, us):
    kv = 2 * ATTN_KV_HEADS * n * ATTN_D * 2  # K and V, bf16
    return {"mode": "attention", "keys": n, "system": system, "us": us,
            "bytes": kv + 2 * ATTN_HEADS * ATTN_D * 2}


def check_weights(mx, seed):
    """The same float32 weights in any process: numpy from (seed, name); vectors (norms) near 1,
    matrices N(0, 1/fan_in)."""
    import numpy as np
    from mlx.utils import tree_flatten, tree_unflatten

    def make(model):
        out = []
        for k, v in tree_flatten(model.parameters()):
            rng = np.random.default_rng([seed, zlib.crc32(k.encode())])
            if v.ndim == 1:
                a = 1 + 0.1 * rng.standard_normal(v.shape)
            else:
                a = rng.standard_normal(v.shape) * v.shape[-1] ** -0.5
            out.append((k, mx.array(a.astype(np.float32))))
        return tree_unflatten(out)

    return make


def mlx_check(args, emit, mx, name):
    import numpy as np

    dev = pick_device(mx, args.device, name)
    for model_name in CHECK_MODELS:
        _, config = model_config(args, model_name)
        prompt = prompt_tokens(CHECK_PROMPT, config["vocab_size"], args.seed)
        for quant in ["fp32"] + [q for q in args.quant if q in QUANT_BITS]:
            row = {"mode": "check", "arch": config["model_type"], "quant": quant, "system": label(name, dev)}
            try:
                t = time.perf_counter()
                model, _ = build_mlx_model(mx, config, quant, args.seed, weights=check_weights(mx, args.seed),
                                           floats="fp32")
                _, _, tokens, first = mlx_generate(mx, model, prompt, CHECK_GEN)
                row.update(tokens=tokens, logprobs=np.array(first.astype(mx.float32)).tolist(),
                           seconds=time.perf_counter() - t)
            except Exception as e:  # noqa: BLE001
                row["error"] = f"{type(e).__name__}: {e}"[:400]
            emit(row)


def mlx_rows(args, emit, mx, name):
    if args.check:
        mlx_check(args, emit, mx, name)
    elif args.attention:
        mlx_attention(args, emit, mx, name)
    else:
        run_mlx_lm(args, emit, mx, name)


def run_kiln(args, emit):
    import kiln

    kiln.alias_mlx()  # before anything imports mlx: mlx-lm's `import mlx.core` is kiln's
    import mlx.core as mx

    if mx.__name__ != "kiln.core":
        raise SystemExit(f"[kiln] mlx.core resolved to {mx.__name__}, not kiln.core")
    mlx_rows(args, emit, mx, "kiln")


def run_mlx(args, emit):
    import mlx.core as mx

    mlx_rows(args, emit, mx, "mlx")


# ---- torch: HF transformers ------------------------------------------------------------------


def torch_device(torch, want):
    has_gpu = torch.cuda.is_available()
    if want == "gpu" and not has_gpu:
        raise SystemExit("[torch] --device gpu but torch finds no GPU")
    return ("cuda", "gpu") if (want != "cpu" and has_gpu) else ("cpu", "cpu")


def hf_config(config):
    from transformers import AutoConfig

    c = {k: v for k, v in config.items() if k != "model_type"}
    # No EOS: random weights must not stop a generation early.
    return AutoConfig.for_model(config["model_type"], bos_token_id=None, eos_token_id=None, pad_token_id=0, **c)


def run_torch_generate(args, emit, compiled):
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig, LogitsProcessor, LogitsProcessorList

    where, dev = torch_device(torch, args.device)
    name = "torch-compile" if compiled else "torch"
    cuda = where == "cuda"
    extra = {}
    if compiled:
        extra["cache_implementation"] = "static"
        if not cuda:  # transformers compiles on its own only on a GPU; a smoke test asks it to
            from transformers import CompileConfig

            extra["compile_config"] = CompileConfig()
            extra["compile_config"]._compile_all_devices = True

    class Stamp(LogitsProcessor):
        """Marks the moment each step's logits exist: a CUDA event (no sync) or the host clock."""

        def __init__(self):
            self.marks = []

        def __call__(self, input_ids, scores):
            if cuda:
                e = torch.cuda.Event(enable_timing=True)
                e.record()
                self.marks.append(e)
            else:
                self.marks.append(time.perf_counter())
            return scores

    def generate(model, ids, gen):
        stamp = Stamp()
        gc_ = GenerationConfig(max_new_tokens=gen, min_new_tokens=gen, do_sample=False, eos_token_id=None,
                               pad_token_id=0, **extra)
        if cuda:
            torch.cuda.synchronize()
            start = torch.cuda.Event(enable_timing=True)
            start.record()
        else:
            start = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=gc_,
                                 logits_processor=LogitsProcessorList([stamp]))
        if out.shape[1] != ids.shape[1] + gen or len(stamp.marks) != gen:
            raise RuntimeError(f"generate gave {out.shape[1] - ids.shape[1]} tokens ({len(stamp.marks)} steps), "
                               f"not {gen}")
        if cuda:
            torch.cuda.synchronize()
            ms = [start.elapsed_time(e) for e in stamp.marks]
        else:
            ms = [(t - start) * 1e3 for t in stamp.marks]
        decode = (gen - 1) / ((ms[-1] - ms[0]) / 1e3) if gen > 1 else None
        return ms[0] / 1e3, decode

    for model_name in args.models:
        size, config = model_config(args, model_name)
        prompt = prompt_tokens(args.prompt, config["vocab_size"], args.seed)
        warm = prompt_tokens(WARM_PROMPT, config["vocab_size"], args.seed + 1)
        for quant in args.quant:
            row = {"mode": "generate", "model": model_name, "quant": quant, "size": size,
                   "system": label(name, dev), "prompt": args.prompt, "gen": args.gen}
            if quant != "bf16":
                row["na"] = "no quantized torch rows"
                emit(row)
                continue
            model = None
            try:
                t = time.perf_counter()
                torch.manual_seed(args.seed)
                with torch.device(where):
                    model = AutoModelForCausalLM.from_config(hf_config(config), dtype=torch.bfloat16,
                                                             attn_implementation="sdpa")
                model.eval()
                if cuda:
                    torch.cuda.synchronize()
                row["build_s"] = time.perf_counter() - t
                named = [(n, p.numel() * p.element_size()) for n, p in model.named_parameters()]
                row["param_bytes"], row["read_bytes"] = read_bytes(named, config)
                ids = torch.tensor([prompt], device=where)
                if compiled:
                    import torch._dynamo.utils as dynamo_utils

                    torch._dynamo.reset()
                    dynamo_utils.counters.clear()
                # Compiled: no short warm-up, whose other cache length would make dynamo recompile the
                # decode step with a dynamic length (transformers keeps the longest static cache after).
                generate(model, ids if compiled else torch.tensor([warm], device=where),
                         args.gen if compiled else WARM_GEN)
                generate(model, ids, args.gen)
                if compiled:
                    graphs = int(dynamo_utils.counters["stats"].get("unique_graphs", 0))
                    row["compiled_graphs"] = graphs
                    if graphs == 0:
                        raise RuntimeError("transformers ran the static cache uncompiled (no dynamo graphs)")
                ttfts, decodes, peaks = [], [], []
                for _ in range(args.reps):
                    if cuda:
                        torch.cuda.reset_peak_memory_stats()
                    ttft, decode = generate(model, ids, args.gen)
                    ttfts.append(ttft)
                    decodes.append(decode)
                    if cuda:
                        peaks.append(torch.cuda.max_memory_allocated())
                row.update(ttft_ms=median(ttfts) * 1e3, prefill_tps=args.prompt / median(ttfts),
                           decode_tps=median(decodes), reps_ttft_ms=[x * 1e3 for x in ttfts],
                           reps_decode_tps=decodes)
                if peaks:
                    row["peak_gb"] = max(peaks) / 1e9
            except Exception as e:  # noqa: BLE001
                row["error"] = f"{type(e).__name__}: {e}"[:400]
                if compiled:
                    row["skipped"] = True
            emit(row)
            del model
            gc.collect()
            if cuda:
                torch.cuda.empty_cache()


def torch_attention(args, emit):
    import torch
    import torch.nn.functional as F

    where, dev = torch_device(torch, args.device)
    sync = torch.cuda.synchronize if where == "cuda" else (lambda: None)
    g = torch.Generator(device="cpu").manual_seed(args.seed)
    scale = ATTN_D**-0.5
    rep = ATTN_HEADS // ATTN_KV_HEADS
    for n in args.keys:
        cap = (n // 256 + 1) * 256
        q = torch.randn((1, ATTN_HEADS, 1, ATTN_D), generator=g).to(where, torch.bfloat16)
        k_buf, v_buf = (torch.randn((1, ATTN_KV_HEADS, cap, ATTN_D), generator=g).to(where, torch.bfloat16)
                        for _ in range(2))

        def gqa():
            F.scaled_dot_product_attention(q, k_buf[:, :, :n], v_buf[:, :, :n], scale=scale, enable_gqa=True)

        def repeated():
            k = k_buf[:, :, :n].repeat_interleave(rep, dim=1)
            v = v_buf[:, :, :n].repeat_interleave(rep, dim=1)
            F.scaled_dot_product_attention(q, k, v, scale=scale)

        with torch.inference_mode():
            for variant, call in (("sdpa enable_gqa", gqa), ("sdpa repeat_kv", repeated)):
                try:
                    us = attention_time(call, sync, args.reps)
                except Exception as e:  # noqa: BLE001  (enable_gqa needs torch >= 2.5)
                    emit({"note": f"torch {variant}, {n} keys: {type(e).__name__}: {e}"[:300]})
                    continue
                emit(attention_row(n, label(f"torch {variant}", dev), us))
        del q, k_buf, v_buf


def run_torch(args, emit):
    if args.check:
        return
    if args.attention:
        torch_attention(args, emit)
    else:
        run_torch_generate(args, emit, compiled=False)


def run_torch_compile(args, emit):
    if args.check or args.attention:
        return
    run_torch_generate(args, emit, compiled=True)


RUNNERS = {"kiln": run_kiln, "mlx": run_mlx, "torch": run_torch, "torch-compile": run_torch_compile}
# The modules each system needs; a system without one is skipped with a note.
PACKAGES = {"kiln": ["kiln", "mlx_lm"], "mlx": ["mlx", "mlx_lm"], "torch": ["torch", "transformers"],
            "torch-compile": ["torch", "transformers"]}


def missing(system):
    out = []
    for package in PACKAGES[system]:
        try:
            if importlib.util.find_spec(package) is None:
                out.append(package)
        except (ImportError, ValueError):
            out.append(package)
    return out


# ---- the parent: one process per system ------------------------------------------------------


def child_argv(args, system, rows_file):
    cmd = [sys.executable, os.path.abspath(__file__), "--one", system, "--rows-file", rows_file,
           "--models", *args.models, "--quant", *args.quant, "--prompt", str(args.prompt), "--gen", str(args.gen),
           "--reps", str(args.reps), "--device", args.device, "--seed", str(args.seed),
           "--keys", *map(str, args.keys)]
    for flag in ("tiny", "check", "attention", "profile"):
        if getattr(args, flag):
            cmd.append(f"--{flag}")
    return cmd


def run_system(args, system, rows, notes):
    with tempfile.TemporaryDirectory() as tmp:
        rows_file = os.path.join(tmp, "rows.jsonl")
        t = time.perf_counter()
        # Its own process group, so a stopped system takes its helpers (inductor's workers) along.
        p = subprocess.Popen(child_argv(args, system, rows_file), start_new_session=True)
        try:
            rc = p.wait(timeout=args.system_timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            rc = None
            notes.append(f"{system}: stopped after --system-timeout {args.system_timeout} s (rows so far kept)")
        got = 0
        if os.path.exists(rows_file):
            with open(rows_file) as f:
                for line in f:
                    if not line.strip():
                        continue
                    r = json.loads(line)
                    if "note" in r:
                        notes.append(r["note"])
                    else:
                        rows.append(r)
                        got += 1
        if rc not in (0, None):
            notes.append(f"{system}: exited with {rc} after {got} rows (stderr above)")
        print(f"[{system}] {got} rows in {time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)


def write_json(args, rows, notes):
    if args.json:
        saved = {k: getattr(args, k) for k in ("prompt", "gen", "reps", "bandwidth", "device", "tiny", "models",
                                                 "quant", "keys")}
        with open(args.json, "w") as f:
            json.dump({"args": saved, "rows": rows, "notes": notes}, f, indent=1)


def fmt(x, spec):
    if x is not None:
        return format(x, spec)
    width = "".join(c for c in spec.split(".")[0] if c.isdigit())
    return "-".rjust(int(width or 0))


def ratio(a, b):
    return f"{a / b:.2f}" if a and b else "-"


def roofline(r, bandwidth):
    if r.get("decode_tps") and r.get("read_bytes"):
        return r["decode_tps"] * r["read_bytes"] / bandwidth
    return None


def peer(rows, r, system, key):
    """The `key` of system's row at r's model and quant (the best of torch and torch-compile
    for system 'torch'), on r's device."""
    suffix = r["system"][len(r["system"].split()[0]):]
    names = ("torch", "torch-compile") if system == "torch" else (system,)
    vals = [t.get(key) for t in rows if t.get("mode") == "generate" and t["model"] == r["model"]
            and t["quant"] == r["quant"] and t["system"] in [n + suffix for n in names] and t.get(key)]
    return max(vals) if vals else None


def print_generate(rows, bandwidth):
    gen = [r for r in rows if r.get("mode") == "generate"]
    if not gen:
        return
    first = gen[0]
    print(f"\nGeneration: batch 1, prompt {first['prompt']} tokens, {first['gen']} generated, greedy "
          "(mlx-lm generate_step; torch: HF generate); medians of the timed runs. roofline = decode tok/s x "
          f"bytes read per token / {bandwidth / 1e12:.2f} TB/s; x mlx, x torch = kiln / peer (prefill/decode "
          "tok/s; torch: the better of eager and compile)")
    print(f"{'model':11s} {'quant':5s} {'system':20s} {'prefill tok/s':>13s} {'first ms':>9s} {'decode tok/s':>12s} "
          f"{'roofline':>8s} {'peak GB':>8s} {'GB read':>8s} {'x mlx':>11s} {'x torch':>11s}")
    order = {m: i for i, m in enumerate(MODELS)}
    qorder = {"bf16": 0, "q8": 1, "q4": 2}
    sysorder = {"kiln": 0, "mlx": 1, "torch": 2, "torch-compile": 3}
    gen.sort(key=lambda r: (order.get(r["model"], 99), qorder.get(r["quant"], 9),
                            sysorder.get(r["system"].split()[0], 9)))
    for r in gen:
        head = f"{r['model']:11s} {r['quant']:5s} {r['system']:20s}"
        if "na" in r:
            print(f"{head} {'n/a':>13s}  ({r['na']})")
            continue
        if "error" in r:
            print(f"{head} {'skipped' if r.get('skipped') else 'failed'}: {r['error'][:150]}")
            continue
        vs = {"mlx": "", "torch": ""}
        if r["system"].split()[0] == "kiln":
            for p in vs:
                pre, dec = peer(rows, r, p, "prefill_tps"), peer(rows, r, p, "decode_tps")
                vs[p] = f"{ratio(r['prefill_tps'], pre)}/{ratio(r['decode_tps'], dec)}" if pre or dec else \
                    ("n/a" if p == "torch" and r["quant"] != "bf16" else "-")
        read = f"{r['read_bytes'] / 1e9:.3g}" if r.get("read_bytes") else "-"
        print(f"{head} {fmt(r.get('prefill_tps'), '13.1f')} {fmt(r.get('ttft_ms'), '9.2f')} "
              f"{fmt(r.get('decode_tps'), '12.1f')} {fmt(roofline(r, bandwidth), '8.2f')} "
              f"{fmt(r.get('peak_gb'), '8.2f')} {read:>8s} {vs['mlx']:>11s} {vs['torch']:>11s}")
    print_targets(gen, rows, bandwidth)


def print_targets(gen, rows, bandwidth):
    """The issue's targets for kiln's rows (> 1 ratios = kiln faster)."""
    lines = []

    def verdict(ok):
        return "-" if ok is None else ("ok" if ok else "BELOW")

    for r in gen:
        if r["system"].split()[0] != "kiln" or "decode_tps" not in r:
            continue
        what = f"{r['model']} {r['quant']}"
        roof = roofline(r, bandwidth)
        mlx_dec, mlx_pre = peer(rows, r, "mlx", "decode_tps"), peer(rows, r, "mlx", "prefill_tps")
        x_mlx = r["decode_tps"] / mlx_dec if mlx_dec else None
        if r["size"] == "8b" and r["quant"] == "bf16":
            lines.append(f"{what:18s} decode roofline {fmt(roof, '.2f')} >= 0.75: {verdict(roof and roof >= 0.75)}")
        if r["size"] == "8b" and r["quant"] == "q4":
            lines.append(f"{what:18s} decode roofline {fmt(roof, '.2f')} >= 0.65: {verdict(roof and roof >= 0.65)}")
            lines.append(f"{what:18s} decode x mlx {fmt(x_mlx, '.2f')} >= 1.2: "
                         f"{verdict(None if x_mlx is None else x_mlx >= 1.2)}")
            peak = r.get("peak_gb")
            lines.append(f"{what:18s} peak memory {fmt(peak, '.2f')} GB < 6: "
                         f"{verdict(None if peak is None else peak < 6)}")
        if r["size"] == "1b" and r["quant"] in ("bf16", "q4"):
            lines.append(f"{what:18s} decode x mlx {fmt(x_mlx, '.2f')} >= 1.5: "
                         f"{verdict(None if x_mlx is None else x_mlx >= 1.5)}")
        x_pre = r["prefill_tps"] / mlx_pre if mlx_pre else None
        lines.append(f"{what:18s} prefill x mlx {fmt(x_pre, '.2f')} >= 1: "
                     f"{verdict(None if x_pre is None else x_pre >= 1)}")
    if lines:
        print("\nTargets (kiln; '-': no peer row to compare)")
        print("\n".join(lines))


def print_attention(rows, bandwidth):
    att = [r for r in rows if r.get("mode") == "attention"]
    if not att:
        return
    print(f"\nDecode attention: 1 query, {ATTN_HEADS} heads over {ATTN_KV_HEADS} KV heads, D {ATTN_D}, bf16, keys a "
          f"slice of a larger cache; us per call ({ATTN_CALLS} back to back, one sync, median); bw = K+V bytes / "
          f"time as a fraction of {bandwidth / 1e12:.2f} TB/s; x = peer / kiln time (> 1 = kiln faster)")
    print(f"{'keys':>6s} {'system':28s} {'us':>9s} {'GB/s':>7s} {'bw':>5s} {'x torch':>8s} {'x mlx':>6s}")
    att.sort(key=lambda r: (r["keys"], r["system"]))
    for r in att:
        gbs = r["bytes"] / r["us"] / 1e3
        vs_t = vs_m = ""
        if r["system"].split()[0] == "kiln":
            t = [o["us"] for o in att if o["keys"] == r["keys"] and o["system"].startswith("torch")]
            m = [o["us"] for o in att if o["keys"] == r["keys"] and o["system"].startswith("mlx")]
            vs_t = f"{min(t) / r['us']:.2f}" if t else "-"
            vs_m = f"{min(m) / r['us']:.2f}" if m else "-"
        print(f"{r['keys']:6d} {r['system']:28s} {r['us']:9.2f} {gbs:7.0f} {gbs * 1e9 / bandwidth:5.2f} "
              f"{vs_t:>8s} {vs_m:>6s}")


def print_check(rows):
    chk = [r for r in rows if r.get("mode") == "check"]
    if not chk:
        return
    print(f"\nkiln vs MLX: {CHECK_GEN} greedy tokens from a {CHECK_PROMPT}-token prompt, 2-layer models, the same "
          "numpy-made weights (q8/q4: quantized from them)")
    by = {}
    for r in chk:
        by.setdefault((r["arch"], r["quant"]), {})[r["system"].split()[0]] = r
    for (arch, quant), got in by.items():
        k, m = got.get("kiln"), got.get("mlx")
        head = f"{arch:10s} {quant:5s}"
        for name, r in (("kiln", k), ("mlx", m)):
            if r is not None and "error" in r:
                print(f"{head} {name} failed: {r['error'][:200]}")
        if not (k and m and "tokens" in k and "tokens" in m):
            for name, r, other in (("kiln", k, "MLX"), ("mlx", m, "kiln")):
                if r is not None and "tokens" in r:
                    print(f"{head} {name} tokens {r['tokens']} (no {other} row to compare)")
            continue
        same = sum(a == b for a, b in zip(k["tokens"], m["tokens"]))
        diverge = next((i for i, (a, b) in enumerate(zip(k["tokens"], m["tokens"])) if a != b), None)
        diff = max(abs(a - b) for a, b in zip(k["logprobs"], m["logprobs"]))
        verdict = "match" if diverge is None else f"MISMATCH from token {diverge}"
        print(f"{head} {verdict:24s} {same}/{len(k['tokens'])} tokens equal, first-step log-prob max |diff| "
              f"{diff:.2e}   (kiln {k.get('seconds', 0):.1f} s, mlx {m.get('seconds', 0):.1f} s)")
        if diverge is not None:
            print(f"{'':16s} kiln {k['tokens']}\n{'':16s} mlx  {m['tokens']}")


def print_host(rows):
    """Each generation row's host split of a decode step (host_split)."""
    gen = [r for r in rows if r.get("mode") == "generate" and r.get("host")]
    if not gen:
        return
    print("\nHost time per pipelined decode step (ms, medians of 32): build = Python building the "
          "step's graph, issue = async_eval, wait = reading the previous token; step ~ their sum "
          "when the host is the bottleneck (wait ~ 0)")
    print(f"{'model':11s} {'quant':5s} {'system':20s} {'build':>7s} {'issue':>7s} {'wait':>7s}  eager graphs")
    for r in gen:
        h = r["host"]
        g = h.get("eager_graphs")
        graphs = (f"{g['graph_launches']} graph launches, {g['nodes_updated']} nodes updated, "
                  f"{g['direct_launches']} direct, {g['builds']} built") if g else ""
        print(f"{r['model']:11s} {r['quant']:5s} {r['system']:20s} {h['build_ms']:7.2f} "
              f"{h['issue_ms']:7.2f} {h['wait_ms']:7.2f}  {graphs}")


def print_all(rows, notes, bandwidth):
    print_check(rows)
    print_attention(rows, bandwidth)
    print_generate(rows, bandwidth)
    print_host(rows)
    for note in notes:
        print(note)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--systems", nargs="*", default=None, choices=list(RUNNERS),
                   help="default: all (kiln and mlx for --check; no torch-compile for --attention)")
    p.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    p.add_argument("--quant", nargs="*", default=["bf16", "q8", "q4"], choices=["bf16", "q8", "q4"])
    p.add_argument("--prompt", type=int, default=None, help="prompt tokens (512; --tiny: 64)")
    p.add_argument("--gen", type=int, default=None, help="generated tokens (128; --tiny: 32)")
    p.add_argument("--reps", type=int, default=None,
                   help="timed generations per row (3), or groups of attention calls (20; --tiny: 5)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bandwidth", type=float, default=BANDWIDTH, help="memory bandwidth of the roofline, B/s")
    p.add_argument("--tiny", action="store_true", help="2 layers, hidden 256, vocab 4096: a CPU smoke test")
    p.add_argument("--check", action="store_true", help="kiln vs MLX greedy tokens on small float32 models")
    p.add_argument("--profile", action="store_true",
                   help="kiln: print the profiler's table of one generation per row (stderr)")
    p.add_argument("--attention", action="store_true", help="the decode-attention microbenchmark")
    p.add_argument("--keys", type=int, nargs="*", default=None, help="--attention key counts (512 4096 16384)")
    p.add_argument("--device", default="auto", choices=["auto", "gpu", "cpu"],
                   help="auto: each system's GPU where it has one (--check: the CPU)")
    p.add_argument("--json", default=None, help="write the rows here (rewritten after each system)")
    p.add_argument("--system-timeout", type=float, default=None,
                   help="seconds a system may run before it is stopped and noted")
    p.add_argument("--table", nargs="+", default=None, metavar="JSON",
                   help="print the tables of --json files (rows of several runs merged) and exit")
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)
    p.add_argument("--rows-file", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.prompt is None:
        args.prompt = 64 if args.tiny else 512
    if args.gen is None:
        args.gen = 32 if args.tiny else 128
    if args.reps is None:
        args.reps = (20 if not args.tiny else 5) if args.attention else 3
    if args.keys is None:
        args.keys = [256, 1024] if args.tiny else [512, 4096, 16384]
    if args.check and args.device == "auto":
        args.device = "cpu"

    if args.table:
        rows, notes = [], []
        for path in args.table:
            with open(path) as f:
                saved = json.load(f)
            rows += saved["rows"]
            notes += saved["notes"]
        print_all(rows, notes, args.bandwidth)
        return
    if args.one:
        with open(args.rows_file, "a") as f:
            def emit(row):
                f.write(json.dumps(row) + "\n")
                f.flush()
                if "note" not in row:
                    what = " ".join(str(row.get(k)) for k in ("model", "arch", "keys", "quant") if k in row)
                    state = row.get("error", row.get("na", "done"))
                    print(f"[{args.one}] {what}: {state}", file=sys.stderr, flush=True)

            RUNNERS[args.one](args, emit)
        return

    systems = args.systems
    if systems is None:
        systems = ["kiln", "mlx"] if args.check else (
            ["kiln", "mlx", "torch"] if args.attention else list(RUNNERS))
    rows, notes = [], []
    for system in systems:
        lacking = missing(system)
        if lacking:
            notes.append(f"{system}: skipped, {', '.join(lacking)} not installed"
                         + (" (MLX-CUDA: . /root/mlx_site/env.sh)" if system == "mlx" else ""))
            continue
        run_system(args, system, rows, notes)
        write_json(args, rows, notes)
    print_all(rows, notes, args.bandwidth)
    write_json(args, rows, notes)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
