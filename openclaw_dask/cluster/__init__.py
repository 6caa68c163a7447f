"""Start or reach a Dask cluster shaped by a :class:`~openclaw_dask.config.Config`.

Each backend is a :class:`Backend` (see :mod:`~openclaw_dask.cluster.base`): it declares
what it can do, checks a config against its own rules, plans without starting anything,
and starts a :class:`RunningCluster`. :func:`backend_for` picks the one a config names.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from openclaw_dask.cluster.base import Backend, Capabilities
from openclaw_dask.cluster.client import DistributedCluster
from openclaw_dask.cluster.registry import ENTRY_POINT_GROUP, available_backends, backend_for, check, get_backend
from openclaw_dask.cluster.running import RunningCluster
from openclaw_dask.cluster.session_like import SessionLike, running_of
from openclaw_dask.config import load_config as _load_config

if TYPE_CHECKING:
    from openclaw_dask.config import Config

__all__ = [
    "ENTRY_POINT_GROUP",
    "Backend",
    "Capabilities",
    "DistributedCluster",
    "RunningCluster",
    "SessionLike",
    "available_backends",
    "backend_for",
    "check",
    "get_backend",
    "load_for_backend",
    "running_of",
]


def load_for_backend(path: str | os.PathLike[str] | None = None, overrides: Mapping[str, Any] | None = None,
                     **kwargs: Any) -> Config:
    """Load a configuration and check it against the backend it names (nothing of it need be installed).

    :func:`openclaw_dask.config.load_config` reads the layers and checks keys, values and
    the combinations that hold for every backend; the backend's :meth:`Backend.check`
    adds its own rules. Arguments are those of :func:`openclaw_dask.config.load_config`.

    Raises
    ------
    ConfigError
        For an unknown key, a bad value, or a combination the named backend cannot run.
    """
    loaded = _load_config(path, overrides, **kwargs)
    check(loaded)
    return loaded
