# expect: outside-tasks
"""One small compute per step of a client-side loop that does its own work between them."""
import time

import dask.array as da

x = da.ones(4_000_000, chunks=1_000_000)
total = 0.0
for step in range(8):
    total += float(da.sin(x * step).sum().compute())
    time.sleep(0.15)  # the client's own work between computes
print(total)
