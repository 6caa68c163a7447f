"""Writing the files openclaw makes (configs, reports) without ever losing someone else's.

Every file the CLI writes goes through :func:`write_file` or :func:`replacing`:

- a file already at the path is refused unless ``force`` (the CLI's ``--force``);
- a symbolic link at the path is refused even with ``force``: writing through it would change
  whatever file it names (as root, any file), so it is never followed;
- the bytes go to a temporary file beside the target (created with ``O_EXCL | O_NOFOLLOW``),
  which takes the target's name only once it is complete and flushed, so a crash or a full disk
  never leaves half a file; the temporary file is removed when anything fails. Without ``force``
  it takes the name with a hard link, which fails if anything appeared there meanwhile.

:func:`check_target` says early (before a long run) what the write would refuse at the end.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from openclaw_dask.errors import ConfigError, RunError

__all__ = ["check_folder", "check_target", "replacing", "write_file"]

_FORCE = "pass --force (force=True from Python) to overwrite it"


def check_target(path: str | os.PathLike[str], *, force: bool = False) -> Path:
    """Refuse a path openclaw must not write: a link, a non-file, an existing file without ``force``.

    Parameters
    ----------
    path
        The file to be written.
    force
        Allow replacing an existing regular file.

    Returns
    -------
    Path
        ``path``, as a :class:`~pathlib.Path`.

    Raises
    ------
    ConfigError
        Its folder is missing, or something is at ``path`` that may not be replaced.
    """
    target = Path(path)
    if not target.parent.is_dir():
        raise ConfigError(f"cannot write {target}: folder {target.parent} does not exist; create it first")
    try:
        st = target.lstat()
    except FileNotFoundError:
        return target
    except OSError as e:
        raise ConfigError(f"cannot write {target}: {e.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        raise ConfigError(f"cannot write {target}: it is a symbolic link (to {os.readlink(target)}), which openclaw never "
                          "writes through, even with --force; remove the link or choose another path")
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"cannot write {target}: it exists and is not a regular file; choose another path")
    if not force:
        raise ConfigError(f"{target} already exists; {_FORCE}")
    return target


def check_folder(folder: str | os.PathLike[str], names: Iterable[str], *, force: bool = False) -> Path:
    """Refuse an output folder that is a link or not a folder, or holds any of ``names`` (without ``force``).

    Raises
    ------
    ConfigError
        As :func:`check_target`, for the folder or any of the files it would get.
    """
    out = Path(folder)
    if out.is_symlink():
        raise ConfigError(f"cannot write into {out}: it is a symbolic link (to {os.readlink(out)}), which openclaw never "
                          "writes through, even with --force; name the real folder")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"cannot write into {out}: it exists and is not a folder; choose another path")
    if out.is_dir():
        for name in names:
            check_target(out / name, force=force)
    return out


@contextlib.contextmanager
def replacing(path: str | os.PathLike[str], *, force: bool = False, binary: bool = False) -> Iterator[tuple[IO[Any], Path]]:
    """Yield an open temporary file beside ``path`` and its path; on a clean exit it becomes ``path``.

    If the block raises, the temporary file is removed and ``path`` is left as it was.

    Parameters
    ----------
    path
        The file to write.
    force
        Replace an existing regular file (never a symbolic link).
    binary
        Yield a binary file instead of UTF-8 text.

    Raises
    ------
    ConfigError
        As :func:`check_target`, or no file can be made in its folder.
    RunError
        Writing failed after the checks (a full disk, an I/O error; the OS error named).
    """
    target = check_target(path, force=force)
    try:
        fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    except OSError as e:
        raise ConfigError(f"cannot write {target}: {e.strerror}") from None
    draft = Path(name)
    try:
        with os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8") as f:
            yield f, draft
            f.flush()
            os.fchmod(f.fileno(), _mode(target))
            os.fsync(f.fileno())
        _publish(draft, target, force)
    except OSError as e:  # a full disk or an I/O error after the checks: a failed run, not a usage error
        draft.unlink(missing_ok=True)
        raise RunError(f"cannot write {target}: {e.strerror or e}") from None
    except BaseException:
        draft.unlink(missing_ok=True)
        raise


def write_file(path: str | os.PathLike[str], data: str | bytes, *, force: bool = False) -> Path:
    """Write ``data`` (text as UTF-8) to ``path`` whole or not at all, as :func:`replacing` does.

    Returns
    -------
    Path
        ``path``, as a :class:`~pathlib.Path`.
    """
    with replacing(path, force=force, binary=isinstance(data, bytes)) as (f, _):
        f.write(data)
    return Path(path)


def _mode(target: Path) -> int:
    """The permissions of the file being replaced, else what ``umask`` gives a new file."""
    with contextlib.suppress(OSError):
        return stat.S_IMODE(target.lstat().st_mode)
    return 0o666 & ~_umask()


def _umask() -> int:
    """This process's umask, read without setting it (``os.umask`` would change it for every thread meanwhile)."""
    with contextlib.suppress(OSError, StopIteration, ValueError), open("/proc/self/status", encoding="ascii") as f:
        return int(next(line for line in f if line.startswith("Umask:")).split()[1], 8)
    mask = os.umask(0o022)  # no /proc (macOS): setting and restoring it is the only way to read it there
    os.umask(mask)
    return mask


def _publish(draft: Path, target: Path, force: bool) -> None:
    """Give the finished ``draft`` the target's name, refusing whatever appeared there meanwhile."""
    if not force:
        try:
            os.link(draft, target, follow_symlinks=False)  # fails if anything is there: never clobbers
        except FileExistsError:
            check_target(target)  # raises the one line for what is there now
            raise
        except OSError as e:
            if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS):
                raise
        else:
            draft.unlink()
            return
    check_target(target, force=force)
    os.replace(draft, target)  # renames over the entry itself: a link appearing here is replaced, not followed
