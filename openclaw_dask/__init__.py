"""openclaw_dask: one YAML file runs chunked Dask array and graph work in parallel.

>>> import openclaw_dask
>>> with openclaw_dask.session("openclaw_config.yaml") as s:   # doctest: +SKIP
...     x = s.array((200_000_000,), fill="random")
...     s.compute(x.mean())

Beyond one graph (:mod:`openclaw_dask.dataflow`): :func:`pipeline` streams micro-batches
through stages, :func:`iterate` synchronises every ``sync_interval`` steps, :func:`dataflow.map <openclaw_dask.dataflow.map>`
batches many small calls (also ``openclaw_dask.map``); :mod:`openclaw_dask.io` reads files as chunked arrays.
:func:`run_workload` runs a built-in workload; ``with openclaw_dask.profile("report.html") as p:`` profiles any
code, as ``openclaw profile`` does (``p.verdicts``, ``p.apply_fix("fixed.yaml")``); :func:`benchmark` is
``openclaw benchmark``; :func:`write_default_config` is ``openclaw init``.
"""

import importlib
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from openclaw_dask.config import Config, write_default_config
from openclaw_dask.errors import (
    BackendUnavailable,
    BatchFailed,
    ClusterStartError,
    ConfigError,
    ItemFailed,
    OpenclawError,
    ReadError,
    ResizeError,
    ResultMismatch,
    RunError,
    ShardFailed,
)
from openclaw_dask.session import Session, resize_workers, session

if _TYPE_CHECKING:
    from openclaw_dask import io
    from openclaw_dask.chunking import ChunkPlan, plan_chunks
    from openclaw_dask.dataflow import Stage, iterate, map, pipeline
    from openclaw_dask.diagnostics.benchmark import benchmark
    from openclaw_dask.diagnostics.profile_block import Profile, profile
    from openclaw_dask.elastic import ResizeResult
    from openclaw_dask.loading import load_checked as load_config
    from openclaw_dask.workloads import run_workload

# imported on first use: a script that only opens a session does not pay for the readers, the
# dataflow helpers, the benchmark or the workloads (~50 ms of a cold start, docs/benchmarks.md)
_LAZY = {
    "io": ("openclaw_dask.io", None),
    "ChunkPlan": ("openclaw_dask.chunking", "ChunkPlan"),
    "plan_chunks": ("openclaw_dask.chunking", "plan_chunks"),
    "Stage": ("openclaw_dask.dataflow", "Stage"),
    "iterate": ("openclaw_dask.dataflow", "iterate"),
    "map": ("openclaw_dask.dataflow", "map"),
    "pipeline": ("openclaw_dask.dataflow", "pipeline"),
    "benchmark": ("openclaw_dask.diagnostics.benchmark", "benchmark"),
    "Profile": ("openclaw_dask.diagnostics.profile_block", "Profile"),
    "profile": ("openclaw_dask.diagnostics.profile_block", "profile"),
    "ResizeResult": ("openclaw_dask.elastic", "ResizeResult"),
    "load_config": ("openclaw_dask.loading", "load_checked"),
    "run_workload": ("openclaw_dask.workloads", "run_workload"),
}


def __getattr__(name: str) -> _Any:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version  # ~10 ms: only when asked

        try:
            globals()[name] = version("openclaw-dask")
        except PackageNotFoundError:  # running from a source tree that was never installed
            globals()[name] = "0+unknown"
        return globals()[name]
    if name not in _LAZY:
        raise AttributeError(f"module 'openclaw_dask' has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = importlib.import_module(module)
    value = value if attr is None else getattr(value, attr)
    globals()[name] = value  # once: later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | {"__version__"})


__all__ = [
    "BackendUnavailable",
    "BatchFailed",
    "ChunkPlan",
    "ClusterStartError",
    "Config",
    "ConfigError",
    "ItemFailed",
    "OpenclawError",
    "Profile",
    "ReadError",
    "ResizeError",
    "ResizeResult",
    "ResultMismatch",
    "RunError",
    "Session",
    "ShardFailed",
    "Stage",
    "__version__",
    "benchmark",
    "io",
    "iterate",
    "load_config",
    "map",
    "pipeline",
    "plan_chunks",
    "profile",
    "resize_workers",
    "run_workload",
    "session",
    "write_default_config",
]
