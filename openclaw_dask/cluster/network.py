"""Where a local cluster binds, which protocol it speaks, and where its dashboard goes."""

from __future__ import annotations

import importlib.util
import logging
from typing import TYPE_CHECKING

from openclaw_dask.config.checks import is_loopback
from openclaw_dask.errors import ConfigError

if TYPE_CHECKING:
    from openclaw_dask.config import Config

__all__ = ["bind_host", "dashboard_address", "protocol"]

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
    if not is_loopback(address) and not config.cluster.allow_insecure_bind:
        raise ConfigError(
            f"{where}: parallel.network_interface = {iface}: its address {address} is not loopback and TLS is not "
            "available in this build; use lo, or set cluster.allow_insecure_bind=true on a trusted network"
        )
    return address


def protocol(config: Config) -> str:
    """The comm protocol for ``communication``, falling back from UCX to TCP as the guide's nccl -> gloo."""
    comm, backend = config.parallel.communication, config.parallel.backend
    if comm == "auto":
        return "inproc" if backend == "thread" else "tcp"
    if comm in ("ucx", "nccl"):
        if importlib.util.find_spec("distributed_ucxx") is not None:
            return "ucx"
        logger.warning(
            "parallel.communication = %s needs UCX (pip install distributed-ucxx-cu12), which is not installed; "
            "falling back to tcp",
            comm,
        )
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
