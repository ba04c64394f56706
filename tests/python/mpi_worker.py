"""One rank of test_distributed_mpi.py, started by ``python -m kiln.launch -n N``.

    mpi_worker.py collectives   # every collective against numpy, grad/vmap/compile, layers
    mpi_worker.py mismatch      # the ranks disagree on a shape: an error on every rank
    mpi_worker.py missing       # rank 0 calls a collective the others never call: a timeout

Every rank rebuilds every rank's inputs from seeds, so it checks its results against numpy on
its own. Each section prints ``ok NAME`` or ``FAIL NAME`` with the traceback; the parent test
reads them.
"""

from __future__ import annotations

import contextlib
import sys
import traceback

import numpy as np

import kiln.core as mx
import kiln.nn as nn
import kiln.optimizers as optim

dist = mx.distributed
world = dist.init()
R, N = world.rank(), world.size()
# NCCL (test_distributed_nccl.py, two GPUs) has no 16-bit integer reductions.
NCCL = world._backend == "nccl"
FAILED = []
SECTIONS = []


def section(fn):
    SECTIONS.append(fn)
    return fn


def run(fn):
    try:
        fn()
        print(f"ok {fn.__name__} rank {R}", flush=True)
    except Exception:
        FAILED.append(fn.__name__)
        print(f"FAIL {fn.__name__} (rank {R})\n{traceback.format_exc()}", flush=True)


