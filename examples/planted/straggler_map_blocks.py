# expect: stragglers
"""Uniform chunks made in tasks; one block of a map_blocks waits a second (a slow read, a lock)."""
import time

import dask.array as da
import numpy as np


def work(block, block_info=None):
    if block_info[0]["chunk-location"][0] == 5:
        time.sleep(1.0)
    for _ in range(10):
        block = np.sin(block)
    return block


x = da.ones(4_000_000, chunks=250_000)
print(float(x.map_blocks(work, dtype=float).sum().compute()))
