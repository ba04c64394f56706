"""mlx-lm 0.32.2's tensor-parallel generation, unchanged, on kiln through the mlx alias:
``model.shard()`` splits every attention and MLP projection across the processes that
launched it (``python -m kiln.launch -n 2 --mlx mlx_lm_tensor_parallel.py OUT``; plain
``python -m kiln run`` for one process), and ``generate_step`` decodes greedily. Every rank
builds the same float32 weights from one seed, so the tokens and logits must equal the
one-process run's. Rank 0 writes ``OUT/tp-<size>.json``."""

import json
import sys

import mlx.core as mx
from mlx_lm.generate import generate_step
from mlx_lm.models import llama

out = sys.argv[1]
world = mx.distributed.init()
mx.random.seed(0)
config = {
    "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
    "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
    "rms_norm_eps": 1e-5, "vocab_size": 96, "head_dim": 16, "tie_word_embeddings": False,
}
model = llama.Model(llama.ModelArgs.from_dict(config))
mx.eval(model.parameters())
if world.size() > 1:
    model.shard(world)
    mx.eval(model.parameters())
    q = model.model.layers[0].self_attn.q_proj
    assert q.weight.shape[0] == 64 // world.size(), q.weight.shape
prompt = mx.array([5, 17, 33, 2, 71, 9, 40, 12], mx.uint32)
tokens, logits = [], []
for (token, logprobs), _ in zip(generate_step(prompt, model, max_tokens=12), range(12)):
    tokens.append(int(token))
    logits.append(logprobs.tolist())
if world.rank() == 0:
    with open(f"{out}/tp-{world.size()}.json", "w") as f:
        json.dump({"tokens": tokens, "logprobs": logits}, f)
print(f"rank {world.rank()} tokens {tokens}", flush=True)
