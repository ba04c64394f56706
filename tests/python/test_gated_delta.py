"""mx.fast.gated_delta_update: values and dtypes equal MLX's CPU results (scalar and
per-key gates, grouped heads, initial states, masks, half inputs), a float64 numpy
recurrence agrees, and gradients, vmap and compile go through it as through MLX's."""

import kiln.core as mx
import numpy as np
import pytest

DTYPES = ["float32", "float16", "bfloat16"]


def _mlx():
    return pytest.importorskip("mlx.core")


def np_of(a):
    if "bfloat16" in str(a.dtype):
        a = a.astype(mx.float32 if isinstance(a, mx.array) else _mlx().float32)
    return np.array(a)


def inputs(rng, B, T, Hk, Hv, Dk, Dv, vector_gate=False):
    return {
        "q": rng.normal(size=(B, T, Hk, Dk)).astype(np.float32),
        "k": (rng.normal(size=(B, T, Hk, Dk)) * 0.3).astype(np.float32),
        "v": rng.normal(size=(B, T, Hv, Dv)).astype(np.float32),
        "gamma": rng.uniform(0.5, 1.0, size=(B, T, Hv, Dk) if vector_gate else (B, T, Hv)).astype(np.float32),
        "beta": rng.uniform(size=(B, T, Hv)).astype(np.float32),
    }


