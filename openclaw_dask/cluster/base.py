"""What a backend is: declared capabilities, its own checks, a pure plan, and a start.

A backend is a :class:`Backend` subclass, one per module of this package (``local``,
``remote``, ``mpi``, ``serial``) or from another package through the entry-point group
``openclaw_dask.backends`` (see :mod:`~openclaw_dask.cluster.registry`). Code outside
``cluster/`` asks the object what it can do (``backend.capabilities.resize``) and never
compares backend names.

Life of a backend in a session::

    backend = backend_for(config)      # registry: the class parallel.backend names
    backend.check(config)              # its rules, each in one place (load_config runs them too)
    backend.plan(config)               # pure: what would start, for tests and --dry-run
    with backend.start(config) as running:    # a RunningCluster (cluster/running.py): computes, scales, closes
        running.plugins(lambda: backend.worker_plugins(config))
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

from openclaw_dask.errors import BackendUnavailable

if TYPE_CHECKING:
    from openclaw_dask.cluster.running import RunningCluster
    from openclaw_dask.config import Config

__all__ = ["Backend", "Capabilities", "Engine"]

logger = logging.getLogger("openclaw_dask.cluster")


@dataclass(frozen=True)
class Engine:
    """What runs a session's graphs, and why that one.

    Attributes
    ----------
    kind
        ``distributed`` (a client and a cluster), ``threads`` (dask's threaded scheduler
        in this process, no cluster) or ``sync`` (dask's synchronous scheduler).
    reason
        Why, for the run summary and the profile.
    task_overhead_s
        Fixed cost of one more task on it: the auto chunk size keeps it small.
    stream_bytes_per_s, max_chunk_bytes
        How fast one task slot streams memory, and the largest auto chunk; None: a CPU
        thread's (:mod:`openclaw_dask.chunking`). A GPU streams hundreds of times faster, so
        its chunks must be that much bigger for the same per-task overhead to stay small.
    tasks_run_here
        A task gives the same result run in this process (same machine and environment, CPU
        data): a few tiny tasks may be timed here before the rest are batched
        (:mod:`openclaw_dask.dataflow.small_tasks`).
    """

    kind: str
    reason: str
    task_overhead_s: float
    stream_bytes_per_s: float | None = None
    max_chunk_bytes: int | None = None
    tasks_run_here: bool = False

    @property
    def distributed(self) -> bool:
        """Tasks go through a :class:`distributed.Client` (and so retries, dashboards, worker memory)."""
        return self.kind == "distributed"

    def __str__(self) -> str:
        label = {"threads": "dask threaded scheduler", "sync": "dask synchronous scheduler"}.get(self.kind, "distributed cluster")
        return f"{label} ({self.reason})"


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do; each flag turns rules and session features on or off.

    Attributes
    ----------
    owns_cluster
        Starts (and stops) its scheduler and workers; ``False``: connects to someone else's.
    in_process
        Tasks run in the calling process: BLAS pools are held there, ``inproc`` comms work.
    worker_processes
        Workers are processes openclaw shapes: ``omp_threads`` and ``hybrid`` apply.
    shared_memory
        ``parallel.mpi_shared_memory`` can fold a host's workers into one.
    resize, adapt
        ``resize_workers`` and ``elastic.adaptive`` work.
    prometheus
        The scheduler runs in this process, so openclaw's metrics join its ``/metrics``.
    tls
        The ``security:`` section applies.
    socket_buffers
        ``parallel.socket_buffer_size`` reaches its sockets.
    threaded
        Can run graphs on dask's threaded scheduler in this process, with no cluster
        (``parallel.engine: threads``).
    gpu
        Its workers own GPUs: ``memory_pooling``, ``gpu_memory_fraction`` and ``rdma`` apply.
    pods
        Its scheduler and workers are Kubernetes pods: the ``kubernetes`` section applies.
    jobs
        Its workers are batch jobs of a Slurm cluster: the ``slurm`` section applies.
    ssh
        Its scheduler and workers are started over SSH on other machines: the ``ssh`` section applies.
    fork
        Its worker processes can start as copies of this process (``cluster.worker_start: fork``):
        local processes with no GPU, which CUDA does not allow in a copy.
    local_memory
        Its workers run on this machine and share its memory: their ``cluster.memory_limit``
        together (:meth:`Backend.memory_workers` of them) must fit in it. ``False`` where the
        memory is elsewhere (a remote scheduler's workers, pods, MPI ranks on other hosts).
    """

    owns_cluster: bool = True
    in_process: bool = False
    worker_processes: bool = False
    shared_memory: bool = False
    resize: bool = False
    adapt: bool = False
    prometheus: bool = False
    tls: bool = False
    socket_buffers: bool = False
    threaded: bool = False
    gpu: bool = False
    pods: bool = False
    jobs: bool = False
    ssh: bool = False
    fork: bool = False
    local_memory: bool = False


class Backend:
    """Base class of every backend; subclasses declare, check, plan and start.

    Class attributes
    ----------------
    name
        The value of ``parallel.backend`` that selects it.
    capabilities
        A :class:`Capabilities`.
    why_not
        For a capability it lacks, the reason a refusal gives (``{"resize": "..."}``).
    requires, extra
        Modules it needs beyond the base install, and the ``openclaw-dask`` extra that brings them.
    default_protocol
        What ``parallel.communication: auto`` means without TLS.
    task_overhead_s
        Fixed cost of one more task, seconds: the auto chunk size keeps it small.
    array_backend
        The dask ``array.backend`` its sessions run under (``cupy``), so that the chunks a session
        makes are of it; None: NumPy, or whatever the ``dask:`` section says.
    """

    name: ClassVar[str] = ""
    capabilities: ClassVar[Capabilities] = Capabilities()
    why_not: ClassVar[Mapping[str, str]] = MappingProxyType({})
    requires: ClassVar[tuple[str, ...]] = ("distributed",)
    extra: ClassVar[str | None] = None
    default_protocol: ClassVar[str] = "tcp"
    tasks_run_here: ClassVar[bool] = False  # Engine.tasks_run_here of its engines
    task_overhead_s: ClassVar[float] = 0.002  # a distributed cluster's (measured in-process: 1.96 ms)
    array_backend: ClassVar[str | None] = None

    def missing(self) -> list[str]:
        """The required modules that are not installed (nothing is imported)."""
        return [m for m in self.requires if importlib.util.find_spec(m) is None]

    def available(self, config: Config | None = None) -> None:
        """Raise when this machine cannot run the backend: :class:`BackendUnavailable` names the ``pip install``."""
        missing = self.missing()
        if missing:
            what = f"backend {self.name} needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} not installed"
            if self.extra is None:  # a plugin's own dependencies: no openclaw-dask extra brings them
                raise BackendUnavailable(f"{what}; run: pip install {' '.join(missing)}")
            raise BackendUnavailable(what, extra=self.extra)

    def refusal(self, capability: str) -> str:
        """Why this backend cannot do ``capability``, for an error message."""
        return self.why_not.get(capability, f"backend {self.name} cannot do that")

    def check(self, config: Config) -> None:
        """Raise :class:`ConfigError` for the first setting this backend cannot honour.

        The base class enforces the rules that follow from :attr:`capabilities`;
        subclasses add their own and call ``super().check(config)``.
        """
        from openclaw_dask.cluster import rules

        rules.check_capabilities(self, config)

    def plan(self, config: Config) -> Any:
        """What :meth:`start` would start, as plain data; starts nothing."""
        raise NotImplementedError

    def describe(self, config: Config) -> list[str]:
        """Settings this backend computes from ``config`` that are worth showing (``openclaw config show``)."""
        return []

    def engine(self, config: Config) -> Engine:
        """What will run the graphs of a session of ``config``, and why (pure)."""
        return Engine("distributed", f"backend {self.name} runs a distributed cluster", self.task_overhead_s,
                      tasks_run_here=self.tasks_run_here)

    def start(self, config: Config) -> RunningCluster:
        """Start (or reach) what runs the graphs: a :class:`~openclaw_dask.cluster.running.RunningCluster`.

        Called inside the session's dask config. The returned object computes, scales and closes itself.
        """
        raise NotImplementedError

    def memory_workers(self, config: Config) -> int:
        """How many workers, each of ``cluster.memory_limit``, a session of ``config`` starts (pure)."""
        from openclaw_dask.cluster.worker_shape import worker_processes

        return worker_processes(config) if self.capabilities.worker_processes else 1

    def worker_plugins(self, config: Config) -> list[Any]:
        """The :class:`~distributed.diagnostics.plugin.WorkerPlugin` s every worker of a session gets."""
        from openclaw_dask.cluster.latency import PromptWorker
        from openclaw_dask.cluster.plugins import LogLevel, WorkerHeap

        return [LogLevel(config.parallel.log_level), PromptWorker(), WorkerHeap()]

    def dask_settings(self, config: Config) -> dict[str, Any]:
        """``dask.config`` keys this backend needs on top of :func:`~openclaw_dask.cluster.settings.dask_settings`."""
        return {}

    # dask_settings keys start() hands to the cluster it makes as keywords: a session leaves them
    # out of this process's dask config, so one cluster's value never shows in another's.
    cluster_keywords: ClassVar[tuple[str, ...]] = ()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"
