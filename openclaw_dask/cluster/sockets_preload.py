"""Preload target (``distributed.{scheduler,nanny,worker}.preload``): importing it installs the sized TCP backend.

distributed imports preload modules when it creates a scheduler, nanny or worker, before that
server listens; ``dask_setup`` would run only after its listening socket is bound, too late to
size it, so the import itself is the hook. By hand, for a cluster openclaw does not start::

    export DASK_OPENCLAW__SOCKET_BUFFER_SIZE=4MiB
    dask scheduler --preload openclaw_dask.cluster.sockets_preload
    dask worker ADDRESS --preload openclaw_dask.cluster.sockets_preload --preload-nanny openclaw_dask.cluster.sockets_preload
"""

from __future__ import annotations

from openclaw_dask.cluster.sockets import install

install()
