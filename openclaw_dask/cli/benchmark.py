"""``openclaw benchmark``: compare configurations on a standard suite."""

from __future__ import annotations

import sys

import click

from openclaw_dask.cli._app import config_option, force_option, friendly, main, overrides, set_option


@main.command(context_settings={"ignore_unknown_options": False})
@click.argument("more", nargs=-1, metavar="[CONFIG.yaml | KEY=V1,V2] ...")
@click.option("--suite", default="quick", show_default=True, help="smoke (3 kernels, 16 MiB: seconds), quick (under 2 minutes on 2 cores) or standard.")
@click.option("--configs", multiple=True, metavar="FILE", help="Config files to compare (more may follow as arguments).")
@click.option("--sweep", "sweeps", multiple=True, metavar="KEY=V1,V2", help="Sweep a key over values (repeatable; cartesian product).")
@click.option("--repeat", default=5, show_default=True, type=click.IntRange(1, 1000), help="Timed runs per row (after the warm-ups).")
@click.option("--out", "out_dir", default="benchmark-report", show_default=True, type=click.Path(file_okay=False), help="Folder for report.json/.md/.html.")
@click.option("--compare", "baseline", type=click.Path(dir_okay=False), default=None, help="A previous report.json to compare against (exit 3 if it cannot be read as one).")
@click.option("--fail-on-regression", "fail_pct", type=float, default=None, metavar="PCT", help="Exit 1 if a row is slower than the baseline by more than PCT% and significantly (p < 0.05; needs --repeat 4+).")
@config_option
@set_option
@force_option
@friendly
def benchmark(more: tuple[str, ...], suite: str, configs: tuple[str, ...], sweeps: tuple[str, ...], repeat: int, out_dir: str,
              baseline: str | None, fail_pct: float | None, config_path: str | None, sets: tuple[str, ...], force: bool) -> None:
    """Compare configurations on a standard suite: throughput, latency, speedups, with NumPy as referee."""
    from openclaw_dask.diagnostics import benchmark as bench
    from openclaw_dask.diagnostics.terminal import print_benchmark
    from openclaw_dask.progress import status

    if fail_pct is not None and baseline is None:
        raise click.UsageError("--fail-on-regression needs --compare BASELINE.json")
    files = list(configs) + [m for m in more if "=" not in m]
    sweeps = tuple(sweeps) + tuple(m for m in more if "=" in m)
    plan = bench.prepare(files, sweeps, overrides(sets), config_path=config_path, baseline=baseline, out_dir=out_dir, suite=suite,
                         force=force)
    bench.check_gate(fail_pct, repeat, plan.baseline)  # a gate too few runs could never trip is refused before any run
    with status("benchmark", show=sys.stderr.isatty()) as say:
        report = bench.run_benchmark(plan.configs, suite=suite, repeat=repeat, progress=say, base_overrides=plan.base_overrides)
    if plan.baseline is not None:
        bench.compare(report, plan.baseline)
    paths = bench.write_reports(report, plan.out_dir, force=force)
    print_benchmark(report)  # report.md's content, in tables that fit the terminal
    click.echo(f"wrote {', '.join(str(p) for p in paths.values())}")
    bench.check_report(report, fail_pct)
