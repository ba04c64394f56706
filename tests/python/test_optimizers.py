"""kiln.optimizers: each optimizer against updates computed by hand in numpy for a few
steps, schedules, clip_grad_norm, state handling."""

import math

import kiln.core as mx
import kiln.nn as nn
import kiln.optimizers as optim
import numpy as np
import pytest
from kiln.utils import tree_flatten, tree_map

RNG = np.random.default_rng(1)
STEPS = 3


def _params():
    return {
        "a": RNG.standard_normal(3).astype(np.float32),
        "b": [RNG.standard_normal((2, 2)).astype(np.float32)],
    }


def _grads(n):
    return [
        {
            "a": RNG.standard_normal(3).astype(np.float32),
            "b": [RNG.standard_normal((2, 2)).astype(np.float32)],
        }
        for _ in range(n)
    ]


# numpy references: (init(p) -> state, step(p, g, state, t) -> p), t counts from 1.
def sgd_ref(lr, momentum=0.0, wd=0.0, damp=0.0, nesterov=False):
    def step(p, g, s, t):
        g = g + wd * p
        if momentum <= 0:
            return p - lr * g
        s["v"] = momentum * s["v"] + (1 - damp) * g
        return p - lr * (g + momentum * s["v"] if nesterov else s["v"])

    return (lambda p: {"v": np.zeros_like(p)}), step


def adam_ref(lr, b1=0.9, b2=0.999, eps=1e-8, wd=0.0, bias_correction=False):
    def step(p, g, s, t):
        p = p * (1 - lr * wd)
        s["m"] = b1 * s["m"] + (1 - b1) * g
        s["v"] = b2 * s["v"] + (1 - b2) * g * g
        if bias_correction:
            return p - lr / (1 - b1**t) * s["m"] / (np.sqrt(s["v"]) / np.sqrt(1 - b2**t) + eps)
        return p - lr * s["m"] / (np.sqrt(s["v"]) + eps)

    return (lambda p: {"m": np.zeros_like(p), "v": np.zeros_like(p)}), step


def rmsprop_ref(lr, alpha=0.99, eps=1e-8):
    def step(p, g, s, t):
        s["v"] = alpha * s["v"] + (1 - alpha) * g * g
        return p - lr * g / (np.sqrt(s["v"]) + eps)

    return (lambda p: {"v": np.zeros_like(p)}), step


def adagrad_ref(lr, eps=1e-8):
    def step(p, g, s, t):
        s["v"] = s["v"] + g * g
        return p - lr * g / (np.sqrt(s["v"]) + eps)

    return (lambda p: {"v": np.zeros_like(p)}), step


def adadelta_ref(lr, rho=0.9, eps=1e-6):
    def step(p, g, s, t):
        s["v"] = rho * s["v"] + (1 - rho) * g * g
        d = np.sqrt(s["u"] + eps) / np.sqrt(s["v"] + eps) * g
        s["u"] = rho * s["u"] + (1 - rho) * d * d
        return p - lr * d

    return (lambda p: {"v": np.zeros_like(p), "u": np.zeros_like(p)}), step


def adamax_ref(lr, b1=0.9, b2=0.999, eps=1e-8):
    def step(p, g, s, t):
        s["m"] = b1 * s["m"] + (1 - b1) * g
        s["v"] = np.maximum(b2 * s["v"], np.abs(g))
        return p - lr * s["m"] / (s["v"] + eps)

    return (lambda p: {"m": np.zeros_like(p), "v": np.zeros_like(p)}), step


def lion_ref(lr, b1=0.9, b2=0.99, wd=0.0):
    def step(p, g, s, t):
        c = b1 * s["m"] + (1 - b1) * g
        s["m"] = b2 * s["m"] + (1 - b2) * g
        p = p * (1 - lr * wd)
        return p - lr * np.sign(c)

    return (lambda p: {"m": np.zeros_like(p)}), step


