from __future__ import annotations

import logging
import os
import socket
import time

import dask
import numpy as np
import pytest

import openclaw_dask
from openclaw_dask.cluster import available_backends, get_backend
from openclaw_dask.cluster import load_for_backend as load_config
from openclaw_dask.cluster.local import ProcessBackend
from openclaw_dask.errors import BackendUnavailable, ClusterStartError, ConfigError, OpenclawError


def cfg(**overrides):
    return load_config(None, overrides, env={})


def plan(config):
    return get_backend(config.parallel.backend).plan(config)


# -- plans: what would be started (nothing runs) ----------------------------------------


def test_thread_plan_is_dasks_threaded_scheduler_unless_a_setting_needs_a_cluster():
    assert plan(cfg(workers=3)) == {"scheduler": "threads", "num_workers": 3}
    for overrides, key in [({"engine": "distributed"}, None), ({"dashboard": True}, "cluster.dashboard"),
                           ({"retries": 1}, "fault_tolerance.retries"), ({"memory_limit": "1GiB"}, "cluster.memory_limit"),
                           ({"communication": "tcp"}, "parallel.communication"), ({"max_spill": "1GiB"}, "cluster.max_spill"),
                           ({"dask.distributed.scheduler.worker-saturation": 2.0}, "dask: distributed.*")]:
        engine = get_backend("thread").engine(cfg(**overrides))
        assert engine.distributed and (key is None or engine.reason.startswith(key)), (overrides, engine)
        assert "n_workers" in plan(cfg(**overrides))


def test_engine_threads_refuses_a_setting_that_needs_a_cluster():
    with pytest.raises(ConfigError, match=r"cluster.dashboard = true: needs a distributed cluster .*parallel.engine is threads; "
                                          r"set parallel.engine=auto or distributed, or remove cluster.dashboard"):
        cfg(engine="threads", dashboard=True)
    with pytest.raises(ConfigError, match=r"parallel.engine = threads: .*backend process always runs a distributed cluster"):
        cfg(backend="process", engine="threads")


def test_thread_plan_with_a_cluster_is_one_worker_with_n_threads_on_inproc():
    kw = plan(cfg(workers=3, engine="distributed"))
    assert (kw["n_workers"], kw["threads_per_worker"], kw["processes"]) == (1, 3, False)
    assert kw["protocol"] == "inproc"
    assert kw["dashboard_address"] is None
    assert kw["scheduler_kwargs"]["dashboard_address"] == "127.0.0.1:0"


def test_process_plan_is_n_processes_with_omp_threads_each():
    kw = plan(cfg(backend="process", workers=3, omp_threads=2, memory_limit="1GiB"))
    assert (kw["n_workers"], kw["threads_per_worker"], kw["processes"]) == (3, 2, True)
    assert kw["protocol"] == "tcp" and kw["host"] == "127.0.0.1"
    assert kw["memory_limit"] == 2**30


@pytest.mark.parametrize(
    ("backend", "communication", "expected"),
    [("thread", "tcp", "tcp"), ("process", "gloo", "tcp"), ("thread", "inproc", "inproc"), ("process", "auto", "tcp")],
)
def test_communication_maps_to_protocol(backend, communication, expected):
    assert plan(cfg(backend=backend, communication=communication))["protocol"] == expected


@pytest.mark.parametrize("communication", ["nccl", "ucx"])
def test_nccl_without_ucx_falls_back_to_tcp_with_a_warning(caplog, monkeypatch, communication):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "distributed_ucxx" else real(name, *a))
    caplog.set_level(logging.WARNING, logger="openclaw_dask")
    assert plan(cfg(backend="process", communication=communication))["protocol"] == "tcp"
    assert f"parallel.communication = {communication} needs UCX" in caplog.text and "chose tcp instead" in caplog.text
    assert len(caplog.records) == 1
    with pytest.raises(BackendUnavailable, match="communication_strict is true; install it"):
        plan(cfg(backend="process", communication=communication, communication_strict=True))


def test_dashboard_addresses_stay_on_the_bind_host():
    assert plan(cfg(dashboard=True))["dashboard_address"] == "127.0.0.1:0"
    assert plan(cfg(dashboard=8790))["dashboard_address"] == "127.0.0.1:8790"
    assert plan(cfg(dashboard=":8791"))["dashboard_address"] == "127.0.0.1:8791"


