"""A benchmark report as ``report.json``, ``report.md`` (a table for people) and ``report.html`` (Bokeh plots).

Beside :mod:`~openclaw_dask.diagnostics.terminal` and :mod:`~openclaw_dask.diagnostics.html`,
which render a profile. An ``invalid`` row's figures are not results: the table prints its reason
instead of them and the plots leave it out.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from openclaw_dask.cluster.paths import SERIAL, WORKERS
from openclaw_dask.diagnostics.benchmark_report import Row, rows_of
from openclaw_dask.diagnostics.stats import compare_runs

__all__ = ["COLUMNS", "STEAL_NOTE", "STEAL_NOTED", "BenchmarkReport", "against_first", "html_layout", "machine_line", "markdown",
           "render", "report_json", "row_cells", "speedup_table", "stolen"]

STEAL_NOTED = 0.02  # report.md names CPU steal from this share of a row's timed runs
COLUMNS = ("config", "workload", "ok", "median ms [min-max]", "GB/s", "tasks/s", "task p50/p95/p99 ms", "vs serial",
           "vs NumPy 1 thread", "of bandwidth", "flags", "compare")
_HEADER = "| " + " | ".join(COLUMNS) + " |"
STEAL_NOTE = ("cpu-steal N%: for that share of the row's timed runs the hypervisor ran other guests on this "
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
    rows = rows_of(report)
    lines = [
        f"# openclaw benchmark ({report['suite']} suite)",
        "",
        machine_line(report),
        "",
        _HEADER,
        "|" + "---|" * 12,
    ]
    lines += [_table_line(r) for r in rows]
    if any(stolen(r) for r in rows):
        lines += ["", STEAL_NOTE]
    lines += against_first(rows)
    verdicts = [(r.config, r.workload, v) for r in rows for v in r.verdicts]
    if verdicts:
        lines += ["", "## Verdicts", ""] + [f"- **{c} / {w}**: {v}" for c, w, v in verdicts]
    return "\n".join(lines) + "\n"


def machine_line(report: Mapping[str, Any]) -> str:
    """The sentence under the title: when, the machine, its measured bandwidth, how many runs."""
    m = report["machine"]
    return (f"{report['created']}; {m['cpu_count']} cores, {m['memory_bytes'] / 2**30:.1f} GiB; memory bandwidth "
            f"{m['bandwidth_gbps_1_thread']:.1f} GB/s (1 thread), {m['bandwidth_gbps_all_cores']:.1f} GB/s (all cores), "
            f"measured in this run. Medians of {report['repeat']} timed runs, min-max in brackets.")


def stolen(row: Row) -> bool:
    """Whether the row's times were inflated by CPU steal enough to say so."""
    return (row.cpu_steal_share or 0) >= STEAL_NOTED


def _table_line(r: Row) -> str:
    return "| " + " | ".join(row_cells(r, lambda s: f"**{s}**")) + " |"


def row_cells(r: Row, strong: Callable[[str], str] = str) -> list[str]:
    """A row's cells under :data:`COLUMNS` (``strong`` marks ``NO`` and ``invalid``); an invalid row's figures are ``-``."""
    ok = "yes" if r.ok else strong("NO")
    if r.invalid:  # its figures are not results: none is printed
        return [r.config, r.workload, ok, f"{strong('invalid')}: {r.invalid}"] + ["-"] * (len(COLUMNS) - 4)
    lat = r.task_latency_s
    eff = f"{r.efficiency_vs_bandwidth:.0%}" if r.efficiency_vs_bandwidth is not None else "-"
    flags = list(r.flags) + ([f"cpu-steal {r.cpu_steal_share:.0%}"] if stolen(r) else []) \
        + (["one thread (measured faster)"] if r.path and r.path.startswith(SERIAL) else []) \
        + (["straight to the workers"] if r.path and r.path.startswith(WORKERS) else [])
    return [r.config, r.workload, ok, f"{r.median_s * 1e3:.1f} [{r.min_s * 1e3:.1f}-{r.max_s * 1e3:.1f}]", f"{r.gbps:.2f}",
            f"{r.tasks_per_s:.0f}", f"{lat['p50'] * 1e3:.2f}/{lat['p95'] * 1e3:.2f}/{lat['p99'] * 1e3:.2f}",
            f"{r.speedup_vs_serial:.2f}", f"{r.speedup_vs_numpy_1thread:.2f}", eff, ", ".join(flags) or "-",
            _compare_text(r.compare or {})]


