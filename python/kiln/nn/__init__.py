"""Neural network layers, losses and initializers on ``kiln.core``, following ``mlx.nn``:
``import kiln.nn as nn``."""

from kiln.nn import init, losses  # noqa: F401
from kiln.nn.layers import *  # noqa: F401,F403
from kiln.nn.utils import average_gradients, checkpoint, value_and_grad  # noqa: F401
