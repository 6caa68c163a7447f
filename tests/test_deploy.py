"""``openclaw scheduler`` / ``openclaw worker`` next to stock ``dask scheduler`` / ``dask worker``, on 127.0.0.1."""

from __future__ import annotations

import socket
import subprocess
import time

import pytest

import openclaw_dask
from openclaw_dask.cluster import load_for_backend as load_config
from openclaw_dask.cluster.deploy import scheduler_command, worker_command
from openclaw_dask.errors import ClusterStartError
from tests.conftest import BIN, _stop, openclaw, scheduler_address

PRELOAD = '''
def dask_setup(server):
    server.openclaw_test_preloaded = True
'''


def _start(args, env=None):
    return subprocess.Popen([str(BIN / "openclaw"), *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True, env=env)


@pytest.fixture
def procs():
    started: list[subprocess.Popen] = []
    yield started
    _stop(started[::-1])


def test_openclaw_scheduler_takes_stock_and_openclaw_workers(tmp_path, procs):
    def blas():  # defined here so it pickles by value: these workers cannot import tests/
        import numpy  # noqa: F401
        from threadpoolctl import threadpool_info

        return sorted({p["num_threads"] for p in threadpool_info()})

    (tmp_path / "mark.py").write_text(PRELOAD)
    conf = tmp_path / "deploy.yaml"
    conf.write_text("parallel:\n  timeout: 20s\n  omp_threads: 2\n  hybrid: true\n  backend: process\n"
                    f"cluster:\n  preload: [{tmp_path / 'mark.py'}]\n")
    sched_file = tmp_path / "scheduler.json"
    procs.append(_start(["scheduler", "-c", str(conf), "--port", "0", "--scheduler-file", str(sched_file)]))
    address = scheduler_address(sched_file, procs[0])
    assert address.startswith("tcp://127.0.0.1:")
    procs.append(_start(["worker", address, "-c", str(conf), "--set", "parallel.workers=1"]))
    procs.append(subprocess.Popen([str(BIN / "dask"), "worker", address, "--host", "127.0.0.1", "--nthreads", "1",
                                   "--no-dashboard", "--dashboard-address", "127.0.0.1:0"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
    with openclaw_dask.session(backend="remote", scheduler_address=address, workers=2, timeout="30s") as s:
        x = s.array((4000,), fill="arange")
        assert s.compute(x.sum()) == 3999 * 4000 / 2
        assert s.client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.openclaw_test_preloaded)
        assert s.client.run_on_scheduler(lambda dask_scheduler: "is_rootish" in vars(dask_scheduler))  # placement.py
        marks = s.client.run(lambda dask_worker: getattr(dask_worker, "openclaw_test_preloaded", False))
        blas = s.client.run(blas)
        # the openclaw worker: preload, one task thread, omp_threads BLAS threads; the stock one: neither
        ours = [a for a, w in s.workers().items() if marks[a]]
        assert len(ours) == 1 and s.workers()[ours[0]]["nthreads"] == 1 and blas[ours[0]] == [2]
        assert sorted(marks.values()) == [False, True]
        timeout = s.client.run_on_scheduler(lambda: __import__("dask").config.get("distributed.comm.timeouts.connect"))
        assert timeout == "20.0s"


def test_openclaw_worker_joins_a_stock_dask_scheduler(dask_scheduler, procs):
    address, _ = dask_scheduler
    procs.append(_start(["worker", address, "--set", "parallel.workers=2", "--set", "parallel.backend=process"]))
    with openclaw_dask.session(backend="remote", scheduler_address=address, workers=2, timeout="30s") as s:
        assert s.compute(s.array((1000,), fill="ones").sum()) == 1000
        assert all(w["host"] == "127.0.0.1" for w in s.workers().values())


def test_commands_carry_the_config():
    c = load_config(None, {"network_interface": "lo", "timeout": "45s", "workers": 3, "backend": "process",
                           "memory_limit": "1GiB"}, env={})
    w = worker_command(c, "tcp://127.0.0.1:8786")
    assert w.argv[1:3] == ["worker", "tcp://127.0.0.1:8786"]
    assert ["--interface", "lo"] == w.argv[3:5]
    assert w.argv[w.argv.index("--nworkers") + 1] == "3" and w.argv[w.argv.index("--death-timeout") + 1] == "45s"
    assert w.argv[w.argv.index("--memory-limit") + 1] == str(2**30)
    assert w.settings["distributed.comm.timeouts.connect"] == "45.0s"
    s = scheduler_command(load_config(None, {"scheduler_address": "tcp://127.0.0.1:9999", "backend": "remote"}, env={}))
    assert s.argv[s.argv.index("--port") + 1] == "9999" and s.argv[s.argv.index("--protocol") + 1] == "tcp"
    assert s.argv[s.argv.index("--dashboard-address") + 1] == "127.0.0.1:0"


def test_worker_without_an_address_and_temporary_certificates_are_refused():
    r = openclaw("worker")
    assert r.returncode == 2 and "needs the scheduler's address" in r.stderr and "Traceback" not in r.stderr
    r = openclaw("scheduler", "--set", "security.temporary_certificates=true", "--dry-run")
    assert r.returncode == 2 and "give security.ca_file, cert_file and key_file" in r.stderr


def test_a_scheduler_that_never_answers_fails_in_about_the_timeout():
    with socket.socket() as silent:  # accepts TCP connections (backlog) but never speaks
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        address = f"tcp://127.0.0.1:{silent.getsockname()[1]}"
        t0 = time.monotonic()
        with pytest.raises(ClusterStartError, match=rf"at {address} within 3s.*raise parallel.timeout"):
            openclaw_dask.session(backend="remote", scheduler_address=address, timeout="3s")
        elapsed = time.monotonic() - t0
    assert 2.5 < elapsed < 15, elapsed


def test_one_file_drives_scheduler_workers_and_clients(tmp_path):
    conf = tmp_path / "cluster.yaml"
    conf.write_text("parallel:\n  backend: remote\n  network_interface: lo\n  omp_threads: 2\n"
                    "cluster:\n  scheduler_address: tcp://127.0.0.1:8799\n  memory_limit: 1GiB\n")
    r = openclaw("worker", "-c", str(conf), "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "dask worker tcp://127.0.0.1:8799 --interface lo" in r.stdout and "--nthreads 2" in r.stdout
    assert "--port 8799" in openclaw("scheduler", "-c", str(conf), "--dry-run").stdout
    # the client binds nothing, so the worker-side keys in the same file are refused for it, clearly
    r = openclaw("run", "array-sum", "-c", str(conf))
    assert r.returncode == 2 and "(backend is remote)" in r.stderr and "Traceback" not in r.stderr
