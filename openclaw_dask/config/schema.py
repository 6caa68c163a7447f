"""Every configuration key, derived from its one declaration.

A key is declared once, as a field of its section's dataclass in :mod:`openclaw_dask.config.model`
(the field's :func:`~openclaw_dask.config.model.setting` holds its coercer, default and help
text). This module reads those declarations into :data:`KEYS`, the flat view the loader, the
defaults file and the docs use; nothing here lists a key or a section by hand.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from openclaw_dask.config import model
from openclaw_dask.config.values import (
    ENGINES,
    MAX_CHUNKS,
    SOCKET_BUFFER_RANGE,
    STRATEGIES,
    ChunkSize,
    Invalid,
)

__all__ = ["ENGINES", "KEYS", "MAX_CHUNKS", "SECTIONS", "SECTION_CLASSES", "SOCKET_BUFFER_RANGE",
           "STRATEGIES", "TYPED_SECTIONS", "ChunkSize", "Invalid", "Key", "declared_keys", "key_by_name",
           "section_classes"]


@dataclass(frozen=True)
class Key:
    """One configuration key, as its field in :mod:`~openclaw_dask.config.model` declares it.

    Parameters
    ----------
    section, name
        The key is spelled ``section.name`` in files and ``--set``, and
        ``OPENCLAW_<NAME>`` in the environment (names are unique across sections).
    coerce
        Turns a raw value into the typed value, or raises :class:`Invalid`.
    default
        The default, as the defaults file writes it (coerced like any value).
    doc
        The help text (the defaults file's comment; the docs' row).
    secret
        Values may be tokens: never echoed in a message.
    """

    section: str
    name: str
    coerce: Callable[[Any], Any]
    default: Any = field(default=None, hash=False)  # may be [] or {}
    doc: str = ""
    secret: bool = False

    @property
    def range(self) -> str:
        """The values a numeric key accepts, e.g. ``1 to 1000`` (empty for other keys)."""
        return getattr(self.coerce, "range", "")

    @property
    def unit(self) -> str | None:
        """``bytes`` or ``seconds`` for sizes and durations (how ``config show`` writes the value), else ``None``."""
        return getattr(self.coerce, "unit", None)

    @property
    def dotted(self) -> str:
        return f"{self.section}.{self.name}"

    @property
    def env(self) -> str:
        return f"OPENCLAW_{self.name.upper()}"


def section_classes(config: type) -> dict[str, type]:
    """The typed sections of a config class: its fields whose type is a dataclass, in their order."""
    hints = typing.get_type_hints(config)
    return {f.name: hints[f.name] for f in dataclasses.fields(config) if dataclasses.is_dataclass(hints[f.name])}


def declared_keys(config: type) -> tuple[Key, ...]:
    """Every key of a config class: one per field of each section, from the field's ``setting``."""
    return tuple(Key(section, f.name, **f.metadata)
                 for section, cls in section_classes(config).items() for f in dataclasses.fields(cls))


SECTION_CLASSES: Mapping[str, type] = MappingProxyType(section_classes(model.Config))
TYPED_SECTIONS: tuple[str, ...] = tuple(SECTION_CLASSES)
SECTIONS: tuple[str, ...] = (*TYPED_SECTIONS, "dask")
KEYS: tuple[Key, ...] = declared_keys(model.Config)

_BY_NAME = {k.name: k for k in KEYS}
_BY_DOTTED = {k.dotted: k for k in KEYS}


def key_by_name(name: str) -> Key | None:
    """Look a key up by its dotted name (``parallel.workers``) or bare name (``workers``)."""
    return _BY_DOTTED.get(name) or _BY_NAME.get(name)
