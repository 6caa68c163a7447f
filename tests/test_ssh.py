"""Backend ssh against real SSH servers: ``sshd`` in two network-namespace hosts, a throw-away key.

Topology (test_multihost's machinery, with the hosts' links both named ``eth0`` so one
``parallel.network_interface`` exists on each)::

    host1 (sshd, scheduler, workers)      host0 (client)        host2 (sshd, workers)
    eth0 10.78.1.2/24  <----->  veth0a 10.78.1.1    veth1a 10.78.2.1  <----->  eth0 10.78.2.2/24

The remote Python is this one (the namespaces share the file system). Needs root, ``ip netns``
and ``sshd`` (Debian's openssh-server; .ci/run installs it); skipped with the reason otherwise.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from openclaw_dask.cluster.registry import declared
from tests.conftest import BIN
from tests.test_multihost import Hosts, kill_in, namespaces, pids_in

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

LINKS = [((0, "veth0a", "10.78.1.1"), (1, "eth0", "10.78.1.2")), ((0, "veth1a", "10.78.2.1"), (2, "eth0", "10.78.2.2"))]
HOST1, HOST2 = "10.78.1.2", "10.78.2.2"
PORT = 2222
SSHD = "/usr/sbin/sshd"
SSHD_CONFIG = """\
ListenAddress {address}:{port}
HostKey {host_key}
AuthorizedKeysFile {authorized_keys}
PidFile none
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
X11Forwarding no
AllowTcpForwarding no
LogLevel INFO
"""

# Run inside host0: array-sum in a session of backend ssh, then what the workers say of themselves.
CLIENT = r'''
import json, logging, sys, time
import openclaw_dask
from openclaw_dask.workloads import WORKLOADS

heard = []  # what the remote processes wrote after they started, as the session logs it
handler = logging.Handler()
handler.emit = lambda record: heard.append(record.getMessage())
with openclaw_dask.session(**json.loads(sys.argv[1])) as s:
    logging.getLogger("openclaw_dask.cluster").addHandler(handler)
    logging.getLogger("openclaw_dask.cluster").setLevel("DEBUG")
    s.client.run(lambda: logging.getLogger("distributed.worker").warning("a worker's log line"))
    result = WORKLOADS["array-sum"](s)
    info = s.client.run(lambda dask_worker: {"blas": __import__("os").environ.get("OMP_NUM_THREADS"),
                                             "local_directory": dask_worker.local_directory,
                                             "memory_limit": dask_worker.memory_manager.memory_limit})
    scheduler = s.client.scheduler_info()["address"]
    placed = s.client.run_on_scheduler(lambda dask_scheduler: "is_rootish" in vars(dask_scheduler))  # cluster/placement.py
    deadline = time.monotonic() + 10
    while sum("a worker's log line" in m for m in heard) < len(info) and time.monotonic() < deadline:
        time.sleep(0.05)
    print(json.dumps({"ok": result.ok, "scheduler": scheduler, "placed": placed, "info": info, "heard": heard,
                      "workers": {a: {"host": w["host"], "nthreads": w["nthreads"]} for a, w in s.workers().items()}}))
'''


@dataclass
class Servers:
    """Two SSH hosts in namespaces, the files that reach them, and the sshd processes."""

    hosts: Hosts
    files: Path
    sshd: list[subprocess.Popen]

    def overrides(self, **keys: object) -> dict[str, object]:
        """Backend ssh on both hosts with the throw-away key, plus ``keys``."""
        return {"parallel.backend": "ssh", "ssh.hosts": [HOST1, HOST2], "ssh.ssh_port": PORT,
                "ssh.known_hosts": str(self.files / "known_hosts"), "ssh.client_keys": [str(self.files / "client_key")],
                "cluster.allow_insecure_bind": True, "parallel.timeout": "20s", **keys}

    def sets(self, **keys: object) -> list[str]:
        """The same as ``--set`` arguments."""
        def text(v: object) -> str:
            return ",".join(map(str, v)) if isinstance(v, list) else str(v).lower() if isinstance(v, bool) else str(v)

        return [a for k, v in self.overrides(**keys).items() for a in ("--set", f"{k}={text(v)}")]

    def remote(self) -> list[str]:
        """Command lines of every process on the SSH hosts but sshd itself.

        Read from the hosts' network namespaces, not from sshd's children: a remote process whose
        session ended is re-parented away from sshd and would not be seen there.
        """
        import psutil

        out = []
        for pid in pids_in(*self.hosts.names[1:], exclude={p.pid for p in self.sshd}):
            with contextlib.suppress(psutil.NoSuchProcess):
                out.append(" ".join(psutil.Process(pid).cmdline()))
        return out


def _keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "openclaw-test", "-f", str(path)], check=True, timeout=30)
    return (path.parent / f"{path.name}.pub").read_text().strip()


def _wait_listening(log: Path, proc: subprocess.Popen, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while "Server listening" not in log.read_text():
        assert proc.poll() is None, f"sshd exited {proc.returncode}:\n{log.read_text()}"
        assert time.monotonic() < deadline, f"sshd not listening after {timeout}s:\n{log.read_text()}"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def ssh(tmp_path_factory) -> Iterator[Servers]:
    if os.geteuid() != 0:
        pytest.skip("the SSH hosts need root to create network namespaces (ip netns add)")
    missing = [tool for tool in ("ip", "ssh-keygen") if shutil.which(tool) is None] + ([SSHD] if not os.path.exists(SSHD) else [])
    if missing:
        pytest.skip(f"the SSH hosts need {', '.join(missing)} (apt-get install openssh-server iproute2)")
    pytest.importorskip("asyncssh", reason="backend ssh needs asyncssh (pip install 'openclaw-dask[ssh]')")
    files = tmp_path_factory.mktemp("ssh")
    privsep = Path("/run/sshd")  # sshd refuses to start without its privilege separation folder
    made_privsep = not privsep.exists()
    servers: list[subprocess.Popen] = []
    try:
        if made_privsep:
            privsep.mkdir(mode=0o755)
        (files / "authorized_keys").write_text(_keygen(files / "client_key") + "\n")
        _keygen(files / "other_key")  # a key the hosts do not know
        (files / "no_host_keys").write_text("")
        known = []
        with namespaces("openclaw-ssh", LINKS) as hosts:
            for i, address in ((1, HOST1), (2, HOST2)):
                host_key = files / f"host{i}_key"
                known.append(f"[{address}]:{PORT} {_keygen(host_key)}")
                conf = files / f"sshd{i}.conf"
                conf.write_text(SSHD_CONFIG.format(address=address, port=PORT, host_key=host_key,
                                                   authorized_keys=files / "authorized_keys"))
                servers.append(hosts.start(i, SSHD, "-D", "-e", "-f", str(conf), log=files / f"sshd{i}.log"))
            (files / "known_hosts").write_text("\n".join(known) + "\n")
            for i, proc in enumerate(servers, 1):
                _wait_listening(files / f"sshd{i}.log", proc)
            try:
                yield Servers(hosts, files, servers)
            finally:
                kill_in(*hosts.names[1:], exclude={p.pid for p in servers})  # sshd stops with the namespaces
    finally:
        if made_privsep:
            with contextlib.suppress(OSError):
                privsep.rmdir()


def _openclaw(servers: Servers, *args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    return servers.hosts.run(0, str(BIN / "openclaw"), *args, timeout=timeout)


def _no_remote_left(servers: Servers, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while (left := servers.remote()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, "left on the SSH hosts:\n" + "\n".join(c[:300] for c in left)


def test_plan_is_pure_and_spreads_the_workers(tmp_path):
    from openclaw_dask import load_config

    (tmp_path / "known_hosts").write_text("")
    config = load_config(None, {"parallel.backend": "ssh", "ssh.hosts": "a,bob@b", "parallel.workers": 5,
                                "parallel.omp_threads": 2, "cluster.allow_insecure_bind": True,
                                "ssh.known_hosts": str(tmp_path / "known_hosts")})
    plan = declared("ssh").plan(config)
    assert [w["n_workers"] for w in plan["workers"]] == [3, 2]
    assert plan["scheduler"]["address"] == "a" and plan["scheduler"]["options"]["host"] == "a"
    assert plan["workers"][1]["connect_options"]["username"] == "bob"
    assert all(w["options"]["nthreads"] == 2 for w in plan["workers"])
    json.dumps(plan)  # plain data: nothing started, nothing live in it


def _session(ssh: Servers, tmp_path: Path, **keys: object) -> dict:
    """Run :data:`CLIENT` in host0 with backend ssh and ``keys``; what it printed."""
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    r = ssh.hosts.run(0, sys.executable, str(script), json.dumps(ssh.overrides(**keys)), timeout=120)
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}"
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(("keys", "key", "says"), [
    ({"ssh.hosts": []}, "ssh.hosts", "backend ssh needs the machines to run on"),
    ({"ssh.hosts": "a,b,c", "parallel.workers": 2}, "parallel.workers", "fewer worker processes than the 3 ssh.hosts"),
    ({"ssh.hosts": "a,me@a"}, "ssh.hosts", "a is listed twice"),
    ({"ssh.remote_python": "/p1,/p2,/p3"}, "ssh.remote_python", "3 paths for 2 hosts"),
    ({"cluster.allow_insecure_bind": False}, "ssh.hosts", "without TLS"),
    ({"security.temporary_certificates": True}, "security.temporary_certificates", "cannot reach the SSH hosts"),
    ({"cluster.host": "10.0.0.1"}, "cluster.host", "ssh.hosts says where"),
    ({"cluster.max_spill": "1GiB"}, "cluster.max_spill", "each host's disk is its own"),
    ({"parallel.communication": "ucx"}, "parallel.communication", "tcp:// or tls://"),
    ({"elastic.adaptive": True}, "elastic.adaptive", "adaptive scaling"),
    ({"parallel.backend": "process"}, "ssh.hosts", "describes the hosts of backend ssh"),
    ({"ssh.known_hosts": "no/such/file"}, "ssh.known_hosts", "no such file"),
])
def test_what_ssh_cannot_honour_is_refused_in_one_line(tmp_path, keys, key, says):
    from openclaw_dask import load_config
    from openclaw_dask.errors import ConfigError

    (tmp_path / "known_hosts").write_text("")
    base = {"parallel.backend": "ssh", "ssh.hosts": "a,b", "parallel.workers": 2, "cluster.allow_insecure_bind": True,
            "ssh.known_hosts": str(tmp_path / "known_hosts")}
    with pytest.raises(ConfigError) as e:
        declared("ssh").plan(load_config(None, {**base, **keys}))  # files are checked by plan (at start), the rest at load
    assert e.value.key == key and says in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_array_sum_runs_on_workers_of_both_hosts(ssh, tmp_path):
    t0 = time.monotonic()
    spill = tmp_path / "spill"
    out = _session(ssh, tmp_path, **{"parallel.workers": 3, "parallel.omp_threads": 2, "cluster.memory_limit": "1GiB",
                                     "cluster.local_directory": str(spill), "workload.size": "64MiB", "workload.repeat": 1})
    assert out["ok"], out
    assert out["scheduler"].startswith(f"tcp://{HOST1}:") and out["placed"], out  # on the first host, tasks placed by input
    hosts_of = sorted(w["host"] for w in out["workers"].values())
    assert hosts_of == [HOST1, HOST1, HOST2], out["workers"]  # 3 workers: 2 on the first host, 1 on the second
    assert all(a.startswith(f"tcp://{w['host']}:") and w["nthreads"] == 2 for a, w in out["workers"].items()), out
    heard = [m for m in out["heard"] if "a worker's log line" in m]  # each host's output is read (and logged at DEBUG)
    assert sorted(m.partition(":")[0] for m in heard) == [HOST1, HOST1, HOST2], out["heard"]  # one line per worker
    for info in out["info"].values():  # the process backend's shape: omp_threads task threads, one BLAS thread
        assert info["blas"] == "1" and info["memory_limit"] == 2**30, info
        assert info["local_directory"].startswith(str(spill)), info
    _no_remote_left(ssh)
    print(f"\nssh: array-sum on 3 workers over 2 hosts in {time.monotonic() - t0:.1f}s")


def test_tls_network_interface_and_hybrid(ssh, tmp_path):
    """TLS files, one interface name on every host, hybrid, workers auto: tls:// on each host's eth0, 1 task x 2 BLAS threads."""
    pytest.importorskip("cryptography")
    from tests.test_security import _make_certificates

    t0 = time.monotonic()
    tls = {f"security.{k}": str(v) for k, v in _make_certificates(tmp_path / "certs", "ssh-ca").items()}
    out = _session(ssh, tmp_path, **{"parallel.workers": "auto", "parallel.network_interface": "eth0", "parallel.hybrid": True,
                                     "parallel.omp_threads": 2, "cluster.allow_insecure_bind": False,
                                     "workload.size": "16MiB", "workload.repeat": 1, **tls})
    assert out["ok"], out
    assert out["scheduler"].startswith(f"tls://{HOST1}:"), out
    from dask.system import CPU_COUNT  # auto: each host's cores / omp_threads (the namespaces share this machine's)

    each = max(1, CPU_COUNT // 2)
    assert sorted(a.rpartition(":")[0] for a in out["workers"]) == [f"tls://{HOST1}"] * each + [f"tls://{HOST2}"] * each, out
    assert all(w["nthreads"] == 1 for w in out["workers"].values()), out
    assert all(info["blas"] == "2" for info in out["info"].values()), out["info"]
    _no_remote_left(ssh)
    print(f"\nssh: TLS + network_interface + hybrid in {time.monotonic() - t0:.1f}s")


@pytest.mark.parametrize(("keys", "code", "says"), [
    ({"ssh.hosts": f"10.78.1.1,{HOST2}"}, 1, "ssh 10.78.1.1: cannot reach 10.78.1.1:2222 (Connection refused)"),
    ({"ssh.client_keys": "{files}/other_key"}, 1, f"ssh {HOST1}: {HOST1}:2222 refused the login"),
    ({"ssh.client_keys": "{files}/no_such_key"}, 2, "ssh.client_keys"),
    ({"ssh.known_hosts": "{files}/no_host_keys"}, 1, f"ssh {HOST1}: its host key is not in"),
    ({"ssh.remote_python": "/nonexistent/python3"}, 1, f"ssh {HOST1}: there is no /nonexistent/python3"),
    ({"ssh.remote_python": "/usr/bin/python3"}, 1, f"ssh {HOST1}: /usr/bin/python3 cannot import openclaw_dask"),
], ids=["unreachable", "refused-key", "missing-key", "unknown-host-key", "no-python", "no-openclaw"])
def test_errors_are_one_line_naming_the_host(ssh, keys, code, says):
    keys = {k: v.format(files=ssh.files) for k, v in keys.items()}
    r = _openclaw(ssh, "run", "array-sum", "--size", "8MiB", *ssh.sets(**keys), timeout=60)
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    _no_remote_left(ssh)


def test_a_failing_script_leaves_no_remote_process(ssh, tmp_path):
    script = tmp_path / "fails.py"
    script.write_text("import openclaw_dask\n"
                      "s = openclaw_dask.session()\n"
                      "assert len(s.workers()) == 2\n"
                      "raise RuntimeError('planted failure')\n")
    r = _openclaw(ssh, "run", str(script), *ssh.sets(**{"parallel.workers": 2}))
    assert r.returncode == 1 and "planted failure" in r.stderr, (r.returncode, r.stdout, r.stderr)
    _no_remote_left(ssh)


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["ctrl-c", "sigterm"])
def test_a_stopped_run_leaves_no_remote_process(ssh, tmp_path, sig, code):
    t0 = time.monotonic()
    log = tmp_path / "run.log"
    proc = ssh.hosts.start(0, str(BIN / "openclaw"), "run", "array-sum", "--size", "16MiB",
                           *ssh.sets(**{"parallel.workers": 2, "workload.straggler": "60s"}), log=log)
    deadline = time.monotonic() + 60
    while sum("dask_spec" in c and "Nanny" in c for c in ssh.remote()) < 2:  # a worker group on each host
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, f"no workers after 60s: {ssh.remote()}\n{log.read_text()}"
        time.sleep(0.1)
    time.sleep(1.0)  # into the run
    proc.send_signal(sig)
    assert proc.wait(30) == code, log.read_text()
    lines = log.read_text().strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in lines[0], lines
    _no_remote_left(ssh)
    print(f"\nssh: {sig.name} closed the remote processes ({lines[0]!r}); {time.monotonic() - t0:.1f}s")