def test_network_interface_lo_binds_loopback():
    kw = plan(cfg(backend="process", network_interface="lo"))
    assert kw["interface"] == "lo" and "host" not in kw


def test_unknown_network_interface_lists_the_real_ones():
    with pytest.raises(ConfigError, match=r"network_interface = nope0: no such interface .*lo"):
        plan(cfg(backend="process", network_interface="nope0"))


# -- the registry names what is missing ---------------------------------------------------


def test_registry_lists_every_backend():
    status = available_backends()
    assert status["thread"] == status["process"] == status["remote"] == "installed"
    assert status["mpi"] == "installed"  # the test extra brings MPICH, mpi4py and dask-mpi
    assert status["kubernetes"] == "installed"  # the test extra brings dask-kubernetes


class FakeBackend(ProcessBackend):
    name = "fake"
    requires = ("no_such_module_openclaw",)
    extra = "mpi"


def test_missing_extra_names_the_pip_install(monkeypatch):
    from openclaw_dask.cluster import registry

    monkeypatch.setitem(registry._BUILTIN, "fake", f"{__name__}:FakeBackend")
    assert "pip install 'openclaw-dask[mpi]'" in available_backends()["fake"]
    with pytest.raises(BackendUnavailable, match=r"needs no_such_module_openclaw.*pip install 'openclaw-dask\[mpi\]'"):
        get_backend("fake")


class PluginWithoutExtra(FakeBackend):
    name = "plain"
    extra = None


def test_a_plugin_without_an_extra_names_its_own_packages(monkeypatch):
    from openclaw_dask.cluster import registry

    monkeypatch.setitem(registry._BUILTIN, "plain", f"{__name__}:PluginWithoutExtra")
    assert available_backends()["plain"].endswith("run: pip install no_such_module_openclaw")


# -- real clusters ---------------------------------------------------------------------------


def test_thread_backend_runs_n_threads_in_this_process_without_a_cluster():
    import threading

    import dask
    import dask.array as da

    with openclaw_dask.session(workers=2) as s:
        assert s.engine.kind == "threads" and s.slots == 2 and s.workers() == {}
        assert "openclaw-task" in repr(dask.config.get("pool")._thread_name_prefix)
        # a plain .compute() in the session runs on the session's two task threads
        names = da.ones(4, chunks=1).map_blocks(lambda b: np.array([threading.current_thread().name]), dtype=object).compute()
        assert {n.rsplit("_", 1)[0] for n in names} == {"openclaw-task"}
        with pytest.raises(OpenclawError, match="no distributed client: it runs on the dask threaded scheduler.*parallel.engine=distributed"):
            s.client  # noqa: B018
    assert dask.config.get("pool", None) is None


def test_thread_backend_with_a_cluster_runs_one_in_process_worker():
    with openclaw_dask.session(workers=2, engine="distributed") as s:
        assert s.engine.distributed and s.engine.reason == "parallel.engine: distributed"
        workers = s.workers()
        assert len(workers) == 1 and s.slots == 2
        assert s.client.scheduler.address.startswith("inproc://")
        assert s.client.submit(os.getpid).result() == os.getpid()


def test_process_backend_runs_worker_processes_on_loopback():
    with openclaw_dask.session(backend="process", workers=2, memory_limit="1GiB") as s:
        workers = s.workers()
        assert len(workers) == 2
        assert all(a.startswith("tcp://127.0.0.1:") for a in workers)
        assert s.client.scheduler.address.startswith("tcp://127.0.0.1:")
        assert {w["memory_limit"] for w in workers.values()} == {2**30}
        pids = set(s.client.run(os.getpid).values())
        assert len(pids) == 2 and os.getpid() not in pids
        # BLAS pools inside a task stay at one thread: processes x threads never oversubscribe
        from threadpoolctl import threadpool_info

        info = s.client.submit(threadpool_info, pure=False).result()
        assert all(pool["num_threads"] == 1 for pool in info)
    assert s.client.status == "closed"


def _imported(module: str) -> bool:
    import sys

    return module in sys.modules


def test_process_backend_omp_threads_sets_threads_per_worker():
    with openclaw_dask.session(backend="process", workers=1, omp_threads=2) as s:
        assert [w["nthreads"] for w in s.workers().values()] == [2]
        # imported before the worker took a task: the first compute does not wait for it
        assert list(s.client.run(_imported, "dask.array").values()) == [True]


