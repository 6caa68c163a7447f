"""The memory model: a graph's projected peak per worker, checked before it runs and measured after.

The acceptance test is in the style of Cubed's ``test_mem_utilization``: on the process backend
with a 256 MiB memory limit, each common array operation's measured peak (the worker's process
memory at its highest during the compute, less its process memory just before) is at most the
projection, and the projection at most 3 times it, at 1 and 2 threads; so is each standard-suite
kernel's (pipeline's from its batches' measured sizes, tiny-tasks' from its functions' declared results).
"""

from __future__ import annotations

import logging
import math
import re
import time

import dask.array as da
import numpy as np
import pytest
from dask.utils import parse_bytes

import openclaw_dask
from openclaw_dask import memory_model
from openclaw_dask.diagnostics.analysis import analyze
from openclaw_dask.diagnostics.collect import collect
from openclaw_dask.errors import ConfigError
from openclaw_dask.memory_model import RESERVE, TASK_STATE, describe, misfit, project, project_stream

MiB = 2**20
SMALL = {"backend": "process", "workers": 1, "omp_threads": 2, "memory_limit": "256MiB"}


def test_elementwise_projection_counts_results_inputs_and_threads():
    x = da.ones((1024, 1024), chunks=(256, 1024))  # four 2 MiB blocks
    one = project([x + 1], threads=1, saturation=1.0)
    # dask's order: ones, add, ones, add, ...; the last add holds three results, its input and its own output
    assert one.held == 10 * MiB and one.task.footprint == 4 * MiB and one.task.layer == "add"
    assert one.per_worker == 10 * MiB + RESERVE and one.running == 4 * MiB + RESERVE
    # two threads: two ones, then two adds, at once (the last round holds 12 MiB); ceil(2.2) - 2 queued roots
    two = project([x + 1], threads=2, saturation=1.1)
    assert two.held == 12 * MiB and two.per_worker == 12 * MiB + (4 + 2) * MiB + 2 * MiB + RESERVE  # a drifting thread
    assert two.running == 2 * 4 * MiB + 2 * MiB + RESERVE
    assert project([x + 1], workers=2, threads=1, saturation=1.0).per_worker == 6 * MiB + RESERVE  # an even share


def test_chunk_reductions_hold_a_chunk_not_their_layer_annotation():
    x = da.ones((1024, 1024), chunks=(256, 1024))
    p = project([x.sum(axis=0)], threads=1, saturation=1.0)
    assert p.task.output == 1024 * 8 and p.held < 2 * MiB + 64 * 1024  # a block in, a row out


def test_tree_reductions_count_the_concatenated_inputs():
    x = da.ones((1024, 1024), chunks=(256, 256))
    p = project([(x @ x).sum()], threads=1, saturation=1.0)
    assert p.task.temporary >= p.task.output > 0  # matmul's partial sums add pairwise into new arrays


def test_views_cost_nothing_and_declared_temporaries_count():
    x = da.ones((1024, 1024), chunks=(256, 1024))  # four 2 MiB blocks
    assert project([x.T], threads=1).held == project([x], threads=1).held == 8 * MiB  # a transpose shares its block

    @memory_model.allocates(inputs=2)
    def scratch(block):
        return block * 2 + np.sin(block)

    plain, declared = (project([x.map_blocks(f)], threads=1) for f in (lambda b: b * 2 + np.sin(b), scratch))
    assert plain.task.temporary == 0 and declared.task.temporary == 2 * 2 * MiB
    assert declared.per_worker == plain.per_worker + 4 * MiB  # the last task's scratch beside everything held


@memory_model.allocates(returns=8 * MiB)
def _block(i):
    return np.full(MiB, float(i))


@memory_model.allocates(returns=8)
def _sum_all(blocks):
    return float(sum(b.sum() for b in blocks))


