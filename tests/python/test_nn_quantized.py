"""Quantized layers, ``nn.quantize``, the size-1 distributed API and sharded layers, and the
module tree helpers mlx-lm leans on (named_modules paths, tree_unflatten keeping Module
leaves), against MLX where it is installed."""

import kiln.core as mx
import kiln.nn as nn
import numpy as np
import pytest

from kiln.utils import tree_flatten, tree_unflatten

RNG = np.random.default_rng(3)


def _mlx():
    mlx = pytest.importorskip("mlx.core")
    import mlx.nn as mnn

    mlx.set_default_device(mlx.cpu)
    return mlx, mnn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 64)
        self.layers = [nn.Linear(64, 128), nn.Linear(128, 64, bias=False)]
        self.norm = nn.RMSNorm(64)
        self.head = nn.Linear(64, 10)

    def __call__(self, ids):
        h = self.embed(ids)
        for layer in self.layers:
            h = layer(h)
        return self.head(self.norm(h))


def test_named_modules_paths():
    m = Block()
    names = [k for k, _ in m.named_modules()]
    assert sorted(names) == sorted(["", "embed", "layers.0", "layers.1", "norm", "head"])

    class Deep(nn.Module):
        def __init__(self):
            super().__init__()
            self.mlp = nn.Module()
            self.mlp.up_proj = nn.Linear(2, 2)
            self.self_attn = nn.Module()
            self.self_attn.q_proj = nn.Linear(2, 2)

    paths = sorted(k for k, _ in Deep().named_modules())
    assert paths == ["", "mlp", "mlp.up_proj", "self_attn", "self_attn.q_proj"]


def test_tree_unflatten_keeps_module_leaves():
    lin = nn.Linear(2, 3)
    tree = tree_unflatten([("a.0", lin), ("a.1", {}), ("b", mx.array(1))])
    assert tree["a"][0] is lin and tree["a"][1] == {}
    assert isinstance(tree["a"][0], nn.Linear)


