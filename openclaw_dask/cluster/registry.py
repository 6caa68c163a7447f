"""Which backends exist, which are installed, and how to get the missing ones.

Built-in backends are listed here by the class that implements them; another package
adds one through the entry-point group ``openclaw_dask.backends``, whose entries name a
:class:`~openclaw_dask.cluster.base.Backend` subclass::

    [project.entry-points."openclaw_dask.backends"]
    mybackend = "mypackage.backend:MyBackend"

A built-in name wins over an entry point of the same name. Missing optional
dependencies are found with :func:`importlib.util.find_spec`, so listing backends
imports nothing heavy.
"""

from __future__ import annotations

import functools
import importlib
import logging
from importlib.metadata import entry_points
from typing import TYPE_CHECKING

from openclaw_dask.cluster.base import Backend
from openclaw_dask.errors import BackendUnavailable, ConfigError

if TYPE_CHECKING:
    from openclaw_dask.config import Config

__all__ = ["ENTRY_POINT_GROUP", "available_backends", "backend_for", "builtin_backends", "check", "declared", "get_backend"]

logger = logging.getLogger("openclaw_dask.cluster")

ENTRY_POINT_GROUP = "openclaw_dask.backends"
_BUILTIN = {
    "thread": "openclaw_dask.cluster.local:ThreadBackend",
    "process": "openclaw_dask.cluster.local:ProcessBackend",
    "remote": "openclaw_dask.cluster.remote:RemoteBackend",
    "mpi": "openclaw_dask.cluster.mpi:MpiBackend",
    "cuda": "openclaw_dask.cluster.cuda:CudaBackend",
    "kubernetes": "openclaw_dask.cluster.kubernetes:KubernetesBackend",
}


@functools.cache
def _load(target: str) -> Backend:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)()


def builtin_backends() -> tuple[Backend, ...]:
    """The built-in backends that can be selected with ``parallel.backend``."""
    return tuple(_load(target) for target in _BUILTIN.values())


def _plugins() -> dict[str, object]:
    """Entry points of other packages, by name (not loaded: that may import heavy code)."""
    found = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in _BUILTIN:
            logger.warning("ignoring backend entry point %s = %s: %s is a built-in backend", ep.name, ep.value, ep.name)
            continue
        found[ep.name] = ep
    return found


def _names() -> list[str]:
    return [*_BUILTIN, *_plugins()]


def get_backend(name: str, *, source: str | None = None) -> Backend:
    """The backend ``parallel.backend = name`` selects.

    Parameters
    ----------
    source
        Where ``name`` came from, for error messages.

    Raises
    ------
    ConfigError
        If no such backend exists.
    BackendUnavailable
        If its optional dependencies are not installed (names the ``pip install``).
    """
    backend = _resolve(name, source)
    backend.available()
    return backend


def declared(name: str, *, source: str | None = None) -> Backend:
    """The backend ``name`` selects, without asking whether this machine can run it (what it declares)."""
    return _resolve(name, source)


def _resolve(name: str, source: str | None) -> Backend:
    key = "parallel.backend"
    if name in _BUILTIN:
        return _load(_BUILTIN[name])
    plugins = _plugins()
    if name in plugins:
        return _from_entry_point(name, plugins[name], source)
    raise ConfigError(key=key, value=name, source=source, allowed=f"one of {', '.join(_names())}")


def _from_entry_point(name: str, ep: object, source: str | None) -> Backend:
    try:
        cls = ep.load()  # type: ignore[attr-defined]
    except Exception as e:  # noqa: BLE001  (a broken plugin is the plugin's fault: say which)
        raise ConfigError(f"the package that provides backend {name} failed to load ({type(e).__name__}: {e})",
                          key="parallel.backend", value=name, source=source,
                          hint=f"reinstall it, or check entry point {ep.value}") from None  # type: ignore[attr-defined]
    backend = cls() if isinstance(cls, type) else cls
    if not isinstance(backend, Backend) or backend.name != name:
        raise ConfigError(f"entry point {ep.value} is not an openclaw_dask Backend named {name}",  # type: ignore[attr-defined]
                          key="parallel.backend", value=name, source=source, hint="fix the plugin package")
    return backend


def backend_for(config: Config) -> Backend:
    """The backend a session of ``config`` runs on: the serial one when ``parallel.enabled`` is false."""
    if not config.parallel.enabled:
        return _load("openclaw_dask.cluster.serial:SerialBackend")
    return _named(config)


def check(config: Config) -> Backend:
    """Check ``config`` against the rules of the backend it names; return that backend.

    With ``parallel.enabled: false`` the configured backend's rules still apply, so
    switching parallelism off and on again never turns a valid file invalid.
    """
    backend = _named(config)
    backend.check(config)
    return backend


def _named(config: Config) -> Backend:
    return get_backend(config.parallel.backend, source=config.sources.get("parallel.backend"))


def available_backends() -> dict[str, str]:
    """Map every backend name to ``installed``, the pip command it needs, or why its plugin failed to load."""
    out = {}
    for name in _names():
        try:
            get_backend(name)
            out[name] = "installed"
        except BackendUnavailable as e:
            out[name] = str(e)
        except ConfigError as e:  # a plugin that fails to load
            out[name] = e.message
    return out
