"""Shared fixtures. Everything binds 127.0.0.1 and is closed even when a test fails."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

BIN = Path(sys.executable).parent

# Their defaults join dask's config on first import: imported here, before any test, so that the
# process guard below sees only what a test itself changes.
import distributed  # noqa: F401

with contextlib.suppress(ImportError):
    import dask_kubernetes.operator  # noqa: F401


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    """No ambient OPENCLAW_* variables or ./openclaw_config.yaml leak into a test."""
    for var in [v for v in os.environ if v.startswith("OPENCLAW_")]:
        monkeypatch.delenv(var)
    monkeypatch.chdir(tmp_path)


# Threads that outlive a test by design: distributed's process-wide pools and loops, started once;
# zarr's I/O thread; openclaw's read-ahead pools (a process-wide cache of at most io.prefetch.MAX_OPEN);
# and task threads of a session a module-scoped fixture holds open (they start on first use, inside a
# test). A session left open is caught by the state checks instead: its dask config and log levels.
_LONG_LIVED = ("Dask-Offload", "TCP-Executor", "IO loop", "Profile", "asyncio_", "AsyncProcess", "ThreadPoolExecutor",
               "QueueFeederThread", "Thread-", "zarr_io", "openclaw-io", "openclaw-task")


def _process_state():
    """What a test must leave as it found it: dask's config, log levels, signal handlers, BLAS pools, comms, environment."""
    import copy
    import logging

    import dask
    from distributed.comm.registry import backends
    from threadpoolctl import threadpool_info

    from openclaw_dask.cluster.worker_shape import LOGGERS

    return {
        "dask.config": copy.deepcopy(dask.config.config),
        "log levels": {n: logging.getLogger(n).level for n in ("openclaw_dask", *LOGGERS)},
        "signal handlers": {k: signal.getsignal(k) for k in (signal.SIGINT, signal.SIGTERM)},
        "BLAS pools": {p["filepath"]: p["num_threads"] for p in threadpool_info()},
        "tcp comm backend": type(backends.get("tcp")),
        # what a nanny writes into this process's environment before it spawns a worker
        "environment": {k: v for k, v in os.environ.items() if k not in ("PYTEST_CURRENT_TEST", "__DASK_PARENT_PID")},
    }


def _new_threads(before):
    return sorted(t.name for t in threading.enumerate()
                  if t.ident not in before and t.is_alive() and not t.name.startswith(_LONG_LIVED)
                  and "-Dask-Default-Threads-" not in t.name)  # a worker's task threads, as openclaw-task


@pytest.fixture(autouse=True)
def _clean_process():
    """Fail a test that leaves dask's config, log levels, signal handlers, BLAS pools, comms, environment or threads changed."""
    before, threads = _process_state(), {t.ident for t in threading.enumerate()}
    yield
    after = _process_state()
    # a library first loaded by the test (CuPy's import brings numba's OpenMP) is not a pool it changed
    after["BLAS pools"] = {path: n for path, n in after["BLAS pools"].items() if path in before["BLAS pools"]}
    changed = [what for what in before if before[what] != after[what]]
    deadline = time.monotonic() + 5  # a closed cluster's threads take a moment to end
    while _new_threads(threads) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = _new_threads(threads)
    if "dask.config" in changed:
        flat = [_flat(before["dask.config"]), _flat(after["dask.config"])]
        changed[changed.index("dask.config")] = "dask.config: " + ", ".join(
            f"{k}: {flat[0].get(k, '<absent>')!r} -> {flat[1].get(k, '<absent>')!r}"
            for k in sorted(set(flat[0]) | set(flat[1])) if flat[0].get(k, _GONE) != flat[1].get(k, _GONE))[:500]
    if "signal handlers" in changed:
        sig = before["signal handlers"], after["signal handlers"]
        changed[changed.index("signal handlers")] = "signal handlers: " + ", ".join(
            f"{k!r}: {sig[0].get(k)!r} -> {sig[1].get(k)!r}" for k in sig[0] if sig[0].get(k) != sig[1].get(k))
    if "environment" in changed:
        env = before["environment"], after["environment"]
        changed[changed.index("environment")] = "environment: " + ", ".join(
            f"{k}: {env[0].get(k)!r} -> {env[1].get(k)!r}" for k in sorted(set(env[0]) | set(env[1])) if env[0].get(k) != env[1].get(k))
    assert not changed and not left, f"the test left the process changed: {changed}; threads still running: {left}"


