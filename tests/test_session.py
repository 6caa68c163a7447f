from __future__ import annotations

import sys

import dask
import dask.array as da
import numpy as np
import pytest

import openclaw_dask
from openclaw_dask.cluster.running import SyncEngine
from openclaw_dask.config import load_config
from openclaw_dask.errors import OpenclawError
from openclaw_dask.session import activated, active_session
from openclaw_dask.workloads import array_sum

MiB = 2**20


def test_disabled_runs_the_same_graph_serially_without_a_cluster():
    with openclaw_dask.session(enabled=False, task_chunk_size="1MiB") as s:
        assert isinstance(s.running, SyncEngine) and s.cluster is None and s.slots == 1 and s.engine.kind == "sync"
        assert dask.config.get("scheduler") == dask.local.get_sync  # its memory check in front (memory_model.guarded)
        with pytest.raises(OpenclawError, match="dask synchronous scheduler .parallel.enabled is false."):
            s.client  # noqa: B018
        x = s.array((1_000_000,), fill="random", seed=3)
        serial = s.compute(x.sum())
    with openclaw_dask.session(workers=2, task_chunk_size="1MiB") as s:
        assert s.compute(s.array((1_000_000,), fill="random", seed=3).sum()) == serial
    assert dask.config.get("scheduler", None) is not dask.local.get_sync


def test_close_is_idempotent_and_happens_on_error():
    with pytest.raises(KeyError), openclaw_dask.session(workers=1, engine="distributed") as s:
        client = s.client
        raise KeyError("inside the block")
    assert s.closed and client.status == "closed"
    with pytest.raises(KeyError), openclaw_dask.session(workers=1) as s:
        pool = s.running._pool
        raise KeyError("inside the block")
    assert s.closed and pool._shutdown
    s.close()
    s.close()


def test_start_failure_restores_dask_config(dask_scheduler):
    address, _ = dask_scheduler
    before = dask.config.get("distributed.comm.timeouts.connect")
    with pytest.raises(openclaw_dask.ClusterStartError):
        openclaw_dask.session(backend="remote", scheduler_address=address, workers=1, timeout="1s")
    assert dask.config.get("distributed.comm.timeouts.connect") == before


def test_chunks_follow_task_chunk_size_and_strategy():
    with openclaw_dask.session(enabled=False, task_chunk_size="8MiB") as s:
        assert s.chunks((4 * MiB,), "f8") == ((MiB,) * 4,)
        x = s.array((2048, 4096), "f8", fill="zeros")
        assert x.chunks == ((256,) * 8, (4096,))
    with openclaw_dask.session(enabled=False, task_chunk_size="8MiB", strategy="model") as s:
        x = s.array((2048, 4096), "f8", fill="zeros")
        assert x.chunks == ((2048,), (512,) * 8)
    with openclaw_dask.session(enabled=False, task_chunk_size="1000 elements") as s:
        assert s.chunks((4000,), "f4") == ((1000,) * 4,)


