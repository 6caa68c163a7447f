"""The configuration, declared once: a frozen dataclass per section, a field per key.

A key is one field, typed, whose :func:`setting` says everything else about it: the coercer
that checks a raw value and states its range (:mod:`~openclaw_dask.config.values`), the default
as the file ``openclaw init`` writes it, and its help text. The rest is derived: the list of keys
and their environment names (:mod:`~openclaw_dask.config.schema`), the commented defaults file
(:mod:`~openclaw_dask.config.template`), ``docs/configuration.md``
(:mod:`~openclaw_dask.config.reference`) and the objects :func:`~openclaw_dask.config.load_config`
builds. A section is a field of :class:`Config` whose type is such a dataclass.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from openclaw_dask.config import values as v
from openclaw_dask.config.values import ChunkSize

__all__ = ["ClusterConfig", "Config", "ElasticConfig", "FaultToleranceConfig", "GpuConfig", "IoConfig", "KubernetesConfig",
           "MonitoringConfig", "ParallelConfig", "SecurityConfig", "SlurmConfig", "SshConfig", "WorkloadConfig", "plain",
           "setting"]


def setting(coerce: Callable[[Any], Any], default: Any, doc: str, *, secret: bool = False) -> Any:
    """Declare a key: the field of its section's dataclass, with what the key needs in its metadata.

    Parameters
    ----------
    coerce
        Turns a raw value (YAML, environment, ``--set``) into the field's type or raises
        :class:`~openclaw_dask.config.values.Invalid` saying what is allowed; a numeric one
        carries its ``range``.
    default
        The default as YAML reads it from the defaults file (``"30s"``, ``None``, ``[]``),
        checked by ``coerce`` like any other value.
    doc
        The help text: the comment above the key in the defaults file (line breaks kept) and
        its row in ``docs/configuration.md``.
    secret
        Values may be tokens: never echoed in a message.
    """
    return field(metadata={"coerce": coerce, "default": default, "doc": inspect.cleandoc(doc), "secret": secret})


def plain(value: Any) -> Any:
    """A JSON- and table-friendly form of a config value (sizes and chunk sizes as text)."""
    if isinstance(value, tuple):
        return [plain(x) for x in value]
    return value if isinstance(value, (bool, int, float, str, type(None))) else str(value)


@dataclass(frozen=True)
class ParallelConfig:
    """The guide's ``parallel:`` section (see README, "Configuration reference")."""

    enabled: bool = setting(v.boolean, True, """
        false = run the same graph on dask's synchronous scheduler, no cluster (the serial baseline)""")
    backend: str = setting(v.backend_name, "thread", """
        thread: one process, `workers` threads | process: `workers` local processes (LocalCluster)
        remote: an existing dask-scheduler at cluster.scheduler_address | mpi: MPI ranks via dask-mpi (openclaw starts
        mpiexec, or joins the mpirun it runs under) | cuda: dask-cuda, one worker per GPU, CuPy chunks
        (pip install 'openclaw-dask[cuda]') | kubernetes: a DaskCluster through dask-kubernetes' operator (see the
        kubernetes section; pip install 'openclaw-dask[k8s]')""")
    workers: int | Literal["auto"] = setting(v.integer(1, v.MAX_WORKERS, auto=True), "auto", """
        parallel executors: threads (thread), processes (process), worker ranks (mpi), workers to wait for (remote);
        auto = CPU cores (mpi under your mpirun: ranks - 2)""")
    strategy: str = setting(v.choice(*v.STRATEGIES), "data", """
        data: chunk along the first (sample) axis | model: chunk along the last (parameter) axis, e.g. a matmul's
        weights split across workers | pipeline: chunk like data; stream micro-batches with openclaw_dask.dataflow.pipeline""")
    engine: str = setting(v.choice(*v.ENGINES), "auto", """
        thread backend: threads = dask's threaded scheduler in this process, no cluster (fastest; what dask itself
        does) | distributed = an in-process distributed cluster (dashboard, Prometheus, TLS, retries, spilling need
        it) | auto = threads unless a setting needs the cluster. Other backends always run distributed.""")
    communication: str = setting(v.choice(*v.COMMUNICATIONS), "auto", """
        auto (tls when the security section has certificates, else inproc for thread, tcp otherwise) | tcp | inproc
        ucx, nccl: UCX if installed, else tcp with a warning | gloo: tcp | tls: needs the security section""")
    communication_strict: bool = setting(v.boolean, False, """
        true = refuse to start when the asked-for protocol is unavailable, instead of falling back to tcp""")
    task_chunk_size: ChunkSize = setting(v.chunk_size, "auto", """
        bytes per chunk (64MiB), an element count ("1000000 elements"), or auto: total / (workers x 10),
        clamped so per-task overhead stays small and a worker's memory holds several chunks, then lowered until
        a map-reduce over them fits each worker's memory by the memory model (docs/memory.md)""")  # noqa: RUF009 (a field())
    fusion_buffer_size: int | None = setting(v.size(64, 16 * v.GiB, none=True), None, """
        merge small pieces up to this size before each costs a task or a transfer: reductions' fan-in (split_every)
        fills it, many small files are read that much per task, and pieces moving between two workers (GPUs included)
        travel that much per message (null = dask's own: fan-in 4 or dask's split_every, a task per file, 50 MB messages)""")
    mpi_shared_memory: bool = setting(v.boolean, False, """
        mpi: one worker rank holds all of this host's task threads, so same-host tasks share memory instead of sockets""")
    hybrid: bool = setting(v.boolean, False, """
        process/mpi: each worker process runs one task thread with omp_threads BLAS/OpenMP threads""")
    omp_threads: int = setting(v.integer(1, 1024), 1, """
        threads per worker process (process, mpi): task threads, with BLAS/OpenMP at 1 so cores are never
        oversubscribed; with hybrid: BLAS/OpenMP threads, and one task thread""")
    async_io: bool = setting(v.boolean, False, """
        file reads (openclaw_dask.io) run on dedicated I/O threads and start a bounded distance ahead of compute""")
    sync_interval: int = setting(v.integer(1, 1_000_000), 1, """
        local steps between global synchronisations in iterative work (openclaw_dask.dataflow.iterate; 1 = every step)""")
    batch_size: int | None = setting(v.integer(1, 1_000_000, none=True), None, """
        source items per micro-batch of a pipeline (openclaw_dask.dataflow.pipeline; null = one item per batch)""")
    memory_pooling: bool = setting(v.boolean, False, """
        cuda backend: GPU allocations from an RMM pool (CuPy's own pool without RMM) of gpu_memory_fraction of each
        device | false = no pool (CuPy's default pool off)""")
    gpu_memory_fraction: float = setting(v.fraction, 0.7, """
        cuda backend: pool size and spill threshold (device_memory_limit) as this share of each device's memory;
        at most 0.95, and 0.7 or less is advised (a warning above)""")
    timeout: float = setting(v.duration(0.1, v.DAY), "30s", """
        connect and comm timeout, and how long a run may stand still with a worker paused at its memory limit, or with
        tasks pinned to workers that left, before it ends (cluster/stall.py); raise to 60s on slow or busy networks""")
    socket_buffer_size: int | None = setting(v.socket_buffer_size, None, """
        SO_SNDBUF/SO_RCVBUF of every TCP comm of the client, scheduler and workers, 4KiB..256MiB (tcp only:
        thread backend needs communication: tcp). null = OS default with autotuning, which a fixed size turns off;
        the kernel caps it at net.core.rmem_max/wmem_max (a warning says so)""")
    rdma: bool = setting(v.boolean, False, """
        cuda backend: UCX over InfiniBand with RDMA-CM (needs distributed-ucxx; refused without it)""")
    network_interface: str | None = setting(v.optional_text, None, """
        network interface to bind, e.g. lo or eth0 (also OPENCLAW_NETWORK_INTERFACE); null = cluster.host""")
    log_level: str = setting(v.log_level, "WARNING", """
        DEBUG | INFO | WARNING | ERROR, for openclaw and distributed, on the client and in every worker""")


