"""Apply verdicts' ``overrides`` to a config file: ``openclaw profile --apply-fix`` (and ``openclaw tune``).

The fixed file is the input file (or the packaged defaults) with each overridden key
set in place: comments, key order and sections stay as they were, a key the file
lacks is added to its section, and a section it lacks is added at the end.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openclaw_dask.config.loader import default_config_text
from openclaw_dask.config.schema import key_by_name
from openclaw_dask.errors import ConfigError

__all__ = ["PRIORITY", "Change", "FixedConfig", "apply_overrides", "fix_config", "merge_overrides", "write_fixed"]

# When two verdicts set the same key differently, the first kind here wins: tasks too small
# to pay for their scheduling are a certain cost; halving chunks for memory or balance is a guess.
PRIORITY = ("overhead-bound", "memory-pressure", "load-imbalance", "transfer-bound")
_UNITS = {"GiB": 2**30, "MiB": 2**20, "KiB": 2**10}


@dataclass(frozen=True)
class Change:
    """One key the fixed file sets: its new value, its value before (the run's; the file's for the run's own --set), and why."""

    key: str
    value: Any
    before: Any
    reason: str  # a verdict kind, or "--set" for the run's own overrides


@dataclass(frozen=True)
class FixedConfig:
    """The text of a fixed config file and what it changes."""

    text: str
    base: Path | None  # the file it was made from; None: the packaged defaults
    changes: list[Change] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"base": str(self.base) if self.base else None,
                "changes": [{"key": c.key, "value": c.value, "before": c.before, "reason": c.reason} for c in self.changes]}


def merge_overrides(verdicts: Iterable[Any]) -> dict[str, tuple[Any, str]]:
    """All verdicts' ``overrides`` in one mapping: dotted key -> (value, verdict kind).

    Conflicting values for one key are settled by :data:`PRIORITY`.
    """
    rank = {kind: i for i, kind in enumerate(PRIORITY)}
    merged: dict[str, tuple[Any, str]] = {}
    for v in sorted(verdicts, key=lambda v: rank.get(v.kind, len(PRIORITY))):
        for key, value in v.overrides.items():
            merged.setdefault(_dotted(key), (value, v.kind))
    return merged


def base_text(config: Any) -> tuple[Path | None, str]:
    """The file ``config`` was read from and its text; ``(None, the packaged defaults)`` without one."""
    base = Path(config.path) if config.path else None
    return base, base.read_text("utf-8") if base else default_config_text()


def fix_config(config: Any, run_overrides: Mapping[str, Any], verdicts: Iterable[Any]) -> FixedConfig:
    """The config file ``config`` was read from, with the run's overrides and the verdicts' fixes applied.

    Parameters
    ----------
    config
        The run's :class:`~openclaw_dask.config.Config`; its ``path`` (or the packaged
        defaults) is the base text.
    run_overrides
        What the run set on top of the file (``--set``, ``--size``): part of the run the
        verdicts describe. Environment variables are not written: they still apply.
    verdicts
        The profile's verdicts; their ``overrides`` beat ``run_overrides``.
    """
    from openclaw_dask.config import load_config as parse_only

    wanted = {_dotted(k): (v, "--set") for k, v in run_overrides.items()}
    wanted.update(merge_overrides(verdicts))
    base, text = base_text(config)
    fixed = apply_overrides(text, {k: v for k, (v, _) in wanted.items()})
    file_alone = parse_only(config.path, env={})  # what the run's own --set changed it from (not "1 -> 1")
    changes = [Change(k, v, _before(file_alone if why == "--set" else config, k), why) for k, (v, why) in wanted.items()]
    return FixedConfig(fixed, base, changes)


def write_fixed(fixed: FixedConfig, path: str | os.PathLike[str], *, force: bool = False) -> Path:
    """Check ``fixed`` as ``openclaw config validate`` would, then write it to ``path``.

    The file is written as :mod:`openclaw_dask.files` writes: never over an existing file
    without ``force``, never through a symbolic link, whole or not at all.

    Raises
    ------
    ConfigError
        The fixed config does not validate (nothing is written), ``path`` exists (without
        ``force``) or is a symbolic link, or it cannot be written.
    """
    from openclaw_dask.files import replacing
    from openclaw_dask.loading import load_checked as load_config

    target = Path(path)
    # The draft sits beside the target: relative paths in a config file are relative to the file.
    with replacing(target, force=force) as (f, draft):
        f.write(fixed.text)
        f.flush()
        try:
            load_config(draft, env={})  # the file alone, as `openclaw config validate` reads it
        except ConfigError as e:
            raise ConfigError(f"the fixed config does not validate, so {target} was not written: "
                              + str(e).replace(str(draft), str(target))) from None
    return target


def apply_overrides(text: str, overrides: Mapping[str, Any]) -> str:
    """Set dotted keys in the YAML text of a config file, keeping its comments and layout.

    A round trip through ruamel.yaml, which keeps comments, key order and flow or block
    style: what it is built for, so no YAML is edited by hand here.

    Parameters
    ----------
    text
        A config file's text (sections of keys, and the ``dask:`` section).
    overrides
        Dotted (``parallel.workers``) or bare (``workers``) key names, or
        ``dask.<dotted.dask.key>``, to values as ``--set`` reads them (``"19MiB"``, ``2``).

    Returns
    -------
    str
        The new text; a key the file lacks is added to its section, a missing section at the end.
    """
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap

    rt = YAML()  # round-trip mode
    # a null the file wrote stays `null` (ruamel's round trip writes an empty value instead)
    rt.representer.add_representer(type(None), lambda r, _: r.represent_scalar("tag:yaml.org,2002:null", "null"))
    data = rt.load(text) or CommentedMap()
    for name, value in overrides.items():
        *parents, last = _path(name)
        here = data
        for part in parents:
            if not isinstance(here.get(part), dict):
                here[part] = CommentedMap()
            here = here[part]
        here[last] = value
    out = io.StringIO()
    rt.dump(data, out)
    return out.getvalue()


# -- key names --------------------------------------------------------------------------------


def _dotted(name: str) -> str:
    if name.startswith("dask."):
        return name
    key = key_by_name(name)
    if key is None:
        raise ConfigError(f"unknown key {name}; it cannot go into a config file")
    return key.dotted


def _path(name: str) -> list[str]:
    dotted = _dotted(name)
    if dotted.startswith("dask."):
        return ["dask", *dotted[len("dask."):].split(".")]
    return dotted.split(".", 1)


def _before(config: Any, dotted: str) -> Any:
    """The run's value of a key, as text a person reads (``64KiB`` stays a number of bytes)."""
    from openclaw_dask.config.model import plain

    if dotted.startswith("dask."):
        return config.dask.get(dotted[len("dask."):])
    value = config.get(dotted)
    if getattr(value, "kind", None) == "bytes":  # a ChunkSize: 65536 reads better as 64KiB
        n = value.value
        unit = next((u for u in ("GiB", "MiB", "KiB") if n % _UNITS[u] == 0), None)
        return f"{n // _UNITS[unit]}{unit}" if unit else str(n)
    return plain(value)
