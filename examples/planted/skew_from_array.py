# expect: data-skew
"""The issue's case, smaller: an in-memory array cut into one chunk 16x the others, a map_blocks, a sum."""
import dask.array as da
import numpy as np


def work(block):
    for _ in range(40):
        block = np.sin(block)
    return block


x = da.from_array(np.ones(1_000_000), chunks=((500_000,) + (31_250,) * 16,))
print(float(x.map_blocks(work).sum().compute()))
