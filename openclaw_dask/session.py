"""The running thing a user holds: configuration, backend, client and chunking helpers.

>>> import openclaw_dask
>>> with openclaw_dask.session(workers=2) as s:           # doctest: +SKIP
...     x = s.array((100_000_000,), fill="random")         # chunked by task_chunk_size
...     print(x.sum().compute(), s.engine)

A session is built from parts (:meth:`Session.start`), each taken on one
:class:`contextlib.ExitStack`: closing undoes them in the reverse order, by construction.
What runs its graphs is a :class:`~openclaw_dask.cluster.RunningCluster`; the session delegates to it.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from openclaw_dask import arrays, display, memory_model, parts
from openclaw_dask.cluster import backend_for, check, running_of
from openclaw_dask.config import Config, load_config
from openclaw_dask.dataflow.small_tasks import SmallTasks, batch_small_tasks
from openclaw_dask.elastic import Elastic, ResizeResult
from openclaw_dask.errors import OpenclawError
from openclaw_dask.monitoring import Recovery, RunMetrics

if TYPE_CHECKING:
    import dask.array as da
    import numpy as np

    from openclaw_dask.chunking import ChunkPlan
    from openclaw_dask.cluster import RunningCluster, SessionLike

__all__ = ["Session", "activated", "active_session", "current_session", "resize_workers", "session"]

logger = logging.getLogger("openclaw_dask.session")
_ACTIVE: list[Session] = []  # sessions the CLI started for a script, innermost last
_OPEN: list[Session] = []  # started and not yet closed, oldest first


class Session:
    """A configuration and the cluster it started, closed together.

    Use :func:`session` to make one. Closing is idempotent and happens on leaving a
    ``with`` block even when the block raises.

    Attributes
    ----------
    config : Config
        The effective configuration.
    backend : openclaw_dask.cluster.Backend
        What runs the tasks (the serial backend when ``parallel.enabled`` is false).
    engine : openclaw_dask.cluster.Engine
        What runs its graphs (a distributed cluster, or dask's threaded or synchronous
        scheduler in this process) and why.
    running : openclaw_dask.cluster.RunningCluster or None
        The started engine, once :meth:`start` has run: it computes, scales and closes.
    metrics : RunMetrics
        What the session has done, for reports and Prometheus.
    """

    def __init__(self, config: Config) -> None:
        self.config, self.backend = config, backend_for(config)
        self.engine = self.backend.engine(config)
        self.running: RunningCluster | None = None
        self.metrics = RunMetrics()
        self.elastic = Elastic()
        self.small_tasks: SmallTasks | None = None  # what the last compute batched
        self.started = self.closed = self.borrowed = False
        self._recovery: Any = None
        self._stack = contextlib.ExitStack()

    def start(self) -> Session:
        """Take every part in order: the spill folder, process-wide settings, the engine, plugins, watches."""
        if self.started:
            raise OpenclawError("this session was started already; make a new one with openclaw_dask.session()")
        self.started = True
        check(self.config)  # the backend's rules, also for a Config loaded without them
        try:
            self._stack.enter_context(_opened(self))
            self.running = parts.build(self._stack, self)
            self._recovery = parts.watch(self._stack, self.running, self.config, self.metrics)
        except BaseException:
            self._stack.close()
            raise
        logger.debug("session started: backend=%s", self.backend.name)
        return self

    def close(self) -> None:
        """Undo every part in reverse order: the cluster closes, dask's configuration and log levels return.

        Closed under a newer open session, it leaves that one's settings in force: the process shows
        the newest open session's, and the last to close leaves what the first found.
        """
        if self.closed or self.borrowed or not self.started:
            return
        self.closed = True
        self._stack.close()

    def __enter__(self) -> Session:
        return self if self.started else self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = "not started" if self.running is None else self.running.describe()
        return f"<openclaw_dask.Session backend={self.backend.name} {where}>"

    def _repr_html_(self) -> str:  # Jupyter
        return display.session_html(self)

    @classmethod
    def borrow(cls, other: Session) -> Session:
        """A view of ``other``'s running cluster whose :meth:`close` does nothing (the owner closes)."""
        view = cls.__new__(cls)
        view.__dict__.update(other.__dict__, borrowed=True)
        return view

    @property
    def client(self) -> Any:
        """The :class:`distributed.Client`; on a local :attr:`engine` an :class:`OpenclawError` that says how to get one."""
        return running_of(self).client

    @property
    def cluster(self) -> Any:
        """The cluster object openclaw started, or ``None`` (serial, ``remote``, or an MPI job it joined)."""
        return None if self.running is None else self.running.cluster

    def workers(self) -> dict[str, dict[str, Any]]:
        """Scheduler information about each worker (empty on a local dask scheduler, or once the scheduler is lost)."""
        return {} if self.running is None else self.running.workers()

    @property
    def slots(self) -> int:
        """Task threads over all workers (those of the local scheduler: 1 when serial)."""
        return 1 if self.running is None else self.running.slots

    def compute(self, *collections: Any, **kwargs: Any) -> Any:
        """Compute on this session's engine: its client, or dask's local scheduler.

        One collection gives its result; several give a tuple, as :func:`dask.compute`.
        Failed tasks are retried (``fault_tolerance.retries``); tiny delayed tasks run batched (:mod:`.dataflow.small_tasks`).
        """
        memory_model.require_fit(self, list(collections), computed=True)  # refused before any task runs
        run, unpack, self.small_tasks = batch_small_tasks(self, list(collections))
        results = unpack(running_of(self).compute(run, **kwargs))
        return results[0] if len(collections) == 1 else results

    def persist(self, collection: Any) -> Any:
        """Compute ``collection`` into worker memory (into the graph on a local scheduler) and return it."""
        memory_model.require_fit(self, [collection])
        return running_of(self).persist(collection)

    def recovery(self) -> Recovery:
        """Workers lost, tasks recomputed and failures recovered since the session started.

        Counted on the scheduler by :mod:`openclaw_dask.cluster.recovery`; take two snapshots
        and :meth:`~openclaw_dask.monitoring.Recovery.since` for one run. All zero when
        serial; ``None`` each when a remote scheduler cannot load openclaw_dask.
        """
        if self._recovery is not None:
            self._recovery.refresh()  # remote: one call to the scheduler; local counts are live
        return self.metrics.recovery()

    def resize_workers(self, n: int, *, force: bool = False) -> ResizeResult:
        """Grow or shrink the cluster to ``n`` workers at run time; see :meth:`openclaw_dask.elastic.Elastic.resize`."""
        return self.elastic.resize(self, n, force=force)

    def chunk_plan(self, shape: tuple[int, ...], dtype: Any = "float64") -> ChunkPlan:
        """The chunks :meth:`chunks` would choose, with the reason; see :func:`openclaw_dask.arrays.chunk_plan`."""
        return arrays.chunk_plan(self, shape, dtype)

    def chunks(self, shape: tuple[int, ...], dtype: Any = "float64") -> tuple[tuple[int, ...], ...]:
        """Dask chunks for ``shape`` and ``dtype``; see :func:`openclaw_dask.arrays.chunks`."""
        return arrays.chunks(self, shape, dtype)

    def array(self, shape: tuple[int, ...] | int, dtype: Any = "float64", *,
              fill: str | Callable[..., np.ndarray] = "random", seed: int = 0,
              chunks: tuple[tuple[int, ...], ...] | None = None) -> da.Array:
        """A new dask array whose blocks are made on the workers; see :func:`openclaw_dask.arrays.array`."""
        return arrays.array(self, shape, dtype, fill=fill, seed=seed, chunks=chunks)

    def from_array(self, x: Any) -> da.Array:
        """Wrap an array-like as a dask array chunked by this session; see :func:`openclaw_dask.arrays.from_array`."""
        return arrays.from_array(self, x)

    def to_numpy(self, x: Any) -> np.ndarray:
        """Compute ``x`` here and bring it home as NumPy; see :func:`openclaw_dask.arrays.to_numpy`."""
        return arrays.to_numpy(self, x)


