# expect: nothing
"""The control for the delayed cases: sixteen equal loads and steps."""
import dask
import numpy as np


@dask.delayed
def load(i):
    return np.full(250_000, float(i))


@dask.delayed
def step(a):
    for _ in range(20):
        a = np.sin(a)
    return float(a.sum())


print(dask.compute(sum(step(load(i)) for i in range(16)))[0])
