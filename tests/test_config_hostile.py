"""Hostile and absurd config input (issue 22, items 7-9): each case is one line, exit 2, in bounded time and memory.

Every reproduction of the issue is a case here; before the fix each one hung, ran out of
memory, printed megabytes, or raised a traceback.
"""

from __future__ import annotations

import os
import threading
import time
import tracemalloc

import pytest
from click.testing import CliRunner

from openclaw_dask.chunking import plan_chunks
from openclaw_dask.cli import main
from openclaw_dask.cli.config import validate_file
from openclaw_dask.cluster import load_for_backend as load_config
from openclaw_dask.config import ChunkSize
from openclaw_dask.config.reading import MAX_FILE_BYTES
from openclaw_dask.errors import ConfigError

BUDGET_S, BUDGET_BYTES, LINE = 2.0, 200 * 2**20, 300


def refused(func, *needles: str) -> str:
    """Run ``func``, expect one ConfigError line within the time and memory budget; return the line."""
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(ConfigError) as e:
            func()
        elapsed, peak = time.perf_counter() - start, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    line = str(e.value)
    assert "\n" not in line and len(line) < LINE, line[:1000]
    assert elapsed < BUDGET_S and peak < BUDGET_BYTES, (elapsed, peak, line)
    for needle in needles:
        assert needle in line, line
    return line


def from_file(tmp_path, text: str | bytes):
    p = tmp_path / "hostile.yaml"
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return lambda: validate_file(p)


def from_set(**overrides):
    return lambda: load_config(None, overrides, env={}, override_label="--set")


