"""Shared fixtures. Everything binds 127.0.0.1 and is closed even when a test fails."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    """No ambient OPENCLAW_* variables or ./openclaw_config.yaml leak into a test."""
    for var in [v for v in os.environ if v.startswith("OPENCLAW_")]:
        monkeypatch.delenv(var)
    monkeypatch.chdir(tmp_path)


def _stop(procs):
    """Kill each process group (a dask worker's nanny and its worker process together)."""
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
    for p in procs:
        p.wait(10)


@pytest.fixture
def dask_scheduler(tmp_path):
    """A real ``dask scheduler`` on 127.0.0.1, plus a function that adds ``dask worker`` processes."""
    sched_file = tmp_path / "scheduler.json"
    procs = [
        subprocess.Popen(
            [str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
             "--dashboard-address", "127.0.0.1:0", "--scheduler-file", str(sched_file)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
    ]
    try:
        deadline = time.monotonic() + 30
        while not sched_file.exists() or not sched_file.read_text().strip():
            if time.monotonic() > deadline or procs[0].poll() is not None:
                raise RuntimeError("dask scheduler did not start")
            time.sleep(0.1)
        address = json.loads(sched_file.read_text())["address"]

        def add_worker(nthreads: int = 1) -> None:
            procs.append(
                subprocess.Popen(
                    [str(BIN / "dask"), "worker", address, "--host", "127.0.0.1", "--nthreads", str(nthreads),
                     "--no-dashboard", "--dashboard-address", "127.0.0.1:0", "--memory-limit", "2GiB"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                )
            )

        yield address, add_worker
    finally:
        _stop(procs[::-1])


def openclaw(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 90) -> subprocess.CompletedProcess:
    """Run the installed ``openclaw`` command for real."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("OPENCLAW_")}
    full_env.update(env or {})
    return subprocess.run([str(BIN / "openclaw"), *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout)
