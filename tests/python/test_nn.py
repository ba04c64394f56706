"""kiln.nn: Module API, layers against numpy references, activations, losses and their
gradients (closed forms and finite differences), init, save/load, train/eval."""

import math

import kiln.core as mx
import kiln.nn as nn
import numpy as np
import pytest
from kiln.utils import tree_flatten

RNG = np.random.default_rng(0)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.array(a), np.asarray(b), rtol=tol, atol=tol)


# ---------------------------------------------------------------------------------------
# Module API


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(3, 4)
        self.layers = [nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2, bias=False)]
        self.extra = {"scale": mx.ones((2,))}
        self._private = mx.zeros((1,))
        self.name = "mlp"

    def __call__(self, x):
        x = self.l1(x)
        for layer in self.layers:
            x = layer(x)
        return x * self.extra["scale"]


def test_parameters_tree_and_attributes():
    m = MLP()
    keys = [k for k, _ in tree_flatten(m.parameters())]
    assert keys == [
        "l1.weight",
        "l1.bias",
        "layers.0.weight",
        "layers.0.bias",
        "layers.2.weight",
        "extra.scale",
    ]
    assert m.name == "mlp" and "name" not in m
    assert isinstance(m.l1, nn.Linear) and m["l1"] is m.l1
    with pytest.raises(AttributeError):
        m.missing
    # children: direct sub-modules; leaf_modules: the ones without sub-modules.
    assert set(m.children()) == {"l1", "layers", "extra"}  # containers count, as in MLX
    assert isinstance(m.children()["layers"][1], nn.ReLU)
    leaves = [k for k, _ in tree_flatten(m.leaf_modules(), is_leaf=nn.Module.is_module)]
    assert leaves == ["l1", "layers.0", "layers.1", "layers.2"]
    names = [k for k, _ in m.named_modules()]
    assert sorted(names) == sorted(["", "l1", "layers.0", "layers.1", "layers.2"])
    assert len(m.modules()) == 5
    text = repr(m)
    assert "(l1): Linear(input_dims=3, output_dims=4, bias=True)" in text
    assert "(layers.1): ReLU()" in text and "extra" not in text


def test_freeze_unfreeze_trainable():
    m = MLP()
    m.freeze()
    assert tree_flatten(m.trainable_parameters()) == []
    m.unfreeze()
    assert len(tree_flatten(m.trainable_parameters())) == 6
    m.l1.freeze(keys="bias")
    keys = [k for k, _ in tree_flatten(m.trainable_parameters())]
    assert "l1.bias" not in keys and "l1.weight" in keys
    m.freeze(recurse=False)  # only m's own arrays (extra.scale)
    keys = [k for k, _ in tree_flatten(m.trainable_parameters())]
    assert "extra.scale" not in keys and "layers.0.weight" in keys
    with pytest.raises(KeyError):
        m.l1.freeze(keys=["nope"], strict=True)


def test_update_apply_update_modules():
    m = MLP()
    new = {"l1": {"weight": mx.zeros((4, 3))}}
    m.update(new)
    assert np.all(np.array(m.l1.weight) == 0)
    with pytest.raises(ValueError):
        m.update({"l9": {"weight": mx.zeros((1,))}})
    m.update({"l9": {"weight": mx.zeros((1,))}}, strict=False)
    with pytest.raises(ValueError):
        m.update({"l1": {"weight": {"x": mx.zeros(1)}}})  # a dict where an array is
    with pytest.raises(ValueError):
        m.update({"l1": mx.zeros(1)})  # an array where a module is
    with pytest.raises(ValueError):
        m.update({"layers": [{}, {}, {}, {}]})  # more list items than the module has
    m.update({"layers": [{}, {}, {"weight": mx.zeros((2, 4))}]})  # gaps set nothing
    assert np.all(np.array(m.layers[2].weight) == 0) and "weight" in m.layers[0]
    m.update({"extra": {"scale": {}}}, strict=False)  # MLX would store the empty dict
    assert isinstance(m.extra["scale"], mx.array)
    m.apply(lambda a: a.astype(mx.float16))
    assert all(v.dtype == mx.float16 for _, v in tree_flatten(m.parameters()))
    m.set_dtype(mx.float32)
    assert all(v.dtype == mx.float32 for _, v in tree_flatten(m.parameters()))
    m.update_modules({"layers": [nn.Identity(), nn.Tanh(), nn.Linear(4, 2)]})
    assert isinstance(m.layers[0], nn.Identity) and len(tree_flatten(m.parameters())) == 5
    seen = []
    m.apply_to_modules(lambda k, mod: seen.append(k))
    assert "layers.2" in seen


def test_train_eval_and_dropout():
    m = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
    assert m.training and m.layers[1].training
    m.eval()
    assert not m.training and not m.layers[1].training
    x = mx.ones((64, 64))
    d = nn.Dropout(0.25)
    assert np.array_equal(np.array(d.eval()(x)), np.array(x))
    d.train()
    mx.random.seed(3)
    y = np.array(d(x))
    assert set(np.unique(y).tolist()) <= {0.0, float(np.float32(1 / 0.75))}
    assert abs((y == 0).mean() - 0.25) < 0.05  # 4096 draws
    with pytest.raises(ValueError):
        nn.Dropout(1.0)
    y2 = np.array(nn.Dropout2d(0.5)(mx.ones((2, 8, 8, 16))))
    # Whole channels are dropped: every (batch, channel) is constant over H and W.
    assert np.all(y2.min(axis=(1, 2)) == y2.max(axis=(1, 2)))
    with pytest.raises(ValueError):
        nn.Dropout2d()(mx.ones((2, 3)))


@pytest.mark.parametrize("ext", [".npz", ".safetensors"])
def test_save_load_round_trip(tmp_path, ext):
    m = MLP()
    f = str(tmp_path / ("w" + ext))
    m.save_weights(f)
    m2 = MLP()
    m2.load_weights(f)
    for (k1, v1), (k2, v2) in zip(tree_flatten(m.parameters()), tree_flatten(m2.parameters())):
        assert k1 == k2 and np.array_equal(np.array(v1), np.array(v2))
    x = mx.array(rand(2, 3))
    close(m(x), np.array(m2(x)))
    with pytest.raises(ValueError):
        m.save_weights(str(tmp_path / "w.txt"))


