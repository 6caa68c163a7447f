"""What moving a block from one worker process to another costs: over loopback TCP, and read out of the holder.

A process session of 2 workers. Each round makes a fresh block on worker A (not timed), then times
its sum on worker B (the block moves) and on A (it does not); the difference is the move. Rounds
alternate TCP (the workers told not to read each other) and the read
(:mod:`openclaw_dask.cluster.peer_reads`), so the machine's drift is shared. Medians of ``--repeat``.

    python benchmarks/worker_transfer.py --repeat 9
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import openclaw_dask
from openclaw_dask.cluster import peer_reads

SIZES_MIB = (8, 32, 128)


def _summed_on(client: object, block: object, worker: str) -> float:
    t0 = time.perf_counter()
    client.submit(np.sum, block, workers=[worker], pure=False).result()  # type: ignore[attr-defined]
    return time.perf_counter() - t0


def _move_s(client: object, a: str, b: str, nbytes: int) -> float:
    """One block made on ``a``: its sum on ``b`` less its sum on ``a`` (seconds)."""
    block = client.submit(np.ones, nbytes // 8, workers=[a], pure=False)  # type: ignore[attr-defined]
    block.result()
    here = _summed_on(client, block, a)
    moved = _summed_on(client, block, b)
    del block
    return moved - here


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    with openclaw_dask.session(backend="process", workers=2) as s:
        client = s.client
        asking = all(client.run(lambda: peer_reads.distributed.worker.get_data_from_worker is peer_reads._asking).values())
        print(f"the workers read each other's memory: {asking}")
        a, b = sorted(client.scheduler_info()["workers"])
        for mib in SIZES_MIB:
            times: dict[str, list[float]] = {"tcp": [], "read": []}
            for _ in range(args.repeat + 1):  # the first round warms both ways up: not counted
                for way, taken in times.items():
                    client.run(peer_reads._ask, way == "read" and asking)
                    taken.append(_move_s(client, a, b, mib * 2**20))
            cells = "  ".join(f"{way}: +{statistics.median(t[1:]) * 1e3:.1f} ms "
                              f"({mib / 1024 / max(statistics.median(t[1:]), 1e-9):.2f} GiB/s)" for way, t in times.items())
            print(f"{mib:4d} MiB  {cells}", flush=True)
        client.run(peer_reads._ask, asking)


if __name__ == "__main__":
    main()
