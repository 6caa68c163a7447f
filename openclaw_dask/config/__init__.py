"""Configuration: one YAML file, environment overrides and ``--set``, into a frozen :class:`Config`."""

from __future__ import annotations

from openclaw_dask.config.loader import (
    DEFAULT_FILENAME,
    changed_from_defaults,
    default_config_text,
    load_config,
    parse_assignment,
    write_default_config,
)
from openclaw_dask.config.model import ClusterConfig, Config, ParallelConfig, WorkloadConfig
from openclaw_dask.config.schema import KEYS, ChunkSize

__all__ = [
    "DEFAULT_FILENAME",
    "KEYS",
    "ChunkSize",
    "ClusterConfig",
    "Config",
    "ParallelConfig",
    "WorkloadConfig",
    "changed_from_defaults",
    "default_config_text",
    "load_config",
    "parse_assignment",
    "write_default_config",
]
