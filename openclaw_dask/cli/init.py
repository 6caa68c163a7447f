"""``openclaw init``: write a commented config file with every key at its default."""

from __future__ import annotations

import click

from openclaw_dask.cli._app import force_option, friendly, main

__all__ = ["init"]


@main.command()
@click.argument("path", required=False, default=None, type=click.Path())
@force_option
@friendly
def init(path: str | None, force: bool) -> None:
    """Write a commented openclaw_config.yaml (to PATH, or into PATH if it is a folder)."""
    from openclaw_dask.config import KEYS, write_default_config

    target = write_default_config(path, force=force)
    click.echo(f"wrote {target.resolve()} ({len(KEYS)} keys, all at their defaults)")
    click.echo("next: edit it, then `openclaw run array-sum` (check it with `openclaw config validate`)")
