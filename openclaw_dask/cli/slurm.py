"""``openclaw slurm script``: the job script each worker job of a backend slurm session runs."""

from __future__ import annotations

import click

from openclaw_dask.cli._app import config_option, friendly, main, overrides, set_option

__all__ = ["slurm"]


@main.group()
def slurm() -> None:
    """Slurm: the worker jobs of backend slurm (dask-jobqueue's SLURMCluster)."""


@slurm.command()
@config_option
@set_option
@friendly
def script(config_path: str | None, sets: tuple[str, ...]) -> None:
    """Print the job script a session submits for each worker job.

    The config is read as backend slurm, whatever parallel.backend says. Check it with
    `openclaw slurm script --set parallel.workers=8 --set slurm.partition=compute | sbatch --test-only`;
    a session fills in its scheduler's address where the script shows SCHEDULER-ADDRESS.
    """
    from openclaw_dask.cluster.slurm import script_text
    from openclaw_dask.config.keys import BACKEND

    click.echo(script_text(config_path, {**overrides(sets), BACKEND: "slurm"}), nl=False)
