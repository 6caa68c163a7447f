"""The ``DaskCluster`` resource template, written here so printing a manifest needs no dask-kubernetes.

It is the resource dask-kubernetes' ``make_cluster_spec`` writes (its operator's CRD,
``kubernetes.dask.org/v1``); ``tests/test_kubernetes.py`` compares the two where
dask-kubernetes is installed. Starting a cluster still needs dask-kubernetes.
"""

from __future__ import annotations

from typing import Any

__all__ = ["make_cluster_spec"]

_WORKER_DASHBOARD, _COMM, _DASHBOARD = 8788, 8786, 8787


def _container(name: str, image: str, args: list[str], env: list[dict[str, str]], resources: Any,
               ports: list[tuple[str, int]]) -> dict[str, Any]:
    return {"name": name, "image": image, "args": args, "env": env, "resources": resources,
            "ports": [{"name": port, "containerPort": number, "protocol": "TCP"} for port, number in ports]}


def _scheduler(cluster: str, image: str, env: list[dict[str, str]], resources: Any, service_type: str) -> dict[str, Any]:
    container = _container("scheduler", image, ["dask-scheduler", "--host", "0.0.0.0"], env, resources,
                           [("tcp-comm", _COMM), ("http-dashboard", _DASHBOARD)])
    health = {"port": "http-dashboard", "path": "/health"}
    container["readinessProbe"] = {"httpGet": dict(health), "initialDelaySeconds": 0, "periodSeconds": 1, "timeoutSeconds": 300}
    container["livenessProbe"] = {"httpGet": dict(health), "initialDelaySeconds": 15, "periodSeconds": 20}
    service = {"type": service_type, "selector": {"dask.org/cluster-name": cluster, "dask.org/component": "scheduler"},
               "ports": [{"name": port, "protocol": "TCP", "port": number, "targetPort": port}
                         for port, number in (("tcp-comm", _COMM), ("http-dashboard", _DASHBOARD))]}
    return {"spec": {"containers": [container]}, "service": service}


def make_cluster_spec(name: str, image: str, n_workers: int, env: dict[str, str], resources: Any, worker_command: str,
                      scheduler_service_type: str) -> dict[str, Any]:
    """A ``DaskCluster`` named ``name``: ``n_workers`` workers running ``worker_command``, and a scheduler behind a service."""
    pairs = [{"name": key, "value": value} for key, value in env.items()]
    args = [*worker_command.split(" "), "--name", "$(DASK_WORKER_NAME)", "--dashboard", "--dashboard-address",
            str(_WORKER_DASHBOARD)]
    worker = {"replicas": n_workers, "spec": {"containers": [
        _container("worker", image, args, pairs, resources, [("http-dashboard", _WORKER_DASHBOARD)])]}}
    return {"apiVersion": "kubernetes.dask.org/v1", "kind": "DaskCluster", "metadata": {"name": name},
            "spec": {"idleTimeout": 0, "worker": worker,
                     "scheduler": _scheduler(name, image, [dict(p) for p in pairs], resources, scheduler_service_type)}}
