"""The dask configuration a config implies, for every process that takes part.

The session applies it around the client and the clusters it starts; ``openclaw scheduler``,
``openclaw worker`` and MPI ranks apply the same mapping, so a timeout or a comm option means
the same thing in each of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from openclaw_dask.config import Config

__all__ = ["dask_settings"]


def dask_settings(config: Config) -> dict[str, Any]:
    """Flat ``dask.config`` keys for ``config``; the ``dask:`` section wins over openclaw's own."""
    p = config.parallel
    settings: dict[str, Any] = {
        "distributed.comm.timeouts.connect": f"{p.timeout}s",
        # distributed's TCP keep-alive needs >= 11 s (10 probes + 1): a lower value cannot start
        "distributed.comm.timeouts.tcp": f"{max(p.timeout, 11.0)}s",
        "distributed.scheduler.allowed-failures": config.fault_tolerance.allowed_failures,
    }
    if p.enabled and p.backend == "thread":
        from openclaw_dask.cluster.network import bind_host

        # inproc addresses carry the machine's IP, not the host the dashboard binds
        settings["distributed.dashboard.link"] = "{scheme}://" + bind_host(config) + ":{port}/status"
    settings.update(config.dask)
    if not p.enabled:
        settings["scheduler"] = "sync"
    return settings
