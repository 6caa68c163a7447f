"""What a benchmark produces: its rows as :class:`Row` and the ``report.json`` object.

The report's schema (``openclaw-benchmark/1``) is in ``docs/benchmark-report.md``; a row's
fields are :class:`Row`'s, written to JSON in the order they are declared.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["SCHEMA", "Row", "rows_of"]

SCHEMA = "openclaw-benchmark/1"


@dataclass(frozen=True, kw_only=True)
class Row:
    """One configuration x kernel of a benchmark: a ``rows[]`` entry of ``report.json``.

    Each field is the row field of the same name in ``docs/benchmark-report.md``. Fields that
    reports of earlier versions may lack have defaults (``check``, ``cpu_steal_share``,
    ``invalid``, ``bandwidth_gbps``, ``speedup_vs_first``, ``path``). The speedups are ``None`` until
    every row of the run is measured (:func:`~openclaw_dask.diagnostics.benchmark_stats.with_speedups`);
    ``compare`` is set only by :func:`~openclaw_dask.diagnostics.benchmark_compare.compare`
    and left out of the JSON while ``None``.
    """

    workload: str
    ok: bool
    check: str = "DIFFERENT"
    median_s: float
    min_s: float
    max_s: float
    times_s: tuple[float, ...]
    nbytes: int
    gbps: float
    gflops: float
    tasks: float
    tasks_per_s: float
    task_latency_s: dict[str, float]
    numpy_1thread_s: float
    speedup_vs_numpy_1thread: float
    cpu_steal_share: float | None = None
    flags: tuple[str, ...]
    verdicts: tuple[str, ...]
    config: str
    settings: dict[str, Any]
    workers: int
    threads: int
    invalid: str | None = None
    bandwidth_gbps: float | None = None
    efficiency_vs_bandwidth: float | None
    speedup_vs_serial: float | None = None
    speedup_vs_first: float | None = None
    path: str | None = None  # the path the engine took for the last timed run and why, where it chooses by measurement
    compare: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """The row as ``report.json`` holds it (lists for tuples, no ``compare`` while ``None``)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in ("times_s", "flags", "verdicts"):
            out[name] = list(out[name])
        if out["compare"] is None:
            del out["compare"]
        return out

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> Row:
        """The row of a ``report.json`` object; fields this version does not know are ignored.

        Raises
        ------
        TypeError
            ``row`` lacks a field that has no default.
        """
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in row.items() if k in known}
        for name in ("times_s", "flags", "verdicts"):
            if name in values:
                values[name] = tuple(values[name])
        return cls(**values)


def rows_of(report: Mapping[str, Any]) -> list[Row]:
    """The rows of a report object (its ``"rows"``), as :class:`Row`."""
    return [Row.from_json(r) for r in report["rows"]]
