"""Task code keeps its file name on the way to a worker, so a failing task's traceback names the user's file.

cloudpickle sends a function defined in the main script (or a notebook) by value, and
writes ``"<dynamic-code>"`` in place of its code's file name, so that the bytes do not depend
on where it was defined: a task that raises on a worker then shows
``File "<dynamic-code>", line 5, in f``. The line is right; only the file is lost.
:func:`install` has this process's cloudpickle keep the real name (a plain string in the
code object's arguments, so a worker needs nothing of openclaw's to load it). Installed in
the session's process, once a distributed engine starts.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

__all__ = ["install"]

_DYNAMIC = "<dynamic-code>"
Reduce = Callable[[types.CodeType], Any]


def install() -> None:
    """Have cloudpickle keep code objects' file names, once per process."""
    import cloudpickle

    table: dict[type, Reduce] | None = getattr(cloudpickle.Pickler, "_dispatch_table", None)
    reduce = table.get(types.CodeType) if table is not None else None
    if table is None or reduce is None or getattr(reduce, "keeps_file_name", False):
        return  # a cloudpickle without that table pickles code its own way; or done already
    table[types.CodeType] = keeping_file_name(reduce)


def keeping_file_name(reduce: Reduce) -> Reduce:
    """``reduce`` (cloudpickle's reducer of code objects), with the code's file name in place of ``<dynamic-code>``."""

    def reduce_code(code: types.CodeType) -> Any:
        reduced = reduce(code)
        rebuild, args = reduced[0], reduced[1]
        at = next((i for i, a in enumerate(args) if isinstance(a, str) and a == _DYNAMIC), None)
        if rebuild is not types.CodeType or at is None:
            return reduced
        return (rebuild, (*args[:at], code.co_filename, *args[at + 1:]), *reduced[2:])

    reduce_code.keeps_file_name = True  # type: ignore[attr-defined]  # install() runs once per process
    return reduce_code
