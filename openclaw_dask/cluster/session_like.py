"""What the layers below the session use of one: a :class:`typing.Protocol`.

Dataflow, I/O, workloads and diagnostics take a session as their first argument but sit
below :mod:`openclaw_dask.session` and may not import it; they annotate it as
:class:`SessionLike`, which :class:`openclaw_dask.Session` satisfies (mypy checks it).
The types it names are imported only while type checking, so no layer is crossed at run time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from openclaw_dask.errors import OpenclawError

if TYPE_CHECKING:
    import dask.array as da
    import numpy as np

    from openclaw_dask.chunking import ChunkPlan
    from openclaw_dask.cluster.base import Backend, Engine
    from openclaw_dask.cluster.running import RunningCluster
    from openclaw_dask.config import Config
    from openclaw_dask.elastic import Elastic
    from openclaw_dask.monitoring import Recovery, RunMetrics

__all__ = ["SessionLike", "running_of"]


class SessionLike(Protocol):
    """A started or unstarted session, as the functions that take one use it.

    Attributes
    ----------
    config : Config
        The effective configuration.
    backend : Backend
        What runs the tasks.
    engine : Engine
        What runs its graphs, and why.
    running : RunningCluster or None
        The started engine; ``None`` before :meth:`openclaw_dask.Session.start`
        (:func:`running_of` says so in an error).
    metrics : RunMetrics
        What the session has done.
    elastic : Elastic
        Resizing the cluster at run time.
    started, closed : bool
        Whether it has been started, and closed.
    """

    config: Config
    backend: Backend
    engine: Engine
    running: RunningCluster | None
    metrics: RunMetrics
    elastic: Elastic
    started: bool
    closed: bool

    @property
    def client(self) -> Any:
        """The :class:`distributed.Client` (an error on a local engine)."""

    @property
    def slots(self) -> int:
        """Task threads over all workers."""

    def workers(self) -> dict[str, dict[str, Any]]:
        """Scheduler information about each worker."""

    def compute(self, *collections: Any, **kwargs: Any) -> Any:
        """Compute on the session's engine, as :func:`dask.compute`."""

    def persist(self, collection: Any) -> Any:
        """Compute ``collection`` into memory and return it."""

    def recovery(self) -> Recovery:
        """Workers lost, tasks recomputed and failures recovered since the start."""

    def chunk_plan(self, shape: tuple[int, ...], dtype: Any = "float64") -> ChunkPlan:
        """The chunks the session chooses for ``shape`` and ``dtype``, with the reason."""

    def chunks(self, shape: tuple[int, ...], dtype: Any = "float64") -> tuple[tuple[int, ...], ...]:
        """Dask chunks for ``shape`` and ``dtype``."""

    def array(self, shape: tuple[int, ...] | int, dtype: Any = "float64", *,
              fill: str | Callable[..., np.ndarray] = "random", seed: int = 0,
              chunks: tuple[tuple[int, ...], ...] | None = None) -> da.Array:
        """A new dask array whose blocks are made on the workers."""

    def from_array(self, x: Any) -> da.Array:
        """Wrap an array-like as a dask array chunked by the session."""

    def to_numpy(self, x: Any) -> np.ndarray:
        """Compute ``x`` and bring it home as NumPy."""


def running_of(session: SessionLike) -> RunningCluster:
    """The engine ``session`` started; an :class:`OpenclawError` that says how when it is not started."""
    if session.running is None:
        raise OpenclawError("this session is not started; use openclaw_dask.session(), which starts it")
    return session.running
