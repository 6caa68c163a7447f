"""Backend slurm's adaptive jobs, a walltime kill, and a whole cluster inside one ``srun`` step, on a real one-node Slurm.

The Slurm is :func:`tests.test_slurm.one_node_slurm` (its own daemons and network namespace, all
stopped after the module); these tests skip with its reason where it cannot run.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import BIN, openclaw
from tests.test_slurm import Slurm, _json_result, _wait

pytestmark = [pytest.mark.timeout(240)]


# -- no Slurm needed ---------------------------------------------------------------------------


@pytest.mark.parametrize(("sets", "key"), [
    (["elastic.adaptive=true"], "elastic.max_workers"),  # auto = this machine's cores
    (["elastic.adaptive=true", "elastic.max_workers=3", "slurm.processes_per_job=2", "elastic.min_workers=2"], "elastic.max_workers"),
])
def test_adaptive_bounds_are_whole_jobs_or_one_line(sets, key):
    r = openclaw("slurm", "script", "--set", "parallel.workers=2", *[a for s in sets for a in ("--set", s)])
    assert r.returncode == 2 and key in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_min_workers_zero_is_for_jobs_only():
    r = openclaw("config", "show", "--set", "parallel.backend=process", "--set", "elastic.adaptive=true",
                 "--set", "elastic.min_workers=0")
    assert r.returncode == 2 and "elastic.min_workers" in r.stderr and "slurm" in r.stderr, r.stderr


def test_a_step_is_found_from_sruns_variables_and_checked(monkeypatch):
    from openclaw_dask.cluster.slurm_tasks import allocation_step
    from openclaw_dask.errors import ConfigError
    from openclaw_dask.loading import load_checked

    env = {"SLURM_PROCID": "1", "SLURM_NTASKS": "4", "SLURM_JOB_ID": "7", "SLURM_STEP_ID": "2", "SLURM_SUBMIT_DIR": "/shared/me"}
    step = allocation_step(env)
    assert step is not None and (step.task, step.tasks, step.id) == (1, 4, "7.2")
    assert str(step.scheduler_file) == "/shared/me/.openclaw-scheduler-7.2.json"  # per step: never an earlier step's
    assert allocation_step({k: v for k, v in env.items() if k != "SLURM_STEP_ID"}) is None  # a batch script submits jobs
    assert allocation_step({**env, "SLURM_NTASKS": "1"}) is None
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=r"parallel.workers.*4 tasks: 2 workers"):
        load_checked(None, {"parallel.backend": "slurm", "parallel.workers": 3})
    with pytest.raises(ConfigError, match=r"elastic.adaptive.*fixed"):
        load_checked(None, {"parallel.backend": "slurm", "elastic.adaptive": True, "elastic.max_workers": 2})


# -- against the real one-node Slurm ------------------------------------------------------------


WALLTIME = r'''
import json, subprocess, sys, time
import dask.array as da
import openclaw_dask

def running():
    out = subprocess.run(["squeue", "-h", "-t", "RUNNING", "-n", "openclaw-walltime", "-o", "%i"], capture_output=True,
                         text=True, check=True)
    return sorted(int(i) for i in out.stdout.split())

with openclaw_dask.session(backend="slurm", workers=1, memory_limit="512MiB", walltime="1m", timeout="60s",
                           job_extra_directives=["-J openclaw-walltime"], log_directory=sys.argv[1]) as s:  # named apart
    x = s.persist(da.arange(4_000_000, chunks=250_000, dtype="float64"))
    first, t0 = running(), time.monotonic()
    deadline = t0 + 150
    while first[0] in running() and time.monotonic() < deadline:  # Slurm ends the job at its time limit
        time.sleep(1)
    killed = time.monotonic() - t0
    while (not running() or not s.workers()) and time.monotonic() < deadline:
        time.sleep(0.5)
    after = running()
    total = float(s.compute(x.sum()))  # the killed worker held every chunk: all recomputed on its successor
print(json.dumps({"first": first, "after": after, "killed_after_s": killed, "total": total}))
'''


WALLTIME_JOB = "openclaw-walltime"


@pytest.fixture(scope="module")
def walltime_run(slurm, tmp_path_factory) -> Iterator[tuple[subprocess.Popen, Path]]:
    """The walltime session (:data:`WALLTIME`) in the background, started by the first test that asks.

    Slurm ends a 1-minute job 60 to 90 s after it starts (slurmctld checks limits every 30 s): the
    session waits that out while the tests before :func:`test_a_job_past_its_walltime_is_replaced_and_the_result_stays_exact`
    run; its jobs are named :data:`WALLTIME_JOB`, which those tests leave out of what they count.
    """
    folder = tmp_path_factory.mktemp("walltime")
    log = folder / "run.log"
    proc = slurm.popen(str(BIN / "python"), "-c", WALLTIME, str(folder), log=log)
    try:
        yield proc, log
    finally:
        if proc.poll() is None:
            proc.terminate()  # SIGTERM: the session unwinds and cancels its job
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        proc.wait(30)


def _ours(slurm: Slurm) -> list[tuple[str, str, str]]:
    """The jobs Slurm knows, less the walltime session's."""
    return [job for job in slurm.jobs() if job[1] != WALLTIME_JOB]


