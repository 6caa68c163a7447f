"""Backend slurm against a real one-node Slurm, started by a fixture in a network namespace of its own.

The fixture (:func:`slurm`) makes a munge key, a ``slurm.conf`` with this host's name and memory,
and starts ``munged``, ``slurmctld`` and ``slurmd`` as root, their state, spool and logs in a
temporary folder. The daemons and every ``openclaw`` run that talks to them live in a fresh
network namespace with only ``lo`` up, so nothing listens outside it, and no port can clash with
another Slurm. The node declares at least :data:`NODE_CPUS` CPUs (``SlurmdParameters=config_overrides``)
so that a job script for an 8-core node passes ``sbatch --test-only`` on a 2-core machine; the
jobs that really run here ask for one core each. Needs root, ``ip netns`` and Debian's
``slurm-wlm`` and ``munge`` (``.ci/run`` installs them); skipped with the reason otherwise.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import BIN
from tests.test_multihost import kill_in

pytestmark = [pytest.mark.timeout(240)]

PARTITION = os.environ.get("OPENCLAW_TEST_SLURM_PARTITION", "compute")
NODE_CPUS = 8
# argv: NAMESPACE PROGRAM ARGS...; joins the network namespace, then becomes PROGRAM (same pid)
ENTER = """
import ctypes, os, shutil, sys
with open("/run/netns/" + sys.argv[1]) as ns:
    if ctypes.CDLL(None, use_errno=True).setns(ns.fileno(), 0x40000000) != 0:  # CLONE_NEWNET
        sys.exit(f"setns {sys.argv[1]}: {os.strerror(ctypes.get_errno())}")
