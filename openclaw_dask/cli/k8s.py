"""``openclaw k8s manifest``: the DaskCluster resource of a config, for ``kubectl apply -f -``."""

from __future__ import annotations

import click

from openclaw_dask.cli._app import config_option, friendly, main, overrides, set_option

__all__ = ["k8s"]


@main.group()
def k8s() -> None:
    """Kubernetes: the DaskCluster resource of backend kubernetes (dask-kubernetes' operator)."""


@k8s.command()
@config_option
@set_option
@friendly
def manifest(config_path: str | None, sets: tuple[str, ...]) -> None:
    """Print the DaskCluster resource the config describes, as YAML.

    The config is read as backend kubernetes, whatever parallel.backend says. Apply it with
    `openclaw k8s manifest --set parallel.workers=8 | kubectl apply -f -` (add --dry-run=client
    to check it first); the dask-kubernetes operator must be installed in the cluster.
    """
    from openclaw_dask.cluster.kubernetes import manifest_yaml
    from openclaw_dask.config.keys import BACKEND

    click.echo(manifest_yaml(config_path, {**overrides(sets), BACKEND: "kubernetes"}), nl=False)