ADAPTIVE = r'''
import json, logging, subprocess, sys, threading, time
import openclaw_dask

logging.basicConfig()  # openclaw's INFO lines (parallel.log_level) on stderr

seen, stop = [], threading.Event()

def watch():  # every job Slurm knows, whatever its state, with the time it was seen
    while not stop.is_set():
        out = subprocess.run(["squeue", "-h", "-n", "openclaw-worker", "-o", "%i"], capture_output=True, text=True).stdout
        seen.append((time.monotonic(), sorted(out.split())))
        time.sleep(0.25)

def slow(i):
    time.sleep(1)
    return i

conf = {"backend": "slurm", "workers": 2, "processes_per_job": 2, "memory_limit": "384MiB", "walltime": "5m",
        "timeout": "60s", "adaptive": True, "min_workers": 0, "max_workers": 4, "interval": "0.5s", "cooldown": "10s",
        "log_level": "INFO", "log_directory": sys.argv[1]}
watcher = threading.Thread(target=watch, daemon=True)
watcher.start()
with openclaw_dask.session(**conf) as s:
    first = s.client.gather(s.client.map(slow, range(32), pure=False))
    t1 = time.monotonic()
    time.sleep(2)  # the gap between two computations of one session
    second = s.client.gather(s.client.map(slow, range(100, 116), pure=False))
    t2 = time.monotonic()
    deadline = time.monotonic() + 40
    while s.workers() and time.monotonic() < deadline:  # idle past the cooldown: min_workers 0 cancels every job
        time.sleep(0.25)
    idle = (len(s.workers()), time.monotonic() - t2)
    time.sleep(1)
stop.set()
watcher.join()
print(json.dumps({"seen": seen, "t1": t1, "t2": t2, "idle": idle, "first": sum(first), "second": sum(second)}))
'''


def test_adaptive_submits_keeps_between_computes_and_cancels_whole_jobs(slurm, walltime_run, tmp_path):  # starts its minute
    r = slurm.run(str(BIN / "python"), "-c", ADAPTIVE, str(tmp_path), timeout=150)
    assert r.returncode == 0, r.stderr[-3000:] + slurm.logs()
    out = _json_result(r.stdout)
    assert (out["first"], out["second"]) == (sum(range(32)), sum(range(100, 116))), out
    seen = [(t, set(ids)) for t, ids in out["seen"]]
    before = [ids for t, ids in seen if t <= out["t1"]]
    assert max(map(len, before)) == 2, seen  # the queued work had adaptive submit a second job of 2 workers
    across = {frozenset(ids) for t, ids in seen if out["t1"] <= t <= out["t2"]}
    assert len(across) == 1 and len(next(iter(across))) == 2, seen  # the same two jobs through the gap: none cancelled or resubmitted
    assert out["idle"][0] == 0, out  # then idle past elastic.cooldown: both jobs cancelled, the session still open
    assert "adaptive: up to 2 jobs" in r.stderr and "adaptive: retiring" in r.stderr, r.stderr[-3000:]
    _wait(lambda: _ours(slurm) == [], 15, "jobs left after the session", slurm)


