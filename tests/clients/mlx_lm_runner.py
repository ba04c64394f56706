"""Runs mlx-lm 0.32.2's own code paths on tiny random-weight models and writes what they
produce, so that a test can compare real MLX with kiln (one process cannot hold both).

    python mlx_lm_runner.py mlx  WORK OUT    # real MLX: writes the model folders, then checks
    python mlx_lm_runner.py kiln WORK OUT    # kiln through kiln.alias_mlx(): the same checks

WORK holds the model folders (written by the MLX run, read by both); OUT gets
``results.npz`` (arrays: logits, packed weights) and ``results.json`` (tokens, texts, losses,
and the error of every check that raised). Every check is the code a user of mlx-lm calls.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

BACKEND, WORK, OUT = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
ONLY = set(sys.argv[4].split(",")) if len(sys.argv) > 4 and sys.argv[4] else None
if BACKEND == "kiln":
    import kiln

    kiln.alias_mlx()

import mlx.core as mx  # noqa: E402
import mlx.nn as nn  # noqa: E402
import mlx.optimizers as optim  # noqa: E402
import numpy as np  # noqa: E402
from mlx.utils import tree_flatten  # noqa: E402

from mlx_lm import utils as lm_utils  # noqa: E402
from mlx_lm.generate import generate, generate_step, stream_generate  # noqa: E402
from mlx_lm.models import cache as lm_cache  # noqa: E402
from mlx_lm.sample_utils import make_logits_processors, make_sampler  # noqa: E402
from mlx_lm.tuner.trainer import TrainingArgs, train  # noqa: E402
from mlx_lm.tuner.utils import linear_to_lora_layers  # noqa: E402

VOCAB = 96
COMMON = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-5,
    "vocab_size": VOCAB,
}
CONFIGS = {
    "llama": {**COMMON, "model_type": "llama", "head_dim": 32, "tie_word_embeddings": False},
    "qwen3": {
        **COMMON,
        "model_type": "qwen3",
        "head_dim": 32,
        "max_position_embeddings": 512,
        "tie_word_embeddings": True,
        "rope_theta": 10000.0,
    },
    "gemma3_text": {
        **COMMON,
        "model_type": "gemma3_text",
        "head_dim": 16,
        "query_pre_attn_scalar": 16,
        "sliding_window": 8,
        "sliding_window_pattern": 2,
    },
    "mixtral": {**COMMON, "model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2},
    "phi3": {**COMMON, "model_type": "phi3", "max_position_embeddings": 512},
    # Attention sinks (sdpa's `sinks=`), sliding and full layers, SwiGLU experts.
    "gpt_oss": {
        **COMMON,
        "model_type": "gpt_oss",
        "intermediate_size": 64,
        "head_dim": 16,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "sliding_window": 4,
        "rope_theta": 150000,
        "layer_types": ["sliding_attention", "full_attention"],
    },
    "mamba2": {
        "model_type": "mamba2",
        "num_heads": 8,
        "head_dim": 16,
        "vocab_size": VOCAB,
        "hidden_size": 64,
        "intermediate_size": 128,
        "state_size": 16,
        "num_hidden_layers": 2,
        "layer_norm_epsilon": 1e-5,
        "conv_kernel": 4,
        "n_groups": 1,
        "use_bias": False,
        "use_conv_bias": True,
        "tie_word_embeddings": True,
        "time_step_limit": [0.0, 1e9],
        "time_step_rank": "auto",
    },
}
ATTENTION = [a for a in CONFIGS if a != "mamba2"]
# Models whose caches quantize (head dims a multiple of the group; gemma3's rotating layers
# cannot quantize in mlx-lm).
QUANT_KV = ["llama", "qwen3"]
PROMPT = [1, 5, 17, 33, 2, 60, 41, 9, 12, 77, 3, 28]
STEPS = 10
WORDS = ["<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(VOCAB - 3)]

results_json: dict = {"errors": {}, "module": mx.__name__, "device": str(mx.default_device())}
results_np: dict = {}


def write_tokenizer(path: Path) -> None:
    """A word-level tokenizer over VOCAB words, through the `tokenizers` package (no hub)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(path / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "model_max_length": 4096,
    }
    (path / "tokenizer_config.json").write_text(json.dumps(config))


def make_folders() -> None:
    """The float32 folder of every model (seeded random weights) and its 4-bit version,
    written by mlx-lm's own save functions."""
    WORK.mkdir(parents=True, exist_ok=True)
    for arch, config in CONFIGS.items():
        path = WORK / arch
        model_class, args_class = lm_utils._get_classes(config)
        mx.random.seed(0)
        model = model_class(args_class.from_dict(config))
        mx.eval(model.parameters())
        lm_utils.save_model(path, model)
        lm_utils.save_config(dict(config), path / "config.json")
        write_tokenizer(path)
        qmodel, qconfig = lm_utils.quantize_model(model, dict(config), 64, 4)
        lm_utils.save_model(WORK / f"{arch}-4bit", qmodel)
        lm_utils.save_config(qconfig, WORK / f"{arch}-4bit" / "config.json")
        write_tokenizer(WORK / f"{arch}-4bit")


