"""``openclaw benchmark``: compare configurations on a standard suite, with NumPy as referee.

For every configuration and kernel: build the inputs on the workers (not timed), two
warm-ups, then ``repeat`` timed runs; the result is checked against NumPy. Rows report
the median with min-max, GB/s, tasks/s, per-task latency percentiles (task stream),
speedup over the serial scheduler and over NumPy on one thread, efficiency against
the memory bandwidth measured at the start of the same run, and the profiler's
verdicts for the timed runs. The report's schema is in ``docs/benchmark-report.md``.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import platform
import statistics
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from openclaw_dask.loading import load_checked as load_config  # checked against its backend up front: a typo costs no run
from openclaw_dask.config import Config
from openclaw_dask.config.model import plain as _plain
from openclaw_dask.errors import ConfigError, ResultMismatch, RunError
from openclaw_dask.files import check_folder, write_file
from openclaw_dask.workloads.limits import STREAMED, hosts, judged, measure_bandwidth

__all__ = [
    "SCHEMA",
    "BenchmarkReport",
    "Configuration",
    "Plan",
    "check_report",
    "compare",
    "configurations",
    "load_report",
    "measure_bandwidth",
    "prepare",
    "regressions",
    "run_benchmark",
    "write_reports",
]

SCHEMA = "openclaw-benchmark/1"
REPORT_FILES = {"json": "report.json", "md": "report.md", "html": "report.html"}  # what --out gets
MIN_NOISE = 0.05  # rows within 5% (or their own spread, if larger) count as the same
STEAL_NOTED = 0.02  # report.md names CPU steal from this share of a row's timed runs


@dataclass(frozen=True)
class Configuration:
    """A labelled configuration to benchmark."""

    label: str
    config: Config


def configurations(
    files: Iterable[str], sweeps: Iterable[str], base_overrides: dict[str, Any], *, config_path: str | None = None
) -> list[Configuration]:
    """Expand config files and ``KEY=v1,v2`` sweeps (cartesian product) into configurations.

    Without files the base configuration (``config_path`` or the usual discovery) is swept.
    """
    from openclaw_dask.config import parse_assignment

    axes: list[tuple[str, list[Any]]] = []
    for sweep in sweeps:
        key, raw = sweep.split("=", 1) if "=" in sweep else (sweep, "")
        values = [parse_assignment(f"{key}={v}")[1] for v in raw.split(",") if v.strip()]
        if not values:
            raise ConfigError(f"--sweep {sweep!r}: expected KEY=V1,V2,..., e.g. --sweep parallel.task_chunk_size=1MiB,64MiB")
        axes.append((key.strip(), values))
    sources: list[str | None] = list(files) or [config_path]
    out = []
    for source in sources:
        for combo in itertools.product(*(v for _, v in axes)) if axes else [()]:
            overrides = {**base_overrides, **{k: v for (k, _), v in zip(axes, combo)}}
            parts = [Path(source).stem] if files and source else []
            parts += [f"{k.rsplit('.', 1)[-1]}={v}" for (k, _), v in zip(axes, combo)]
            out.append(Configuration(", ".join(parts) or "default", load_config(source, overrides, override_label="--sweep/--set")))
    return out


@dataclass(frozen=True)
class Plan:
    """A benchmark's checked inputs: what :func:`prepare` returns and :func:`run_benchmark` takes."""

    configs: list[Configuration]
    base_overrides: dict[str, Any]
    out_dir: Path
    baseline: dict[str, Any] | None = None


def prepare(
    files: Iterable[str] = (),
    sweeps: Iterable[str] = (),
    base_overrides: Mapping[str, Any] | None = None,
    *,
    config_path: str | None = None,
    baseline: str | None = None,
    out_dir: str | Path = "benchmark-report",
    suite: str = "quick",
    force: bool = False,
) -> Plan:
    """Check everything a benchmark needs before the first timed run, so a typo costs nothing.

    Parameters
    ----------
    files, sweeps, base_overrides, config_path
        As for :func:`configurations`.
    baseline
        A previous ``report.json`` to compare against (read and checked now).
    out_dir
        The report folder, created now; its report files must not exist yet, unless ``force``
        (and neither it nor they may be a symbolic link).
    force
        Allow replacing the report files of an earlier run in ``out_dir``.

    Raises
    ------
    ConfigError
        A config file is missing, a sweep or config does not parse, the baseline is not a
        report of the same suite, or ``out_dir`` cannot be created.
    """
    files = list(files)
    for f in files:
        if not Path(f).is_file():
            raise ConfigError(f"--configs {f}: no such file")
    base = dict(base_overrides or {})
    confs = configurations(files, sweeps, base, config_path=config_path)
    old = load_report(baseline, suite=suite) if baseline else None
    check_folder(out_dir, REPORT_FILES.values(), force=force)
    try:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"--out {out_dir}: cannot create the folder ({e.strerror})") from None
    return Plan(confs, base, Path(out_dir), old)


