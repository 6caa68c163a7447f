"""Adaptive scaling (``elastic.adaptive``) on distributed's :class:`~distributed.deploy.Adaptive`."""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

from dask.system import CPU_COUNT
from distributed.deploy.adaptive import Adaptive

if TYPE_CHECKING:
    from openclaw_dask.config import Config

__all__ = ["JobAdaptive", "LoggedAdaptive", "adapt", "job_of"]

logger = logging.getLogger("openclaw_dask.cluster.adaptive")


class LoggedAdaptive(Adaptive):
    """Adaptive that logs every scaling decision with its reason."""

    unit = "workers"

    async def recommendations(self, target: int) -> dict[str, Any]:
        rec = await super().recommendations(target)
        status = rec.get("status")
        if status == "up":
            logger.info("adaptive: up to %d %s (the scheduler wants %d for its queued work)", rec["n"], self.unit, target)
        elif status == "down":
            logger.info("adaptive: retiring %d idle %s (the scheduler wants %d; their data moves first)",
                        len(rec.get("workers", [])), self.unit, target)
        return rec


def job_of(worker: Any) -> str:
    """The batch job of a worker of a multi-worker job: dask-jobqueue names them ``JOB-0``, ``JOB-1``, ..."""
    return str(getattr(worker, "name", worker)).rsplit("-", 1)[0]


class JobAdaptive(LoggedAdaptive):
    """Adaptive scaling of batch jobs (dask-jobqueue): the plan, the target and each decision count whole jobs.

    Stock :class:`Adaptive` counts workers, but a queue submits and cancels jobs. With several
    workers per job it asks for a worker count between two multiples, submits a whole job for
    it, then counts that job's extra workers (queued, so "not yet arrived", which go first) as
    surplus: ``wait_count`` checks later the job is cancelled, and the next check submits it
    again. It also retires single idle workers, and cancelling one cancels the others of its job.
    Here every set and number is in jobs: the target is rounded up to whole jobs, a job has
    arrived when one of its workers has joined, and the scheduler picks whole jobs to close
    (``worker_key``), so a job goes only when all of its workers can.

    Parameters
    ----------
    per_job
        Workers in each job (``slurm.processes_per_job``).
    """

    unit = "jobs"

    def __init__(self, *args: Any, per_job: int = 1, **kwargs: Any) -> None:
        self.per_job = per_job
        if per_job > 1:
            kwargs["worker_key"] = job_of
        super().__init__(*args, **kwargs)

    def _job(self, name: Any) -> str:
        return job_of(name) if self.per_job > 1 else str(name)

    @property
    def _jobs(self) -> Any:
        """The dask-jobqueue cluster: a SpecCluster, whose ``worker_spec`` has one entry per job."""
        return self.cluster

    @property
    def plan(self) -> set[Any]:
        return {str(name) for name in self._jobs.worker_spec}

    @property
    def requested(self) -> set[Any]:
        return {str(name) for name in self._jobs.workers if name in self._jobs.worker_spec}

    @property
    def observed(self) -> set[Any]:
        return {self._job(name) for name in self._jobs.observed}

    async def safe_target(self) -> int:
        """Jobs: the scheduler's worker target within minimum..maximum workers, rounded up to whole jobs."""
        return -(-await super().safe_target() // self.per_job)

    async def workers_to_close(self, target: int) -> list[str]:
        return sorted({self._job(name) for name in await super().workers_to_close(target * self.per_job)})

    async def scale_down(self, workers: Any) -> None:
        """Out of the plan first (a job whose worker retires is not lost), retire their workers (data moves), then cancel."""
        jobs = {str(job) for job in workers}
        leaving = [name for name in self._jobs.worker_spec if str(name) in jobs]
        for name in leaving:
            del self._jobs.worker_spec[name]
        names = [w["name"] for w in self._jobs.scheduler_info["workers"].values() if self._job(w["name"]) in jobs]
        if names:
            await self.scheduler.retire_workers(names=names, remove=True, close_workers=True)
        await self._jobs.scale_down(leaving)  # no longer planned: the cluster closes their jobs (scancel)

    async def scale_up(self, n: Any) -> None:
        """Bring the plan up to ``n`` jobs (dask-jobqueue's ``scale`` takes workers)."""
        self._jobs.scale(n * self.per_job)


def adapt(cluster: Any, config: Config, per_job: int | None = None) -> Any:
    """Turn on adaptive scaling; ``cooldown`` becomes the number of intervals a downscale must persist.

    ``per_job``: the cluster's workers come in batch jobs of that many (:class:`JobAdaptive`).
    """
    e = config.elastic
    maximum = CPU_COUNT if e.max_workers == "auto" else e.max_workers
    wait_count = max(1, math.ceil(e.cooldown / e.interval))
    logger.info("adaptive scaling %d..%d workers, every %gs, downscale after %d steady checks", e.min_workers, maximum, e.interval, wait_count)
    kind: dict[str, Any] = {"Adaptive": LoggedAdaptive} if per_job is None else {"Adaptive": JobAdaptive, "per_job": per_job}
    return cluster.adapt(**kind, minimum=e.min_workers, maximum=maximum, interval=f"{e.interval}s", wait_count=wait_count)
