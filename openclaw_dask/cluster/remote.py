"""Backend ``remote``: connect to a running ``dask-scheduler`` that the user started."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from openclaw_dask.cluster.handle import ClusterHandle
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

    address, timeout = config.cluster.scheduler_address, config.parallel.timeout
    logger.info("connecting to %s (timeout %ss)", address, timeout)
    try:
        client = Client(address, timeout=timeout)
    except (OSError, TimeoutError) as e:
        raise ClusterStartError(
            f"could not reach a dask-scheduler at {address} within {timeout:g}s ({e.__class__.__name__}); "
            "check that dask-scheduler runs there and the firewall allows it, or raise parallel.timeout"
        ) from None
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
