"""Record what a run did, from Dask's own instrumentation.

On a cluster: the scheduler's task stream (every task's worker, thread, compute and
transfer intervals, output bytes), each worker's transfer logs and counters, its
system monitor (process memory, sampled by the worker itself), and its spill
buffer. Nothing is polled while the run goes on; everything is read at the end.
On dask's local schedulers (the thread backend's threaded engine, and serial runs) a
scheduler callback records each task instead.
"""

from __future__ import annotations

import math
import threading
import time
from collections import defaultdict, deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

__all__ = ["RunRecord", "TaskRecord", "WorkerRecord", "collect"]


@dataclass(frozen=True)
class TaskRecord:
    """One task: where and when it ran, and how big its output was."""

    key: str
    group: str
    worker: str
    thread: int
    start: float
    stop: float
    nbytes: int
    transfer_s: float = 0.0

    @property
    def duration(self) -> float:
        return self.stop - self.start


@dataclass(frozen=True)
class WorkerRecord:
    """One worker over the run."""

    address: str
    nthreads: int
    memory_limit: int
    peak_memory: int
    bytes_in: int
    bytes_out: int
    spilled_bytes: int
    paused: bool = False


@dataclass
class RunRecord:
    """Everything collected about one run; :func:`~openclaw_dask.diagnostics.analysis.analyze` reads it."""

    backend: str
    start: float
    stop: float = 0.0
    task_overhead_s: float = 0.002  # the engine's fixed cost per task (Engine.task_overhead_s)
    in_process: bool = False  # tasks shared one process's memory (nothing to transfer between workers)
    engine: str = ""  # what ran the graphs, and why (Session.engine)
    tasks: list[TaskRecord] = field(default_factory=list)
    workers: dict[str, WorkerRecord] = field(default_factory=dict)

    @property
    def wall_s(self) -> float:
        return self.stop - self.start


def _key_text(key: Any) -> str:
    return str(key) if not isinstance(key, tuple) else "(" + ", ".join(repr(k) for k in key) + ")"


def _group(key: Any) -> str:
    from dask.utils import key_split

    return key_split(key)


# -- scheduler- and worker-side functions (run by client.run_on_scheduler / client.run) ----


def _has_task_stream(dask_scheduler: Any) -> bool:
    return "task-stream" in dask_scheduler.plugins


def _drop_task_stream(dask_scheduler: Any) -> None:
    dask_scheduler.remove_plugin(name="task-stream")


def _worker_start(dask_worker: Any) -> dict[str, Any]:
    return {
        "count": dask_worker.monitor.count,
        "out": dask_worker.transfer_outgoing_bytes_total,
        "spilled": _spilled(dask_worker),
    }


def _spilled(dask_worker: Any) -> int:
    metrics = getattr(dask_worker.data, "cumulative_metrics", {})
    return int(sum(v for (label, unit), v in metrics.items() if label == "disk-write" and unit == "bytes"))


def _worker_end(dask_worker: Any, since: dict[str, dict[str, Any]], t0: float) -> dict[str, Any]:
    mine = since.get(dask_worker.address, {"count": 0, "out": 0, "spilled": 0})
    history = dask_worker.monitor.range_query(start=mine["count"])
    memory = [m for m in history.get("memory", []) if m is not None]
    memory.append(dask_worker.monitor.proc.memory_info().rss)
    incoming = sum(e["total"] for e in dask_worker.transfer_incoming_log if e["start"] >= t0)
    return {
        "nthreads": dask_worker.state.nthreads,
        "memory_limit": dask_worker.memory_manager.memory_limit or 0,
        "peak_memory": int(max(memory)),
        "bytes_in": int(incoming),
        "bytes_out": int(dask_worker.transfer_outgoing_bytes_total - mine["out"]),
        "spilled_bytes": _spilled(dask_worker) - mine["spilled"],
        "paused": str(dask_worker.status) == "Status.paused",
    }


