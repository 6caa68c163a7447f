"""Start or reach a Dask cluster shaped by a :class:`~openclaw_dask.config.Config`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from openclaw_dask.cluster.handle import ClusterHandle
from openclaw_dask.cluster.registry import BACKENDS, available_backends, get_backend

if TYPE_CHECKING:
    from openclaw_dask.config import Config

__all__ = ["BACKENDS", "ClusterHandle", "available_backends", "get_backend", "open_cluster"]


def open_cluster(config: Config) -> ClusterHandle:
    """Start (or connect to) the cluster ``config.parallel.backend`` names.

    Call it inside the dask configuration the session applies, so that timeouts and
    the ``dask:`` section reach the scheduler and workers. Most users want
    :func:`openclaw_dask.session` instead, which does that and closes everything.

    Raises
    ------
    BackendUnavailable
        The backend's extra is not installed.
    ClusterStartError
        The cluster could not be started or reached.
    """
    return get_backend(config.parallel.backend).start(config)
