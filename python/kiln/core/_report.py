"""``compiled.report(path, *args)``: one self-contained HTML page of what compile did.

The page follows the pipeline MLX documents for itself (your code, the lazy graph, the
compile passes, the fused kernels, the eager kernels left, the device) with a compiled
function's real data: ``explain()`` (graphs, regions and their borders, cache entries and
retraces), the kernel builders' records (generated C / CUDA source, build times, runs) and,
when the report runs the function, the profiler's events of each run. Graphs are laid out
here (layers by longest path, orders by barycentre sweeps) and drawn as inline SVG; CSS and
the few lines of script that flip between runs are inline too, so the file opens anywhere
without a network.
"""

from __future__ import annotations

import datetime
import html
import inspect
import keyword
import os
import platform
import re
import textwrap
from typing import Any, Optional

import kiln.core as mx
from kiln import _core

_esc = html.escape

# Primitives that are layout changes (views): drawn lighter, never kernels.
_VIEWS = {"reshape", "transpose", "broadcast_to", "slice", "identity", "view", "as_strided",
          "stop_gradient"}

# ------------------------------------------------------------------------------------------
# Running the function (report(path, *args))


def _arrays_in(tree: Any, out: list) -> list:
    if isinstance(tree, _core.array):
        out.append(tree)
    elif isinstance(tree, (list, tuple)):
        for x in tree:
            _arrays_in(x, out)
    elif isinstance(tree, dict):
        for x in tree.values():
            _arrays_in(x, out)
    return out


def _state(cf: Any) -> list:
    """Every captured state slot with its value now (restored after the report's runs)."""
    saved = []
    for tree in (cf._inputs, cf._outputs):
        if tree is not None:
            slots, values = _core._state_leaves(tree)
            saved += list(zip(slots, values))
    return saved


def _restore(saved: list) -> None:
    for (c, k), v in saved:
        try:
            c[k] = v
        except (IndexError, KeyError, TypeError):
            pass


def _call_and_eval(fun: Any, cf: Any, args: tuple, kwargs: dict) -> None:
    out = fun(*args, **kwargs)
    arrays = _arrays_in(out, [])
    if cf._outputs is not None:
        arrays += list(_core._state_leaves(cf._outputs)[1])
    mx.eval(*arrays) if arrays else None


def _profiled(fun: Any, cf: Any, args: tuple, kwargs: dict) -> Any:
    from kiln import profiler

    with profiler.profile() as prof:
        with profiler.record_function("call"):
            _call_and_eval(fun, cf, args, kwargs)
    return prof


def _devices() -> list:
    devs = ["cpu"]
    try:
        if mx.is_available(mx.gpu):
            devs.append("gpu")
    except Exception:
        pass
    return devs


def _default_device() -> str:
    return "gpu" if "gpu" in str(mx.default_device()).lower() else "cpu"


def _run_all(cf: Any, args: tuple, kwargs: dict) -> dict:
    """Runs the function compiled and lazily on every device, each under the profiler: a
    first call and a warm one. The compiled function itself runs on the default device;
    another device gets a fresh compiled copy (compile's cache is per signature, not per
    device)."""
    from kiln.core._compile import _CompiledFunction

    if _core._profiler_active():
        raise RuntimeError("[compile] report() runs the function under the profiler: call "
                           "it outside a kiln.profiler.profile() block.")
    runs: dict = {}
    saved = _state(cf)
    default = _default_device()
    try:
        for dev in _devices():
            target = cf if dev == default else _CompiledFunction(
                cf._fun, cf._inputs, cf._outputs, cf._shapeless)
            with mx.stream(mx.gpu if dev == "gpu" else mx.cpu):
                first = _profiled(target, cf, args, kwargs)
                _restore(saved)
                # A second call settles what the first changed (state an optimizer creates
                # on its first step traces again) and the kernels built meanwhile.
                _call_and_eval(target, cf, args, kwargs)
                _core._wait_for_builds()
                _restore(saved)
                warm = _profiled(target, cf, args, kwargs)
                _restore(saved)
                runs[("compiled", dev)] = {"cf": target, "first": first, "warm": warm}
                lazy_first = _profiled(cf._fun, cf, args, kwargs)
                _restore(saved)
                lazy = _profiled(cf._fun, cf, args, kwargs)
                _restore(saved)
                runs[("lazy", dev)] = {"cf": target, "first": lazy_first, "warm": lazy}
    finally:
        _restore(saved)
    return runs


# ------------------------------------------------------------------------------------------
# Graphs: parse explain's lines, lay out, draw

_LINE = re.compile(r"^n(\d+) = (.+?)\((.*)\) : (.*)$")


def parse_graph(lines: list) -> dict:
    """explain's ``n3 = multiply(in0, c1) : (2, 3) float32`` lines as nodes and edges."""
    nodes, outputs = [], []
    for line in lines:
        if line.startswith("return"):
            outputs = [t.strip() for t in line[len("return"):].split(",") if t.strip()]
            continue
        m = _LINE.match(line)
        if not m:
            continue
        args = [a.strip() for a in m.group(3).split(",") if a.strip()]
        nodes.append({"id": int(m.group(1)), "op": m.group(2), "args": args,
                      "out": m.group(4), "line": line})
    return {"nodes": nodes, "outputs": outputs}


def _source_of(arg: str) -> str:
    """``n3.1`` -> ``n3`` (the node), ``in0`` / ``c2`` unchanged."""
    return arg.split(".")[0]


