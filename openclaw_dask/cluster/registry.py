"""Which backends exist, which are installed, and how to get the missing ones.

Each backend is a module of this package with ``start(config) -> ClusterHandle``.
Its optional dependencies are checked with :func:`importlib.util.find_spec`, so
listing backends imports nothing heavy.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from types import ModuleType

from openclaw_dask.errors import BackendUnavailable, ConfigError

__all__ = ["BACKENDS", "BackendSpec", "available_backends", "get_backend"]


@dataclass(frozen=True)
class BackendSpec:
    """One backend: the module that starts it and the extra it needs."""

    name: str
    module: str | None  # None: not in this build yet
    requires: tuple[str, ...] = ()
    extra: str | None = None

    def missing(self) -> list[str]:
        return [m for m in self.requires if importlib.util.find_spec(m) is None]

    def status(self) -> str:
        if self.module is None:
            return "not in this build yet"
        missing = self.missing()
        if missing:
            return f"missing {', '.join(missing)}: pip install 'openclaw-dask[{self.extra}]'"
        return "installed"


BACKENDS: dict[str, BackendSpec] = {
    s.name: s
    for s in (
        BackendSpec("thread", "openclaw_dask.cluster.local", ("distributed",)),
        BackendSpec("process", "openclaw_dask.cluster.local", ("distributed",)),
        BackendSpec("remote", "openclaw_dask.cluster.remote", ("distributed",)),
        BackendSpec("mpi", "openclaw_dask.cluster.mpi", ("mpi4py", "dask_mpi"), "mpi"),
        BackendSpec("cuda", None, ("cupy", "dask_cuda"), "cuda"),
        BackendSpec("kubernetes", None, ("dask_kubernetes",), "k8s"),
    )
}


def available_backends() -> dict[str, str]:
    """Map every backend name to ``installed``, the pip command it needs, or ``not in this build yet``."""
    return {name: spec.status() for name, spec in BACKENDS.items()}


def get_backend(name: str) -> ModuleType:
    """Import the module that starts backend ``name``.

    Raises
    ------
    ConfigError
        If no such backend exists, or it is not in this build.
    BackendUnavailable
        If its optional dependencies are not installed (names the ``pip install``).
    """
    spec = BACKENDS.get(name)
    if spec is None:
        raise ConfigError(f"parallel.backend = {name}: unknown backend; use one of {', '.join(BACKENDS)}")
    if spec.module is None:
        raise ConfigError(f"parallel.backend = {name}: not available in this build yet; use thread, process or remote")
    missing = spec.missing()
    if missing:
        raise BackendUnavailable(
            f"backend {name} needs {', '.join(missing)}, which is not installed; run: pip install 'openclaw-dask[{spec.extra}]'"
        )
    return importlib.import_module(spec.module)