os.execv(shutil.which(sys.argv[2]) or sys.argv[2], sys.argv[2:])
"""
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scancel")
SMALL = ["--set", "parallel.backend=slurm", "--set", "workload.size=16MiB", "--set", "workload.repeat=1",
         "--set", "cluster.memory_limit=512MiB", "--set", "slurm.walltime=5m"]


@dataclass
class Slurm:
    """A running one-node Slurm: where its config is, and how to run a command beside it."""

    root: Path
    netns: str
    partition: str

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.root / "slurm.conf")}

    def argv(self, *argv: str) -> list[str]:
        """``argv`` run in the namespace: a Python that joins it and then execs the program, keeping its pid.

        Neither ``ip netns exec`` (it mounts a /sys of its own, without the cgroups slurmd reads) nor
        ``nsenter`` (it forks here, and keeps a Ctrl-C meant for the program) would do.
        """
        return [sys.executable, "-c", ENTER, self.netns, *argv]

    def run(self, *argv: str, timeout: float = 30, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(*argv), capture_output=True, text=True, timeout=timeout, input=stdin,
                              env={**os.environ, **self.env}, check=False)

    def popen(self, *argv: str, log: Path) -> subprocess.Popen:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OPENCLAW_")}
        with open(log, "wb") as out:
            return subprocess.Popen(self.argv(*argv), stdout=out, stderr=subprocess.STDOUT, env={**env, **self.env})

    def jobs(self) -> list[tuple[str, str, str]]:
        """``(id, name, state)`` of every job Slurm knows."""
        out = self.run("squeue", "-h", "-o", "%i %j %T").stdout
        return [tuple(line.split()) for line in out.splitlines() if line.strip()]  # type: ignore[misc]

    def openclaw(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OPENCLAW_")}
        return subprocess.run(self.argv(str(BIN / "openclaw"), *args), capture_output=True, text=True, timeout=timeout,
                              env={**env, **self.env}, check=False)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted(self.root.glob("*.log")))


def _why_not() -> str | None:
    missing = [d for d in DAEMONS if shutil.which(d) is None and not Path("/usr/sbin", d).exists()]
    if missing:
        return f"needs Slurm and munge ({', '.join(missing)} not found; apt-get install slurm-wlm munge)"
    if os.geteuid() != 0:
        return "a test Slurm runs slurmd as root (it starts jobs as their users)"
    if shutil.which("ip") is None:
        return "needs ip (iproute2) for the Slurm daemons' own network namespace"
    return None


def _conf(root: Path, munge_socket: Path, partition: str) -> str:
    host = socket.gethostname().split(".")[0]
    detected = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, timeout=30, check=True).stdout
    cpus = int(re.search(r"CPUs=(\d+)", detected).group(1))  # type: ignore[union-attr]
    memory = int(re.search(r"RealMemory=(\d+)", detected).group(1))  # type: ignore[union-attr]
    lines = {
        "ClusterName": "openclaw-test", "SlurmctldHost": f"{host}(127.0.0.1)", "SlurmUser": "root", "SlurmdUser": "root",
        "AuthType": "auth/munge", "CredType": "cred/munge", "AuthInfo": f"socket={munge_socket}",
        "SlurmctldPort": "6817", "SlurmdPort": "6818", "StateSaveLocation": f"{root}/state",
        "SlurmdSpoolDir": f"{root}/spool", "SlurmctldPidFile": f"{root}/slurmctld.pid", "SlurmdPidFile": f"{root}/slurmd.pid",
        "SlurmctldLogFile": f"{root}/slurmctld.log", "SlurmdLogFile": f"{root}/slurmd.log",
        "ProctrackType": "proctrack/linuxproc", "TaskPlugin": "task/none", "JobAcctGatherType": "jobacct_gather/none",
        "AccountingStorageType": "accounting_storage/none", "MpiDefault": "none", "SwitchType": "switch/none",
        "SelectType": "select/cons_tres", "SelectTypeParameters": "CR_Core_Memory", "SchedulerType": "sched/builtin",
        "SlurmdParameters": "config_overrides", "ReturnToService": "2", "KillWait": "2", "MinJobAge": "2",
        "SchedulerParameters": "sched_interval=1", "SlurmctldTimeout": "30", "SlurmdTimeout": "30",
    }
    text = "".join(f"{k}={v}\n" for k, v in lines.items())
    text += f"NodeName={host} NodeAddr=127.0.0.1 CPUs={max(cpus, NODE_CPUS)} RealMemory={memory} State=UNKNOWN\n"
    return text + f"PartitionName={partition} Nodes={host} Default=YES MaxTime=INFINITE State=UP\n"


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in reversed(procs):
        with contextlib.suppress(ProcessLookupError):
            p.terminate()
    for p in reversed(procs):
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)


@contextlib.contextmanager
def one_node_slurm(partition: str = PARTITION) -> Iterator[Slurm]:
    """munged, slurmctld and slurmd in a namespace and a temporary folder of their own; all gone after."""
    root = Path(tempfile.mkdtemp(prefix="openclaw-slurm-"))
    netns = f"oc-slurm-{os.getpid()}"
    procs: list[subprocess.Popen] = []
    made_ns = False
    try:
        r = subprocess.run(["ip", "netns", "add", netns], capture_output=True, text=True, timeout=15, check=False)
        if r.returncode:
            pytest.skip(f"`ip netns add` failed ({r.stderr.strip()}); the test Slurm needs its own network namespace")
        made_ns = True
        subprocess.run(["ip", "-n", netns, "link", "set", "lo", "up"], check=True, timeout=15)
        # getaddrinfo(AI_ADDRCONFIG), which slurmctld binds with, finds nothing where only loopback has an
        # address: a veth pair with both ends inside the namespace gives it one that leads nowhere
        for cmd in (["link", "add", "oc0", "type", "veth", "peer", "name", "oc1"], ["addr", "add", "10.78.0.1/32", "dev", "oc0"],
                    ["link", "set", "oc0", "up"]):
            subprocess.run(["ip", "-n", netns, *cmd], check=True, timeout=15)
        slurm = Slurm(root, netns, partition)
        for sub in ("state", "spool", "munge"):
            (root / sub).mkdir(mode=0o700)
        key = root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        sock = root / "munge" / "munge.socket"
        procs.append(slurm.popen("munged", "-F", "-f", f"--key-file={key}", f"--socket={sock}", f"--pid-file={root}/munged.pid",
                                 f"--seed-file={root}/munge/seed", f"--log-file={root}/munged.log", log=root / "munged.out"))
        _wait(lambda: sock.exists(), 15, "munged did not make its socket", slurm)
        (root / "slurm.conf").write_text(_conf(root, sock, partition))
        procs.append(slurm.popen("slurmctld", "-D", "-c", "-i", log=root / "slurmctld.out"))
        procs.append(slurm.popen("slurmd", "-D", log=root / "slurmd.out"))
        _wait(lambda: "idle" in slurm.run("sinfo", "-h", "-o", "%t").stdout, 60, "the node did not become idle", slurm)
        yield slurm
    finally:
        if made_ns and procs:
            slurm = Slurm(root, netns, partition)
            with contextlib.suppress(Exception):
                slurm.run("scancel", "--full", "-u", "root", timeout=15)
            with contextlib.suppress(AssertionError):  # what is left is killed below; the tests assert none is
                _wait(lambda: not slurm.jobs(), 15, "jobs left at the end", slurm)
        _stop(procs)
        if made_ns:
            kill_in(netns)  # a job step whose slurmd went first: all of them are this test's
            subprocess.run(["ip", "netns", "del", netns], timeout=15, check=False, capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def _wait(ready, timeout: float, what: str, slurm: Slurm) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout:g}s\n{slurm.logs()}")
        time.sleep(0.3)


# -- no Slurm needed ---------------------------------------------------------------------------


def test_plan_maps_the_config_onto_slurmcluster_keywords():
    from openclaw_dask.cluster.slurm import SlurmBackend
    from openclaw_dask.config import load_config

    config = load_config(None, {"parallel.backend": "slurm", "parallel.workers": 8, "parallel.omp_threads": 4,
                                "parallel.hybrid": True, "slurm.processes_per_job": 2, "slurm.partition": "compute",
                                "slurm.qos": "short", "slurm.walltime": "1h", "cluster.memory_limit": "3GiB",
                                "parallel.timeout": "45s", "cluster.local_directory": "/scratch/me"})
    kw = SlurmBackend().plan(config)
    assert (kw["n_workers"], kw["processes"], kw["cores"], kw["job_cpu"]) == (8, 2, 2, 8)  # hybrid: 1 task thread, 4 BLAS
    assert (kw["memory"], kw["walltime"], kw["queue"], kw["death_timeout"]) == (f"{6 * 2**30}B", "01:00:00", "compute", 45)
    assert "--qos=short" in kw["job_extra_directives"] and kw["local_directory"] == "/scratch/me"
    assert "export OMP_NUM_THREADS=4" in kw["job_script_prologue"]
    assert "export DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT=45.0s" in kw["job_script_prologue"]
    assert kw["scheduler_options"]["host"] == "127.0.0.1" and kw["scheduler_options"]["dashboard"] is False


@pytest.mark.parametrize(("sets", "key"), [
    (["parallel.workers=auto"], "parallel.workers"),
    (["parallel.workers=3", "slurm.processes_per_job=2"], "parallel.workers"),
    (["parallel.workers=2", "cluster.max_spill=1GiB"], "cluster.max_spill"),
    (["parallel.workers=2", "parallel.communication=inproc"], "parallel.communication"),
    (["parallel.workers=2", "elastic.adaptive=true"], "elastic.max_workers"),  # adaptive needs a largest job count
])
def test_what_a_batch_job_cannot_honour_is_one_line(sets, key):
    from tests.conftest import openclaw

    args = ["slurm", "script"] + [a for s in sets for a in ("--set", s)]
    r = openclaw(*args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert key in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_slurm_keys_are_refused_on_another_backend():
    import openclaw_dask
    from openclaw_dask.errors import ConfigError

    with pytest.raises(ConfigError, match=r"slurm.partition.*backend slurm"):
        openclaw_dask.load_config(None, {"parallel.backend": "process", "slurm.partition": "compute"})


# -- against the real one-node Slurm ------------------------------------------------------------


def test_acceptance_script_passes_sbatch_test_only(slurm):
    r = slurm.openclaw("slurm", "script", "--set", "parallel.backend=slurm", "--set", "parallel.workers=8",
                       "--set", "parallel.omp_threads=8", "--set", f"slurm.partition={slurm.partition}")
    assert r.returncode == 0, r.stderr
    script = r.stdout
    for line in ("#SBATCH --cpus-per-task=8", "#SBATCH --mem=16G", "#SBATCH -t 00:30:00", f"#SBATCH -p {slurm.partition}",
                 "export OMP_NUM_THREADS=1", "--nthreads 8"):
        assert line in script, script
    test = slurm.run("sbatch", "--test-only", stdin=script)
    assert test.returncode == 0 and "to start at" in test.stderr, test.stderr + slurm.logs()
    assert slurm.jobs() == []  # --test-only submits nothing


def _json_result(text: str) -> dict:
    """The ``--json`` summary: the last line that is a JSON object (worker logs may come before it)."""
    return json.loads([line for line in text.splitlines() if line.startswith("{")][-1])


def test_array_sum_runs_in_two_jobs_and_leaves_none(slurm, tmp_path):
    seen: list[list[tuple[str, str, str]]] = []
    proc = slurm.popen(str(BIN / "openclaw"), "run", "array-sum", "--json", *SMALL, "--set", "parallel.workers=2",
                       log=tmp_path / "run.log")
    try:
        while proc.poll() is None:
            seen.append(slurm.jobs())
            time.sleep(0.5)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)
    out = (tmp_path / "run.log").read_text()
    assert proc.returncode == 0, out + slurm.logs()
    result = _json_result(out)
    assert result["ok"] is True, result
    running = max((sum(state == "RUNNING" and name == "openclaw-worker" for _, name, state in s) for s in seen), default=0)
    assert running == 2, seen
    _wait(lambda: slurm.jobs() == [], 15, "jobs left after the run", slurm)


@pytest.mark.parametrize(("how", "status"), [("SIGINT", 130), ("SIGTERM", 128 + signal.SIGTERM)])
def test_ctrl_c_and_sigterm_leave_no_job(slurm, tmp_path, how, status):
    log = tmp_path / "run.log"
    proc = slurm.popen(str(BIN / "openclaw"), "run", "array-sum", *SMALL, "--set", "parallel.workers=1",
                       "--set", "workload.straggler=60s", "--set", "parallel.task_chunk_size=4MiB", log=log)  # chunk 2 of 4 sleeps
    try:
        _wait(lambda: any(state == "RUNNING" for _, _, state in slurm.jobs()) or proc.poll() is not None, 60,
              "no worker job ran", slurm)
        time.sleep(3)  # the worker has joined and the straggler is sleeping
        proc.send_signal(getattr(signal, how))
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    text = log.read_text()
    assert proc.returncode == status, text
    assert "Traceback" not in text and len(text.strip().splitlines()) == 1, text
    _wait(lambda: slurm.jobs() == [], 15, "jobs left after " + how, slurm)


def test_a_worker_job_cancelled_mid_run_still_gives_the_exact_sum(slurm, tmp_path):
    log = tmp_path / "run.log"
    proc = slurm.popen(str(BIN / "openclaw"), "run", "array-sum", "--json", *SMALL, "--set", "parallel.workers=2",
                       "--set", "workload.straggler=4s", "--set", "parallel.task_chunk_size=2MiB",
                       "--set", f"slurm.log_directory={tmp_path}", "--set", "parallel.log_level=INFO", log=log)

    def joined() -> int:  # workers that say so in their job's error file (slurm.log_directory)
        return sum("Registered to" in p.read_text(errors="replace") for p in tmp_path.glob("openclaw-worker-*.err"))

    try:
        _wait(lambda: joined() == 2 or proc.poll() is not None, 60, "two workers did not join", slurm)
        time.sleep(1.5)  # the session has started; the array is being made, the straggler sleeping
        first = min(int(job) for job, _, _ in slurm.jobs())
        slurm.run("scancel", str(first))
        proc.wait(90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    text = log.read_text()
    assert proc.returncode == 0, text + slurm.logs()
    result = _json_result(text)
    assert result["ok"] is True and result["failures_recovered"] >= 1, result
    _wait(lambda: slurm.jobs() == [], 15, "jobs left after the run", slurm)


def _doctor_rows(r: subprocess.CompletedProcess) -> list[dict]:
    return [c for c in json.loads(r.stdout)["checks"] if c["area"] == "slurm"]


def test_doctor_finds_the_controller_the_partition_and_munge(slurm):
    base = ("doctor", "--json", "--set", "parallel.backend=slurm", "--set", "parallel.workers=1",
            "--set", "cluster.memory_limit=512MiB")
    rows = _doctor_rows(slurm.openclaw(*base, "--set", f"slurm.partition={slurm.partition}"))
    assert [c["status"] for c in rows] == ["ok", "ok", "ok"], rows
    assert "munge made a credential and read it back" in rows[2]["found"], rows
    r = slurm.openclaw(*base, "--set", "slurm.partition=nosuch")
    rows = _doctor_rows(r)
    assert rows[1]["status"] == "fail" and "nosuch" in rows[1]["found"] and slurm.partition in rows[1]["fix"], rows
    start = [c for c in json.loads(r.stdout)["checks"] if c["area"] == "start-up"]
    assert "sbatch refused the worker jobs" in start[0]["found"] and "Invalid partition" in start[0]["found"], start


def test_a_job_sbatch_refuses_is_one_line_not_a_wait(slurm):
    r = slurm.openclaw("run", "array-sum", *SMALL, "--set", "parallel.workers=1", "--set", "slurm.partition=nosuch", timeout=60)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "sbatch refused the worker jobs" in r.stderr and "Invalid partition name" in r.stderr, r.stderr
    assert slurm.jobs() == []


def test_doctor_says_when_no_controller_answers(tmp_path, monkeypatch):
    if shutil.which("sinfo") is None:
        pytest.skip("needs Slurm's commands (apt-get install slurm-wlm)")
    from openclaw_dask.cluster.slurm import probe
    from openclaw_dask.config import load_config

    conf = tmp_path / "slurm.conf"  # a controller on a loopback port where none listens
    conf.write_text("ClusterName=none\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort=9\nMessageTimeout=1\n"
                    "NodeName=localhost CPUs=1\nPartitionName=p Nodes=localhost\n")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    rows = probe(load_config(None, {"parallel.backend": "slurm", "parallel.workers": 1, "parallel.timeout": "2s"}))
    assert len(rows) == 1 and rows[0][0] == "fail" and "did not answer sinfo" in rows[0][1], rows


RESIZE = r'''
import json, subprocess
import dask.array as da
import openclaw_dask

def jobs():
    out = subprocess.run(["squeue", "-h", "-t", "PENDING,RUNNING", "-o", "%i"], capture_output=True, text=True, check=True)
    return len(out.stdout.split())  # a cancelled job may show as COMPLETING for a moment

with openclaw_dask.session(backend="slurm", workers=1, memory_limit="512MiB", walltime="5m", timeout="60s") as s:
    x = s.persist(da.arange(4_000_000, chunks=250_000, dtype="float64"))
    seen = [(len(s.workers()), jobs())]
    s.resize_workers(3, force=True)
    seen.append((len(s.workers()), jobs()))
    s.resize_workers(1, force=True)
    seen.append((len(s.workers()), jobs()))
    total = float(s.compute(x.sum()))
print(json.dumps({"seen": seen, "total": total}))
'''


def test_resize_one_three_one_submits_and_cancels_jobs(slurm, tmp_path):
    r = slurm.run(str(BIN / "python"), "-c", RESIZE, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:] + slurm.logs()
    out = _json_result(r.stdout)
    assert out["seen"] == [[1, 1], [3, 3], [1, 1]], out
    assert out["total"] == 4_000_000 * 3_999_999 / 2  # exact: integers below 2**53, data moved off the retired workers
    _wait(lambda: slurm.jobs() == [], 15, "jobs left after the session", slurm)


REPLACED = r'''
import json, subprocess, time
import dask.array as da
import openclaw_dask

def running():
    out = subprocess.run(["squeue", "-h", "-t", "RUNNING", "-o", "%i"], capture_output=True, text=True, check=True)
    return sorted(int(i) for i in out.stdout.split())

with openclaw_dask.session(backend="slurm", workers=2, memory_limit="512MiB", walltime="5m", timeout="60s") as s:
    x = s.persist(da.arange(4_000_000, chunks=250_000, dtype="float64"))
    before = running()
    subprocess.run(["scancel", str(before[0])], check=True)
    deadline = time.monotonic() + 60
    while (len(running()) < 2 or before[0] in running() or len(s.workers()) < 2) and time.monotonic() < deadline:
        time.sleep(0.5)
    after, workers = running(), len(s.workers())
    total = float(s.compute(x.sum()))
print(json.dumps({"before": before, "after": after, "workers": workers, "total": total}))
'''


def test_a_job_that_leaves_the_queue_is_replaced(slurm):
    r = slurm.run(str(BIN / "python"), "-c", REPLACED, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:] + slurm.logs()
    out = _json_result(r.stdout)
    assert len(out["after"]) == 2 and out["before"][0] not in out["after"] and out["workers"] == 2, out
    assert out["total"] == 4_000_000 * 3_999_999 / 2, out  # the cancelled worker's chunks were recomputed
    assert "submitting a replacement" in r.stderr, r.stderr[-2000:]
    _wait(lambda: slurm.jobs() == [], 15, "jobs left after the session", slurm)