def layout(graph: dict) -> dict:
    """Positions for every node, input and constant: columns by longest path from the
    inputs, rows ordered by the mean row of each vertex's predecessors (a few sweeps)."""
    preds: dict = {}
    layer: dict = {}
    order: list = []
    for n in graph["nodes"]:
        key = f"n{n['id']}"
        srcs = [_source_of(a) for a in n["args"]]
        preds[key] = srcs
        for s in srcs:
            if s not in layer and not s.startswith("n"):
                layer[s] = 0
                order.append(s)
                preds.setdefault(s, [])
        layer[key] = 1 + max((layer.get(s, 0) for s in srcs), default=0)
        order.append(key)
    # Inputs and constants sit one column before their first user, not all at the far left.
    users: dict = {}
    for k, srcs in preds.items():
        for s in srcs:
            users.setdefault(s, []).append(k)
    for k in order:
        if not k.startswith("n") and users.get(k):
            layer[k] = max(0, min(layer[u] for u in users[k]) - 1)
    columns: dict = {}
    for k in order:
        columns.setdefault(layer[k], []).append(k)
    pos = {k: i for col in columns.values() for i, k in enumerate(col)}
    for sweep in range(4):
        for c in sorted(columns):
            col = columns[c]

            def bary(k: str) -> float:
                near = preds.get(k, []) if sweep % 2 == 0 else users.get(k, [])
                near = [p for p in near if p in pos]
                return sum(pos[p] for p in near) / len(near) if near else pos[k]

            col.sort(key=bary)
            for i, k in enumerate(col):
                pos[k] = i
    return {"layer": layer, "columns": columns, "preds": preds}


_NODE_W, _NODE_H, _GAP_X, _GAP_Y = 140, 34, 44, 12


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "\u2026"


def draw_graph(graph: dict, colours: Optional[dict] = None, borders: Optional[dict] = None,
               title: str = "", region_of: Optional[dict] = None) -> str:
    """The graph as an SVG: one ``<g class="node">`` per graph node (and ``gin``/``gconst``
    for inputs and constants), edges as curves; ``colours`` maps node keys to a region
    colour, ``borders`` maps (source key, node key) edges to the reason fusion stopped."""
    colours = colours or {}
    borders = borders or {}
    region_of = region_of or {}
    lay = layout(graph)
    columns = lay["columns"]
    width = (max(columns, default=0) + 1) * (_NODE_W + _GAP_X) + _GAP_X
    # Rows: each vertex as near the mean height of its predecessors as the ones above it
    # in its column allow (columns in their barycentre order), so chains run straight.
    pitch = _NODE_H + _GAP_Y
    xy: dict = {}
    for c in sorted(columns):
        y_prev = -pitch
        for i, k in enumerate(columns[c]):
            near = [xy[p][1] for p in lay["preds"].get(k, []) if p in xy]
            want = sum(near) / len(near) if near else i * pitch
            y = max(want, y_prev + pitch)
            xy[k] = (_GAP_X / 2 + c * (_NODE_W + _GAP_X), y)
            y_prev = y
    top = 18 + _GAP_Y
    xy = {k: (x, y + top) for k, (x, y) in xy.items()}
    height = max((y for _, y in xy.values()), default=0) + _NODE_H + _GAP_Y + 10
    by_key = {f"n{n['id']}": n for n in graph["nodes"]}
    outputs = {_source_of(o) for o in graph["outputs"]}
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="graph" width="{width:.0f}" '
             f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" role="img" '
             f'aria-label="{_esc(title)}">']
    parts.append('<defs><marker id="arr" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="6" '
                 'markerHeight="6" orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#7d8799"/>'
                 '</marker><marker id="arrb" viewBox="0 0 8 8" refX="7" refY="4" '
                 'markerWidth="6" markerHeight="6" orient="auto"><path d="M0,0 L8,4 L0,8 z" '
                 'fill="#ff6b6b"/></marker></defs>')
    labels = []
    for k, srcs in lay["preds"].items():
        if k not in xy:
            continue
        x2, y2 = xy[k]
        for s in dict.fromkeys(srcs):
            if s not in xy:
                continue
            x1, y1 = xy[s]
            a = (x1 + _NODE_W, y1 + _NODE_H / 2)
            b = (x2, y2 + _NODE_H / 2)
            mid = (a[0] + b[0]) / 2
            d = f"M{a[0]:.1f},{a[1]:.1f} C{mid:.1f},{a[1]:.1f} {mid:.1f},{b[1]:.1f} {b[0]:.1f},{b[1]:.1f}"
            reason = borders.get((s, k))
            if reason:
                parts.append(f'<path class="edge border" d="{d}" marker-end="url(#arrb)">'
                             f'<title>fusion stopped here: {_esc(reason)}</title></path>')
                lx, ly = b[0] - 6, b[1] - 5
                labels.append(f'<text class="blabel" x="{lx:.1f}" y="{ly:.1f}" '
                              f'text-anchor="end">\u2715 {_esc(_short(reason, 26))}'
                              f'<title>{_esc(reason)}</title></text>')
            else:
                parts.append(f'<path class="edge" d="{d}" marker-end="url(#arr)"/>')
    for k, (x, y) in xy.items():
        if k.startswith("n"):
            n = by_key[k]
            op = n["op"]
            cls = "node"
            if op in _VIEWS:
                cls += " isview"
            if op.startswith("Compiled"):
                cls += " fused"
            fill = colours.get(k)
            style = f' style="--fill:{fill[0]};--stroke:{fill[1]}"' if fill else ""
            region = region_of.get(k, "")
            extra = f' data-region="{_esc(region)}"' if region else ""
            out_mark = " output" if k in outputs else ""
            tip = n["line"] + (f"\nregion {region}" if region else "")
            parts.append(
                f'<g class="{cls}{out_mark}" data-id="{k}"{extra}{style}>'
                f'<title>{_esc(tip)}</title>'
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{_NODE_W}" height="{_NODE_H}" rx="6"/>'
                f'<text x="{x + 8:.1f}" y="{y + 14:.1f}" class="op">{_esc(_short(op, 21))}</text>'
                f'<text x="{x + 8:.1f}" y="{y + 27:.1f}" class="shape">{k} \u00b7 '
                f'{_esc(_short(n["out"], 17))}</text></g>')
        else:
            cls = "gin" if k.startswith("in") else "gconst"
            label = "input " + k[2:] if cls == "gin" else "const " + k[1:]
            parts.append(
                f'<g class="{cls}" data-id="{k}"><title>{_esc(k)}</title>'
                f'<rect x="{x + 30:.1f}" y="{y + 6:.1f}" width="{_NODE_W - 30}" '
                f'height="{_NODE_H - 12}" rx="11"/>'
                f'<text x="{x + 42:.1f}" y="{y + 21:.1f}" class="op">{label}</text></g>')
    parts += labels
    parts.append("</svg>")
    return "".join(parts)


