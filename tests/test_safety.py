"""Memory and disk safety: inputs that cannot fit, bounded spilling, the spill folder, Ctrl-C and SIGTERM.

Every spill here goes to the test's own folder, under a few MiB of ``max_spill``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import dask
import psutil
import pytest
from click.testing import CliRunner

import openclaw_dask
from openclaw_dask.cli import main
from openclaw_dask.cluster.scratch import LOCK, MARKER, PREFIX, SPILL_SHARE, marker_text
from tests.conftest import BIN

MiB = 2**20


# -- an input that cannot fit is refused before it runs -------------------------------------


def test_array_sum_whose_chunks_cannot_fit_is_refused_in_one_line():
    # Data bigger than memory runs out of core (tests/test_out_of_core.py); chunks that cannot fit cannot.
    t0 = time.monotonic()
    r = CliRunner().invoke(main, ["run", "array-sum", "--size", "200GiB", "--set", "parallel.task_chunk_size=64GiB"])
    assert r.exit_code == 2, r.output
    (line,) = r.output.strip().splitlines()
    assert line.startswith("openclaw: error: this graph's running tasks are projected to need "), line
    assert " on this process (" in line and "which cannot be spilled" in line and "parallel.task_chunk_size: " in line
    assert time.monotonic() - t0 < 10


def test_process_workers_bigger_input_than_memory_runs_out_of_core():
    # What fits in memory is what the workers take before they pause; past it array-sum does not persist its input
    # (nor spill it) but generates and sums it on the fly (docs/memory.md)
    r = CliRunner().invoke(main, ["run", "--size", "512MiB", "--json", "--set", "parallel.backend=process",
                                  "--set", "parallel.workers=2", "--set", "cluster.memory_limit=200MiB",
                                  "--set", "cluster.max_spill=32MiB", "--set", "workload.repeat=1"])
    assert r.exit_code == 0, r.output
    result = json.loads(r.output)
    assert result["ok"] and result["out_of_core"] and result["workers"] == 2


# -- the spill folder and its bound ----------------------------------------------------------


def test_each_session_spills_into_a_folder_of_its_own_removed_at_the_end(own_tmp):
    with openclaw_dask.session(workers=1, engine="distributed") as s:
        folder = Path(dask.config.get("temporary-directory"))
        assert folder.name.startswith(f"{PREFIX}{os.getpid()}-") and folder.is_dir() and folder.parent == own_tmp
        assert (folder / MARKER).is_file() and (folder / LOCK).is_file()
        (worker,) = s.cluster.workers.values()
        assert Path(worker.local_directory).is_relative_to(folder)
    assert not folder.exists() and list(own_tmp.iterdir()) == []
    with pytest.raises(KeyError), openclaw_dask.session(enabled=False):
        folder = Path(dask.config.get("temporary-directory"))
        raise KeyError("inside")
    assert not folder.exists()


def test_a_folder_named_in_the_config_is_used_and_kept(tmp_path):
    (tmp_path / "openclaw_config.yaml").write_text("cluster:\n  local_directory: scratch\n")
    with openclaw_dask.session(tmp_path / "openclaw_config.yaml", backend="process", workers=1) as s:
        (directory,) = s.client.run(lambda dask_worker: dask_worker.local_directory).values()
        assert Path(directory).is_relative_to(tmp_path / "scratch")
    assert (tmp_path / "scratch").is_dir()


def _dead_pid() -> int:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    if psutil.pid_exists(dead.pid):
        pytest.skip("the pid was reused at once")
    return dead.pid


@pytest.fixture
def own_tmp(tmp_path, monkeypatch):
    """The system temp folder, as sessions see it, is this test's own (other runs on the machine stay apart)."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def _stale(root: Path, pid: int, name: str = "x") -> Path:
    """A folder as a session killed outright leaves it: marked, its lock file held by nobody."""
    folder = root / f"{PREFIX}{pid}-{name}"
    folder.mkdir()
    (folder / MARKER).write_text(marker_text(pid))
    (folder / LOCK).write_bytes(b"")
    return folder


