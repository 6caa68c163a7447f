"""Read, merge and validate configuration layers into one frozen :class:`Config`.

Precedence, lowest first: packaged defaults, the YAML file, ``OPENCLAW_<KEY>``
environment variables, explicit overrides (``--set`` on the CLI, keyword arguments
in Python). Every error names the dotted key, the value received, what is allowed,
and where the value came from.
"""

from __future__ import annotations

import difflib
import functools
import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from openclaw_dask.config import checks, reading
from openclaw_dask.config.model import Config
from openclaw_dask.config.schema import KEYS, SECTION_CLASSES, SECTIONS, Invalid, key_by_name
from openclaw_dask.config.template import default_config_text
from openclaw_dask.errors import REDACTED, ConfigError, format_value, shorten

__all__ = ["DEFAULT_FILENAME", "default_config_text", "load_config", "parse_assignment", "write_default_config"]

DEFAULT_FILENAME = "openclaw_config.yaml"
# Environment variables of openclaw's own that are not configuration keys.
RESERVED_ENV = frozenset({"OPENCLAW_CONFIG"})

_Layer = dict[str, tuple[Any, str]]  # dotted key -> (raw value, source)
logger = logging.getLogger("openclaw_dask.config")


def write_default_config(path: str | os.PathLike[str] | None = None, *, force: bool = False) -> Path:
    """Write the packaged, commented defaults file (``openclaw init``); return where it went.

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
        The file exists (without ``force``), is a symbolic link (even with ``force``), or its
        folder does not exist (:mod:`openclaw_dask.files`: never a half-written file).
    """
    from openclaw_dask.files import write_file

    target = Path(path or DEFAULT_FILENAME)
    if target.is_dir() and not target.is_symlink():
        target = target / DEFAULT_FILENAME
    return write_file(target, default_config_text(), force=force)


def _suggest(name: str, candidates: list[str]) -> str:
    match = difflib.get_close_matches(name[:200], candidates, n=1, cutoff=0.6)
    if match:
        return f"did you mean {match[0]}?"
    known = ", ".join(candidates)
    return f"known keys: {known}" if len(known) <= 120 else "`openclaw config reference` lists every key"


def _unknown_key(dotted: str, where: str) -> ConfigError:
    section, _, name = dotted.partition(".")
    elsewhere = key_by_name(name)
    if elsewhere is not None and elsewhere.section != section:
        return ConfigError(f"unknown key {shorten(dotted)}", key=dotted, source=where,
                           hint=f"it belongs to section {elsewhere.section}: write {elsewhere.dotted}")
    names = [k.dotted for k in KEYS if k.section == section] or [k.dotted for k in KEYS]
    return ConfigError(f"unknown key {shorten(dotted)}", key=dotted, source=where, hint=_suggest(dotted, names))


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, Mapping) and value:
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif prefix:
        out[prefix] = value


def _read_file(path: Path) -> tuple[_Layer, dict[str, Any]]:
    """Parse one YAML file into a layer of typed-section keys and a flat dask mapping."""
    data, lines = reading.parse_yaml(reading.read_text(path), str(path))  # bounded: size, expansion, depth
    if data is None:
        return {}, {}
    if not isinstance(data, dict):
        raise ConfigError(f"the file must be a mapping of sections ({', '.join(SECTIONS)}), got {type(data).__name__}",
                          source=f"{path}:1")

    layer: _Layer = {}
    dask_cfg: dict[str, Any] = {}
    for section, body in data.items():
        where = f"{path}:{lines.get(str(section), 1)}"
        if section not in SECTIONS:
            raise ConfigError(f"unknown section {shorten(repr(section))}", source=where, hint=_suggest(str(section), list(SECTIONS)))
        if body is None:
            continue
        if not isinstance(body, dict):
            raise ConfigError(f"section {section} must be a mapping of keys, got {format_value(body)}", source=where)
        if section == "dask":
            _flatten("", body, dask_cfg)
            continue
        for name, value in body.items():
            dotted = f"{section}.{name}"
            where = f"{path}:{lines.get(dotted, 1)}"
            if key_by_name(dotted) is None:
                raise _unknown_key(dotted, where)
            layer[dotted] = (value, where)
    return layer, dask_cfg


def _parse_scalar(text: str) -> Any:
    """Read a value from the environment or ``--set`` the way YAML would read it (as bounded as a file)."""
    try:
        return reading.parse_yaml(text, "--set")[0] if text.strip() else None
    except ConfigError:  # not YAML: the text itself, which the key's own check then judges
        return text


def _env_layer(env: Mapping[str, str]) -> _Layer:
    layer: _Layer = {}
    env_names = {k.env: k for k in KEYS}
    for var, text in env.items():
        if not var.startswith("OPENCLAW_") or var in RESERVED_ENV:
            continue
        key = env_names.get(var)
        if key is None:  # may belong to another tool: say so, but do not refuse to run
            logger.warning(
                "environment variable %s is not an openclaw setting; %s; it has no effect",
                var, _suggest(var, sorted(env_names)),
            )
            continue
        layer[key.dotted] = (_parse_scalar(text), f"env {var}={REDACTED if key.secret else shorten(text, 40)}")
    return layer