def _region_colour(i: int) -> tuple:
    hue = (i * 137.508 + 28) % 360
    return (f"hsl({hue:.0f},52%,30%)", f"hsl({hue:.0f},75%,62%)")


# ------------------------------------------------------------------------------------------
# Source colouring

_C_TOKEN = re.compile(
    r"(?P<com>/\*.*?\*/|//[^\n]*)|(?P<pre>^[ \t]*#[^\n]*)|(?P<str>\"(?:\\.|[^\"\\])*\")"
    r"|(?P<num>\b(?:0x[0-9a-fA-F]+|\d+\.?\d*(?:[eE][-+]?\d+)?)[fFuUlL]*\b)"
    r"|(?P<id>[A-Za-z_]\w*)", re.S | re.M)
_C_KEYWORDS = set(
    "if else for while do return break continue switch case default goto sizeof typedef "
    "struct union enum static const volatile inline extern restrict register __restrict__ "
    "__global__ __device__ __host__ __forceinline__ __shared__ template typename".split())
_C_TYPES = set(
    "void char short int long float double signed unsigned bool _Bool size_t half "
    "__half __nv_bfloat16 uint8_t uint16_t uint32_t uint64_t int8_t int16_t int32_t "
    "int64_t".split())
_PY_TOKEN = re.compile(
    r"(?P<com>#[^\n]*)|(?P<str>\"\"\"[\s\S]*?\"\"\"|'''[\s\S]*?'''|\"(?:\\.|[^\"\\\n])*\""
    r"|'(?:\\.|[^'\\\n])*')|(?P<num>\b\d+\.?\d*(?:[eE][-+]?\d+)?\b)|(?P<id>[A-Za-z_]\w*)")


def highlight(code: str, lang: str) -> str:
    """``code`` as HTML with ``<span class="t-...">`` around comments, strings, numbers,
    keywords, types and called names (C, CUDA C or Python)."""
    rx = _PY_TOKEN if lang == "python" else _C_TOKEN
    out, last = [], 0
    for m in rx.finditer(code):
        out.append(_esc(code[last:m.start()]))
        text = m.group(0)
        kind = m.lastgroup
        if kind == "id":
            follows = code[m.end():m.end() + 1] == "("
            if lang == "python":
                kind = ("kw" if keyword.iskeyword(text) else
                        "fn" if follows else "ty" if text in ("mx", "nn", "self") else None)
            else:
                kind = ("kw" if text in _C_KEYWORDS else
                        "ty" if text in _C_TYPES or text.startswith(("kv_", "kh_"))
                        or text.endswith("_t") else "fn" if follows else None)
        out.append(f'<span class="t-{kind}">{_esc(text)}</span>' if kind else _esc(text))
        last = m.end()
    out.append(_esc(code[last:]))
    return "".join(out)


def _split_preamble(source: str, name: str) -> tuple:
    """(preamble, kernel): generated sources start with shared helpers, then
    ``/* Compiled_... */`` and the kernel."""
    marker = f"\n/* {name} */"
    i = source.find(marker)
    if i < 0:
        return "", source
    return source[:i], source[i + 1:]


# ------------------------------------------------------------------------------------------
# Collecting the data of one view (a mode on a device)


def _fmt_ms(ms: Optional[float]) -> str:
    if ms is None:
        return "\u2013"
    if ms >= 1000:
        return f"{ms / 1000:.2f} s"
    if ms >= 1:
        return f"{ms:.2f} ms"
    return f"{ms * 1000:.1f} \u00b5s"


def _events_summary(prof: Any) -> dict:
    """Per name: calls, host and device time of one profiled run."""
    rows: dict = {}
    for e in prof.events():
        if e.kind in ("eval", "user"):
            continue
        r = rows.setdefault(e.name, {"calls": 0, "host_us": 0.0, "device_us": None,
                                     "kind": e.kind, "devices": set(), "fallback": False})
        r["calls"] += 1
        r["host_us"] += e.host_us
        r["devices"].add(e.device)
        r["fallback"] |= e.fallback
        if e.device_us is not None:
            r["device_us"] = (r["device_us"] or 0.0) + e.device_us
    return rows


def _call_ms(prof: Any) -> float:
    calls = [e for e in prof.events() if e.kind == "user" and e.name == "call"]
    return sum(e.host_us for e in calls) / 1e3 if calls else prof.wall_us / 1e3


def _device_label(dev: str) -> str:
    if dev == "gpu":
        try:
            from kiln.core import cuda  # noqa: F401
            name = _core.device_info().get("device_name") if hasattr(_core, "device_info") else None
        except Exception:
            name = None
        return f"GPU{': ' + name if name else ''}"
    cpu = platform.processor() or platform.machine()
    return f"CPU: {cpu}, {os.cpu_count()} threads"


# ------------------------------------------------------------------------------------------
# Rendering


