from __future__ import annotations

import ast
import dataclasses
import re
import typing
from pathlib import Path

import pytest
import yaml

from openclaw_dask.cluster import load_for_backend as load_config  # the config layer's loader + the backend's rules
from openclaw_dask.config import (
    KEYS,
    ChunkSize,
    ClusterConfig,
    ParallelConfig,
    WorkloadConfig,
    default_config_text,
    values,
)
from openclaw_dask.config.model import (
    ElasticConfig,
    FaultToleranceConfig,
    GpuConfig,
    IoConfig,
    KubernetesConfig,
    MonitoringConfig,
    SecurityConfig,
    SlurmConfig,
    SshConfig,
    setting,
)
from openclaw_dask.config.schema import SECTION_CLASSES, TYPED_SECTIONS, declared_keys, key_by_name
from openclaw_dask.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def cfg(overrides=None, env=None, path=None):
    return load_config(path, overrides, env=env or {}, override_label="--set")


def write(tmp_path, text, name="openclaw_config.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


# -- a key is declared once: its field; the rest is derived ----------------------------


def test_every_key_is_its_fields_declaration():
    from openclaw_dask.config.loader import packaged_defaults
    from openclaw_dask.config.model import Config
    from openclaw_dask.config.reference import config_reference
    from openclaw_dask.config.template import yaml_text

    classes = (ParallelConfig, ClusterConfig, GpuConfig, WorkloadConfig, IoConfig, ElasticConfig, KubernetesConfig, SlurmConfig,
               SshConfig, FaultToleranceConfig, MonitoringConfig, SecurityConfig)
    assert tuple(SECTION_CLASSES.values()) == classes and TYPED_SECTIONS == tuple(f.name for f in dataclasses.fields(Config))[:12]
    assert [k.dotted for k in KEYS] == [f"{s}.{f.name}" for s, c in zip(TYPED_SECTIONS, classes) for f in dataclasses.fields(c)]
    hints = {s: typing.get_type_hints(c) for s, c in zip(TYPED_SECTIONS, classes)}
    docs, defaults = config_reference(), packaged_defaults()
    for key in KEYS:
        assert key.doc and key.coerce(key.default) == defaults.get(key.dotted), key.dotted  # the default is valid
        assert f"| `{key.dotted}` | `{yaml_text(key.default)}` | {key.range} |" in docs, key.dotted
        numeric = {int, float} & set(typing.get_args(hints[key.section][key.name]) or [hints[key.section][key.name]])
        assert key.range or not numeric, f"{key.dotted} is a number without a range"


def test_adding_a_key_is_one_field():
    extra = dataclasses.make_dataclass("Extra", [("knob", int, setting(values.integer(1, 9), 3, "turns\nthings"))], frozen=True)
    fake = dataclasses.make_dataclass("Fake", [("parallel", ParallelConfig), ("extra", extra), ("dask", dict)], frozen=True)
    knob = declared_keys(fake)[-1]
    assert len(declared_keys(fake)) == len(dataclasses.fields(ParallelConfig)) + 1
    assert (knob.dotted, knob.env, knob.default, knob.doc, knob.range) == ("extra.knob", "OPENCLAW_KNOB", 3, "turns\nthings", "1 to 9")
    with pytest.raises(TypeError):  # a field without its setting() is no key: refused at import, not skipped
        declared_keys(dataclasses.make_dataclass("Bare", [("extra", dataclasses.make_dataclass("E", [("x", int)]))]))


def test_defaults_file_is_rendered_from_the_declarations():
    text = default_config_text()
    assert yaml.safe_load(text) == {**{s: {k.name: k.default for k in KEYS if k.section == s} for s in TYPED_SECTIONS}, "dask": {}}
    lines = text.splitlines()
    for key in KEYS:  # the help text is the comment right above the key
        at = next(i for i, line in enumerate(lines) if line.startswith(f"  {key.name}: "))
        doc = key.doc.splitlines()
        assert lines[at - len(doc):at] == [f"  # {line}" for line in doc], key.dotted


def test_key_constants_are_the_declared_dotted_names():
    from openclaw_dask.config import keys

    assert keys.TASK_CHUNK_SIZE == "parallel.task_chunk_size" and keys.SIZE == "workload.size"
    for name in keys.__all__:
        assert getattr(keys, name) == key_by_name(name.lower()).dotted
    with pytest.raises(LookupError, match="not a declared key"):
        keys._dotted("task_chunk_sizes")


def _strings(tree):
    docstrings = {id(n.body[0].value) for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef,
                  ast.AsyncFunctionDef)) and ast.get_docstring(n, clean=False) is not None}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node, id(node) in docstrings


