"""Built-in workloads, by the name the CLI uses (``openclaw run NAME``).

``array-sum`` is the guide's smoke test; every kernel of the benchmark suite
(:data:`~openclaw_dask.workloads.suite.KERNELS`) runs too, checked against NumPy.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from openclaw_dask.workloads import array_sum
from openclaw_dask.workloads.suite import KERNELS, run_kernel

__all__ = ["WORKLOADS", "descriptions"]

# name -> run(session, *, size=None, repeat=None, progress=False) -> result with .ok, .mismatch and .to_dict()
WORKLOADS: dict[str, Callable[..., Any]] = {
    **{name: functools.partial(run_kernel, name) for name in KERNELS},
    "array-sum": array_sum.run,
}


def descriptions() -> dict[str, str]:
    """Each workload's name and what it runs, in one line (the first line of its kernel's docstring)."""
    return {name: (KERNELS[name].__doc__ or "").strip().splitlines()[0] for name in WORKLOADS}
