"""Backend ``remote``: connect to a running ``dask-scheduler`` that the user started."""

from __future__ import annotations

import logging
import ssl
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from openclaw_dask.cluster.base import Backend, Capabilities
from openclaw_dask.cluster.client import DistributedCluster, lost_scheduler, new_client
from openclaw_dask.cluster.running import RunningCluster
from openclaw_dask.cluster.security import security_for
from openclaw_dask.errors import ClusterStartError, ConfigError

if TYPE_CHECKING:
    from openclaw_dask.config import Config

__all__ = ["RemoteBackend"]

logger = logging.getLogger("openclaw_dask.cluster")

# Keys whose value is set where the user started the scheduler and workers, at their defaults.
_THEIRS = (("cluster.memory_limit", "auto"), ("cluster.host", "127.0.0.1"), ("cluster.dashboard", "auto"),
           ("parallel.network_interface", None), ("fault_tolerance.allowed_failures", 3), ("cluster.preload", ()),
           ("cluster.max_spill", "auto"), ("cluster.local_directory", "auto"))  # openclaw worker passes these two on


class RemoteBackend(Backend):
    """``remote``: a client of a ``dask scheduler`` the user runs; the cluster stays theirs."""

    name = "remote"
    capabilities = Capabilities(owns_cluster=False, tls=True)
    why_not = MappingProxyType({
        "resize": "belongs to whoever started dask scheduler and dask worker (start or stop workers there)",
        "prometheus": "the remote scheduler serves its own /metrics (install prometheus-client where it runs); remove this here",
        "socket_buffers": "the remote scheduler and workers are yours: start them with DASK_OPENCLAW__SOCKET_BUFFER_SIZE set and "
                          "--preload (and --preload-nanny) openclaw_dask.cluster.sockets_preload, and remove this key",
    })

    def check(self, config: Config) -> None:
        """Only the address, workers to wait for, timeout, TLS files and logging apply to someone else's cluster."""
        super().check(config)
        p, address = config.parallel, _address(config)
        scheme, sep, rest = address.partition("://")
        host, _, port = (rest if sep else scheme).rpartition(":")
        if not sep or scheme not in ("tcp", "tls", "ucx", "inproc") or not host or not port.isdigit():
            raise ConfigError.at(config, "cluster.scheduler_address", "expected PROTOCOL://HOST:PORT",
                                 hint="e.g. tcp://127.0.0.1:8786 (as dask scheduler prints it)")
        if p.communication not in ("auto", scheme):
            raise ConfigError.at(config, "parallel.communication", f"the scheduler address {address} sets the protocol",
                                 hint="use auto")
        self._check_tls(config, scheme, rest)
        for key, default in _THEIRS:
            if config.get(key) != default:
                raise ConfigError.at(config, key, "set by whoever started the remote scheduler and workers "
                                     "(dask scheduler / dask worker options)", hint="remove it here")

    @staticmethod
    def _check_tls(config: Config, scheme: str, rest: str) -> None:
        s, key = config.security, "cluster.scheduler_address"
        if s.temporary_certificates:
            raise ConfigError.at(config, "security.temporary_certificates", "a remote scheduler cannot trust certificates made by "
                                 "this process", hint="set security.ca_file, cert_file and key_file")
        if scheme == "tls" and not s.enabled:
            raise ConfigError.at(config, key, "a TLS scheduler needs certificates", hint="set security.ca_file, cert_file and key_file")
        if scheme != "tls" and s.enabled:
            raise ConfigError.at(config, key, f"not TLS, but certificates are set; write it as tls://{rest} "
                                 "(the scheduler runs with --protocol tls)", hint="or remove the security keys")

    def plan(self, config: Config) -> dict[str, Any]:
        """Where the client connects, and how many workers it waits for."""
        workers = config.parallel.workers
        return {"address": config.cluster.scheduler_address, "timeout": config.parallel.timeout,
                "wait_for_workers": None if workers == "auto" else workers, "tls": config.security.enabled}

    def start(self, config: Config) -> RunningCluster:
        """Connect to ``cluster.scheduler_address``; with a number of ``workers``, wait for that many.

        The cluster belongs to the user: closing the session closes only the client.
        """
        address, timeout, want = _address(config), config.parallel.timeout, config.parallel.workers
        logger.info("connecting to %s (timeout %ss)", address, timeout)
        client = _connect(address, timeout, security_for(config))
        running = DistributedCluster(self, config, client)  # its watch sees the scheduler stop while we wait
        if want != "auto":
            try:
                client.wait_for_workers(want, timeout=timeout)
            except TimeoutError:
                have = len(client.scheduler_info(n_workers=-1)["workers"])
                running.close()
                raise ClusterStartError(
                    f"only {have} of {want} workers joined {address} within {timeout:g}s; start more dask-worker "
                    "processes, or set parallel.workers=auto to use those present"
                ) from None
            except BaseException as e:
                lost = running.lost(0)
                if lost is None and _comm_closed(e):  # the scheduler went before the client's own watch noticed
                    lost = lost_scheduler(address, "its connection closed")
                running.close()
                if lost is None or not isinstance(e, Exception):
                    raise
                raise ClusterStartError(f"while waiting for {want} worker(s) to join: {lost}") from None
        return running

    def worker_plugins(self, config: Config) -> list[Any]:
        """Also ``fusion_buffer_size`` on workers openclaw did not start (they read it from no config of ours)."""
        from openclaw_dask.cluster.plugins import TransferBuffer

        buffer = config.parallel.fusion_buffer_size
        return [*super().worker_plugins(config), *([TransferBuffer(buffer)] if buffer is not None else [])]


