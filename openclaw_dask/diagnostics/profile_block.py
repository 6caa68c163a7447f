"""``with openclaw_dask.profile("report.html") as p:``: profile any code, as dask's ``performance_report`` does.

The block is recorded by the collector ``openclaw profile`` uses and analysed by the same rules,
so the verdicts are those ``openclaw profile script.py`` gives for the same code.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from openclaw_dask.errors import OpenclawError

if TYPE_CHECKING:
    from openclaw_dask.diagnostics.analysis import ProfileReport, Verdict
    from openclaw_dask.diagnostics.collect import RunRecord
    from openclaw_dask.diagnostics.fixes import FixedConfig
    from openclaw_dask.diagnostics.profile import ProfileResult
    from openclaw_dask.session import Session

__all__ = ["Profile", "profile"]

_OVERRIDE_LABELS = ("argument", "--set")  # Config.sources labels of what a run set on top of its file


@dataclass
class Profile:
    """What ``with openclaw_dask.profile(...) as p:`` recorded; filled in when the block ends.

    Attributes
    ----------
    path
        The HTML report written when the block ended, or ``None``.
    session
        The openclaw session whose computes were recorded; ``None``: plain dask computes.
    record, report
        The raw record and its analysis (``None`` until the block ends, or when it raised).
    """

    path: Path | None
    session: Session | None
    record: RunRecord | None = None
    report: ProfileReport | None = None

    @property
    def verdicts(self) -> list[Verdict]:
        """What slowed the block, each with its fix (as ``openclaw profile`` prints them)."""
        return [] if self.report is None else list(self.report.verdicts)

    def kinds(self) -> set[str]:
        """The verdicts' kinds, e.g. ``{"data-skew"}``."""
        return {v.kind for v in self.verdicts}

    def to_dict(self) -> dict[str, Any]:
        """The ``profile`` object of ``openclaw profile --json``, and where the report went."""
        return {"path": None if self.path is None else str(self.path),
                "profile": None if self.report is None else self.report.to_dict()}

    def apply_fix(self, path: str | os.PathLike[str], overrides: Mapping[str, Any] | None = None, *,
                  force: bool = False) -> FixedConfig:
        """Write the session's config with the verdicts' fixes applied, as ``openclaw profile --apply-fix``.

        Parameters
        ----------
        path
            The config file to write (checked as ``openclaw config validate`` would first).
        overrides
            What the run set on top of its config file; default: the session's own keyword
            arguments or ``--set`` values, read from its config's ``sources``.
        force
            Replace an existing file.
        """
        from openclaw_dask.diagnostics.fixes import fix_config, write_fixed

        if self.session is None or self.report is None:
            raise OpenclawError("apply_fix(): " + ("the block has not ended (or it raised), so there are no verdicts yet"
                                                   if self.session is not None else
                                                   "no openclaw session was profiled, so there is no config to fix; "
                                                   "open one with openclaw_dask.session() before the profile block"))
        config = self.session.config
        fixed = fix_config(config, run_overrides(config) if overrides is None else overrides, self.report.verdicts)
        write_fixed(fixed, path, force=force)
        return fixed

    def __repr__(self) -> str:
        if self.report is None:
            return "<openclaw profile: the block has not ended>"
        kinds = ", ".join(sorted(self.kinds())) or "no problems found"
        where = "" if self.path is None else f", report {self.path}"
        return f"<openclaw profile: {kinds}; {self.report.n_tasks} tasks, {self.report.wall_s:.2f} s{where}>"

    def _result(self) -> ProfileResult | None:
        from openclaw_dask.diagnostics.profile import ProfileResult

        return None if self.report is None or self.record is None else ProfileResult(self.report, self.record, None, 0)

    def _repr_html_(self) -> str:
        result = self._result()
        return "<p>openclaw profile: the block has not ended</p>" if result is None else result._repr_html_()

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str] | None:
        result = self._result()
        return None if result is None else result._repr_mimebundle_(include, exclude)


def run_overrides(config: Any) -> dict[str, Any]:
    """What a run set on top of its config file (keyword arguments, ``--set``), as the values were written."""
    import yaml

    out = {}
    for key, source in config.sources.items():
        label, _, assignment = source.partition(" ")
        if label in _OVERRIDE_LABELS and "=" in assignment:
            out[key] = yaml.safe_load(assignment.partition("=")[2])
    return out


@contextmanager
def profile(path: str | os.PathLike[str] | None = None, *, session: Session | None = None,
            force: bool = True) -> Iterator[Profile]:
    """Profile the computes of the ``with`` block; write an HTML report like ``openclaw profile --html``.

    >>> import openclaw_dask
    >>> with openclaw_dask.session(workers=2) as s, openclaw_dask.profile("report.html") as p:  # doctest: +SKIP
    ...     s.compute(s.array((10_000_000,), fill="random").sum())
    >>> p.verdicts                                                                          # doctest: +SKIP

    Parameters
    ----------
    path
        The HTML report (Bokeh inline: it opens offline), written when the block ends; ``None``:
        none, the yielded :class:`Profile` holds everything.
    session
        The session to record; default: the one ``openclaw run`` started, else the most recent
        open one. Plain dask computes inside the block run on it too, and are recorded. With no
        session open, plain dask computes are recorded on distributed's default client if there
        is one, else on dask's own schedulers in this process.
    force
        Replace an existing report (a notebook cell run twice); ``False`` refuses.

    Yields
    ------
    Profile
        Its ``report``, ``verdicts`` and ``record`` are filled in when the block ends without
        an error (a block that raises writes no report).

    Raises
    ------
    ConfigError
        ``path`` cannot be written (checked before the block runs: its folder is missing, it is
        a symbolic link, or it exists and ``force`` is false).
    """
    from openclaw_dask.diagnostics.analysis import analyze
    from openclaw_dask.diagnostics.collect import collect, collect_dask
    from openclaw_dask.files import check_target
    from openclaw_dask.session import current_session

    target = None if path is None else check_target(path, force=force)
    session = session if session is not None else current_session()
    if session is not None and (not session.started or session.closed):
        raise OpenclawError("profile(): the session is closed; profile inside its with-block")
    result = Profile(target, session)
    with collect(session) if session is not None else collect_dask() as record:
        yield result
    t0 = time.perf_counter()
    report = analyze(record)  # no chunk hint: what `openclaw profile script.py` knows of any code
    report.extra["analysis_s"] = time.perf_counter() - t0
    if session is not None:
        session.metrics.profiled(report)
    result.record, result.report = record, report
    if target is not None:
        from openclaw_dask.diagnostics.html import profile_layout, write_html

        write_html(profile_layout(report, record), target, "openclaw profile", force=force)