def data(rank, shape, dtype, seed=0):
    rng = np.random.default_rng(1000 * seed + rank)
    if dtype == np.bool_:
        return rng.random(shape) > 0.5
    if np.issubdtype(dtype, np.integer):
        return rng.integers(0, 50, size=shape).astype(dtype)
    if dtype == np.complex64:
        return (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(np.complex64)
    return rng.normal(size=shape).astype(dtype)


DTYPES = {
    "float32": (mx.float32, np.float32, 1e-6),
    "float64": (mx.float64, np.float64, 1e-12),
    "float16": (mx.float16, np.float32, 3e-3),
    "bfloat16": (mx.bfloat16, np.float32, 2e-2),
    "int32": (mx.int32, np.int32, 0),
    "int64": (mx.int64, np.int64, 0),
    "uint8": (mx.uint8, np.uint8, 0),
    "int16": (mx.int16, np.int16, 0),
    "bool": (mx.bool_, np.bool_, 0),
    "complex64": (mx.complex64, np.complex64, 1e-5),
}
SHAPES = [(), (5,), (4, 3), (0, 3), (8, 2, 3)]


def host(a):
    a = a.astype(mx.float32) if a.dtype in (mx.float16, mx.bfloat16) else a
    return np.array(a)


def close(got, want, tol):
    got = np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    if tol == 0:
        np.testing.assert_array_equal(got, want.astype(got.dtype))
    else:
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def inputs(shape, kiln_dtype, np_dtype, seed=0):
    """This rank's kiln array and every rank's values as kiln will see them."""
    mine = mx.array(data(R, shape, np_dtype, seed)).astype(kiln_dtype)
    every = [host(mx.array(data(r, shape, np_dtype, seed)).astype(kiln_dtype)) for r in range(N)]
    return mine, every


@section
def collectives():
    for name, (kd, nd, tol) in DTYPES.items():
        # float64 is CPU-only (as in MLX); on a GPU machine the rest run on the GPU, whose
        # collectives reach MPI through the host.
        with mx.stream(mx.cpu) if kd == mx.float64 else contextlib.nullcontext():
            check_collectives(kd, nd, tol, name)


def check_collectives(kd, nd, tol, name):
    if NCCL and name == "int16":
        x = mx.ones((4,), kd)
        for f in (dist.all_sum, dist.all_max, dist.all_min):
            with contextlib.suppress(TypeError):
                mx.eval(f(x))
                raise AssertionError(f"{f.__name__} of int16 on NCCL must raise")
        close(host(dist.all_gather(x)), np.ones(4 * N), 0)
        return
    for shape in SHAPES:
        x, every = inputs(shape, kd, nd)
        stack = np.stack(every) if every else None
        want_sum = stack.any(0) if nd == np.bool_ else stack.sum(0)
        close(host(dist.all_sum(x)), want_sum, tol * N)
        assert dist.all_sum(x).dtype == kd
        if name != "complex64":
            close(host(dist.all_max(x)), stack.max(0), 0 if tol == 0 else tol)
            close(host(dist.all_min(x)), stack.min(0), 0 if tol == 0 else tol)
        want_gather = np.concatenate([e.reshape(e.shape or (1,)) for e in every])
        close(host(dist.all_gather(x)), want_gather, 0 if tol == 0 else tol)
        if shape and shape[0] % N == 0:
            block = shape[0] // N
            close(host(dist.sum_scatter(x)), want_sum[R * block:(R + 1) * block], tol * N)


@section
def views_and_special_values():
    base, every = inputs((6, 4), mx.float32, np.float32, seed=3)
    close(host(dist.all_sum(base.T)), np.stack(every).sum(0).T, 1e-6)
    close(host(dist.all_sum(base[::2, 1:])), np.stack(every).sum(0)[::2, 1:], 1e-6)
    special = mx.array([np.inf, -np.inf, np.nan, 1.0, 0.0], mx.float32) * (R + 1)
    got = np.array(dist.all_sum(special))
    np.testing.assert_array_equal(got[[0, 1]], [np.inf, -np.inf])
    assert np.isnan(got[2]) and got[3] == sum(range(1, N + 1))
    hi = np.array(dist.all_max(mx.array([np.inf, -np.inf, 1.0]) * (1 if R == 0 else -1)))
    np.testing.assert_array_equal(hi, [np.inf, np.inf, 1.0])
    # A GPU-less default stream and an explicit CPU stream give the same result.
    close(host(dist.all_sum(base, stream=mx.cpu)), np.stack(every).sum(0), 1e-6)


@section
def reduced_in_place():
    # An intermediate read only by its all_sum is reduced in its own buffer (donated); an
    # array the caller holds is never written.
    x, every = inputs((64, 33), mx.float32, np.float32, seed=5)
    total = np.stack(every).sum(0)
    close(host(dist.all_sum(x * 2)), 2 * total, 1e-5)
    f = mx.compile(lambda v: dist.all_max(v + 1) - 1)
    close(host(f(x)), np.stack(every).max(0), 1e-6)
    close(host(f(x)), np.stack(every).max(0), 1e-6)
    mine = host(x).copy()
    y = dist.all_sum(x)
    mx.eval(y)
    close(host(x), mine, 0)
    close(host(y), total, 1e-5)
    if not NCCL:
        # On the CPU, in place means no second buffer: the peak grows by the intermediate's
        # MiB alone.
        big = mx.full((1 << 18,), float(R + 1))
        mx.eval(big)
        mx.reset_peak_memory()
        before = mx.get_active_memory()
        z = dist.all_sum(big * 2)
        mx.eval(z)
        grew = mx.get_peak_memory() - before
        assert grew < 1.5 * big.nbytes, (grew, big.nbytes)
        close(host(z), np.full(1 << 18, N * (N + 1), np.float32), 0)


@section
def send_and_recv():
    nxt, prv = (R + 1) % N, (R - 1) % N
    payload = mx.arange(6, dtype=mx.float32).reshape(2, 3) * (R + 1)
    # Even ranks send first and odd ranks receive first, so the ring never waits on itself.
    if R % 2 == 0:
        mx.eval(dist.send(payload, nxt))
        got = dist.recv((2, 3), mx.float32, prv)
    else:
        got = dist.recv_like(payload, prv)
        mx.eval(got)
        mx.eval(dist.send(payload, nxt))
    close(np.array(got), np.arange(6).reshape(2, 3) * (prv + 1), 0)
    halves = mx.ones((3,), mx.bfloat16) * R
    if R == 0:
        mx.eval(dist.send(halves, 1))
    elif R == 1:
        got = dist.recv((3,), mx.bfloat16, 0)
        assert got.dtype == mx.bfloat16 and host(got).tolist() == [0.0, 0.0, 0.0]


@section
def split_groups():
    sub = world.split(R % 2)
    peers = [r for r in range(N) if r % 2 == R % 2]
    assert sub.size() == len(peers) and sub.rank() == peers.index(R)
    got = np.array(dist.all_sum(mx.array([float(R)]), group=sub))
    assert got.tolist() == [float(sum(peers))]
    # key reverses the order inside the subgroup.
    rev = world.split(0, key=N - R)
    assert rev.rank() == N - 1 - R
    gathered = np.array(dist.all_gather(mx.array([R]), group=rev)).tolist()
    assert gathered == list(range(N - 1, -1, -1))


@section
def gradients():
    x = mx.array(data(R, (4, 3), np.float32))
    # all_sum's cotangent passes through (MLX's rule): d/dx sum(all_sum(x)^2) = 2 all_sum(x).
    g = mx.grad(lambda v: (dist.all_sum(v) ** 2).sum())(x)
    total = sum(data(r, (4, 3), np.float32) for r in range(N))
    close(np.array(g), 2 * total, 1e-5)
    # all_gather's is this rank's block of the gathered cotangent.
    w = mx.arange(4 * 3 * N, dtype=mx.float32).reshape(4 * N, 3)
    g = mx.grad(lambda v: (dist.all_gather(v) * w).sum())(x)
    close(np.array(g), np.array(w)[4 * R:4 * R + 4], 0)
    # sum_scatter's is every rank's cotangent gathered.
    y = mx.array(data(R, (2 * N, 3), np.float32))
    g = mx.grad(lambda v: (dist.sum_scatter(v) * (R + 1)).sum())(y)
    want = np.concatenate([np.full((2, 3), r + 1.0) for r in range(N)])
    close(np.array(g), want, 0)
    # jvp of all_sum is all_sum of the tangent.
    _, t = mx.jvp(lambda v: dist.all_sum(v), [x], [mx.ones_like(x) * (R + 1)])
    close(np.array(t[0]), np.full((4, 3), sum(range(1, N + 1))), 0)


@section
def vmapped():
    xs = mx.array(data(R, (3, 4), np.float32))
    every = [data(r, (3, 4), np.float32) for r in range(N)]
    out = mx.vmap(dist.all_sum)(xs)
    close(np.array(out), sum(every), 1e-5)
    out = mx.vmap(dist.all_gather, in_axes=1, out_axes=0)(xs)  # 4 rows of (3 * N,)
    want = np.stack([np.concatenate([e[:, j] for e in every]) for j in range(4)])
    close(np.array(out), want, 0)
    out = mx.vmap(dist.all_gather)(mx.array([1.0, 2.0]) * (R + 1))  # batched scalars
    close(np.array(out), np.array([[r + 1.0 for r in range(N)], [2 * (r + 1.0) for r in range(N)]]), 0)


def regression_data(rows):
    rng = np.random.default_rng(42)
    x = rng.normal(size=(rows, 5)).astype(np.float32)
    y = (x @ rng.normal(size=(5, 2)) + 0.1).astype(np.float32)
    return x, y


def train(x_all, y_all, data_parallel):
    mx.random.seed(0)
    model = nn.Linear(5, 2)
    opt = optim.Adam(learning_rate=0.05)
    state = [model.state, opt.state]

    def loss_fn(m, x, y):
        return ((m(x) - y) ** 2).mean()

    grad_fn = nn.value_and_grad(model, loss_fn)

    def step(x, y):
        loss, grads = grad_fn(model, x, y)
        if data_parallel:
            grads = nn.average_gradients(grads)
            loss = dist.all_sum(loss) / N
        opt.update(model, grads)
        return loss

    step = mx.compile(step, inputs=state, outputs=state)
    losses = []
    for i in range(4):
        lo, hi = i * 8, (i + 1) * 8
        x, y = x_all[lo:hi], y_all[lo:hi]
        if data_parallel:
            share = len(x) // N
            x, y = x[R * share:(R + 1) * share], y[R * share:(R + 1) * share]
        losses.append(step(mx.array(x), mx.array(y)).item())
        mx.eval(state)
    return losses, np.array(model.weight)


@section
def data_parallel_step():
    x, y = regression_data(32)
    whole, w_whole = train(x, y, data_parallel=False)
    shared, w_shared = train(x, y, data_parallel=True)
    np.testing.assert_allclose(shared, whole, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w_shared, w_whole, rtol=1e-5, atol=1e-6)


@section
def sharded_layers():
    from kiln.nn.layers.distributed import shard_linear

    mx.random.seed(7)
    first, second = nn.Linear(32, 4 * N), nn.Linear(4 * N, 6)
    x = mx.random.normal((3, 32))
    want = second(first(x))
    a = shard_linear(first, "all-to-sharded", group=world)
    b = shard_linear(second, "sharded-to-all", group=world)
    close(np.array(b(a(x))), np.array(want), 1e-5)
    q = nn.QuantizedLinear.from_linear(first, group_size=32, bits=8) if N <= 8 else None
    if q is not None:
        qs = shard_linear(q, "all-to-sharded", group=world)
        full = np.array(q(x))
        block = full.shape[-1] // N
        close(np.array(qs(x)), full[:, R * block:(R + 1) * block], 1e-5)


@section
def fully_sharded():
    from kiln.nn.layers.distributed import fully_shard
    from kiln.nn.utils import clip_grad_norm_sharded
    from kiln.utils import tree_flatten

    def make():
        mx.random.seed(3)
        return nn.Sequential(nn.Linear(6, 4 * N), nn.ReLU(), nn.Linear(4 * N, 2 * N))

    def loss_fn(m, x):
        return (m(x) ** 2).mean()

    xs = [mx.array(data(r, (5, 6), np.float32, seed=9)) for r in range(N)]
    full = make()
    sharded = fully_shard(make(), group=world)
    close(np.array(sharded(xs[R])), np.array(full(xs[R])), 1e-5)
    # The sharded gradient is this rank's block of the gradient averaged over the ranks.
    g_full = [nn.value_and_grad(full, loss_fn)(full, x)[1] for x in xs]
    _, g_shard = nn.value_and_grad(sharded, loss_fn)(sharded, xs[R])
    flat_full = [dict(tree_flatten(g)) for g in g_full]
    for path, g in tree_flatten(g_shard):
        key = path.removeprefix("module.")
        mean = sum(np.array(f[key]) for f in flat_full) / N
        block = mean.shape[0] // N
        close(np.array(g), mean[R * block:(R + 1) * block], 1e-5)
    _, norm = clip_grad_norm_sharded(g_shard, 1e-3, group=world)
    want = np.sqrt(sum((sum(np.array(f[k]) for f in flat_full) / N).__pow__(2).sum()
                       for k in flat_full[0]))
    close(np.array(norm), want, 1e-5)


def mismatch():
    shape = (3,) if R == 0 else (4,)
    try:
        mx.eval(dist.all_sum(mx.ones(shape)))
    except ValueError as e:
        assert "different operations" in str(e), e
        print("ok mismatch-raised", flush=True)
    # The group is still in step afterwards.
    assert np.array(dist.all_sum(mx.ones((2,)))).tolist() == [N, N]
    print("ok after-mismatch", flush=True)


def missing():
    if R == 0:
        try:
            mx.eval(dist.all_sum(mx.ones((2,))))
        except RuntimeError as e:
            assert "No answer" in str(e), e
            print("ok timed-out", flush=True)


if __name__ == "__main__":
    what = sys.argv[1]
    for fn in SECTIONS if what == "collectives" else [globals()[what]]:
        run(fn)
    print(f"done rank {R} failed {len(FAILED)}", flush=True)
    sys.exit(1 if FAILED else 0)
