"""The ``openclaw`` group and what its commands share: error handling, ``--config``, ``--set``, config loading."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import click

from openclaw_dask.config.keys import SIZE, WORKERS
from openclaw_dask.errors import BackendUnavailable, ConfigError, ReportError, RunError
from openclaw_dask.parts import Terminated

__all__ = ["config_option", "fail", "force_option", "friendly", "load", "main", "overrides", "resolve_target", "set_option", "target_options",
           "writable_parent"]


def fail(message: str, code: int) -> None:
    """Print ``openclaw: error: MESSAGE`` on stderr and exit with ``code``."""
    click.echo(f"openclaw: error: {message}", err=True)
    sys.exit(code)


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    """Ctrl-C as KeyboardInterrupt, never lost in a finalizer, and only once.

    Python ignores (and prints) an exception raised in a ``__del__``, and distributed's
    futures release themselves in one: an interrupt that lands there would vanish and the
    run would go on. One that lands in a future's ``__init__`` leaves it half made, and its
    ``__del__`` then prints a traceback ("'Future' object has no attribute '_cleared'", seen
    once in CI). Both are delivered again a moment later instead. After the first, the
    command is ending: a second Ctrl-C would break the session's unwinding half way (a cluster
    left to distributed's exit hooks, ~11 s and "Failed to remove" errors), so it is ignored.
    """
    while frame is not None:
        if _not_now(frame.f_code):
            threading.Timer(0.05, _again).start()
            return
        frame = frame.f_back
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def _not_now(code: CodeType) -> bool:
    """Whether an interrupt raised in ``code`` would be lost or leave an object its finalizer fails on."""
    futures = sys.modules.get("distributed.client")  # imported by every distributed engine; none otherwise
    return code.co_name == "__del__" or (futures is not None and code is futures.Future.__init__.__code__)


def _again() -> None:
    if signal.getsignal(signal.SIGINT) is _on_sigint:  # still inside the command: outside, friendly could not catch it
        os.kill(os.getpid(), signal.SIGINT)


@contextlib.contextmanager
def _interruptible() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # interrupted: ignored until the exit with 130
            signal.signal(signal.SIGINT, before)


def friendly(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn openclaw's own errors into one line and an exit code; Ctrl-C is exit 130."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with _interruptible():
                return func(*args, **kwargs)
        except (ConfigError, BackendUnavailable) as e:
            fail(str(e), 2)
        except RunError as e:
            fail(str(e), 1)
        except ReportError as e:
            fail(str(e), e.exit_code)
        except KeyboardInterrupt:
            fail("interrupted", 130)
        except Terminated as e:
            fail("terminated (SIGTERM)", e.code if isinstance(e.code, int) else 128 + 15)

    return wrapper


def overrides(sets: tuple[str, ...], size: str | None = None) -> dict[str, Any]:
    """The ``--set KEY=VALUE`` arguments (and ``--size``) as a mapping for ``load_config``."""
    from openclaw_dask.config import parse_assignment

    out = dict(parse_assignment(s) for s in sets)
    if size is not None:
        out[SIZE] = size
    return out


def load(config_path: str | None, sets: tuple[str, ...], size: str | None = None) -> Any:
    """The effective config of a command, checked against the backend it names."""
    from openclaw_dask.loading import load_checked as load_config

    return load_config(config_path, overrides(sets, size), override_label="--set")


config_option = click.option(
    "--config", "-c", "config_path", type=click.Path(dir_okay=False), default=None,
    help="Config file (default: $OPENCLAW_CONFIG, else ./openclaw_config.yaml if present, else defaults).",
)
set_option = click.option(
    "--set", "-s", "sets", multiple=True, metavar="KEY=VALUE",
    help=f"Override a key, e.g. --set {WORKERS}=2 (repeatable; beats env and file).",
)


def _version() -> str:
    from openclaw_dask import __version__

    return __version__


_NoArgs = getattr(click.exceptions, "NoArgsIsHelpError", ())


class _Group(click.Group):
    """Click's usage errors as one line and exit 2, like openclaw's own."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        from openclaw_dask.cluster.heap import one_arena

        one_arena()  # before any thread starts: task threads then share the heap a session keeps for reuse
        kwargs["standalone_mode"] = False
        try:
            return super().main(*args, **kwargs)
        except click.exceptions.Exit as e:
            sys.exit(e.exit_code)
        except _NoArgs as e:  # plain `openclaw`: the help is the answer
            click.echo(e.ctx.get_help() if e.ctx else str(e))
            sys.exit(0)
        except click.ClickException as e:
            fail(e.format_message(), e.exit_code)
        except click.exceptions.Abort:
            fail("interrupted", 130)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(version=_version(), prog_name="openclaw")
def main() -> None:
    """openclaw: run chunked Dask array work in parallel from one YAML file."""


def _workload_lines() -> list[tuple[str, str]]:
    from openclaw_dask.workloads import descriptions

    return [(name, line.replace("``", "")) for name, line in descriptions().items()]


class _TargetCommand(click.Command):
    """``run`` and ``profile``: their help ends with the built-in workloads, one line each."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Workloads (TARGET; or a SCRIPT.py)"):
            formatter.write_dl(_workload_lines())
        super().format_epilog(ctx, formatter)


def _list_workloads(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        width = max(len(name) for name, _ in _workload_lines())
        for name, line in _workload_lines():
            click.echo(f"{name:<{width}}  {line}")
        ctx.exit(0)


def target_options(func: Any) -> Any:
    """What ``run`` and ``profile`` share: a workload or script, its arguments, config, --set, --size, --list."""
    func = click.option("--list", "list_workloads", is_flag=True, expose_value=False, is_eager=True, callback=_list_workloads,
                        help="List the built-in workloads, one line each, and exit.")(func)
    func = click.option("--size", default=None, help=f"Input size of a built-in workload, e.g. 2GiB ({SIZE}).")(func)
    func = set_option(config_option(func))
    func = click.argument("script_args", nargs=-1, type=click.UNPROCESSED)(func)
    func = click.argument("target", required=False, default="array-sum")(func)
    return main.command(cls=_TargetCommand, context_settings={"ignore_unknown_options": True})(func)


force_option = click.option("--force", is_flag=True,
                            help="Overwrite output files that exist (never through a symbolic link, which is refused).")


def writable_parent(path: str | None, force: bool = False) -> None:
    """Refuse an output path before any work is done, not after: its folder missing, a link, a file without --force."""
    from openclaw_dask.files import check_target

    if path is not None:
        check_target(path, force=force)


def resolve_target(target: str, script_args: tuple[str, ...]) -> bool:
    """True for a script, False for a built-in workload; usage errors otherwise."""
    from openclaw_dask.workloads import WORKLOADS

    is_script = target.endswith(".py") or Path(target).is_file()
    if not is_script and target not in WORKLOADS:
        import difflib

        near = difflib.get_close_matches(target, list(WORKLOADS), n=1)
        hint = f"did you mean {near[0]}?" if near else f"use one of {', '.join(WORKLOADS)} or a SCRIPT.py"
        raise click.UsageError(f"unknown workload {target!r}; {hint}")
    if script_args and not is_script:
        raise click.UsageError(f"unexpected arguments {' '.join(script_args)!r} after workload {target}")
    if is_script and not Path(target).is_file():
        raise ConfigError(f"script {target} does not exist")
    return is_script
