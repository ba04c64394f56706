"""Captured state that a compiled function creates or grows: the training step MLX programs
write (`inputs=state, outputs=state` with an optimizer whose state the first step makes),
for every optimizer, against MLX; and no placeholder is ever left in captured state."""

from functools import partial

import kiln.core as mx
import kiln.nn as nn
import kiln.optimizers as optim
import numpy as np
import pytest

from kiln.utils import tree_flatten

RNG = np.random.default_rng(0)
X = RNG.normal(size=(64, 8)).astype(np.float32)
Y = RNG.integers(0, 4, size=(64,)).astype(np.int32)

# name -> constructor arguments, the same for kiln.optimizers and mlx.optimizers.
OPTIMIZERS = {
    "SGD": dict(learning_rate=0.1),
    "SGD-momentum": dict(learning_rate=0.1, momentum=0.9, weight_decay=1e-3, nesterov=True),
    "RMSprop": dict(learning_rate=1e-2),
    "Adagrad": dict(learning_rate=1e-1),
    "AdaDelta": dict(learning_rate=1.0),
    "Adam": dict(learning_rate=1e-2),
    "AdamW": dict(learning_rate=1e-2),
    "Adamax": dict(learning_rate=1e-2),
    "Lion": dict(learning_rate=1e-3),
}


def _make(opt_mod, name: str, schedule: bool):
    kwargs = dict(OPTIMIZERS[name])
    if schedule:
        kwargs["learning_rate"] = opt_mod.linear_schedule(kwargs["learning_rate"], 0.0, 10)
    return getattr(opt_mod, name.split("-")[0])(**kwargs)


def _train(core, nn_mod, opt_mod, name: str, schedule: bool, steps: int = 3):
    """MLX's canonical compiled step, on a lazily initialised optimizer (no opt.init)."""
    core.random.seed(0)
    model = nn_mod.Linear(8, 4)
    params = {k: np.array(v) for k, v in tree_flatten(model.parameters())}
    opt = _make(opt_mod, name, schedule)
    state = [model.state, opt.state, core.random.state]
    loss_and_grad = nn_mod.value_and_grad(
        model, lambda m, x, y: nn_mod.losses.cross_entropy(m(x), y, reduction="mean")
    )

    @partial(core.compile, inputs=state, outputs=state)
    def step(x, y):
        loss, grads = loss_and_grad(model, x, y)
        opt.update(model, grads)
        return loss

    losses = []
    x, y = core.array(X), core.array(Y)
    for _ in range(steps):
        loss = step(x, y)
        core.eval(loss, state)
        losses.append(loss.item())
    # Random state must still be a key (a grown state once landed an array of another
    # shape in it).
    assert tuple(core.random.state[0].shape) == (2,)
    core.random.uniform(shape=(2,))
    return losses, params, {k: np.array(v) for k, v in tree_flatten(model.parameters())}, step


@pytest.mark.parametrize("schedule", [False, True])
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_lazy_optimizer_state_in_compiled_step(name, schedule):
    losses, init, final, step = _train(mx, nn, optim, name, schedule)
    assert all(np.isfinite(losses))
    assert losses[-1] < losses[0] or name in ("Lion", "AdaDelta")
    info = step.explain()
    # First call: traced with the empty state (and not cached, since it grew the state);
    # second: traced with the grown state; third: replayed.
    assert info["traces"] == 2 and info["cache_hits"] == 1
    mlx = pytest.importorskip("mlx.core")
    import mlx.nn as mnn
    import mlx.optimizers as moptim

    mlx.set_default_device(mlx.cpu)
    ref_losses, ref_init, ref_final, _ = _train(mlx, mnn, moptim, name, schedule)
    for k in init:
        np.testing.assert_array_equal(init[k], ref_init[k])  # same initial weights
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5, atol=1e-6)
    for k in final:
        np.testing.assert_allclose(final[k], ref_final[k], rtol=1e-4, atol=1e-5, err_msg=k)


