"""Rich renderings of results for the terminal (the CLI prints these)."""

from __future__ import annotations

from typing import Any

__all__ = ["print_profile", "print_run_summary", "print_tune", "recovery_line"]


def _b(n: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} B"


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
    table.add_row("wall time", f"{r.wall_s:.2f} s (generation {r.generate_s:.2f} s)")
    table.add_row("cluster", f"{r.backend}: {r.workers} worker(s), {r.threads} thread(s)")
    table.add_row("engine", r.engine)
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


def print_profile(report: Any) -> None:
    """Per-worker and per-group tables, then each verdict with its fix."""
    from rich.box import SIMPLE_HEAD
    from rich.table import Table

    console = _console()
    workers = Table(title=f"openclaw profile: {report.n_tasks} tasks, {report.wall_s:.2f} s, backend {report.backend}", box=SIMPLE_HEAD)
    for col in ("worker x threads", "tasks", "busy", "idle", "util", "computed", "in", "out", "peak mem"):
        workers.add_column(col, justify="left" if col.startswith("worker") else "right", no_wrap=True, overflow="ellipsis")
    for w in report.workers:
        workers.add_row(
            f"{_short(w.address)} x{w.nthreads}", str(w.tasks), _t(w.busy_s), _t(w.idle_s), f"{w.utilization:.0%}",
            _b(w.bytes_computed), _b(w.bytes_in), _b(w.bytes_out), _b(w.peak_memory),
        )
    console.print(workers)
    if report.engine:
        console.print(f"engine: {report.engine}")
    groups = Table(title="task groups", box=SIMPLE_HEAD)
    for col in ("group", "count", "total", "p50", "p95", "max", "chunk p50", "chunk max"):
        groups.add_column(col, justify="left" if col == "group" else "right", no_wrap=True, overflow="ellipsis")
    for g in report.groups[:12]:
        groups.add_row(
            g.group, str(g.count), _t(g.total_s), _t(g.p50_s), _t(g.p95_s), _t(g.max_s), _b(g.bytes_p50), _b(g.bytes_max),
        )
    console.print(groups)
    im = report.imbalance
    if report.n_tasks == 0:
        console.print("[yellow]no tasks ran[/]: nothing to profile (did the script compute anything?)")
        return
    if not report.verdicts:
        console.print(f"[green]no problems found[/]: busiest lane {im['max_over_mean']:.2f}x the mean (CV {im['cv']:.2f}), "
                      "tasks long enough to amortise scheduling")
    for v in report.verdicts:
        console.print(f"[bold yellow]{v.kind}[/]: {v.summary}\n  [bold]fix:[/] {v.fix}")


def print_tune(result: Any) -> None:
    """The ranking of ``openclaw tune``: median and min-max of each configuration tried, then why the winner won."""
    from rich.box import SIMPLE_HEAD
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"openclaw tune {result.workload}: {result.spent_s:.0f} s of a {result.budget_s:.0f} s budget", box=SIMPLE_HEAD)
    for col in ("rank", "configuration", "runs", "median", "min-max", "vs current"):
        table.add_column(col, justify="left" if col == "configuration" else "right", overflow="fold")
    base = result.baseline.median_s
    for i, t in enumerate(result.trials, 1):
        if not t.times:
            table.add_row(str(i), escape(t.label), "0", "-", "-", escape(t.error or "not reached in the budget"))
            continue
        table.add_row(str(i), escape(t.label), str(len(t.times)), _t(t.median_s), f"{_t(min(t.times))}-{_t(max(t.times))}",
                      f"{base / t.median_s:.2f}x")
    console = _console()
    console.print(table)
    console.print(f"[bold]winner[/]: {escape(result.why())}")