def test_a_delayed_graph_is_projected_when_its_functions_declare_what_they_return():
    import dask

    blocks = dask.delayed(_sum_all)([dask.delayed(_block)(i) for i in range(4)])
    p = project([blocks], threads=1, saturation=math.inf)
    # walked: the four blocks wait for the sum, which holds them while it runs
    assert p.walked and p.task.layer == "sum_all" and p.task.footprint == 4 * 8 * MiB + 8
    assert p.held == p.per_worker - RESERVE == 4 * 8 * MiB + 8
    tiny = dask.delayed(_sum_all)([dask.delayed(_sum_all)([]) for _ in range(100)])  # under SMALL_HELD together
    assert project([tiny], threads=2).per_worker == 101 * 8 + RESERVE and not project([tiny]).walked
    assert project([dask.delayed(_sum_all)([dask.delayed(sum)([1, 2])])]) is None  # sum declares nothing
    many = dask.delayed(_sum_all)([dask.delayed(_sum_all)([]) for _ in range(999)])  # 1,000 tasks
    # a distributed worker's state for its share of the tasks, where that passes the reserve; none on a local engine
    assert project([many], workers=2).per_worker == 1000 * 8 + 500 * TASK_STATE
    assert project([many], workers=2, relayed=False).per_worker == 1000 * 8 + RESERVE


def test_no_array_no_projection():
    import dask

    assert project([], threads=2) is None and project([object()]) is None
    assert project([dask.delayed(sum)([1, 2])]) is None  # a Delayed has every attribute, chunks too


def test_chunks_of_unknown_size_are_left_out_not_a_crash():
    """``x[x > 0]`` has NaN chunks until computed: the check raised ValueError on every backend."""
    x = da.arange(1_000, chunks=100, dtype="float64") - 500
    masked = x[x > 0]
    assert project([masked.sum()], threads=2) is not None  # the layers of known size still count
    with openclaw_dask.session() as s:
        assert s.compute(masked.sum()) == sum(range(1, 500))


def test_misfit_names_the_worker_and_a_chunk_that_fits():
    workers = {"tcp://127.0.0.1:1": {"memory_limit": 256 * MiB, "nthreads": 2, "metrics": {"memory": 80 * MiB}}}
    p = project([(da.ones((4096, 4096), chunks=(2048, 4096)) + 1).sum()], threads=2)  # 64 MiB chunks
    over = misfit(p, workers, pause=0.8, max_spill=None)
    assert over is not None and over.allowed == int(0.8 * 256 * MiB) and over.baseline == 80 * MiB
    assert over.chunk is not None and over.chunk < 64 * MiB
    rows = over.chunk // (8 * 4096)
    smaller = project([(da.ones((4096, 4096), chunks=(rows, 4096)) + 1).sum()], threads=2)
    assert misfit(smaller, workers, pause=0.8, max_spill=None) is None  # the suggested chunk fits
    assert misfit(p, {"w": {**workers["tcp://127.0.0.1:1"], "memory_limit": over.limit}}, pause=0.8,
                  max_spill=None) is None  # and so does the suggested limit
    kept = project([da.ones((4096, 4096), chunks=(512, 4096)) + 1], threads=2)  # 128 MiB of results, 16 MiB chunks
    over = misfit(kept, workers, pause=0.8, max_spill=None)
    assert kept.results == 128 * MiB and over.chunk is None  # the results alone do not fit: no chunk size helps
    assert describe(kept, over).startswith("this graph is projected to need ") and "held at once" in describe(kept, over)
    assert misfit(kept, workers, pause=0.8, max_spill=256 * MiB) is None  # unless they may spill


def test_blocks_a_worker_holds_for_reuse_are_not_counted_as_taken():
    """A worker's heap keeps freed blocks for the next compute (cluster/heap.py): its process memory counts them,
    the ``heap_free`` metric says how much of it they are, and the check leaves them out of the baseline."""
    p = project([(da.ones((4096, 4096), chunks=(2048, 4096)) + 1).sum()], threads=2)  # 64 MiB chunks
    holding = {"memory_limit": 1024 * MiB, "nthreads": 2, "metrics": {"memory": 700 * MiB}}
    assert misfit(p, {"w": holding}, pause=0.8, max_spill=None).baseline == 700 * MiB
    freed = {**holding, "metrics": {"memory": 700 * MiB, "heap_free": 600 * MiB}}
    assert misfit(p, {"w": freed}, pause=0.8, max_spill=None) is None


