"""Exceptions raised by openclaw_dask.

Every error a user can cause carries one message that says what went wrong, the
value received, and how to fix it. The CLI prints that message on one line and
exits 2 for configuration errors and 1 for a failed run.

::

    OpenclawError
    ├── ConfigError          (also a ValueError)  a key, value or file is wrong
    ├── BackendUnavailable   (also an ImportError) an optional extra is missing
    ├── ResizeError                                a resize was refused (cooldown, backend)
    └── RunError                                   the run itself failed
        ├── ClusterStartError                      no cluster could be started or reached
        └── ResultMismatch                         a workload computed a wrong answer
"""

from __future__ import annotations

__all__ = [
    "BackendUnavailable",
    "ClusterStartError",
    "ConfigError",
    "OpenclawError",
    "ResizeError",
    "ResultMismatch",
    "RunError",
]


class OpenclawError(Exception):
    """Base class of every error openclaw_dask raises on purpose."""


class ConfigError(OpenclawError, ValueError):
    """A configuration key, value or file is invalid.

    The message names the dotted key, the value received, what is allowed, and
    where the value came from (file and line, environment variable or ``--set``).
    """


class BackendUnavailable(OpenclawError, ImportError):
    """A backend or feature needs an optional extra that is not installed.

    The message names the ``pip install`` command that brings it.
    """


class ResizeError(OpenclawError):
    """``resize_workers`` was refused: inside ``elastic.cooldown``, or a backend that cannot resize."""


class RunError(OpenclawError):
    """A run started but did not finish correctly."""


class ClusterStartError(RunError):
    """A cluster could not be started, or a scheduler could not be reached."""


class ResultMismatch(RunError):
    """A workload's result differs from the reference answer."""
