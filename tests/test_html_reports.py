"""The profile and benchmark HTML reports, opened in headless Chromium as a reader would.

Bokeh draws into shadow DOM and canvases, so a probe script is added to a copy of each page:
once Bokeh has rendered, it reads the views (legend entries, axes, ranges, the tables in the
text blocks) with their boxes on the page and leaves them as JSON in the DOM, which
``chromium --dump-dom`` prints. Screenshots are saved beside; with
``UPDATE_DOCS_IMG=1`` they also replace the small PNGs the docs show.
"""

from __future__ import annotations

import html
import itertools
import json
import os
import re
import shutil
import subprocess
import tempfile
import textwrap
from pathlib import Path

import pytest

from openclaw_dask.diagnostics.benchmark_html import config_colors

from .browser import FLAGS, plotted_colors, screenshot
from .conftest import openclaw

DOCS_IMG = Path(__file__).resolve().parent.parent / "docs" / "img"
WINDOW = (1200, 2300)  # wide and tall enough for every block of either page

PROBE = """
<script>
(function () {
  function box(el) { const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; }
  function plot(v) {
    const f = v.frame, ys = f.y_scale, axes = [];
    for (const a of v.renderer_views.values()) {
      if (!a.model.type.endsWith("Axis")) continue;
      const ticks = a.dimension == 1 ? a.tick_coords.major[1].map((t) => ys.compute(t)) : [];
      axes.push({dimension: a.dimension, label: a.model.axis_label, ticks_px: ticks});
    }
    const ty = v.model.title, xr = v.model.x_range, yr = v.model.y_range;
    return {title: ty ? ty.text : "", box: box(v.el), y: [ys.source_range.start, ys.source_range.end],
            frame: [f.bbox.top, f.bbox.bottom], axes: axes,
            factors: xr.factors || [], yfactors: yr.factors || [],
            busy: Array.from([...v.model.renderers].map((r) => r.data_source && r.data_source.data.busy).find((b) => b) || [])};
  }
  function legend(v) {
    return {plot: box(v.parent.el), entries: v.entries.map((e) => ({label: String(e.label), box: box(e.label_el)}))};
  }
  function div(v) {
    const root = v.el.shadowRoot || v.el, cells = (r) => [...r.children].map((c) => c.textContent.trim());
    const text = [...root.children].filter((c) => c.tagName != "STYLE").map((c) => c.innerText).join(" ");
    return {text: text, box: box(v.el),
            tables: [...root.querySelectorAll("table")].map((t) => ({cls: t.className, box: box(t),
              head: [...t.querySelectorAll("th")].map((h) => h.textContent), rows: [...t.querySelectorAll("tbody tr")].map(cells)})),
            verdicts: [...root.querySelectorAll("ul.verdicts li")].map((li) => li.textContent)};
  }
  function probe() {
    let out = {viewport: [window.innerWidth, window.innerHeight], plots: [], legends: [], divs: []};
    try {
      for (const v of Bokeh.index.all_views()) {
        const t = v.model.type;
        if (t == "Figure" || t == "Plot") out.plots.push(plot(v));
        else if (t == "Legend") out.legends.push(legend(v));
        else if (t == "Div") out.divs.push(div(v));
      }
    } catch (e) { out = {error: String(e) + " at " + e.stack}; }
    const pre = document.createElement("pre");
    pre.id = "openclaw-probe";
    pre.textContent = JSON.stringify(out);
    document.body.appendChild(pre);
  }
  let waited = 0;
  function wait() {
    if (window.Bokeh && Bokeh.index && Bokeh.index.roots.length && ++waited > 5) probe(); else setTimeout(wait, 200);
  }
  wait();
})();
</script>
"""


