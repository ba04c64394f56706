"""``kiln.profiler``: what ran, for how long, on which device.

::

    import kiln.profiler
    with kiln.profiler.profile() as prof:
        for _ in range(10):
            mx.eval(step(x))
    print(prof.key_averages().table(sort_by="host_time_total", row_limit=10))
    prof.export_chrome_trace("trace.json")     # open in Perfetto or chrome://tracing

While a session is active, every evaluation records each primitive call it runs (fused
kernels under their ``Compiled_...`` names) with its host time, input and output shapes and
device; on the GPU also the device time between two CUDA events around the call, and each
CUDA-graph replay of a compiled function. Each ``mx.eval`` is a span around its calls, and
``record_function("name")`` adds ranges of your own. Names follow ``torch.profiler``.
With no session active, evaluation pays one atomic flag check per call.
"""

from __future__ import annotations

import functools
import json
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from kiln import _core

__all__ = [
    "profile",
    "record_function",
    "is_active",
    "Event",
    "EventAverage",
    "EventList",
]

_lock = threading.Lock()
_session: Optional["profile"] = None


def is_active() -> bool:
    """Whether a profiling session records."""
    return _core._profiler_active()


@dataclass
class Event:
    """One recorded call or span. Times in microseconds on the profiler's clock."""

    name: str
    kind: str  # kernel, view, custom, graph, eval, user
    device: str
    start_us: float
    host_us: float
    device_us: Optional[float] = None
    thread: int = 0
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    fallback: bool = False
    self_host_us: float = 0.0

    @property
    def end_us(self) -> float:
        return self.start_us + self.host_us


def _from_core(d: dict) -> Event:
    ms = d["device_ms"]
    return Event(
        name=d["name"], kind=d["kind"], device=d["device"], start_us=d["start_ns"] / 1e3,
        host_us=d["host_ns"] / 1e3, device_us=None if ms is None else ms * 1e3,
        thread=d["thread"], inputs=list(d["inputs"]), outputs=list(d["outputs"]),
        fallback=d["fallback"],
    )


def _fill_self_times(events: list) -> None:
    """Each event's self time: its host time less that of the events nested in it (same
    thread, inside its interval), as torch.profiler's "Self CPU"."""
    by_thread: dict = {}
    for e in events:
        by_thread.setdefault(e.thread, []).append(e)
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e.start_us, -e.host_us))
        stack: list = []
        for e in evs:
            e.self_host_us = e.host_us
            while stack and stack[-1].end_us <= e.start_us:
                stack.pop()
            if stack:
                # Clock granularity can make a child end a hair after its parent.
                stack[-1].self_host_us -= min(e.host_us, stack[-1].self_host_us)
            stack.append(e)


def _fmt_us(us: Optional[float]) -> str:
    if us is None:
        return "-"
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    if us >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


@dataclass
class EventAverage:
    """Events of one key summed (``key_averages``)."""

    key: str
    kind: str
    device: str
    count: int = 0
    host_time_total: float = 0.0  # us
    self_host_time_total: float = 0.0
    device_time_total: Optional[float] = None
    input_shapes: str = ""

    @property
    def host_time(self) -> float:
        return self.host_time_total / max(self.count, 1)

    @property
    def device_time(self) -> Optional[float]:
        t = self.device_time_total
        return None if t is None else t / max(self.count, 1)

    # torch.profiler's names for the same numbers.
    @property
    def cpu_time_total(self) -> float:
        return self.host_time_total

    @property
    def self_cpu_time_total(self) -> float:
        return self.self_host_time_total

    @property
    def device_time_total_us(self) -> Optional[float]:
        return self.device_time_total


_SORT_KEYS = {
    "host_time_total": "host_time_total",
    "cpu_time_total": "host_time_total",
    "self_host_time_total": "self_host_time_total",
    "self_cpu_time_total": "self_host_time_total",
    "device_time_total": "device_time_total",
    "cuda_time_total": "device_time_total",
    "count": "count",
}