def test_tcp_on_the_thread_backend():
    with openclaw_dask.session(workers=1, communication="tcp") as s:
        assert s.client.scheduler.address.startswith("tcp://127.0.0.1:")


def _http_status(port: int, path: str) -> int:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_dashboard_off_by_default_and_on_loopback_when_asked():
    # The scheduler's HTTP server (health, metrics) always runs, on the bind host and a free port.
    # In-process workers get no dashboard of their own either (it imported bokeh: 0.2-1.3 s of the start).
    with openclaw_dask.session(workers=1, engine="distributed") as s:
        port = s.client.scheduler_info()["services"]["dashboard"]
        assert _http_status(port, "/health") == 200
        assert _http_status(port, "/status") == 404
        assert [w._dashboard for w in s.cluster.workers.values()] == [False]
    with openclaw_dask.session(workers=1, dashboard=True) as s:
        assert s.client.dashboard_link.startswith("http://127.0.0.1:")
        assert _http_status(s.client.scheduler_info()["services"]["dashboard"], "/status") == 200
        assert [w._dashboard for w in s.cluster.workers.values()] == [True]


@pytest.mark.parametrize("watched", [{}, {"dashboard": True}, {"prometheus": True}])
def test_an_unwatched_clusters_event_loops_are_timed_less_often(watched):
    # distributed's 20 ms event-loop ticks feed the dashboard and /metrics; with neither, they only cut
    # into the main thread's GIL (150 times a second on 2 workers): 500 ms still logs a blocked loop
    with openclaw_dask.session(backend="process", workers=1, **watched) as s:
        ticks = {s.client.run_on_scheduler(lambda dask_scheduler: dask_scheduler._tick_interval),
                 *s.client.run(lambda dask_worker: dask_worker._tick_interval).values()}
        # the workers' 10 ms stack samples feed the dashboard's profile page alone
        profiled = set(s.client.run(lambda dask_worker: "profile" in dask_worker.periodic_callbacks).values())
    assert ticks == ({0.02} if watched else {0.5})
    assert profiled == {"dashboard" in watched}


def test_log_level_debug_reaches_client_and_worker_processes(caplog):
    caplog.set_level(logging.DEBUG)
    with openclaw_dask.session(backend="process", workers=1, log_level="DEBUG") as s:
        levels = s.client.run(lambda: logging.getLogger("distributed").getEffectiveLevel())
        assert set(levels.values()) == {logging.DEBUG}
    assert any(r.name.startswith("openclaw_dask") and r.levelno == logging.DEBUG for r in caplog.records)


def test_timeout_reaches_dask_config_and_is_restored():
    import dask

    before = dask.config.get("distributed.comm.timeouts.connect")
    with openclaw_dask.session(workers=1, timeout="7s", engine="distributed") as s:
        assert dask.config.get("distributed.comm.timeouts.connect") == "7.0s"
        assert s.client.run_on_scheduler(lambda: __import__("dask").config.get("distributed.comm.timeouts.connect")) == "7.0s"
    assert dask.config.get("distributed.comm.timeouts.connect") == before


# -- an existing dask scheduler + dask worker deployment ------------------------------------


def test_remote_backend_uses_an_existing_deployment(dask_scheduler):
    address, add_worker = dask_scheduler
    add_worker()
    add_worker(nthreads=2)

    def transfer_limits(dask_worker):  # bytes per message a worker fetches (gather) and sends (p2p shards)
        import dask

        return dask_worker.state.transfer_message_bytes_limit, dask.config.get("distributed.p2p.comm.message-bytes-limit")

    with openclaw_dask.session(backend="remote", scheduler_address=address, workers=2, timeout="30s", log_level="INFO",
                               fusion_buffer_size="3MiB") as s:
        assert len(s.workers()) == 2 and s.slots == 3
        assert set(s.client.run(transfer_limits).values()) == {(3 * 2**20, 3 * 2**20)}  # workers openclaw did not start
        assert s.cluster is None
        x = s.array((1000,), fill="arange")
        assert s.compute(x.sum()) == 999 * 1000 / 2
        levels = s.client.run(lambda: logging.getLogger("distributed").level)
        assert set(levels.values()) == {logging.INFO}
        assert "openclaw-log-level" in s.client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.worker_plugins))
    # closing the session leaves the user's scheduler running
    from distributed import Client

    with Client(address, timeout=10) as c:
        assert len(c.scheduler_info()["workers"]) == 2
        assert "openclaw-log-level" not in c.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.worker_plugins))
        assert set(c.run(transfer_limits).values()) == {(50e6, "2 MiB")}  # dask's own again


