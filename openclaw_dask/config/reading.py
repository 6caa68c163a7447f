"""Read a config file as hostile input: a regular file of bounded size, YAML of bounded expansion.

A config file can come from anywhere (a shared folder, a download, a pipe). Before a value is
looked at, this module makes sure that reading and parsing it ends quickly in bounded memory:

- only a regular file is read (a FIFO would block, ``/dev/zero`` never ends), opened without
  blocking and checked again on the open descriptor, at most :data:`MAX_FILE_BYTES`;
- the YAML composer counts nodes as it builds them, an alias counting as the whole subtree it
  repeats, so an alias bomb stops at :data:`MAX_NODES` instead of growing exponentially; nesting
  (aliases included) stops at :data:`MAX_DEPTH`, and an anchor used inside itself is refused;
- a mapping that names a key twice, at any depth, is refused (YAML would keep the last one silently).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer, ComposerError
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent
from yaml.resolver import Resolver

from openclaw_dask.errors import ConfigError, shorten

__all__ = ["MAX_DEPTH", "MAX_FILE_BYTES", "MAX_NODES", "key_lines", "parse_yaml", "read_text"]

MAX_FILE_BYTES = 2**20  # 1 MiB: the commented defaults file is ~12 KiB
MAX_NODES = 10_000  # values, keys and collections, every alias expanded
MAX_DEPTH = 32  # dask's own config nests 4 levels

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
_FIX = "give the path of a YAML file, or run `openclaw init FILE` to write one"


def _refuse_odd(path: Path, mode: int, size: int) -> None:
    if not stat.S_ISREG(mode):
        kind = next((what for test, what in _KINDS if test(mode)), "not a regular file")
        raise ConfigError(f"config file {path} is {kind}, not a regular file", hint=_FIX)
    if size > MAX_FILE_BYTES:
        raise ConfigError(f"config file {path} is {size:,} bytes; a config file may be at most {MAX_FILE_BYTES:,} (1 MiB)",
                          hint="is this the right file?")


def read_text(path: Path) -> str:
    """The text of the config file at ``path``.

    Raises
    ------
    ConfigError
        Missing, unreadable, not a regular file, larger than :data:`MAX_FILE_BYTES`, or not UTF-8.
    """
    try:
        _refuse_odd(path, (st := os.stat(path)).st_mode, st.st_size)
        # O_NONBLOCK: should the path become a FIFO between stat and open, open does not wait for a writer.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
        try:
            _refuse_odd(path, (st := os.fstat(fd)).st_mode, st.st_size)  # what was opened, not what was stat'ed
            chunks, size = [], 0
            while size <= MAX_FILE_BYTES and (chunk := os.read(fd, MAX_FILE_BYTES + 1 - size)):
                chunks.append(chunk)
                size += len(chunk)
        finally:
            os.close(fd)
    except ConfigError:  # a ValueError too
        raise
    except FileNotFoundError:
        raise ConfigError(f"config file {path}: no such file", hint=f"check the path, or create one with `openclaw init {path}`") from None
    except (OSError, ValueError) as e:  # ValueError: a NUL in the path
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise ConfigError(f"cannot read config file {path}: {reason}", hint="check the path or run `openclaw init`") from None
    data = b"".join(chunks)
    _refuse_odd(path, stat.S_IFREG, len(data))  # it grew while being read
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ConfigError(f"not UTF-8 text (byte {e.start})", source=str(path), hint="save it as UTF-8") from None


class _BoundedComposer(Composer):
    """PyYAML's composer, counting every node it builds and every node an alias repeats."""

    def __init__(self) -> None:
        super().__init__()
        self._depth = 0
        self._nodes = 0
        self._measured: dict[int, tuple[int, int]] = {}  # id(node) -> (nodes, height) once composed

    def _refuse(self, problem: str, mark: Any) -> None:
        raise ComposerError(None, None, problem, mark)

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(AliasEvent):
            event = self.peek_event()
            target = self.anchors.get(event.anchor)
            if target is not None:
                if id(target) not in self._measured:  # still being composed: it contains itself
                    self._refuse(f"anchor &{shorten(event.anchor)} is used inside itself", event.start_mark)
                nodes, height = self._measured[id(target)]
                self._count(nodes, self._depth + height, event.start_mark)
            return super().compose_node(parent, index)  # an unknown alias is PyYAML's error
        mark = self.peek_event().start_mark
        self._count(1, self._depth + 1, mark)
        self._depth += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        self._measure(node)
        return node

    def _count(self, nodes: int, depth: int, mark: Any) -> None:
        self._nodes += nodes
        if self._nodes > MAX_NODES:
            self._refuse(f"more than {MAX_NODES:,} values (aliases counted as the values they repeat); "
                         "a config file needs far fewer", mark)
        if depth > MAX_DEPTH:
            self._refuse(f"nested more than {MAX_DEPTH} levels deep (aliases included)", mark)

    def _measure(self, node: Any) -> None:
        measured = self._measured
        if isinstance(node, yaml.ScalarNode):
            measured[id(node)] = (1, 1)
            return
        children = node.value if isinstance(node, yaml.SequenceNode) else [n for pair in node.value for n in pair]
        sizes = [measured[id(c)] for c in children]
        measured[id(node)] = (1 + sum(n for n, _ in sizes), 1 + max((h for _, h in sizes), default=0))