@contextlib.contextmanager
def _opened(s: Session) -> Iterator[None]:
    """Keep ``s`` in the list :func:`resize_workers` consults while it is open."""
    _OPEN.append(s)
    try:
        yield
    finally:
        _OPEN.remove(s)


def active_session() -> Session | None:
    """The session ``openclaw run script.py`` started for the script, if any."""
    return _ACTIVE[-1] if _ACTIVE else None


@contextlib.contextmanager
def activated(s: Session) -> Iterator[Session]:
    """Make ``s`` what ``session()`` with no arguments returns, for the duration."""
    _ACTIVE.append(s)
    try:
        yield s
    finally:
        _ACTIVE.remove(s)


def _in_spawned_bootstrap() -> bool:
    # What multiprocessing itself checks: a spawned child re-importing the parent's __main__.
    return bool(getattr(multiprocessing.current_process(), "_inheriting", False))


def session(config: str | os.PathLike[str] | Config | None = None, **overrides: Any) -> Session:
    """Start a session from a config file, a :class:`Config`, or the defaults.

    Parameters
    ----------
    config
        A YAML path, a :class:`Config`, or ``None``. With ``None`` and no overrides
        inside ``openclaw run script.py``, the session the CLI started is returned
        (closing it there is a no-op: the CLI owns it). Otherwise ``None`` reads
        ``$OPENCLAW_CONFIG`` or ``./openclaw_config.yaml`` if present.
    **overrides
        Keys by bare or dotted name, e.g. ``workers=2``, ``backend="process"``,
        ``**{"parallel.task_chunk_size": "64MiB"}``.

    Returns
    -------
    Session
        Started; use it in a ``with`` block, or call :meth:`Session.close`.
    """
    if config is None and not overrides and _ACTIVE:
        return Session.borrow(_ACTIVE[-1])
    if _in_spawned_bootstrap():  # ends this worker process with one line, not a traceback
        raise SystemExit(
            "openclaw_dask.session() ran while a worker process was importing your script; "
            "run it with `openclaw run script.py`, or put the code under `if __name__ == \"__main__\":`"
        )
    if isinstance(config, Config) and overrides:
        raise OpenclawError("pass overrides with a file path, or build the Config with load_config(path, overrides)")
    if not isinstance(config, Config):
        config = load_config(config, overrides)
    return Session(config).start()


def current_session() -> Session | None:
    """The session ``openclaw run`` started for the script, else the most recently started one still open."""
    return _ACTIVE[-1] if _ACTIVE else (_OPEN[-1] if _OPEN else None)


def resize_workers(n: int, *, force: bool = False) -> ResizeResult:
    """Resize the current session: the one ``openclaw run`` started, else the most recent open one."""
    current = _ACTIVE[-1] if _ACTIVE else (_OPEN[-1] if _OPEN else None)
    if current is None:
        raise OpenclawError("resize_workers(): no session is open; start one with openclaw_dask.session(backend='process')")
    return current.resize_workers(n, force=force)


if TYPE_CHECKING:
    def _is_session_like(s: Session) -> SessionLike:  # mypy checks that a Session satisfies the protocol
        return s
