"""compiled.report(): the HTML page, checked as data and in headless Chromium (Debian's
`chromium`; those tests skip without it)."""

import html
import json
import re
import shutil
import struct
import subprocess
import zlib
from functools import partial

import kiln.core as mx
import kiln.nn as nn
import kiln.optimizers as optim
import numpy as np
import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed "
                                    "(apt-get install -y chromium)")


def gelu(x):
    return x * (1 + mx.erf(x / 1.4142135)) / 2


def mlp_step():
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    mx.eval(model.parameters())
    opt = optim.Adam(learning_rate=1e-2)

    def loss_fn(model, x, y):
        return nn.losses.mse_loss(model(x), y)

    loss_and_grad = nn.value_and_grad(model, loss_fn)
    state = [model.state, opt.state]

    @partial(mx.compile, inputs=state, outputs=state)
    def train_step(x, y):
        loss, grads = loss_and_grad(model, x, y)
        opt.update(model, grads)
        return loss

    rng = np.random.default_rng(0)
    x = mx.array(rng.standard_normal((8, 16)).astype(np.float32))
    y = mx.array(rng.standard_normal((8, 4)).astype(np.float32))
    return train_step, model, (x, y)


def text_of(markup):
    """The page's text (tags dropped, entities decoded)."""
    return html.unescape(re.sub(r"<[^>]+>", "", markup))


def svgs(markup, label):
    return re.findall(rf'<svg[^>]*aria-label="{label}"[^>]*>(.*?)</svg>', markup, re.S)


def node_count(svg):
    return len(re.findall(r'<g class="node[ "]', svg))


def check_page(markup, cf):
    """What every report holds, checked against explain()."""
    info = cf.explain()
    assert "<script src" not in markup and "<link" not in markup
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:|//)""", markup)
    assert not re.search(r"url\(\s*['\"]?(https?:|//)", markup)
    counts = {len(e["traced"]) - 1 for e in info["entries"]}
    traced = svgs(markup, "traced graph")
    assert traced and {node_count(s) for s in traced} <= counts
    assert {node_count(s) for s in traced} == counts
    simplified = svgs(markup, "simplified graph")
    assert {node_count(s) for s in simplified} == {len(e["simplified"]) - 1
                                                  for e in info["entries"]}
    text = text_of(markup)
    for e in info["entries"]:
        for k in e["kernels"]:
            # The source the page shows: CUDA's for a kernel the GPU ran, else the C one.
            sources = ([v["source"] for v in k.get("cuda", [])]
                       or [v["source"] for v in k["cpu"]] or [k["c_source"]])
            body = sources[0].split(f"/* {k['name']} */", 1)[-1]
            line = next(ln for ln in body.splitlines()
                        if "kiln_kernel" in ln or "__global__" in ln)
            assert line.strip() in text
    return info


def test_gelu_report_as_data(tmp_path):
    f = mx.compile(gelu)
    x = mx.array(np.linspace(-3, 3, 4096, dtype=np.float32))
    path = f.report(tmp_path / "gelu.html", x)
    markup = open(path).read()
    info = check_page(markup, f)
    entry = info["entries"][0]
    assert len(entry["regions"]) == 1 and entry["regions"][0]["members"]
    # The region's nodes are coloured (a region attribute per member) in the simplified graph.
    simplified = svgs(markup, "simplified graph")[0]
    assert simplified.count("data-region=") == len(entry["regions"][0]["members"])
    # Both runs (compiled and lazy) are on the page, with the switches.
    assert 'data-mode="compiled" data-dev="cpu"' in markup
    assert 'data-mode="lazy" data-dev="cpu"' in markup
    assert '<button data-mode="lazy"' in markup and '<button data-dev="gpu"' in markup
    assert "void kiln_kernel" in text_of(markup)
    # Kernel runs and times, and the device, per kernel.
    kern = entry["kernels"][0]
    assert kern["device"].lower().startswith("cpu") or kern["device"].lower().startswith("gpu")
    assert entry["replays"] >= 2
    # The function's source, coloured.
    assert "1.4142135" in text_of(markup) and 't-fn' in markup


