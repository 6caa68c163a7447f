"""resize_workers, retries, lost workers: real process clusters on 127.0.0.1."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import distributed
import pytest

import openclaw_dask
from openclaw_dask.diagnostics.collect import collect
from openclaw_dask.errors import ResizeError, RunError

N = 2**21  # 16 MiB of float64


def _slow_double(block, seconds):
    time.sleep(seconds)
    return block * 2


def test_resize_grows_then_refuses_inside_the_cooldown():
    with openclaw_dask.session(backend="process", workers=1) as s:
        grown = s.resize_workers(3, force=True)
        assert (grown.before, grown.after) == (1, 3) and len(s.workers()) == 3
        with pytest.raises(ResizeError) as e:
            s.resize_workers(2)
        assert "\n" not in str(e.value) and "elastic.cooldown is 600s" in str(e.value) and "force=True" in str(e.value)
        assert len(s.workers()) == 3


def test_shrinking_moves_data_instead_of_recomputing():
    with openclaw_dask.session(backend="process", workers=3, task_chunk_size="1MiB", cooldown=0) as s:
        x = s.persist(s.array((N,), fill="arange"))
        s.compute(x.sum())
        assert len({w for w in s.client.who_has(x).values() for w in w}) == 3  # spread over all three
        shrunk = s.resize_workers(1)
        assert (shrunk.before, shrunk.after) == (3, 1) and shrunk.bytes_moved > 0
        with collect(s) as record:
            assert s.compute(x.sum()) == N * (N - 1) / 2
        recomputed = [t for t in record.tasks if t.group == "openclaw-arange"]
        # About 11 of the 16 chunks sat on the two retired workers; had they not moved, all of
        # those would be recomputed.
        assert recomputed == [], recomputed
        assert s.recovery().workers_lost == 0


def test_module_level_resize_uses_the_current_session():
    with pytest.raises(openclaw_dask.OpenclawError, match="no session is open"):
        openclaw_dask.resize_workers(2)
    with openclaw_dask.session(backend="process", workers=1, cooldown="0s"):
        assert openclaw_dask.resize_workers(2).after == 2


@pytest.mark.parametrize("overrides", [{"workers": 2}, {"enabled": False}])
def test_backends_that_cannot_resize_say_so(overrides):
    with openclaw_dask.session(**overrides) as s, pytest.raises(ResizeError, match="use backend process, kubernetes and slurm to resize"):
        s.resize_workers(3)


def test_resize_while_a_computation_runs_gives_the_exact_result():
    with openclaw_dask.session(backend="process", workers=1, task_chunk_size="512KiB", cooldown=0) as s:
        x = s.persist(s.array((N,), fill="arange"))
        future = s.client.compute(x.map_blocks(_slow_double, 0.05, dtype=x.dtype).sum())
        for n in (3, 1, 2, 4, 1):
            s.resize_workers(n)
        assert future.result(timeout=120) == N * (N - 1)


def test_retries_rerun_a_failing_task(tmp_path):
    marker = tmp_path / "failed-once"

    def flaky(block):
        if not marker.exists():
            marker.touch()
            raise OSError("transient")
        return block

    with openclaw_dask.session(workers=1, task_chunk_size="1MiB") as s:
        x = s.array((2**17,), fill="ones")
        with pytest.raises(OSError, match="transient"):
            s.compute(x.map_blocks(flaky, dtype=x.dtype, meta=np.empty((0,))).sum())
    marker.unlink()
    with openclaw_dask.session(workers=1, task_chunk_size="1MiB", retries=1) as s:
        x = s.array((2**17,), fill="ones")
        assert s.compute(x.map_blocks(flaky, dtype=x.dtype, meta=np.empty((0,))).sum()) == 2**17


def test_a_killed_worker_is_restarted_and_the_result_is_exact():
    with openclaw_dask.session(backend="process", workers=2, task_chunk_size="1MiB") as s:
        x = s.persist(s.array((N,), fill="arange"))
        future = s.client.compute(x.map_blocks(_slow_double, 0.1, dtype=x.dtype).sum())
        time.sleep(0.5)
        victim = next(iter(s.client.run(os.getpid).values()))
        os.kill(victim, signal.SIGKILL)
        assert future.result(timeout=120) == N * (N - 1)
        deadline = time.monotonic() + 30
        while len(s.workers()) < 2 and time.monotonic() < deadline:  # the nanny brings it back
            time.sleep(0.1)
        assert len(s.workers()) == 2 and victim not in s.client.run(os.getpid).values()


def _die(block):
    os._exit(1)


def test_a_task_that_kills_every_worker_ends_with_one_clear_error():
    with openclaw_dask.session(backend="process", workers=1, allowed_failures=1, timeout="20s", task_chunk_size="2KiB") as s:
        x = s.array((1000,), fill="ones")
        t0 = time.monotonic()
        with pytest.raises(RunError) as e:
            s.compute(x.map_blocks(_die, dtype=x.dtype, meta=np.empty((0,))).sum())
        message = str(e.value)
        # the task is named as the scheduler knows it (map_blocks fuses into the sum's chunk tasks)
        assert "\n" not in message and message.startswith("task ('sum-") and "2 workers that died" in message
        assert "fault_tolerance.allowed_failures" in message
        assert time.monotonic() - t0 < 60
        # the cluster is usable afterwards
        assert s.compute(s.array((10,), fill="ones").sum()) == 10


def test_losing_the_scheduler_is_one_clear_error_within_the_timeout(dask_scheduler):
    import threading

    def _sleepy(block):  # local, so it travels by value to the separately started worker
        time.sleep(0.5)
        return block

    address, add_worker = dask_scheduler
    add_worker()
    with openclaw_dask.session(backend="remote", scheduler_address=address, workers=1, timeout="5s") as s:
        x = s.array((10_000,), fill="ones", chunks=((1000,) * 10,))
        scheduler_pid = s.client.run_on_scheduler(os.getpid)
        threading.Timer(1.0, os.kill, (scheduler_pid, signal.SIGKILL)).start()
        t0 = time.monotonic()
        with pytest.raises(RunError) as e:
            s.compute(x.map_blocks(_sleepy, dtype=x.dtype, meta=np.empty((0,))).sum())
        assert time.monotonic() - t0 < 1.0 + 5 + 5  # the kill, then within parallel.timeout (and slack)
        assert "\n" not in str(e.value) and f"lost the scheduler at {address}" in str(e.value)


def test_adaptive_scales_up_for_queued_work_and_back_down(caplog):
    import logging

    caplog.set_level(logging.INFO, logger="openclaw_dask")
    overrides = {"backend": "process", "workers": 1, "log_level": "INFO", "adaptive": True, "min_workers": 1, "max_workers": 2, "interval": "200ms", "cooldown": "1s"}
    with openclaw_dask.session(**overrides) as s:
        assert len(s.workers()) == 1
        with pytest.raises(ResizeError, match="adaptive is on"):
            s.resize_workers(2, force=True)
        futures = s.client.map(_sleep_then, [0.4] * 30, pure=False)
        deadline = time.monotonic() + 30
        while len(s.workers()) < 2:
            assert time.monotonic() < deadline, "adaptive did not add a worker for 30 queued tasks"
            time.sleep(0.1)
        assert sum(s.client.gather(futures)) == 30
        deadline = time.monotonic() + 30
        while len(s.workers()) > 1:
            assert time.monotonic() < deadline, "adaptive did not retire the idle worker"
            time.sleep(0.1)
        # a compute straight to the workers would look idle to it (cluster/direct.py): every compute is scheduled
        x = s.persist(s.array((64,), "float64", fill="arange", chunks=16))
        distributed.wait(x)
        with distributed.get_task_stream(s.client) as ts:
            assert s.compute(x.sum()) == sum(range(64))
        assert any("sum" in str(t["key"]) for t in ts.data)
    assert "adaptive: up to 2 workers" in caplog.text and "adaptive: retiring 1 idle worker" in caplog.text


def _sleep_then(seconds):
    time.sleep(seconds)
    return 1
