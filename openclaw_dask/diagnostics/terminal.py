"""Rich renderings of results for the terminal (the CLI prints these)."""

from __future__ import annotations

from typing import Any

from openclaw_dask.diagnostics.termtable import Col, print_table

__all__ = ["print_benchmark", "print_profile", "print_run_summary", "print_tune", "recovery_line"]


def _b(n: float) -> str:
    """Bytes in the unit that keeps the figure under 1000: ``8 MiB``, ``86.3 MiB``, ``0.98 GiB`` (never ``1e+03 MiB``)."""
    if n < 1000:
        return f"{int(n)} B"
    for unit, size in (("KiB", 2**10), ("MiB", 2**20), ("GiB", 2**30), ("TiB", 2**40)):
        v = n / size
        if v < 1:
            return f"{v:.2f} {unit}"
        if float(f"{v:.3g}") < 1000 or unit == "TiB":
            return f"{v:.3g} {unit}" if v < 1000 else f"{v:.0f} {unit}"
    raise AssertionError("unreachable")  # pragma: no cover


def _t(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f}s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.0f}ms" if seconds >= 0.1 else f"{seconds * 1e3:.3g}ms"
    return f"{seconds * 1e6:.0f}us"


def _short(address: str) -> str:
    return address.split("://", 1)[-1]


def _console() -> Any:
    from rich.console import Console

    return Console()


def _summary_table(title: str) -> Any:
    from rich.table import Table

    table = Table(title=title, show_header=False)
    table.add_column(style="bold")
    table.add_column()
    return table


def _verdict(ok: bool) -> str:
    return "[green]correct[/]" if ok else "[red]WRONG[/]"


def print_run_summary(r: Any) -> None:
    """One screen: correctness, throughput, wall time, cluster, chunks, lost workers."""
    if not hasattr(r, "gbps"):
        return _print_kernel_summary(r)
    table = _summary_table(f"openclaw run {r.workload}")
    table.add_row("check", f"{_verdict(r.ok)}: {r.result:.17g} (expected {r.expected:.17g}); {r.check}")
    if r.invalid:
        table.add_row("throughput", f"[red]INVALID[/]: {r.invalid}")
    else:
        table.add_row("throughput", f"{r.gbps:.2f} GB/s over {_b(r.size_bytes)} (median of {len(r.sum_s_all)} sums: "
                      f"{r.sum_s * 1e3:.1f} ms; memory bandwidth {r.bandwidth_gbps:.1f} GB/s)")
    generation = "in each sum: out of core" if r.out_of_core else f"{r.generate_s:.2f} s"
    table.add_row("wall time", f"{r.wall_s:.2f} s (generation {generation})")
    if r.out_of_core:
        table.add_row("memory", "out of core: the array does not fit the workers' memory (docs/memory.md), so each sum "
                      "generated its chunks and reduced them as it went; GB/s includes generation")
    table.add_row("cluster", f"{r.backend}: {r.workers} worker(s), {r.threads} thread(s)")
    table.add_row("engine", r.engine)
    if r.path:
        table.add_row("path", r.path)
    table.add_row("chunks", f"{r.n_chunks} x {_b(r.chunk_bytes)} ({r.chunk_reason})")
    table.add_row("failures", recovery_line(r.workers_lost, r.tasks_recomputed, r.failures_recovered))
    _console().print(table)


def _print_kernel_summary(r: Any) -> None:
    """A suite kernel run by ``openclaw run`` (:class:`~openclaw_dask.workloads.prepared.WorkloadResult`)."""
    table = _summary_table(f"openclaw run {r.workload}")
    table.add_row("check", f"{_verdict(r.ok)}: {r.check}")
    runs = f"median of {len(r.run_s_all)}" if len(r.run_s_all) > 1 else "one run"
    table.add_row("time", f"{_t(r.run_s)} ({runs}); NumPy on one thread {_t(r.numpy_s)}; wall {r.wall_s:.2f} s")
    table.add_row("cluster", f"{r.backend}: {r.workers} worker(s), {r.threads} thread(s); strategy {r.strategy}")
    table.add_row("engine", r.engine)
    table.add_row("chunks", r.chunks)
    for label, text in r.rows:
        table.add_row(label, text)
    table.add_row("failures", recovery_line(r.workers_lost, r.tasks_recomputed, r.failures_recovered))
    _console().print(table)


def recovery_line(workers_lost: int | None, tasks_recomputed: int | None, failures_recovered: int | None) -> str:
    """The run summary's account of lost workers, e.g. ``2 worker(s) lost, 41 task(s) recomputed, 2 of 2 recovered``."""
    if workers_lost is None:
        return "unknown (the scheduler could not load openclaw_dask to count lost workers)"
    if not workers_lost:
        return "no worker lost"
    return f"{workers_lost} worker(s) lost, {tasks_recomputed} task(s) recomputed, {failures_recovered} of {workers_lost} recovered"


_WORKER_COLS = (Col("worker x threads", wrap=True, justify="left"), Col("tasks"), Col("busy"), Col("idle"), Col("util"),
                Col("computed"), Col("in"), Col("out"), Col("peak mem"), Col("projected"))
_GROUP_COLS = (Col("group", wrap=True, justify="left"), Col("count"), Col("total"), Col("p50"), Col("p95"), Col("max"),
               Col("chunk p50"), Col("chunk max"))


