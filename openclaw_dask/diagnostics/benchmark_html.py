"""``report.html`` of a benchmark: the whole report a reader can be sent, as one self-contained page.

The machine it ran on, what differs between the configurations, the results table (with its
``ok`` column), the speedups over the first configuration and the verdicts, as ``report.md``
gives them; then median time (min-max whiskers), GB/s and speedup over serial per workload
and configuration. Each configuration keeps its colour from report to report: the colour is
derived from its label, not its place in the report.
"""

from __future__ import annotations

import html
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from openclaw_dask.diagnostics.benchmark_report import Row, rows_of
from openclaw_dask.diagnostics.html import TABLE_CSS, html_table

__all__ = ["Tables", "config_colors", "html_layout"]

_PLOTS = (("ms", "Median time per run (ms, min-max whiskers)", "ms per run"), ("gbps", "Throughput (GB/s)", "GB/s"),
          ("speedup", "Speedup over the serial scheduler", "x serial"))
_LOG_TICKS = [m * 10.0**e for e in range(-4, 8) for m in (1, 2, 5)]  # 1-2-5: evenly spaced on a log axis


def config_colors(labels: list[str]) -> dict[str, str]:
    """A colour per configuration label, from a hash of the label (the same label, the same colour, in any report).

    Two labels of one report that hash to the same colour: the later one (in sorted order) takes the next free one.
    """
    from bokeh.palettes import Category20_20

    palette = list(Category20_20[::2]) + list(Category20_20[1::2])  # the ten strong colours, then their light pairs
    out: dict[str, str] = {}
    for label in sorted(set(labels)):
        i = zlib.crc32(label.encode()) % len(palette)
        for step in range(len(palette)):  # the first free colour from the label's own
            color = palette[(i + step) % len(palette)]
            if color not in out.values():
                break
        out[label] = color
    return out


@dataclass(frozen=True)
class Tables:
    """What ``report.md`` prints, as :mod:`~openclaw_dask.diagnostics.benchmark_render` makes it.

    ``cells``: each row's cells under ``columns``; ``steal_note``: the note on CPU steal, where a
    row needs it; ``speedups``: the configurations (the first is the reference) and, per
    workload, its name and the others' speedups, or None.
    """

    columns: tuple[str, ...]
    cells: list[list[str]]
    steal_note: str | None
    speedups: tuple[list[str], list[list[str]]] | None


def html_layout(report: Mapping[str, Any], tables: Tables) -> Any:
    """``report.html``'s Bokeh layout: the report's text and tables in one block, then the three plots."""
    from bokeh.layouts import column
    from bokeh.models.widgets import Div

    rows = rows_of(report)
    plotted = [r for r in rows if not r.invalid]  # an invalid row's figures are not results
    source = _plot_source(plotted)
    text = (TABLE_CSS + _heading(report) + _machine(report) + _config_diff(rows) + _results(tables)
            + _verdicts(rows))
    return column(Div(text=text, width=1150), *(_plot(source, field, title, label) for field, title, label in _PLOTS))


def _heading(report: Mapping[str, Any]) -> str:
    command = f"<p><code>{html.escape(report['command'])}</code></p>" if report.get("command") else ""
    return (f"<h2>openclaw benchmark: {html.escape(str(report['suite']))} suite</h2>"
            f"<p>{html.escape(str(report['created']))}; medians of {report['repeat']} timed runs per row, "
            f"min-max in brackets.</p>{command}")


def _machine(report: Mapping[str, Any]) -> str:
    """The machine block: CPU, cores, memory, the bandwidth measured in this run, platform and versions."""
    m = report["machine"]
    versions = ", ".join(f"{k} {v}" for k, v in (report.get("versions") or {}).items())
    items = [
        ("CPU", m.get("cpu") or "not reported"),
        ("cores", str(m["cpu_count"])),
        ("memory", f"{m['memory_bytes'] / 2**30:.1f} GiB"),
        ("memory bandwidth (measured)",
         f"{m['bandwidth_gbps_1_thread']:.1f} GB/s on 1 thread, {m['bandwidth_gbps_all_cores']:.1f} GB/s on all cores"),
        ("platform", f"{m.get('platform', '?')}, Python {m.get('python', '?')}"),
        ("versions", versions or "not reported"),
    ]
    return "<h3>Machine</h3>" + html_table("machine", None, items)


