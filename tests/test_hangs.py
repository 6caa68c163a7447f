"""A run that cannot proceed ends in bounded time with one line (issue 22, item 6, and taken ports).

Memory limits that cannot hold a worker, or that together exceed this machine, are refused
before anything starts; an input bigger than the workers' memory runs out of core (the memory
model, not a pre-check, decides); a run whose workers are paused at their limit with nothing moving ends
after ``parallel.timeout``; a fixed dashboard or metrics port that is taken is refused.
Worker memory limits here are 200 to 450 MiB, data at most 340 MiB, spill bounds 16 MiB in the
test's own folder, removed at the end.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import tempfile
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
from click.testing import CliRunner
from distributed import WorkerPlugin

import openclaw_dask
from openclaw_dask.cli import main
from openclaw_dask.cluster import load_for_backend as load_config
from openclaw_dask.cluster.stall import StallWatch
from openclaw_dask.errors import ConfigError, RunError
from tests.conftest import openclaw

MiB, GiB = 2**20, 2**30
# distributed would kill a worker at 95% of its limit before the watch can see it paused; the
# hang of the issue is the worker that stays paused, so the tests keep it alive.
NO_TERMINATE = {"dask": {"distributed": {"worker": {"memory": {"terminate": False}}}}}


def _one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


@pytest.fixture
def spill_dir():
    folder = Path(tempfile.mkdtemp(prefix="hangs-spill-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# -- cluster.memory_limit: refused when it cannot hold a worker or this machine cannot hold them ---------------


@pytest.mark.parametrize("value", ["", "1B", "63MiB", "0"])
def test_a_memory_limit_that_cannot_hold_a_worker_is_refused(value, tmp_path):
    # "" and 1B used to mean "all of this machine's memory" per worker (distributed reads <= 1 as a fraction)
    (tmp_path / "c.yaml").write_text(f"cluster:\n  memory_limit: {value!r}\n")
    r = CliRunner().invoke(main, ["config", "validate", str(tmp_path / "c.yaml")])
    assert r.exit_code == 2, r.output
    line = _one_line(r.output)
    assert "cluster.memory_limit" in line and "64MiB" in line and repr(value) in line


def _over_the_machine(workers: int) -> int:
    """A per-worker limit ``workers`` of which exceed this machine (or its container): the issue's 100 GiB where that does."""
    from distributed.system import MEMORY_LIMIT as total
    return 100 * GiB if workers * 100 * GiB > total else total // workers + GiB


def test_memory_limits_over_this_machine_are_refused_with_a_value_that_fits():
    limit = _over_the_machine(2)
    overrides = {"parallel.backend": "process", "parallel.workers": 2, "cluster.memory_limit": f"{limit // MiB}MiB"}
    with pytest.raises(ConfigError) as e:
        load_config(None, overrides, env={})
    line = str(e.value)
    assert "\n" not in line and f"cluster.memory_limit = {limit / GiB:.2f} GiB: 2 worker(s) x " in line
    assert "more than this machine's" in line
    fits = re.search(r"at most (\d+)MiB", line).group(1)
    load_config(None, {**overrides, "cluster.memory_limit": f"{fits}MiB"}, env={})  # the value it names is accepted
    r = CliRunner().invoke(main, ["config", "show", *(f"--set={k}={v}" for k, v in overrides.items())])
    assert r.exit_code == 2 and "cluster.memory_limit" in _one_line(r.output)


def test_one_thread_backend_worker_over_this_machine_is_refused_too():
    with pytest.raises(ConfigError, match=r"1 worker\(s\) x .* more than this machine's"):
        load_config(None, {"parallel.backend": "thread", "cluster.memory_limit": f"{_over_the_machine(1) // MiB}MiB"}, env={})


def test_memory_elsewhere_is_not_held_to_this_machine():
    from openclaw_dask.cluster import rules
    from openclaw_dask.cluster.kubernetes import KubernetesBackend
    from openclaw_dask.cluster.local import ProcessBackend, ThreadBackend
    from openclaw_dask.cluster.mpi import MpiBackend
    from openclaw_dask.cluster.remote import RemoteBackend
    from openclaw_dask.config import load_config as unchecked

    assert ProcessBackend.capabilities.local_memory and ThreadBackend.capabilities.local_memory
    assert not any(b.capabilities.local_memory for b in (RemoteBackend, KubernetesBackend, MpiBackend))
    config = unchecked(None, {"parallel.workers": 2, "cluster.memory_limit": f"{_over_the_machine(2) // MiB}MiB"}, env={})
    rules._check_memory(KubernetesBackend(), config)  # pods: their nodes' memory
    rules._check_memory(MpiBackend(), config)  # ranks may be on other hosts
    with pytest.raises(ConfigError):
        rules._check_memory(ProcessBackend(), config)


