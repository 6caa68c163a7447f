"""Shared-memory files a killed job leaves in ``/dev/shm``, and removing exactly those.

A process that is killed outright (SIGKILL, the OOM killer) cannot unlink the POSIX shared
memory it made: MPICH's ``mpich_shm_*`` segment (3 MiB for each job whose rank was lost) or
multiprocessing's named semaphores ``sem.mp-*``. ``/dev/shm`` is memory, so what is left there
stays taken until the machine restarts. A name is no proof of whose a file is (another job's live
segment looks the same), so the files are read from the memory maps and open files of a job's
own processes while they run, before any task of the user's has run (:func:`in_use`); one is
removed only when its name is one a runtime makes for itself (:data:`RUNTIME`: never a file a
user's task mapped, which may be meant to last), it is a file of this user's, and no living
process maps or holds it any more (:func:`remove_orphans`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Iterable, Iterator

__all__ = ["RUNTIME", "SHM", "family", "in_use", "remove_orphans"]

logger = logging.getLogger("openclaw_dask.cluster")

SHM = "/dev/shm/"
# files a runtime makes for its own processes and unlinks when they end: MPICH's, Open MPI's (4, 5), multiprocessing's
RUNTIME = ("mpich_shm_", "vader_segment.", "sm_segment.", "sem.mp-")


def in_use(pids: Iterable[int]) -> frozenset[str]:
    """The ``/dev/shm`` files that processes ``pids`` map or hold open now (those it cannot read are skipped)."""
    found: set[str] = set()
    for pid in pids:
        with contextlib.suppress(OSError):  # gone, or another user's
            found.update(_mapped(pid))
        with contextlib.suppress(OSError):
            fds = f"/proc/{pid}/fd"
            for fd in os.listdir(fds):
                with contextlib.suppress(OSError):
                    if (target := os.readlink(f"{fds}/{fd}")).startswith(SHM):
                        found.add(target)
    return frozenset(found)


def _mapped(pid: int) -> Iterator[str]:
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)  # the path is the sixth; an unlinked file reads "<path> (deleted)"
            if len(fields) == 6 and fields[5].startswith(SHM) and not fields[5].endswith(" (deleted)\n"):
                yield fields[5].rstrip("\n")


def family(pid: int) -> list[int]:
    """``pid`` and every process it started, and theirs (a launcher's ranks, which may sit in sessions of their own)."""
    import psutil

    try:
        return [pid, *(child.pid for child in psutil.Process(pid).children(recursive=True))]
    except psutil.Error:  # gone
        return []


def remove_orphans(paths: Iterable[str]) -> list[str]:
    """Unlink those of ``paths`` (from :func:`in_use`) that a runtime made, this user owns, and no living process uses."""
    left = {p for p in paths if os.path.basename(p).startswith(RUNTIME) and _ours(p)}
    if not left:
        return []
    live = in_use(int(e) for e in os.listdir("/proc") if e.isdigit())
    removed = []
    for path in sorted(left - live):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
            removed.append(path)
    if removed:
        logger.info("removed %d shared-memory file(s) a killed process left: %s", len(removed), ", ".join(removed))
    return removed


def _ours(path: str) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid()
