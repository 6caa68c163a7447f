"""``openclaw config show``, ``openclaw config reference`` and ``openclaw config validate``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from openclaw_dask.cli._app import config_option, friendly, load, main, set_option

__all__ = ["config_rows", "validate_file"]


def config_rows(cfg: Any) -> list[tuple[str, Any, str]]:
    """``(dotted key, value, source)`` for every key, then the ``dask:`` section's, in schema order."""
    from openclaw_dask.config.model import plain

    rows = [(k, plain(v), cfg.sources[k]) for k, v in cfg.items()]
    return rows + [(f"dask.{k}", plain(v), "dask section") for k, v in cfg.dask.items()]


def validate_file(path: str | Path) -> Any:
    """Load the file alone (not this shell's ``OPENCLAW_*`` variables) with every check; return the Config.

    Raises
    ------
    ConfigError
        The file is missing, not a regular file, too large, or fails a check (the first problem
        found; :mod:`openclaw_dask.config.reading` says what is read and how).
    """
    from openclaw_dask.loading import load_checked as load_config

    return load_config(path, env={})


@main.group()
def config() -> None:
    """Show or check configuration."""


@config.command("show")
@config_option
@set_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@friendly
def config_show(config_path: str | None, sets: tuple[str, ...], as_json: bool) -> None:
    """Print the effective value of every key and where it came from."""
    from openclaw_dask.cluster.registry import declared_for
    from openclaw_dask.diagnostics.resolved import resolved_autos

    cfg = load(config_path, sets)
    rows = config_rows(cfg)
    computed = declared_for(cfg).describe(cfg)  # e.g. the cuda backend's byte limits per GPU
    autos = resolved_autos(cfg)  # what each auto comes to on this machine
    if as_json:
        out: dict[str, Any] = {k: {"value": v, "source": src, **({"resolved": autos[k]} if k in autos else {})}
                               for k, v, src in rows}
        click.echo(json.dumps({**out, "computed": computed} if computed else out, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    from openclaw_dask.config.schema import key_by_name
    from openclaw_dask.config.values import as_written

    table = Table(title=f"openclaw config ({cfg.path or 'defaults only'})")
    for col in ("key", "value", "source"):
        table.add_column(col)
    for k, v, src in rows:  # as the YAML would say it: true, null, 1GiB, 10m
        key = key_by_name(k)
        value = as_written(v, key.unit if key is not None else None)
        table.add_row(k, f"{value} (= {autos[k]})" if k in autos else value, src, style=None if src == "default" else "bold")
    console = Console()
    console.print(table)
    for line in computed:
        console.print(f"computed: {line}")


@config.command("reference")
def config_reference() -> None:
    """Print every key, its default and what it does, as Markdown (docs/configuration.md)."""
    from openclaw_dask.config.reference import config_reference as reference

    click.echo(reference(), nl=False)


@config.command("validate")
@click.argument("path", type=click.Path(dir_okay=False))
@friendly
def config_validate(path: str) -> None:
    """Check a config file; exit 2 with the first problem found."""
    cfg = validate_file(path)
    changed = sum(src != "default" for src in cfg.sources.values())
    click.echo(f"{path}: valid ({changed} keys set, backend {cfg.parallel.backend})")
