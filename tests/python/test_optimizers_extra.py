"""optimizers.Adafactor and optimizers.Muon: against numpy references over several steps
(1-d to 4-d parameters, every option), against MLX eagerly (float32 and half dtypes, state
keys) and inside MLX's compiled training step with lazily created state."""

from functools import partial

import kiln.core as mx
import kiln.nn as nn
import kiln.optimizers as optim
import numpy as np
import pytest
from kiln.utils import tree_flatten, tree_map

RNG = np.random.default_rng(7)
SHAPES = {"v": (5,), "m": (4, 3), "t": (2, 3, 4), "c": (3, 2, 2, 2)}
STEPS = 4


def _params():
    return {k: RNG.standard_normal(s).astype(np.float32) for k, s in SHAPES.items()}


def _grads(n):
    return [
        {k: RNG.standard_normal(s).astype(np.float32) for k, s in SHAPES.items()} for _ in range(n)
    ]


def _rms(a):
    return np.sqrt(np.mean(a * a))


def adafactor_ref(
    p,
    grads,
    lr=None,
    eps=(1e-30, 1e-3),
    clip=1.0,
    decay=-0.8,
    beta_1=None,
    wd=0.0,
    scale_parameter=True,
    relative_step=True,
    warmup_init=False,
):
    """Adafactor from the paper's algorithm, in float64, one parameter."""
    p = p.astype(np.float64)
    factored = p.ndim >= 2
    r = np.zeros(p.shape[:-1])
    c = np.zeros(p.shape[:-2] + p.shape[-1:])
    v = np.zeros(p.shape)
    m = np.zeros(p.shape)
    for t, g in enumerate(grads, 1):
        g = g.astype(np.float64)
        rho = min(1e-6 * t if warmup_init else 1e-2, 1 / np.sqrt(t)) if relative_step else lr
        alpha = max(eps[1], _rms(p)) * rho if scale_parameter else rho
        b2 = 1 - t**decay
        sq = g * g + eps[0]
        if factored:
            r = b2 * r + (1 - b2) * sq.mean(-1)
            c = b2 * c + (1 - b2) * sq.mean(-2)
            vhat = r[..., :, None] * c[..., None, :] / r.mean(-1)[..., None, None]
        else:
            v = b2 * v + (1 - b2) * sq
            vhat = v
        u = g / np.sqrt(vhat)
        u = alpha * u / max(1.0, _rms(u) / clip)
        if beta_1 is not None:
            m = beta_1 * m + (1 - beta_1) * u
            u = m
        p = p * (1 - wd * alpha) - u
    return p


def _newton_schulz(x, steps):
    a, b, c = 3.4445, -4.7750, 2.0315
    tall = x.shape[0] > x.shape[1]
    x = x.T if tall else x
    x = x / (np.linalg.norm(x) + 1e-7)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if tall else x


def muon_ref(p, grads, lr, momentum=0.95, wd=0.01, nesterov=True, ns_steps=5):
    p = p.astype(np.float64)
    v = np.zeros_like(p)
    for g in grads:
        g = g.astype(np.float64) + wd * p
        v = momentum * v + (1 - momentum) * g
        u = (1 - momentum) * g + momentum * v if nesterov else v
        scale = lr
        if u.ndim >= 2:
            u = _newton_schulz(u.reshape(u.shape[0], -1), ns_steps).reshape(u.shape)
            scale = lr * max(1, u.shape[-2] / u.shape[-1]) ** 0.5
        p = p - scale * u
    return p


ADAFACTOR_CASES = [
    {},
    {"beta_1": 0.9, "weight_decay": 0.1},
    {"warmup_init": True, "clip_threshold": 0.5, "decay_rate": -0.5},
    {"learning_rate": 0.02, "relative_step": False, "scale_parameter": False},
    {"learning_rate": 0.05, "relative_step": False, "eps": (1e-20, 1e-2), "beta_1": 0.5},
]
MUON_CASES = [
    {"learning_rate": 0.02},
    {"learning_rate": 0.05, "momentum": 0.9, "nesterov": False, "weight_decay": 0.0},
    {"learning_rate": 0.01, "ns_steps": 2, "weight_decay": 0.1},
]


def _ref_kwargs(kw, names):
    return {names.get(k, k): v for k, v in kw.items()}


def _run(opt, p0, grads, module=mx):
    params = tree_map(module.array, p0)
    for g in grads:
        params = opt.apply_gradients(tree_map(module.array, g), params)
    return params


