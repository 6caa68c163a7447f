from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

import openclaw_dask
from openclaw_dask.diagnostics.profile import profile
from openclaw_dask.workloads import array_sum

prometheus_client = pytest.importorskip("prometheus_client")


def scrape(port: int) -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {s.name: s for f in text_string_to_metric_families(text) for s in f.samples if not s.labels} | {
        (s.name, tuple(sorted(s.labels.items()))): s for f in text_string_to_metric_families(text) for s in f.samples if s.labels
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_metrics_endpoint_serves_openclaw_and_distributed_metrics(backend):
    port = free_port()
    with openclaw_dask.session(backend=backend, workers=2, prometheus=True, port=port, size="32MiB", repeat=2, cooldown=0) as s:
        array_sum.run(s)
        profile(s, "array-sum")
        if backend == "process":
            s.resize_workers(1)
        m = scrape(port)
        assert any((k if isinstance(k, str) else k[0]).startswith("dask_scheduler_") for k in m)  # distributed's own
        assert m["openclaw_workers"].value == 1  # process: resized 2 -> 1; thread: one worker
        assert m["openclaw_threads"].value == (1 if backend == "process" else 2)
        assert m["openclaw_workload_runs_total", (("workload", "array-sum"),)].value == 2
        assert m["openclaw_workload_bytes_total", (("workload", "array-sum"),)].value == 2 * 2 * 32 * 2**20
        assert m["openclaw_workload_last_gbps", (("workload", "array-sum"),)].value > 0
        assert m["openclaw_profile_imbalance"].value >= 1
        assert m["openclaw_resize_events_total"].value == (1 if backend == "process" else 0)
        assert m["openclaw_target_workers"].value == 1
        # As the scheduler's own log has them (the resize, for now: see test_reliability.py).
        lost = [e for _, e in s.client.get_events("all") if e.get("action") == "remove-worker" and not e["expected"]]
        assert m["openclaw_workers_lost_total"].value == len(lost) == s.recovery().workers_lost
        assert m["openclaw_tasks_recomputed_total"].value == s.recovery().tasks_recomputed
        assert m["openclaw_failures_recovered_total"].value == s.recovery().failures_recovered
        if backend == "thread":
            assert (m["openclaw_workers_lost_total"].value, m["openclaw_tasks_recomputed_total"].value) == (0, 0)
    # closed: the collector is gone from the registry, the next session starts clean
    assert not [c for c in prometheus_client.REGISTRY._collector_to_names if type(c).__name__ == "OpenclawCollector"]


def test_metrics_are_off_by_default_and_the_port_is_loopback():
    with openclaw_dask.session(workers=1, engine="distributed") as s:
        port = s.client.scheduler_info()["services"]["dashboard"]
        assert "openclaw_workers" not in scrape(port)
    with pytest.raises(openclaw_dask.ConfigError, match="port from 1 to 65535"):
        openclaw_dask.session(prometheus=True, port=70000)


PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
SCRAPE_CONFIG = """\
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: openclaw
    scrape_interval: 1s
    static_configs:
      - targets: ["127.0.0.1:{port}"]
"""


def prometheus_query(port: int, query: str) -> dict:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(url, timeout=5) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return {tuple(sorted(v["metric"].items())): float(v["value"][1]) for v in body["data"]["result"]}


@pytest.mark.slow
@pytest.mark.skipif(not os.access(PROMETHEUS, os.X_OK),
                    reason=f"no Prometheus server at {PROMETHEUS}: apt-get install prometheus (Debian) to run this test")
def test_a_real_prometheus_server_scrapes_the_endpoint(tmp_path):
    import psutil

    port, prom_port = free_port(), free_port()
    (tmp_path / "prometheus.yml").write_text(SCRAPE_CONFIG.format(port=port))  # the one in docs/monitoring.md, 1 s
    with openclaw_dask.session(backend="process", workers=2, prometheus=True, port=port, size="8MiB", repeat=1) as s:
        proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=subprocess.DEVNULL, stderr=(tmp_path / "prometheus.log").open("w"), start_new_session=True,
        )
        try:
            array_sum.run(s)
            deadline, runs = time.monotonic() + 60, {}
            while not runs:  # the first scrape after the run, then Prometheus answers with it
                assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()[-2000:]
                assert time.monotonic() < deadline, "Prometheus had no openclaw metrics after 60 s"
                time.sleep(0.5)
                try:
                    runs = prometheus_query(prom_port, 'openclaw_workload_runs_total{workload="array-sum"}')
                except OSError:  # not listening yet
                    continue
            up = prometheus_query(prom_port, 'up{job="openclaw"}')
            workers = prometheus_query(prom_port, "openclaw_workers")
            lost = prometheus_query(prom_port, "openclaw_workers_lost_total")
            dask_tasks = prometheus_query(prom_port, "dask_scheduler_workers")
            # Prometheus itself listens on loopback only (no other listeners by default).
            listening = {c.laddr for c in psutil.Process(proc.pid).net_connections("inet") if c.status == psutil.CONN_LISTEN}
        finally:
            proc.kill()
            proc.wait(10)
    assert list(up.values()) == [1.0]
    assert list(runs.values()) == [1.0]
    assert list(workers.values()) == [2.0]
    assert list(lost.values()) == [0.0]
    assert dask_tasks  # distributed's own metrics came along
    assert listening and all(addr.ip == "127.0.0.1" for addr in listening), listening
