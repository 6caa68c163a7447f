"""The threaded engine's path by measurement (cluster/paths.py): the task threads or the calling thread."""

from __future__ import annotations

import threading

import dask
import dask.array as da
import numpy as np
import pytest

import openclaw_dask
from openclaw_dask.cluster.local import InlinePool
from openclaw_dask.cluster.paths import PARALLEL, SERIAL, WORKERS, PathChooser, signature
from openclaw_dask.diagnostics.benchmark_render import row_cells
from openclaw_dask.diagnostics.benchmark_report import Row
from openclaw_dask.diagnostics.collect import collect
from openclaw_dask.workloads.suite import run_kernel

pytestmark = pytest.mark.timeout(60)


def _runs(chooser, shape, times):
    """Compute ``shape`` once per entry of ``times`` (path -> seconds); the paths taken, in order."""
    taken = []
    for seconds in times:
        path = chooser.path(shape)
        taken.append(path)
        chooser.ran(shape, path, seconds[path], busy=2 * seconds[path])
    return taken


def test_three_runs_on_the_threads_then_one_trial_then_the_faster():
    chooser = PathChooser(threads=2)
    serial_wins = [{PARALLEL: 0.010, SERIAL: 0.008}] * 7
    assert _runs(chooser, "a", serial_wins) == [PARALLEL] * 3 + [SERIAL] * 4
    assert chooser.last.path == SERIAL and "8 ms on one thread, 10 ms on 2" in chooser.last.text()
    threads_win = [{PARALLEL: 0.005, SERIAL: 0.008}] * 6
    assert _runs(PathChooser(threads=2), "b", threads_win) == [PARALLEL, PARALLEL, PARALLEL, SERIAL, PARALLEL, PARALLEL]


def test_a_shapes_first_run_is_not_counted():
    """The quick suite's matmul on 2 threads: a first run slower by what a shape pays once (no system time), then
    25 ms; one thread 39 ms. Counted, the first run made the threads' median 40 ms, and one thread was chosen."""
    chooser = PathChooser(threads=2)
    first = {PARALLEL: 0.055, SERIAL: 0.039}
    usual = {PARALLEL: 0.025, SERIAL: 0.039}
    assert _runs(chooser, "a", [first] + [usual] * 5) == [PARALLEL] * 3 + [SERIAL] + [PARALLEL] * 2
    assert "39 ms on one thread, 25 ms on 2" in chooser.last.text()


def test_settled_once_the_trial_on_one_thread_has_run_and_counted():
    chooser = PathChooser(threads=2)
    assert chooser.settled()  # nothing computed yet
    settled = []
    for path_seconds, system in [(0.05, 0.0), (0.05, 0.0), (0.05, 0.0), (0.04, 0.03), (0.04, 0.0), (0.05, 0.0)]:
        path = chooser.path("a")
        chooser.ran("a", path, path_seconds, busy=0.02, system=system)
        settled.append((path, chooser.settled()))
    # three runs on the threads; the trial paid page faults (not counted: tried again); then counted; settled from there
    assert settled == [(PARALLEL, False)] * 3 + [(SERIAL, False), (SERIAL, True), (SERIAL, True)]
    chooser.path(None)
    assert chooser.settled()  # a graph too big to key has no trial
    chooser.path("b")
    assert not chooser.settled()


def test_a_chosen_path_that_slows_down_gives_way():
    chooser = PathChooser(threads=2)
    _runs(chooser, "a", [{PARALLEL: 0.010, SERIAL: 0.008}] * 5)
    # one thread now takes 12 ms: its kept runs (8, 8, 12, 12) stop standing for it once the 8s are out of the window
    taken = _runs(chooser, "a", [{PARALLEL: 0.010, SERIAL: 0.012}] * 5)
    assert taken[:2] == [SERIAL, SERIAL] and taken[-1] == PARALLEL


def test_a_path_fast_now_and_then_is_judged_by_what_it_usually_takes():
    # the quick suite's sum on 2 cores: two task threads 4 ms now and then, 7 most of the time; one thread 5.4
    chooser = PathChooser(threads=2)
    taken = _runs(chooser, "a", [{PARALLEL: t, SERIAL: 0.0054} for t in (0.02, 0.004, 0.007, 0.007, 0.004, 0.007, 0.007)])
    assert taken == [PARALLEL] * 3 + [SERIAL] * 4  # by its fastest run: the threads, at 7 ms
    assert "5.4 ms on one thread, 5.5 ms on 2" in chooser.last.text()


