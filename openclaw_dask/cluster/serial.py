"""The serial backend: ``parallel.enabled: false`` runs the same graph on dask's synchronous scheduler.

It is what a session runs on when parallelism is off, whatever ``parallel.backend``
says (that backend's rules still apply to the file): no cluster, no client, every task
in the calling thread. It is the baseline ``openclaw benchmark`` compares against.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from openclaw_dask.cluster.base import Backend, Capabilities, Engine
from openclaw_dask.cluster.running import RunningCluster, SyncEngine

if TYPE_CHECKING:
    from openclaw_dask.config import Config

__all__ = ["SerialBackend"]


class SerialBackend(Backend):
    """No cluster: dask's synchronous scheduler in the calling thread."""

    name = "serial"
    capabilities = Capabilities(in_process=True)
    why_not = MappingProxyType({"resize": "has no cluster"})
    requires = ()
    task_overhead_s = 0.0003  # the sync scheduler's cost of one more chunk of a reduction (docs/benchmarks.md)

    def plan(self, config: Config) -> dict[str, Any]:
        return {"scheduler": "sync"}

    def engine(self, config: Config) -> Engine:
        return Engine("sync", "parallel.enabled is false", self.task_overhead_s, tasks_run_here=True)

    def start(self, config: Config) -> RunningCluster:
        return SyncEngine(self, config)

    def worker_plugins(self, config: Config) -> list[Any]:
        return []