# -- an input bigger than memory: out of core ----------------------------------------------------------------


def test_the_issues_command_runs_out_of_core_and_finishes():
    # 340 MiB does not fit a 450 MiB worker's memory (its pause, less its process) with 40 MiB of spill: the memory
    # model says so, and array-sum generates and sums it on the fly instead of persisting it (tests/test_out_of_core.py)
    t0 = time.monotonic()
    r = openclaw("run", "array-sum", "--size", "340MiB", "--json", "--set", "parallel.backend=process",
                 "--set", "parallel.workers=1", "--set", "cluster.memory_limit=450MiB", "--set", "cluster.max_spill=40MiB",
                 "--set", "workload.repeat=1", timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads(r.stdout)
    assert result["ok"] and result["out_of_core"] and result["workers_lost"] == 0
    assert time.monotonic() - t0 < 30


# -- the stall watch: paused workers, nothing moving -----------------------------------------------------------


def test_a_persist_on_workers_paused_at_max_spill_ends_in_one_line(spill_dir):
    # The issue's "with max_spill 40 MiB a 1-worker persist never finishes", scaled to a 200 MiB worker.
    from openclaw_dask.workloads.array_sum import _generated

    # past the pause (160 MiB) and the spill bound (16 MiB) whatever the process holds, and with tasks left
    # when the memory monitor notices late (at 137% of the limit, 275 MiB, in one loaded .ci/run)
    n = 400 * MiB // 8
    with openclaw_dask.session(_config_with(NO_TERMINATE, spill_dir)) as s:
        pids = list(s.client.run(os.getpid).values())
        t0 = time.monotonic()
        with pytest.raises(RunError) as e:
            _generated(s, n, s.chunk_plan((n,), "float64").chunks[0], False)
        waited = time.monotonic() - t0
    line = str(e.value)
    assert "\n" not in line and line.startswith("the run made no progress for 3 s: 1 of 1 worker(s) paused near their memory limit")
    assert "cluster.max_spill (16.00 MiB per worker) lets no more data go to disk" in line
    assert "raise cluster.max_spill or cluster.memory_limit" in line and "parallel.timeout" in line
    assert 3 <= waited < 20
    _gone(pids)


def _config_with(extra: dict, spill_dir: Path, **cluster: str) -> Path:
    import yaml

    text = {"parallel": {"backend": "process", "workers": 1, "timeout": "3s", "task_chunk_size": "8MiB"},
            # memory_check off: the memory model would refuse these runs before the stall watch can see them
            "cluster": {"memory_limit": "200MiB", "max_spill": "16MiB", "local_directory": str(spill_dir / "spill"),
                        "memory_check": "off", **cluster},
            **extra}
    path = spill_dir / "openclaw_config.yaml"
    path.write_text(yaml.safe_dump(text))
    return path


def _gone(pids: list[int], wait: float = 10) -> None:
    deadline = time.monotonic() + wait
    while any(psutil.pid_exists(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(psutil.pid_exists(p) for p in pids), "a worker process outlived its session"


SCRIPT = textwrap.dedent("""\
    import json, os, time
    import openclaw_dask
    from distributed import wait

    s = openclaw_dask.session()
    with open("pids.json", "w") as f:
        json.dump(list(s.client.run(os.getpid).values()), f)
    # one 120 MiB chunk: past the pause (80% of 200 MiB) with the worker's own memory, too big for the 16 MiB spill bound
    x = s.persist(s.array((120 * 2**20 // 8,), fill="random", chunks=(120 * 2**20 // 8,)))
    wait(x)
    deadline = time.monotonic() + 20  # distributed's memory monitor pauses the worker within ~100 ms
    while {w["status"] for w in s.client.scheduler_info(n_workers=-1)["workers"].values()} != {"paused"}:
        assert time.monotonic() < deadline, "the worker never paused"
        time.sleep(0.05)
    print(COMPUTE)
    """)


@pytest.mark.parametrize("compute", ["s.compute(x.sum())", "x.sum().compute()",
                                     "openclaw_dask.map(s, abs, list(range(64)), batch_size=8)[-1]"])
def test_a_compute_on_paused_workers_exits_1_with_one_line_and_closes_the_cluster(compute, spill_dir):
    # The issue's sum after a persist that left the worker paused ("reached capacity" every 10 s, for ever);
    # a plain .compute() in the session, and the dataflow API's waits, are watched as Session.compute is
    (spill_dir / "script.py").write_text(SCRIPT.replace("COMPUTE", compute))
    config = _config_with(NO_TERMINATE, spill_dir)
    t0 = time.monotonic()
    r = openclaw("run", str(spill_dir / "script.py"), "-c", str(config), cwd=spill_dir, timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr
    # distributed's own worker warnings (pausing, "reached capacity", resuming once the data is let go) may surround it
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("openclaw: error:")]
    assert line.startswith("openclaw: error: the run made no progress for 3 s: 1 of 1 worker(s) paused near their memory limit")
    assert "cluster.max_spill" in line and "cluster.memory_limit" in line
    assert "Traceback" not in r.stderr
    assert time.monotonic() - t0 < 40
    _gone(json.loads((spill_dir / "pids.json").read_text()))


def test_a_slow_run_that_moves_is_never_stopped():
    import dask

    with openclaw_dask.session(workers=1, engine="distributed", timeout="0.5s") as s:
        t0 = time.monotonic()
        assert s.compute(dask.delayed(time.sleep)(2)) is None
        assert time.monotonic() - t0 >= 2


def test_a_compute_pinned_to_a_worker_that_died_ends_in_one_line():
    """Blocks persisted strictly on one worker, which is then killed: its restart has a new address, so the lost
    blocks can never be recomputed where they are pinned. distributed waits for ever; the run ends after the timeout."""
    import dask
    import dask.array as da

    with openclaw_dask.session(backend="process", workers=2, timeout="2s") as s:
        address, other = sorted(s.workers())
        with dask.annotate(workers=[address], allow_other_workers=False):
            x = s.persist(da.ones(4 * 2**17, chunks=2**17))
        assert s.compute(x.sum()) == 4 * 2**17
        pid = s.client.run(os.getpid, workers=[address])[address]
        os.kill(pid, 9)
        deadline = time.monotonic() + 60
        while address in s.workers() or len(s.workers()) < 2:  # gone, then replaced by its nanny at a new address
            assert time.monotonic() < deadline
            time.sleep(0.05)
        t0 = time.monotonic()
        with pytest.raises(RunError, match=r"may run only on worker\(s\) that left the cluster \(" + re.escape(address)) as e:
            s.compute(x.sum())
        assert "allow_other_workers=True" in str(e.value) and "\n" not in str(e.value)
        assert time.monotonic() - t0 < 20
        with dask.annotate(workers=[other], allow_other_workers=False):  # the session goes on: a pin to a live worker runs
            assert s.compute(s.persist(da.ones(8, chunks=4)).sum()) == 8


class _FakeClient:
    """What StallWatch reads: scheduler_info, futures, cancel."""

    def __init__(self, workers):
        self.workers, self.futures, self.cancelled = workers, {}, None

    def scheduler_info(self, n_workers=-1):
        return {"workers": self.workers}

    def cancel(self, futures, reason=None, msg=None):
        self.cancelled = (futures, msg)


def _paused(executing: int = 0, managed: int = 100 * MiB) -> dict:
    return {"status": "paused", "memory_limit": 200 * MiB,
            "metrics": {"memory": 180 * MiB, "managed_bytes": managed, "task_counts": {"memory": 4, "executing": executing},
                        "spilled_bytes": {"disk": 0}}}


@pytest.mark.parametrize(("worker", "stalls"), [(_paused(), True), (_paused(executing=1), False),
                                                ({**_paused(), "status": "running"}, False)])
def test_only_paused_workers_with_nothing_moving_stall(worker, stalls):
    client = _FakeClient({"tcp://127.0.0.1:1": worker})
    futures = ["f"]
    with pytest.raises(RunError) if stalls else _nothing():
        with StallWatch(client, limit=0.3, max_spill=None, futures=futures, interval=0.05):
            time.sleep(1.0)
    assert (client.cancelled is not None) == stalls
    if stalls:
        assert client.cancelled[0] == futures and "raise cluster.memory_limit" in client.cancelled[1]
        assert "cluster.max_spill" not in client.cancelled[1]  # no spill bound: the memory limit stopped it


def test_a_scheduler_that_cannot_say_what_is_pinned_is_asked_once():
    """A remote scheduler without openclaw cannot run the question: asked once per wait, not at every poll."""
    client = _FakeClient({"tcp://127.0.0.1:1": {**_paused(), "status": "running"}})  # idle, nothing moving
    asked = []

    def run_on_scheduler(function):
        asked.append(function)
        raise ModuleNotFoundError("No module named 'openclaw_dask'")

    client.run_on_scheduler = run_on_scheduler
    with StallWatch(client, limit=0.2, futures=["f"], interval=0.02):
        time.sleep(0.5)
    assert len(asked) == 1 and client.cancelled is None


def _nothing():
    import contextlib

    return contextlib.nullcontext()


# -- a fixed HTTP port that is taken -------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["monitoring.port", "cluster.dashboard"])
def test_a_taken_port_is_refused_in_one_line(key):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        r = CliRunner().invoke(main, ["run", "--size", "8MiB", "--set", "parallel.backend=process", "--set", "parallel.workers=1",
                                      "--set", f"{key}={port}"])
    assert r.exit_code == 2, r.output
    line = _one_line(r.output)
    assert f"{key} = {port}: port {port} for the scheduler's dashboard and /metrics is in use on 127.0.0.1" in line
    assert line.endswith(f"or set {key} to 0 for a free one")


def test_port_0_is_always_free_and_a_port_moved_after_the_check_is_refused():
    from openclaw_dask.cluster.network import require_http_port
    from openclaw_dask.config import load_config as unchecked

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with openclaw_dask.session(workers=1, engine="distributed", port=0, dashboard=True) as s:
            assert s.cluster.scheduler.http_server.port not in (0, port)
    config = unchecked(None, {"monitoring.port": 8799}, env={})
    require_http_port(config, "127.0.0.1:8799", SimpleNamespace(http_server=SimpleNamespace(port=8799)))
    with pytest.raises(ConfigError, match="monitoring.port = 8799: port 8799 .* was taken while the scheduler started "
                                          r"\(it moved to port 40000\)"):
        require_http_port(config, "127.0.0.1:8799", SimpleNamespace(http_server=SimpleNamespace(port=40000)))


@pytest.mark.parametrize("setting", ["16MiB", 16 * MiB, False])
def test_max_spill_from_a_dask_section_is_read_as_dask_reads_it(setting):
    # a dask: section or --set may give distributed's own key as a string: both checks must still work
    import dask

    from openclaw_dask.cluster.stall import StallWatch, configured_max_spill

    with dask.config.set({"distributed.worker.memory.max-spill": setting, "distributed.worker.memory.spill": 0.7}):
        got = configured_max_spill(True)
        assert configured_max_spill(False) is None
    assert got == (False if setting is False else 16 * MiB)
    watch = StallWatch(object(), limit=3, max_spill=got or None)
    paused = {"tcp://127.0.0.1:1": {"status": "paused", "memory_limit": 200 * MiB,
                                    "metrics": {"memory": 170 * MiB, "managed_bytes": 150 * MiB, "spilled_bytes": {"disk": 16 * MiB}}}}
    assert "paused near their memory limit" in watch._reason(paused, 1)


class _PoolTooBig(WorkerPlugin):
    """A worker plugin that fails as dask-cuda's RMM setup does on a GPU another process holds."""

    def setup(self, worker):
        raise MemoryError("out_of_memory: failed to allocate 105528374016 bytes")


def _scales_after_start(n_workers, **kwargs):
    """A ``LocalCluster`` started as dask-cuda starts ``LocalCUDACluster``: no worker, then scale."""
    from distributed import LocalCluster

    cluster = LocalCluster(n_workers=0, **kwargs)
    cluster.scale(n_workers)
    cluster.sync(cluster._correct_state)
    return cluster


def test_a_worker_that_fails_its_start_fails_the_session_start_in_one_line(monkeypatch):
    """Seen on an H200: a worker whose pool did not fit failed its start, the session began, and its
    first compute waited for that worker until the test's timeout. Now the start fails, naming why."""
    from openclaw_dask.cluster.local import ProcessBackend

    monkeypatch.setattr(ProcessBackend, "cluster_class",
                        lambda self: lambda **kw: _scales_after_start(plugins={_PoolTooBig()}, **kw))
    config = load_config(None, {"parallel.backend": "process", "parallel.workers": 1})
    before = set(psutil.Process().children(recursive=True))
    t0 = time.monotonic()
    with pytest.raises(RunError, match=r"could not start the process cluster \(MemoryError: out_of_memory: "
                                       r"failed to allocate 105528374016 bytes\)$"):
        openclaw_dask.Session(config).start()
    assert time.monotonic() - t0 < 30
    started = [p for p in psutil.Process().children(recursive=True) if p not in before and "resource_tracker" not in _cmdline(p)]
    assert not psutil.wait_procs(started, timeout=10)[1], "a worker process was left running"


def _cmdline(process):
    try:
        return " ".join(process.cmdline())
    except psutil.Error:  # ended meanwhile
        return ""
