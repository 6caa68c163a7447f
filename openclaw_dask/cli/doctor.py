"""``openclaw doctor``: check this machine against a config; exit 1 when a check fails."""

from __future__ import annotations

import json
import sys

import click

from openclaw_dask.cli._app import config_option, friendly, main, overrides, set_option

__all__ = ["doctor"]

_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red"}


@main.command()
@config_option
@set_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@friendly
def doctor(config_path: str | None, sets: tuple[str, ...], as_json: bool) -> None:
    """Check cores, memory, disk, MPI, GPUs, network, SSH hosts, TLS, versions, and a start of the backend.

    Each check says ok, warn or fail, what it found, and the fix. The config is read
    without the backend's own checks, so what this machine lacks is reported, not refused.
    """
    from openclaw_dask.config import load_config
    from openclaw_dask.diagnostics.doctor import doctor as run_doctor

    report = run_doctor(load_config(config_path, overrides(sets, None), override_label="--set"))
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table

        table = Table(title="openclaw doctor")
        for col in ("check", "", "found", "fix"):
            table.add_column(col, overflow="fold")
        for c in report.checks:
            table.add_row(c.area, f"[{_STYLE[c.status]}]{c.status}[/]", escape(c.found), escape(c.fix))
        Console().print(table)
    if not report.ok:
        sys.exit(1)