@dataclass(frozen=True)
class ClusterConfig:
    """Where and how the cluster binds."""

    scheduler_address: str | None = setting(v.optional_text, None, """
        address of a running dask-scheduler, e.g. tcp://127.0.0.1:8786 or tls://... (backend: remote only)""")
    host: str = setting(v.text, "127.0.0.1", "address the local scheduler and workers bind to")
    allow_insecure_bind: bool = setting(v.boolean, False, """
        allow binding a non-loopback address without TLS (anyone who reaches it can run code); with TLS set up
        below, a non-loopback host or interface is allowed without this, and the HTTP servers stay on 127.0.0.1""")
    dashboard: str | bool = setting(v.dashboard, "auto", """
        auto = on in a Jupyter kernel when the session runs a distributed cluster (loopback, a free port), off in
        scripts, the CLI and CI | false = no dashboard | true = 127.0.0.1 on a free port | a port (8787) or HOST:PORT.
        Without it the workers keep no statistical profile (client.profile() is empty): only its pages read one""")
    memory_limit: int | Literal["auto"] = setting(v.size(64 * v.MiB, v.PiB, auto=True), "auto", """
        memory limit per worker process: auto (system memory / workers) or a size""")
    preload: tuple[str, ...] = setting(v.text_list, [], """
        modules or .py files every scheduler and worker openclaw starts imports first (dask --preload)""")
    worker_start: str = setting(v.choice("spawn", "fork"), "spawn", """
        backend process, how each worker process starts: spawn = a fresh interpreter that imports everything again and
        reruns the main script's top level, so a script needs `if __name__ == "__main__":` | fork = a copy of this
        process (Linux only), ready sooner and with no guard needed; each worker shares this process's memory as it
        was (copy-on-write), and that memory counts toward its memory_limit, so start the session before loading data""")
    local_directory: str = setting(v.local_directory, "auto", """
        where workers spill and keep scratch files: auto = a temporary folder for each session, removed when the
        session ends (normal exit, error, Ctrl-C, SIGTERM) | a folder path, kept""")
    max_spill: int | str | bool = setting(v.max_spill, "auto", """
        most bytes all workers together may spill to disk: auto = half the free space of the spill folder at start,
        shared among the workers | a size | false (no bound: a run that does not fit can fill the disk)""")
    memory_check: str = setting(v.choice("error", "warn", "off"), "error", """
        before Session.compute/persist runs an array graph, its projected peak memory per worker (docs/memory.md)
        is compared with the workers' memory: error = refuse a graph that does not fit, naming the task_chunk_size
        or memory_limit that would | warn = log that and run | off = no projection""")


