"""Adaptive scaling (``elastic.adaptive``) on distributed's :class:`~distributed.deploy.Adaptive`."""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

from dask.system import CPU_COUNT
from distributed.deploy.adaptive import Adaptive

if TYPE_CHECKING:
    from openclaw_dask.config import Config

__all__ = ["LoggedAdaptive", "adapt"]

logger = logging.getLogger("openclaw_dask.cluster.adaptive")


class LoggedAdaptive(Adaptive):
    """Adaptive that logs every scaling decision with its reason."""

    async def recommendations(self, target: int) -> dict[str, Any]:
        rec = await super().recommendations(target)
        status = rec.get("status")
        if status == "up":
            logger.info("adaptive: up to %d workers (the scheduler wants %d for its queued work)", rec["n"], target)
        elif status == "down":
            logger.info("adaptive: retiring %d idle worker(s) (the scheduler wants %d; their data moves first)",
                        len(rec.get("workers", [])), target)
        return rec


def adapt(cluster: Any, config: Config) -> Any:
    """Turn on adaptive scaling; ``cooldown`` becomes the number of intervals a downscale must persist."""
    e = config.elastic
    maximum = CPU_COUNT if e.max_workers == "auto" else e.max_workers
    wait_count = max(1, math.ceil(e.cooldown / e.interval))
    logger.info("adaptive scaling %d..%d workers, every %gs, downscale after %d steady checks", e.min_workers, maximum, e.interval, wait_count)
    return cluster.adapt(Adaptive=LoggedAdaptive, minimum=e.min_workers, maximum=maximum, interval=f"{e.interval}s", wait_count=wait_count)
