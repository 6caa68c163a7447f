"""A batched ``map`` for many small Python calls: tasks big enough that scheduling stays under ~5%.

One task per item costs the engine's fixed per-task time (``Engine.task_overhead_s``:
about 2 ms on a distributed cluster, where raw ``client.map`` manages a few hundred tasks
a second). ``map`` times the first items on the calling thread, then puts items into
tasks that each take at least 20 times that cost, and never so few tasks that a thread
would sit idle.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from openclaw_dask.dataflow._tasks import tasks_of, token
from openclaw_dask.errors import ItemFailed, OpenclawError

if TYPE_CHECKING:
    from openclaw_dask.cluster import SessionLike

__all__ = ["BatchPlan", "items_per_task", "map", "plan_batches"]

OVERHEAD_SHARE = 0.05  # scheduling's share of a task's time that auto aims under
PROBE_S = 0.002  # time the first items for at least this long (or all of them)
TASKS_PER_SLOT = 4  # enough tasks that a slow one does not leave threads idle at the end


@dataclass(frozen=True)
class BatchPlan:
    """How :func:`map` cut the items: ``batch_size`` per task, and why."""

    batch_size: int
    n_tasks: int
    reason: str


def items_per_task(task_overhead_s: float, item_s: float) -> int:
    """The fewest items (each ``item_s``) that keep ``task_overhead_s`` under :data:`OVERHEAD_SHARE` of a task (pure)."""
    return math.ceil(task_overhead_s / (OVERHEAD_SHARE * max(item_s, 1e-9)))


def plan_batches(n_items: int, item_s: float, task_overhead_s: float, slots: int) -> BatchPlan:
    """Items per task so overhead stays under :data:`OVERHEAD_SHARE`, with ``TASKS_PER_SLOT`` tasks per slot if that allows.

    Pure: ``item_s`` is one item's measured time, ``task_overhead_s`` the engine's cost per task.
    """
    if n_items <= 0:
        return BatchPlan(1, 0, "no items")
    floor = items_per_task(task_overhead_s, item_s)
    spread = math.ceil(n_items / (TASKS_PER_SLOT * max(1, slots)))
    if spread >= floor:
        size, reason = spread, f"{TASKS_PER_SLOT} tasks per thread"
    else:
        size = min(floor, n_items)
        reason = (f"scheduling under {OVERHEAD_SHARE:.0%}: {task_overhead_s * 1e3:.2g} ms per task, "
                  f"{item_s * 1e6:.3g} us per item")
    return BatchPlan(size, math.ceil(n_items / size), reason)


class _ItemError(Exception):
    """Raised in a task: the failing item's index and its error (both pickle, as args)."""


def _run_batch(fn: Callable[[Any], Any], first: int, items: list[Any]) -> list[Any]:
    out = []
    for i, item in enumerate(items):
        try:
            out.append(fn(item))
        except Exception as e:
            raise _ItemError(first + i, e) from e
    return out


def _probe(fn: Callable[[Any], Any], items: list[Any]) -> tuple[list[Any], float]:
    """Run the first items here until :data:`PROBE_S` has passed; their results and the time per item."""
    done: list[Any] = []
    t0 = time.perf_counter()
    while len(done) < len(items) and (time.perf_counter() - t0 < PROBE_S or not done):
        try:
            done.append(fn(items[len(done)]))
        except Exception as e:
            raise ItemFailed(len(done), e) from e
    return done, (time.perf_counter() - t0) / max(1, len(done))


def map(session: SessionLike, fn: Callable[[Any], Any], items: Iterable[Any], *, batch_size: int | str = "auto",
        progress: bool = False) -> list[Any]:
    """``[fn(item) for item in items]`` in parallel, with many items per task.

    Parameters
    ----------
    session
        A started :class:`~openclaw_dask.Session`.
    fn
        Called once per item; on a cluster it must pickle (a module-level function).
    batch_size
        Items per task, or ``"auto"``: the first items run here to time ``fn``, then
        :func:`plan_batches` decides (see the module docstring).
    progress
        Show a bar of finished tasks on the terminal.

    Returns
    -------
    list
        The results, in the order of ``items``.

    Raises
    ------
    ItemFailed
        With the index of the first item (in order) whose call raised; the rest is cancelled.
    """
    from openclaw_dask.progress import bar

    items = list(items)
    head: list[Any] = []
    if batch_size == "auto":
        head, item_s = _probe(fn, items)
        plan = plan_batches(len(items) - len(head), item_s, session.engine.task_overhead_s, session.slots)
        size = plan.batch_size
    elif isinstance(batch_size, int) and not isinstance(batch_size, bool) and batch_size >= 1:
        size = batch_size
    else:
        raise OpenclawError(f"map(batch_size={batch_size!r}): use 'auto' or an integer >= 1")
    tasks, tag = tasks_of(session), token()
    starts = range(len(head), len(items), size)
    futures = [tasks.submit(f"map-{tag}-{s}", _run_batch, fn, s, items[s:s + size]) for s in starts]
    results = head
    try:
        with bar("map", len(futures), progress) as advance:
            for future in futures:
                results.extend(tasks.gather([future])[0])
                advance()
    except _ItemError as e:
        index, cause = e.args
        raise ItemFailed(index, cause) from cause
    finally:
        tasks.cancel(f for f in futures if not f.done())
    return results