CASES = {
    "sgd": (lambda: optim.SGD(0.1), sgd_ref(0.1)),
    "sgd_momentum": (
        lambda: optim.SGD(0.1, momentum=0.9, weight_decay=0.01, dampening=0.1),
        sgd_ref(0.1, 0.9, 0.01, 0.1),
    ),
    "sgd_nesterov": (
        lambda: optim.SGD(0.05, momentum=0.8, nesterov=True),
        sgd_ref(0.05, 0.8, nesterov=True),
    ),
    "adam": (lambda: optim.Adam(0.01), adam_ref(0.01)),
    "adam_bias_correction": (
        lambda: optim.Adam(0.01, betas=[0.8, 0.9], bias_correction=True),
        adam_ref(0.01, 0.8, 0.9, bias_correction=True),
    ),
    "adamw": (lambda: optim.AdamW(0.01, weight_decay=0.1), adam_ref(0.01, wd=0.1)),
    "rmsprop": (lambda: optim.RMSprop(0.01, alpha=0.9), rmsprop_ref(0.01, 0.9)),
    "adagrad": (lambda: optim.Adagrad(0.1), adagrad_ref(0.1)),
    "adadelta": (lambda: optim.AdaDelta(1.0, rho=0.8), adadelta_ref(1.0, 0.8)),
    "adamax": (lambda: optim.Adamax(0.02), adamax_ref(0.02)),
    "lion": (lambda: optim.Lion(0.01, weight_decay=0.1), lion_ref(0.01, wd=0.1)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_optimizer_matches_hand_computed_updates(name):
    make, (init_ref, step_ref) = CASES[name]
    p0, grads = _params(), _grads(STEPS)
    opt = make()
    params = tree_map(mx.array, p0)
    ref = {
        k: [v.astype(np.float64) for v in (vs if isinstance(vs, list) else [vs])]
        for k, vs in p0.items()
    }
    ref_state = {k: [init_ref(v) for v in vs] for k, vs in ref.items()}
    for t, g in enumerate(grads, 1):
        params = opt.apply_gradients(tree_map(mx.array, g), params)
        for k in ref:
            gs = g[k] if isinstance(g[k], list) else [g[k]]
            ref[k] = [
                step_ref(p, gg.astype(np.float64), s, t)
                for p, gg, s in zip(ref[k], gs, ref_state[k])
            ]
    np.testing.assert_allclose(np.array(params["a"]), ref["a"][0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.array(params["b"][0]), ref["b"][0], rtol=1e-5, atol=1e-6)
    assert opt.step.item() == STEPS and opt.state["step"].dtype == mx.uint64


def test_update_model_and_state_layout():
    model = nn.Linear(2, 2)
    opt = optim.SGD(0.5, momentum=0.9)
    opt.init(model.trainable_parameters())
    assert set(opt.state) == {"step", "learning_rate", "weight", "bias"}
    assert set(opt.state["weight"]) == {"v"}
    w = np.array(model.weight)
    opt.update(model, {"weight": mx.ones((2, 2)), "bias": mx.zeros((2,))})
    np.testing.assert_allclose(np.array(model.weight), w - 0.5)
    np.testing.assert_allclose(np.array(opt.state["weight"]["v"]), np.ones((2, 2)))
    # init keeps existing state and adds missing leaves.
    opt.init({"weight": mx.zeros((2, 2)), "bias": mx.zeros((2,)), "extra": [mx.zeros(3)]})
    np.testing.assert_allclose(np.array(opt.state["weight"]["v"]), np.ones((2, 2)))
    assert opt.state["extra"][0]["v"].shape == (3,)
    opt.learning_rate = 0.1
    assert opt.learning_rate.item() == pytest.approx(0.1)


def test_multi_optimizer():
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 1))
    w0 = {k: np.array(v) for k, v in tree_flatten(model.parameters())}
    opt = optim.MultiOptimizer(
        [optim.SGD(0.5), optim.SGD(0.1)], [lambda path, a: path.endswith("bias")]
    )
    opt.init(model.trainable_parameters())
    grads = tree_map(mx.ones_like, model.trainable_parameters())
    opt.update(model, grads)
    for k, v in tree_flatten(model.parameters()):
        lr = 0.5 if k.endswith("bias") else 0.1
        np.testing.assert_allclose(np.array(v), w0[k] - lr, rtol=1e-6, err_msg=k)
    assert len(opt.state["states"]) == 2 and opt.learning_rate.item() == pytest.approx(0.5)
    opt.learning_rate = 0.2
    assert opt.optimizers[1].learning_rate.item() == pytest.approx(0.2)
    with pytest.raises(ValueError):
        optim.MultiOptimizer([optim.SGD(0.1), optim.SGD(0.1)], [])
    with pytest.raises(ValueError):
        opt.state = {"states": []}


def test_optimizer_argument_errors():
    with pytest.raises(ValueError):
        optim.SGD(0.1, nesterov=True)
    with pytest.raises(ValueError):
        optim.Adam(0.1, betas=[1.0, 0.9])
    with pytest.raises(ValueError):
        optim.RMSprop(0.1, eps=0)
    with pytest.raises(ValueError):
        optim.Adagrad(0.1, eps=-1)
    with pytest.raises(ValueError):
        optim.AdaDelta(0.1, rho=-0.5)
    with pytest.raises(ValueError):
        optim.clip_grad_norm({}, -1.0)


def test_schedules():
    steps = mx.arange(0, 12)
    s = np.arange(0, 12)
    np.testing.assert_allclose(
        np.array(optim.exponential_decay(0.1, 0.9)(steps)), 0.1 * 0.9**s, rtol=1e-5
    )
    np.testing.assert_allclose(
        np.array(optim.step_decay(0.1, 0.5, 4)(steps)), 0.1 * 0.5 ** (s // 4), rtol=1e-5
    )
    cd = 0.01 + 0.5 * (1 + np.cos(np.pi * np.minimum(s, 8) / 8)) * (0.1 - 0.01)
    np.testing.assert_allclose(np.array(optim.cosine_decay(0.1, 8, 0.01)(steps)), cd, rtol=1e-5)
    lin = np.minimum(s, 5) * (1.0 - 0.0) / 5
    np.testing.assert_allclose(np.array(optim.linear_schedule(0.0, 1.0, 5)(steps)), lin, rtol=1e-6)
    joined = optim.join_schedules(
        [optim.linear_schedule(0, 1, 4), optim.exponential_decay(1.0, 0.5)], [4]
    )
    ref = np.where(s < 4, s / 4, 0.5 ** (s - 4))
    np.testing.assert_allclose(np.array(joined(steps)), ref, rtol=1e-6)
    for bad in (
        lambda: optim.cosine_decay(1, 0),
        lambda: optim.linear_schedule(0, 1, 0),
        lambda: optim.join_schedules([], []),
        lambda: optim.join_schedules([lambda t: t], [1]),
    ):
        with pytest.raises(ValueError):
            bad()


def test_scheduled_learning_rate_in_optimizer():
    opt = optim.SGD(optim.exponential_decay(1.0, 0.5))
    p = {"w": mx.array([0.0])}
    for _ in range(3):
        p = opt.apply_gradients({"w": mx.array([1.0])}, p)
    # Learning rates 1, 0.5, 0.25 (the schedule runs before each step).
    assert p["w"].item() == pytest.approx(-1.75)
    assert opt.learning_rate.item() == pytest.approx(0.25)


def test_clip_grad_norm():
    g = {"a": mx.array([3.0, 0.0]), "b": [mx.array([[4.0]])]}
    clipped, norm = optim.clip_grad_norm(g, 1.0)
    assert norm.item() == pytest.approx(5.0)
    got = np.concatenate([np.array(v).ravel() for _, v in tree_flatten(clipped)])
    np.testing.assert_allclose(got, np.array([3.0, 0.0, 4.0]) / (5.0 + 1e-6), rtol=1e-6)
    same, _ = optim.clip_grad_norm(g, 10.0)
    np.testing.assert_allclose(np.array(same["a"]), [3.0, 0.0])
    half, n = optim.clip_grad_norm({"a": mx.full((4,), 300.0, mx.float16)}, 1.0)
    assert half["a"].dtype == mx.float16 and n.item() == pytest.approx(600.0)  # no float16 overflow
    np.testing.assert_allclose(np.array(half["a"]).astype(np.float32), 0.5, rtol=1e-3)


def test_bias_correction_uses_float_step():
    # b ** step with the uint64 step must give a float array.
    opt = optim.Adam(0.1, bias_correction=True)
    p = opt.apply_gradients({"w": mx.array([2.0])}, {"w": mx.array([0.0])})
    # First step with bias correction: m_hat = g, v_hat = g^2, update = lr * sign(g).
    assert p["w"].item() == pytest.approx(-0.1, rel=1e-4)
    assert math.isfinite(p["w"].item())


@pytest.mark.parametrize(
    "name", ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "AdaDelta", "Lion", "Adamax"]
)
def test_optimizer_matches_mlx(name):
    mlx = pytest.importorskip("mlx.core")
    moptim = pytest.importorskip("mlx.optimizers")
    kw = {"SGD": {"momentum": 0.9, "nesterov": True}, "Adam": {"bias_correction": True}}.get(
        name, {}
    )
    sched = optim.cosine_decay(0.05, 4)
    msched = moptim.cosine_decay(0.05, 4)
    ours, theirs = getattr(optim, name)(sched, **kw), getattr(moptim, name)(msched, **kw)
    p0, grads = _params(), _grads(STEPS)
    a = tree_map(mx.array, p0)
    b = tree_map(mlx.array, p0)
    for g in grads:
        a = ours.apply_gradients(tree_map(mx.array, g), a)
        b = theirs.apply_gradients(tree_map(mlx.array, g), b)
    np.testing.assert_allclose(np.array(a["a"]), np.array(b["a"]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.array(a["b"][0]), np.array(b["b"][0]), rtol=1e-5, atol=1e-6)
    ga = optim.clip_grad_norm(tree_map(mx.array, grads[0]), 0.5)[0]
    gb = moptim.clip_grad_norm(tree_map(mlx.array, grads[0]), 0.5)[0]
    np.testing.assert_allclose(np.array(ga["a"]), np.array(gb["a"]), rtol=1e-5)
