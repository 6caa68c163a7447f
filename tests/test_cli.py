from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest
from click.testing import CliRunner

import openclaw_dask
from openclaw_dask import __version__
from openclaw_dask.cli import main
from openclaw_dask.config import KEYS, default_config_text

from .conftest import openclaw

RESULT_KEYS = {"result", "expected", "ok", "wall_s", "gbps", "workers", "chunk_bytes", "backend"}


def invoke(*args, **kwargs):
    return CliRunner().invoke(main, list(args), catch_exceptions=False, **kwargs)


def assert_one_line_error(result, code, *needles):
    assert result.exit_code == code, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("openclaw: error: "), result.stderr
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0]


def test_version():
    assert invoke("--version").output.strip() == f"openclaw, version {__version__}"
    out = subprocess.run([sys.executable, "-m", "openclaw_dask", "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"openclaw, version {__version__}"


def test_init_writes_refuses_to_overwrite_and_forces(tmp_path):
    r = invoke("init")
    assert r.exit_code == 0 and "wrote" in r.output and f"{len(KEYS)} keys" in r.output
    target = tmp_path / "openclaw_config.yaml"
    assert target.read_text() == default_config_text()
    target.write_text("parallel: {workers: 2}\n")
    assert_one_line_error(invoke("init"), 2, "already exists", "--force")
    assert target.read_text() == "parallel: {workers: 2}\n"
    assert invoke("init", "--force").exit_code == 0
    assert target.read_text() == default_config_text()
    (tmp_path / "sub").mkdir()
    assert invoke("init", "sub").exit_code == 0 and (tmp_path / "sub" / "openclaw_config.yaml").is_file()


def test_config_show_gives_value_and_source(tmp_path, monkeypatch):
    (tmp_path / "openclaw_config.yaml").write_text("parallel:\n  workers: 3\n")
    monkeypatch.setenv("OPENCLAW_TIMEOUT", "45s")
    r = invoke("config", "show", "--json", "--set", "parallel.log_level=DEBUG")
    shown = json.loads(r.output)
    assert shown["parallel.workers"] == {"value": 3, "source": "openclaw_config.yaml:2"}
    assert shown["parallel.timeout"] == {"value": 45.0, "source": "env OPENCLAW_TIMEOUT=45s"}
    assert shown["parallel.log_level"]["value"] == "DEBUG" and shown["parallel.log_level"]["source"].startswith("--set")
    assert set(shown) == {k.dotted for k in KEYS}
    table = invoke("config", "show").output
    assert "parallel.workers" in table and "openclaw_config.yaml:2" in table


def test_config_show_writes_values_as_the_yaml_would(monkeypatch):
    """Before: Python reprs (True, None), raw bytes (1073741824) and 600.0 for ten minutes."""
    monkeypatch.setenv("COLUMNS", "200")
    out = invoke("config", "show", "--set", "parallel.timeout=600", "--set", "workload.size=1GiB",
                 "--set", "cluster.memory_limit=1500000000").output
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in out.splitlines() if line.count("│") >= 3}
    assert rows["parallel.timeout"] == "10m" and rows["workload.size"] == "1GiB"
    assert rows["cluster.memory_limit"] == "1.40GiB" and rows["parallel.enabled"] == "true"
    assert rows["parallel.fusion_buffer_size"] == "null" and rows["cluster.preload"] == "[]"
    assert not {"True", "False", "None"} & set(rows.values())


def test_config_validate_reads_the_file_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENCLAW_WORKERS", "-5")
    good = tmp_path / "plain.yaml"
    good.write_text("parallel: {workers: 2}\n")
    r = invoke("config", "validate", str(good))
    assert r.exit_code == 0 and "1 keys set" in r.output


def test_config_validate(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("parallel: {backend: process, workers: 2}\n")
    r = invoke("config", "validate", str(good))
    assert r.exit_code == 0 and "valid (2 keys set, backend process)" in r.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("parallel: {worker: 4}\n")
    assert_one_line_error(invoke("config", "validate", str(bad)), 2, "parallel.worker", "did you mean parallel.workers")
    assert_one_line_error(invoke("config", "validate", str(tmp_path / "none.yaml")), 2, "no such file")


def test_run_array_sum_json():
    r = invoke("run", "array-sum", "--size", "32MiB", "--json", "--set", "workload.repeat=1")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert RESULT_KEYS <= set(out)
    assert out["ok"] is True and out["result"] == out["expected"]
    assert out["backend"] == "thread" and out["size_bytes"] == 32 * 2**20
    assert (out["workers_lost"], out["tasks_recomputed"], out["failures_recovered"]) == (0, 0, 0)


def test_run_summary_on_the_terminal():
    r = invoke("run", "--size", "16MiB", "--set", "parallel.enabled=false")
    assert r.exit_code == 0
    for needle in ("correct", "GB/s", "wall time", "serial", "chunks", "no worker lost"):
        assert needle in r.stdout


def test_run_process_backend_uses_two_worker_processes():
    r = openclaw("run", "array-sum", "--size", "64MiB", "--json", "--set", "parallel.backend=process", "--set", "parallel.workers=2")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["ok"] and out["workers"] == 2 and out["backend"] == "process"


def test_run_serial():
    r = invoke("run", "array-sum", "--size", "16MiB", "--json", "--set", "parallel.enabled=false")
    out = json.loads(r.stdout)
    assert out["ok"] and out["backend"] == "serial" and out["enabled"] is False and out["workers"] == 1


def test_bad_set_value_exits_2_with_one_line():
    r = openclaw("run", "array-sum", "--set", "parallel.workers=-1")
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "parallel.workers" in r.stderr and "got -1" in r.stderr
    assert r.stdout == ""


def test_misspelt_key_in_file_exits_2_suggesting_workers(tmp_path):
    (tmp_path / "openclaw_config.yaml").write_text("parallel: {worker: 4}\n")
    r = openclaw("run", "array-sum", cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0
    assert "parallel.worker;" in r.stderr and "did you mean parallel.workers?" in r.stderr


@pytest.mark.parametrize("command", ["run", "profile"])
def test_the_workloads_are_in_the_help_and_listed(command):
    """Before, a user found the workload names only by mistyping one."""
    from openclaw_dask.workloads import WORKLOADS

    listed = invoke(command, "--list")
    assert listed.exit_code == 0
    assert [line.split()[0] for line in listed.output.splitlines()] == list(WORKLOADS)
    assert all(len(line.split(maxsplit=1)) == 2 for line in listed.output.splitlines())  # each with what it runs
    helped = invoke(command, "--help", terminal_width=80)
    section = helped.output.split("Workloads (TARGET; or a SCRIPT.py):", 1)[1]
    assert all(f"  {name}  " in section for name in WORKLOADS)
    assert max(map(len, helped.output.splitlines())) <= 80


def test_usage_errors_exit_2():
    assert_one_line_error(invoke("run", "array-summ"), 2, "did you mean array-sum")
    assert_one_line_error(invoke("bogus"), 2, "No such command 'bogus'")
    assert_one_line_error(invoke("run", "array-sum", "extra"), 2, "unexpected arguments")
    assert_one_line_error(invoke("run", "--config", "."), 2, "is a directory")
    assert_one_line_error(invoke("init", "missing/x.yaml"), 2, "folder missing does not exist")
    assert_one_line_error(invoke("run", "nothere.py"), 2, "script nothere.py does not exist")
    assert_one_line_error(invoke("run", "--set", "noequals"), 2, "expected KEY=VALUE")
    assert_one_line_error(invoke("run", "--set", "parallel.backend=kubernetes"), 2, "backend kubernetes needs a number of worker pods")


def test_unreachable_scheduler_is_a_failed_run_exit_1():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    r = invoke("run", "--set", "parallel.backend=remote", "--set", f"cluster.scheduler_address=tcp://127.0.0.1:{port}", "--set", "parallel.timeout=1s")
    assert_one_line_error(r, 1, "could not reach a dask-scheduler", "raise parallel.timeout")


SCRIPT = textwrap.dedent(
    """
    # no `if __name__ == "__main__":` guard, on purpose
    import sys
    import openclaw_dask

    with openclaw_dask.session() as s:
        x = s.array((100_000,), fill="arange")
        total = s.compute(x.sum())
        print("RESULT", int(total), len(s.workers()), s.config.parallel.backend, sys.argv[1:], __name__)
    """
)


def test_run_script_without_main_guard_on_the_process_backend(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    r = openclaw("run", str(script), "a1", "--set", "parallel.backend=process", "--set", "parallel.workers=2", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"RESULT {100_000 * 99_999 // 2} 2 process ['a1'] __main__"
    assert json.loads(lines[1])["ok"] is True
    assert r.stdout.count("RESULT") == 1  # the workers did not re-run the script


def test_failing_script_exits_1_with_its_traceback(tmp_path):
    script = tmp_path / "bad.py"
    script.write_text("import openclaw_dask\nwith openclaw_dask.session() as s:\n    raise RuntimeError('boom')\n")
    r = invoke("run", str(script), "--set", "parallel.enabled=false")
    assert r.exit_code == 1 and "RuntimeError: boom" in r.stderr
    (tmp_path / "exit3.py").write_text("raise SystemExit(3)\n")
    assert invoke("run", str(tmp_path / "exit3.py"), "--set", "parallel.enabled=false").exit_code == 3
    (tmp_path / "msg.py").write_text("import sys\nsys.exit('stopped on purpose')\n")
    r = invoke("run", str(tmp_path / "msg.py"), "--set", "parallel.enabled=false")
    assert r.exit_code == 1 and "stopped on purpose" in r.stderr
    (tmp_path / "syntax.py").write_text("x = (\n")
    r = invoke("run", str(tmp_path / "syntax.py"), "--set", "parallel.enabled=false")
    assert r.exit_code == 1 and "SyntaxError" in r.stderr


def test_import_needs_only_the_base_install():
    code = (
        "import sys, openclaw_dask\n"
        "heavy = ['cupy', 'dask_cuda', 'mpi4py', 'dask_mpi', 'dask_kubernetes', 'prometheus_client', 'bokeh', 'distributed']\n"
        "# nor openclaw's own parts that a script opening a session does not use (a cold start pays for each)\n"
        "heavy += ['openclaw_dask.io', 'openclaw_dask.workloads', 'openclaw_dask.diagnostics.benchmark']\n"
        "print([m for m in heavy if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_every_public_name_is_there_when_asked():
    # most are imported on first use (openclaw_dask/__init__.py): each must still resolve, and dir() lists it
    missing = [name for name in openclaw_dask.__all__ if getattr(openclaw_dask, name, None) is None]
    assert missing == [] and set(openclaw_dask.__all__) <= set(dir(openclaw_dask))
    assert openclaw_dask.load_config.__module__ == "openclaw_dask.loading" and isinstance(openclaw_dask.__version__, str)
    with pytest.raises(AttributeError, match="no attribute 'sesion'"):
        openclaw_dask.sesion  # noqa: B018


def test_plain_python_without_guard_on_process_backend_says_how_to_fix(tmp_path):
    script = tmp_path / "noguard.py"
    script.write_text(SCRIPT.replace("openclaw_dask.session()", "openclaw_dask.session(backend='process', workers=1, timeout='10s')"))
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=90)
    assert r.returncode == 1
    assert r.stderr.splitlines() == [  # one line, before any worker starts (tests/test_unguarded.py has more)
        "ClusterStartError: could not start the process cluster: noguard.py starts it at its top level (line 6), which each "
        "worker process runs again; put that code under `if __name__ == \"__main__\":`, or run it with `openclaw run noguard.py`"
    ]
    assert "RESULT" not in r.stdout


# -- every file the CLI writes: never over an existing one without --force, never through a link, whole or not at all

_QUICK = ("--size", "1MiB", "--set", "workload.repeat=1")
WRITERS = {  # command -> (argv for an output path, the file it writes there)
    "init": (lambda p: ["init", str(p)], lambda p: p),
    "profile --apply-fix": (lambda p: ["profile", *_QUICK, "--apply-fix", str(p)], lambda p: p),
    "profile --html": (lambda p: ["profile", *_QUICK, "--html", str(p)], lambda p: p),
    # tune writes only a config better with confidence: one with tiny chunks planted, and time to show it (8 s
    # once left a CI run's confirmation short of the runs its test needs, so it wrote nothing)
    # 20 s: with 12, a loaded CI host (the other xdist process) left tune's final side-by-side test too few runs twice,
    # and tune then rightly wrote nothing
    "tune --write": (lambda p: ["tune", "array-sum", "--size", "4MiB", "--set", "workload.repeat=1", "--set",
                                "parallel.task_chunk_size=16KiB", "--budget", "20s", "--write", str(p)], lambda p: p),
    "benchmark --out": (lambda p: ["benchmark", "--suite", "smoke", "--repeat", "1", "--out", str(p)], lambda p: p / "report.json"),
}


def _refused(result, *needles, code=2):
    """Exit ``code`` and one error line naming the path (progress lines of a run that happened may precede it)."""
    assert result.exit_code == code, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("openclaw: error: ")]
    assert len(errors) == 1 and errors[0] == result.stderr.strip().splitlines()[-1], result.stderr
    assert "Traceback" not in result.output and all(n in errors[0] for n in needles), errors


def _out(tmp_path, command):
    argv, written = WRITERS[command]
    path = tmp_path / ("out" if command == "benchmark --out" else "out.yaml")
    if command == "benchmark --out":
        path.mkdir()
    return argv(path), path, written(path)


@pytest.mark.parametrize("command", list(WRITERS))
def test_an_existing_output_is_refused_without_force_and_replaced_with_it(command, tmp_path):
    argv, _, target = _out(tmp_path, command)
    target.write_text("mine\n")
    r = CliRunner().invoke(main, argv)
    _refused(r, str(target), "already exists", "--force")
    assert target.read_text() == "mine\n"
    r = CliRunner().invoke(main, [*argv, "--force"])
    assert r.exit_code == 0, r.output
    assert target.read_text() != "mine\n" and not target.is_symlink(), r.output
    assert not [p for p in target.parent.iterdir() if p.name.endswith(".part")]


@pytest.mark.parametrize("command", list(WRITERS))
def test_a_symlink_at_the_output_is_refused_even_with_force(command, tmp_path):
    """Issue 22: `ln -s victim.txt fixed.yaml; openclaw profile --apply-fix fixed.yaml` overwrote victim.txt (as root)."""
    argv, path, target = _out(tmp_path, command)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    target.symlink_to(victim)
    for extra in ([], ["--force"]):
        r = CliRunner().invoke(main, [*argv, *extra])
        _refused(r, str(target), "symbolic link")
        assert victim.read_text() == "precious\n" and target.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, victim.name])
    assert not path.is_dir() or list(path.iterdir()) == [target]  # no temporary file left


def test_benchmark_refuses_an_out_folder_that_is_a_symlink(tmp_path):
    victims = tmp_path / "victims"
    victims.mkdir()
    (tmp_path / "out").symlink_to(victims)
    for extra in ([], ["--force"]):
        r = CliRunner().invoke(main, ["benchmark", "--suite", "smoke", "--repeat", "1", "--out", "out", *extra])
        _refused(r, "out", "symbolic link")
    assert list(victims.iterdir()) == []


@pytest.mark.parametrize("command", list(WRITERS))
@pytest.mark.parametrize("existing", [False, True])
def test_a_write_that_fails_leaves_no_partial_file(command, existing, tmp_path, monkeypatch):
    import errno

    import openclaw_dask.files

    def disk_full(draft, target, force):
        assert draft.read_text() and draft.parent == target.parent  # written whole, beside the target
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    argv, path, target = _out(tmp_path, command)
    if existing:
        target.write_text("mine\n")
    before = sorted(p.name for p in path.parent.iterdir()) + (sorted(p.name for p in path.iterdir()) if path.is_dir() else [])
    monkeypatch.setattr(openclaw_dask.files, "_publish", disk_full)
    r = CliRunner().invoke(main, [*argv, "--force"])
    _refused(r, f"cannot write {target}", "No space left on device", code=1)  # a failed run, not a usage error
    after = sorted(p.name for p in path.parent.iterdir()) + (sorted(p.name for p in path.iterdir()) if path.is_dir() else [])
    assert after == before  # nothing half-written, no temporary file left
    assert (target.read_text() == "mine\n") if existing else not target.exists()


def test_profile_refuses_one_path_for_both_html_and_apply_fix(tmp_path):
    r = CliRunner().invoke(main, ["profile", *_QUICK, "--html", "same.out", "--apply-fix", str(tmp_path / "same.out")])
    _refused(r, "--html and --apply-fix both name same.out")
    assert list(tmp_path.iterdir()) == []
