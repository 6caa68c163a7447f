"""Checks that span several keys and hold whatever the backend.

Rules that depend on what a backend can do live in that backend's ``check``
(``openclaw_dask.cluster``), each rule in one place.
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING

from openclaw_dask.config.schema import SOCKET_BUFFER_RANGE
from openclaw_dask.errors import ConfigError

if TYPE_CHECKING:
    from openclaw_dask.config.model import Config

__all__ = ["SOCKET_BUFFER_RANGE", "check", "check_bind", "is_loopback"]


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IPs (no name is resolved: that could leave the machine)."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(config: Config, key: str, address: str) -> None:
    """The one loopback rule: binding ``address`` (from ``key``) off loopback needs TLS or ``allow_insecure_bind``.

    Called here for ``cluster.host`` and by the cluster layer for the address of
    ``parallel.network_interface``, which only a running machine can resolve.
    """
    if is_loopback(address) or config.cluster.allow_insecure_bind or config.security.enabled:
        return
    what = "binding a non-loopback address" if address == config.get(key) else f"its address {address} is not loopback, and binding it"
    raise ConfigError.at(config, key, f"{what} without TLS lets anyone who reaches it run code",
                         hint="use 127.0.0.1 (or lo), set up TLS in the security section (security.ca_file and cert_file), "
                              "or set cluster.allow_insecure_bind=true on a trusted network")


def check(config: Config) -> None:
    """Raise :class:`ConfigError` for the first backend-independent combination that cannot run."""
    _check_security(config)
    _check_socket_buffers(config)
    _check_elastic(config)
    _check_binds(config)


def _check_security(config: Config) -> None:
    """TLS needs a whole certificate set, and then every comm is TLS (see cluster/security.py)."""
    p, s = config.parallel, config.security
    files = [k for k in ("ca_file", "cert_file", "key_file") if config.get(f"security.{k}") is not None]
    mutual = "TLS in dask is mutual"
    if s.temporary_certificates and files:
        raise ConfigError.at(config, f"security.{files[0]}", "security.temporary_certificates makes its own certificates",
                             hint="set either it or the files, not both")
    if files and "cert_file" not in files:
        raise ConfigError.at(config, f"security.{files[0]}", f"{mutual}: this process needs its own certificate too",
                             hint="set security.cert_file")
    if s.cert_file is not None and s.ca_file is None:
        raise ConfigError.at(config, "security.cert_file",
                             f"{mutual}: set security.ca_file to the authority that signed the other side's certificate")
    needs = "set security.temporary_certificates=true or security.cert_file and ca_file"
    if not s.enabled:
        if s.require_encryption:
            raise ConfigError.at(config, "security.require_encryption", "needs certificates", hint=needs)
        if p.communication == "tls":
            raise ConfigError.at(config, "parallel.communication", "TLS needs certificates", hint=needs)
        return
    if p.communication not in ("auto", "tls"):
        # Asked-for plain comms and certificates contradict each other: refuse rather than pick one.
        which = "security.temporary_certificates" if s.temporary_certificates else "security.cert_file"
        raise ConfigError.at(config, "parallel.communication", f"{p.communication} is not encrypted but {which} is set",
                             hint="use auto or tls, or remove the security keys")


def _check_socket_buffers(config: Config) -> None:
    """Socket buffers size TCP comms: a range, and no TLS or UCX (backends add their own rules)."""
    p, key = config.parallel, "parallel.socket_buffer_size"
    if p.socket_buffer_size is None:  # the OS default: nothing to check
        return
    low, high = SOCKET_BUFFER_RANGE
    if not low <= p.socket_buffer_size <= high:
        raise ConfigError.at(config, key, "use 4KiB to 256MiB, or null for the OS default")
    if config.security.enabled:
        raise ConfigError.at(config, key, "sized sockets are built for tcp:// comms, not TLS (the security section is set)",
                             hint="remove this key or the security keys")
    if p.communication in ("ucx", "nccl"):
        raise ConfigError.at(config, key, f"applies to TCP sockets, not {p.communication} (UCX)",
                             hint="use parallel.communication=tcp, or remove this key")


def _check_elastic(config: Config) -> None:
    e, m, c = config.elastic, config.monitoring, config.cluster
    if e.adaptive:
        if e.max_workers != "auto" and e.max_workers < e.min_workers:
            raise ConfigError.at(config, "elastic.max_workers", f"below elastic.min_workers = {e.min_workers}")
    else:
        for key, default in (("elastic.min_workers", 1), ("elastic.max_workers", "auto"), ("elastic.interval", 1.0)):
            if config.get(key) != default:
                raise ConfigError.at(config, key, "used only with elastic.adaptive: true", hint="set that too, or remove this key")
    if m.port and isinstance(c.dashboard, str) and c.dashboard != "auto":
        raise ConfigError.at(config, "monitoring.port", f"cluster.dashboard = {c.dashboard} already sets the HTTP server's address",
                             hint="set only one")


def _check_binds(config: Config) -> None:
    c = config.cluster
    if ":" in c.host:
        raise ConfigError.at(config, "cluster.host", "IPv6 binds are not supported in this build", hint="use 127.0.0.1")
    check_bind(config, "cluster.host", c.host)
    dash_host = c.dashboard.rpartition(":")[0] if isinstance(c.dashboard, str) and c.dashboard != "auto" else ""
    if dash_host and not is_loopback(dash_host) and not c.allow_insecure_bind:
        # TLS does not cover HTTP: a dashboard off loopback needs the explicit flag even with TLS.
        raise ConfigError.at(config, "cluster.dashboard", "a dashboard on a non-loopback address is reachable by others",
                             hint="use a port only, or set cluster.allow_insecure_bind=true")
