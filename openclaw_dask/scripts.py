"""Run a user's Python script inside a session, as ``openclaw run script.py`` does."""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import Any

from openclaw_dask.errors import ConfigError
from openclaw_dask.session import activated

__all__ = ["run_script"]


def run_script(session: Any, path: str | Path, args: tuple[str, ...] = ()) -> int:
    """Execute ``path`` as ``__main__`` with ``session`` active; return its exit code.

    ``openclaw_dask.session()`` with no arguments inside the script returns ``session``.
    The script runs in its own namespace, but ``sys.modules["__main__"]`` stays the
    caller's, so worker processes spawned meanwhile re-import the caller, never the
    script: no ``if __name__ == "__main__":`` guard is needed. An exception in the
    script prints its traceback and gives exit code 1.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"script {path} does not exist")
    try:
        code = compile(path.read_bytes(), str(path), "exec")
    except (SyntaxError, ValueError):  # as `python script.py` reports it
        traceback.print_exc(limit=0)
        return 1
    namespace = {"__name__": "__main__", "__file__": str(path.resolve()), "__builtins__": __builtins__}
    folder = str(path.resolve().parent)
    argv = sys.argv
    sys.argv = [str(path), *args]
    sys.path.insert(0, folder)  # as `python script.py` would, for the script's own imports
    try:
        with activated(session):
            exec(code, namespace)
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)  # sys.exit("message"), as Python prints it
        return 1
    except Exception:  # the script's own error: show it as Python would
        traceback.print_exc()
        return 1
    finally:
        sys.argv = argv
        sys.path.remove(folder)
    return 0
