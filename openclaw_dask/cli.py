"""The ``openclaw`` command: a thin layer over the Python API.

Exit codes: 0 success, 1 a run failed (wrong result, cluster unreachable, script
error), 2 a usage or configuration error (one line on stderr, no traceback).
"""

from __future__ import annotations

import functools
import json
import sys
import time
from pathlib import Path
from typing import Any

import click

from openclaw_dask.errors import BackendUnavailable, ConfigError, RunError

__all__ = ["main"]


def _fail(message: str, code: int) -> None:
    click.echo(f"openclaw: error: {message}", err=True)
    sys.exit(code)


def _friendly(func):
    """Turn openclaw's own errors into one line and an exit code."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except (ConfigError, BackendUnavailable) as e:
            _fail(str(e), 2)
        except RunError as e:
            _fail(str(e), 1)
        except KeyboardInterrupt:
            _fail("interrupted", 130)

    return wrapper


def _load(config_path: str | None, sets: tuple[str, ...], extra: dict[str, Any] | None = None):
    from openclaw_dask.config import load_config, parse_assignment

    overrides = dict(parse_assignment(s) for s in sets)
    overrides.update(extra or {})
    return load_config(config_path, overrides, override_label="--set")


config_option = click.option(
    "--config", "-c", "config_path", type=click.Path(dir_okay=False), default=None,
    help="Config file (default: $OPENCLAW_CONFIG, else ./openclaw_config.yaml if present, else defaults).",
)
set_option = click.option(
    "--set", "-s", "sets", multiple=True, metavar="KEY=VALUE",
    help="Override a key, e.g. --set parallel.workers=2 (repeatable; beats env and file).",
)


def _version() -> str:
    from openclaw_dask import __version__

    return __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(version=_version(), prog_name="openclaw")
def main() -> None:
    """openclaw: run chunked Dask array work in parallel from one YAML file."""


@main.command()
@click.argument("path", required=False, default=None, type=click.Path())
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
@_friendly
def init(path: str | None, force: bool) -> None:
    """Write a commented openclaw_config.yaml (to PATH, or into PATH if it is a folder)."""
    from openclaw_dask.config import DEFAULT_FILENAME, KEYS, default_config_text

    target = Path(path or DEFAULT_FILENAME)
    if target.is_dir():
        target = target / DEFAULT_FILENAME
    if target.exists() and not force:
        raise ConfigError(f"{target} already exists; edit it, or pass --force to overwrite it")
    target.write_text(default_config_text(), "utf-8")
    click.echo(f"wrote {target.resolve()} ({len(KEYS)} keys, all at their defaults)")
    click.echo("next: edit it, then `openclaw run array-sum` (check it with `openclaw config validate`)")


@main.group()
def config() -> None:
    """Show or check configuration."""


@config.command("show")
@config_option
@set_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@_friendly
def config_show(config_path: str | None, sets: tuple[str, ...], as_json: bool) -> None:
    """Print the effective value of every key and where it came from."""
    cfg = _load(config_path, sets)
    rows = [(k, v, cfg.sources[k]) for k, v in cfg.items()] + [(f"dask.{k}", v, "dask section") for k, v in cfg.dask.items()]
    if as_json:
        click.echo(json.dumps({k: {"value": _plain(v), "source": src} for k, v, src in rows}, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"openclaw config ({cfg.path or 'defaults only'})")
    for col in ("key", "value", "source"):
        table.add_column(col)
    for k, v, src in rows:
        table.add_row(k, str(_plain(v)), src, style=None if src == "default" else "bold")
    Console().print(table)


@config.command("validate")
@click.argument("path", type=click.Path(dir_okay=False))
@_friendly
def config_validate(path: str) -> None:
    """Check a config file; exit 2 with the first problem found."""
    if not Path(path).is_file():
        raise ConfigError(f"{path}: no such file; create one with `openclaw init {path}`")
    cfg = _load(path, ())
    changed = sum(src != "default" for src in cfg.sources.values())
    click.echo(f"{path}: valid ({changed} keys set, backend {cfg.parallel.backend})")


@main.command(context_settings={"ignore_unknown_options": True})
@click.argument("target", required=False, default="array-sum")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@config_option
@set_option
@click.option("--size", default=None, help="Input size of a built-in workload, e.g. 2GiB (workload.size).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the summary.")
@_friendly
def run(target: str, script_args: tuple[str, ...], config_path: str | None, sets: tuple[str, ...], size: str | None, as_json: bool) -> None:
    """Run a built-in workload (default array-sum) or a Python script on the configured cluster.

    A script's own arguments follow its path. Inside it, openclaw_dask.session()
    with no arguments returns the session started here.
    """
    from openclaw_dask.workloads import WORKLOADS

    is_script = target.endswith(".py") or Path(target).is_file()
    if not is_script and target not in WORKLOADS:
        import difflib

        near = difflib.get_close_matches(target, list(WORKLOADS), n=1)
        hint = f"did you mean {near[0]}?" if near else f"use one of {', '.join(WORKLOADS)} or a SCRIPT.py"
        raise click.UsageError(f"unknown workload {target!r}; {hint}")
    if script_args and not is_script:
        raise click.UsageError(f"unexpected arguments {' '.join(script_args)!r} after workload {target}")
    cfg = _load(config_path, sets, {"workload.size": size} if size is not None else None)
    show = not as_json and sys.stderr.isatty()
    if is_script:
        _run_script(cfg, Path(target), script_args, as_json)
    else:
        _run_workload(cfg, target, as_json, show)


def _run_workload(cfg: Any, name: str, as_json: bool, show: bool) -> None:
    from openclaw_dask.session import Session
    from openclaw_dask.workloads import WORKLOADS

    with Session(cfg).start() as s:
        result = WORKLOADS[name](s, progress=show)
    if as_json:
        click.echo(json.dumps(result.to_dict()))
    else:
        _print_summary(result)
    if not result.ok:
        _fail(f"{name} computed {result.result!r}, expected {result.expected!r}", 1)


def _print_summary(r: Any) -> None:
    from dask.utils import format_bytes
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"openclaw run {r.workload}", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    check = "[green]correct[/]" if r.ok else "[red]WRONG[/]"
    table.add_row("check", f"{check}: {r.result:.17g} (expected {r.expected:.17g})")
    table.add_row("throughput", f"{r.gbps:.2f} GB/s over {format_bytes(r.size_bytes)} (median of {len(r.sum_s_all)} sums: {r.sum_s * 1e3:.1f} ms)")
    table.add_row("wall time", f"{r.wall_s:.2f} s (generation {r.generate_s:.2f} s)")
    table.add_row("cluster", f"{r.backend}: {r.workers} worker(s), {r.threads} thread(s)")
    table.add_row("chunks", f"{r.n_chunks} x {format_bytes(r.chunk_bytes)} ({r.chunk_reason})")
    Console().print(table)


def _run_script(cfg: Any, path: Path, args: tuple[str, ...], as_json: bool) -> None:
    from openclaw_dask.session import Session, activated

    if not path.is_file():
        raise ConfigError(f"script {path} does not exist")
    code = compile(path.read_text("utf-8"), str(path), "exec")
    # The script runs as __main__ in its own namespace, but sys.modules["__main__"] stays
    # this CLI: worker processes spawned for it re-import the CLI, never the script.
    namespace = {"__name__": "__main__", "__file__": str(path.resolve()), "__builtins__": __builtins__}
    folder = str(path.resolve().parent)
    argv = sys.argv
    sys.argv = [str(path), *args]
    sys.path.insert(0, folder)  # as `python script.py` would, for the script's own imports
    t0 = time.perf_counter()
    exit_code = 0
    try:
        with Session(cfg).start() as s, activated(s):
            try:
                exec(code, namespace)
            except SystemExit as e:
                exit_code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except Exception:
                import traceback

                traceback.print_exc()
                exit_code = 1
            workers = len(s.workers()) or 1
    finally:
        sys.argv = argv
        sys.path.remove(folder)
    if as_json:
        click.echo(json.dumps({"script": str(path), "ok": exit_code == 0, "exit_code": exit_code, "wall_s": time.perf_counter() - t0, "backend": cfg.parallel.backend, "workers": workers}))
    if exit_code:
        sys.exit(exit_code)


def _plain(value: Any) -> Any:
    """A JSON- and table-friendly form of a config value."""
    return value if isinstance(value, (bool, int, float, str, type(None))) else str(value)


if __name__ == "__main__":  # pragma: no cover
    main()
