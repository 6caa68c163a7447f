"""How a session looks in Jupyter: :meth:`Session._repr_html_ <openclaw_dask.Session._repr_html_>`.

One table, as distributed's ``Client`` shows itself: backend and engine, workers, threads,
memory, the chunk rule, the dashboard link and the state of recovery. Every value is escaped.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from dask.utils import format_bytes

if TYPE_CHECKING:
    from openclaw_dask.cluster import SessionLike

__all__ = ["session_html", "session_rows"]


def session_rows(s: SessionLike) -> list[tuple[str, str]]:
    """The facts the repr shows, as (label, text) pairs: what a notebook user asks of a session first."""
    state = "closed" if s.closed else "running" if s.started else "not started"
    rows = [("backend", f"{s.backend.name} ({state})"), ("engine", str(s.engine))]
    if s.started and not s.closed:
        try:
            workers = s.workers()
            memory = sum(w.get("memory_limit") or 0 for w in workers.values())
            rows += [("workers", str(len(workers) or 1)), ("threads", str(s.slots)),
                     ("memory", format_bytes(memory) + " (worker limits)" if memory else _host_memory())]
        except Exception as e:  # noqa: BLE001  (a repr must show even when the cluster has gone)
            rows.append(("workers", f"cannot reach the scheduler ({type(e).__name__}: {e})"))
    p = s.config.parallel
    rows.append(("chunks", f"task_chunk_size {p.task_chunk_size}, strategy {p.strategy}"))
    link = _dashboard(s)
    if link:
        rows.append(("dashboard", link))
    rows.append(("recovery", _recovery(s)))
    return rows


def session_html(s: SessionLike) -> str:
    """The session as an HTML table (links clickable, everything else escaped)."""
    cells = []
    for label, text in session_rows(s):
        value = html.escape(text)
        if label == "dashboard":
            value = f'<a href="{value}" target="_blank">{value}</a>'
        cells.append(f"<tr><th style='text-align:left'>{html.escape(label)}</th><td style='text-align:left'>{value}</td></tr>")
    return f"<div><strong>openclaw_dask.Session</strong><table>{''.join(cells)}</table></div>"


def _host_memory() -> str:
    import psutil

    return f"{format_bytes(psutil.virtual_memory().total)} (this host, shared)"


def _dashboard(s: SessionLike) -> str:
    link = s.running.dashboard_link if s.running is not None and not s.closed else None
    return link or ""


def _recovery(s: SessionLike) -> str:
    retries = s.config.fault_tolerance.retries
    if s.running is None or s.closed or not s.running.can_lose_workers:
        return f"retries {retries}; no workers to lose"
    try:
        r = s.recovery()
    except Exception as e:  # noqa: BLE001  (as above)
        return f"retries {retries}; counts unavailable ({type(e).__name__})"
    if r.workers_lost is None:
        return f"retries {retries}; counts unknown (the scheduler cannot load openclaw_dask)"
    return (f"retries {retries}; {r.workers_lost} worker(s) lost, {r.tasks_recomputed} task run(s) recomputed, "
            f"{r.failures_recovered} loss(es) recovered")