def test_load_weights_strict_checks():
    m = nn.Linear(2, 3)
    with pytest.raises(ValueError, match="Missing"):
        m.load_weights([("weight", mx.zeros((3, 2)))])
    with pytest.raises(ValueError, match="not in model"):
        m.load_weights([("weight", mx.zeros((3, 2))), ("bias", mx.zeros((3,))), ("x", mx.zeros(1))])
    with pytest.raises(ValueError, match="shape"):
        m.load_weights([("weight", mx.zeros((2, 2))), ("bias", mx.zeros((3,)))])
    m.load_weights([("weight", mx.ones((3, 2)))], strict=False)
    assert np.all(np.array(m.weight) == 1)


# ---------------------------------------------------------------------------------------
# Layers against numpy


def test_linear_bilinear_identity_embedding():
    lin = nn.Linear(5, 3)
    x = rand(2, 4, 5)
    close(lin(mx.array(x)), x @ np.array(lin.weight).T + np.array(lin.bias))
    lim = 1 / math.sqrt(5)
    assert np.abs(np.array(lin.weight)).max() <= lim
    nob = nn.Linear(5, 3, bias=False)
    assert "bias" not in nob
    close(nob(mx.array(x)), x @ np.array(nob.weight).T)

    bil = nn.Bilinear(3, 4, 2)
    x1, x2 = rand(5, 3), rand(5, 4)
    w = np.array(bil.weight)  # (out, in2, in1)
    ref = np.einsum("ni,oji,nj->no", x1, w, x2) + np.array(bil.bias)
    close(bil(mx.array(x1), mx.array(x2)), ref, 1e-4)

    assert nn.Identity(1, a=2)(mx.array(x)) is not None
    emb = nn.Embedding(10, 4)
    ids = np.array([[1, 9], [0, 3]])
    close(emb(mx.array(ids)), np.array(emb.weight)[ids])
    h = rand(3, 4)
    close(emb.as_linear(mx.array(h)), h @ np.array(emb.weight).T)


def _ln_ref(x, eps, w=None, b=None):
    y = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps)
    return y * (1 if w is None else w) + (0 if b is None else b)


def test_norms():
    x = rand(2, 3, 8)
    ln = nn.LayerNorm(8)
    ln.weight = mx.array(rand(8))
    ln.bias = mx.array(rand(8))
    close(ln(mx.array(x)), _ln_ref(x, 1e-5, np.array(ln.weight), np.array(ln.bias)), 1e-4)
    close(nn.LayerNorm(8, affine=False)(mx.array(x)), _ln_ref(x, 1e-5), 1e-4)
    assert "bias" not in nn.LayerNorm(8, bias=False)

    rms = nn.RMSNorm(8, eps=1e-6)
    rms.weight = mx.array(rand(8))
    ref = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * np.array(rms.weight)
    close(rms(mx.array(x)), ref, 1e-4)
    # bfloat16 input and weight: statistics in float32, result in bfloat16.
    rms.set_dtype(mx.bfloat16)
    yb = rms(mx.array(x).astype(mx.bfloat16))
    assert yb.dtype == mx.bfloat16
    close(yb.astype(mx.float32), ref, 5e-2)

    xg = rand(2, 4, 4, 6)
    gn = nn.GroupNorm(3, 6)
    gr = xg.reshape(2, -1, 3)  # channel c in group c % 3
    ref = ((gr - gr.mean(1, keepdims=True)) / np.sqrt(gr.var(1, keepdims=True) + 1e-5)).reshape(
        xg.shape
    )
    close(gn(mx.array(xg)), ref, 1e-4)
    gp = nn.GroupNorm(3, 6, pytorch_compatible=True)
    g2 = xg.reshape(2, -1, 3, 2)  # contiguous groups
    ref = (
        (g2 - g2.mean((1, 3), keepdims=True)) / np.sqrt(g2.var((1, 3), keepdims=True) + 1e-5)
    ).reshape(xg.shape)
    close(gp(mx.array(xg)), ref, 1e-4)

    inorm = nn.InstanceNorm(6)
    ref = (xg - xg.mean((1, 2), keepdims=True)) / np.sqrt(xg.var((1, 2), keepdims=True) + 1e-5)
    close(inorm(mx.array(xg)), ref, 1e-4)


def test_batchnorm_train_eval_running_stats():
    bn = nn.BatchNorm(4, momentum=0.1)
    assert [k for k, _ in tree_flatten(bn.trainable_parameters())] == ["weight", "bias"]
    bn.unfreeze()
    assert [k for k, _ in tree_flatten(bn.trainable_parameters())] == ["weight", "bias"]
    x = rand(8, 3, 4) * 2 + 1
    y = bn(mx.array(x))
    flat = x.reshape(-1, 4)
    close(y, (x - flat.mean(0)) / np.sqrt(flat.var(0) + 1e-5), 1e-4)
    n = flat.shape[0]
    close(bn.running_mean, 0.1 * flat.mean(0), 1e-5)
    close(bn.running_var, 0.9 + 0.1 * flat.var(0) * n / (n - 1), 1e-4)
    bn.eval()
    rm, rv = np.array(bn.running_mean), np.array(bn.running_var)
    close(bn(mx.array(x)), (x - rm) / np.sqrt(rv + 1e-5), 1e-4)
    close(bn.running_mean, rm)  # unchanged in eval mode
    with pytest.raises(ValueError):
        bn(mx.ones((1, 2, 3, 4, 4)))


