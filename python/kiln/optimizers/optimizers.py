"""Optimizers (as ``mlx.optimizers``): ``opt.update(model, grads)`` applies one step.

Everything that changes between steps (the step count, the learning rate, each
parameter's moments) lives in ``opt.state``, a tree of dicts of arrays, so a training step
compiled with ``mx.compile(step, inputs=[model.state, opt.state], outputs=...)`` carries it
as inputs and outputs. Hyper-parameters may be schedules: functions of the step.
"""

from __future__ import annotations

from typing import Callable, List, Optional, Tuple, Union

import kiln.core as mx
from kiln.utils import tree_flatten, tree_map, tree_reduce, tree_unflatten

Schedule = Union[float, Callable[[mx.array], mx.array]]


class Optimizer:
    """Base class: subclasses define ``init_single`` (a parameter's state) and
    ``apply_single`` (its update)."""

    def __init__(self, schedulers: Optional[dict] = None):
        self._initialized = False
        self._state: dict = {"step": mx.array(0, mx.uint64)}
        self._schedulers = dict(schedulers or {})

    def update(self, model, gradients: dict) -> None:
        """Applies ``gradients`` to ``model``'s parameters and writes them back."""
        model.update(self.apply_gradients(gradients, model))

    def init(self, parameters: dict) -> None:
        """Creates the state of every parameter of ``parameters`` that has none yet
        (optional: the first update does it); keeps existing state."""

        def grow(params, state):
            # A state tree shaped like `params`, with an empty dict at each new leaf.
            if isinstance(params, (list, tuple)):
                state = list(state) if isinstance(state, (list, tuple)) else []
                for i, p in enumerate(params):
                    if i < len(state):
                        state[i] = grow(p, state[i])
                    else:
                        state.append(grow(p, {}))
                return state
            if isinstance(params, dict):
                state = state if isinstance(state, dict) else {}
                for k, p in params.items():
                    state[k] = grow(p, state.get(k, {}))
                return state
            return state

        grow(parameters, self._state)
        tree_map(lambda p, s: s or self.init_single(p, s), parameters, self._state)
        self._initialized = True

    def init_single(self, parameter: mx.array, state: dict) -> None:
        """Fills ``state`` for one parameter (subclasses)."""
        raise NotImplementedError()

    def apply_gradients(self, gradients: dict, parameters: dict) -> dict:
        """The updated parameters, a tree shaped like ``gradients`` (``parameters`` may
        hold more)."""
        if not self._initialized:
            self.init(gradients)
        for name, schedule in self._schedulers.items():
            self.state[name] = schedule(self.step)
        self.state["step"] = self.step + 1
        return tree_map(self.apply_single, gradients, parameters, self.state)

    def apply_single(self, gradient: mx.array, parameter: mx.array, state: dict) -> mx.array:
        """One parameter's update (subclasses); may write ``state``."""
        raise NotImplementedError()

    @property
    def state(self) -> dict:
        """The optimizer's state: ``step``, scheduled hyper-parameters and the per-parameter
        state tree."""
        return self._state

    @state.setter
    def state(self, state: dict) -> None:
        self._initialized = False
        self._state = state

    @property
    def step(self) -> mx.array:
        """The number of updates applied so far."""
        return self.state["step"]

    @property
    def learning_rate(self) -> mx.array:
        """The current learning rate."""
        return self.state["learning_rate"]

    @learning_rate.setter
    def learning_rate(self, learning_rate: Union[float, mx.array]) -> None:
        self.state["learning_rate"] = mx.array(learning_rate)

    def _maybe_schedule(self, name: str, value: Schedule) -> None:
        """Stores ``value`` in the state, or the first value of a schedule (which then
        runs before every update)."""
        if callable(value):
            self._schedulers[name] = value
            value = value(self.step)
        else:
            value = mx.array(value)
        self.state[name] = value


