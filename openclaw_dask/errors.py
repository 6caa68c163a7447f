"""Exceptions raised by openclaw_dask.

Every error a user can cause carries one message that says what went wrong, the
value received, and how to fix it. The CLI prints that message on one line and
exits 2 for configuration errors, 1 for a failed run and 3 for a report that cannot be
read or compared (:attr:`ReportError.exit_code`).

::

    OpenclawError
    ├── ConfigError          (also a ValueError)  a key, value or file is wrong
    ├── BackendUnavailable   (also an ImportError) an optional extra is missing
    ├── ResizeError                                a resize was refused (cooldown, backend)
    ├── ReportError                                a benchmark report cannot be read or compared (exit 3)
    └── RunError                                   the run itself failed
        ├── ClusterStartError                      no cluster could be started or reached
        ├── ResultMismatch                         a workload computed a wrong answer
        ├── BatchFailed                            a pipeline batch failed (index, stage, cause)
        ├── ItemFailed                             an item of a batched map failed (index, cause)
        ├── ShardFailed                            an iterate step failed (shard, round, cause)
        └── ReadError                              a file cannot be read as what it claims to hold (path, problem, fix)

:class:`ConfigError` and :class:`BackendUnavailable` keep their parts as attributes
(``key``, ``value``, ``source``, ``allowed``, ``hint``; ``extra``), so a program can
act on them; :func:`format_config_error` is the one place that turns them into text.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BackendUnavailable",
    "BatchFailed",
    "ClusterStartError",
    "ConfigError",
    "ItemFailed",
    "OpenclawError",
    "ReadError",
    "ReportError",
    "ResizeError",
    "ResultMismatch",
    "RunError",
    "ShardFailed",
    "first_line",
    "format_config_error",
    "format_value",
    "shorten",
]

_MISSING: Any = object()


class OpenclawError(Exception):
    """Base class of every error openclaw_dask raises on purpose."""


# Longest echo of a received value in a message: a hostile file can hold megabytes in one value.
ECHO_LIMIT = 80
REDACTED = "<redacted>"


def first_line(error: BaseException) -> str:
    """``Type: first line of its message`` (or the type alone): an exception from elsewhere, on one line."""
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__


def shorten(text: Any, limit: int = ECHO_LIMIT) -> str:
    """``text`` (or its ``str``) on one line, cut to ``limit`` characters with an ellipsis.

    Line breaks and other control characters are escaped, so a message stays one line.
    Values too large to print whole (a number of thousands of digits) say so.
    """
    try:
        text = text if isinstance(text, str) else str(text)
    except ValueError:  # int -> str refuses more than 4,300 digits
        return f"<a number of more than {limit} digits>"
    if len(text) > 4 * limit:  # escape only what can be shown
        text = text[: 4 * limit]
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def format_value(value: Any) -> str:
    """Show a configuration value as it would be written in the YAML file (cut to :data:`ECHO_LIMIT`)."""
    if value is None:
        return "null"
    if isinstance(value, tuple):
        return shorten("[" + ", ".join(shorten(v) for v in value[:ECHO_LIMIT]) + "]")
    return str(value).lower() if isinstance(value, bool) else shorten(value)


def _echo(value: Any) -> str:
    """``repr`` of a received value, cut to :data:`ECHO_LIMIT` without building a huge repr first."""
    if isinstance(value, (str, bytes)):
        return shorten(repr(value[: 4 * ECHO_LIMIT]))
    if isinstance(value, (list, tuple, dict, set)) and len(value) > ECHO_LIMIT:
        return f"<a {type(value).__name__} of {len(value)} items>"
    try:
        return shorten(repr(value))
    except (ValueError, RecursionError):
        return f"<a {type(value).__name__}>"


class ConfigError(OpenclawError, ValueError):
    """A configuration key, value or file is invalid.

    Parameters
    ----------
    message
        What is wrong, in a few words; may be empty when ``allowed`` says it all.
    key
        The dotted key (``parallel.workers``), if one is at fault.
    value
        The value received for ``key``.
    source
        Where the value came from: ``FILE:LINE``, ``env OPENCLAW_<KEY>=...``, ``--set ...``
        or ``default``.
    allowed
        What the key accepts, e.g. ``"an integer >= 1 or 'auto'"``.
    hint
        The fix, e.g. ``"use tcp"``.
    """

    def __init__(self, message: str = "", *, key: str | None = None, value: Any = _MISSING, source: str | None = None,
                 allowed: str | None = None, hint: str | None = None) -> None:
        self.message, self.key, self.source, self.allowed, self.hint = message, key, source, allowed, hint
        self.has_value = value is not _MISSING
        self.value = value if self.has_value else None
        super().__init__(format_config_error(self))

    @classmethod
    def at(cls, config: Any, key: str, message: str, *, hint: str | None = None) -> ConfigError:
        """An error about ``key`` of ``config``, with its value and where that came from."""
        return cls(message, key=key, value=config.get(key), source=config.sources.get(key, "default"), hint=hint)


def format_config_error(error: ConfigError) -> str:
    """The one line a :class:`ConfigError` prints: ``SOURCE: KEY = VALUE: MESSAGE; HINT``.

    With ``allowed`` and no message it reads ``SOURCE: KEY must be ALLOWED, got VALUE``.
    """
    key = shorten(error.key) if error.key is not None else None
    if key is not None and error.has_value and error.allowed is not None and not error.message:
        body = f"{key} must be {error.allowed}, got {_echo(error.value)}"
    elif key is not None and error.has_value:
        body = f"{key} = {format_value(error.value)}: {error.message}"
        if error.allowed is not None:
            body += f"; use {error.allowed}"
    else:
        body = error.message
    if error.hint:
        body += f"; {error.hint}"
    line = f"{shorten(error.source, ECHO_LIMIT + 20)}: {body}" if error.source else body
    return line if line.isprintable() else shorten(line, len(line))  # one line, whatever a message echoed


class BackendUnavailable(OpenclawError, ImportError):
    """A backend or feature needs an optional extra that is not installed.

    Parameters
    ----------
    message
        What needs what, e.g. ``"backend mpi needs mpi4py, which is not installed"``.
    extra
        The ``openclaw-dask`` extra that brings it: the message then ends with the
        ``pip install`` command.
    """

    def __init__(self, message: str, *, extra: str | None = None) -> None:
        self.extra = extra
        if extra is not None:
            message = f"{message}; run: pip install 'openclaw-dask[{extra}]'"
        super().__init__(message)


class ResizeError(OpenclawError):
    """``resize_workers`` was refused: inside ``elastic.cooldown``, or a backend that cannot resize."""


class ReportError(OpenclawError):
    """A benchmark report (a ``--compare`` baseline) cannot be read, is not a report, or cannot be compared.

    Neither the configuration nor a run is at fault, so the CLI exits with :attr:`exit_code`.
    """

    exit_code = 3


class RunError(OpenclawError):
    """A run started but did not finish correctly."""


class ClusterStartError(RunError):
    """A cluster could not be started, or a scheduler could not be reached."""


class ResultMismatch(RunError):
    """A workload's result differs from the reference answer."""


