"""Parallel NVRTC builds of a compiled function's kernels (kiln_cuda::prebuild): before the
first call of a GPU entry its fused regions' kernels are built together, on several threads.
Results must be right, explain() must list every kernel, the prediction must cover every
fused kernel the call launches, a second call builds nothing, and a second process with the
same disk cache builds nothing at all.

Skipped where no GPU is available; on the GPU machine:
`python -m pytest tests/python/test_cuda_nvrtc_parallel.py`."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import kiln.core as mx
from conftest import GPU_ONLY

pytestmark = GPU_ONLY  # the gpu mark, and skipped where no GPU is available

RNG = np.random.default_rng(11)


def regions(x, y, w):
    """Three fused regions split by reductions, a broadcast and a transposed operand, and an
    eager single-op kernel."""
    a = mx.sin(x) * y + 1.5
    s = mx.sum(a, axis=-1, keepdims=True)
    b = mx.exp(a - s) / (1.0 + mx.abs(y))
    m = mx.max(b, axis=0, keepdims=True)
    c = mx.sqrt(mx.abs(b * m)) + w.T * 2.0
    return c, mx.negative(s)


def regions_np(x, y, w):
    a = np.sin(x) * y + 1.5
    s = a.sum(axis=-1, keepdims=True)
    b = np.exp(a - s) / (1.0 + np.abs(y))
    m = b.max(axis=0, keepdims=True)
    return np.sqrt(np.abs(b * m)) + w.T * 2.0, -s


def data(rows=33, cols=70):
    x = RNG.uniform(-2, 2, (rows, cols)).astype(np.float32)
    y = RNG.uniform(-2, 2, (rows, cols)).astype(np.float32)
    w = RNG.uniform(-2, 2, (cols, rows)).astype(np.float32)
    return x, y, w


def cuda_kernels():
    return mx.compile(lambda v: v).explain()["kernels"]["cuda"]["kernels"]


# Views of the inputs change the variants the first call needs: contiguous (16-byte vector
# accesses), strided (transposed), and contiguous but misaligned (offset of one element).
VIEWS = {
    "plain": lambda a: mx.array(a),
    "transposed": lambda a: mx.array(np.ascontiguousarray(a.T)).T,
    "offset": lambda a: mx.array(np.concatenate([[0.0], a.ravel()]).astype(np.float32))[
        1:
    ].reshape(a.shape),
}


@pytest.mark.parametrize("view", list(VIEWS))
def test_first_call_builds_every_fused_kernel_in_one_batch(view):
    x, y, w = data()
    scale = float(1 + list(VIEWS).index(view))  # distinct programs per case: fresh builds

    def fn(x, y, w):
        c, s = regions(x, y, w)
        return c * scale, s

    xs, ys, ws = (VIEWS[view](np.asarray(v, np.float32)) for v in (x, y, w))
    mx.eval(xs, ys, ws)
    f = mx.compile(fn)
    before = len(cuda_kernels())
    c, s = f(xs, ys, ws)
    mx.eval(c, s)
    new = cuda_kernels()[before:]
    want_c, want_s = regions_np(x, y, w)
    np.testing.assert_allclose(np.array(c), want_c * scale, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(np.array(s), want_s, rtol=2e-5, atol=2e-5)

    info = f.explain()
    (entry,) = info["entries"]
    batch = entry["gpu_prebuild"]
    assert batch is not None and batch["failed"] == 0
    names = {k["name"] for k in batch["kernels"]}
    # Every fused region and the eager negative have their kernel in the batch.
    for r in entry["regions"]:
        assert ("kiln_" + r["name"])[:96] in names, (r["name"], names)
    assert "kiln_Compiled_negative" in names
    assert len(entry["regions"]) >= 3
    assert batch["built"] + batch["disk_hits"] + batch["memory_hits"] == len(batch["kernels"])
    assert batch["wall_ms"] >= 0 and batch["threads"] >= (1 if batch["built"] else 0)
    # The prediction was right: no elementwise kernel was built outside the batch.
    lazy = [k["name"] for k in new if k["name"].startswith("kiln_Compiled") and k["batch"] is None]
    assert lazy == [], lazy
    # Every kernel the batch built or loaded is listed, with its source and build time.
    listed = {k["name"]: k for k in info["kernels"]["cuda"]["kernels"]}
    for k in batch["kernels"]:
        assert k["name"] in listed and "extern" in listed[k["name"]]["source"]
        if k["state"] == "built":
            assert k["build_ms"] > 0
    assert any(b["id"] == batch["id"] for b in info["kernels"]["cuda"]["batches"]) or (
        batch["built"] + batch["disk_hits"] == 0
    )

    # The second call (run directly on the backend) builds nothing.
    builds = info["kernels"]["cuda"]["builds"]
    count = len(cuda_kernels())
    c2, s2 = f(xs, ys, ws)
    mx.eval(c2, s2)
    np.testing.assert_array_equal(np.array(c2), np.array(c))
    assert f.explain()["kernels"]["cuda"]["builds"] == builds
    # The third captures a CUDA graph over row-major copies of the inputs: views need the
    # row-major variants then, built as one batch before the capture; later calls replay.
    for _ in range(2):
        c3, s3 = f(xs, ys, ws)
        mx.eval(c3, s3)
        np.testing.assert_allclose(np.array(c3), np.array(c), rtol=1e-6, atol=1e-6)
    later = cuda_kernels()[count:]
    if view == "plain":  # the same variants as the first call
        assert not [k for k in later if k["name"].startswith("kiln_Compiled")]
    lazy = [k["name"] for k in later if k["name"].startswith("kiln_Compiled") and k["batch"] is None]
    assert lazy == [], lazy
    assert f.explain()["entries"][0]["gpu_prebuild"]["id"] == batch["id"]


SCRIPT = r"""
import json, sys
import numpy as np
import kiln.core as mx
sys.path.insert(0, {here!r})
from test_cuda_nvrtc_parallel import regions, regions_np
rng = np.random.default_rng(3)
x, y = (rng.uniform(-2, 2, (20, 48)).astype(np.float32) for _ in range(2))
w = rng.uniform(-2, 2, (48, 20)).astype(np.float32)
f = mx.compile(regions)
c, s = f(mx.array(x), mx.array(y), mx.array(w))
mx.eval(c, s)
want_c, want_s = regions_np(x, y, w)
ok = bool(np.allclose(np.array(c), want_c, rtol=2e-5, atol=2e-5)
          and np.allclose(np.array(s), want_s, rtol=2e-5, atol=2e-5))