def _merge(a, b):
    """Two trees of the same layout where each leaf is set in one of them (the other holds
    an empty dict there) merged into one."""
    if isinstance(a, dict) and not a:
        return b
    if isinstance(b, dict) and not b:
        return a
    if isinstance(a, dict) and isinstance(b, dict):
        return {k: _merge(a.get(k, {}), b.get(k, {})) for k in {**a, **b}}
    if isinstance(a, list) and isinstance(b, list):
        n = max(len(a), len(b))
        a, b = a + [{}] * (n - len(a)), b + [{}] * (n - len(b))
        return [_merge(x, y) for x, y in zip(a, b)]
    raise ValueError("[MultiOptimizer] Cannot merge trees with different structures.")


class MultiOptimizer(Optimizer):
    """Several optimizers, each for the parameters its filter accepts:
    ``filters[i](path, array)`` selects optimizer ``i``'s parameters, the last optimizer takes
    the rest (so there is one filter fewer than optimizers)."""

    def __init__(self, optimizers: List[Optimizer], filters: list = []):
        super().__init__()
        self._state = {}
        if len(filters) != len(optimizers) - 1:
            raise ValueError(f"Given {len(filters)} filters but {len(optimizers) - 1} needed.")
        self.optimizers = optimizers
        self.filters = list(filters) + [lambda *args, **kwargs: True]

    def _split(self, gradients: dict) -> list:
        if len(self.optimizers) == 1:
            return [gradients]
        parts: list = [[] for _ in self.optimizers]
        for k, g in tree_flatten(gradients):
            for i, fn in enumerate(self.filters):
                if fn(k, g):
                    parts[i].append((k, g))
                    break
        return [tree_unflatten(p) if p else {} for p in parts]

    def init(self, parameters: dict) -> None:
        """Initialises each optimizer on its share of ``parameters``."""
        for o, p in zip(self.optimizers, self._split(parameters)):
            o.init(p)

    def apply_gradients(self, gradients: dict, parameters: dict) -> dict:
        """Each optimizer updates its share; the results are merged."""
        tree: dict = {}
        for o, g in zip(self.optimizers, self._split(gradients)):
            tree = _merge(tree, o.apply_gradients(g, parameters))
        return tree

    @property
    def state(self) -> dict:
        """``{"states": [each optimizer's state]}``."""
        return {"states": [o.state for o in self.optimizers]}

    @state.setter
    def state(self, state: dict) -> None:
        if "states" not in state or len(state["states"]) != len(self.optimizers):
            raise ValueError("Invalid state provided")
        for o, st in zip(self.optimizers, state["states"]):
            o.state = st

    @property
    def learning_rate(self) -> mx.array:
        """The first optimizer's learning rate (setting it sets every optimizer's)."""
        return self.optimizers[0].learning_rate

    @learning_rate.setter
    def learning_rate(self, learning_rate: Union[float, mx.array]) -> None:
        for o in self.optimizers:
            o.learning_rate = learning_rate