def _pipeline_svg(stages: list) -> str:
    """The stages as boxes joined by arrows; each box links to its section."""
    w, h, gap = 150, 78, 22
    width = len(stages) * (w + gap) - gap + 8
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="pipeline" width="{width}" '
             f'height="{h + 8}" viewBox="0 0 {width} {h + 8}">']
    for i, (title, value, detail, anchor, on) in enumerate(stages):
        x = 4 + i * (w + gap)
        cls = "stage" + ("" if on else " off")
        parts.append(f'<a href="#{anchor}"><g class="{cls}"><rect x="{x}" y="4" width="{w}" '
                     f'height="{h}" rx="10"/><text x="{x + 12}" y="24" class="st">{_esc(title)}'
                     f'</text><text x="{x + 12}" y="50" class="sv">{_esc(value)}</text>'
                     f'<text x="{x + 12}" y="70" class="sd">{_esc(_short(detail, 22))}</text>'
                     f'</g></a>')
        if i + 1 < len(stages):
            ax = x + w + 3
            parts.append(f'<path class="parrow" d="M{ax},{4 + h / 2} l{gap - 8},0 m-6,-5 l6,5 '
                         f'l-6,5"/>')
    parts.append("</svg>")
    return "".join(parts)


def _timeline_svg(prof: Any, width: int = 1180) -> str:
    """One profiled run as bars on a time axis: spans (the call, evals) above, calls below,
    GPU times (where measured) in a row of their own."""
    events = [e for e in prof.events()]
    if not events:
        return '<p class="muted">No events recorded.</p>'
    t0 = min(e.start_us for e in events)
    t1 = max(e.end_us for e in events)
    span = max(t1 - t0, 1e-3)
    rows = {"user": 0, "eval": 1, "graph": 2, "kernel": 2, "view": 2, "custom": 2}
    has_gpu = any(e.device_us is not None for e in events)
    n_rows = 4 if has_gpu else 3
    rh, left = 26, 70
    height = n_rows * rh + 34
    scale = (width - left - 10) / span
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}">']
    names = ["call", "eval", "kernels", "GPU"]
    for r in range(n_rows):
        parts.append(f'<text x="6" y="{r * rh + 18}" class="rowname">{names[r]}</text>')
    for i in range(6):
        x = left + (width - left - 10) * i / 5
        parts.append(f'<line x1="{x:.1f}" y1="0" x2="{x:.1f}" y2="{n_rows * rh}" class="tick"/>'
                     f'<text x="{x:.1f}" y="{n_rows * rh + 16}" class="ticklabel" '
                     f'text-anchor="middle">{_fmt_ms(span * i / 5 / 1e3)}</text>')
    for e in events:
        x = left + (e.start_us - t0) * scale
        w = max(e.host_us * scale, 1.0)
        r = rows.get(e.kind, 2)
        cls = "bar " + e.kind + (" fusedbar" if e.name.startswith("Compiled") else "")
        tip = f"{e.name} ({e.kind}, {e.device}): host {_fmt_ms(e.host_us / 1e3)}"
        if e.device_us is not None:
            tip += f", device {_fmt_ms(e.device_us / 1e3)}"
        if e.inputs:
            tip += "\ninputs: " + "; ".join(e.inputs)
        parts.append(f'<rect class="{cls}" x="{x:.2f}" y="{r * rh + 4}" width="{w:.2f}" '
                     f'height="{rh - 8}"><title>{_esc(tip)}</title></rect>')
        if w > 60:
            parts.append(f'<text class="barlabel" x="{x + 4:.1f}" y="{r * rh + 18}">'
                         f'{_esc(_short(e.name, int(w / 6.5)))}</text>')
        if e.device_us is not None and has_gpu:
            gw = max(e.device_us * scale, 1.0)
            parts.append(f'<rect class="bar gpu" x="{x:.2f}" y="{3 * rh + 4}" width="{gw:.2f}" '
                         f'height="{rh - 8}"><title>{_esc(tip)}</title></rect>')
    parts.append("</svg>")
    return "".join(parts)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _signature(key: dict, limit: int = 6) -> str:
    """A cache key's array inputs: ``float32 (8, 16), float32 (8, 4)``."""
    def one(x: dict) -> str:
        shape = x["shape"]
        return f"{str(x['dtype']).split('.')[-1]} " + (f"ndim {shape}" if isinstance(shape, int) else str(tuple(shape)))
    inputs = key.get("inputs", [])
    text = ", ".join(one(x) for x in inputs[:limit])
    return text + (f", ... ({len(inputs)} arrays)" if len(inputs) > limit else "")


def _table(header: list, rows: list, cls: str = "") -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


class _Page:
    def __init__(self) -> None:
        self.preambles: dict = {}

    def preamble_ref(self, lang: str, text: str) -> str:
        if not text.strip():
            return ""
        key = (lang, text)
        if key not in self.preambles:
            self.preambles[key] = f"pre-{lang}-{len(self.preambles)}"
        pid = self.preambles[key]
        return (f'<p class="muted small">Preceded by the shared {lang.upper()} helpers '
                f'(<a href="#{pid}">{pid}</a>, {text.count(chr(10))} lines).</p>')


def _code_panel(cf: Any) -> str:
    fun = cf._fun
    name = getattr(fun, "__qualname__", repr(fun))
    try:
        src = inspect.getsource(fun)
        where = f"{inspect.getsourcefile(fun)}:{inspect.getsourcelines(fun)[1]}"
    except (OSError, TypeError):
        src, where = f"# source of {name} is not available", ""
    src = textwrap.dedent(src)
    return (f'<p class="muted small">{_esc(name)} \u00b7 {_esc(where)}</p>'
            f'<pre class="code">{highlight(src.rstrip(), "python")}</pre>')