def _conv_ref(x, w, stride, pad, dil, groups):
    """Direct N-d convolution, channels last, weight (O, *K, I/groups)."""
    nd = x.ndim - 2
    x = np.pad(x, [(0, 0)] + [(p, p) for p in pad] + [(0, 0)])
    O, *K, Ig = w.shape
    out_sp = [(x.shape[1 + i] - dil[i] * (K[i] - 1) - 1) // stride[i] + 1 for i in range(nd)]
    y = np.zeros((x.shape[0], *out_sp, O), np.float64)
    og = O // groups
    for o_idx in np.ndindex(*out_sp):
        for k_idx in np.ndindex(*K):
            pos = tuple(o_idx[i] * stride[i] + k_idx[i] * dil[i] for i in range(nd))
            patch = x[(slice(None), *pos)]  # (N, C)
            for g in range(groups):
                pg = patch[:, g * Ig : (g + 1) * Ig]
                wg = w[(slice(g * og, (g + 1) * og), *k_idx)]  # (og, Ig)
                y[(slice(None), *o_idx, slice(g * og, (g + 1) * og))] += pg @ wg.T
    return y


@pytest.mark.parametrize("stride,pad,dil,groups", [(1, 0, 1, 1), (2, 1, 1, 2), (1, 2, 2, 1)])
def test_conv1d_conv2d(stride, pad, dil, groups):
    c1 = nn.Conv1d(4, 6, 3, stride=stride, padding=pad, dilation=dil, groups=groups)
    c1.bias = mx.array(rand(6))
    x = rand(2, 9, 4)
    ref = _conv_ref(x, np.array(c1.weight), (stride,), (pad,), (dil,), groups) + np.array(c1.bias)
    close(c1(mx.array(x)), ref, 1e-4)
    c2 = nn.Conv2d(4, 2, (3, 2), stride=stride, padding=pad, dilation=dil, groups=groups)
    x = rand(1, 7, 6, 4)
    ref = _conv_ref(x, np.array(c2.weight), (stride,) * 2, (pad,) * 2, (dil,) * 2, groups)
    close(c2(mx.array(x)), ref, 1e-4)
    assert c2.weight.shape == (2, 3, 2, 4 // groups)
    c3 = nn.Conv3d(2 * groups, 2, 2, stride=stride, padding=pad, dilation=dil, groups=groups)
    x = rand(1, 5, 4, 5, 2 * groups)
    ref = _conv_ref(x, np.array(c3.weight), (stride,) * 3, (pad,) * 3, (dil,) * 3, groups)
    close(c3(mx.array(x)), ref, 1e-4)


def _pool_ref(x, k, s, p, op):
    nd = x.ndim - 2
    fill = -np.inf if op == "max" else 0.0
    x = np.pad(x, [(0, 0)] + [(pp, pp) for pp in p] + [(0, 0)], constant_values=fill)
    out_sp = [(x.shape[1 + i] - k[i]) // s[i] + 1 for i in range(nd)]
    y = np.zeros((x.shape[0], *out_sp, x.shape[-1]), x.dtype)
    for o in np.ndindex(*out_sp):
        win = x[(slice(None), *[slice(o[i] * s[i], o[i] * s[i] + k[i]) for i in range(nd)])]
        axes = tuple(range(1, nd + 1))
        y[(slice(None), *o)] = win.max(axes) if op == "max" else win.mean(axes)
    return y


@pytest.mark.parametrize("k,s,p", [(2, None, 0), (3, 2, 1), (3, 1, 0)])
def test_pooling(k, s, p):
    x1 = rand(2, 9, 3)
    s_ = k if s is None else s
    close(nn.MaxPool1d(k, s, p)(mx.array(x1)), _pool_ref(x1, (k,), (s_,), (p,), "max"))
    close(nn.AvgPool1d(k, s, p)(mx.array(x1)), _pool_ref(x1, (k,), (s_,), (p,), "avg"), 1e-5)
    x2 = rand(1, 7, 8, 2)
    close(nn.MaxPool2d(k, s, p)(mx.array(x2)), _pool_ref(x2, (k, k), (s_, s_), (p, p), "max"))
    close(nn.AvgPool2d(k, s, p)(mx.array(x2)), _pool_ref(x2, (k, k), (s_, s_), (p, p), "avg"), 1e-5)


def test_conv_errors():
    with pytest.raises(ValueError):
        nn.Conv1d(3, 4, 3, groups=2)
    with pytest.raises(ValueError):
        nn.Conv2d(4, 4, (3, 3, 3))


def test_pooling_errors_and_gradient():
    with pytest.raises(ValueError):
        nn.MaxPool1d(0)
    with pytest.raises(ValueError):
        nn.MaxPool2d(2, padding=-1)
    with pytest.raises(ValueError):
        nn.MaxPool2d(2)(mx.ones((4, 4)))
    # The gradient of a max pool goes to each window's maximum.
    x = mx.array(np.array([[[1.0], [3.0], [2.0], [0.0]]], np.float32))
    g = mx.grad(lambda a: nn.MaxPool1d(2)(a).sum())(x)
    assert np.array(g).ravel().tolist() == [0.0, 1.0, 1.0, 0.0]


def _rope_ref(x, dims, traditional, base, scale, offset):
    L = x.shape[-2]
    pos = (np.arange(L) + offset) * scale
    inv = base ** (-np.arange(0, dims, 2) / dims)
    th = pos[:, None] * inv[None]
    c, s = np.cos(th), np.sin(th)
    out = x.copy()
    if traditional:
        a, b = x[..., 0:dims:2], x[..., 1:dims:2]
        out[..., 0:dims:2] = a * c - b * s
        out[..., 1:dims:2] = a * s + b * c
    else:
        h = dims // 2
        a, b = x[..., :h], x[..., h:dims]
        out[..., :h] = a * c - b * s
        out[..., h:dims] = a * s + b * c
    return out


@pytest.mark.parametrize("dims,traditional,offset", [(8, False, 0), (8, True, 3), (4, False, 5)])
def test_rope(dims, traditional, offset):
    x = rand(2, 3, 5, 8)
    r = nn.RoPE(dims, traditional=traditional, base=500, scale=0.5)
    close(r(mx.array(x), offset=offset), _rope_ref(x, dims, traditional, 500, 0.5, offset), 1e-4)
    # An array offset gives the same result (used by cached decoding).
    close(
        r(mx.array(x), offset=mx.array(offset)),
        _rope_ref(x, dims, traditional, 500, 0.5, offset),
        1e-4,
    )


def test_rope_frequencies_and_batched_offsets():
    from kiln.nn.layers import _fast

    x = rand(2, 3, 5, 8)
    ref = _rope_ref(x, 8, False, 100.0, 1.0, 2)
    freqs = mx.power(mx.array(100.0), mx.arange(0, 8, 2) / 8)
    got = _fast.rope(mx.array(x), 8, traditional=False, base=None, scale=1.0, offset=2, freqs=freqs)
    close(got, ref, 1e-4)
    got = _fast.rope(
        mx.array(x), 8, traditional=True, base=100.0, scale=1.0, offset=mx.array([2, 4])
    )
    close(got[0], _rope_ref(x[:1], 8, True, 100.0, 1.0, 2)[0], 1e-4)
    close(got[1], _rope_ref(x[1:], 8, True, 100.0, 1.0, 4)[0], 1e-4)
    # bfloat16 in, bfloat16 out; the gradient is the transposed rotation.
    assert (
        _fast.rope(
            mx.array(x).astype(mx.bfloat16), 8, traditional=False, base=10.0, scale=1.0, offset=0
        ).dtype
        == mx.bfloat16
    )
    g = mx.grad(
        lambda z: (
            _fast.rope(z, 6, traditional=False, base=10.0, scale=1.0, offset=1) * mx.array(x)
        ).sum()
    )(mx.array(x))
    close(g, _rope_ref(x, 6, False, 10.0, -1.0, 1), 1e-4)  # rotation by -theta
    for bad in (3, 0, 10):
        with pytest.raises(ValueError):
            _fast.rope(mx.array(x), bad, traditional=False, base=10.0, scale=1.0, offset=0)


def _attn_ref(q, k, v, scale, mask=None):
    s = q @ np.swapaxes(k, -1, -2) * scale
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
    s = s - s.max(-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(-1, keepdims=True)
    return p @ v


def test_scaled_dot_product_attention_composition():
    from kiln.nn.layers import _fast

    q, k, v = rand(2, 4, 3, 8), rand(2, 2, 5, 8), rand(2, 2, 5, 8)
    kr, vr = np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1)  # grouped heads
    close(
        _fast.scaled_dot_product_attention(mx.array(q), mx.array(k), mx.array(v), scale=0.3),
        _attn_ref(q, kr, vr, 0.3),
        1e-4,
    )
    causal = np.arange(2, 5)[:, None] >= np.arange(5)[None]  # queries at the end
    close(
        _fast.scaled_dot_product_attention(
            mx.array(q), mx.array(k), mx.array(v), scale=0.3, mask="causal"
        ),
        _attn_ref(q, kr, vr, 0.3, causal),
        1e-4,
    )
    add = rand(3, 5)
    close(
        _fast.scaled_dot_product_attention(
            mx.array(q), mx.array(k), mx.array(v), scale=0.3, mask=mx.array(add)
        ),
        _attn_ref(q, kr, vr, 0.3, add),
        1e-4,
    )


def test_multihead_attention_and_transformer():
    mha = nn.MultiHeadAttention(8, 2, bias=True)
    x, mem = rand(2, 5, 8), rand(2, 3, 8)
    p = {k: np.array(v) for k, v in tree_flatten(mha.parameters())}

    def proj(name, a):
        return a @ p[f"{name}.weight"].T + p[f"{name}.bias"]

    def heads(a):
        return a.reshape(a.shape[0], a.shape[1], 2, -1).transpose(0, 2, 1, 3)

    mask = nn.MultiHeadAttention.create_additive_causal_mask(5)
    m = np.array(mask)
    assert m[0, 1] < -1e30 and m[1, 0] == 0
    q, k, v = heads(proj("query_proj", x)), heads(proj("key_proj", x)), heads(proj("value_proj", x))
    o = _attn_ref(q, k, v, 1 / 2.0, m).transpose(0, 2, 1, 3).reshape(2, 5, 8)
    close(mha(mx.array(x), mx.array(x), mx.array(x), mask), proj("out_proj", o), 1e-4)
    with pytest.raises(ValueError):
        nn.MultiHeadAttention(6, 4)

    enc = nn.TransformerEncoder(2, 8, 2, mlp_dims=16)
    assert enc(mx.array(x), mask).shape == (2, 5, 8)
    tr = nn.Transformer(8, 2, 1, 1, 16, norm_first=False)
    assert tr(mx.array(mem), mx.array(x), None, mask, None).shape == (2, 5, 8)
    layer = nn.TransformerEncoderLayer(8, 2, 16)
    # norm_first: x + attn(ln1(x)) then + mlp(ln2(.)); recompute by hand with the parts.
    xa = mx.array(x)
    y = layer.ln1(xa)
    h = xa + layer.attention(y, y, y, mask)
    ref = h + layer.linear2(nn.relu(layer.linear1(layer.ln2(h))))
    close(layer(xa, mask), np.array(ref), 1e-5)


def test_alibi_matches_mlx():
    mlx = pytest.importorskip("mlx.core")
    mnn = pytest.importorskip("mlx.nn")
    for heads in (4, 6):
        s = rand(2, heads, 3, 5)
        m = rand(3, 5)
        a = nn.ALiBi()(mx.array(s), offset=2, mask=mx.array(m))
        b = mnn.ALiBi()(mlx.array(s), offset=2, mask=mlx.array(m))
        close(a, np.array(b), 1e-6)
    ref = np.array(mnn.ALiBi.create_alibi_slope(6))
    close(nn.ALiBi.create_alibi_slope(6), ref, 1e-7)


def test_sinusoidal_encoding():
    pe = nn.SinusoidalPositionalEncoding(8)
    x = np.arange(4, dtype=np.float32)
    sig = np.exp((1 - np.arange(4) / 3) * (0 - math.log(1e-4)) + math.log(1e-4))
    y = x[:, None] * sig
    close(pe(mx.array(x)), np.concatenate([np.sin(y), np.cos(y)], -1) * math.sqrt(2 / 8), 1e-5)


# ---------------------------------------------------------------------------------------
# Activations


def _np_act():
    from math import erf

    verf = np.vectorize(erf)
    sp = lambda x: np.logaddexp(x, 0)  # noqa: E731
    sig = lambda x: 1 / (1 + np.exp(-x))  # noqa: E731
    return {
        "relu": lambda x: np.maximum(x, 0),
        "relu6": lambda x: np.clip(x, 0, 6),
        "relu2": lambda x: np.maximum(x, 0) ** 2,
        "leaky_relu": lambda x: np.where(x > 0, x, 0.01 * x),
        "elu": lambda x: np.where(x > 0, x, np.exp(x) - 1),
        "celu": lambda x: np.maximum(x, 0) + np.exp(np.minimum(x, 0)) - 1,
        "selu": lambda x: 1.0507 * np.where(x > 0, x, 1.67326 * (np.exp(x) - 1)),
        "gelu": lambda x: x * (1 + verf(x / np.sqrt(2))) / 2,
        "gelu_approx": lambda x: (
            0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
        ),
        "gelu_fast_approx": lambda x: x * sig(1.702 * x),
        "silu": lambda x: x * sig(x),
        "sigmoid": sig,
        "tanh": np.tanh,
        "softplus": sp,
        "softsign": lambda x: x / (1 + np.abs(x)),
        "softshrink": lambda x: np.where(np.abs(x) > 0.5, x - np.sign(x) * 0.5, 0),
        "hard_shrink": lambda x: np.where(np.abs(x) > 0.5, x, 0),
        "hard_tanh": lambda x: np.clip(x, -1, 1),
        "hardswish": lambda x: x * np.clip(x + 3, 0, 6) / 6,
        "mish": lambda x: x * np.tanh(sp(x)),
        "log_sigmoid": lambda x: -sp(-x),
        "step": lambda x: (x > 0).astype(np.float32),
        "softmax": lambda x: (
            np.exp(x - x.max(-1, keepdims=True))
            / np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True)
        ),
        "softmin": lambda x: (
            np.exp(-x - (-x).max(-1, keepdims=True))
            / np.exp(-x - (-x).max(-1, keepdims=True)).sum(-1, keepdims=True)
        ),
        "log_softmax": lambda x: x - np.log(np.exp(x).sum(-1, keepdims=True)),
        "glu": lambda x: x[..., :3] * sig(x[..., 3:]),
    }


CLASSES = {
    "relu": "ReLU",
    "relu6": "ReLU6",
    "relu2": "ReLU2",
    "leaky_relu": "LeakyReLU",
    "elu": "ELU",
    "celu": "CELU",
    "selu": "SELU",
    "silu": "SiLU",
    "sigmoid": "Sigmoid",
    "tanh": "Tanh",
    "softplus": "Softplus",
    "softsign": "Softsign",
    "softshrink": "Softshrink",
    "hard_shrink": "HardShrink",
    "hard_tanh": "HardTanh",
    "hardswish": "Hardswish",
    "mish": "Mish",
    "log_sigmoid": "LogSigmoid",
    "step": "Step",
    "softmax": "Softmax",
    "softmin": "Softmin",
    "log_softmax": "LogSoftmax",
    "glu": "GLU",
}


@pytest.mark.parametrize("name", sorted(_np_act()))
def test_activation(name):
    x = (rand(4, 6) * 3).astype(np.float32)
    ref = _np_act()[name](x.astype(np.float64))
    close(getattr(nn, name)(mx.array(x)), ref, 1e-5)
    if name in CLASSES:
        close(getattr(nn, CLASSES[name])()(mx.array(x)), ref, 1e-5)


def test_activation_classes_with_arguments():
    x = rand(5)
    close(nn.LeakyReLU(0.2)(mx.array(x)), np.where(x > 0, x, 0.2 * x))
    close(nn.ELU(alpha=2.0)(mx.array(x)), np.where(x > 0, x, 2 * (np.exp(x) - 1)), 1e-5)
    close(nn.GELU("tanh")(mx.array(x)), np.array(nn.gelu_approx(mx.array(x))))
    close(nn.GELU("fast")(mx.array(x)), np.array(nn.gelu_fast_approx(mx.array(x))))
    with pytest.raises(ValueError):
        nn.GELU("bad")
    pr = nn.PReLU()
    close(pr(mx.array(x)), np.where(x > 0, x, 0.25 * x))
    assert [k for k, _ in tree_flatten(pr.parameters())] == ["weight"]
    with pytest.raises(TypeError):
        nn.ReLU(1)


# ---------------------------------------------------------------------------------------
# Losses and gradients


def _fd_grad(f, x, eps=1e-3):
    x = x.astype(np.float64)
    g = np.zeros_like(x)
    for i in np.ndindex(*x.shape):
        a, b = x.copy(), x.copy()
        a[i] += eps
        b[i] -= eps
        g[i] = (f(a) - f(b)) / (2 * eps)
    return g


def test_cross_entropy_values_and_gradient():
    logits = rand(4, 5)
    t = np.array([0, 3, 4, 1])
    lse = np.log(np.exp(logits).sum(-1))
    ref = lse - logits[np.arange(4), t]
    L = nn.losses
    close(L.cross_entropy(mx.array(logits), mx.array(t)), ref, 1e-5)
    close(L.cross_entropy(mx.array(logits), mx.array(t), reduction="mean"), ref.mean(), 1e-5)
    close(L.cross_entropy(mx.array(logits), mx.array(t), reduction="sum"), ref.sum(), 1e-5)
    w = rand(4)
    close(L.cross_entropy(mx.array(logits), mx.array(t), weights=mx.array(w)), ref * w, 1e-5)
    # Label smoothing: the target is (1 - s) one_hot + s / C.
    s = 0.2
    probs = (1 - s) * np.eye(5)[t] + s / 5
    ref_s = -(probs * (logits - lse[:, None])).sum(-1)
    close(L.cross_entropy(mx.array(logits), mx.array(t), label_smoothing=s), ref_s, 1e-5)
    close(L.cross_entropy(mx.array(logits), mx.array(probs.astype(np.float32))), ref_s, 1e-5)
    # axis=0 with class ids along the first axis.
    close(L.cross_entropy(mx.array(logits.T), mx.array(t), axis=0), ref, 1e-5)
    # Gradient: softmax - one_hot, over the batch size for the mean.
    sm = np.exp(logits - lse[:, None])
    g = mx.grad(lambda z: L.cross_entropy(z, mx.array(t), reduction="mean"))(mx.array(logits))
    close(g, (sm - np.eye(5)[t]) / 4, 1e-5)
    with pytest.raises(ValueError):
        L.cross_entropy(mx.array(logits), mx.array(t[:3]))
    with pytest.raises(ValueError):
        L.cross_entropy(mx.array(logits), mx.array(t), label_smoothing=1.0)
    with pytest.raises(ValueError):
        L.cross_entropy(mx.array(logits), mx.array(t), reduction="avg")


LOSSES = {
    "binary_cross_entropy": (
        lambda p, t: nn.losses.binary_cross_entropy(p, t),
        lambda p, t: np.mean(np.logaddexp(0, p) - p * t),
    ),
    "binary_cross_entropy_probs": (
        lambda p, t: nn.losses.binary_cross_entropy(mx.sigmoid(p), t, with_logits=False),
        lambda p, t: np.mean(
            -(t * np.log(1 / (1 + np.exp(-p))) + (1 - t) * np.log(1 - 1 / (1 + np.exp(-p))))
        ),
    ),
    "mse_loss": (lambda p, t: nn.losses.mse_loss(p, t), lambda p, t: np.mean((p - t) ** 2)),
    "l1_loss": (lambda p, t: nn.losses.l1_loss(p, t), lambda p, t: np.mean(np.abs(p - t))),
    "smooth_l1_loss": (
        lambda p, t: nn.losses.smooth_l1_loss(p, t, beta=0.5),
        lambda p, t: np.mean(
            np.where(np.abs(p - t) < 0.5, 0.5 * (p - t) ** 2 / 0.5, np.abs(p - t) - 0.25)
        ),
    ),
    "huber_loss": (
        lambda p, t: nn.losses.huber_loss(p, t, delta=0.7, reduction="sum"),
        lambda p, t: np.sum(
            np.where(np.abs(p - t) <= 0.7, 0.5 * (p - t) ** 2, 0.7 * (np.abs(p - t) - 0.35))
        ),
    ),
    "nll_loss": (
        lambda p, t: nn.losses.nll_loss(nn.log_softmax(p), mx.argmax(t, axis=-1), reduction="mean"),
        lambda p, t: np.mean(
            -(p - np.log(np.exp(p).sum(-1, keepdims=True)))[np.arange(p.shape[0]), t.argmax(-1)]
        ),
    ),
    "kl_div_loss": (
        lambda p, t: nn.losses.kl_div_loss(nn.log_softmax(p), nn.log_softmax(t), reduction="sum"),
        lambda p, t: np.sum(
            np.exp(t - np.log(np.exp(t).sum(-1, keepdims=True)))
            * (
                (t - np.log(np.exp(t).sum(-1, keepdims=True)))
                - (p - np.log(np.exp(p).sum(-1, keepdims=True)))
            )
        ),
    ),
    "log_cosh_loss": (
        lambda p, t: nn.losses.log_cosh_loss(p, t, reduction="mean"),
        lambda p, t: np.mean(np.log(np.cosh(p - t))),
    ),
    "hinge_loss": (
        lambda p, t: nn.losses.hinge_loss(p, t, reduction="mean"),
        lambda p, t: np.mean(np.maximum(1 - p * t, 0)),
    ),
}


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_loss_value_and_gradient(name):
    ours, ref = LOSSES[name]
    p = rand(3, 4)
    t = RNG.uniform(0, 1, (3, 4)).astype(np.float32) if "binary" in name else rand(3, 4)
    if name == "hinge_loss":
        t = np.sign(t)
    tt = mx.array(t)
    close(ours(mx.array(p), tt), ref(p.astype(np.float64), t.astype(np.float64)), 1e-5)
    g = mx.grad(lambda z: ours(z, tt))(mx.array(p))
    close(g, _fd_grad(lambda z: ref(z, t.astype(np.float64)), p), 2e-3)


def test_loss_shape_errors_and_reductions():
    a, b = mx.zeros((2, 3)), mx.zeros((3, 2))
    for f in (
        nn.losses.mse_loss,
        nn.losses.l1_loss,
        nn.losses.binary_cross_entropy,
        nn.losses.smooth_l1_loss,
    ):
        with pytest.raises(ValueError):
            f(a, b)
    assert nn.losses.mse_loss(a, a, reduction="none").shape == (2, 3)
    assert nn.losses.huber_loss(a, a).shape == (2, 3)  # MLX's default: no reduction
    with pytest.raises(ValueError):
        nn.losses.margin_ranking_loss(mx.zeros(3), mx.zeros(3), mx.zeros(2))
    close(
        nn.losses.margin_ranking_loss(
            mx.array([1.0, -1.0]), mx.array([0.0, 0.0]), mx.array([1.0, 1.0]), margin=0.5
        ),
        [0.0, 1.5],
    )
    x1, x2 = rand(3, 4), rand(3, 4)
    ref = (x1 * x2).sum(1) / (np.linalg.norm(x1, axis=1) * np.linalg.norm(x2, axis=1))
    close(nn.losses.cosine_similarity_loss(mx.array(x1), mx.array(x2)), ref, 1e-5)
    v = np.abs(rand(3, 4)) + 0.1
    ref = np.mean(0.5 * (np.log(v) + (x2 - x1) ** 2 / v))
    close(nn.losses.gaussian_nll_loss(mx.array(x1), mx.array(x2), mx.array(v)), ref, 1e-5)
    an, po, ne = rand(2, 4), rand(2, 4), rand(2, 4)
    ref = np.maximum(
        np.sqrt(((an - po) ** 2).sum(-1) + 1e-6) - np.sqrt(((an - ne) ** 2).sum(-1) + 1e-6) + 1, 0
    )
    close(nn.losses.triplet_loss(mx.array(an), mx.array(po), mx.array(ne)), ref, 1e-5)


def test_value_and_grad_of_a_model():
    lin = nn.Linear(3, 2)
    x, y = rand(5, 3), rand(5, 2)
    before = np.array(lin.weight)
    fn = nn.value_and_grad(lin, lambda a, b: nn.losses.mse_loss(lin(a), b, reduction="sum"))
    loss, grads = fn(mx.array(x), mx.array(y))
    w, b = np.array(lin.weight), np.array(lin.bias)
    r = x @ w.T + b - y
    close(loss, (r**2).sum(), 1e-4)
    close(grads["weight"], 2 * r.T @ x, 1e-4)
    close(grads["bias"], 2 * r.sum(0), 1e-4)
    assert np.array_equal(np.array(lin.weight), before)  # the model keeps its arrays
    lin.freeze(keys="bias")
    _, grads = fn(mx.array(x), mx.array(y))
    assert set(grads) == {"weight"}


def test_checkpoint_gives_the_same_gradients():
    m = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 1))
    x = mx.array(rand(3, 4))
    ck = nn.checkpoint(m)
    g1 = nn.value_and_grad(m, lambda a: m(a).sum())(x)[1]
    g2 = nn.value_and_grad(m, lambda a: ck(a).sum())(x)[1]
    for (k1, a), (k2, b) in zip(tree_flatten(g1), tree_flatten(g2)):
        assert k1 == k2
        close(a, np.array(b), 1e-6)


