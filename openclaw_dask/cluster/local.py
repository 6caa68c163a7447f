"""Backends ``thread`` and ``process``: a :class:`distributed.LocalCluster` on this machine.

``thread`` is one in-process worker with ``workers`` threads (no serialisation, no
inter-worker transfers). ``process`` is ``workers`` worker processes under nannies,
each with ``omp_threads`` task threads; distributed already pins their BLAS/OpenMP
pools to one thread (``distributed.nanny.pre-spawn-environ``), so processes x threads
never oversubscribe the cores.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from dask.system import CPU_COUNT

from openclaw_dask.cluster.handle import ClusterHandle
from openclaw_dask.cluster.network import bind_host, dashboard_address, protocol
from openclaw_dask.errors import ClusterStartError

if TYPE_CHECKING:
    from openclaw_dask.config import Config

__all__ = ["plan", "start"]

logger = logging.getLogger("openclaw_dask.cluster")


def plan(config: Config) -> dict[str, Any]:
    """The :class:`~distributed.LocalCluster` keyword arguments for ``config`` (nothing is started)."""
    p, c = config.parallel, config.cluster
    processes = p.backend == "process"
    threads = p.omp_threads if processes else (CPU_COUNT if p.workers == "auto" else p.workers)
    n_workers = (max(1, CPU_COUNT // threads) if p.workers == "auto" else p.workers) if processes else 1
    host = bind_host(config)
    kwargs: dict[str, Any] = {
        "n_workers": n_workers,
        "threads_per_worker": threads,
        "processes": processes,
        "protocol": protocol(config),
        "dashboard_address": dashboard_address(config, host),
        # The HTTP server (health, metrics) runs even without a dashboard: on the bind host, and on
        # monitoring.port or any free port.
        "scheduler_kwargs": {"dashboard_address": dashboard_address(config, host) or f"{host}:{config.monitoring.port}"},
        "silence_logs": getattr(logging, p.log_level),
    }
    if c.memory_limit != "auto":
        kwargs["memory_limit"] = c.memory_limit
    if kwargs["protocol"] == "inproc":
        # inproc addresses carry no host or interface, so the worker's HTTP server would
        # listen on every interface unless told where.
        kwargs["worker_dashboard_address"] = f"{host}:0"
    elif p.network_interface is not None:
        kwargs["interface"] = p.network_interface
    else:
        kwargs["host"] = host
    return kwargs


def start(config: Config) -> ClusterHandle:
    """Start the cluster and connect a client to it."""
    from distributed import Client, LocalCluster

    kwargs = plan(config)
    slots = kwargs["n_workers"] * kwargs["threads_per_worker"]
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
        client = Client(cluster, timeout=config.parallel.timeout)
    except Exception as e:
        cluster.close()
        raise ClusterStartError(f"could not connect to the {config.parallel.backend} cluster ({type(e).__name__}: {e})") from e
    return ClusterHandle(client=client, cluster=cluster, backend=config.parallel.backend)