def print_profile(report: Any) -> None:
    """Per-worker and per-group tables, then each verdict with its fix (tables fit the terminal: :mod:`.termtable`)."""
    from rich.markup import escape

    console = _console()
    workers = [(escape(f"{_short(w.address)} x{w.nthreads}"), str(w.tasks), _t(w.busy_s), _t(w.idle_s), f"{w.utilization:.0%}",
                _b(w.bytes_computed), _b(w.bytes_in), _b(w.bytes_out), _b(w.peak_memory),
                _b(w.projected_memory) if w.projected_memory else "-") for w in report.workers]
    print_table(console, f"openclaw profile: {report.n_tasks} tasks, {report.wall_s:.2f} s, backend {report.backend}",
                _WORKER_COLS, workers)
    if report.engine:
        console.print(f"engine: {escape(report.engine)}")
    groups = [(escape(g.group), str(g.count), _t(g.total_s), _t(g.p50_s), _t(g.p95_s), _t(g.max_s), _b(g.bytes_p50),
               _b(g.bytes_max)) for g in report.groups[:12]]
    print_table(console, "task groups", _GROUP_COLS, groups)
    im = report.imbalance
    if report.ran_here:
        from openclaw_dask.diagnostics.analysis import HERE

        console.print(f"{HERE}: {escape(report.here_line())}")
    if report.n_tasks == 0:
        if not report.ran_here:
            console.print("[yellow]no tasks ran[/]: nothing to profile (did the script compute anything?)")
        return
    if not report.verdicts:
        console.print(f"[green]no problems found[/]: busiest lane {im['max_over_mean']:.2f}x the mean (CV {im['cv']:.2f}), "
                      "tasks long enough to amortise scheduling")
    for v in report.verdicts:
        console.print(f"[bold yellow]{v.kind}[/]: {v.summary}\n  [bold]fix:[/] {v.fix}")


_TUNE_COLS = (Col("rank"), Col("configuration", wrap=True, justify="left"), Col("runs"), Col("median"), Col("min-max"),
              Col("vs current", wrap=True))


def print_tune(result: Any) -> None:
    """The ranking of ``openclaw tune``: median and min-max of each configuration tried, then why the winner won."""
    from rich.markup import escape

    base = result.baseline.median_s
    rows = []
    for i, t in enumerate(result.trials, 1):
        if not t.times:
            rows.append((str(i), escape(t.label), "0", "-", "-", escape(t.error or "not reached in the budget")))
            continue
        rows.append((str(i), escape(t.label), str(len(t.times)), _t(t.median_s), f"{_t(min(t.times))}-{_t(max(t.times))}",
                     f"{base / t.median_s:.2f}x"))
    console = _console()
    print_table(console, f"openclaw tune {result.workload}: {result.spent_s:.0f} s of a {result.budget_s:.0f} s budget",
                _TUNE_COLS, rows, key=2)
    console.print(f"[bold]winner[/]: {escape(result.why())}")


_LABELS = {"config", "workload", "ok", "flags", "compare"}  # these wrap between words; the figures never break


def print_benchmark(report: Any) -> None:
    """``report.md``'s content for the terminal: the rows, the speedups over the first configuration, the verdicts.

    Tables fit the terminal (:mod:`.termtable`); an invalid row says why in its ``flags``, not in a figure's column.
    """
    from rich.markup import escape

    from openclaw_dask.diagnostics.benchmark_render import (
        COLUMNS,
        STEAL_NOTE,
        machine_line,
        row_cells,
        speedup_table,
        stolen,
    )
    from openclaw_dask.diagnostics.benchmark_report import rows_of

    console = _console()
    rows = rows_of(report)
    console.print(f"[bold]openclaw benchmark ({escape(report['suite'])} suite)[/]")
    console.print(escape(machine_line(report)))
    cols = [Col(c, wrap=c in _LABELS, justify="left" if c in _LABELS else "right") for c in COLUMNS]
    shown = [i for i, c in enumerate(COLUMNS) if c != "compare" or any(r.compare for r in rows)]  # no baseline: no column
    cells = []
    for r in rows:
        line = [escape(c) for c in row_cells(r)]
        if r.invalid:
            line[3], line[COLUMNS.index("flags")] = "[red]invalid[/]", f"[red]invalid[/]: {escape(r.invalid)}"
        if not r.ok:
            line[2] = "[bold red]NO[/]"
        cells.append([line[i] for i in shown])
    print_table(console, None, [cols[i] for i in shown], cells, key=2)
    if any(stolen(r) for r in rows):
        console.print(STEAL_NOTE)
    speedups = speedup_table(rows)
    if speedups is not None:
        labels, table = speedups
        print_table(console, f"speedup over {escape(labels[0])}", [Col("workload", wrap=True, justify="left")] +
                    [Col(c, wrap=True) for c in labels[1:]], [[escape(c) for c in line] for line in table])
    verdicts = [(r.config, r.workload, v) for r in rows for v in r.verdicts]
    if verdicts:
        console.print("[bold]verdicts[/]")
        for c, w, v in verdicts:
            console.print(f"- [bold]{escape(c)} / {escape(w)}[/]: {escape(v)}")
