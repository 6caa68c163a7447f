"""Backend slurm inside an allocation: the tasks of ``srun -n N`` are the whole cluster; no job is submitted.

    srun -n N openclaw run job.py --set parallel.backend=slurm

Every task runs the same command. Task 0 runs the scheduler, task 1 the client (the run goes on
there, and only there), tasks 2..N-1 one worker each. They meet through a scheduler file in the
folder ``srun`` ran from (``SLURM_SUBMIT_DIR``, which the nodes share), named after the job *and*
the step, so a later step of the same allocation never reads an earlier one's address. When the
client's session ends it retires the workers and shuts the scheduler down; every task then exits 0.
A task that fails exits 1 with one line: no scheduler file or scheduler within ``parallel.timeout``
(a worker), no client within it, or a client that left without shutting down (the scheduler, which
then ends the step instead of holding the allocation until its time limit).

dask-jobqueue 0.9 ships ``SLURMRunner`` for this, and openclaw does not use it: importing it makes
Ctrl-C exit 0 without a word; its scheduler and worker tasks end by sending themselves SIGINT, which
under openclaw's own Ctrl-C handling (130, one line) would report every clean end as an interrupt;
a worker waits for the scheduler file with no time limit, so a failed scheduler holds the whole
step until the allocation's time limit; and its file is named per job, not per step.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from openclaw_dask.cluster.client import DistributedCluster, new_client
from openclaw_dask.cluster.network import bind_host, dashboard_address, http_host, protocol
from openclaw_dask.cluster.worker_shape import blas_env, task_threads
from openclaw_dask.errors import ClusterStartError, ConfigError, ResizeError, first_line

if TYPE_CHECKING:
    from openclaw_dask.cluster.base import Backend
    from openclaw_dask.config import Config

__all__ = ["Step", "allocation_step", "check_in_allocation", "join", "scheduler_options"]

GRACE = 3.0  # seconds a scheduler whose last client left waits for that client's shutdown to arrive


@dataclass(frozen=True)
class Step:
    """This process's place in an ``srun`` step: its task number, the step's tasks, ``JOBID.STEPID``, the folder srun ran in."""

    task: int
    tasks: int
    id: str
    folder: Path

    @property
    def scheduler_file(self) -> Path:
        return self.folder / f".openclaw-scheduler-{self.id}.json"


def allocation_step(env: dict[str, str] | os._Environ[str] | None = None) -> Step | None:
    """The :class:`Step` when this process is one task of an ``srun`` step of several, else ``None``.

    A batch script (``sbatch``) has no ``SLURM_STEP_ID``, and a step of one task cannot hold a
    cluster: both submit worker jobs as usual.
    """
    env = os.environ if env is None else env
    try:
        task, tasks = int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"])
        step = f"{env['SLURM_JOB_ID']}.{env['SLURM_STEP_ID']}"
    except (KeyError, ValueError):
        return None
    folder = Path(env.get("SLURM_SUBMIT_DIR") or os.getcwd())
    return Step(task, tasks, step, folder) if tasks > 1 else None


def check_in_allocation(config: Config, step: Step) -> None:
    """What a step's fixed tasks cannot honour, in one line."""
    if step.tasks < 3:
        raise ConfigError(f"backend slurm inside srun needs at least 3 tasks (scheduler, client, one worker), got {step.tasks}",
                          hint="run srun -n 3 or more")
    workers = config.parallel.workers
    if workers != "auto" and workers != step.tasks - 2:
        raise ConfigError.at(config, "parallel.workers", f"this srun step has {step.tasks} tasks: {step.tasks - 2} workers beside "
                             "the scheduler and the client", hint=f"set parallel.workers=auto or run srun -n {workers + 2}")
    if config.elastic.adaptive:
        raise ConfigError.at(config, "elastic.adaptive", "inside srun the workers are the step's tasks, fixed when it starts",
                             hint="remove it, or run openclaw outside srun to submit worker jobs")


def scheduler_options(config: Config) -> dict[str, Any]:
    """Where the scheduler binds (``network_interface``, else ``cluster.host``) and its HTTP server's address."""
    p, host = config.parallel, bind_host(config)
    web = http_host(config, host)
    where: dict[str, Any] = {"interface": p.network_interface} if p.network_interface else {"host": host}
    dashboard = dashboard_address(config, web)
    return {**where, "dashboard_address": dashboard or f"{web}:{config.monitoring.port}", "dashboard": dashboard is not None}


