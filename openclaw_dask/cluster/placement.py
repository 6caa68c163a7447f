"""Tasks that read big blocks run where the blocks are, not where distributed's root-task queue puts them.

distributed treats a task as *root-ish* when its group has more than twice the cluster's threads
and fewer than 5 tasks to depend on, and places root-ish tasks on the least busy worker without
regard to where their inputs are, "since they'll end up on every worker anyway". That holds for
what such groups usually read: a store's array object of a few KB shared by thousands of reads.
It does not for a rechunk's splits, or a slicing of a few big blocks: 16 splits of 4 transposed
32 MiB blocks on 2 workers of 2 threads are root-ish, and each worker copied in whole blocks of
its neighbour's: 168-176 MiB received in all, against the 64 the splits themselves need, and
190-201 ms a compute against 141-145 (``benchmarks/split_placement.py``; docs/benchmarks.md).

A task whose share of its inputs (each input's bytes over the tasks that read it) is at least
:data:`LOCAL_SHARE` is placed as any other task is: on a worker that holds its inputs. Tasks
marked as data producers keep distributed's choice.

Every scheduler started under a session's dask settings, or by ``openclaw scheduler``, preloads this
module (``distributed.scheduler.preload``, :func:`~openclaw_dask.cluster.settings.dask_settings`): the
in-process ones of the thread, process, cuda and slurm backends, an MPI job's rank 0, an SSH cluster's;
the ``kubernetes`` backend's pod is told to. A scheduler someone else started keeps distributed's placement.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from distributed import Scheduler
    from distributed.scheduler import TaskState

__all__ = ["LOCAL_SHARE", "dask_setup", "input_share", "keep_inputs_local"]

# Fetching 1 MiB from another worker process took 1.2 ms here (8 MiB 3.8 ms, 32 MiB 13 ms; medians of 8),
# the order of a task's own cost on worker processes (2.7 ms): a bigger share is worth keeping in place.
# A store's array object read by thousands of tasks shares out to bytes; a rechunk's split reads megabytes.
LOCAL_SHARE = 2**20


def input_share(ts: TaskState) -> float:
    """The bytes of ``ts``'s inputs that are its alone: each input's size over the tasks that read it."""
    return sum(dts.get_nbytes() / max(len(dts.dependents), 1) for dts in ts.dependencies)


def keep_inputs_local(scheduler: Scheduler) -> None:
    """``scheduler`` no longer treats a task as root-ish whose share of its inputs is big (:data:`LOCAL_SHARE`)."""
    rootish = type(scheduler).is_rootish

    def is_rootish(ts: TaskState) -> bool:
        if not rootish(scheduler, ts):
            return False
        return bool(ts.run_spec is not None and ts.run_spec.data_producer) or input_share(ts) < LOCAL_SHARE

    scheduler.is_rootish = is_rootish  # type: ignore[method-assign]


def dask_setup(scheduler: Scheduler) -> None:
    """distributed's preload hook, run as the scheduler starts."""
    keep_inputs_local(scheduler)
