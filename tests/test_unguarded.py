"""``python job.py`` on the process backend: an unguarded session is one line; a failing task names its file.

Issue 24, items 5 and 6. Each test runs a small script in a fresh interpreter, as a user would.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import types

import cloudpickle
import pytest

from openclaw_dask.cluster import code_names
from openclaw_dask.cluster.main_guard import _guarded

TIMEOUT = 120
# README's resizing example as it was, without its guard
UNGUARDED = """\
import openclaw_dask
with openclaw_dask.session(backend="process", workers=1, timeout="20s") as s:
    s.resize_workers(3, force=True)
    print("RESULT")
"""


def _python(script, cwd, *args):
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, str(script), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=TIMEOUT, env=env, check=False)


def _python_stdin(script, cwd):
    """``python -`` reading ``script`` from standard input."""
    return subprocess.run([sys.executable, "-"], input=script, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"}, check=False)


def _one_line(r):
    """Exit 1 and exactly one stderr line, the hint, with no traceback from the parent or any worker."""
    lines = r.stderr.splitlines()
    assert r.returncode == 1, r.stderr
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr and "RESULT" not in r.stdout
    return lines[0]


def test_an_unguarded_process_session_is_one_line_and_exit_1(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(UNGUARDED)
    line = _one_line(_python(script, tmp_path))
    assert line == (
        "ClusterStartError: could not start the process cluster: job.py starts it at its top level (line 2), "
        "which each worker process runs again; put that code under `if __name__ == \"__main__\":`, "
        "or run it with `openclaw run job.py`"
    )


def test_run_from_another_folder_the_hint_names_the_script_path(tmp_path):
    (tmp_path / "sub").mkdir()
    script = tmp_path / "sub" / "job.py"
    script.write_text(UNGUARDED)
    line = _one_line(_python(script, tmp_path))
    assert f"{script} starts it at its top level (line 2)" in line and f"`openclaw run {script}`" in line


def test_a_session_started_by_a_function_called_at_the_top_level_is_refused_too(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""\
        import openclaw_dask

        def main():
            with openclaw_dask.session(backend="process", workers=1, timeout="20s") as s:
                print("RESULT", len(s.workers()))

        main()
    """))
    assert "(line 7)" in _one_line(_python(script, tmp_path))


