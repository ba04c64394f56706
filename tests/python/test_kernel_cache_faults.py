"""Fault injection on the disk cache of compiled C kernels: truncated, corrupt and swapped
objects, edited sources, a read-only folder, a compiler that hangs, leftovers of dead builds;
and kernels unloaded once no compiled function refers to them. Each case runs in a fresh
process over its own cache folder."""

import os
import subprocess
import sys
import textwrap
import time

import pytest

# Builds two kernels (f and g), checks their values, prints the JIT counters as JSON.
PROGRAM = textwrap.dedent(
    """
    import json
    import kiln.core as mx, numpy as np
    from kiln import _core
    x = np.linspace(-3, 3, 64, dtype=np.float32)
    f = mx.compile(lambda a: mx.exp(a) * 2 + 1)
    g = mx.compile(lambda a: mx.tanh(a) * 3 - a)
    np.testing.assert_allclose(np.array(f(mx.array(x))), np.exp(x) * 2 + 1, rtol=1e-6)
    np.testing.assert_allclose(np.array(g(mx.array(x))), np.tanh(x) * 3 - x, rtol=1e-6, atol=1e-6)
    _core._wait_for_builds()
    stats = dict(_core._jit_stats())
    print(json.dumps({k: stats[k] for k in ("builds", "disk_hits", "failures")}))
    """
)


def _run(cache, code=PROGRAM, **env):
    full = dict(os.environ, KILN_CACHE_DIR=str(cache), KILN_CPU_JIT="sync", KILN_DISABLE_GPU="1")
    full.update(env)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    return json.loads(proc.stdout.strip().splitlines()[-1])


def _objects(cache):
    return sorted(p for p in cache.iterdir() if p.suffix == ".so")


def test_fresh_then_disk_hits(tmp_path):
    assert _run(tmp_path) == {"builds": 2, "disk_hits": 0, "failures": 0}
    assert _run(tmp_path) == {"builds": 0, "disk_hits": 2, "failures": 0}
    kinds = sorted(p.suffix for p in tmp_path.iterdir())
    assert kinds == [".c", ".c", ".so", ".so", ".sum", ".sum"]


@pytest.mark.parametrize("damage", ["truncate", "empty", "flip", "swap"])
def test_damaged_object_is_rebuilt(tmp_path, damage):
    _run(tmp_path)
    a, b = _objects(tmp_path)
    if damage == "truncate":
        a.write_bytes(a.read_bytes()[: a.stat().st_size // 3])
    elif damage == "empty":
        a.write_bytes(b"")
    elif damage == "flip":
        data = bytearray(a.read_bytes())
        data[len(data) // 2] ^= 0x40
        a.write_bytes(bytes(data))
    else:  # each object replaced by the other kernel's
        da, db = a.read_bytes(), b.read_bytes()
        a.write_bytes(db)
        b.write_bytes(da)
    rebuilt = 2 if damage == "swap" else 1
    assert _run(tmp_path) == {"builds": rebuilt, "disk_hits": 2 - rebuilt, "failures": 0}
    assert _run(tmp_path) == {"builds": 0, "disk_hits": 2, "failures": 0}


def test_edited_source_is_rebuilt(tmp_path):
    _run(tmp_path)
    c = sorted(p for p in tmp_path.iterdir() if p.suffix == ".c")[0]
    c.write_text(c.read_text().replace("+", "-"))
    assert _run(tmp_path) == {"builds": 1, "disk_hits": 1, "failures": 0}


def test_missing_checksum_is_rebuilt(tmp_path):
    _run(tmp_path)
    for p in tmp_path.glob("*.sum"):
        p.unlink()
    assert _run(tmp_path) == {"builds": 2, "disk_hits": 0, "failures": 0}


def test_read_only_cache_runs_in_the_interpreter(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes through read-only permissions")
    tmp_path.chmod(0o500)
    try:
        assert _run(tmp_path) == {"builds": 0, "disk_hits": 0, "failures": 2}
    finally:
        tmp_path.chmod(0o700)


def test_cache_folder_that_is_a_file(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    # Every kernel fails to store; the interpreter gives the same values.
    assert _run(blocker / "sub")["failures"] == 2


def test_hanging_compiler_times_out(tmp_path):
    cc = tmp_path / "slowcc"
    cc.write_text("#!/bin/sh\nsleep 30\n")
    cc.chmod(0o755)
    started = time.monotonic()
    code = PROGRAM + textwrap.dedent(
        """
        info = f.explain()
        errors = _core._jit_stats()["errors"]
        assert any("KILN_CC_TIMEOUT" in m for m in errors), errors
        """
    )
    stats = _run(tmp_path / "cache", code, KILN_CC=str(cc), KILN_CC_TIMEOUT="0.5")
    assert stats == {"builds": 0, "disk_hits": 0, "failures": 2}
    assert time.monotonic() - started < 20


def test_stale_temporaries_are_removed(tmp_path):
    old = tmp_path / "0123456789abcdef.1.ThreadId1.tmp.c"
    fresh = tmp_path / "0123456789abcdef.2.ThreadId1.tmp.so"
    foreign = tmp_path / "notes.txt"
    for p in (old, fresh, foreign):
        p.write_text("x")
    hour_ago = time.time() - 3600
    os.utime(old, (hour_ago, hour_ago))
    _run(tmp_path)
    assert not old.exists() and fresh.exists() and foreign.exists()


def test_kernels_unload_when_no_compiled_function_uses_them(tmp_path):
    code = textwrap.dedent(
        """
        import gc
        import kiln.core as mx
        from kiln import _core
        x = mx.ones((16,))

        def mapped():
            paths = {line.split()[-1] for line in open("/proc/self/maps") if "{cache}" in line}
            return len(paths)

        fns = []
        for i in range(40):
            f = mx.compile(lambda a, i=i: mx.exp(a) * (i + 2) + 1)
            f(x).sum().item()
            fns.append(f)
        _core._wait_for_builds()
        loaded = mapped()
        del fns, f
        gc.collect()
        # The next kernel built lets go of the ones no function can call.
        mx.compile(lambda a: mx.sin(a) * 7)(x).sum().item()
        _core._wait_for_builds()
        print(loaded, mapped(), len(_core._jit_stats()["kernels"]))
        """
    ).replace("{cache}", str(tmp_path))
    full = dict(os.environ, KILN_CACHE_DIR=str(tmp_path), KILN_CPU_JIT="sync", KILN_DISABLE_GPU="1")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    before, after, _ = map(int, proc.stdout.split())
    assert before == 40 and after == 1, (before, after)