@pytest.mark.parametrize("kw", ADAFACTOR_CASES)
def test_adafactor_matches_reference(kw):
    p0, grads = _params(), _grads(STEPS)
    got = _run(optim.Adafactor(**kw), p0, grads)
    names = {
        "learning_rate": "lr",
        "clip_threshold": "clip",
        "decay_rate": "decay",
        "weight_decay": "wd",
    }
    for k in SHAPES:
        ref = adafactor_ref(p0[k], [g[k] for g in grads], **_ref_kwargs(kw, names))
        np.testing.assert_allclose(np.array(got[k]), ref, rtol=1e-4, atol=1e-6, err_msg=k)


@pytest.mark.parametrize("kw", MUON_CASES)
def test_muon_matches_reference(kw):
    p0, grads = _params(), _grads(STEPS)
    got = _run(optim.Muon(**kw), p0, grads)
    names = {"learning_rate": "lr", "weight_decay": "wd"}
    for k in SHAPES:
        ref = muon_ref(p0[k], [g[k] for g in grads], **_ref_kwargs(kw, names))
        np.testing.assert_allclose(np.array(got[k]), ref, rtol=1e-4, atol=1e-5, err_msg=k)


def test_state_layout_and_errors():
    opt = optim.Adafactor(beta_1=0.9)
    opt.init({k: mx.zeros(s) for k, s in SHAPES.items()})
    assert set(opt.state) == {"step"} | set(SHAPES)  # no learning rate without one
    assert set(opt.state["v"]) == {"exp_avg_sq", "exp_avg"}
    assert set(opt.state["m"]) == {"exp_avg_sq_row", "exp_avg_sq_col", "exp_avg"}
    assert opt.state["t"]["exp_avg_sq_row"].shape == (2, 3)
    assert opt.state["t"]["exp_avg_sq_col"].shape == (2, 4)
    muon = optim.Muon(0.1)
    muon.init({"w": mx.zeros((2, 2))})
    assert set(muon.state) == {"step", "learning_rate", "w"} and set(muon.state["w"]) == {"v"}
    with pytest.raises(ValueError, match="Adafactor"):
        optim.Adafactor(relative_step=False).apply_gradients({"w": mx.ones(2)}, {"w": mx.ones(2)})
    late = optim.Adafactor(relative_step=False)
    late.learning_rate = 0.1  # a learning rate set after construction is used
    out = late.apply_gradients({"w": mx.ones(2)}, {"w": mx.ones(2)})
    assert np.isfinite(np.array(out["w"])).all()
    with pytest.raises(ValueError, match="Muon"):
        optim.Muon(0.1, ns_steps=-1)
    with pytest.raises(ValueError, match="eps"):
        optim.Adafactor(eps=1e-3)


def test_scheduled_learning_rates():
    sched = optim.cosine_decay(0.05, 4)
    p0, grads = {"w": RNG.standard_normal((3, 5)).astype(np.float32)}, None
    grads = [{"w": RNG.standard_normal((3, 5)).astype(np.float32)} for _ in range(3)]
    opt = optim.Muon(sched, weight_decay=0.0)
    got = _run(opt, p0, grads)
    # Each step uses the schedule's value at the step count before it.
    ref = p0["w"].astype(np.float64)
    v = np.zeros_like(ref)
    for t, g in enumerate(grads):
        lr = 0.5 * (1 + np.cos(np.pi * t / 4)) * 0.05
        v = 0.95 * v + 0.05 * g["w"]
        u = _newton_schulz(0.05 * g["w"] + 0.95 * v, 5)
        ref = ref - lr * u
    np.testing.assert_allclose(np.array(got["w"]), ref, rtol=1e-4, atol=1e-6)
    assert opt.learning_rate.item() == pytest.approx(0.5 * (1 + np.cos(np.pi * 2 / 4)) * 0.05)


def _mlx():
    mlx = pytest.importorskip("mlx.core")
    moptim = pytest.importorskip("mlx.optimizers")
    mlx.set_default_device(mlx.cpu)
    return mlx, moptim