def _entry_section(page: _Page, vid: str, k: int, entry: dict, run: Optional[dict],
                   lazy: bool) -> str:
    traced = parse_graph(entry["traced"])
    simplified = parse_graph(entry["simplified"])
    final = parse_graph(entry["graph"])
    regions = entry.get("regions", [])
    colours, region_of, borders = {}, {}, {}
    for i, r in enumerate(regions):
        col = _region_colour(i)
        for m in r.get("members", []):
            colours[f"n{m}"] = col
            region_of[f"n{m}"] = r["name"]
        for p, m, reason in r.get("border_edges", []):
            borders[(f"n{p}", f"n{m}")] = reason
    final_colours, final_region = {}, {}
    fused_nodes = [n for n in final["nodes"] if n["op"].startswith("Compiled")]
    for i, n in enumerate(fused_nodes):
        if i < len(regions):
            final_colours[f"n{n['id']}"] = _region_colour(i)
            final_region[f"n{n['id']}"] = regions[i]["name"]
    sig = _signature(entry.get("key", {}), 3)
    out = [f'<section class="panel" id="{vid}-graphs-{k}"><h2>Entry {k + 1}: ({_esc(sig)})</h2>']
    if lazy:
        out.append('<p class="muted">The lazy graph: what the function records, each node one '
                   'eager kernel (views cost none). Compile is off in this run.</p>')
        out.append(f'<h3 id="{vid}-lazy-{k}">Lazy graph \u00b7 {len(traced["nodes"])} nodes</h3>')
        out.append(f'<div class="scroll">{draw_graph(traced, title="lazy graph")}</div>')
        out.append("</section>")
        return "".join(out)
    out.append(f'<h3 id="{vid}-lazy-{k}">Lazy graph as traced \u00b7 {len(traced["nodes"])} nodes'
               '</h3>')
    out.append(f'<div class="scroll">{draw_graph(traced, title="traced graph")}</div>')
    out.append(f'<h3 id="{vid}-simplify-{k}">After simplify \u00b7 {len(simplified["nodes"])} '
               'nodes, coloured by fused region; red edges: where fusion stopped, and why</h3>')
    out.append(f'<div class="scroll">{draw_graph(simplified, colours, borders, "simplified graph", region_of)}</div>')
    legend = []
    for i, r in enumerate(regions):
        fill, stroke = _region_colour(i)
        b = "; ".join(r["borders"]) or "graph inputs"
        legend.append(f'<li><span class="sw" style="background:{fill};border-color:{stroke}">'
                      f'</span><b>{_esc(_short(r["name"], 70))}</b> \u00b7 {r["size"]} ops '
                      f'\u00b7 stopped at: {_esc(b)}</li>')
    if legend:
        out.append(f'<ul class="legend">{"".join(legend)}</ul>')
    else:
        out.append('<p class="muted">No fused regions (nothing to fuse, or fusion is off).</p>')
    out.append(f'<h3 id="{vid}-fuse-{k}">After fusion \u00b7 {len(final["nodes"])} nodes</h3>')
    out.append(f'<div class="scroll">{draw_graph(final, final_colours, None, "fused graph", final_region)}</div>')
    out.append("</section>")

    # Kernels
    warm = _events_summary(run["warm"]) if run else {}
    out.append(f'<section class="panel" id="{vid}-kernels-{k}"><h2>Fused kernels \u00b7 entry '
               f'{k + 1}</h2>')
    rows, sources = [], []
    for kern in entry.get("kernels", []):
        name = kern["name"]
        cpu = kern.get("cpu", [])
        cuda = kern.get("cuda", [])
        dev = kern.get("device", "")
        ev = warm.get(name, {})
        variants = ", ".join(v["variant"] + ("" if v["state"] == "ready" else f" ({v['state']})")
                             for v in cpu) or ("cuda" if cuda else "not built (interpreter)")
        build = sum(v["build_ms"] for v in cpu) + sum(v["build_ms"] for v in cuda)
        disk = any(v["from_disk"] for v in cpu + cuda)
        runs = sum(v["runs"] for v in cpu)
        run_ms = sum(v["run_ms"] for v in cpu)
        ran_on = ", ".join(sorted(ev.get("devices", []))) or dev
        if ev.get("fallback"):
            ran_on += " (no GPU kernel)"
        rows.append([
            f'<a href="#{vid}-src-{k}-{kern["node"]}"><code>{_esc(_short(name, 60))}</code></a>',
            _esc(ran_on), str(kern["steps"]), _esc(variants),
            _fmt_ms(build) + (" (disk cache)" if disk else ""),
            str(runs) if cpu else "\u2013", _fmt_ms(run_ms) if cpu and runs else "\u2013",
            _fmt_ms(ev["host_us"] / 1e3) if ev else "\u2013",
            _fmt_ms(ev["device_us"] / 1e3) if ev and ev.get("device_us") is not None else "\u2013",
        ])
        shown = [(f"C, {v['variant']}", "c", v["source"]) for v in cpu if v.get("source")]
        shown += [("CUDA C", "cuda", v["source"]) for v in cuda]
        if not shown:
            shown = [("C, contiguous (what the CPU builds for row-major inputs)", "c",
                      kern.get("c_source", ""))]
        blocks = []
        for label, lang, src in shown:
            pre, body = _split_preamble(src, name)
            blocks.append(f'<h4>{_esc(label)}</h4>{page.preamble_ref(lang, pre)}'
                          f'<pre class="code kernel-source">{highlight(body, lang)}</pre>')
        is_open = " open" if len(sources) < 2 else ""
        sources.append(f'<details class="src" id="{vid}-src-{k}-{kern["node"]}"{is_open}>'
                       f'<summary><code>{_esc(name)}</code> \u00b7 node n{kern["node"]}</summary>'
                       f'{"".join(blocks)}</details>')
    if rows:
        out.append(_table(["kernel", "device", "ops", "variants built", "build time",
                           "runs (process)", "run time (process)", "host time, one call",
                           "device time, one call"], rows))
        out.append("".join(sources))
    else:
        out.append('<p class="muted">This entry has no fused kernels.</p>')
    out.append("</section>")

    # Eager kernels left
    eager = [n for n in final["nodes"] if not n["op"].startswith("Compiled")]
    devices = entry.get("devices", [])
    erows = []
    for n in eager:
        ev = warm.get(n["op"], {})
        kind = "view (no kernel)" if n["op"] in _VIEWS else "kernel"
        erows.append([f"n{n['id']}", f"<code>{_esc(n['op'])}</code>", _esc(n["out"]),
                      _esc(devices[n["id"]] if n["id"] < len(devices) else ""), kind,
                      _fmt_ms(ev["host_us"] / 1e3 / max(ev["calls"], 1)) if ev else "\u2013"])
    out.append(f'<section class="panel" id="{vid}-eager-{k}"><h2>Eager kernels left \u00b7 entry '
               f'{k + 1}</h2>')
    out.append(_table(["node", "op", "output", "device", "kind", "host time per call (avg)"],
                      erows) if erows else '<p class="muted">None: every node is fused.</p>')
    out.append("</section>")
    return "".join(out)