def parse_assignment(text: str) -> tuple[str, Any]:
    """Split a ``--set KEY=VALUE`` argument; the value is read as YAML (``2``, ``false``, ``64MiB``)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError("expected KEY=VALUE, e.g. --set parallel.workers=2", source=f"--set {text!r}")
    return key.strip(), _parse_scalar(value)


def _override_layer(overrides: Mapping[str, Any], label: str) -> tuple[_Layer, dict[str, Any]]:
    layer: _Layer = {}
    dask_cfg: dict[str, Any] = {}
    for name, value in overrides.items():
        key = key_by_name(name)
        where = f"{label} {name}={REDACTED if key is not None and key.secret else shorten(value, 40)}"  # "got" shows more
        if name.startswith("dask."):
            if not name[len("dask."):].strip("."):
                raise ConfigError("a dask key needs a name after 'dask.', e.g. dask.array.chunk-size=32MiB", source=where)
            _flatten(name[len("dask."):], value, dask_cfg)
            continue
        if key is None:
            if "." in name:
                raise _unknown_key(name, where)
            raise ConfigError(f"unknown key {name}", key=name, source=where, hint=_suggest(name, [k.name for k in KEYS]))
        layer[key.dotted] = (value, where)
    return layer, dask_cfg


def _discover(path: str | os.PathLike[str] | None, env: Mapping[str, str]) -> Path | None:
    if path is not None:
        return Path(path)
    if env.get("OPENCLAW_CONFIG"):
        return Path(env["OPENCLAW_CONFIG"])
    candidate = Path(DEFAULT_FILENAME)  # relative, so messages stay short
    return candidate if candidate.is_file() else None


def _build(merged: _Layer, dask_cfg: dict[str, Any], file: Path | None) -> Config:
    """Coerce every merged value by its schema key into the frozen :class:`Config`."""
    values: dict[str, Any] = {}
    for key in KEYS:
        raw, where = merged[key.dotted]
        try:
            values[key.dotted] = key.coerce(raw)
        except Invalid as e:  # a secret's value (a token?) is never echoed
            raise ConfigError(key=key.dotted, value=REDACTED if key.secret else raw, source=where, allowed=str(e)) from None
    return Config(
        **{name: cls(**{k.name: values[k.dotted] for k in KEYS if k.section == name}) for name, cls in SECTION_CLASSES.items()},
        dask=MappingProxyType(dask_cfg),
        sources=MappingProxyType({k: src for k, (_, src) in merged.items()}),
        path=file.resolve() if file is not None else None,
    )


@functools.cache
def _default_layer() -> MappingProxyType[str, tuple[Any, str]]:
    """The declared defaults as a layer."""
    return MappingProxyType({k.dotted: (k.default, "default") for k in KEYS})


@functools.cache
def packaged_defaults() -> Config:
    """The packaged defaults alone: no file, environment or overrides (what "not set" means)."""
    return _build(dict(_default_layer()), {}, None)


def changed_from_defaults(config: Config, keys: Iterable[str]) -> list[str]:
    """Those of ``keys`` (dotted) whose value in ``config`` is not the packaged default, in the given order."""
    default = packaged_defaults()
    return [key for key in keys if config.get(key) != default.get(key)]


def load_config(
    path: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    override_label: str = "argument",
) -> Config:
    """Build the effective configuration.

    Parameters
    ----------
    path
        A YAML file. ``None`` uses ``$OPENCLAW_CONFIG``, else ``./openclaw_config.yaml``
        if it exists, else the packaged defaults alone.
    overrides
        Highest-precedence values, keyed by dotted name (``parallel.workers``), bare
        name (``workers``), or ``dask.<dotted.dask.key>``.
    env
        The environment to read ``OPENCLAW_<KEY>`` from (default ``os.environ``).
    override_label
        How errors name the origin of ``overrides`` (the CLI passes ``--set``).

    Returns
    -------
    Config
        Frozen; its keys, values and backend-independent combinations are checked. The
        rules of the backend it names are checked by ``openclaw_dask.load_config`` (which
        calls this) and again when a session starts.

    Raises
    ------
    ConfigError
        For an unknown key, a bad value, or a combination this build cannot run.
    """
    env = os.environ if env is None else env
    layers: list[_Layer] = [dict(_default_layer())]
    dask_cfg: dict[str, Any] = {}
    file = _discover(path, env)
    if file is not None:
        file_layer, file_dask = _read_file(file)
        layers.append(file_layer)
        dask_cfg.update(file_dask)
    layers.append(_env_layer(env))
    over_layer, over_dask = _override_layer(overrides or {}, override_label)
    layers.append(over_layer)
    dask_cfg.update(over_dask)

    merged: _Layer = {}
    for layer in layers:
        merged.update(layer)
    config = _build(merged, dask_cfg, file)
    checks.check(config)
    return config