def test_a_path_left_after_a_noisy_stretch_is_measured_again():
    """A 64 MiB sum: 4.5 ms on 2 threads, 5.3 on one; three noisy 6 ms runs on the threads once
    handed it to one thread for good, the threads' kept runs never renewed."""
    chooser = PathChooser(threads=2)
    usual, noisy = {PARALLEL: 0.0045, SERIAL: 0.0053}, {PARALLEL: 0.006, SERIAL: 0.0053}
    _runs(chooser, "a", [usual] * 5 + [noisy] * 3)
    assert chooser.path("a") == SERIAL
    taken = _runs(chooser, "a", [usual] * 30)
    # a run on the threads 8 computes on is one of the three kept: their median still says 6 ms; one more, 16
    # computes later, and the median says 4.5
    assert [i for i, path in enumerate(taken) if path == PARALLEL] == [7, 24, 25, 26, 27, 28, 29]
    assert "again" not in chooser.last.reason
    # settled: the path not taken is measured again after 8, 16, 32, then every 64 computes
    taken = _runs(chooser, "a", [usual] * 200)
    trials = [i for i, path in enumerate(taken) if path == SERIAL]
    assert len(trials) == 5 and all(b - a in (17, 33, 65) for a, b in zip(trials[1:], trials[2:], strict=False))


def test_shapes_are_measured_apart_and_no_shape_always_takes_the_threads():
    chooser = PathChooser(threads=2)
    _runs(chooser, "a", [{PARALLEL: 0.010, SERIAL: 0.008}] * 4)
    assert chooser.path("b") == PARALLEL
    assert _runs(chooser, None, [{PARALLEL: 1.0, SERIAL: 0.001}] * 5) == [PARALLEL] * 5


def test_no_trial_where_one_thread_could_cost_more_than_one_more_run():
    chooser = PathChooser(threads=8)
    for _ in range(3):
        chooser.ran("a", chooser.path("a"), 0.010, busy=0.070)  # 7 threads busy: one thread would take ~7x
    assert [chooser.path("a") for _ in range(3)] == [PARALLEL] * 3
    assert "more than one more run" in chooser.last.reason


def test_runs_that_paid_page_faults_are_warm_up_not_evidence():
    """stencil on a VM: 2 threads' first runs fault the heap in (mostly system time), then beat one thread."""
    chooser = PathChooser(threads=2)
    faulting = [(2.6, 4.5), (1.1, 1.5)]  # (wall, system seconds): counted, they chose one thread for good
    for wall, system in faulting:
        chooser.ran("a", chooser.path("a"), wall, busy=1.2, system=system)
    assert chooser.path("a") == PARALLEL and "measuring" in chooser.last.reason
    taken = []
    for _ in range(5):
        taken.append(path := chooser.path("a"))
        chooser.ran("a", path, {PARALLEL: 0.37, SERIAL: 0.62}[path], busy=0.64, system=0.002)
    assert taken == [PARALLEL, PARALLEL, SERIAL, PARALLEL, PARALLEL]
    # a path that always faults is counted after _KEPT warm-ups, and a trial that only warmed up is tried again
    always = PathChooser(threads=2)
    taken = []
    for _ in range(11):
        taken.append(path := always.path("b"))
        always.ran("b", path, {PARALLEL: 1.0, SERIAL: 0.5}[path], busy=1.0, system=0.9 if path == PARALLEL else 0.3)
    assert taken == [PARALLEL] * 6 + [SERIAL] * 5 and always.last.serial_s == 0.5 and always.last.parallel_s == 1.0


def test_signature_keys_the_graph_shape_not_its_data():
    def loop():
        return dask.delayed(sum)([dask.delayed(abs)(i) for i in range(40)])

    assert signature([loop()]) == signature([loop()])  # delayed keys are random; the shape is not
    x = da.ones((100,), chunks=10)
    assert signature([(x + 1).sum()]) != signature([x.sum()])
    assert signature([x.rechunk(20).sum()]) != signature([x.sum()])
    assert signature([x]) != signature([x.astype("float32")])
    assert "getattr" not in str(signature([loop()]))  # a Delayed is not asked for attributes it would make into tasks


def _thread_of(block):
    return np.full(block.shape, threading.get_ident(), dtype=np.int64)


@pytest.fixture(scope="module")
def threaded():
    with openclaw_dask.session(backend="thread", workers=2) as s:
        yield s


