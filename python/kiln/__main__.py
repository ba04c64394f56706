"""``python -m kiln``: run MLX programs on kiln.

    python -m kiln run script.py [args...]      # a script, with `import mlx...` on kiln
    python -m kiln run -m mlx_lm generate ...   # a module, as `python -m` would
    python -m kiln --version
"""

from __future__ import annotations

import runpy
import sys

USAGE = "python -m kiln run (script.py | -m module) [args...]"


def main(argv: list) -> int:
    if argv[:1] in (["--version"], ["-V"]):
        from kiln import __version__

        print(__version__)
        return 0
    if not argv or argv[0] != "run" or len(argv) < 2 or argv[1:] == ["-m"]:
        print(f"usage: {USAGE}", file=sys.stderr)
        return 2
    from kiln import alias_mlx

    alias_mlx()
    if argv[1] == "-m":
        module, rest = argv[2], argv[3:]
        sys.argv = [module] + rest
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        script, rest = argv[1], argv[2:]
        sys.argv = [script] + rest
        runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