if getattr(yaml, "__with_libyaml__", False):  # libyaml's parser (C, ~5x faster) under the bounded composer
    from yaml._yaml import CParser

    class _Loader(_BoundedComposer, SafeConstructor, Resolver, CParser):
        def __init__(self, text: str) -> None:
            CParser.__init__(self, text)
            _BoundedComposer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)

else:  # pragma: no cover - PyYAML without libyaml
    from yaml.parser import Parser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _Loader(_BoundedComposer, SafeConstructor, Resolver, Parser, Scanner, Reader):  # type: ignore[no-redef]
        def __init__(self, text: str) -> None:
            Reader.__init__(self, text)
            Scanner.__init__(self)
            Parser.__init__(self)
            _BoundedComposer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)


def parse_yaml(text: str, source: str) -> tuple[Any, dict[str, int]]:
    """The data of one YAML document and the line of each of its keys (:func:`key_lines`).

    Raises
    ------
    ConfigError
        Invalid YAML; more than :data:`MAX_NODES` values or :data:`MAX_DEPTH` levels once aliases
        are expanded; a key twice in one mapping; or a value a tag cannot make (``!!float "abc"``):
        naming ``source`` and the line.
    """
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None, {}
        lines = key_lines(root, source)  # before construction, which merges `<<` keys into the mappings
        return loader.construct_document(root), lines
    except ConfigError:  # a key twice (a ValueError too)
        raise
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"invalid YAML: {shorten(problem, 160)}", source=f"{source}{line}") from None
    except (ValueError, TypeError, ArithmeticError, LookupError, AttributeError) as e:
        # A tag applied to text it cannot convert (!!float "abc", !!timestamp "x", a 5,000-digit !!int).
        raise ConfigError(f"invalid YAML value: {shorten(e)}", source=source,
                          hint="remove the !!tag or fix the value") from None
    finally:
        getattr(loader, "dispose", lambda: None)()


def key_lines(root: Any, source: str) -> dict[str, int]:
    """The line of every key of the document, dotted (``dask.distributed.comm``); a key twice at any depth is refused."""
    lines: dict[str, int] = {}
    seen: set[int] = set()  # an aliased mapping is checked once
    stack: list[tuple[Any, str]] = [(root, "")]
    while stack:
        node, prefix = stack.pop()
        if not isinstance(node, yaml.MappingNode) or id(node) in seen:
            continue
        seen.add(id(node))
        for knode, vnode in node.value:
            if knode.tag == "tag:yaml.org,2002:merge":  # <<: *defaults, its keys may be overridden
                continue
            if not isinstance(knode, yaml.ScalarNode):  # the constructor refuses it: not hashable
                continue
            dotted = f"{prefix}.{knode.value}" if prefix else str(knode.value)
            if dotted in lines:
                raise ConfigError(f"{shorten(dotted)} appears twice (first on line {lines[dotted]})", key=dotted,
                                  source=f"{source}:{knode.start_mark.line + 1}", hint="keep one")
            lines[dotted] = knode.start_mark.line + 1
            stack.append((vnode, dotted))
    return lines