def check_report(report: dict[str, Any], fail_pct: float | None = None) -> None:
    """Raise when a row disagrees with NumPy, or (with ``fail_pct``) regressed beyond it.

    Raises
    ------
    ResultMismatch
        A row computed a wrong answer.
    RunError
        A row is faster than this machine's memory allows (``invalid``), or slower than the
        baseline by more than ``fail_pct`` percent.
    """
    bad = [r for r in report["rows"] if not r["ok"]]
    if bad:
        raise ResultMismatch(f"{len(bad)} row(s) disagree with NumPy: "
                             + "; ".join(f"{r['config']}/{r['workload']}: {r.get('check', 'DIFFERENT')}" for r in bad))
    invalid = [r for r in report["rows"] if r.get("invalid")]
    if invalid:
        raise RunError(f"{len(invalid)} row(s) are faster than this machine's memory allows, so not results: "
                       + "; ".join(f"{r['config']}/{r['workload']}: {r['invalid']}" for r in invalid))
    if fail_pct is not None:
        slower = regressions(report, fail_pct)
        if slower:
            raise RunError(f"{len(slower)} row(s) regressed by more than {fail_pct:g}%: " + ", ".join(
                f"{r['config']}/{r['workload']} {r['compare']['ratio']:.2f}x" for r in slower))


def _cpu_steal_s() -> float | None:
    """CPU seconds the hypervisor gave other guests, per core of this machine, since boot (None where the OS does not say)."""
    import psutil

    steal = getattr(psutil.cpu_times(), "steal", None)  # summed over the machine's cores
    return None if steal is None else steal / (psutil.cpu_count() or 1)


def _percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": 0.0, "p95": 0.0, "p99": 0.0}
    return {f"p{q}": float(np.percentile(values, q)) for q in (50, 95, 99)}


def _run_kernel(session: Any, name: str, size: int, repeat: int) -> dict[str, Any]:
    from openclaw_dask.diagnostics.analysis import analyze
    from openclaw_dask.diagnostics.collect import collect
    from openclaw_dask.workloads.suite import KERNELS

    prepared = KERNELS[name](session, size)
    try:
        result = prepared.execute(session)  # warm-up, and the answer to check
        # A second warm-up while that answer is held: memory grows to what a timed run needs beside it
        # (else the first timed run pays the page faults, seen as a 2-4x outlier on big kernels).
        prepared.execute(session)
        stolen = _cpu_steal_s()
        with collect(session) as record:
            _, times = prepared.timed(session, repeat)
        stolen = None if stolen is None else _cpu_steal_s() - stolen
        reference, numpy_times = prepared.reference(session, runs=max(1, min(repeat, 3)))
        verdict = prepared.check(session, result, reference)  # within the kernel's error bound (workloads.accuracy)
    finally:
        prepared.close()
    median = statistics.median(times)
    n_tasks = len(record.tasks) / repeat  # tasks that ran per run (inputs already in memory are not tasks)
    first = prepared.inputs[0] if prepared.inputs else None
    chunk = first.dtype.itemsize * math.prod(max(c) for c in first.chunks) if first is not None else None
    report = analyze(record, chunk_hint=chunk)
    return {
        "workload": name,
        "ok": verdict.ok,
        "check": verdict.text(),
        "median_s": median,
        "min_s": min(times),
        "max_s": max(times),
        "times_s": times,
        "nbytes": prepared.nbytes,
        "gbps": prepared.nbytes / median / 1e9,
        "gflops": prepared.flops / median / 1e9,
        "tasks": n_tasks,
        "tasks_per_s": n_tasks / median,
        "task_latency_s": _percentiles([t.duration for t in record.tasks]),
        "numpy_1thread_s": statistics.median(numpy_times),
        "speedup_vs_numpy_1thread": statistics.median(numpy_times) / median,
        "cpu_steal_share": None if stolen is None else stolen / sum(times),
        "flags": sorted(report.kinds()),
        "verdicts": [f"{v.kind}: {v.summary}; fix: {v.fix}" for v in report.verdicts],
    }


class BenchmarkReport(dict):
    """A benchmark report: the ``report.json`` object, shown with its plots when a notebook cell ends with it."""

    def _repr_html_(self) -> str:
        from openclaw_dask.diagnostics.html import notebook_html

        return notebook_html(_html_layout(self), "openclaw benchmark")


