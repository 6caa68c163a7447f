"""openclaw doctor: every check passes here with defaults, and each fails for real when the machine says so."""

from __future__ import annotations

import json
import socket

import psutil

from openclaw_dask.config import load_config
from openclaw_dask.diagnostics.doctor import check_memory, check_network, doctor

from .test_cli import invoke
from .test_security import _make_certificates

AREAS = {"cores", "memory", "disk", "mpi", "gpu", "port", "tls", "software", "start-up"}


def _rows(*args):
    r = invoke("doctor", "--json", *args)
    return r, json.loads(r.stdout)


def test_defaults_pass_every_check_on_this_machine():
    r, out = _rows()
    assert r.exit_code == 0 and out["ok"], out
    assert {c["area"] for c in out["checks"]} == AREAS
    assert all(c["status"] in ("ok", "warn") for c in out["checks"])
    table = invoke("doctor")
    assert table.exit_code == 0 and "start-up" in table.stdout and "software" in table.stdout


def test_too_many_workers_warn_of_oversubscription():
    r, out = _rows("--set", "parallel.workers=64")
    assert r.exit_code == 0  # a warning is not a failure
    cores = next(c for c in out["checks"] if c["area"] == "cores")
    assert cores["status"] == "warn" and "oversubscribed: 64 task thread(s)" in cores["found"]
    assert f"<= {psutil.cpu_count()}" in cores["fix"]


def test_a_missing_interface_fails_and_names_the_ones_that_exist():
    r, out = _rows("--set", "parallel.network_interface=nosuch0")
    assert r.exit_code == 1 and not out["ok"]
    iface = next(c for c in out["checks"] if c["area"] == "interface")
    assert iface["status"] == "fail" and "nosuch0" in iface["found"] and "lo (127.0.0.1)" in iface["fix"]


def test_a_taken_port_fails_the_port_check():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        cfg = load_config(None, {"parallel.backend": "process", "cluster.scheduler_address": f"tcp://127.0.0.1:{port}"})
        rows = check_network(cfg)
    check = next(c for c in rows if c.area == "port")
    assert check.status == "fail" and f"127.0.0.1:{port}" in check.found


def test_memory_beyond_the_machine_fails():
    rows = check_memory(load_config(None, {"parallel.backend": "process", "parallel.workers": 2, "cluster.memory_limit": "1TiB"}))
    assert rows[0].status == "fail" and "more than the machine has" in rows[0].found


def test_tls_files_that_do_not_belong_together_fail(tmp_path):
    mine, other = _make_certificates(tmp_path / "a", "ca-a"), _make_certificates(tmp_path / "b", "ca-b")
    good = load_config(None, {f"security.{k}": v for k, v in mine.items()})
    assert next(c for c in check_network(good) if c.area == "tls").status == "ok"
    bad = load_config(None, {**{f"security.{k}": v for k, v in mine.items()}, "security.key_file": other["key_file"]})
    check = next(c for c in check_network(bad) if c.area == "tls")
    assert check.status == "fail" and "do not load together" in check.found


def test_a_backend_that_cannot_start_fails_start_up():
    report = doctor(load_config(None, {"parallel.backend": "remote", "cluster.scheduler_address": "tcp://127.0.0.1:1",
                                       "parallel.timeout": "2s"}))
    start = next(c for c in report.checks if c.area == "start-up")
    assert start.status == "fail" and "did not start" in start.found and not report.ok
