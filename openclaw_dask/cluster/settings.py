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

_NEVER = 10**9  # seconds: about 32 years


def dask_settings(config: Config) -> dict[str, Any]:
    """Flat ``dask.config`` keys for ``config``; the ``dask:`` section wins over openclaw's own."""
    p = config.parallel
    settings: dict[str, Any] = {
        "distributed.comm.timeouts.connect": f"{p.timeout}s",
        # distributed's TCP keep-alive needs >= 11 s (10 probes + 1): a lower value cannot start
        "distributed.comm.timeouts.tcp": f"{max(p.timeout, 11.0)}s",
        "distributed.scheduler.allowed-failures": config.fault_tolerance.allowed_failures,
    }
    from openclaw_dask.cluster.plugins import blas_env

    # every worker process a nanny starts gets this many BLAS/OpenMP threads (libraries read it at load)
    for var, value in blas_env(config).items():
        settings[f"distributed.nanny.pre-spawn-environ.{var}"] = int(value)
    if p.backend == "process":
        # SpecCluster closes a nanny, for good, when its worker is missing from the scheduler
        # lost-worker-timeout (15 s) after *any* earlier loss, even one the nanny had already
        # recovered from: a worker that crashes again while restarting then never comes back,
        # and a run waiting for it hangs (seen under chaos, 1 in about 8 runs). Our nannies
        # restart their workers themselves, so that reaper is switched off.
        settings["distributed.deploy.lost-worker-timeout"] = f"{_NEVER}s"
    if p.enabled and p.backend == "thread":
        from openclaw_dask.cluster.network import bind_host

        # inproc addresses carry the machine's IP, not the host the dashboard binds
        settings["distributed.dashboard.link"] = "{scheme}://" + bind_host(config) + ":{port}/status"
    if config.security.enabled:
        from openclaw_dask.cluster.security import tls_settings

        # every Security() made under these settings (a user's Client, a scheduler, a worker) gets the same TLS
        settings.update(tls_settings(config))
    settings.update(config.dask)
    if config.cluster.preload:
        _preload(settings, config.cluster.preload, ("scheduler", "worker"))
    if p.socket_buffer_size is not None:
        _socket_buffers(settings, p.socket_buffer_size)
    if not p.enabled:
        settings["scheduler"] = "sync"
    return settings


def _socket_buffers(settings: dict[str, Any], size: int) -> None:
    """Size TCP buffers in every scheduler, nanny and worker: each imports the preload before it listens."""
    from openclaw_dask.cluster.sockets import CONFIG_KEY, PRELOAD

    settings.setdefault(CONFIG_KEY, size)  # a value in the dask: section wins
    _preload(settings, (PRELOAD,), ("scheduler", "nanny", "worker"))


def _preload(settings: dict[str, Any], modules: tuple[str, ...], roles: tuple[str, ...]) -> None:
    """Append ``modules`` to the preloads of each role; worker processes get them from their nanny's config."""
    import dask

    for role in roles:
        key = f"distributed.{role}.preload"
        preloads = list(settings.get(key, dask.config.get(key, [])))
        settings[key] = [*preloads, *(m for m in modules if m not in preloads)]
