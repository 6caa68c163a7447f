"""Jupyter and the top-level diagnostics: ``openclaw_dask.profile``, the dashboard in a kernel, BokehJS
sent once per kernel, notebooks on public names only (``jupyter lab`` as Getting Started runs it: tests/test_docs.py)."""

from __future__ import annotations

import ast
import json
import re
import runpy
import signal
import urllib.error
import urllib.request
from pathlib import Path

import dask
import dask.array as da
import pytest

import openclaw_dask
from openclaw_dask.diagnostics.profile import profile as profile_target

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
BOKEHJS = "BEGIN bokeh.min.js"  # the header of BokehJS's main bundle, once per copy embedded


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


_WATCH = "import faulthandler, sys\nfaulthandler.dump_traceback_later(75, file=sys.__stderr__)"


def run_cells(tmp_path: Path, *sources: str) -> dict:
    """Execute the cells in a fresh Jupyter kernel, as nbmake runs the notebooks; the executed notebook.

    A cell has 90 s, within pytest's 120, so a hung cell ends in nbclient's own error and its kernel is shut
    down (pytest's timeout left nbclient's signal handlers behind, seen once in CI); at 75 s the kernel
    writes its threads' stacks to stderr, which pytest shows with the failure.
    """
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient

    book = nbformat.v4.new_notebook()
    book.cells = [nbformat.v4.new_code_cell(s) for s in (_WATCH, *sources)]
    # Run as a background job, pytest starts with SIGINT ignored, and starting or stopping a kernel here
    # has put Python's default handler back (seen in the full suite, not alone): leave it as it was.
    sigint = signal.getsignal(signal.SIGINT)
    try:
        NotebookClient(book, timeout=90, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    finally:
        signal.signal(signal.SIGINT, sigint)
    book.cells = book.cells[1:]
    path = tmp_path / "executed.ipynb"
    nbformat.write(book, path)
    return json.loads(path.read_text())


def _outputs(book: dict, key: str) -> list[str]:
    found = []
    for cell in book["cells"]:
        for out in cell.get("outputs", []):
            text = out.get("text") if key == "stdout" else out.get("data", {}).get(key)
            if text is not None:
                found.append("".join(text) if isinstance(text, list) else text)
    return found


# -- openclaw_dask.profile -----------------------------------------------------------------


def test_profile_block_gives_the_verdicts_openclaw_profile_gives_for_the_same_code(tmp_path):
    script = ROOT / "examples" / "planted" / "skew_delayed.py"
    report = tmp_path / "report.html"
    with openclaw_dask.session(workers=2) as s:
        cli = profile_target(s, script)  # what `openclaw profile skew_delayed.py` runs
        with openclaw_dask.profile(report) as p:
            assert p.report is None  # filled in when the block ends
            runpy.run_path(str(script), run_name="__main__")  # plain dask computes, on the open session
    assert cli.exit_code == 0
    assert "data-skew" in cli.report.kinds() and "data-skew" in p.kinds()
    assert p.report.n_tasks == cli.report.n_tasks > 0  # the same graph was recorded
    assert p.session is not None and p.record.backend == "thread"
    page = report.read_text()
    assert "data-skew" in page and BOKEHJS in page  # the same HTML as --html, Bokeh inline
    assert "data-skew" in repr(p) and str(report) in repr(p)
    assert p.to_dict()["profile"]["n_tasks"] == p.report.n_tasks


def test_profile_block_records_plain_dask_with_no_session_open():
    with openclaw_dask.profile() as p:
        assert float(da.ones(1_000_000, chunks=100_000).sum().compute()) == 1_000_000
    assert p.session is None and p.path is None
    assert p.record.backend == "dask" and p.report.n_tasks >= 10
    assert p.record.graphs >= 1
    with pytest.raises(openclaw_dask.OpenclawError, match="no openclaw session was profiled"):
        p.apply_fix("fixed.yaml")


def test_profile_block_refuses_an_existing_report_before_the_block_runs(tmp_path):
    report = tmp_path / "report.html"
    report.write_text("mine")
    ran = []
    with pytest.raises(openclaw_dask.ConfigError, match="already exists"), openclaw_dask.profile(report, force=False):
        ran.append(True)
    assert not ran and report.read_text() == "mine"
    with openclaw_dask.profile(report):  # the default replaces it, as a notebook cell run twice needs
        dask.compute(dask.delayed(sum)([1, 2]))
    assert report.read_text() != "mine"


def test_apply_fix_writes_the_sessions_config_with_the_verdicts_fix(tmp_path):
    with openclaw_dask.session(size="16MiB", task_chunk_size="64KiB", repeat=1) as s:
        with openclaw_dask.profile() as p:
            assert openclaw_dask.run_workload(s, "array-sum").ok
        fixed = p.apply_fix(tmp_path / "fixed.yaml")
    assert "overhead-bound" in p.kinds()
    changes = {c.key: c for c in fixed.changes}
    assert changes["parallel.task_chunk_size"].reason == "overhead-bound"
    assert changes["workload.size"].reason == "--set"  # the session's own keyword arguments are kept
    config = openclaw_dask.load_config(tmp_path / "fixed.yaml")
    assert config.parallel.task_chunk_size.value > 64 * 2**10 and config.workload.size == 16 * 2**20


def test_run_workload_names_the_nearest_workload():
    with pytest.raises(openclaw_dask.ConfigError, match="did you mean array-sum"):
        openclaw_dask.run_workload(None, "array-sun")


def test_notebooks_use_public_names_only():
    public = set(openclaw_dask.__all__)
    for path in NOTEBOOKS:
        code = "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code")
        for node in ast.walk(ast.parse(code)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("openclaw_dask"):
                assert node.module == "openclaw_dask", f"{path.name} imports from {node.module}"
                assert {a.name for a in node.names} <= public, path.name
            if isinstance(node, ast.Import):
                assert all(a.name == "openclaw_dask" or not a.name.startswith("openclaw_dask") for a in node.names), path.name
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "openclaw_dask":
                assert node.attr in public, f"{path.name} uses openclaw_dask.{node.attr}"


# -- the dashboard: on in Jupyter (cluster.dashboard: auto), no link when off ---------------


def test_dashboard_off_outside_jupyter_gives_no_link():
    with openclaw_dask.session(backend="process", workers=1) as s:  # auto, in a script: off
        assert s.client.dashboard_link == ""  # not a URL that answers 404
        assert s.running.dashboard_link is None and "dashboard" not in s._repr_html_()
        port = s.client.scheduler_info()["services"]["dashboard"]  # the HTTP server still serves /health
        assert _status(f"http://127.0.0.1:{port}/health") == 200
    with openclaw_dask.session(backend="process", workers=1, dashboard=False) as s:
        assert s.client.dashboard_link == ""


@pytest.mark.slow
def test_dashboard_auto_is_on_in_a_jupyter_kernel_and_its_link_answers(tmp_path):
    book = run_cells(
        tmp_path,
        "import urllib.request, openclaw_dask\n"
        "with openclaw_dask.session(backend='process', workers=1) as s:\n"
        "    link = s.client.dashboard_link\n"
        "    print('LINK', link, urllib.request.urlopen(link, timeout=30).status, s.running.dashboard_link == link)\n"
        "with openclaw_dask.session(workers=2) as t:  # auto never starts a cluster by itself\n"
        "    print('ENGINE', t.engine.kind)",
    )
    out = "".join(_outputs(book, "stdout"))
    link = re.search(r"LINK (\S+) (\d+) (\w+)", out)
    assert link, out
    assert link.group(1).startswith("http://127.0.0.1:") and link.group(2) == "200" and link.group(3) == "True"
    assert "ENGINE threads" in out


# -- BokehJS once per kernel ------------------------------------------------------------------


@pytest.mark.slow
def test_bokehjs_is_sent_once_per_kernel_however_many_plots(tmp_path):
    book = run_cells(
        tmp_path,
        "import dask.array as da, openclaw_dask\n"
        "runs = []\n"
        "for n in (4, 8):\n"
        "    with openclaw_dask.session(workers=2) as s, openclaw_dask.profile() as p:\n"
        "        s.compute(da.ones(n * 100_000, chunks=100_000).sum())\n"
        "    runs.append(p)",
        "runs[0]",
        "runs[1]",
    )
    shown = _outputs(book, "text/html")
    assert len(shown) == 2 and all("Task stream" in h for h in shown)
    assert sum(h.count(BOKEHJS) for h in shown) == 1 and BOKEHJS in shown[0]
    assert len(shown[1]) < len(shown[0]) / 20  # the second plot is its document alone
    assert "<iframe" not in "".join(shown)


def test_outside_a_kernel_the_display_is_the_self_contained_page():
    with openclaw_dask.session(workers=2) as s, openclaw_dask.profile() as p:
        s.compute(da.ones(100, chunks=10).sum())
    assert p._repr_mimebundle_() is None  # IPython then shows _repr_html_: the page with Bokeh inline
    assert p._repr_html_().startswith("<iframe srcdoc=")
