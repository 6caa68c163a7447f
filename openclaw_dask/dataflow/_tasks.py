"""Where the dataflow API's tasks run: the session's client, its thread pool, or the calling thread.

A :class:`Tasks` submits named tasks and hands back futures, whatever the session's
engine: ``client.submit`` on a distributed cluster, the thread backend's
:class:`~openclaw_dask.cluster.local.TaskPool` on dask's threaded scheduler, and dask's
synchronous scheduler when serial. Either way the profiler sees each task as a graph task.
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from openclaw_dask.errors import OpenclawError

__all__ = ["Tasks", "tasks_of", "token"]


def token() -> str:
    """A hex token that keeps one call's task keys apart from another's (dask's key_split drops it)."""
    return uuid.uuid4().hex[:8]


class Tasks:
    """Submit tasks on one session's engine; see :func:`tasks_of`."""

    distributed = False

    def submit(self, key: str, fn: Callable[..., Any], *args: Any, after: Any = None,
               pin: Mapping[str, Any] | None = None) -> Any:
        """``fn(after's result, *args)`` (or ``fn(*args)``) as task ``key``; ``pin`` = workers / resources."""
        raise NotImplementedError

    def place(self, data: list[Any]) -> list[Any]:
        """Put ``data`` where tasks read it (spread over the workers of a cluster)."""
        return list(data)

    def gather(self, futures: list[Any]) -> list[Any]:
        return [f.result() for f in futures]

    def wait_first(self, futures: Iterable[Any]) -> None:
        """Return when at least one of ``futures`` is done."""
        cf.wait(list(futures), return_when=cf.FIRST_COMPLETED)

    def cancel(self, futures: Iterable[Any]) -> None:
        for f in futures:
            f.cancel()


class _Cluster(Tasks):
    distributed = True

    def __init__(self, client: Any, retries: int, watch: Callable[[list[Any]], Any]) -> None:
        self.client, self.retries, self.watch = client, retries, watch  # watch(futures): the session's stall watch

    def submit(self, key: str, fn: Callable[..., Any], *args: Any, after: Any = None,
               pin: Mapping[str, Any] | None = None) -> Any:
        head = () if after is None else (after,)
        return self.client.submit(fn, *head, *args, key=key, pure=False, retries=self.retries, **(pin or {}))

    def place(self, data: list[Any]) -> list[Any]:
        return self.client.scatter(list(data), hash=False)

    def gather(self, futures: list[Any]) -> list[Any]:
        with self.watch(futures):  # workers paused for good: one line after parallel.timeout, not a wait for ever
            return self.client.gather(futures)

    def wait_first(self, futures: Iterable[Any]) -> None:
        from distributed import wait

        futures = list(futures)
        with self.watch(futures):
            wait(futures, return_when="FIRST_COMPLETED")

    def cancel(self, futures: Iterable[Any]) -> None:
        futures = list(futures)
        if futures:
            self.client.cancel(futures)


class _Pool(Tasks):
    def __init__(self, pool: Any) -> None:
        self.pool = pool

    def submit(self, key: str, fn: Callable[..., Any], *args: Any, after: Any = None,
               pin: Mapping[str, Any] | None = None) -> Any:
        _refuse_pin(pin)
        if after is None:
            return self.pool.submit_task(key, fn, *args)
        out: cf.Future[Any] = cf.Future()

        def start(done: cf.Future[Any]) -> None:  # in the thread that finished ``after``: queue, never run here
            if done.cancelled():
                out.cancel()
                return
            if not out.set_running_or_notify_cancel():
                return
            if done.exception() is not None:
                out.set_exception(done.exception())
                return
            self.pool.submit_task(key, fn, done.result(), *args).add_done_callback(lambda f: _copy(f, out))

        after.add_done_callback(start)
        return out


class _Inline(Tasks):
    """Serial: each task runs now, through dask's synchronous scheduler, so local callbacks see it."""

    def submit(self, key: str, fn: Callable[..., Any], *args: Any, after: Any = None,
               pin: Mapping[str, Any] | None = None) -> Any:
        from dask.local import get_sync

        _refuse_pin(pin)
        out: cf.Future[Any] = cf.Future()
        try:
            head = () if after is None else (after.result(),)
            out.set_result(get_sync({key: (functools.partial(fn, *head, *args),)}, key))  # no argument is parsed as a key
        except Exception as e:  # noqa: BLE001  (handed to the caller through the future)
            out.set_exception(e)
        return out


def _copy(source: cf.Future[Any], target: cf.Future[Any]) -> None:
    if source.cancelled():  # the pool shut down under it: the chained future must still end
        target.set_exception(cf.CancelledError())
    elif source.exception() is not None:
        target.set_exception(source.exception())
    else:
        target.set_result(source.result())


def _refuse_pin(pin: Mapping[str, Any] | None) -> None:
    if pin:
        raise OpenclawError(f"pinning a stage ({', '.join(pin)}) needs distributed workers; this session runs its "
                            "tasks in one process: set parallel.engine=distributed or parallel.backend=process")


def tasks_of(session: Any) -> Tasks:
    """The :class:`Tasks` of ``session``'s engine."""
    client = session.running.client if session.running is not None else None
    if client is not None:
        from openclaw_dask.cluster.stall import stall_watch

        return _Cluster(client, session.config.fault_tolerance.retries, lambda futures: stall_watch(session, futures))
    pool = session.running.local.get("pool") if session.running is not None else None
    return _Pool(pool) if pool is not None else _Inline()