def test_a_stream_holds_its_running_tasks_and_the_output_of_each_batch_waiting():
    steps = [("load", 100, MiB, (0, 1)), ("scale", MiB, MiB, (2, 0)), ("total", MiB, 8, (0, 0))]
    one = project_stream(steps, group=2, in_flight=8, threads=1)
    # the biggest task: scale on 2 batches, 2 x (1 + 1 + 2) MiB; the 6 other batches hold at most 1 MiB each
    assert one.task.layer == "scale" and one.task.footprint == 8 * MiB
    assert one.per_worker == 8 * MiB + 6 * MiB + RESERVE and one.running == 8 * MiB + RESERVE
    two = project_stream(steps, group=2, in_flight=8, workers=2, threads=1)
    assert two.held == 2 * 8 * MiB + 4 * MiB and two.per_worker == two.held // 2 + RESERVE
    # one batch alive: one thread busy, whatever the threads
    assert project_stream(steps, group=1, in_flight=1, threads=4).per_worker == 4 * MiB + RESERVE


def test_a_pipeline_measures_the_batches_each_stage_is_given_and_returns():
    from dask.sizeof import sizeof

    from openclaw_dask.dataflow import pipeline

    def rows(batch):
        return np.ones((len(batch), 1024))

    with openclaw_dask.session(backend="thread", workers=2) as s:
        flow = pipeline(s, [memory_model.allocates(output=1)(rows), lambda x: x.sum(axis=1)], range(64), batch_size=16)
        assert sum(float(v.sum()) for v in flow) == 64 * 1024
    steps = memory_model.stream_steps(flow)
    assert [(name, i, o, t) for name, i, o, t in steps] == [
        ("rows", sizeof(list(range(16))), 16 * 1024 * 8, (0.0, 1.0)), ("<lambda>", 16 * 1024 * 8, 16 * 8, (0.0, 0.0))]


@pytest.fixture(scope="module")
def small():
    with openclaw_dask.session(**SMALL) as s:
        yield s


@pytest.fixture(scope="module")
def by_threads():
    # room beside the projections: a worker's memory in use before a kernel drifts with its history
    # (114 MiB here, 130 in a CI run, where stencil's check then refused at 2 threads: 209.2 > 204.8 MiB)
    roomy = {**SMALL, "memory_limit": "320MiB"}
    with openclaw_dask.session(**{**roomy, "omp_threads": 1}) as single, openclaw_dask.session(**roomy) as double:
        yield {1: single, 2: double}


def test_a_block_several_tasks_read_pulls_them_onto_its_worker(small):
    x = small.persist(da.ones((2048, 256), chunks=(256, 256)))  # eight 0.5 MiB blocks, on the workers already
    w = small.persist(da.ones((256, 256)))  # one 0.5 MiB block every product reads
    half = MiB // 2
    assert project([x @ w], workers=1, threads=1, saturation=1.0).per_worker == 8 * half + RESERVE  # the results
    # two workers: x + 1 is shared out; x @ w runs where w is, which holds every result and copies of x's blocks
    assert project([x + 1], workers=2, threads=1, saturation=1.0).per_worker == 4 * half + RESERVE
    assert project([x @ w], workers=2, threads=1, saturation=1.0).per_worker == (8 + 8) * half + RESERVE


def _held_tasks(dask_worker):
    return len(dask_worker.state.tasks)


def _rss(s):
    """The worker's process memory once it holds no task of an earlier compute (results are released after it returns)."""
    deadline = time.monotonic() + 10
    while any(s.client.run(_held_tasks).values()) and time.monotonic() < deadline:
        time.sleep(0.01)
    return next(iter(s.client.run(memory_model._process_memory).values()))


