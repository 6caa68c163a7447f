"""Where a local cluster binds, which protocol it speaks, and where its dashboard goes."""

from __future__ import annotations

import importlib.util
import logging
import socket
import sys
from typing import TYPE_CHECKING, Any

from openclaw_dask.config.checks import check_bind, is_loopback
from openclaw_dask.errors import BackendUnavailable, ConfigError

if TYPE_CHECKING:
    from openclaw_dask.cluster.base import Backend
    from openclaw_dask.config import Config

__all__ = ["bind_host", "dashboard_address", "dashboard_on", "http_address", "http_host", "in_jupyter", "interface_of",
           "interfaces", "protocol", "require_http_port"]

logger = logging.getLogger("openclaw_dask.cluster")


def bind_host(config: Config) -> str:
    """The IP the scheduler and workers bind: ``network_interface``'s address, else ``cluster.host``."""
    iface = config.parallel.network_interface
    if iface is None:
        return config.cluster.host
    from distributed.utils import get_ip_interface

    try:
        address = get_ip_interface(iface)
    except ValueError:
        raise ConfigError.at(config, "parallel.network_interface", "no such interface with an IPv4 address",
                             hint=f"this machine has: {interfaces()}") from None
    check_bind(config, "parallel.network_interface", address)
    return address


def interfaces() -> str:
    """This machine's network interfaces with their IPv4 addresses: ``eth0 (10.0.0.5), lo (127.0.0.1)``."""
    import psutil

    out = []
    for name, addrs in sorted(psutil.net_if_addrs().items()):
        ipv4 = [a.address for a in addrs if a.family == socket.AF_INET]
        out.append(f"{name} ({', '.join(ipv4)})" if ipv4 else name)
    return ", ".join(out)


def http_host(config: Config, host: str) -> str:
    """Where the HTTP servers (dashboard, /metrics, /health) bind, given the comms' ``host``.

    TLS does not cover them, so a non-loopback bind that TLS alone allowed keeps them on 127.0.0.1.
    """
    return host if is_loopback(host) or config.cluster.allow_insecure_bind else "127.0.0.1"


def interface_of(address: str) -> str:
    """The name of the network interface that holds the IPv4 ``address`` (``lo`` for 127.0.0.1)."""
    import socket

    import psutil

    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == address for a in addrs):
            return name
    raise ConfigError("no network interface of this machine has that address", key="cluster.host", value=address,
                      hint="use 127.0.0.1 or set parallel.network_interface")


def protocol(config: Config, backend: Backend) -> str:
    """The comm protocol for ``communication`` on ``backend``, falling back from UCX to TCP as the guide's nccl -> gloo."""
    comm = config.parallel.communication
    if comm == "auto":
        # inproc has no TLS: an in-process backend uses tls over loopback
        return "tls" if config.security.enabled else backend.default_protocol
    if comm in ("ucx", "nccl"):
        if importlib.util.find_spec("distributed_ucxx") is not None:
            return "ucx"
        why = f"parallel.communication = {comm} needs UCX (pip install distributed-ucxx-cu12), which is not installed"
        if config.parallel.communication_strict:
            raise BackendUnavailable(f"{why}, and parallel.communication_strict is true; install it, or set communication_strict: false to fall back to tcp")
        logger.warning("%s; chose tcp instead (set parallel.communication_strict: true to make this an error)", why)
        return "tcp"
    return "tcp" if comm == "gloo" else comm


def in_jupyter() -> bool:
    """True in a Jupyter kernel (ipykernel's shell has a ``kernel``); False in scripts, the CLI, plain IPython."""
    ipython = sys.modules.get("IPython")  # never imported here: a process without it is no kernel
    shell = ipython.get_ipython() if ipython is not None else None
    return getattr(shell, "kernel", None) is not None


def dashboard_address(config: Config, host: str) -> str | None:
    """``HOST:PORT`` for the dashboard, or ``None`` when it is off.

    ``auto`` is on only in a Jupyter kernel and on a loopback ``host``: a dashboard that others
    could reach is never turned on unasked.
    """
    dash = config.cluster.dashboard
    if dash == "auto":
        dash = in_jupyter() and is_loopback(host)
    if dash is False:
        return None
    if dash is True:
        return f"{host}:{config.monitoring.port}"
    address, _, port = dash.rpartition(":")
    return f"{address or host}:{port}"


def dashboard_on(config: Config, backend: Backend) -> bool:
    """Whether the scheduler ``backend`` starts for ``config`` serves the dashboard, ``auto`` resolved.

    ``auto`` turns it on only where the scheduler runs in this process (a local cluster), in a
    Jupyter kernel, on loopback; never for a cluster elsewhere (remote, pods, MPI ranks).
    """
    if config.cluster.dashboard == "auto" and not backend.capabilities.prometheus:  # prometheus: the scheduler is here
        return False
    return dashboard_address(config, http_host(config, bind_host(config))) is not None


def http_address(config: Config, host: str) -> str:
    """``HOST:PORT`` of the scheduler's HTTP server (health, /metrics), which runs even without a dashboard.

    The dashboard's address when it is on, else ``host`` on ``monitoring.port`` (0: a free port).
    """
    return dashboard_address(config, host) or f"{host}:{config.monitoring.port}"


def _claimed_port(config: Config, address: str) -> tuple[str, str, int] | None:
    """``(key, host, port)`` of the fixed port the scheduler's HTTP server is to bind at ``address``; ``None`` for port 0."""
    host, _, port = address.rpartition(":")
    if not port.isdigit() or int(port) == 0:
        return None
    key = "cluster.dashboard" if isinstance(config.cluster.dashboard, str) and config.cluster.dashboard != "auto" \
        else "monitoring.port"
    return key, host.strip("[]") or "0.0.0.0", int(port)


def require_http_port(config: Config, address: str, scheduler: Any = None) -> None:
    """Refuse a fixed HTTP port (dashboard, ``/metrics``) that is taken: distributed would move to another one.

    Before the cluster starts, the port is tried (as the scheduler's server binds it); with the
    started ``scheduler``, the port it got is compared. A scrape of the configured port must never
    reach another run's metrics, so neither is a warning.

    Raises
    ------
    ConfigError
        On ``cluster.dashboard`` or ``monitoring.port``, naming the port and the fix.
    """
    claim = _claimed_port(config, address)
    if claim is None:
        return
    key, host, port = claim
    if scheduler is not None:
        got = getattr(getattr(scheduler, "http_server", None), "port", port)
        if got == port:
            return
        why = f"was taken while the scheduler started (it moved to port {got})"
    else:
        taken = port_taken(host, port)
        if taken is None:
            return
        why = f"is in use on {host} ({taken})"
    raise ConfigError(f"port {port} for the scheduler's dashboard and /metrics {why}: a scrape of it would reach "
                      "another program", key=key, value=config.get(key), source=config.sources.get(key, "default"),
                      hint=f"stop what uses port {port}, choose another port, or set {key} to 0 for a free one")


def port_taken(host: str, port: int) -> str | None:
    """Why a server cannot listen on ``host:port`` now (the OS's reason), or ``None`` when it can."""
    try:
        family, kind, proto, _, where = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as tornado does: a port in TIME_WAIT is free
            probe.bind(where)
    except OSError as e:
        return str(e.strerror or e)
    return None
