"""A benchmark report as ``report.json``, ``report.md`` (a table for people) and ``report.html`` (Bokeh plots).

Beside :mod:`~openclaw_dask.diagnostics.terminal` and :mod:`~openclaw_dask.diagnostics.html`,
which render a profile. An ``invalid`` row's figures are not results: the table prints its reason
instead of them and the plots leave it out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from openclaw_dask.diagnostics.benchmark_report import Row, rows_of

__all__ = ["STEAL_NOTED", "BenchmarkReport", "against_first", "html_layout", "markdown", "render", "report_json"]

STEAL_NOTED = 0.02  # report.md names CPU steal from this share of a row's timed runs
_HEADER = ("| config | workload | ok | median ms [min-max] | GB/s | tasks/s | task p50/p95/p99 ms | vs serial | "
           "vs NumPy 1 thread | of bandwidth | flags | compare |")
_STEAL_NOTE = ("cpu-steal N%: for that share of the row's timed runs the hypervisor ran other guests on this "
               "machine's cores, so its times are inflated; compare rows measured together, or rerun.")


def render(report: Mapping[str, Any]) -> dict[str, str]:
    """The three texts of a report by kind (``json``, ``md``, ``html``), all made before any is written."""
    from openclaw_dask.diagnostics.html import page

    return {"json": report_json(report), "md": markdown(report), "html": page(html_layout(report), "openclaw benchmark")}


def report_json(report: Mapping[str, Any]) -> str:
    """``report.json``: the report object, indented."""
    return json.dumps(report, indent=2, default=str) + "\n"


def markdown(report: Mapping[str, Any]) -> str:
    """``report.md``: the rows as one table, the speedups over the first configuration, the verdicts."""
    m = report["machine"]
    rows = rows_of(report)
    lines = [
        f"# openclaw benchmark ({report['suite']} suite)",
        "",
        (f"{report['created']}; {m['cpu_count']} cores, {m['memory_bytes'] / 2**30:.1f} GiB; memory bandwidth "
         f"{m['bandwidth_gbps_1_thread']:.1f} GB/s (1 thread), {m['bandwidth_gbps_all_cores']:.1f} GB/s (all cores), "
         f"measured in this run. Medians of {report['repeat']} timed runs, min-max in brackets."),
        "",
        _HEADER,
        "|" + "---|" * 12,
    ]
    lines += [_table_line(r) for r in rows]
    if any(_stolen(r) for r in rows):
        lines += ["", _STEAL_NOTE]
    lines += against_first(rows)
    verdicts = [(r.config, r.workload, v) for r in rows for v in r.verdicts]
    if verdicts:
        lines += ["", "## Verdicts", ""] + [f"- **{c} / {w}**: {v}" for c, w, v in verdicts]
    return "\n".join(lines) + "\n"


def _stolen(row: Row) -> bool:
    return (row.cpu_steal_share or 0) >= STEAL_NOTED


def _table_line(r: Row) -> str:
    ok = "yes" if r.ok else "**NO**"
    if r.invalid:  # its figures are not results: none is printed
        return f"| {r.config} | {r.workload} | {ok} | **invalid**: {r.invalid} | - | - | - | - | - | - | - | - |"
    lat = r.task_latency_s
    eff = f"{r.efficiency_vs_bandwidth:.0%}" if r.efficiency_vs_bandwidth is not None else "-"
    flags = list(r.flags) + ([f"cpu-steal {r.cpu_steal_share:.0%}"] if _stolen(r) else [])
    return (
        f"| {r.config} | {r.workload} | {ok} | {r.median_s * 1e3:.1f} "
        f"[{r.min_s * 1e3:.1f}-{r.max_s * 1e3:.1f}] | {r.gbps:.2f} | {r.tasks_per_s:.0f} | "
        f"{lat['p50'] * 1e3:.2f}/{lat['p95'] * 1e3:.2f}/{lat['p99'] * 1e3:.2f} | {r.speedup_vs_serial:.2f} | "
        f"{r.speedup_vs_numpy_1thread:.2f} | {eff} | {', '.join(flags) or '-'} | {_compare_text(r.compare or {})} |"
    )


def _compare_text(cmp: Mapping[str, Any]) -> str:
    if "ratio" in cmp:
        return f"{cmp['status']} ({cmp['ratio']:.2f}x, band {cmp['noise_band']:.0%})"
    return str(cmp.get("status", ""))


def against_first(rows: list[Row]) -> list[str]:
    """With two or more configurations: each one's speedup over the first, kernel by kernel (markdown lines)."""
    labels = list(dict.fromkeys(r.config for r in rows if r.config != "serial"))
    if len(labels) < 2 or any(r.speedup_vs_first is None for r in rows):
        return []
    table = {(r.workload, r.config): _speedup_cell(r) for r in rows}
    lines = ["", f"## Speedup over {labels[0]}", "", "| workload | " + " | ".join(labels[1:]) + " |",
             "|---|" + "---|" * (len(labels) - 1)]
    for workload in dict.fromkeys(r.workload for r in rows):
        lines.append(f"| {workload} | " + " | ".join(table[workload, c] for c in labels[1:]) + " |")
    return lines


