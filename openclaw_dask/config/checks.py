"""Checks that span several keys, or refuse what this build cannot run yet.

A key whose feature is not built yet is accepted only at its default ("off") value;
any other value is refused with a clear message instead of being ignored.
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING, Any

from openclaw_dask.errors import ConfigError

if TYPE_CHECKING:
    from openclaw_dask.config.model import Config

__all__ = ["NOT_YET", "check", "is_loopback"]

# Keys accepted only at their default until the feature lands; value = default.
NOT_YET: dict[str, Any] = {
    "parallel.fusion_buffer_size": None,
    "parallel.mpi_shared_memory": False,
    "parallel.hybrid": False,
    "parallel.async_io": False,
    "parallel.sync_interval": 1,
    "parallel.batch_size": None,
    "parallel.memory_pooling": False,
    "parallel.gpu_memory_fraction": 0.7,
    "parallel.socket_buffer_size": None,
    "parallel.rdma": False,
    "parallel.communication_strict": False,
    "cluster.preload": (),
    "security.temporary_certificates": False,
    "security.ca_file": None,
    "security.cert_file": None,
    "security.key_file": None,
    "security.require_encryption": False,
}


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IPs (no name is resolved: that could leave the machine)."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _fail(config: Config, dotted: str, message: str) -> ConfigError:
    return ConfigError(f"{config.sources.get(dotted, 'default')}: {dotted} = {_yaml(config.get(dotted))}: {message}")


def check(config: Config) -> None:
    """Raise :class:`ConfigError` for the first combination that cannot run."""
    p, c = config.parallel, config.cluster
    for dotted, default in NOT_YET.items():
        if config.get(dotted) != default:
            raise _fail(config, dotted, f"not available in this build yet; remove the key or set it to {_yaml(default)}")
    from openclaw_dask.cluster.registry import BACKENDS

    built = [name for name, spec in BACKENDS.items() if spec.module is not None]
    if p.backend not in built:
        raise _fail(config, "parallel.backend", f"backend not available in this build yet; use one of {', '.join(built)}")
    if p.strategy == "pipeline":
        raise _fail(config, "parallel.strategy", "pipeline mode is not available in this build yet; use data or model")
    if p.communication == "tls":
        raise _fail(config, "parallel.communication", "TLS is not available in this build yet; use tcp on loopback")
    if p.communication == "inproc" and p.backend != "thread":
        raise _fail(config, "parallel.communication", f"inproc works only within one process (backend thread), not backend {p.backend}; use tcp")
    if p.omp_threads != 1 and p.backend != "process":
        raise _fail(config, "parallel.omp_threads", f"threads per worker process apply to backend process only (backend is {p.backend}); set parallel.workers instead")
    if p.backend == "remote":
        _check_remote(config)
    elif c.scheduler_address:
        raise _fail(config, "cluster.scheduler_address", f"used only with backend remote (backend is {p.backend}); remove it or set parallel.backend=remote")
    e = config.elastic
    if e.adaptive:
        if p.backend != "process":
            raise _fail(config, "elastic.adaptive", f"adaptive scaling starts and stops worker processes: use backend process (backend is {p.backend})")
        if e.max_workers != "auto" and e.max_workers < e.min_workers:
            raise _fail(config, "elastic.max_workers", f"below elastic.min_workers = {e.min_workers}")
    else:
        for dotted, default in (("elastic.min_workers", 1), ("elastic.max_workers", "auto"), ("elastic.interval", 1.0)):
            if config.get(dotted) != default:
                raise _fail(config, dotted, "used only with elastic.adaptive: true; set that too, or remove this key")
    m = config.monitoring
    if m.prometheus and p.backend == "remote":
        raise _fail(config, "monitoring.prometheus", "the remote scheduler serves its own /metrics (install prometheus-client where it runs); remove this here")
    if m.port and isinstance(c.dashboard, str):
        raise _fail(config, "monitoring.port", f"cluster.dashboard = {c.dashboard} already sets the HTTP server's address; set only one")
    if ":" in c.host:
        raise _fail(config, "cluster.host", "IPv6 binds are not supported in this build; use 127.0.0.1")
    if not c.allow_insecure_bind:
        if not is_loopback(c.host):
            raise _fail(config, "cluster.host", "binding a non-loopback address without TLS lets anyone who reaches it run code; use 127.0.0.1 or set cluster.allow_insecure_bind=true")
        dash_host = c.dashboard.rpartition(":")[0] if isinstance(c.dashboard, str) else ""
        if dash_host and not is_loopback(dash_host):
            raise _fail(config, "cluster.dashboard", "a dashboard on a non-loopback address is reachable by others; use a port only, or set cluster.allow_insecure_bind=true")


def _check_remote(config: Config) -> None:
    """A remote cluster is the user's: only the address, workers to wait for, timeout and logging apply."""
    p, c = config.parallel, config.cluster
    if not c.scheduler_address:
        raise _fail(config, "cluster.scheduler_address", "backend remote needs the address of a running dask-scheduler, e.g. tcp://127.0.0.1:8786")
    scheme, sep, rest = c.scheduler_address.partition("://")
    host, _, port = (rest if sep else scheme).rpartition(":")
    if not sep or scheme not in ("tcp", "tls", "ucx", "inproc") or not host or not port.isdigit():
        raise _fail(config, "cluster.scheduler_address", "expected PROTOCOL://HOST:PORT, e.g. tcp://127.0.0.1:8786 (as dask scheduler prints it)")
    if p.communication not in ("auto", scheme):
        raise _fail(config, "parallel.communication", f"the scheduler address {c.scheduler_address} sets the protocol; use auto")
    for dotted, default in (("cluster.memory_limit", "auto"), ("cluster.host", "127.0.0.1"), ("cluster.dashboard", False),
                            ("parallel.network_interface", None), ("fault_tolerance.allowed_failures", 3)):
        if config.get(dotted) != default:
            raise _fail(config, dotted, "set by whoever started the remote scheduler and workers (dask scheduler / dask worker options); remove it here")


def _yaml(value: Any) -> str:
    """Show a value as it would be written in the YAML file."""
    if value is None:
        return "null"
    if isinstance(value, tuple):
        return "[" + ", ".join(value) + "]"
    return str(value).lower() if isinstance(value, bool) else str(value)
