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
from typing import TYPE_CHECKING, Any

from dask.system import CPU_COUNT

from openclaw_dask.cluster.handle import ClusterHandle
from openclaw_dask.cluster.network import bind_host, dashboard_address, http_address, http_host, protocol
from openclaw_dask.cluster.plugins import blas_threads, task_threads, worker_processes
from openclaw_dask.cluster.security import security_for
from openclaw_dask.errors import ClusterStartError

if TYPE_CHECKING:
    from openclaw_dask.config import Config

__all__ = ["plan", "start"]

logger = logging.getLogger("openclaw_dask.cluster")


def plan(config: Config) -> dict[str, Any]:
    """The :class:`~distributed.LocalCluster` keyword arguments for ``config`` (nothing is started)."""
    p, c = config.parallel, config.cluster
    processes = p.backend == "process"
    threads = task_threads(config) if processes else (CPU_COUNT if p.workers == "auto" else p.workers)
    n_workers = worker_processes(config) if processes else 1
    host = bind_host(config)
    web = http_host(config, host)
    kwargs: dict[str, Any] = {
        "n_workers": n_workers,
        "threads_per_worker": threads,
        "processes": processes,
        "protocol": protocol(config),
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


def start(config: Config) -> ClusterHandle:
    """Start the cluster and connect a client to it."""
    from distributed import Client, LocalCluster

    kwargs = plan(config)
    slots = kwargs["n_workers"] * max(kwargs["threads_per_worker"], blas_threads(config))
    if slots > CPU_COUNT:
        logger.warning(
            "%d worker threads on %d cores: tasks will time-share the cores (check lscpu); lower parallel.workers",
            slots,
            CPU_COUNT,
        )
    logger.info("starting %s cluster: %s", config.parallel.backend, kwargs)
    try:
        cluster = LocalCluster(**kwargs)
    except Exception as e:  # distributed raises many types for a failed start
        raise ClusterStartError(f"could not start the {config.parallel.backend} cluster ({type(e).__name__}: {e})") from e
    try:
        client = Client(cluster, timeout=config.parallel.timeout, security=kwargs.get("security"))
    except Exception as e:
        cluster.close()
        raise ClusterStartError(f"could not connect to the {config.parallel.backend} cluster ({type(e).__name__}: {e})") from e
    return ClusterHandle(client=client, cluster=cluster, backend=config.parallel.backend)