def test_report_of_a_function_already_called(tmp_path):
    f = mx.compile(gelu)
    mx.eval(f(mx.ones((64,))))
    path = f.report(tmp_path / "called.html")
    markup = open(path).read()
    check_page(markup, f)
    assert 'data-mode="lazy"' not in markup.split("<main>")[1].split("</main>")[0].replace(
        'data-mode="lazy" disabled', "")
    with pytest.raises(ValueError, match="call the function first"):
        mx.compile(gelu).report(tmp_path / "none.html")


def test_retrace_reasons_in_report(tmp_path):
    f = mx.compile(lambda x: mx.tanh(x) * 2 + x)
    mx.eval(f(mx.ones((8,))))
    mx.eval(f(mx.ones((16,))))
    mx.eval(f(mx.ones((16,))))
    info = f.explain()
    assert [r["reason"] for r in info["retraces"]] == ["first call",
                                                      "input 0: shape (8,) -> (16,)"]
    assert [e["replays"] for e in info["entries"]] == [1, 2]
    markup = open(f.report(tmp_path / "retrace.html")).read()
    check_page(markup, f)
    text = text_of(markup)
    assert "input 0: shape (8,) -> (16,)" in text
    assert len(svgs(markup, "traced graph")) == 2


def test_mlp_training_step_report(tmp_path):
    step, model, (x, y) = mlp_step()
    before = [np.array(p) for _, p in _leaves(model.parameters())]
    path = step.report(tmp_path / "mlp.html", x, y)
    after = [np.array(p) for _, p in _leaves(model.parameters())]
    for a, b in zip(before, after):  # the report put the parameters back
        np.testing.assert_array_equal(a, b)
    markup = open(path).read()
    info = check_page(markup, step)
    regions = [r for e in info["entries"] for r in e["regions"]]
    assert regions
    # Borders are drawn where fusion stopped, with the reason.
    edges = [b for r in regions for b in r["border_edges"]]
    if edges:
        assert 'class="edge border"' in markup
        assert "fusion stopped here: " + edges[0][2] in text_of(markup)
    assert "matmul" in text_of(markup)  # an eager kernel left


def _leaves(tree, prefix=""):
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from _leaves(v, f"{prefix}.{k}")
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            yield from _leaves(v, f"{prefix}.{i}")
    else:
        yield prefix, tree


def test_layout_is_layered():
    from kiln.core._report import layout, parse_graph

    g = parse_graph(["n0 = exp(in0) : (3) float32", "n1 = multiply(n0, in0) : (3) float32",
                     "n2 = add(n1, c0) : (3) float32", "return n2"])
    lay = layout(g)
    assert lay["layer"]["in0"] == 0 and lay["layer"]["n0"] == 1
    assert lay["layer"]["n1"] == 2 and lay["layer"]["n2"] == 3
    assert lay["layer"]["c0"] == 2  # a constant sits just before its user


def test_highlight_escapes_and_colours():
    from kiln.core._report import highlight

    out = highlight('/* a < b */ int x = k_exp(1.5f); // "s"', "c")
    assert '<span class="t-com">/* a &lt; b */</span>' in out
    assert '<span class="t-ty">int</span>' in out and '<span class="t-fn">k_exp</span>' in out
    assert '<span class="t-num">1.5f</span>' in out
    out = highlight("def f(x):\n    return x < 1  # done", "python")
    assert '<span class="t-kw">def</span>' in out and "&lt;" in out


# --- headless Chromium ---------------------------------------------------------------------