def test_a_session_whose_scheduler_died_closes_at_once(ssh, tmp_path):
    """The scheduler's process killed under a script (its host is up): closing asks it nothing. distributed's close
    retried it for parallel.timeout (20 s here) and logged a traceback; its workers go once they miss it."""
    script = tmp_path / "lost.py"
    script.write_text("import os, signal, time\n"
                      "import openclaw_dask\n"
                      "s = openclaw_dask.session()\n"
                      "os.kill(s.client.run_on_scheduler(os.getpid), signal.SIGKILL)  # one PID namespace here\n"
                      "time.sleep(1)\n"
                      "t0 = time.monotonic()\n"
                      "s.close()\n"
                      "print(f'closed in {time.monotonic() - t0:.2f} s')\n")
    r = _openclaw(ssh, "run", str(script), *ssh.sets(**{"parallel.workers": 2}))
    assert "Traceback" not in r.stdout + r.stderr, r.stderr
    closed = [float(line.split()[2]) for line in r.stdout.splitlines() if line.startswith("closed in")]
    assert closed and closed[0] < 5, (r.returncode, r.stdout, r.stderr)
    _no_remote_left(ssh, timeout=30)  # the workers end once their death_timeout passes without the scheduler


def test_doctor_checks_each_host(ssh):
    """One row per host: logged in and imports, or the one line that says why not."""
    r = _openclaw(ssh, "doctor", "--json", *ssh.sets(**{"parallel.workers": 2, "ssh.remote_python": [sys.executable, "/usr/bin/python3"]}))
    assert r.returncode == 1, (r.stdout, r.stderr)  # a host fails, so doctor does
    rows = [c for c in json.loads(r.stdout)["checks"] if c["area"] == "ssh"]
    assert [c["status"] for c in rows] == ["ok", "fail"], rows
    assert rows[0]["found"].startswith(f"{HOST1}: logged in; {sys.executable} imports openclaw_dask and distributed"), rows
    assert rows[1]["found"] == f"ssh {HOST2}: /usr/bin/python3 cannot import openclaw_dask", rows
    assert rows[1]["fix"].startswith("install it there"), rows
    _no_remote_left(ssh)