def _address(config: Config) -> str:
    """``cluster.scheduler_address``, which backend remote cannot do without."""
    if not config.cluster.scheduler_address:
        raise ConfigError.at(config, "cluster.scheduler_address", "backend remote needs the address of a running dask-scheduler",
                             hint="e.g. tcp://127.0.0.1:8786")
    return config.cluster.scheduler_address


def _connect(address: str, timeout: float, security: Any) -> Any:
    """A client of the scheduler at ``address``, or one :class:`ClusterStartError` that says why not."""
    from distributed.comm.core import CommClosedError, FatalCommClosedError

    tls_failed = (
        f"TLS handshake with the dask-scheduler at {address} failed ({{}}); the scheduler must run with TLS, "
        "security.ca_file must have signed its certificate, and its CA must have signed security.cert_file"
    )
    unreachable = (
        f"could not reach a dask-scheduler at {address} within {timeout:g}s ({{}}); "
        "check that dask-scheduler runs there and the firewall allows it, or raise parallel.timeout"
    )
    why = _unanswered(address, timeout, security)
    if why is not None:
        raise ClusterStartError(unreachable.format(why))
    try:
        return new_client(address, timeout=timeout, security=security)
    except FatalCommClosedError as e:  # the TLS handshake itself failed
        raise ClusterStartError(tls_failed.format(_tls_reason(e))) from None
    except ValueError as e:
        # A plain scheduler that speaks first makes tornado refuse to start TLS on the stream (measured).
        if not address.startswith("tls://") or "SSL" not in str(e):
            raise
        raise ClusterStartError(tls_failed.format("it answered in plain text before the TLS handshake")) from None
    except CommClosedError as e:
        # A TLS listener drops a plain handshake at once (measured: connection reset, no retry).
        scheme, _, rest = address.partition("://")
        fix = ("its log says why" if scheme == "tls" else
               f"if it runs with TLS, write the address as tls://{rest} and set security.ca_file, cert_file and key_file")
        raise ClusterStartError(
            f"the dask-scheduler at {address} closed the connection during the handshake ({_tls_reason(e)}); {fix}"
        ) from None
    except (OSError, TimeoutError) as e:
        raise ClusterStartError(unreachable.format(e.__class__.__name__)) from None


def _comm_closed(e: BaseException) -> bool:
    """``e`` is the scheduler's comm closing under a call (distributed's CommClosedError)."""
    from distributed.comm.core import CommClosedError

    return isinstance(e, CommClosedError)


def _unanswered(address: str, timeout: float, security: Any) -> str | None:
    """Why ``address`` gave no handshake within ``timeout``, or ``None`` if it did or refused otherwise.

    distributed's ``connect`` awaits the peer's handshake without a deadline, so
    ``Client()`` would wait forever on a port that accepts and stays silent. Closed
    connections (TLS mismatches) return ``None`` and are left to ``Client()``, whose
    errors are mapped in :func:`_connect`. The probe runs on its own thread and event
    loop, so it works inside a notebook's running loop too.
    """
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from distributed.comm import CommClosedError, connect

    args = security.get_connection_args("client") if security is not None else {}

    async def probe() -> None:
        comm = await asyncio.wait_for(connect(address, timeout=timeout, **args), timeout)
        await comm.close()

    with ThreadPoolExecutor(1, thread_name_prefix="openclaw-probe") as pool:
        try:
            pool.submit(asyncio.run, probe()).result()
        except asyncio.TimeoutError:
            return "it accepted the connection but never answered"
        except CommClosedError:
            return None
        except OSError as e:  # distributed retried until the timeout
            return type(e.__cause__ or e).__name__
        except Exception:  # noqa: BLE001  (any other failure: Client() reports it precisely)
            return None
    return None


def _tls_reason(error: BaseException) -> str:
    """The short reason an SSL or comm error gives (``CERTIFICATE_VERIFY_FAILED``, ``connection reset``)."""
    cause = error.__cause__
    if isinstance(cause, ssl.SSLCertVerificationError):
        return f"certificate verify failed: {cause.verify_message}"
    if isinstance(cause, ssl.SSLError):
        return cause.reason or type(cause).__name__
    return str(error).rpartition(": ")[2] or type(error).__name__