JOB = r'''
import dask.array as da
import openclaw_dask

s = openclaw_dask.session()
x = da.arange(2_000_000, chunks=250_000, dtype="float64")
print("SUM", float(s.compute(x.sum())), "WORKERS", sorted(str(w["name"]) for w in s.workers().values()))
'''


def test_srun_runs_scheduler_client_and_workers_in_its_tasks_submitting_nothing(slurm, tmp_path):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    seen: list[list[tuple[str, str, str]]] = []
    command = (f"cd {tmp_path} && exec srun -n 4 --mem=2G {BIN / 'openclaw'} run {script} --json --set parallel.backend=slurm "
               "--set cluster.memory_limit=512MiB")  # srun's folder is the step's SLURM_SUBMIT_DIR: the scheduler file's
    proc = slurm.popen("sh", "-c", command, log=tmp_path / "run.log")
    try:
        while proc.poll() is None:
            seen.append(_ours(slurm))
            time.sleep(0.5)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)
    text = (tmp_path / "run.log").read_text()
    assert proc.returncode == 0, text + slurm.logs()
    assert f"SUM {2_000_000 * 1_999_999 / 2} WORKERS ['task-2', 'task-3']" in text, text
    summary = _json_result(text)
    assert summary["ok"] is True and summary["workers"] == 2, summary
    assert max(map(len, seen), default=0) == 1, seen  # only srun's own job: no worker job submitted
    assert not list(tmp_path.glob(".openclaw-scheduler-*.json"))  # the scheduler file went with the scheduler
    _wait(lambda: _ours(slurm) == [], 15, "jobs left after the step", slurm)


def test_a_failed_task_ends_the_step_with_one_line(slurm, tmp_path):
    command = f"cd {tmp_path} && exec srun -n 3 --mem=1G {BIN / 'openclaw'} run --set parallel.backend=slurm --set parallel.workers=2"
    r = slurm.run("sh", "-c", command, timeout=60)
    assert r.returncode != 0, r.stdout + r.stderr
    lines = [line for line in r.stderr.splitlines() if line.startswith("openclaw: error:")]
    assert lines and all("parallel.workers" in line and "srun -n 4" in line for line in lines), r.stderr
    assert "Traceback" not in r.stderr
    _wait(lambda: _ours(slurm) == [], 15, "jobs left after the step", slurm)


def test_a_client_that_dies_ends_the_step_with_the_schedulers_one_line(slurm, tmp_path):
    script = tmp_path / "crash.py"
    script.write_text("import os\nos._exit(3)  # no session close, no shutdown\n")
    command = f"cd {tmp_path} && exec srun -n 3 --mem=1G {BIN / 'openclaw'} run {script} --set parallel.backend=slurm"
    t0 = time.monotonic()
    r = slurm.run("sh", "-c", command, timeout=90)
    assert r.returncode != 0 and time.monotonic() - t0 < 60, r.stdout + r.stderr
    said = [line for line in r.stderr.splitlines() if line.startswith("openclaw: error:")]
    # the script may die before or after its task has joined the scheduler: either way the scheduler's one line names it
    assert len(said) == 1 and "srun task 1" in said[0] and "its output says why" in said[0], r.stderr
    assert "Traceback" not in r.stderr
    _wait(lambda: _ours(slurm) == [], 15, "jobs left after the step", slurm)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_job_past_its_walltime_is_replaced_and_the_result_stays_exact(slurm, walltime_run):
    proc, log = walltime_run
    proc.wait(240)
    text = log.read_text()
    assert proc.returncode == 0, text[-3000:] + slurm.logs()
    out = _json_result(text)
    assert 40 <= out["killed_after_s"] <= 130, out  # a 1-minute limit; slurmctld checks limits every 30 s
    assert len(out["after"]) == 1 and out["after"] != out["first"], out
    assert out["total"] == 4_000_000 * 3_999_999 / 2, out
    assert "submitting a replacement" in text, text[-2000:]
    _wait(lambda: slurm.jobs() == [], 15, "jobs left after the session", slurm)
