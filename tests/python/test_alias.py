"""``kiln.alias_mlx()`` and ``python -m kiln run``: code written for MLX imports kiln's
modules (the same objects), in fresh processes (pytest's own process may hold real MLX)."""

import subprocess
import sys
import textwrap

import pytest


def _python(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True, text=True, timeout=300,
    )


def test_alias_gives_kiln_modules():
    proc = _python(
        """
        import kiln
        kiln.alias_mlx()
        import mlx
        import mlx.core as mx
        import mlx.nn as nn
        import mlx.optimizers as optim
        from mlx.nn.layers.base import Module
        from mlx.utils import tree_flatten
        from mlx.nn.utils import average_gradients
        from mlx.nn.layers.distributed import shard_linear
        import kiln.core, kiln.nn, kiln.nn.layers.base
        assert mlx is kiln and mx is kiln.core and nn is kiln.nn
        assert Module is kiln.nn.layers.base.Module
        assert optim is kiln.optimizers
        # kiln's modules keep their own names and specs.
        assert kiln.core.__name__ == "kiln.core" and kiln.core.__spec__.name == "kiln.core"
        assert mx.distributed.init().size() == 1
        kiln.alias_mlx()  # a second call does nothing
        print(mx.array([1, 2]).sum().item())
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "3"


def test_alias_missing_module_is_a_clear_error():
    proc = _python(
        """
        import kiln
        kiln.alias_mlx()
        try:
            import mlx.no_such_thing
        except ModuleNotFoundError as e:
            print("ERR", e)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert "ERR [kiln.alias_mlx] mlx.no_such_thing has no kiln counterpart" in proc.stdout


def test_alias_refuses_after_real_mlx():
    pytest.importorskip("mlx.core")
    proc = _python(
        """
        import mlx.core
        import kiln
        try:
            kiln.alias_mlx()
        except RuntimeError as e:
            print("ERR", e)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert "ERR [kiln.alias_mlx] a real MLX is already imported" in proc.stdout


def test_unalias_restores_real_mlx():
    pytest.importorskip("mlx.core")
    proc = _python(
        """
        import kiln
        kiln.alias_mlx()
        import mlx.core
        assert mlx.core is kiln.core
        kiln.unalias_mlx()
        import mlx.core
        assert mlx.core is not kiln.core
        print("ok")
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_python_m_kiln_run(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys
            import mlx.core as mx
            import kiln.core
            assert mx is kiln.core
            print(__name__, sys.argv[1:], mx.ones((2, 2)).sum().item())
            """
        )
    )
    proc = subprocess.run(
        [sys.executable, "-m", "kiln", "run", str(script), "a", "--b"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "__main__ ['a', '--b'] 4.0"
    module_dir = tmp_path / "pkg"
    module_dir.mkdir()
    (module_dir / "__init__.py").write_text("")
    (module_dir / "__main__.py").write_text(script.read_text())
    proc = subprocess.run(
        [sys.executable, "-m", "kiln", "run", "-m", "pkg", "x"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "__main__ ['x'] 4.0"
    proc = subprocess.run([sys.executable, "-m", "kiln"], capture_output=True, text=True)
    assert proc.returncode == 2 and "usage" in proc.stderr
