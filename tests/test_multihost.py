"""Several hosts for real: network namespaces joined by veth pairs, one scheduler, two workers.

Topology (bridge-free; every link and route lives inside the test's own namespaces)::

    host1 (worker)               host0 (scheduler, client)               host2 (worker)
    veth0b 10.77.1.2/24 <-----> veth0a 10.77.1.1/24
                                veth1a 10.77.2.1/24 <-----> veth1b 10.77.2.2/24

host0 forwards between its two links (``net.ipv4.ip_forward`` set inside host0 only), and
host1/host2 route everything via host0, so worker-to-worker transfers cross both links.
Needs root and ``ip netns``; skipped with the reason otherwise.
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
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import BIN, _stop

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

# (namespace index, veth name, address) per end of each link; link k joins host0 to host(k+1)
LINKS = [
    ((0, "veth0a", "10.77.1.1"), (1, "veth0b", "10.77.1.2")),
    ((0, "veth1a", "10.77.2.1"), (2, "veth1b", "10.77.2.2")),
]
INSECURE = ["--set", "cluster.allow_insecure_bind=true"]

# Run inside host0. Puts the top half of a 2-D array's blocks on one worker and the bottom half on the
# other, then computes (x + x.T).sum(): every off-diagonal-quadrant block has to cross to the other worker.
CLIENT = r'''
import json, sys, time
import numpy as np
import dask
import dask.array as da
import openclaw_dask
from distributed import wait

address, n, b = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
nb = n // b

def block(i, j):
    return np.random.default_rng(1000 * i + j).random((b, b))

t0 = time.monotonic()
with openclaw_dask.session(backend="remote", scheduler_address=address, workers=2, timeout="30s") as s:
    c = s.client
    info = s.workers()
    by_host = {w["host"]: a for a, w in info.items()}
    top, bottom = by_host["10.77.1.2"], by_host["10.77.2.2"]
    futs = [[c.submit(block, i, j, workers=[top if i < nb // 2 else bottom], allow_other_workers=False, pure=False)
             for j in range(nb)] for i in range(nb)]
    wait([f for row in futs for f in row], timeout=60)
    x = da.block([[da.from_delayed(dask.delayed(f), (b, b), float) for f in row] for row in futs])
    placed = {a: len(keys) for a, keys in c.has_what().items()}
    got = float(c.compute((x + x.T).sum()).result(timeout=60))
    expected = 2 * sum(float(block(i, j).sum()) for i in range(nb) for j in range(nb))
    logs = c.run(lambda dask_worker: [{"who": t["who"], "total": t["total"]} for t in dask_worker.transfer_incoming_log])
    print(json.dumps({"workers": {a: {"host": w["host"], "nthreads": w["nthreads"]} for a, w in info.items()},
                      "placed": placed, "got": got, "expected": expected, "incoming": logs,
                      "seconds": time.monotonic() - t0}))
'''


@dataclass
class Hosts:
    """The namespaces of one test and the processes started in them."""

    names: list[str]
    procs: list[subprocess.Popen] = field(default_factory=list)

    def argv(self, host: int, *argv: str) -> list[str]:
        return ["ip", "netns", "exec", self.names[host], *argv]

    def start(self, host: int, *argv: str, log: Path) -> subprocess.Popen:
        """Start ``argv`` inside ``host`` in its own process group (killed with the fixture)."""
        with open(log, "wb") as out:
            p = subprocess.Popen(self.argv(host, *argv), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(p)
        return p

    def run(self, host: int, *argv: str, timeout: float = 60, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(host, *argv), check=False, capture_output=True, text=True, timeout=timeout, env=env)

    def counters(self) -> dict[str, int]:
        """rx/tx bytes of every veth, read inside its own namespace: ``{"veth0a.rx": ..., ...}``."""
        out = {}
        for end in (e for link in LINKS for e in link):
            host, dev, _ = end
            for way in ("rx", "tx"):
                r = self.run(host, "cat", f"/sys/class/net/{dev}/statistics/{way}_bytes", timeout=10)
                assert r.returncode == 0, r.stderr
                out[f"{dev}.{way}"] = int(r.stdout)
        return out


def _ip(*args: str) -> None:
    r = subprocess.run(["ip", *args], check=False, capture_output=True, text=True, timeout=15)
    if r.returncode:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")


@contextlib.contextmanager
def namespaces(prefix: str = "openclaw", links=LINKS):
    """Three network-namespace hosts joined as ``links`` says; removed on exit, whatever happened (skips without root or ip)."""
    if os.geteuid() != 0:
        pytest.skip("multi-host test needs root to create network namespaces (ip netns add)")
    if shutil.which("ip") is None:
        pytest.skip("multi-host test needs iproute2's `ip` command, which is not installed")
    names = [f"{prefix}-{os.getpid()}-host{i}" for i in range(3)]
    made: list[str] = []
    h = Hosts(names)
    try:
        r = subprocess.run(["ip", "netns", "add", names[0]], check=False, capture_output=True, text=True, timeout=15)
        if r.returncode:
            pytest.skip(f"`ip netns add {names[0]}` failed ({r.stderr.strip()}); network namespaces need root with CAP_SYS_ADMIN")
        made.append(names[0])
        for name in names[1:]:
            _ip("netns", "add", name)
            made.append(name)
        for name in names:
            _ip("-n", name, "link", "set", "lo", "up")
        for (h0, dev0, ip0), (h1, dev1, ip1) in links:
            # made inside the namespaces directly: the root namespace never holds either end
            _ip("-n", names[h0], "link", "add", dev0, "type", "veth", "peer", "name", dev1, "netns", names[h1])
            for host, dev, ip in ((h0, dev0, ip0), (h1, dev1, ip1)):
                _ip("-n", names[host], "addr", "add", f"{ip}/24", "dev", dev)
                _ip("-n", names[host], "link", "set", dev, "up")
            _ip("-n", names[h1], "route", "add", "default", "via", ip0)
        r = h.run(0, "sysctl", "-w", "net.ipv4.ip_forward=1", timeout=15)  # host0's own setting, not the machine's
        assert r.returncode == 0, r.stderr
        yield h
    finally:
        _stop(h.procs[::-1])
        for name in made:
            with contextlib.suppress(Exception):
                _ip("netns", "del", name)


def pids_in(*netns: str, exclude: Collection[int] = ()) -> list[int]:
    """The processes of network namespaces ``netns`` (``ip netns pids``: orphans included), less ``exclude``."""
    pids = []
    for name in netns:
        r = subprocess.run(["ip", "netns", "pids", name], check=False, capture_output=True, text=True, timeout=15)
        pids += [int(pid) for pid in r.stdout.split() if int(pid) not in exclude]
    return pids


def kill_in(*netns: str, exclude: Collection[int] = ()) -> None:
    """SIGKILL every process of network namespaces ``netns`` but ``exclude`` (what a test started there, orphans included)."""
    for pid in pids_in(*netns, exclude=exclude):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def hosts():
    with namespaces() as h:
        yield h


def _wait_for_file(path: Path, proc: subprocess.Popen, log: Path, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
            return json.loads(path.read_text())
        assert proc.poll() is None, f"scheduler exited {proc.returncode}:\n{log.read_text()}"
        assert time.monotonic() < deadline, f"no scheduler file after {timeout}s:\n{log.read_text()}"
        time.sleep(0.1)


def test_scheduler_and_workers_on_three_hosts(hosts, tmp_path):
    t0 = time.monotonic()
    oc = str(BIN / "openclaw")
    sched_file = tmp_path / "scheduler.json"
    sched = hosts.start(0, oc, "scheduler", "--port", "0", "--scheduler-file", str(sched_file),
                        "--set", "parallel.network_interface=veth0a", *INSECURE, log=tmp_path / "scheduler.log")
    address = _wait_for_file(sched_file, sched, tmp_path / "scheduler.log")["address"]
    assert address.startswith("tcp://10.77.1.1:"), address  # network_interface took effect on the scheduler
    for host, dev in ((1, "veth0b"), (2, "veth1b")):
        hosts.start(host, oc, "worker", address, "--set", f"parallel.network_interface={dev}", *INSECURE,
                    "--set", "parallel.workers=1", "--set", "parallel.backend=process", log=tmp_path / f"worker{host}.log")

    def logs() -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()}" for p in sorted(tmp_path.glob("*.log")))

    before = hosts.counters()
    r = hosts.run(0, oc, "run", "array-sum", "--json", "--set", "parallel.backend=remote",
                  "--set", f"cluster.scheduler_address={address}", "--set", "parallel.workers=2",
                  "--set", "parallel.timeout=30s", "--size", "64MiB")
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}\n{logs()}"
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["ok"] and summary["workers"] == 2, summary

    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")])}
    r = hosts.run(0, sys.executable, str(script), address, "4000", "1000", env=env)
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}\n{logs()}"
    out = json.loads(r.stdout.strip().splitlines()[-1])
    after = hosts.counters()
    delta = {k: after[k] - before[k] for k in before}

    # each worker bound the address of its own veth (network_interface took effect)
    hosts_of = {a: w["host"] for a, w in out["workers"].items()}
    assert sorted(hosts_of.values()) == ["10.77.1.2", "10.77.2.2"], out["workers"]
    assert all(a.startswith(f"tcp://{h}:") for a, h in hosts_of.items()), hosts_of
    assert min(out["placed"].values()) >= 8, out["placed"]  # half of the 16 blocks on each worker
    assert out["got"] == pytest.approx(out["expected"], rel=1e-12)

    # bytes moved between workers on different links, as each receiving worker logged them
    moved = {}
    for receiver, log in out["incoming"].items():
        for t in log:
            assert hosts_of[t["who"]] != hosts_of[receiver], (receiver, t)
        moved[hosts_of[receiver]] = sum(t["total"] for t in log)
    block = 1000 * 1000 * 8
    assert sum(moved.values()) >= 4 * block, moved  # one block of each of the 4 cross-quadrant (i, j)/(j, i) pairs, at least

    # ... and the links carried them: host1 received what its worker logged and sent what host2's logged,
    # and host0 forwarded both ways (the veth counters include TCP/IP headers, so >=)
    into1, into2 = moved.get("10.77.1.2", 0), moved.get("10.77.2.2", 0)
    assert delta["veth0b.rx"] >= into1 and delta["veth0a.tx"] >= into1, (delta, moved)
    assert delta["veth1b.rx"] >= into2 and delta["veth1a.tx"] >= into2, (delta, moved)
    assert delta["veth0b.tx"] >= into2 and delta["veth1b.tx"] >= into1, (delta, moved)
    elapsed = time.monotonic() - t0
    print(f"\nmulti-host: array-sum 64MiB ok in {summary['wall_s']:.2f}s; transfer test moved {sum(moved.values())} bytes "
          f"between workers ({into1} into host1, {into2} into host2) in {out['seconds']:.2f}s; veth deltas {delta}; "
          f"whole test {elapsed:.1f}s")


def test_tls_keeps_the_http_servers_on_loopback_on_a_real_interface(hosts, tmp_path):
    """TLS alone allows the comms on veth0a; the plain-HTTP servers (/health, /metrics) stay on 127.0.0.1."""
    pytest.importorskip("cryptography")
    from tests.test_security import _make_certificates

    oc = str(BIN / "openclaw")
    tls = [a for k, v in _make_certificates(tmp_path / "certs", "multihost-ca").items() for a in ("--set", f"security.{k}={v}")]
    iface = ["--set", "parallel.network_interface=veth0a"]
    for args in (["scheduler", *iface, *tls], ["worker", "tls://10.77.1.1:8786", *iface, *tls]):
        r = hosts.run(0, oc, *args, "--dry-run", timeout=30)
        assert r.returncode == 0, r.stderr
        argv = r.stdout.splitlines()[0].split()
        assert argv[argv.index("--interface") + 1] == "veth0a", argv
        assert argv[argv.index("--dashboard-address") + 1] == "127.0.0.1:0", argv
    # allow_insecure_bind (no TLS) is the explicit say-so that everything may listen on the veth's address
    r = hosts.run(0, oc, "worker", "tcp://10.77.1.1:8786", *iface, *INSECURE, "--dry-run", timeout=30)
    argv = r.stdout.splitlines()[0].split()
    assert r.returncode == 0 and argv[argv.index("--dashboard-address") + 1] == "10.77.1.1:0", (argv, r.stderr)
