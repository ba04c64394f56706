"""Learning-rate schedules (as ``mlx.optimizers``'): each returns ``schedule(step)``,
computed with array ops so a compiled training step can take the step as an array."""

from __future__ import annotations

import math
from typing import Callable, List

import kiln.core as mx


def exponential_decay(init: float, decay_rate: float) -> Callable:
    """``init * decay_rate ** step``."""

    def schedule(step):
        return init * decay_rate**step

    return schedule


def step_decay(init: float, decay_rate: float, step_size: int) -> Callable:
    """``init * decay_rate ** (step // step_size)``."""

    def schedule(step):
        return init * (decay_rate ** (step // step_size))

    return schedule


def cosine_decay(init: float, decay_steps: int, end: float = 0.0) -> Callable:
    """Half a cosine from ``init`` to ``end`` over ``decay_steps``, then ``end``."""
    if decay_steps < 1:
        raise ValueError(f"decay_steps must be greater than 0, but got {decay_steps}.")

    def schedule(step):
        s = mx.minimum(step, decay_steps)
        decay = 0.5 * (1.0 + mx.cos((math.pi / decay_steps) * s))
        return end + decay * (init - end)

    return schedule


def linear_schedule(init: float, end: float, steps: int) -> Callable:
    """From ``init`` to ``end`` in ``steps`` equal steps, then ``end``."""
    if steps < 1:
        raise ValueError(f"steps must be greater than 0, but got {steps}.")

    def schedule(step):
        s = mx.minimum(step, steps)
        return s * ((end - init) / steps) + init

    return schedule


def join_schedules(schedules: List[Callable], boundaries: List[int]) -> Callable:
    """Schedule ``i + 1`` takes over at ``boundaries[i]``, counting its steps from there."""
    if len(schedules) == 0:
        raise ValueError("Must provide at least 1 schedule to join.")
    if len(schedules) != len(boundaries) + 1:
        raise ValueError(
            f"Received {len(boundaries)} boundaries but expected {len(schedules) - 1}."
        )

    def schedule(step):
        out = schedules[0](step)
        for b, s in zip(boundaries, schedules[1:]):
            out = mx.where(step < b, out, s(step - b))
        return out

    return schedule
