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

from openclaw_dask.errors import BackendUnavailable, ConfigError, ResultMismatch, RunError

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


def _load(config_path: str | None, sets: tuple[str, ...], size: str | None = None, role: str = "client"):
    from openclaw_dask.config import load_config, parse_assignment

    overrides = dict(parse_assignment(s) for s in sets)
    if size is not None:
        overrides["workload.size"] = size
    return load_config(config_path, overrides, override_label="--set", role=role)


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


_NoArgs = getattr(click.exceptions, "NoArgsIsHelpError", ())


class _Group(click.Group):
    """Click's usage errors as one line and exit 2, like openclaw's own."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False
        try:
            return super().main(*args, **kwargs)
        except click.exceptions.Exit as e:
            sys.exit(e.exit_code)
        except _NoArgs as e:  # plain `openclaw`: the help is the answer
            click.echo(e.ctx.get_help() if e.ctx else str(e))
            sys.exit(0)
        except click.ClickException as e:
            _fail(e.format_message(), e.exit_code)
        except click.exceptions.Abort:
            _fail("interrupted", 130)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
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
    if not target.parent.is_dir():
        raise ConfigError(f"cannot write {target}: folder {target.parent} does not exist; create it first")
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
    from openclaw_dask.config.model import plain as _plain

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
    from openclaw_dask.config import load_config

    cfg = load_config(path, env={})  # the file alone, not this shell's OPENCLAW_* variables
    changed = sum(src != "default" for src in cfg.sources.values())
    click.echo(f"{path}: valid ({changed} keys set, backend {cfg.parallel.backend})")


def _target_options(func: Any) -> Any:
    """What ``run`` and ``profile`` share: a workload or script, its arguments, config, --set, --size."""
    func = click.option("--size", default=None, help="Input size of a built-in workload, e.g. 2GiB (workload.size).")(func)
    func = set_option(config_option(func))
    func = click.argument("script_args", nargs=-1, type=click.UNPROCESSED)(func)
    func = click.argument("target", required=False, default="array-sum")(func)
    return main.command(context_settings={"ignore_unknown_options": True})(func)


@_target_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the summary.")
@_friendly
def run(target: str, script_args: tuple[str, ...], config_path: str | None, sets: tuple[str, ...], size: str | None, as_json: bool) -> None:
    """Run a built-in workload (default array-sum) or a Python script on the configured cluster.

    A script's own arguments follow its path. Inside it, openclaw_dask.session()
    with no arguments returns the session started here.
    """
    is_script = _resolve_target(target, script_args)
    cfg = _load(config_path, sets, size)
    show = not as_json and sys.stderr.isatty()
    if is_script:
        _run_script(cfg, Path(target), script_args, as_json)
    else:
        _run_workload(cfg, target, as_json, show)


def _writable_parent(path: str | None) -> None:
    """Refuse an output path whose folder is missing before any work is done, not after."""
    if path is not None and not Path(path).resolve().parent.is_dir():
        raise ConfigError(f"cannot write {path}: folder {Path(path).parent} does not exist; create it first")


def _resolve_target(target: str, script_args: tuple[str, ...]) -> bool:
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


@_target_options
@click.option("--html", "html_path", type=click.Path(dir_okay=False), default=None, help="Also write a self-contained Bokeh report.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the tables.")
@_friendly
def profile(target: str, script_args: tuple[str, ...], config_path: str | None, sets: tuple[str, ...], size: str | None,
            html_path: str | None, as_json: bool) -> None:
    """Run a workload or script and report per-worker load, skew, stragglers and fixes.

    Plant problems to see the verdicts: --set workload.skew=10 (one chunk 10x bigger),
    --set workload.straggler=2s (one slow chunk), --set parallel.task_chunk_size=64KiB.
    """
    from openclaw_dask.diagnostics.profile import profile as run_profile
    from openclaw_dask.session import Session

    is_script = _resolve_target(target, script_args)
    _writable_parent(html_path)
    cfg = _load(config_path, sets, size)
    with Session(cfg).start() as s:
        result = run_profile(s, target, script_args=script_args, progress=not as_json and sys.stderr.isatty())
    if html_path:
        from openclaw_dask.diagnostics.html import profile_layout, write_html

        write_html(profile_layout(result.report, result.record), html_path, "openclaw profile")
    if as_json:
        click.echo(json.dumps(result.to_dict(), default=str))
    else:
        from openclaw_dask.diagnostics.terminal import print_profile

        print_profile(result.report)
        if html_path:
            click.echo(f"wrote {Path(html_path).resolve()}")
    if result.exit_code:
        _fail(f"{'script' if is_script else target} failed (exit code {result.exit_code})", result.exit_code)


@main.command(context_settings={"ignore_unknown_options": False})
@click.argument("more", nargs=-1, metavar="[CONFIG.yaml | KEY=V1,V2] ...")
@click.option("--suite", default="quick", show_default=True, help="quick (under 2 minutes on 2 cores) or standard.")
@click.option("--configs", multiple=True, metavar="FILE", help="Config files to compare (more may follow as arguments).")
@click.option("--sweep", "sweeps", multiple=True, metavar="KEY=V1,V2", help="Sweep a key over values (repeatable; cartesian product).")
@click.option("--repeat", default=5, show_default=True, type=click.IntRange(1, 1000), help="Timed runs per row (after one warm-up).")
@click.option("--out", "out_dir", default="benchmark-report", show_default=True, type=click.Path(file_okay=False), help="Folder for report.json/.md/.html.")
@click.option("--compare", "baseline", type=click.Path(dir_okay=False), default=None, help="A previous report.json to compare against.")
@click.option("--fail-on-regression", "fail_pct", type=float, default=None, metavar="PCT", help="Exit 1 if a row is slower than the baseline by more than PCT%.")
@config_option
@set_option
@_friendly
def benchmark(more: tuple[str, ...], suite: str, configs: tuple[str, ...], sweeps: tuple[str, ...], repeat: int, out_dir: str,
              baseline: str | None, fail_pct: float | None, config_path: str | None, sets: tuple[str, ...]) -> None:
    """Compare configurations on a standard suite: throughput, latency, speedups, with NumPy as referee."""
    from openclaw_dask.config import parse_assignment
    from openclaw_dask.diagnostics import benchmark as bench

    files = list(configs) + [m for m in more if "=" not in m]
    sweeps = tuple(sweeps) + tuple(m for m in more if "=" in m)
    if fail_pct is not None and baseline is None:
        raise click.UsageError("--fail-on-regression needs --compare BASELINE.json")
    for f in files:
        if not Path(f).is_file():
            raise ConfigError(f"--configs {f}: no such file")
    base = dict(parse_assignment(s) for s in sets)
    confs = bench.configurations(files, sweeps, base, config_path=config_path)
    old = bench.load_report(baseline, suite=suite) if baseline else None
    try:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"--out {out_dir}: cannot create the folder ({e.strerror})") from None
    from openclaw_dask.progress import status

    with status("benchmark", show=sys.stderr.isatty()) as say:
        report = bench.run_benchmark(confs, suite=suite, repeat=repeat, progress=say, base_overrides=base)
    if old is not None:
        bench.compare(report, old)
    paths = bench.write_reports(report, out_dir)
    click.echo(Path(paths["md"]).read_text("utf-8"))
    click.echo(f"wrote {', '.join(str(p) for p in paths.values())}")
    bad = [r for r in report["rows"] if not r["ok"]]
    if bad:
        raise ResultMismatch(f"{len(bad)} row(s) disagree with NumPy: " + ", ".join(f"{r['config']}/{r['workload']}" for r in bad))
    if fail_pct is not None:
        slower = bench.regressions(report, fail_pct)
        if slower:
            raise RunError(f"{len(slower)} row(s) regressed by more than {fail_pct:g}%: " + ", ".join(
                f"{r['config']}/{r['workload']} {r['compare']['ratio']:.2f}x" for r in slower))


def _run_workload(cfg: Any, name: str, as_json: bool, show: bool) -> None:
    from openclaw_dask.session import Session
    from openclaw_dask.workloads import WORKLOADS

    with Session(cfg).start() as s:
        result = WORKLOADS[name](s, progress=show)
    if as_json:
        click.echo(json.dumps(result.to_dict()))
    else:
        from openclaw_dask.diagnostics.terminal import print_run_summary

        print_run_summary(result)
    if not result.ok:
        raise ResultMismatch(f"{name} computed {result.result!r}, expected {result.expected!r}")


def _run_script(cfg: Any, path: Path, args: tuple[str, ...], as_json: bool) -> None:
    from openclaw_dask.scripts import run_script
    from openclaw_dask.session import Session

    t0 = time.perf_counter()
    with Session(cfg).start() as s:
        exit_code = run_script(s, path, args)
        workers = len(s.workers()) or 1
        recovery = s.recovery()  # the session is this run's alone: its counts are the run's
    if as_json:
        click.echo(json.dumps({"script": str(path), "ok": exit_code == 0, "exit_code": exit_code, "wall_s": time.perf_counter() - t0, "backend": cfg.parallel.backend, "workers": workers,
                               "workers_lost": recovery.workers_lost, "tasks_recomputed": recovery.tasks_recomputed, "failures_recovered": recovery.failures_recovered}))
    elif recovery.workers_lost:  # the script's own output is on stdout; this is openclaw's
        from openclaw_dask.diagnostics.terminal import recovery_line

        click.echo(f"openclaw: {recovery_line(recovery.workers_lost, recovery.tasks_recomputed, recovery.failures_recovered)}", err=True)
    if exit_code:
        sys.exit(exit_code)



_DRY_RUN = click.option("--dry-run", is_flag=True, help="Print the command (and the dask settings it passes) instead of running it.")


def _exec(cmd: Any, dry_run: bool) -> None:
    import os
    import shlex

    if dry_run:
        click.echo(shlex.join(cmd.argv))
        for key, value in cmd.settings.items():
            click.echo(f"  dask config {key} = {value}")
        return
    sys.stdout.flush()
    os.execve(cmd.argv[0], cmd.argv, cmd.env) if os.path.isabs(cmd.argv[0]) else os.execvpe(cmd.argv[0], cmd.argv, cmd.env)


@main.command()
@config_option
@set_option
@click.option("--port", type=click.IntRange(0, 65535), default=None, help="Default: the port of cluster.scheduler_address, else 8786.")
@click.option("--scheduler-file", default=None, type=click.Path(dir_okay=False), help="Write the scheduler's address here.")
@_DRY_RUN
@_friendly
def scheduler(config_path: str | None, sets: tuple[str, ...], port: int | None, scheduler_file: str | None, dry_run: bool) -> None:
    """Run a dask scheduler shaped by the config (host or interface, protocol, TLS, timeouts, preloads)."""
    from openclaw_dask.cluster.deploy import scheduler_command

    _exec(scheduler_command(_load(config_path, sets, role="deploy"), port=port, scheduler_file=scheduler_file), dry_run)


@main.command()
@click.argument("address", required=False, default=None)
@config_option
@set_option
@click.option("--scheduler-file", default=None, type=click.Path(dir_okay=False), help="Read the scheduler's address from here.")
@_DRY_RUN
@_friendly
def worker(address: str | None, config_path: str | None, sets: tuple[str, ...], scheduler_file: str | None, dry_run: bool) -> None:
    """Run parallel.workers dask worker processes for the scheduler at ADDRESS (default: cluster.scheduler_address)."""
    from openclaw_dask.cluster.deploy import worker_command

    _exec(worker_command(_load(config_path, sets, role="deploy"), address, scheduler_file=scheduler_file), dry_run)


if __name__ == "__main__":  # pragma: no cover
    main()
