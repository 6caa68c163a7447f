"""``openclaw profile``: run a workload or script under the collector and analyse it."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from openclaw_dask.diagnostics.analysis import ProfileReport, analyze
from openclaw_dask.diagnostics.collect import RunRecord, collect

if TYPE_CHECKING:
    from openclaw_dask.session import Session

__all__ = ["ProfileResult", "profile", "profile_config"]


@dataclass
class ProfileResult:
    """A profiled run: the report, the raw record behind it, and the workload's own result."""

    report: ProfileReport
    record: RunRecord
    workload: Any | None
    exit_code: int

    def _repr_html_(self) -> str:  # the last expression of a notebook cell: verdicts and plots inline
        from openclaw_dask.diagnostics.html import notebook_html, profile_layout

        return notebook_html(profile_layout(self.report, self.record), "openclaw profile")

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str] | None:
        from openclaw_dask.diagnostics.html import profile_layout
        from openclaw_dask.diagnostics.notebook import notebook_bundle  # in a kernel: BokehJS once, not per plot

        return notebook_bundle(lambda: profile_layout(self.report, self.record), include, exclude)

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload": None if self.workload is None else self.workload.to_dict(),
            "exit_code": self.exit_code,
            "profile": self.report.to_dict(),
        }


def profile(session: Session, target: str | Path = "array-sum", *, script_args: tuple[str, ...] = (), progress: bool = False) -> ProfileResult:
    """Run ``target`` (a built-in workload name or a script path) in ``session`` and profile it.

    Returns
    -------
    ProfileResult
        ``exit_code`` is 1 when the workload's answer was wrong or the script failed.
    """
    from openclaw_dask.scripts import run_script
    from openclaw_dask.workloads import WORKLOADS

    result = None
    with collect(session) as record:
        if str(target) in WORKLOADS:
            result = WORKLOADS[str(target)](session, progress=progress)
            exit_code = 0 if result.ok else 1
        else:
            exit_code = run_script(session, target, script_args)
    t0 = time.perf_counter()
    report = analyze(record, chunk_hint=getattr(result, "chunk_bytes", None))
    report.extra["analysis_s"] = time.perf_counter() - t0
    session.metrics.profiled(report)
    return ProfileResult(report, record, result, exit_code)


def profile_config(config: Any, target: str | Path = "array-sum", script_args: tuple[str, ...] = (), *,
                   progress: bool = False) -> ProfileResult:
    """Profile ``target`` (a built-in workload or a script) in a session of its own, started from ``config``."""
    from openclaw_dask.session import Session

    with Session(config).start() as s:
        return profile(s, target, script_args=script_args, progress=progress)