_HOLDER = """\
import fcntl, os, sys, time
folder = sys.argv[1]
os.makedirs(folder)
with open(os.path.join(folder, {marker!r}), "w") as f:
    f.write(sys.argv[2])
lock = os.open(os.path.join(folder, {lock!r}), os.O_RDWR | os.O_CREAT)
fcntl.flock(lock, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(120)
"""


def test_a_sigkilled_sessions_folder_is_removed_by_the_next_one(own_tmp):
    script = "import time, dask, openclaw_dask\nwith openclaw_dask.session(enabled=False):\n" \
             "    print(dask.config.get('temporary-directory'), flush=True)\n    time.sleep(120)\n"
    env = {**os.environ, "TMPDIR": str(own_tmp)}
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    try:
        folder = Path(proc.stdout.readline().strip())
        assert folder.parent == own_tmp and (folder / MARKER).is_file()
        (folder / "spilled").write_bytes(b"x" * 1024)
    finally:
        proc.kill()
        proc.wait()
    assert folder.is_dir()  # SIGKILL: nothing could clean up
    with openclaw_dask.session(enabled=False):
        assert not folder.exists()
    assert list(own_tmp.iterdir()) == []


def test_a_users_lookalike_folder_is_never_removed(own_tmp):
    """Issue 22: `mkdir $TMPDIR/openclaw-2024-q3-report && openclaw run array-sum` deleted the user's folder."""
    report = own_tmp / "openclaw-2024-q3-report"
    report.mkdir()
    (report / "q3.csv").write_text("revenue\n1\n")
    dead = _dead_pid()
    unlocked = own_tmp / f"{PREFIX}{dead}-nolock"  # a marker but no lock file: not provably abandoned
    unlocked.mkdir()
    (unlocked / MARKER).write_text(marker_text(dead))
    forged = _stale(own_tmp, dead, "forged")
    (forged / MARKER).write_text(f"openclaw-scratch/1 {dead} not-a-token\n")  # the wrong form
    other = _stale(own_tmp, dead + 1 if not psutil.pid_exists(dead + 1) else dead, "otherpid")
    (other / MARKER).write_text(marker_text(dead + 7))  # a marker of another process than the name says
    r = CliRunner().invoke(main, ["run", "array-sum", "--size", "16MiB"])
    assert r.exit_code == 0, r.output
    assert (report / "q3.csv").read_text() == "revenue\n1\n"
    assert unlocked.is_dir() and forged.is_dir() and other.is_dir()


def test_a_folder_locked_by_a_live_session_in_another_pid_namespace_is_kept(own_tmp):
    """A run in a second container sharing /tmp: its PID is not alive here, but it holds its lock."""
    dead = _dead_pid()
    folder = own_tmp / f"{PREFIX}{dead}-spill"
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER.format(marker=MARKER, lock=LOCK), str(folder), marker_text(dead)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        (folder / "spilled").write_bytes(b"x" * 4096)
        with openclaw_dask.session(enabled=False):
            assert (folder / "spilled").stat().st_size == 4096
    finally:
        holder.kill()
        holder.wait()
    with openclaw_dask.session(enabled=False):  # its session gone, the lock is free: now it is stale
        assert not folder.exists()