def join(backend: Backend, config: Config, step: Step) -> DistributedCluster:
    """Be this task's part of the cluster; only the client's task (1) returns, with the session's cluster."""
    if step.task == 0:
        _serve(_scheduler(config, backend, step), "the scheduler")
    if step.task >= 2:
        os.environ.update(blas_env(config))  # the worker's tasks run in this process
        _serve(_worker(config, backend, step), f"worker {step.task}")
    return _connect(backend, config, step)


def _serve(role: Any, what: str) -> None:
    """Run a scheduler or worker task to its end: exit 0, or one line naming the task and why."""
    from openclaw_dask.cluster import quiet

    quiet.install()  # a worker whose heartbeat meets the scheduler closing (a client gone) logs it: not news
    try:
        asyncio.run(role)
    except (OSError, TimeoutError) as e:
        raise ClusterStartError(f"srun task ({what}): {first_line(e)}") from None
    raise SystemExit(0)


def _security(config: Config) -> Any:
    from openclaw_dask.cluster.security import security_for

    return security_for(config)


async def _scheduler(config: Config, backend: Backend, step: Step) -> None:
    from distributed import Scheduler

    step.scheduler_file.unlink(missing_ok=True)
    try:
        async with Scheduler(port=0, scheduler_file=str(step.scheduler_file), protocol=protocol(config, backend),
                             security=_security(config), **scheduler_options(config)) as scheduler:
            await _until_shut_down(scheduler, config.parallel.timeout)
    finally:
        step.scheduler_file.unlink(missing_ok=True)


async def _until_shut_down(scheduler: Any, timeout: float) -> None:
    """Until the client shuts the scheduler down; no client in time, or one gone without a word, ends the step."""
    deadline, seen = time.monotonic() + timeout, False

    def clients() -> int:
        return sum(name != "fire-and-forget" for name in scheduler.clients)

    while scheduler.status.name == "running":
        if clients():
            seen = True
        elif seen:
            await asyncio.sleep(GRACE)  # a client's shutdown arrives just after its comm closes
            if scheduler.status.name == "running" and not clients():
                raise ClusterStartError("srun task 1 (the client) left without shutting the cluster down; its output says why")
        elif time.monotonic() > deadline:
            raise ClusterStartError(f"no client joined the scheduler within {timeout:g}s (parallel.timeout): srun task 1 "
                                    "did not start; its output says why")
        await asyncio.sleep(0.2)
    await scheduler.finished()


async def _address(step: Step, timeout: float) -> str:
    """The scheduler's address from the step's scheduler file, once task 0 has written it."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError, ValueError, KeyError):  # not there yet, or half written
            return str(json.loads(step.scheduler_file.read_text())["address"])
        if time.monotonic() > deadline:
            raise TimeoutError(f"no scheduler file {step.scheduler_file} within {timeout:g}s (parallel.timeout): srun task 0 "
                               "(the scheduler) did not start, or the folder is not shared between the nodes")
        await asyncio.sleep(0.2)


async def _worker(config: Config, backend: Backend, step: Step) -> None:
    from distributed import Worker

    p, c = config.parallel, config.cluster
    address = await _address(step, p.timeout)
    where: dict[str, Any] = {"interface": p.network_interface} if p.network_interface else {"host": bind_host(config)}
    async with Worker(address, nthreads=task_threads(config), memory_limit=c.memory_limit, name=f"task-{step.task}",
                      local_directory=None if c.local_directory == "auto" else c.local_directory,
                      death_timeout=p.timeout, security=_security(config), protocol=protocol(config, backend), **where) as worker:
        await worker.finished()


def _connect(backend: Backend, config: Config, step: Step) -> DistributedCluster:

    timeout, workers = config.parallel.timeout, step.tasks - 2
    deadline = time.monotonic() + timeout
    try:
        address = asyncio.run(_address(step, timeout))
        client = new_client(address, timeout=timeout, security=_security(config))
    except (OSError, TimeoutError) as e:
        raise ClusterStartError(f"srun task 1 (the client): {first_line(e)}") from None
    try:
        client.wait_for_workers(workers, timeout=max(1.0, deadline - time.monotonic()))
    except (OSError, TimeoutError):
        client.close()
        raise ClusterStartError(f"{workers} worker task(s) did not join {address} within {timeout:g}s (parallel.timeout); "
                                "their output says why") from None
    return StepCluster(backend, config, client, shuts_down=True)


class StepCluster(DistributedCluster):
    """The cluster of an ``srun`` step, seen from its client task: its workers are the step's tasks."""

    def scale(self, n: int) -> Callable[[], bool]:
        raise ResizeError(f"resize_workers({n}) refused: inside srun the workers are the step's tasks, fixed when it started; "
                          "run openclaw outside srun to submit worker jobs")
