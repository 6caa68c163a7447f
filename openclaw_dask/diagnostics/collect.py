"""Record what a run did, from Dask's own instrumentation.

On a cluster: the scheduler's task stream (every task's worker, thread, compute and
transfer intervals, output bytes), each worker's transfer logs and counters, its
system monitor (process memory, sampled by the worker itself), and its spill
buffer. Nothing is polled while the run goes on; everything is read at the end.
On dask's local schedulers (the thread backend's threaded engine, and serial runs) a
scheduler callback records each task instead.

What each task *read* is recorded too, since blockwise fusion hides it from the outputs (a
fused ``map_blocks`` + partial sum writes 8 bytes whatever its chunk): the data embedded in its
spec plus its dependencies' outputs (a scheduler plugin, or the local callback), and the chunk
layout of every array computed (a probe wrapped around dask's ``array_optimize``, which runs
wherever the graph is materialised: in this process, or on the scheduler).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import threading
import time
import uuid
from collections import defaultdict, deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from openclaw_dask import memory_model
from openclaw_dask.cluster import here, running_of
from openclaw_dask.cluster.running import Recorder

if TYPE_CHECKING:
    from openclaw_dask.cluster import SessionLike

logger = logging.getLogger("openclaw_dask.diagnostics")

__all__ = ["ChunkLayout", "RunRecord", "TaskRecord", "WorkerRecord", "collect", "collect_dask", "layouts_of"]


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
    input_bytes: int = 0  # data embedded in the task's spec plus its dependencies' outputs
    scheduled: bool = True  # False: run straight on its worker (cluster/direct.py), no scheduling of its own

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
    start_memory: int = 0  # its process memory as the run began (the peak is measured from there on)


@dataclass(frozen=True)
class ChunkLayout:
    """The chunks of one array computed in the run (its first layer with this layout)."""

    name: str  # the layer's name: its blocks' keys are (name, i, j, ...)
    chunks: tuple[tuple[int, ...], ...]
    itemsize: int

    def block_bytes(self) -> Any:
        """Bytes of every block, as an ndarray shaped like the block grid."""
        import numpy as np

        sizes = np.array(self.itemsize, dtype=np.int64)
        for axis in self.chunks:
            sizes = np.multiply.outer(sizes, np.asarray(axis, dtype=np.int64))
        return sizes


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
    layouts: list[ChunkLayout] = field(default_factory=list)
    graphs: int = 0  # graphs submitted (computes, persists)
    graph_bytes: int = 0  # data embedded in the graphs' task specs
    projected: dict[str, int] = field(default_factory=dict)  # worker -> the most memory_model projected for it
    projected_graphs: int = 0  # graphs projected before they ran (Session.compute/persist)
    aside: list[tuple[str, float, float]] = field(default_factory=list)  # (label, start, stop): client work that is not the run
    ran_here: dict[str, tuple[int, float]] = field(default_factory=dict)  # name -> (calls, s) run in the client (cluster/here.py)

    @property
    def wall_s(self) -> float:
        return self.stop - self.start


def _key_text(key: Any) -> str:
    return str(key) if not isinstance(key, tuple) else "(" + ", ".join(repr(k) for k in key) + ")"


def _group(key: Any) -> str:
    from dask.utils import key_split

    return key_split(key)


# -- what tasks read: array chunk layouts and input sizes --------------------------------

INPUT_PROBE = "openclaw-inputs"
MAX_LAYOUT_BLOCKS = 1_000_000  # a bigger block grid costs the probe more than it tells
_LAYOUTS: dict[str, list[ChunkLayout]] = {}  # open run id -> layouts noted in this process
# dask.config is process-wide: one profile's probe at a time (another thread's profile waits; nesting is fine)
_PROBING = threading.RLock()


def layouts_of(graph: Any) -> list[ChunkLayout]:
    """The chunk layouts of the arrays in a HighLevelGraph, one per distinct layout, inputs first (pure).

    Read from the layers' ``collection_annotations``, which dask sets on every array layer.
    """
    layers = getattr(graph, "layers", {})
    order = graph._toposort_layers() if hasattr(graph, "_toposort_layers") else list(layers)  # inputs first
    return _unique(
        ChunkLayout(str(name), tuple(tuple(int(n) for n in axis) for axis in ann["chunks"]), int(ann["dtype"].itemsize))
        for name in order
        if (ann := getattr(layers[name], "collection_annotations", None) or {}).get("chunks")
        and hasattr(ann.get("dtype"), "itemsize")
        and math.prod(len(axis) for axis in ann["chunks"]) <= MAX_LAYOUT_BLOCKS
    )


def _unique(layouts: Any) -> list[ChunkLayout]:
    seen: dict[tuple[Any, int], ChunkLayout] = {}
    for layout in layouts:
        seen.setdefault((layout.chunks, layout.itemsize), layout)
    return list(seen.values())


@dataclass(frozen=True)
class _LayoutProbe:
    """An ``array_optimize`` that notes the graph's chunk layouts, then optimises as ``then`` does."""

    run: str
    then: Any

    def __call__(self, dsk: Any, keys: Any, **kwargs: Any) -> Any:
        found = _LAYOUTS.get(self.run)
        if found is not None:  # a graph materialised after its run ended is not noted (nor kept)
            found.extend(layouts_of(dsk))
        return self.then(dsk, keys, **kwargs)