# Modules that name keys through openclaw_dask.config.keys only (outside docstrings).
KEYS_BY_CONSTANT = ("diagnostics/fixes.py", "diagnostics/tune.py", "diagnostics/analysis.py", "diagnostics/doctor.py", "cli/k8s.py",
                    "cli/_app.py", "workloads/")


def test_no_string_names_a_key_that_is_not_declared():
    sections = "|".join(TYPED_SECTIONS)
    pattern = re.compile(rf"(?<![\w./-])({sections})\.([a-z_][a-z0-9_]*)\b(?!\.\w)")  # (?!\.\w): not kubernetes.dask.org
    stale, literal = [], []
    for path in sorted((ROOT / "openclaw_dask").rglob("*.py")):
        rel = path.relative_to(ROOT / "openclaw_dask").as_posix()
        for node, is_doc in _strings(ast.parse(path.read_text())):
            for m in pattern.finditer(node.value):
                if key_by_name(m.group(0)) is None:
                    stale.append(f"{rel}:{node.lineno} {m.group(0)}")
                elif not is_doc and rel.startswith(KEYS_BY_CONSTANT):
                    literal.append(f"{rel}:{node.lineno} {m.group(0)}")
    assert not stale, f"strings name keys that are not declared: {stale}"
    assert not literal, f"use openclaw_dask.config.keys for: {literal}"


def test_key_names_are_unique_so_env_names_are():
    assert len({k.name for k in KEYS}) == len(KEYS)


def test_readme_documents_every_key():
    readme = (ROOT / "README.md").read_text()
    missing = [k.dotted for k in KEYS if f"`{k.dotted}`" not in readme]
    assert not missing, f"README lacks {missing}"
    assert "`dask`" in readme


def test_defaults_without_file():
    c = cfg()
    assert c.path is None
    assert c.parallel.backend == "thread" and c.parallel.workers == "auto" and c.parallel.enabled is True
    assert c.parallel.task_chunk_size == ChunkSize("auto")
    assert c.parallel.timeout == 30.0
    assert c.cluster.host == "127.0.0.1" and c.cluster.dashboard == "auto"  # on in Jupyter only (tests/test_jupyter.py)
    assert all(src == "default" for src in c.sources.values())


def test_config_is_frozen():
    c = cfg()
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.parallel.workers = 3


# -- layers and precedence --------------------------------------------------------------


def test_file_values_and_their_line_numbers(tmp_path):
    p = write(tmp_path, "parallel:\n  backend: process\n  workers: 3\nworkload:\n  size: 64MiB\n")
    c = cfg(path=p)
    assert c.parallel.backend == "process" and c.parallel.workers == 3
    assert c.workload.size == 64 * 2**20
    assert c.sources["parallel.workers"] == f"{p}:3"
    assert c.sources["parallel.enabled"] == "default"


def test_file_is_found_in_cwd_and_via_env(tmp_path):
    write(tmp_path, "parallel: {workers: 5}\n")
    assert cfg().parallel.workers == 5
    other = write(tmp_path, "parallel: {workers: 6}\n", "other.yaml")
    assert cfg(env={"OPENCLAW_CONFIG": str(other)}).parallel.workers == 6


def test_precedence_set_over_env_over_file_over_default(tmp_path):
    p = write(tmp_path, "parallel:\n  workers: 3\n  timeout: 40s\n  log_level: INFO\n")
    c = cfg(path=p, env={"OPENCLAW_WORKERS": "4", "OPENCLAW_TIMEOUT": "50"}, overrides={"parallel.workers": 2})
    assert c.parallel.workers == 2 and c.sources["parallel.workers"].startswith("--set")
    assert c.parallel.timeout == 50.0 and c.sources["parallel.timeout"] == "env OPENCLAW_TIMEOUT=50"
    assert c.parallel.log_level == "INFO" and c.sources["parallel.log_level"] == f"{p}:4"