def _view(page: _Page, cf: Any, info: dict, mode: str, dev: str, run: Optional[dict],
          current_key: Optional[int]) -> str:
    vid = f"v-{mode}-{dev}"
    lazy = mode == "lazy"
    entries = info["entries"]
    if current_key is not None and 0 <= current_key < len(entries) and run:
        shown = [(current_key, entries[current_key])] + [
            (i, e) for i, e in enumerate(entries) if i != current_key]
    else:
        shown = list(enumerate(entries))
    first = shown[0][1] if shown else None
    n_traced = len(parse_graph(first["traced"])["nodes"]) if first else 0
    n_simpl = len(parse_graph(first["simplified"])["nodes"]) if first else 0
    final = parse_graph(first["graph"])["nodes"] if first else []
    n_fused = sum(1 for n in final if n["op"].startswith("Compiled"))
    n_eager = sum(1 for n in final if not n["op"].startswith("Compiled") and n["op"] not in _VIEWS)
    k0 = shown[0][0] if shown else 0
    summary = _events_summary(run["warm"]) if run else {}
    if lazy:
        kernels = sum(r["calls"] for r in summary.values() if r["kind"] == "kernel")
        stages = [
            ("your code", getattr(cf._fun, "__name__", "fn"), "Python, run as is", f"{vid}-code", True),
            ("lazy graph", f"{n_traced} nodes", "recorded by the ops", f"{vid}-lazy-{k0}", True),
            ("simplify", "skipped", "compile is off", f"{vid}-graphs-{k0}", False),
            ("fuse", "skipped", "compile is off", f"{vid}-graphs-{k0}", False),
            ("fused kernels", "none", "", f"{vid}-graphs-{k0}", False),
            ("eager kernels", f"{kernels} run", "one per node", f"{vid}-profile", True),
            ("device", dev.upper(), _device_label(dev), f"{vid}-device", True),
        ]
    else:
        langs = "CUDA C" if dev == "gpu" else "C"
        stages = [
            ("your code", getattr(cf._fun, "__name__", "fn"), "traced once per signature", f"{vid}-code", True),
            ("lazy graph", f"{n_traced} nodes", "as traced", f"{vid}-lazy-{k0}", True),
            ("simplify", f"{n_simpl} nodes", "CSE, no-ops, dead code", f"{vid}-simplify-{k0}", True),
            ("fuse", _plural(len(first.get("regions", [])) if first else 0, "region"), "elementwise chains", f"{vid}-fuse-{k0}", True),
            ("fused kernels", _plural(n_fused, "kernel"), f"generated {langs}", f"{vid}-kernels-{k0}", n_fused > 0),
            ("eager kernels", f"{n_eager} left", "matmul, reductions, ...", f"{vid}-eager-{k0}", True),
            ("device", dev.upper(), _device_label(dev), f"{vid}-device", True),
        ]
    out = [f'<div class="view" data-mode="{mode}" data-dev="{dev}" id="{vid}">']
    out.append(f'<section class="panel hero">{_pipeline_svg(stages)}</section>')
    cards = []
    if not lazy:
        cards += [("calls", info["calls"]), ("traces", info["traces"]),
                  ("cache hits", info["cache_hits"]), ("cache entries", len(entries))]
        ks = info["kernels"]
        cuda = ks.get("cuda", {})
        builds = ks["builds"] + cuda.get("builds", 0)
        hits = ks["disk_hits"] + cuda.get("disk_hits", 0)
        cards += [("kernels built / from disk", f"{builds} / {hits}"),
                  ("build time (process)", _fmt_ms(ks["build_ms"] + cuda.get("build_ms", 0.0)))]
    if run:
        cards += [("first call", _fmt_ms(_call_ms(run["first"]))),
                  ("warm call", _fmt_ms(_call_ms(run["warm"])))]
    out.append('<section class="cards">' + "".join(
        f'<div class="card"><div class="cv">{_esc(str(v))}</div><div class="cl">{_esc(t)}</div>'
        f'</div>' for t, v in cards) + "</section>")
    out.append('<div class="row2">')
    out.append(f'<section class="panel" id="{vid}-code"><h2>Your code</h2>{_code_panel(cf)}</section>')
    if not lazy:
        erows = []
        for i, e in enumerate(entries):
            erows.append([str(i + 1), _esc(_signature(e["key"])), str(e.get("replays", "")),
                          f'{len(e["traced"]) - 1} \u2192 {len(e["simplified"]) - 1} \u2192 '
                          f'{len(e["graph"]) - 1}',
                          _esc(", ".join(sorted(set(e.get("devices", []))))),
                          _esc((e.get("cuda_graph") or {}).get("state", "\u2013"))])
        rrows = [[str(r["call"]), _esc(r["reason"] or ""), _esc(_signature(r["key"])),
            _fmt_ms(r["trace_ms"]), "yes" if r["cached"] else "no (state changed)"]
            for r in info.get("retraces", [])]
        out.append(f'<section class="panel" id="{vid}-cache"><h2>Cache</h2>'
                   f'<p>{info["calls"]} calls, {info["traces"]} traces, {info["cache_hits"]} '
                   f'cache hits. Last retrace: {_esc(str(info["last_retrace"]))}.</p>'
                   + _table(["entry", "inputs", "replays", "nodes traced \u2192 simplified \u2192 "
                             "fused", "devices", "CUDA graph"], erows)
                   + "<h3>Traces and why each happened</h3>"
                   + _table(["call", "reason", "inputs", "trace time", "cached"], rrows)
                   + "</section>")
    out.append("</div>")
    for k, entry in shown:
        out.append(_entry_section(page, vid, k, entry, run, lazy))
    if run:
        prof = run["warm"]
        rows = []
        for e in sorted(prof.key_averages(), key=lambda r: -r.self_host_time_total)[:25]:
            rows.append([f"<code>{_esc(_short(e.key, 60))}</code>", e.kind, e.device,
                         str(e.count), _fmt_ms(e.self_host_time_total / 1e3),
                         _fmt_ms(e.host_time_total / 1e3),
                         _fmt_ms(e.device_time_total / 1e3) if e.device_time_total is not None
                         else "\u2013"])
        out.append(f'<section class="panel" id="{vid}-profile"><h2>Profile of a warm call</h2>'
                   f'<div class="scroll">{_timeline_svg(prof)}</div>'
                   + _table(["name", "kind", "device", "calls", "self host", "host total",
                             "device total"], rows) + "</section>")
    out.append(f'<section class="panel" id="{vid}-device"><h2>Device</h2><p>'
               f'{_esc(_device_label(dev))}. Default device of this process: '
               f'{_esc(str(mx.default_device()))}.</p></section>')
    out.append("</div>")
    return "".join(out)


