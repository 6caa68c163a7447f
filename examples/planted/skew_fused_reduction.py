# expect: data-skew
"""A fused elementwise-then-reduce chain over an array made in tasks, one chunk 8x the others."""
import dask.array as da

x = da.ones(12_000_000, chunks=((4_000_000,) + (500_000,) * 16,))
print(float((da.sin(x) ** 2 + da.cos(x) ** 2).mean().compute()))