class EventList(list):
    """Rows of ``key_averages()`` (a list of :class:`EventAverage`)."""

    def table(self, sort_by: str = "self_host_time_total", row_limit: int = 20,
              max_name_column_width: int = 48) -> str:
        """The rows as a text table, largest ``sort_by`` first (``host_time_total``,
        ``self_host_time_total``, ``device_time_total``, ``count``; torch's ``cpu_*`` and
        ``cuda_*`` names work too)."""
        attr = _SORT_KEYS.get(sort_by)
        if attr is None:
            raise ValueError(f"[profiler] Unknown sort_by {sort_by!r}; one of {sorted(_SORT_KEYS)}.")
        rows = sorted(self, key=lambda r: getattr(r, attr) or 0.0, reverse=True)
        self_total = sum(r.self_host_time_total for r in self)
        device_total = sum(r.device_time_total or 0.0 for r in self)
        has_device = any(r.device_time_total is not None for r in self)
        has_shapes = any(r.input_shapes for r in self)
        w = max_name_column_width
        header = ["Name", "Kind", "Device", "Self host %", "Self host", "Host total",
                  "Host avg"]
        if has_device:
            header += ["Device total", "Device avg"]
        header += ["# of Calls"]
        if has_shapes:
            header += ["Input shapes"]
        table = []
        for r in rows[: row_limit if row_limit > 0 else None]:
            name = r.key if len(r.key) <= w else r.key[: w - 3] + "..."
            pct = 100.0 * r.self_host_time_total / self_total if self_total else 0.0
            line = [name, r.kind, r.device, f"{pct:.2f}%", _fmt_us(r.self_host_time_total),
                    _fmt_us(r.host_time_total), _fmt_us(r.host_time)]
            if has_device:
                line += [_fmt_us(r.device_time_total), _fmt_us(r.device_time)]
            line += [str(r.count)]
            if has_shapes:
                line += [r.input_shapes]
            table.append(line)
        widths = [max(len(h), *(len(row[i]) for row in table)) if table else len(h)
                  for i, h in enumerate(header)]
        sep = "-" * (sum(widths) + 2 * (len(widths) - 1))
        fmt = lambda row: "  ".join(  # noqa: E731
            c.ljust(widths[i]) if i == 0 or (has_shapes and i == len(row) - 1)
            else c.rjust(widths[i]) for i, c in enumerate(row))
        out = [sep, fmt(header), sep] + [fmt(r) for r in table] + [sep]
        out.append(f"Self host time total: {_fmt_us(self_total)}")
        if has_device:
            out.append(f"Self device time total: {_fmt_us(device_total)}")
        return "\n".join(out)

    def __str__(self) -> str:
        return self.table()


