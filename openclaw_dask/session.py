"""The running thing a user holds: configuration, client, cluster and chunking helpers.

>>> import openclaw_dask
>>> with openclaw_dask.session(workers=2) as s:           # doctest: +SKIP
...     x = s.array((100_000_000,), fill="random")         # chunked by task_chunk_size
...     print(x.sum().compute(), s.client)
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from openclaw_dask.chunking import ChunkPlan, plan_chunks
from openclaw_dask.config import Config, load_config
from openclaw_dask.elastic import ResizeResult, resize
from openclaw_dask.errors import OpenclawError
from openclaw_dask.monitoring import Recovery, RunMetrics, register_collector

if TYPE_CHECKING:
    import dask.array as da

    from openclaw_dask.cluster import ClusterHandle

__all__ = ["FILLS", "Session", "active_session", "resize_workers", "session"]

logger = logging.getLogger("openclaw_dask.session")
_ACTIVE: list[Session] = []  # sessions the CLI started for a script, innermost last
_OPEN: list[Session] = []  # started and not yet closed, oldest first


def _fill_block(kind: str, seed: int, dtype: str, block_info: dict | None = None) -> np.ndarray:
    """Make one block on the worker that runs it (nothing travels from the client)."""
    info = block_info[None]
    location = info["array-location"]
    shape = tuple(stop - start for start, stop in location)
    if kind == "arange":  # value = flat index, so sums have a closed form
        strides = np.cumprod((1,) + tuple(info["shape"][:0:-1]))[::-1]
        block = np.zeros(shape, dtype=dtype) if len(shape) > 1 else None
        for axis, ((start, stop), stride) in enumerate(zip(location, strides)):
            coords = np.arange(start * stride, stop * stride, stride, dtype=dtype)
            if block is None:
                return coords
            block += coords.reshape((-1,) + (1,) * (len(shape) - axis - 1))
        return block
    if kind == "random":
        rng = np.random.default_rng([seed, *info["chunk-location"]])
        return rng.random(shape, dtype=dtype) if np.dtype(dtype).kind == "f" else rng.integers(0, 1000, shape).astype(dtype)
    if kind == "zeros":
        return np.zeros(shape, dtype=dtype)
    return np.ones(shape, dtype=dtype)


FILLS = ("arange", "random", "zeros", "ones")


class Session:
    """A configuration and the cluster it started, closed together.

    Use :func:`session` to make one. Closing is idempotent and happens on leaving a
    ``with`` block even when the block raises.

    Attributes
    ----------
    config : Config
        The effective configuration.
    client : distributed.Client or None
        ``None`` when ``parallel.enabled`` is false (dask's synchronous scheduler runs).
    """

    def __init__(self, config: Config, *, owned: bool = True) -> None:
        self.config = config
        self._owned = owned
        self._handle: ClusterHandle | None = None
        self._dask_ctx: Any = None
        self._blas: Any = None
        self._levels: dict[str, int] = {}
        self._collector: Any = None
        self._recovery: Any = None  # RecoveryWatch: lost workers and recomputed tasks, counted on the scheduler
        self.metrics = RunMetrics()
        self.started = False
        self.closed = False

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> Session:
        """Apply the dask configuration and start (or reach) the cluster."""
        import dask
        import distributed  # noqa: F401  (its defaults must be in dask.config before keys under them are set)

        from openclaw_dask.cluster import open_cluster
        from openclaw_dask.cluster.plugins import LOGGERS, BlasThreads, LogLevel, blas_threads
        from openclaw_dask.cluster.settings import dask_settings

        if self.started:
            raise OpenclawError("this session was started already; make a new one with openclaw_dask.session()")
        self.started = True
        p = self.config.parallel
        settings = dask_settings(self.config)
        self._levels = {name: logging.getLogger(name).level for name in LOGGERS}
        for name in LOGGERS:
            logging.getLogger(name).setLevel(p.log_level)
        self._dask_ctx = dask.config.set(settings)
        if p.enabled and p.socket_buffer_size is not None:
            from openclaw_dask.cluster.sockets import install

            install()  # the client starts no server, so no preload reaches this process
        if not p.enabled or p.backend == "thread":
            # Tasks run in this process: one BLAS/OpenMP thread each, so task threads never
            # oversubscribe the cores (process workers get the same from distributed's nanny).
            from threadpoolctl import threadpool_limits

            self._blas = threadpool_limits(limits=1)
        _OPEN.append(self)
        try:
            if self.config.monitoring.prometheus:
                _require_prometheus_client()
            if p.enabled:
                self._handle = open_cluster(self.config)
                # One mechanism for every backend, and it survives worker restarts.
                self._handle.client.register_plugin(LogLevel(p.log_level))
                if p.backend in ("process", "mpi"):
                    self._handle.client.register_plugin(BlasThreads(blas_threads(self.config)))
                self.metrics.target_workers = len(self.workers())
                from openclaw_dask.recovery import RecoveryWatch

                self._recovery = RecoveryWatch(self._handle, self.metrics)
                if self.config.elastic.adaptive:
                    from openclaw_dask.cluster.adaptive import adapt

                    adapt(self._handle.cluster, self.config)
                if self.config.monitoring.prometheus and self._handle.cluster is not None:
                    self._collector = register_collector(self.metrics, self._handle.cluster.scheduler)
            logger.debug("session started: backend=%s enabled=%s", p.backend, p.enabled)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Close the client and the cluster openclaw started, and restore dask's configuration.

        Sessions restore what they changed in the order they were opened; close nested
        sessions innermost first (``with`` blocks do).
        """
        if self.closed or not self._owned or not self.started:
            return
        self.closed = True
        if _OPEN and _OPEN[-1] is not self:
            logger.warning("closing a session that is not the most recent one: dask settings restored may be stale")
        if self in _OPEN:
            _OPEN.remove(self)
        if self._collector is not None:
            from prometheus_client import REGISTRY

            REGISTRY.unregister(self._collector)
        if self._recovery is not None:
            self._recovery.close()
        if self._handle is not None:
            if self._handle.cluster is None:  # remote: leave the user's workers as they were
                with contextlib.suppress(Exception):
                    self._handle.client.unregister_worker_plugin("openclaw-log-level")
            self._handle.close()
        if self._blas is not None:
            self._blas.restore_original_limits()
        if self._dask_ctx is not None:
            self._dask_ctx.__exit__(None, None, None)
        for name, level in self._levels.items():
            logging.getLogger(name).setLevel(level)

    def __enter__(self) -> Session:
        return self if self.started else self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = "serial (sync scheduler)" if self.client is None else repr(self.client)
        return f"<openclaw_dask.Session backend={self.config.parallel.backend} {where}>"

    # -- what is running ---------------------------------------------------------------

    @property
    def client(self) -> Any:
        return None if self._handle is None else self._handle.client

    @property
    def cluster(self) -> Any:
        """The cluster object openclaw started, or ``None`` (serial, or ``remote``)."""
        return None if self._handle is None else self._handle.cluster

    def workers(self) -> dict[str, dict[str, Any]]:
        """Scheduler information about each worker (empty when serial)."""
        if self.client is None:
            return {}
        return self.client.scheduler_info(n_workers=-1)["workers"]

    @property
    def slots(self) -> int:
        """Task threads over all workers (1 when serial)."""
        return sum(w["nthreads"] for w in self.workers().values()) or 1

    @property
    def scheduler_kind(self) -> str:
        """``sync``, ``thread``, ``process`` or ``remote``: which per-task overhead applies."""
        return self.config.parallel.backend if self.config.parallel.enabled else "sync"

    # -- chunking ------------------------------------------------------------------------

    def chunk_plan(self, shape: tuple[int, ...], dtype: Any = "float64") -> ChunkPlan:
        """The chunks :meth:`chunks` would choose, with the reason (see :mod:`openclaw_dask.chunking`)."""
        workers = list(self.workers().values())
        memory = min((w.get("memory_limit") or 0 for w in workers), default=0) or None
        threads = max((w["nthreads"] for w in workers), default=1)
        p = self.config.parallel
        return plan_chunks(
            tuple(shape),
            dtype,
            task_chunk_size=p.task_chunk_size,
            strategy=p.strategy,
            slots=self.slots,
            backend=self.scheduler_kind,
            worker_memory=memory,
            threads_per_worker=threads,
        )

    def chunks(self, shape: tuple[int, ...], dtype: Any = "float64") -> tuple[tuple[int, ...], ...]:
        """Dask chunks for ``shape`` and ``dtype`` from ``task_chunk_size`` and ``strategy``."""
        return self.chunk_plan(shape, dtype).chunks

    def array(
        self,
        shape: tuple[int, ...] | int,
        dtype: Any = "float64",
        *,
        fill: str | Callable[..., np.ndarray] = "random",
        seed: int = 0,
        chunks: tuple[tuple[int, ...], ...] | None = None,
    ) -> da.Array:
        """A new dask array whose blocks are made on the workers.

        Parameters
        ----------
        shape, dtype
            Of the whole array; chunks follow ``task_chunk_size`` and ``strategy``.
        fill
            ``random`` (uniform [0, 1), seeded per block), ``arange`` (each element is
            its flat index), ``zeros``, ``ones``, or a function ``f(block_info=...)``
            as for :func:`dask.array.map_blocks` that returns one block.
        seed
            Seed of ``random``; the same seed gives the same array for any chunking
            of the same shape only block by block, so keep chunks fixed to compare.
        chunks
            Explicit dask chunks instead of the session's choice.
        """
        import dask.array as da

        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        dtype = np.dtype(dtype)
        # block shapes such as (500, 2000) become full chunks, as da.ones(..., chunks=) takes them
        chunks = self.chunks(shape, dtype) if chunks is None else da.core.normalize_chunks(chunks, shape, dtype=dtype)
        meta = np.empty((0,) * len(shape), dtype=dtype)
        if callable(fill):
            return da.map_blocks(fill, chunks=chunks, dtype=dtype, meta=meta)
        if fill not in FILLS:
            raise OpenclawError(f"fill={fill!r} is not known; use one of {', '.join(FILLS)} or a function")
        from dask.base import tokenize

        # The name must depend on everything that changes the blocks, or two arrays share keys.
        name = f"openclaw-{fill}-{tokenize(fill, seed, shape, dtype.str, chunks)}"
        return da.map_blocks(_fill_block, fill, seed, dtype.str, chunks=chunks, dtype=dtype, meta=meta, name=name)

    def from_array(self, x: Any) -> da.Array:
        """Wrap an array-like as a dask array chunked by this session.

        NumPy arrays are scattered to the workers block by block, so the graph stays
        small; dask arrays are rechunked; other array-likes (h5py, zarr, memmap) are
        read lazily, chunk by chunk, where the tasks run.
        """
        import dask.array as da

        if isinstance(x, da.Array):
            return x.rechunk(self.chunks(x.shape, x.dtype))
        chunks = self.chunks(x.shape, x.dtype)
        if not isinstance(x, np.ndarray) or self.client is None:
            return da.from_array(x, chunks=chunks)
        return _scatter_blocks(self.client, x, chunks)

    def compute(self, *collections: Any, **kwargs: Any) -> Any:
        """Compute on this session's scheduler: its client, or dask's sync scheduler when disabled.

        One collection gives its result; several give a tuple, as :func:`dask.compute`.
        Failed tasks are retried ``fault_tolerance.retries`` times.
        """
        if self.client is None:
            import dask

            results = dask.compute(*collections, scheduler="sync", **kwargs)
        else:
            kwargs.setdefault("retries", self.config.fault_tolerance.retries)
            # client.compute measured ~4% faster than dask.compute(scheduler=client) for the
            # same graph (benchmarks/openclaw_vs_raw.py)
            with _run_errors(self):
                results = tuple(self.client.compute(list(collections), sync=True, **kwargs))
        return results[0] if len(collections) == 1 else results

    def recovery(self) -> Recovery:
        """Workers lost, tasks recomputed and failures recovered since the session started.

        Counted on the scheduler by :mod:`openclaw_dask.recovery`; take two snapshots
        and :meth:`~openclaw_dask.monitoring.Recovery.since` for one run. All zero when
        serial; ``None`` each when a remote scheduler cannot load openclaw_dask.

        Returns
        -------
        Recovery
        """
        if self._recovery is not None:
            self._recovery.refresh()  # remote: one call to the scheduler; local counts are live
        return self.metrics.recovery()

    def persist(self, collection: Any) -> Any:
        """Compute ``collection`` into worker memory (into the graph when serial) and return it."""
        if self.client is not None:
            return self.client.persist(collection, retries=self.config.fault_tolerance.retries)
        return collection.persist(scheduler="sync")

    # -- elasticity ----------------------------------------------------------------------

    def resize_workers(self, n: int, *, force: bool = False) -> ResizeResult:
        """Grow or shrink the process cluster to ``n`` workers, at run time.

        Growing waits until the new workers have joined (up to ``parallel.timeout``).
        Shrinking retires workers gracefully: the data only they hold is moved to the
        others first, so it need not be recomputed. A call within ``elastic.cooldown`` of the
        previous resize is refused unless ``force=True``, because resizing moves data.

        Raises
        ------
        ResizeError
            Inside the cooldown, on a backend that cannot resize (thread, remote, serial),
            or while ``elastic.adaptive`` sizes the cluster.
        """
        return resize(self, n, force=force)


def _require_prometheus_client() -> None:
    import importlib.util

    from openclaw_dask.errors import BackendUnavailable

    if importlib.util.find_spec("prometheus_client") is None:
        raise BackendUnavailable(
            "monitoring.prometheus needs prometheus-client, which is not installed; run: pip install 'openclaw-dask[monitoring]'"
        )


@contextlib.contextmanager
def _run_errors(session: Session) -> Iterator[None]:
    """Distributed's failures that end a run, as one clear :class:`RunError` each."""
    from concurrent.futures import CancelledError

    from distributed.scheduler import KilledWorker

    from openclaw_dask.errors import RunError

    config = session.config
    try:
        yield
    except KilledWorker as e:
        raise RunError(
            f"task {e.task} was running on {config.fault_tolerance.allowed_failures + 1} workers that died "
            f"(the last {e.last_worker.address}); it may crash or exhaust its worker. "
            "Fix the task, give workers more memory (cluster.memory_limit), or raise fault_tolerance.allowed_failures"
        ) from None
    except CancelledError as e:
        if session.client.status == "running" and "connection-lost" not in str(e):
            raise
        lost = session._handle.lost() if session._handle is not None and session._handle.lost is not None else None
        if lost:
            raise RunError(f"{lost}: run again (docs/deploy.md, MPI)") from None
        raise RunError(
            f"lost the scheduler at {session.client.scheduler.address} (connection lost); its task state is gone, "
            "so the run cannot go on: restart the scheduler and run again"
        ) from None


def _scatter_blocks(client: Any, x: np.ndarray, chunks: tuple[tuple[int, ...], ...]) -> da.Array:
    import itertools
    import uuid

    import dask.array as da

    starts = [np.cumsum((0,) + c[:-1]) for c in chunks]
    index = list(itertools.product(*(range(len(c)) for c in chunks)))
    blocks = [x[tuple(slice(starts[a][i], starts[a][i] + chunks[a][i]) for a, i in enumerate(idx))] for idx in index]
    futures = client.scatter(blocks, hash=False)
    name = f"openclaw-scattered-{uuid.uuid4().hex}"
    dsk = {(name, *idx): f for idx, f in zip(index, futures)}
    return da.Array(dsk, name, chunks, dtype=x.dtype, meta=np.empty((0,) * x.ndim, dtype=x.dtype))


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
        borrowed = Session(_ACTIVE[-1].config, owned=False)
        borrowed._handle = _ACTIVE[-1]._handle
        borrowed.metrics = _ACTIVE[-1].metrics
        borrowed._recovery = _ACTIVE[-1]._recovery
        borrowed.started = True
        return borrowed
    if _in_spawned_bootstrap():
        raise OpenclawError(
            "openclaw_dask.session() ran while a worker process was importing your script; "
            "run it with `openclaw run script.py`, or put the code under `if __name__ == \"__main__\":`"
        )
    if isinstance(config, Config) and overrides:
        raise OpenclawError("pass overrides with a file path, or build the Config with load_config(path, overrides)")
    if not isinstance(config, Config):
        config = load_config(config, overrides)
    return Session(config).start()


def resize_workers(n: int, *, force: bool = False) -> ResizeResult:
    """Resize the current session: the one ``openclaw run`` started, else the most recent open one."""
    current = _ACTIVE[-1] if _ACTIVE else (_OPEN[-1] if _OPEN else None)
    if current is None:
        raise OpenclawError("resize_workers(): no session is open; start one with openclaw_dask.session(backend='process')")
    return current.resize_workers(n, force=force)