def _compare_text(cmp: Mapping[str, Any]) -> str:
    """``slower (1.50x, p=0.0079, 5 vs 5 runs)``: the verdict of :func:`~.benchmark_compare.compare` and its figures."""
    if "ratio" not in cmp:
        return str(cmp.get("status", ""))
    if "runs" not in cmp:  # a report of a version before the test: its noise band decided
        return f"{cmp['status']} ({cmp['ratio']:.2f}x, band {cmp.get('noise_band', 0):.0%})"
    evidence = f"p={cmp['p_value']:.2g}" if cmp["p_value"] is not None else "too few runs"
    return f"{cmp['status']} ({cmp['ratio']:.2f}x, {evidence}, {cmp['runs'][0]} vs {cmp['runs'][1]} runs)"


def against_first(rows: list[Row]) -> list[str]:
    """With two or more configurations: each one's speedup over the first, kernel by kernel (markdown lines)."""
    speedups = speedup_table(rows)
    if speedups is None:
        return []
    labels, cells = speedups
    lines = ["", f"## Speedup over {labels[0]}", "", "| workload | " + " | ".join(labels[1:]) + " |",
             "|---|" + "---|" * (len(labels) - 1)]
    lines += ["| " + " | ".join(line) + " |" for line in cells]
    return lines


def speedup_table(rows: list[Row]) -> tuple[list[str], list[list[str]]] | None:
    """The configurations (the first is the reference) and, per workload, its name and the others' speedups; None under two."""
    labels = list(dict.fromkeys(r.config for r in rows if r.config != "serial"))
    if len(labels) < 2 or any(r.speedup_vs_first is None for r in rows):
        return None
    firsts = {r.workload: r for r in rows if r.config == labels[0]}
    table = {(r.workload, r.config): _speedup_cell(r, firsts.get(r.workload)) for r in rows}
    return labels, [[w] + [table[w, c] for c in labels[1:]] for w in dict.fromkeys(r.workload for r in rows)]


def _speedup_cell(r: Row, first: Row | None) -> str:
    """``1.41 (p=0.0079)``; ``1.03 (same, p=0.42)`` below the rule of :func:`~.stats.compare_runs`; or too few runs."""
    if r.invalid:
        return "invalid"
    test = compare_runs(r.times_s, first.times_s if first else ())
    if test.significant:
        return f"{r.speedup_vs_first:.2f} (p={test.p:.2g})"
    return f"{r.speedup_vs_first:.2f} ({'too few runs' if test.p is None else f'same, p={test.p:.2g}'})"


def html_layout(report: Mapping[str, Any]) -> Any:
    """``report.html``'s Bokeh layout (:func:`openclaw_dask.diagnostics.benchmark_html.html_layout`), with report.md's tables."""
    from openclaw_dask.diagnostics.benchmark_html import Tables
    from openclaw_dask.diagnostics.benchmark_html import html_layout as layout

    rows = rows_of(report)
    steal = STEAL_NOTE if any(stolen(r) for r in rows) else None
    return layout(report, Tables(COLUMNS, [row_cells(r) for r in rows], steal, speedup_table(rows)))


class BenchmarkReport(dict[str, Any]):
    """A benchmark report: the ``report.json`` object, shown with its plots when a notebook cell ends with it.

    Its ``"rows"`` are the JSON objects of :class:`Row` (:func:`rows_of` gives them back as rows).
    """

    def _repr_html_(self) -> str:
        from openclaw_dask.diagnostics.html import notebook_html

        return notebook_html(html_layout(self), "openclaw benchmark")

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str] | None:
        from openclaw_dask.diagnostics.notebook import notebook_bundle  # in a kernel: BokehJS once, not per plot

        return notebook_bundle(lambda: html_layout(self), include, exclude)
