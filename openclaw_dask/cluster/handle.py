"""The running cluster a session holds."""

from __future__ import annotations

import contextlib
import logging
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
    """

    client: Any
    cluster: Any
    backend: str
    closed: bool = False
    last_resize: float | None = None  # time.monotonic() of the last resize, shared by borrowed sessions

    def close(self) -> None:
        """Close the client, then the cluster if openclaw started it. Safe to call twice."""
        if self.closed:
            return
        self.closed = True
        for thing in (self.client, self.cluster):
            if thing is None:
                continue
            # A cluster that already lost its scheduler must not turn close() into an error.
            with contextlib.suppress(Exception):
                thing.close()
        logger.debug("closed %s cluster", self.backend)
