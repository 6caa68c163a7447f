"""backend kubernetes: the DaskCluster resource built from the config, checked against the operator's CRD.

What runs here: the mapping from config to resource (pure), the CRD's own schema, the refusals,
and the CLI. Creating the resource in a real cluster needs one (docs/kubernetes.md).
"""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest
import yaml

import openclaw_dask
from openclaw_dask.cluster import get_backend
from openclaw_dask.cluster import kubernetes
from openclaw_dask.cluster.kubernetes import cluster_spec
from openclaw_dask.errors import ConfigError

from .test_cli import assert_one_line_error, invoke

K8S = {"parallel.backend": "kubernetes", "parallel.workers": 8}


@pytest.fixture(scope="module")
def crd_schema():
    import dask_kubernetes

    crd = Path(dask_kubernetes.__file__).parent / "operator/deployment/helm/dask-kubernetes-operator/crds/daskcluster.yaml"
    (version,) = yaml.safe_load(crd.read_text())["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def _spec(**overrides):
    return cluster_spec(openclaw_dask.load_config(None, {**K8S, **overrides}))


def _worker(spec):
    return spec["spec"]["worker"]["spec"]["containers"][0]


def test_cli_manifest_validates_against_the_operator_crd(crd_schema):
    r = invoke("k8s", "manifest", "--set", "parallel.workers=8")
    assert r.exit_code == 0, r.output
    manifest = yaml.safe_load(r.output)
    jsonschema.validate(manifest, crd_schema)
    assert manifest["kind"] == "DaskCluster" and manifest["spec"]["worker"]["replicas"] == 8
    broken = {**manifest, "spec": {**manifest["spec"], "worker": {**manifest["spec"]["worker"], "replicas": "eight"}}}
    with pytest.raises(jsonschema.ValidationError):  # the schema does constrain what we print
        jsonschema.validate(broken, crd_schema)


def test_gpu_manifest_validates_and_asks_for_gpus_and_dask_cuda(crd_schema):
    spec = _spec(**{"gpu.devices": [0, 1], "parallel.memory_pooling": True, "parallel.gpu_memory_fraction": 0.6})
    jsonschema.validate(spec, crd_schema)
    worker = _worker(spec)
    assert worker["args"][:3] == ["dask", "cuda", "worker"]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert worker["args"][worker["args"].index("--rmm-pool-size") + 1] == "0.6"


def test_config_keys_reach_the_resource(crd_schema):
    spec = _spec(**{"parallel.omp_threads": 4, "cluster.memory_limit": "6GiB", "parallel.timeout": "45s",
                    "cluster.preload": ["mypkg.setup"], "kubernetes.image": "registry.local/openclaw:1",
                    "kubernetes.namespace": "science", "kubernetes.cluster_name": "nightly",
                    "kubernetes.env": {"EXTRA_PIP_PACKAGES": "openclaw-dask", "OMP_NUM_THREADS": "2"},
                    "kubernetes.service_type": "LoadBalancer", "fault_tolerance.allowed_failures": 5,
                    "dask.distributed.scheduler.worker-saturation": 1.5})
    jsonschema.validate(spec, crd_schema)
    worker, args = _worker(spec), _worker(spec)["args"]
    env = {e["name"]: e["value"] for e in worker["env"]}
    assert spec["metadata"] == {"name": "nightly", "namespace": "science"}
    assert worker["image"] == "registry.local/openclaw:1"
    assert args[args.index("--nthreads") + 1] == "4" and worker["resources"]["limits"]["cpu"] == "4"
    assert args[args.index("--memory-limit") + 1] == str(6 * 2**30) and worker["resources"]["limits"]["memory"] == str(6 * 2**30)
    assert args[args.index("--death-timeout") + 1] == "45s" and env["DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT"] == "45.0s"
    assert args[args.index("--preload") + 1] == "mypkg.setup"
    scheduler = spec["spec"]["scheduler"]["spec"]["containers"][0]["args"]
    assert scheduler[-4:] == ["--preload", "mypkg.setup", "--preload", "openclaw_dask.cluster.placement"]
    assert env["OMP_NUM_THREADS"] == "2" and env["MKL_NUM_THREADS"] == "1"  # the user's env wins; 1 BLAS thread per task thread
    assert env["EXTRA_PIP_PACKAGES"] == "openclaw-dask" and env["DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES"] == "5"
    assert env["DASK_DISTRIBUTED__SCHEDULER__WORKER_SATURATION"] == "1.5"  # the dask: section reaches the pods
    assert spec["spec"]["scheduler"]["service"]["type"] == "LoadBalancer"
    hybrid = _worker(_spec(**{"parallel.omp_threads": 4, "parallel.hybrid": True}))
    assert hybrid["args"][hybrid["args"].index("--nthreads") + 1] == "1" and hybrid["resources"]["limits"]["cpu"] == "4"
    assert {e["name"]: e["value"] for e in hybrid["env"]}["MKL_NUM_THREADS"] == "4"  # hybrid: the BLAS threads, one task


@pytest.mark.parametrize(("overrides", "key"), [
    ({"parallel.workers": "auto"}, "parallel.workers"),
    ({"parallel.communication": "ucx"}, "parallel.communication"),
    ({"parallel.rdma": True}, "parallel.rdma"),
    ({"cluster.dashboard": True}, "cluster.dashboard"),
    ({"security.temporary_certificates": True}, "security.temporary_certificates"),
    ({"kubernetes.cluster_name": "Not_A_Name"}, "kubernetes.cluster_name"),
    ({"elastic.adaptive": True}, "elastic.max_workers"),  # auto: the autoscaler needs a number
    ({"elastic.interval": "5s"}, "elastic.interval"),
])
def test_what_pods_cannot_honour_is_refused(overrides, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        openclaw_dask.load_config(None, {**K8S, **overrides})


def test_kubernetes_keys_are_refused_on_other_backends_but_defaults_are_fine():
    with pytest.raises(ConfigError, match=r"kubernetes\.image.*set parallel\.backend=kubernetes"):
        openclaw_dask.load_config(None, {"kubernetes.image": "my/image:1"})
    openclaw_dask.load_config(None, {"kubernetes.image": "ghcr.io/dask/dask:latest"})  # the default, written out


def test_backend_declares_what_it_does():
    backend = get_backend("kubernetes")
    assert backend.capabilities.resize and backend.capabilities.adapt and backend.capabilities.pods
    assert not backend.capabilities.in_process and not backend.capabilities.tls


def test_cli_manifest_with_the_defaults_has_the_documented_pod_count_and_says_so(crd_schema):
    """Before, `openclaw k8s manifest` with the defaults exited 2 (workers auto cannot count pods)."""
    r = invoke("k8s", "manifest")
    assert r.exit_code == 0, r.output
    assert r.output.startswith(f"# parallel.workers is auto, which cannot count pods: {kubernetes.MANIFEST_WORKERS} worker pods")
    manifest = yaml.safe_load(r.output)
    jsonschema.validate(manifest, crd_schema)
    assert manifest["spec"]["worker"]["replicas"] == kubernetes.MANIFEST_WORKERS
    assert not invoke("k8s", "manifest", "--set", "parallel.workers=8").output.startswith("#")


def test_running_kubernetes_with_auto_workers_is_a_one_line_error():
    with pytest.raises(ConfigError, match="backend kubernetes needs a number of worker pods"):  # at load or at the spec
        cluster_spec(openclaw_dask.load_config(None, {**K8S, "parallel.workers": "auto"}))


class _Recorder:
    """Stands in for dask-kubernetes' KubeCluster, which needs a Kubernetes API server: records the calls made."""

    def __init__(self):
        self.calls = []

    def adapt(self, **kwargs):
        self.calls.append(("adapt", kwargs))

    def scale(self, n):
        self.calls.append(("scale", n))


def test_adaptive_maps_onto_the_operator_autoscaler_and_stops_at_the_configured_size():
    config = openclaw_dask.load_config(None, {**K8S, "elastic.adaptive": True, "elastic.min_workers": 2, "elastic.max_workers": 20})
    cluster = _Recorder()
    stop = kubernetes.autoscale(cluster, config)
    assert cluster.calls == [("adapt", {"minimum": 2, "maximum": 20})]
    stop()  # scaling to a fixed size deletes the DaskAutoscaler
    assert cluster.calls[-1] == ("scale", 8)



def test_openclaws_template_is_the_resource_dask_kubernetes_writes():
    """In a child process: importing dask-kubernetes adds to dask's configuration."""
    import importlib.util
    import subprocess
    import sys

    if importlib.util.find_spec("dask_kubernetes") is None:
        pytest.skip("compares with dask-kubernetes' own template: pip install 'openclaw-dask[k8s]'")
    code = """
from dask_kubernetes.operator import make_cluster_spec as theirs
from openclaw_dask.cluster.k8s_template import make_cluster_spec as ours
for command, service in (("dask worker", "ClusterIP"), ("dask cuda worker", "LoadBalancer")):
    kw = {"name": "c", "image": "img:1", "n_workers": 3, "env": {"A": "1", "B": "2"}, "worker_command": command,
          "resources": {"limits": {"cpu": "2"}}, "scheduler_service_type": service}
    assert ours(**kw) == theirs(**kw), (ours(**kw), theirs(**kw))
print("same")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert r.stdout.strip() == "same", r.stderr[-2000:]