def test_auto_chunks_use_the_running_cluster():
    with openclaw_dask.session(workers=2) as s:
        plan = s.chunk_plan((2**30 // 8,), "f8")
        assert "2 slots" in plan.reason
        assert plan.n_chunks >= 2


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_array_fills_are_made_on_workers_and_exact(backend):
    with openclaw_dask.session(backend=backend, workers=2, task_chunk_size="64KiB") as s:
        x = s.array((300, 70), "f8", fill="arange")
        assert x.npartitions > 2
        np.testing.assert_array_equal(s.compute(x), np.arange(300 * 70, dtype="f8").reshape(300, 70))
        assert s.compute(s.array(10, "i4", fill="ones").sum()) == 10
        r1 = s.compute(s.array((5000,), fill="random", seed=1))
        r2 = s.compute(s.array((5000,), fill="random", seed=1))
        np.testing.assert_array_equal(r1, r2)
        assert 0 <= r1.min() and r1.max() < 1 and r1.std() > 0.2


def test_array_with_a_block_function_and_bad_fill():
    def block(block_info=None):
        (start, stop), = block_info[None]["array-location"]
        return np.full(stop - start, start, dtype="f8")

    with openclaw_dask.session(enabled=False, task_chunk_size="80B") as s:
        x = s.array(25, fill=block)
        assert x.chunks == ((9, 8, 8),)  # balanced, not 10 + 10 + 5
        np.testing.assert_array_equal(s.compute(x), np.repeat([0.0, 9.0, 17.0], [9, 8, 8]))
        with pytest.raises(OpenclawError, match="fill='nan' is not known"):
            s.array(3, fill="nan")


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_from_array_scatters_numpy_blocks(backend):
    data = np.random.default_rng(0).random((1000, 30))
    with openclaw_dask.session(backend=backend, workers=2, task_chunk_size="24KiB", engine="distributed") as s:
        x = s.from_array(data)
        assert x.chunks[0] == (100,) * 10 and x.chunks[1] == (30,)
        # the graph holds references to data already on the workers, not the data itself
        from distributed import Future

        assert all(isinstance(v, Future) for v in dict(x.__dask_graph__()).values())
        np.testing.assert_allclose(s.compute(x.sum(axis=0)), data.sum(axis=0))
        y = s.from_array(da.ones((100, 100), chunks=10))
        assert y.chunks == ((25,) * 4, (100,))


def test_from_array_without_cluster_and_for_array_likes(tmp_path):
    mm = np.lib.format.open_memmap(tmp_path / "a.npy", mode="w+", dtype="f4", shape=(4096,))
    mm[:] = np.arange(4096)
    mm.flush()
    with openclaw_dask.session(enabled=False, task_chunk_size="4KiB") as s:
        x = s.from_array(np.load(tmp_path / "a.npy", mmap_mode="r"))
        assert x.npartitions == 4
        assert s.compute(x.sum()) == 4095 * 4096 / 2


def test_dask_section_applies_in_the_session_and_its_workers(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("parallel: {backend: process, workers: 1}\ndask:\n  array: {chunk-size: 7MiB}\n")
    with openclaw_dask.session(path) as s:
        assert dask.config.get("array.chunk-size") == "7MiB"
        assert s.client.submit(lambda: __import__("dask").config.get("array.chunk-size"), pure=False).result() == "7MiB"
    assert dask.config.get("array.chunk-size") != "7MiB"


def test_session_without_arguments_returns_the_active_one():
    with openclaw_dask.session(workers=1, engine="distributed") as outer, activated(outer):
        assert active_session() is outer
        inner = openclaw_dask.session()
        assert inner.client is outer.client
        with inner:
            pass
        assert outer.client.status == "running"  # the borrower does not close it
    assert active_session() is None


def test_config_object_and_overrides_together_are_refused():
    with pytest.raises(OpenclawError, match="pass overrides with a file path"):
        openclaw_dask.session(load_config(env={}), workers=2)


@pytest.mark.parametrize("overrides", [{"enabled": False}, {"workers": 2}, {"backend": "process", "workers": 2}])
def test_array_sum_is_correct_everywhere(overrides):
    with openclaw_dask.session(size="48MiB", repeat=2, **overrides) as s:
        r = array_sum.run(s)
    assert r.ok and r.result == r.expected == (6 * MiB) * (6 * MiB - 1) / 2
    assert len(r.sum_s_all) == 2 and r.gbps > 0
    assert r.workers == (2 if overrides.get("backend") == "process" else 1)
    assert r.backend == ("serial" if overrides.get("enabled") is False else overrides.get("backend", "thread"))


def test_arrays_of_different_shapes_never_share_keys():
    with openclaw_dask.session(workers=1, task_chunk_size="800B") as s:
        small = s.persist(s.array((150,), fill="arange"))
        big = s.compute(s.array((1000,), fill="arange"))
        assert big.shape == (1000,)
        np.testing.assert_array_equal(big, np.arange(1000.0))
        assert s.compute(small).shape == (150,)


def test_with_statement_starts_a_session_and_start_twice_is_refused():
    from openclaw_dask import Session

    with Session(load_config(env={}, overrides={"workers": 1})) as s:
        assert s.started and s.running is not None
        with pytest.raises(OpenclawError, match="started already"):
            s.start()


def _process_state():
    """What a session may change in this process: dask's config, log levels, signal handlers, BLAS pools, comms."""
    import copy
    import logging
    import signal

    from distributed.comm.registry import backends
    from threadpoolctl import threadpool_info

    from openclaw_dask.cluster.worker_shape import LOGGERS

    return (copy.deepcopy(dask.config.config), {n: logging.getLogger(n).level for n in LOGGERS},
            {k: signal.getsignal(k) for k in (signal.SIGINT, signal.SIGTERM)},
            sorted((p["filepath"], p["num_threads"]) for p in threadpool_info()), type(backends["tcp"]))


@pytest.mark.parametrize("order", ["012", "021", "102", "120", "201", "210"])
def test_sessions_closed_in_any_order_leave_the_process_as_the_newest_open_one_set(order):
    """Three sessions on three engines (sync, threads, distributed), closed in every order: nothing handed over."""
    import distributed  # noqa: F401  (its defaults join dask's config when imported, as a session does)

    before = _process_state()
    shapes = [{"enabled": False}, {"workers": 1},
              {"workers": 1, "engine": "distributed", "communication": "tcp", "socket_buffer_size": "1MiB"}]
    levels = ["ERROR", "WARNING", "INFO"]
    opened, state = {}, {}
    for i in range(3):
        opened[i] = openclaw_dask.session(timeout=f"{11 + i}s", log_level=levels[i], **shapes[i])
        state[i] = _process_state()
    assert len({repr(v[1]) for v in state.values()}) == 3  # each set something the others did not
    for i in map(int, order):
        opened.pop(i).close()
        if opened:  # the newest open session's settings are the ones in force, whatever closed
            assert _process_state() == state[max(opened)]
            if max(opened) == 2:  # distributed's keys: the local engines (sync, threads) set none of them
                assert dask.config.get("distributed.comm.timeouts.connect") == "13.0s"
    assert _process_state() == before


def test_a_sessions_settings_are_not_built_on_an_older_open_sessions():
    """add_preload once appended to whatever an open session had put in dask's config."""
    from openclaw_dask.cluster.process_state import PROCESS, Layer
    from openclaw_dask.cluster.registry import declared
    from openclaw_dask.cluster.settings import dask_settings

    config = load_config(env={}, overrides={"workers": 1})
    alone = dask_settings(config, declared("thread"))
    older = {"distributed.worker.preload": ["older_sessions_preload", "dask.array"]}
    with PROCESS.holding(object(), Layer(dask=older)):
        assert dask.config.get("distributed.worker.preload") == older["distributed.worker.preload"]
        assert dask_settings(config, declared("thread")) == alone
    assert "older_sessions_preload" not in alone["distributed.worker.preload"]


def test_blas_pools_are_one_thread_on_thread_and_serial_backends():
    from threadpoolctl import threadpool_info

    def widest():
        return max((p["num_threads"] for p in threadpool_info()), default=1)

    with openclaw_dask.session(workers=2) as s:
        assert s.compute(dask.delayed(widest, pure=False)()) == 1
    with openclaw_dask.session(workers=2, engine="distributed") as s:
        assert s.client.submit(widest, pure=False).result() == 1
    with openclaw_dask.session(enabled=False):
        assert widest() == 1


def test_a_task_that_computes_a_graph_does_not_deadlock_the_threaded_engine():
    def inner(block):  # each block computes a graph of its own, from a task thread
        return np.array([da.ones(10, chunks=2).sum().compute()])

    with openclaw_dask.session(workers=2) as s:
        x = da.ones(4, chunks=1).map_blocks(inner, dtype=float)
        assert list(s.compute(x)) == [10.0] * 4


def test_jupyter_repr_shows_backend_workers_threads_memory_chunks_dashboard_and_recovery():
    with openclaw_dask.session(backend="process", workers=2, dashboard=":0") as s:
        html = s._repr_html_()
        for shown in ("process (running)", "workers</th><td style='text-align:left'>2<", "threads", "worker limits",
                      "task_chunk_size auto", "retries", "0 worker(s) lost"):
            assert shown in html, shown
        link = s.client.dashboard_link
        assert link.startswith("http://127.0.0.1:") and f'<a href="{link}"' in html
    assert "process (closed)" in s._repr_html_()
    with openclaw_dask.session(workers=2) as s:  # threads in this process: no workers to lose, no dashboard
        html = s._repr_html_()
        assert "thread (running)" in html and "this host, shared" in html and "dashboard" not in html
        assert "no workers to lose" in html


def test_progress_bar_is_a_widget_in_a_notebook(tmp_path):
    from tests.test_jupyter import run_cells

    book = run_cells(tmp_path, "import openclaw_dask\n"
                               "from openclaw_dask.workloads import WORKLOADS\n"
                               "with openclaw_dask.session(workers=2) as s:\n"
                               "    assert WORKLOADS['array-sum'](s, size=8 * 2**20, repeat=1, progress=True).ok")
    outputs = book["cells"][0]["outputs"]
    kinds = {kind for out in outputs for kind in out.get("data", {})}
    assert "application/vnd.jupyter.widget-view+json" in kinds  # rich's live bar, as an ipywidgets Output
    assert not [o for o in outputs if o.get("name") == "stderr" and "ipywidgets" in "".join(o.get("text", ""))]


_HEAP_PROBE = """
import ast, gc, sys, numpy as np, psutil, openclaw_dask
rss = lambda: psutil.Process().memory_info().rss
def churn():  # a chunk-sized temporary, allocated and freed as a task would
    a = np.ones(96 * 2**20 // 8); del a; gc.collect()
before = rss(); churn(); outside = rss() - before
with openclaw_dask.session(**{sys.argv[1]: ast.literal_eval(sys.argv[2])}):
    before = rss(); churn(); inside = rss() - before
    kept = rss()
after = kept - rss()
print(outside // 2**20, inside // 2**20, after // 2**20)
"""


@pytest.mark.parametrize(("key", "value", "reused"), [("parallel.backend", "'thread'", True), ("parallel.enabled", "False", True),
                                                      ("parallel.backend", "'process'", True),  # the client: its results
                                                      ("parallel.engine", "'distributed'", False)])
def test_local_engines_keep_freed_blocks_for_reuse_and_give_them_back_on_close(key, value, reused):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}  # those turn it off
    out = subprocess.run([sys.executable, "-c", _HEAP_PROBE, key, value], capture_output=True, text=True, timeout=60, env=env,
                         check=True).stdout.split()
    outside, inside, returned = map(int, out)
    assert outside < 16  # glibc's default: a 96 MiB block is unmapped when freed
    if reused:
        assert inside >= 90, "the freed block stays in this process for the next task"
        assert returned >= 90, "closing the session gives it back (malloc_trim)"
    else:  # a distributed worker in this process: its memory monitor would take kept memory for a leak
        assert inside < 16


_HEAPS = """
libc = ctypes.CDLL("libc.so.6"); libc.fopen.restype = ctypes.c_void_p
with tempfile.TemporaryDirectory() as folder:
    path = os.path.join(folder, "info.xml").encode()
    f = libc.fopen(path, b"w"); libc.malloc_info(0, ctypes.c_void_p(f)); libc.fclose(ctypes.c_void_p(f))
    print(open(path).read().count("<heap nr="))
"""
_ARENA_PROBE = """
import ctypes, os, sys, tempfile, threading
from openclaw_dask.cluster.heap import one_arena
if sys.argv[1] == "set":
    print(one_arena())
def task():  # a thread's first malloc, as a task thread's would be: glibc picks its arena then
    block = ctypes.create_string_buffer(2**20); del block
threads = [threading.Thread(target=task) for _ in range(4)]
[t.start() for t in threads]; [t.join() for t in threads]
""" + _HEAPS
_SESSION_ARENA_PROBE = """
import ctypes, os, resource, tempfile
import openclaw_dask
if __name__ == "__main__":
    with openclaw_dask.session(backend="process", workers=1) as s:
        x = s.persist(s.array((4096, 4096), fill="random"))  # 128 MiB, gathered into this process by the client's threads
        s.compute(x + 1)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        s.compute(x + 1)
        print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
""" + _HEAPS.replace("\n", "\n        ")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc arenas")
@pytest.mark.parametrize(("how", "tuning", "arenas"), [("set", {}, 1), ("unset", {}, None),
                                                       ("set", {"MALLOC_ARENA_MAX": "4"}, None)])
def test_the_command_keeps_every_thread_on_the_main_heap_unless_malloc_is_tuned(how, tuning, arenas):
    """Task threads with arenas of their own lose their freed blocks (glibc unmaps a wholly free arena heap)."""
    import os
    import subprocess

    env = {**{k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}, **tuning}
    out = subprocess.run([sys.executable, "-c", _ARENA_PROBE, how], capture_output=True, text=True, timeout=60, env=env,
                         check=True).stdout.split()
    heaps = int(out[-1])
    if arenas is not None:
        assert out[0] == "True" and heaps == arenas
    else:  # glibc's default: each thread may take an arena of its own; the user's MALLOC_* tuning is left alone
        assert heaps > 1 and out[0] in ("False", str(heaps))


def test_arrays_are_joined_in_the_caller_not_in_a_finalize_task_on_a_worker():
    with openclaw_dask.session(workers=2, engine="distributed") as s:
        x = s.persist(da.arange(4_000, chunks=1_000, dtype="f8"))
        m = da.ones((4, 6), chunks=2)
        total, doubled, ones = s.compute(x.sum(), 2 * x, m)
        assert total == np.arange(4_000.0).sum() and ones.shape == (4, 6)
        np.testing.assert_array_equal(doubled, 2 * np.arange(4_000.0))
        ran = s.client.run_on_scheduler(lambda dask_scheduler: [str(t[0]) for t in dask_scheduler.transition_log])
        assert ran and not any("finalize" in k for k in ran)
        # anything else keeps client.compute: a delayed result, a mix, or a keyword only client.compute takes
        assert s.compute(dask.delayed(sum)([1, 2])) == 3
        assert s.compute(x.sum(), dask.delayed(int)("7")) == (total, 7)
        assert s.compute(x.sum(), traverse=False) == total


def test_cluster_settings_are_the_cluster_s_keywords_and_the_environment_comes_back():
    """The scheduler's allowed failures and preloads, and the workers' preloads, reach the cluster as its keywords,
    not through this process's dask config; what the nannies write into this process's environment
    for their spawns (BLAS threads, malloc trimming, PYTHONHASHSEED) is put back when the session closes."""
    import os

    before = dict(os.environ)
    with openclaw_dask.session(backend="process", workers=1, **{"fault_tolerance.allowed_failures": 7}) as s:
        assert s.client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.allowed_failures) == 7
        assert dask.config.get("distributed.scheduler.allowed-failures") != 7
        preloads = s.client.run(lambda dask_worker: [p.name for p in dask_worker.preloads])
        assert all("openclaw_dask.cluster.interrupt_preload" in names for names in preloads.values()), preloads
        assert "openclaw_dask.cluster.interrupt_preload" not in dask.config.get("distributed.worker.preload", [])
        assert "openclaw_dask.cluster.placement" in [p.name for p in s.running.scheduler.preloads]
        assert "openclaw_dask.cluster.placement" not in dask.config.get("distributed.scheduler.preload", [])
        assert os.environ.get("PYTHONHASHSEED") is not None  # written by the nanny before it spawned
    after = dict(os.environ)
    assert {k: (before.get(k), after.get(k)) for k in set(before) | set(after)
            if before.get(k) != after.get(k) and k != "__DASK_PARENT_PID"} == {}
    with openclaw_dask.session(backend="thread", workers=1):  # an older open session whose engine spawns nothing
        with openclaw_dask.session(backend="process", workers=1) as s:
            s.compute(s.array((10,), fill="ones").sum())
        inner = dict(os.environ)
    assert {k for k in set(before) | set(inner) if before.get(k) != inner.get(k) and k != "__DASK_PARENT_PID"} == set()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc arenas")
def test_a_session_in_a_script_gathers_results_into_reused_blocks_on_the_main_heap(tmp_path):
    """The client's threads start after the session has asked for one arena: a result's blocks come back reused."""
    import os
    import subprocess

    script = tmp_path / "probe.py"
    script.write_text(_SESSION_ARENA_PROBE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    faults, heaps = map(int, subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env,
                                            check=True, cwd=tmp_path).stdout.split()[-2:])
    assert heaps == 1
    assert faults < 32, f"{faults} page faults: the second 128 MiB result reuses the first one's pages (fresh: 32,768, or 64 huge pages)"
