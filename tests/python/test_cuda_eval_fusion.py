"""Fusion at evaluation time. Horizontal (kiln-core's horizontal.rs, kiln-cuda's together.rs):
the products of one evaluation that read the same x with the same parameters (a layer's q,
k and v projections; its gate and up) run as one launch of the few-row product kernels.
Vertical (vertical.rs): a residual add and the rms_norm / layer_norm of its sum run as one
norm kernel that also writes the sum, the same bits as the two kernels (checked against
`KILN_HORIZONTAL=0` in another process, and against float64 numpy). Checked here, against
float64 numpy: 4-bit (tensor-core kernel) and 3/8-bit (CUDA-core kernel)
quantized products and dense `x @ W.T` in bfloat16, float16 and float32, of different widths
in one group; groups larger than a launch takes; members that cannot join (another k, a
transposed weight, a weight computed from another member, x on the CPU); NaN and inf in x;
an empty weight; KV-cache writes of k and v into donated caches as one launch (and alone
where a cache is still held); RoPE of q and of k (views of their projections, heads differing, offsets
alike or not) as one launch, the same bits as each alone; the profiler seeing one launch
where a group ran; and an mlx-lm-style decode giving the same bits with `KILN_HORIZONTAL=0`
(another process: read once).

Skipped (with the reason) where no GPU is available."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kiln.core as mx
import kiln.profiler
from conftest import GPU_ONLY

pytestmark = GPU_ONLY

TOL = {mx.bfloat16: 3e-2, mx.float16: 4e-3, mx.float32: 1e-4}


def f64(a):
    return np.array(a.astype(mx.float32), np.float64)


def close(out, want, tol):
    np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
    fin = np.isfinite(want)
    scale = np.abs(want[fin]).max(initial=0.0) + 1
    np.testing.assert_allclose(out[fin], want[fin], atol=tol * scale)


def launches(fn, name):
    """Runs fn (which evaluates) under the profiler: the kernel events named `name`."""
    with kiln.profiler.profile(device_times=False) as prof:
        fn()
    return sum(1 for e in prof.events() if e.name == name and e.kind == "kernel")


@pytest.mark.parametrize("dtype", [mx.bfloat16, mx.float16])
@pytest.mark.parametrize("bits", [4, 3, 8])
@pytest.mark.parametrize("rows", [1, 4])
def test_quantized_projections_of_one_x(dtype, bits, rows):
    rng = np.random.default_rng(bits * 10 + rows)
    k, group = 512, 64
    with mx.stream(mx.gpu):
        ws = [mx.array(rng.normal(size=(n, k)).astype(np.float32)).astype(dtype)
              for n in (256, 64, 64)]
        packed = [mx.quantize(w, group, bits) for w in ws]
        dense = [f64(mx.dequantize(*p, group, bits)) for p in packed]
        x = mx.array(rng.normal(size=(rows, k)).astype(np.float32)).astype(dtype)
        mx.eval(x, *[a for p in packed for a in p])
        outs = [mx.quantized_matmul(x, *p, True, group, bits) for p in packed]
        assert launches(lambda: mx.eval(*outs), "quantized_matmul") == 1
        for o, d in zip(outs, dense):
            assert o.dtype == dtype and o.shape == (rows, d.shape[0])
            close(f64(o), f64(x) @ d.T, TOL[dtype])


DENSE = textwrap.dedent(
    """
    import numpy as np
    import kiln.core as mx
    import kiln.profiler
    rng = np.random.default_rng(1)
    tol = {mx.bfloat16: 3e-2, mx.float16: 4e-3, mx.float32: 1e-4}
    with mx.stream(mx.gpu):
        for dtype in [mx.bfloat16, mx.float16, mx.float32]:
            ws = [mx.array(rng.normal(size=(n, 256)).astype(np.float32)).astype(dtype) * 1
                  for n in (128, 32, 32, 96, 8)]
            x = mx.array(rng.normal(size=(1, 1, 256)).astype(np.float32)).astype(dtype) * 1
            mx.eval(x, *ws)
            outs = [x @ w.T for w in ws]
            with kiln.profiler.profile(device_times=False) as prof:
                mx.eval(*outs)
            n = sum(1 for e in prof.events() if e.name == "matmul" and e.kind == "kernel")
            print("launches", n)
            xa = np.array(x.astype(mx.float32), np.float64)
            for o, w in zip(outs, ws):
                assert o.shape == (1, 1, w.shape[0])
                want = xa @ np.array(w.astype(mx.float32), np.float64).T
                got = np.array(o.astype(mx.float32), np.float64)
                scale = np.abs(want).max() + 1
                np.testing.assert_allclose(got, want, atol=tol[dtype] * scale)
    print("ok")
    """
)


@pytest.mark.parametrize("setting", ["1", "0"], ids=["grouped", "apart"])
def test_dense_projections_of_one_x(setting):
    # nn.Linear's `x @ W.T`: matmul reshapes x for each product and the transposes are views
    # still pending when the group runs. Five products: a group of four and one alone
    # (KILN_GROUP_DENSE=0 turns dense groups off; read once: another process).
    env = dict(os.environ, KILN_GROUP_DENSE=setting)
    r = subprocess.run([sys.executable, "-c", DENSE], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]
    counts = [line for line in r.stdout.splitlines() if line.startswith("launches")]
    assert counts == ["launches 2" if setting == "1" else "launches 5"] * 3, counts


def test_members_that_cannot_join_run_alone():
    rng = np.random.default_rng(2)
    dt = mx.bfloat16
    with mx.stream(mx.gpu):
        x = mx.array(rng.normal(size=(1, 256)).astype(np.float32)).astype(dt)
        w1 = mx.array(rng.normal(size=(64, 256)).astype(np.float32)).astype(dt)
        w2 = mx.array(rng.normal(size=(256, 64)).astype(np.float32)).astype(dt)  # x @ w2: no .T
        w3 = mx.array(rng.normal(size=(32, 256)).astype(np.float32)).astype(dt)
        mx.eval(x, w1, w2, w3)
        a = x @ w1.T
        b = x @ w2
        c = x @ (w3 * mx.sum(a)).T  # depends on a member: cannot run beside it
        mx.eval(a, b, c)
        xa = f64(x)
        close(f64(a), xa @ f64(w1).T, 3e-2)
        close(f64(b), xa @ f64(w2), 3e-2)
        close(f64(c), xa @ (f64(w3) * f64(a).sum()).T, 5e-2)


def test_nan_inf_and_empty_members():
    rng = np.random.default_rng(3)
    dt = mx.bfloat16
    with mx.stream(mx.gpu):
        x_np = rng.normal(size=(3, 256)).astype(np.float32)
        x_np[1, 7], x_np[2, 200] = np.inf, np.nan
        x = mx.array(x_np).astype(dt)
        ws = [mx.array(rng.normal(size=(n, 256)).astype(np.float32)).astype(dt) for n in (48, 0, 16)]
        packed = [mx.quantize(w, 64, 4) for w in ws]
        mx.eval(x, *ws, *[a for p in packed for a in p])
        dense = [x @ w.T for w in ws]
        quant = [mx.quantized_matmul(x, *p, True, 64, 4) for p in packed]
        mx.eval(*dense, *quant)
        for o, w in zip(dense, ws):
            assert o.shape == (3, w.shape[0])
            close(f64(o), f64(x) @ f64(w).T, 3e-2)
        for o, p in zip(quant, packed):
            assert o.shape == (3, p[0].shape[0])
            close(f64(o), f64(x) @ f64(mx.dequantize(*p, 64, 4)).T, 3e-2)


def test_x_on_the_cpu_and_products_on_both_devices():
    rng = np.random.default_rng(4)
    x_np = rng.normal(size=(1, 128)).astype(np.float32)
    ws_np = [rng.normal(size=(n, 128)).astype(np.float32) for n in (32, 16)]
    x = mx.array(x_np)
    ws = [mx.array(w) for w in ws_np]
    outs = [mx.matmul(x, w.T, stream=mx.gpu) for w in ws]
    outs += [mx.matmul(x, w.T, stream=mx.cpu) for w in ws]
    mx.eval(*outs)
    for o, w in zip(outs, ws_np + ws_np):
        close(f64(o), x_np.astype(np.float64) @ w.T, 1e-4)


def rope_reference(x, dims, base, offset, traditional, freqs=None):
    """float64 RoPE of (B, H, T, D) numpy x, as MLX defines it (`freqs`: periods, in place of
    `base`)."""
    half = dims // 2
    t = np.arange(x.shape[2]) + offset
    inv = 1.0 / np.asarray(freqs, np.float64) if freqs is not None else base ** (-np.arange(half) / half)
    ang = t[:, None] * inv[None, :]
    c, s = np.cos(ang), np.sin(ang)
    out = x.copy()
    if traditional:
        a, b = x[..., 0:dims:2], x[..., 1:dims:2]
        out[..., 0:dims:2], out[..., 1:dims:2] = a * c - b * s, a * s + b * c
    else:
        a, b = x[..., :half], x[..., half:dims]
        out[..., :half], out[..., half:dims] = a * c - b * s, a * s + b * c
    return out


@pytest.mark.parametrize("dtype", [mx.bfloat16, mx.float32])
@pytest.mark.parametrize("traditional", [False, True])
@pytest.mark.parametrize("offsets", [(9, 9), (9, 30)])
@pytest.mark.parametrize("dims", [64, 48])
def test_rope_of_q_and_k_in_one_launch(dtype, traditional, offsets, dims):
    rng = np.random.default_rng(dims + offsets[1])
    with mx.stream(mx.gpu):
        x = mx.array(rng.normal(size=(1, 1, 128)).astype(np.float32)).astype(dtype)
        wq = mx.array(rng.normal(size=(32 * 64, 128)).astype(np.float32)).astype(dtype)
        wk = mx.array(rng.normal(size=(8 * 64, 128)).astype(np.float32)).astype(dtype)
        mx.eval(x, wq, wk)

        def heads(y, n):
            return y.reshape(1, 1, n, 64).transpose(0, 2, 1, 3)

        def step():
            q, k = heads(x @ wq.T, 32), heads(x @ wk.T, 8)
            rq = mx.fast.rope(q, dims, traditional=traditional, base=10000.0, scale=1.0,
                              offset=offsets[0])
            rk = mx.fast.rope(k, dims, traditional=traditional, base=10000.0, scale=1.0,
                              offset=offsets[1])
            return q, k, rq, rk

        q, k, rq, rk = step()
        mx.eval(q, k)  # (views of evaluated products: both ropes are ready together)
        assert launches(lambda: mx.eval(rq, rk), "rope") == 1
        for r, y, off in [(rq, q, offsets[0]), (rk, k, offsets[1])]:
            want = rope_reference(f64(y), dims, 10000.0, off, traditional)
            close(f64(r), want, TOL[dtype] * 4)
        # Each alone: the same bits.
        q, k, rq_alone, _ = step()
        mx.eval(rq_alone)
        _, _, _, rk_alone = step()
        mx.eval(rk_alone)
        assert np.array_equal(np.array(rq_alone.astype(mx.float32)), np.array(rq.astype(mx.float32)))
        assert np.array_equal(np.array(rk_alone.astype(mx.float32)), np.array(rk.astype(mx.float32)))


@pytest.mark.parametrize("freqs", [False, True], ids=["base", "freqs"])
def test_rope_of_every_layer_groups_per_layer(freqs):
    # Every layer's RoPE has the same parameters; only a layer's own q and k are ready
    # together, so each layer is one launch. With `freqs` (llama 3's scaled RoPE), q and k
    # share the one frequencies array, as mlx-lm's Llama3RoPE passes it.
    rng = np.random.default_rng(5)
    periods = np.exp(rng.uniform(0.0, 9.0, size=16)).astype(np.float32)
    with mx.stream(mx.gpu):
        h = mx.array(rng.normal(size=(1, 1, 1024)).astype(np.float32)).astype(mx.bfloat16)
        ws = [(mx.array(rng.normal(size=(32 * 32, 1024)).astype(np.float32) / 32).astype(mx.bfloat16),
               mx.array(rng.normal(size=(2 * 32, 1024)).astype(np.float32) / 32).astype(mx.bfloat16))
              for _ in range(3)]
        f = mx.array(periods)
        mx.eval(h, ws, f)
        rope_args = dict(base=None, freqs=f) if freqs else dict(base=1e4)
        outs, deq, hn = [], [], f64(h)
        for wq, wk in ws:
            # (Products of one x as 4-bit ones of k = 1024, which the tensor-core kernel takes
            # as one group with its usual 4 warps a block: so k is ready beside q's RoPE.)
            pq, pk = mx.quantize(wq, 32, 4), mx.quantize(wk, 32, 4)
            wq = mx.dequantize(*pq, 32, 4)
            wk = mx.dequantize(*pk, 32, 4)
            mx.eval(wq, wk, pq, pk)
            q = mx.quantized_matmul(h, *pq, True, 32, 4).reshape(1, 1, 32, 32).transpose(0, 2, 1, 3)
            k = mx.quantized_matmul(h, *pk, True, 32, 4).reshape(1, 1, 2, 32).transpose(0, 2, 1, 3)
            rq = mx.fast.rope(q, 32, traditional=False, scale=1.0, offset=3, **rope_args)
            rk = mx.fast.rope(k, 32, traditional=False, scale=1.0, offset=3, **rope_args)
            outs += [rq, rk]
            deq.append((wq, wk))
            h = h + rq.reshape(1, 1, 1024) * mx.mean(rk)
        assert launches(lambda: mx.eval(h, *outs), "rope") == 3
        per = periods if freqs else None
        for wq, wk in deq:
            q = (hn @ f64(wq).T).reshape(1, 1, 32, 32).transpose(0, 2, 1, 3)
            k = (hn @ f64(wk).T).reshape(1, 1, 2, 32).transpose(0, 2, 1, 3)
            rq = rope_reference(q, 32, 1e4, 3, False, per)
            rk = rope_reference(k, 32, 1e4, 3, False, per)
            hn = hn + rq.reshape(1, 1, 1024) * rk.mean()
        close(f64(h), hn, 5e-2)


@pytest.mark.parametrize("dtype", [mx.bfloat16, mx.float32])
def test_kv_cache_writes_of_k_and_v_in_one_launch(dtype):
    # mlx-lm's KVCache.update_and_fetch: each step writes its k and v into the caches in
    # place (the caches are donated), one launch for the two.
    rng = np.random.default_rng(6)
    want_k = np.zeros((1, 2, 16, 32))
    want_v = np.zeros((1, 2, 16, 32))
    with mx.stream(mx.gpu):
        # (Computed on the GPU, so each cache owns a whole buffer there.)
        kc = mx.zeros((1, 2, 16, 32), dtype=dtype) * 1
        vc = mx.zeros((1, 2, 16, 32), dtype=dtype) * 1
        mx.eval(kc, vc)
        counts = []
        for step in range(5):
            k_np = rng.normal(size=(1, 2, 1, 32)).astype(np.float32)
            v_np = rng.normal(size=(1, 1, 2, 32)).astype(np.float32)
            k = mx.array(k_np).astype(dtype)
            v = mx.array(v_np).astype(dtype).transpose(0, 2, 1, 3)  # a strided view
            mx.eval(k, v)
            kc[..., step:step + 1, :] = k
            vc[..., step:step + 1, :] = v
            counts.append(launches(lambda: mx.eval(kc, vc), "slice_update"))
            want_k[..., step:step + 1, :] = f64(k)
            want_v[..., step:step + 1, :] = f64(v)
        assert counts == [1] * 5
        np.testing.assert_array_equal(f64(kc), want_k)
        np.testing.assert_array_equal(f64(vc), want_v)
        # A cache someone else still holds is not written in place: each runs alone, and
        # the old array keeps its values.
        old = kc[:]  # (another array on the same node: `old = kc` is kc itself)
        kc[..., 5:6, :] = mx.ones((1, 2, 1, 32), dtype=dtype)
        vc[..., 5:6, :] = mx.ones((1, 2, 1, 32), dtype=dtype)
        mx.eval(kc, vc)
        np.testing.assert_array_equal(f64(old), want_k)
        want_k[..., 5:6, :] = 1
        want_v[..., 5:6, :] = 1
        np.testing.assert_array_equal(f64(kc), want_k)
        np.testing.assert_array_equal(f64(vc), want_v)


@pytest.mark.parametrize("dtype", [mx.bfloat16, mx.float16, mx.float32])
@pytest.mark.parametrize("d", [256, 2048, 4100, 40000])
@pytest.mark.parametrize("norm", ["rms", "layer"])
def test_residual_add_and_norm_in_one_launch(dtype, d, norm):
    rng = np.random.default_rng(d)
    with mx.stream(mx.gpu):
        # (Computed on the GPU: fusion takes inputs already there.)
        x = mx.array(rng.normal(size=(3, d)).astype(np.float32)).astype(dtype) * 1
        r = mx.array(rng.normal(size=(3, d)).astype(np.float32)).astype(dtype) * 1
        w = mx.array(rng.normal(size=(d,)).astype(np.float32)).astype(dtype)
        b = mx.array(rng.normal(size=(d,)).astype(np.float32)).astype(dtype)
        mx.eval(x, r, w, b)

        def block():
            h = x + r
            y = (mx.fast.rms_norm(h, w, 1e-5) if norm == "rms"
                 else mx.fast.layer_norm(h, w, b, 1e-5))
            return h, y

        h, y = block()
        name = "rms_norm" if norm == "rms" else "layer_norm"
        with kiln.profiler.profile(device_times=False) as prof:
            mx.eval(h, y)
        kinds = [e.name for e in prof.events() if e.kind == "kernel"]
        assert name in kinds and "add" not in kinds, kinds
        # The same bits as the two kernels (the sum evaluated first, then its norm).
        h2, y2 = block()
        mx.eval(h2)
        mx.eval(y2)
        assert np.array_equal(np.array(h.astype(mx.float32)), np.array(h2.astype(mx.float32)))
        assert np.array_equal(np.array(y.astype(mx.float32)), np.array(y2.astype(mx.float32)))
        hn = f64(h)
        if dtype == mx.float32:
            np.testing.assert_array_equal(np.array(h), np.array(x) + np.array(r))
        if norm == "rms":
            want = hn / np.sqrt((hn * hn).mean(-1, keepdims=True) + 1e-5) * f64(w)
        else:
            c = hn - hn.mean(-1, keepdims=True)
            want = c / np.sqrt((c * c).mean(-1, keepdims=True) + 1e-5) * f64(w) + f64(b)
        close(f64(y), want, TOL[dtype] * 4)


def test_chains_that_cannot_fuse_run_alone():
    rng = np.random.default_rng(8)
    with mx.stream(mx.gpu):
        x = mx.array(rng.normal(size=(2, 64)).astype(np.float32))
        r = mx.array(rng.normal(size=(64,)).astype(np.float32))  # broadcast: not fused
        w = mx.array(rng.normal(size=(64,)).astype(np.float32))
        mx.eval(x, r, w)
        h = x + r
        y = mx.fast.rms_norm(h, w * mx.sum(h), 1e-5)  # a weight that depends on the sum
        z = mx.fast.rms_norm(x + x, None, 1e-5)
        mx.eval(y, z)
        hn = f64(x) + f64(r)
        wn = f64(w) * hn.sum()
        close(f64(y), hn / np.sqrt((hn * hn).mean(-1, keepdims=True) + 1e-5) * wn, 1e-4)
        xx = 2 * f64(x)
        close(f64(z), xx / np.sqrt((xx * xx).mean(-1, keepdims=True) + 1e-5), 1e-4)


DECODE = textwrap.dedent(
    """
    import hashlib
    import numpy as np
    import kiln.core as mx
    import kiln.nn as nn
    mx.random.seed(0)
    with mx.stream(mx.gpu):
        layers = []
        for i in range(3):
            q, k, v, o = (nn.Linear(256, n, bias=False) for n in (256, 64, 64, 256))
            gate, up, down = nn.Linear(256, 512, bias=False), nn.Linear(256, 512, bias=False), \\
                nn.Linear(512, 256, bias=False)
            layer = [q, k, v, o, gate, up, down]
            if i == 1:
                layer = [nn.QuantizedLinear.from_linear(m, 64, 4) for m in layer]
            if i == 2:
                layer = [nn.QuantizedLinear.from_linear(m, 32, 8) for m in layer]
            layers.append(layer)
        mx.eval([m.parameters() for layer in layers for m in layer])
        h = mx.random.normal((1, 1, 256)).astype(mx.bfloat16)
        digest = hashlib.sha256()
        for step in range(6):
            for q, k, v, o, gate, up, down in layers:
                x = mx.fast.rms_norm(h, None, 1e-5)
                qr = mx.fast.rope(q(x).reshape(1, 1, 4, 64).transpose(0, 2, 1, 3), 64,
                                  traditional=False, base=1e4, scale=1.0, offset=step)
                kr = mx.fast.rope(k(x).reshape(1, 1, 1, 64).transpose(0, 2, 1, 3), 64,
                                  traditional=False, base=1e4, scale=1.0, offset=step)
                a = (qr * mx.sigmoid(kr).mean()).reshape(1, 1, 256) + v(x).sum()
                h = h + o(a)
                x = mx.fast.rms_norm(h, None, 1e-5)
                h = h + down(nn.silu(gate(x)) * up(x))
            mx.async_eval(h)
            digest.update(np.array(h.astype(mx.float32)).tobytes())
        print(digest.hexdigest())
    """
)


def test_decode_gives_the_same_bits_without_horizontal_fusion():
    def run(setting):
        env = dict(os.environ, KILN_HORIZONTAL=setting)
        r = subprocess.run([sys.executable, "-c", DECODE], env=env, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        return r.stdout.strip().splitlines()[-1]

    assert run("1") == run("0")
