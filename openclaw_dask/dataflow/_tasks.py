"""Where the dataflow API's tasks run: the session's running engine.

:class:`~openclaw_dask.cluster.RunningCluster` submits named tasks and hands back futures,
whatever the engine: ``client.submit`` on a distributed cluster, the thread backend's
:class:`~openclaw_dask.cluster.local.TaskPool` on dask's threaded scheduler, and dask's
synchronous scheduler when serial. Either way the profiler sees each task as a graph task.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from openclaw_dask.cluster.session_like import running_of

if TYPE_CHECKING:
    from openclaw_dask.cluster import RunningCluster, SessionLike

__all__ = ["tasks_of", "token"]


def token() -> str:
    """A hex token that keeps one call's task keys apart from another's (dask's key_split drops it)."""
    return uuid.uuid4().hex[:8]


def tasks_of(session: SessionLike) -> RunningCluster:
    """The engine ``session``'s tasks run on."""
    return running_of(session)
