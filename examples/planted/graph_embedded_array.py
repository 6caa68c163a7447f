# expect: outside-tasks on process
"""A 256 MB in-memory array handed to from_array: hashed on the client, and sent inside the graph to worker processes."""
import dask.array as da
import numpy as np

x = da.from_array(np.ones(32_000_000), chunks=4_000_000)  # 8 chunks: far from overhead-bound
print(float(da.sin(x).sum().compute()))
