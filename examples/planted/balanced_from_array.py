# expect: nothing
"""The control for skew_from_array: the same work in uniform chunks."""
import dask.array as da
import numpy as np


def work(block):
    for _ in range(40):
        block = np.sin(block)
    return block


x = da.from_array(np.ones(1_000_000), chunks=62_500)
print(float(x.map_blocks(work).sum().compute()))