def test_removing_a_stale_folder_never_follows_a_symlink(own_tmp, tmp_path):
    victims = tmp_path / "victims"
    victims.mkdir()
    (victims / "victim.txt").write_text("precious")
    (victims / "sub").mkdir()
    (victims / "sub" / "keep.txt").write_text("precious too")
    dead = _dead_pid()
    stale = _stale(own_tmp, dead, "links")
    (stale / "to-file").symlink_to(victims / "victim.txt")
    (stale / "to-folder").symlink_to(victims / "sub")
    (stale / "nested").mkdir()
    (stale / "nested" / "deeper").symlink_to(victims)
    # the folder itself a link to a folder that looks abandoned and ours
    decoy = _stale(tmp_path, dead, "decoy")
    (decoy / "keep.txt").write_text("precious")
    (own_tmp / f"{PREFIX}{dead}-link").symlink_to(decoy)
    with openclaw_dask.session(enabled=False):
        pass
    assert not stale.exists()
    assert (victims / "victim.txt").read_text() == "precious" and (victims / "sub" / "keep.txt").read_text() == "precious too"
    assert (decoy / "keep.txt").read_text() == "precious" and (decoy / MARKER).is_file()
    assert (own_tmp / f"{PREFIX}{dead}-link").is_symlink()


def test_max_spill_auto_is_a_share_of_the_free_disk_per_worker():
    with openclaw_dask.session(workers=2, engine="distributed") as s:
        folder = dask.config.get("temporary-directory")
        expected = shutil.disk_usage(folder).free * SPILL_SHARE / 2
        (per_worker,) = s.client.run(lambda dask_worker: dask_worker.memory_manager.max_spill).values()
        assert per_worker == pytest.approx(expected, rel=0.01)
    with openclaw_dask.session(workers=2, max_spill="64MiB", engine="distributed") as s:
        assert dask.config.get("distributed.worker.memory.max-spill") == 32 * MiB
    with openclaw_dask.session(workers=2, max_spill=False, engine="distributed") as s:
        assert dask.config.get("distributed.worker.memory.max-spill") is False


def test_openclaw_worker_gets_the_same_bound_and_folder(tmp_path):
    from openclaw_dask.cluster.deploy import worker_command
    from openclaw_dask.config import load_config

    cmd = worker_command(load_config(None, {"workers": 2, "max_spill": "10GiB", "local_directory": str(tmp_path)}, env={}),
                         "tcp://127.0.0.1:8786")
    assert cmd.settings["distributed.worker.memory.max-spill"] == 5 * 2**30
    assert cmd.argv[cmd.argv.index("--local-directory") + 1] == str(tmp_path)
    auto = worker_command(load_config(None, {"workers": 1}, env={}), "tcp://127.0.0.1:8786")
    assert "--local-directory" not in auto.argv  # dask's own scratch space, which it removes on exit
    free = shutil.disk_usage(tempfile.gettempdir()).free * SPILL_SHARE
    assert auto.settings["distributed.worker.memory.max-spill"] == pytest.approx(free, rel=0.01)


def test_a_remote_clusters_workers_take_spill_settings_where_they_start():
    from openclaw_dask.cluster import load_for_backend as load_config
    from openclaw_dask.errors import ConfigError

    for key, value in (("max_spill", "1GiB"), ("local_directory", "/tmp/x")):
        with pytest.raises(ConfigError, match=f"cluster.{key} = .*set by whoever started the remote scheduler and workers"):
            load_config(None, {"backend": "remote", "scheduler_address": "tcp://127.0.0.1:8786", key: value}, env={})