def _cause_text(cause: BaseException) -> str:
    return f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__


class BatchFailed(RunError):
    """A micro-batch of :func:`openclaw_dask.dataflow.pipeline` failed; the stream stopped.

    Attributes: ``index`` (of the batch, from 0), ``stage`` (its name) and ``cause``
    (the exception the stage raised, also ``__cause__``).
    """

    def __init__(self, index: int, stage: str, cause: BaseException) -> None:
        self.index, self.stage, self.cause = index, stage, cause
        super().__init__(f"batch {index} failed in stage {stage!r}: {_cause_text(cause)}")


class ItemFailed(RunError):
    """An item of :func:`openclaw_dask.dataflow.map` raised; ``index`` is its place in the input, ``cause`` the error."""

    def __init__(self, index: int, cause: BaseException) -> None:
        self.index, self.cause = index, cause
        super().__init__(f"item {index} failed: {_cause_text(cause)}")


class ShardFailed(RunError):
    """A ``step`` of :func:`openclaw_dask.dataflow.iterate` raised.

    Attributes: ``shard`` (its index, from 0), ``round`` (the synchronisation round, from 0),
    ``iteration`` (the global iteration, from 0) and ``cause`` (also ``__cause__``).
    """

    def __init__(self, shard: int, round: int, iteration: int, cause: BaseException) -> None:
        self.shard, self.round, self.iteration, self.cause = shard, round, iteration, cause
        super().__init__(f"shard {shard} failed in round {round} (iteration {iteration}): {_cause_text(cause)}")


class ReadError(RunError):
    """A file cannot be read as the array it claims to hold: missing, truncated, corrupt, a wrong header, a lost chunk.

    Attributes: ``path``, ``problem`` (what is wrong with the file) and ``fix``. It pickles
    with them, so an error raised in a worker's read task reaches the caller whole.
    """

    def __init__(self, path: str, problem: str, fix: str) -> None:
        self.path, self.problem, self.fix = str(path), problem, fix
        super().__init__(f"cannot read {self.path}: {problem}; {fix}")

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.path, self.problem, self.fix)
