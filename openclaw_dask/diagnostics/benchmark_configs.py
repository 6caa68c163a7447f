"""What a benchmark runs: config files crossed with ``KEY=V1,V2`` sweeps, each a labelled :class:`Configuration`."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openclaw_dask.config import Config
from openclaw_dask.errors import ConfigError
from openclaw_dask.loading import load_checked  # checked against its backend up front: a typo costs no run

__all__ = ["Configuration", "configurations", "unique_labels"]


@dataclass(frozen=True)
class Configuration:
    """A labelled configuration to benchmark."""

    label: str
    config: Config


def configurations(
    files: Iterable[str], sweeps: Iterable[str], base_overrides: dict[str, Any], *, config_path: str | None = None
) -> list[Configuration]:
    """Expand config files and ``KEY=v1,v2`` sweeps (cartesian product) into configurations.

    Without files the base configuration (``config_path`` or the usual discovery) is swept.

    Raises
    ------
    ConfigError
        A sweep is not ``KEY=V1,V2,...``, or a file, key or value does not check.
    """
    files = list(files)
    axes = [_axis(sweep) for sweep in sweeps]
    sources: list[str | None] = list(files) or [config_path]
    out = []
    for source in sources:
        for combo in itertools.product(*(values for _, values in axes)):
            chosen = list(zip((key for key, _ in axes), combo))
            config = load_checked(source, {**base_overrides, **dict(chosen)}, override_label="--sweep/--set")
            out.append(Configuration(_label(source if files else None, chosen), config))
    return out


def _label(file: str | None, chosen: list[tuple[str, Any]]) -> str:
    """``stem, key=value, ...``: the file's name (when files were given) and the last part of each swept key."""
    parts = [Path(file).stem] if file else []
    parts += [f"{key.rsplit('.', 1)[-1]}={value}" for key, value in chosen]
    return ", ".join(parts) or "default"


def _axis(sweep: str) -> tuple[str, list[Any]]:
    """``KEY=V1,V2`` as the key and its values, each read as ``--set`` reads one."""
    from openclaw_dask.config import parse_assignment

    key, raw = sweep.split("=", 1) if "=" in sweep else (sweep, "")
    values = [parse_assignment(f"{key}={v}")[1] for v in raw.split(",") if v.strip()]
    if not values:
        raise ConfigError(f"--sweep {sweep!r}: expected KEY=V1,V2,..., e.g. --sweep parallel.task_chunk_size=1MiB,64MiB")
    return key.strip(), values


def unique_labels(configs: list[Configuration]) -> list[Configuration]:
    """``x``, ``x#2``, ...: rows are matched by label, so no two may share one."""
    seen: dict[str, int] = {}
    out = []
    for c in configs:
        seen[c.label] = seen.get(c.label, 0) + 1
        out.append(c if seen[c.label] == 1 else Configuration(f"{c.label}#{seen[c.label]}", c.config))
    return out
