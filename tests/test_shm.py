"""Shared-memory files a killed process leaves in /dev/shm: only a runtime's own, only once nobody uses them."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from openclaw_dask.cluster import shm

pytestmark = pytest.mark.skipif(not os.path.isdir(shm.SHM), reason="no /dev/shm on this system")

# maps or holds each file named on its command line, as MPICH's ranks and multiprocessing's semaphores do
HOLDER = textwrap.dedent("""\
    import mmap, os, sys, time
    kept = []
    for path in sys.argv[1:]:
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
        os.ftruncate(fd, 4096)
        kept.append(mmap.mmap(fd, 4096) if "held" not in path else fd)
    print("ready", flush=True)
    time.sleep(60)
    """)


@pytest.fixture
def files():
    made: list[Path] = []

    def named(prefix: str) -> Path:
        made.append(Path(shm.SHM) / f"{prefix}openclaw-test-{secrets.token_hex(6)}")
        return made[-1]

    yield named
    for path in made:
        path.unlink(missing_ok=True)


@pytest.fixture
def holders():
    procs: list[subprocess.Popen[str]] = []

    def start(*paths: Path) -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, "-c", HOLDER, *map(str, paths)], stdout=subprocess.PIPE, text=True,
                                start_new_session=True)
        procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def _kill(proc: subprocess.Popen[str]) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def test_a_killed_jobs_segment_goes_and_one_still_in_use_stays(files, holders):
    lost, shared, held = files("mpich_shm_"), files("sem.mp-"), files("sem.mp-held-")
    job = holders(lost, shared, held)
    other = holders(shared)  # another process still maps one of them
    seen = shm.in_use(shm.family(job.pid))
    assert {str(lost), str(shared), str(held)} <= seen  # mapped and held open alike
    assert shm.remove_orphans(seen) == []  # nothing goes while the job runs
    _kill(job)
    assert shm.remove_orphans(seen) == sorted([str(lost), str(held)])
    assert not lost.exists() and shared.exists()
    _kill(other)
    assert shm.remove_orphans(seen) == [str(shared)]


def test_a_file_not_a_runtimes_own_is_never_removed(files, holders):
    # a user's task may map a file of its own in /dev/shm that is meant to outlast the job
    users = files("results-")
    job = holders(users)
    seen = shm.in_use([job.pid])
    assert str(users) in seen
    _kill(job)
    assert shm.remove_orphans(seen) == [] and users.exists()


def test_nothing_is_read_from_processes_that_are_gone():
    assert shm.in_use([2**22 + 1]) == frozenset()  # over the kernel's pid_max: never a process
    assert shm.remove_orphans([]) == []
