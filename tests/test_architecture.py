"""The shape of the code: layers, backends as objects, size limits, and backends from other packages."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from openclaw_dask.cluster import Backend, available_backends, get_backend, load_for_backend as load_config
from openclaw_dask.cluster.registry import builtin_backends
from openclaw_dask.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "openclaw_dask"
BIN = Path(sys.executable).parent

# Functions over 60 lines and classes over 150: none today. An exception needs its reason in docs/architecture.md.
SIZE_EXCEPTIONS: dict[str, str] = {}


def test_import_layers_hold():
    """cli -> diagnostics -> session -> (cluster, workloads, chunking) -> config -> errors (pyproject.toml)."""
    r = subprocess.run([str(BIN / "lint-imports"), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "Contracts: 1 kept, 0 broken." in r.stdout


def test_no_backend_name_is_compared_outside_cluster():
    pattern = re.compile(r"backend[a-z_]* *(==|!=|in |not in )")
    found = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
             for p in PACKAGE.rglob("*.py") if "cluster" not in p.relative_to(PACKAGE).parts
             for n, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == []


def _sizes():
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                limit = 150 if isinstance(node, ast.ClassDef) else 60
                yield f"{path.relative_to(ROOT)}:{node.name}", node.end_lineno - node.lineno + 1, limit


def test_functions_and_classes_stay_small():
    too_big = [f"{name} ({n} lines > {limit})" for name, n, limit in _sizes() if n > limit and name not in SIZE_EXCEPTIONS]
    assert too_big == []
    doc = (ROOT / "docs" / "architecture.md").read_text()
    assert all(name in doc for name in SIZE_EXCEPTIONS)


def test_every_backend_declares_what_it_can_do():
    for backend in builtin_backends():
        assert isinstance(backend, Backend) and backend.name
        assert backend.task_overhead_s > 0
        for capability, reason in backend.why_not.items():
            assert not getattr(backend.capabilities, capability), (backend.name, capability)
            assert reason
    assert get_backend("process").capabilities.resize and not get_backend("thread").capabilities.resize


def test_plans_start_nothing_and_are_plain_data():
    for name in ("thread", "process", "remote"):
        overrides = {"backend": name, "scheduler_address": "tcp://127.0.0.1:8786"} if name == "remote" else {"backend": name}
        config = load_config(None, overrides, env={})
        json.dumps(get_backend(name).plan(config), default=str)


def test_config_layer_alone_does_not_know_backends():
    from openclaw_dask.config import load_config as parse_only

    assert parse_only(None, {"backend": "mine"}, env={}).parallel.backend == "mine"  # a plugin may own that name
    with pytest.raises(ConfigError) as e:
        load_config(None, {"backend": "mine"}, env={})
    assert e.value.key == "parallel.backend" and e.value.value == "mine" and e.value.source == "argument backend=mine"
    assert "must be one of thread, process, remote, mpi" in str(e.value)


# -- a backend from another package, through the openclaw_dask.backends entry point -----

PLUGIN = '''
from types import MappingProxyType

from openclaw_dask.cluster import Backend, Capabilities, RunningCluster


class TinyBackend(Backend):
    """One in-process worker with three threads, from a package that is not openclaw_dask."""

    name = "tiny"
    capabilities = Capabilities(in_process=True)
    why_not = MappingProxyType({"resize": "is tiny on purpose"})
    default_protocol = "inproc"

    def plan(self, config):
        return {"n_workers": 1, "threads_per_worker": 3, "processes": False, "protocol": "inproc",
                "dashboard_address": None, "worker_dashboard_address": "127.0.0.1:0"}

    def start(self, config):
        from distributed import Client, LocalCluster

        cluster = LocalCluster(**self.plan(config))
        return RunningCluster(self, Client(cluster), cluster)
'''


def _wheel(folder: Path) -> Path:
    """A real wheel of the distribution ``oc-tiny-backend``, written by hand (no build backend needed)."""
    info = "oc_tiny_backend-0.1.dist-info"
    files = {
        "oc_tiny_backend/__init__.py": textwrap.dedent(PLUGIN),
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: oc-tiny-backend\nVersion: 0.1\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/entry_points.txt": "[openclaw_dask.backends]\ntiny = oc_tiny_backend:TinyBackend\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n"
    path = folder / "oc_tiny_backend-0.1-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return path


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory):
    """A folder the plugin distribution is pip-installed into; on PYTHONPATH for the processes below."""
    folder = tmp_path_factory.mktemp("plugin")
    site = folder / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--target", str(site),
                        str(_wheel(folder))], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return site


def _openclaw(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    env.pop("OPENCLAW_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "openclaw_dask", *args], capture_output=True, text=True, timeout=120, env=env,
                          cwd=site.parent)


def test_a_backend_from_another_package_runs_array_sum(plugin_site):
    r = _openclaw(plugin_site, "run", "array-sum", "--size", "16MiB", "--json", "--set", "parallel.backend=tiny")
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["ok"] and result["backend"] == "tiny"
    assert (result["workers"], result["threads"]) == (1, 3)  # the plugin's own cluster ran it


def test_a_plugin_backend_is_listed_checked_and_refused_like_a_builtin(plugin_site):
    r = _openclaw(plugin_site, "run", "--set", "parallel.backend=tiny", "--set", "parallel.hybrid=true")
    assert r.returncode == 2 and "use backend process, mpi or kubernetes (backend is tiny)" in r.stderr
    code = "from openclaw_dask.cluster import available_backends; print(available_backends()['tiny'])"
    env = {**os.environ, "PYTHONPATH": str(plugin_site)}
    listed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert listed.stdout.strip() == "installed", listed.stderr
    assert "tiny" not in available_backends()  # not installed in this process