@pytest.mark.parametrize("bits", [2, 3, 4, 6, 8])
@pytest.mark.parametrize("group_size", [32, 64])
def test_quantized_linear_from_linear_matches_mlx(bits, group_size):
    w = RNG.normal(size=(24, 128)).astype(np.float32)
    b = RNG.normal(size=(24,)).astype(np.float32)
    x = RNG.normal(size=(3, 5, 128)).astype(np.float32)
    lin = nn.Linear(128, 24)
    lin.update({"weight": mx.array(w), "bias": mx.array(b)})
    q = nn.QuantizedLinear.from_linear(lin, group_size, bits)
    assert q.weight.dtype == mx.uint32 and q.weight.shape == (24, 128 * bits // 32)
    assert q.scales.shape == q.biases.shape == (24, 128 // group_size)
    assert set(q) == {"weight", "scales", "biases", "bias"}
    assert tree_flatten(q.trainable_parameters()) == []
    y = np.array(q(mx.array(x)))
    wq = np.array(mx.dequantize(q.weight, q.scales, q.biases, group_size, bits))
    np.testing.assert_allclose(y, x @ wq.T + b, rtol=1e-4, atol=1e-4)

    mlx, mnn = _mlx()
    ml = mnn.Linear(128, 24)
    ml.update({"weight": mlx.array(w), "bias": mlx.array(b)})
    mq = mnn.QuantizedLinear.from_linear(ml, group_size, bits)
    for k in ("weight", "scales", "biases"):
        np.testing.assert_array_equal(np.array(q[k]), np.array(mq[k]), err_msg=k)
    np.testing.assert_allclose(y, np.array(mq(mlx.array(x))), rtol=1e-4, atol=1e-4)
    assert repr(q) == repr(mq)


def test_quantized_embedding_and_as_linear():
    table = RNG.normal(size=(40, 64)).astype(np.float32)
    emb = nn.Embedding(40, 64)
    emb.weight = mx.array(table)
    q = emb.to_quantized(bits=8)
    assert isinstance(q, nn.QuantizedEmbedding) and q.bits == 8 and q.group_size == 64
    ids = mx.array([[0, 3, 39], [7, 7, 1]])
    deq = np.array(mx.dequantize(q.weight, q.scales, q.biases, 64, 8))
    np.testing.assert_allclose(np.array(q(ids)), deq[np.array(ids)], rtol=1e-6)
    h = RNG.normal(size=(2, 64)).astype(np.float32)
    np.testing.assert_allclose(np.array(q.as_linear(mx.array(h))), h @ deq.T, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="Quantized input"):
        emb.to_quantized(quantize_input=True)


def test_nn_quantize_with_predicate_and_dict():
    mx.random.seed(0)
    m = Block()
    ids = mx.array([[1, 2, 3]])
    before = np.array(m(ids))
    nn.quantize(
        m,
        group_size=64,
        bits=8,
        class_predicate=lambda p, mod: (
            {"group_size": 32, "bits": 4} if p == "head" else isinstance(mod, (nn.Linear, nn.Embedding))
        ),
    )
    assert isinstance(m.embed, nn.QuantizedEmbedding) and m.embed.bits == 8
    assert all(isinstance(layer, nn.QuantizedLinear) for layer in m.layers)
    assert isinstance(m.head, nn.QuantizedLinear) and (m.head.group_size, m.head.bits) == (32, 4)
    assert isinstance(m.norm, nn.RMSNorm)
    after = np.array(m(ids))
    assert np.abs(after - before).max() < 0.25 * np.abs(before).max()
    with pytest.raises(ValueError, match="Unable to quantize"):
        nn.quantize(nn.Sequential(nn.ReLU()), class_predicate=lambda p, mod: True)
    with pytest.raises(ValueError, match="Invalid quantization mode"):
        nn.QuantizedLinear(64, 8, mode="bogus")


def test_quantized_weights_round_trip_through_mlx_files(tmp_path):
    """A quantized model saved by MLX loads into kiln's layers and back."""
    mlx, mnn = _mlx()
    mlx.random.seed(1)
    ml = mnn.Linear(64, 16)
    mnn.quantize(ml_parent := mnn.Sequential(ml), bits=4)
    f = str(tmp_path / "q.safetensors")
    ml_parent.save_weights(f)
    k = nn.Sequential(nn.Linear(64, 16))
    nn.quantize(k, bits=4)
    k.load_weights(f)
    x = RNG.normal(size=(2, 64)).astype(np.float32)
    np.testing.assert_allclose(
        np.array(k(mx.array(x))), np.array(ml_parent(mlx.array(x))), rtol=1e-5, atol=1e-5
    )
    g = str(tmp_path / "k.safetensors")
    k.save_weights(g)
    back = mnn.Sequential(mnn.QuantizedLinear(64, 16, bits=4))
    back.load_weights(g)
    for (a, va), (b, vb) in zip(tree_flatten(back.parameters()), tree_flatten(ml_parent.parameters())):
        assert a == b
        np.testing.assert_array_equal(np.array(va), np.array(vb))


def test_qlora_style_freeze_keeps_quantized_params_out_of_grads():
    q = nn.QuantizedLinear(64, 8)
    q.unfreeze()
    names = {k for k, _ in tree_flatten(q.trainable_parameters())}
    mlx, mnn = _mlx()
    mq = mnn.QuantizedLinear(64, 8)
    mq.unfreeze()
    assert names == {k for k, _ in tree_flatten(mq.trainable_parameters())}


def test_distributed_singleton_group():
    d = mx.distributed
    g = d.init()
    assert (g.rank(), g.size()) == (0, 1) and d.init() is g
    x = mx.array([1.0, 2.0])
    for f in (d.all_sum, d.all_max, d.all_min, d.all_gather, d.sum_scatter):
        np.testing.assert_array_equal(np.array(f(x)), [1.0, 2.0])
        np.testing.assert_array_equal(np.array(f(x, group=g, stream=mx.cpu)), [1.0, 2.0])
    with pytest.raises(ValueError, match="Cannot send to a singleton group"):
        d.send(x, 0)
    with pytest.raises(ValueError, match="Cannot recv from a singleton group"):
        d.recv((2,), mx.float32, 0)
    with pytest.raises(ValueError, match="Cannot recv from a singleton group"):
        d.recv_like(x, 0)
    with pytest.raises(RuntimeError, match="Cannot split"):
        g.split(0)
    with pytest.raises(RuntimeError, match="Couldn't initialize"):
        d.init(strict=True)
    with pytest.raises(ValueError, match="valid values for backend"):
        d.init(backend="bogus")
    # Inside grad and compile a collective is the identity.
    gr = mx.grad(lambda v: d.all_sum(v * v).sum())(x)
    np.testing.assert_array_equal(np.array(gr), [2.0, 4.0])
    np.testing.assert_array_equal(np.array(mx.compile(lambda v: d.all_sum(v) + 1)(x)), [2.0, 3.0])


def test_average_gradients_single_process_and_buckets():
    from kiln.nn.utils import _buckets

    grads = {"a": mx.ones((3,)), "b": [mx.zeros((2, 2))]}
    assert nn.average_gradients(grads) is grads
    assert _buckets([4, 4, 4, 1], 4, 32) == [[0, 1], [2, 3]]
    assert _buckets([100], 4, 32) == [[0]]


@pytest.mark.parametrize("sharding", ["all-to-sharded", "sharded-to-all"])
def test_sharded_linear_equals_linear_on_one_process(sharding):
    from kiln.nn.layers.distributed import shard_inplace, shard_linear

    mx.random.seed(2)
    lin = nn.Linear(64, 32)
    x = mx.array(RNG.normal(size=(4, 64)).astype(np.float32))
    s = shard_linear(lin, sharding)
    np.testing.assert_allclose(np.array(s(x)), np.array(lin(x)), rtol=1e-5, atol=1e-6)
    g1 = mx.grad(lambda v: s(v).sum())(x)
    g2 = mx.grad(lambda v: lin(v).sum())(x)
    np.testing.assert_allclose(np.array(g1), np.array(g2), rtol=1e-5, atol=1e-6)
    q = nn.QuantizedLinear.from_linear(lin, 32, 4)
    sq = shard_linear(q, sharding, segments=2)
    np.testing.assert_allclose(np.array(sq(x)), np.array(q(x)), rtol=1e-5, atol=1e-5)
    assert tree_flatten(sq.trainable_parameters()) == []
    sq.unfreeze()  # as MLX: the layer's own parameters stay frozen
    assert tree_flatten(sq.trainable_parameters()) == []
    before = np.array(lin(x))
    shard_inplace(lin, sharding, segments=[0.5])
    np.testing.assert_allclose(np.array(lin(x)), before, rtol=1e-6)
    with pytest.raises(ValueError, match="not supported"):
        shard_linear(lin, "bogus")


def test_nn_quantize_input_gives_qqlinear():
    # As MLX: quantize_input=True turns bias-free Linear layers into QQLinear; with a bias,
    # MLX's NotImplementedError.
    model = nn.Sequential(nn.Linear(64, 32, bias=False))
    nn.quantize(model, mode="nvfp4", quantize_input=True)
    assert type(model.layers[0]).__name__ == "QQLinear"
    assert model(mx.ones((2, 64))).shape == (2, 32)
    with pytest.raises(NotImplementedError, match="bias"):
        nn.quantize(nn.Sequential(nn.Linear(64, 32)), mode="nvfp4", quantize_input=True)