def chromium(*args, timeout=120):
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--disable-dev-shm-usage", "--hide-scrollbars", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def png_pixels(data):
    """(width, height, rows of RGB tuples) of an 8-bit RGB/RGBA PNG (what Chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", chunk[:10])
            assert depth == 8 and colour in (2, 6), (depth, colour)
            bpp = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev, i = [], bytearray(stride), 0
    for _ in range(height):
        f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pr = a if pa <= pb and pa <= pc else b if pb <= pc else c
                line[x] = (line[x] + pr) & 255
        rows.append([tuple(line[x:x + 3]) for x in range(0, stride, bpp)])
        prev = line
    return width, height, rows


BACKGROUND = (0x0C, 0x0F, 0x14)  # the page's --bg


def open_in_chromium(path, tmp_path, name):
    url = "file://" + str(path)
    netlog = tmp_path / f"{name}-net.json"
    dom = chromium("--dump-dom", f"--log-net-log={netlog}", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    shot = tmp_path / f"{name}.png"
    r = chromium(f"--screenshot={shot}", "--window-size=1280,900", url)
    assert r.returncode == 0 and shot.exists(), r.stderr[-2000:]
    return dom.stdout, shot, netlog


def check_in_chromium(path, cf, tmp_path, name):
    markup, shot, netlog = open_in_chromium(path, tmp_path, name)
    check_page(markup, cf)  # the DOM as Chromium built it
    width, height, rows = png_pixels(shot.read_bytes())
    pixels = [p for row in rows[::4] for p in row[::4]]
    near_bg = sum(all(abs(a - b) <= 3 for a, b in zip(p, BACKGROUND)) for p in pixels)
    assert near_bg < len(pixels) / 2, (near_bg, len(pixels))  # not blank
    assert len(set(pixels)) > 50  # drawn content, not one flat colour
    # No network: every request in the net log is for the file itself.
    if netlog.exists():
        log = netlog.read_text()
        try:
            urls = re.findall(r'"url":"([^"]+)"', json.dumps(json.loads(log)))
        except ValueError:  # a log cut short at exit
            urls = re.findall(r'"url":"([^"]+)"', log)
        assert all(u.startswith(("file:", "data:", "about:", "chrome:")) for u in urls), urls


@needs_chromium
def test_gelu_in_chromium(tmp_path):
    f = mx.compile(gelu)
    path = f.report(tmp_path / "gelu.html", mx.array(np.linspace(-3, 3, 4096,
                                                                  dtype=np.float32)))
    check_in_chromium(path, f, tmp_path, "gelu")


@needs_chromium
def test_switches_pick_the_run(tmp_path):
    f = mx.compile(gelu)
    path = f.report(tmp_path / "gelu.html", mx.ones((256,)))
    shown = lambda dom: re.findall(r'class="view shown" data-mode="(\w+)" data-dev="(\w+)"', dom)  # noqa: E731
    dom = chromium("--dump-dom", "file://" + str(path)).stdout
    assert shown(dom) == [("compiled", "cpu")]  # the script ran: one view shown
    dom = chromium("--dump-dom", "file://" + str(path) + "#lazy-cpu").stdout
    assert shown(dom) == [("lazy", "cpu")]
    dom = chromium("--dump-dom", "file://" + str(path) + "#compiled-gpu").stdout
    if "gpu" not in {d for _, d in shown(dom)}:
        assert re.search(r'class="panel none shown"', dom)  # "not run this way"


@needs_chromium
def test_mlp_step_in_chromium(tmp_path):
    step, _, (x, y) = mlp_step()
    path = step.report(tmp_path / "mlp.html", x, y)
    check_in_chromium(path, step, tmp_path, "mlp")


@needs_chromium
def test_retrace_in_chromium(tmp_path):
    f = mx.compile(lambda x: mx.tanh(x) * 2 + x)
    mx.eval(f(mx.ones((8,))))
    mx.eval(f(mx.ones((16,))))
    path = f.report(tmp_path / "retrace.html", mx.ones((16,)))
    assert "input 0: shape (8,) -> (16,)" in text_of(open(path).read())
    check_in_chromium(path, f, tmp_path, "retrace")