def cli(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def assert_cli_line(result, *needles: str) -> None:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("openclaw: error: "), result.stderr[:2000]
    assert len(lines[0]) < LINE + 20
    for needle in needles:
        assert needle in lines[0]


# -- 7. hostile files -------------------------------------------------------------------------

ALIAS_BOMB = "dask:\n  a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 9))
LIST_BOMB = "x: &x [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"x{i}: &x{i} [{', '.join([f'*x{i - 1}' if i > 1 else '*x'] * 9)}]\n" for i in range(1, 7)) + "parallel: {workers: *x6}\n"


def test_alias_bomb_in_dask_is_refused_fast(tmp_path):
    assert len(ALIAS_BOMB) < 700  # the 684-byte bomb: 9**9 strings once expanded (17-26 s, 1.4 GB)
    refused(from_file(tmp_path, ALIAS_BOMB), "more than 10,000 values")


def test_list_bomb_is_refused_in_one_short_line(tmp_path):
    assert len(LIST_BOMB) < 500  # before: 2 GB and a multi-MB "one-line" error
    refused(from_file(tmp_path, LIST_BOMB), "more than 10,000 values")


def test_a_large_value_that_is_not_a_bomb_is_echoed_cut(tmp_path):
    big = "[" + ", ".join(["12345678"] * 5000) + "]"
    line = refused(from_file(tmp_path, f"parallel: {{workers: {big}}}\n"), "parallel.workers must be")
    assert "5000 items" in line
    line = refused(from_file(tmp_path, f"workload: {{size: {'9' * 200_000}x}}\n"), "workload.size must be")
    assert "…" in line


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/null", "/dev/urandom"])
def test_devices_are_not_read(path):
    if not os.path.exists(path):
        pytest.skip(f"no {path}")
    line = refused(lambda: validate_file(path), "character device, not a regular file")
    assert "no such file" not in line


def test_a_fifo_does_not_hang_and_is_named(tmp_path):
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    done: list[str] = []
    t = threading.Thread(target=lambda: done.append(refused(lambda: validate_file(fifo))), daemon=True)
    t.start()
    t.join(10)
    try:
        assert done and "a named pipe, not a regular file" in done[0] and "no such file" not in done[0]
    finally:
        if t.is_alive():  # unblock a reader stuck in open()
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def test_folder_missing_file_and_oversized_file(tmp_path):
    refused(lambda: load_config(tmp_path, env={}), "is a folder, not a regular file")
    refused(lambda: validate_file(tmp_path / "none.yaml"), "none.yaml: no such file", "openclaw init")
    big = tmp_path / "big.yaml"
    big.write_text("# padding\n" * (MAX_FILE_BYTES // 10 + 1))
    refused(lambda: validate_file(big), "at most 1,048,576 (1 MiB)")


def test_cli_names_a_device_or_fifo_for_what_it_is(tmp_path):
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    assert_cli_line(cli("config", "validate", "/dev/zero"), "character device")
    assert_cli_line(cli("config", "validate", str(fifo)), "named pipe")
    assert_cli_line(cli("run", "--config", "/dev/zero"), "character device")


# -- 8. absurd values -------------------------------------------------------------------------

@pytest.mark.parametrize(("key", "value", "needle"), [
    ("parallel.task_chunk_size", 16, "a size from 64B to 64GiB"),
    ("parallel.task_chunk_size", "16", "a size from 64B to 64GiB"),
    ("parallel.task_chunk_size", "1 elements", "'8 elements' to"),
    ("parallel.timeout", 1e300, "a duration from 0.1s to 1d"),
    ("parallel.timeout", "1e300", "a duration from 0.1s to 1d"),
    ("parallel.timeout", 0.01, "a duration from 0.1s to 1d"),
    ("workload.size", "", "a size from 8B to 1PiB"),
    ("workload.size", " ", "a size from 8B to 1PiB"),
    ("workload.size", "1.5", "a size from 8B to 1PiB"),
    ("workload.size", "MiB", "a size from 8B to 1PiB"),
    ("workload.repeat", 10**30, "an integer from 1 to 1,000"),
    ("workload.repeat", "1e30", "an integer from 1 to 1,000"),
    ("fault_tolerance.retries", 10**30, "an integer from 0 to 100"),
    ("fault_tolerance.allowed_failures", 10**30, "an integer from 0 to 100"),
    ("fault_tolerance.allowed_failures", "1e30", "an integer from 0 to 100"),
    ("parallel.workers", 10**6, "an integer from 1 to 10,000"),
    ("parallel.sync_interval", 10**9, "an integer from 1 to 1,000,000"),
    ("elastic.cooldown", "1e9s", "a duration from 0s to 1d"),
    ("workload.straggler", float("nan"), "a duration from 0s to 1h"),
    ("cluster.memory_limit", "1B", "a size from 64MiB to 1PiB"),
    ("cluster.dashboard", "99999", "HOST:PORT"),
])
def test_every_number_has_a_range(key, value, needle):
    refused(from_set(**{key: value}), key, needle)


def test_fractions_of_a_byte_are_refused_but_fractions_of_a_unit_are_not():
    assert load_config(None, {"workload.size": "0.5GiB"}, env={}).workload.size == 2**29
    assert load_config(None, {"workload.size": "1_000"}, env={}).workload.size == 1000
    refused(from_set(**{"workload.size": "1000.5"}), "workload.size")


def test_chunk_size_that_means_billions_of_tasks_is_refused_naming_the_key():
    cfg = load_config(None, {"parallel.task_chunk_size": "64B"}, env={})  # a valid size...
    line = refused(lambda: plan_chunks((2**27,), "f8", task_chunk_size=cfg.parallel.task_chunk_size))
    assert line.startswith("parallel.task_chunk_size = 64: splits a 1.00 GiB array into 16,777,216 chunks")
    refused(lambda: plan_chunks((2**27,), "f8", task_chunk_size=ChunkSize("elements", 8)), "parallel.task_chunk_size")
    assert plan_chunks((2**20,), "f8", task_chunk_size=ChunkSize("bytes", 64)).n_chunks == 131_072  # under the bound


@pytest.mark.parametrize(("args", "needle"), [
    (("--size", ""), "workload.size"),
    (("--size", "1.5"), "workload.size"),
    (("--set", "parallel.task_chunk_size=16"), "parallel.task_chunk_size"),
    (("--set", "parallel.task_chunk_size=64"), "16,777,216 chunks"),  # the run's own 1 GiB array: refused before it starts
    (("--set", "parallel.timeout=1e300"), "parallel.timeout"),
    (("--set", "workload.repeat=1000000000000000000000000000000"), "workload.repeat"),
    (("--set", "workload.straggler=1e300s"), "workload.straggler"),
])
def test_run_refuses_absurd_values_before_it_starts(args, needle):
    assert_cli_line(cli("run", "array-sum", "--set", "parallel.enabled=false", *args), needle)


# -- 9. tracebacks that are now one line -----------------------------------------------------

@pytest.mark.parametrize(("text", "needle"), [
    ("parallel: {task_chunk_size: 1e400 elements}\n", "parallel.task_chunk_size"),
    ("parallel: {timeout: ''}\n", "parallel.timeout"),
    ("dask: " + "[" * 1000 + "]" * 1000 + "\n", "invalid YAML"),
    ("dask: " + "{a: " * 40 + "1" + "}" * 40 + "\n", "nested more than 32 levels"),
    ("dask: &a {x: *a}\n", "anchor &a is used inside itself"),
    ("dask: &a [*a]\n", "anchor &a is used inside itself"),
    ("parallel: {timeout: !!float abc}\n", "invalid YAML value"),
    ("parallel: {timeout: !!int 0xZZ}\n", "invalid YAML value"),
    ("workload: {straggler: !!timestamp yesterday}\n", "invalid YAML value"),
    ("workload: {repeat: " + "9" * 5000 + "}\n", "invalid YAML value"),
    ("workload: {straggler: 1e300s}\n", "workload.straggler"),
    ('cluster: {local_directory: "/tmp/a\\0b"}\n', "cluster.local_directory"),
    ('security: {ca_file: "a\\0b"}\n', "security.ca_file"),
    ("parallel: {workers: 2}\n\x00\n", "invalid YAML"),
    (b"\xff\xfe\x00junk", "not UTF-8"),
    ("? [a, b]\n: 1\n", "invalid YAML"),
    ("*nothing\n", "invalid YAML"),
])
def test_former_tracebacks_are_one_line(tmp_path, text, needle):
    refused(from_file(tmp_path, text), needle)


def test_former_tracebacks_through_the_cli(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text('cluster: {local_directory: "a\\0b"}\n')
    assert_cli_line(cli("run", "--config", str(p)), "cluster.local_directory")
    p.write_text("dask: " + "[" * 1000 + "]" * 1000 + "\n")
    assert_cli_line(cli("config", "validate", str(p)), "invalid YAML")


# -- smaller: secrets and nested duplicates ------------------------------------------------------

TOKEN = "ghp_s3cr3tT0ken"


@pytest.mark.parametrize("how", ["file", "set", "env"])
def test_kubernetes_env_values_are_never_echoed(tmp_path, how):
    bad = {"bad-name": TOKEN, "OK": "x"}
    if how == "file":
        func = from_file(tmp_path, f"kubernetes:\n  env: {{bad-name: {TOKEN}, OK: x}}\n")
    elif how == "set":
        func = from_set(**{"kubernetes.env": bad})
    else:
        func = lambda: load_config(None, env={"OPENCLAW_ENV": f"{{bad-name: {TOKEN}}}"})  # noqa: E731
    line = refused(func, "kubernetes.env", "<redacted>")
    assert TOKEN not in line and "s3cr3t" not in line


def test_nested_duplicate_keys_in_dask_are_refused(tmp_path):
    text = "dask:\n  distributed:\n    comm:\n      retry: {count: 1}\n      retry: {count: 9}\n"
    refused(from_file(tmp_path, text), "dask.distributed.comm.retry appears twice (first on line 4)", ":5:")
    refused(from_file(tmp_path, "kubernetes:\n  env: {A: 1, A: 2}\n"), "kubernetes.env.A appears twice")


def test_merge_keys_may_override_and_aliases_within_budget_load(tmp_path):
    text = "parallel: {workers: 2}\ndask:\n  a: &a {x: 1, y: [1, 2, 3]}\n  b: *a\n  c: {<<: *a, x: 2}\n"
    p = tmp_path / "ok.yaml"
    p.write_text(text)
    cfg = validate_file(p)
    assert cfg.parallel.workers == 2
    assert cfg.dask["c.x"] == 2 and cfg.dask["b.y"] == [1, 2, 3]


def test_messages_stay_one_line_whatever_a_value_holds():
    line = refused(from_set(**{"parallel.backend": "x\ny" * 500}), "parallel.backend")
    assert "got 'x\\ny" in line  # the line break shown as \\n
