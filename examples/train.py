"""Train a small GPT-style language model with kiln, then generate text from it.

    python examples/train.py                  # about a minute on a 2-core CPU
    python examples/train.py --steps 500 --device gpu

The text is generated here (a small grammar, no downloads) and modelled character by
character. The whole training step (forward, backward, AdamW update, dropout's random key)
is one compiled function: ``mx.compile(step, inputs=state, outputs=state)`` with ``state``
holding the model, the optimizer state and ``mx.random.state``. Generation runs a compiled
decode step over a fixed-size KV cache, so every token reuses one trace.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time

import kiln.core as mx
import kiln.nn as nn
import kiln.optimizers as optim
from kiln.utils import tree_flatten

# mx.fast.scaled_dot_product_attention where this build has it, else a composition.
from kiln.nn.layers._fast import scaled_dot_product_attention as sdpa


# ---------------------------------------------------------------------------------------
# Data: sentences from a small grammar, as characters.

SUBJECTS = [
    "the cat",
    "a dog",
    "the old man",
    "my sister",
    "the red fox",
    "a small bird",
    "the teacher",
    "our neighbour",
    "the baker",
    "a tired horse",
]
VERBS = ["sees", "likes", "follows", "paints", "finds", "watches", "helps", "calls"]
OBJECTS = [
    "the moon",
    "a green apple",
    "the river",
    "an empty box",
    "the tall tree",
    "a blue door",
    "the garden",
    "a quiet song",
]
ENDINGS = [
    "every morning",
    "at night",
    "in the rain",
    "near the house",
    "with great care",
    "once again",
    "before dinner",
]


def make_text(n_sentences: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    out = []
    for _ in range(n_sentences):
        s = f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}"
        if rng.random() < 0.6:
            s += " " + rng.choice(ENDINGS)
        out.append(s + ".")
    return " ".join(out)


class Tokenizer:
    """Characters to ids and back."""

    def __init__(self, text: str):
        self.chars = sorted(set(text))
        self.ids = {c: i for i, c in enumerate(self.chars)}

    @property
    def vocab(self) -> int:
        return len(self.chars)

    def encode(self, s: str) -> list:
        return [self.ids[c] for c in s]

    def decode(self, ids) -> str:
        return "".join(self.chars[i] for i in ids)


# ---------------------------------------------------------------------------------------
# Model: pre-norm blocks with RMSNorm, rotary attention and a SiLU-gated MLP.


class Attention(nn.Module):
    def __init__(self, dims: int, heads: int):
        super().__init__()
        self.heads = heads
        # Separate projections: slicing one fused qkv output would cost three slice
        # updates of its full size in the backward pass.
        self.q = nn.Linear(dims, dims, bias=False)
        self.k = nn.Linear(dims, dims, bias=False)
        self.v = nn.Linear(dims, dims, bias=False)
        self.out = nn.Linear(dims, dims, bias=False)
        self.rope = nn.RoPE(dims // heads)

    def __call__(self, x, cache=None, pos=None):
        B, T, D = x.shape
        h = self.heads
        q, k, v = (
            p(x).reshape(B, T, h, D // h).transpose(0, 2, 1, 3) for p in (self.q, self.k, self.v)
        )
        scale = 1 / math.sqrt(D // h)
        if cache is None:
            q, k = self.rope(q), self.rope(k)
            a = sdpa(q, k, v, scale=scale, mask="causal")
        else:
            # One new token at position `pos` (an array, so every step has the same graph):
            # write its key and value into the fixed-size cache, attend to positions <= pos.
            q, k = self.rope(q, offset=pos), self.rope(k, offset=pos)
            kc, vc = cache
            slots = mx.arange(kc.shape[2])
            here = (slots == pos).reshape(1, 1, -1, 1)
            kc, vc = mx.where(here, k, kc), mx.where(here, v, vc)
            a = sdpa(q, kc, vc, scale=scale, mask=(slots <= pos).reshape(1, 1, 1, -1))
            cache = (kc, vc)
        return self.out(a.transpose(0, 2, 1, 3).reshape(B, T, D)), cache


class Block(nn.Module):
    def __init__(self, dims: int, heads: int, dropout: float):
        super().__init__()
        self.norm1 = nn.RMSNorm(dims)
        self.attn = Attention(dims, heads)
        self.norm2 = nn.RMSNorm(dims)
        self.gate = nn.Linear(dims, 4 * dims, bias=False)
        self.up = nn.Linear(dims, 4 * dims, bias=False)
        self.down = nn.Linear(4 * dims, dims, bias=False)
        self.drop = nn.Dropout(dropout)

    def __call__(self, x, cache=None, pos=None):
        a, cache = self.attn(self.norm1(x), cache, pos)
        x = x + self.drop(a)
        h = self.norm2(x)
        return x + self.drop(self.down(nn.silu(self.gate(h)) * self.up(h))), cache


class GPT(nn.Module):
    def __init__(self, vocab: int, dims: int, layers: int, heads: int, dropout: float = 0.0):
        super().__init__()
        self.embed = nn.Embedding(vocab, dims)
        self.blocks = [Block(dims, heads, dropout) for _ in range(layers)]
        self.norm = nn.RMSNorm(dims)
        self.head = nn.Linear(dims, vocab, bias=False)

    def __call__(self, idx, caches=None, pos=None):
        x = self.embed(idx)
        new = []
        for i, b in enumerate(self.blocks):
            x, c = b(x, None if caches is None else caches[i], pos)
            new.append(c)
        logits = self.head(self.norm(x))
        return logits if caches is None else (logits, new)


def loss_fn(model, x, y):
    return nn.losses.cross_entropy(model(x), y, reduction="mean")


# ---------------------------------------------------------------------------------------
# Training.


def make_step(model, optimizer):
    """The uncompiled training step and its compiled twin (sharing model and optimizer)."""
    loss_and_grad = nn.value_and_grad(model, lambda x, y: loss_fn(model, x, y))

    def step(x, y):
        loss, grads = loss_and_grad(x, y)
        grads, _ = optim.clip_grad_norm(grads, 1.0)
        optimizer.update(model, grads)
        return loss

    state = [model.state, optimizer.state, mx.random.state]
    return step, mx.compile(step, inputs=state, outputs=state), state


def batches(data: mx.array, batch: int, ctx: int, key: mx.array):
    """An endless stream of random (inputs, next-character targets) windows."""
    offs = mx.arange(ctx + 1)
    while True:
        key, sub = mx.random.split(key)
        starts = mx.random.randint(0, data.shape[0] - ctx - 1, (batch, 1), key=sub)
        w = data[starts + offs]
        yield w[:, :-1], w[:, 1:]


def progress(i: int, n: int, loss: float, tok_s: float, width: int = 30) -> None:
    done = int(width * i / n)
    bar = "#" * done + "-" * (width - done)
    end = "\n" if i == n else ""
    if sys.stdout.isatty():
        print(f"\r[{bar}] {i}/{n} loss {loss:.3f} {tok_s:,.0f} tok/s", end=end, flush=True)
    elif i == n or i % max(1, n // 10) == 0:
        print(f"[{bar}] {i}/{n} loss {loss:.3f} {tok_s:,.0f} tok/s", flush=True)


def time_steps(fns, state, data_iter, n: int) -> list:
    """Median milliseconds per step of each function in ``fns``, taking turns (so load
    from other processes falls on all of them alike); every step is evaluated with the
    state."""
    times = [[] for _ in fns]
    for _ in range(n):
        for fn, ts in zip(fns, times):
            x, y = next(data_iter)
            mx.eval(x, y)
            t = time.perf_counter()
            mx.eval(fn(x, y), state)
            ts.append(time.perf_counter() - t)
    return [1e3 * statistics.median(ts) for ts in times]


# ---------------------------------------------------------------------------------------
# Generation with a fixed-size KV cache.


def make_decoder(model, max_len: int, batch: int = 1):
    """``decode(token, pos, key, caches) -> (next token, caches)``: one step, sampling with
    temperature 0.8 from ``key``."""
    first = model.blocks[0].attn
    dims = model.embed.weight.shape[1]
    shape = (batch, first.heads, max_len, dims // first.heads)

    def decode(tok, pos, key, caches):
        logits, caches = model(tok.reshape(batch, 1), caches, pos)
        nxt = mx.random.categorical(logits[:, -1, :] / 0.8, key=key)
        return nxt.astype(tok.dtype), caches  # keep the input's dtype: one trace

    def empty():
        return [(mx.zeros(shape), mx.zeros(shape)) for _ in model.blocks]

    return decode, empty


def generate(decode, empty, prompt: list, n_new: int, key: mx.array, max_len: int) -> list:
    """Feeds ``prompt`` then samples ``n_new`` tokens; returns the new ids. When the cache
    is full, it starts again from the last ``max_len // 2`` tokens (positions are relative
    under RoPE, so the model keeps its trained context length)."""
    history, out = list(prompt), []
    caches, pos, feed = empty(), 0, list(prompt[-max_len:])
    while len(out) < n_new:
        if pos == max_len:
            caches, pos, feed = empty(), 0, history[-(max_len // 2) :]
        key, sub = mx.random.split(key)
        nxt, caches = decode(mx.array([feed.pop(0)]), mx.array(pos), sub, caches)
        mx.eval(nxt, caches)
        pos += 1
        if not feed:  # the prompt is in: the sample is the next input
            t = int(nxt.item())
            out.append(t)
            history.append(t)
            feed = [t]
    return out


# ---------------------------------------------------------------------------------------


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=200, help="training steps (default 200)")
    p.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    p.add_argument("--dims", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--timing-steps", type=int, default=15, help="steps per side of the timing line")
    p.add_argument("--generate", type=int, default=200, help="characters to generate")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    if args.device == "gpu":
        if not mx.is_available(mx.gpu):
            sys.exit(
                "--device gpu: this kiln build has no GPU backend (or no GPU is visible); "
                "use --device cpu."
            )
        mx.set_default_device(mx.gpu)
    else:
        mx.set_default_device(mx.cpu)

    mx.random.seed(args.seed)
    text = make_text(4000, args.seed)
    tok = Tokenizer(text)
    data = mx.array(tok.encode(text), dtype=mx.int32)
    model = GPT(tok.vocab, args.dims, args.layers, args.heads, args.dropout)
    n_params = sum(v.size for _, v in tree_flatten(model.parameters()))
    schedule = optim.join_schedules(
        [
            optim.linear_schedule(1e-2 * args.lr, args.lr, 20),
            optim.cosine_decay(args.lr, max(args.steps, 1), 0.1 * args.lr),
        ],
        [20],
    )
    optimizer = optim.AdamW(learning_rate=schedule, weight_decay=0.01)
    optimizer.init(model.trainable_parameters())
    step, cstep, state = make_step(model, optimizer)
    mx.eval(state)
    print(
        f"GPT: {args.layers} layers, {args.dims} dims, {args.heads} heads, "
        f"{n_params:,} parameters, "
        f"vocab {tok.vocab}, context {args.context}, batch {args.batch}, device {args.device}"
    )
    print(f"text: {len(text):,} generated characters, e.g. {text[:60]!r}")

    it = batches(data, args.batch, args.context, mx.random.key(args.seed + 1))
    tokens = args.batch * args.context
    t0 = time.perf_counter()
    first_loss, steady = None, 0.0
    for i in range(1, args.steps + 1):
        x, y = next(it)
        t = time.perf_counter()
        loss = cstep(x, y)
        mx.eval(loss, state)
        dt = time.perf_counter() - t
        if i == 1:
            first_loss = loss.item()
            print(f"first compiled step (trace + compile): {dt:.2f} s")
            rate = tokens / dt
        else:
            steady += dt
            rate = tokens * (i - 1) / steady  # average since the first step
        progress(i, args.steps, loss.item(), rate)
    train_s = time.perf_counter() - t0
    if args.steps:
        print(
            f"trained {args.steps} steps in {train_s:.1f} s: "
            f"loss {first_loss:.3f} -> {loss.item():.3f}"
        )

    # Both steps share the model, so the timing continues the training.
    for fn in (cstep, step):  # warm both paths (the compiled one traces here with --steps 0)
        mx.eval(fn(*next(it)), state)
    c_ms, u_ms = time_steps([cstep, step], state, it, args.timing_steps)
    print(f"compiled step {c_ms:.1f} ms, uncompiled {u_ms:.1f} ms, speedup {u_ms / c_ms:.2f}x")

    if args.generate > 0:
        model.eval()
        prompt = tok.encode("the cat ")
        max_len = args.context
        decode, empty = make_decoder(model, max_len)
        cdecode = mx.compile(decode)
        key = mx.random.key(args.seed + 2)
        generate(cdecode, empty, prompt, 2, key, max_len)  # trace once
        t = time.perf_counter()
        ids = generate(cdecode, empty, prompt, args.generate, key, max_len)
        dt = time.perf_counter() - t
        print(
            f"generated (compiled decode, KV cache of {max_len}): "
            f"{args.generate / dt:,.0f} tokens/s"
        )
        print(repr(tok.decode(prompt) + tok.decode(ids)))


if __name__ == "__main__":
    main()