_CSS = """
:root{--bg:#0c0f14;--panel:#161b24;--panel2:#1d2430;--ink:#dfe6f0;--muted:#8d99ab;--acc:#5cc8ff;
--line:#2a3342}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--ink);font:14px/1.45 system-ui,-apple-system,
"Segoe UI",Roboto,Helvetica,Arial,sans-serif}
header{position:sticky;top:0;z-index:5;background:#111722;border-bottom:1px solid var(--line);
padding:10px 18px;display:flex;gap:18px;align-items:center;flex-wrap:wrap}
header h1{font-size:18px;margin:0 12px 0 0}header h1 span{color:var(--acc)}
.meta{color:var(--muted);font-size:12px}
.switch{display:inline-flex;border:1px solid var(--line);border-radius:8px;overflow:hidden}
.switch button{background:var(--panel2);color:var(--ink);border:0;padding:6px 14px;font:inherit;
cursor:pointer}.switch button.on{background:var(--acc);color:#04121c;font-weight:600}
.switch button:disabled{opacity:.35;cursor:not-allowed}
main{padding:14px 18px}
.panel{background:var(--panel);border:1px solid var(--line);border-radius:12px;padding:14px 16px;
margin:0 0 14px}
.hero{background:linear-gradient(180deg,#18212e,#151b25);overflow-x:auto}
h2{font-size:16px;margin:0 0 10px}h3{font-size:13px;margin:14px 0 6px;color:#b9c6d8}
h4{margin:10px 0 4px;font-size:12px;color:var(--muted)}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:0 0 14px}
.card{flex:1 1 130px;background:var(--panel2);border:1px solid var(--line);border-radius:10px;
padding:10px 12px}.cv{font-size:20px;font-weight:650}.cl{color:var(--muted);font-size:12px}
.scroll{overflow:auto;max-height:640px;background:#10151d;border:1px solid var(--line);
border-radius:8px;padding:4px}
.muted{color:var(--muted)}.small{font-size:12px}
table{border-collapse:collapse;width:100%;font-size:12.5px;margin:6px 0}
th,td{border-bottom:1px solid var(--line);padding:5px 8px;text-align:left;vertical-align:top}
th{color:var(--muted);font-weight:600;background:var(--panel2)}
code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}
pre.code{background:#0f141b;border:1px solid var(--line);border-radius:8px;padding:10px 12px;
overflow:auto;max-height:520px;font:12px/1.5 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
.t-kw{color:#ff7ab2}.t-ty{color:#6bdfff}.t-fn{color:#ffd479}.t-num{color:#d0a8ff}
.t-str{color:#a6e22e}.t-com{color:#6c7a89;font-style:italic}.t-pre{color:#ff9f5a}
details.src{border:1px solid var(--line);border-radius:8px;padding:6px 10px;margin:8px 0;
background:var(--panel2)}summary{cursor:pointer}
.legend{list-style:none;padding:0;margin:8px 0;font-size:12.5px}.legend li{margin:3px 0}
.sw{display:inline-block;width:14px;height:14px;border:2px solid;border-radius:4px;
vertical-align:-2px;margin-right:6px}
svg.graph text{font:11px ui-monospace,Menlo,Consolas,monospace;fill:#e8eef6}
svg.graph .shape{fill:#a9b4c4;font-size:9.5px}
svg.graph .node rect{fill:var(--fill,#2b3340);stroke:var(--stroke,#536075);stroke-width:1.4}
svg.graph .node.isview rect{fill:var(--fill,#1f2631);stroke-dasharray:4 3}
svg.graph .node.fused rect{stroke-width:2.4}
svg.graph .node.output rect{stroke:#ffd479;stroke-width:2.6}
svg.graph .gin rect{fill:#0f4c63;stroke:#5cc8ff}svg.graph .gconst rect{fill:#30343c;stroke:#6b7380}
svg.graph .edge{fill:none;stroke:#5d6779;stroke-width:1.2}
svg.graph .edge.border{stroke:#ff6b6b;stroke-width:1.8;stroke-dasharray:5 3}
svg.graph .blabel{fill:#ff8f8f;font-size:9.5px}
svg.pipeline .stage rect{fill:#1f2a3a;stroke:var(--acc);stroke-width:1.5}
svg.pipeline .stage.off rect{fill:#1a1f28;stroke:#3b4656;stroke-dasharray:5 4}
svg.pipeline .stage.off text{fill:#6c7789}
svg.pipeline .st{fill:var(--muted);font-size:11px;text-transform:uppercase;letter-spacing:.06em}
svg.pipeline .sv{fill:var(--ink);font-size:18px;font-weight:650}
svg.pipeline .sd{fill:#a7b3c4;font-size:11px}
svg.pipeline .parrow{stroke:var(--acc);stroke-width:2;fill:none}
svg.timeline .rowname,svg.timeline .ticklabel{fill:var(--muted);font-size:11px}
svg.timeline .tick{stroke:#243042}svg.timeline .bar{fill:#536075}
svg.timeline .bar.user{fill:#3d5a80}svg.timeline .bar.eval{fill:#5a4d8a}
svg.timeline .bar.kernel{fill:#2f9e8f}svg.timeline .bar.fusedbar{fill:#e0a33a}
svg.timeline .bar.view{fill:#4a5466}svg.timeline .bar.gpu{fill:#76b900}
svg.timeline .bar.graph{fill:#c2569b}
svg.timeline .barlabel{fill:#0c0f14;font-size:10.5px}
.row2{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:14px}
.row2 pre.code{max-height:300px}
.view{display:none}.view.shown{display:block}
.none{display:none}.none.shown{display:block}
"""