# ---------------------------------------------------------------------------------------
# init


def test_init():
    a = mx.zeros((64, 32))
    assert np.all(np.array(nn.init.constant(0.5)(a)) == 0.5)
    mx.random.seed(1)
    w = np.array(nn.init.glorot_uniform()(a))
    lim = math.sqrt(6 / 96)
    assert np.abs(w).max() <= lim and np.abs(w).max() > 0.9 * lim
    w = np.array(nn.init.he_normal()(a))
    assert abs(w.std() - 1 / math.sqrt(32)) < 0.02
    w = np.array(nn.init.he_uniform()(a, mode="fan_out"))
    assert np.abs(w).max() <= math.sqrt(3 / 64)
    w = np.array(nn.init.glorot_normal()(mx.zeros((8, 3, 3, 4))))
    assert w.shape == (8, 3, 3, 4) and abs(w.std() - math.sqrt(2 / (36 + 72))) < 0.05
    w = np.array(nn.init.normal(1.0, 0.1)(a))
    assert abs(w.mean() - 1) < 0.01
    w = np.array(nn.init.uniform(-2, -1)(a))
    assert w.min() >= -2 and w.max() <= -1
    assert np.array_equal(np.array(nn.init.identity()(mx.zeros((3, 3)))), np.eye(3))
    w = np.array(nn.init.sparse(0.25)(mx.zeros((4, 8))))
    assert np.all((w == 0).sum(1) == 2)
    q = np.array(nn.init.orthogonal()(mx.zeros((4, 6))))
    close(q @ q.T, np.eye(4), 1e-5)
    for bad in (
        lambda: nn.init.identity()(mx.zeros((2, 3))),
        lambda: nn.init.he_normal()(mx.zeros(3)),
        lambda: nn.init.he_normal()(a, mode="x"),
        lambda: nn.init.sparse(0.5)(mx.zeros(3)),
    ):
        with pytest.raises(ValueError):
            bad()