def test_env_values_are_read_as_yaml():
    c = cfg(env={"OPENCLAW_ENABLED": "false", "OPENCLAW_NETWORK_INTERFACE": "lo", "OPENCLAW_TASK_CHUNK_SIZE": "8MiB"})
    assert c.parallel.enabled is False
    assert c.parallel.network_interface == "lo"
    assert c.parallel.task_chunk_size == ChunkSize("bytes", 8 * 2**20)


def test_bare_and_dotted_override_names():
    assert cfg({"workers": 2}).parallel.workers == 2
    assert cfg({"cluster.memory_limit": "1GiB"}).cluster.memory_limit == 2**30


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("64MiB", 64 * 2**20), ("2GB", 2_000_000_000), (1000, 1000), ("1e6", 1_000_000)],
)
def test_sizes(raw, expected):
    assert cfg({"workload.size": raw}).workload.size == expected


@pytest.mark.parametrize(("raw", "expected"), [("30s", 30.0), ("10m", 600.0), (45, 45.0), ("1.5s", 1.5)])
def test_durations(raw, expected):
    assert cfg({"timeout": raw}).parallel.timeout == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("auto", ChunkSize("auto")),
        ("64MiB", ChunkSize("bytes", 64 * 2**20)),
        (4096, ChunkSize("bytes", 4096)),
        ("1000000 elements", ChunkSize("elements", 1_000_000)),
        ("1e6 elements", ChunkSize("elements", 1_000_000)),
        ("8 element", ChunkSize("elements", 8)),
    ],
)
def test_task_chunk_size_forms(raw, expected):
    assert cfg({"task_chunk_size": raw}).parallel.task_chunk_size == expected


def test_dask_section_is_flattened_and_set_can_extend_it(tmp_path):
    p = write(tmp_path, "dask:\n  distributed:\n    scheduler:\n      worker-saturation: .inf\n  array.chunk-size: 32MiB\n")
    c = cfg(path=p, overrides={"dask.distributed.worker.daemon": False})
    assert dict(c.dask) == {
        "distributed.scheduler.worker-saturation": float("inf"),
        "array.chunk-size": "32MiB",
        "distributed.worker.daemon": False,
    }


# -- errors: one line naming key, value, what is allowed, and where ---------------------


def one_line(excinfo) -> str:
    msg = str(excinfo.value)
    assert "\n" not in msg
    return msg


def test_unknown_key_in_file_suggests_and_names_the_line(tmp_path):
    p = write(tmp_path, "parallel:\n  backend: thread\n  worker: 4\n")
    with pytest.raises(ConfigError) as e:
        cfg(path=p)
    assert one_line(e) == f"{p}:3: unknown key parallel.worker; did you mean parallel.workers?"


def test_key_in_the_wrong_section_says_where_it_belongs(tmp_path):
    p = write(tmp_path, "parallel:\n  host: 127.0.0.1\n")
    with pytest.raises(ConfigError, match=r"belongs to section cluster: write cluster.host"):
        cfg(path=p)


def test_bad_value_names_key_value_allowed_and_source(tmp_path):
    with pytest.raises(ConfigError) as e:
        cfg({"parallel.workers": -1})
    assert one_line(e) == "--set parallel.workers=-1: parallel.workers must be an integer from 1 to 10,000 or 'auto', got -1"
    p = write(tmp_path, "parallel:\n\n  backend: gpu\n")
    with pytest.raises(ConfigError) as e:
        cfg(path=p)
    assert one_line(e).startswith(f"{p}:3: parallel.backend must be one of thread, process, remote")
    assert "got 'gpu'" in str(e.value)


@pytest.mark.parametrize(
    ("key", "value", "needle"),
    [
        ("enabled", "yes please", "true or false"),
        ("workers", 0, "integer from 1 to 10,000"),
        ("workers", True, "integer from 1 to 10,000"),
        ("task_chunk_size", "lots", "elements"),
        ("task_chunk_size", "-5MiB", "a size from 64B to 64GiB"),
        ("size", 0, "a size from 8B to 1PiB"),
        ("timeout", "soon", "duration"),
        ("timeout", 0, "duration"),
        ("gpu_memory_fraction", 1.2, "(0, 0.95]"),
        ("log_level", "LOUD", "debug, info, warning, error"),
        ("dashboard", "everywhere", "HOST:PORT"),
        ("size", "big", "such as 64MiB"),
    ],
)
def test_bad_values(key, value, needle):
    with pytest.raises(ConfigError, match=re.escape(needle)):
        cfg({key: value})