_JS = """
(function(){
  var mode = document.body.dataset.mode, dev = document.body.dataset.dev;
  // A link may pick the run: report.html#lazy-gpu.
  var h = location.hash.slice(1).split('-');
  if (h[0] === 'compiled' || h[0] === 'lazy') { mode = h[0]; if (h[1]) dev = h[1]; }
  function show(){
    var any = false;
    document.querySelectorAll('.view').forEach(function(v){
      var on = v.dataset.mode === mode && v.dataset.dev === dev;
      v.classList.toggle('shown', on); any = any || on;
    });
    document.getElementById('none').classList.toggle('shown', !any);
    document.querySelectorAll('.switch button').forEach(function(b){
      b.classList.toggle('on', b.dataset.mode === mode || b.dataset.dev === dev);
    });
  }
  document.querySelectorAll('.switch button').forEach(function(b){
    b.addEventListener('click', function(){
      if (b.dataset.mode) mode = b.dataset.mode; if (b.dataset.dev) dev = b.dataset.dev; show();
    });
  });
  show();
})();
"""


def render(cf: Any, views: list, default: tuple, page: _Page) -> str:
    """The page: header with the switches, one view per (mode, device), the shared
    preambles, the inline style and script."""
    name = getattr(cf._fun, "__qualname__", repr(cf._fun))
    have = {(m, d) for m, d, _ in views}
    modes = [("compiled", "Compiled"), ("lazy", "Lazy")]
    devs = [("cpu", "CPU"), ("gpu", "GPU")]

    def button(attr: str, value: str, label: str, present: bool) -> str:
        dis = "" if present else ' disabled title="not run this way"'
        return f'<button data-{attr}="{value}"{dis}>{label}</button>'

    mode_sw = "".join(button("mode", m, label, any(h[0] == m for h in have)) for m, label in modes)
    dev_sw = "".join(button("dev", d, label, any(h[1] == d for h in have)) for d, label in devs)
    body = "".join(v for _, _, v in views)
    pre = []
    for (lang, text), pid in page.preambles.items():
        pre.append(f'<details class="src" id="{pid}"><summary>{pid}: shared {lang.upper()} '
                   f'helpers every kernel of this kind starts with</summary>'
                   f'<pre class="code">{highlight(text, lang)}</pre></details>')
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    return (
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<meta name=\"viewport\" content=\"width=device-width\"><title>kiln compile report: "
        f"{_esc(name)}</title><style>{_CSS}</style></head>"
        f"<body data-mode=\"{default[0]}\" data-dev=\"{default[1]}\">"
        f"<header><h1>kiln compile report: <span>{_esc(name)}</span></h1>"
        f"<div class=\"switch\" id=\"sw-mode\">{mode_sw}</div>"
        f"<div class=\"switch\" id=\"sw-dev\">{dev_sw}</div>"
        f"<div class=\"meta\">{_esc(stamp)} \u00b7 {_esc(platform.node())}</div></header>"
        f"<main>{body}<section class=\"panel none\" id=\"none\"><p>The function was not run "
        "this way. <code>compiled.report(path, *args)</code> runs it compiled and lazily on "
        "every device there is.</p></section>"
        + ("<section class=\"panel\"><h2>Shared kernel helpers</h2>" + "".join(pre)
           + "</section>" if pre else "")
        + f"</main><script>{_JS}</script></body></html>")


def _current_entry(cf: Any) -> Optional[int]:
    for i, entry in enumerate(cf._cache.values()):
        if entry[3] == cf._last_key:
            return i
    return None


def _entry_device(info: dict) -> str:
    for e in info["entries"]:
        if any(d.lower().startswith("gpu") for d in e.get("devices", [])):
            return "gpu"
    return "cpu"


def write_report(cf: Any, path: Any, args: tuple, kwargs: dict, run: bool) -> str:
    """Runs (if asked), collects and writes the report; returns the path written."""
    page = _Page()
    views = []
    if run:
        runs = _run_all(cf, args, kwargs)
        for (mode, dev), r in runs.items():
            target = r["cf"]
            info = target.explain()
            views.append((mode, dev, _view(page, target, info, mode, dev, r,
                                           _current_entry(target))))
        default = ("compiled", _default_device())
    else:
        info = cf.explain()
        if not info["entries"]:
            raise ValueError("[compile] report(path) shows the calls made so far, and there "
                             "were none: call the function first, or pass its arguments "
                             "(report(path, *args)).")
        dev = _entry_device(info)
        views.append(("compiled", dev, _view(page, cf, info, "compiled", dev, None,
                                             _current_entry(cf))))
        default = ("compiled", dev)
    text = render(cf, views, default, page)
    path = os.fspath(path)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path
