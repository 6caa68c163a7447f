"""``openclaw tune``: measure configurations of this machine for one workload or script; --write the fastest."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from openclaw_dask.cli._app import force_option, friendly, load, resolve_target, target_options, writable_parent
from openclaw_dask.errors import ConfigError

__all__ = ["tune"]


@target_options
@click.option("--budget", default="120s", show_default=True, help="Time for the trials, e.g. 60s or 5m.")
@click.option("--write", "write_path", type=click.Path(dir_okay=False), default=None, metavar="TUNED.yaml",
              help="Write the config with the winner's keys set (checked as `config validate` would); nothing if the current config is as good.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the table.")
@force_option
@friendly
def tune(target: str, script_args: tuple[str, ...], config_path: str | None, sets: tuple[str, ...], size: str | None,
         budget: str, write_path: str | None, as_json: bool, force: bool) -> None:
    """Find a fast backend, worker shape and chunk size for a workload or script, by measuring.

    Successive halving over thread/process backends, workers, threads per worker and
    task_chunk_size, seeded from this machine's cores and the current config; every
    finalist gets several runs. The leader is then run afresh against the current config and
    advised only if faster with confidence (Mann-Whitney U, p < 0.05, at least 5%); else
    --write writes nothing. Prints the ranking, the test and why.
    """
    from dask.utils import parse_timedelta

    from openclaw_dask.diagnostics.fixes import write_fixed
    from openclaw_dask.diagnostics.tune import tune as run_tune
    from openclaw_dask.diagnostics.tune import tuned_config
    from openclaw_dask.progress import status

    resolve_target(target, script_args)
    writable_parent(write_path, force)
    try:
        seconds = parse_timedelta(budget, default="s")
    except (ValueError, KeyError):
        raise ConfigError(f"--budget {budget}: not a duration; use e.g. 60s or 5m") from None
    cfg = load(config_path, sets, size)
    with status("openclaw tune", show=not as_json and sys.stderr.isatty()) as say:
        result = run_tune(cfg, target, script_args=script_args, budget_s=seconds, say=say)
    out = result.to_dict()
    if write_path and result.recommended:
        write_fixed(tuned_config(cfg, result), write_path, force=force)
        out["written"] = str(Path(write_path).resolve())
    elif write_path:  # the same file again would only add a comment: nothing is better with confidence
        out["written"] = None
    if as_json:
        click.echo(json.dumps(out, default=str))
        return
    from openclaw_dask.diagnostics.terminal import print_tune

    print_tune(result)
    if write_path:
        click.echo(f"wrote {out['written']}" if out["written"] else
                   f"wrote nothing to {write_path}: no configuration tried is better than the current one with confidence")
