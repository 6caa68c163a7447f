"""Which backends exist, which are installed, and how to get the missing ones.

Built-in backends are listed in :mod:`~openclaw_dask.cluster.catalog` by the class that
implements them; another package adds one through the entry-point group
``openclaw_dask.backends``, whose entries name a
:class:`~openclaw_dask.cluster.base.Backend` subclass::

    [project.entry-points."openclaw_dask.backends"]
    mybackend = "mypackage.backend:MyBackend"

A built-in name wins over an entry point of the same name. Entry points are scanned once
per process (:func:`refresh` scans again). Checking, planning and describing a config use
the class a name declares (:func:`declared`); only a session that starts asks whether this
machine can run it (:func:`backend_for`, :meth:`Backend.available`). Missing optional
dependencies are found with :func:`importlib.util.find_spec`, so nothing heavy is imported.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from openclaw_dask.cluster.base import Backend
from openclaw_dask.cluster.catalog import BUILTIN, SERIAL, builtin
from openclaw_dask.errors import BackendUnavailable, ConfigError
from openclaw_dask.registry import Registry

if TYPE_CHECKING:
    from openclaw_dask.config import Config

__all__ = ["BACKENDS", "ENTRY_POINT_GROUP", "available_backends", "backend_for", "builtin_backends", "check", "declared",
           "declared_for", "get_backend", "refresh"]

ENTRY_POINT_GROUP = "openclaw_dask.backends"
_BUILTIN = BUILTIN  # the same table: a test may add a name to it
BACKENDS: Registry[Backend] = Registry(ENTRY_POINT_GROUP, Backend, _BUILTIN, key="parallel.backend", what="backend")


def refresh() -> None:
    """Scan the entry points again (for tests that install a plugin in this process)."""
    BACKENDS.refresh()


def builtin_backends() -> tuple[Backend, ...]:
    """The built-in backends that can be selected with ``parallel.backend``."""
    return tuple(builtin(target) for target in _BUILTIN.values())


@functools.cache
def _instance(cls: type[Backend]) -> Backend:
    return cls()


def declared(name: str, *, source: str | None = None) -> Backend:
    """The backend ``name`` selects, without asking whether this machine can run it (what it declares).

    Raises
    ------
    ConfigError
        If no such backend exists, or its plugin fails to load.
    """
    if name in _BUILTIN:
        return builtin(_BUILTIN[name])
    # a class is hashable: mypy checks type[Backend] against Hashable with Backend's unbound __hash__
    return _instance(BACKENDS.get(name, source=source))  # type: ignore[arg-type]


def get_backend(name: str, *, source: str | None = None) -> Backend:
    """The backend ``parallel.backend = name`` selects, checked to be runnable here.

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
    backend = declared(name, source=source)
    backend.available()
    return backend


def declared_for(config: Config) -> Backend:
    """The backend a session of ``config`` would run on (serial when ``parallel.enabled`` is false), as declared."""
    return builtin(SERIAL) if not config.parallel.enabled else _named(config)


def backend_for(config: Config) -> Backend:
    """The backend a session of ``config`` starts: :func:`declared_for`, checked to be runnable here.

    Raises
    ------
    BackendUnavailable
        Its optional dependencies are not installed: the one question only a start asks.
    """
    backend = declared_for(config)
    backend.available(config)
    return backend


def check(config: Config) -> Backend:
    """Check ``config`` against the rules of the backend it names; return that backend (as declared).

    Nothing of the backend needs to be installed. With ``parallel.enabled: false`` the
    configured backend's rules still apply, so switching parallelism off and on again
    never turns a valid file invalid.
    """
    backend = _named(config)
    backend.check(config)
    return backend


def _named(config: Config) -> Backend:
    return declared(config.parallel.backend, source=config.sources.get("parallel.backend"))


def available_backends() -> dict[str, str]:
    """Map every backend name to ``installed``, the pip command it needs, or why its plugin failed to load."""
    out = {}
    for name in BACKENDS.names():
        try:
            get_backend(name)
            out[name] = "installed"
        except BackendUnavailable as e:
            out[name] = str(e)
        except ConfigError as e:  # a plugin that fails to load
            out[name] = e.message
    return out
