"""Computes over data already on the workers, sent straight to those workers: no scheduling round.

Why. A compute on worker processes costs 8-10 ms before any task does work (docs/benchmarks.md,
twelfth pass): the graph goes to the scheduler, which places each task, sends it to a worker,
hears it finish, tells the client, and the client then asks the worker for the result; that is
six hops through distributed's comms and state machines, 11.6 ms of CPU over the processes of a
2-core machine. When every task of a compute reads only data already held by the workers (a sum,
a mean, a per-chunk map of a persisted array), the scheduler has nothing to decide: each task runs
where its data is. Such a compute is split into its independent parts, each part goes to the
worker holding all it reads, that worker runs it on its task threads and sends the results back:
one round trip per worker: a 2-chunk sum in 3.5 ms against 11.8 through the scheduler (docs/benchmarks.md,
eighteenth pass).

What qualifies (else the compute goes to the scheduler as before, nothing lost):

- the session's scheduler runs in this process (it is asked where the data is without a round
  trip) and its workers carry :class:`DirectRuns` (the process backend's do, the CUDA backend's through it:
  not yet run on a GPU, and the thread backend's in-process worker when its engine is distributed);
- the graph has at most :data:`MAX_TASKS` tasks and no annotations (no pinned workers or
  resources), the compute pins none (``workers=``, ``resources=``), and the cluster does not adapt
  (the scheduler, seeing its workers idle, would retire them under the compute);
- each part (tasks joined by what they read of each other) reads data held in memory on the workers,
  and a worker would not hold over a quarter of its memory limit fetched or made (:func:`_too_much`); or it reads nothing
  held (it makes its data: ``da.random``, a reader) and some task thread is idle: such parts are
  spread over the idle threads, an even share each, if they are alike (:func:`on_idle_threads`); the
  scheduler, at ~2.7 ms a task on worker processes here, placed each as a thread freed up. The mean
  of fresh random data on 2 worker processes: 8 MiB in 2 chunks 9.2 ms against 16.7 through the
  scheduler (the threads engine 8.5), 64 MiB in 64 chunks 39 against 108 (threads 46;
  docs/benchmarks.md, twenty-third pass);
- a part whose tasks fan in or out runs on one thread, where the scheduler would run its branches on
  several: it goes straight to the workers only if every task thread gets a part (:func:`idle_threads`),
  as the two output rows of a row-split matmul do on 2 worker processes (each splits its row, multiplies
  both halves and adds them): 512 MiB 373-393 -> 354-360 ms, 64 MiB 50-54 -> 32-35 (twenty-fourth pass).
  Where a thread would idle, a part whose outputs share only views (a stencil's edges, an all-to-all
  rechunk's pieces) is split per output instead, each block it reads only through slices cut by the
  worker holding it (:func:`~openclaw_dask.cluster.slices.apart`, cluster/slices.py).

Each part goes to the worker holding most of the bytes it reads, which first fetches the rest from
a worker holding it (:func:`fetches`: distributed's own request, read out of the holder's memory
where the workers may, cluster/peer_reads.py). A part that would wait for a busy worker's threads
while another worker's are idle goes to that other worker instead, if its tasks (at their durations
as the scheduler measured them) take longer than the fetch (:func:`spread`): model-parallel-matmul's
weights and rows all on one worker (distributed's active memory manager drops replicas every 2 s)
ran its two halves there, one after the other, 440-460 ms against 230 spread (docs/benchmarks.md,
twentieth pass). The scheduler would have run them there too: it places a task only on a worker
holding some of its inputs, and does not steal under 0.4 s of work.

A worker answers for all it was sent or for none: paused at its memory limit or closing, missing
a key (moved, lost), or a task raising, and the whole compute runs on the scheduler instead, which
then reports a task's error, retries and recoveries as it always does. The task threads are the
worker's own (its ``executors["default"]``), so a worker never runs more tasks at once than it has
threads, and a task there may ask ``distributed.get_worker()`` where it runs, as one the scheduler sent
may (it used to raise, and the compute then ran again through the scheduler). Each task's start and stop go to the profiler as the task stream's would
(:func:`~openclaw_dask.cluster.here.tell_stream`), attributed to the worker and thread that ran it.
Which path the last compute took, and why, is :attr:`Direct.last`: ``openclaw run`` and the benchmark
print it (``path``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import threading
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from dask.utils import key_split
from distributed.diagnostics.plugin import WorkerPlugin
from distributed.utils import run_in_executor_with_context

from openclaw_dask.cluster.graph_parts import MAX_TASKS, Part, split
from openclaw_dask.cluster.paths import SCHEDULER, WORKERS, Choice
from openclaw_dask.cluster.slices import Cut, cut_elsewhere, per_output, sliced, view

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from distributed import Client, Scheduler, Worker

__all__ = ["MAX_TASKS", "Direct", "DirectRuns", "Part", "activity", "apart", "fetches", "idle_threads", "on_idle_threads", "placed",
           "split", "spread"]

OP = "openclaw_direct"  # the workers' handler
CUT = "openclaw_direct_cut"  # and the one that cuts slices of a worker's blocks for another's direct run
_PINNING = frozenset({"workers", "allow_other_workers", "resources"})  # compute keywords only the scheduler honours
_BRANCHES = "its tasks branch (a fan-in or fan-out) and {idle} task thread(s) would be idle: the scheduler runs branches on them"


def placed(scheduler: Scheduler, parts: list[Part], whole: list[set[Any]] | None = None) -> dict[str, list[Part]] | str:
    """Each part under the address of the worker holding the most bytes of what it reads (of what it reads ``whole``,
    per part, first), the least loaded of several, or where it reads nothing whole the least loaded; else why some
    part cannot go straight to a worker. Run on the scheduler's event loop."""
    from distributed.core import Status

    load: dict[str, list[Part]] = {}
    for i, part in enumerate(parts):
        held: Counter[str] = Counter()
        first: Counter[str] = Counter()
        for key in part.reads:
            ts = scheduler.tasks.get(key)
            if ts is None or ts.state != "memory" or not ts.who_has:
                return "it reads data not yet in the workers' memory"
            for ws in ts.who_has:
                held[ws.address] += ts.get_nbytes()
                first[ws.address] += ts.get_nbytes() if whole is None or key in whole[i] else 0
        if any(first.values()):
            address = max(sorted(held), key=lambda a: (first[a], held[a], -len(load.get(a, ()))))
        else:  # it moves only slices wherever it runs: the least loaded worker, then the one holding most of what it cuts
            running = {a for a, ws in scheduler.workers.items() if ws.status == Status.running}
            address = max(sorted(running | held.keys()), key=lambda a: (-len(load.get(a, ())), held[a]))
        load.setdefault(address, []).append(part)
    return load


