# expect: stragglers
"""Sixteen delayed calls of the same function; one of them waits a second."""
import time

import dask
import numpy as np


@dask.delayed
def simulate(i):
    if i == 7:
        time.sleep(1.0)
    a = np.arange(200_000.0) + i
    for _ in range(10):
        a = np.sin(a)
    return float(a.sum())


print(sum(dask.compute(*[simulate(i) for i in range(16)])))
