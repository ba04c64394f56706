"""mlx-lm 0.32.2's LoRA trainer, unchanged, on kiln through the mlx alias, over however many
processes launched it (``python -m kiln.launch -n 2 --mlx mlx_lm_distributed.py OUT``, or
plain ``python -m kiln run`` for one). Every sequence has the same length, so the ranks'
averaged gradients equal the whole batch's: the losses must match a one-process run.
Rank 0 writes ``OUT/losses-<size>.json``."""

import json
import sys

import mlx.core as mx
import mlx.optimizers as optim
import numpy as np
from mlx_lm.models import llama
from mlx_lm.tuner.trainer import TrainingArgs, train
from mlx_lm.tuner.utils import linear_to_lora_layers

out = sys.argv[1]
world = mx.distributed.init()
mx.random.seed(0)
config = {
    "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
    "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
    "rms_norm_eps": 1e-5, "vocab_size": 96, "head_dim": 32, "tie_word_embeddings": False,
}
model = llama.Model(llama.ModelArgs.from_dict(config))
mx.eval(model.parameters())
model.freeze()
mx.random.seed(1)
linear_to_lora_layers(model, 2, {"rank": 4, "scale": 10.0, "dropout": 0.0})
rng = np.random.default_rng(0)
data = [(list(rng.integers(3, 96, size=16)), 0) for _ in range(8)]
losses = []


class Collect:
    def on_train_loss_report(self, info):
        losses.append(info["train_loss"])

    def on_val_loss_report(self, info):
        pass


np.random.seed(0)
args = TrainingArgs(
    batch_size=4, iters=3, steps_per_report=1, steps_per_eval=10_000, steps_per_save=10_000,
    adapter_file=f"{out}/adapters-{world.size()}-{world.rank()}.safetensors", max_seq_length=64,
)
train(model, optim.Adam(learning_rate=1e-2), data, args=args, training_callback=Collect())
if world.rank() == 0:
    with open(f"{out}/losses-{world.size()}.json", "w") as f:
        json.dump(losses, f)
print(f"rank {world.rank()} losses {losses}", flush=True)