def test_mlx_issue_example_losses():
    """The report's example: AdamW created lazily inside the compiled step."""
    mx.random.seed(0)
    m = nn.Linear(8, 4)
    opt = optim.AdamW(learning_rate=1e-2)
    state = [m.state, opt.state]
    lg = nn.value_and_grad(m, lambda m, x, y: nn.losses.cross_entropy(m(x), y, reduction="mean"))

    @partial(mx.compile, inputs=state, outputs=state)
    def step(x, y):
        loss, g = lg(m, x, y)
        opt.update(m, g)
        return loss

    out = []
    for _ in range(3):
        loss = step(mx.array(X), mx.array(Y))
        mx.eval(loss, state)
        out.append(loss.item())
    assert out[2] < out[1] < out[0]
    assert set(opt.state) >= {"step", "learning_rate", "weight", "bias"}
    assert opt.state["step"].item() == 3


def test_grown_dict_and_list_written_back():
    state = {"n": mx.array(0.0), "hist": []}

    @partial(mx.compile, inputs=state, outputs=state)
    def f(x):
        state["n"] = state["n"] + x
        if "first" not in state:
            state["first"] = x * 2
        state["hist"].append(state["n"])
        return state["n"]

    for i in range(3):
        f(mx.array(1.0))
    mx.eval(state)
    assert state["n"].item() == 3.0
    assert state["first"].item() == 2.0
    # The list grows on every trace; each call sees a new structure and traces again.
    assert [h.item() for h in state["hist"]] == [1.0, 2.0, 3.0]


def _holds_placeholder(tree) -> bool:
    from kiln import _core

    return any(
        _core._depends_on_placeholder(v) for _, v in tree_flatten(tree) if isinstance(v, mx.array)
    )


def test_state_grown_in_inputs_only_leaves_no_placeholder():
    state = {"a": mx.array(1.0)}

    @partial(mx.compile, inputs=state)
    def f(x):
        state["b"] = state["a"] * x  # grown, but not declared as an output
        return state["a"] + x

    assert f(mx.array(2.0)).item() == 3.0
    assert not _holds_placeholder(state)
    assert "b" not in state


def test_failed_trace_leaves_no_placeholder_and_retries():
    state = {"a": mx.array(1.0)}
    fail = [True]

    @partial(mx.compile, inputs=state, outputs=state)
    def f(x):
        state["m"] = state["a"] + x
        if fail[0]:
            raise RuntimeError("boom")
        return state["m"]

    with pytest.raises(RuntimeError, match="boom"):
        f(mx.array(1.0))
    assert not _holds_placeholder(state)
    assert state["a"].item() == 1.0
    fail[0] = False
    assert f(mx.array(1.0)).item() == 2.0
    mx.eval(state)
    assert state["m"].item() == 2.0


def test_lazy_weights_captured_by_a_trace_are_constants():
    """A layer's weights never evaluated before the first compiled call are lazy constants
    of the trace: their initialising math (random bits and scalars alone) must come out
    with the weights' shape, as eagerly."""
    b = mx.random.uniform(low=-0.4, high=0.4, shape=(1,), key=mx.random.key(3))
    f = mx.compile(lambda x: x + b)
    want = np.ones(3, np.float32) + np.array(b)
    np.testing.assert_allclose(np.array(f(mx.ones((3,)))), want, rtol=1e-6)
    model = nn.Linear(5, 1)
    x = mx.array(X[:6, :5])
    loss = mx.compile(lambda a: ((model(a) - 1.0) ** 2).mean())
    eager = ((model(x) - 1.0) ** 2).mean().item()
    assert abs(loss(x).item() - eager) < 1e-5


def test_undeclared_state_updated_inside_compile_matches_mlx():
    """`opt.update` inside a compiled step whose state is not declared (a common slip): the
    model is not updated across calls, and the loss stays the same, as in MLX."""
    x = mx.random.normal((6, 5), key=mx.random.key(0))
    y = x.sum(axis=1, keepdims=True)
    model = nn.Linear(5, 1)
    opt = optim.SGD(learning_rate=0.1)

    def step(a, b):
        loss, grads = nn.value_and_grad(model, lambda m, a, b: ((m(a) - b) ** 2).mean())(
            model, a, b)
        opt.update(model, grads)
        return loss

    step = mx.compile(step)
    losses = [step(x, y).item() for _ in range(3)]
    assert losses[0] == losses[1] == losses[2], losses