def _open_layouts(run: str) -> None:
    _LAYOUTS.setdefault(run, [])


def _pop_layouts(run: str) -> list[ChunkLayout]:
    return _LAYOUTS.pop(run, [])


@contextmanager
def _probe_layouts(record: RunRecord, on_scheduler: Any = None) -> Iterator[None]:
    """Note the chunk layout of every array computed in the block, into ``record.layouts``.

    ``on_scheduler`` is a distributed scheduler's ``client.run_on_scheduler``: graphs are
    materialised there too.
    """
    import dask
    from dask.array.optimization import optimize
    from dask.base import dont_optimize

    run = uuid.uuid4().hex
    with _PROBING:
        then = dask.config.get("array_optimize", None)
        then = optimize if then is None else then if callable(then) else dont_optimize  # as dask reads the key
        _open_layouts(run)
        try:
            if on_scheduler is not None:  # the graph is materialised where it runs: here, or on a distributed scheduler
                on_scheduler(_open_layouts, run=run)
            with dask.config.set(array_optimize=_LayoutProbe(run, then)):
                yield
        finally:
            found = _pop_layouts(run)
            if on_scheduler is not None:
                try:
                    found += on_scheduler(_pop_layouts, run=run)
                except Exception as e:  # noqa: BLE001  (never hide the run's own error behind the probe's)
                    logger.warning("could not read the array layouts from the scheduler: %s: %s", type(e).__name__, e)
            record.layouts = _unique(found)


def _add_input_probe(dask_scheduler: Any, name: str, client: str) -> None:
    """Count ``client``'s graphs, and note what each task read: bytes in its spec and its dependencies' outputs."""
    from dask.sizeof import sizeof
    from distributed.diagnostics.plugin import SchedulerPlugin

    class InputProbe(SchedulerPlugin):
        def __init__(self) -> None:
            self.graphs = 0
            self.inputs: dict[str, tuple[int, int]] = {}

        def update_graph(self, scheduler: Any, **kwargs: Any) -> None:
            self.graphs += kwargs.get("client") == client

        def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
            ts = dask_scheduler.tasks.get(key) if (start, finish) == ("processing", "memory") else None
            if ts is not None:
                spec = sizeof(ts.run_spec) if ts.run_spec is not None else 0
                self.inputs[_key_text(key)] = (spec, sum(max(0, d.nbytes) for d in ts.dependencies))

    dask_scheduler.add_plugin(InputProbe(), name=name)


def _pop_input_probe(dask_scheduler: Any, name: str) -> dict[str, Any]:
    probe = dask_scheduler.plugins.pop(name, None)
    return {"graphs": probe.graphs, "inputs": probe.inputs} if probe is not None else {"graphs": 0, "inputs": {}}


# -- scheduler- and worker-side functions (run by client.run_on_scheduler / client.run) ----


def _has_task_stream(dask_scheduler: Any) -> bool:
    return "task-stream" in dask_scheduler.plugins


def _drop_task_stream(dask_scheduler: Any) -> None:
    # Absent when the block ended (Ctrl-C, an error) before the stream started: the undo must not raise over that.
    if "task-stream" in dask_scheduler.plugins:
        dask_scheduler.remove_plugin(name="task-stream")


def _worker_start(dask_worker: Any) -> dict[str, Any]:
    return {
        # a worker process of its own (a nanny's): in-process workers share their peak with the client's work
        "high_water": bool(getattr(dask_worker, "nanny", None)) and _reset_high_water(),
        "count": dask_worker.monitor.count,
        "memory": dask_worker.monitor.proc.memory_info().rss,
        "out": dask_worker.transfer_outgoing_bytes_total,
        "spilled": _spilled(dask_worker),
    }


def _reset_high_water() -> bool:
    """Reset this process's peak resident memory (Linux: ``/proc/self/clear_refs``); whether it could."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _high_water() -> int:
    """This process's peak resident memory since the reset (Linux ``VmHWM``); 0 where it cannot be read."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmHWM:")), 0)


def _spilled(dask_worker: Any) -> int:
    metrics = getattr(dask_worker.data, "cumulative_metrics", {})
    return int(sum(v for (label, unit), v in metrics.items() if label == "disk-write" and unit == "bytes"))


