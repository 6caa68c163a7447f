"""The running cluster a session holds."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["ClusterHandle"]

logger = logging.getLogger("openclaw_dask.cluster")


@dataclass
class ClusterHandle:
    """A connected client and, when openclaw started it, the cluster behind it.

    Attributes
    ----------
    client
        A :class:`distributed.Client`.
    cluster
        The cluster object openclaw started (``None`` for ``remote``: the user owns it).
    backend
        The backend name.
    shutdown
        Closing shuts the scheduler and its workers down through the client first
        (MPI ranks leave once their scheduler is gone).
    lost
        Says why the cluster ended under a running session, or ``None`` while it runs.
    """

    client: Any
    cluster: Any
    backend: str
    closed: bool = False
    last_resize: float | None = None  # time.monotonic() of the last resize, shared by borrowed sessions
    shutdown: bool = False
    lost: Callable[[], str | None] | None = None

    def close(self) -> None:
        """Close the client, then the cluster if openclaw started it. Safe to call twice."""
        if self.closed:
            return
        self.closed = True
        gone = self.lost is not None and self.lost(0) is not None
        if self.shutdown and not gone:
            with contextlib.suppress(Exception):
                self.client.shutdown()
        client_log = logging.getLogger("distributed.client")
        level = client_log.level
        if gone:  # the reason was reported already; cancelling the reconnect would log a traceback
            client_log.setLevel(logging.CRITICAL)
        try:
            for thing in (self.client, self.cluster):
                if thing is None:
                    continue
                # A cluster that already lost its scheduler must not turn close() into an error.
                with contextlib.suppress(Exception):
                    thing.close()
        finally:
            client_log.setLevel(level)
        logger.debug("closed %s cluster", self.backend)
