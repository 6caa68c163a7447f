"""Frozen, typed configuration objects built by :func:`~openclaw_dask.config.load_config`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from openclaw_dask.config.schema import TYPED_SECTIONS, ChunkSize

__all__ = ["ClusterConfig", "Config", "ElasticConfig", "FaultToleranceConfig", "IoConfig", "MonitoringConfig", "ParallelConfig", "SecurityConfig", "WorkloadConfig", "plain"]


def plain(value: Any) -> Any:
    """A JSON- and table-friendly form of a config value (sizes and chunk sizes as text)."""
    if isinstance(value, tuple):
        return [plain(v) for v in value]
    return value if isinstance(value, (bool, int, float, str, type(None))) else str(value)


@dataclass(frozen=True)
class ParallelConfig:
    """The guide's ``parallel:`` section (see README, "Configuration reference")."""

    enabled: bool
    backend: str
    workers: int | str
    strategy: str
    engine: str
    communication: str
    communication_strict: bool
    task_chunk_size: ChunkSize
    fusion_buffer_size: int | None
    mpi_shared_memory: bool
    hybrid: bool
    omp_threads: int
    async_io: bool
    sync_interval: int
    batch_size: int | None
    memory_pooling: bool
    gpu_memory_fraction: float
    timeout: float
    socket_buffer_size: int | None
    rdma: bool
    network_interface: str | None
    log_level: str


@dataclass(frozen=True)
class ClusterConfig:
    """Where and how the cluster binds."""

    scheduler_address: str | None
    host: str
    allow_insecure_bind: bool
    dashboard: str | bool
    memory_limit: int | str
    preload: tuple[str, ...]
    local_directory: str
    max_spill: int | str | bool


@dataclass(frozen=True)
class GpuConfig:
    """Which GPUs the cuda backend uses."""

    devices: tuple[int, ...] | None  # None = every visible GPU


@dataclass(frozen=True)
class KubernetesConfig:
    """The DaskCluster resource of backend kubernetes (see :mod:`openclaw_dask.cluster.kubernetes`)."""

    image: str
    namespace: str
    cluster_name: str
    env: tuple[tuple[str, str], ...]  # (name, value) pairs, sorted
    service_type: str  # clusterip | nodeport | loadbalancer


@dataclass(frozen=True)
class WorkloadConfig:
    """Parameters of the built-in workloads."""

    size: int
    repeat: int
    skew: float
    straggler: float
    io_format: str
    read_latency: float


@dataclass(frozen=True)
class IoConfig:
    """How the chunked readers (:mod:`openclaw_dask.io`) treat a Zarr chunk missing from its store."""

    missing_chunks: str  # error | fill


@dataclass(frozen=True)
class ElasticConfig:
    """Run-time resizing: ``Session.resize_workers`` and adaptive scaling."""

    cooldown: float
    adaptive: bool
    min_workers: int
    max_workers: int | str
    interval: float


@dataclass(frozen=True)
class FaultToleranceConfig:
    """Task retries and how many worker deaths a task may cause."""

    retries: int
    allowed_failures: int


@dataclass(frozen=True)
class MonitoringConfig:
    """Prometheus metrics served by the scheduler."""

    prometheus: bool
    port: int


@dataclass(frozen=True)
class SecurityConfig:
    """TLS certificates for the scheduler, workers and client."""

    temporary_certificates: bool
    ca_file: str | None
    cert_file: str | None
    key_file: str | None
    require_encryption: bool

    @property
    def enabled(self) -> bool:
        return self.temporary_certificates or self.cert_file is not None


@dataclass(frozen=True)
class Config:
    """The effective configuration.

    Attributes
    ----------
    parallel, cluster, gpu, workload, io, elastic, kubernetes, fault_tolerance, monitoring, security
        The typed sections.
    dask
        Passed unchanged to :mod:`dask.config` while a session runs (read-only mapping).
    sources
        For each dotted key, where its value came from: ``default``, ``FILE:LINE``,
        ``env OPENCLAW_<KEY>`` or ``--set``.
    path
        The file the configuration was read from, if any.
    """

    parallel: ParallelConfig
    cluster: ClusterConfig
    gpu: GpuConfig
    workload: WorkloadConfig
    io: IoConfig
    elastic: ElasticConfig
    kubernetes: KubernetesConfig
    fault_tolerance: FaultToleranceConfig
    monitoring: MonitoringConfig
    security: SecurityConfig
    dask: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    sources: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    path: Path | None = None

    def get(self, dotted: str) -> Any:
        """Return the value of a dotted key such as ``parallel.workers``."""
        section, _, name = dotted.partition(".")
        return getattr(getattr(self, section), name)

    def resolve_path(self, dotted: str) -> Path | None:
        """The path a key names, absolute; a relative path written in the config file starts at that file's folder."""
        value = self.get(dotted)
        if value is None:
            return None
        path = Path(value).expanduser()
        where = self.sources.get(dotted, "default")
        if not path.is_absolute() and self.path is not None and Path(where.rpartition(":")[0]).resolve() == self.path:
            path = self.path.parent / path
        return path.absolute()

    def items(self) -> list[tuple[str, Any]]:
        """All ``(dotted key, value)`` pairs of the typed sections, in schema order."""
        return [
            (f"{s}.{f.name}", getattr(getattr(self, s), f.name))
            for s in TYPED_SECTIONS
            for f in dataclasses.fields(getattr(self, s))
        ]