def run_benchmark(
    configs: list[Configuration],
    *,
    suite: str = "quick",
    repeat: int = 5,
    progress: Callable[[str], None] | None = None,
    base_overrides: dict[str, Any] | None = None,
) -> BenchmarkReport:
    """Run ``suite`` for each configuration and for the serial baseline; return the report dict.

    The serial baseline is the first configuration's file with ``base_overrides`` and
    ``parallel.enabled: false``.
    """
    from openclaw_dask.session import Session
    from openclaw_dask.workloads.suite import SUITES

    if suite not in SUITES:
        raise ConfigError(f"--suite {suite}: unknown suite; use one of {', '.join(SUITES)}")
    size, kernels = SUITES[suite]
    say = progress or (lambda message: None)
    say("measuring memory bandwidth")
    bandwidth = measure_bandwidth(min(size, STREAMED))  # over the suite's input size: its caches count
    serial = Configuration("serial", load_config(configs[0].config.path, {**(base_overrides or {}), "parallel.enabled": False}))
    rows = []
    labelled = _unique_labels([serial, *configs])
    for conf in labelled:
        with Session(conf.config).start() as s:
            for name in kernels:
                say(f"{conf.label}: {name}")
                row = _run_kernel(s, name, size, repeat)
                row["config"] = conf.label
                row["settings"] = {k: _plain(v) for k, v in conf.config.items() if conf.config.sources.get(k) != "default"}
                row["settings"]["parallel.enabled"] = conf.config.parallel.enabled
                row["workers"] = len(s.workers()) or 1
                row["threads"] = s.slots
                limit, row["invalid"] = judged(row["gbps"], bandwidth["all_cores"] * hosts(s),
                                               lambda: measure_bandwidth(min(size, STREAMED))["all_cores"] * hosts(s))
                row["bandwidth_gbps"] = limit
                row["efficiency_vs_bandwidth"] = row["gbps"] / limit if row["nbytes"] else None
                rows.append(row)
    by_kernel = {r["workload"]: r["median_s"] for r in rows if r["config"] == "serial"}
    first = {r["workload"]: r["median_s"] for r in rows if r["config"] == labelled[1].label}
    for r in rows:
        r["speedup_vs_serial"] = by_kernel[r["workload"]] / r["median_s"]
        r["speedup_vs_first"] = first[r["workload"]] / r["median_s"]  # vs the first configuration given
    return BenchmarkReport({
        "schema": SCHEMA,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["openclaw", *sys.argv[1:]]) if sys.argv and sys.argv[0].endswith("openclaw") else None,
        "suite": suite,
        "input_bytes": size,
        "repeat": repeat,
        **_environment(bandwidth),
        "rows": rows,
    })


