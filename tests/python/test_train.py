"""Training end to end with examples/train.py's model: the compiled step equals the
uncompiled one, the loss falls, generation with and without compile agrees."""

import importlib.util
import pathlib
import sys

import kiln.core as mx
import kiln.nn as nn
import kiln.optimizers as optim
import numpy as np
import pytest
from kiln.utils import tree_flatten

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "train.py"


@pytest.fixture(scope="module")
def train():
    spec = importlib.util.spec_from_file_location("kiln_train_example", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _setup(train, dropout):
    mx.random.seed(7)
    model = train.GPT(vocab=11, dims=16, layers=2, heads=2, dropout=dropout)
    opt = optim.AdamW(learning_rate=optim.cosine_decay(1e-2, 10), weight_decay=0.1)
    opt.init(model.trainable_parameters())
    step, cstep, state = train.make_step(model, opt)
    mx.eval(state)
    return model, opt, step, cstep, state


def _data(n=4):
    key = mx.random.key(3)
    x = mx.random.randint(0, 11, (n, 2, 9), key=key)
    return [(x[i, :, :-1], x[i, :, 1:]) for i in range(n)]


@pytest.mark.parametrize("dropout", [0.0, 0.2])
def test_compiled_step_equals_uncompiled(train, dropout):
    batches = _data()
    results = []
    for compiled in (False, True):
        model, opt, step, cstep, state = _setup(train, dropout)
        mx.random.seed(11)  # dropout's key sequence starts at the same place
        fn = cstep if compiled else step
        losses = []
        for x, y in batches:
            loss = fn(x, y)
            mx.eval(loss, state)
            losses.append(loss.item())
        params = {k: np.array(v) for k, v in tree_flatten(model.parameters())}
        moments = {k: np.array(v) for k, v in tree_flatten(opt.state) if k != "step"}
        results.append((losses, params, moments, opt.step.item(), np.array(mx.random.state[0])))
    (l0, p0, m0, s0, k0), (l1, p1, m1, s1, k1) = results
    np.testing.assert_allclose(l0, l1, rtol=1e-4, atol=1e-5)
    assert p0.keys() == p1.keys() and m0.keys() == m1.keys()
    for k in p0:
        np.testing.assert_allclose(p0[k], p1[k], rtol=1e-4, atol=1e-5, err_msg=k)
    for k in m0:
        np.testing.assert_allclose(m0[k], m1[k], rtol=1e-4, atol=1e-6, err_msg=k)
    assert s0 == s1 == len(batches)
    assert np.array_equal(k0, k1)  # the random key advanced the same way
    if dropout:
        assert l0[0] != pytest.approx(l0[1])


def test_compiled_step_is_traced_once_and_loss_falls(train):
    model, opt, step, cstep, state = _setup(train, 0.0)
    x, y = _data(1)[0]
    losses = []
    for _ in range(12):
        loss = cstep(x, y)
        mx.eval(loss, state)
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0]
    info = cstep.explain()
    assert info["traces"] == 1 and info["cache_hits"] == 11


def test_generation_with_and_without_compile(train):
    model, *_ = _setup(train, 0.0)
    model.eval()
    decode, empty = train.make_decoder(model, max_len=12)
    key = mx.random.key(5)
    prompt = [1, 2, 3]
    # 12 new tokens through a cache of 12: the cache fills and restarts once.
    plain = train.generate(decode, empty, prompt, 12, key, 12)
    compiled_decode = mx.compile(decode)
    fast = train.generate(compiled_decode, empty, prompt, 12, key, 12)
    assert plain == fast and len(plain) == 12
    assert all(0 <= t < 11 for t in plain)
    assert compiled_decode.explain()["traces"] == 1  # one graph for every position


def test_kv_cache_matches_full_forward(train):
    model, *_ = _setup(train, 0.0)
    model.eval()
    ids = [4, 1, 7, 2, 9]
    full = np.array(model(mx.array([ids])))[0]
    decode, empty = train.make_decoder(model, max_len=8)
    caches = empty()
    for pos, t in enumerate(ids):
        logits, caches = model(mx.array([[t]]), caches, mx.array(pos))
        np.testing.assert_allclose(np.array(logits)[0, 0], full[pos], rtol=1e-4, atol=1e-5)


def test_example_main_runs(train, capsys):
    train.main(
        [
            "--steps",
            "3",
            "--dims",
            "16",
            "--layers",
            "1",
            "--heads",
            "2",
            "--context",
            "8",
            "--batch",
            "2",
            "--timing-steps",
            "1",
            "--generate",
            "4",
        ]
    )
    out = capsys.readouterr().out
    assert "compiled step" in out and "speedup" in out and "tokens/s" in out


def test_example_gpu_flag_without_gpu(train):
    if mx.is_available(mx.gpu):
        pytest.skip("a GPU is available")
    with pytest.raises(SystemExit, match="no GPU"):
        train.main(["--device", "gpu", "--steps", "1"])
    mx.set_default_device(mx.cpu)


def test_value_and_grad_inside_compile_keeps_model_arrays(train):
    # After a compiled step the model holds real arrays again, not the trace's placeholders.
    model, opt, step, cstep, state = _setup(train, 0.0)
    x, y = _data(1)[0]
    mx.eval(cstep(x, y), state)
    for _, v in tree_flatten(model.parameters()):
        np.array(v)  # evaluates; a placeholder would raise
    assert isinstance(model.blocks[0].attn.q, nn.Linear)


def test_bench_harness_train_step_row():
    spec = importlib.util.spec_from_file_location(
        "kiln_bench_harness", EXAMPLE.parents[1] / "bench" / "harness.py"
    )
    harness = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = harness  # its dataclasses look the module up
    spec.loader.exec_module(harness)
    harness.TRAIN_SIZES["tiny"] = {
        "V": 32,
        "D": 16,
        "L": 1,
        "H": 2,
        "T": 8,
        "B": 2,
        "dtype": "float32",
    }
    harness.TRAIN_SIZE = "tiny"
    harness.TRAIN_STEPS, harness.TRAIN_WARM = 2, 1
    for compiled in (False, True):
        r = harness.train_step_bench("kiln", compiled)
        assert r["tokens"] == 16 and r["sec"] > 0 and r["first"] > 0


def test_bfloat16_training_keeps_dtypes_and_learns(train):
    mx.random.seed(2)
    model = train.GPT(vocab=11, dims=16, layers=1, heads=2)
    model.set_dtype(mx.bfloat16)
    opt = optim.AdamW(learning_rate=1e-2)
    opt.init(model.trainable_parameters())
    step, cstep, state = train.make_step(model, opt)
    x, y = _data(1)[0]
    losses = []
    for _ in range(6):
        loss = cstep(x, y)
        mx.eval(loss, state)
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    assert {v.dtype for _, v in tree_flatten(model.parameters())} == {mx.bfloat16}
    moments = [v for k, v in tree_flatten(opt.state) if k.endswith((".m", ".v"))]
    assert moments and {v.dtype for v in moments} == {mx.bfloat16}