def _ops():
    x = da.random.random((4096, 1024), chunks=(1024, 1024))  # 32 MiB in 8 MiB chunks
    y = da.random.random((4096, 1024), chunks=(1024, 1024))
    return {
        "elementwise": lambda: x * 2 + y, "sum": lambda: x.sum(axis=0), "mean": lambda: x.mean(),
        "std": lambda: x.std(axis=1), "matmul": lambda: x.T @ y, "transpose": lambda: x.T + 1,
        "rechunk": lambda: x.rechunk((4096, 128)), "concatenate": lambda: da.concatenate([x, y]),
        "map_overlap": lambda: x.map_overlap(lambda b: b + 1, depth=4), "cumsum": lambda: x.cumsum(axis=0),
        "argmax": lambda: x.argmax(axis=0), "reshape": lambda: x.reshape(-1),
    }


@pytest.mark.parametrize("threads", [1, 2])
def test_measured_peak_within_projection(threads, by_threads):
    s = by_threads[threads]
    rows = []
    for name, make in _ops().items():
        graph = make()  # built here: a rechunk chooses p2p with the session's client
        before = _rss(s)
        with collect(s) as record:
            projected = memory_model.require_fit(s, [graph], computed=True)  # as s.compute projects it
            s.compute(graph)
        (worker,) = record.workers.values()
        measured = worker.peak_memory - before
        rows.append((name, projected.per_worker / MiB, measured / MiB, measured / projected.per_worker))
    table = "\n".join(f"| {n} | {p:.1f} | {m:.1f} | {r:.2f} |" for n, p, m, r in rows)
    print(f"\n{threads} thread(s)\n| operation | projected MiB | measured MiB | measured / projected |\n" + table)
    assert all(m <= p for _, p, m, _ in rows), table  # the bound: never under the measured peak
    # and useful (docs/memory.md's tables): at 2 threads the lowest was reshape's 0.38 on the comm path, sum's 0.49 on the shared one
    assert all(p <= 3 * m for _, p, m, _ in rows), table


def test_over_the_limit_is_refused_before_any_task_runs_and_the_named_chunk_runs(small, tmp_path):
    def touch(block):
        (tmp_path / "ran").write_text("a task ran")
        return block + 1

    big = small.array((8192, 4096), "float64", fill="random", chunks=((4096, 4096), (4096,)))  # two 128 MiB chunks
    t0 = time.perf_counter()
    with pytest.raises(ConfigError) as e:
        small.compute(big.map_blocks(touch, meta=np.empty((0, 0))).sum())  # meta given: touch runs only as a task
    assert time.perf_counter() - t0 < 1.0 and not (tmp_path / "ran").exists()
    line = str(e.value)
    assert "\n" not in line and "'touch'" in line and "chunk 4096x4096" in line and "may use 204.80 MiB" in line
    assert "cannot be spilled" in line
    chunk = re.search(r"parallel\.task_chunk_size: (\S+) or cluster\.memory_limit: (\S+) would fit", line)
    assert chunk, line
    with openclaw_dask.session(**{**SMALL, "task_chunk_size": chunk[1]}) as s:
        x = s.array((8192, 4096), "float64", fill="random")
        assert max(x.chunks[0]) * 4096 * 8 <= parse_bytes(chunk[1])
        with collect(s) as record:
            total = s.compute(x.map_blocks(lambda b: b + 1).sum())
        assert 0.5 * x.size < total < 1.5 * x.size + 1
        assert next(iter(record.workers.values())).peak_memory < 256 * MiB


_SCRIPT = """
import pathlib

import dask
import dask.array as da
import numpy as np

def touch(block_info=None):  # makes no chunk: were the check passed, the run fails here, allocating nothing
    pathlib.Path({ran!r}).write_text("a task ran")
    raise RuntimeError("the memory check let a graph over the limit run")

x = da.ones((1024, 1024), chunks=512)  # 8 MiB: fits
assert x.sum().compute() == 1024 * 1024 and dask.compute(x.T.sum())[0] == 1024 * 1024
assert x.persist().sum().compute() == 1024 * 1024
print("fitting graphs ran")
big = da.map_blocks(touch, chunks={chunks}, dtype="float64", meta=np.empty((0, 0)))
{last}
"""


# process: one worker of 256 MiB, two 160 MiB chunks; thread: this process is the worker, two 32 GiB chunks are
# more than this machine has
_BIG = {"process": ("((5120, 5120), (4096,))", ["cluster.memory_limit=256MiB"], "chunk 5120x4096"),
        "thread": ("((2**16, 2**16), (2**16,))", [], "chunk 65536x65536")}