def check(name: str):
    """Runs a check, recording its error instead of stopping the run."""

    def wrap(fn):
        if ONLY is not None and name.split("/")[0] not in ONLY:
            return fn
        try:
            fn()
        except Exception:
            results_json["errors"][name] = traceback.format_exc(limit=8)
        return fn

    return wrap


def greedy(model, prompt=PROMPT, **kwargs) -> list:
    tokens = []
    for tok, _ in generate_step(mx.array(prompt), model, max_tokens=STEPS, **kwargs):
        tokens.append(int(tok))
    return tokens


def train_losses(
    model, steps: int = 4, *, kind: str = "lora", adapter_dir: Path = None, **train_args
) -> list:
    """Losses of mlx-lm's trainer over a few steps (Adam, so the optimizer's state is made
    inside the compiled step): LoRA, DoRA or the full model, with any TrainingArgs."""
    if kind == "full":
        model.unfreeze()
    else:
        model.freeze()
        mx.random.seed(1)
        linear_to_lora_layers(
            model, 2, {"rank": 4, "scale": 10.0, "dropout": 0.0}, use_dora=kind == "dora"
        )
    rng = np.random.default_rng(0)
    data = [(list(rng.integers(3, VOCAB, size=int(rng.integers(12, 20)))), 0) for _ in range(8)]
    losses = []

    class Collect:
        def on_train_loss_report(self, info):
            losses.append(info["train_loss"])

        def on_val_loss_report(self, info):
            pass

    np.random.seed(0)
    adapter_dir = adapter_dir or OUT / f"adapters-{id(model)}"
    adapter_dir.mkdir(parents=True, exist_ok=True)
    args = TrainingArgs(
        batch_size=2, iters=steps, steps_per_report=1, steps_per_eval=10_000,
        steps_per_save=10_000, adapter_file=str(adapter_dir / "adapters.safetensors"),
        max_seq_length=64, **train_args,
    )
    lr = 1e-3 if kind == "full" else 1e-2
    train(model, optim.Adam(learning_rate=lr), data, args=args, training_callback=Collect())
    config = {
        "fine_tune_type": kind,
        "num_layers": 2,
        "lora_parameters": {"rank": 4, "scale": 10.0, "dropout": 0.0},
    }
    (adapter_dir / "adapter_config.json").write_text(json.dumps(config))
    return losses


def run_cli(module: str, argv: list) -> None:
    """Runs an mlx-lm command's ``main()`` as its command line would."""
    import importlib

    saved = sys.argv
    sys.argv = [module] + argv
    try:
        importlib.import_module(module).main()
    finally:
        sys.argv = saved


# The paths beyond load/generate/train, on fewer models (each is the same code for all).
EXTRA = ["llama", "mixtral"]


def run_extra_checks() -> None:
    from mlx_lm.generate import batch_generate

    for arch in EXTRA:
        path = WORK / arch

        @check(f"{arch}/batch")
        def _batch():
            model, tokenizer = lm_utils.load(str(path))
            prompts = [PROMPT[:5], PROMPT[:9], PROMPT[3:7]]
            out = batch_generate(model, tokenizer, prompts, max_tokens=6, return_token_ids=True)
            results_json[f"{arch}/batch"] = [list(map(int, t)) for t in out.token_ids]
            results_json[f"{arch}/batch_texts"] = list(out.texts)

        @check(f"{arch}/speculative")
        def _speculative():
            model, tokenizer = lm_utils.load(str(path))
            draft, _ = lm_utils.load(str(WORK / f"{arch}-4bit"))
            got = [
                (int(r.token), bool(r.from_draft))
                for r in stream_generate(
                    model, tokenizer, PROMPT, max_tokens=STEPS, draft_model=draft, num_draft_tokens=3
                )
            ]
            results_json[f"{arch}/speculative"] = got

        @check(f"{arch}/chunked")
        def _chunked():
            model, _ = lm_utils.load(str(path))
            cache = [lm_cache.ChunkedKVCache(8) for _ in model.layers]
            results_json[f"{arch}/chunked"] = greedy(model, prompt_cache=cache)

        for kind, extra in (
            ("dora", {}),  # (mlx-lm has no DoRA for mixtral's SwitchLinear)
            ("full", {}),
            ("ckpt", {"grad_checkpoint": True}),
            ("accum", {"grad_accumulation_steps": 2}),
        ):

            if kind == "dora" and arch == "mixtral":
                continue

            @check(f"{arch}/{kind}")
            def _train(kind=kind, extra=extra):
                model, _ = lm_utils.load(str(path))
                tune = kind if kind in ("dora", "full") else "lora"
                results_json[f"{arch}/{kind}"] = train_losses(model, kind=tune, **extra)

        @check(f"{arch}/fuse")
        def _fuse():
            # MLX trains the adapters; both fuse that same file (Adam's steps magnify
            # rounding in weights whose gradients are tiny, so each side's own adapters
            # would differ more than the fuse does).
            adapters = WORK / f"{arch}-adapters"
            if BACKEND == "mlx":
                model, _ = lm_utils.load(str(path))
                train_losses(model, kind="lora", adapter_dir=adapters)
            fused = OUT / f"{arch}-fused"
            run_cli("mlx_lm.fuse", ["--model", str(path), "--adapter-path", str(adapters),
                                    "--save-path", str(fused)])
            fmodel, _ = lm_utils.load(str(fused))
            results_json[f"{arch}/fuse"] = greedy(fmodel)
            results_np[f"{arch}/fuse_logits"] = np.array(fmodel(mx.array(PROMPT)[None]))

        @check(f"{arch}/convert")
        def _convert():
            from mlx_lm.convert import convert

            target = OUT / f"{arch}-converted"
            convert(str(path), str(target), quantize=True, q_bits=4, q_group_size=32)
            model, _ = lm_utils.load(str(target))
            results_json[f"{arch}/convert"] = greedy(model)
            weights = mx.load(str(target / "model.safetensors"))
            key = sorted(k for k in weights if k.endswith(".scales"))[0]
            results_np[f"{arch}/convert_scales"] = np.array(weights[key])