@pytest.mark.parametrize(
    "name,kw", [("Adafactor", kw) for kw in ADAFACTOR_CASES] + [("Muon", kw) for kw in MUON_CASES]
)
def test_matches_mlx(name, kw):
    mlx, moptim = _mlx()
    p0, grads = _params(), _grads(STEPS)
    ours, theirs = getattr(optim, name)(**kw), getattr(moptim, name)(**kw)
    a, b = _run(ours, p0, grads), _run(theirs, p0, grads, mlx)
    for k in SHAPES:
        np.testing.assert_allclose(np.array(a[k]), np.array(b[k]), rtol=1e-5, atol=1e-6, err_msg=k)
    sa = {k: np.array(v) for k, v in tree_flatten(ours.state)}
    sb = {k: np.array(v) for k, v in tree_flatten(theirs.state)}
    assert set(sa) == set(sb)
    for k in sa:
        assert sa[k].dtype == sb[k].dtype, k
        np.testing.assert_allclose(sa[k], sb[k], rtol=1e-5, atol=1e-7, err_msg=k)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize(
    "name,kw", [("Adafactor", {"beta_1": 0.9}), ("Muon", {"learning_rate": 0.02})]
)
def test_half_precision_matches_mlx(name, kw, dtype):
    mlx, moptim = _mlx()
    p0, grads = _params(), _grads(2)
    ours, theirs = getattr(optim, name)(**kw), getattr(moptim, name)(**kw)
    a = tree_map(lambda v: mx.array(v).astype(getattr(mx, dtype)), p0)
    b = tree_map(lambda v: mlx.array(v).astype(getattr(mlx, dtype)), p0)
    for g in grads:
        a = ours.apply_gradients(tree_map(lambda v: mx.array(v).astype(getattr(mx, dtype)), g), a)
        b = theirs.apply_gradients(
            tree_map(lambda v: mlx.array(v).astype(getattr(mlx, dtype)), g), b
        )
    for k in SHAPES:
        assert a[k].dtype == getattr(mx, dtype)
        av = np.array(a[k].astype(mx.float32))
        bv = np.array(b[k].astype(mlx.float32))
        np.testing.assert_allclose(av, bv, rtol=2e-2, atol=2e-2, err_msg=k)


X = RNG.normal(size=(32, 6)).astype(np.float32)
Y = RNG.integers(0, 3, size=(32,)).astype(np.int32)


def _train(core, nn_mod, opt, steps=3):
    """MLX's canonical compiled step on a small MLP, optimizer state created lazily."""
    core.random.seed(3)
    model = nn_mod.Sequential(nn_mod.Linear(6, 8), nn_mod.ReLU(), nn_mod.Linear(8, 3))
    state = [model.state, opt.state]
    loss_and_grad = nn_mod.value_and_grad(
        model, lambda m, x, y: nn_mod.losses.cross_entropy(m(x), y, reduction="mean")
    )

    @partial(core.compile, inputs=state, outputs=state)
    def step(x, y):
        loss, grads = loss_and_grad(model, x, y)
        opt.update(model, grads)
        return loss

    losses = []
    for _ in range(steps):
        loss = step(core.array(X), core.array(Y))
        core.eval(loss, state)
        losses.append(loss.item())
    return losses, {k: np.array(v) for k, v in tree_flatten(model.parameters())}


@pytest.mark.parametrize(
    "name,kw",
    [
        ("Adafactor", {}),
        (
            "Adafactor",
            {
                "learning_rate": optim.linear_schedule(0.05, 0.0, 10),
                "relative_step": False,
                "beta_1": 0.9,
            },
        ),
        ("Muon", {"learning_rate": 0.05}),
    ],
)
def test_compiled_training_step_matches_eager_and_mlx(name, kw):
    losses, final = _train(mx, nn, getattr(optim, name)(**kw))
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
    # The same steps run eagerly give the same model.
    mx.random.seed(3)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    opt = getattr(optim, name)(**kw)
    lg = nn.value_and_grad(
        model, lambda m, x, y: nn.losses.cross_entropy(m(x), y, reduction="mean")
    )
    for _ in range(3):
        _, g = lg(model, mx.array(X), mx.array(Y))
        opt.update(model, g)
    for k, v in tree_flatten(model.parameters()):
        np.testing.assert_allclose(final[k], np.array(v), rtol=1e-5, atol=1e-6, err_msg=k)
    mlx, moptim = _mlx()
    import mlx.nn as mnn

    mkw = dict(kw)
    if "learning_rate" in mkw and callable(mkw["learning_rate"]):
        mkw["learning_rate"] = moptim.linear_schedule(0.05, 0.0, 10)
    ref_losses, ref_final = _train(mlx, mnn, getattr(moptim, name)(**mkw))
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5, atol=1e-6)
    for k in final:
        np.testing.assert_allclose(final[k], ref_final[k], rtol=1e-4, atol=1e-5, err_msg=k)