def _speedup_cell(r: Row) -> str:
    return "invalid" if r.invalid else f"{r.speedup_vs_first:.2f}"


_PLOTS = (("ms", "Median time per run (ms, min-max whiskers)", True), ("gbps", "Throughput (GB/s)", False),
          ("speedup", "Speedup over the serial scheduler", False))


def html_layout(report: Mapping[str, Any]) -> Any:
    """``report.html``'s Bokeh layout: a heading, then median time, GB/s and speedup per workload and config."""
    from bokeh.layouts import column
    from bokeh.models.widgets import Div

    rows = [r for r in rows_of(report) if not r.invalid]  # an invalid row's figures are not results
    source = _plot_source(rows)
    m = report["machine"]
    head = Div(text=f"<h2>openclaw benchmark: {report['suite']} suite</h2><p>{report['created']}, "
                    f"{m['cpu_count']} cores, bandwidth {m['bandwidth_gbps_all_cores']:.1f} GB/s</p>")
    return column(head, *(_plot(source, field, title, log) for field, title, log in _PLOTS))


def _plot_source(rows: list[Row]) -> Any:
    from bokeh.models import ColumnDataSource

    from openclaw_dask.diagnostics.html import _palette

    colors = _palette(sorted({r.config for r in rows}))
    return ColumnDataSource({
        "x": [(r.workload, r.config) for r in rows],
        "ms": [r.median_s * 1e3 for r in rows],
        "lo": [r.min_s * 1e3 for r in rows],
        "hi": [r.max_s * 1e3 for r in rows],
        "gbps": [r.gbps for r in rows],
        "speedup": [r.speedup_vs_serial for r in rows],
        "flags": [", ".join(r.flags) for r in rows],
        "color": [colors[r.config] for r in rows],
    })


def _plot(source: Any, field: str, title: str, log: bool) -> Any:
    from bokeh.models import FactorRange, HoverTool
    from bokeh.models.annotations import Whisker
    from bokeh.plotting import figure

    f = figure(x_range=FactorRange(*source.data["x"]), height=340, width=1100, title=title,
               y_axis_type="log" if log else "linear", tools="save", toolbar_location="right")
    floor = min(source.data["lo"], default=2.0) / 2 if log else 0  # log bars start just below the fastest run
    f.vbar(x="x", top=field, bottom=floor, width=0.8, color="color", source=source)
    if field == "ms":
        f.add_layout(Whisker(source=source, base="x", upper="hi", lower="lo"))
    f.add_tools(HoverTool(tooltips=[("run", "@x"), (field, f"@{field}{{0.00}}"), ("flags", "@flags")]))
    f.xaxis.major_label_orientation = 1.0
    return f


class BenchmarkReport(dict[str, Any]):
    """A benchmark report: the ``report.json`` object, shown with its plots when a notebook cell ends with it.

    Its ``"rows"`` are the JSON objects of :class:`Row` (:func:`rows_of` gives them back as rows).
    """

    def _repr_html_(self) -> str:
        from openclaw_dask.diagnostics.html import notebook_html

        return notebook_html(html_layout(self), "openclaw benchmark")
