"""Preload target for ``dask cuda worker`` processes that ``openclaw worker`` starts: CuPy's pool as the config says.

A session registers :class:`~openclaw_dask.cluster.plugins.CupyPool` on the workers it starts;
workers of ``openclaw worker`` serve clients openclaw does not control, so the pool is set here,
when each worker starts. ``openclaw.cupy-pool`` (handed over in the worker's dask config) is the
pool's byte limit, or None for no pool (``memory_pooling: false``). With RMM, dask-cuda's own
``--rmm-pool-size`` sets the pool and this preload is not added.
"""

from __future__ import annotations

from typing import Any

SETTING = "openclaw.cupy-pool"


def dask_setup(worker: Any) -> None:
    import dask.config

    from openclaw_dask.cluster.plugins import CupyPool

    CupyPool(dask.config.get(SETTING, None)).setup(worker)