def _config_diff(rows: list[Row]) -> str:
    """The settings that differ between the configurations, one row per configuration; the rest in one line."""
    configs: dict[str, Row] = {}
    for r in rows:
        configs.setdefault(r.config, r)
    keys = sorted({k for r in configs.values() for k in r.settings})
    varying = [k for k in keys if len({repr(r.settings.get(k)) for r in configs.values()}) > 1]
    table = [(label, r.workers, r.threads, *(_setting(r.settings, k) for k in varying)) for label, r in configs.items()]
    same = [f"{k}={_setting(next(iter(configs.values())).settings, k)}" for k in keys if k not in varying]
    common = f"<p>Common to all: {html.escape(', '.join(same))}</p>" if same and configs else ""
    return ("<h3>Configurations (what differs)</h3>"
            + html_table("configs", ("config", "workers", "threads", *varying), table) + common)


def _setting(settings: Mapping[str, Any], key: str) -> str:
    """A setting as the YAML file would say it (``true``, ``1MiB``)."""
    from openclaw_dask.config.schema import key_by_name
    from openclaw_dask.config.values import as_written

    if key not in settings:
        return "(default)"
    value, found = settings[key], key_by_name(key)
    unit = found.unit if found is not None else None
    if isinstance(value, str) and value.isdigit():  # report.json keeps a chunk size in bytes as a digit string
        value, unit = int(value), "bytes"
    return as_written(value, unit)


def _results(tables: Tables) -> str:
    """The results table (with its ``ok`` column), the steal note and the speedups over the first configuration."""
    table = html_table("results", tables.columns, [tuple(c or "-" for c in cells) for cells in tables.cells])
    table = table.replace("<td>NO</td>", "<td class=bad>NO</td>")
    steal = f"<p>{html.escape(tables.steal_note)}</p>" if tables.steal_note else ""
    if tables.speedups is not None:
        labels, cells = tables.speedups
        steal += (f"<h3>Speedup over {html.escape(labels[0])}</h3>"
                  + html_table("speedups", ("workload", *labels[1:]), [tuple(c) for c in cells]))
    return "<h3>Results</h3>" + table + steal


def _verdicts(rows: list[Row]) -> str:
    items = [(r.config, r.workload, v) for r in rows for v in r.verdicts]
    if not items:
        return "<h3>Verdicts</h3><ul class='verdicts'><li>none: no row has a problem the profiler names</li></ul>"
    lis = "".join(f"<li><b>{html.escape(c)} / {html.escape(w)}</b>: {html.escape(v)}</li>" for c, w, v in items)
    return f"<h3>Verdicts</h3><ul class='verdicts'>{lis}</ul>"


def _plot_source(rows: list[Row]) -> Any:
    from bokeh.models import ColumnDataSource

    colors = config_colors([r.config for r in rows])
    return ColumnDataSource({
        "x": [(r.workload, r.config) for r in rows],
        "ms": [r.median_s * 1e3 for r in rows],
        "lo": [r.min_s * 1e3 for r in rows],
        "hi": [r.max_s * 1e3 for r in rows],
        "gbps": [r.gbps for r in rows],
        "speedup": [r.speedup_vs_serial or 0.0 for r in rows],
        "flags": [", ".join(r.flags) for r in rows],
        "color": [colors[r.config] for r in rows],
    })


def _y_range(source: Any, field: str) -> tuple[float, float]:
    """A y range that holds the bars and, for times, the whiskers, with room above them."""
    if field == "ms":
        lo, hi = min(source.data["lo"], default=1.0), max(source.data["hi"], default=10.0)
        return lo / 2, hi * 1.6  # a log axis: at least a factor 3, so 1-2-5 ticks fall inside
    return 0.0, max(source.data[field], default=1.0) * 1.12 or 1.0


def _plot(source: Any, field: str, title: str, label: str) -> Any:
    from bokeh.models import FactorRange, FixedTicker, HoverTool, Range1d
    from bokeh.models.annotations import Span, Whisker
    from bokeh.plotting import figure

    log = field == "ms"
    start, end = _y_range(source, field)
    f = figure(x_range=FactorRange(*source.data["x"]), y_range=Range1d(start=start, end=end), height=340, width=1100, title=title,
               y_axis_type="log" if log else "linear", y_axis_label=label, tools="save", toolbar_location="right")
    f.vbar(x="x", top=field, bottom=start, width=0.8, color="color", source=source)
    if log:
        f.add_layout(Whisker(source=source, base="x", upper="hi", lower="lo"))
        f.yaxis.ticker = FixedTicker(ticks=[t for t in _LOG_TICKS if start <= t <= end])
    if field == "speedup":
        f.add_layout(Span(location=1.0, dimension="width", line_dash="dashed", line_color="#555"))
    f.add_tools(HoverTool(tooltips=[("run", "@x"), (field, f"@{field}{{0.00}}"), ("flags", "@flags")]))
    f.xaxis.major_label_orientation = 1.0
    return f
