"""The configuration schema: every key, its type, and what values it accepts.

Each key is a :class:`Key` with a coercer that turns the raw YAML/env/CLI value into
a typed value or raises :class:`Invalid` with a description of what is allowed. The
defaults themselves live in ``defaults.yaml`` beside this module (with a comment on
every key); ``tests/test_config.py`` keeps the two in step.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dask.utils import parse_bytes, parse_timedelta

__all__ = ["ENGINES", "KEYS", "SECTIONS", "STRATEGIES", "TYPED_SECTIONS", "ChunkSize", "Invalid", "Key", "key_by_name"]


class Invalid(Exception):
    """Raised by a coercer; the message says what is allowed."""


@dataclass(frozen=True)
class ChunkSize:
    """A parsed ``task_chunk_size``: ``auto``, a byte size, or an element count."""

    kind: str  # "auto" | "bytes" | "elements"
    value: int | None = None

    def __str__(self) -> str:
        if self.kind == "auto":
            return "auto"
        if self.kind == "elements":
            return f"{self.value} elements"
        return str(self.value)


@dataclass(frozen=True)
class Key:
    """One configuration key.

    Parameters
    ----------
    section, name
        The key is spelled ``section.name`` in files and ``--set``, and
        ``OPENCLAW_<NAME>`` in the environment (names are unique across sections).
    coerce
        Turns a raw value into the typed value, or raises :class:`Invalid`.
    """

    section: str
    name: str
    coerce: Callable[[Any], Any]

    @property
    def dotted(self) -> str:
        return f"{self.section}.{self.name}"

    @property
    def env(self) -> str:
        return f"OPENCLAW_{self.name.upper()}"


# -- coercers -------------------------------------------------------------------------


def _bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    raise Invalid("true or false")


def _choice(*choices: str) -> Callable[[Any], str]:
    def coerce(v: Any) -> str:
        if isinstance(v, str) and v.lower() in choices:
            return v.lower()
        raise Invalid("one of " + ", ".join(choices))

    return coerce


def _int(minimum: int = 1, *, auto: bool = False, none: bool = False) -> Callable[[Any], Any]:
    allowed = f"an integer >= {minimum}" + (" or 'auto'" if auto else "") + (" or null" if none else "")

    def coerce(v: Any) -> Any:
        if auto and v == "auto":
            return "auto"
        if none and v is None:
            return None
        if isinstance(v, int) and not isinstance(v, bool) and v >= minimum:
            return v
        raise Invalid(allowed)

    return coerce


def _size(*, auto: bool = False, none: bool = False, minimum: int = 1) -> Callable[[Any], Any]:
    allowed = "a size such as 64MiB, 2GB or a number of bytes" + (
        " or 'auto'" if auto else ""
    ) + (" or null" if none else "")

    def coerce(v: Any) -> Any:
        if auto and v == "auto":
            return "auto"
        if none and v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, str)):
            raise Invalid(allowed)
        try:
            n = parse_bytes(v)
        except (ValueError, TypeError, OverflowError):
            raise Invalid(allowed) from None
        if n < minimum:
            raise Invalid(f"{allowed}, at least {minimum} byte(s)")
        return int(n)

    return coerce


_ELEMENTS = re.compile(r"^\s*([0-9][0-9_]*(?:\.[0-9]*)?(?:e[0-9]+)?)\s*elements?\s*$", re.IGNORECASE)


def _chunk_size(v: Any) -> ChunkSize:
    if v == "auto":
        return ChunkSize("auto")
    if isinstance(v, str):
        m = _ELEMENTS.match(v)
        if m:
            n = float(m.group(1).replace("_", ""))
            if n >= 1 and n == int(n):
                return ChunkSize("elements", int(n))
    try:
        return ChunkSize("bytes", _size()(v))
    except Invalid:
        raise Invalid("'auto', a size such as 64MiB (bytes), or a count such as '1000000 elements'") from None


def _duration(v: Any, *, zero: bool = False) -> float:
    allowed = f"a {'' if zero else 'positive '}duration such as 30s, 10m or a number of seconds"
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise Invalid(allowed)
    try:
        t = float(parse_timedelta(v))
    except (ValueError, KeyError, TypeError, OverflowError):
        raise Invalid(allowed) from None
    if t < 0 or (t == 0 and not zero) or math.isinf(t):
        raise Invalid(allowed)
    return t


def _fraction(v: Any) -> float:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 0.95:
        return float(v)
    raise Invalid("a number in (0, 0.95]; 0.7 or less is advised when several processes share a GPU")


def _ratio(v: Any) -> float:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and 1 <= v <= 1000:
        return float(v)
    raise Invalid("a number from 1 (no skew) to 1000")


def _port(v: Any) -> int:
    if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 65535:
        return v
    raise Invalid("a TCP port from 1 to 65535, or 0 for a free one")


def _optional_str(v: Any) -> str | None:
    if v is None or (isinstance(v, str) and v.strip()):
        return v.strip() if isinstance(v, str) else None
    raise Invalid("a non-empty string or null")


def _str(v: Any) -> str:
    if isinstance(v, str) and v.strip():
        return v.strip()
    raise Invalid("a non-empty string")


def _str_list(v: Any) -> tuple[str, ...]:
    if isinstance(v, str) and v.strip():
        return (v.strip(),)
    if isinstance(v, (list, tuple)) and all(isinstance(x, str) and x.strip() for x in v):
        return tuple(x.strip() for x in v)
    raise Invalid("a list of module names or .py files, e.g. [mypackage.setup]")


def _env(v: Any) -> tuple[tuple[str, str], ...]:
    if v is None:
        return ()
    if isinstance(v, dict) and all(isinstance(k, str) and _ENV_NAME.match(k) for k in v):
        return tuple((k, str(x).lower() if isinstance(x, bool) else str(x)) for k, x in sorted(v.items()))
    raise Invalid("a mapping of environment variable names to values, e.g. {EXTRA_PIP_PACKAGES: openclaw-dask}")


def _dns_label(v: Any) -> str:
    if isinstance(v, str) and re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?", v):
        return v
    raise Invalid("a Kubernetes name: lowercase letters, digits and '-', at most 40 characters, e.g. openclaw")


def _devices(v: Any) -> tuple[int, ...] | None:
    if v == "auto" or v is None:
        return None
    if isinstance(v, str):  # from --set or the environment: "0,2"
        v = [x.strip() for x in v.split(",")]
    if isinstance(v, int) and not isinstance(v, bool):
        v = [v]
    try:
        out = tuple(int(x) for x in v)
    except (TypeError, ValueError):
        out = ()
    if out and all(i >= 0 for i in out) and len(set(out)) == len(out):
        return out
    raise Invalid("auto (every visible GPU) or a list of distinct GPU indices, e.g. [0, 2]")


def _dashboard(v: Any) -> str | bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        v = str(v)
    if isinstance(v, str) and re.fullmatch(r"(\[?[0-9A-Za-z.:-]*\]?:)?[0-9]{1,5}", v.strip()):
        return v.strip()
    raise Invalid("false, true (127.0.0.1 on a free port), a port such as 8787, or HOST:PORT")


_NAME = re.compile(r"[a-z][a-z0-9_-]*")


def _backend_name(v: Any) -> str:
    # Which names exist is the backend registry's to say (built-ins and entry points): here only the form.
    if isinstance(v, str) and _NAME.fullmatch(v.strip().lower()):
        return v.strip().lower()
    raise Invalid("a backend name such as thread, process, remote or mpi")


def _local_directory(v: Any) -> str:
    if v == "auto":
        return "auto"
    try:
        return _str(v)
    except Invalid:
        raise Invalid("auto (a temporary folder for each session, removed when it ends) or a folder path") from None


def _max_spill(v: Any) -> int | str | bool:
    if v == "auto" or v is False:
        return v
    try:
        return _size()(v)
    except Invalid:
        raise Invalid("auto (a share of the free disk space), a size such as 10GiB, or false (no bound)") from None


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")
STRATEGIES = ("data", "model", "pipeline")
SERVICE_TYPES = ("clusterip", "nodeport", "loadbalancer")
IO_FORMATS = ("npy", "raw", "zarr", "hdf5")
MISSING_CHUNKS = ("error", "fill")
ENGINES = ("auto", "threads", "distributed")
COMMUNICATIONS = ("auto", "tcp", "inproc", "tls", "ucx", "nccl", "gloo")
LOG_LEVELS = ("debug", "info", "warning", "error")

KEYS: tuple[Key, ...] = (
    # parallel: the guide's own keys, with its spelling
    Key("parallel", "enabled", _bool),
    Key("parallel", "backend", _backend_name),
    Key("parallel", "workers", _int(1, auto=True)),
    Key("parallel", "strategy", _choice(*STRATEGIES)),
    Key("parallel", "engine", _choice(*ENGINES)),
    Key("parallel", "communication", _choice(*COMMUNICATIONS)),
    Key("parallel", "communication_strict", _bool),
    Key("parallel", "task_chunk_size", _chunk_size),
    Key("parallel", "fusion_buffer_size", _size(none=True)),
    Key("parallel", "mpi_shared_memory", _bool),
    Key("parallel", "hybrid", _bool),
    Key("parallel", "omp_threads", _int(1)),
    Key("parallel", "async_io", _bool),
    Key("parallel", "sync_interval", _int(1)),
    Key("parallel", "batch_size", _int(1, none=True)),
    Key("parallel", "memory_pooling", _bool),
    Key("parallel", "gpu_memory_fraction", _fraction),
    Key("parallel", "timeout", _duration),
    Key("parallel", "socket_buffer_size", _size(none=True)),
    Key("parallel", "rdma", _bool),
    Key("parallel", "network_interface", _optional_str),
    Key("parallel", "log_level", lambda v: _choice(*LOG_LEVELS)(v).upper()),
    # cluster: where and how the cluster binds
    Key("cluster", "scheduler_address", _optional_str),
    Key("cluster", "host", _str),
    Key("cluster", "allow_insecure_bind", _bool),
    Key("cluster", "dashboard", _dashboard),
    Key("cluster", "memory_limit", _size(auto=True)),
    Key("cluster", "preload", _str_list),
    Key("cluster", "local_directory", _local_directory),
    Key("cluster", "max_spill", _max_spill),
    # workload: built-in jobs
    # gpu: the cuda backend's devices
    Key("gpu", "devices", _devices),
    Key("workload", "size", _size()),
    Key("workload", "repeat", _int(1)),
    Key("workload", "skew", _ratio),
    Key("workload", "straggler", lambda v: _duration(v, zero=True)),
    Key("workload", "io_format", _choice(*IO_FORMATS)),
    Key("workload", "read_latency", lambda v: _duration(v, zero=True)),
    # io: the chunked readers (openclaw_dask.io)
    Key("io", "missing_chunks", _choice(*MISSING_CHUNKS)),
    # elastic: run-time resizing
    Key("elastic", "cooldown", lambda v: _duration(v, zero=True)),
    Key("elastic", "adaptive", _bool),
    Key("elastic", "min_workers", _int(1)),
    Key("elastic", "max_workers", _int(1, auto=True)),
    Key("elastic", "interval", _duration),
    # kubernetes: the DaskCluster resource backend kubernetes creates through the dask-kubernetes operator
    Key("kubernetes", "image", _str),
    Key("kubernetes", "namespace", _dns_label),
    Key("kubernetes", "cluster_name", _dns_label),
    Key("kubernetes", "env", _env),
    Key("kubernetes", "service_type", _choice(*SERVICE_TYPES)),
    # fault_tolerance: what a run survives
    Key("fault_tolerance", "retries", _int(0)),
    Key("fault_tolerance", "allowed_failures", _int(0)),
    # monitoring: Prometheus metrics on the scheduler's HTTP server
    Key("monitoring", "prometheus", _bool),
    Key("monitoring", "port", _port),
    # security: TLS between client, scheduler and workers
    Key("security", "temporary_certificates", _bool),
    Key("security", "ca_file", _optional_str),
    Key("security", "cert_file", _optional_str),
    Key("security", "key_file", _optional_str),
    Key("security", "require_encryption", _bool),
)

TYPED_SECTIONS: tuple[str, ...] = ("parallel", "cluster", "gpu", "workload", "io", "elastic", "kubernetes", "fault_tolerance", "monitoring",
                                   "security")
SECTIONS: tuple[str, ...] = (*TYPED_SECTIONS, "dask")

_BY_NAME = {k.name: k for k in KEYS}
_BY_DOTTED = {k.dotted: k for k in KEYS}


def key_by_name(name: str) -> Key | None:
    """Look a key up by its dotted name (``parallel.workers``) or bare name (``workers``)."""
    return _BY_DOTTED.get(name) or _BY_NAME.get(name)
