"""Self-contained Bokeh HTML reports (resources inline: they open offline)."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["notebook_html", "page", "profile_layout", "write_html"]


def _palette(names: list[str]) -> dict[str, str]:
    from bokeh.palettes import Category10_10, Category20_20

    colors = Category10_10 if len(names) <= 10 else Category20_20
    return {n: colors[i % len(colors)] for i, n in enumerate(names)}


def _verdicts_div(report: Any) -> Any:
    from bokeh.models.widgets import Div

    if report.n_tasks == 0:
        items = "<li>no tasks ran: nothing to profile</li>"
    elif not report.verdicts:
        items = "<li>no problems found: load is balanced and tasks are big enough to amortise scheduling</li>"
    else:
        items = "".join(
            f"<li><b>{html.escape(v.kind)}</b>: {html.escape(v.summary)}<br><i>fix:</i> {html.escape(v.fix)}</li>"
            for v in report.verdicts
        )
    head = f"{report.n_tasks} tasks on {report.slots} thread(s), {report.wall_s:.2f} s wall, backend {html.escape(report.backend)}"
    return Div(text=f"<h2>openclaw profile</h2><p>{head}</p><ul>{items}</ul>", width=1000)


def profile_layout(report: Any, record: Any) -> Any:
    """Task stream per worker thread, per-worker load bars, duration histogram, verdicts."""
    from bokeh.layouts import column, row
    from bokeh.models import ColumnDataSource, FactorRange, HoverTool
    from bokeh.plotting import figure

    t0 = record.start
    threads: dict[str, dict[int, int]] = {}
    for t in sorted(record.tasks, key=lambda t: (t.worker, t.thread)):
        threads.setdefault(t.worker, {}).setdefault(t.thread, len(threads.get(t.worker, {})))

    def lane(t: Any) -> str:
        return f"{t.worker.split('://', 1)[-1]} thread {threads[t.worker][t.thread]}"

    lanes = sorted({lane(t) for t in record.tasks})
    colors = _palette(sorted({t.group for t in record.tasks}))
    stream = ColumnDataSource(
        {
            "lane": [lane(t) for t in record.tasks],
            "left": [t.start - t0 for t in record.tasks],
            "right": [t.stop - t0 for t in record.tasks],
            "group": [t.group for t in record.tasks],
            "key": [t.key for t in record.tasks],
            "ms": [t.duration * 1e3 for t in record.tasks],
            "nbytes": [t.nbytes for t in record.tasks],
            "color": [colors[t.group] for t in record.tasks],
        }
    )
    ts = figure(title="Task stream (one row per worker thread)", y_range=FactorRange(factors=lanes or ["-"]), height=max(220, 40 * len(lanes) + 80),
                width=1000, x_axis_label="seconds since start", tools="xpan,xwheel_zoom,reset,save")
    ts.hbar(y="lane", left="left", right="right", height=0.8, color="color", legend_field="group", source=stream)
    ts.add_tools(HoverTool(tooltips=[("key", "@key"), ("group", "@group"), ("ms", "@ms{0.000}"), ("bytes", "@nbytes")]))
    ts.add_layout(ts.legend[0], "right")  # beside the bars, not over them

    names = [w.address for w in report.workers]
    load = figure(title="Load per worker (thread-seconds)", x_range=FactorRange(factors=names or ["-"]), height=320, width=490, tools="save")
    load.vbar_stack(["busy", "idle"], x="worker", width=0.7, color=["#1f77b4", "#d3d3d3"], legend_label=["busy", "idle"],
                    source=ColumnDataSource({"worker": names, "busy": [w.busy_s for w in report.workers],
                                             "idle": [w.idle_s for w in report.workers]}))
    load.xaxis.major_label_orientation = 0.6

    durations = np.array([max(t.duration, 1e-6) for t in record.tasks] or [1e-6]) * 1e3
    edges = np.logspace(np.log10(durations.min()), np.log10(durations.max() * 1.01 + 1e-9), 30)
    counts, edges = np.histogram(durations, bins=edges)
    hist = figure(title="Task durations (ms, log scale)", x_axis_type="log", height=320, width=490, tools="save")
    hist.quad(top=counts, bottom=0, left=edges[:-1], right=edges[1:], color="#ff7f0e", line_color="white")
    return column(_verdicts_div(report), ts, row(load, hist))


def page(layout: Any, title: str) -> str:
    """``layout`` as one HTML document with Bokeh's JavaScript inline (it opens offline)."""
    from bokeh.embed import file_html
    from bokeh.resources import INLINE

    return file_html(layout, INLINE, title=title)


def write_html(layout: Any, path: str | Path, title: str, *, force: bool = False) -> Path:
    """Write ``layout`` as one HTML file with Bokeh's JavaScript inline.

    As :func:`openclaw_dask.files.write_file` writes: an existing file only with ``force``,
    never through a symbolic link, whole or not at all (a ``ConfigError`` otherwise).
    """
    from openclaw_dask.files import write_file

    return write_file(path, page(layout, title), force=force)


def notebook_html(layout: Any, title: str, height: int = 900) -> str:
    """``layout`` for a notebook cell: the self-contained page (Bokeh inline) in an ``iframe``.

    It renders offline, and without BokehJS loaded in the notebook first (``output_notebook``).
    """
    doc = html.escape(page(layout, title), quote=True)
    return f'<iframe srcdoc="{doc}" title="{html.escape(title)}" style="width:100%;height:{height}px;border:0"></iframe>'
