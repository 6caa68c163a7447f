"""``openclaw profile``: run a workload or script under the profiler; optionally write the fixed config."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from openclaw_dask.cli._app import (
    fail,
    force_option,
    friendly,
    load,
    overrides,
    resolve_target,
    target_options,
    writable_parent,
)
from openclaw_dask.errors import ConfigError

__all__ = ["profile"]


def _fix_lines(fixed: Any, path: Path) -> list[str]:
    """What ``--apply-fix`` wrote, for the terminal."""
    lines = [f"wrote {path.resolve()} (from {fixed.base or 'the packaged defaults'}):"]
    for c in fixed.changes:
        if c.reason == "--set":
            lines.append(f"  {c.key}: {c.value}  (this run's --set)")
        else:
            lines.append(f"  {c.key}: {c.before} -> {c.value}  (fixes {c.reason})")
    if not any(c.reason != "--set" for c in fixed.changes):
        lines.append("  no verdict has a config fix: the file is this run's config as it was")
    return lines


@target_options
@click.option("--html", "html_path", type=click.Path(dir_okay=False), default=None, help="Also write a self-contained Bokeh report.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the tables.")
@click.option("--apply-fix", "fix_path", type=click.Path(dir_okay=False), default=None, metavar="FIXED.yaml",
              help="Write this run's config, with its --set and the verdicts' overrides applied, to FIXED.yaml (checked as `config validate` would).")
@force_option
@friendly
def profile(target: str, script_args: tuple[str, ...], config_path: str | None, sets: tuple[str, ...], size: str | None,
            html_path: str | None, as_json: bool, fix_path: str | None, force: bool) -> None:
    """Run a workload or script and report per-worker load, skew, stragglers and fixes.

    Plant a problem to see its verdict (data-skew, stragglers, overhead-bound), on any machine:

    \b
      openclaw profile --size 256MiB -s workload.skew=10 \\
          -s parallel.task_chunk_size=16MiB
      openclaw profile --size 256MiB -s workload.straggler=1s \\
          -s parallel.task_chunk_size=16MiB
      openclaw profile --size 64MiB -s parallel.task_chunk_size=64KiB

    Many chunks, so one 10x bigger or 1 s slower stands out and costs the run time. Then
    --apply-fix fixed.yaml writes the config with the verdicts' fixes applied.
    """
    from openclaw_dask.diagnostics.fixes import fix_config, write_fixed
    from openclaw_dask.diagnostics.profile import profile_config

    is_script = resolve_target(target, script_args)
    if html_path and fix_path and Path(html_path).absolute() == Path(fix_path).absolute():
        raise ConfigError(f"--html and --apply-fix both name {html_path}; give each its own file")
    writable_parent(html_path, force)
    writable_parent(fix_path, force)
    cfg = load(config_path, sets, size)
    result = profile_config(cfg, target, script_args, progress=not as_json and sys.stderr.isatty())
    out = result.to_dict()
    fixed = None
    if fix_path:  # before any output: a fix that does not validate is an error, and nothing is written
        fixed = fix_config(cfg, overrides(sets, size), result.report.verdicts)
        write_fixed(fixed, fix_path, force=force)
        out["apply_fix"] = {"path": str(Path(fix_path).resolve()), **fixed.to_dict()}
    if html_path:
        from openclaw_dask.diagnostics.html import profile_layout, write_html

        write_html(profile_layout(result.report, result.record), html_path, "openclaw profile", force=force)
    if as_json:
        click.echo(json.dumps(out, default=str))
    else:
        from openclaw_dask.diagnostics.terminal import print_profile

        print_profile(result.report)
        if html_path:
            click.echo(f"wrote {Path(html_path).resolve()}")
        if fixed is not None and fix_path:
            click.echo("\n".join(_fix_lines(fixed, Path(fix_path))))
    if result.exit_code:
        fail(f"{'script' if is_script else target} failed (exit code {result.exit_code})", result.exit_code)