def _worker_end(dask_worker: Any, since: dict[str, dict[str, Any]], t0: float) -> dict[str, Any]:
    mine = since.get(dask_worker.address, {"count": 0, "out": 0, "spilled": 0})
    history = dask_worker.monitor.range_query(start=mine["count"])
    memory = [m for m in history.get("memory", []) if m is not None]
    memory.append(dask_worker.monitor.proc.memory_info().rss)
    if mine.get("high_water"):  # the peak since the run began: what the monitor's samples missed between them
        memory.append(_high_water())
    incoming = sum(e["total"] for e in dask_worker.transfer_incoming_log if e["start"] >= t0)
    return {
        "nthreads": dask_worker.state.nthreads,
        "memory_limit": dask_worker.memory_manager.memory_limit or 0,
        "peak_memory": int(max(memory)),
        "start_memory": int(mine.get("memory", 0)),
        "bytes_in": int(incoming),
        "bytes_out": int(dask_worker.transfer_outgoing_bytes_total - mine["out"]),
        "spilled_bytes": _spilled(dask_worker) - mine["spilled"],
        "paused": str(dask_worker.status) == "Status.paused",
    }


@contextmanager
def collect(session: SessionLike) -> Iterator[RunRecord]:
    """Record the tasks run in ``session`` inside the ``with`` block.

    Yields a :class:`RunRecord` that is filled in when the block ends.
    """
    backend = session.backend
    from openclaw_dask.progress import watch_aside

    record = RunRecord(backend=backend.name, start=time.time(), task_overhead_s=session.engine.task_overhead_s,
                       in_process=backend.capabilities.in_process, engine=str(session.engine))

    with watch_aside(lambda label, start, stop: record.aside.append((label, start, stop))), \
            memory_model.watched(lambda peaks: _projected(record, peaks)), here.watched(lambda ran: _ran_here(record, ran)), \
            running_of(session).record(_Recorder(record)):
        yield record


def _ran_here(record: RunRecord, ran: here.Ran) -> None:
    for name, (calls, seconds) in ran.items():
        here.add(record.ran_here, name, calls, seconds)


def _projected(record: RunRecord, peaks: dict[str, int]) -> None:
    record.projected_graphs += 1
    for address, peak in peaks.items():
        record.projected[address] = max(peak, record.projected.get(address, 0))


@contextmanager
def collect_dask() -> Iterator[RunRecord]:
    """Record plain dask computes in the block, with no openclaw session open.

    On the cluster of ``distributed``'s default client where there is one (a ``Client`` the
    user made), else on dask's local schedulers in this process.
    """
    from dask.system import CPU_COUNT
    from distributed import default_client

    from openclaw_dask.cluster.local import THREADS_TASK_OVERHEAD_S

    watch: contextlib.AbstractContextManager[Any]
    try:
        client = default_client()
    except ValueError:  # no client: dask's own schedulers in this process
        record = RunRecord(backend="dask", start=time.time(), task_overhead_s=THREADS_TASK_OVERHEAD_S, in_process=True,
                           engine="dask's own scheduler")
        watch = _Recorder(record).local(CPU_COUNT)
    else:
        record = RunRecord(backend="distributed", start=time.time(), engine=f"distributed client {client.id}")
        watch = _Recorder(record).distributed(client)
    with watch:
        yield record


class _Recorder(Recorder):
    """The profiler's record of a block, on whichever engine the session runs."""

    def __init__(self, record: RunRecord) -> None:
        self.record = record

    @contextmanager
    def local(self, threads: int, watch: Any = None) -> Iterator[None]:
        with _probe_layouts(self.record), _local(self.record, threads, watch):
            yield
        self.record.stop = time.time()

    def distributed(self, client: Any) -> contextlib.AbstractContextManager[Any]:
        return _distributed(self.record, client)


@contextmanager
def _distributed(record: RunRecord, client: Any) -> Iterator[None]:
    """The task stream, the input probe and the workers' counters over the block; each undone even if another fails."""
    from distributed import get_task_stream

    since = client.run(_worker_start)
    name = f"{INPUT_PROBE}-{uuid.uuid4().hex}"
    probe: dict[str, Any] = {"graphs": 0, "inputs": {}}  # what _pop_input_probe returns
    with contextlib.ExitStack() as undo:  # reverse order: the stream is read before its plugin goes
        if not client.run_on_scheduler(_has_task_stream):  # the plugin costs every later task a little
            undo.callback(client.run_on_scheduler, _drop_task_stream)
        client.run_on_scheduler(_add_input_probe, name=name, client=client.id)
        undo.callback(lambda: probe.update(client.run_on_scheduler(_pop_input_probe, name=name)))
        undo.enter_context(_probe_layouts(record, client.run_on_scheduler))
        stream = undo.enter_context(get_task_stream(client))
        sent: list[list[dict[str, Any]]] = []  # per compute sent straight to the workers, its tasks (cluster/direct.py)
        undo.enter_context(here.streamed(sent.append))
        record.start = time.time()  # the run starts after the probes are in place: their round trips are not its own
        try:
            yield
        finally:
            record.stop = time.time()
    record.graphs = probe["graphs"] + len(sent)
    record.graph_bytes = sum(spec for spec, _ in probe["inputs"].values()) + sum(
        r.get("spec_bytes", 0) for r in itertools.chain.from_iterable(sent))  # and the specs sent straight to workers
    record.tasks += _stream_tasks([*stream.data, *itertools.chain.from_iterable(sent)], record, probe["inputs"])
    for address, info in client.run(_worker_end, since=since, t0=record.start).items():
        record.workers[address] = WorkerRecord(address=address, **info)