class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum, dampening, Nesterov momentum
    and weight decay (L2 added to the gradient):
    ``v = mu v + (1 - tau) g; w = w - lr (g + mu v if nesterov else v)``."""

    def __init__(
        self,
        learning_rate: Schedule,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        dampening: float = 0.0,
        nesterov: bool = False,
    ):
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening.")
        super().__init__()
        self._maybe_schedule("learning_rate", learning_rate)
        self.momentum = momentum
        self.weight_decay = weight_decay
        self.dampening = dampening
        self.nesterov = nesterov

    def init_single(self, parameter: mx.array, state: dict) -> None:
        """Zero velocity."""
        state["v"] = mx.zeros_like(parameter)

    def apply_single(self, gradient: mx.array, parameter: mx.array, state: dict) -> mx.array:
        """One SGD step."""
        if self.weight_decay != 0:
            gradient = gradient + self.weight_decay * parameter
        lr = self.learning_rate.astype(gradient.dtype)
        if self.momentum <= 0:
            return parameter - lr * gradient
        v = self.momentum * state.get("v")
        v = v + ((1 - self.dampening) * gradient if self.dampening > 0 else gradient)
        state["v"] = v
        update = gradient + self.momentum * v if self.nesterov else v
        return parameter - lr * update


class RMSprop(Optimizer):
    """``v = alpha v + (1 - alpha) g^2; w = w - lr g / (sqrt(v) + eps)``."""

    def __init__(self, learning_rate: Schedule, alpha: float = 0.99, eps: float = 1e-8):
        super().__init__()
        self._maybe_schedule("learning_rate", learning_rate)
        if alpha < 0.0:
            raise ValueError(f"RMSprop alpha should be >=0, {alpha} was provided instead")
        if eps <= 0.0:
            raise ValueError(f"RMSprop epsilon should be >0, {eps} was provided instead")
        self.alpha = alpha
        self.eps = eps

    def init_single(self, parameter: mx.array, state: dict) -> None:
        """Zero mean square."""
        state["v"] = mx.zeros_like(parameter)

    def apply_single(self, gradient: mx.array, parameter: mx.array, state: dict) -> mx.array:
        """One RMSprop step."""
        lr = self.learning_rate.astype(gradient.dtype)
        v = self.alpha * state["v"] + (1 - self.alpha) * mx.square(gradient)
        state["v"] = v
        return parameter - lr * gradient / (mx.sqrt(v) + self.eps)


class Adagrad(Optimizer):
    """``v = v + g^2; w = w - lr g / (sqrt(v) + eps)``."""

    def __init__(self, learning_rate: Schedule, eps: float = 1e-8):
        super().__init__()
        self._maybe_schedule("learning_rate", learning_rate)
        if eps <= 0.0:
            raise ValueError(f"Adagrad epsilon should be >0, {eps} was provided instead")
        self.eps = eps

    def init_single(self, parameter: mx.array, state: dict) -> None:
        """Zero sum of squares."""
        state["v"] = mx.zeros_like(parameter)

    def apply_single(self, gradient: mx.array, parameter: mx.array, state: dict) -> mx.array:
        """One Adagrad step."""
        lr = self.learning_rate.astype(gradient.dtype)
        v = state["v"] + mx.square(gradient)
        state["v"] = v
        return parameter - lr * gradient / (mx.sqrt(v) + self.eps)


class AdaDelta(Optimizer):
    """``v = rho v + (1 - rho) g^2; d = sqrt(u + eps) / sqrt(v + eps) g;
    u = rho u + (1 - rho) d^2; w = w - lr d``."""

    def __init__(self, learning_rate: Schedule, rho: float = 0.9, eps: float = 1e-6):
        super().__init__()
        self._maybe_schedule("learning_rate", learning_rate)
        if rho < 0.0:
            raise ValueError(f"AdaDelta rho should be >=0, {rho} was provided instead")
        if eps <= 0.0:
            raise ValueError(f"AdaDelta epsilon should be >0, {eps} was provided instead")
        self.rho = rho
        self.eps = eps

    def init_single(self, parameter: mx.array, state: dict) -> None:
        """Zero running averages of squared gradients and updates."""
        state["v"] = mx.zeros_like(parameter)
        state["u"] = mx.zeros_like(parameter)

    def apply_single(self, gradient: mx.array, parameter: mx.array, state: dict) -> mx.array:
        """One AdaDelta step."""
        lr = self.learning_rate.astype(gradient.dtype)
        rho, eps = self.rho, self.eps
        v = rho * state["v"] + (1 - rho) * mx.square(gradient)
        d = mx.sqrt(state["u"] + eps) / mx.sqrt(v + eps) * gradient
        state["u"] = rho * state["u"] + (1 - rho) * mx.square(d)
        state["v"] = v
        return parameter - lr * d


class Adam(Optimizer):
    """``m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; w = w - lr m / (sqrt(v) + eps)``
    (with ``bias_correction``, ``m`` and ``v`` are divided by ``1 - b^t``)."""

    def __init__(
        self,
        learning_rate: Schedule,
        betas: List[float] = [0.9, 0.999],
        eps: float = 1e-8,
        bias_correction: bool = False,
    ):
        super().__init__()
        for i, b in enumerate(betas):
            if not 0.0 <= b < 1.0:
                raise ValueError(f"Adam beta{i + 1} should be in [0, 1), {b} was provided instead")
        if not 0.0 <= eps:
            raise ValueError(f"Adam epsilon should be >=0, {eps} was provided instead")
        self._maybe_schedule("learning_rate", learning_rate)
        self.betas = betas
        self.eps = eps
        self.bias_correction = bias_correction

    def init_single(self, parameter: mx.array, state: dict) -> None:
        """Zero first and second moments."""
        state["m"] = mx.zeros_like(parameter)
        state["v"] = mx.zeros_like(parameter)

    def apply_single(self, gradient: mx.array, parameter: mx.array, state: dict) -> mx.array:
        """One Adam step."""
        lr = self.learning_rate.astype(gradient.dtype)
        b1, b2 = self.betas
        m = b1 * state["m"] + (1 - b1) * gradient
        v = b2 * state["v"] + (1 - b2) * mx.square(gradient)
        state["m"] = m
        state["v"] = v
        if self.bias_correction:
            t = self.step
            c1 = (lr / (1 - b1**t)).astype(gradient.dtype)
            c2 = mx.rsqrt(1 - b2**t).astype(gradient.dtype)
            return parameter - c1 * m / (mx.sqrt(v) * c2 + self.eps)
        return parameter - lr * m / (mx.sqrt(v) + self.eps)


class AdamW(Adam):
    """Adam with decoupled weight decay: the parameter shrinks by ``1 - lr * weight_decay``
    before the Adam step."""

    def __init__(
        self,
        learning_rate: Schedule,
        betas: List[float] = [0.9, 0.999],
        eps: float = 1e-8,
        weight_decay: float = 0.01,
        bias_correction: bool = False,
    ):
        super().__init__(
            learning_rate=learning_rate, betas=betas, eps=eps, bias_correction=bias_correction
        )
        self.weight_decay = weight_decay

    def apply_single(self, gradient: mx.array, parameter: mx.array, state: dict) -> mx.array:
        """One AdamW step."""
        lr = self.learning_rate.astype(gradient.dtype)
        return super().apply_single(gradient, parameter * (1 - lr * self.weight_decay), state)


class Adamax(Adam):
    """Adam with the infinity norm: ``v = max(b2 v, |g|); w = w - lr m / (v + eps)``."""

    def __init__(
        self, learning_rate: Schedule, betas: List[float] = [0.9, 0.999], eps: float = 1e-8
    ):
        super().__init__(learning_rate, betas, eps)
        if not 0.0 <= eps:
            raise ValueError(f"Epsilon value should be >=0, {eps} was provided instead")

    def apply_single(self, gradient: mx.array, parameter: mx.array, state: dict) -> mx.array:
        """One Adamax step."""
        lr = self.learning_rate.astype(gradient.dtype)
        b1, b2 = self.betas
        m = b1 * state["m"] + (1 - b1) * gradient
        v = mx.maximum(b2 * state["v"], mx.abs(gradient))
        state["m"] = m
        state["v"] = v
        return parameter - lr * m / (v + self.eps)


class Lion(Optimizer):
    """``c = b1 m + (1 - b1) g; m = b2 m + (1 - b2) g; w = w (1 - lr wd) - lr sign(c)``."""

    def __init__(
        self, learning_rate: Schedule, betas: List[float] = [0.9, 0.99], weight_decay: float = 0.0
    ):
        super().__init__()
        self._maybe_schedule("learning_rate", learning_rate)
        self.betas = betas
        self.weight_decay = weight_decay

    def init_single(self, parameter: mx.array, state: dict) -> None:
        """Zero momentum."""
        state["m"] = mx.zeros_like(parameter)

    def apply_single(self, gradient: mx.array, parameter: mx.array, state: dict) -> mx.array:
        """One Lion step."""
        lr = self.learning_rate.astype(gradient.dtype)
        b1, b2 = self.betas
        m = state["m"]
        c = b1 * m + (1 - b1) * gradient
        state["m"] = b2 * m + (1 - b2) * gradient
        if self.weight_decay > 0:
            parameter = (1 - lr * self.weight_decay) * parameter
        return parameter - lr * mx.sign(c)


def _rms(a: mx.array) -> mx.array:
    return mx.sqrt(mx.mean(mx.square(a)))


class Adafactor(Optimizer):
    """Adafactor (Shazeer and Stern, 2018): Adam-like steps whose second moment of a
    matrix is kept factored, as row and column means (``exp_avg_sq_row``,
    ``exp_avg_sq_col``) instead of one value per entry; vectors keep ``exp_avg_sq``.

    ``beta_2 = 1 - t^decay_rate``; the update ``g / sqrt(v)`` is clipped to RMS
    ``clip_threshold``. With ``relative_step`` the step size is ``min(1e-2, 1/sqrt(t))``
    (``min(1e-6 t, 1/sqrt(t))`` with ``warmup_init``) and ``learning_rate`` is unused;
    ``scale_parameter`` multiplies it by ``max(eps[1], RMS(w))``. ``beta_1`` adds a first
    moment (``exp_avg``) of the scaled update; ``weight_decay`` shrinks ``w`` by
    ``1 - weight_decay * step size``.
    """

    def __init__(
        self,
        learning_rate: Optional[Schedule] = None,
        eps: Tuple[float, float] = (1e-30, 1e-3),
        clip_threshold: float = 1.0,
        decay_rate: float = -0.8,
        beta_1: Optional[float] = None,
        weight_decay: float = 0.0,
        scale_parameter: bool = True,
        relative_step: bool = True,
        warmup_init: bool = False,
    ):
        super().__init__()
        if learning_rate is not None:
            self._maybe_schedule("learning_rate", learning_rate)
        if not isinstance(eps, (tuple, list)) or len(eps) != 2:
            raise ValueError(f"[Adafactor] eps must be a pair of floats, got {eps}.")
        self.eps = eps
        self.clip_threshold = clip_threshold
        self.decay_rate = decay_rate
        self.beta_1 = beta_1
        self.weight_decay = weight_decay
        self.scale_parameter = scale_parameter
        self.relative_step = relative_step
        self.warmup_init = warmup_init

    def init_single(self, parameter: mx.array, state: dict) -> None:
        """Zero row and column second moments for matrices (over the last two axes),
        a full one for vectors; a zero first moment with ``beta_1``."""
        if parameter.ndim >= 2:
            shape, dtype = parameter.shape, parameter.dtype
            state["exp_avg_sq_row"] = mx.zeros(shape[:-1], dtype)
            state["exp_avg_sq_col"] = mx.zeros(shape[:-2] + shape[-1:], dtype)
        else:
            state["exp_avg_sq"] = mx.zeros_like(parameter)
        if self.beta_1 is not None:
            state["exp_avg"] = mx.zeros_like(parameter)

    def _step_size(self, step: mx.array, parameter_rms: mx.array) -> mx.array:
        if self.relative_step:
            floor = 1e-6 * step if self.warmup_init else 1e-2
            size = mx.minimum(floor, mx.rsqrt(step))
        elif "learning_rate" in self.state:
            size = self.learning_rate
        else:
            raise ValueError("[Adafactor] relative_step=False needs a learning_rate.")
        size = size.astype(parameter_rms.dtype)
        if self.scale_parameter:
            return mx.maximum(self.eps[1], parameter_rms) * size
        return size

    def apply_single(self, gradient: mx.array, parameter: mx.array, state: dict) -> mx.array:
        """One Adafactor step."""
        step = self.step
        parameter_rms = _rms(parameter)
        lr = self._step_size(step, parameter_rms)
        beta_2 = 1.0 - (step**self.decay_rate).astype(parameter_rms.dtype)
        sq = mx.square(gradient) + self.eps[0]
        if gradient.ndim >= 2:
            row = beta_2 * state["exp_avg_sq_row"] + (1 - beta_2) * mx.mean(sq, axis=-1)
            col = beta_2 * state["exp_avg_sq_col"] + (1 - beta_2) * mx.mean(sq, axis=-2)
            state["exp_avg_sq_row"] = row
            state["exp_avg_sq_col"] = col
            # v ~ row col^T / mean(row): the rank-one estimate of the full second moment.
            r = mx.rsqrt(row / mx.mean(row, axis=-1, keepdims=True))
            update = mx.expand_dims(r, -1) * mx.expand_dims(mx.rsqrt(col), -2) * gradient
        else:
            v = beta_2 * state["exp_avg_sq"] + (1 - beta_2) * sq
            state["exp_avg_sq"] = v
            update = mx.rsqrt(v) * gradient
        update = update / mx.maximum(1.0, _rms(update) / self.clip_threshold)
        update = lr * update
        if self.beta_1 is not None:
            update = self.beta_1 * state["exp_avg"] + (1 - self.beta_1) * update
            state["exp_avg"] = update
        if self.weight_decay != 0:
            parameter = parameter + parameter * (-self.weight_decay * lr)
        return parameter - update


class Muon(Optimizer):
    """Muon (Jordan et al., 2024): SGD momentum whose update, for parameters of two or
    more dimensions, is replaced by its nearest semi-orthogonal matrix (five-step
    Newton-Schulz iteration; arrays of more dimensions are flattened to
    ``(shape[0], -1)``) and scaled by ``sqrt(max(1, rows / cols))``. Vectors take the
    plain momentum step. ``weight_decay`` is L2, added to the gradient."""

    def __init__(
        self,
        learning_rate: Schedule,
        momentum: float = 0.95,
        weight_decay: float = 0.01,
        nesterov: bool = True,
        ns_steps: int = 5,
    ):
        super().__init__()
        self._maybe_schedule("learning_rate", learning_rate)
        if not isinstance(ns_steps, int) or ns_steps < 0:
            raise ValueError(f"[Muon] ns_steps must be a non-negative int, got {ns_steps}.")
        self.momentum = momentum
        self.weight_decay = weight_decay
        self.nesterov = nesterov
        self.ns_steps = ns_steps

    def init_single(self, parameter: mx.array, state: dict) -> None:
        """Zero momentum."""
        state["v"] = mx.zeros_like(parameter)

    @staticmethod
    def _orthogonalize(x: mx.array, steps: int) -> mx.array:
        """Newton-Schulz iteration towards ``U V^T`` of ``x = U S V^T`` (2-D ``x``).

        The quintic's coefficients are tuned to grow small singular values fast rather
        than to converge exactly: the result has singular values near, not at, one."""
        a, b, c = 3.4445, -4.7750, 2.0315
        wide = x.shape[0] <= x.shape[1]
        # Iterate on the wide orientation so that x @ x.T is the smaller Gram matrix.
        x = x if wide else x.T
        x = x / (mx.linalg.norm(x, keepdims=True) + 1e-7)
        for _ in range(steps):
            gram = x @ x.T
            poly = mx.addmm(b * gram, gram, gram, beta=1.0, alpha=c)
            x = mx.addmm(a * x, poly, x, beta=1.0, alpha=1.0)
        return x if wide else x.T

    def apply_single(self, gradient: mx.array, parameter: mx.array, state: dict) -> mx.array:
        """One Muon step."""
        if self.weight_decay != 0:
            gradient = gradient + self.weight_decay * parameter
        mu = self.momentum
        v = mu * state["v"] + (1 - mu) * gradient
        state["v"] = v
        update = gradient * (1 - mu) + v * mu if self.nesterov else v
        lr = self.learning_rate.astype(gradient.dtype)
        if update.ndim >= 2:
            shape = update.shape
            flat = update.reshape(shape[0], -1) if update.ndim > 2 else update
            update = self._orthogonalize(flat, self.ns_steps).reshape(shape)
            lr = lr * max(1, shape[-2] / shape[-1]) ** 0.5
        return parameter - lr * update


def clip_grad_norm(grads, max_norm: float) -> Tuple[object, mx.array]:
    """Scales ``grads`` (a tree) down so that their global L2 norm is at most
    ``max_norm``; returns ``(clipped, norm before clipping)``."""
    if max_norm < 0:
        raise ValueError(f"max_norm should be >=0, {max_norm} was provided instead")

    def sq(g):
        # float16 squares would overflow: sum them in float32.
        return mx.sum(mx.square(g.astype(mx.float32) if g.dtype == mx.float16 else g))

    total = mx.sqrt(tree_reduce(lambda acc, g: acc + sq(g), grads, 0.0))
    factor = mx.minimum(max_norm / (total + 1e-6), 1.0)

    def scale(g):
        # Scale first, cast after, so small factors do not underflow in half precision.
        return (g * factor).astype(g.dtype) if mx.issubdtype(g.dtype, mx.floating) else g * factor

    return tree_map(scale, grads), total