class profile:
    """Records what runs inside the ``with`` block (one session at a time).

    ``record_shapes``: group ``key_averages(group_by_input_shape=True)`` by shapes (shapes
    are always recorded). ``device_times=False``: host times only, no CUDA events around GPU
    calls (which cost host time themselves and split batched launches). After the block: ``events()``, ``key_averages()``, ``table()``,
    ``export_chrome_trace(path)``, ``wall_us`` (the block's duration)."""

    def __init__(self, record_shapes: bool = False, enabled: bool = True,
                 device_times: bool = True):
        self.record_shapes = record_shapes
        self.device_times = device_times
        self.enabled = enabled
        self._events: list = []
        self._user: list = []
        self._open = False
        self.start_us = 0.0
        self.wall_us = 0.0

    def start(self) -> "profile":
        global _session
        if not self.enabled:
            return self
        with _lock:
            if _session is not None or not _core._profiler_start(self.device_times):
                raise RuntimeError("[profiler] A profiling session is already active.")
            _session = self
        self._events, self._user, self._open = [], [], True
        self.start_us = _core._profiler_now_ns() / 1e3
        return self

    def stop(self) -> None:
        global _session
        if not self._open:
            return
        self.wall_us = _core._profiler_now_ns() / 1e3 - self.start_us
        try:
            events = [_from_core(d) for d in _core._profiler_stop()]
        finally:
            with _lock:
                _session = None
            self._open = False
        self._events = events + self._user
        _fill_self_times(self._events)
        self._events.sort(key=lambda e: e.start_us)

    def __enter__(self) -> "profile":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def events(self) -> list:
        """Every recorded :class:`Event`, by start time."""
        return list(self._events)

    def key_averages(self, group_by_input_shape: bool = False) -> EventList:
        """Events summed per name (and kind and device; and input shapes if asked)."""
        rows: dict = {}
        for e in self._events:
            shapes = ", ".join(e.inputs) if group_by_input_shape else ""
            key = (e.name, e.kind, e.device, shapes)
            r = rows.get(key)
            if r is None:
                r = rows[key] = EventAverage(e.name, e.kind, e.device, input_shapes=shapes)
            r.count += 1
            r.host_time_total += e.host_us
            r.self_host_time_total += e.self_host_us
            if e.device_us is not None:
                r.device_time_total = (r.device_time_total or 0.0) + e.device_us
        return EventList(rows.values())

    def table(self, sort_by: str = "self_host_time_total", row_limit: int = 20) -> str:
        """``key_averages().table(...)``."""
        return self.key_averages(self.record_shapes).table(sort_by=sort_by, row_limit=row_limit)

    def totals(self) -> dict:
        """Host time inside ``mx.eval`` calls, in kernels and views (self times), and
        device time, in microseconds, beside the block's wall time."""
        evs = self._events
        return {
            "wall_us": self.wall_us,
            "eval_us": sum(e.host_us for e in evs if e.kind == "eval"),
            "calls_us": sum(e.host_us for e in evs if e.kind in ("kernel", "view", "custom")),
            "self_us": sum(e.self_host_us for e in evs),
            "device_us": sum(e.device_us or 0.0 for e in evs),
        }

    def trace_events(self) -> list:
        """The Chrome trace-event list (``export_chrome_trace`` writes it)."""
        base = self.start_us
        out: list = [
            {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "kiln host"}},
            {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "kiln GPU"}},
        ]
        threads = sorted({e.thread for e in self._events})
        for t in threads:
            out.append({"ph": "M", "name": "thread_name", "pid": 0, "tid": t,
                        "args": {"name": f"thread {t}"}})
        for e in self._events:
            args = {"device": e.device, "kind": e.kind}
            if e.inputs:
                args["inputs"] = e.inputs
            if e.outputs:
                args["outputs"] = e.outputs
            if e.fallback:
                args["fallback"] = "ran on the CPU (no GPU kernel)"
            if e.device_us is not None:
                args["device_us"] = e.device_us
            out.append({"name": e.name, "cat": e.kind, "ph": "X", "pid": 0, "tid": e.thread,
                        "ts": round(e.start_us - base, 3), "dur": round(e.host_us, 3),
                        "args": args})
            if e.device_us is not None:
                # CUDA events give durations, not GPU timestamps: the GPU row places each
                # kernel at its launch.
                out.append({"name": e.name, "cat": "gpu", "ph": "X", "pid": 1, "tid": 0,
                            "ts": round(e.start_us - base, 3), "dur": round(e.device_us, 3),
                            "args": {"host_us": e.host_us}})
        return out

    def export_chrome_trace(self, path: Any) -> None:
        """Writes the events as Chrome trace-event JSON (Perfetto, chrome://tracing)."""
        with open(path, "w") as f:
            json.dump({"traceEvents": self.trace_events(), "displayTimeUnit": "ms"}, f)


class record_function:
    """A named range of your own in the profile (a context manager or a decorator); costs
    nothing when no session is active."""

    def __init__(self, name: str):
        self.name = name
        self._start: Optional[int] = None

    def __enter__(self) -> "record_function":
        self._start = _core._profiler_now_ns() if _session is not None else None
        return self

    def __exit__(self, *exc: Any) -> None:
        session = _session
        if self._start is None or session is None:
            return
        end = _core._profiler_now_ns()
        session._user.append(Event(
            name=self.name, kind="user", device="cpu", start_us=self._start / 1e3,
            host_us=(end - self._start) / 1e3, thread=_core._profiler_thread()))

    def __call__(self, fun: Callable) -> Callable:
        @functools.wraps(fun)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            with record_function(self.name):
                return fun(*args, **kwargs)
        return wrapped
