"""What each MPI rank runs when openclaw launches ``mpirun`` itself (``backend: mpi``).

    mpiexec -n WORKERS+1 python -m openclaw_dask.cluster.mpi_ranks SPEC.json

Rank 0 runs the scheduler and writes its address to the scheduler file; every other
rank runs one worker (dask-mpi's ``execute`` with no client function). The client is
the process that launched ``mpirun``, so a notebook can use the cluster. The ranks
exit when the client shuts the scheduler down.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

__all__ = ["main"]


def main(spec_path: str) -> None:
    """Run this rank's part of the cluster described by the JSON file ``spec_path``."""
    import dask
    import distributed  # noqa: F401  (its defaults must be in dask.config before keys under them are set)
    from dask_mpi import execute

    spec = json.loads(Path(spec_path).read_text())
    for name in ("distributed", "openclaw_dask"):
        logging.getLogger(name).setLevel(spec["log_level"])
    with dask.config.set(spec["dask"]):
        execute(**spec["execute"])


if __name__ == "__main__":
    main(sys.argv[1])
