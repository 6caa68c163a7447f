from __future__ import annotations

import socket
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
    # closed: the collector is gone from the registry, the next session starts clean
    assert not [c for c in prometheus_client.REGISTRY._collector_to_names if type(c).__name__ == "OpenclawCollector"]


def test_metrics_are_off_by_default_and_the_port_is_loopback():
    with openclaw_dask.session(workers=1) as s:
        port = s.client.scheduler_info()["services"]["dashboard"]
        assert "openclaw_workers" not in scrape(port)
    with pytest.raises(openclaw_dask.ConfigError, match="port from 1 to 65535"):
        openclaw_dask.session(prometheus=True, port=70000)
