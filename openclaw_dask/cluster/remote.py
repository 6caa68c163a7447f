"""Backend ``remote``: connect to a running ``dask-scheduler`` that the user started."""

from __future__ import annotations

import logging
import ssl
from typing import TYPE_CHECKING, Any

from openclaw_dask.cluster.handle import ClusterHandle
from openclaw_dask.cluster.security import security_for
from openclaw_dask.errors import ClusterStartError

if TYPE_CHECKING:
    from openclaw_dask.config import Config

__all__ = ["start"]

logger = logging.getLogger("openclaw_dask.cluster")


def start(config: Config) -> ClusterHandle:
    """Connect to ``cluster.scheduler_address``; with a number of ``workers``, wait for that many.

    The cluster belongs to the user: closing the session closes only the client.
    """
    from distributed import Client
    from distributed.comm.core import CommClosedError, FatalCommClosedError

    address, timeout = config.cluster.scheduler_address, config.parallel.timeout
    security = security_for(config)
    logger.info("connecting to %s (timeout %ss)", address, timeout)
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
        client = Client(address, timeout=timeout, security=security)
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
    want = config.parallel.workers
    if want != "auto":
        try:
            client.wait_for_workers(want, timeout=timeout)
        except TimeoutError:
            have = len(client.scheduler_info(n_workers=-1)["workers"])
            client.close()
            raise ClusterStartError(
                f"only {have} of {want} workers joined {address} within {timeout:g}s; start more dask-worker "
                "processes, or set parallel.workers=auto to use those present"
            ) from None
    return ClusterHandle(client=client, cluster=None, backend="remote")


def _unanswered(address: str, timeout: float, security: Any) -> str | None:
    """Why ``address`` gave no handshake within ``timeout``, or ``None`` if it did or refused otherwise.

    distributed's ``connect`` awaits the peer's handshake without a deadline, so
    ``Client()`` would wait forever on a port that accepts and stays silent. Closed
    connections (TLS mismatches) return ``None`` and are left to ``Client()``, whose
    errors are mapped in :func:`start`. The probe runs on its own thread and event
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
