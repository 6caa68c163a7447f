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

__all__ = ["WORKLOADS", "descriptions", "run_workload"]

# name -> run(session, *, size=None, repeat=None, progress=False) -> result with .ok, .mismatch and .to_dict()
WORKLOADS: dict[str, Callable[..., Any]] = {
    **{name: functools.partial(run_kernel, name) for name in KERNELS},
    "array-sum": array_sum.run,
}


def descriptions() -> dict[str, str]:
    """Each workload's name and what it runs, in one line (the first line of its kernel's docstring)."""
    return {name: (KERNELS[name].__doc__ or "").strip().splitlines()[0] for name in WORKLOADS}


def run_workload(session: Any, name: str, *, size: int | None = None, repeat: int | None = None,
                 progress: bool = False) -> Any:
    """Run the built-in workload ``name`` in ``session``, as ``openclaw run NAME`` does (``openclaw_dask.run_workload``).

    Parameters
    ----------
    session
        A started :class:`~openclaw_dask.Session`.
    name
        One of ``openclaw run --list`` (:data:`WORKLOADS`), e.g. ``"array-sum"``.
    size, repeat
        Input bytes and timed runs; default: the session's ``workload.size`` and ``workload.repeat``.
    progress
        Show a progress bar (a widget in Jupyter) while the input is made.

    Returns
    -------
    WorkloadResult
        ``ok`` (the answer checked), the timings, and ``to_dict()``, the object ``openclaw run --json`` prints.

    Raises
    ------
    ConfigError
        ``name`` is not a built-in workload (the message names the nearest one).
    """
    if name not in WORKLOADS:
        import difflib

        from openclaw_dask.errors import ConfigError

        near = difflib.get_close_matches(str(name), list(WORKLOADS), n=1)
        raise ConfigError(f"no built-in workload {name!r}; " + (f"did you mean {near[0]}?" if near else
                                                                 f"use one of {', '.join(WORKLOADS)}"))
    return WORKLOADS[name](session, size=size, repeat=repeat, progress=progress)
