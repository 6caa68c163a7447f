"""Built-in workloads, by the name the CLI uses (``openclaw run NAME``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from openclaw_dask.workloads import array_sum

__all__ = ["WORKLOADS"]

# name -> run(session, *, size=None, repeat=None, progress=False) -> result with .ok and .to_dict()
WORKLOADS: dict[str, Callable[..., Any]] = {"array-sum": array_sum.run}
