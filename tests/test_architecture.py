"""The shape of the code: layers, backends as objects, size limits, and backends from other packages."""

from __future__ import annotations

import ast
import json
import multiprocessing.process
import os
import re
import socket
import subprocess
import sys
import textwrap
import threading
import zipfile
from pathlib import Path

import pytest

from openclaw_dask.cluster import Backend, available_backends, get_backend
from openclaw_dask.cluster import load_for_backend as load_config
from openclaw_dask.cluster.registry import builtin_backends, declared
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


def test_types_check(tmp_path):
    """mypy at the level [tool.mypy] in pyproject.toml sets; a fresh cache, so a stale one cannot hide an error."""
    r = subprocess.run([str(BIN / "mypy"), "--cache-dir", str(tmp_path / "mypy")], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "Success" in r.stdout


def _outside_cluster(pattern: str) -> list[str]:
    """Lines of the package outside cluster/ that match ``pattern``."""
    found = re.compile(pattern)
    return [f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
            for p in PACKAGE.rglob("*.py") if "cluster" not in p.relative_to(PACKAGE).parts
            for n, line in enumerate(p.read_text().splitlines(), 1) if found.search(line)]


def test_no_backend_name_is_compared_outside_cluster():
    assert _outside_cluster(r"backend[a-z_]* *(==|!=|in |not in )") == []


def test_no_engine_kind_is_tested_outside_cluster():
    """Code outside cluster/ calls the running engine object; it never asks which kind it is."""
    assert _outside_cluster(r'client is (not )?None|\["pool"\]|engine\.(kind|distributed)') == []


def test_the_package_namespace_is_its_api_and_its_modules():
    """`annotations` and `PackageNotFoundError` once leaked into `openclaw_dask`'s namespace."""
    import types

    import openclaw_dask

    extra = [name for name in dir(openclaw_dask) if not name.startswith("_") and name not in openclaw_dask.__all__
             and not isinstance(getattr(openclaw_dask, name), types.ModuleType)]
    assert extra == []


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


_PLAIN = (str, int, float, bool, type(None))


def _not_plain(value: object, where: str = "plan") -> list[str]:
    """Where ``value`` holds anything but str, int, float, bool, None, and lists, tuples and str-keyed dicts of them."""
    if isinstance(value, _PLAIN):
        return []
    if isinstance(value, (list, tuple)):
        return [bad for i, v in enumerate(value) for bad in _not_plain(v, f"{where}[{i}]")]
    if isinstance(value, dict):
        return [f"{where}: key {k!r}" for k in value if not isinstance(k, str)] + \
            [bad for k, v in value.items() for bad in _not_plain(v, f"{where}[{k!r}]")]
    return [f"{where}: {type(value).__module__}.{type(value).__name__}"]


@pytest.fixture
def nothing_starts(monkeypatch):
    """Fails the test if its own thread starts a thread or a process, or makes a socket (other threads are let be)."""
    me, started = threading.get_ident(), []

    def refuse(what, real):
        def guarded(*args, **kwargs):
            if threading.get_ident() == me:
                started.append(what)
                raise AssertionError(f"planning started {what}")
            return real(*args, **kwargs)
        return guarded

    monkeypatch.setattr(threading.Thread, "start", refuse("a thread", threading.Thread.start))
    monkeypatch.setattr(subprocess.Popen, "__init__", refuse("a process", subprocess.Popen.__init__))
    monkeypatch.setattr(os, "fork", refuse("a fork", os.fork))
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", refuse("a process", multiprocessing.process.BaseProcess.start))
    monkeypatch.setattr(socket.socket, "__init__", refuse("a socket", socket.socket.__init__))
    yield started


def _plan_configs(certs: dict[str, str]):
    """``(backend, overrides)`` for every built-in backend, and with TLS (files, then temporary) where it has TLS."""
    for name in ("thread", "process", "remote", "mpi", "cuda", "kubernetes"):
        base = {"parallel.backend": name}
        if name == "remote":
            base["cluster.scheduler_address"] = "tcp://127.0.0.1:8786"
        if name == "kubernetes":
            base["parallel.workers"] = 2
        yield name, base
        if declared(name).capabilities.tls:
            tls = {f"security.{k}": v for k, v in certs.items()}
            if name == "remote":
                yield name, {**base, **tls, "cluster.scheduler_address": "tls://127.0.0.1:8786"}
                continue
            yield name, {**base, **tls}
            yield name, {**base, "security.temporary_certificates": True}


def test_plans_start_nothing_and_are_plain_data(tmp_path, monkeypatch, nothing_starts):
    """A plan is plain data (TLS as file names; the Security object is made at start), and planning starts nothing."""
    pytest.importorskip("cryptography")
    from openclaw_dask.cluster import cuda, gpu
    from tests.test_security import _make_certificates

    certs = _make_certificates(tmp_path, "openclaw-plan-ca")
    monkeypatch.setattr(cuda, "discover", lambda: gpu.GpuInfo((gpu.Device(0, "GPU-0", "NVIDIA H200", 141 * 10**9),), "nvml"))
    seen = set()
    for name, overrides in _plan_configs(certs):
        config = load_config(None, overrides, env={})
        plan = declared(name).plan(config)
        assert _not_plain(plan) == [], (name, overrides)
        assert json.loads(json.dumps(plan)) == json.loads(json.dumps(plan, default=repr))  # no default= needed
        seen.add((name, config.security.enabled))
    assert {(n, False) for n in ("thread", "process", "remote", "mpi", "cuda", "kubernetes")} <= seen
    assert {(n, True) for n in ("thread", "process", "remote", "cuda")} <= seen
    assert nothing_starts == []


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

from openclaw_dask.cluster import Backend, Capabilities, DistributedCluster


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
        return DistributedCluster(self, config, Client(cluster), cluster)
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
    assert r.returncode == 2 and "use backend process, mpi, kubernetes, ssh or slurm (backend is tiny)" in r.stderr
    code = "from openclaw_dask.cluster import available_backends; print(available_backends()['tiny'])"
    env = {**os.environ, "PYTHONPATH": str(plugin_site)}
    listed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert listed.stdout.strip() == "installed", listed.stderr
    assert "tiny" not in available_backends()  # not installed in this process


# -- import cycles, and what checking a config needs installed ----------------------------


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while not group or group[-1] != v:
                group.append(stack.pop())
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return found


def test_no_import_cycles():
    """No module of openclaw_dask imports one that imports it back, at any depth (imports inside functions count too)."""
    import grimp

    graph = grimp.build_graph("openclaw_dask", exclude_type_checking_imports=True, cache_dir=None)
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    assert _cycles(edges) == []
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]  # the finder finds one