# ---------------------------------------------------------------------------------------
# Against mlx.nn with the same weights (where MLX is installed)


def _to_mlx(tree, mlx):
    from kiln.utils import tree_map as tmap

    return tmap(lambda a: mlx.array(np.array(a)), tree)


MLX_LAYERS = {
    "Linear": (lambda n: n.Linear(6, 4), (2, 3, 6)),
    "Bilinear": (lambda n: n.Bilinear(6, 6, 3), (5, 6)),
    "LayerNorm": (lambda n: n.LayerNorm(6), (2, 3, 6)),
    "RMSNorm": (lambda n: n.RMSNorm(6), (2, 3, 6)),
    "GroupNorm": (lambda n: n.GroupNorm(2, 6), (2, 3, 6)),
    "GroupNormPT": (lambda n: n.GroupNorm(3, 6, pytorch_compatible=True), (2, 4, 6)),
    "BatchNorm": (lambda n: n.BatchNorm(6), (4, 3, 6)),
    "Conv1d": (lambda n: n.Conv1d(6, 4, 3, stride=2, padding=1), (2, 9, 6)),
    "Conv2d": (lambda n: n.Conv2d(6, 4, 3, padding=1, groups=2), (1, 5, 5, 6)),
    "MaxPool2d": (lambda n: n.MaxPool2d(3, 2, 1), (1, 7, 7, 6)),
    "ConvTranspose1d": (
        lambda n: n.ConvTranspose1d(6, 4, 3, stride=2, padding=1, output_padding=1),
        (2, 5, 6),
    ),
    "ConvTranspose2d": (
        lambda n: n.ConvTranspose2d(6, 3, (2, 3), stride=2, dilation=1),
        (1, 4, 3, 6),
    ),
    "ConvTranspose3d": (lambda n: n.ConvTranspose3d(6, 2, 2, stride=1, padding=1), (1, 3, 4, 3, 6)),
    "AvgPool1d": (lambda n: n.AvgPool1d(3, 2, 1), (2, 9, 6)),
    "RoPE": (lambda n: n.RoPE(4, traditional=True), (2, 2, 5, 6)),
    "MultiHeadAttention": (lambda n: n.MultiHeadAttention(6, 2, bias=True), (2, 5, 6)),
    "TransformerEncoderLayer": (
        lambda n: n.TransformerEncoderLayer(6, 2, 12, norm_first=False),
        (2, 5, 6),
    ),
    "RNN": (lambda n: n.RNN(6, 5), (2, 4, 6)),
    "RNN_relu_unbatched": (lambda n: n.RNN(6, 5, bias=False, nonlinearity=n.relu), (4, 6)),
    "GRU": (lambda n: n.GRU(6, 5), (2, 4, 6)),
    "GRU_nobias": (lambda n: n.GRU(6, 5, bias=False), (4, 6)),
    "LSTM": (lambda n: n.LSTM(6, 5), (2, 4, 6)),
    "GELU": (lambda n: n.GELU(), (3, 6)),
    "Mish": (lambda n: n.Mish(), (3, 6)),
}


