"""The values a configuration key accepts: one coercer per kind of value, with its range.

A coercer turns the raw YAML/env/CLI value into a typed value or raises :class:`Invalid`
with a description of what is allowed; a numeric one carries its range as text (``range``)
for the docs. Each key names its coercer where it is declared (:mod:`openclaw_dask.config.model`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dask.utils import byte_sizes, format_bytes, parse_timedelta

__all__ = ["COMMUNICATIONS", "ENGINES", "LOG_LEVELS", "MAX_CHUNKS", "MAX_WORKERS", "MISSING_CHUNKS",
           "SERVICE_TYPES", "SOCKET_BUFFER_RANGE", "STRATEGIES", "ChunkSize", "Invalid", "as_written", "backend_name", "boolean",
           "choice", "chunk_size", "dashboard", "devices", "dns_label", "duration", "env_mapping", "fraction", "host_list", "integer",
           "local_directory", "log_level", "max_spill", "optional_text", "path_list", "port", "ranged", "ratio", "size",
           "socket_buffer_size", "text", "text_list"]

# Ranges of the numeric keys, stated in docs/configuration.md: wide enough for any real run,
# narrow enough that no value means "for ever", "everything" or billions of tasks.
KiB, MiB, GiB, PiB = 2**10, 2**20, 2**30, 2**50
DAY = 86400.0
MAX_WORKERS = 10_000
# Most chunks one array may be split into (chunking.plan_chunks refuses more): at ~0.3-2 ms of
# scheduling per task, 200,000 tasks are already minutes of overhead and a graph of ~1 GB.
MAX_CHUNKS = 200_000
# Below, the kernel's own minimum; above, each connection may hold that much kernel memory.
# Checked with the other socket rules in config/checks.py.
SOCKET_BUFFER_RANGE = (4 * KiB, 256 * MiB)


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


# -- coercers -------------------------------------------------------------------------


def boolean(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    raise Invalid("true or false")


def choice(*choices: str) -> Callable[[Any], str]:
    def coerce(v: Any) -> str:
        if isinstance(v, str) and v.lower() in choices:
            return v.lower()
        raise Invalid("one of " + ", ".join(choices))

    return coerce


def ranged(coerce: Callable[[Any], Any], text: str) -> Callable[[Any], Any]:
    coerce.range = text  # type: ignore[attr-defined]  # Key.range, for the docs
    return coerce


def integer(minimum: int, maximum: int, *, auto: bool = False, none: bool = False) -> Callable[[Any], Any]:
    allowed = f"an integer from {minimum} to {maximum:,}" + (" or 'auto'" if auto else "") + (" or null" if none else "")

    def coerce(v: Any) -> Any:
        if auto and v == "auto":
            return "auto"
        if none and v is None:
            return None
        if isinstance(v, int) and not isinstance(v, bool) and minimum <= v <= maximum:
            return v
        raise Invalid(allowed)

    return ranged(coerce, f"{minimum} to {maximum:,}")


_SIZE = re.compile(r"\s*((?:[0-9][0-9_]*)?\.?[0-9][0-9_]*(?:e[+-]?[0-9]+)?)\s*([a-z]*)\s*", re.IGNORECASE)


def _bytes(v: Any) -> float:
    """A size in bytes (``64MiB``, ``2GB``, ``1000``) as a float; ``Invalid("")`` when it is not one.

    Stricter than ``dask.utils.parse_bytes``, which reads ``""`` as 1 byte and ``"1.5"`` as 1.
    """
    if isinstance(v, int) and not isinstance(v, bool):
        return float(v) if abs(v) < 2**1000 else math.inf
    m = _SIZE.fullmatch(v) if isinstance(v, str) else None
    unit = m.group(2).lower() if m else None
    if m is None or unit not in byte_sizes:
        raise Invalid("")
    n = float(m.group(1).replace("_", "")) * byte_sizes[unit]
    if math.isinf(n):
        return n
    if unit in ("", "b") and n != math.floor(n):
        raise Invalid("")  # a fraction of a byte
    return n


def _bytes_text(n: int) -> str:
    """``n`` bytes in the largest binary unit that divides it: ``64KiB``, ``1PiB``."""
    return next(f"{n // 2**p}{u}" for p, u in ((50, "PiB"), (40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB"), (0, "B"))
                if n % 2**p == 0)


def size(minimum: int, maximum: int, *, auto: bool = False, none: bool = False) -> Callable[[Any], Any]:
    span = f"{_bytes_text(minimum)} to {_bytes_text(maximum)}"
    allowed = f"a size from {span} such as 64MiB or 2GB" + (
        " or 'auto'" if auto else ""
    ) + (" or null" if none else "")

    def coerce(v: Any) -> Any:
        if auto and v == "auto":
            return "auto"
        if none and v is None:
            return None
        try:
            n = _bytes(v)
        except Invalid:
            raise Invalid(allowed) from None
        if not minimum <= n <= maximum:
            raise Invalid(allowed)
        return int(n)

    coerce.unit = "bytes"  # type: ignore[attr-defined]  # Key.unit: how config show writes it
    return ranged(coerce, span)


_ELEMENTS = re.compile(r"^\s*([0-9][0-9_]*(?:\.[0-9]*)?(?:e[0-9]+)?)\s*elements?\s*$", re.IGNORECASE)
CHUNK_BYTES = (64, 64 * GiB)
CHUNK_ELEMENTS = (8, 2**33)


def chunk_size(v: Any) -> ChunkSize:
    allowed = f"'auto', a size from 64B to 64GiB, or '{CHUNK_ELEMENTS[0]} elements' to '{CHUNK_ELEMENTS[1]:,} elements'"
    if v == "auto":
        return ChunkSize("auto")
    if isinstance(v, str):
        m = _ELEMENTS.match(v)
        if m:
            n = float(m.group(1).replace("_", ""))
            if CHUNK_ELEMENTS[0] <= n <= CHUNK_ELEMENTS[1] and n == int(n):
                return ChunkSize("elements", int(n))
            raise Invalid(allowed)
    try:
        return ChunkSize("bytes", size(*CHUNK_BYTES)(v))
    except Invalid:
        raise Invalid(allowed) from None


chunk_size.range = f"64B to 64GiB, or {CHUNK_ELEMENTS[0]} to {CHUNK_ELEMENTS[1]:,} elements; at most {MAX_CHUNKS:,} chunks per array"  # type: ignore[attr-defined]


def _seconds(t: float) -> str:
    return next((f"{t / n:g}{unit}" for n, unit in ((DAY, "d"), (3600, "h"), (60, "m")) if t >= n and t % n == 0), f"{t:g}s")


def duration(minimum: float, maximum: float) -> Callable[[Any], float]:
    """A duration from ``minimum`` to ``maximum`` seconds (``0`` allowed when ``minimum`` is 0)."""
    span = f"{_seconds(minimum)} to {_seconds(maximum)}"
    allowed = f"a duration from {span} such as 30s, 10m or a number of seconds"

    def coerce(v: Any) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float, str)) or (isinstance(v, str) and not v.strip()):
            raise Invalid(allowed)
        try:
            t = float(parse_timedelta(v))
        except (ValueError, KeyError, TypeError, OverflowError, IndexError):
            raise Invalid(allowed) from None
        if not minimum <= t <= maximum:  # also refuses nan
            raise Invalid(allowed)
        return t

    coerce.unit = "seconds"  # type: ignore[attr-defined]
    return ranged(coerce, span)


def fraction(v: Any) -> float:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 0.95:
        return float(v)
    raise Invalid("a number in (0, 0.95]; 0.7 or less is advised when several processes share a GPU")


fraction.range = "above 0, at most 0.95"  # type: ignore[attr-defined]


def as_written(value: Any, unit: str | None = None) -> str:
    """``value`` as a YAML file would say it: ``true``, ``null``, ``64MiB`` (``unit="bytes"``), ``10m`` (``"seconds"``)."""
    import json

    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if unit == "bytes" and isinstance(value, int):
        return _bytes_text(value) if value < 1024 or value % 1024 == 0 else format_bytes(value).replace(" ", "")
    if unit == "seconds" and isinstance(value, (int, float)):
        return _seconds(value)
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value)  # YAML's flow style
    return str(value)


def ratio(v: Any) -> float:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and 1 <= v <= 1000:
        return float(v)
    raise Invalid("a number from 1 (no skew) to 1000")


ratio.range = "1 to 1000"  # type: ignore[attr-defined]


def port(v: Any) -> int:
    if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 65535:
        return v
    raise Invalid("a TCP port from 1 to 65535, or 0 for a free one")


port.range = "0 to 65535"  # type: ignore[attr-defined]


def _is_text(v: Any) -> bool:
    """A non-empty string that a path, a name or an environment can hold (no NUL: the OS refuses it)."""
    return isinstance(v, str) and bool(v.strip()) and "\0" not in v


def optional_text(v: Any) -> str | None:
    if v is None or _is_text(v):
        return v.strip() if isinstance(v, str) else None
    raise Invalid("a non-empty string without NUL characters, or null")


def text(v: Any) -> str:
    if _is_text(v):
        return v.strip()
    raise Invalid("a non-empty string without NUL characters")


def text_list(v: Any) -> tuple[str, ...]:
    if _is_text(v):
        return (v.strip(),)
    if isinstance(v, (list, tuple)) and all(_is_text(x) for x in v):
        return tuple(x.strip() for x in v)
    raise Invalid("a list of module names or .py files, e.g. [mypackage.setup]")


_HOST = re.compile(r"([A-Za-z_][A-Za-z0-9_.-]{0,31}@)?[A-Za-z0-9]([A-Za-z0-9.-]{0,252})")
MAX_HOSTS = 1000


def _items(v: Any) -> Any:
    """A list as written, or a comma-separated string (``--set`` and the environment) split into one."""
    return [x.strip() for x in v.split(",")] if isinstance(v, str) else v


def host_list(v: Any) -> tuple[str, ...]:
    v = _items(v)
    if isinstance(v, (list, tuple)) and len(v) <= MAX_HOSTS and all(isinstance(x, str) and _HOST.fullmatch(x.strip()) for x in v):
        return tuple(x.strip() for x in v)
    raise Invalid(f"a list of at most {MAX_HOSTS} host names or addresses, each optionally USER@HOST, e.g. [node1, node2]")


def path_list(v: Any) -> tuple[str, ...]:
    v = _items(v)
    if isinstance(v, (list, tuple)) and all(_is_text(x) for x in v):
        return tuple(x.strip() for x in v)
    raise Invalid("a file path or a list of file paths, e.g. [~/.ssh/id_ed25519]")


def env_mapping(v: Any) -> tuple[tuple[str, str], ...]:
    if v is None:
        return ()
    if isinstance(v, dict) and all(isinstance(k, str) and _ENV_NAME.fullmatch(k) for k in v):
        out = tuple((k, str(x).lower() if isinstance(x, bool) else str(x)) for k, x in sorted(v.items()))
        if all("\0" not in x for _, x in out):
            return out
    raise Invalid("a mapping of environment variable names to values, e.g. {EXTRA_PIP_PACKAGES: openclaw-dask}")


def dns_label(v: Any) -> str:
    if isinstance(v, str) and re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?", v):
        return v
    raise Invalid("a Kubernetes name: lowercase letters, digits and '-', at most 40 characters, e.g. openclaw")


def devices(v: Any) -> tuple[int, ...] | None:
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
    if out and all(0 <= i < _MAX_GPUS for i in out) and len(set(out)) == len(out):
        return out
    raise Invalid(f"auto (every visible GPU) or a list of distinct GPU indices from 0 to {_MAX_GPUS - 1}, e.g. [0, 2]")


_MAX_GPUS = 1024
devices.range = f"indices 0 to {_MAX_GPUS - 1}"  # type: ignore[attr-defined]


def dashboard(v: Any) -> str | bool:
    if isinstance(v, bool) or v == "auto":
        return v
    if isinstance(v, int):
        v = str(v)
    if isinstance(v, str) and re.fullmatch(r"(\[?[0-9A-Za-z.:-]*\]?:)?[0-9]{1,5}", v.strip()) \
            and int(v.strip().rpartition(":")[2]) <= 65535:
        return v.strip()
    raise Invalid("auto, false, true (127.0.0.1 on a free port), a port such as 8787, or HOST:PORT")


_NAME = re.compile(r"[a-z][a-z0-9_-]*")


def backend_name(v: Any) -> str:
    # Which names exist is the backend registry's to say (built-ins and entry points): here only the form.
    if isinstance(v, str) and _NAME.fullmatch(v.strip().lower()):
        return v.strip().lower()
    raise Invalid("a backend name such as thread, process, remote or mpi")


def format_name(v: Any) -> str:
    # Which formats exist is the reader registry's to say (built-ins and entry points): here only the form.
    if isinstance(v, str) and _NAME.fullmatch(v.strip().lower()):
        return v.strip().lower()
    raise Invalid("a file format name such as npy, raw, zarr or hdf5")


def local_directory(v: Any) -> str:
    if v == "auto":
        return "auto"
    try:
        return text(v)
    except Invalid:
        raise Invalid("auto (a temporary folder for each session, removed when it ends) or a folder path") from None


def max_spill(v: Any) -> int | str | bool:
    if v == "auto" or v is False:
        return v
    try:
        return size(MiB, PiB)(v)
    except Invalid:
        raise Invalid("auto (a share of the free disk space), a size from 1MiB to 1PiB such as 10GiB, "
                      "or false (no bound)") from None


max_spill.range = "1MiB to 1PiB"  # type: ignore[attr-defined]
max_spill.unit = "bytes"  # type: ignore[attr-defined]


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")
STRATEGIES = ("data", "model", "pipeline")
SERVICE_TYPES = ("clusterip", "nodeport", "loadbalancer")
MISSING_CHUNKS = ("error", "fill")
ENGINES = ("auto", "threads", "distributed")
COMMUNICATIONS = ("auto", "tcp", "inproc", "tls", "ucx", "nccl", "gloo")
LOG_LEVELS = ("debug", "info", "warning", "error")


def log_level(v: Any) -> str:
    return choice(*LOG_LEVELS)(v).upper()


# Its range is SOCKET_BUFFER_RANGE, checked with the other socket rules in checks.py.
socket_buffer_size = ranged(size(1, 2**40, none=True), f"{SOCKET_BUFFER_RANGE[0] // KiB}KiB to {SOCKET_BUFFER_RANGE[1] // MiB}MiB")