def test_remote_waits_for_workers_then_fails_clearly(dask_scheduler):
    address, _ = dask_scheduler
    t0 = time.monotonic()
    with pytest.raises(ClusterStartError, match=rf"only 0 of 2 workers joined {address} within 2s"):
        openclaw_dask.session(backend="remote", scheduler_address=address, workers=2, timeout="2s")
    assert time.monotonic() - t0 < 15


def test_unreachable_scheduler_fails_within_the_timeout():
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    t0 = time.monotonic()
    with pytest.raises(ClusterStartError, match=rf"could not reach a dask-scheduler at {address} within 2s"):
        openclaw_dask.session(backend="remote", scheduler_address=address, timeout="2s")
    elapsed = time.monotonic() - t0
    assert 1.5 < elapsed < 12


@pytest.mark.parametrize(
    "overrides",
    [{"backend": "thread", "dashboard": True}, {"backend": "process", "dashboard": True},
     {"backend": "thread", "network_interface": "lo"}, {"backend": "process", "network_interface": "lo"}],
)
def test_every_listening_socket_is_on_loopback(overrides):
    import psutil

    with openclaw_dask.session(workers=1, **overrides) as s:
        assert s.compute(s.array(10, fill="ones").sum()) == 10
        me = psutil.Process()
        procs = [me, *me.children(recursive=True)]
        listening = [c.laddr for p in procs for c in p.net_connections("inet") if c.status == psutil.CONN_LISTEN]
    assert listening, "the scheduler's HTTP server at least should listen"
    assert all(addr.ip == "127.0.0.1" for addr in listening), listening


def test_process_nannies_are_never_reaped_by_the_cluster():
    # SpecCluster would close a nanny whose worker is missing lost-worker-timeout after an
    # earlier loss (a restart in progress included); nannies restart workers themselves.
    from openclaw_dask.cluster.settings import dask_settings

    assert float(dask_settings(cfg(backend="process"))["distributed.deploy.lost-worker-timeout"][:-1]) > 10**8
    assert "distributed.deploy.lost-worker-timeout" not in dask_settings(cfg(backend="thread"))
    mine = load_config(None, {"backend": "process", "dask.distributed.deploy.lost-worker-timeout": "20s"}, env={})
    assert dask_settings(mine)["distributed.deploy.lost-worker-timeout"] == "20s"  # the dask: section still wins


def test_the_scheduler_of_worker_processes_starts_from_a_loopback_rate_and_the_dask_section_still_wins():
    # distributed's 100 MB/s made moving model-parallel-matmul's 32 MiB weights look dearer than one core doing all
    from openclaw_dask.cluster.local import LOOPBACK_BANDWIDTH

    with openclaw_dask.session(backend="process", workers=1) as s:
        assert s.running.scheduler.bandwidth == LOOPBACK_BANDWIDTH
    with openclaw_dask.session(load_config(None, {"backend": "process", "workers": 1, "dask.distributed.scheduler.bandwidth": "500MB"},
                                           env={})) as s:
        assert s.running.scheduler.bandwidth == 500e6


def test_shutting_a_cluster_down_closes_its_workers_before_its_scheduler():
    """A heartbeat in flight when the scheduler stops breaks, and its worker logs a traceback (seen under mpirun)."""
    from distributed import Client, LocalCluster
    from distributed.diagnostics.plugin import SchedulerPlugin

    from openclaw_dask.cluster import Backend, DistributedCluster

    class Census(SchedulerPlugin):
        def __init__(self, scheduler):
            self.scheduler, self.left = scheduler, None

        async def close(self):
            self.left = len(self.scheduler.workers)

    # the cluster object finds its scheduler gone when it closes: it need not retry for 30 s
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}), \
            LocalCluster(n_workers=2, processes=False, dashboard_address="127.0.0.1:0") as cluster:  # inproc; HTTP on loopback
        census = Census(cluster.scheduler)
        cluster.scheduler.add_plugin(census)
        config = load_config(None, {}, env={})
        DistributedCluster(Backend(), config, Client(cluster.scheduler_address), shuts_down=True).close()  # as under mpirun: a bare client
    assert census.left == 0
