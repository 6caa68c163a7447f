"""Where workers spill, and how much: a folder of the session's own, and a bound on the bytes in it.

distributed spills a worker's data to ``<temporary-directory>/dask-scratch-space`` with no
bound: a 200 GiB array-sum on a 24 GiB machine once wrote 78 GB to ``/tmp``, filled the disk
and left the files behind when it was killed. So, for every session (and ``openclaw worker``):

- ``cluster.local_directory: auto`` makes a temporary folder ``openclaw-<pid>-*`` and removes
  it when the session ends, however it ends (an exception, Ctrl-C, SIGTERM: the session
  unwinds). Folders left by a process that was killed outright (SIGKILL, a crash) are
  removed by the next session that starts, but only folders it can prove are openclaw's and
  abandoned: a name is no proof (a user's ``openclaw-2024-q3-report`` looks the same), nor is a
  PID that is not alive here (a run in another PID namespace, a second container sharing
  ``/tmp``, has PIDs this one cannot see). So each folder holds :data:`MARKER`, a line with a
  random token written when it is made, and :data:`LOCK`, a file its session holds an exclusive
  ``flock`` on for its whole life (the kernel lets go of it when the process dies, however it
  dies). A folder is removed only when it is a real folder (not a link) of this user, its marker
  has the right form, and its lock can be taken; links inside are removed, never followed.
- ``cluster.max_spill: auto`` lets all workers together spill :data:`SPILL_SHARE` of the
  free space of that folder's disk, measured at start, shared equally among the worker
  processes (``parallel.workers``; ``auto``: cores / ``omp_threads``), as
  ``distributed.worker.memory.max-spill`` per worker. Past it a
  worker keeps data in memory and pauses at its memory limit instead of filling the disk.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import secrets
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from openclaw_dask.cluster.base import Engine
    from openclaw_dask.config import Config

__all__ = ["LOCK", "MARKER", "PREFIX", "SPILL_SHARE", "marker_text", "max_spill", "named_folder", "scratch", "spills"]

logger = logging.getLogger("openclaw_dask.cluster")

SPILL_SHARE = 0.5  # of the free disk space, for all workers together
PREFIX = "openclaw-"
MARKER = ".openclaw-scratch"  # "openclaw-scratch/1 <pid> <32 hex digits>": written when the folder is made
LOCK = ".openclaw-lock"  # flock'ed by the session for its whole life
_OURS = re.compile(rf"{PREFIX}(\d+)-")
_MARK = re.compile(r"openclaw-scratch/1 (\d+) [0-9a-f]{32}\n")
_OPEN = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # never a link, never wait on a FIFO


def max_spill(config: Config, folder: str | os.PathLike[str]) -> int | bool:
    """Bytes one worker may spill (``distributed.worker.memory.max-spill``), or ``False`` for no bound."""
    from openclaw_dask.cluster.worker_shape import worker_processes

    bound = config.cluster.max_spill
    if bound is False:
        return False
    if bound == "auto":
        bound = int(shutil.disk_usage(_existing(Path(folder))).free * SPILL_SHARE)
    return max(1, int(bound) // worker_processes(config))


def spills(engine: Engine | None) -> bool:
    """Whether ``engine``'s workers spill: only a distributed cluster's (dask's threaded scheduler keeps all in memory).

    ``None``, an engine that cannot be told on this machine, is a GPU cluster's.
    """
    return engine is None or engine.distributed


def named_folder(config: Config) -> Path | None:
    """The spill folder ``cluster.local_directory`` names (absolute), or ``None`` for ``auto``."""
    return None if config.cluster.local_directory == "auto" else config.resolve_path("cluster.local_directory")


@contextlib.contextmanager
def scratch(config: Config) -> Iterator[dict[str, Any]]:
    """Yield the dask settings of the spill folder and bound; a folder made here is removed on exit."""
    folder = named_folder(config)
    with contextlib.ExitStack() as stack:
        if folder is None:
            root = Path(tempfile.gettempdir())
            _remove_stale(root)
            folder = stack.enter_context(_own_folder(root))
        yield {"temporary-directory": str(folder), "distributed.worker.memory.max-spill": max_spill(config, folder)}


def _existing(path: Path) -> Path:
    """``path`` or its nearest existing parent (a folder distributed will create is measured where it will be)."""
    path = path.resolve()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def marker_text(pid: int) -> str:
    """The marker line of a folder made by process ``pid``: its form, and a random token."""
    return f"openclaw-scratch/1 {pid} {secrets.token_hex(16)}\n"


@contextlib.contextmanager
def _own_folder(root: Path) -> Iterator[Path]:
    """A new folder ``openclaw-<pid>-*`` under ``root``, locked and marked for this session, removed at the end."""
    folder = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=root))
    made = folder.lstat()
    lock = -1
    try:
        # The lock before the marker: a marked folder is locked for as long as its session lives.
        lock = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT | os.O_EXCL | _OPEN, 0o600)
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fd = os.open(folder / MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _OPEN, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(marker_text(os.getpid()))
        yield folder
    finally:
        with contextlib.suppress(OSError):
            now = folder.lstat()
            if (now.st_dev, now.st_ino) == (made.st_dev, made.st_ino):  # still the folder made here
                shutil.rmtree(folder, ignore_errors=True)
        if lock >= 0:
            os.close(lock)


def _remove_stale(root: Path) -> None:
    """Remove the folders of sessions that were killed before they could clean up: provably theirs, and abandoned."""
    for entry in root.glob(f"{PREFIX}*-*"):
        m = _OURS.match(entry.name)
        if m is None or int(m.group(1)) == os.getpid():
            continue
        try:
            removed = _remove_if_abandoned(entry, int(m.group(1)))
        except OSError as e:  # gone meanwhile, or not ours to read: either way, not ours to remove
            logger.debug("kept %s: %s", entry, e)
            continue
        if removed:
            logger.info("removed %s, left by process %s (killed before it could clean up)", entry, m.group(1))


def _remove_if_abandoned(entry: Path, pid: int) -> bool:
    """Remove ``entry`` if it is a real folder of this user, marked by process ``pid``, whose lock nobody holds."""
    try:
        folder = os.open(entry, os.O_RDONLY | os.O_DIRECTORY | _OPEN)  # a link to a folder fails here
    except OSError:
        return False
    try:
        st = os.fstat(folder)
        if st.st_uid != os.geteuid() or not _marked(folder, pid):
            return False
        lock = os.open(LOCK, os.O_RDWR | _OPEN, dir_fd=folder)
        try:
            if not stat.S_ISREG(os.fstat(lock).st_mode):
                return False
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # its session is alive, maybe in a PID namespace this one cannot see
                return False
            now = entry.lstat()
            if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):  # the name was pointed elsewhere meanwhile
                return False
            shutil.rmtree(entry, ignore_errors=True)  # on Linux fd-based: links inside are unlinked, not followed
            return True
        finally:
            os.close(lock)
    finally:
        os.close(folder)


def _marked(folder: int, pid: int) -> bool:
    """Whether the folder open at ``folder`` holds a marker of the right form written by process ``pid``."""
    try:
        fd = os.open(MARKER, os.O_RDONLY | _OPEN, dir_fd=folder)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        text = os.read(fd, 128).decode("ascii", "replace")
    finally:
        os.close(fd)
    m = _MARK.fullmatch(text)
    return m is not None and int(m.group(1)) == pid
