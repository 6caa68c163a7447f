"""``openclaw scheduler`` and ``openclaw worker``: the dask processes of a deployment, shaped by the config."""

from __future__ import annotations

import sys
from typing import Any

import click

from openclaw_dask.cli._app import config_option, friendly, main, overrides, set_option

__all__ = ["load_deploy_config"]

_DRY_RUN = click.option("--dry-run", is_flag=True, help="Print the command (and the dask settings it passes) instead of running it.")


def load_deploy_config(config_path: str | None, sets: tuple[str, ...] = ()) -> Any:
    """The config without the client's backend checks: ``scheduler_command``/``worker_command`` check it as a deployment.

    One file can then hold ``backend: remote`` and the address for clients, and the workers' settings.
    """
    from openclaw_dask.config import load_config

    return load_config(config_path, overrides(sets), override_label="--set")


def _exec(cmd: Any, dry_run: bool) -> None:
    import os
    import shlex

    if dry_run:
        click.echo(shlex.join(cmd.argv))
        for key, value in cmd.settings.items():
            click.echo(f"  dask config {key} = {value}")
        return
    sys.stdout.flush()
    os.execve(cmd.argv[0], cmd.argv, cmd.env) if os.path.isabs(cmd.argv[0]) else os.execvpe(cmd.argv[0], cmd.argv, cmd.env)


@main.command()
@config_option
@set_option
@click.option("--port", type=click.IntRange(0, 65535), default=None, help="Default: the port of cluster.scheduler_address, else 8786.")
@click.option("--scheduler-file", default=None, type=click.Path(dir_okay=False), help="Write the scheduler's address here.")
@_DRY_RUN
@friendly
def scheduler(config_path: str | None, sets: tuple[str, ...], port: int | None, scheduler_file: str | None, dry_run: bool) -> None:
    """Run a dask scheduler shaped by the config (host or interface, protocol, TLS, timeouts, preloads)."""
    from openclaw_dask.cluster.deploy import require_free_port, scheduler_command

    config = load_deploy_config(config_path, sets)
    cmd = scheduler_command(config, port=port, scheduler_file=scheduler_file)
    if not dry_run:
        require_free_port(config, int(cmd.argv[cmd.argv.index("--port") + 1]))
    _exec(cmd, dry_run)


@main.command()
@click.argument("address", required=False, default=None)
@config_option
@set_option
@click.option("--scheduler-file", default=None, type=click.Path(dir_okay=False), help="Read the scheduler's address from here.")
@_DRY_RUN
@friendly
def worker(address: str | None, config_path: str | None, sets: tuple[str, ...], scheduler_file: str | None, dry_run: bool) -> None:
    """Run parallel.workers dask worker processes for the scheduler at ADDRESS (default: cluster.scheduler_address)."""
    from openclaw_dask.cluster.deploy import worker_command

    _exec(worker_command(load_deploy_config(config_path, sets), address, scheduler_file=scheduler_file), dry_run)
