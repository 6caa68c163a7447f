"""Run a user's Python script or a built-in workload in a session, as ``openclaw run`` does."""

from __future__ import annotations

import contextlib
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from openclaw_dask.cluster import running_of
from openclaw_dask.errors import ConfigError, OpenclawError, RunError
from openclaw_dask.parts import Terminated
from openclaw_dask.session import Session, activated

__all__ = ["run_file", "run_script", "run_workload"]


def run_workload(config: Any, name: str, *, progress: bool = False) -> Any:
    """Run the built-in workload ``name`` in a session of its own; its result has ``.ok`` and ``.to_dict()``."""
    from openclaw_dask.workloads import WORKLOADS

    with Session(config).start() as s, _lost_ends_run(s):
        return WORKLOADS[name](s, progress=progress)


def run_file(config: Any, path: str | Path, args: tuple[str, ...] = ()) -> dict[str, Any]:
    """Run the script ``path`` in a session of its own (``openclaw run script.py``).

    Returns
    -------
    dict
        ``script``, ``ok``, ``exit_code``, ``wall_s``, ``backend``, ``engine``, ``workers`` and the
        recovery counts (``workers_lost``, ``tasks_recomputed``, ``failures_recovered``).
    """
    t0 = time.perf_counter()
    _source(Path(path))  # an unreadable script is refused before a cluster starts for it
    with Session(config).start() as s:
        exit_code = run_script(s, path, args)
        if exit_code == 0:  # a script that caught the error itself still ran on a lost cluster
            _raise_if_lost(s)
        counts: dict[str, Any] = dict.fromkeys(("workers_lost", "tasks_recomputed", "failures_recovered"))
        workers = 0
        if running_of(s).lost(0) is None:  # else the script said why it failed; its scheduler cannot count any more
            workers = len(s.workers()) or 1
            recovery = s.recovery()  # the session is this run's alone: its counts are the run's
            counts = {name: getattr(recovery, name) for name in counts}
    return {"script": str(path), "ok": exit_code == 0, "exit_code": exit_code, "wall_s": time.perf_counter() - t0,
            "backend": s.backend.name, "engine": str(s.engine), "workers": workers, **counts}


def run_script(session: Session, path: str | Path, args: tuple[str, ...] = ()) -> int:
    """Execute ``path`` as ``__main__`` with ``session`` active; return its exit code.

    ``openclaw_dask.session()`` with no arguments inside the script returns ``session``.
    The script runs in its own namespace, but ``sys.modules["__main__"]`` stays the
    caller's, so worker processes spawned meanwhile re-import the caller, never the
    script: no ``if __name__ == "__main__":`` guard is needed. An exception in the
    script prints its traceback (an :class:`OpenclawError`: its one line) and gives exit code 1.
    """
    path = Path(path)
    source = _source(path)
    try:
        code = compile(source, str(path), "exec")
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
    except Terminated:  # the session's SIGTERM, not the script's own exit: the command reports it
        raise
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)  # sys.exit("message"), as Python prints it
        return 1
    except OpenclawError as e:  # openclaw's own error (a file it could not read, a failed item): its one line
        print(f"openclaw: error: {e}", file=sys.stderr)
        return 1
    except Exception:  # the script's own error: show it as Python would
        _raise_if_lost(session)  # unless the cluster is gone: that is the one line to show
        traceback.print_exc()
        return 1
    finally:
        sys.argv = argv
        sys.path.remove(folder)
    return 0


def _source(path: Path) -> bytes:
    """The script's bytes, or a :class:`ConfigError` saying why it cannot be read."""
    if not path.is_file():
        raise ConfigError(f"script {path} does not exist")
    try:
        return path.read_bytes()
    except OSError as e:  # permissions, or a file the kernel will not hand out (/proc/1/mem)
        raise ConfigError(f"cannot read script {path}: {e.strerror or e}", hint="check its permissions, or run a readable copy") from None


def _raise_if_lost(session: Session) -> None:
    """:class:`RunError` naming why, when the session's cluster ended under it (a lost scheduler, an MPI job gone)."""
    lost = session.running.lost(0) if session.running is not None else None
    if lost:
        raise RunError(lost) from None


@contextlib.contextmanager
def _lost_ends_run(session: Session) -> Iterator[None]:
    """Whatever distributed raised once its scheduler was gone becomes the one line saying so."""
    try:
        yield
    except OpenclawError:
        raise
    except Exception:
        _raise_if_lost(session)
        raise
