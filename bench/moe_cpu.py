"""Mixture-of-experts models on the CPU: `mlx_lm benchmark` on tiny random-weight mixtral,
qwen3_moe and deepseek_v3 models (float32 and 4-bit), kiln (through `kiln.alias_mlx()`)
beside real MLX with OpenBLAS preloaded, one process per run, in one invocation.

    python bench/moe_cpu.py [-p 128] [-g 64] [-n 3] [--models mixtral,qwen3_moe]

Prints prompt and generation tokens per second and peak memory of each, and kiln / MLX.
Needs `mlx[cpu]==0.32.4`, `mlx-lm==0.32.2` and Debian's libopenblas0-pthread (MLX's CPU
wheel ships the reference BLAS; OpenBLAS is what an MLX user on Linux would preload).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

OPENBLAS = "/usr/lib/x86_64-linux-gnu/libopenblas.so.0"
ATTN = {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8,
        "num_key_value_heads": 4, "vocab_size": 4096, "rms_norm_eps": 1e-5}
CONFIGS = {
    "mixtral": {**ATTN, "model_type": "mixtral", "intermediate_size": 512,
                "num_local_experts": 8, "num_experts_per_tok": 2},
    "qwen3_moe": {**ATTN, "model_type": "qwen3_moe", "intermediate_size": 512,
                  "num_experts": 16, "num_experts_per_tok": 4, "decoder_sparse_step": 1,
                  "mlp_only_layers": [], "moe_intermediate_size": 128, "head_dim": 32,
                  "rope_theta": 10000.0, "tie_word_embeddings": False,
                  "max_position_embeddings": 2048, "norm_topk_prob": True},
    "deepseek_v3": {**ATTN, "model_type": "deepseek_v3", "intermediate_size": 512,
                    "moe_intermediate_size": 128, "n_shared_experts": 1,
                    "n_routed_experts": 16, "num_experts_per_tok": 4, "kv_lora_rank": 64,
                    "q_lora_rank": 96, "qk_rope_head_dim": 16, "v_head_dim": 32,
                    "qk_nope_head_dim": 32, "n_group": 2, "topk_group": 1,
                    "first_k_dense_replace": 1, "routed_scaling_factor": 2.5},
}

MAKE = """
import json, sys
from pathlib import Path
import mlx.core as mx
from mlx_lm import utils as lm_utils
from tokenizers import Tokenizer, models, pre_tokenizers

work, configs = Path(sys.argv[1]), json.loads(sys.argv[2])
def tokenizer(path, vocab):
    words = ["<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(vocab - 3)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>",
        "eos_token": "</s>", "unk_token": "<unk>", "model_max_length": 4096}))
for name, config in configs.items():
    model_class, args_class = lm_utils._get_classes(config)
    mx.random.seed(0)
    model = model_class(args_class.from_dict(config))
    mx.eval(model.parameters())
    lm_utils.save_model(work / name, model)
    lm_utils.save_config(dict(config), work / name / "config.json")
    tokenizer(work / name, config["vocab_size"])
    qmodel, qconfig = lm_utils.quantize_model(model, dict(config), 64, 4)
    lm_utils.save_model(work / f"{name}-4bit", qmodel)
    lm_utils.save_config(qconfig, work / f"{name}-4bit" / "config.json")
    tokenizer(work / f"{name}-4bit", config["vocab_size"])
"""

# mlx_lm's benchmark module run as `python -m mlx_lm benchmark` would, on kiln.
KILN = ("import sys, runpy, kiln; kiln.alias_mlx(); sys.argv = ['mlx_lm.benchmark'] + "
        "sys.argv[1:]; runpy.run_module('mlx_lm.benchmark', run_name='__main__')")


def run(framework: str, folder: Path, p: int, g: int, n: int) -> dict:
    args = ["--model", str(folder), "-p", str(p), "-g", str(g), "-n", str(n)]
    env = dict(os.environ)
    if framework == "mlx":
        cmd = [sys.executable, "-m", "mlx_lm", "benchmark", *args]
        if os.path.exists(OPENBLAS):
            env["LD_PRELOAD"] = OPENBLAS
    else:
        cmd = [sys.executable, "-c", KILN, *args]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    m = re.search(r"Averages: prompt_tps=([\d.]+), generation_tps=([\d.]+), "
                  r"peak_memory=([\d.]+)", out.stdout)
    if m is None:
        raise RuntimeError(f"{framework} on {folder.name} failed:\n{out.stdout}\n{out.stderr}")
    return dict(zip(("prompt", "gen", "peak"), map(float, m.groups())))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-p", type=int, default=128)
    ap.add_argument("-g", type=int, default=64)
    ap.add_argument("-n", type=int, default=3)
    ap.add_argument("--models", default=",".join(CONFIGS))
    ap.add_argument("--work", default=None, help="model folders (made when missing)")
    a = ap.parse_args()
    names = a.models.split(",")
    work = Path(a.work or tempfile.mkdtemp(prefix="moe_cpu_"))
    missing = {k: CONFIGS[k] for k in names if not (work / k).exists()}
    if missing:
        subprocess.run([sys.executable, "-c", MAKE, str(work), json.dumps(missing)], check=True)
    cpu = sorted(set(re.findall(r"\b(avx2|avx512f)\b", Path("/proc/cpuinfo").read_text())))
    print(f"# mlx_lm benchmark -p {a.p} -g {a.g} -n {a.n}; {os.cpu_count()} cores, {cpu}; "
          f"MLX with {'OpenBLAS' if os.path.exists(OPENBLAS) else 'its reference BLAS'}")
    print(f"{'model':<18}{'prompt tok/s kiln':>18}{'MLX':>9}{'ratio':>7}"
          f"{'gen tok/s kiln':>16}{'MLX':>9}{'ratio':>7}{'peak GB kiln':>14}{'MLX':>8}")
    for name in names:
        for folder in (work / name, work / f"{name}-4bit"):
            k, m = run("kiln", folder, a.p, a.g, a.n), run("mlx", folder, a.p, a.g, a.n)
            print(f"{folder.name:<18}{k['prompt']:>18.1f}{m['prompt']:>9.1f}"
                  f"{k['prompt'] / m['prompt']:>7.2f}{k['gen']:>16.1f}{m['gen']:>9.1f}"
                  f"{k['gen'] / m['gen']:>7.2f}{k['peak']:>14.3f}{m['peak']:>8.3f}", flush=True)


if __name__ == "__main__":
    main()