def test_spilling_stops_at_max_spill(tmp_path):
    # One worker of 512 MiB holds 320 MiB of data: past the 60% target it would spill ~13 MiB and
    # more under memory pressure; max_spill stops it at 4 MiB (pausing is off so the run ends).
    (tmp_path / "c.yaml").write_text(textwrap.dedent("""\
        parallel: {backend: process, workers: 1, task_chunk_size: 2MiB}
        cluster: {memory_limit: 512MiB, max_spill: 4MiB, local_directory: spill}
        dask:
          distributed: {worker: {memory: {pause: false, terminate: false}}}
        """))
    with openclaw_dask.session(tmp_path / "c.yaml") as s:
        x = s.persist(s.array((320 * MiB // 8,), fill="ones"))
        assert s.compute(x.sum()) == 320 * MiB // 8

        def spilled(dask_worker):
            metrics = dask_worker.data.cumulative_metrics
            return sum(v for (label, unit), v in metrics.items() if label == "disk-write" and unit == "bytes")

        (written,) = s.client.run(spilled).values()
        on_disk = sum(f.stat().st_size for f in (tmp_path / "spill").rglob("*") if f.is_file())
        assert 0 < written <= 4 * MiB + 2 * MiB and on_disk <= 4 * MiB + 2 * MiB


# -- Ctrl-C and SIGTERM ------------------------------------------------------------------------


def _started(proc: subprocess.Popen, workers: int, timeout: float = 60) -> list[psutil.Process]:
    """Wait until ``proc`` has ``workers`` worker processes and its spill folder; return all its children."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        children = psutil.Process(proc.pid).children(recursive=True)
        spawned = [c for c in children if "multiprocessing" in " ".join(c.cmdline())]
        if len(spawned) >= workers and list(Path(tempfile.gettempdir()).glob(f"{PREFIX}{proc.pid}-*")):
            return children
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    raise AssertionError("the run did not start its workers")


@pytest.mark.parametrize(("command", "workers"), [
    (["run", "array-sum", "--size", "256MiB", "--set", "workload.repeat=1000"], 2),
    (["profile", "array-sum", "--size", "256MiB", "--set", "workload.repeat=1000"], 2),
    (["benchmark", "--suite", "quick", "--repeat", "50"], 0),  # interrupted in its serial baseline
])
def test_ctrl_c_ends_with_130_one_line_and_nothing_left(command, workers, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENCLAW_")}
    env.update(OPENCLAW_BACKEND="process", OPENCLAW_WORKERS="2")
    proc = subprocess.Popen([str(BIN / "openclaw"), *command], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        children = _started(proc, workers)
        time.sleep(1.0)
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole foreground group
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "openclaw: error: interrupted" and "Traceback" not in err, err
    _, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, [p.cmdline() for p in alive]
    assert not list(Path(tempfile.gettempdir()).glob(f"{PREFIX}{proc.pid}-*"))


def test_ctrl_c_while_the_cluster_starts_closes_it(tmp_path):
    """Ctrl-C as the first worker process spawns: the half-started cluster is closed, not left to exit hooks."""
    script = tmp_path / "s.py"
    script.write_text(textwrap.dedent("""\
        import os, signal, threading, time
        import psutil
        from distributed import SpecCluster
        from openclaw_dask import load_config
        from openclaw_dask.cluster.local import ProcessBackend

        def interrupt_while_starting():
            while not psutil.Process().children():
                time.sleep(0.001)
            os.kill(os.getpid(), signal.SIGINT)

        if __name__ == "__main__":
            signal.signal(signal.SIGINT, signal.default_int_handler)  # a shell's & may have left it ignored
            threading.Thread(target=interrupt_while_starting, daemon=True).start()
            try:
                ProcessBackend().start(load_config(None, {"parallel.backend": "process", "parallel.workers": 1}))
                print("started")
            except KeyboardInterrupt:
                left = [p for p in psutil.Process().children(recursive=True) if "resource_tracker" not in " ".join(p.cmdline())]
                print("interrupted", [c.status.name for c in SpecCluster._instances], len(left))
        """))
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    assert r.stdout.strip() == "interrupted ['closed'] 0", r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr


def test_sigterm_unwinds_a_session_in_a_script(tmp_path):
    script = tmp_path / "s.py"
    script.write_text(textwrap.dedent("""\
        import time
        import dask, openclaw_dask
        if __name__ == "__main__":
            with openclaw_dask.session(backend="process", workers=1):
                print(dask.config.get("temporary-directory"), flush=True)
                time.sleep(60)
        """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        folder = Path(proc.stdout.readline().strip())
        children = psutil.Process(proc.pid).children(recursive=True)
        proc.terminate()
        proc.wait(30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr.read()
    assert folder.name.startswith(PREFIX) and not folder.exists()
    _, alive = psutil.wait_procs(children, timeout=10)
    assert not alive
