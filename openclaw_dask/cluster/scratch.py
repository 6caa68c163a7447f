"""Where workers spill, and how much: a folder of the session's own, and a bound on the bytes in it.

distributed spills a worker's data to ``<temporary-directory>/dask-scratch-space`` with no
bound: a 200 GiB array-sum on a 24 GiB machine once wrote 78 GB to ``/tmp``, filled the disk
and left the files behind when it was killed. So, for every session (and ``openclaw worker``):

- ``cluster.local_directory: auto`` makes a temporary folder ``openclaw-<pid>-*`` and removes
  it when the session ends, however it ends (an exception, Ctrl-C, SIGTERM: the session
  unwinds). Folders left by a process that was killed outright (SIGKILL, a crash) are
  removed by the next session that starts.
- ``cluster.max_spill: auto`` lets all workers together spill :data:`SPILL_SHARE` of the
  free space of that folder's disk, measured at start, shared equally among the worker
  processes (``parallel.workers``; ``auto``: cores / ``omp_threads``), as
  ``distributed.worker.memory.max-spill`` per worker. Past it a
  worker keeps data in memory and pauses at its memory limit instead of filling the disk.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from openclaw_dask.config import Config

__all__ = ["PREFIX", "SPILL_SHARE", "max_spill", "named_folder", "scratch"]

logger = logging.getLogger("openclaw_dask.cluster")

SPILL_SHARE = 0.5  # of the free disk space, for all workers together
PREFIX = "openclaw-"
_OURS = re.compile(rf"{PREFIX}(\d+)-")


def max_spill(config: Config, folder: str | os.PathLike[str]) -> int | bool:
    """Bytes one worker may spill (``distributed.worker.memory.max-spill``), or ``False`` for no bound."""
    from openclaw_dask.cluster.plugins import worker_processes

    bound = config.cluster.max_spill
    if bound is False:
        return False
    if bound == "auto":
        bound = int(shutil.disk_usage(_existing(Path(folder))).free * SPILL_SHARE)
    return max(1, int(bound) // worker_processes(config))


def named_folder(config: Config) -> Path | None:
    """The spill folder ``cluster.local_directory`` names (absolute), or ``None`` for ``auto``."""
    return None if config.cluster.local_directory == "auto" else config.resolve_path("cluster.local_directory")


@contextlib.contextmanager
def scratch(config: Config) -> Iterator[dict[str, Any]]:
    """Yield the dask settings of the spill folder and bound; a folder made here is removed on exit."""
    folder = named_folder(config)
    made = folder is None
    if made:
        _remove_stale(Path(tempfile.gettempdir()))
        folder = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-")
    try:
        yield {"temporary-directory": str(folder), "distributed.worker.memory.max-spill": max_spill(config, folder)}
    finally:
        if made:
            shutil.rmtree(folder, ignore_errors=True)


def _existing(path: Path) -> Path:
    """``path`` or its nearest existing parent (a folder distributed will create is measured where it will be)."""
    path = path.resolve()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _remove_stale(root: Path) -> None:
    """Remove the session folders of processes that no longer exist (killed before they could clean up)."""
    import psutil

    for entry in root.glob(f"{PREFIX}*-*"):
        m = _OURS.match(entry.name)
        if m and entry.is_dir() and not psutil.pid_exists(int(m.group(1))):
            logger.info("removing %s, left by process %s", entry, m.group(1))
            shutil.rmtree(entry, ignore_errors=True)