def test_the_trial_runs_in_the_calling_thread_with_the_same_result(threaded):
    s = threaded
    x = da.arange(64, chunks=8)
    results, threads = [], []
    for _ in range(5):
        value, where = s.compute((x * x).sum(), x.map_blocks(_thread_of))
        results.append(value)
        threads.append(set(where.tolist()))
    assert results == [int((np.arange(64) ** 2).sum())] * 5
    caller = threading.get_ident()
    assert caller not in threads[0] | threads[1] | threads[2]  # the task threads
    assert threads[3] == {caller}  # the trial
    assert s.running.path.serial_s is not None and s.running.path.parallel_s is not None


def _blas_threads(block):
    """In a task: the most threads a BLAS library of this process may use now (0 where threadpoolctl finds none)."""
    from threadpoolctl import threadpool_info

    return np.array([max((lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"), default=0)])


def test_both_paths_run_the_tasks_with_blas_at_one_thread(threaded):
    # A BLAS pool raised for a run on the calling thread spins after it (OpenBLAS ~0.1 s, OpenMP's blocktime alike),
    # and two task threads running next went at half speed on 2 cores (docs/benchmarks.md, twenty-second pass).
    s = threaded
    x = da.ones(4, chunks=2)
    seen, settled = [], []
    for _ in range(4):
        seen.append(set(s.compute(x.map_blocks(_blas_threads, chunks=(1,))).tolist()))
        settled.append(s.running.paths.settled())
    assert settled == [False, False, False, True]  # what a benchmark warms up to: the one-time trial has run
    if seen[0] == {0}:
        pytest.skip("threadpoolctl finds no BLAS library in this NumPy")
    assert seen[0] == seen[1] == seen[2] == {1}  # on 2 task threads: one BLAS thread each, never 4 threads on 2 cores
    assert s.running.path.path == SERIAL and seen[3] == {1}  # the trial on the calling thread: one BLAS thread too


def test_the_profiler_sees_the_tasks_of_a_run_on_the_calling_thread(threaded):
    s = threaded
    x = da.ones((4096,), chunks=256)
    with collect(s) as record:  # the calling thread as the engine's one-thread path runs it
        assert dask.compute((x + 2).sum(), scheduler="threads", pool=InlinePool(s.running._pool))[0] == 3 * 4096
    assert len(record.tasks) >= 16 and {t.thread for t in record.tasks} == {threading.get_ident()}


def test_no_trial_starts_while_a_profiler_records(threaded):
    s = threaded
    x = da.ones((4096,), chunks=512)
    for _ in range(3):
        s.compute((x * 3).sum())
    with collect(s) as record:
        s.compute((x * 3).sum())
    assert s.running.path.path == PARALLEL and "profiled" in s.running.path.reason
    assert threading.get_ident() not in {t.thread for t in record.tasks}
    s.compute((x * 3).sum())
    assert s.running.path.path == SERIAL  # the trial, once the profiler has gone


def test_a_kernel_run_says_which_path_it_took(threaded):
    # an array kernel: its graph keeps one shape from run to run (tiny-tasks' batches follow measured timings).
    # 10 runs measure both paths even where the first and up to 3 runs of each only paid page faults (not counted;
    # seen in CI)
    result = run_kernel("tree-reduction", threaded, size=4 * 2**20, repeat=10)
    assert result.ok
    path = dict(result.rows)["path"]
    assert path.startswith((SERIAL, PARALLEL)) and "measured faster" in path


def test_a_benchmark_row_on_one_thread_is_flagged():
    fields = {"workload": "array-sum", "ok": True, "median_s": 0.01, "min_s": 0.01, "max_s": 0.01, "times_s": (0.01,),
              "nbytes": 8, "gbps": 1.0, "gflops": 0.0, "tasks": 2.0, "tasks_per_s": 200.0,
              "task_latency_s": {"p50": 0.0, "p95": 0.0, "p99": 0.0}, "numpy_1thread_s": 0.01, "speedup_vs_numpy_1thread": 1.0,
              "flags": (), "verdicts": (), "config": "thread", "settings": {}, "workers": 1, "threads": 2,
              "efficiency_vs_bandwidth": 0.5, "speedup_vs_serial": 1.0}
    flagged = Row(**fields, path=f"{SERIAL}: measured faster (4 ms on one thread, 5 ms on 2)")
    assert "one thread (measured faster)" in row_cells(flagged)[10]
    assert row_cells(Row(**fields))[10] == "-"
    assert row_cells(Row(**fields, path=f"{WORKERS}: 4 tasks on 2 worker(s), no scheduling round"))[10] == "straight to the workers"
    assert Row.from_json(flagged.to_json()).path == flagged.path