def spread(scheduler: Scheduler, load: dict[str, list[Part]]) -> dict[str, list[Part]]:
    """``load`` with the parts that would wait for a busy worker's threads moved to idle threads of other workers (of
    those, the one holding most of what a part reads), where its tasks (at the durations the scheduler measured) take
    longer than fetching the rest there.
    Unmeasured tasks count as free: they stay where their data is."""
    from distributed.core import Status

    spare = {address: ws.nthreads - len(load.get(address, ())) for address, ws in scheduler.workers.items()
             if ws.status == Status.running and ws.nthreads > len(load.get(address, ()))}
    prefixes = scheduler.task_prefixes
    for address, parts in list(load.items()):
        for part in parts[scheduler.workers[address].nthreads:]:
            if not spare:
                return load
            fetched = {a: sum(scheduler.tasks[key].get_nbytes() for key in fetches(scheduler, part, a)) for a in spare}
            thief = min(fetched, key=fetched.__getitem__)  # the idle worker already holding most of it
            moved = fetched[thief]
            saved = sum(max(prefixes[p].duration_average, 0.0) for t in part.tasks if (p := key_split(t.key)) in prefixes)
            if saved <= moved / scheduler.bandwidth:
                continue
            load[address].remove(part)
            load.setdefault(thief, []).append(part)
            spare[thief] -= 1
            if not spare[thief]:
                del spare[thief]
    return load