@dataclass(frozen=True)
class GpuConfig:
    """Which GPUs the cuda backend uses."""

    devices: tuple[int, ...] | None = setting(v.devices, "auto", """
        cuda backend: GPU indices to run on, e.g. [0, 2]; auto = every GPU CUDA_VISIBLE_DEVICES shows (all by default)""")


@dataclass(frozen=True)
class KubernetesConfig:
    """The DaskCluster resource of backend kubernetes (see :mod:`openclaw_dask.cluster.kubernetes`)."""

    image: str = setting(v.text, "ghcr.io/dask/dask:latest", """
        backend kubernetes (pip install 'openclaw-dask[k8s]', and the dask-kubernetes operator in the cluster):
        `openclaw k8s manifest` prints the DaskCluster resource these keys describe.
        Container image of the scheduler and workers; it needs openclaw-dask and the dask version of this client
        (build one FROM ghcr.io/dask/dask, or set env EXTRA_PIP_PACKAGES to a requirement the pods can install)""")
    namespace: str = setting(v.dns_label, "default", "namespace of the DaskCluster and its pods")
    cluster_name: str = setting(v.dns_label, "openclaw", """
        name of the DaskCluster resource (its pods and services are named after it)""")
    # (name, value) pairs, sorted
    env: tuple[tuple[str, str], ...] = setting(v.env_mapping, {}, """
        environment variables of the scheduler and worker containers, e.g. {EXTRA_PIP_PACKAGES: "https://…/openclaw_dask-0.1.0-py3-none-any.whl"}""", secret=True)
    service_type: str = setting(v.choice(*v.SERVICE_TYPES), "ClusterIP", """
        how the scheduler's service is exposed: ClusterIP (inside the cluster; dask-kubernetes port-forwards), NodePort or LoadBalancer""")