def probe(page: Path, tmp: Path) -> dict:
    """What Bokeh rendered of ``page`` in Chromium at :data:`WINDOW`: plots, legends and text blocks with their boxes."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("headless Chromium is not installed (apt-get install chromium)")
    probed = tmp / f"probed-{page.name}"
    head, _, tail = page.read_text().rpartition("</body>")  # the page's own end (Bokeh's code holds the string too)
    probed.write_text(head + PROBE + "</body>" + tail)
    with tempfile.TemporaryDirectory() as profile:
        dom = subprocess.run(
            [chromium, *FLAGS, f"--user-data-dir={profile}", f"--window-size={WINDOW[0]},{WINDOW[1]}",
             "--virtual-time-budget=8000", "--dump-dom", probed.resolve().as_uri()],
            capture_output=True, text=True, timeout=120, check=True,
        ).stdout
    found = re.search(r'<pre id="openclaw-probe">(.*?)</pre>', dom, re.DOTALL)
    assert found, "Bokeh did not render the page (no probe output)"
    seen = json.loads(html.unescape(found.group(1)))
    assert "error" not in seen, seen.get("error")
    return seen


def inside(box: list[float], outer: list[float], slack: float = 1.0) -> bool:
    return (box[0] >= outer[0] - slack and box[1] >= outer[1] - slack and box[2] <= outer[2] + slack
            and box[3] <= outer[3] + slack)


def shot(page: Path, tmp: Path, docs_name: str) -> Path:
    """A screenshot of ``page``; with UPDATE_DOCS_IMG=1 also a small copy as ``docs/img/docs_name``."""
    png = screenshot(page, tmp / docs_name, size=f"{WINDOW[0]},{WINDOW[1]}")
    if os.environ.get("UPDATE_DOCS_IMG") == "1":
        from PIL import Image, ImageOps

        image = Image.open(png).convert("RGB")
        bottom = (ImageOps.invert(image).getbbox() or (0, 0, *image.size))[3]  # no blank space under the last block
        image = image.crop((0, 0, image.size[0], min(image.size[1], bottom + 16)))
        image.thumbnail((900, 3000))
        image.quantize(colors=256, method=Image.Quantize.FASTOCTREE).save(DOCS_IMG / docs_name, optimize=True)
    return png


# -- the profile ---------------------------------------------------------------------------------------------------

MANY_GROUPS = """
import time

import dask
import dask.array as da


def slow(block, block_info=None):
    if block_info[0]["chunk-location"] == (3,):  # one slow chunk: one thread works while the other waits
        time.sleep(0.4)
    return block


