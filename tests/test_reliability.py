"""Failures a long run must survive, measured. Loopback only, every wait bounded.

    python -m pytest tests/test_reliability.py -s -q     # prints the RELIABILITY lines in docs/reliability.md
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import openclaw_dask
from openclaw_dask.errors import RunError

from .conftest import BIN, _stop, openclaw

N = 2**20


def _slow_double(block, seconds, while_exists=None):
    """``block * 2`` after ``seconds``, or at once once the file ``while_exists`` (if given) is gone."""
    if while_exists is None or os.path.exists(while_exists):
        time.sleep(seconds)
    return block * 2


def _wait_for_workers(s, n, timeout=60.0):
    deadline = time.monotonic() + timeout
    while len(s.workers()) < n:
        assert time.monotonic() < deadline, f"only {len(s.workers())} of {n} workers came back within {timeout}s"
        time.sleep(0.05)


def _keys(keys):
    return {tuple(k) if isinstance(k, list) else k for k in keys}  # msgpack turns tuple keys into lists


def _losses(s):
    """The scheduler's own record of unexpected worker removals (distributed's remove-worker events)."""
    return [m for _, m in s.client.get_events("all") if m.get("action") == "remove-worker" and not m["expected"]]


def _kill_a_worker_holding(s, x):
    """SIGKILL the worker process holding most chunks of ``x``; returns how many only it held."""
    from distributed import futures_of

    pids = s.client.run(os.getpid)
    who = s.client.who_has(futures_of(x))
    only = {a: sum(list(w) == [a] for w in who.values()) for a in pids}
    address = max(only, key=only.get)
    os.kill(pids[address], signal.SIGKILL)
    deadline = time.monotonic() + 60
    while address in s.workers():
        assert time.monotonic() < deadline, "the scheduler did not notice the kill within 60 s"
        time.sleep(0.02)
    return only[address]


@pytest.mark.slow
def test_five_sigkills_in_one_run_give_the_exact_answer(tmp_path):
    from distributed import futures_of, wait

    from .test_monitoring import free_port, scrape

    recoveries = []
    port = free_port()
    with openclaw_dask.session(backend="process", workers=2, task_chunk_size="16KiB", allowed_failures=20,
                               prometheus=True, port=port) as s:
        x = s.persist(s.array((N,), fill="arange"))  # 512 chunks
        x_keys = {f.key for f in futures_of(x)}
        slow = tmp_path / "slow"  # the tasks take 0.15 s each while it exists: long enough for the five kills
        slow.touch()
        future = s.client.compute(x.map_blocks(_slow_double, 0.15, str(slow), dtype=x.dtype).sum())
        for _ in range(5):
            time.sleep(0.4)
            address, pid = next(iter(s.client.run(os.getpid).items()))
            t0 = time.monotonic()
            os.kill(pid, signal.SIGKILL)
            while address in s.workers() or len(s.workers()) < 2:  # gone, then replaced by its nanny
                assert time.monotonic() - t0 < 60
                time.sleep(0.02)
            recoveries.append(time.monotonic() - t0)
        assert not future.done(), "the compute ended before the five kills: it proves nothing"
        slow.unlink()  # the rest at full speed
        result = future.result(timeout=120)
        wait(x, timeout=60)  # the lost chunks of x are wanted too: all back before counting recoveries
        got, losses, m = s.recovery(), _losses(s), scrape(port)
    assert result == 2 * np.arange(N, dtype="f8").sum()
    # The summary against the scheduler's own event log: every kill a loss, every lost chunk of x run
    # again, and no more runs than the losses took (tasks running there plus results only there).
    assert got.workers_lost == len(losses) == 5
    assert got.failures_recovered == 5
    floor = sum(len(_keys(e["lost-computed-tasks"]) & x_keys) for e in losses)
    ceiling = sum(len(_keys(e["processing-tasks"]) | _keys(e["lost-computed-tasks"])) for e in losses)
    assert 1 <= floor <= got.tasks_recomputed <= ceiling
    assert m["openclaw_workers_lost_total"].value == 5
    assert m["openclaw_tasks_recomputed_total"].value == got.tasks_recomputed
    assert m["openclaw_failures_recovered_total"].value == 5
    print(f"\nRELIABILITY sigkill: 5 kills survived, 0 wrong results, recovery s median {statistics.median(recoveries):.2f} "
          f"max {max(recoveries):.2f} ({', '.join(f'{r:.2f}' for r in recoveries)}); reported {got.workers_lost} workers lost, "
          f"{got.tasks_recomputed} tasks recomputed (lost chunks {floor}, at most {ceiling}), {got.failures_recovered} recovered")


@pytest.mark.slow
def test_array_sum_summary_counts_a_worker_killed_mid_run(capsys, monkeypatch):
    from openclaw_dask.diagnostics.terminal import print_run_summary
    from openclaw_dask.workloads import array_sum

    with openclaw_dask.session(backend="process", workers=2, size="2MiB", task_chunk_size="64KiB", repeat=2,
                               straggler="1500ms", allowed_failures=1) as s:
        n_chunks = len(s.chunks((2**18,))[0])
        slow_key = ("openclaw-straggle", n_chunks // 2)

        def kill_the_straggler_mid_run():  # array-sum knows nothing of this: it just loses a worker
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                for address, keys in s.client.processing().items():
                    if slow_key in map(tuple, keys):  # keys come back as lists over msgpack
                        os.kill(s.client.run(os.getpid, workers=[address])[address], signal.SIGKILL)
                        return address
                time.sleep(0.02)
            raise AssertionError("the straggler never ran")

        with ThreadPoolExecutor(1) as pool:
            killer = pool.submit(kill_the_straggler_mid_run)
            result = array_sum.run(s)
            killer.result(timeout=70)
        (loss,) = _losses(s)
    # The straggler was running there; the generated chunks only it held are wanted (persisted).
    floor = 1 + sum(k[0] == "openclaw-straggle" for k in _keys(loss["lost-computed-tasks"]))
    ceiling = len(_keys(loss["processing-tasks"]) | _keys(loss["lost-computed-tasks"]))
    assert result.ok and result.result == result.expected
    assert result.workers_lost == 1 and result.failures_recovered == 1
    assert floor <= result.tasks_recomputed <= ceiling
    assert result.to_dict()["workers_lost"] == 1  # the --json object
    monkeypatch.setenv("COLUMNS", "200")  # one row, one line
    print_run_summary(result)
    assert f"1 worker(s) lost, {result.tasks_recomputed} task(s) recomputed, 1 of 1 recovered" in capsys.readouterr().out
    print(f"\nRELIABILITY array-sum: a worker killed mid-run, exact result; summary: 1 worker lost, "
          f"{result.tasks_recomputed} tasks recomputed (at least {floor}, at most {ceiling}), 1 of 1 recovered")


@pytest.mark.slow
def test_shrinking_retires_workers_rather_than_losing_them():
    from distributed import wait

    with openclaw_dask.session(backend="process", workers=3, task_chunk_size="64KiB", cooldown=0) as s:
        x = s.persist(s.array((2**17,), fill="arange"))
        wait(x)
        s.resize_workers(1)
        assert s.compute(x.sum()) == 2**17 * (2**17 - 1) // 2
        got = s.recovery()
    assert (got.workers_lost, got.tasks_recomputed) == (0, 0), got


@pytest.mark.slow
def test_client_restart_is_not_counted_as_losing_workers():
    from distributed import wait

    with openclaw_dask.session(backend="process", workers=2, task_chunk_size="64KiB") as s:
        x = s.persist(s.array((2**17,), fill="arange"))
        wait(x)
        s.client.restart()  # deliberate: every task forgotten, every worker restarted
        _wait_for_workers(s, 2)
        got, removed = s.recovery(), _losses(s)
    assert len(removed) == 2  # the scheduler did see both go
    assert (got.workers_lost, got.tasks_recomputed, got.failures_recovered) == (0, 0, 0)


KILL_ONE_WORKER = textwrap.dedent(
    """
    import os, signal, time
    from distributed import futures_of, wait
    import openclaw_dask

    s = openclaw_dask.session()
    x = s.persist(s.array((2**17,), fill="arange"))  # 16 chunks of 64 KiB
    wait(x)
    pids, who = s.client.run(os.getpid), s.client.who_has(futures_of(x))
    only = {a: sum(list(w) == [a] for w in who.values()) for a in pids}
    address = max(only, key=only.get)
    os.kill(pids[address], signal.SIGKILL)
    while address in s.workers():
        time.sleep(0.02)
    assert s.compute(x.sum()) == 2**17 * (2**17 - 1) // 2
    print("LOST", only[address])
    """
)


@pytest.mark.slow
def test_openclaw_run_reports_the_lost_worker_and_its_recomputed_chunks(tmp_path):
    script = tmp_path / "kill_one.py"
    script.write_text(KILL_ONE_WORKER)
    common = ("--set", "parallel.backend=process", "--set", "parallel.workers=2", "--set", "parallel.task_chunk_size=64KiB")
    r = openclaw("run", str(script), *common, "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lost_line, summary = r.stdout.splitlines()
    lost = int(lost_line.split()[1])
    out = json.loads(summary)
    # Exactly the chunks only the killed worker held, each computed once more.
    assert lost >= 1 and out["ok"] is True
    assert (out["workers_lost"], out["tasks_recomputed"], out["failures_recovered"]) == (1, lost, 1)
    r = openclaw("run", str(script), *common, cwd=tmp_path)  # without --json: one line on stderr
    assert r.returncode == 0, r.stderr
    lost = int(r.stdout.split()[1])
    assert f"openclaw: 1 worker(s) lost, {lost} task(s) recomputed, 1 of 1 recovered" in r.stderr
    print(f"\nRELIABILITY openclaw run: a worker holding {lost} chunks SIGKILLed; --json and stderr: 1 worker lost, "
          f"{lost} tasks recomputed, 1 of 1 recovered")


@pytest.mark.slow
def test_remote_scheduler_counts_too_and_the_counter_leaves_with_the_session(dask_scheduler):
    from distributed import Client, wait

    address, add_worker = dask_scheduler
    add_worker()
    add_worker()
    with openclaw_dask.session(backend="remote", scheduler_address=address, workers=2, task_chunk_size="64KiB", timeout="30s") as s:
        x = s.persist(s.array((2**17,), fill="arange"))
        wait(x)
        lost = _kill_a_worker_holding(s, x)  # dask worker runs it under a nanny, which starts another
        assert s.compute(x.sum()) == 2**17 * (2**17 - 1) // 2
        got = s.recovery()
    assert lost >= 1
    assert (got.workers_lost, got.tasks_recomputed, got.failures_recovered) == (1, lost, 1)
    print(f"\nRELIABILITY remote: a dask worker holding {lost} chunks SIGKILLed; 1 worker lost, {lost} tasks recomputed, 1 recovered")
    with Client(address, timeout=30) as c:
        left = c.run_on_scheduler(lambda dask_scheduler: [n for n in dask_scheduler.plugins if n.startswith("openclaw-recovery")])
    assert left == []


BLOCK_OPENCLAW = "import sys\nsys.modules['openclaw_dask'] = None  # as if it were not installed here\n"


@pytest.mark.slow
def test_a_remote_scheduler_without_openclaw_reports_unknown_and_the_run_goes_on(tmp_path, caplog):
    # distributed unpickles graphs on the scheduler, so openclaw's own arrays need openclaw_dask there
    # anyway; plain dask graphs do not, and their runs must not fail over a counter.
    import dask.array as da

    from openclaw_dask.diagnostics.terminal import recovery_line

    (tmp_path / "block.py").write_text(BLOCK_OPENCLAW)
    sched_file = tmp_path / "scheduler.json"
    procs = [subprocess.Popen(
        [str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard", "--dashboard-address",
         "127.0.0.1:0", "--scheduler-file", str(sched_file), "--preload", str(tmp_path / "block.py")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )]
    try:
        deadline = time.monotonic() + 30
        while not sched_file.exists() or not sched_file.read_text().strip():
            assert time.monotonic() < deadline and procs[0].poll() is None, "dask scheduler did not start"
            time.sleep(0.1)
        address = json.loads(sched_file.read_text())["address"]
        procs.append(subprocess.Popen(
            [str(BIN / "dask"), "worker", address, "--host", "127.0.0.1", "--nthreads", "1", "--no-dashboard",
             "--dashboard-address", "127.0.0.1:0", "--memory-limit", "1GiB"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        ))
        with caplog.at_level("WARNING", logger="openclaw_dask"), openclaw_dask.session(
            backend="remote", scheduler_address=address, workers=1, timeout="30s"
        ) as s:
            total = s.compute(da.ones(1000, chunks=100).sum())
            got = s.recovery()
    finally:
        _stop(procs[::-1])
    assert total == 1000
    assert (got.workers_lost, got.tasks_recomputed, got.failures_recovered) == (None, None, None)
    warnings = [r.getMessage() for r in caplog.records if "lost workers and recomputed tasks are unknown" in r.getMessage()]
    assert len(warnings) == 1 and "\n" not in warnings[0] and "install openclaw-dask where the scheduler runs" in warnings[0]
    assert recovery_line(None, None, None).startswith("unknown")


@pytest.mark.slow
def test_chaos_random_kills_for_30_seconds_no_wrong_result_no_hang():
    from distributed.chaos import KillWorker

    runs = wrong = 0
    with openclaw_dask.session(backend="process", workers=2, task_chunk_size="64KiB", allowed_failures=100) as s:
        s.client.register_plugin(KillWorker(delay="3s", mode="segfault"))  # every worker, restarted ones too
        expected = 2 * np.arange(N // 4, dtype="f8").sum()
        t_end = time.monotonic() + 30
        while time.monotonic() < t_end:
            x = s.array((N // 4,), fill="arange")  # made afresh each time: kills may take inputs with them
            future = s.client.compute(x.map_blocks(_slow_double, 0.01, dtype=x.dtype).sum())
            result = future.result(timeout=60)  # a hang fails here
            runs += 1
            wrong += result != expected
    assert runs >= 3 and wrong == 0
    print(f"\nRELIABILITY chaos: 30 s of random segfaults (expected lifetime 3 s per worker), {runs} runs, 0 wrong, 0 hangs")


@pytest.mark.slow
def test_a_task_past_memory_limit_fails_fast_and_the_cluster_recovers():
    def hog(block):  # a local function, so the test module need not be importable on the worker
        return block + np.ones(200_000_000)[: block.size]  # 1.6 GB on a 400 MiB worker

    with openclaw_dask.session(backend="process", workers=1, memory_limit="400MiB", allowed_failures=0, timeout="20s") as s:
        x = s.array((1000,), fill="ones")
        t0 = time.monotonic()
        with pytest.raises(RunError, match="workers that died"):
            s.compute(x.map_blocks(hog, dtype=x.dtype, meta=np.empty((0,))).sum())
        failed_after = time.monotonic() - t0
        _wait_for_workers(s, 1)
        assert s.compute(s.array((1000,), fill="ones").sum()) == 1000
    assert failed_after < 15
    print(f"\nRELIABILITY memory: a task past a 400 MiB memory_limit ended the run with a clear error after {failed_after:.1f} s; "
          "the next run on the same cluster was correct")