@pytest.mark.parametrize("name", sorted(MLX_LAYERS))
def test_layer_matches_mlx(name):
    mlx = pytest.importorskip("mlx.core")
    mnn = pytest.importorskip("mlx.nn")
    make, shape = MLX_LAYERS[name]
    ours, theirs = make(nn), make(mnn)
    theirs.update(_to_mlx(ours.parameters(), mlx))
    x = rand(*shape)
    if name == "Bilinear":
        x2 = rand(*shape)
        a, b = ours(mx.array(x), mx.array(x2)), theirs(mlx.array(x), mlx.array(x2))
    elif name == "MultiHeadAttention":
        m = nn.MultiHeadAttention.create_additive_causal_mask(shape[1])
        a = ours(mx.array(x), mx.array(x), mx.array(x), m)
        mm = mlx.array(np.array(m))
        b = theirs(mlx.array(x), mlx.array(x), mlx.array(x), mm)
    elif name == "TransformerEncoderLayer":
        a, b = ours(mx.array(x), None), theirs(mlx.array(x), None)
    elif name == "RoPE":
        a, b = ours(mx.array(x), offset=2), theirs(mlx.array(x), offset=2)
    elif name in ("RNN", "GRU", "LSTM"):
        # With an initial state, and (LSTM) the cell states too.
        h = rand(2, 5)
        a, b = ours(mx.array(x), mx.array(h)), theirs(mlx.array(x), mlx.array(h))
        if name == "LSTM":
            np.testing.assert_allclose(np.array(a[1]), np.array(b[1]), rtol=1e-4, atol=1e-5)
            a, b = a[0], b[0]
    else:
        a, b = ours(mx.array(x)), theirs(mlx.array(x))
    np.testing.assert_allclose(np.array(a), np.array(b), rtol=1e-4, atol=1e-5)
    assert sorted(k for k, _ in tree_flatten(ours.parameters())) == sorted(
        k for k, _ in tree_flatten(theirs.parameters())
    )