# As if installed without extras: these imports fail and importlib.util.find_spec says None.
_BARE = """
import runpy, sys
for name in ("dask_kubernetes", "kubernetes", "kr8s", "mpi4py", "dask_mpi", "dask_cuda", "cupy", "rmm"):
    sys.modules[name] = None
sys.argv = ["openclaw", *sys.argv[1:]]
runpy.run_module("openclaw_dask", run_name="__main__")
"""


def _bare(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENCLAW_")}
    return subprocess.run([sys.executable, "-c", _BARE, *args], capture_output=True, text=True, timeout=120, env=env,
                          cwd=tmp_path)


def test_checking_and_describing_a_config_need_no_backend_installed(tmp_path):
    files = {name: tmp_path / f"{name}.yaml" for name in ("cuda", "kubernetes", "mpi")}
    for name, path in files.items():
        path.write_text(f"parallel:\n  backend: {name}\n" + ("  workers: 4\n" if name == "kubernetes" else ""))
        r = _bare(tmp_path, "config", "validate", str(path))
        assert r.returncode == 0 and "valid (" in r.stdout, (name, r.stderr)
        r = _bare(tmp_path, "config", "show", "--json", "-c", str(path))
        assert r.returncode == 0 and json.loads(r.stdout)["parallel.backend"]["value"] == name, (name, r.stderr)
    r = _bare(tmp_path, "k8s", "manifest", "--set", "parallel.workers=4")
    assert r.returncode == 0 and "kind: DaskCluster" in r.stdout and "replicas: 4" in r.stdout, r.stderr
    for name, extra in (("kubernetes", "k8s"), ("mpi", "mpi")):  # starting one still needs it, in one line
        r = _bare(tmp_path, "run", "-c", str(files[name]), "--set", "parallel.workers=2")
        assert r.returncode == 2 and f"pip install 'openclaw-dask[{extra}]'" in r.stderr, r.stderr
        assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


# -- a reader from another package, through the openclaw_dask.readers entry point -----

READER_PLUGIN = '''
import contextlib

import numpy as np

from openclaw_dask.io import Reader


class TextReader(Reader):
    """Whitespace-separated numbers, one row per line: a format openclaw_dask does not ship."""

    name, suffixes = "text", (".text",)

    def open(self, path, **options):
        return np.loadtxt(path, ndmin=2)

    @contextlib.contextmanager
    def writing(self, path, shape, dtype, chunk_rows):
        out = np.zeros(shape, dtype)
        yield out
        np.savetxt(path, out)
'''


@pytest.fixture(scope="module")
def reader_site(tmp_path_factory):
    """A package with a ``text`` reader, a broken ``broken`` one and an ``npy`` that a built-in shadows."""
    folder = tmp_path_factory.mktemp("reader")
    info = "oc_text_reader-0.1.dist-info"
    files = {
        "oc_text_reader/__init__.py": textwrap.dedent(READER_PLUGIN),
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: oc-text-reader\nVersion: 0.1\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/entry_points.txt": "[openclaw_dask.readers]\ntext = oc_text_reader:TextReader\n"
                                    "broken = oc_text_reader:NoSuchReader\nnpy = oc_text_reader:TextReader\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n"
    wheel = folder / "oc_text_reader-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    site = folder / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--target", str(site),
                        str(wheel)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return site


def test_a_reader_from_another_package_is_a_format_everywhere(reader_site):
    r = _openclaw(reader_site, "run", "io-pipeline", "--size", "256KiB", "--json", "--set", "workload.io_format=text",
                  "--set", "workload.repeat=1")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["ok"]
    code = textwrap.dedent("""
        import numpy as np
        from openclaw_dask.io.formats import reader_for
        np.savetxt("m.text", np.arange(6.0).reshape(3, 2))
        reader = reader_for("m.text")  # found by its suffix
        print(reader.name, reader.describe("m.text")[0], type(reader_for("x.npy")).__name__)
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(reader_site), str(ROOT)])}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env, cwd=reader_site.parent)
    assert r.stdout.split() == ["text", "(3,", "2)", "NpyReader"], r.stderr  # the built-in npy wins over the plugin's
    assert "ignoring openclaw_dask.readers entry point npy = oc_text_reader:TextReader" in r.stderr
    r = _openclaw(reader_site, "run", "io-pipeline", "--size", "256KiB", "--set", "workload.io_format=broken")
    errors = [line for line in r.stderr.splitlines() if line.startswith("openclaw: error")]
    assert r.returncode == 2 and len(errors) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "reader broken failed to load (AttributeError" in errors[0] and "entry point oc_text_reader:NoSuchReader" in errors[0]
