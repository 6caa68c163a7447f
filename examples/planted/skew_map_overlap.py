# expect: data-skew
"""map_overlap (a 3-point smoothing along rows, 24 passes) over an array with one row-chunk 8x the others."""
import dask.array as da


def smooth(block):
    for _ in range(24):
        inner = (block[:-2] + block[1:-1] + block[2:]) / 3.0
        block = block.copy()
        block[1:-1] = inner
    return block


x = da.random.random((6_000, 2_000), chunks=((2_000,) + (250,) * 16, 2_000))
print(float(x.map_overlap(smooth, depth={0: 1, 1: 0}, boundary="reflect").sum().compute()))
