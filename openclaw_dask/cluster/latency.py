"""Prompt messages on a distributed cluster: each message stream waits at most :data:`INTERVAL_S` to batch.

distributed batches each stream's messages and holds a message sent within its interval of the
previous send until the interval has passed: client -> scheduler 10 ms, scheduler -> worker
5 ms, worker -> scheduler and scheduler -> client 2 ms. One compute sends several messages in a
row on the same streams (the previous compute's release, the graph, the task to a worker, its
result back), so back-to-back computes wait on those deadlines, not on work. A one-task compute
took about 10 ms on two worker processes here, with its messages on the deadlines; at 1 ms
intervals about half that (docs/benchmarks.md, "Per-compute latency"). Batching still happens,
at a 1 ms grain: a thousand tiny tasks a second still go out in batches.

The session's own streams are set here: its client's, and for a scheduler in this process the
scheduler's streams to its workers (:class:`PromptScheduler`); each worker's stream to its
scheduler is set by the worker plugin :class:`PromptWorker`, put back when it is unregistered.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from distributed.diagnostics.plugin import SchedulerPlugin, WorkerPlugin

if TYPE_CHECKING:
    from distributed import Client, Scheduler, Worker

__all__ = ["INTERVAL_S", "PromptScheduler", "PromptWorker", "prompt"]

INTERVAL_S = 0.001


class PromptWorker(WorkerPlugin):
    """A worker's batched stream to its scheduler waits at most :data:`INTERVAL_S`."""

    name = "openclaw-prompt-messages"

    def setup(self, worker: Worker) -> None:
        self.previous = worker.batched_stream.interval
        worker.batched_stream.interval = INTERVAL_S

    def teardown(self, worker: Worker) -> None:
        worker.batched_stream.interval = getattr(self, "previous", worker.batched_stream.interval)


class PromptScheduler(SchedulerPlugin):
    """The scheduler's streams to its workers, those there and those that join, wait at most :data:`INTERVAL_S`."""

    name = "openclaw-prompt-messages"

    def add_worker(self, scheduler: Scheduler, worker: str) -> None:
        if (stream := scheduler.stream_comms.get(worker)) is not None:
            stream.interval = INTERVAL_S


def prompt(client: Client, scheduler: Scheduler | None) -> None:
    """Make ``client``'s stream, and ``scheduler``'s streams when it runs in this process, prompt."""
    comm: Any = getattr(client, "scheduler_comm", None)
    if comm is not None:
        comm.interval = INTERVAL_S
    if scheduler is not None:
        from distributed.utils import sync

        sync(scheduler.loop, _prompt_scheduler, scheduler)


async def _prompt_scheduler(scheduler: Scheduler) -> None:
    """On the scheduler's loop: its streams to workers and clients now, and to workers that join."""
    for stream in (*scheduler.stream_comms.values(), *scheduler.client_comms.values()):
        stream.interval = INTERVAL_S
    scheduler.add_plugin(PromptScheduler(), name=PromptScheduler.name, idempotent=True)
