"""A session started at the top level of a script that every worker process runs again.

distributed starts worker processes with multiprocessing's ``spawn`` (its default), and a
spawned process first runs the parent's main script again, as ``__mp_main__``. Code at the
script's top level, outside ``if __name__ == "__main__":``, runs there too: a session started
there would start a cluster of its own in each worker, and every worker fail. :func:`refuse_unguarded_main`
finds that case in the parent, before any worker exists, and raises one error that says
how to fix it; uncaught (the usual case at a script's top level) it prints as one line.
A main script with no file to run again (``python - < job.py``: its ``__file__`` is ``<stdin>``)
is refused the same way: every spawned worker would fail to open it.
"""

from __future__ import annotations

import ast
import os
import sys
from types import FrameType, ModuleType, TracebackType

from openclaw_dask.errors import ClusterStartError

__all__ = ["refuse_unguarded_main", "start_method", "unguarded_main_line"]


def refuse_unguarded_main(backend_name: str) -> None:
    """Raise :class:`ClusterStartError` when the main script starts worker processes from its unguarded top level,
    or when spawned workers could not run it again (it has no file: read from standard input)."""
    error = _refusal(backend_name)
    if error is not None:
        _one_line_if_uncaught(error)
        raise error


def _refusal(backend_name: str) -> ClusterStartError | None:
    start = f"could not start the {backend_name} cluster"
    unreadable = _main_without_file()
    if unreadable is not None:
        return ClusterStartError(
            f"{start}: the main script was read from {unreadable}, not a file, and each spawned worker process runs "
            f"the main script again from its file; save it to a file and run that, or set cluster.worker_start: fork")
    found = unguarded_main_line()
    if found is None:
        return None
    path, line = found
    shown = os.path.relpath(path) if os.path.dirname(os.path.abspath(path)) == os.getcwd() else path
    return ClusterStartError(
        f"{start}: {shown} starts it at its top level (line {line}), which each worker process runs again; "
        f"put that code under `if __name__ == \"__main__\":`, or run it with `openclaw run {shown}`")


def unguarded_main_line() -> tuple[str, int] | None:
    """``(script, line)`` when the calling code runs at the main script's top level, unguarded; else ``None``.

    ``None`` also wherever a spawned process would not run the script again: no script file
    (``python -c``, a notebook, ``openclaw run`` which runs the script in a namespace of its
    own), a package's ``__main__`` run with ``-m``, or worker processes forked rather than spawned.
    """
    found = _spawned_main()
    if found is None:
        return None
    main, path, spec_name = found
    if spec_name == "__main__" or spec_name.endswith(".__main__"):
        return None
    frame = _module_frame(vars(main), path)
    if frame is None or _guarded(path, frame.f_lineno):
        return None
    return path, frame.f_lineno


def start_method() -> str:
    """How the nannies start worker processes: multiprocessing's ``spawn`` (distributed's default) or ``fork``."""
    import dask.config

    return str(dask.config.get("distributed.worker.multiprocessing-method", "spawn"))


def _module_frame(main_globals: dict[str, object], path: str) -> FrameType | None:
    """The frame running the main script's top level, if it is on this thread's stack."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if frame.f_globals is main_globals and code.co_name == "<module>" and _same_file(code.co_filename, path):
            return frame
        frame = frame.f_back  # type: ignore[assignment]  # None ends the loop
    return None


def _spawned_main() -> tuple[ModuleType, str, str] | None:
    """The main module, its ``__file__`` and its spec's name (``""``: none) where worker processes are spawned and the
    main module has a file path; else ``None`` (``python -c``, a notebook, or forked workers, which run nothing again)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not isinstance(path, str) or start_method() == "fork":
        return None
    return main, path, getattr(getattr(main, "__spec__", None), "name", None) or ""


def _main_without_file() -> str | None:
    """The main script's ``__file__`` where a spawned process would run it again from that path and find no file there."""
    from multiprocessing import process

    found = _spawned_main()
    if found is None or found[2]:
        return None  # nothing run again, or a module run with -m (run again by its name)
    # where multiprocessing looks: relative to the folder this process started in
    path = found[1]
    return None if os.path.isfile(os.path.join(getattr(process, "ORIGINAL_DIR", None) or "", path)) else path


def _same_file(a: str, b: str) -> bool:
    try:
        return a == b or os.path.samefile(a, b)
    except OSError:
        return False


def _guarded(path: str, line: int) -> bool:
    """Whether an ``if`` that tests ``__name__`` starts at or before ``line`` (an unreadable script counts as guarded).

    The guard around the line, or an early ``if __name__ != "__main__": ...`` exit before it:
    either way the spawned process may not reach the line, so nothing is refused.
    """
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError):
        return True
    return any(isinstance(node, ast.If) and node.lineno <= line and _tests_name(node.test) for node in ast.walk(tree))


def _tests_name(test: ast.expr) -> bool:
    return any(isinstance(node, ast.Name) and node.id == "__name__" for node in ast.walk(test))


def _one_line_if_uncaught(error: BaseException) -> None:
    """Print ``error`` as Python's last traceback line alone if it reaches the top uncaught; others as before."""
    previous = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        if value is error:
            print(f"{kind.__name__}: {value}", file=sys.stderr)
        else:
            previous(kind, value, tb)

    sys.excepthook = hook
