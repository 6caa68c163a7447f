"""Backends ``thread`` and ``process``: a :class:`distributed.LocalCluster` on this machine.

``thread`` is one in-process worker with ``workers`` threads (no serialisation, no
inter-worker transfers). ``process`` is ``workers`` worker processes under nannies,
each with ``omp_threads`` task threads and one BLAS/OpenMP thread, so processes x
threads never oversubscribe the cores; with ``hybrid`` each has one task thread and
``omp_threads`` BLAS/OpenMP threads instead (set at spawn by
``distributed.nanny.pre-spawn-environ``, held by :class:`~openclaw_dask.cluster.plugins.BlasThreads`).
"""

from __future__ import annotations

import logging
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from dask.system import CPU_COUNT

from openclaw_dask.cluster.base import Backend, Capabilities, RunningCluster
from openclaw_dask.cluster.network import bind_host, dashboard_address, http_address, http_host, protocol
from openclaw_dask.cluster.plugins import BlasThreads, blas_threads, task_threads, worker_processes
from openclaw_dask.cluster.security import security_for
from openclaw_dask.errors import ClusterStartError

if TYPE_CHECKING:
    from openclaw_dask.config import Config

__all__ = ["LocalBackend", "ProcessBackend", "ThreadBackend"]

logger = logging.getLogger("openclaw_dask.cluster")

_NEVER = 10**9  # seconds: about 32 years


class LocalBackend(Backend):
    """A :class:`distributed.LocalCluster` on this machine; subclasses say threads or processes."""

    def plan(self, config: Config) -> dict[str, Any]:
        """The :class:`~distributed.LocalCluster` keyword arguments for ``config`` (nothing is started)."""
        p, c = config.parallel, config.cluster
        processes = self.capabilities.worker_processes
        threads = task_threads(config) if processes else (CPU_COUNT if p.workers == "auto" else p.workers)
        host = bind_host(config)
        web = http_host(config, host)
        kwargs: dict[str, Any] = {
            "n_workers": worker_processes(config) if processes else 1,
            "threads_per_worker": threads,
            "processes": processes,
            "protocol": protocol(config, self),
            "dashboard_address": dashboard_address(config, web),
            # on the bind host, or loopback when only TLS allowed a wider bind
            "scheduler_kwargs": {"dashboard_address": http_address(config, web)},
            "silence_logs": getattr(logging, p.log_level),
        }
        if c.memory_limit != "auto":
            kwargs["memory_limit"] = c.memory_limit
        security = security_for(config)
        if security is not None:
            kwargs["security"] = security
        if kwargs["protocol"] == "inproc" or web != host:
            # The worker's HTTP server follows the worker's address unless told where: inproc
            # addresses carry no host (so it would listen on every interface), and TLS does not cover HTTP.
            kwargs["worker_dashboard_address"] = f"{web}:0"
        if kwargs["protocol"] != "inproc":
            if p.network_interface is not None:
                kwargs["interface"] = p.network_interface
            else:
                kwargs["host"] = host
        return kwargs

    def start(self, config: Config) -> RunningCluster:
        """Start the cluster and connect a client to it."""
        from distributed import Client, LocalCluster

        kwargs = self.plan(config)
        slots = kwargs["n_workers"] * max(kwargs["threads_per_worker"], blas_threads(config))
        if slots > CPU_COUNT:
            logger.warning("%d worker threads on %d cores: tasks will time-share the cores (check lscpu); lower parallel.workers",
                           slots, CPU_COUNT)
        logger.info("starting %s cluster: %s", self.name, kwargs)
        try:
            cluster = LocalCluster(**kwargs)
        except Exception as e:  # distributed raises many types for a failed start
            raise ClusterStartError(f"could not start the {self.name} cluster ({type(e).__name__}: {e})") from e
        try:
            client = Client(cluster, timeout=config.parallel.timeout, security=kwargs.get("security"))
        except Exception as e:
            cluster.close()
            raise ClusterStartError(f"could not connect to the {self.name} cluster ({type(e).__name__}: {e})") from e
        return RunningCluster(self, client, cluster)


class ThreadBackend(LocalBackend):
    """``thread``: one in-process worker with ``workers`` threads (no serialisation, no transfers)."""

    name = "thread"
    capabilities = Capabilities(in_process=True, prometheus=True, tls=True, socket_buffers=True)
    why_not = MappingProxyType({"resize": "runs one in-process worker (change parallel.workers instead)"})
    default_protocol = "inproc"

    def dask_settings(self, config: Config) -> dict[str, Any]:
        # inproc addresses carry the machine's IP, not the host the dashboard binds
        return {"distributed.dashboard.link": "{scheme}://" + bind_host(config) + ":{port}/status"}


class ProcessBackend(LocalBackend):
    """``process``: ``workers`` worker processes under nannies, shaped by ``omp_threads`` and ``hybrid``."""

    name = "process"
    capabilities = Capabilities(worker_processes=True, resize=True, adapt=True, prometheus=True, tls=True, socket_buffers=True)

    def worker_plugins(self, config: Config) -> list[Any]:
        return [*super().worker_plugins(config), BlasThreads(blas_threads(config))]

    def dask_settings(self, config: Config) -> dict[str, Any]:
        # SpecCluster closes a nanny, for good, when its worker is missing from the scheduler
        # lost-worker-timeout (15 s) after *any* earlier loss, even one the nanny had already
        # recovered from: a worker that crashes again while restarting then never comes back,
        # and a run waiting for it hangs (seen under chaos, 1 in about 8 runs). Our nannies
        # restart their workers themselves, so that reaper is switched off.
        return {"distributed.deploy.lost-worker-timeout": f"{_NEVER}s"}