_GONE = object()


def _flat(d, prefix=""):
    out = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) and v else {f"{prefix}{k}": v})
    return out


def _stop(procs):
    """Kill each process group (a dask worker's nanny and its worker process together) but multiprocessing's
    resource tracker, which then unlinks the semaphores the killed processes made, as after any crash
    (killed with them, it would leave them in /dev/shm for good)."""
    trackers = []
    for proc in (q for p in procs for q in _group(p.pid)):
        with contextlib.suppress(psutil.Error):
            if "multiprocessing.resource_tracker" in " ".join(proc.cmdline()):
                trackers.append(proc)
            else:
                proc.kill()
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(10)
    psutil.wait_procs(trackers, timeout=10)  # each ends once the processes that used it are gone
    for p in procs:  # and whatever is left of the group
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)


def _group(pgid):
    members = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(proc.pid) == pgid:
                members.append(proc)
    return members


@pytest.fixture(scope="module")
def slurm():
    """A one-node Slurm of the module's own (tests/test_slurm.py), with a partition named ``PARTITION``,
    stopped and its folder removed after the module; skipped with the reason where it cannot run."""
    from tests.test_slurm import _why_not, one_node_slurm

    why = _why_not()
    if why:
        pytest.skip(why)
    with one_node_slurm() as s:
        yield s


def scheduler_address(sched_file: Path, proc: subprocess.Popen, timeout: float = 30) -> str:
    """The address a scheduler started with ``--scheduler-file`` writes there, once it has."""
    deadline = time.monotonic() + timeout
    while not sched_file.exists() or not sched_file.read_text().strip():
        if time.monotonic() > deadline or proc.poll() is not None:
            said = proc.stderr.read().decode() if proc.stderr and proc.poll() is not None else ""
            raise RuntimeError(f"{' '.join(map(str, proc.args[:2]))} did not start {said}")
        time.sleep(0.1)
    return json.loads(sched_file.read_text())["address"]


@contextlib.contextmanager
def dask_deployment(tmp_path: Path, scheduler_args=(), worker_args=("--memory-limit", "2GiB")):
    """A real ``dask scheduler`` on 127.0.0.1 and a function that adds ``dask worker`` processes; all killed after."""
    sched_file = tmp_path / "scheduler.json"
    procs = [
        subprocess.Popen(
            [str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
             "--dashboard-address", "127.0.0.1:0", "--scheduler-file", str(sched_file), *scheduler_args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
    ]
    try:
        address = scheduler_address(sched_file, procs[0])

        def add_worker(nthreads: int = 1) -> None:
            procs.append(
                subprocess.Popen(
                    [str(BIN / "dask"), "worker", address, "--host", "127.0.0.1", "--nthreads", str(nthreads),
                     "--no-dashboard", "--dashboard-address", "127.0.0.1:0", *worker_args],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                )
            )

        yield address, add_worker
    finally:
        _stop(procs[::-1])


@pytest.fixture
def dask_scheduler(tmp_path):
    """A real ``dask scheduler`` on 127.0.0.1, plus a function that adds ``dask worker`` processes."""
    with dask_deployment(tmp_path) as deployment:
        yield deployment


def openclaw(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 90) -> subprocess.CompletedProcess:
    """Run the installed ``openclaw`` command for real."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("OPENCLAW_")}
    full_env.update(env or {})
    return subprocess.run([str(BIN / "openclaw"), *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout)
