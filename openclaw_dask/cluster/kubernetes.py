"""``kubernetes``: a DaskCluster resource run by the dask-kubernetes operator, built from the config.

:func:`cluster_spec` maps the configuration onto the ``DaskCluster`` resource (pure, no cluster
needed: ``openclaw k8s manifest`` prints it for ``kubectl apply``); :meth:`KubernetesBackend.start`
hands the same spec to dask-kubernetes' ``KubeCluster``. The mapping:

- ``parallel.workers`` -> worker replicas; ``omp_threads`` (and ``hybrid``) -> ``--nthreads`` and each
  worker's CPU request and limit, with ``OMP_NUM_THREADS`` and friends set to ``omp_threads``;
- ``cluster.memory_limit`` -> ``--memory-limit`` and the memory request and limit;
- ``gpu.devices`` -> ``nvidia.com/gpu`` per worker (as many as listed) and ``dask cuda worker``, whose
  ``--rmm-pool-size`` is ``gpu_memory_fraction`` when ``memory_pooling`` is on;
- ``parallel.timeout`` -> the comm timeouts and ``--death-timeout``; ``fault_tolerance.allowed_failures``
  and ``parallel.log_level`` -> dask's own settings, through ``DASK_*`` variables;
- ``cluster.preload``, ``cluster.local_directory``, ``parallel.network_interface`` -> the worker options
  of the same name; ``kubernetes.*`` -> image, namespace, name, environment and service type.

``resize_workers`` scales the default worker group and ``elastic.adaptive`` creates the operator's
``DaskAutoscaler`` (``KubeCluster.adapt``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from openclaw_dask.cluster import placement
from openclaw_dask.cluster.base import Backend, Capabilities
from openclaw_dask.cluster.client import DistributedCluster, new_client
from openclaw_dask.cluster.k8s_template import make_cluster_spec
from openclaw_dask.cluster.running import RunningCluster
from openclaw_dask.cluster.worker_shape import blas_env, task_threads
from openclaw_dask.config import changed_from_defaults
from openclaw_dask.errors import ClusterStartError, ConfigError

if TYPE_CHECKING:
    from openclaw_dask.config import Config

__all__ = ["KubernetesBackend", "cluster_spec", "manifest_yaml"]

logger = logging.getLogger("openclaw_dask.cluster")

SERVICE_TYPES = {"clusterip": "ClusterIP", "nodeport": "NodePort", "loadbalancer": "LoadBalancer"}
# Keys that describe processes on this machine and have no pod counterpart: refused when set.
_LOCAL_ONLY = ("cluster.host", "cluster.dashboard", "cluster.max_spill", "cluster.allow_insecure_bind",
               "elastic.interval")  # the operator's autoscaler keeps its own pace


def _env(config: Config) -> dict[str, str]:
    """Variables both containers get: the dask settings every process of a session takes
    (:func:`~openclaw_dask.cluster.settings.dask_settings`, the ``dask:`` section included), BLAS threads
    as worker processes get them, then ``kubernetes.env`` (which wins)."""
    from openclaw_dask.cluster.settings import dask_settings

    settings = {"logging.distributed": config.parallel.log_level.lower()}
    settings.update(  # preloads are worker options here; a nanny's pre-spawn variables are the containers' own
        (k, v) for k, v in dask_settings(config, KubernetesBackend()).items()
        if not k.endswith(".preload") and ".pre-spawn-environ." not in k
    )
    env = {"DASK_" + key.upper().replace(".", "__").replace("-", "_"): str(value) for key, value in settings.items()}
    return {**env, **blas_env(config), **dict(config.kubernetes.env)}


def _worker(config: Config) -> tuple[str, list[str], dict[str, Any]]:
    """The worker command, its options and its resources."""
    p, c = config.parallel, config.cluster
    args = ["--nthreads", str(task_threads(config)), "--death-timeout", f"{p.timeout:g}s"]
    limits: dict[str, Any] = {"cpu": str(p.omp_threads)}
    if c.memory_limit != "auto":
        args += ["--memory-limit", str(c.memory_limit)]
        limits["memory"] = str(c.memory_limit)
    for module in c.preload:
        args += ["--preload", module]
    if c.local_directory != "auto":
        args += ["--local-directory", c.local_directory]
    if p.network_interface:
        args += ["--interface", p.network_interface]
    command = "dask worker"
    if config.gpu.devices:
        command = "dask cuda worker"
        limits["nvidia.com/gpu"] = str(len(config.gpu.devices))  # the CRD types resource quantities as strings
        if p.memory_pooling:
            args += ["--rmm-pool-size", f"{p.gpu_memory_fraction:g}"]
    return command, args, {"requests": dict(limits), "limits": limits}


def cluster_spec(config: Config) -> dict[str, Any]:
    """The ``DaskCluster`` resource of ``config`` (pure: dask-kubernetes' template, then openclaw's settings).

    Needs nothing of dask-kubernetes: the template is :mod:`~openclaw_dask.cluster.k8s_template`.
    """
    k = config.kubernetes
    env = _env(config)
    command, args, resources = _worker(config)
    spec = make_cluster_spec(name=k.cluster_name, image=k.image, n_workers=_pods(config), env=env,
                             resources=resources, worker_command=command, scheduler_service_type=SERVICE_TYPES[k.service_type])
    spec["metadata"]["namespace"] = k.namespace
    worker = spec["spec"]["worker"]["spec"]["containers"][0]
    worker["args"] = worker["args"] + args
    scheduler = spec["spec"]["scheduler"]["spec"]["containers"][0]
    scheduler["resources"] = None  # the scheduler's needs are not a worker's
    # the image has openclaw-dask (kubernetes.image): the scheduler places tasks by their inputs, as a session's does
    preloads = (*config.cluster.preload, placement.__name__)
    scheduler["args"] = scheduler["args"] + [a for m in preloads for a in ("--preload", m)]
    return _without_nulls(spec)


def _without_nulls(value: Any) -> Any:
    """The resource without ``null`` fields (the CRD's schema does not allow them where it gives a type)."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


class KubernetesBackend(Backend):
    """``kubernetes``: a DaskCluster through dask-kubernetes' operator; worker pods shaped like process workers."""

    name = "kubernetes"
    capabilities = Capabilities(worker_processes=True, resize=True, adapt=True, gpu=True, pods=True)
    why_not = MappingProxyType({
        "tls": "TLS on Kubernetes needs certificates in secrets mounted into the pods, which openclaw does not manage yet",
        "prometheus": "the scheduler pod serves distributed's own /metrics on its dashboard port (8787)",
        "socket_buffers": "socket buffer sizes are set by the pods' kernel, not by openclaw",
    })
    requires = ("distributed", "dask_kubernetes")
    extra = "k8s"

    def check(self, config: Config) -> None:
        super().check(config)
        p = config.parallel
        _pods(config)
        if p.communication not in ("auto", "tcp"):
            raise ConfigError.at(config, "parallel.communication", "the operator connects pods with tcp:// addresses",
                                 hint="use auto or tcp")
        if p.rdma:
            raise ConfigError.at(config, "parallel.rdma", "RDMA between pods needs UCX and host networking, which "
                                 "openclaw does not configure yet", hint="remove it")
        if config.elastic.adaptive and config.elastic.max_workers == "auto":
            raise ConfigError.at(config, "elastic.max_workers", "the operator's autoscaler needs a largest number of "
                                 "worker pods", hint="e.g. --set elastic.max_workers=16")
        changed = changed_from_defaults(config, _LOCAL_ONLY)
        if changed:
            raise ConfigError.at(config, changed[0], "describes processes on this machine; the pods' are set by the "
                                 "operator and the kubernetes section", hint="remove it")

    def plan(self, config: Config) -> dict[str, Any]:
        """The DaskCluster resource (what ``openclaw k8s manifest`` prints)."""
        return cluster_spec(config)

    def describe(self, config: Config) -> list[str]:
        k = config.kubernetes
        pods = f"{config.parallel.workers} worker pod(s) of {k.image}, {task_threads(config)} thread(s) each"
        return [f"DaskCluster {k.cluster_name} in namespace {k.namespace}: {pods} (openclaw k8s manifest prints it)"]

    def start(self, config: Config) -> RunningCluster:
        """Create the DaskCluster (never reuse one of that name: closing deletes what it made) and connect."""
        from dask_kubernetes.operator import KubeCluster
        from dask_kubernetes.operator.kubecluster.kubecluster import CreateMode

        spec = cluster_spec(config)
        try:
            cluster = KubeCluster(custom_cluster_spec=spec, namespace=config.kubernetes.namespace, shutdown_on_close=True,
                                  create_mode=CreateMode.CREATE_ONLY, resource_timeout=int(max(config.parallel.timeout, 60)),
                                  quiet=True)
        except Exception as e:  # kr8s, kopf and the API server raise many kinds
            k = config.kubernetes
            raise ClusterStartError(f"could not start DaskCluster {k.cluster_name} in namespace {k.namespace} "
                                    f"({type(e).__name__}: {e}); check kubectl's context and that the dask-kubernetes "
                                    "operator is installed; if the resource was made, remove it with "
                                    f"kubectl delete daskcluster {k.cluster_name} -n {k.namespace}") from e
        try:
            client = new_client(cluster, timeout=config.parallel.timeout)
        except BaseException:
            cluster.close()
            raise
        return KubernetesCluster(self, config, client, cluster)


class KubernetesCluster(DistributedCluster):
    """A DaskCluster of the operator: it scales and adapts through its resources."""

    def scale(self, n: int) -> Callable[[], bool]:
        """Scale the default worker group; the operator retires surplus workers through the scheduler."""
        self.cluster.scale(n)
        return lambda: True  # the scheduler's worker count is the whole story

    def adapt(self) -> Callable[[], None]:
        return autoscale(self.cluster, self.config)


def autoscale(cluster: Any, config: Config) -> Callable[[], None]:
    """The operator's autoscaler on ``cluster`` between ``elastic.min_workers`` and ``max_workers``; returns its stop."""
    e = config.elastic  # max_workers is a number here: the backend's check refuses "auto"
    cluster.adapt(minimum=e.min_workers, maximum=e.max_workers)
    return _Stop(cluster, _pods(config)).stop


def _pods(config: Config) -> int:
    """``parallel.workers``: worker pods need a number, not auto."""
    if config.parallel.workers == "auto":
        raise ConfigError.at(config, "parallel.workers", "backend kubernetes needs a number of worker pods",
                             hint="e.g. --set parallel.workers=8")
    return config.parallel.workers


class _Stop:
    """Leaving adaptive mode: a fixed size again (scaling deletes the autoscaler resource)."""

    def __init__(self, cluster: Any, n: int) -> None:
        self.cluster, self.n = cluster, n

    def stop(self) -> None:
        try:
            self.cluster.scale(self.n)
        except Exception as e:  # noqa: BLE001  (teardown: the cluster is deleted next; say so, do not fail the close)
            logger.warning("could not turn the autoscaler off (%s: %s); the DaskCluster is deleted next", type(e).__name__, e)


MANIFEST_WORKERS = 3  # worker pods of a manifest whose config leaves parallel.workers at auto (dask-kubernetes' own default)


def manifest_yaml(path: Any = None, overrides: dict[str, Any] | None = None) -> str:
    """The DaskCluster resource of the config at ``path`` with ``overrides``, checked as backend kubernetes, as YAML.

    With ``parallel.workers: auto`` (a pod count cannot be detected) it has :data:`MANIFEST_WORKERS`
    worker pods, and a comment at the top says so.
    """
    import yaml

    from openclaw_dask.cluster.registry import check
    from openclaw_dask.config import load_config
    from openclaw_dask.config.keys import WORKERS

    head, config = "", load_config(path, overrides, override_label="--set")
    if config.parallel.workers == "auto":  # read again with the pod count, so its source says where it came from
        config = load_config(path, {**(overrides or {}), WORKERS: MANIFEST_WORKERS}, override_label="--set")
        head = (f"# parallel.workers is auto, which cannot count pods: {MANIFEST_WORKERS} worker pods "
                "(set it, e.g. openclaw k8s manifest --set parallel.workers=8)\n")
    check(config)  # backend kubernetes' own rules, as load_for_backend applies them
    return head + yaml.safe_dump(cluster_spec(config), sort_keys=False)
