"""Self-contained Bokeh HTML reports (resources inline: they open offline)."""

from __future__ import annotations

import html
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["TABLE_CSS", "html_table", "notebook_html", "page", "profile_layout", "write_html"]

LEGEND_ROW_PX = 24  # one legend entry of Bokeh's default legend, with its spacing


def _palette(names: list[str]) -> dict[str, str]:
    from bokeh.palettes import Category10_10, Category20_20

    colors = Category10_10 if len(names) <= 10 else Category20_20
    return {n: colors[i % len(colors)] for i, n in enumerate(names)}


def _verdicts_div(report: Any) -> Any:
    from bokeh.models.widgets import Div

    from openclaw_dask.diagnostics.analysis import HERE

    here = f"<li>{HERE}: {html.escape(report.here_line())}</li>" if report.ran_here else ""
    if report.n_tasks == 0:
        items = "" if here else "<li>no tasks ran: nothing to profile</li>"
    elif not report.verdicts:
        items = "<li>no problems found: load is balanced and tasks are big enough to amortise scheduling</li>"
    else:
        items = "".join(
            f"<li><b>{html.escape(v.kind)}</b>: {html.escape(v.summary)}<br><i>fix:</i> {html.escape(v.fix)}</li>"
            for v in report.verdicts
        )
    items = here + items
    head = f"{report.n_tasks} tasks on {report.slots} thread(s), {report.wall_s:.2f} s wall, backend {html.escape(report.backend)}"
    return Div(text=f"<h2>openclaw profile</h2><p>{head}</p><ul class='verdicts'>{items}</ul>", width=1000)


class _Lanes:
    """One lane per worker thread, named as the task stream shows it.

    A worker's thread keeps its own number where the numbers are small (dask's threaded
    scheduler numbers its threads 0..n-1, as the load-imbalance verdict names them);
    otherwise (thread idents on a cluster) the threads are numbered in order.
    """

    def __init__(self, record: Any) -> None:
        seen: dict[str, set[int]] = defaultdict(set)
        for t in record.tasks:
            seen[t.worker].add(t.thread)
        self.index: dict[str, dict[int, int]] = {}
        for worker, ids in seen.items():
            nthreads = record.workers[worker].nthreads if worker in record.workers else len(ids)
            small = all(0 <= i < max(nthreads, len(ids)) for i in ids)
            self.index[worker] = {i: i if small else n for n, i in enumerate(sorted(ids))}

    @staticmethod
    def name(worker: str, thread: int) -> str:
        return f"{worker.split('://', 1)[-1]} thread {thread}"

    def of(self, t: Any) -> str:
        return self.name(t.worker, self.index[t.worker][t.thread])


def _task_stream(record: Any, lanes: _Lanes) -> Any:
    """The task stream: one row per worker thread, coloured by group, with every group in the legend."""
    from bokeh.models import ColumnDataSource, FactorRange, HoverTool
    from bokeh.plotting import figure

    t0 = record.start
    names = sorted({lanes.of(t) for t in record.tasks})
    groups = sorted({t.group for t in record.tasks})
    colors = _palette(groups)
    stream = ColumnDataSource({
        "lane": [lanes.of(t) for t in record.tasks],
        "left": [t.start - t0 for t in record.tasks],
        "right": [t.stop - t0 for t in record.tasks],
        "group": [t.group for t in record.tasks],
        "key": [t.key for t in record.tasks],
        "ms": [t.duration * 1e3 for t in record.tasks],
        "nbytes": [t.nbytes for t in record.tasks],
        "color": [colors[t.group] for t in record.tasks],
    })
    # tall enough for every lane and for every group's legend entry (a clipped legend hides groups)
    height = max(220, 40 * len(names) + 80, LEGEND_ROW_PX * len(groups) + 140)
    ts = figure(title="Task stream (one row per worker thread)", y_range=FactorRange(factors=names or ["-"]), height=height,
                width=1000, x_axis_label="seconds since start", tools="xpan,xwheel_zoom,reset,save")
    ts.hbar(y="lane", left="left", right="right", height=0.8, color="color", legend_field="group", source=stream)
    ts.add_tools(HoverTool(tooltips=[("key", "@key"), ("group", "@group"), ("ms", "@ms{0.000}"), ("bytes", "@nbytes")]))
    ts.add_layout(ts.legend[0], "right")  # beside the bars, not over them
    return ts