@pytest.mark.parametrize(("backend", "last"), [("process", "big.sum().compute()"), ("process", "big.persist()"),
                                               ("thread", "dask.compute(big.sum())")])
def test_a_plain_compute_or_persist_in_a_script_is_checked_as_session_compute_is(backend, last, tmp_path):
    from click.testing import CliRunner

    from openclaw_dask.cli import main

    script, ran = tmp_path / "script.py", tmp_path / "ran"
    chunks, sets, named = _BIG[backend]
    script.write_text(_SCRIPT.format(ran=str(ran), last=last, chunks=chunks))
    sets = [f"parallel.backend={backend}", "parallel.workers=1", *sets]
    r = CliRunner().invoke(main, ["run", str(script), *(a for s in sets for a in ("--set", s))])
    assert r.exit_code == 1, r.output
    assert "fitting graphs ran" in r.stdout and not ran.exists()  # refused before any task ran
    (line,) = [ln for ln in r.stderr.splitlines() if ln.startswith("openclaw: error:")]
    assert named in line and "would fit" in line and "Traceback" not in r.stderr


@pytest.mark.parametrize("mode", ["warn", "off"])
def test_memory_check_warn_runs_and_off_projects_nothing(mode, caplog):
    caplog.set_level(logging.WARNING, logger="openclaw_dask")
    with openclaw_dask.session(**{**SMALL, "memory_check": mode}) as s:
        big = da.random.random((8192, 4096), chunks=(4096, 4096)).sum()  # never computed: projected over the limit
        projected = memory_model.require_fit(s, [big])  # what compute and persist call first
        assert (projected is None) == (mode == "off")
        assert s.compute(s.from_array(np.ones((64, 64))).sum()) == 64 * 64
    assert ("projected to need" in caplog.text) == (mode == "warn")