@dataclass(frozen=True)
class SlurmConfig:
    """The worker jobs of backend slurm (see :mod:`openclaw_dask.cluster.slurm`)."""

    partition: str | None = setting(v.optional_text, None, """
        backend slurm (pip install 'openclaw-dask[slurm]'): `openclaw slurm script` prints the job script these keys
        describe. Partition the worker jobs go to (#SBATCH -p); null = the cluster's default partition""")
    account: str | None = setting(v.optional_text, None, "account the jobs are charged to (#SBATCH -A); null = yours by default")
    qos: str | None = setting(v.optional_text, None, "quality of service of the jobs (#SBATCH --qos); null = the default")
    walltime: float = setting(v.duration(60, 365 * v.DAY), "30m", """
        time limit of each worker job (#SBATCH -t); a job past it is a lost worker, replaced while the session runs""")
    processes_per_job: int = setting(v.integer(1, 1024), 1, """
        worker processes in each job: parallel.workers / this many jobs, each of processes x omp_threads cores""")
    job_extra_directives: tuple[str, ...] = setting(v.text_list, [], """
        more #SBATCH lines, e.g. ["--constraint=skylake", "--exclusive"]""")
    job_script_prologue: tuple[str, ...] = setting(v.text_list, [], """
        shell lines the job runs before the worker, e.g. ["module load python/3.11", "source ~/venv/bin/activate"]""")
    job_python: str | None = setting(v.optional_text, None, """
        the Python the job starts the worker with, on the compute nodes; null = this Python (a shared file system)""")
    log_directory: str | None = setting(v.optional_text, None, """
        folder for the jobs' output and error files (#SBATCH -o / -e), on a file system the nodes share;
        null = Slurm's default (slurm-JOBID.out in the folder openclaw ran from)""")


@dataclass(frozen=True)
class SshConfig:
    """The hosts of backend ssh and how to reach them (see :mod:`openclaw_dask.cluster.ssh`)."""

    hosts: tuple[str, ...] = setting(v.host_list, [], """
        backend ssh (pip install 'openclaw-dask[ssh]'): machines reached over SSH, each NAME or USER@NAME, as the
        others reach it (the scheduler and workers bind that address). The scheduler runs on the first; parallel.workers
        worker processes (omp_threads threads each) are spread over all of them, the first included""")
    ssh_port: int = setting(v.integer(1, 65535), 22, "port of the hosts' SSH servers")
    known_hosts: str = setting(v.text, "~/.ssh/known_hosts", """
        file of the host keys to trust (OpenSSH's format); a host whose key is not in it is refused""")
    client_keys: tuple[str, ...] = setting(v.path_list, [], """
        private key files to log in with; [] = SSH's defaults (~/.ssh/id_ed25519, id_rsa, ... and the agent)""")
    remote_python: tuple[str, ...] = setting(v.path_list, [], """
        the Python on the hosts that runs the scheduler and workers (it needs openclaw-dask): one path for all hosts,
        or one per host in the order of hosts; [] = this Python's path (the same install on every host)""")


@dataclass(frozen=True)
class WorkloadConfig:
    """Parameters of the built-in workloads."""

    size: int = setting(v.size(8, v.PiB), "1GiB", """
        input size of the built-in workloads (array-sum: a float64 array of this many bytes)""")
    repeat: int = setting(v.integer(1, 1000), 3, "timed repeats of the measured step; the summary reports the median")
    skew: float = setting(v.ratio, 1, """
        plant data skew for the profiler: one chunk of array-sum is this many times the others (1 = none)""")
    straggler: float = setting(v.duration(0, 3600), 0, """
        plant a straggler for the profiler: one chunk of array-sum takes this much longer (0 = none)""")
    io_format: str = setting(v.format_name, "npy", """
        file format io-pipeline writes and reads back: npy | raw | zarr | hdf5 (zarr, hdf5: pip install 'openclaw-dask[io]')""")
    read_latency: float = setting(v.duration(0, 60), 0, """
        io-pipeline: added to every chunk read, standing in for network storage (0 = the local disk as it is)""")


