"""``openclaw run``: a built-in workload or a Python script on the configured cluster."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from openclaw_dask.cli._app import friendly, load, resolve_target, target_options
from openclaw_dask.errors import ResultMismatch, RunError

__all__ = ["run"]


@target_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the summary.")
@friendly
def run(target: str, script_args: tuple[str, ...], config_path: str | None, sets: tuple[str, ...], size: str | None, as_json: bool) -> None:
    """Run a built-in workload (default array-sum) or a Python script on the configured cluster.

    A script's own arguments follow its path. Inside it, openclaw_dask.session()
    with no arguments returns the session started here.
    """
    from openclaw_dask.scripts import run_file, run_workload

    is_script = resolve_target(target, script_args)
    cfg = load(config_path, sets, size)
    if is_script:
        _report_script(run_file(cfg, Path(target), script_args), as_json)
    else:
        _report_workload(run_workload(cfg, target, progress=not as_json and sys.stderr.isatty()), target, as_json)


def _report_workload(result: Any, name: str, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(result.to_dict()))
    else:
        from openclaw_dask.diagnostics.terminal import print_run_summary

        print_run_summary(result)
    if not result.ok:
        raise ResultMismatch(f"{name}: {result.mismatch}")
    if getattr(result, "invalid", None):
        raise RunError(f"{name}: {result.invalid}")


def _report_script(summary: dict[str, Any], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(summary))
    elif summary["workers_lost"]:  # the script's own output is on stdout; this is openclaw's
        from openclaw_dask.diagnostics.terminal import recovery_line

        line = recovery_line(summary["workers_lost"], summary["tasks_recomputed"], summary["failures_recovered"])
        click.echo(f"openclaw: {line}", err=True)
    if summary["exit_code"]:
        sys.exit(summary["exit_code"])