def on_idle_threads(scheduler: Scheduler, load: dict[str, list[Part]], parts: list[Part]) -> dict[str, list[Part]] | str:
    """``load`` with ``parts`` (which read nothing the workers hold: they make their own data) spread over the idle
    task threads, one each in turn (so each worker gets its share of them), else why not. Run on the scheduler's event
    loop.

    An idle thread is one that no task is processing on and no part of ``load`` waits for. More parts than idle threads
    wait for one; if they are alike (the same kinds of task, as the chunks of one array are), each takes as long as
    the next, and an even share for each thread ends when the scheduler's placement as threads free up would. Parts of
    different kinds would not: the scheduler runs those."""
    idle = idle_threads(scheduler, load)
    if parts and not idle:
        return f"{len(parts)} parts make their own data, and no task thread is idle"
    if len(parts) > len(idle) and len({tuple(key_split(t.key) for t in part.tasks) for part in parts}) > 1:
        return f"{len(parts)} parts of different kinds make their own data, more than the {len(idle)} idle task threads"
    threads = [address for _, address in sorted(idle)]  # each worker's first idle thread, then each one's second...
    for i, part in enumerate(parts):
        load.setdefault(threads[i % len(threads)], []).append(part)
    return load


def idle_threads(scheduler: Scheduler, load: Mapping[str, list[Part]]) -> list[tuple[int, str]]:
    """``(k, address)`` for the k-th idle task thread of each running worker: one that no task is processing on and no
    part of ``load`` waits for. Run on the scheduler's event loop."""
    from distributed.core import Status

    return [(k, address) for address, ws in scheduler.workers.items() if ws.status == Status.running
            for k in range(ws.nthreads - len(ws.processing) - len(load.get(address, ())))]


def apart(scheduler: Scheduler, parts: list[Part]) -> tuple[dict[str, list[Part]], dict[str, dict[str, Cut]]] | None:
    """``parts`` split per output (:mod:`~openclaw_dask.cluster.slices`) and placed, each where it reads most whole, and
    by address the views its parts take of blocks held elsewhere, by the address that cuts them; ``None`` where a part
    cannot split, or a task thread would still be idle. Run on the scheduler's event loop."""
    split_up = []
    for part in parts:
        found = per_output(part) if part.branches else [part]
        if not part.reads or found is None:  # a part making its data is dealt out as before (on_idle_threads)
            return None
        split_up += found
    cuts = {id(part): sliced(part) for part in split_up}
    where = placed(scheduler, split_up, [set(part.reads) - cuts[id(part)].keys() for part in split_up])
    if isinstance(where, str) or idle_threads(scheduler, where):
        return None
    load: dict[str, list[Part]] = {}
    away: dict[str, dict[str, Cut]] = {}
    for address, sent in where.items():
        ws = scheduler.workers[address]
        for part in sent:
            kept, elsewhere = cut_elsewhere(part, cuts[id(part)], [k for k in part.reads if ws in (scheduler.tasks[k].who_has or ())])
            load.setdefault(address, []).append(kept)
            mine = away.setdefault(address, {}) if elsewhere else {}
            for block, cut in elsewhere.items():
                holder = min(w.address for w in scheduler.tasks[block].who_has or ())
                mine[holder] = mine[holder].merged(cut) if holder in mine else cut
    return load, away


def fetches(scheduler: Scheduler, part: Part, address: str) -> dict[Any, str]:
    """What ``part`` reads that the worker at ``address`` does not hold, each under a worker that holds it."""
    ws = scheduler.workers.get(address)
    holders = {key: scheduler.tasks[key].who_has or set() for key in part.reads if key not in part.slices}
    return {key: min(w.address for w in where) for key, where in holders.items() if ws not in where}