def test_a_caught_refusal_is_the_script_s_to_handle_and_other_errors_keep_their_traceback(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""\
        import openclaw_dask
        from openclaw_dask.errors import ClusterStartError
        try:
            openclaw_dask.session(backend="process", workers=1)
        except ClusterStartError as e:
            print("CAUGHT", "__main__" in str(e))
        raise KeyError("other")
    """))
    r = _python(script, tmp_path)
    assert r.returncode == 1 and r.stdout.strip() == "CAUGHT True"
    assert r.stderr.startswith("Traceback (most recent call last):") and r.stderr.strip().endswith("KeyError: 'other'")


def test_a_guarded_session_starts_its_workers(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""\
        import openclaw_dask

        if __name__ == "__main__":
            with openclaw_dask.session(backend="process", workers=1, timeout="30s") as s:
                print("RESULT", int(s.compute(s.array((1000,), fill="arange").sum())), len(s.workers()))
    """))
    r = _python(script, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "RESULT 499500 1" in r.stdout


def test_forked_workers_run_nothing_of_the_script_so_nothing_is_refused(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""\
        import dask
        from openclaw_dask.cluster.main_guard import unguarded_main_line
        print(unguarded_main_line())
        with dask.config.set({"distributed.worker.multiprocessing-method": "fork"}):
            print(unguarded_main_line())
    """))
    r = _python(script, tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"({str(script)!r}, 3)", "None"]


def test_a_forked_session_needs_no_guard_and_its_workers_share_what_this_process_made(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""\
        import sys, types
        import openclaw_dask
        sys.modules["made_by_the_parent"] = types.ModuleType("made_by_the_parent")
        with openclaw_dask.session(backend="process", workers=2, worker_start="fork", timeout="30s") as s:
            seen = s.client.run(lambda: "made_by_the_parent" in sys.modules)
            print("RESULT", int(s.compute(s.array((1000,), fill="arange").sum())), sorted(seen.values()))
    """))
    r = _python(script, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "RESULT 499500 [True, True]" in r.stdout  # spawned workers would not have it (and refuse the unguarded start)


STDIN_JOB = """\
import openclaw_dask
with openclaw_dask.session(backend="process", workers=1, worker_start="{start}", timeout="30s") as s:
    print("RESULT", int(s.compute(s.array((1000,), fill="arange").sum())))
"""


def test_a_script_read_from_stdin_is_refused_in_one_line_before_a_worker_spawns(tmp_path):
    r = _python_stdin(STDIN_JOB.format(start="spawn"), tmp_path)
    # before: every spawned worker failed to open <cwd>/<stdin>, and the session said "Nanny failed to start"
    assert _one_line(r) == (
        "ClusterStartError: could not start the process cluster: the main script was read from <stdin>, not a file, "
        "and each spawned worker process runs the main script again from its file; save it to a file and run that, "
        "or set cluster.worker_start: fork")


def test_a_script_read_from_stdin_runs_with_forked_workers(tmp_path):
    r = _python_stdin(STDIN_JOB.format(start="fork"), tmp_path)
    assert r.returncode == 0, r.stderr
    assert "RESULT 499500" in r.stdout


@pytest.mark.parametrize(("source", "line", "guarded"), [
    ("x = 1\nstart()\nif __name__ == '__main__':\n    pass\n", 2, False),  # a guard after the line guards nothing
    ("if __name__ == '__main__':\n    start()\n", 2, True),
    ("if '__main__' == __name__:\n    try:\n        start()\n    finally:\n        x = 1\n", 3, True),
    ("import sys\nif __name__ != '__main__':\n    sys.exit()\nstart()\n", 4, True),  # early exit
    ("def f(:\n", 1, True),  # unreadable: refuse nothing
])
def test_what_counts_as_guarded(tmp_path, source, line, guarded):
    path = tmp_path / "s.py"
    path.write_text(source)
    assert _guarded(str(path), line) is guarded


FAILING_TASK = """\
import traceback
import openclaw_dask


def f(x):
    y = x + 1
    raise ValueError(f"bad value {y}")


if __name__ == "__main__":
    with openclaw_dask.session(backend="process", workers=1, timeout="30s") as s:
        try:
            s.client.submit(f, 1).result()
        except ValueError:
            print(traceback.format_exc())
        s.compute(s.array((4,), fill="arange").map_blocks(f, dtype=float))
"""


def _names_the_raising_line(text, shown):
    assert "<dynamic-code>" not in text
    assert f'File "{shown}", line 7, in f\n    raise ValueError(f"bad value {{y}}")' in text, text


def test_a_failing_task_names_the_script_and_its_line(tmp_path):
    script = tmp_path / "task.py"
    script.write_text(FAILING_TASK)
    r = _python(script, tmp_path)
    assert r.returncode == 1
    _names_the_raising_line(r.stdout, script)  # submit, caught and printed by the script
    _names_the_raising_line(r.stderr, script)  # a dask graph, uncaught
    assert r.stderr.strip().splitlines()[-1].startswith("ValueError: bad value [")


def test_a_failing_task_under_openclaw_run_names_the_script_and_its_line(tmp_path):
    script = tmp_path / "task.py"
    script.write_text(FAILING_TASK.replace('backend="process", workers=1, timeout="30s"', ""))  # the CLI's session
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    argv = ["run", "task.py", "--set", "parallel.backend=process", "--set", "parallel.workers=1"]
    r = subprocess.run([sys.executable, "-m", "openclaw_dask", *argv], cwd=tmp_path, capture_output=True, text=True,
                       timeout=TIMEOUT, env=env, check=False)
    assert r.returncode == 1, r.stderr
    _names_the_raising_line(r.stdout, "task.py")
    _names_the_raising_line(r.stderr, "task.py")


def test_pickled_code_keeps_its_file_name_and_lines():
    code_names.install()
    code_names.install()  # once per process: a second call wraps nothing twice
    namespace: dict = {"__name__": "not_importable_anywhere"}
    # a function from a file no worker can import: cloudpickle sends it by value
    exec(compile("def g(a):\n    return a * 2\n", "/somewhere/job.py", "exec"), namespace)  # noqa: S102
    g = cloudpickle.loads(cloudpickle.dumps(namespace["g"]))
    assert g(21) == 42
    assert (g.__code__.co_filename, g.__code__.co_firstlineno) == ("/somewhere/job.py", 1)
    reduce = cloudpickle.Pickler._dispatch_table[types.CodeType]
    assert reduce.keeps_file_name and not getattr(reduce.__closure__[0].cell_contents, "keeps_file_name", False)