@dataclass(frozen=True)
class IoConfig:
    """How the chunked readers (:mod:`openclaw_dask.io`) treat a Zarr chunk missing from its store."""

    missing_chunks: str = setting(v.choice(*v.MISSING_CHUNKS), "error", """
        a Zarr chunk missing from its store: error (a ReadError naming the chunk) | fill (read as the fill value;
        for stores written without write_empty_chunks=True, which leave out chunks holding only the fill value)""")


@dataclass(frozen=True)
class ElasticConfig:
    """Run-time resizing: ``Session.resize_workers`` and adaptive scaling."""

    cooldown: float = setting(v.duration(0, v.DAY), "10m", """
        minimum time between two resize_workers() calls: resizing moves data (the guide advises 10 minutes);
        resize_workers(n, force=True) skips the wait""")
    adaptive: bool = setting(v.boolean, False, """
        let the scheduler add workers when work queues up and retire idle ones (backends process, kubernetes, slurm:
        whole jobs); a worker is retired only after cooldown of steady "fewer" advice, and its data moves first""")
    min_workers: int = setting(v.integer(0, v.MAX_WORKERS), 1, """
        fewest workers adaptive scaling keeps; 0 (backend slurm only) = no job stays queued or running while idle""")
    max_workers: int | Literal["auto"] = setting(v.integer(1, v.MAX_WORKERS, auto=True), "auto", """
        most workers adaptive scaling starts; auto = CPU cores""")
    interval: float = setting(v.duration(0.1, 3600), "1s", "how often adaptive scaling asks the scheduler")


@dataclass(frozen=True)
class FaultToleranceConfig:
    """Task retries and how many worker deaths a task may cause."""

    retries: int = setting(v.integer(0, 100), 0, """
        times a failed task (an exception, or its worker lost) is retried before the run fails""")
    allowed_failures: int = setting(v.integer(0, 100), 3, """
        worker deaths a task may cause before it is declared bad and the run stops naming it
        (distributed.scheduler.allowed-failures)""")


@dataclass(frozen=True)
class MonitoringConfig:
    """Prometheus metrics served by the scheduler."""

    prometheus: bool = setting(v.boolean, False, """
        serve Prometheus metrics (distributed's and openclaw_*) at http://HOST:PORT/metrics on the scheduler
        (needs pip install 'openclaw-dask[monitoring]'; thread and process backends)""")
    port: int = setting(v.port, 0, "port of the scheduler's HTTP server (metrics, health, dashboard); 0 = a free port")


@dataclass(frozen=True)
class SecurityConfig:
    """TLS certificates for the scheduler, workers and client."""

    temporary_certificates: bool = setting(v.boolean, False, """
        TLS with a throw-away self-signed certificate made in memory (clusters openclaw starts, not remote;
        needs pip install 'openclaw-dask[tls]')""")
    ca_file: str | None = setting(v.optional_text, None, """
        certificate authority (PEM file) that signed every certificate of the cluster; each side checks the other's""")
    cert_file: str | None = setting(v.optional_text, None, """
        this process's certificate (PEM file), used as client, scheduler and worker certificate""")
    key_file: str | None = setting(v.optional_text, None, """
        this process's private key (PEM file, unencrypted; null = inside cert_file)""")
    require_encryption: bool = setting(v.boolean, False, """
        refuse every connection that is not TLS, from any client, scheduler or worker made in the session""")

    @property
    def enabled(self) -> bool:
        return self.temporary_certificates or self.cert_file is not None


@dataclass(frozen=True)
class Config:
    """The effective configuration.

    Attributes
    ----------
    parallel, cluster, gpu, workload, io, elastic, kubernetes, slurm, ssh, fault_tolerance, monitoring, security
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
    slurm: SlurmConfig
    ssh: SshConfig
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
        sections = [(s.name, getattr(self, s.name)) for s in dataclasses.fields(self)]
        return [(f"{name}.{f.name}", getattr(section, f.name))
                for name, section in sections if dataclasses.is_dataclass(section) for f in dataclasses.fields(section)]