class Direct:
    """Computes whose tasks read only data on the workers, run on those workers (see the module's docstring).

    Parameters
    ----------
    client, scheduler
        The session's client, and its scheduler, which runs in this process.
    """

    def __init__(self, client: Client, scheduler: Scheduler) -> None:
        self.client, self.scheduler = client, scheduler
        self.last: Choice | None = None  # the path the last compute took, and why (a run summary's line)

    def results(self, arrays: list[Any], expr: Any, keys: list[Any], kwargs: Mapping[str, Any]) -> dict[Any, Any] | None:
        """The value of each of ``keys`` (``expr``'s, which computes ``arrays``), run on the workers holding what
        they read; ``None`` where the compute does not qualify or a worker declined: the scheduler's then."""
        graphs = [a.__dask_graph__() for a in arrays]
        if sum(map(len, graphs)) > MAX_TASKS:  # (its layers' sizes bound the graph before it is made: made once, there)
            return self._declined(f"over {MAX_TASKS} tasks")
        if _PINNING & kwargs.keys() or _annotated(graphs):
            return self._declined("pinned to workers, or annotated")
        parts = split(expr.__dask_graph__(), keys)
        if isinstance(parts, str):
            return self._declined(parts)
        try:
            return self.client.sync(self._run, parts, _output_bytes(arrays))
        except Exception:  # noqa: BLE001 - a worker went or is closing: the scheduler's run copes, and reports any error
            return self._declined("a worker went or closed under it")

    def _declined(self, why: str) -> dict[Any, Any] | None:
        """No results: the scheduler's run, for ``why``."""
        self.last = Choice(SCHEDULER, why, None, None)
        return None

    async def _run(self, parts: list[Part], made: dict[Any, int]) -> dict[Any, Any] | None:
        from distributed.protocol.serialize import ToPickle

        from openclaw_dask.cluster.here import streams_watched, tell_stream

        where = placed(self.scheduler, [part for part in parts if part.reads])
        if isinstance(where, str):
            return self._declined(where)
        where = on_idle_threads(self.scheduler, spread(self.scheduler, where), [part for part in parts if not part.reads])
        if isinstance(where, str):
            return self._declined(where)
        away: dict[str, dict[str, Cut]] = {}
        if any(part.branches for part in parts) and (idle := idle_threads(self.scheduler, where)):
            found = apart(self.scheduler, parts)  # one part per output, where each takes a thread
            if found is None:
                return self._declined(_BRANCHES.format(idle=len(idle)))
            where, away = found
        fetch = {address: {k: w for part in sent for k, w in fetches(self.scheduler, part, address).items()} for address, sent in where.items()}
        if (crowded := _too_much(self.scheduler, fetch, where, made, away)) is not None:
            return self._declined(crowded)
        rpc = self.client.rpc
        replies = await asyncio.gather(*(rpc(address).openclaw_direct(parts=ToPickle(sent), fetch=ToPickle(fetch[address]),
                                                                      **({"cut": ToPickle(away[address])} if address in away else {}))
                                         for address, sent in where.items()))
        if any(reply.get("status") != "OK" for reply in replies):
            answers = sorted({reply["status"] for reply in replies} - {"OK"})
            return self._declined(f"a worker answered {' and '.join(answers)} (paused, missing a key, or a task raised)")
        results, records = _answers(where, replies)
        if streams_watched():  # a profiler: what each task's spec carried, as the scheduler's probe weighs its tasks
            from dask.sizeof import sizeof

            specs = {task.key: sizeof(task) for sent in where.values() for part in sent for task in part.tasks}
            for r in records:
                r["spec_bytes"] = specs.get(r["key"], 0)
        tell_stream(records)
        self.last = Choice(WORKERS, f"{len(records)} tasks on {len(where)} worker(s), no scheduling round", None, None)
        return results


