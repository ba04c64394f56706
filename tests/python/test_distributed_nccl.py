"""mx.distributed over NCCL.

Everywhere: without a GPU or without NCCL, asking for the backend is a clear error, and
ranks that ``kiln.launch --backend nccl`` started fail rather than run as silent singletons.
With one GPU: the world of one process (through ``init`` and through the launcher), its
collectives inside grad and compile, send/recv refused, split. With two GPUs (issue 26's
machine): mpi_worker.py's sections on NCCL ranks. kiln-distributed's Rust test (nccl.rs)
drives the device path itself for every dtype, the host staging and CUDA-graph capture."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import kiln
import kiln.core as mx

KILN_HOME = str(Path(kiln.__file__).resolve().parents[1])
HERE = Path(__file__).resolve().parent
HAS_GPU = mx.is_available(mx.gpu)


def gpu_count():
    if not HAS_GPU:
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
        return sum(line.startswith("GPU ") for line in out.stdout.splitlines())
    except (OSError, subprocess.TimeoutExpired):
        return 1


def launch(n, *args, extra_env=None, limit=300):
    env = dict(os.environ, KILN_DISTRIBUTED_TIMEOUT="60", **(extra_env or {}))
    env["PYTHONPATH"] = os.pathsep.join(p for p in [KILN_HOME, env.get("PYTHONPATH", "")] if p)
    cmd = [sys.executable, "-m", "kiln.launch", "-n", str(n), "--backend", "nccl",
           *map(str, args)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=limit)


ONE_RANK = textwrap.dedent(
    """
    import numpy as np
    import kiln.core as mx
    import kiln.nn as nn
    import kiln.optimizers as optim

    dist = mx.distributed
    world = dist.init()
    assert (world.rank(), world.size()) == (0, 1), world
    assert "nccl" in repr(world), world
    assert dist.init(backend="nccl") is world
    x = mx.random.normal((6, 5), key=mx.random.key(0))
    for f in (dist.all_sum, dist.all_max, dist.all_min, dist.all_gather, dist.sum_scatter):
        np.testing.assert_array_equal(np.array(f(x)), np.array(x))
    for dt in (mx.bfloat16, mx.float16, mx.int32, mx.bool_):
        y = x.astype(dt)
        assert dist.all_sum(y).dtype == dt
        np.testing.assert_array_equal(np.array(dist.all_sum(y).astype(mx.float32)),
                                      np.array(y.astype(mx.float32)))
    g = mx.grad(lambda v: (dist.all_sum(v) ** 2).sum())(x)
    np.testing.assert_allclose(np.array(g), 2 * np.array(x), rtol=1e-6)
    for bad in (lambda: dist.send(x, 0), lambda: dist.recv((2,), mx.float32, 0)):
        try:
            bad()
        except ValueError as e:
            assert "singleton" in str(e), e
        else:
            raise AssertionError("send/recv on a group of one must raise")
    sub = world.split(0)
    assert (sub.rank(), sub.size()) == (0, 1)
    # A compiled data-parallel step (average_gradients over the world) trains as usual.
    model = nn.Linear(5, 1)
    opt = optim.SGD(learning_rate=0.1)
    state = [model.state, opt.state]
    def loss(m, a, b):
        return ((m(a) - b) ** 2).mean()
    def step(a, b):
        l, grads = nn.value_and_grad(model, loss)(model, a, b)
        opt.update(model, nn.average_gradients(grads))
        return l
    step = mx.compile(step, inputs=state, outputs=state)
    b = x.sum(axis=1, keepdims=True)
    losses = [step(x, b).item() for _ in range(5)]
    assert losses[-1] < losses[0], losses
    print("ok one-rank", flush=True)
    """
)


def test_without_a_gpu_or_nccl_the_backend_is_a_clear_error():
    if mx.distributed.is_available("nccl"):
        pytest.skip("NCCL and a GPU are here")
    code = "import kiln.core as mx\ntry:\n    mx.distributed.init(backend='nccl')\n" \
           "except RuntimeError as e:\n    print('raised', e)\n"
    env = dict(os.environ, KILN_NCCL_LIBRARY="/nonexistent/libnccl.so.2")
    env["PYTHONPATH"] = os.pathsep.join(p for p in [KILN_HOME, env.get("PYTHONPATH", "")] if p)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "raised" in r.stdout and ("nccl" in r.stdout.lower() or "GPU" in r.stdout), r.stdout


def test_launched_nccl_ranks_without_the_backend_fail_instead_of_running_alone(tmp_path):
    if mx.distributed.is_available("nccl"):
        pytest.skip("NCCL and a GPU are here")
    script = tmp_path / "rank.py"
    script.write_text("import kiln.core as mx\nmx.distributed.init()\nprint('ran alone')\n")
    r = launch(2, script, extra_env={"KILN_LAUNCH_SKIP_GPU_CHECK": "1",
                                     "KILN_NCCL_LIBRARY": "/nonexistent/libnccl.so.2"})
    assert r.returncode != 0, r.stdout + r.stderr
    assert "ran alone" not in r.stdout, r.stdout


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="no GPU")
def test_a_world_of_one_gpu(tmp_path):
    assert mx.distributed.is_available("nccl")
    script = tmp_path / "one.py"
    script.write_text(ONE_RANK)
    r = launch(1, script)
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "ok one-rank" in out, out[-6000:]
    # Asked for directly, without a launcher.
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [KILN_HOME, env.get("PYTHONPATH", "")] if p)
    code = ONE_RANK.replace("world = dist.init()", "world = dist.init(backend='nccl')")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and "ok one-rank" in r.stdout, (r.stdout + r.stderr)[-6000:]


@pytest.mark.gpu
@pytest.mark.skipif(gpu_count() < 2, reason="needs two GPUs (issue 26's machine)")
@pytest.mark.parametrize("what", ["collectives", "mismatch"])
def test_mpi_worker_sections_on_two_nccl_ranks(what):
    r = launch(2, HERE / "mpi_worker.py", what, limit=600)
    out = r.stdout + r.stderr
    assert "FAIL" not in out and r.returncode == 0, out[-6000:]