def test_losses_match_mlx():
    mlx = pytest.importorskip("mlx.core")
    mnn = pytest.importorskip("mlx.nn")
    logits, t = rand(4, 5), np.array([0, 2, 4, 1])
    p, q = rand(3, 4), rand(3, 4)
    pairs = [
        ("cross_entropy", (logits, t), {"label_smoothing": 0.1, "reduction": "mean"}),
        ("binary_cross_entropy", (p, (q > 0).astype(np.float32)), {}),
        ("smooth_l1_loss", (p, q), {"beta": 0.5}),
        ("huber_loss", (p, q), {"delta": 0.5}),
        ("kl_div_loss", (p, q), {}),
        ("log_cosh_loss", (p, q), {}),
        ("cosine_similarity_loss", (p, q), {}),
        ("nll_loss", (logits, t), {}),
    ]
    for name, args, kw in pairs:
        a = getattr(nn.losses, name)(*[mx.array(v) for v in args], **kw)
        b = getattr(mnn.losses, name)(*[mlx.array(v) for v in args], **kw)
        np.testing.assert_allclose(np.array(a), np.array(b), rtol=1e-5, atol=1e-6, err_msg=name)


def test_recurrent_parameters_and_gradient():
    rnn = nn.RNN(3, 4, bias=False)
    assert sorted(k for k, _ in tree_flatten(rnn.parameters())) == ["Whh", "Wxh"]
    lstm = nn.LSTM(3, 4)
    assert sorted(k for k, _ in tree_flatten(lstm.parameters())) == ["Wh", "Wx", "bias"]
    x = mx.array(rand(2, 5, 3))
    loss, g = nn.value_and_grad(lstm, lambda a: lstm(a)[0][:, -1].sum())(x)
    assert g["Wx"].shape == (16, 3) and np.isfinite(np.array(g["Wh"])).all()
    # Finite differences on one weight of the GRU.
    gru = nn.GRU(3, 2)
    w0 = np.array(gru.Wh).astype(np.float64)

    def f(w):
        gru.Wh = mx.array(w.astype(np.float32))
        return float(gru(x)[:, -1].sum().item())

    _, g = nn.value_and_grad(gru, lambda a: gru(a)[:, -1].sum())(x)
    fd = _fd_grad(f, w0, 1e-2)
    gru.Wh = mx.array(w0.astype(np.float32))
    np.testing.assert_allclose(np.array(g["Wh"]), fd, rtol=2e-2, atol=2e-3)


@pytest.mark.parametrize("module", ["kiln.nn", "kiln.nn.losses", "kiln.nn.init", "kiln.optimizers"])
def test_every_public_callable_has_a_docstring(module):
    import importlib
    import inspect

    mod = importlib.import_module(module)
    missing = []
    for name in dir(mod):
        obj = getattr(mod, name)
        if name.startswith("_") or inspect.ismodule(obj) or not callable(obj):
            continue
        if not (obj.__doc__ or "").strip():
            missing.append(name)
        if inspect.isclass(obj):
            for attr, v in vars(obj).items():
                if not attr.startswith("_") and callable(v) and not (v.__doc__ or "").strip():
                    missing.append(f"{name}.{attr}")
    assert missing == []
