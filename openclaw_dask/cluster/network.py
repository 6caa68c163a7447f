"""Where a local cluster binds, which protocol it speaks, and where its dashboard goes."""

from __future__ import annotations

import importlib.util
import logging
from typing import TYPE_CHECKING

from openclaw_dask.config.checks import is_loopback
from openclaw_dask.errors import ConfigError

if TYPE_CHECKING:
    from openclaw_dask.config import Config

__all__ = ["bind_host", "dashboard_address", "http_address", "http_host", "interface_of", "protocol"]

logger = logging.getLogger("openclaw_dask.cluster")


def bind_host(config: Config) -> str:
    """The IP the scheduler and workers bind: ``network_interface``'s address, else ``cluster.host``."""
    iface = config.parallel.network_interface
    if iface is None:
        return config.cluster.host
    import psutil
    from distributed.utils import get_ip_interface

    where = config.sources.get("parallel.network_interface", "default")
    try:
        address = get_ip_interface(iface)
    except ValueError:
        names = ", ".join(sorted(psutil.net_if_addrs()))
        raise ConfigError(f"{where}: parallel.network_interface = {iface}: no such interface with an IPv4 address; this machine has: {names}") from None
    if not is_loopback(address) and not config.cluster.allow_insecure_bind and not config.security.enabled:
        raise ConfigError(
            f"{where}: parallel.network_interface = {iface}: its address {address} is not loopback and no TLS is set up; "
            "use lo, set security.ca_file and cert_file (TLS), or set cluster.allow_insecure_bind=true on a trusted network"
        )
    return address


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
    raise ConfigError(f"cluster.host = {address}: no network interface of this machine has that address; use 127.0.0.1 or set parallel.network_interface")


def protocol(config: Config) -> str:
    """The comm protocol for ``communication``, falling back from UCX to TCP as the guide's nccl -> gloo."""
    comm, backend = config.parallel.communication, config.parallel.backend
    if comm == "auto":
        if config.security.enabled:  # inproc has no TLS: the thread backend uses tls over loopback
            return "tls"
        return "inproc" if backend == "thread" else "tcp"
    if comm in ("ucx", "nccl"):
        if importlib.util.find_spec("distributed_ucxx") is not None:
            return "ucx"
        why = f"parallel.communication = {comm} needs UCX (pip install distributed-ucxx-cu12), which is not installed"
        if config.parallel.communication_strict:
            from openclaw_dask.errors import BackendUnavailable

            raise BackendUnavailable(f"{why}, and parallel.communication_strict is true; install it, or set communication_strict: false to fall back to tcp")
        logger.warning("%s; chose tcp instead (set parallel.communication_strict: true to make this an error)", why)
        return "tcp"
    return "tcp" if comm == "gloo" else comm


def dashboard_address(config: Config, host: str) -> str | None:
    """``HOST:PORT`` for the dashboard, or ``None`` when it is off."""
    dash = config.cluster.dashboard
    if dash is False:
        return None
    if dash is True:
        return f"{host}:{config.monitoring.port}"
    address, _, port = dash.rpartition(":")
    return f"{address or host}:{port}"


def http_address(config: Config, host: str) -> str:
    """``HOST:PORT`` of the scheduler's HTTP server (health, /metrics), which runs even without a dashboard.

    The dashboard's address when it is on, else ``host`` on ``monitoring.port`` (0: a free port).
    """
    return dashboard_address(config, host) or f"{host}:{config.monitoring.port}"
