"""The configuration rules that follow from a backend's :class:`~openclaw_dask.cluster.base.Capabilities`.

:meth:`Backend.check <openclaw_dask.cluster.base.Backend.check>` runs them; a backend
adds its own rules in its module. Messages name the built-in backends that *can* do a thing
(from :mod:`~openclaw_dask.cluster.catalog`, which imports neither the registry nor the base).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from openclaw_dask.cluster.catalog import BUILTIN, builtin
from openclaw_dask.config import changed_from_defaults
from openclaw_dask.errors import ConfigError

if TYPE_CHECKING:
    from openclaw_dask.cluster.base import Backend
    from openclaw_dask.config import Config

__all__ = ["able", "check_capabilities"]


def able(capability: str) -> str:
    """The built-in backends with ``capability``, as words: ``process and mpi``."""
    names = [b.name for b in map(builtin, BUILTIN.values()) if getattr(b.capabilities, capability)]
    return " and ".join(names) if len(names) < 3 else ", ".join(names[:-1]) + " and " + names[-1]


def check_capabilities(backend: Backend, config: Config) -> None:
    """Refuse the first setting that needs a capability ``backend`` lacks."""
    _check_shape(backend, config)
    _check_gpu(backend, config)
    _check_sections(backend, config)
    _check_services(backend, config)
    _check_comms(backend, config)
    _check_memory(backend, config)


def _check_shape(backend: Backend, config: Config) -> None:
    p, cap, name = config.parallel, backend.capabilities, backend.name
    if p.omp_threads != 1 and not cap.worker_processes:
        raise ConfigError.at(config, "parallel.omp_threads", f"threads per worker process apply to backends "
                             f"{able('worker_processes')} (backend is {name})", hint="set parallel.workers instead")
    if p.hybrid and not cap.worker_processes:
        raise ConfigError.at(config, "parallel.hybrid", "hybrid gives each worker process omp_threads BLAS/OpenMP threads: "
                             f"use backend {able('worker_processes').replace(' and ', ' or ')} (backend is {name})")
    if p.mpi_shared_memory and not cap.shared_memory:
        raise ConfigError.at(config, "parallel.mpi_shared_memory", f"applies to backend {able('shared_memory')} (backend is {name})",
                             hint="backend thread already shares one process's memory")
    if p.engine == "threads" and not cap.threaded:
        raise ConfigError.at(config, "parallel.engine", f"dask's threaded scheduler runs in this process: backend "
                             f"{able('threaded')} (backend {name} always runs a distributed cluster)",
                             hint="set parallel.engine=auto, or parallel.backend=thread")
    if config.cluster.worker_start == "fork" and not cap.fork:
        raise ConfigError.at(config, "cluster.worker_start", f"forks the worker processes of backend {able('fork')} "
                             f"(backend is {name})", hint="remove it")
    if config.cluster.worker_start == "fork" and sys.platform != "linux":
        raise ConfigError.at(config, "cluster.worker_start", f"fork is offered on Linux only (this is {sys.platform})",
                             hint="set cluster.worker_start=spawn")
    if config.cluster.scheduler_address and cap.owns_cluster:
        raise ConfigError.at(config, "cluster.scheduler_address", f"used only with backend remote (backend is {name})",
                             hint="remove it or set parallel.backend=remote")


_GPU_KEYS = ("parallel.memory_pooling", "parallel.gpu_memory_fraction", "parallel.rdma", "gpu.devices")


def _check_gpu(backend: Backend, config: Config) -> None:
    if backend.capabilities.gpu:
        return
    changed = changed_from_defaults(config, _GPU_KEYS)
    if changed:
        raise ConfigError.at(config, changed[0], f"applies to GPU workers: backend {able('gpu')} (backend is {backend.name})",
                             hint="set parallel.backend=cuda, or remove the key")


# capability -> (the section its keys live in, what they describe, the backend that has them)
_SECTIONS = (("pods", "kubernetes", "the pods"), ("jobs", "slurm", "the worker jobs"), ("ssh", "ssh", "the hosts"))


def _check_sections(backend: Backend, config: Config) -> None:
    """A ``kubernetes:``, ``slurm:`` or ``ssh:`` key set for a backend that has no use for it."""
    for capability, section, what in _SECTIONS:
        if getattr(backend.capabilities, capability):
            continue
        changed = changed_from_defaults(config, (key for key, _ in config.items() if key.startswith(f"{section}.")))
        if changed:
            raise ConfigError.at(config, changed[0], f"describes {what} of backend {able(capability)} (backend is {backend.name})",
                                 hint=f"set parallel.backend={section}, or remove the key")


def _check_services(backend: Backend, config: Config) -> None:
    cap, name = backend.capabilities, backend.name
    if config.elastic.adaptive and not cap.adapt:
        raise ConfigError.at(config, "elastic.adaptive", "adaptive scaling starts and stops worker processes: "
                             f"use backend {able('adapt')} (backend is {name})")
    if config.elastic.adaptive and config.elastic.min_workers == 0 and not cap.jobs:
        raise ConfigError.at(config, "elastic.min_workers", "0 leaves the session no worker to run on; only backend "
                             f"{able('jobs')}, whose session waits for the jobs it submits, goes down to none", hint="use 1 or more")
    if config.monitoring.prometheus and not cap.prometheus:
        why = backend.why_not.get("prometheus", f"backend {name} does not serve openclaw's metrics; use backend {able('prometheus')}")
        raise ConfigError.at(config, "monitoring.prometheus", why)
    if config.security.enabled and not cap.tls:
        which = "security.temporary_certificates" if config.security.temporary_certificates else "security.cert_file"
        raise ConfigError.at(config, which, f"TLS is built for backends {able('tls')}, not {name}", hint="remove the security keys")


def _check_comms(backend: Backend, config: Config) -> None:
    p, cap, name = config.parallel, backend.capabilities, backend.name
    if p.communication == "inproc" and not cap.in_process:
        raise ConfigError.at(config, "parallel.communication",
                             f"inproc works only within one process (backend {able('in_process')}), not backend {name}", hint="use tcp")
    if p.socket_buffer_size is None:
        return
    key = "parallel.socket_buffer_size"
    if not cap.socket_buffers:
        raise ConfigError.at(config, key, backend.refusal("socket_buffers"))
    if p.communication == "inproc" or (p.communication == "auto" and backend.default_protocol == "inproc"):
        raise ConfigError.at(config, key, f"backend {name} talks inproc (no sockets)",
                             hint="set parallel.communication=tcp, or remove this key")


def _check_memory(backend: Backend, config: Config) -> None:
    """Refuse memory limits that together exceed this machine's memory, where the workers run on it.

    distributed caps one worker's limit at the machine's memory but not their sum: two workers
    of 100 GiB on a 24 GiB machine would each wait to pause at 80 GiB and be killed long before.
    """
    limit = config.cluster.memory_limit
    if limit == "auto" or not backend.capabilities.local_memory:
        return
    from dask.utils import format_bytes
    from distributed.system import MEMORY_LIMIT  # the machine's memory, or a container's (cgroup) limit if lower

    workers, total = backend.memory_workers(config), MEMORY_LIMIT
    if workers * limit <= total:
        return
    fits = total // workers // 2**20 * 2**20  # whole MiB
    key = "cluster.memory_limit"
    raise ConfigError(f"{workers} worker(s) x {format_bytes(limit)} = {format_bytes(workers * limit)} is more than this "
                      f"machine's {format_bytes(total)} of memory", key=key, value=format_bytes(limit),
                      source=config.sources.get(key, "default"),
                      hint=f"set {key} to at most {fits // 2**20}MiB, or auto (its memory / the workers), or fewer workers")
