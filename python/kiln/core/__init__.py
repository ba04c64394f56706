"""kiln's array API, following ``mlx.core``: ``import kiln.core as mx``."""

from kiln._core import *  # arrays, dtypes, ops, devices
from kiln._core import __version__  # noqa: F401

# A real submodule, so that both `mx.random` and `import kiln.core.random` work.
# (`from kiln.core import random` would return _core's `random`, already bound by the star
# import, instead of loading the Python submodule.)
import kiln.core.random as random  # noqa: F401
import kiln.core.linalg as linalg  # noqa: F401
from kiln.core import cuda, metal  # noqa: F401
from kiln.core._platform import set_wired_limit  # noqa: F401
import kiln.core.fft as fft  # noqa: F401
import kiln.core.fast as fast  # noqa: F401
import kiln.core.distributed as distributed  # noqa: F401

from kiln.core._io import load, save, save_safetensors, savez, savez_compressed  # noqa: F401
from kiln.core._gguf import save_gguf  # noqa: F401
from kiln.core._transforms import (  # noqa: F401
    checkpoint, custom_function, grad, jvp, value_and_grad, vjp, vmap,
)
from kiln.core._compile import compile  # noqa: F401
from kiln.core._export import (  # noqa: F401
    FunctionExporter,
    export_function,
    exporter,
    import_function,
)
from kiln.core._compat import *  # noqa: F401,F403 (aliases and compositions)
from kiln.core._extras import *  # noqa: F401,F403 (dtype queries, convolve, masked matmuls)
from kiln.core._compat import pi, e, inf, nan, newaxis, euler_gamma  # noqa: F401
from kiln.core._quant_modes import *  # noqa: F401,F403 (quantization modes: wraps the affine ops)
from kiln.core._mlxnames import export_to_dot  # noqa: F401,E402 (MLX's node names)

import atexit as _atexit  # noqa: E402
from kiln._core import _drain_async_eval  # noqa: E402

# Work async_eval handed to the issuing thread is issued before the interpreter goes away.
_atexit.register(_drain_async_eval)
