"""``openclaw init``: write a commented config file with every key at its default."""

from __future__ import annotations

from pathlib import Path

import click

from openclaw_dask.cli._app import friendly, main
from openclaw_dask.errors import ConfigError

__all__ = ["write_config"]


def write_config(path: str | Path | None = None, force: bool = False) -> Path:
    """Write the packaged, commented defaults file; return where it went.

    Parameters
    ----------
    path
        A file, or a folder to write ``openclaw_config.yaml`` into (default: that
        name in the current folder).
    force
        Overwrite an existing file.

    Raises
    ------
    ConfigError
        The file exists (without ``force``), or its folder does not.
    """
    from openclaw_dask.config import DEFAULT_FILENAME, default_config_text

    target = Path(path or DEFAULT_FILENAME)
    if target.is_dir():
        target = target / DEFAULT_FILENAME
    if target.exists() and not force:
        raise ConfigError(f"{target} already exists; edit it, or pass --force to overwrite it")
    if not target.parent.is_dir():
        raise ConfigError(f"cannot write {target}: folder {target.parent} does not exist; create it first")
    target.write_text(default_config_text(), "utf-8")
    return target


@main.command()
@click.argument("path", required=False, default=None, type=click.Path())
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
@friendly
def init(path: str | None, force: bool) -> None:
    """Write a commented openclaw_config.yaml (to PATH, or into PATH if it is a folder)."""
    from openclaw_dask.config import KEYS

    target = write_config(path, force)
    click.echo(f"wrote {target.resolve()} ({len(KEYS)} keys, all at their defaults)")
    click.echo("next: edit it, then `openclaw run array-sum` (check it with `openclaw config validate`)")
