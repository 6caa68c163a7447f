# expect: data-skew
"""Delayed loaders, one returning 16x the data of the others, each followed by a step, then a total."""
import dask
import numpy as np


@dask.delayed
def load(i):
    return np.full(2_000_000 if i == 3 else 125_000, float(i))


@dask.delayed
def step(a):
    for _ in range(20):
        a = np.sin(a)
    return float(a.sum())


print(dask.compute(sum(step(load(i)) for i in range(16)))[0])
