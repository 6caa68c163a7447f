"""The ``openclaw`` command: a thin layer over the Python API, one module per command.

Exit codes: 0 success, 1 a run failed (wrong result, cluster unreachable, script
error), 2 a usage or configuration error (one line on stderr, no traceback).

Each command module parses its options and calls plain functions (there or in the
library) that a notebook can call too. Nothing outside this package imports it.
"""

from __future__ import annotations

from openclaw_dask.cli import benchmark, config, deploy, doctor, init, k8s, profile, run, slurm, tune  # noqa: F401  (each adds its command to main)
from openclaw_dask.cli._app import main

__all__ = ["main"]