def _answers(where: dict[str, list[Part]], replies: list[dict[str, Any]]) -> tuple[dict[Any, Any], list[dict[str, Any]]]:
    """The workers' ``replies`` (each ``OK``) to the parts sent ``where``: each output's value, and each task's record as
    the scheduler's task stream has them, with the bytes it read."""
    results: dict[Any, Any] = {}
    records: list[dict[str, Any]] = []
    for address, reply in zip(where, replies, strict=True):
        first = len(records)
        for values, ran in reply["results"]:
            results.update(values)
            records += _records(address, ran)
        if reply.get("fetched") and len(records) > first:  # what it fetched from other workers: its first task's transfer
            start, stop = reply["fetched"]
            records[first]["startstops"] = ({"action": "transfer", "start": start, "stop": stop}, *records[first]["startstops"])
        for holder, ran in reply.get("cut", ()):  # the views other workers took of their blocks for it
            records += _records(holder, ran)
    return results, records


def _records(address: str, ran: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """The task stream's records of the tasks a worker ran (``_ran``'s tuples)."""
    return [{"key": key, "worker": address, "thread": thread, "nbytes": wrote, "input_bytes": read, "status": "OK", "direct": True,
             "startstops": ({"action": "compute", "start": start, "stop": stop},)} for key, thread, start, stop, read, wrote in ran]


def _too_much(scheduler: Scheduler, fetch: dict[str, dict[Any, str]], where: dict[str, list[Part]],
              made: Mapping[Any, int], away: Mapping[str, Mapping[str, Cut]] | None = None) -> str | None:
    """Why a worker should not run its parts of one direct run, or ``None``: what it would fetch (a slice ``away`` at
    its block's bytes, at most) and the results it would make (``made``: bytes per output key) are held outside what
    the worker manages (never spilled) until it answers; over a quarter of its memory limit, the scheduler's run, whose
    transfers and results are managed, is the safe one."""
    for address, sent in where.items():
        blocks = {*fetch.get(address, ()), *(b for cut in (away or {}).get(address, {}).values() for b in cut.blocks)}
        fetched = sum(scheduler.tasks[key].get_nbytes() for key in blocks)
        made_here = sum(made.get(key, 0) for part in sent for key in part.outputs) + sum(_between(scheduler, part, made) for part in sent)
        nbytes, limit = fetched + made_here, scheduler.workers[address].memory_limit
        if limit and nbytes > limit / 4:
            return f"a worker would hold {nbytes / 2**20:.0f} MiB fetched or made, over a quarter of its memory limit"
    return None


def _between(scheduler: Scheduler, part: Part, made: Mapping[Any, int]) -> int:
    """A bound on the bytes a branching part holds between its tasks: each task's result at most the biggest block the
    part reads or makes (a chain holds one intermediate at a time, beside its output); an alias's nothing, a view's
    (cluster/slices.py) half of it: dask's ``getitem`` copies a slice under half of what it cuts, the rest are views."""
    from dask._task_spec import Alias

    if not part.branches:
        return 0
    blocks = [scheduler.tasks[key].get_nbytes() for key in part.reads if key not in part.slices] + [made.get(key, 0) for key in part.outputs]
    biggest, outputs = max(blocks, default=0), set(part.outputs)
    return sum(0 if isinstance(task, Alias) else biggest // 2 if view(task) else biggest for task in part.tasks
               if task.key not in outputs)


def _output_bytes(arrays: list[Any]) -> dict[Any, int]:
    """The bytes of each chunk of ``arrays`` by its key, as their chunk grids say (a chunk of unknown size: 0)."""
    made: dict[Any, int] = {}
    for array in arrays:
        for index in itertools.product(*(range(len(c)) for c in array.chunks)):
            n, key = math.prod(c[i] for c, i in zip(array.chunks, index, strict=True)), (array.name, *index)
            made[key] = 0 if math.isnan(n) else int(n) * array.dtype.itemsize
    return made


def _annotated(graphs: list[Any]) -> bool:
    """Whether some layer of ``graphs`` carries annotations (or cannot say: a graph of no layers)."""
    return any(not hasattr(g, "layers") or any(layer.annotations for layer in g.layers.values()) for g in graphs)


class DirectRuns(WorkerPlugin):
    """A worker runs the parts of a compute :class:`Direct` sends it, on its task threads, from its own data."""

    name = "openclaw-direct-runs"
    idempotent = True

    def setup(self, worker: Worker) -> None:
        self.worker = worker
        worker.handlers[OP] = self.run
        worker.handlers[CUT] = self.cut

    def teardown(self, worker: Worker) -> None:
        worker.handlers.pop(OP, None)
        worker.handlers.pop(CUT, None)

    async def run(self, parts: list[Part], fetch: dict[Any, str] | None = None, cut: dict[str, Cut] | None = None) -> dict[str, Any]:
        """Each part's outputs and its tasks' timings, or a status other than ``"OK"`` (then nothing ran); ``fetch``:
        the keys the parts read that other workers hold, and where; ``cut``: the views the parts take of blocks other
        workers hold, by the address that cuts them (cluster/slices.py)."""
        from distributed.core import Status
        from distributed.protocol import to_serialize

        worker = self.worker
        if worker.status != Status.running:  # paused at its memory limit, or closing
            return {"status": "busy"}
        got: Any = ({}, None)
        taken: Any = ({}, [])
        if fetch or cut:  # what the parts read of other workers' data: blocks fetched, slices cut there
            got, taken = await asyncio.gather(_fetched(worker, fetch) if fetch else _now(got), _slices(worker, cut) if cut else _now(taken))
        if got is None or taken is None:
            return {"status": "missing"}
        fetched, span = got
        fetched.update(taken[0])
        try:  # on the loop, as the worker reads its data
            inputs = [{key: fetched[key] if key in fetched else worker.data[key] for key in part.reads} for part in parts]
        except KeyError:
            return {"status": "missing"}
        _ACTIVITY[0] += 1
        _ACTIVITY[1] += len(parts)
        try:
            with _as_task_of(worker):  # a user's task may ask distributed.get_worker() (or get_client()) where it runs
                done = await asyncio.gather(*(run_in_executor_with_context(worker.executors["default"], _ran, part, values)
                                              for part, values in zip(parts, inputs, strict=True)))
        except RuntimeError:  # its task threads shut down: the worker is closing
            return {"status": "busy"}
        finally:
            _ACTIVITY[1] -= len(parts)
        if any(d is None for d in done):
            return {"status": "failed"}
        reply = {"status": "OK", "results": to_serialize(done), "fetched": span}
        return {**reply, "cut": to_serialize(taken[1])} if taken[1] else reply  # (an empty one costs ~50 µs each way)

    async def cut(self, comm: Any, cut: Cut, serializers: list[str] | None = None) -> Any:
        """Run ``cut``'s views of this worker's blocks and send the slices, held (a peer may read them out of this
        process's memory) until the asker says it has them, as distributed's ``get_data`` holds its data."""
        from distributed.core import Status
        from distributed.protocol import to_serialize

        worker, reply = self.worker, dict[str, Any](status="busy")
        if worker.status == Status.running:
            try:  # on the loop, as the worker reads its data
                values = {key: worker.data[key] for key in cut.blocks}
            except KeyError:
                reply = {"status": "missing"}
            else:  # not on a task thread: one may be running this worker's own parts, which wait for nothing of this
                done = await asyncio.to_thread(_ran, Part(cut.tasks, cut.blocks, cut.slices), values)
                reply = {"status": "failed"} if done is None else {
                    "status": "OK", "data": {key: to_serialize(v) for key, v in done[0].items()}, "ran": to_serialize(done[1])}
        await comm.write(reply, serializers=serializers)
        if reply["status"] == "OK":
            await comm.read()  # "OK": read, the slices may go
        return Status.dont_reply


async def _fetched(worker: Worker, fetch: dict[Any, str]) -> tuple[dict[Any, Any], tuple[float, float]] | None:
    """The values of ``fetch``'s keys, each asked of the worker that holds it (distributed's own request, read out of
    that worker's memory where the workers may: peer_reads.py), and when the fetch began and ended; ``None`` where
    one is missing or its holder busy. Kept for this run only: this worker's state machine never hears of them."""
    import distributed.worker

    holders: dict[str, list[Any]] = {}
    for key, address in fetch.items():
        holders.setdefault(address, []).append(key)
    start = time.time()
    try:
        replies = await asyncio.gather(*(distributed.worker.get_data_from_worker(worker.rpc, keys, address, who=worker.address)
                                         for address, keys in holders.items()))
    except OSError:
        return None
    if any(reply["status"] != "OK" or len(reply["data"]) < len(holders[address])
           for address, reply in zip(holders, replies, strict=True)):
        return None
    stop, values = time.time(), dict[Any, Any]()
    for reply in replies:
        values.update(reply["data"])  # type: ignore[typeddict-item]  # every status was OK
    return values, (start, stop)


@contextlib.contextmanager
def _as_task_of(worker: Worker) -> Iterator[None]:
    """``distributed.get_worker()`` answers ``worker`` in this context and the task threads it is copied to, as in a task
    distributed runs (its context variable is distributed's own, unexported: where it is missing, nothing is set)."""
    import distributed.worker

    cvar = getattr(distributed.worker, "_worker_cvar", None)
    token = None if cvar is None else cvar.set(worker)
    try:
        yield
    finally:
        if token is not None:
            cvar.reset(token)  # type: ignore[union-attr]  # set above


async def _now(value: Any) -> Any:
    return value


async def _slices(worker: Worker, cut: dict[str, Cut]) -> tuple[dict[Any, Any], list[tuple[str, Any]]] | None:
    """The slices ``cut``'s views take, each cut by the worker at its address (and the tasks that ran there, by that
    address); ``None`` where one is missing, busy, or a view raised."""
    from distributed.core import send_recv
    from distributed.protocol.serialize import ToPickle

    from openclaw_dask.cluster.peer_reads import asked_with

    async def one(address: str, views: Cut) -> dict[str, Any]:
        comm = await worker.rpc.connect(address)
        try:
            reply = await send_recv(comm, op=CUT, cut=ToPickle(views), deserializers=asked_with())
            if reply["status"] == "OK":
                await comm.write("OK")
            return reply
        finally:
            worker.rpc.reuse(address, comm)

    try:
        replies = await asyncio.gather(*(one(address, views) for address, views in cut.items()))
    except OSError:
        return None
    if any(reply["status"] != "OK" for reply in replies):
        return None
    values: dict[Any, Any] = {}
    for reply in replies:
        values.update(reply["data"])
    return values, [(address, reply["ran"]) for address, reply in zip(cut, replies, strict=True)]


_ACTIVITY = [0, 0]  # in a worker: direct runs started, parts running now (read by the heap keeper, plugins.py)


def activity() -> tuple[int, int]:
    """In a worker: how many direct runs it has started, and how many parts run now."""
    return _ACTIVITY[0], _ACTIVITY[1]


def _ran(part: Part, values: dict[Any, Any]) -> tuple[dict[Any, Any], list[tuple[Any, ...]]] | None:
    """``part``'s outputs and each task's (key, thread, start, stop, bytes read, bytes made), or ``None`` if a task
    raised."""
    from dask.sizeof import sizeof

    ran, thread, kept = [], threading.get_ident(), {*part.outputs, *part.reads}
    readers = Counter(dep for task in part.tasks for dep in task.dependencies)
    try:
        for task in part.tasks:
            start = time.time()
            values[task.key] = task(values)
            stop = time.time()
            read = sum(sizeof(values[dep]) for dep in task.dependencies)
            ran.append((task.key, thread, start, stop, read, sizeof(values[task.key])))
            readers.subtract(task.dependencies)
            for dep in task.dependencies - kept:
                if not readers[dep]:
                    del values[dep]  # an intermediate whose last reader ran: not held while the next tasks run
    except Exception:  # noqa: BLE001 - the scheduler's run reports it, with the worker's traceback
        return None
    return {key: values[key] for key in part.outputs}, ran
