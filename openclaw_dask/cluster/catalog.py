"""The built-in backends, by the ``parallel.backend`` name that selects each.

A table of ``"module:attr"`` names, imported when asked for: the registry
(:mod:`~openclaw_dask.cluster.registry`) serves them with the plugins, and the capability
rules (:mod:`~openclaw_dask.cluster.rules`) read them to name the backends that can do a
thing, without importing either module.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

__all__ = ["BUILTIN", "builtin"]

BUILTIN = {
    "thread": "openclaw_dask.cluster.local:ThreadBackend",
    "process": "openclaw_dask.cluster.local:ProcessBackend",
    "remote": "openclaw_dask.cluster.remote:RemoteBackend",
    "mpi": "openclaw_dask.cluster.mpi:MpiBackend",
    "cuda": "openclaw_dask.cluster.cuda:CudaBackend",
    "kubernetes": "openclaw_dask.cluster.kubernetes:KubernetesBackend",
    "ssh": "openclaw_dask.cluster.ssh:SshBackend",
    "slurm": "openclaw_dask.cluster.slurm:SlurmBackend",
}
SERIAL = "openclaw_dask.cluster.serial:SerialBackend"  # parallel.enabled: false; not selectable by name


@functools.cache
def builtin(target: str) -> Any:
    """The one instance of the backend class at ``"module:attr"`` (backends keep no state)."""
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)()
