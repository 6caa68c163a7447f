"""A registry of classes by name: built-ins, then those other packages add through an entry-point group.

Backends (:mod:`openclaw_dask.cluster.registry`) and file readers
(:mod:`openclaw_dask.io.formats`) are each one :class:`Registry`. Built-ins are named by
``"module:attr"`` and imported when first asked for; entry points are scanned once and
loaded when chosen, so listing names imports no plugin. A built-in name wins over an
entry point of the same name (with a warning), and a plugin that fails to load is one
:class:`~openclaw_dask.errors.ConfigError` naming its entry point.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from openclaw_dask.errors import ConfigError

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

__all__ = ["Registry"]

logger = logging.getLogger("openclaw_dask")

T = TypeVar("T")


def entry_points(**select: str) -> Any:
    """:func:`importlib.metadata.entry_points`, imported when first asked for (~10 ms a start that names a built-in skips)."""
    from importlib.metadata import entry_points as scanned

    return scanned(**select)


class Registry(Generic[T]):
    """Subclasses of ``base`` by name, from ``builtins`` and the entry-point group ``group``.

    Parameters
    ----------
    group
        The entry-point group other packages register in (``openclaw_dask.backends``).
    base
        The class every entry must subclass.
    builtins
        Built-in name -> ``"module:attr"``; read at each lookup (not copied).
    key
        The config key that selects one (``parallel.backend``), for error messages.
    what
        What one is called in messages (``backend``).
    """

    def __init__(self, group: str, base: type[T], builtins: Mapping[str, str], *, key: str, what: str) -> None:
        self.group, self.base, self.builtins, self.key, self.what = group, base, builtins, key, what
        self._entry_points: dict[str, EntryPoint] | None = None
        self._loaded: dict[str, type[T]] = {}

    def refresh(self) -> None:
        """Forget the scanned entry points and loaded classes (tests that install or fake a plugin)."""
        importlib.invalidate_caches()
        self._entry_points, self._loaded = None, {}

    def plugins(self) -> dict[str, EntryPoint]:
        """Entry points of other packages by name, scanned once (not loaded: that may import heavy code)."""
        if self._entry_points is None:
            found: dict[str, EntryPoint] = {}
            for ep in entry_points(group=self.group):
                if ep.name in self.builtins:
                    logger.warning("ignoring %s entry point %s = %s: %s is a built-in %s",
                                   self.group, ep.name, ep.value, ep.name, self.what)
                    continue
                found.setdefault(ep.name, ep)
            self._entry_points = found
        return self._entry_points

    def names(self) -> list[str]:
        """Every name: the built-ins, then the plugins."""
        return [*self.builtins, *(n for n in self.plugins() if n not in self.builtins)]

    def get(self, name: str, *, source: str | None = None) -> type[T]:
        """The class ``name`` selects.

        Raises
        ------
        ConfigError
            No such name (the message lists the installed ones), or its plugin fails to load
            or is not a ``base`` subclass of that name.
        """
        if name in self.builtins:
            module, _, attr = self.builtins[name].partition(":")
            return getattr(importlib.import_module(module), attr)
        if name not in self._loaded:
            ep = self.plugins().get(name)
            if ep is None:
                raise ConfigError(key=self.key, value=name, source=source, allowed=f"one of {', '.join(self.names())}")
            self._loaded[name] = self._load(name, ep, source)
        return self._loaded[name]

    def _load(self, name: str, ep: EntryPoint, source: str | None) -> type[T]:
        try:
            cls = ep.load()
        except Exception as e:  # noqa: BLE001  (a broken plugin is the plugin's fault: say which)
            raise ConfigError(f"the package that provides {self.what} {name} failed to load ({type(e).__name__}: {e})",
                              key=self.key, value=name, source=source,
                              hint=f"reinstall it, or check entry point {ep.value}") from None
        if not (isinstance(cls, type) and issubclass(cls, self.base) and getattr(cls, "name", None) == name):
            raise ConfigError(f"entry point {ep.value} is not an openclaw_dask {self.base.__name__} named {name}",
                              key=self.key, value=name, source=source, hint="fix the plugin package")
        return cls
