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
    "parallel.async_io": False,
    "parallel.sync_interval": 1,
    "parallel.batch_size": None,
    "parallel.memory_pooling": False,
    "parallel.gpu_memory_fraction": 0.7,
    "parallel.rdma": False,
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
    _check_security(config)
    if p.communication == "inproc" and p.backend != "thread":
        raise _fail(config, "parallel.communication", f"inproc works only within one process (backend thread), not backend {p.backend}; use tcp")
    if p.omp_threads != 1 and p.backend not in ("process", "mpi"):
        raise _fail(config, "parallel.omp_threads", f"threads per worker process apply to backends process and mpi (backend is {p.backend}); set parallel.workers instead")
    if p.hybrid and p.backend not in ("process", "mpi"):
        raise _fail(config, "parallel.hybrid", f"hybrid gives each worker process omp_threads BLAS/OpenMP threads: use backend process or mpi (backend is {p.backend})")
    if p.mpi_shared_memory and p.backend != "mpi":
        raise _fail(config, "parallel.mpi_shared_memory", f"applies to backend mpi (backend is {p.backend}); backend thread already shares one process's memory")
    if p.socket_buffer_size is not None:
        _check_socket_buffers(config)
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
    if m.prometheus and p.backend == "mpi":
        raise _fail(config, "monitoring.prometheus", "the MPI scheduler runs in rank 0, where openclaw's metrics are not collected yet; use backend process, or scrape rank 0's /metrics for distributed's own")
    if m.prometheus and p.backend == "remote":
        raise _fail(config, "monitoring.prometheus", "the remote scheduler serves its own /metrics (install prometheus-client where it runs); remove this here")
    if m.port and isinstance(c.dashboard, str):
        raise _fail(config, "monitoring.port", f"cluster.dashboard = {c.dashboard} already sets the HTTP server's address; set only one")
    if ":" in c.host:
        raise _fail(config, "cluster.host", "IPv6 binds are not supported in this build; use 127.0.0.1")
    if not c.allow_insecure_bind:
        # TLS makes the scheduler and workers safe to reach; their HTTP servers stay on loopback (local.py).
        if not is_loopback(c.host) and not config.security.enabled:
            raise _fail(config, "cluster.host", "binding a non-loopback address without TLS lets anyone who reaches it run code; use 127.0.0.1, "
                        "set up TLS in the security section (security.ca_file and cert_file), or set cluster.allow_insecure_bind=true")
        dash_host = c.dashboard.rpartition(":")[0] if isinstance(c.dashboard, str) else ""
        if dash_host and not is_loopback(dash_host):
            raise _fail(config, "cluster.dashboard", "a dashboard on a non-loopback address is reachable by others; use a port only, or set cluster.allow_insecure_bind=true")


def _check_security(config: Config) -> None:
    """TLS needs a whole certificate set, and then every comm is TLS (see cluster/security.py)."""
    p, s = config.parallel, config.security
    files = [k for k in ("ca_file", "cert_file", "key_file") if config.get(f"security.{k}") is not None]
    if s.temporary_certificates and files:
        raise _fail(config, f"security.{files[0]}", "security.temporary_certificates makes its own certificates; set either it or the files, not both")
    if files and "cert_file" not in files:
        raise _fail(config, f"security.{files[0]}", "TLS in dask is mutual: this process needs its own certificate too; set security.cert_file")
    if s.cert_file is not None and s.ca_file is None:
        raise _fail(config, "security.cert_file", "TLS in dask is mutual: set security.ca_file to the authority that signed the other side's certificate")
    if not s.enabled:
        if s.require_encryption:
            raise _fail(config, "security.require_encryption", "needs certificates; set security.temporary_certificates=true or security.cert_file and ca_file")
        if p.communication == "tls":
            raise _fail(config, "parallel.communication", "TLS needs certificates; set security.temporary_certificates=true or security.cert_file and ca_file")
        return
    which = "security.temporary_certificates" if s.temporary_certificates else "security.cert_file"
    if p.backend not in ("thread", "process", "remote"):
        raise _fail(config, which, f"TLS is built for backends thread, process and remote, not {p.backend}; remove the security keys")
    if p.communication not in ("auto", "tls"):
        # Asked-for plain comms and certificates contradict each other: refuse rather than pick one.
        raise _fail(config, "parallel.communication", f"{p.communication} is not encrypted but {which} is set; use auto or tls, or remove the security keys")
    if p.backend == "remote" and s.temporary_certificates:
        raise _fail(config, which, "a remote scheduler cannot trust certificates made by this process; set security.ca_file, cert_file and key_file")


_SOCKET_BUFFER_RANGE = (4 * 2**10, 256 * 2**20)  # below, the kernel's own minimum; above, each connection may hold that much kernel memory


def _check_socket_buffers(config: Config) -> None:
    """Socket buffers exist only on the TCP comms of clusters openclaw starts."""
    p, dotted = config.parallel, "parallel.socket_buffer_size"
    low, high = _SOCKET_BUFFER_RANGE
    if not low <= p.socket_buffer_size <= high:
        raise _fail(config, dotted, "use 4KiB to 256MiB, or null for the OS default")
    if config.security.enabled:
        raise _fail(config, dotted, "sized sockets are built for tcp:// comms, not TLS (the security section is set); remove this key or the security keys")
    if p.communication == "inproc" or (p.communication == "auto" and p.backend == "thread"):
        raise _fail(config, dotted, "backend thread talks inproc (no sockets); set parallel.communication=tcp, or remove this key")
    if p.communication in ("ucx", "nccl"):
        raise _fail(config, dotted, f"applies to TCP sockets, not {p.communication} (UCX); use parallel.communication=tcp, or remove this key")
    if p.backend == "remote":
        raise _fail(config, dotted, "the remote scheduler and workers are yours: start them with DASK_OPENCLAW__SOCKET_BUFFER_SIZE set and "
                    "--preload (and --preload-nanny) openclaw_dask.cluster.sockets_preload, and remove this key")


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
    if scheme == "tls" and not config.security.enabled:
        raise _fail(config, "cluster.scheduler_address", "a TLS scheduler needs certificates; set security.ca_file, cert_file and key_file")
    if scheme != "tls" and config.security.enabled:
        raise _fail(config, "cluster.scheduler_address", f"not TLS, but certificates are set; write it as tls://{rest} "
                    "(the scheduler runs with --protocol tls), or remove the security keys")
    for dotted, default in (("cluster.memory_limit", "auto"), ("cluster.host", "127.0.0.1"), ("cluster.dashboard", False),
                            ("parallel.network_interface", None), ("fault_tolerance.allowed_failures", 3),
                            ("cluster.preload", ())):
        if config.get(dotted) != default:
            raise _fail(config, dotted, "set by whoever started the remote scheduler and workers (dask scheduler / dask worker options); remove it here")


def _yaml(value: Any) -> str:
    """Show a value as it would be written in the YAML file."""
    if value is None:
        return "null"
    if isinstance(value, tuple):
        return "[" + ", ".join(value) + "]"
    return str(value).lower() if isinstance(value, bool) else str(value)