def _load_bars(report: Any, record: Any, lanes: _Lanes) -> tuple[str, list[str], list[float], list[float]]:
    """Busy and idle seconds per lane: per thread on one worker (the lanes the load-imbalance verdict
    compares, so the imbalance it names shows), else thread-seconds per worker."""
    if len(record.workers) != 1:
        return ("Load per worker (thread-seconds)", [w.address for w in report.workers],
                [w.busy_s for w in report.workers], [w.idle_s for w in report.workers])
    (worker, w), = record.workers.items()
    busy: dict[str, float] = defaultdict(float)
    for t in record.tasks:
        busy[lanes.of(t)] += t.duration
    used = set(lanes.index.get(worker, {}).values())
    for n in (n for n in range(w.nthreads) if n not in used):  # a thread that ran nothing is an idle lane
        busy[lanes.name(worker, n)] = 0.0
    names = sorted(busy, key=lambda name: int(name.rsplit(" ", 1)[1]))
    wall = max(report.wall_s, 0.0)
    return ("Load per thread (seconds)", names, [busy[n] for n in names], [max(0.0, wall - busy[n]) for n in names])


def _load_plot(report: Any, record: Any, lanes: _Lanes) -> Any:
    from bokeh.models import ColumnDataSource, DataRange1d, FactorRange
    from bokeh.plotting import figure

    title, names, busy, idle = _load_bars(report, record, lanes)
    load = figure(title=title, x_range=FactorRange(factors=names or ["-"]), y_range=DataRange1d(start=0), height=340,
                  width=490, tools="save", y_axis_label="seconds")
    load.vbar_stack(["busy", "idle"], x="lane", width=0.7, color=["#1f77b4", "#d3d3d3"], legend_label=["busy", "idle"],
                    source=ColumnDataSource({"lane": names, "busy": busy, "idle": idle}))
    load.add_layout(load.legend[0], "right")  # beside the bars, not over them
    load.xaxis.major_label_orientation = 0.6 if len(names) > 4 else 0.0
    return load


def _histogram(record: Any) -> Any:
    from bokeh.models import DataRange1d
    from bokeh.plotting import figure

    durations = np.array([max(t.duration, 1e-6) for t in record.tasks] or [1e-6]) * 1e3
    edges = np.logspace(np.log10(durations.min()), np.log10(durations.max() * 1.01 + 1e-9), 30)
    counts, edges = np.histogram(durations, bins=edges)
    hist = figure(title="Task durations (log scale)", x_axis_type="log", y_range=DataRange1d(start=0), height=340, width=490,
                  tools="save", x_axis_label="task duration (ms)", y_axis_label="tasks")
    hist.quad(top=counts, bottom=0, left=edges[:-1], right=edges[1:], color="#ff7f0e", line_color="white")
    return hist


def html_table(cls: str, head: tuple[str, ...] | None, rows: list[tuple[Any, ...]]) -> str:
    """An HTML table of class ``cls`` (``head`` None: no header row); cells escaped, numbers right-aligned."""
    def cell(c: Any) -> str:
        text = str(c)
        num = not isinstance(c, str) or text[:1].isdigit()
        return f"<td{' class=num' if num else ''}>{html.escape(text)}</td>"

    th = "" if head is None else "<thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr></thead>"
    body = "".join("<tr>" + "".join(cell(c) for c in r) + "</tr>" for r in rows)
    return f"<table class='{cls}'>{th}<tbody>{body}</tbody></table>"


TABLE_CSS = ("<style>table{border-collapse:collapse;font:13px sans-serif;margin:4px 0 12px}"
             "th,td{border-bottom:1px solid #ddd;padding:3px 8px;text-align:left}td.num{text-align:right;white-space:nowrap}"
             "th{background:#f4f4f4}td.bad{color:#c00;font-weight:bold}h3{margin:14px 0 4px;font:bold 15px sans-serif}</style>")


def _tables_div(report: Any) -> Any:
    """The numbers behind the plots: per-group and per-worker statistics."""
    from bokeh.models.widgets import Div
    from dask.utils import format_bytes, format_time

    groups = [(g.group, g.count, format_time(g.total_s), format_time(g.p50_s), format_time(g.p95_s), format_time(g.max_s),
               format_bytes(g.bytes_p50), format_bytes(g.bytes_max)) for g in report.groups]
    workers = [(w.address, w.nthreads, w.tasks, format_time(w.busy_s), format_time(w.idle_s), f"{w.utilization:.0%}",
                format_bytes(w.peak_memory), format_bytes(w.memory_limit)) for w in report.workers]
    text = (TABLE_CSS + "<h3>Task groups</h3>"
            + html_table("groups", ("group", "tasks", "total", "p50", "p95", "max", "output p50", "output max"), groups)
            + "<h3>Workers</h3>"
            + html_table("workers", ("worker", "threads", "tasks", "busy", "idle", "utilization", "peak memory", "memory limit"),
                     workers))
    return Div(text=text, width=1000)


def profile_layout(report: Any, record: Any) -> Any:
    """Verdicts, task stream per worker thread, load per lane, duration histogram, then group and worker tables."""
    from bokeh.layouts import column, row

    lanes = _Lanes(record)
    return column(_verdicts_div(report), _task_stream(record, lanes), row(_load_plot(report, record, lanes), _histogram(record)),
                  _tables_div(report))


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
