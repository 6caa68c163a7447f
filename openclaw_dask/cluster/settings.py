"""The dask configuration a config implies, for every process that takes part.

The session applies it around the client and the clusters it starts; ``openclaw scheduler``,
``openclaw worker`` and MPI ranks apply the same mapping, so a timeout or a comm option means
the same thing in each of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from openclaw_dask.cluster.base import Backend
    from openclaw_dask.config import Config

__all__ = ["add_preload", "dask_settings", "for_engine", "listed", "needs_distributed"]


def dask_settings(config: Config, backend: Backend | None = None) -> dict[str, Any]:
    """Flat ``dask.config`` keys for ``config``; the ``dask:`` section wins over openclaw's own.

    Parameters
    ----------
    backend
        Whose own settings (:meth:`Backend.dask_settings`) to add; default: the one the
        session of ``config`` runs on (serial when ``parallel.enabled`` is false).
    """
    from openclaw_dask.cluster import placement
    from openclaw_dask.cluster.heap import WORKER_ARENA, tuned_by_user
    from openclaw_dask.cluster.registry import backend_for
    from openclaw_dask.cluster.worker_shape import TRANSFER_KEYS, blas_env

    p = config.parallel
    settings: dict[str, Any] = {
        "distributed.comm.timeouts.connect": f"{p.timeout}s",
        # distributed's TCP keep-alive needs >= 11 s (10 probes + 1): a lower value cannot start
        "distributed.comm.timeouts.tcp": f"{max(p.timeout, 11.0)}s",
        "distributed.scheduler.allowed-failures": config.fault_tolerance.allowed_failures,
    }
    # every worker process a nanny starts gets this many BLAS/OpenMP threads (libraries read it at load)
    for var, value in blas_env(config).items():
        settings[f"distributed.nanny.pre-spawn-environ.{var}"] = int(value)
    if not tuned_by_user():  # one malloc arena from the start: task threads' big blocks can then be reused (cluster/heap.py)
        settings.update({f"distributed.nanny.pre-spawn-environ.{var}": int(value) for var, value in WORKER_ARENA.items()})
    if p.fusion_buffer_size is not None:  # small pieces move between workers a buffer's worth per message
        settings.update(dict.fromkeys(TRANSFER_KEYS, p.fusion_buffer_size))
    backend = backend or backend_for(config)
    if backend.array_backend is not None:  # the chunks the session makes, and dask's own da.ones, da.random...
        settings["array.backend"] = backend.array_backend
    own = backend.dask_settings(config)
    settings.update(own)
    if config.security.enabled:
        from openclaw_dask.cluster.security import tls_settings

        # every Security() made under these settings (a user's Client, a scheduler, a worker) gets the same TLS
        settings.update(tls_settings(config))
    settings.update(config.dask)
    for key, modules in own.items():  # preloads add up: a dask: section's list keeps the backend's too
        if key.startswith("distributed.") and key.endswith(".preload"):
            add_preload(settings, tuple(modules), (key.split(".")[1],))
    if config.cluster.preload:
        add_preload(settings, config.cluster.preload, ("scheduler", "worker"))
    # a scheduler started under these settings places tasks that read big blocks where the blocks are
    add_preload(settings, (placement.__name__,), ("scheduler",))
    # A fresh worker process imports dask.array while unpickling its first array task: ~0.15 s on
    # each worker that the first compute would wait for (as dask-cuda's pre_import avoids).
    add_preload(settings, ("dask.array",), ("worker",))
    if p.socket_buffer_size is not None:
        _socket_buffers(settings, p.socket_buffer_size)
    return settings


def for_engine(settings: dict[str, Any], config: Config, backend: Backend) -> dict[str, Any]:
    """``settings`` for a session on ``backend``: on dask's local schedulers without distributed's keys (but the
    ``dask:`` section's), which apply to no part of it, so that a thread or serial session never imports distributed
    (~0.1 s of its start)."""
    if backend.engine(config).distributed:
        return settings
    return {k: v for k, v in settings.items() if not _distributed_key(k) or k in config.dask}


def needs_distributed(settings: dict[str, Any]) -> bool:
    """Whether ``settings`` hold keys of distributed's, whose defaults must be in dask's config before they are set."""
    return any(map(_distributed_key, settings))


def _distributed_key(key: str) -> bool:
    return key.split(".")[0] == "distributed"


def _socket_buffers(settings: dict[str, Any], size: int) -> None:
    """Size TCP buffers in every scheduler, nanny and worker: each imports the preload before it listens."""
    from openclaw_dask.cluster.sockets import CONFIG_KEY, PRELOAD

    settings.setdefault(CONFIG_KEY, size)  # a value in the dask: section wins
    add_preload(settings, (PRELOAD,), ("scheduler", "nanny", "worker"))


def listed(preload: str | list[str]) -> list[str]:
    """A preload setting as a list: dask's config takes one module name or a list of them."""
    return [preload] if isinstance(preload, str) else list(preload)


def add_preload(settings: dict[str, Any], modules: tuple[str, ...], roles: tuple[str, ...]) -> None:
    """Append ``modules`` to the preloads of each role; worker processes get them from their nanny's config."""
    import dask

    from openclaw_dask.cluster.process_state import PROCESS

    for role in roles:
        key = f"distributed.{role}.preload"
        # the user's preloads, not those an older open session put in this process's config
        preloads = listed(settings.get(key, dask.config.get(key, [], config=PROCESS.found())))
        settings[key] = [*preloads, *(m for m in modules if m not in preloads)]