def run_checks() -> None:
    for arch in CONFIGS:
        path = WORK / arch

        @check(f"{arch}/load")
        def _load():
            model, tokenizer = lm_utils.load(str(path))
            logits = model(mx.array(PROMPT)[None])
            results_np[f"{arch}/logits"] = np.array(logits.astype(mx.float32))
            results_json[f"{arch}/greedy"] = greedy(model)
            results_json[f"{arch}/text"] = generate(
                model, tokenizer, " ".join(WORDS[t] for t in PROMPT[:6]), max_tokens=6
            )
            last = None
            for last in stream_generate(model, tokenizer, PROMPT[:5], max_tokens=4):
                pass
            results_json[f"{arch}/stream_tokens"] = int(last.generation_tokens)
            procs = make_logits_processors(repetition_penalty=1.3, repetition_context_size=8)
            results_json[f"{arch}/penalty"] = greedy(model, logits_processors=procs)
            sampler = make_sampler(temp=0.0, top_k=5, min_p=0.05)
            results_json[f"{arch}/sampler"] = greedy(model, sampler=sampler)

            if arch in ATTENTION:
                results_json[f"{arch}/rotating"] = greedy(model, max_kv_size=8)
            if arch in QUANT_KV:
                results_json[f"{arch}/quant_kv"] = greedy(
                    model, kv_bits=8, kv_group_size=32, quantized_kv_start=0
                )

            # A prompt cache: prefill, save to a file, load it back, continue.
            cache = lm_cache.make_prompt_cache(model)
            for _ in generate_step(mx.array(PROMPT[:-1]), model, max_tokens=0, prompt_cache=cache):
                pass
            file = OUT / f"{arch}-cache.safetensors"
            lm_cache.save_prompt_cache(str(file), cache, {"arch": arch})
            loaded, meta = lm_cache.load_prompt_cache(str(file), return_metadata=True)
            results_json[f"{arch}/prompt_cache"] = greedy(model, PROMPT[-1:], prompt_cache=loaded)
            results_json[f"{arch}/prompt_cache_meta"] = meta

            q8, _ = lm_utils.quantize_model(model, dict(CONFIGS[arch]), 64, 8)
            results_json[f"{arch}/q8"] = greedy(q8)

        @check(f"{arch}/q4")
        def _q4():
            model, _ = lm_utils.load(str(WORK / f"{arch}-4bit"))
            results_np[f"{arch}/q4_logits"] = np.array(model(mx.array(PROMPT)[None]))
            results_json[f"{arch}/q4"] = greedy(model)
            # Quantizing the float model here gives the words MLX wrote.
            fmodel, _ = lm_utils.load(str(path))
            lm_utils.quantize_model(fmodel, dict(CONFIGS[arch]), 64, 4)
            flat = dict(tree_flatten(fmodel.parameters()))
            for k in sorted(flat)[:6]:
                results_np[f"{arch}/q4_params/{k}"] = np.array(flat[k])

        @check(f"{arch}/lora")
        def _lora():
            model, tokenizer = lm_utils.load(str(path))
            results_json[f"{arch}/lora"] = train_losses(model)

        @check(f"{arch}/qlora")
        def _qlora():
            model, tokenizer = lm_utils.load(str(WORK / f"{arch}-4bit"))
            results_json[f"{arch}/qlora"] = train_losses(model)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    if BACKEND == "mlx":
        mx.set_default_device(mx.cpu)
        make_folders()
    run_checks()
    run_extra_checks()
    np.savez(OUT / "results.npz", **results_np)
    (OUT / "results.json").write_text(json.dumps(results_json, indent=1))


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
