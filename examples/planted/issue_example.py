# expect: data-skew, stragglers, outside-tasks on process, memory-model on process
"""Issue 13's case as a new user wrote it: one chunk 16x the others, one block also waits 1.5 s, a 122 MiB array
in the graph, and a function whose temporaries (block + 1.0, its square root) no chunk shows."""
import time

import dask.array as da
import numpy as np


def work(block, block_info=None):
    if block_info is not None and block_info[0]["chunk-location"][0] == 5:
        time.sleep(1.5)
    for _ in range(4):
        block = np.sqrt(block + 1.0)
    return block


x = da.from_array(np.ones(16_000_000), chunks=((8_000_000,) + (500_000,) * 16,))
y = x.map_blocks(work)
print(float(y.sum().compute()))