def _hog(block):
    scratch = np.ones(40 * MiB // 8)  # a temporary the chunks do not show: 40 MiB, touched
    return block + scratch[0]


def test_profile_shows_projected_peak_and_names_a_graph_over_it(small):
    x = da.ones((1024, 1024), chunks=(256, 1024))  # 2 MiB chunks
    with collect(small) as fits:
        small.compute((x + 1).sum())
    report = analyze(fits)
    (worker,) = report.workers
    assert fits.projected_graphs == fits.graphs == 1
    assert 0 < worker.peak_memory <= worker.projected_memory and "memory-model" not in report.kinds()
    with collect(small) as hogs:
        small.compute(x.map_blocks(_hog, meta=np.empty((0, 0))).sum())
    (verdict,) = [v for v in analyze(hogs).verdicts if v.kind == "memory-model"]
    assert verdict.evidence["peak_memory"] > verdict.evidence["projected_memory"] > 0
    assert "above the" in verdict.summary and verdict.overrides == {}


def test_a_peak_that_is_what_a_worker_held_as_the_run_began_is_not_the_run_s_own():
    """The heap keeper gave a worker's freed blocks back between the run's start and its graph's projection:
    tiny-tasks, which runs nothing on the workers, was said to have peaked 107 MiB above its projection."""
    from openclaw_dask.diagnostics.collect import RunRecord, WorkerRecord

    def verdicts(start):
        record = RunRecord(backend="process", start=0.0, stop=1.0, graphs=1, projected_graphs=1)
        record.workers["w"] = WorkerRecord("w", 1, 2**34, 188 * MiB, 0, 0, 0, start_memory=start)
        record.projected["w"] = 81 * MiB
        return [v for v in analyze(record).verdicts if v.kind == "memory-model"]

    assert verdicts(188 * MiB) == []  # held before: the projection saw it given back
    (over,) = verdicts(100 * MiB)  # grew past both: the run's own
    assert over.evidence == {"worker": "w", "peak_memory": 188 * MiB, "projected_memory": 81 * MiB}


# pipeline streams tasks it submits itself: it is projected once, after it ran, from its batches' measured sizes and
# its in_flight bound (memory_model.project_stream). tiny-tasks is a delayed graph whose functions declare what they
# return (memory_model.allocates(returns=...)).
STREAMS = ("pipeline",)


def _kernel_run(s, kernel, runs=1):
    """The record of ``runs`` timed runs of ``kernel`` at 32 MiB, and the worker's process memory just before them."""
    from distributed import futures_of, wait

    _rss(s)  # the last kernel's inputs released
    prepared = kernel(s, 32 * MiB)  # its inputs persisted (a graph projected and checked too)
    try:
        wait(futures_of(list(prepared.inputs)))
        before = next(iter(s.client.run(memory_model._process_memory).values()))
        with collect(s) as record:
            for _ in range(runs):
                prepared.execute(s)  # a timed run, as openclaw run/profile/benchmark make it
    finally:
        prepared.close()
    return record, before


@pytest.mark.parametrize("threads", [1, 2])
def test_suite_kernels_measured_peak_within_projection(threads, by_threads):
    from openclaw_dask.workloads.suite import KERNELS

    # On 2 threads the peak is that of 6 runs: the projection holds both threads' temporaries at once, which a run
    # does not reach when its two tasks happen not to overlap (tree-reduction: 16.0 MiB in a CI run, 19.8 the peak of
    # 2 runs once, 15.9 the peak of 3 in a CI run of 2026-12-06, ~32 when they overlap)
    s, rows, runs = by_threads[threads], [], 1 if threads == 1 else 6
    for name, kernel in KERNELS.items():
        record, before = _kernel_run(s, kernel, runs)
        (worker,) = record.workers.values()
        if name in STREAMS:
            assert record.graphs > record.projected_graphs == runs, name
        elif name == "tiny-tasks" and record.ran_here:  # the small-tasks pass may run it in the client, timed: some runs
            assert record.projected_graphs == runs >= record.graphs, name  # or all (1 of 6 went to the engine in one run)
            if not record.graphs:
                continue
        else:
            assert record.projected_graphs == record.graphs >= 1, name  # every graph it ran was projected
        rows.append((name, record.projected[worker.address], worker.peak_memory, before))
    table = "\n".join(f"| {n} | {(p - b) / MiB:.1f} | {(m - b) / MiB:.1f} | {(m - b) / (p - b):.2f} |" for n, p, m, b in rows)
    print(f"\n{threads} thread(s), 32 MiB\n| kernel | projected MiB | measured MiB | measured / projected |\n" + table)
    assert {n for n, *_ in rows} >= set(KERNELS) - {"tiny-tasks"}
    assert all(m <= p for _, p, m, _ in rows), table  # the verdict's test: the peak never above the projection
    # useful: within 3x of the measured growth, or of the reserve where a kernel allocates ~nothing
    assert all(p - b <= 3 * max(m - b, RESERVE) for _, p, m, b in rows), table


def test_an_all_to_all_rechunk_on_two_workers_peaks_within_projection():
    """Each worker of 2 holds, while it merges, its own split, the split it sent (kept until its reader is done)
    and the one it received: the received copy was not counted, and rechunk-transpose on 2 process workers peaked
    over its projection (0.95-1.08 GiB against 0.85-0.96 at 512 MiB; docs/memory.md)."""
    from distributed import futures_of, wait

    from openclaw_dask.workloads.suite import KERNELS

    with openclaw_dask.session(**{**SMALL, "workers": 2, "memory_limit": "1GiB"}) as s:
        prepared = KERNELS["rechunk-transpose"](s, 128 * MiB)  # four 32 MiB row blocks, two on each worker
        try:
            wait(futures_of(list(prepared.inputs)))
            before = s.client.run(memory_model._process_memory)
            with collect(s) as record:
                prepared.execute(s)
        finally:
            prepared.close()
    rows = [((record.projected[a] - before[a]) / MiB, (w.peak_memory - before[a]) / MiB) for a, w in record.workers.items()]
    print("\nrechunk-transpose, 128 MiB, 2 workers: projected, measured MiB per worker:", [(round(p, 1), round(m, 1)) for p, m in rows])
    assert len(rows) == 2
    assert all(m <= p <= 3 * max(m, RESERVE / MiB) for p, m in rows), rows