x = da.random.default_rng(0).random(400_000, chunks=50_000)
y = da.map_blocks(slow, da.sin(x) * 2 + da.cos(x) - da.sqrt(x + 1), dtype=float)
z = (y ** 2).cumsum(axis=0) / (da.exp(x) + 1)
print(dask.compute(y.sum(), z.max(), x.std(), x.min()))
"""


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    """A script with more task groups than Category10 has colours and one straggler, profiled on two threads."""
    tmp = tmp_path_factory.mktemp("profile")
    (tmp / "many.py").write_text(textwrap.dedent(MANY_GROUPS))
    r = openclaw("profile", "many.py", "--set", "parallel.workers=2", "--json", "--html", "p.html", cwd=tmp)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout[r.stdout.index('{"workload"'):])
    return out["profile"], tmp / "p.html", tmp


@pytest.mark.slow
def test_profile_html_shows_every_group_thread_lanes_and_labelled_axes(profiled):
    report, page, tmp = profiled
    groups = {g["group"] for g in report["groups"]}
    assert len(groups) > 10  # more than the legend held before it was sized to its entries
    seen = probe(page, tmp)
    (legend,) = [g for g in seen["legends"] if len(g["entries"]) > 2]  # the task stream's (load's has busy/idle)
    assert {e["label"] for e in legend["entries"]} == groups
    assert all(inside(e["box"], legend["plot"]) for e in legend["entries"]), "a legend entry is clipped"
    plots = {p["title"]: p for p in seen["plots"]}
    load = plots["Load per thread (seconds)"]  # one lane per thread, as the load-imbalance verdict compares them
    assert load["factors"] == ["local thread 0", "local thread 1"] == sorted(plots["Task stream (one row per worker thread)"]["yfactors"])
    busy = load["busy"]
    assert len(busy) == 2, busy
    assert "stragglers" in {v["kind"] for v in report["verdicts"]}
    assert max(busy) > 0.4 > 2 * min(busy)  # the thread that ran the slow chunk stands out
    hist = plots["Task durations (log scale)"]
    assert {a["label"] for a in hist["axes"]} == {"task duration (ms)", "tasks"}
    width = seen["viewport"][0]
    assert all(p["box"][2] <= width for p in seen["plots"]), "a plot is wider than the window"
    text = " ".join(d["text"] for d in seen["divs"])
    if report["verdicts"]:
        assert all(v["kind"] in text for v in report["verdicts"])
    else:
        assert "no problems found" in text
    tables = {t["cls"]: t for d in seen["divs"] for t in d["tables"]}
    assert {row[0] for row in tables["groups"]["rows"]} == groups  # the numbers behind the plots, below them
    assert tables["workers"]["rows"][0][:3] == ["local", "2", str(report["n_tasks"])]
    assert all(t["box"][2] <= width for t in tables.values())
    assert len(plotted_colors(shot(page, tmp, "profile.png"))) >= 10  # the groups' colours are drawn


def test_the_load_plot_has_one_lane_per_thread_even_an_idle_one():
    from bokeh.models import FactorRange

    from openclaw_dask.diagnostics.analysis import analyze
    from openclaw_dask.diagnostics.collect import RunRecord, TaskRecord, WorkerRecord
    from openclaw_dask.diagnostics.html import _Lanes, _load_bars, _load_plot

    record = RunRecord(backend="thread", start=0.0, stop=1.0)
    record.workers["local"] = WorkerRecord("local", 3, 2**30, 0, 0, 0, 0)
    record.tasks += [TaskRecord("('a', 0)", "a", "local", 0, 0.0, 0.9, 8), TaskRecord("('a', 1)", "a", "local", 1, 0.0, 0.2, 8)]
    report = analyze(record)
    lanes = _Lanes(record)
    _, names, busy, idle = _load_bars(report, record, lanes)
    assert names == ["local thread 0", "local thread 1", "local thread 2"]  # thread 2 ran nothing: an idle lane
    assert busy == pytest.approx([0.9, 0.2, 0.0]) and idle == pytest.approx([0.1, 0.8, 1.0])
    plot = _load_plot(report, record, lanes)
    assert isinstance(plot.x_range, FactorRange) and list(plot.x_range.factors) == names and plot.yaxis[0].axis_label


# -- the benchmark -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def benchmarked(tmp_path_factory):
    """The smallest real sweep: the smoke suite on two chunk sizes, two timed runs a row."""
    tmp = tmp_path_factory.mktemp("bench")
    r = openclaw("benchmark", "--suite", "smoke", "--sweep", "parallel.task_chunk_size=1MiB,4MiB", "--repeat", "2",
                 "--out", "out", cwd=tmp, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads((tmp / "out" / "report.json").read_text()), tmp / "out" / "report.html", tmp


@pytest.mark.slow
def test_benchmark_html_is_the_whole_report(benchmarked):
    report, page, tmp = benchmarked
    seen = probe(page, tmp)
    (block,) = seen["divs"]
    tables = {t["cls"]: t for t in block["tables"]}
    results = tables["results"]
    assert results["head"][:3] == ["config", "workload", "ok"]
    assert [(r[0], r[1], r[2]) for r in results["rows"]] == [
        (row["config"], row["workload"], "yes" if row["ok"] else "NO") for row in report["rows"]]
    verdicts = [v for row in report["rows"] for v in row["verdicts"]]
    assert len(block["verdicts"]) == max(1, len(verdicts)) and all(any(v in li for li in block["verdicts"]) for v in verdicts)
    machine = dict(tables["machine"]["rows"])
    m = report["machine"]
    assert machine["CPU"] == m["cpu"] and machine["cores"] == str(m["cpu_count"])
    assert f"{m['bandwidth_gbps_all_cores']:.1f} GB/s on all cores" in machine["memory bandwidth (measured)"]
    assert all(f"{k} {v}" in machine["versions"] for k, v in report["versions"].items())
    configs = tables["configs"]
    assert "parallel.task_chunk_size" in configs["head"]  # what differs between the rows
    assert [r[configs["head"].index("parallel.task_chunk_size")] for r in configs["rows"]] == ["(default)", "1MiB", "4MiB"]
    width = seen["viewport"][0]
    assert all(t["box"][2] <= width for t in tables.values()), "a table is wider than the window"
    _plots_fit_their_data(seen, report)
    assert len(plotted_colors(shot(page, tmp, "benchmark.png"))) >= 3


def _plots_fit_their_data(seen: dict, report: dict) -> None:
    plots = {p["title"]: p for p in seen["plots"]}
    ms = plots["Median time per run (ms, min-max whiskers)"]
    lo, hi = min(r["min_s"] for r in report["rows"]) * 1e3, max(r["max_s"] for r in report["rows"]) * 1e3
    assert ms["y"][0] <= lo and ms["y"][1] > hi, (ms["y"], lo, hi)  # every whisker inside the plot
    for p in plots.values():
        (y_axis,) = [a for a in p["axes"] if a["dimension"] == 1]
        ticks = sorted(y_axis["ticks_px"])
        assert len(ticks) >= 2 and y_axis["label"], p["title"]
        assert min(b - a for a, b in itertools.pairwise(ticks)) >= 14, f"{p['title']}: y tick labels crammed: {ticks}"
        assert p["box"][2] <= seen["viewport"][0]
    gbps = plots["Throughput (GB/s)"]
    assert gbps["y"][0] == 0 and gbps["y"][1] >= max(r["gbps"] for r in report["rows"])


def test_a_configuration_keeps_its_colour_whatever_else_is_in_the_report():
    alone = config_colors(["serial", "workers=2"])
    crowded = config_colors(["a.yaml", "workers=2", "task_chunk_size=1MiB", "serial", "z"])
    assert alone["serial"] == crowded["serial"] and alone["workers=2"] == crowded["workers=2"]
    many = config_colors([f"c{i}" for i in range(20)])
    assert len(set(many.values())) == 20  # a colour clash in one report moves one label on, never shares