def _stream_tasks(stream: list[dict[str, Any]], record: RunRecord, inputs: dict[str, Any]) -> Iterator[TaskRecord]:
    for r in stream:
        # A key computed again before the worker forgot it keeps its earlier intervals too:
        # this record's execution is the last compute, and the transfers since the one before.
        computes = [s for s in r["startstops"] if s["action"] == "compute"]
        if not computes:
            continue
        last, before = computes[-1], (computes[-2]["stop"] if len(computes) > 1 else -math.inf)
        start, stop = _in_window(last["start"], last["stop"], record)
        transfer = sum(s["stop"] - s["start"] for s in r["startstops"] if s["action"] == "transfer" and s["start"] >= before)
        key = _key_text(r["key"])
        yield TaskRecord(
            key=key, group=_group(r["key"]), worker=r["worker"], thread=int(r.get("thread") or 0), start=start, stop=stop,
            nbytes=int(r.get("nbytes") or 0), transfer_s=transfer, input_bytes=int(r.get("input_bytes", sum(inputs.get(key, (0, 0))))),
            scheduled=not r.get("direct", False),
        )


def _in_window(start: float, stop: float, record: RunRecord) -> tuple[float, float]:
    """A task's interval from the stream, inside the record's window (the part in it; a clock step or an earlier
    task must not inflate busy time).

    Every task in the stream ran for this record, but the scheduler shifts a worker's times by its
    estimate of that worker's clock offset, a few milliseconds off on a new cluster: a short last task
    can seem to start after the block ended. Such a task keeps its duration, placed at the nearer edge.
    """
    inside = max(start, record.start), min(stop, record.stop)
    if inside[1] > inside[0]:
        return inside
    duration = min(max(0.0, stop - start), record.stop - record.start)
    start = min(max(start, record.start), record.stop - duration)
    return start, start + duration


@contextmanager
def _local(record: RunRecord, threads: int, watch: Any = None) -> Iterator[None]:
    """Timing, thread, input and output size of every task on dask's local schedulers.

    With the thread backend's :class:`~openclaw_dask.cluster.local.TaskPool`, each task's
    start and stop are taken in the thread that ran it (dask's callbacks run in the
    scheduling thread, late by the scheduling itself); otherwise (the sync scheduler runs
    tasks in the calling thread) around the task by the callbacks.
    """
    import psutil
    from dask.callbacks import Callback
    from dask.sizeof import sizeof

    starts: dict[Any, tuple[float, int]] = {}  # key -> (start, bytes in its spec plus its dependencies' outputs)
    sizes: dict[Any, int] = {}  # key -> output bytes, for the tasks that read it
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
        sizes.clear()
        record.graphs += 1

    def pretask(key: Any, dsk: Any, state: Any) -> None:
        spec = sizeof(dsk.get(key))
        record.graph_bytes += spec
        starts[key] = (time.time(), spec + sum(sizes.get(d, 0) for d in state["dependencies"].get(key, ())))

    def posttask(key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
        stop = time.time()
        start, read = starts.pop(key, (stop, 0))
        thread = int(worker_id or 0)  # the thread that ran the task
        if runs.get(thread):
            start, stop = runs[thread].popleft()
        sizes[key] = nbytes = int(sizeof(result))
        task = TaskRecord(_key_text(key), _group(key), "local", thread, start, stop, nbytes, input_bytes=read)
        with lock:
            record.tasks.append(task)
            if len(record.tasks) % 16 == 0:
                peak[0] = max(peak[0], process.memory_info().rss)

    with contextlib.nullcontext() if watch is None else watch(on_run, on_task), \
            Callback(start=new_compute, pretask=pretask, posttask=posttask):
        yield
    peak[0] = max(peak[0], process.memory_info().rss)
    record.workers["local"] = WorkerRecord("local", threads, psutil.virtual_memory().total, peak[0], 0, 0, 0)
