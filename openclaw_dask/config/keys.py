"""Dotted names of the keys that code names, for messages, fixes and overrides: ``keys.TASK_CHUNK_SIZE``.

Each is derived from the key's declaration (:mod:`openclaw_dask.config.model`) by its bare name,
the name ``OPENCLAW_<NAME>`` also uses, so a key moved to another section moves here too and a
renamed or removed one fails at import. Add a constant when code starts naming a key; a key no
code names needs none. ``tests/test_config.py`` checks that no string in the package names a key
that is not declared.
"""

from __future__ import annotations

from typing import Final

from openclaw_dask.config.schema import key_by_name

__all__ = ["ADAPTIVE", "ALLOWED_FAILURES", "ALLOW_INSECURE_BIND", "BACKEND", "CA_FILE", "CERT_FILE", "COMMUNICATION",
           "COMMUNICATION_STRICT", "COOLDOWN", "DASHBOARD", "DEVICES", "ENABLED", "ENGINE", "GPU_MEMORY_FRACTION",
           "HOST", "HYBRID", "INTERVAL", "KEY_FILE", "LOCAL_DIRECTORY", "MAX_SPILL", "MAX_WORKERS",
           "MEMORY_CHECK", "MEMORY_LIMIT", "MEMORY_POOLING", "MISSING_CHUNKS", "MPI_SHARED_MEMORY", "NETWORK_INTERFACE",
           "OMP_THREADS", "PORT",
           "PRELOAD", "PROMETHEUS", "RDMA", "RETRIES", "SCHEDULER_ADDRESS", "SIZE", "SOCKET_BUFFER_SIZE",
           "TASK_CHUNK_SIZE", "TEMPORARY_CERTIFICATES", "TIMEOUT", "WORKERS"]


def _dotted(name: str) -> str:
    key = key_by_name(name)
    if key is None or "." in name:
        raise LookupError(f"config.keys names {name!r}, which is not a declared key")
    return key.dotted


# parallel
ENABLED: Final = _dotted("enabled")
BACKEND: Final = _dotted("backend")
WORKERS: Final = _dotted("workers")
ENGINE: Final = _dotted("engine")
COMMUNICATION: Final = _dotted("communication")
COMMUNICATION_STRICT: Final = _dotted("communication_strict")
TASK_CHUNK_SIZE: Final = _dotted("task_chunk_size")
MPI_SHARED_MEMORY: Final = _dotted("mpi_shared_memory")
HYBRID: Final = _dotted("hybrid")
OMP_THREADS: Final = _dotted("omp_threads")
MEMORY_POOLING: Final = _dotted("memory_pooling")
GPU_MEMORY_FRACTION: Final = _dotted("gpu_memory_fraction")
TIMEOUT: Final = _dotted("timeout")
SOCKET_BUFFER_SIZE: Final = _dotted("socket_buffer_size")
RDMA: Final = _dotted("rdma")
NETWORK_INTERFACE: Final = _dotted("network_interface")

# cluster
SCHEDULER_ADDRESS: Final = _dotted("scheduler_address")
HOST: Final = _dotted("host")
ALLOW_INSECURE_BIND: Final = _dotted("allow_insecure_bind")
DASHBOARD: Final = _dotted("dashboard")
MEMORY_LIMIT: Final = _dotted("memory_limit")
PRELOAD: Final = _dotted("preload")
LOCAL_DIRECTORY: Final = _dotted("local_directory")
MAX_SPILL: Final = _dotted("max_spill")
MEMORY_CHECK: Final = _dotted("memory_check")

# gpu
DEVICES: Final = _dotted("devices")

# workload
SIZE: Final = _dotted("size")

# io
MISSING_CHUNKS: Final = _dotted("missing_chunks")

# elastic
COOLDOWN: Final = _dotted("cooldown")
ADAPTIVE: Final = _dotted("adaptive")
MAX_WORKERS: Final = _dotted("max_workers")
INTERVAL: Final = _dotted("interval")

# fault_tolerance
RETRIES: Final = _dotted("retries")
ALLOWED_FAILURES: Final = _dotted("allowed_failures")

# monitoring
PROMETHEUS: Final = _dotted("prometheus")
PORT: Final = _dotted("port")

# security
TEMPORARY_CERTIFICATES: Final = _dotted("temporary_certificates")
CA_FILE: Final = _dotted("ca_file")
CERT_FILE: Final = _dotted("cert_file")
KEY_FILE: Final = _dotted("key_file")