def _environment(bandwidth: dict[str, float]) -> dict[str, Any]:
    """The report's ``machine`` and ``versions``: what a reader needs to compare two reports."""
    import dask
    import distributed

    import openclaw_dask

    return {
        "machine": {
            "cpu_count": os.cpu_count(),
            "memory_bytes": _total_memory(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "bandwidth_gbps_1_thread": bandwidth["1_thread"],
            "bandwidth_gbps_all_cores": bandwidth["all_cores"],
        },
        "versions": {
            "openclaw_dask": openclaw_dask.__version__,
            "dask": dask.__version__,
            "distributed": distributed.__version__,
            "numpy": np.__version__,
        },
    }


def _unique_labels(configs: list[Configuration]) -> list[Configuration]:
    """``x``, ``x#2``, ...: rows are matched by label, so no two may share one."""
    seen: dict[str, int] = {}
    out = []
    for c in configs:
        seen[c.label] = seen.get(c.label, 0) + 1
        out.append(c if seen[c.label] == 1 else Configuration(f"{c.label}#{seen[c.label]}", c.config))
    return out


def _total_memory() -> int:
    import psutil

    return int(psutil.virtual_memory().total)


def compare(report: dict[str, Any], baseline: dict[str, Any]) -> list[dict[str, Any]]:
    """Mark each row faster/slower/same than the baseline row of the same config and workload.

    The noise band is the larger of 5% and each row's own relative spread (max-min over median).
    Rows are annotated in place under ``"compare"``; the annotations are returned.
    """
    if baseline.get("schema") != SCHEMA:
        raise ConfigError(f"--compare: not an openclaw benchmark report (schema {baseline.get('schema')!r}, expected {SCHEMA})")
    old = {(r["config"], r["workload"]): r for r in baseline["rows"]}
    out = []
    for r in report["rows"]:
        b = old.get((r["config"], r["workload"]))
        if b is None:
            r["compare"] = {"status": "new"}
        else:
            noise = max(MIN_NOISE, _spread(r), _spread(b))
            ratio = r["median_s"] / b["median_s"]
            status = "slower" if ratio > 1 + noise else "faster" if ratio < 1 / (1 + noise) else "same"
            r["compare"] = {"status": status, "ratio": ratio, "noise_band": noise, "baseline_median_s": b["median_s"]}
        out.append(r["compare"])
    return out


def _spread(row: dict[str, Any]) -> float:
    return (row["max_s"] - row["min_s"]) / row["median_s"]


def regressions(report: dict[str, Any], pct: float) -> list[dict[str, Any]]:
    """Rows slower than their baseline beyond the noise band and by more than ``pct`` percent."""
    return [
        r for r in report["rows"]
        if r.get("compare", {}).get("status") == "slower" and (r["compare"]["ratio"] - 1) * 100 > pct
    ]


def _markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [
        f"# openclaw benchmark ({report['suite']} suite)",
        "",
        (f"{report['created']}; {m['cpu_count']} cores, {m['memory_bytes'] / 2**30:.1f} GiB; memory bandwidth "
        f"{m['bandwidth_gbps_1_thread']:.1f} GB/s (1 thread), {m['bandwidth_gbps_all_cores']:.1f} GB/s (all cores), "
        f"measured in this run. Medians of {report['repeat']} timed runs, min-max in brackets."),
        "",
        "| config | workload | ok | median ms [min-max] | GB/s | tasks/s | task p50/p95/p99 ms | vs serial | vs NumPy 1 thread | of bandwidth | flags | compare |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["rows"]:
        lat = r["task_latency_s"]
        cmp = r.get("compare", {})
        cmp_text = f"{cmp['status']} ({cmp['ratio']:.2f}x, band {cmp['noise_band']:.0%})" if "ratio" in cmp else cmp.get("status", "")
        eff = f"{r['efficiency_vs_bandwidth']:.0%}" if r["efficiency_vs_bandwidth"] is not None else "-"
        flags = r["flags"] + ([f"cpu-steal {r['cpu_steal_share']:.0%}"] if (r.get("cpu_steal_share") or 0) >= STEAL_NOTED else [])
        if r.get("invalid"):  # its figures are not results: none is printed
            lines.append(f"| {r['config']} | {r['workload']} | {'yes' if r['ok'] else '**NO**'} | **invalid**: {r['invalid']} "
                         "| - | - | - | - | - | - | - | - |")
            continue
        lines.append(
            f"| {r['config']} | {r['workload']} | {'yes' if r['ok'] else '**NO**'} | {r['median_s'] * 1e3:.1f} "
            f"[{r['min_s'] * 1e3:.1f}-{r['max_s'] * 1e3:.1f}] | {r['gbps']:.2f} | {r['tasks_per_s']:.0f} | "
            f"{lat['p50'] * 1e3:.2f}/{lat['p95'] * 1e3:.2f}/{lat['p99'] * 1e3:.2f} | {r['speedup_vs_serial']:.2f} | "
            f"{r['speedup_vs_numpy_1thread']:.2f} | {eff} | {', '.join(flags) or '-'} | {cmp_text} |"
        )
    if any((r.get("cpu_steal_share") or 0) >= STEAL_NOTED for r in report["rows"]):
        lines += ["", ("cpu-steal N%: for that share of the row's timed runs the hypervisor ran other guests on this "
                       "machine's cores, so its times are inflated; compare rows measured together, or rerun.")]
    lines += _against_first(report["rows"])
    verdicts = [(r["config"], r["workload"], v) for r in report["rows"] for v in r["verdicts"]]
    if verdicts:
        lines += ["", "## Verdicts", ""] + [f"- **{c} / {w}**: {v}" for c, w, v in verdicts]
    return "\n".join(lines) + "\n"


def _against_first(rows: list[dict[str, Any]]) -> list[str]:
    """With two or more configurations: each one's speedup over the first, kernel by kernel."""
    labels = list(dict.fromkeys(r["config"] for r in rows if r["config"] != "serial"))
    if len(labels) < 2 or any("speedup_vs_first" not in r for r in rows):
        return []
    table = {(r["workload"], r["config"]): "invalid" if r.get("invalid") else f"{r['speedup_vs_first']:.2f}" for r in rows}
    lines = ["", f"## Speedup over {labels[0]}", "", "| workload | " + " | ".join(labels[1:]) + " |",
             "|---|" + "---|" * (len(labels) - 1)]
    for workload in dict.fromkeys(r["workload"] for r in rows):
        lines.append(f"| {workload} | " + " | ".join(table[workload, c] for c in labels[1:]) + " |")
    return lines


def _html_layout(report: dict[str, Any]) -> Any:
    from bokeh.layouts import column
    from bokeh.models import ColumnDataSource, Div, FactorRange, HoverTool, Whisker
    from bokeh.plotting import figure

    from openclaw_dask.diagnostics.html import _palette

    rows = [r for r in report["rows"] if not r.get("invalid")]  # an invalid row's figures are not results
    factors = [(r["workload"], r["config"]) for r in rows]
    colors = _palette(sorted({r["config"] for r in rows}))
    source = ColumnDataSource({
        "x": factors,
        "ms": [r["median_s"] * 1e3 for r in rows],
        "lo": [r["min_s"] * 1e3 for r in rows],
        "hi": [r["max_s"] * 1e3 for r in rows],
        "gbps": [r["gbps"] for r in rows],
        "speedup": [r["speedup_vs_serial"] for r in rows],
        "flags": [", ".join(r["flags"]) for r in rows],
        "color": [colors[r["config"]] for r in rows],
    })
    figs = [Div(text=f"<h2>openclaw benchmark: {report['suite']} suite</h2><p>{report['created']}, "
                     f"{report['machine']['cpu_count']} cores, bandwidth {report['machine']['bandwidth_gbps_all_cores']:.1f} GB/s</p>")]
    for field, title, log in (("ms", "Median time per run (ms, min-max whiskers)", True), ("gbps", "Throughput (GB/s)", False),
                              ("speedup", "Speedup over the serial scheduler", False)):
        f = figure(x_range=FactorRange(*factors), height=340, width=1100, title=title, y_axis_type="log" if log else "linear",
                   tools="save", toolbar_location="right")
        floor = min(source.data["lo"]) / 2 if log else 0  # log bars start just below the fastest run
        f.vbar(x="x", top=field, bottom=floor, width=0.8, color="color", source=source)
        if field == "ms":
            f.add_layout(Whisker(source=source, base="x", upper="hi", lower="lo"))
        f.add_tools(HoverTool(tooltips=[("run", "@x"), (field, f"@{field}{{0.00}}"), ("flags", "@flags")]))
        f.xaxis.major_label_orientation = 1.0
        figs.append(f)
    return column(*figs)


def write_reports(report: dict[str, Any], out: str | Path, *, force: bool = False) -> dict[str, Path]:
    """Write ``report.json``, ``report.md`` and ``report.html`` into ``out``.

    Each is written as :mod:`openclaw_dask.files` writes (whole or not at all, never through a
    symbolic link); all three are checked before the first is written, so an existing report
    (without ``force``) is refused with nothing changed.
    """
    from openclaw_dask.diagnostics.html import page

    out = check_folder(out, REPORT_FILES.values(), force=force)
    texts = {"json": json.dumps(report, indent=2, default=str) + "\n", "md": _markdown(report),
             "html": page(_html_layout(report), "openclaw benchmark")}  # all made before any is written
    out.mkdir(parents=True, exist_ok=True)
    return {kind: write_file(out / REPORT_FILES[kind], text, force=force) for kind, text in texts.items()}


_ROW_FIELDS = ("config", "workload", "median_s", "min_s", "max_s")


def load_report(path: str | Path, *, suite: str | None = None) -> BenchmarkReport:
    """Read and check a ``report.json`` (before any benchmark runs); a clear error if it is not one.

    With ``suite``, the baseline must come from the same suite: other input sizes are not comparable.
    """
    try:
        report = json.loads(Path(path).read_text("utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(f"--compare {path}: cannot read a benchmark report ({e})") from None
    if not isinstance(report, dict) or report.get("schema") != SCHEMA:
        got = report.get("schema") if isinstance(report, dict) else type(report).__name__
        raise ConfigError(f"--compare {path}: not an openclaw benchmark report (schema {got!r}, expected {SCHEMA})")
    rows = report.get("rows")
    if not isinstance(rows, list) or not all(isinstance(r, dict) and all(f in r for f in _ROW_FIELDS) and r["median_s"] > 0 for r in rows):
        raise ConfigError(f"--compare {path}: its rows lack {', '.join(_ROW_FIELDS)} or have a zero median; regenerate it")
    if suite is not None and report.get("suite") != suite:
        raise ConfigError(f"--compare {path}: it is a {report.get('suite')} suite report, this run is --suite {suite}; compare like with like")
    return BenchmarkReport(report)
