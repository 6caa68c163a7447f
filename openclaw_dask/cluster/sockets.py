"""``parallel.socket_buffer_size``: a ``tcp://`` comm backend that sizes SO_SNDBUF and SO_RCVBUF.

:func:`install` puts :class:`SizedTCPBackend` in distributed's comm registry under ``tcp``, so
addresses stay ``tcp://``. Each connection it opens or accepts reads the dask config key
``openclaw.socket-buffer-size`` (bytes; ``None`` = leave the sockets to the OS). Processes that
distributed starts get it from the preload :data:`PRELOAD` (see :mod:`~openclaw_dask.cluster.settings`).

A fixed size also turns off Linux's receive-buffer autotuning for that socket, and the kernel
caps it at ``net.core.rmem_max`` / ``wmem_max``: a shortfall is logged once per process.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import logging
import socket
import ssl
import sys
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import dask.config
from dask.utils import parse_bytes
from distributed.comm.registry import backends
from distributed.comm.tcp import MAX_BUFFER_SIZE, BaseTCPConnector, TCPBackend, TCPConnector, TCPListener
from tornado import netutil
from tornado.iostream import IOStream, StreamClosedError
from tornado.tcpclient import TCPClient
from tornado.tcpserver import TCPServer

__all__ = ["CONFIG_KEY", "PRELOAD", "SizedTCPBackend", "buffer_size", "install", "size_socket"]

logger = logging.getLogger("openclaw_dask.cluster")

CONFIG_KEY = "openclaw.socket-buffer-size"
PRELOAD = "openclaw_dask.cluster.sockets_preload"

_OPTIONS = (("SO_SNDBUF", socket.SO_SNDBUF, "wmem_max"), ("SO_RCVBUF", socket.SO_RCVBUF, "rmem_max"))
_warned: set[tuple[str, int]] = set()


def buffer_size() -> int | None:
    """The asked buffer size in bytes from dask config ``openclaw.socket-buffer-size``, or ``None``."""
    size = dask.config.get(CONFIG_KEY, None)
    if size is None:
        return None
    # a string ("1MiB") is what DASK_OPENCLAW__SOCKET_BUFFER_SIZE gives on a hand-started worker
    return parse_bytes(size) if isinstance(size, str) else int(size)


def size_socket(sock: socket.socket, size: int) -> dict[str, int]:
    """Set SO_SNDBUF and SO_RCVBUF of ``sock`` to ``size`` and return what the kernel granted.

    Parameters
    ----------
    sock
        A TCP socket, best before ``connect()`` / ``listen()``: the window scale is fixed then.
    size
        Bytes asked for each buffer.

    Returns
    -------
    dict
        ``{"SO_SNDBUF": bytes, "SO_RCVBUF": bytes}`` as granted. Linux reports twice the
        granted size (the kernel's bookkeeping share); this is halved back. Less than asked
        (``net.core.*mem_max`` caps it) is logged once per option and size.
    """
    granted = {}
    for name, option, sysctl in _OPTIONS:
        sock.setsockopt(socket.SOL_SOCKET, option, size)
        reported = sock.getsockopt(socket.SOL_SOCKET, option)
        granted[name] = reported // 2 if sys.platform.startswith("linux") else reported
        if granted[name] < size and (name, size) not in _warned:
            _warned.add((name, size))
            logger.warning(
                "parallel.socket_buffer_size = %d: the kernel granted %s = %d bytes (net.core.%s caps it); "
                "raise it (sysctl -w net.core.%s=%d) or ask for less",
                size, name, granted[name], sysctl, sysctl, size,
            )
    return granted


class _SizedTCPClient(TCPClient):
    """tornado's TCPClient, but the socket is sized before ``connect()``.

    TCPClient has no hook between creating a socket and connecting it (only the private
    ``_create_stream``), so with a size set this resolves and connects itself through public
    tornado API: ``Resolver.resolve`` and ``IOStream.connect``, trying the addresses in order
    where TCPClient races them. Without a size it is TCPClient unchanged.
    """

    async def connect(
        self, host: str, port: int, af: socket.AddressFamily = socket.AF_UNSPEC,
        ssl_options: dict[str, Any] | ssl.SSLContext | None = None, max_buffer_size: int | None = None,
        source_ip: str | None = None, source_port: int | None = None, timeout: float | datetime.timedelta | None = None,
    ) -> IOStream:
        size = buffer_size()
        if size is None or ssl_options is not None or (source_ip, source_port, timeout) != (None, None, None):
            return await super().connect(host, port, af, ssl_options, max_buffer_size, source_ip, source_port, timeout)
        error: Exception = StreamClosedError()
        for family, address in await self.resolver.resolve(host, port, af):
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                size_socket(sock, size)
                stream = IOStream(sock, max_buffer_size=max_buffer_size)
            except BaseException:
                sock.close()
                raise
            try:
                return await stream.connect(address)
            except StreamClosedError as e:  # refused or unreachable: try the next address
                error = e
            except BaseException:  # cancelled (distributed's connect timeout): do not leak the socket
                stream.close()
                raise
        raise error


class SizedTCPConnector(TCPConnector):
    """distributed's TCP connector with :class:`_SizedTCPClient` (its resolver is distributed's)."""

    client = _SizedTCPClient(resolver=BaseTCPConnector.client.resolver)


class _Server(TCPServer):
    """A TCPServer that hands each accepted stream to ``handle`` (distributed's listener assigns ``handle_stream``)."""

    def __init__(self, handle: Callable[[IOStream, tuple[Any, ...]], Awaitable[None]], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._handle = handle

    async def handle_stream(self, stream: IOStream, address: tuple[Any, ...]) -> None:
        await self._handle(stream, address)


class SizedTCPListener(TCPListener):
    """distributed's TCP listener whose listening sockets are sized (accepted ones inherit that)."""

    _size: int | None = None

    async def start(self) -> None:
        self._size = buffer_size()
        if self._size is None:
            return await super().start()
        # distributed's own start, with the sockets sized between bind_sockets() and add_sockets()
        self.tcp_server = _Server(self._handle_stream, max_buffer_size=int(MAX_BUFFER_SIZE), **self.server_args)
        backlog = int(dask.config.get("distributed.comm.socket-backlog"))
        for attempt in range(5):
            try:
                sockets = netutil.bind_sockets(self.port, address=self.ip, backlog=backlog)
                break
            except OSError as e:  # an ephemeral port can collide sporadically: distributed retries too
                if self.port != 0 or e.errno != errno.EADDRINUSE or attempt == 4:
                    raise
        for sock in sockets:
            size_socket(sock, self._size)
        self.tcp_server.add_sockets(sockets)
        self.get_host_port()

    async def _prepare_stream(self, stream: IOStream, address: str) -> IOStream:
        # bind_sockets() listens before the sizing above: a connection accepted in that gap kept
        # the default buffers, so size each accepted socket too (same values: nothing changes otherwise)
        if self._size is not None:
            size_socket(stream.socket, self._size)
        return stream


class SizedTCPBackend(TCPBackend):
    """The ``tcp`` backend openclaw installs: :class:`SizedTCPConnector` and :class:`SizedTCPListener`."""

    _connector_class = SizedTCPConnector
    _listener_class = SizedTCPListener


def install() -> None:
    """Register :class:`SizedTCPBackend` as distributed's ``tcp`` backend in this process (idempotent).

    For the scheduler, nanny and worker processes openclaw starts (their preload); a session
    in this process holds it with :func:`installed` instead.
    """
    if not isinstance(backends.get("tcp"), SizedTCPBackend):
        backends["tcp"] = SizedTCPBackend()


@contextlib.contextmanager
def installed() -> Iterator[None]:
    """:func:`install` over the block; distributed's own ``tcp`` backend again after it."""
    before = backends.get("tcp")
    install()
    try:
        yield
    finally:
        if before is None:
            backends.pop("tcp", None)
        else:
            backends["tcp"] = before
