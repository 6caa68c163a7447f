"""Iterative algorithms that synchronise every ``sync_interval`` steps (local SGD, k-means, ...).

The data is split into shards that stay where they are (on a cluster, each on a worker).
Between two global synchronisations every shard takes ``k`` local steps from the same
state, in one task; then the local states are gathered and combined (by default,
averaged) into the next global state. ``n_iter`` iterations cost ``ceil(n_iter / k)``
synchronisations instead of ``n_iter``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from openclaw_dask.dataflow._tasks import tasks_of, token
from openclaw_dask.errors import OpenclawError, ShardFailed

if TYPE_CHECKING:
    from openclaw_dask.cluster import SessionLike

__all__ = ["Iterated", "iterate", "mean_state"]


@dataclass(frozen=True)
class Iterated:
    """What :func:`iterate` returns: the final ``state`` and how it got there."""

    state: Any
    iterations: int
    sync_interval: int
    syncs: int
    shards: int
    wall_s: float


def mean_state(states: Sequence[Any]) -> Any:
    """Average of states: arrays and numbers, or tuples, lists and dicts of them (the default ``combine``)."""
    first = states[0]
    if isinstance(first, dict):
        return {k: mean_state([s[k] for s in states]) for k in first}
    if isinstance(first, (tuple, list)):
        return type(first)(mean_state(list(parts)) for parts in zip(*states))
    return np.mean(np.stack([np.asarray(s) for s in states]), axis=0)


class _StepError(Exception):
    """Raised in a task: the shard, round and iteration whose step failed, and its error (all pickle, as args)."""


def _local_steps(state: Any, shard: Any, step: Callable[[Any, Any], Any], k: int, where: tuple[int, int, int]) -> Any:
    index, round, first = where
    for i in range(k):
        try:
            state = step(state, shard)
        except Exception as e:
            raise _StepError(index, round, first + i, e) from e
    return state


def _shards_of(session: SessionLike, data: Any) -> list[Any]:
    """A dask array's blocks along axis 0 (in memory, where they are), or a list as given."""
    if hasattr(data, "__dask_graph__"):
        if data.ndim and len(data.chunks[0]) > 1:
            data = data.rechunk({a: -1 for a in range(1, data.ndim)})
        return tasks_of(session).blocks(data)  # in memory where tasks read them: futures on a cluster
    return list(data)


def iterate(session: SessionLike, step: Callable[[Any, Any], Any], state: Any, n_iter: int, *, shards: Any,
            sync_interval: int | None = None, combine: Callable[[Sequence[Any]], Any] = mean_state) -> Iterated:
    """Run ``state = step(state, shard)`` ``n_iter`` times on every shard, synchronising every ``sync_interval`` steps.

    Parameters
    ----------
    session
        A started :class:`~openclaw_dask.Session`.
    step
        ``step(state, shard) -> state``: one local iteration (e.g. an SGD step on the shard).
    state
        The starting global state.
    n_iter
        Iterations in all; the last round is shorter when ``sync_interval`` does not divide it.
    shards
        A list of data pieces, or a dask array split along axis 0 into its blocks.
    sync_interval
        Local steps between global synchronisations; default ``parallel.sync_interval``.
    combine
        ``combine(local_states) -> state`` at each synchronisation; default :func:`mean_state`.

    Raises
    ------
    ShardFailed
        When ``step`` raises: the shard's index, the round and the iteration (from 0), and the error.
    """
    k = session.config.parallel.sync_interval if sync_interval is None else sync_interval
    if k < 1 or n_iter < 0:
        raise OpenclawError(f"iterate(): sync_interval={k} must be >= 1 and n_iter={n_iter} >= 0")
    tasks, tag = tasks_of(session), token()
    t0 = time.perf_counter()
    placed = _shards_of(session, shards)
    if not placed:
        raise OpenclawError("iterate(): no shards to iterate over")
    if not hasattr(placed[0], "key"):  # not yet on the workers (futures of a persisted array are)
        placed = tasks.place(placed)
    done = syncs = 0
    while done < n_iter:  # one round: k local steps on every shard, then one global synchronisation
        steps = min(k, n_iter - done)
        futures = [tasks.submit(f"local-steps-{tag}-{syncs}-{i}", _local_steps, state, shard, step, steps, (i, syncs, done))
                   for i, shard in enumerate(placed)]
        try:
            local = tasks.gather(futures)
        except _StepError as e:
            shard, round, iteration, cause = e.args
            raise ShardFailed(shard, round, iteration, cause) from cause
        finally:
            tasks.cancel(f for f in futures if not f.done())
        state = combine(local)
        done, syncs = done + steps, syncs + 1
    return Iterated(state, n_iter, k, syncs, len(placed), time.perf_counter() - t0)