def test_unknown_section_and_invalid_yaml(tmp_path):
    with pytest.raises(ConfigError, match=r":1: unknown section 'paralel'; did you mean parallel\?"):
        cfg(path=write(tmp_path, "paralel: {workers: 2}\n"))
    with pytest.raises(ConfigError, match=r":3: invalid YAML: (did not find )?expected .,. or .\]."):
        cfg(path=write(tmp_path, "parallel:\n  workers: [1\n  backend: x\n"))
    with pytest.raises(ConfigError, match="must be a mapping of sections"):
        cfg(path=write(tmp_path, "- 1\n- 2\n"))
    with pytest.raises(ConfigError, match="missing.yaml: no such file"):
        cfg(path=tmp_path / "missing.yaml")


def test_empty_file_means_defaults(tmp_path):
    assert cfg(path=write(tmp_path, "")).parallel.backend == "thread"


def test_unknown_env_variable_warns_with_suggestion_and_changes_nothing(caplog):
    c = cfg(env={"OPENCLAW_WORKER": "2"})
    assert c.parallel.workers == "auto"
    assert "OPENCLAW_WORKER is not an openclaw setting; did you mean OPENCLAW_WORKERS?" in caplog.text


def test_bad_env_value_names_the_variable():
    with pytest.raises(ConfigError, match=r"^env OPENCLAW_WORKERS=-3: parallel.workers must be"):
        cfg(env={"OPENCLAW_WORKERS": "-3"})


# -- every key does something: the dataflow keys are accepted (what each changes: test_dataflow, test_io)


@pytest.mark.parametrize(
    ("key", "value"),
    [("parallel.fusion_buffer_size", 8 * 2**20), ("parallel.async_io", True), ("parallel.sync_interval", 5),
     ("parallel.batch_size", 32), ("parallel.strategy", "pipeline")],
)
def test_dataflow_keys_are_accepted(key, value):
    # what each changes is tested in tests/test_dataflow.py and tests/test_io.py
    assert cfg({key: value}).get(key) == value


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"hybrid": True}, "hybrid gives each worker process omp_threads BLAS/OpenMP threads: use backend process, mpi, kubernetes, ssh or slurm"),
        ({"backend": "mpi", "prometheus": True}, "the MPI scheduler runs in rank 0"),
        ({"backend": "kubernetes"}, "backend kubernetes needs a number of worker pods"),
        ({"communication": "tls"}, "TLS needs certificates; set security.temporary_certificates=true or security.cert_file"),
        ({"backend": "process", "communication": "inproc"}, "inproc works only within one process"),
        ({"omp_threads": 2}, "apply to backends process, mpi, kubernetes, ssh and slurm"),
        ({"backend": "remote"}, "needs the address of a running dask-scheduler"),
        ({"scheduler_address": "tcp://127.0.0.1:8786"}, "used only with backend remote"),
        ({"backend": "remote", "scheduler_address": "tcp://127.0.0.1:1", "memory_limit": "1GiB"}, "set by whoever started"),
        ({"backend": "remote", "scheduler_address": "tcp://127.0.0.1:1", "dashboard": True}, "set by whoever started"),
        ({"backend": "remote", "scheduler_address": "tcp://127.0.0.1:1", "network_interface": "lo"}, "set by whoever started"),
        ({"backend": "remote", "scheduler_address": "tcp://127.0.0.1:1", "host": "localhost"}, "set by whoever started"),
        ({"backend": "remote", "scheduler_address": "tcp://127.0.0.1:x"}, "expected PROTOCOL://HOST:PORT"),
        ({"backend": "remote", "scheduler_address": "foo://127.0.0.1:1"}, "expected PROTOCOL://HOST:PORT"),
        ({"backend": "remote", "scheduler_address": "127.0.0.1:8786"}, "expected PROTOCOL://HOST:PORT"),
        ({"host": "::1"}, "IPv6 binds are not supported"),
        ({"backend": "remote", "scheduler_address": "tcp://127.0.0.1:1", "prometheus": True}, "serves its own /metrics"),
        ({"dashboard": "8790", "port": 8791}, "set only one"),
        ({"adaptive": True}, "use backend process"),
        ({"backend": "process", "adaptive": True, "min_workers": 3, "max_workers": 2}, "below elastic.min_workers"),
        ({"max_workers": 4}, "used only with elastic.adaptive: true"),
        ({"backend": "remote", "scheduler_address": "tcp://127.0.0.1:1", "communication": "ucx"}, "sets the protocol"),
        ({"host": "0.0.0.0"}, "non-loopback address without TLS"),
        ({"host": "example.org"}, "non-loopback address without TLS"),
        ({"dashboard": "0.0.0.0:8787"}, "dashboard on a non-loopback address"),
        ({"worker_start": "fork"}, "forks the worker processes of backend process (backend is thread)"),
        ({"backend": "remote", "scheduler_address": "tcp://127.0.0.1:1", "worker_start": "fork"}, "(backend is remote)"),
    ],
)
def test_combinations_that_cannot_run(overrides, needle):
    with pytest.raises(ConfigError, match=re.escape(needle)):
        cfg(overrides)