info = f.explain()
print(json.dumps({{"ok": ok, "batch": info["entries"][0]["gpu_prebuild"],
                   "builds": info["kernels"]["cuda"]["builds"],
                   "disk_hits": info["kernels"]["cuda"]["disk_hits"]}}))
"""


def run_process(cache_dir, **env):
    here = os.path.dirname(os.path.abspath(__file__))
    full = dict(os.environ, KILN_CACHE_DIR=str(cache_dir), **env)
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(here=here)],
        env=full, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_second_process_with_warm_disk_cache_builds_nothing(tmp_path):
    first = run_process(tmp_path)
    assert first["ok"]
    batch = first["batch"]
    assert batch["built"] >= 4 and batch["failed"] == 0 and batch["disk_hits"] == 0
    assert batch["wall_ms"] > 0
    second = run_process(tmp_path)
    assert second["ok"]
    assert second["builds"] == 0, second
    assert second["batch"]["built"] == 0
    assert second["batch"]["disk_hits"] == len(second["batch"]["kernels"]) == len(batch["kernels"])


def test_one_thread_and_batches_off_give_the_same_results(tmp_path):
    one = run_process(tmp_path / "one", KILN_NVRTC_THREADS="1")
    assert one["ok"] and one["batch"]["threads"] == 1
    off = run_process(tmp_path / "off", KILN_CUDA_PREBUILD="0")
    assert off["ok"] and off["batch"] is None
    # Without the batch the same kernels build lazily, one at a time.
    assert off["builds"] >= len(one["batch"]["kernels"])
