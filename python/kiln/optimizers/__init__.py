"""Optimizers and learning-rate schedules on ``kiln.core``, following ``mlx.optimizers``:
``import kiln.optimizers as optim``."""

from kiln.optimizers.optimizers import (  # noqa: F401
    SGD,
    AdaDelta,
    Adafactor,
    Adagrad,
    Adam,
    Adamax,
    AdamW,
    Lion,
    MultiOptimizer,
    Muon,
    Optimizer,
    RMSprop,
    clip_grad_norm,
)
from kiln.optimizers.schedulers import (  # noqa: F401
    cosine_decay,
    exponential_decay,
    join_schedules,
    linear_schedule,
    step_decay,
)