def test_insecure_bind_is_allowed_when_asked():
    c = cfg({"host": "0.0.0.0", "allow_insecure_bind": True, "dashboard": "0.0.0.0:0"})
    assert c.cluster.host == "0.0.0.0"


def test_loopback_forms_are_accepted():
    for host in ("127.0.0.1", "localhost", "127.0.0.2"):
        assert cfg({"host": host}).cluster.host == host


def test_duplicate_keys_are_refused_not_last_wins(tmp_path):
    with pytest.raises(ConfigError, match=r":3: parallel.workers appears twice \(first on line 2\)"):
        cfg(path=write(tmp_path, "parallel:\n  workers: 2\n  workers: 3\n"))
    with pytest.raises(ConfigError, match=r":3: parallel appears twice"):
        cfg(path=write(tmp_path, "parallel: {workers: 2}\nworkload: {}\nparallel: {workers: 3}\n"))


def test_odd_inputs_give_one_clear_error(tmp_path):
    for key in ("workload.size", "parallel.timeout"):
        with pytest.raises(ConfigError, match=re.escape(key)):
            cfg({key: "1e400"})
    with pytest.raises(ConfigError, match="needs a name after 'dask.'"):
        cfg({"dask.": 3})
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes("parallel: {backend: th\xe9}\n".encode("latin-1"))
    with pytest.raises(ConfigError, match="not UTF-8"):
        cfg(path=bad)


@pytest.mark.parametrize(("doc", "count"), [("docs/deploy.md", 9), ("docs/monitoring.md", 1), ("docs/gpu.md", 1)])
def test_every_config_in_the_docs_loads(tmp_path, doc, count):
    blocks = re.findall(r"```yaml\n(.*?)```", (ROOT / doc).read_text(), re.DOTALL)
    configs = [b for b in blocks if yaml.safe_load(b) and set(yaml.safe_load(b)) <= {*TYPED_SECTIONS, "dask"}]
    assert len(configs) == count
    for i, text in enumerate(configs):
        cfg(path=write(tmp_path, text, f"doc{i}.yaml"))


def test_errors_carry_their_parts_and_one_formatter_writes_them():
    with pytest.raises(ConfigError) as e:
        cfg({"parallel.workers": -1})
    err = e.value
    assert (err.key, err.value, err.source, err.allowed) == ("parallel.workers", -1, "--set parallel.workers=-1",
                                                             "an integer from 1 to 10,000 or 'auto'")
    with pytest.raises(ConfigError) as e:
        cfg({"parallel.omp_threads": 2})
    err = e.value
    assert (err.key, err.value, err.source) == ("parallel.omp_threads", 2, "--set parallel.omp_threads=2")
    assert err.hint == "set parallel.workers instead"
    assert str(err) == (f"--set parallel.omp_threads=2: parallel.omp_threads = 2: {err.message}; set parallel.workers instead")
    assert ConfigError("plain words").key is None and str(ConfigError("plain words", hint="fix")) == "plain words; fix"
