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

from importlib.metadata import PackageNotFoundError as _PackageNotFoundError
from importlib.metadata import version as _version

from openclaw_dask import io
from openclaw_dask.chunking import ChunkPlan, plan_chunks
from openclaw_dask.config import Config, write_default_config
from openclaw_dask.dataflow import Stage, iterate, map, pipeline
from openclaw_dask.diagnostics.benchmark import benchmark
from openclaw_dask.diagnostics.profile_block import Profile, profile
from openclaw_dask.elastic import ResizeResult
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
from openclaw_dask.loading import load_checked as load_config
from openclaw_dask.session import Session, resize_workers, session
from openclaw_dask.workloads import run_workload

try:
    __version__ = _version("openclaw-dask")
except _PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

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