@contextmanager
def collect(session: Any) -> Iterator[RunRecord]:
    """Record the tasks run in ``session`` inside the ``with`` block.

    Yields a :class:`RunRecord` that is filled in when the block ends.
    """
    backend = session.backend
    record = RunRecord(backend=backend.name, start=time.time(), task_overhead_s=session.engine.task_overhead_s,
                       in_process=backend.capabilities.in_process, engine=str(session.engine))
    if not session.engine.distributed:
        with _local(record, session.slots, session.running.local.get("pool")):
            yield record
        record.stop = time.time()
        return

    from distributed import get_task_stream

    client = session.client
    since = client.run(_worker_start)
    had_stream = client.run_on_scheduler(_has_task_stream)
    try:
        with get_task_stream(client) as stream:
            yield record
    finally:
        record.stop = time.time()
        if not had_stream:  # the plugin costs every later task a little: leave the scheduler as it was
            client.run_on_scheduler(_drop_task_stream)
    for r in stream.data:
        # A key computed again before the worker forgot it keeps its earlier intervals too:
        # this record's execution is the last compute, and the transfers since the one before.
        computes = [s for s in r["startstops"] if s["action"] == "compute"]
        if not computes:
            continue
        last, before = computes[-1], (computes[-2]["stop"] if len(computes) > 1 else -math.inf)
        # only what ran inside the window: a clock step or an earlier task must not inflate busy time
        start, stop = max(last["start"], record.start), min(last["stop"], record.stop)
        if stop <= start:
            continue
        transfer = sum(s["stop"] - s["start"] for s in r["startstops"] if s["action"] == "transfer" and s["start"] >= before)
        record.tasks.append(
            TaskRecord(
                key=_key_text(r["key"]),
                group=_group(r["key"]),
                worker=r["worker"],
                thread=int(r.get("thread") or 0),
                start=start,
                stop=stop,
                nbytes=int(r.get("nbytes") or 0),
                transfer_s=transfer,
            )
        )
    for address, info in client.run(_worker_end, since=since, t0=record.start).items():
        record.workers[address] = WorkerRecord(address=address, **info)


@contextmanager
def _local(record: RunRecord, threads: int, pool: Any = None) -> Iterator[None]:
    """Timing, thread and output size of every task on dask's local schedulers.

    With the thread backend's :class:`~openclaw_dask.cluster.local.TaskPool`, each task's
    start and stop are taken in the thread that ran it (dask's callbacks run in the
    scheduling thread, late by the scheduling itself); otherwise (the sync scheduler runs
    tasks in the calling thread) around the task by the callbacks.
    """
    import psutil
    from dask.callbacks import Callback
    from dask.sizeof import sizeof

    starts: dict[Any, float] = {}
    runs: dict[int, deque[tuple[float, float]]] = defaultdict(deque)  # per thread, in the order they finished
    lock = threading.Lock()
    process = psutil.Process()
    peak = [process.memory_info().rss]

    def on_run(thread: int, start: float, stop: float) -> None:
        runs[thread].append((start, stop))

    def on_task(key: str, thread: int, start: float, stop: float, result: Any) -> None:  # dataflow tasks
        with lock:
            record.tasks.append(TaskRecord(key, _group(key), "local", thread, start, stop, int(sizeof(result))))

    def new_compute(dsk: Any) -> None:  # a failed or interrupted compute leaves nothing to mismatch the next one
        runs.clear()

    def pretask(key: Any, dsk: Any, state: Any) -> None:
        starts[key] = time.time()

    def posttask(key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
        stop = time.time()
        start = starts.pop(key, stop)
        thread = int(worker_id or 0)  # the thread that ran the task
        if runs.get(thread):
            start, stop = runs[thread].popleft()
        task = TaskRecord(_key_text(key), _group(key), "local", thread, start, stop, int(sizeof(result)))
        with lock:
            record.tasks.append(task)
            if len(record.tasks) % 16 == 0:
                peak[0] = max(peak[0], process.memory_info().rss)

    watching = pool is not None and hasattr(pool, "on_run")
    if watching:
        pool.on_run, pool.on_task = on_run, on_task
    try:
        with Callback(start=new_compute, pretask=pretask, posttask=posttask):
            yield
    finally:
        if watching:
            pool.on_run = pool.on_task = None
    peak[0] = max(peak[0], process.memory_info().rss)
    record.workers["local"] = WorkerRecord("local", threads, psutil.virtual_memory().total, peak[0], 0, 0, 0)
