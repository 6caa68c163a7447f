"""What a session changes in the whole process, and the one owner that changes it and changes it back.

Some settings cannot be scoped to a cluster: what ``dask.compute`` runs on in this process,
the log levels of this process's loggers, its BLAS/OpenMP pools, malloc's tuning, the SIGTERM
handler, distributed's ``tcp`` comm backend, and the environment variables a nanny writes into
this process's own environment before it spawns a worker (``pre-spawn-environ``: BLAS threads,
malloc trimming and arenas, ``PYTHONHASHSEED``), which later child processes of the program would inherit. Each open session holds a :class:`Layer` of them
in :data:`PROCESS`; the process always shows the newest open session's layer over what it was
before the first one opened. Sessions close in any order and nothing is handed between them:
closing the newest brings the next newest back, closing an older one changes nothing visible,
and closing the last restores what the process had.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["PROCESS", "Layer", "ProcessState", "Terminated"]

logger = logging.getLogger("openclaw_dask.cluster")

_ABSENT = object()
# What a distributed.Client sets in dask's config when it is made, and undoes only when it closes as
# the last default client (or never, if its connect failed): restored with the layers, whoever set it.
_CLIENT_KEYS = ("scheduler",)
# What a distributed.Nanny puts in this process's os.environ before each spawn, besides its config's
# pre-spawn-environ keys, and leaves there.
_NANNY_ENV = ("PYTHONHASHSEED",)


class Terminated(SystemExit):
    """SIGTERM arrived: the session unwinds as for Ctrl-C and the process exits with 128 + 15."""


@dataclass(frozen=True)
class Layer:
    """What one open session wants of the process.

    Attributes
    ----------
    dask
        Flat ``dask.config`` keys (the scheduler ``dask.compute`` uses, the spill folder, timeouts...).
    log_level
        Of the loggers of openclaw and distributed.
    one_blas_thread
        BLAS/OpenMP pools at one thread (tasks run in this process, each on its own task thread).
    heap_reuse
        malloc keeps freed memory for reuse (tasks on dask's local schedulers, or a distributed client's
        gathered results; :mod:`~openclaw_dask.cluster.heap`).
    sized_sockets
        distributed's ``tcp`` comm backend is :class:`~openclaw_dask.cluster.sockets.SizedTCPBackend`.
    spawns_workers
        Nannies in this process spawn worker processes, writing their variables into its environment.
    """

    dask: Mapping[str, Any] = field(default_factory=dict)
    log_level: str | None = None
    one_blas_thread: bool = False
    heap_reuse: bool = False
    sized_sockets: bool = False
    spawns_workers: bool = False


class ProcessState:
    """The layers of the open sessions, newest last, and the process showing the newest."""

    def __init__(self) -> None:
        self._layers: list[tuple[object, Layer]] = []
        self._lock = threading.RLock()
        self._found: dict[str, Any] = {}
        self._dask_before: dict[str, Any] = {}
        self._made: set[str] = set()
        self._levels_before: dict[str, int] = {}
        self._toggles: dict[str, contextlib.ExitStack] = {}
        self._environ: dict[str, str] = {}

    @contextlib.contextmanager
    def holding(self, owner: object, layer: Layer) -> Iterator[None]:
        """Hold ``layer`` for ``owner`` over the block (:meth:`update` changes it meanwhile)."""
        import dask

        with self._lock:
            if not self._layers:  # what the process had: a key any layer sets later returns to its value here
                self._found = copy.deepcopy(dask.config.config)
                self._environ = dict(os.environ)
            self._layers.append((owner, layer))
            self._apply()
        try:
            yield
        finally:
            with self._lock:
                closing = [lay for o, lay in self._layers if o is owner]
                self._layers = [(o, lay) for o, lay in self._layers if o is not owner]
                # no open session's nannies will spawn again: what they wrote into the environment goes
                if not any(lay.spawns_workers for _, lay in self._layers) and (
                        not self._layers or any(lay.spawns_workers for lay in closing)):
                    self._restore_environ(closing)
                self._apply()

    def update(self, owner: object, layer: Layer) -> None:
        """Replace ``owner``'s layer (its place among the others stays)."""
        with self._lock:
            self._layers = [(o, layer if o is owner else lay) for o, lay in self._layers]
            self._apply()

    @property
    def depth(self) -> int:
        return len(self._layers)

    def found(self) -> dict[str, Any]:
        """dask's configuration as the process had it before the open sessions changed it (now, with none open).

        What a new session's settings are built on: not on what an older open session set.
        """
        import dask

        with self._lock:
            return self._found if self._layers else dask.config.config

    def _restore_environ(self, closing: list[Layer]) -> None:
        """Put back the variables nannies wrote into this process's environment (and only those)."""
        import dask

        spawned = set(dask.config.get("distributed.nanny.pre-spawn-environ", {}) or {})
        prefix = "distributed.nanny.pre-spawn-environ."
        spawned.update(k[len(prefix):] for layer in closing for k in layer.dask if k.startswith(prefix))
        for key in (*spawned, *_NANNY_ENV):
            if key in self._environ:
                os.environ[key] = self._environ[key]
            else:
                os.environ.pop(key, None)
        if not self._layers:
            self._environ = {}

    def _apply(self) -> None:
        top = self._layers[-1][1] if self._layers else None
        self._apply_dask(top)
        self._apply_levels(top)
        for name, (wanted, make) in _TOGGLES.items():
            want = top is not None and wanted(top)
            if want and name not in self._toggles:
                stack = contextlib.ExitStack()
                stack.enter_context(make())
                self._toggles[name] = stack
            elif not want and name in self._toggles:
                self._toggles.pop(name).close()

    def _apply_dask(self, top: Layer | None) -> None:
        import dask

        want = dict(top.dask) if top is not None else {}
        for key in (*want, *_CLIENT_KEYS):
            if key not in self._dask_before:
                before = dask.config.get(key, _ABSENT, config=self._found)
                self._dask_before[key] = before if before is _ABSENT else copy.deepcopy(before)
                parts = key.split(".")  # sections the key makes: removed again once empty
                self._made.update(p for p in (".".join(parts[:n]) for n in range(1, len(parts)))
                                  if dask.config.get(p, _ABSENT, config=self._found) is _ABSENT)
        for key, before in self._dask_before.items():
            _put(key, want[key] if key in want else before)
        for section in sorted(self._made, key=len, reverse=True):
            if dask.config.get(section, None) == {}:
                _put(section, _ABSENT)
        if top is None:
            self._dask_before.clear()
            self._made.clear()
            self._found = {}

    def _apply_levels(self, top: Layer | None) -> None:
        from openclaw_dask.cluster.worker_shape import LOGGERS

        if top is not None and not self._levels_before:
            self._levels_before = {name: logging.getLogger(name).level for name in LOGGERS}
        for name, before in self._levels_before.items():
            logging.getLogger(name).setLevel(top.log_level or before if top is not None else before)
        if top is None:
            self._levels_before = {}