def np_gated_delta(q, k, v, gamma, beta, state=None, mask=None):
    """float64 numpy: the recurrence step by step."""
    q, k, v, gamma, beta = (np.asarray(a, np.float64) for a in (q, k, v, gamma, beta))
    B, T, Hk, Dk = q.shape
    Hv, Dv = v.shape[2:]
    q, k = np.repeat(q, Hv // Hk, axis=2), np.repeat(k, Hv // Hk, axis=2)
    S = np.zeros((B, Hv, Dv, Dk)) if state is None else np.asarray(state, np.float64)
    ys = []
    for t in range(T):
        g = gamma[:, t, :, None, None] if gamma.ndim == 3 else gamma[:, t, :, None, :]
        new = S * g
        delta = (v[:, t] - (new * k[:, t, :, None, :]).sum(-1)) * beta[:, t, :, None]
        new = new + k[:, t, :, None, :] * delta[..., None]
        y = (new * q[:, t, :, None, :]).sum(-1)
        if mask is not None:
            new = np.where(mask[:, t, None, None, None], new, S)
            y = np.where(mask[:, t, None, None], y, 0.0)
        S = new
        ys.append(y)
    return np.stack(ys, 1), S


SHAPES = [(2, 5, 2, 4, 16, 8), (1, 6, 1, 1, 32, 32), (2, 3, 3, 6, 8, 4)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("vector_gate", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_matches_mlx(shape, vector_gate, dtype):
    mlx = _mlx()
    rng = np.random.default_rng(sum(shape) + vector_gate)
    a = inputs(rng, *shape, vector_gate=vector_gate)
    B, T, _, Hv, Dk, Dv = shape
    extras = [{}, {"initial_state": rng.normal(size=(B, Hv, Dv, Dk)).astype(np.float32)},
              {"mask": rng.random((B, T)) > 0.4}]
    for extra in extras:
        m_args = {n: mlx.array(x).astype(getattr(mlx, dtype)) if n in "qkv" else mlx.array(x) for n, x in a.items()}
        k_args = {n: mx.array(x).astype(getattr(mx, dtype)) if n in "qkv" else mx.array(x) for n, x in a.items()}
        my, ms = mlx.fast.gated_delta_update(**m_args, **{n: mlx.array(x) for n, x in extra.items()})
        ky, ks = mx.fast.gated_delta_update(**k_args, **{n: mx.array(x) for n, x in extra.items()})
        assert ky.dtype == getattr(mx, dtype) and ks.dtype == mx.float32
        assert ky.shape == (B, T, Hv, Dv) and ks.shape == (B, Hv, Dv, Dk)
        if Dk <= 16:  # short reductions sum in MLX's order: the same bits
            np.testing.assert_array_equal(np_of(ky), np_of(my))
            np.testing.assert_array_equal(np.array(ks), np.array(ms))
        else:
            tol = 1e-5 if dtype == "float32" else {"float16": 2e-3, "bfloat16": 1e-2}[dtype]
            np.testing.assert_allclose(np_of(ky), np_of(my), rtol=tol, atol=tol)
            np.testing.assert_allclose(np.array(ks), np.array(ms), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", SHAPES[:2], ids=lambda s: "x".join(map(str, s)))
def test_matches_numpy(shape):
    rng = np.random.default_rng(1)
    a = inputs(rng, *shape, vector_gate=True)
    B, T, _, Hv, Dk, Dv = shape
    S0 = rng.normal(size=(B, Hv, Dv, Dk)).astype(np.float32)
    mask = rng.random((B, T)) > 0.5
    mask[:, 0] = False  # a masked first step keeps the initial state
    y, S = mx.fast.gated_delta_update(**{n: mx.array(x) for n, x in a.items()},
                                      initial_state=mx.array(S0), mask=mx.array(mask))
    ry, rS = np_gated_delta(**a, state=S0, mask=mask)
    np.testing.assert_allclose(np.array(y), ry, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.array(S), rS, rtol=1e-4, atol=1e-5)
    assert np.all(np.array(y)[~mask] == 0)
    # a zero decay forgets everything before the step; beta = 0 never writes
    a["gamma"][:, :] = 0.0
    y, S = mx.fast.gated_delta_update(**{n: mx.array(x) for n, x in a.items()},
                                      initial_state=mx.array(S0))
    np.testing.assert_allclose(np.array(y), np_gated_delta(**a)[0], rtol=1e-4, atol=1e-5)
    a["beta"][:] = 0.0
    y, S = mx.fast.gated_delta_update(**{n: mx.array(x) for n, x in a.items()})
    assert not np.array(y).any() and not np.array(S).any()


def test_dtypes_follow_mlx():
    mlx = _mlx()
    rng = np.random.default_rng(2)
    a = inputs(rng, 1, 3, 1, 2, 4, 3)
    combos = [("float16", "float16", "float32"), ("float32", "float16", "float16"),
              ("float16", "float32", "float16"), ("float16", "float16", "bfloat16"),
              ("bfloat16", "float16", "float32"), ("int32", "int32", "float16"),
              ("float16", "int32", "float32"), ("float64", "float32", "float32"),
              ("bool_", "bool_", "float32")]
    for dq, dk, dv in combos:
        outs = []
        for mod in (mlx, mx):
            cast = {"q": dq, "k": dk, "v": dv}
            args = {n: (mod.array(x * 3).astype(getattr(mod, cast[n])) if n in cast else mod.array(x))
                    for n, x in a.items()}
            with mod.stream(mod.cpu):
                y, S = mod.fast.gated_delta_update(**args)
            outs.append((y, S))
        (my, ms), (ky, ks) = outs
        assert str(ky.dtype).split(".")[-1] == str(my.dtype).split(".")[-1], (dq, dk, dv)
        assert str(ks.dtype).split(".")[-1] == str(ms.dtype).split(".")[-1], (dq, dk, dv)
        np.testing.assert_allclose(np_of(ky), np_of(my), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(np.array(ks), np.array(ms), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("masked", [False, True])
def test_gradients_match_mlx(masked):
    mlx = _mlx()
    rng = np.random.default_rng(3)
    B, T, Hk, Hv, Dk, Dv = 2, 4, 1, 2, 8, 4
    a = inputs(rng, B, T, Hk, Hv, Dk, Dv)
    a["initial_state"] = rng.normal(size=(B, Hv, Dv, Dk)).astype(np.float32)
    mask = rng.random((B, T)) > 0.3 if masked else None
    wy = rng.normal(size=(B, T, Hv, Dv)).astype(np.float32)
    ws = rng.normal(size=(B, Hv, Dv, Dk)).astype(np.float32)
    names = ["q", "k", "v", "gamma", "beta", "initial_state"]

    def grads(mod):
        def loss(*xs):
            y, S = mod.fast.gated_delta_update(*xs, None if mask is None else mod.array(mask))
            return (y * mod.array(wy)).sum() + (S * mod.array(ws)).sum()

        return mod.grad(loss, argnums=tuple(range(6)))(*[mod.array(a[n]) for n in names])

    for n, gm, gk in zip(names, grads(mlx), grads(mx)):
        np.testing.assert_allclose(np.array(gk), np.array(gm), rtol=1e-4, atol=1e-5, err_msg=n)


def test_gradient_matches_finite_differences():
    """Without MLX: the gradient of gamma against central differences, in float64."""
    rng = np.random.default_rng(4)
    a = inputs(rng, 1, 3, 1, 1, 4, 2)
    a = {n: x.astype(np.float64) for n, x in a.items()}
    w = rng.normal(size=(1, 3, 1, 2))

    f64 = lambda x: mx.array(x, dtype=mx.float64)  # noqa: E731

    def loss(gamma):
        y = mx.fast.gated_delta_update(f64(a["q"]), f64(a["k"]), f64(a["v"]), gamma, f64(a["beta"]))[0]
        return (y * f64(w)).sum()

    with mx.stream(mx.cpu):
        g = np.array(mx.grad(loss)(f64(a["gamma"])))
        assert g.dtype == np.float64
        eps = 1e-6
        for idx in np.ndindex(a["gamma"].shape):
            d = np.zeros_like(a["gamma"])
            d[idx] = eps
            fd = (loss(f64(a["gamma"] + d)).item() - loss(f64(a["gamma"] - d)).item()) / (2 * eps)
            assert abs(g[idx] - fd) < 1e-6 * max(1, abs(fd))


def test_vmap_and_compile():
    rng = np.random.default_rng(5)
    a = {n: mx.array(x) for n, x in inputs(rng, 1, 4, 1, 2, 8, 4).items()}
    qs = mx.stack([a["q"], 2 * a["q"], -a["q"]])
    f = lambda q: mx.fast.gated_delta_update(q, a["k"], a["v"], a["gamma"], a["beta"])[0]  # noqa: E731
    batched = mx.vmap(f)(qs)
    for i in range(3):
        np.testing.assert_allclose(np.array(batched[i]), np.array(f(qs[i])), rtol=1e-6, atol=1e-6)
    full = lambda *xs: mx.fast.gated_delta_update(*xs)  # noqa: E731
    args = [a[n] for n in ("q", "k", "v", "gamma", "beta")]
    for got, want in zip(mx.compile(full)(*args), full(*args)):
        np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-6, atol=1e-6)


def test_errors():
    z = mx.zeros
    with pytest.raises(ValueError, match=r"^\[gated_delta_update\] q and k"):
        mx.fast.gated_delta_update(z((2, 3, 4)), z((2, 3, 4)), z((2, 3, 1, 4)), z((2, 3, 1)), z((2, 3, 1)))
    with pytest.raises(ValueError, match=r"^\[gated_delta_update\] v must"):
        mx.fast.gated_delta_update(z((1, 3, 1, 4)), z((1, 3, 1, 4)), z((1, 2, 1, 4)), z((1, 3, 1)), z((1, 3, 1)))
    with pytest.raises(ValueError, match="multiple of the number of key heads"):
        mx.fast.gated_delta_update(z((1, 3, 2, 4)), z((1, 3, 2, 4)), z((1, 3, 3, 4)), z((1, 3, 3)), z((1, 3, 3)))
    with pytest.raises(ValueError, match="gamma must be"):
        mx.fast.gated_delta_update(z((1, 3, 1, 4)), z((1, 3, 1, 4)), z((1, 3, 1, 4)), z((1, 3)), z((1, 3, 1)))