def _put(key: str, value: Any) -> None:
    import dask

    if value is not _ABSENT:
        dask.config.set({key: value})  # not as a context: this owner undoes it, key by key
        return
    d = dask.config.config
    *path, last = key.split(".")
    for part in path:
        part = dask.config.canonical_name(part, d)
        if not isinstance(d.get(part), dict):
            return
        d = d[part]
    d.pop(dask.config.canonical_name(last, d), None)


@contextlib.contextmanager
def _terminate_unwinds() -> Iterator[None]:
    """SIGTERM ends the session as Ctrl-C does (the stack unwinds: workers stop, the spill folder goes).

    Only where SIGTERM would otherwise kill the process outright: in the main thread, with
    no handler of the program's own.
    """
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def terminate(signum: int, frame: Any) -> None:
        raise Terminated(128 + signum)

    signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGTERM) is terminate:  # not one the program set meanwhile
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _one_blas_thread() -> contextlib.AbstractContextManager[Any]:
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1)


def _heap_reuse() -> contextlib.AbstractContextManager[Any]:
    from openclaw_dask.cluster.heap import heap_reuse

    return heap_reuse()


def _sized_sockets() -> contextlib.AbstractContextManager[Any]:
    from openclaw_dask.cluster.sockets import installed

    return installed()


# facet -> (does the layer want it, the context manager that holds it)
_TOGGLES: dict[str, tuple[Callable[[Layer], bool], Callable[[], contextlib.AbstractContextManager[Any]]]] = {
    "sigterm": (lambda layer: True, _terminate_unwinds),
    "blas": (lambda layer: layer.one_blas_thread, _one_blas_thread),
    "heap": (lambda layer: layer.heap_reuse, _heap_reuse),
    "sockets": (lambda layer: layer.sized_sockets, _sized_sockets),
}

PROCESS = ProcessState()
